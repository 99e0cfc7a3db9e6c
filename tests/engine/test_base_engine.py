"""`envbuild base` for real: Debian's bookworm made from Debian's archive twice gives the same root-filesystem
layer in the engine (the diff id of the imported layer), as the issue's checker compares it.

One make is always fresh (mmdebstrap, 1 to 2 minutes). The other is the test bed's cached tarball made from the
same inputs (the archive's signed Release file, which fixes every package version, SOURCE_DATE_EPOCH and the
command line: the cache key) in an earlier run, or, where there is none yet, a second fresh make: either way two
makes from the same inputs, compared. Both are loaded under this test's own names, never as debian:bookworm-slim
(the shared engine's other tests may count on that name being absent), and removed afterwards.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid

import pytest
from support import testbed

from envbuild import matrix
from envbuild.core.distbase import MADE_LABEL
from envbuild.engine.docker import Engine
from envbuild.workspace import base

pytestmark = pytest.mark.docker


@pytest.fixture
def mmdebstrap():
    if not shutil.which("mmdebstrap"):
        message = "mmdebstrap is not installed (Debian: apt-get install mmdebstrap; scripts/test installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def test_the_same_inputs_give_the_same_layer(docker_client, mmdebstrap, tmp_path) -> None:
    cpu = matrix.load(str(matrix.default_path())).select(["cpu"])[0]
    plan = base.plan(cpu, environ={})
    assert plan.image == "debian:bookworm-slim" and plan.codename == "bookworm"
    lines: list[str] = []
    kept = base.make_tar(plan, echo=lines.append, cache_dir=testbed.CACHE / "bases")  # cached, or made now
    fresh = base.make_tar(plan, echo=lines.append, cache=False, cache_dir=tmp_path)
    assert not fresh.cached and fresh.epoch == kept.epoch
    assert fresh.tar.read_bytes() == kept.tar.read_bytes()  # bit for bit

    engine = Engine()
    names = [f"envbuild-test/first-base-{uuid.uuid4().hex[:8]}:bookworm-slim-{i}" for i in (1, 2)]
    try:
        images = [base.make(dataclasses.replace(plan, image=name), engine, echo=lines.append, cache=cache,
                            cache_dir=folder).image
                  for name, cache, folder in ((names[0], True, testbed.CACHE / "bases"), (names[1], True, tmp_path))]
        first, second = (docker_client.api.inspect_image(name) for name in names)
        assert first["RootFS"]["Layers"] == second["RootFS"]["Layers"] == [fresh.layer]
        assert images[0].labels[MADE_LABEL].startswith("mmdebstrap bookworm")
        assert first["Config"]["Cmd"] == ["bash"]
        assert any(line.startswith("[cpu] mmdebstrap: I: ") for line in lines)  # its progress was shown
    finally:
        for name in names:
            engine.untag(name)
