"""Is each package index and registry a step needs answering, from this machine, within seconds?

Asked all at once (one thread each), with one budget for all: a refused connection answers at once, a host that
accepts and never answers is given up on when the budget ends. The request goes as the build's would: through
$HTTPS_PROXY/$HTTP_PROXY unless $NO_PROXY names the host, trusting the CA bundle given (else the system's).
The build's own RUN steps may see another network (BuildKit's, --network): what is probed is this machine's view.
A registry is asked by the registry client (regclient.py: its transport, proxy, CA and netrc handling), a
package index's page here; what is kept here is the asking all at once, the budget and the words of the result.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from envbuild.core.errors import EnvbuildError
from envbuild.net.netread import basic_auth, netrc_login
from envbuild.net.netread import proxy_for as _proxy
from envbuild.net.netread import without_password as _no_password

BUDGET = 5.0  # seconds for every probe of a step together
CONNECT = 3.0  # a blackholed host: given up on after this


SILENT = "no answer"  # how a probe begins "it said nothing in time": outdated reads a deadline from it


@dataclass(frozen=True)
class Target:
    kind: str  # "index" or "registry"
    name: str  # the index URL or the registry host, as the user knows it
    url: str  # what is asked (a cheap page: an index's project page, a registry's /v2/)
    purpose: str  # what it serves, e.g. "torch for cpu"


@dataclass(frozen=True)
class Result:
    target: Target
    ok: bool
    detail: str  # "HTTP 200 in 0.1 s" or why not
    via: str  # "directly" or "through the proxy http://proxy:3128"
    seconds: float

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.target.url).hostname or self.target.name


def index_target(index_url: str, project: str, purpose: str) -> Target:
    """An index's page of one project (PEP 503: INDEX/NAME/): small, and what the resolver asks first."""
    return Target("index", index_url, index_url.rstrip("/") + f"/{project}/", purpose)


def _registry_host(name: str) -> str:
    return "docker.io" if name == "index.docker.io" else name


def registry_target(host: str, purpose: str) -> Target:
    """A registry's API root, where the registry client (regclient.py) asks it (Registry.ping): 200 or 401
    both say it is a registry that answers."""
    from envbuild.net.regclient import api_root

    return Target("registry", host, f"{api_root(_registry_host(host))}/v2/", purpose)


def _ask(target: Target, environ: Mapping[str, str], ca_bundle: Path | None, netrc: Path | None,
         timeout: float) -> tuple[bool, str, str]:
    """(answers, what it answered or why not, how it was asked) for one target: a registry through the registry
    client, an index's page here."""
    if target.kind == "registry":
        return _ask_registry(target, environ, ca_bundle, netrc, timeout)
    import ssl  # with urllib.request and http.client: 40 ms, paid only by a step that probes
    import urllib.error
    import urllib.request

    proxy = _proxy(target.url, environ)
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler(
        {urllib.parse.urlsplit(target.url).scheme: proxy} if proxy else {})]
    context = ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None)
    handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    request = urllib.request.Request(target.url, method="GET", headers={"User-Agent": "envbuild-probe"})
    if login := netrc_login(target.url, netrc):
        request.add_header("Authorization", basic_auth(*login))
    via = f"through the proxy {_no_password(proxy)}" if proxy else "directly"
    try:
        with opener.open(request, timeout=timeout) as response:
            response.read(1)
            return True, f"HTTP {response.status}", via
    except urllib.error.HTTPError as exc:
        status = exc.code
        if target.kind == "registry" and status == 401:
            return True, "HTTP 401 (asks for a login: it answers)", via
        if status in (401, 403):
            return False, (f"HTTP {status}: it refuses without credentials (give them in a netrc file: --netrc FILE, "
                           "or netrc in the settings)"), via
        if status == 404 and target.kind == "index":
            return True, "HTTP 404 for this project (the index answers)", via
        if status == 407:
            return False, "HTTP 407: the proxy asks for credentials (put them in $HTTPS_PROXY)", via
        return False, f"HTTP {status}", via
    except urllib.error.URLError as exc:
        if target.kind == "registry" and isinstance(exc.reason, ssl.SSLCertVerificationError):
            # the engine has its own trust (certs.d, insecure-registries): the registry answered, that is enough
            return True, f"answers (TLS not verified from here: {exc.reason.verify_message})", via
        return False, _reason(exc.reason), via
    except (OSError, ssl.SSLError) as exc:  # a reset, a timeout while reading
        return False, _reason(exc), via


def _ask_registry(target: Target, environ: Mapping[str, str], ca_bundle: Path | None, netrc: Path | None,
                  timeout: float) -> tuple[bool, str, str]:
    """The registry's /v2/ as the registry client asks it (Registry.ping), said in the probe's words."""
    import ssl

    from envbuild.core.errors import EnvbuildError, RegistryDeadlineError, RegistryUnreachableError
    from envbuild.net.regclient import Registry

    via = "directly"
    try:
        registry = Registry(_registry_host(target.name), environ, ca_bundle, publish=False, netrc=netrc)
        via = registry.via()
        status = registry.ping(timeout)
    except RegistryDeadlineError:
        return False, f"{SILENT} (timed out)", via
    except RegistryUnreachableError as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, ssl.SSLCertVerificationError):
            # the engine has its own trust (certs.d, insecure-registries): the registry answered, that is enough
            return True, f"answers (TLS not verified from here: {reason.verify_message})", via
        return False, _reason(reason), via
    except EnvbuildError as exc:  # a Docker config or setting that cannot be read: said, not a dead thread
        return False, str(exc), via
    if status == 401:
        return True, "HTTP 401 (asks for a login: it answers)", via
    if status < 400:
        return True, f"HTTP {status}", via
    if status == 403:
        return False, ("HTTP 403: it refuses without credentials (give them in a netrc file: --netrc FILE, "
                       "or netrc in the settings)"), via
    if status == 407:
        return False, "HTTP 407: the proxy asks for credentials (put them in $HTTPS_PROXY)", via
    return False, f"HTTP {status}", via


def _reason(reason: object) -> str:
    import socket
    import ssl

    if isinstance(reason, socket.timeout) or "timed out" in str(reason):
        return f"{SILENT} (timed out)"
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (f"TLS: {reason.verify_message or reason} (a TLS-inspecting proxy? give its CA bundle: --ca-bundle FILE, "
                "or ca_bundle in the settings)")
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, socket.gaierror):
        return "the name does not resolve (no DNS answer for the host)"
    return str(getattr(reason, "strerror", None) or reason)


def probe(targets: list[Target], *, ca_bundle: Path | None = None, netrc: Path | None = None,
          environ: Mapping[str, str] | None = None, budget: float = BUDGET) -> list[Result]:
    """Every target, at once, within `budget` seconds in all; in the order given, one result each."""
    env = os.environ if environ is None else environ
    unique = list(dict.fromkeys(targets))
    found: dict[Target, Result] = {}
    start = time.monotonic()

    for target in unique:  # a proxy that is no URL: one exit-2 error here, not a traceback in every thread
        _proxy(target.url, env)

    def one(target: Target) -> None:
        began = time.monotonic()
        try:
            ok, detail, via = _ask(target, env, ca_bundle, netrc, min(CONNECT, budget))
        except (EnvbuildError, OSError, ValueError) as exc:  # said as this target's answer, never a thread traceback
            ok, detail, via = False, str(exc), "directly"
        found[target] = Result(target, ok, detail, via, time.monotonic() - began)

    threads = [threading.Thread(target=one, args=(t,), daemon=True, name=f"probe {t.url}") for t in unique]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, budget - (time.monotonic() - start)))
    spent = time.monotonic() - start
    out = []
    for target in targets:
        result = found.get(target)
        if result is None:  # still waiting: a host that accepted and never answered
            proxy = _proxy(target.url, env)
            result = Result(target, False, f"{SILENT} within {budget:.0f} s",
                            f"through the proxy {_no_password(proxy)}" if proxy else "directly", spent)
        out.append(result)
    return out


def unreachable(host: str, *, ca_bundle: Path | None = None, environ: Mapping[str, str] | None = None,
                budget: float = BUDGET) -> str | None:
    """Why the registry at `host` gives this machine no answer at all within `budget` seconds, in the probe's words
    (None: it answers, whatever it says). Publish and outdated ask first: a host that never answers would otherwise
    hold their requests (and the daemon's retries) for minutes without a word."""
    (result,) = probe([registry_target(host, "reachability")], ca_bundle=ca_bundle, environ=environ, budget=budget)
    # A refusal in HTTP (403, 407, 5xx) is an answer: the requests that follow say what it means.
    return None if result.ok or result.detail.startswith("HTTP ") else result.detail
