"""`envbuild build --jobs N` on the real engine: two backends at once, with plain prefixed lines (not a
terminal) and a summary table."""

from __future__ import annotations

import json
import subprocess

import pytest

from support import testbed

pytestmark = pytest.mark.docker


@pytest.fixture
def jobs_images(docker_client):
    yield
    # Only our tags: an image identical to another test's (same Dockerfile) carries its tags too.
    for image in docker_client.images.list(name="envbuild-test/jobs"):
        for tag in image.tags:
            if tag.startswith("envbuild-test/jobs:"):
                docker_client.images.remove(tag)


def test_two_backends_build_at_once(cpu_image, base_image, wheelhouse, ca_bundle, tmp_path, jobs_images):
    # Two cpu-like backends on the session's base: their shared steps come from the cache (or, cold, run
    # once for both); each gets its own final stage and tags.
    (tmp_path / "matrix.yaml").write_text(testbed.cpu_matrix(base_image, "envbuild-test/jobs", {"cpu": "", "cpu-again": ""}))
    proc = subprocess.run(
        ["envbuild", "build", "--backend", "all", "--jobs", "2", "--matrix", str(tmp_path / "matrix.yaml"),
         "--wheelhouse", str(wheelhouse), "--ca-bundle", str(ca_bundle), "--json-file", str(tmp_path / "b.json")],
        capture_output=True, text=True, cwd=tmp_path, timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    # Not a terminal: every line says which backend it is about.
    assert any(ln.startswith("[cpu] ") for ln in proc.stderr.splitlines())
    assert any(ln.startswith("[cpu-again] ") for ln in proc.stderr.splitlines())
    assert "\x1b[" not in proc.stderr
    table = proc.stdout[proc.stdout.index("BACKEND"):]
    assert "cpu-again" in table and "envbuild-test/jobs:cpu" in table
    results = json.loads((tmp_path / "b.json").read_text())
    assert [r["backend"] for r in results] == ["cpu", "cpu-again"] and all(r["ok"] for r in results)
