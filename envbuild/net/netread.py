"""Every answer envbuild reads from the network (a registry, its token service, a package index) is opened here,
and bounded in time twice: each read by a timeout, and the whole answer (connection, headers, body, redirects)
by one deadline, `ENVBUILD_NET_DEADLINE` seconds. A server that drip-feeds a byte a second, or sends its headers
and then nothing, is cut off at the deadline and named; the caller bounds the size.

The standard library's client, not `requests`: the socket is wrapped so that every read gets the time left
before the deadline as its timeout, which no per-read timeout alone can give."""

from __future__ import annotations

import base64
import contextlib
import http.client
import io
import math
import os
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import urljoin, urlsplit

from envbuild.core.errors import InvalidInput, NetDeadline
from envbuild.core.text import shown

DEADLINE = 60.0  # seconds for one whole answer
DEADLINE_ENV = "ENVBUILD_NET_DEADLINE"
READ_TIMEOUT = 30.0  # seconds one read (or the connection) may wait
MAX_REDIRECTS = 10
_REDIRECTS = (301, 302, 303, 307, 308)


def seconds_env(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    """A number of seconds from the environment (an engine's call timeout, its first contact's), else `default`;
    anything but a positive number of ASCII digits, at most a day, is bad input (exit 2), named, not a ValueError."""
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return float(default)
    try:
        value = float(raw) if raw.isascii() else math.nan  # float() reads '１０' as 10
    except ValueError:
        value = math.nan
    if not 0 < value <= 86400:
        raise InvalidInput(f"{name}={shown(raw, limit=40)} is not a number of seconds (more than 0, at most 86400); "
                           f"unset it for the default of {default:g}")
    return value


def deadline_seconds(environ: Mapping[str, str] | None = None) -> float:
    """The deadline of one answer: $ENVBUILD_NET_DEADLINE, else DEADLINE; anything else is bad input, named."""
    return seconds_env(DEADLINE_ENV, DEADLINE, environ)


class _Clock:
    def __init__(self, url: str, seconds: float):
        self.host = urlsplit(url).netloc or url
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def error(self) -> NetDeadline:
        return NetDeadline(f"{shown(self.host[:200])} did not finish its answer within {self.seconds:g} s; cut off "
                           f"(a stalled server or proxy). Try again, or raise {DEADLINE_ENV} (seconds) for a slow link",
                           host=self.host, seconds=self.seconds)

    def check(self) -> float:
        left = self.left()
        if left <= 0:
            raise self.error()
        return left


class _TimedRaw(io.RawIOBase):
    """The socket's reads, each with the time left before the deadline (or the per-read timeout) as its timeout."""

    def __init__(self, sock: socket.socket, clock: _Clock, per_read: float):
        super().__init__()
        self._sock, self._raw, self._clock, self._per_read = sock, sock.makefile("rb", buffering=0), clock, per_read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(min(self._per_read, self._clock.check()))
        try:
            return self._raw.readinto(buffer)
        except TimeoutError:  # socket.timeout
            if self._clock.left() <= 0:
                raise self._clock.error() from None
            raise

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        self._raw.close()  # the socket itself closes when the connection and this file both let go
        super().close()


class _Guarded:
    """A connected socket whose files read under the deadline; everything else is the socket's."""

    def __init__(self, sock: socket.socket, clock: _Clock, per_read: float):
        self._sock, self._clock, self._per_read = sock, clock, per_read

    def makefile(self, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode:
            return self._sock.makefile(mode, *args, **kwargs)
        return io.BufferedReader(_TimedRaw(self._sock, self._clock, self._per_read))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _connect(conn: http.client.HTTPConnection, connect: Callable[[], None], clock: _Clock, per_read: float) -> None:
    """Connect (a proxy's CONNECT and the TLS handshake included: each read of them has only the per-read timeout)
    under a watchdog that shuts the socket at the deadline; then every read of the answer keeps to it."""
    made: list[socket.socket] = []
    create = conn._create_connection  # type: ignore[attr-defined]

    def created(*args: Any, **kwargs: Any) -> socket.socket:
        made.append(create(*args, **kwargs))
        return made[-1]

    def cut() -> None:
        for sock in made:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    conn._create_connection = created  # type: ignore[attr-defined]
    watchdog = threading.Timer(max(0.0, clock.left()), cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        connect()
    except OSError:
        if clock.left() <= 0:
            raise clock.error() from None
        raise
    finally:
        watchdog.cancel()
    clock.check()
    conn.sock = _Guarded(conn.sock, clock, per_read)  # type: ignore[assignment]


def proxy_for(url: str, environ: Mapping[str, str]) -> str | None:
    """The proxy a request to `url` goes through, as the build's would: $HTTPS_PROXY/$HTTP_PROXY (either case) for
    its scheme, unless $NO_PROXY names its host (a domain suffix, host:port, or *); None: directly."""
    parts = urlsplit(url)
    lower = {k.lower(): v for k, v in environ.items() if k.lower() in ("https_proxy", "http_proxy", "no_proxy")}
    proxy = lower.get(f"{parts.scheme}_proxy")
    if not proxy:
        return None
    check_proxy(proxy, f"${parts.scheme}_proxy")
    no = [h.strip().lstrip(".").lower() for h in lower.get("no_proxy", "").split(",") if h.strip()]
    host = (parts.hostname or "").lower()
    if "*" in no or any(host == h or host.endswith("." + h) or f"{host}:{parts.port}" == h for h in no):
        return None
    return proxy


def check_proxy(proxy: str, name: str) -> str:
    """A proxy URL as urllib can use it (http or https, a host, a port that is a number), else InvalidInput (exit 2)
    naming the variable and the value with its password masked: not a ValueError from deep inside a request, in
    every thread that asks."""
    why = None
    try:
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")  # urllib reads a bare host:port as http
        if parts.scheme.lower() not in ("http", "https"):
            why = f"its scheme is {shown(parts.scheme, limit=20)}: a proxy is http:// or https://"
        elif not parts.hostname:
            why = "it names no host"
        else:
            parts.port  # noqa: B018 - raises ValueError for a port that is no number or out of range
    except ValueError as exc:
        why = str(exc)
    if why:
        raise InvalidInput(f"{name}: {shown(without_password(proxy), limit=200)} is not a proxy URL ({why}); give "
                           "http://HOST:PORT (with USER:PASSWORD@ before the host if the proxy asks for a login)")
    return proxy


def without_password(url: str) -> str:
    """A URL as it may be shown: its userinfo's password, if any, as *** (whatever the URL's shape: one that does
    not parse is masked by the output layer's rule, never refused here)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        return url.replace(f":{password}@", ":***@", 1)
    from envbuild.core.output import scrub  # userinfo with no scheme, or a URL urllib cannot split

    return scrub(url, environ={})


def _opener(clock: _Clock, per_read: float, context: ssl.SSLContext | None,
            proxies: dict[str, str] | None = None) -> urllib.request.OpenerDirector:
    class Plain(http.client.HTTPConnection):
        def connect(self) -> None:
            _connect(self, super().connect, clock, per_read)

    class Tls(http.client.HTTPSConnection):
        def connect(self) -> None:
            _connect(self, super().connect, clock, per_read)

    class PlainHandler(urllib.request.HTTPHandler):
        def http_open(self, req: Any) -> Any:
            return self.do_open(Plain, req)

    class TlsHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: Any) -> Any:
            return self.do_open(Tls, req, context=context or ssl.create_default_context())

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # followed by open(), which decides where the credentials go

    handlers: list[Any] = [PlainHandler(), TlsHandler(), NoRedirect()]
    if proxies is not None:  # else urllib's own reading of os.environ
        handlers.append(urllib.request.ProxyHandler(proxies))
    return urllib.request.build_opener(*handlers)


def tls_context(ca_bundle: Path | str | None = None) -> ssl.SSLContext:
    """The system's CAs (which honour SSL_CERT_FILE), or a --ca-bundle's."""
    return ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None)


def basic_auth(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def netrc_login(url: str, path: Path | str | None) -> tuple[str, str] | None:
    """(login, password) a netrc file (--netrc) holds for `url`'s host; None without one, or for a file that cannot
    be read (it was checked where the user gave it: core/files.read_netrc)."""
    import netrc

    if path is None:
        return None
    try:
        found = netrc.netrc(str(path)).authenticators(urlsplit(url).hostname or "")
    except (OSError, netrc.NetrcParseError, UnicodeError, ValueError):
        return None
    return (found[0], found[2]) if found and found[2] else None


class Answer:
    """One HTTP answer, its body not yet read: every read of it keeps to the deadline of the request."""

    def __init__(self, status: int, reason: str, headers: Any, url: str, fp: Any):
        self.status_code, self.reason, self.headers, self.url, self._fp = status, reason, headers, url, fp

    def iter_content(self, size: int = 1 << 16) -> Iterator[bytes]:
        while True:
            chunk = self._fp.read1(size) if hasattr(self._fp, "read1") else self._fp.read(size)
            if not chunk:
                return
            yield chunk

    def read(self, limit: int) -> bytes:
        """At most `limit` + 1 bytes of the body: the caller tells a capped answer by its length."""
        chunks, size = [], 0
        for chunk in self.iter_content(min(1 << 16, limit + 1)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                break
        return b"".join(chunks)

    def close(self) -> None:
        self._fp.close()

    def __enter__(self) -> "Answer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_url(method: str, url: str, *, headers: Mapping[str, str] | None = None, data: bytes | None = None,
             context: ssl.SSLContext | None = None, authorization: str | None = None,
             timeout: float | None = None, same_origin_redirects_auth: bool = False,
             environ: Mapping[str, str] | None = None) -> Answer:
    """Send one request and read the answer's status and headers, within the deadline; an error status is an
    answer, not an exception. Redirects of GET and HEAD are followed; `authorization` goes to the URL asked
    for only (a registry's blob redirect gets none), or with `same_origin_redirects_auth` also to a redirect on the
    same origin (an index's netrc login, as pip and requests send it), never elsewhere. With `environ`, each hop
    goes through the proxy `proxy_for` names in it (else urllib's reading of os.environ). OSError (and http.client's errors, as ConnectionError) when nothing usable answers; NetDeadline
    when the deadline passes, now or while the body is read."""
    clock = _Clock(url, deadline_seconds())
    per_read = timeout or READ_TIMEOUT
    origin = urlsplit(url)[:2]
    for hop in range(MAX_REDIRECTS + 1):
        req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
        if authorization and (hop == 0 or (same_origin_redirects_auth and urlsplit(url)[:2] == origin)):
            req.add_unredirected_header("Authorization", authorization)
        try:
            proxy = proxy_for(url, environ) if environ is not None else None
            proxies = None if environ is None else {urlsplit(url).scheme: proxy} if proxy else {}
            resp: Any = _opener(clock, per_read, context if url.startswith("https:") else None, proxies).open(
                req, timeout=min(per_read, clock.check()))
            status = resp.status
        except urllib.error.HTTPError as exc:
            resp, status = exc, exc.code
        except http.client.HTTPException as exc:  # a cut or garbled answer: unreachable, as a refused connection is
            raise ConnectionError(f"{type(exc).__name__}: {exc}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError) and clock.left() <= 0:
                raise clock.error() from None
            raise
        location = resp.headers.get("Location") if status in _REDIRECTS and method in ("GET", "HEAD") else None
        if location:
            resp.close()
            url = urljoin(url, location)
            if urlsplit(url).scheme not in ("http", "https"):
                raise ConnectionError(f"redirected to a URL that is not http(s): {shown(url[:100])}")
            continue
        return Answer(status, str(getattr(resp, "reason", "") or ""), resp.headers, url, resp)
    raise ConnectionError(f"more than {MAX_REDIRECTS} redirects")
