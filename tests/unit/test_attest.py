"""Unit tests of envbuild/ship/trust/attest.py: an attestation binds to the image it is about."""

from __future__ import annotations

import pytest
from envbuild.core.errors import InvalidInput


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

@pytest.mark.parametrize("image_id", [None, "", "sha256:short", "sha256:" + "a" * 64 + "\n", 42, ["sha256:" + "a" * 64]])
def test_a_smoke_result_that_names_no_image_is_never_attested(image_id):
    from envbuild.ship.trust.attest import attest_smoke

    result = {"backend": "cpu", "ok": True, "checks": []}
    if image_id is not None:
        result["image_id"] = image_id
    for force in (False, True):
        with pytest.raises(InvalidInput, match="names no image"):
            attest_smoke("127.0.0.1:9/none", "cpu", result, key=None, force=force)  # refused before any registry
