"""Unit tests of envbuild/core/output.py: the one output layer (what it scrubs from logs)."""

from __future__ import annotations


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

def test_a_build_log_keeps_a_uid_after_getent_passwd():
    from envbuild.core.output import scrub

    assert scrub("RUN if getent passwd 1000 >/dev/null; then", environ={}).endswith("passwd 1000 >/dev/null; then")
    assert scrub("machine h login u password hunter22", environ={}).endswith("password ***")
