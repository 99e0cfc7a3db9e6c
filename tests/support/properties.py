"""The strategies and checks the property tests share (hypothesis): hostile text, any JSON, and "no exception but
envbuild's own, whose message is clean". Example counts stay modest (the unit suite runs on two cores); with CI
set, the examples are derandomized, so a CI failure reproduces."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

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


# --- Files a pull request brings (matrix, settings, locks, manifests, caches): any bytes, any kind of file -------

SECRET = "PLANTED-S3CRET-do-not-print"  # what a private file outside the project holds: never printed
# Bounded in time too: each example is read in milliseconds; a parse that is quadratic or unbounded (a key of
# thousands of dots once took tomllib minutes) passes any deadline. Far above a slow shared machine's time.
FILES = settings(PROPS, deadline=timedelta(seconds=20))
# Pieces hostile files are made of: deep nesting, dotted-key bombs, NULs, invalid UTF-8, escapes, quotes (never the
# secret: what a file holds may be quoted back, capped and escaped).
BOMBS = [b"[" * 5000, b"{" * 5000, b"a=" + b"[" * 3000, b"a=" + b"{b=" * 2000, b"k" + b".k" * 30000 + b"=1\n",
         b'# inputs: ' + b"[" * 5000, b"# inputs: " + b'{"a":' * 3000, b"\x00", b"\xff\xfe\xfd", b"\xed\xa0\x80",
         b"\x1b[2J", "\u202e\u2028".encode(), b"'''", b'"""', b"\\", b"\n", b"\r\n", b"#", b"&a [*a,*a]\n",
         b"file:///etc/passwd", b"wheelhouse:../x", b"http://", b"--hash=sha256:"]
PIECE = st.one_of(st.sampled_from(BOMBS), st.binary(max_size=64), HOSTILE.map(lambda t: t.encode("utf-8", "surrogatepass")))
KINDS = ["file"] * 8 + ["link out", "loop", "fifo", "link to nothing"]


def file_bytes(template: bytes) -> st.SearchStrategy[bytes]:
    """Any bytes, or a good file (`template`) with a stretch replaced by hostile pieces."""
    at = st.integers(0, len(template))
    spliced = st.builds(lambda a, b, pieces: template[:min(a, b)] + b"".join(pieces) + template[max(a, b):],
                        at, at, st.lists(PIECE, min_size=1, max_size=3))
    return st.one_of(st.binary(max_size=512), spliced, spliced, st.lists(PIECE, max_size=4).map(b"".join))


def plant(path: Path, kind: str, data: bytes, private: Path) -> None:
    """Put at `path` a file of `kind`: `data`, or a link out to `private` (which holds SECRET), a link in a loop,
    a FIFO, a link to nothing."""
    if os.path.lexists(path):
        path.unlink()
    private.write_text(f"{SECRET}\n{SECRET}: {SECRET}\n")
    if kind == "file":
        path.write_bytes(data)
    elif kind == "link out":
        path.symlink_to(private)
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(path.parent / "gone")


def exits_cleanly(result) -> None:
    """A CLI result (click's) of any input: exit 0, 1 or 2, no traceback, no secret, messages clean."""
    said = result.stdout + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code in (0, 1, 2), (result.exit_code, said[-2000:])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in said and "internal error" not in said and SECRET not in said, said[-2000:]
    assert clean(result.stderr), repr(result.stderr[-500:])
