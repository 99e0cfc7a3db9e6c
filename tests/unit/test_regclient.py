"""core/regclient.py is envbuild's one registry client: its failures are RegistryErrors (never a PublishError, so
`lock` and `outdated` say them in their own words), tag listing and the reachability probe go through it, and the
address it asks is the one every other registry question asks."""

from __future__ import annotations

import io
import socket
import tarfile

import pytest
from support import testbed
from support.constants import MATRIX as MATRIX_PATH
from support.loopback import serve

from envbuild.core.errors import (LockError, PublishError, RegistryAnswerError, RegistryAuthError, RegistryDeadlineError,
                                  RegistryError, RegistryUnreachableError)
from envbuild.net.regclient import Registry, api_root


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def held(engineless_registry, tmp_path_factory) -> tuple[str, str]:
    """(repository, digest) of a one-layer image in a real loopback registry, tagged 1.2 and 1.10."""
    tar = tmp_path_factory.mktemp("rootfs") / "tiny.tar"
    with tarfile.open(tar, "w") as t:
        info = tarfile.TarInfo("etc/which")
        info.size = 4
        t.addfile(info, io.BytesIO(b"tiny"))
    digest = testbed.push_rootfs(engineless_registry, tar, "envbuild-test/tags:1.2", "amd64")
    testbed.push_rootfs(engineless_registry, tar, "envbuild-test/tags:1.10", "amd64")
    return f"{engineless_registry.host}/envbuild-test/tags", digest


@pytest.mark.parametrize("kind", [RegistryAnswerError, RegistryAuthError, RegistryUnreachableError, RegistryDeadlineError])
def test_a_registry_failure_is_a_registry_error_and_not_a_publish_error(kind):
    assert issubclass(kind, RegistryError)
    assert not issubclass(kind, PublishError)


def test_the_lock_says_an_unreachable_base_registry_as_a_lock_error(closed_port):
    from envbuild.image.plan import BuildOptions
    from envbuild.image.lockstate import base_digest
    from envbuild.matrix import load

    cpu = load(MATRIX_PATH).backend("cpu")
    with pytest.raises(LockError) as err:
        base_digest(cpu, f"127.0.0.1:{closed_port}/library/debian:12", "linux/amd64", BuildOptions(), environ={})
    assert not isinstance(err.value, PublishError)
    assert f"127.0.0.1:{closed_port}" in str(err.value) and "unreachable" in str(err.value)


def test_tag_listing_goes_through_the_registry_client(held):
    """`outdated` and `bump` list tags and read digests with regclient, against a real registry."""
    from envbuild.core.imageref import Reference
    from envbuild.maintain.sources.tags import RegistryClient, newer_tags

    repository, digest = held
    ref = Reference.parse(f"{repository}:1.2")
    client = RegistryClient(environ={})
    assert sorted(client.tags(ref)) == ["1.10", "1.2"]
    assert newer_tags("1.2", client.tags(ref)) == ["1.10"]
    assert client.digest(ref, "1.2") == digest
    assert Registry(repository, {}).head_digest(ref.path, "1.10") == digest


def test_a_registry_that_is_gone_is_a_source_error_naming_it(closed_port):
    from envbuild.core.imageref import Reference
    from envbuild.maintain.sources.index import SourceError
    from envbuild.maintain.sources.tags import RegistryClient

    with pytest.raises(SourceError, match=f"registry 127.0.0.1:{closed_port} cannot be reached"):
        RegistryClient(environ={}).tags(Reference.parse(f"127.0.0.1:{closed_port}/team/app:1"))


def test_a_missing_tag_is_none_and_a_missing_repository_says_so(held, engineless_registry):
    repository, _ = held
    api = Registry(repository, {})
    assert api.manifest(f"{repository}:no-such-tag") is None
    with pytest.raises(RegistryAnswerError, match=f"not found on {engineless_registry.host}"):
        api.tags("envbuild-test/no-such-repository")


@pytest.mark.parametrize("host, root", [("127.0.0.1:5000", "http://127.0.0.1:5000"), ("localhost:5000", "http://localhost:5000"),
                                        ("docker.io", "https://registry-1.docker.io"), ("ghcr.io", "https://ghcr.io")])
def test_every_registry_question_asks_one_address(host, root):
    from envbuild.net.netprobe import registry_target

    assert api_root(host) == root == Registry(host, {}).base
    assert registry_target(host, "the base").url == root + "/v2/"


@pytest.fixture
def refusing() -> str:
    """A registry that refuses every request (403): its host."""
    import http.server

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    with serve(Refuse) as host:
        yield host


@pytest.mark.parametrize("publish, way", [(True, "log in: `docker login 127.0.0.1:[0-9]+` \\(or set ENVBUILD_REGISTRY_USER"),
                                          (False, "check the image's name, or, if it is private, `docker login")])
def test_a_refusal_names_the_registry_and_the_way_in(refusing, publish, way):
    with pytest.raises(RegistryAuthError, match=f"registry {refusing} refused GET team/app \\(403\\); used no credentials: {way}"):
        Registry(f"{refusing}/team/app", {}, publish=publish).manifest(f"{refusing}/team/app:1")


@pytest.fixture
def recorder():
    """A loopback server that answers 200 to anything (a registry's /v2/, or a proxy's absolute-URL requests):
    (its host, what it was asked as (path, Authorization, Proxy-Authorization))."""
    import http.server

    seen: list[tuple[str, str | None, str | None]] = []

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append((self.path, self.headers.get("Authorization"), self.headers.get("Proxy-Authorization")))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    with serve(Answer) as host:
        yield host, seen


def test_a_registry_probe_is_the_request_the_registry_client_makes(recorder, closed_port, monkeypatch):
    """The probe before a lock or build (core/netprobe.py) asks a registry through regclient, which takes the proxy
    from the environment it is given and never shows the proxy's password."""
    from envbuild.net import netprobe
    from envbuild.net import regclient

    proxy, seen = recorder
    made = []
    real = regclient._http
    monkeypatch.setattr(regclient, "_http", lambda method, url, *a, **kw: made.append((method, url)) or real(method, url, *a, **kw))
    target = netprobe.registry_target(f"127.0.0.1:{closed_port}", "the base image")
    result, = netprobe.probe([target], environ={"HTTP_PROXY": f"http://probe:s3cret-pw@{proxy}"}, budget=2.0)
    assert result.ok and result.detail == "HTTP 200", result
    assert result.via == f"through the proxy http://probe:***@{proxy}"
    assert made == [("GET", f"http://127.0.0.1:{closed_port}/v2/")]  # regclient's own request
    assert [s[0] for s in seen] == [f"http://127.0.0.1:{closed_port}/v2/"]  # and it went through the proxy
    assert seen[0][2] and seen[0][2].startswith("Basic ")


def test_every_registry_request_takes_the_proxy_its_environment_names_and_no_proxy_bypasses_it(recorder, closed_port):
    proxy, seen = recorder
    through = Registry(f"127.0.0.1:{closed_port}/team/app", {"HTTP_PROXY": f"http://{proxy}"}, publish=False)
    assert through.ping(2.0) == 200 and through.via() == f"through the proxy http://{proxy}"
    assert through.manifest(f"127.0.0.1:{closed_port}/team/app:1") is not None
    assert [s[0] for s in seen] == [f"http://127.0.0.1:{closed_port}/v2/",
                                    f"http://127.0.0.1:{closed_port}/v2/team/app/manifests/1"]
    bypassed = Registry(f"127.0.0.1:{closed_port}", {"HTTP_PROXY": f"http://{proxy}", "NO_PROXY": "localhost,127.0.0.1"})
    assert bypassed.via() == "directly"
    with pytest.raises(RegistryUnreachableError, match="unreachable") as err:
        bypassed.ping(2.0)
    assert isinstance(err.value.reason, ConnectionRefusedError)  # what netprobe words as "connection refused"
    assert len(seen) == 2


def test_a_netrc_login_goes_with_each_request_to_the_registry(recorder, tmp_path):
    import base64

    host, seen = recorder
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login robot password n3trc-pw\n")
    netrc.chmod(0o600)
    registry = Registry(host, {}, publish=False, netrc=netrc)
    assert registry.ping(2.0) == 200
    assert seen == [("/v2/", "Basic " + base64.b64encode(b"robot:n3trc-pw").decode(), None)]
    assert registry.creds and registry.creds.source == f"the netrc file {netrc}"
