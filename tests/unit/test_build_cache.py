"""Issue 26 in pure logic: which cache mounts are envbuild's, and which build errors name the way out."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.fakes import FakeEngine
from test_render import RENDERED, runs

from envbuild.workspace import clean
from envbuild.image import builder
from envbuild.render import UV_STEP as SCRIPT

UV_STEP = ('cached mount /root/.cache/uv from exec /bin/sh -c if [ -s /run/secrets/ca_bundle ]; then export '
           'SSL_CERT_FILE=/run/secrets/ca_bundle; fi && c="/root/.cache/uv/${ENVBUILD_CACHE_ID:-envbuild}" && '
           'export UV_CACHE_DIR="$c/$g" && /run/uv/uv pip install --python /opt/venv/bin/python -r /run/layer.txt')
OLD_UV_STEP = "cached mount /root/.cache/uv from exec /bin/sh -c export UV_LINK_MODE=copy && /run/uv/uv pip install -r /run/layer.txt"
PIP_STEP = ('cached mount /root/.cache/pip from exec /bin/sh -c export PIP_CACHE_DIR="/root/.cache/pip/${ENVBUILD_CACHE_ID:-envbuild}" '
            '&& /opt/venv/bin/pip install --find-links /run/wheelhouse --target /opt/uv "uv==0.13.8"')
FOREIGN = [
    "cached mount /root/.cache/uv from exec /bin/sh -c uv pip install -r requirements.txt",  # someone's own uv
    "cached mount /root/.cache/pip from exec /bin/sh -c pip install flask",
    "cached mount /var/cache/apt from exec /bin/sh -c apt-get update && apt-get install -y g++",
    "cached mount /go/pkg/mod from exec /bin/sh -c /run/uv/uv pip install x",  # envbuild's words, another target
]


def engine_with(*descriptions: str, in_use: int | None = None) -> FakeEngine:
    e = FakeEngine()
    e.cache_mounts = [{"ID": f"id{i:02d}xxxxxxxxxxxx", "Type": "exec.cachemount", "Description": d, "Size": 100 + i,
                       "InUse": i == in_use} for i, d in enumerate(descriptions)]
    return e


def test_only_envbuild_s_uv_and_pip_cache_mounts_are_its_own():
    e = engine_with(UV_STEP, OLD_UV_STEP, PIP_STEP, *FOREIGN)
    assert [r["Description"] for r in clean.own_build_caches(e)] == [UV_STEP, OLD_UV_STEP, PIP_STEP]


def test_clean_build_cache_removes_them_keeps_a_live_one_and_everyone_else_s():
    e = engine_with(UV_STEP, PIP_STEP, OLD_UV_STEP, *FOREIGN, in_use=2)
    done = clean.clean(e, images=False, build_cache=True)
    assert [r["Description"] for r in e.cache_mounts] == [OLD_UV_STEP, *FOREIGN]  # the live one and the foreign stay
    assert len(done.build_caches) == 2 and done.freed == 100 + 101
    assert any("a build is using it now" in k for k in done.kept)


def test_plain_clean_leaves_build_caches_alone():
    e = engine_with(UV_STEP, PIP_STEP)
    done = clean.clean(e, images=True)
    assert len(e.cache_mounts) == 2 and done.build_caches == []


def test_clean_build_cache_on_the_command_line(invoke, monkeypatch):
    e = engine_with(UV_STEP, *FOREIGN)
    monkeypatch.setattr("envbuild.cli.options.engine", lambda *a, **k: e)
    result = invoke("clean", "--build-cache", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["build_caches"]) == 1 and doc["freed_bytes"] == 100
    text = invoke("clean", "--build-cache")
    assert "nothing to clean" in text.stdout  # the second time there is nothing of envbuild's left


def test_a_long_clean_says_it_is_still_going(invoke, monkeypatch):
    """Pruning gigabytes of build cache takes the engine a while: stderr says so (stdout keeps the list)."""
    import threading

    from envbuild.core import heartbeat

    monkeypatch.setattr(heartbeat, "PERIOD", 0.01)
    monkeypatch.setattr(heartbeat, "QUIET", 0.0)
    said = threading.Event()
    tick = heartbeat.Waiting.tick

    def ticked(self):
        tick(self)
        said.set()

    monkeypatch.setattr(heartbeat.Waiting, "tick", ticked)

    class Slow(FakeEngine):
        def prune_build_cache(self, ident):
            assert said.wait(30)  # done only once the wait was said
            return super().prune_build_cache(ident)

    e = Slow()
    e.cache_mounts = engine_with(UV_STEP).cache_mounts
    monkeypatch.setattr("envbuild.cli.options.engine", lambda *a, **k: e)
    result = invoke("clean", "--build-cache")
    assert result.exit_code == 0, result.output
    assert "still cleaning (the engine is removing them): " in result.stderr
    assert "still" not in result.stdout and "removed build cache id00" in result.stdout


def test_an_install_step_broken_by_a_cache_names_the_way_out():
    said = ('torch 1/1 RUN uv pip install --require-hashes -r /run/layer.txt failed: error: Failed to install: '
            'sympy-1.14.0-py3-none-any.whl (sympy==1.14.0); Caused by: The wheel is invalid: Missing .dist-info directory')
    message = builder.cache_failure(said)
    assert message and "envbuild clean --build-cache" in message and said in message


def test_other_failures_are_not_blamed_on_the_cache():
    for said in ("torch 1/1 RUN uv pip install -r /run/layer.txt failed: error: Hash mismatch for torch==2.13.0",
                 "RUN apt-get update failed: E: Unable to locate package python3",
                 "deps RUN python -c import torch failed: ModuleNotFoundError: No module named 'torch'"):
        assert builder.cache_failure(said) is None, said


# --- the uv step's script (render/scripts/uv-step.sh), run for real (sh and bash, a real folder) with a stand-in
# for uv, as the rendered torch step reads it ------------------------------------------------------------------------


STUB = """#!/bin/sh
# Stands in for uv: records the cache it was given and what it found there, then fills it (or fails).
echo "$UV_CACHE_DIR" >> "$LOG"
ls -A "$UV_CACHE_DIR" | tr '\\n' ' ' >> "$LOG"; echo >> "$LOG"
[ -n "$UV_FAIL" ] && exit 1
mkdir -p "$UV_CACHE_DIR/archive-v0/sympy" && touch "$UV_CACHE_DIR/archive-v0/sympy/sympy-1.14.0.dist-info"
exit 0
"""


def torch_step() -> str:
    """The cpu Dockerfile's torch step as the shell runs it: mounts dropped."""
    (step,) = [r for r in runs(RENDERED["cpu.Dockerfile"]) if "lock/pylock.torch.toml" in r]
    return re.sub(r"--mount=\S+\s*", "", step)


@pytest.fixture(params=["sh", "bash"])
def step(tmp_path, request):
    stub = tmp_path / "uv"
    stub.write_text(STUB)
    stub.chmod(0o755)
    cache = tmp_path / "cache"
    cache.mkdir()
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    fresh = secrets / "fresh_cache"  # the --no-cache build's secret
    script = tmp_path / "uv-step.sh"  # the script, its absolute paths moved to the test folder
    script.write_text(SCRIPT.read_text().replace("/root/.cache/uv", str(cache)).replace("/run/secrets", str(secrets)))
    # the stub installs nothing, so there is nothing to compile: `true` stands in for the image's Python
    command = (torch_step().replace("/run/uv-step.sh", str(script)).replace("/run/uv/uv", str(stub))
               .replace("envbuild_compile /opt/venv/bin/python", "envbuild_compile true"))
    log = tmp_path / "log"

    def run(**env: str) -> tuple[int, str, list[str]]:
        log.write_text("")
        nonce = env.pop("ENVBUILD_FRESH_CACHE", None)
        fresh.unlink(missing_ok=True)
        if nonce is not None:
            fresh.write_text(nonce + "\n")
        proc = subprocess.run([request.param, "-c", command], capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "LOG": str(log), **env})
        return proc.returncode, proc.stdout + proc.stderr, log.read_text().splitlines()

    run.cache = cache / "envbuild"
    run.shell = request.param
    run.secrets = secrets
    return run


def test_the_step_reads_its_cache_logic_in_one_line():
    assert re.match(r"\. /run/uv-step\.sh && (UV_LINK_MODE=hardlink )?/run/uv/uv pip install ", torch_step())
    assert "inflight" not in RENDERED["cpu.Dockerfile"]


def test_a_finished_step_leaves_its_cache_for_the_next(step):
    rc, _, first = step()
    assert rc == 0
    rc, out, second = step()
    assert rc == 0 and "set aside" not in out
    assert second[0] == first[0] and "archive-v0" in second[1]  # the same generation, with what the first left
    assert not list(step.cache.glob("*.inflight"))


def test_a_cut_off_step_s_cache_is_never_read_again(step):
    assert step()[0] == 0
    generation = (step.cache / "current").read_text().strip()
    (step.cache / f"{generation}.inflight").touch()  # what a step killed with its daemon leaves behind
    rc, out, seen = step()
    assert rc == 0 and "set aside" in out
    assert seen[0] != str(step.cache / generation) and seen[1] == ""  # a new, empty generation
    assert not (step.cache / generation).exists()


def test_a_failed_step_keeps_its_mark_so_the_next_starts_empty(step):
    assert step(UV_FAIL="1")[0] != 0
    assert list(step.cache.glob("*.inflight"))
    rc, out, seen = step()
    assert rc == 0 and "set aside" in out and seen[1] == ""


def test_no_cache_starts_one_empty_generation_per_build(step):
    assert step()[0] == 0
    rc, out, seen = step(ENVBUILD_FRESH_CACHE="build-1")
    assert rc == 0 and "set aside" in out and seen[1] == ""
    assert out.count("a new, empty one") == 1
    rc, out, again = step(ENVBUILD_FRESH_CACHE="build-1")  # the same build's next uv step
    assert rc == 0 and "set aside" not in out and "a new, empty one" not in out
    assert again[0] == seen[0] and "archive-v0" in again[1]


def test_each_cache_id_has_its_own_folder(step):
    assert step()[0] == 0
    rc, _, seen = step(ENVBUILD_CACHE_ID="bench-cold-1")
    assert rc == 0 and "/bench-cold-1/" in seen[0] and seen[1] == ""
    assert Path(seen[0]).parent.name == "bench-cold-1"


def test_a_step_killed_or_signalled_keeps_its_mark(step):
    """A kill (the daemon's SIGKILL, a cancelled build's TERM) never reads as a finished step."""
    tail = step.shell, "-c", f". {step.cache.parent.parent / 'uv-step.sh'} && kill -TERM $$"
    assert step()[0] == 0
    proc = subprocess.run(list(tail), capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode != 0
    assert list(step.cache.glob("*.inflight"))
    rc, out, seen = step()
    assert rc == 0 and "set aside" in out and seen[1] == ""


def test_the_step_s_credentials_and_copy_mode(step, tmp_path):
    (step.secrets / "ca_bundle").write_text("-----BEGIN CERTIFICATE-----\n")
    script = tmp_path / "uv-step.sh"
    proc = subprocess.run([step.shell, "-c", f'. {script} && echo "$SSL_CERT_FILE|${{NETRC:-}}|$UV_LINK_MODE"'],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == f"{step.secrets / 'ca_bundle'}||copy"


def test_the_layer_s_bytecode_is_compiled_but_not_its_test_suites(tmp_path):
    """envbuild_compile: the .py files of the packages the layer names (by their RECORD), without folders named tests
    or test; a file that does not compile is left as it is, and the step goes on; other packages are not touched."""
    site = tmp_path / "site"
    files = {"pkg/__init__.py": "X = 1\n", "pkg/core.py": "def f():\n    return 2\n", "pkg/tests/test_core.py": "x = 1\n",
             "pkg/sub/test/helper.py": "y = 1\n", "pkg/broken.py": "def (:\n", "pkg_mod.py": "Z = 3\n",
             "other/__init__.py": "W = 4\n"}
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    for dist, names in (("pkg", [n for n in files if not n.startswith("other/")]), ("other", ["other/__init__.py"])):
        info = site / f"{dist}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "RECORD").write_text("".join(f"{n},,\n" for n in [*names, f"{info.name}/METADATA", f"{info.name}/RECORD"]))
    layer = tmp_path / "pylock.toml"  # the layer as the step sees it: lockfile.LockFile.pylock()'s shape
    layer.write_text('lock-version = "1.0"\n\n[[packages]]\nname = "pkg"\nversion = "1.0"\n')
    script = tmp_path / "uv-step.sh"
    script.write_text(SCRIPT.read_text().replace("/run/layer/pylock.toml", str(layer)).replace("\nenvbuild_uv_step\n", "\n"))
    proc = subprocess.run(["sh", "-c", f". {script} && envbuild_compile {sys.executable}"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)})
    assert proc.returncode == 0, proc.stderr
    compiled = {str(p.relative_to(site)).replace("__pycache__/", "").split(".cpython")[0] for p in site.rglob("*.pyc")}
    assert compiled == {"pkg/__init__", "pkg/core", "pkg_mod"}
