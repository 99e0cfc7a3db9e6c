"""Runs that do not touch each other on one engine: smokes at once all pass, and a run removes only what a gone
run left behind, never a live run's container."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.constants import MATRIX

pytestmark = pytest.mark.docker
RUNS = 4


def test_four_smokes_of_one_image_at_once_all_pass(cpu_image, tmp_path, no_leftover_containers):
    procs = [subprocess.Popen(["envbuild", "smoke", "--backend", "cpu", "--matrix", str(MATRIX), *cpu_image.overrides,
                               "--json-file", str(tmp_path / f"smoke-{i}.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(RUNS)]
    outputs = [p.communicate(timeout=1500)[0] for p in procs]
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out
        assert "removed a stopped envbuild container" not in out, out
    for i in range(RUNS):
        doc = json.loads((tmp_path / f"smoke-{i}.json").read_text())
        assert doc["ok"] is True and all(c["ok"] for c in doc["checks"])


def test_clean_removes_a_gone_run_s_container_and_keeps_a_live_one_s(cpu_image, docker_client, tmp_path):
    from envbuild.engine.owner import CHECKOUT_LABEL, OWNED_LABEL, OWNER_LABEL, Owner, checkout, me

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        from envbuild.engine.owner import _start_time

        here = me()
        owners = {"gone": Owner(here.host, here.boot, int(gone.stdout), "1"),
                  "live": Owner(here.host, here.boot, live.pid, _start_time(live.pid))}
        made = {}
        for what, who in owners.items():  # created, never started: as a smoke's container between create and start
            c = docker_client.api.create_container(cpu_image.tag, command=["true"], name=f"envbuild-test-{what}-{live.pid}",
                                                   labels={OWNED_LABEL: "1", OWNER_LABEL: str(who),
                                                           CHECKOUT_LABEL: checkout()})  # clean's default scope: here
            made[what] = c["Id"]
        try:
            proc = subprocess.run(["envbuild", "clean", "--containers-only", "--json"], capture_output=True, text=True,
                                  timeout=120)
            assert proc.returncode == 0, proc.stderr
            removed = json.loads(proc.stdout)["containers"]
            assert f"envbuild-test-gone-{live.pid}" in removed and f"envbuild-test-live-{live.pid}" not in removed
            names = {c["Names"][0].lstrip("/") for c in docker_client.api.containers(all=True)}
            assert f"envbuild-test-live-{live.pid}" in names and f"envbuild-test-gone-{live.pid}" not in names
        finally:
            for cid in made.values():
                try:
                    docker_client.api.remove_container(cid, force=True)
                except Exception:
                    pass
    finally:
        live.kill()
        live.wait()
