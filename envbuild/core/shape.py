"""The shape of JSON read back (a manifest, a smoke result, a signed attestation, an index input), checked once
before anything uses it: signed does not mean well-formed. A shape is written as data:

- a type, or a tuple of types (`(str, None)`: a string or null);
- a compiled pattern: a string it matches whole;
- a dict: an object with these keys (a key ending in `?` may be missing); other keys are allowed;
- a list of one shape: an array whose every item has it;
- `Each(shape)`: an object whose every value has it (keys are strings).

`problem` says where the first mismatch is, in the document's own terms (`platforms.linux/amd64.smoke.ok`); the
caller raises its own error with it, of its family (bad input: exit 2; the world's answer: exit 1)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from envbuild.core.text import shown


@dataclass(frozen=True)
class Each:
    shape: Any


def _name(shape: Any) -> str:
    if shape is None or shape is type(None):
        return "null"
    if isinstance(shape, tuple):
        return " or ".join(_name(s) for s in shape)
    if isinstance(shape, re.Pattern):
        return "a string such as the format asks"
    if isinstance(shape, (dict, Each)):
        return "an object"
    if isinstance(shape, list):
        return "an array"
    return {bool: "true or false", str: "a string", int: "an integer", float: "a number", dict: "an object",
            list: "an array"}.get(shape, getattr(shape, "__name__", str(shape)))


def _is(value: Any, shape: Any) -> bool:
    if shape is None or shape is type(None):
        return value is None
    if shape is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if shape is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, shape)


def problem(value: Any, shape: Any, where: str = "") -> str | None:
    """Why `value` does not have `shape` (None: it has)."""
    at = where or "the document"
    if isinstance(shape, tuple):
        found = [problem(value, s, where) for s in shape]
        if None in found:
            return None
        for s, why in zip(shape, found):  # the alternative of the value's own kind says what inside it is wrong
            if isinstance(s, (dict, Each)) and isinstance(value, dict) or isinstance(s, list) and isinstance(value, list):
                return why
        return f"{at} must be {_name(shape)}"
    if isinstance(shape, re.Pattern):
        if isinstance(value, str) and shape.fullmatch(value):
            return None
        return f"{at} must be {_name(shape)}" + (f", not {shown(value[:80])}" if isinstance(value, str) else "")
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{at} must be an object"
        for key, inner in shape.items():
            name, optional = (key[:-1], True) if key.endswith("?") else (key, False)
            if name not in value:
                if optional:
                    continue
                return f"{at} has no \"{name}\""
            found = problem(value[name], inner, f"{where}.{name}" if where else name)
            if found:
                return found
        return None
    if isinstance(shape, Each):
        if not isinstance(value, dict):
            return f"{at} must be an object"
        for key, item in value.items():
            found = problem(item, shape.shape, f"{where}.{shown(str(key)[:80])}" if where else shown(str(key)[:80]))
            if found:
                return found
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{at} must be an array"
        for i, item in enumerate(value):
            found = problem(item, shape[0], f"{where}[{i}]")
            if found:
                return found
        return None
    return None if _is(value, shape) else f"{at} must be {_name(shape)}"
