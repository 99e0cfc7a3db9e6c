"""envbuild.image.locking.with_lock: what the image stage is handed of a lock, as data in its plan (the image stage
never reads or parses a lock itself)."""

from __future__ import annotations

from support.constants import MATRIX as MATRIX_PATH

from envbuild.engine import docker as docker_engine
from envbuild.image import builder, plan
from envbuild.image import locking
from envbuild.image.lockfile import LAYERS
from envbuild.matrix import load

MATRIX = load(MATRIX_PATH, ["backends.cpu.base_image=debian:bookworm-slim@sha256:" + "a" * 64])
LEGACY = builder.Builder(argv=("docker", "build"), env=(("DOCKER_BUILDKIT", "1"),), buildx=False)


def test_while_resolving_the_context_holds_an_empty_lock_and_an_empty_file_for_every_layer(tmp_path, monkeypatch):
    """The Dockerfile binds lock/pylock.LAYER.toml in every install step: each is there, empty, before a lock is."""
    monkeypatch.setattr(docker_engine, "find_builder", lambda: LEGACY)
    p = plan.make_plan(MATRIX, MATRIX.backend("cpu"), plan.BuildOptions(context_dir=tmp_path / "ctx"), None)
    assert p.lock_layers == ()  # the image stage makes no layers of its own
    handed = locking.with_lock(p, None)
    assert handed.lock == b"" and handed.lock_layers == tuple((layer, "") for layer in LAYERS)
    plan.write_context(handed)
    folder = tmp_path / "ctx" / "cpu" / "lock"
    assert sorted(f.name for f in folder.iterdir()) == sorted(["lock.txt", *(f"pylock.{layer}.toml" for layer in LAYERS)])
    assert all(f.read_text() == "" for f in folder.iterdir())
