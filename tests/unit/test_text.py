"""Unit tests of envbuild/core/text.py: which characters are unsafe to print."""

from __future__ import annotations


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

def test_the_fast_path_of_unsafe_char_agrees_with_its_definition_for_every_code_point():
    """unsafe_char answers "printable" strings at once; every code point, alone and in text, with and without
    allowed characters, must get the answer the category rule gives."""
    import unicodedata

    from envbuild.core.text import _BIDI, unsafe_char

    def by_definition(value: str, allow: str) -> str | None:
        return next((ch for ch in value if ch not in allow and (
            ch in _BIDI or unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs"))), None)

    wrong = [(hex(cp), allow) for cp in range(0x110000) for allow in ("", "\n\t")
             if unsafe_char(f"a{chr(cp)}b\n", allow) != by_definition(f"a{chr(cp)}b\n", allow)]
    assert not wrong, wrong[:10]


def test_shown_with_a_limit_caps_what_it_quotes_and_says_how_much_was_left_out():
    from envbuild.core.text import QUOTE_LIMIT, quoted, shown

    assert shown("abc", limit=10) == "abc"
    assert shown("x" * 10_000, limit=10) == "x" * 10 + "... (9990 more characters)"
    assert shown("\x1b" * 50, limit=5) == "\\x1b" * 5 + "... (45 more characters)"  # capped, then escaped
    assert quoted("y" * 10_000).startswith("y" * QUOTE_LIMIT + "... (")
    assert len(quoted("y" * 10_000)) < QUOTE_LIMIT + 40
