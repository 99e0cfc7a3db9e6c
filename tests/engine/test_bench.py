"""The benchmark, quick mode, on the real engine with the session's wheelhouse and CA bundle, and a base of its own.

It prints its table to the terminal (the figures are the point of running it); it asserts the shape of
the result only, never a timing: machines are noisy.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import uuid

import pytest

from support import testbed
from support.constants import MATRIX, REPO

pytestmark = pytest.mark.docker
ROWS = ["lock", "cold", "bump", "noop", "size", "smoke", "help", "render", "publish",
        "anchor_cold", "anchor_bump", "anchor_start", "anchor_cold10", "anchor_size"]


@pytest.fixture(scope="module")
def bench_base(registry, base_image, docker_client):
    """The session's base plus one small layer. The benchmark's cold builds (--no-cache) run every step again and
    BuildKit records their layers under the same keys as the first ones: on the session's own base, a later cached
    build of the session's cpu image was answered with the benchmark's layers (another image id)."""
    local = "envbuild-test/bench-base:bookworm"
    dockerfile = f"FROM {base_image}\nRUN echo {uuid.uuid4().hex} > /etc/envbuild-bench\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=local, rm=True)
    ref = f"{registry.host}/{local}"
    testbed.push_image(docker_client, local, ref)
    yield ref
    for name in (ref, local):
        try:
            docker_client.images.remove(name)
        except Exception:  # still used, or gone: tidiness only
            pass


def test_quick_benchmark_measures_every_row(bench_base, wheelhouse, ca_bundle, docker_client, tmp_path, capsys):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench.py"), "--quick", "--base", bench_base, "--wheelhouse", str(wheelhouse),
         "--ca-bundle", str(ca_bundle), "--matrix", str(MATRIX), "--json-file", str(out)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )
    with capsys.disabled():
        print("\n" + proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["quick"] is True and doc["backend"] == "cpu"
    rows = {r["key"]: r for r in doc["rows"]}
    assert list(rows) == ROWS
    for key, row in rows.items():
        assert isinstance(row["value"], (int, float)) and row["value"] > 0, row
        if key not in ("cold", "lock"):
            assert isinstance(row["ratio"], (int, float)) and row["ratio"] > 0, row
    assert rows["bump"]["baseline"] == rows["cold"]["value"]
    assert rows["size"]["detail"]["packages"] > 0 and rows["size"]["detail"]["base"] > 0
    assert "import_torch" in rows["smoke"]["detail"]["where"] and "compile" in rows["smoke"]["detail"]["where"]
    # the issues' bars: smoke <= 8x docker run, no-op <= +0.3 s, bump <= 0.05, help <= 1.5x `import click`
    assert (rows["smoke"]["target"], rows["noop"]["margin"], rows["bump"]["target"]) == (8.0, 0.3, 0.05)
    assert (rows["help"]["target"], rows["render"]["target"]) == (1.5, None)  # render: measured, no longer a bound
    assert rows["help"]["detail"]["python_start"] > 0
    # content-addressed publishing: the second publish of the same cell moved its tags and uploaded nothing
    assert rows["publish"]["detail"]["skipped"] is True and rows["publish"]["absolute"] == 5.0
    # the hand-written anchor, built in the same run: envbuild's figures over its figures, with the cold-build issue's bars
    assert rows["anchor_cold"]["value"] == rows["cold"]["value"] and rows["anchor_bump"]["value"] == rows["bump"]["value"]
    assert [rows[k]["target"] for k in ("anchor_cold", "anchor_bump", "anchor_start", "anchor_cold10", "anchor_size")] == [
        1.3, 1.0, 1.0, 1.0, 1.0]
    for line in ("envbuild lock", "cold build", "transformers-only bump", "nothing changed", "image size", "smoke", "--help",
                 "envbuild render"):
        assert line in proc.stdout
    # It cleans up after itself: its images and the cache mounts of its cold build.
    assert not docker_client.images.list(name="envbuild-bench/envbuild")
    assert not docker_client.images.list(name="envbuild-bench/handwritten")
    import docker

    try:
        live = {r["ID"] for r in docker_client.api.df().get("BuildCache") or []}
    except docker.errors.APIError as exc:  # Docker 20.10 after a daemon was killed mid-build: moby/buildkit#3599
        assert "snapshot" in str(exc) and "cannot list its build cache" in proc.stderr, (exc, proc.stderr)
        return
    assert not live & set(doc["cache_mounts"])
    # and the layers of its run: left in, they pushed the session's own out of the cache the tests keep
    assert not doc["build_cache_left"], doc["build_cache_left"]
