"""Unit tests of envbuild/core/shape.py: the shape of JSON read back, checked before use."""

from __future__ import annotations

from envbuild.core.shape import Each, problem


# --- Signed is not well-formed: the shape of what is read back is checked before use (from test_shapes.py)

def test_the_shape_helper_names_where_a_value_is_wrong():
    shape = {"ok": bool, "checks?": [{"name": str}], "platforms?": Each({"digest": str})}
    assert problem({"ok": True}, shape) is None
    assert problem({"ok": True, "checks": [{"name": "x"}], "platforms": {"a": {"digest": "d"}}}, shape) is None
    assert problem("x", shape) == "the document must be an object"
    assert problem({}, shape) == 'the document has no "ok"'
    assert problem({"ok": 1}, shape) == "ok must be true or false"
    assert problem({"ok": True, "checks": ["a"]}, shape) == "checks[0] must be an object"
    assert problem({"ok": True, "platforms": {"a": "b"}}, shape) == "platforms.a must be an object"
    assert problem(True, int) == "the document must be an integer"  # a bool is no number here
    assert problem(None, (str, None)) is None
