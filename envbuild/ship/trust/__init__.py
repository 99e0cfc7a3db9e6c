"""Signed images and signed proof, in cosign's registry format: key pairs (keys), DSSE envelopes of in-toto
statements (dsse), the registry calls that store and read them (oci), signing on publish (sign) and checking
before pull and run (verify)."""

from __future__ import annotations

from envbuild.core.errors import EnvbuildError, InvalidInput


class TrustError(EnvbuildError):
    """Signing or verifying could not be done (no key, wrong passphrase, registry refused)."""


class KeyError_(InvalidInput):
    """A key file or passphrase that cannot be used."""


class VerifyError(EnvbuildError):
    """An image failed verification. `reason` says which way: unsigned, other-key, tampered, smoke-missing,
    smoke-failed, attestation (not an in-toto statement in a DSSE envelope), missing, registry (it could not be asked)."""

    def __init__(self, reason: str, message: str):
        super().__init__(f"refusing the image ({reason}): {message}")
        self.reason = reason
