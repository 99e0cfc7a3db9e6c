"""Unit tests of envbuild/net/credentials.py: registry secrets, masked in every form."""

from __future__ import annotations

import base64


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

def test_registry_secrets_are_masked_in_every_form(monkeypatch):
    from envbuild.net.credentials import Scrubber

    monkeypatch.setenv("ENVBUILD_REGISTRY_USER", "robot")
    monkeypatch.setenv("ENVBUILD_REGISTRY_PASSWORD", "s3cr3t-p@ss")
    b64 = base64.b64encode(b"robot:s3cr3t-p@ss").decode()
    text = f"auth {b64} url https://robot:s3cr3t-p%40ss@reg/ plain s3cr3t-p@ss pair robot:s3cr3t-p@ss"
    scrubbed = Scrubber.from_environment()(text)
    assert "s3cr3t" not in scrubbed and b64 not in scrubbed and b64.rstrip("=") not in scrubbed
