"""Unit tests of envbuild/core/files.py: bounded, checked reads of files from outside."""

from __future__ import annotations

import json
import pytest
from envbuild.core.errors import InvalidInput


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

@pytest.mark.parametrize("value, fragment", [("1" + "0" * 400, "digits"), ("[" * 100000, "nested too deeply"),
                                             ('"\\ud800"', None), ("Infinity", None), ("NaN", None)])
def test_json_from_outside_is_bounded_and_clean(value, fragment, tmp_path):
    from envbuild.core.files import read_json

    f = tmp_path / "x.json"
    f.write_text('{"seconds": %s}' % value if not value.startswith("[") else value)
    if fragment:
        with pytest.raises(InvalidInput, match=fragment):
            read_json(f, "x.json", InvalidInput)
    else:
        doc = read_json(f, "x.json", InvalidInput)
        json.dumps(doc).encode("utf-8")  # printable and writable again
        assert doc["seconds"] in (None, "?")
