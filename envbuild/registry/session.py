"""Talking to one registry through the engine: log in, push, pull, ask for a digest; every failure becomes
one clear error (authentication, unreachable, or what the registry said), with secrets masked."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Mapping

from ..engine import EngineError, StreamBroken
from ..errors import PublishError, RegistryAuthError, RegistryUnreachableError
from .credentials import PASSWORD_ENV, USER_ENV, Credentials, Scrubber, from_env
from .refs import DIGEST, registry_host

if TYPE_CHECKING:
    from ..engine import Engine

_AUTH = re.compile(r"unauthorized|authentication required|no basic auth credentials|denied|forbidden|\b40[13]\b", re.IGNORECASE)
_NETWORK = re.compile(
    r"connection refused|no such host|i/o timeout|network is unreachable|dial tcp|connection reset|"
    r"tls handshake timeout|server misbehaving|no route to host",
    re.IGNORECASE,
)
_NOT_FOUND = re.compile(r"not found|manifest unknown", re.IGNORECASE)


def registry_error(host: str, message: str, scrub: Scrubber, action: str, creds: Credentials | None = None) -> PublishError:
    """A daemon/registry message -> the error class and a message that says what to do."""
    msg = scrub(" ".join(message.split()))[:400]
    if _AUTH.search(msg):
        used = f"the credentials from {creds.source}" if creds else "the Docker config (no credentials in the environment)"
        ghcr = " (GHCR takes GITHUB_ACTOR and a GITHUB_TOKEN with packages: write)" if host == "ghcr.io" else ""
        return RegistryAuthError(
            f"authentication failed for {host} while {action} ({msg}); used {used}. Check {USER_ENV} and {PASSWORD_ENV}"
            f"{ghcr}, or run `docker login {host}`"
        )
    if _NETWORK.search(msg):
        return RegistryUnreachableError(f"registry {host} unreachable while {action} ({msg}): is it running, and is the address right?")
    return PublishError(f"{action} failed: {msg}")


class Session:
    """One registry (the host of `repository`) and the credentials publish and pull use for it."""

    def __init__(self, engine: Engine, repository: str, environ: Mapping[str, str] | None = None):
        self.engine = engine
        self.host = registry_host(repository)
        self.creds = from_env(self.host, environ)
        self.scrub = Scrubber(self.creds)

    @property
    def auth(self) -> dict[str, str] | None:
        return self.creds.auth_config() if self.creds else None

    def error(self, message: str, action: str) -> PublishError:
        return registry_error(self.host, message, self.scrub, action, self.creds)

    def login(self, echo: Callable[[str], None]) -> None:
        """Check the credentials against the registry up front, before anything is pushed or pulled."""
        if not self.creds:
            return
        echo(f"logging in to {self.host} as {self.creds.username} (from {self.creds.source})")
        try:
            self.engine.login(self.host, self.creds.username, self.creds.password)
        except EngineError as exc:
            raise self.error(exc.explanation, "logging in") from None

    def push(self, ref: str, echo: Callable[[str], None]) -> str:
        """Push one reference; the digest the registry confirmed, or an error (nothing confirmed)."""
        digest = self._transfer(lambda: self.engine.push(ref, self.auth), ref, f"pushing {ref}", echo)
        if not digest or not DIGEST.match(digest):
            raise PublishError(f"the push of {ref} broke off: the registry never confirmed a digest; nothing was recorded")
        return digest

    def pull(self, ref: str, echo: Callable[[str], None], missing: str) -> str | None:
        """Pull one reference; the digest the registry named. `missing`: the message for a tag it does not have."""
        try:
            return self._transfer(lambda: self.engine.pull(ref, self.auth), ref, f"pulling {ref}", echo)
        except PublishError as exc:
            if _NOT_FOUND.search(str(exc)):
                raise PublishError(missing) from None
            raise

    def remote_digest(self, ref: str, missing: str) -> str:
        """What the registry serves for `ref` now, without pulling it."""
        try:
            return self.engine.registry_digest(ref, self.auth)
        except EngineError as exc:
            if exc.not_found or _NOT_FOUND.search(exc.explanation):
                raise PublishError(missing) from None
            raise self.error(exc.explanation, f"asking the registry about {ref}") from None

    def _transfer(self, start: Callable, ref: str, action: str, echo: Callable[[str], None]) -> str | None:
        """Consume a push/pull stream; raise on an error line; return the digest the registry confirmed."""
        digest = None
        try:
            for line in start():
                if line.get("error") or line.get("errorDetail"):
                    detail = line.get("errorDetail") or {}
                    raise self.error(str(detail.get("message") or line.get("error")), action)
                aux = line.get("aux") or {}
                if isinstance(aux, dict) and aux.get("Digest"):
                    digest = str(aux["Digest"])
                status = str(line.get("status") or "")
                if status.startswith("Digest: "):  # pull's confirmation
                    digest = status.split(" ", 1)[1].strip()
                elif status and not line.get("id") and not line.get("progressDetail"):
                    echo(self.scrub(status))
        except EngineError as exc:
            raise self.error(exc.explanation, action) from None
        except StreamBroken as exc:
            raise PublishError(self.scrub(f"{exc}; the registry did not confirm {ref}")) from None
        return digest
