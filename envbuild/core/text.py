"""What a string may carry into generated text (Dockerfiles, scripts, command lines) and onto a terminal.

One policy for every value from a user: the matrix, --set, command-line values that land in generated text,
and whatever an error message echoes back.
"""

from __future__ import annotations

import functools
import unicodedata

# Bidirectional controls: a line would read otherwise than it runs ("Trojan Source").
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def unsafe_char(value: str, allow: str = "") -> str | None:
    """The first character no value may carry into generated text, or None. What ends a line anywhere a value
    goes (BuildKit and shells break at \\n and \\r; Python's str.splitlines also at \\v, \\f, \\x1c-\\x1e,
    \\x85, U+2028 and U+2029), so every control character (C0 and C1) and line or paragraph separator; a
    lone surrogate (it cannot be written as UTF-8); the bidirectional controls."""
    # Fast path (every line printed passes here): a printable string has none of those (controls, separators,
    # surrogates and the bidi marks, which are format characters, are all unprintable to Python).
    if (value.translate(_dropped(allow)) if allow else value).isprintable():
        return None
    for ch in value:
        if ch not in allow and (ch in _BIDI or unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs")):
            return ch
    return None


@functools.lru_cache(maxsize=16)
def _dropped(allow: str) -> dict[int, None]:
    return dict.fromkeys(map(ord, allow))


_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x85": "a next-line (NEL)"}


def unsafe_message(value: str, ch: str) -> str:
    if unicodedata.category(ch) == "Cs":
        what = "a lone surrogate (bytes that were not UTF-8)"
    else:
        what = _NAMES.get(ch) or unicodedata.name(ch, "a control character")
    return (f"{value!r} contains {what} (U+{ord(ch):04X}): a line break, control or direction character would inject "
            "into a Dockerfile, a script or a terminal")


def capped(text: str, limit: int = 1000) -> str:
    """At most `limit` characters of a quoted value, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


# What an error quotes of one value a user gave (an option, a field): enough to recognise it.
QUOTE_LIMIT = 200


def shown(text: str, keep: str = "", limit: int | None = None) -> str:
    """The text with every unsafe character escaped (as Python would, e.g. \\x1b, \\u2028), so that what a user
    gave can neither repaint a terminal nor forge another line of output; with `limit`, capped to that many
    characters first (a 10,000-character value is not quoted whole)."""
    if limit is not None:
        text = capped(text, limit)
    if unsafe_char(text, keep) is None:
        return text
    return "".join(ch if ch in keep or unsafe_char(ch) is None else repr(ch)[1:-1] for ch in text)


def quoted(text: str) -> str:
    """One value a user gave, as an error quotes it: escaped and capped."""
    return shown(text, limit=QUOTE_LIMIT)
