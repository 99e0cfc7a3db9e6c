"""NO_COLOR, and output that is not a terminal, get no colour and no escape: the red "Error:" line included."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from support.constants import FIXED

ROOT = Path(__file__).resolve().parents[2]


def on_a_terminal(*args: str, **env: str) -> bytes:
    """What `envbuild ARGS` writes to a terminal (stdout and stderr both on it)."""
    main, sub = pty.openpty()
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **env}
    if "NO_COLOR" not in env:
        environ.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "envbuild", *args], stdin=sub, stdout=sub, stderr=sub, env=environ)
    os.close(sub)
    out = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(main)
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pty")
def test_no_color_on_a_terminal() -> None:
    coloured = on_a_terminal("show", "nope", "--matrix", str(FIXED))
    assert b"\x1b[31m" in coloured and b"unknown backend" in coloured  # a terminal gets the red line
    plain = on_a_terminal("show", "nope", "--matrix", str(FIXED), NO_COLOR="1")
    assert b"unknown backend" in plain and b"\x1b" not in plain


def test_no_escape_off_a_terminal() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("NO_COLOR", None)
    done = subprocess.run([sys.executable, "-m", "envbuild", "show", "nope", "--matrix", str(FIXED)],
                          capture_output=True, env=env, timeout=60)
    assert done.returncode == 2 and b"unknown backend" in done.stderr and b"\x1b" not in done.stderr + done.stdout
