"""Talking to one registry: log in, push and pull through the engine (its own transfer), ask for a digest through
the one registry client (core/regclient.py); every failure becomes one clear error, with secrets masked: the
registry's (refused, unreachable) a RegistryError, anything else that broke a transfer a PublishError."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from envbuild.core import heartbeat
from envbuild.engine.docker import EngineError, StreamBroken
from envbuild.core.errors import EnvbuildError, PublishError, RegistryAuthError, RegistryError, RegistryUnreachableError
from envbuild.net.credentials import PASSWORD_ENV, USER_ENV, Credentials, Scrubber, from_env
from envbuild.core.imageref import DIGEST, Reference
from envbuild.net.netprobe import unreachable
from envbuild.net.regclient import Registry

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI

_AUTH = re.compile(r"unauthorized|authentication required|no basic auth credentials|denied|forbidden|\b40[13]\b", re.IGNORECASE)
_NETWORK = re.compile(
    r"connection refused|no such host|i/o timeout|network is unreachable|dial tcp|connection reset|"
    r"tls handshake timeout|server misbehaving|no route to host",
    re.IGNORECASE,
)
_NOT_FOUND = re.compile(r"not found|manifest unknown", re.IGNORECASE)
# What may pass if asked again: a server error, a connection cut or refused, a stall. Push, pull and queries are
# idempotent (a layer already pushed is skipped), so they are retried a bounded number of times.
_TRANSIENT = re.compile(
    r"\b50[0234]\b|service unavailable|bad gateway|gateway time-?out|internal server error|connection reset|"
    r"broken pipe|\bEOF\b|i/o timeout|timed? ?out|connection refused|stream broke|did not confirm",
    re.IGNORECASE,
)
ATTEMPTS = 3
STALL = 180.0  # seconds without a byte moving before a push or pull is abandoned ($ENVBUILD_STALL_SECONDS)
# Statuses that mean a step completed (a layer skipped or done): progress, even without a byte count.
_MOVED = {"Pushed", "Layer already exists", "Already exists", "Pull complete", "Download complete", "Verifying Checksum",
          "Extracting", "Pulling fs layer", "Waiting", "Preparing"}
_PROXY_ENV = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def registry_error(host: str, message: str, scrub: Scrubber, action: str, creds: Credentials | None = None,
                   client: str = "docker") -> PublishError | RegistryError:
    """A daemon/registry message -> the error class and a message that says what to do: the registry's failures
    as RegistryErrors (refused, unreachable), whatever else broke the push or pull as a PublishError."""
    msg = scrub(" ".join(message.split()))[:400]
    if _AUTH.search(msg):
        used = f"the credentials from {creds.source}" if creds else "the Docker config (no credentials in the environment)"
        ghcr = " (GHCR takes GITHUB_ACTOR and a GITHUB_TOKEN with packages: write)" if host == "ghcr.io" else ""
        return RegistryAuthError(
            f"authentication failed for {host} while {action} ({msg}); used {used}. Check {USER_ENV} and {PASSWORD_ENV}"
            f"{ghcr}, or run `{client} login {host}`"
        )
    if _NETWORK.search(msg):
        return RegistryUnreachableError(f"registry {host} unreachable while {action} ({msg}): is it running, and is the address right?")
    return PublishError(f"{action} failed: {msg}")


class Session:
    """One registry (the host of `repository`) and the credentials publish and pull use for it."""

    def __init__(self, engine: EngineAPI, repository: str, environ: Mapping[str, str] | None = None):
        self.engine = engine
        # The registry Docker pushes `repository` to, and so the only one its credentials may go to.
        self.host = Reference.parse(repository).registry
        self.creds = from_env(self.host, environ)
        self.scrub = Scrubber(self.creds)
        self.environ = os.environ if environ is None else environ
        self._reachable = False

    def check_reachable(self) -> None:
        """Fail in seconds, naming the cause, when the registry cannot be reached at all. Only where the daemon
        shares this machine's network and no proxy is set (then the daemon may know a way this process does not)."""
        if self._reachable or not self.engine.is_local() or any(self.environ.get(k) for k in _PROXY_ENV):
            return
        why = unreachable(self.host, environ=self.environ)
        if why:
            raise RegistryUnreachableError(f"registry {self.host} unreachable from here ({why}): is it running, is the "
                                           "address right, and is this machine on a network that reaches it?")
        self._reachable = True

    def _retrying(self, action: str, fn: Callable[[], Any], echo: Callable[[str], None]) -> Any:
        """fn(), asked again after a transient failure (1 s, then 2 s later), at most ATTEMPTS times; the final error
        says how many attempts over how long."""
        start, delay = time.monotonic(), 1.0
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return fn()
            except (PublishError, RegistryError) as exc:
                if isinstance(exc, RegistryAuthError) or not _TRANSIENT.search(str(exc)) or attempt == ATTEMPTS:
                    if attempt == 1:
                        raise
                    raise type(exc)(f"{exc} (gave up after {attempt} attempts in {time.monotonic() - start:.1f}s)") from None
                echo(f"{action}: {str(exc)[:160]}; trying again in {delay:g}s (attempt {attempt + 1} of {ATTEMPTS})")
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def _own(self, ref: str) -> None:
        """This session's credentials go with `ref` only when Docker sends `ref` to this session's registry."""
        host = Reference.parse(ref).registry
        if host != self.host:
            raise PublishError(f"{ref} goes to {host}, not to {self.host}: its credentials are not offered there")

    @property
    def auth(self) -> dict[str, str] | None:
        return self.creds.auth_config() if self.creds else None

    def error(self, message: str, action: str) -> PublishError | RegistryError:
        return registry_error(self.host, message, self.scrub, action, self.creds, self.engine.kind)

    def login(self, echo: Callable[[str], None]) -> None:
        """Check the credentials against the registry up front, before anything is pushed or pulled."""
        if not self.creds:
            return
        self.check_reachable()
        echo(f"logging in to {self.host} as {self.creds.username} (from {self.creds.source})")

        def login() -> None:
            try:
                self.engine.login(self.host, self.creds.username, self.creds.password)
            except EngineError as exc:
                raise self.error(exc.explanation, "logging in") from None

        self._retrying(f"logging in to {self.host}", login, echo)

    @contextlib.contextmanager
    def tagged(self, image_id: str, refs: list[str], *, keep: bool) -> Iterator[None]:
        """The image tagged with `refs` for a push: the tags this made are removed after it (keep=False: a
        platform's tag of an index), or only when it fails or is interrupted (keep=True: publish's own tags)."""
        made = [r for r in refs if self.engine.image_id(r) != image_id]
        self.engine.tag(image_id, made)
        pushed = False
        try:
            yield
            pushed = True
        finally:
            if not (pushed and keep):
                for ref in made:
                    try:
                        self.engine.untag(ref)
                    except EnvbuildError:
                        pass

    def push(self, ref: str, echo: Callable[[str], None]) -> str:
        """Push one reference; the digest the registry confirmed, or an error (nothing confirmed)."""
        self._own(ref)
        self.check_reachable()

        def push() -> str:
            digest = self._transfer(lambda: self.engine.push(ref, self.auth), ref, f"pushing {ref}", echo)
            if not digest or not DIGEST.match(digest):
                raise PublishError(f"the push of {ref} broke off: the registry did not confirm a digest; nothing was recorded")
            return digest

        return self._retrying(f"pushing {ref}", push, echo)

    def pull(self, ref: str, echo: Callable[[str], None], missing: str, platform: str | None = None) -> str | None:
        """Pull one reference; the digest the registry named. `missing`: the message for a tag it does not have."""
        self._own(ref)
        self.check_reachable()
        pull = functools.partial(self.engine.pull, ref, self.auth, platform)
        try:
            return self._retrying(f"pulling {ref}", lambda: self._transfer(pull, ref,
                                                                            f"pulling {ref}", echo), echo)
        except (PublishError, RegistryError) as exc:
            if _NOT_FOUND.search(str(exc)):
                raise PublishError(missing) from None
            raise

    def remote_digest(self, ref: str, missing: str, echo: Callable[[str], None] | None = None) -> str:
        """What the registry serves for `ref` now, without pulling it: asked through the one registry client
        (core/regclient.py), with this session's credentials; the digest of the bytes it serves. `echo` hears
        the retries, and every QUIET seconds that it still asks (a slow registry: up to 30 s a read, 3 times)."""
        self._own(ref)
        self.check_reachable()

        def ask() -> str:
            found = Registry(ref, self.environ).manifest(ref)
            if found is None:
                raise PublishError(missing)
            return found.digest

        with heartbeat.waiting(echo, f"asking the registry about {ref}"):
            return self._retrying(f"asking the registry about {ref}", ask, echo or (lambda s: None))

    def _transfer(self, start: Callable, ref: str, action: str, echo: Callable[[str], None]) -> str | None:
        """Consume a push/pull stream; raise on an error line, or when no byte moved for STALL seconds (the daemon
        may retry a cut connection for many minutes, and say nothing meanwhile); return the digest the registry
        confirmed. The stream is read in a thread, so that a silent one is noticed too."""
        digest = None
        stall = float(self.environ.get("ENVBUILD_STALL_SECONDS") or STALL)
        moved, last, done = time.monotonic(), "", {}
        # a heartbeat: the daemon's layer lines are not shown, so a long transfer says how it goes every QUIET s
        begun = said = moved
        latest, quiet = "", heartbeat.QUIET
        events: queue.Queue = queue.Queue()
        try:  # the engine may refuse at once (no credentials, no such tag): said like any registry error
            stream = start()
        except EngineError as exc:
            raise self.error(exc.explanation, action) from None

        def pump() -> None:
            try:
                for item in stream:
                    events.put(("line", item))
                events.put(("end", None))
            except BaseException as exc:  # handed to the reader, raised there
                events.put(("error", exc))

        def stalled_error() -> PublishError:
            return PublishError(f"{action} timed out: no data moved for {stall:g}s (the daemon said: {last or 'nothing'})")

        reader = threading.Thread(target=pump, name="envbuild-transfer", daemon=True)
        reader.start()
        stalled = False
        try:
            while True:
                now = time.monotonic()
                if now - said >= quiet:
                    said = now
                    echo(f"still {action}: {now - begun:.0f}s{f' ({latest})' if latest else ''}")
                try:
                    kind, line = events.get(timeout=max(0.1, min(stall - (now - moved), quiet - (now - said))))
                except queue.Empty:
                    if time.monotonic() - moved < stall:
                        continue  # time for the heartbeat
                    stalled = True
                    raise stalled_error() from None
                if kind == "end":
                    break
                if kind == "error":
                    raise line
                if line.get("error") or line.get("errorDetail"):
                    detail = line.get("errorDetail") or {}
                    raise self.error(str(detail.get("message") or line.get("error")), action)
                layer, current = line.get("id"), (line.get("progressDetail") or {}).get("current")
                status = str(line.get("status") or "")
                if isinstance(current, int) and current > done.get(layer, -1) or status in _MOVED:
                    done[layer] = current if isinstance(current, int) else done.get(layer, -1)
                    moved = time.monotonic()
                elif status:
                    last = f"{layer}: {status}" if layer else status
                if layer and status:
                    bar = str(line.get("progress") or "").rpartition("]")[2].strip()  # "[==>  ] 1.2GB/3GB": the sizes
                    latest = self.scrub(f"{layer}: {status}{' ' + bar if bar else ''}")[:120]
                if time.monotonic() - moved > stall:  # lines keep coming, none of them progress
                    stalled = True
                    raise stalled_error()
                aux = line.get("aux") or {}
                if isinstance(aux, dict) and aux.get("Digest"):
                    digest = str(aux["Digest"])
                if status.startswith("Digest: "):  # pull's confirmation
                    digest = status.split(" ", 1)[1].strip()
                elif status and not line.get("id") and not line.get("progressDetail"):
                    said = time.monotonic()
                    echo(self.scrub(status))
        except EngineError as exc:
            raise self.error(exc.explanation, action) from None
        except StreamBroken as exc:
            raise PublishError(self.scrub(f"{exc}; the registry did not confirm {ref}")) from None
        finally:
            if reader.is_alive() or stalled:
                # The reader still waits on the connection: closing the engine's connections ends it, and with it the
                # daemon's transfer (the engine reconnects on its next use).
                self.engine.close()
                reader.join(timeout=10)
            else:
                close = getattr(stream, "close", None)
                if close:
                    close()
        return digest
