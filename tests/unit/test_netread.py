"""Every network answer envbuild reads has one deadline (core/netread.py, ENVBUILD_NET_DEADLINE): a server that
drip-feeds a byte a second, or sends its headers and then nothing, is cut off within the deadline plus a few
seconds, naming the host and the deadline. One fault server per test, on 127.0.0.1, that stops by itself; no Docker."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from support.loopback import serve

DEADLINE = 1  # second: ENVBUILD_NET_DEADLINE in these tests (the servers drip a byte a second)
SLACK = 4  # what a test allows past the deadline


class FaultServer:
    """A loopback HTTP server that answers every request badly. `drip`: status line, headers and body one byte a
    second; `silent`: the headers of a 200 with a body, then nothing; `drip-body`: the headers at once, the body a
    byte a second. Each connection gives up after 30 s, and close() ends them all."""

    def __init__(self, mode: str):
        self.mode = mode
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.host = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        ended = time.monotonic() + 30
        body = b'{"schemaVersion": 2}' + b" " * 1000
        head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body))
        with conn:
            try:
                conn.settimeout(10)
                seen = b""
                while b"\r\n\r\n" not in seen and len(seen) < 65536:
                    part = conn.recv(4096)
                    if not part:
                        return
                    seen += part
                self.requests += 1
                if self.mode == "silent":
                    conn.sendall(head)
                    self.stop.wait(ended - time.monotonic())
                    return
                if self.mode == "drip-body":
                    conn.sendall(head)
                    head = b""
                for byte in head + body:
                    if self.stop.wait(1.0) or time.monotonic() > ended:
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


MODES = ["drip", "silent", "drip-body"]


@pytest.fixture(params=MODES)
def server(request, monkeypatch):
    monkeypatch.setenv("ENVBUILD_NET_DEADLINE", str(DEADLINE))
    srv = FaultServer(request.param)
    yield srv
    srv.close()


def _cut_off(call, error):
    """`call` fails with `error` within the deadline plus the slack, naming the deadline; the message."""
    started = time.monotonic()
    with pytest.raises(error) as err:
        call()
    took = time.monotonic() - started
    assert took < DEADLINE + SLACK, f"took {took:.1f} s"
    assert f"within {DEADLINE} s" in str(err.value) and "ENVBUILD_NET_DEADLINE" in str(err.value), str(err.value)
    return str(err.value)


def test_a_registry_manifest_read_is_cut_off_at_the_deadline(server):
    from envbuild.core.errors import RegistryDeadlineError
    from envbuild.net.regclient import Registry

    message = _cut_off(lambda: Registry(f"{server.host}/team/app").read_manifest("team/app", "cpu"), RegistryDeadlineError)
    assert server.host in message


def test_a_registry_blob_tags_and_digest_reads_are_cut_off(server):
    from envbuild.core.errors import RegistryDeadlineError
    from envbuild.net.regclient import Registry

    registry = Registry(f"{server.host}/team/app")
    _cut_off(lambda: registry.read_blob("team/app", "sha256:" + "a" * 64), RegistryDeadlineError)
    _cut_off(lambda: registry.tags("team/app"), RegistryDeadlineError)
    _cut_off(lambda: registry.ping(30), RegistryDeadlineError)
    if server.mode == "drip":  # a HEAD's answer is its headers: complete in the other modes
        _cut_off(lambda: registry.head_digest("team/app", "cpu"), RegistryDeadlineError)


def test_a_token_service_is_cut_off_at_the_deadline(server):
    """The registry answers at once, asking for a token; its token service drips."""
    import http.server

    from envbuild.core.errors import RegistryDeadlineError
    from envbuild.net.regclient import Registry

    class Challenge(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="http://{server.host}/token",service="x"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    with serve(Challenge) as host:
        message = _cut_off(lambda: Registry(f"{host}/team/app").read_manifest("team/app", "cpu"), RegistryDeadlineError)
        assert server.host in message  # the token service is the one named


def test_tag_listing_for_outdated_is_cut_off(server):
    from envbuild.core.imageref import Reference
    from envbuild.maintain.sources.index import SourceError
    from envbuild.maintain.sources.tags import RegistryClient

    ref = Reference.parse(f"{server.host}/team/base:1.0")
    _cut_off(lambda: RegistryClient().tags(ref), SourceError)
    if server.mode == "drip":
        _cut_off(lambda: RegistryClient().digest(ref, "1.0"), SourceError)


def test_a_package_index_read_is_cut_off(server):
    from envbuild.maintain.sources.index import File, IndexClient, SourceError
    from packaging.version import Version

    message = _cut_off(lambda: IndexClient().files(f"http://{server.host}/simple", "torch"), SourceError)
    assert server.host in message
    wheel = File("x-1.0-py3-none-any.whl", f"http://{server.host}/x-1.0-py3-none-any.whl", Version("1.0"))
    _cut_off(lambda: IndexClient().file_metadata(wheel), SourceError)


def test_a_lock_base_digest_read_is_cut_off(server):
    from envbuild.core.errors import LockError
    from envbuild.image.lockstate import base_digest

    class Opts:
        ca_bundle = None

    class Backend:
        name = "cpu"

    _cut_off(lambda: base_digest(Backend(), f"{server.host}/team/base:1.0", "linux/amd64", Opts()), LockError)


@pytest.mark.parametrize("mode", ["drip", "silent"])
def test_verify_against_a_stalling_registry_exits_1_naming_host_and_deadline(mode, invoke, tmp_path, monkeypatch):
    from envbuild.ship.trust import keys

    monkeypatch.setenv("ENVBUILD_NET_DEADLINE", str(DEADLINE))
    server = FaultServer(mode)
    try:
        key = tmp_path / "k.pub"
        key.write_bytes(keys.generate(b"x").public_pem)
        started = time.monotonic()
        result = invoke("verify", f"{server.host}/team/app:cpu", "--key", key)
        assert time.monotonic() - started < DEADLINE + SLACK
        assert result.exit_code == 1, result.output
        assert server.host in result.output and f"within {DEADLINE} s" in result.output, result.output
    finally:
        server.close()


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf", "1e9", "６０", "٦٠"])
def test_a_deadline_that_is_no_number_of_seconds_exits_2(value, monkeypatch):
    from envbuild.net import netread
    from envbuild.core.errors import InvalidInput

    monkeypatch.setenv("ENVBUILD_NET_DEADLINE", value)
    with pytest.raises(InvalidInput, match="ENVBUILD_NET_DEADLINE"):
        netread.deadline_seconds()


def test_the_default_deadline_holds_without_the_variable(monkeypatch):
    from envbuild.net import netread

    monkeypatch.delenv("ENVBUILD_NET_DEADLINE", raising=False)
    assert netread.deadline_seconds() == netread.DEADLINE


def test_pulls_digest_check_is_cut_off_not_handed_to_the_daemon(server):
    """An unreachable registry is left to the daemon (it may reach it through a proxy); a stalling one is not."""
    from pathlib import Path

    from envbuild.core.errors import RegistryDeadlineError
    from envbuild.ship.pull import _platform_digest

    _cut_off(lambda: _platform_digest(f"{server.host}/team/app:cpu", None, None, None, Path("/"), None, "missing"),
             RegistryDeadlineError)


def test_publishs_content_query_gives_up_at_the_deadline_and_says_so(server):
    from types import SimpleNamespace

    from envbuild.ship.shared import content_there

    said = []
    started = time.monotonic()
    found = content_there(f"{server.host}/team/app:cpu-in-0123456789abcdef", SimpleNamespace(environ={}),
                          SimpleNamespace(sign_key=None), said.append)
    assert found is None and time.monotonic() - started < DEADLINE + SLACK
    assert f"within {DEADLINE} s" in said[0] and "publishing again" in said[0], said


def test_a_tls_handshake_that_never_completes_is_cut_off_at_the_deadline(monkeypatch):
    """The server takes the connection and says nothing: each read of the handshake has the per-read timeout
    (30 s), the whole answer only the deadline."""
    from envbuild.maintain.sources.index import IndexClient, SourceError

    monkeypatch.setenv("ENVBUILD_NET_DEADLINE", str(DEADLINE))
    server = FaultServer("silent")
    try:
        message = _cut_off(lambda: IndexClient().files(f"https://{server.host}/simple", "torch"), SourceError)
        assert server.host in message
    finally:
        server.close()


# --- issue 51: a proxy that is no URL is one clear error ------------------------------------------------------------

@pytest.mark.parametrize("proxy, why", [("http://[::1", "Invalid IPv6 URL"), ("http://bob:S3cret@[::1", "Invalid IPv6 URL"),
                                        ("http://proxy.corp:99999", "out of range"), ("http://proxy.corp:３１２８", "Port"),
                                        ("socks5://proxy.corp:1080", "its scheme is socks5"), ("http://:8080", "names no host")])
def test_a_proxy_that_is_no_url_is_bad_input_naming_the_variable_with_its_password_masked(proxy, why):
    from envbuild.core.errors import InvalidInput
    from envbuild.net import netread

    with pytest.raises(InvalidInput) as caught:
        netread.proxy_for("https://pypi.org/simple/", {"https_proxy": proxy})
    said = str(caught.value)
    assert said.startswith("$https_proxy: ") and why in said and "S3cret" not in said and "is not a proxy URL" in said


def test_a_usable_proxy_and_no_proxy_are_read_as_before():
    from envbuild.net import netread

    assert netread.proxy_for("https://pypi.org/simple/", {"HTTPS_PROXY": "http://bob:pw@proxy.corp:3128"}) == "http://bob:pw@proxy.corp:3128"
    assert netread.proxy_for("https://pypi.org/simple/", {"https_proxy": "proxy.corp:3128"}) == "proxy.corp:3128"


@pytest.mark.parametrize("url, shown_as", [("http://bob:S3cret@proxy:3128", "http://bob:***@proxy:3128"),
                                           ("http://bob:S3cret@[::1", "http://***@[::1"),
                                           ("bob:S3cret@proxy.corp:3128", "***@proxy.corp:3128")])
def test_without_password_never_raises_and_masks_every_shape(url, shown_as):
    from envbuild.net.netread import without_password

    assert without_password(url) == shown_as


def test_doctors_probe_says_a_bad_proxy_once_not_in_a_traceback_per_thread(capfd):
    from envbuild.core.errors import InvalidInput
    from envbuild.net import netprobe

    targets = [netprobe.Target("index", "pypi", "https://pypi.org/simple/pip/", "packages")]
    with pytest.raises(InvalidInput, match="https_proxy"):
        netprobe.probe(targets, environ={"https_proxy": "http://[::1"}, budget=5)
    assert "Traceback" not in capfd.readouterr().err


def test_doctor_json_with_a_bad_proxy_prints_json_with_the_error(invoke, monkeypatch):
    import json

    from support.constants import MATRIX

    monkeypatch.setenv("https_proxy", "http://bob:S3cret@[::1")
    result = invoke("doctor", "--backend", "cpu", "--json", "--matrix", MATRIX)
    doc = json.loads(result.stdout)
    assert result.exit_code == 2 and doc["ok"] is False and doc["exit_code"] == 2
    assert "$https_proxy" in doc["error"] and "S3cret" not in result.output
    result = invoke("doctor", "--backend", "cpu", "--matrix", MATRIX)
    assert result.exit_code == 2 and result.stderr.count("Error:") == 1 and "Traceback" not in result.output
