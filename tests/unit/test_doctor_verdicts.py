"""doctor says "can build here" and "can run here" apart (building needs no accelerator), and asks the base
image's registry (and, with --publish, the publish registry) whether it answers: a fake /v2/ on 127.0.0.1 and a
port nobody listens on."""

from __future__ import annotations

import http.server
import socket
import threading
from types import SimpleNamespace

import pytest
from support.constants import MATRIX
from support.fakes import FakeEngine
from support.hosts import make_root

from envbuild.imagebuild import builder
from envbuild.matrix import load
from envbuild.host import doctor
from envbuild.report.report import doctor_text


class _V2(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/v2/" else 404)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def registry():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _V2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


@pytest.fixture
def quiet_host(monkeypatch):
    monkeypatch.setattr(builder, "find_builder", lambda: builder.Builder(("docker", "buildx", "build", "--load"), (), True))
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda p: SimpleNamespace(total=500 * 2**30, used=0, free=500 * 2**30))


def diagnose(tmp_path, backend, **sets):
    publish = sets.pop("_registry", None)
    m = load(MATRIX, [f"{k}={v}" for k, v in sets.items()])
    return doctor.diagnose(m, m.backend(backend), connector=lambda: (FakeEngine(root=tmp_path), doctor.Check("docker daemon", True, "fake")),
                           root=make_root(tmp_path), registry=publish)


def test_a_registry_that_answers(registry):
    check = doctor.check_registry("base registry", f"{registry}/debian:bookworm", "fix")
    assert check.ok and f"{registry} answers (HTTP 200 at /v2/)" in check.detail


def test_a_registry_that_does_not_answer(closed_port):
    check = doctor.check_registry("base registry", f"{closed_port}/debian:bookworm", "the ways out", timeout=2)
    assert not check.ok and check.blocking and f"{closed_port} for {closed_port}/debian:bookworm does not answer" in check.detail
    assert check.fix == "the ways out"


def test_rocm_without_a_gpu_can_build_but_not_run(tmp_path, quiet_host, registry):
    report = diagnose(tmp_path, "rocm", **{"backends.rocm.base_image": f"{registry}/rocm/pytorch:latest"})
    assert report.verdicts == {"build": True, "run": False}
    lines = doctor_text(report).splitlines()
    assert lines[-3] == "Can build rocm here."
    assert lines[-2].startswith("Cannot run rocm here: ") and "device" in lines[-2]
    assert lines[-1] == "Building needs no AMD GPU (ROCm): build here, run the image where one is."


def test_an_unreachable_base_registry_blocks_building_with_every_way_out(tmp_path, quiet_host, closed_port):
    report = diagnose(tmp_path, "cpu", **{"backends.cpu.base_image": f"{closed_port}/debian:bookworm"})
    check = next(c for c in report.checks if c.name == "base registry")
    assert check.status == "FAIL"
    for way in (f"--mirror {closed_port}=MIRROR", "--set backends.cpu.base_image=IMAGE", "registry:2", "@sha256:"):
        assert way in check.fix
    assert report.verdicts == {"build": False, "run": True}
    assert "Cannot build cpu here: 1 blocking problem(s): base registry." in doctor_text(report)


def test_publish_checks_the_publish_registry(tmp_path, quiet_host, registry, closed_port):
    ok = diagnose(tmp_path, "cpu", _registry=f"{registry}/envbuild")
    assert next(c for c in ok.checks if c.name == "publish registry").ok
    assert "publish" in ok.verdicts
    down = diagnose(tmp_path, "cpu", _registry=f"{closed_port}/envbuild")
    assert not next(c for c in down.checks if c.name == "publish registry").ok
    assert down.verdicts["publish"] is False and down.verdicts["build"] is True
