"""Working in the cpu image on the real engine: `envbuild run`, its non-root user, arbitrary uids with group 0,
one cache that keeps compiled kernels between runs, exit codes and signals, and nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import testbed
from support.constants import MATRIX

from envbuild.smoke import leftover_containers

pytestmark = pytest.mark.docker


def run(cpu_image, *args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(["envbuild", "run", "--backend", "cpu", "--matrix", str(MATRIX), *cpu_image.overrides, *args],
                          capture_output=True, text=True, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_the_default_user_is_not_root(cpu_image, docker_client):
    _, out, _ = testbed.docker_run(docker_client, cpu_image.tag, ["sh", "-c", "id -u; id -g; id -un; echo $HOME; pwd"])
    uid, gid, name, home, cwd = out.decode().split()
    assert (uid, gid, name, home, cwd) == ("1000", "0", "envbuild", "/home/envbuild", "/workspace")
    config = docker_client.images.get(cpu_image.tag).attrs["Config"]
    assert config["User"] == "1000:0" and "/cache" in config["Volumes"]


def test_the_probe_passes_as_any_uid_with_group_0_and_caches_under_the_cache_root(cpu_image, docker_client, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)  # a folder anyone may write, as a mounted volume would be
    _, out, _ = testbed.docker_run(docker_client, cpu_image.tag, ["envbuild-probe"], user="654321:0",
                                   environment={"HF_HUB_OFFLINE": "1", "ENVBUILD_ARBITRARY_UID": "1"},
                                   volumes=[f"{cache}:/cache"])
    doc = json.loads(out)
    assert doc["ok"] is True, [c for c in doc["checks"] if not c["ok"]]
    assert {c["name"] for c in doc["checks"]} >= {"load", "compile", "arbitrary_uid"}
    assert doc["checks"][-1]["message"].startswith("every check ran as uid 654321, group 0; writable: HOME /home/envbuild")
    assert list((cache / "huggingface" / "envbuild-probe").glob("llama-tiny-*/config.json"))
    assert any((cache / "torchinductor").iterdir())


def test_the_probe_passes_read_only_as_any_uid_and_gid(cpu_image, docker_client, tmp_path):
    """As Apptainer and clusters run an image: a read-only root, uid:gid 4242:4242 (not group 0), HOME not the image's.
    /cache cannot be written: the entrypoint moves the caches to $HOME/.cache and says so once; every check passes."""
    status, out, err = testbed.docker_run(
        docker_client, cpu_image.tag, ["envbuild-probe"], user="4242:4242", read_only=True,
        tmpfs={"/tmp": "rw,exec,mode=1777"}, environment={"HOME": "/tmp", "HF_HUB_OFFLINE": "1",
                                                          "ENVBUILD_ARBITRARY_UID": "1"})
    doc = json.loads(out)
    assert status == 0 and doc["ok"] is True, [c for c in doc["checks"] if not c["ok"]]
    assert {c["name"] for c in doc["checks"]} >= {"load", "compile", "arbitrary_uid"}
    said = next(c for c in doc["checks"] if c["name"] == "arbitrary_uid")["message"]
    assert said.startswith("every check ran as uid 4242, gid 4242 (not group 0); caches writable: XDG_CACHE_HOME /tmp/.cache")
    notes = [ln for ln in err.decode().splitlines() if "cannot be written" in ln]
    assert len(notes) == 1 and "caches moved to /tmp/.cache" in notes[0] and "mount a writable volume at /cache" in notes[0]
    # A writable volume at /cache keeps them there, and nothing is said
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)  # a folder anyone may write, as a mounted volume would be
    status, out, err = testbed.docker_run(
        docker_client, cpu_image.tag, ["sh", "-c", "echo $HF_HOME"], user="4242:4242", read_only=True,
        tmpfs={"/tmp": ""}, environment={"HOME": "/tmp"}, volumes=[f"{cache}:/cache"])
    assert status == 0 and out.decode().strip() == "/cache/huggingface" and b"cannot be written" not in err


def test_the_exit_status_is_the_command_s(cpu_image, tmp_path, no_leftover_containers):
    proc = run(cpu_image, "--", "sh", "-c", "echo out; echo err >&2; exit 7", cwd=tmp_path)
    assert proc.returncode == 7 and proc.stdout == "out\n" and "err" in proc.stderr


def test_the_work_folder_is_the_current_one_and_what_is_written_there_is_yours(cpu_image, tmp_path, no_leftover_containers):
    (tmp_path / "data.txt").write_text("hello\n")
    proc = run(cpu_image, "--", "sh", "-c", "cat data.txt && touch made-here && id -u", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["hello", str(os.getuid())]
    assert (tmp_path / "made-here").stat().st_uid == os.getuid()


def test_one_cache_keeps_compiled_kernels_between_runs(cpu_image, tmp_path, no_leftover_containers):
    code = ("import os, time, torch; d = os.environ['TORCHINDUCTOR_CACHE_DIR']; before = len(os.listdir(d)) if os.path.isdir(d) else 0; "
            "start = time.time(); f = torch.compile(lambda x: torch.sin(x) + 1); f(torch.ones(8)); "
            "print(before, round(time.time() - start, 1))")
    first = run(cpu_image, "--cache", "./cache", "--", "python", "-c", code, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = run(cpu_image, "--cache", "./cache", "--", "python", "-c", code, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    (before_first, _), (before_second, _) = (first.stdout.split(), second.stdout.split())
    assert before_first == "0" and int(before_second) > 0  # the second run found what the first compiled
    assert any((tmp_path / "cache" / "torchinductor").iterdir())


def test_sigterm_stops_the_command_and_removes_the_container(cpu_image, engine, tmp_path, no_leftover_containers):
    proc = subprocess.Popen(["envbuild", "run", "--backend", "cpu", "--matrix", str(MATRIX), *cpu_image.overrides,
                             "--", "sleep", "300"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 60
    while not leftover_containers(engine) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftover_containers(engine), "the container never started"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143  # the command's own status: it was terminated
    deadline = time.monotonic() + 30
    while leftover_containers(engine) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftover_containers(engine)


def test_a_secret_passed_by_name_reaches_the_command_and_no_output(cpu_image, tmp_path, no_leftover_containers, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_n0t-pr1nted")
    proc = subprocess.run(["envbuild", "run", "--backend", "cpu", "--matrix", str(MATRIX), *cpu_image.overrides,
                           "-e", "HF_TOKEN", "--", "sh", "-c", 'test "$HF_TOKEN" = hf_n0t-pr1nted && echo ok'],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    dry = subprocess.run(["envbuild", "run", "--dry-run", "--backend", "cpu", "--matrix", str(MATRIX), "-e", "HF_TOKEN"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert "hf_n0t-pr1nted" not in dry.stdout + dry.stderr and "-e HF_TOKEN" in dry.stdout
