"""Fail fast, name the way out: before a lock is resolved (and in doctor), every index it asks is probed, within
seconds, against real servers on this machine's loopback: a closed port, a server that accepts and never
answers, one that answers 200 (and one that serves as a proxy)."""

from __future__ import annotations

import http.server
import json
import socket
import time
from dataclasses import replace

import pytest
from support.constants import MATRIX
from support.fakes import FakeEngine
from support.hosts import make_root
from support.loopback import serve

from envbuild.engine import docker as docker_engine
from envbuild.net import netprobe
from envbuild.core.errors import UnreachableError
from envbuild.image import builder, reach
from envbuild.matrix import load
from envbuild.host import doctor
from envbuild.report.report import doctor_text

BUDGET = 2.0
TORCH_PAGE = b"".join(b'<a href="/f/torch-2.15.0%2Bcpu-cp311-cp311-manylinux_2_28_' + a + b'.whl#sha256=00">x</a>\n'
                      for a in (b"x86_64", b"aarch64"))


class _Answer(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        type(self).seen.append(self.path)
        # a torch page holds the pinned CPU build (the preflight reads it); any other page is empty
        body = TORCH_PAGE if self.path.endswith("/torch/") else b"<html><body></body></html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def answering():
    """An index that answers 200 (any path: also a proxy's absolute-URL requests)."""
    _Answer.seen = []
    with serve(_Answer) as host:
        yield f"http://{host}"


@pytest.fixture
def closed():
    """A port nobody listens on: connection refused, at once."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def silent():
    """A server that accepts connections (the kernel's backlog does) and never answers a byte."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()


@pytest.fixture(scope="module")
def m():
    return load(MATRIX)


def cpu_with(m, torch_index: str, pypi: str):
    """The cpu backend with its torch index at `torch_index`, and the matrix's index at `pypi`."""
    cpu = m.backend("cpu")
    return replace(m, index=replace(m.index, url=pypi, extra_urls=())), replace(cpu, torch=replace(cpu.torch, index_url=torch_index))


def test_the_three_kinds_of_server_within_the_budget(answering, closed, silent):
    targets = [netprobe.index_target(f"{url}/simple", "pip", "test") for url in (answering, closed, silent)]
    start = time.monotonic()
    ok, refused, hung = netprobe.probe(targets, budget=BUDGET, environ={})
    took = time.monotonic() - start
    assert took < BUDGET + 1, took  # the silent one is given up on when the budget ends
    assert ok.ok and ok.detail == "HTTP 200" and ok.via == "directly"
    assert _Answer.seen == ["/simple/pip/"]  # one small page, PEP 503's
    assert not refused.ok and refused.detail == "connection refused" and refused.seconds < 1
    assert not hung.ok and ("no answer" in hung.detail or "timed out" in hung.detail)


def test_a_proxy_is_used_as_the_build_would_and_no_proxy_bypasses_it(answering, closed):
    target = netprobe.index_target("http://index.invalid/simple", "pip", "test")
    through, = netprobe.probe([target], budget=BUDGET, environ={"HTTP_PROXY": answering})
    assert through.ok and through.via == f"through the proxy {answering}"
    assert _Answer.seen == ["http://index.invalid/simple/pip/"]
    bypassed, = netprobe.probe([netprobe.index_target(f"{closed}/simple", "pip", "test")], budget=BUDGET,
                               environ={"HTTP_PROXY": answering, "NO_PROXY": "localhost,127.0.0.1"})
    assert not bypassed.ok and bypassed.via == "directly"


def test_a_dead_torch_index_fails_at_once_naming_the_host_and_every_way_out(m, answering, closed):
    matrix, cpu = cpu_with(m, f"{closed}/whl/cpu", f"{answering}/simple")
    start = time.monotonic()
    with pytest.raises(UnreachableError) as caught:
        reach.require(matrix, cpu, what="locking cpu", budget=BUDGET, environ={})
    assert time.monotonic() - start < BUDGET + 1
    said = str(caught.value)
    host = closed.removeprefix("http://")
    assert f"locking cpu: the package index {closed}/whl/cpu (torch for cpu) does not answer" in said
    assert f"connection refused (asked {closed}/whl/cpu/torch/ directly" in said and host in said
    assert f'index_mirrors."{closed}/whl/cpu" = "MIRROR-URL" in envbuild.toml' in said  # a mirror: the setting
    assert f"--index-mirror {closed}/whl/cpu=MIRROR-URL" in said  # and the option
    assert f"`envbuild config set index_mirrors.{closed}/whl/cpu MIRROR-URL`" in said  # the way that sticks
    assert "`envbuild config set wheelhouse DIR` (or --wheelhouse DIR, wheelhouse = \"DIR\" in envbuild.toml" in said
    assert "`envbuild config set torch.index_url https://pypi.org/simple --backend cpu`" in said
    assert "--set backends.cpu.torch.index_url=https://pypi.org/simple" in said
    assert "PyPI's default torch for linux x86_64 is the CUDA build" in said
    assert f"{answering}/simple" not in said  # the index that answers is not named


def test_an_index_that_never_answers_is_declared_dead_within_the_budget(m, answering, silent):
    matrix, cpu = cpu_with(m, f"{answering}/whl/cpu", f"{silent}/simple")
    start = time.monotonic()
    with pytest.raises(UnreachableError) as caught:
        reach.require(matrix, cpu, what="locking cpu", budget=BUDGET, environ={})
    assert time.monotonic() - start < BUDGET + 1
    assert f"the package index {silent}/simple (the packages besides torch) does not answer" in str(caught.value)
    assert "`envbuild config set index.url URL` (for one run: --set index.url=URL)" in str(caught.value)


def test_the_mirror_is_what_is_probed(m, answering, closed):
    matrix, cpu = cpu_with(m, f"{closed}/whl/cpu", f"{answering}/simple")
    reach.require(matrix, cpu, what="locking cpu", budget=BUDGET, environ={},
                  index_mirrors=((f"{closed}/whl/cpu", f"{answering}/mirror/cpu"),))
    assert "/mirror/cpu/torch/" in _Answer.seen
    with pytest.raises(UnreachableError) as caught:
        reach.require(matrix, cpu, what="locking cpu", budget=BUDGET, environ={},
                      index_mirrors=((f"{answering}/simple", f"{closed}/devpi"),))
    assert f"the package index {closed}/devpi (mirror of {answering}/simple)" in str(caught.value)
    assert "a working mirror for it" in str(caught.value)


def test_lock_stops_before_resolving_when_an_index_is_dead(m, answering, closed, tmp_path, monkeypatch, buildkit_client):
    """The resolver never starts (it would retry for minutes): the builder is not run."""
    from envbuild.image import locking
    from envbuild.image.plan import BuildOptions

    matrix, cpu = cpu_with(m, f"{closed}/whl/cpu", f"{answering}/simple")
    cpu = replace(cpu, base_image="debian:12@sha256:" + "ab" * 32)  # the registry is not asked for a digest
    monkeypatch.setattr(docker_engine, "find_builder", lambda: builder.Builder(("docker", "buildx", "build", "--load"), (), True))
    ran = []
    monkeypatch.setattr(builder, "run_build", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(netprobe, "BUDGET", BUDGET)
    opts = BuildOptions(context_dir=tmp_path / "ctx", locks_dir=tmp_path / "locks", log_dir=tmp_path / "logs")
    with pytest.raises(UnreachableError, match="locking cpu: the package index"):
        locking.lock(matrix, [cpu], opts, locking.LockOptions(), FakeEngine(root=tmp_path))
    assert ran == [] and not (tmp_path / "locks").exists()


def test_doctor_says_cannot_build_when_an_index_is_dead(m, answering, closed, tmp_path, monkeypatch):
    matrix, cpu = cpu_with(m, f"{closed}/whl/cpu", f"{answering}/simple")
    monkeypatch.setattr(docker_engine, "find_builder", lambda: builder.Builder(("docker", "buildx", "build", "--load"), (), True))
    client = FakeEngine(root=tmp_path)
    report = doctor.diagnose(matrix, cpu, connector=lambda: (client, doctor.Check("docker daemon", True, "fake")),
                             root=make_root(tmp_path))
    indexes = [c for c in report.checks if c.name == "package index"]
    assert [c.ok for c in indexes] == [True, False]
    assert not report.verdicts["build"]
    text = doctor_text(report)
    assert "Cannot build" in text and "Can build" not in text
    assert f"{closed}/whl/cpu (torch for cpu) does not answer from this machine: connection refused" in indexes[1].detail
    assert "--set backends.cpu.torch.index_url=https://pypi.org/simple" in indexes[1].fix


def test_a_dead_base_registry_names_a_mirror_and_a_local_registry(m, closed):
    cpu = m.backend("cpu")
    host = closed.removeprefix("http://")
    with pytest.raises(UnreachableError) as caught:
        reach.require(m, cpu, what="building cpu", base_image=f"{host}/library/debian:12", indexes=False,
                      budget=BUDGET, environ={})
    said = str(caught.value)
    assert f"building cpu: the registry {host} (the base image {host}/library/debian:12) does not answer" in said
    assert f"connection refused (asked {closed}/v2/ directly" in said  # regclient's failure, in the probe's words
    assert f"`--mirror {host}=MIRROR`" in said and f'registry_mirrors."{host}" = "MIRROR"' in said
    assert "a local registry" in said
    assert f"`envbuild config set registry_mirrors.{host} MIRROR`" in said  # each way out, as the command that sticks
    assert "`envbuild config set base_image IMAGE --backend cpu`" in said
    # the distribution's archive only where envbuild base can make the base (Docker Hub's debian and ubuntu:
    # tests/unit/test_base.py), not an image another registry names
    from envbuild.core.distbase import base_ways_out

    assert base_ways_out(f"{host}/library/debian:12", "cpu").removeprefix("Ways out: ") in said
    assert "package index" not in said  # a build from a current lock asks no index here


def test_a_base_registry_that_never_answers_fails_the_lock_in_seconds(m, silent):
    """Before the lock asks the base's registry for a digest (30 s per request), one short question: does it answer?"""
    from envbuild.core.errors import LockError
    from envbuild.image.plan import BuildOptions
    from envbuild.image.lockstate import base_digest

    host = silent.removeprefix("http://")
    start = time.monotonic()
    with pytest.raises(LockError) as caught:
        base_digest(m.backend("cpu"), f"{host}/library/debian:12", "linux/amd64", BuildOptions(), environ={})
    assert time.monotonic() - start < 5
    said = str(caught.value)
    assert f"cannot resolve the base image {host}/library/debian:12" in said and host in said
    assert "a local registry" in said and "envbuild base" not in said  # another registry's image: not one it makes


@pytest.mark.parametrize("status, ok, detail", [
    (401, True, "HTTP 401 (asks for a login: it answers)"),
    (403, False, "HTTP 403: it refuses without credentials (give them in a netrc file: --netrc FILE, or netrc in the settings)"),
    (500, False, "HTTP 500")])
def test_a_registry_probe_says_each_answer_in_people_s_words(status, ok, detail):
    """The registry client asks (tests/unit/test_regclient.py); the probe keeps the words of the result."""
    class Status(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    with serve(Status) as host:
        result, = netprobe.probe([netprobe.registry_target(host, "the base")], budget=BUDGET, environ={})
    assert (result.ok, result.detail, result.via) == (ok, detail, "directly")


def test_one_reachability_check_names_a_registry_that_gives_no_answer_in_seconds(answering, closed, silent):
    """What publish and outdated ask before their requests: any HTTP answer is an answer (a refusal too); a refused
    connection and a host that never answers are each said in the probe's words (a unit test asks loopback only)."""
    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    start = time.monotonic()
    assert netprobe.unreachable(answering.removeprefix("http://"), environ={}, budget=BUDGET) is None
    with serve(Refusing) as host:
        assert netprobe.unreachable(host, environ={}, budget=BUDGET) is None
    assert netprobe.unreachable(closed.removeprefix("http://"), environ={}, budget=BUDGET) == "connection refused"
    assert netprobe.unreachable(silent.removeprefix("http://"), environ={}, budget=BUDGET) in (
        "no answer (timed out)", f"no answer within {BUDGET:.0f} s")
    assert time.monotonic() - start < 5 * BUDGET


# --- the torch pin: is its build where the backend takes it from? -----------------------------------------------

X86 = "cp311-cp311-manylinux_2_28_x86_64"
ARM = "cp311-cp311-manylinux_2_28_aarch64"


@pytest.fixture
def pypi(tmp_path):
    """A PEP 503 index on loopback holding PyPI's kind of torch 2.15.0: no `+cpu` on x86_64 (the CUDA build)."""
    from support.pyindex import SimpleIndex

    with SimpleIndex(tmp_path / "index") as index:
        index.add("torch", "2.15.0", tag=X86)
        index.add("torch", "2.15.0", tag=ARM)
        index.add("pip", "25.0")
        yield index


def wheel_folder(tmp_path, *versions: str, tag: str = X86):
    from support.pyindex import make_wheel

    folder = tmp_path / "wheels"
    folder.mkdir(exist_ok=True)
    for version in versions:
        make_wheel(folder, "torch", version, tag=tag)
    return folder


def test_pypi_as_the_cpu_torch_source_is_refused_before_any_download_naming_the_cpu_index(m, pypi):
    """The bug: PyPI answered, doctor said "Can build cpu", the lock fetched 3 GB of CUDA torch, then blamed PyPI."""
    matrix, cpu = cpu_with(m, pypi.url, pypi.url)
    with pytest.raises(UnreachableError) as caught:
        reach.require(matrix, cpu, what="locking cpu", platform="linux/amd64", budget=BUDGET, environ={})
    said = str(caught.value)
    assert (f"locking cpu: torch 2.15.0+cpu (cpu's pin) for linux/amd64, Python 3.11 is not in the index {pypi.url}; "
            "the index holds torch 2.15.0 (torch 2.15.0 there is not a CPU build") in said
    assert "does not answer" not in said  # PyPI answers: it is not blamed
    assert ("`envbuild config set torch.index_url https://download.pytorch.org/whl/cpu --backend cpu`" in said)
    assert "`envbuild config set torch.any_build true --backend cpu`" in said
    # on arm64, PyPI's torch is the CPU build: nothing stands in the way
    reach.require(matrix, cpu, what="locking cpu", platform="linux/arm64", budget=BUDGET, environ={})


def test_the_wheel_folders_torch_is_named_as_the_pin_to_take(m, pypi, tmp_path):
    matrix, cpu = cpu_with(m, pypi.url_of("whl/cpu"), pypi.url)  # a CPU index with no torch page at all
    folder = wheel_folder(tmp_path, "2.13.0+cpu", "2.12.0+cpu")
    found = reach.blockers(matrix, cpu, what="locking cpu", platform="linux/amd64", wheelhouse=folder,
                           budget=BUDGET, environ={})
    assert len(found) == 1
    assert f"nor the wheel folder {folder}; the wheel folder holds torch 2.13.0+cpu, 2.12.0+cpu" in found[0].what
    assert found[0].ways[0] == "pin the build that is there: `envbuild config set torch.version 2.13.0 --backend cpu`"
    pinned = replace(cpu, torch=replace(cpu.torch, version="2.13.0"))  # the advice followed
    assert reach.blockers(matrix, pinned, what="locking cpu", platform="linux/amd64", wheelhouse=folder,
                          budget=BUDGET, environ={}) == []


def test_every_blocker_is_named_at_once(m, pypi, closed, tmp_path):
    """A dead index besides a torch pin that is nowhere: both in one message, each with its ways out."""
    matrix, cpu = cpu_with(m, pypi.url, f"{closed}/simple")
    matrix = replace(matrix, index=replace(matrix.index, extra_urls=(f"{closed}/simple",)))
    with pytest.raises(UnreachableError) as caught:
        reach.require(matrix, cpu, what="locking cpu", platform="linux/amd64", budget=BUDGET, environ={},
                      first="the base image x cannot be had")
    said = str(caught.value)
    assert said.startswith("the base image x cannot be had\n")
    assert f"the package index {closed}/simple (the packages besides torch) does not answer" in said
    assert "torch 2.15.0+cpu (cpu's pin)" in said and said.count("Ways out:") == 2


def test_a_json_index_page_is_read_as_pep_691_says(m):
    class Json(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            files = [{"filename": f"torch-2.15.0+cpu-{X86}.whl", "url": "x"}] if "json" in (self.headers["Accept"] or "") else []
            body = json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": files}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with serve(Json) as host:
        assert reach.index_page(f"http://{host}/simple/torch/", environ={}) == [f"torch-2.15.0+cpu-{X86}.whl"]
        matrix, cpu = cpu_with(m, f"http://{host}/whl/cpu", f"http://{host}/simple")
        assert reach.blockers(matrix, cpu, what="locking cpu", platform="linux/amd64", budget=BUDGET, environ={}) == []


def test_lock_stops_before_resolving_when_the_pinned_torch_build_is_not_there(m, pypi, tmp_path, monkeypatch,
                                                                              buildkit_client):
    from envbuild.image import locking
    from envbuild.image.plan import BuildOptions

    matrix, cpu = cpu_with(m, pypi.url, pypi.url)
    cpu = replace(cpu, base_image="debian:12@sha256:" + "ab" * 32)
    monkeypatch.setattr(docker_engine, "find_builder", lambda: builder.Builder(("docker", "buildx", "build", "--load"), (), True))
    ran = []
    monkeypatch.setattr(builder, "run_build", lambda *a, **k: ran.append(a))
    opts = BuildOptions(context_dir=tmp_path / "ctx", locks_dir=tmp_path / "locks", log_dir=tmp_path / "logs",
                        platform="linux/amd64")
    with pytest.raises(UnreachableError, match=r"torch 2\.15\.0\+cpu \(cpu's pin\)"):
        locking.lock(matrix, [cpu], opts, locking.LockOptions(), FakeEngine(root=tmp_path))
    assert ran == [] and not (tmp_path / "locks").exists()


def test_doctor_says_cannot_build_when_the_pinned_torch_build_is_not_there(m, pypi, tmp_path, monkeypatch):
    matrix, cpu = cpu_with(m, pypi.url, pypi.url)
    monkeypatch.setattr(docker_engine, "find_builder", lambda: builder.Builder(("docker", "buildx", "build", "--load"), (), True))
    client = FakeEngine(root=tmp_path)
    connector = lambda: (client, doctor.Check("docker daemon", True, "fake"))  # noqa: E731
    checks = doctor.check_indexes(matrix, cpu, platform="linux/amd64")
    torch = [c for c in checks if c.name == "torch build"]
    assert [c.ok for c in checks if c.name == "package index"] == [True] and [c.ok for c in torch] == [False]
    assert "config set torch.index_url https://download.pytorch.org/whl/cpu --backend cpu" in torch[0].fix
    monkeypatch.setattr(doctor, "host_platform", lambda *a: "linux/amd64")
    report = doctor.diagnose(matrix, cpu, connector=connector, root=make_root(tmp_path))
    assert not report.verdicts["build"]
    text = doctor_text(report)
    assert "Cannot build" in text and "Can build" not in text
    fine = doctor.check_indexes(matrix, cpu, platform="linux/arm64")
    assert [c.ok for c in fine if c.name == "torch build"] == [True]


def test_a_dead_torch_index_and_a_wheel_folder_of_another_pin_are_said_together(m, pypi, closed, tmp_path):
    """The first hour's story: download.pytorch.org does not answer, the site's wheel folder holds 2.13.0+cpu, the
    pin is 2.15.0: both are said by the first command, the pin with the command that takes the folder's."""
    matrix, cpu = cpu_with(m, f"{closed}/whl/cpu", pypi.url)
    folder = wheel_folder(tmp_path, "2.13.0+cpu")
    found = reach.blockers(matrix, cpu, what="locking cpu", platform="linux/amd64", wheelhouse=folder,
                           budget=BUDGET, environ={})
    assert [b.what.split(": ", 2)[1][:22] for b in found] == ["the package index http", "torch 2.15.0+cpu (cpu'"]
    assert f"is not in the wheel folder {folder}; the wheel folder holds torch 2.13.0+cpu" in found[1].what
    assert "`envbuild config set torch.version 2.13.0 --backend cpu`" in found[1].ways[0]
