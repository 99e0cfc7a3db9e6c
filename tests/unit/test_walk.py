"""benchmarks/walk.py, the walk of a command through envbuild's folders: its readings of a call tree (pure logic),
and its recorder on a real command run in-process."""

from __future__ import annotations

import importlib.util
import sys

from support.constants import MATRIX, REPO


def _walk():
    if "walk" not in sys.modules:
        spec = importlib.util.spec_from_file_location("walk", REPO / "benchmarks" / "walk.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["walk"] = module
        spec.loader.exec_module(module)
    return sys.modules["walk"]


def _tree():
    """cli -> core; cli -> image -> (matrix, core, render -> matrix, cli's echo); cli -> host."""
    w = _walk()
    root = w.Node("cli")

    def add(parent, folder):
        parent.children.append(w.Node(folder, parent))
        return parent.children[-1]

    add(root, "core")
    image = add(root, "image")
    add(image, "matrix")
    add(image, "core")
    add(add(image, "render"), "matrix")
    add(image, "cli")
    add(root, "host")
    w.folders(root)
    return w, root


def test_the_readings_of_a_walk():
    w, root = _tree()
    no_core = frozenset({"core"})
    walk, _ = w.stays(root)
    assert walk == ["cli", "core", "cli", "image", "matrix", "image", "core", "image", "render", "matrix", "render",
                    "image", "cli", "image", "cli", "host", "cli"]
    walk, entered = w.stays(root, no_core)
    assert walk == ["cli", "image", "matrix", "image", "render", "matrix", "render", "image", "cli", "image", "cli",
                    "host", "cli"]
    assert entered == {"image": 1, "matrix": 2, "render": 1, "cli": 1, "host": 1}  # a return is no new entry
    # folded: the matrix queries, the echo and host are leaf excursions; render called matrix, so it stays
    walk, entered = w.stays(root, no_core, fold=True)
    assert walk == ["cli", "image", "render", "image", "cli"] and entered == {"image": 1, "render": 1}
    summary = w.summary(w.stays(root, no_core))
    assert summary["visits"]["image"] == 4 and summary["max_visits"] == 4 and summary["rooms"] == 5
    assert summary["climbs"] == 6  # matrix->image, matrix->render, render->image, image->cli twice, host->cli
    assert summary["round_trips"]["image<->matrix"] == 1 and summary["round_trips"]["cli<->image"] == 2
    assert w.calls_up(root, no_core) == {"image->cli": 1}


def test_it_records_a_real_command_and_leaves_imports_out(capsys):
    w = _walk()
    argv = list(sys.argv)
    root, code = w.run(["validate", "--matrix", str(MATRIX)])
    assert code == 0 and sys.argv == argv
    assert "ok" in capsys.readouterr().out
    walk, entered = w.stays(root, frozenset({"core"}))
    assert walk[0] == "cli" and walk[-1] == "cli" and "matrix" in walk
    assert set(walk) <= set(w.LAYERS)
    # the command's own calls, not the bodies of the modules it imported on the way
    assert all(child.name.split(":")[1] != "<module>" for child in root.children)
