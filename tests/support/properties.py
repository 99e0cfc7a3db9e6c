"""The strategies and checks the property tests share (hypothesis): hostile text, any JSON, and "no exception but
envbuild's own, whose message is clean". Example counts stay modest (the unit suite runs on two cores); with CI
set, the examples are derandomized, so a CI failure reproduces."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings, strategies as st

from envbuild.core.errors import EnvbuildError
from envbuild.core.text import unsafe_char

EXAMPLES = int(os.environ.get("ENVBUILD_PROPERTY_EXAMPLES", "50"))  # raise it for a longer search, locally
PROPS = settings(max_examples=EXAMPLES, deadline=None,
                 derandomize=bool(os.environ.get("CI")),
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                        HealthCheck.filter_too_much])
HEAVY = settings(PROPS, max_examples=max(10, EXAMPLES // 2))  # a whole matrix, or a file, per example

# Text with what hostile input carries: controls, escapes, bidi overrides, surrogates' neighbours, separators.
HOSTILE = st.text(st.one_of(st.characters(codec="utf-8"), st.sampled_from(list("\x1b\x9b\r\n\t\x00\x07\u202e\u2028/:@.-_"))),
                  max_size=80)
JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | HOSTILE,
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE, inner, max_size=4), max_leaves=12)


def clean(text: str) -> bool:
    """No raw control character, line separator, bidi control or lone surrogate (core/text.py's policy); the line
    breaks between a matrix's problems allowed."""
    return unsafe_char(text, allow="\n") is None


def own_error(call):
    """`call()`'s value, or None when it raised one of envbuild's errors (whose message must be clean)."""
    try:
        return call()
    except EnvbuildError as exc:
        assert clean(str(exc)), repr(str(exc))
        return None
