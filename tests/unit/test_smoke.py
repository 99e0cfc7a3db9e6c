"""Unit tests of envbuild/smoke: results read from files and folders, several backends in one run."""

from __future__ import annotations

import json
import pytest
from support.constants import MATRIX as MATRIX_PATH
from support.fakes import FakeEngine
from envbuild.report import report
from envbuild import smoke
from envbuild.core.errors import InvalidInput
from envbuild.matrix import load


# --- What the commands call, called directly (the CLI parses and prints) (from test_command_library.py)

MATRIX = load(MATRIX_PATH)


def test_smoke_results_are_read_from_files_and_folders(tmp_path):
    good = {"backend": "cpu", "ok": True, "checks": [{"name": "device", "ok": True, "message": ""}]}
    folder = tmp_path / "results"
    (folder / "cpu").mkdir(parents=True)
    (folder / "cpu" / "smoke.json").write_text(json.dumps(good))
    (folder / "package.json").write_text('{"name": "something else"}')  # passed over in a folder
    assert report.read_smoke_results([folder]) == [good]
    both = tmp_path / "both.json"
    both.write_text(json.dumps([good, {**good, "backend": "cuda"}]))
    assert [d["backend"] for d in report.read_smoke_results([both])] == ["cpu", "cuda"]
    with pytest.raises(InvalidInput, match=r"package.json: not the output of `envbuild smoke --json`"):
        report.read_smoke_results([folder / "package.json"])  # named: refused
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**good, "ok": "yes"}))
    with pytest.raises(InvalidInput, match='"ok" must be bool'):
        report.read_smoke_results([bad])
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(InvalidInput, match="an empty list"):
        report.read_smoke_results([empty])


def test_smoke_each_keeps_going_only_when_asked():
    """A smoke that cannot run (no image; no runtime for the device) is a SmokeError before any container: alone it
    is raised; with keep_going it is a failed result, said, and the next backend still runs."""
    chosen = [MATRIX.backend("cpu"), MATRIX.backend("cuda")]
    with pytest.raises(smoke.SmokeError, match="is not on this Docker engine"):
        smoke.smoke_each(MATRIX, chosen, FakeEngine(), keep_going=False, ignore_host=True)
    said, seen = [], []
    results = smoke.smoke_each(MATRIX, chosen, FakeEngine(), keep_going=True, failed=said.append, done=seen.append,
                               ignore_host=True, platform="linux/amd64")
    assert [r.backend for r in results] == ["cpu", "cuda"] and seen == results and len(said) == 2
    assert not any(r.ok for r in results) and [r.error for r in results] == [str(e) for e in said]
    assert "is not on this Docker engine" in results[0].error and "runtime 'nvidia'" in results[1].error
    assert results[0].image == MATRIX.tags(chosen[0])[0] and results[0].platform == "linux/amd64"
