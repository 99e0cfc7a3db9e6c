"""Unit tests of envbuild/report/report.py: the tables, JSON and summaries commands print."""

from __future__ import annotations

import pytest


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

@pytest.mark.parametrize("doc", ['{"backend": 1, "ok": true, "checks": []}', '{"backend": "cpu", "ok": "yes", "checks": []}',
                                 '{"backend": "cpu", "ok": true, "checks": [{"name": 3}]}', '[]', '[[1]]',
                                 '{"backend": "cpu", "ok": true, "checks": [], "seconds": "fast"}', "[" * 100000])
def test_summary_refuses_results_of_the_wrong_shape(doc, invoke, tmp_path):
    f = tmp_path / "smoke.json"
    f.write_text(doc)
    result = invoke("summary", f)
    assert result.exit_code == 2 and result.stderr.startswith(f"Error: {f}"), result.output
