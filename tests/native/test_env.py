"""`envbuild env`: one real cpu environment per session (venv + torch from disk + transformers and accelerate
from PyPI, then the probe), plus plans, refusals and failure paths that install nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from support.constants import CPU_SET, MATRIX, TORCH, VENDOR_TORCH

from envbuild.workspace import venv
from envbuild.matrix import load
from envbuild.core.paths import PROBE


@pytest.fixture(scope="module")
def m():
    return load(MATRIX)


def envbuild(*args, cwd=None, timeout=1200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envbuild", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


@pytest.fixture(scope="session")
def cpu_env(tmp_path_factory):
    """The one real `envbuild env --backend cpu` of the session, through the CLI."""
    base = tmp_path_factory.mktemp("cpuenv")
    start = time.monotonic()
    proc = envbuild("env", "--backend", "cpu", "--dir", base / "venv", "--json", "--matrix", MATRIX, *CPU_SET, cwd=base)
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return base / "venv", json.loads(proc.stdout), proc.stderr, seconds


# --------------------------------------------------------------------------------------------------
# The real environment.


def test_cpu_env_probe_passes(cpu_env):
    d, result, _, seconds = cpu_env
    assert result["ok"] is True and result["created"] is True and result["dir"] == str(d)
    probe = result["probe"]
    assert probe["ok"] is True and probe["backend"] == "cpu" and probe["device"] == "cpu"
    assert {c["name"] for c in probe["checks"]} >= {"import_torch", "device", "versions", "load", "forward", "cpu_match"}
    assert all(c["ok"] for c in probe["checks"])
    assert probe["versions"]["torch"].split("+")[0] == TORCH
    assert probe["versions"]["transformers"] == result["pins"]["transformers"]
    assert probe["versions"]["accelerate"] == result["pins"]["accelerate"]
    print(f"real cpu environment: {seconds:.0f}s")


def test_cpu_env_records_its_pins(cpu_env, m):
    d, *_ = cpu_env
    record = json.loads((d / venv.ENV_FILE).read_text())
    assert record["envbuild_env"] == 1 and record["backend"] == "cpu" and record["device"] == "cpu"
    assert record["pins"] == {"torch": TORCH, "transformers": m.transformers, "accelerate": m.accelerate}
    assert record["index_urls"] == {"torch": "https://pypi.org/simple"}
    assert record["platform"] == venv.host_platform()
    assert record["probe"] == {"ok": True, "failed": [], "error": None}
    assert (d / venv.CONSTRAINTS).read_text() == f"torch=={TORCH}\n"


def test_cpu_env_nothing_left_beside_it(cpu_env):
    d, *_ = cpu_env
    assert sorted(p.name for p in d.parent.iterdir()) == ["venv"]  # no venv.tmp-*, no venv.old-*


def test_cpu_env_was_made_elsewhere_and_moved(cpu_env):
    d, _, stderr, _ = cpu_env
    assert f"-m venv --prompt venv {d}.tmp-" in stderr
    # A venv names its own path in its scripts: after the move they all name DIR.
    for script in ("pip", "activate"):
        text = (d / "bin" / script).read_text()
        assert str(d) in text and ".tmp-" not in text
    assert ".tmp-" not in (d / "pyvenv.cfg").read_text()
    out = subprocess.run([d / "bin" / "pip", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and str(d) in out.stdout


def test_cpu_env_probe_script_runs_alone(cpu_env, m):
    d, *_ = cpu_env
    probe = d / "bin" / venv.PROBE
    assert os.access(probe, os.X_OK)
    assert probe.read_text().splitlines()[0] == f"#!{d / 'bin' / 'python'}"
    assert probe.read_text().split("\n", 1)[1] == PROBE.read_text().split("\n", 1)[1]
    out = subprocess.run([probe, "--backend", "cpu", "--versions-only", "--expect", f"torch={TORCH}",
                          f"transformers={m.transformers}", f"accelerate={m.accelerate}"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ""})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ok"] is True


def test_existing_environment_needs_force(cpu_env, tmp_path):
    d, *_ = cpu_env
    before = sorted(p.name for p in d.iterdir())
    proc = envbuild("env", "--backend", "cpu", "--dir", d, "--matrix", MATRIX, *CPU_SET)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"Error: {d} exists and is not empty: pass --force to replace the environment there, or pick another --dir"
    assert sorted(p.name for p in d.iterdir()) == before


# --------------------------------------------------------------------------------------------------
# Failures leave nothing behind; refusals create nothing.


def test_failed_install_leaves_nothing(invoke, tmp_path):
    d = tmp_path / "venv"
    result = invoke("env", "--backend", "cpu", "--dir", d, "--matrix", MATRIX,
                    "--set", "backends.cpu.torch.version=99.0.1", "--set", f"backends.cpu.torch.index_url=file://{tmp_path}")
    assert result.exit_code == 1
    assert "Error: installing torch==99.0.1 failed (exit code 1):" in result.stderr
    assert "torch==99.0.1" in result.stderr  # pip's own words, tailed
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_force_refuses_a_folder_that_is_not_an_environment(invoke, tmp_path):
    d = tmp_path / "project"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    result = invoke("env", "--backend", "cpu", "--dir", d, "--force", "--matrix", MATRIX, *CPU_SET)
    assert result.exit_code == 1 and "is not a virtual environment (no pyvenv.cfg): refusing" in result.stderr
    assert (d / "notes.txt").read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["project"]


def test_bad_python(invoke, tmp_path):
    result = invoke("env", "--backend", "cpu", "--dir", tmp_path / "venv", "--python", tmp_path / "nopython",
                    "--matrix", MATRIX, *CPU_SET)
    assert result.exit_code == 1 and "cannot run it" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(sys.platform == "darwin", reason="a Mac may have MPS")
def test_mps_on_linux_is_refused_with_the_plan_and_what_works_here(invoke, tmp_path, m):
    d = tmp_path / "venv"
    result = invoke("env", "--backend", "mps", "--dir", d, "--matrix", MATRIX)
    assert result.exit_code == 2
    err = result.stderr
    assert err.startswith("Error: backend 'mps' needs macOS on Apple Silicon (darwin/arm64)")
    assert f"this host is {venv.host_platform()}" in err
    assert f"pip install --index-url https://pypi.org/simple torch=={m.backend('mps').torch.version}" in err
    assert f"transformers=={m.transformers} accelerate=={m.accelerate}" in err
    assert "`envbuild build --backend cpu`" in err and f"`envbuild env --backend cpu --dir {d}`" in err
    assert not d.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("backend", VENDOR_TORCH)
@pytest.mark.parametrize("dry", [False, True])
def test_vendor_torch_backends_are_refused(invoke, tmp_path, m, backend, dry):
    result = invoke("env", "--backend", backend, "--dir", tmp_path / "venv", "--matrix", MATRIX, *(["--dry-run"] if dry else []))
    assert result.exit_code == 2
    assert f"backend '{backend}' has no native environment" in result.stderr
    assert m.backend(backend).base_image in result.stderr
    assert f"Use the container: `envbuild build --backend {backend}`" in result.stderr
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------------
# Plans (--dry-run): exact commands for any backend, nothing created.


def test_dry_run_mps_prints_the_mac_recipe(invoke, tmp_path, m):
    d = tmp_path / "venv"
    result = invoke("env", "--backend", "mps", "--dir", d, "--dry-run", "--matrix", MATRIX)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    py = "python3" if venv.host_platform() != "darwin/arm64" else sys.executable
    assert lines == [
        f"{py} -m venv --prompt venv {d}",
        f"printf '%s\\n' torch=={m.backend('mps').torch.version} > {d}/envbuild-constraints.txt",
        f"{d}/bin/python -m pip install --index-url https://pypi.org/simple torch=={m.backend('mps').torch.version}",
        f"{d}/bin/python -m pip install --constraint {d}/envbuild-constraints.txt transformers=={m.transformers} accelerate=={m.accelerate}",
        f"HF_HUB_OFFLINE=1 {d}/bin/envbuild-probe --backend mps --device mps "
        f"--model synthetic --expect torch={m.backend('mps').torch.version} transformers={m.transformers} accelerate={m.accelerate}",
    ]
    assert list(tmp_path.iterdir()) == []


def test_dry_run_json(invoke, tmp_path, m):
    result = invoke("env", "--backend", "mps", "--dir", tmp_path / "venv", "--dry-run", "--json", "--matrix", MATRIX)
    data = json.loads(result.stdout)
    assert set(data) == {"backend", "device", "platform", "dir", "python", "pins", "index_urls", "commands", "notes", "dry_run"}
    assert data["platform"] == "darwin/arm64" and data["dry_run"] is True
    assert data["pins"] == {"torch": m.backend("mps").torch.version, "transformers": m.transformers, "accelerate": m.accelerate}
    assert data["commands"][0][1:] == ["-m", "venv", "--prompt", "venv", str(tmp_path / "venv")]
    assert data["commands"][-1][0] == str(tmp_path / "venv" / "bin" / "envbuild-probe")


def test_dry_run_cuda_uses_its_index(invoke, tmp_path, m):
    result = invoke("env", "--backend", "cuda", "--dir", tmp_path / "v", "--dry-run", "--matrix", MATRIX)
    assert result.exit_code == 0
    cuda = m.backend("cuda")
    assert f"-m pip install --index-url {cuda.torch.index_url} torch=={cuda.torch.version}" in result.stdout
    assert "--backend cuda --device cuda --model synthetic" in result.stdout  # torch.accelerator: no availability call
    assert "never falls back to the CPU" in result.stdout


def test_dry_run_tpu_installs_the_plugin_under_the_torch_constraint(invoke, tmp_path, m):
    d = tmp_path / "v"
    result = invoke("env", "--backend", "tpu", "--dir", d, "--dry-run", "--matrix", MATRIX)
    tpu = m.backend("tpu")
    assert f"printf '%s\\n' torch=={tpu.torch.version} torch-tpu=={tpu.plugin.version} > {d}/envbuild-constraints.txt" in result.stdout
    assert f"-m pip install --constraint {d}/envbuild-constraints.txt torch-tpu=={tpu.plugin.version}" in result.stdout
    assert "--plugin-import torch_tpu" in result.stdout and f"torch-tpu={tpu.plugin.version}" in result.stdout


def test_dry_run_xpu_names_the_host_packages(invoke, tmp_path):
    result = invoke("env", "--backend", "xpu", "--dir", tmp_path / "v", "--dry-run", "--matrix", MATRIX)
    assert "# note: the image also installs libze1 intel-level-zero-gpu intel-opencl-icd (apt)" in result.stdout


def test_plan_on_a_mac_uses_this_python(m, tmp_path):
    p = venv.plan(m, m.backend("mps"), tmp_path / "v", host="darwin/arm64")
    assert p.python == sys.executable and p.platform == "darwin/arm64" and not p.notes[1:]
    venv.check_host(m, m.backend("mps"), tmp_path / "v", host="darwin/arm64")  # no refusal there


def test_cpu_on_arm64_linux_is_fine_but_not_on_ppc(m, tmp_path):
    venv.check_host(m, m.backend("cpu"), tmp_path, host="linux/arm64")
    with pytest.raises(venv.NativeEnvRefused) as exc:
        venv.check_host(m, m.backend("cpu"), tmp_path, host="linux/ppc64le")
    assert "needs Linux on amd64 (linux/amd64) or Linux on arm64 (linux/arm64)" in str(exc.value)


# --------------------------------------------------------------------------------------------------
# The move's path rewriting, on a fake venv.


def test_relocate_rewrites_only_the_venvs_own_scripts(tmp_path):
    old, new = tmp_path / "v.tmp-abc", tmp_path / "v"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "tool").write_text(f"#!{old}/bin/python\nprint('hi')\n")
    (old / "bin" / "activate").write_text(f'VIRTUAL_ENV="{old}"\n')
    (old / "bin" / "data.bin").write_bytes(b"\x7fELF" + str(old).encode())
    (old / "bin" / "python").symlink_to(sys.executable)
    (old / "pyvenv.cfg").write_text(f"home = /usr/bin\ncommand = /usr/bin/python3 -m venv {old}\n")
    venv._relocate(old, new)
    assert (old / "bin" / "tool").read_text() == f"#!{new}/bin/python\nprint('hi')\n"
    assert (old / "bin" / "activate").read_text() == f'VIRTUAL_ENV="{new}"\n'
    assert (old / "bin" / "data.bin").read_bytes() == b"\x7fELF" + str(old).encode()
    assert os.readlink(old / "bin" / "python") == sys.executable
    assert (old / "pyvenv.cfg").read_text().endswith(f"-m venv {new}\n")


def test_auto_accepts_mps_on_a_mac(invoke, tmp_path, monkeypatch):
    import functools

    from support.hosts import make_root

    from envbuild.host import detect

    (tmp_path / "bin").mkdir()
    monkeypatch.setattr(detect, "detect", functools.partial(detect.detect, root=make_root(tmp_path), path_env=str(tmp_path / "bin"),
                                                            system="Darwin", machine="arm64"))
    result = invoke("env", "--backend", "auto", "--dir", tmp_path / "venv", "--dry-run", "--matrix", MATRIX)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("auto: chose mps (detected Apple Silicon: Darwin on arm64)")
    assert "--index-url https://pypi.org/simple torch==" in result.stdout
    assert not (tmp_path / "venv").exists()
