"""The registry's HTTP API against a real registry (Debian's docker-registry, no Docker engine needed): a base
of two platforms resolved per platform, an index PUT, skopeo's independent reading of it, and the errors."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile

import pytest
from support import testbed

from envbuild.core.errors import RegistryAnswerError
from envbuild.core.platform import Platform
from envbuild.net.regclient import DOCKER_LIST, Registry
from hypothesis import given
from support.properties import JSON, PROPS, own_error
from support.loopback import serve
import http.server
import threading
import time


@pytest.fixture(scope="module")
def registry(engineless_registry):
    return engineless_registry


def rootfs(path, text: str):
    """A one-file rootfs: enough for a manifest, a config and a layer."""
    data = text.encode()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("etc/which")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.needs("skopeo")
def test_a_platform_is_resolved_from_an_index_and_an_index_is_put(registry, tmp_path):
    repo = f"{registry.host}/envbuild-test/tiny"
    amd64 = testbed.push_rootfs(registry, rootfs(tmp_path / "amd64.tar", "amd64"), "envbuild-test/tiny:amd64", "amd64")
    arm64 = testbed.push_rootfs(registry, rootfs(tmp_path / "arm64.tar", "arm64"), "envbuild-test/tiny:arm64", "arm64")
    api = Registry(repo)
    children = [("linux/amd64", api.manifest(f"{repo}:amd64")), ("linux/arm64", api.manifest(f"{repo}:arm64"))]
    digest = api.put_index(f"{repo}:both", children)
    top = api.manifest(f"{repo}:both")
    assert top.is_index and top.digest == digest and top.media_type == DOCKER_LIST
    assert top.platforms() == {"linux/amd64": amd64, "linux/arm64": arm64}
    assert api.platform_digest(f"{repo}:both", Platform("linux/arm64"))[0] == arm64
    assert api.platform_digest(f"{repo}@{digest}", Platform("linux/amd64"))[0] == amd64
    # a single image answers for its own platform only
    assert api.platform_digest(f"{repo}:arm64", Platform("linux/arm64"))[0] == arm64
    with pytest.raises(RegistryAnswerError, match="is a single image for linux/amd64, not linux/arm64"):
        api.platform_digest(f"{repo}:amd64", Platform("linux/arm64"))
    with pytest.raises(RegistryAnswerError, match="has no image for linux/s390x: its index lists linux/amd64, linux/arm64"):
        api.platform_digest(f"{repo}:both", Platform("linux/s390x"))
    assert api.manifest(f"{repo}:absent") is None
    # skopeo, an independent client, reads the same index and picks the same digest per architecture
    skopeo = shutil.which("skopeo")
    raw = subprocess.run([skopeo, "inspect", "--raw", "--tls-verify=false", f"docker://{repo}:both"],
                         capture_output=True, text=True, check=True).stdout
    assert {m["platform"]["architecture"]: m["digest"] for m in json.loads(raw)["manifests"]} == {
        "amd64": amd64, "arm64": arm64}
    picked = subprocess.run([skopeo, "inspect", "--tls-verify=false", "--override-arch", "arm64", f"docker://{repo}:both"],
                            capture_output=True, text=True, check=True).stdout
    # skopeo's Digest is the tag's (the index's); the image it chose is arm64's: its architecture and its layers
    picked = json.loads(picked)
    layers = [layer["digest"] for layer in api.manifest(f"{repo}@{arm64}").doc["layers"]]
    assert picked["Digest"] == digest and picked["Architecture"] == "arm64" and picked["Layers"] == layers


def test_a_bearer_challenge_gets_a_token_with_the_credentials_and_a_redirect_does_not_carry_it():
    """The token dance of ghcr.io and Docker Hub, against a small HTTP server: 401 with a Bearer challenge, the
    token fetched from its realm with the scope and Basic credentials, the request again with the token; a blob
    redirected to storage elsewhere is fetched without the registry's Authorization."""
    import base64
    import hashlib
    from http.server import BaseHTTPRequestHandler

    seen: list[tuple[str, str | None]] = []
    config = b'{"os": "linux", "architecture": "amd64"}'
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"digest": "sha256:" + hashlib.sha256(config).hexdigest()}}).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            auth = self.headers.get("Authorization")
            seen.append((self.path, auth))
            if self.path.startswith("/token?"):
                assert "scope=repository%3Aorg%2Fimg%3Apull" in self.path and "service=reg" in self.path
                ok = auth == "Basic " + base64.b64encode(b"alice:s3cret").decode()
                return self._send(200 if ok else 401, json.dumps({"token": "tok"}).encode())
            if self.path == "/storage/blob":
                return self._send(200, config)
            if auth != "Bearer tok":
                self.send_response(401)
                self.send_header("WWW-Authenticate", f'Bearer realm="http://{host}/token",service="reg",scope="x"')
                self.end_headers()
                return
            if self.path.startswith("/v2/org/img/blobs/"):
                self.send_response(307)
                self.send_header("Location", f"http://{host}/storage/blob")
                self.end_headers()
                return
            self._send(200, manifest, "application/vnd.oci.image.manifest.v1+json")

        def _send(self, code, body, kind="application/json"):
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serve(Handler) as host:
        env = {"ENVBUILD_REGISTRY_USER": "alice", "ENVBUILD_REGISTRY_PASSWORD": "s3cret"}
        reg = Registry(host, env)
        got = reg.manifest(f"{host}/org/img:1")
        assert got.digest == "sha256:" + hashlib.sha256(manifest).hexdigest() and not got.is_index
        digest, _ = reg.platform_digest(f"{host}/org/img:1", Platform("linux/amd64"))
        assert digest == got.digest
        assert ("/storage/blob", None) in seen  # the redirect went without the registry's token
        assert [p for p, a in seen if p.startswith("/token")] == [seen[1][0]]  # one token, reused
        with pytest.raises(Exception, match="refused"):
            Registry(host, {"ENVBUILD_REGISTRY_USER": "alice", "ENVBUILD_REGISTRY_PASSWORD": "wrong"}).manifest(f"{host}/org/img:1")
    from envbuild.core.errors import RegistryUnreachableError

    with pytest.raises(RegistryUnreachableError, match=f"registry {host} unreachable"):
        Registry(host, env).manifest(f"{host}/org/img:1")


def test_blobs_and_manifests_are_put_and_read_back_by_digest_and_signing_speaks_through_the_same_client(registry):
    """What signing needs of a registry (an upload, a manifest PUT, reading both back), on the real registry,
    through registry.api and through trust.oci, which only says it in signing's terms."""
    from envbuild.ship.trust import TrustError
    from envbuild.ship.trust.oci import Client, NotFound

    api = Registry(registry.host)
    layer = b'{"critical": "a signature payload"}'
    digest = api.put_blob("envbuild-test/signed", layer)
    assert api.put_blob("envbuild-test/signed", layer) == digest  # there already: not uploaded again
    assert api.read_blob("envbuild-test/signed", digest) == layer
    assert api.read_blob("envbuild-test/signed", "sha256:" + "0" * 64) is None
    config = api.put_blob("envbuild-test/signed", b"{}")
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 2, "digest": config},
                       "layers": [{"mediaType": "application/octet-stream", "size": len(layer), "digest": digest}]}).encode()
    put = api.put_manifest("envbuild-test/signed", "sha256-abc.sig", body, "application/vnd.oci.image.manifest.v1+json")
    assert api.read_manifest("envbuild-test/signed", "sha256-abc.sig").raw == body
    assert api.read_manifest("envbuild-test/signed", put).digest == put

    client, path = Client.for_repository(f"{registry.host}/envbuild-test/signed")
    assert path == "envbuild-test/signed" and client.manifest(path, put).json()["layers"][0]["digest"] == digest
    assert client.blob(path, digest) == layer
    with pytest.raises(NotFound):
        client.manifest(path, "sha256-none.sig")
    with pytest.raises(NotFound):
        client.blob(path, "sha256:" + "0" * 64)
    assert client.put_blob(path, b"another") == "sha256:" + hashlib.sha256(b"another").hexdigest()
    with pytest.raises(TrustError, match="unreachable"):
        Client("127.0.0.1:9").manifest(path, "x")


def _serve(handler_body):
    """A small HTTP server whose GET/HEAD/POST/PUT answers come from handler_body(handler, method)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def send(self, code, body=b"", headers=()):
            self.send_response(code)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    for method in ("GET", "HEAD", "POST", "PUT"):
        setattr(Handler, f"do_{method}", lambda self, m=method: handler_body(self, m))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


def test_a_registry_that_serves_other_bytes_than_asked_or_too_many_is_refused(monkeypatch):
    """Content addressing is checked, not trusted: a manifest asked by digest and a blob must hash to it; an
    answer past MAX_DOC is not read whole. Signing hears each as a TrustError."""
    import envbuild.net.regclient as api_mod
    from envbuild.ship.trust import TrustError
    from envbuild.ship.trust.oci import Client

    def answer(h, method):
        if "/manifests/" in h.path:
            return h.send(200, b'{"schemaVersion": 2}', [("Content-Type", "application/vnd.oci.image.manifest.v1+json")])
        return h.send(200, b"x" * 100)

    server, host = _serve(answer)
    try:
        reg = Registry(host)
        wanted = "sha256:" + "a" * 64
        with pytest.raises(RegistryAnswerError, match="served content of digest sha256:.* for org/img@" + wanted):
            reg.read_manifest("org/img", wanted)
        assert reg.read_manifest("org/img", "tag").raw == b'{"schemaVersion": 2}'  # a tag names whatever it names
        with pytest.raises(RegistryAnswerError, match="served a blob that is not " + wanted):
            reg.read_blob("org/img", wanted)
        with pytest.raises(TrustError, match="served a blob that is not"):
            Client(host).blob("org/img", wanted)
        monkeypatch.setattr(api_mod, "MAX_DOC", 50)
        with pytest.raises(RegistryAnswerError, match="larger than"):
            reg.read_blob("org/img", "sha256:" + hashlib.sha256(b"x" * 100).hexdigest())
    finally:
        server.shutdown()
        server.server_close()


def test_an_upload_location_on_another_host_gets_no_token():
    """The registry's token goes to the registry only: an upload it sends elsewhere (storage) goes without it."""
    seen: list[tuple[str, str, str | None]] = []

    def storage(h, method):
        seen.append(("storage", method, h.headers.get("Authorization")))
        return h.send(201)

    store, store_host = _serve(storage)

    def registry(h, method):
        seen.append(("registry", method, h.headers.get("Authorization")))
        if h.headers.get("Authorization") != "Bearer tok" and not h.path.startswith("/token"):
            return h.send(401, headers=[("WWW-Authenticate", f'Bearer realm="http://{reg_host}/token",service="reg"')])
        if h.path.startswith("/token"):
            return h.send(200, b'{"token": "tok"}')
        if method == "HEAD":
            return h.send(404)
        if method == "POST":
            return h.send(202, headers=[("Location", f"http://{store_host}/upload?id=1")])
        return h.send(500)

    server, reg_host = _serve(registry)
    try:
        digest = Registry(reg_host).put_blob("org/img", b"payload")
        assert digest == "sha256:" + hashlib.sha256(b"payload").hexdigest()
        assert ("storage", "PUT", None) in seen
        assert ("registry", "POST", "Bearer tok") in seen
    finally:
        for s in (server, store):
            s.shutdown()
            s.server_close()


@pytest.mark.needs("htpasswd")
def test_signing_uploads_to_a_registry_that_asks_for_credentials(tmp_path):
    """htpasswd (a Basic challenge): the upload and the manifest go with the credentials of the environment; none
    given, the error says how to give them."""
    from envbuild.core.errors import RegistryAuthError
    from envbuild.ship.trust import TrustError
    from envbuild.ship.trust.oci import Client

    try:
        reg = testbed.start_registry(tmp_path / "auth", auth=("signer", "pa55word"))
    except testbed.Unavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    try:
        env = {"ENVBUILD_REGISTRY_USER": "signer", "ENVBUILD_REGISTRY_PASSWORD": "pa55word"}
        client = Client(reg.host, env)
        digest = client.put_blob("org/signed", b"payload")
        body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 7, "digest": digest},
                           "layers": []}).encode()
        put = client.put_manifest("org/signed", "sha256-abc.sig", body)
        assert client.manifest("org/signed", "sha256-abc.sig").digest == put
        with pytest.raises(RegistryAuthError, match="asks for credentials: set ENVBUILD_REGISTRY_USER"):
            Registry(reg.host, {}).put_manifest("org/signed", "x", body, "application/vnd.oci.image.manifest.v1+json")
        with pytest.raises(TrustError, match="asks for credentials"):
            Client(reg.host, {}).put_blob("org/signed", b"other")
    finally:
        reg.stop()


def test_the_publish_credentials_never_go_to_a_base_images_registry(monkeypatch):
    """ENVBUILD_REGISTRY_USER/_PASSWORD are the publish registry's. Resolving a base's digest for a lock asks the
    base's registry (Docker Hub, nvcr.io, ...): its token service must not be sent them."""
    import base64

    import envbuild.net.regclient as api_mod
    from envbuild.image.lockstate import base_digest

    token_auth: list[str | None] = []

    def answer(h, method):
        if h.path.startswith("/token"):
            token_auth.append(h.headers.get("Authorization"))
            return h.send(200, b'{"token": "anonymous"}')
        if h.headers.get("Authorization") != "Bearer anonymous":
            return h.send(401, headers=[("WWW-Authenticate", f'Bearer realm="http://{host}/token",service="hub"')])
        return h.send(404)

    server, host = _serve(answer)
    env = {"ENVBUILD_REGISTRY_USER": "robot", "ENVBUILD_REGISTRY_PASSWORD": "publish-secret", "DOCKER_CONFIG": "/nonexistent"}
    try:
        assert Registry(host, env, publish=False).manifest(f"{host}/library/debian:12") is None
        assert token_auth == [None]
        Registry(host, env).manifest(f"{host}/library/debian:12")  # the publish registry itself: they go
        assert token_auth[1] == "Basic " + base64.b64encode(b"robot:publish-secret").decode()
    finally:
        server.shutdown()
        server.server_close()

    made = []

    class Spy(api_mod.Registry):
        def __init__(self, *args, **kwargs):
            made.append(kwargs)
            super().__init__(*args, **kwargs)

        def platform_digest(self, ref, platform):
            return "sha256:" + "1" * 64, None

        def ping(self, timeout):  # the lock's question whether it answers at all (nvcr.io is not asked in a test)
            return 200

    monkeypatch.setattr(api_mod, "Registry", Spy)

    class Opts:
        ca_bundle = None

    assert base_digest(None, "nvcr.io/nvidia/cuda:13.0-base", "linux/amd64", Opts(), env) == "sha256:" + "1" * 64
    assert made == [{"publish": False}]


# --- Property tests (hypothesis): any input is parsed or refused with envbuild's own clean error (from test_properties.py)

@PROPS
@given(JSON)
def test_a_registry_index_and_a_package_index_page_of_any_shape_are_read_or_refused(doc):
    from envbuild.net.regclient import Manifest, sha256
    from envbuild.maintain.sources.index import _from_json

    raw = json.dumps({"manifests": doc} if not isinstance(doc, dict) else doc).encode()
    platforms = own_error(lambda: Manifest("application/vnd.oci.image.index.v1+json", sha256(raw), raw).platforms())
    assert platforms is None or all(isinstance(k, str) and isinstance(v, str) for k, v in platforms.items())
    own_error(lambda: _from_json({"files": doc}, "https://idx.example/simple/x/"))
    own_error(lambda: _from_json(doc, "https://idx.example/simple/x/"))


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

class _Server:
    """A loopback HTTP server whose handler is `respond(handler)`; what each request carried is kept."""

    def __init__(self, respond, host: str = "127.0.0.1"):
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
                respond(self)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.host = f"{host}:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def _send(handler, status: int, body: bytes = b"", headers: dict | None = None):
    handler.send_response(status)
    for k, v in (headers or {}).items():
        handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def creds(monkeypatch):
    monkeypatch.setenv("ENVBUILD_REGISTRY_USER", "alice")
    monkeypatch.setenv("ENVBUILD_REGISTRY_PASSWORD", "s3cret-pa55word")


def test_the_password_never_goes_to_a_token_service_elsewhere_over_plain_http(creds):
    from envbuild.core.errors import RegistryAuthError
    from envbuild.net.regclient import Registry

    tokens = _Server(lambda h: _send(h, 200, b'{"token": "abcdefgh"}'), host="127.0.0.2")
    registry = _Server(lambda h: _send(h, 401, headers={"WWW-Authenticate": f'Bearer realm="http://{tokens.host}/token",service="x"'}))
    try:
        with pytest.raises(RegistryAuthError, match="plain HTTP on another host") as err:
            Registry(f"{registry.host}/team/app").read_manifest("team/app", "cpu")
        assert "s3cret" not in str(err.value)
        assert tokens.seen == []  # not even asked
    finally:
        tokens.close()
        registry.close()


@pytest.mark.parametrize("answer", [b"<html>login</html>", b"[1, 2]", b'"token"', b'{"token": "abc\\r\\nX-Evil: 1"}',
                                    b'{"token": 5}', b"[" * 100000])
def test_a_token_service_that_answers_no_token_is_a_clear_error(answer, creds):
    from envbuild.core.errors import RegistryAuthError
    from envbuild.net.regclient import Registry

    server = _Server(lambda h: _send(h, 200, answer) if h.path.startswith("/token")
                     else _send(h, 401, headers={"WWW-Authenticate": f'Bearer realm="http://{server.host}/token"'}))
    try:
        with pytest.raises(RegistryAuthError, match="answered no usable token"):
            Registry(f"{server.host}/team/app").read_manifest("team/app", "cpu")
    finally:
        server.close()


def test_a_registry_error_that_echoes_the_token_prints_it_masked(creds, invoke, tmp_path):
    token = "tok-" + "Zq9" * 10

    def respond(h):
        if h.path.startswith("/token"):
            return _send(h, 200, json.dumps({"token": token}).encode())
        if h.headers.get("Authorization") == f"Bearer {token}":
            return _send(h, 500, f"internal: bad token {token}".encode())
        return _send(h, 401, headers={"WWW-Authenticate": f'Bearer realm="http://{server.host}/token"'})

    server = _Server(respond)
    try:
        key = tmp_path / "k.pub"
        from envbuild.ship.trust import keys

        key.write_bytes(keys.generate(b"x").public_pem)
        result = invoke("verify", f"{server.host}/team/app:cpu", "--key", key)
        assert result.exit_code == 1 and token not in result.output and "***" in result.output, result.output
    finally:
        server.close()


def test_an_answer_that_trickles_is_cut_off(monkeypatch):
    from envbuild.net import regclient
    from envbuild.core.errors import RegistryUnreachableError

    def respond(h):
        h.send_response(200)
        h.send_header("Content-Length", "1000")
        h.end_headers()
        for _ in range(1000):
            try:
                h.wfile.write(b"x")
                h.wfile.flush()
            except OSError:
                return
            time.sleep(0.2)

    monkeypatch.setenv("ENVBUILD_NET_DEADLINE", "1")
    server = _Server(respond)
    try:
        started = time.monotonic()
        with pytest.raises(RegistryUnreachableError):
            regclient.Registry(f"{server.host}/team/app").read_manifest("team/app", "cpu")
        assert time.monotonic() - started < 5
    finally:
        server.close()


@pytest.mark.parametrize("doc", [b'{"config": "a string"}', b'{"config": {"digest": 5}}', b"[1]"])
def test_a_registry_manifest_of_the_wrong_shape_is_a_registry_error(doc):
    from envbuild.core.errors import RegistryAnswerError
    from envbuild.net.regclient import Manifest

    from envbuild.net.regclient import Registry

    reg = Registry("127.0.0.1:9/team/app")
    reg.manifest = lambda ref: Manifest("application/vnd.oci.image.manifest.v1+json", "sha256:" + "0" * 64, doc)
    with pytest.raises(RegistryAnswerError, match="not a JSON object|names no config digest"):
        reg.platform_digest("127.0.0.1:9/team/app:cpu", Platform("linux/amd64"))
