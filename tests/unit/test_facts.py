"""The metadata cache beside the matrix (matrix/facts.py) read as a file a pull request may bring: any bytes, a
link out of the project, a loop or a FIFO is read or refused with exit 2, never followed, never quoted."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import given, strategies as st
from support.constants import MATRIX
from support.properties import FILES, KINDS, SECRET, exits_cleanly, file_bytes, own_error, plant

from envbuild.core.errors import MatrixError
from envbuild.matrix import facts

CACHE = facts.path_for(MATRIX).read_bytes()


def _project(tmp_path):
    shutil.copy(MATRIX, tmp_path / "matrix.yaml")
    return tmp_path / "matrix.yaml", facts.path_for(tmp_path / "matrix.yaml")


@pytest.mark.parametrize("kind", ["link out", "loop", "fifo", "link to nothing"])
def test_a_cache_that_is_no_regular_file_in_the_project_is_refused_by_name(tmp_path, kind):
    _, cache = _project(tmp_path)
    plant(cache, kind, b"", tmp_path.parent / f"private-{tmp_path.name}.json")
    with pytest.raises(MatrixError) as caught:
        facts.read(cache)
    said = str(caught.value)
    assert "matrix.metadata.json" in said and "give a regular file" in said and SECRET not in said, said


def test_the_committed_cache_reads():
    assert facts.read(facts.path_for(MATRIX)) is not None


@FILES
@given(file_bytes(CACHE))
def test_any_bytes_as_the_cache_are_read_or_refused(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("facts") / "matrix.metadata.json"
    path.write_bytes(data)
    own_error(lambda: facts.read(path))


@FILES
@given(file_bytes(CACHE), st.sampled_from(KINDS))
def test_any_cache_gives_validate_exit_0_1_or_2_and_no_secret(tmp_path_factory, invoke, data, kind):
    tmp = tmp_path_factory.mktemp("project")
    matrix, cache = _project(tmp)
    plant(cache, kind, data, tmp.parent / f"private-{tmp.name}.json")
    exits_cleanly(invoke("validate", "--matrix", matrix))
