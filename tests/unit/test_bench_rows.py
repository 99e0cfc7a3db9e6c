"""The benchmark's verdicts (benchmarks/bench.py): pure logic, so checked here; tests/engine/test_bench.py runs it."""

from __future__ import annotations

import importlib.util
import sys

from support.constants import REPO


def _bench():
    if "bench" not in sys.modules:
        spec = importlib.util.spec_from_file_location("bench", REPO / "benchmarks" / "bench.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench"] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["bench"]


def test_an_absolute_row_is_met_only_when_what_it_stands_for_happened():
    Row = _bench().Row
    assert Row("publish", "again", 1.0, 40.0, "s", absolute=5.0).met is True
    assert Row("publish", "again", 1.0, 40.0, "s", absolute=5.0, holds=False).met is False  # it uploaded after all
    assert Row("publish", "again", 6.0, 40.0, "s", absolute=5.0).met is False
    # a detail is a row's own record, not a verdict: no other row's figure is judged by a key it happens to carry
    assert Row("other", "figure", 1.0, 40.0, "s", absolute=5.0, detail={"skipped": False}).met is True


def test_ratio_and_margin_rows():
    Row = _bench().Row
    assert Row("cold", "x", 13.0, 10.0, "s", 1.3).met is True and Row("cold", "x", 13.1, 10.0, "s", 1.3).met is False
    assert Row("noop", "x", 0.45, 0.2, "s", margin=0.3).met is True
    assert Row("noop", "x", 0.55, 0.2, "s", margin=0.3).met is False
    assert Row("lock", "x", 12.0, None, "s").met is None


def test_the_report_states_the_help_bound_and_whether_it_is_met_and_render_unbound():
    bench = _bench()
    assert bench.HELP_BOUND == 1.5 and not hasattr(bench, "RENDER_BOUND")
    rows = [bench.Row("help", "`envbuild --help`", 0.16, 0.1, "s", bench.HELP_BOUND),
            bench.Row("render", "`envbuild render`", 0.45, 0.1, "s", None)]
    text = bench.table(rows)
    assert "<= 1.5" in text and "<= 4" not in text
    assert "help 1.60x of `import click` (bound 1.5x: NOT met); render 4.50x of `import click`" in text
    assert "render 4.50x of `import click` (bound" not in text
