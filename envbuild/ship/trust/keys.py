"""Key pairs in cosign's format, so `cosign verify --key cosign.pub` checks what envbuild signs.

cosign.key: PEM "ENCRYPTED SIGSTORE PRIVATE KEY" around JSON {"kdf": scrypt (N=32768, r=8, p=1, 32-byte salt),
"cipher": nacl/secretbox (24-byte nonce), "ciphertext"} sealing the PKCS#8 DER of an ECDSA P-256 key (byte strings
in standard base64, as Go's encoding/json writes them). cosign.pub: PEM "PUBLIC KEY" (SubjectPublicKeyInfo).
The passphrase comes from ENVBUILD_KEY_PASSWORD, else COSIGN_PASSWORD, else a prompt: never from argv, never shown.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import nacl.exceptions
import nacl.secret
import nacl.utils
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from envbuild.core.files import read_user
from envbuild.ship.trust import KeyError_

PRIVATE_PEM = "ENCRYPTED SIGSTORE PRIVATE KEY"
PRIVATE_PEM_OLD = "ENCRYPTED COSIGN PRIVATE KEY"  # what cosign wrote before 2.0; still read
PASSWORD_ENV = ("ENVBUILD_KEY_PASSWORD", "COSIGN_PASSWORD")
SIGNING_KEY_ENV = "ENVBUILD_SIGNING_KEY"  # the private key's PEM text (a CI secret)
VERIFY_KEY_ENV = "ENVBUILD_VERIFY_KEY"  # a public key file, or its PEM text
SCRYPT = {"N": 32768, "r": 8, "p": 1}
_PEM = re.compile(r"-----BEGIN ([A-Z ]+)-----\s*(.*?)\s*-----END \1-----", re.DOTALL)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _pem(kind: str, data: bytes) -> bytes:
    body = _b64(data)
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return ("\n".join([f"-----BEGIN {kind}-----", *lines, f"-----END {kind}-----"]) + "\n").encode("ascii")


def _unpem(text: bytes, source: str) -> tuple[str, bytes]:
    found = _PEM.search(text.decode("ascii", "replace"))
    if not found:
        raise KeyError_(f"{source}: not a PEM key (no -----BEGIN ...----- block)")
    try:
        return found.group(1), base64.b64decode("".join(found.group(2).split()), validate=True)
    except ValueError:
        raise KeyError_(f"{source}: the PEM block is not valid base64") from None


def _box_key(passphrase: bytes, salt: bytes, params: Mapping[str, int]) -> bytes:
    # hashlib's scrypt (OpenSSL) needs more than its default 32 MiB for N=32768, r=8: 128*N*r bytes and some
    need = 128 * int(params["N"]) * int(params["r"]) * (int(params["p"]) + 2)
    return hashlib.scrypt(passphrase, salt=salt, n=int(params["N"]), r=int(params["r"]), p=int(params["p"]),
                          maxmem=need + (1 << 20), dklen=32)


def encrypt(plaintext: bytes, passphrase: bytes) -> bytes:
    """securesystemslib's `encrypted` envelope (the one cosign uses): JSON bytes."""
    salt = nacl.utils.random(32)
    nonce = nacl.utils.random(nacl.secret.SecretBox.NONCE_SIZE)
    box = nacl.secret.SecretBox(_box_key(passphrase, salt, SCRYPT))
    sealed = box.encrypt(plaintext, nonce).ciphertext  # tag + ciphertext, as Go's secretbox.Seal
    doc = {"kdf": {"name": "scrypt", "params": SCRYPT, "salt": _b64(salt)},
           "cipher": {"name": "nacl/secretbox", "nonce": _b64(nonce)}, "ciphertext": _b64(sealed)}
    return json.dumps(doc, separators=(",", ":")).encode("ascii")


def decrypt(envelope: bytes, passphrase: bytes, source: str) -> bytes:
    try:
        doc = json.loads(envelope)
        kdf, cipher = doc["kdf"], doc["cipher"]
        if kdf["name"] != "scrypt" or cipher["name"] != "nacl/secretbox":
            raise KeyError_(f"{source}: kdf {kdf['name']!r} / cipher {cipher['name']!r} not supported (scrypt, nacl/secretbox)")
        params = {k: int(kdf["params"][k]) for k in ("N", "r", "p")}
        if not (2 <= params["N"] <= 1 << 20 and params["r"] <= 32 and params["p"] <= 16):
            raise KeyError_(f"{source}: scrypt parameters {params} are out of range")
        salt, nonce = base64.b64decode(kdf["salt"]), base64.b64decode(cipher["nonce"])
        sealed = base64.b64decode(doc["ciphertext"])
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise KeyError_(f"{source}: not an encrypted cosign key (expected kdf, cipher and ciphertext)") from None
    try:
        return nacl.secret.SecretBox(_box_key(passphrase, salt, params)).decrypt(sealed, nonce)
    except (nacl.exceptions.CryptoError, ValueError):
        raise KeyError_(f"{source}: wrong passphrase (or a damaged key file)") from None


def passphrase(environ: Mapping[str, str] | None = None, prompt: Callable[[str], str] | None = None, *,
               confirm: bool = False) -> bytes:
    """The key's passphrase: $ENVBUILD_KEY_PASSWORD, $COSIGN_PASSWORD, else asked (twice with confirm)."""
    env = os.environ if environ is None else environ
    for name in PASSWORD_ENV:
        if name in env:
            return env[name].encode("utf-8", "surrogateescape")  # the bytes the variable holds, UTF-8 or not
    if prompt is None:
        raise KeyError_(f"no passphrase: set {PASSWORD_ENV[0]} (or {PASSWORD_ENV[1]}), or run on a terminal to be asked")
    first = prompt("Passphrase for the private key")
    if confirm and prompt("Repeat the passphrase") != first:
        raise KeyError_("the passphrases did not match; nothing was written")
    return first.encode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class KeyPair:
    private_pem: bytes  # encrypted
    public_pem: bytes


def generate(secret: bytes) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return KeyPair(_pem(PRIVATE_PEM, encrypt(der, secret)), public)


def write_pair(prefix: Path, secret: bytes, *, force: bool = False) -> tuple[Path, Path]:
    """PREFIX.key (mode 0600) and PREFIX.pub; refuses to overwrite either unless force. Each is written to a new
    file of its own (created exclusively, 0600 from the start, never through a link: a stale or planted file in
    the way is not reused) and then renamed over its name, both or neither: a link standing there is replaced,
    never followed."""
    from envbuild.core.files import commit, stage

    priv, pub = prefix.with_name(prefix.name + ".key"), prefix.with_name(prefix.name + ".pub")
    for path in (priv, pub):
        if os.path.lexists(path) and not force:
            raise KeyError_(f"{path} exists: keep it, choose another --output-key-prefix, or pass --force")
        if os.path.isdir(path):
            raise KeyError_(f"{path} is a folder: choose another --output-key-prefix")
    pair = generate(secret)
    try:
        staged = {**stage({priv: pair.private_pem}, 0o600), **stage({pub: pair.public_pem}, 0o644)}
        commit(staged)
    except OSError as exc:
        raise KeyError_(f"cannot write {exc.filename or prefix}: {exc.strerror or exc}; no key was written") from None
    return priv, pub


class SigningKey:
    """An unlocked private key; signs ECDSA P-256 / SHA-256, DER (what cosign writes and reads)."""

    def __init__(self, key, source: str):
        self._key = key
        self.source = source

    def __repr__(self) -> str:
        return f"SigningKey({self.source})"

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data, ec.ECDSA(hashes.SHA256()))

    def public(self) -> "PublicKey":
        return PublicKey(self._key.public_key(), self.source + " (its public half)")


class PublicKey:
    def __init__(self, key, source: str):
        self._key = key
        self.source = source

    def verify(self, signature: bytes, data: bytes) -> bool:
        try:
            self._key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
            return True
        except (InvalidSignature, ValueError):
            return False

    def pem(self) -> bytes:
        return self._key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def fingerprint(self) -> str:
        """sha256 of the DER public key: names the key in messages without printing it."""
        der = self._key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return "sha256:" + hashlib.sha256(der).hexdigest()


def load_private(text: bytes, secret: bytes, source: str) -> SigningKey:
    kind, body = _unpem(text, source)
    if kind not in (PRIVATE_PEM, PRIVATE_PEM_OLD):
        raise KeyError_(f"{source}: a '{kind}' PEM block, not a cosign private key ('{PRIVATE_PEM}'; make one with `envbuild keygen`)")
    der = decrypt(body, secret, source)
    try:
        key = serialization.load_der_private_key(der, password=None)
    except ValueError:
        raise KeyError_(f"{source}: the decrypted key is not PKCS#8") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise KeyError_(f"{source}: only ECDSA P-256 keys are supported (cosign's default)")
    return SigningKey(key, source)


def load_public(text: bytes, source: str) -> PublicKey:
    kind, _ = _unpem(text, source)
    if kind != "PUBLIC KEY":
        raise KeyError_(f"{source}: a '{kind}' PEM block, not a public key (give the .pub file)")
    try:
        key = serialization.load_pem_public_key(text)
    except ValueError:
        raise KeyError_(f"{source}: not a readable public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise KeyError_(f"{source}: only ECDSA P-256 keys are supported (cosign's default)")
    return PublicKey(key, source)


def _read(path: str, what: str) -> bytes:
    return read_user(Path(path), f"{what} {path}", KeyError_, limit=64 << 10)


def signing_key(given: str | None, environ: Mapping[str, str] | None = None,
                prompt: Callable[[str], str] | None = None) -> SigningKey | None:
    """The key publish signs with: --sign-key FILE (or env://VAR), else $ENVBUILD_SIGNING_KEY (its PEM text), else
    None (publish does not sign)."""
    env = os.environ if environ is None else environ
    if given and given.startswith("env://"):
        name = given[len("env://"):]
        if not env.get(name):
            raise KeyError_(f"--sign-key {given}: ${name} is not set")
        text, source = env[name].encode("utf-8", "surrogateescape"), f"${name}"
    elif given:
        text, source = _read(given, "--sign-key"), given
    elif env.get(SIGNING_KEY_ENV):
        text, source = env[SIGNING_KEY_ENV].encode("utf-8", "surrogateescape"), f"${SIGNING_KEY_ENV}"
    else:
        return None
    if PRIVATE_PEM not in text.decode("ascii", "replace") and PRIVATE_PEM_OLD not in text.decode("ascii", "replace"):
        raise KeyError_(f"{source}: not a cosign private key ('{PRIVATE_PEM}'; make one with `envbuild keygen`)")
    return load_private(text, passphrase(env, prompt), source)


def verify_key(given: str | None, environ: Mapping[str, str] | None = None, default: str | None = None) -> PublicKey | None:
    """The key pull, run and verify check with: --key FILE, else $ENVBUILD_VERIFY_KEY (a file or PEM text), else
    `default` (the matrix's trust.public_key), else None (nothing to verify with)."""
    env = os.environ if environ is None else environ
    value, what = (given, "--key") if given else (env.get(VERIFY_KEY_ENV), f"${VERIFY_KEY_ENV}") if env.get(VERIFY_KEY_ENV) else (default, "trust.public_key")
    if not value:
        return None
    if value.lstrip().startswith("-----BEGIN"):
        return load_public(value.encode("utf-8", "surrogateescape"), what)
    return load_public(_read(value, what), value)
