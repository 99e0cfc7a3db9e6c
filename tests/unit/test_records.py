"""envbuild/image/records.py: which other builds of this project are running now (their build locks held)."""

from __future__ import annotations

from envbuild.core.files import exclusive
from envbuild.image import records


def test_building_names_the_other_backends_whose_build_lock_is_held(tmp_path):
    with records.locked(tmp_path, "cpu"):
        assert records.building(tmp_path, "cpu") == []  # its own build is not another
        with exclusive(tmp_path / "rocm.lock", "the rocm build"):
            assert records.building(tmp_path, "cpu") == ["rocm"]
            assert records.building(tmp_path, "rocm") == ["cpu"]
        assert records.building(tmp_path, "cpu") == []  # released: a lock file left behind is no build
    (tmp_path / "cuda.lock").touch()
    assert records.building(tmp_path, "cpu") == []


def test_building_knows_none_where_the_held_locks_cannot_be_read(tmp_path):
    with exclusive(tmp_path / "rocm.lock", "the rocm build"):
        assert records.building(tmp_path, "cpu", locks=tmp_path / "no-such-file") == []
