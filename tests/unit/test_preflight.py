"""Unit tests of envbuild/smoke/preflight.py: the runtime, device nodes and flags a host refuses, named with the fix."""

from __future__ import annotations

from pathlib import Path
import pytest
from support.constants import MATRIX as MATRIX_PATH
from support.fakes import FakeEngine
from support.hosts import REFUSALS
from envbuild import smoke
from envbuild.matrix import load
from envbuild.smoke import preflight


# --- Smoke-test logic without an engine: preflight, model arguments, JUnit (from test_smoke_units.py)

MATRIX = load(MATRIX_PATH)


def test_preflight_names_the_missing_piece(tmp_path):
    (tmp_path / "dev").mkdir()
    with pytest.raises(smoke.SmokeError, match="NVIDIA Container Toolkit"):
        preflight.require(MATRIX.backend("cuda"), FakeEngine(["runc"]), root=tmp_path)
    preflight.require(MATRIX.backend("cuda"), FakeEngine(["runc", "nvidia"]), root=tmp_path)
    with pytest.raises(smoke.SmokeError, match="runtime=habana"):
        preflight.require(MATRIX.backend("hpu"), FakeEngine(["runc"]), root=tmp_path)
    with pytest.raises(smoke.SmokeError, match="/dev/kfd, /dev/dri"):
        preflight.require(MATRIX.backend("rocm"), FakeEngine(["runc"]), root=tmp_path)
    (tmp_path / "dev" / "kfd").touch()
    (tmp_path / "dev" / "dri").mkdir()
    preflight.require(MATRIX.backend("rocm"), FakeEngine(["runc"]), root=tmp_path)
    preflight.require(MATRIX.backend("cpu"), FakeEngine([]), root=tmp_path)


def test_the_image_carries_the_matrix_s_run_flags_for_the_probe_s_advice():
    from envbuild.render import render_backend

    for b in MATRIX.containerizable():
        assert f'ENVBUILD_RUN_FLAGS="{" ".join(b.run.docker_args())}"' in render_backend(MATRIX, b)
    assert "DEVICE_FLAGS" not in Path(preflight.__file__).with_name("probe.py").read_text()




@pytest.mark.parametrize("backend", sorted(REFUSALS))
def test_a_refused_flag_is_named_with_why_the_backend_needs_it(backend):
    b = MATRIX.backend(backend)
    said, flag = REFUSALS[backend]
    why = preflight.refused(b, f"cannot run img: {said}")
    assert why.startswith(f"this host refused `{flag}`, which the {backend} backend's container needs: {b.run.why}")
    assert said in why
    assert preflight.refused(MATRIX.backend("cpu"), said) is None  # cpu asks for no such flag
    assert preflight.refused(b, "no space left on device") is None
