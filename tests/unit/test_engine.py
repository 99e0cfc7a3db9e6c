"""The one Docker boundary: where the engine is, how an unreachable one reads (in the words of real docker
clients, 20.10 to 28.x), and the matrix's run flags as SDK options."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from support import engine_contract
from support.constants import MATRIX as MATRIX_PATH

from envbuild.engine import docker as engine
from envbuild.core.errors import DockerError, InvalidInput
from envbuild.matrix import RunSpec, load

MATRIX = load(MATRIX_PATH)

# What docker clients print when no engine answers, as they print it.
RECORDED = [
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",  # 20.10 to 28.2
    "failed to dial gRPC: cannot connect to the Docker daemon. Is 'docker daemon' running on this host?: dial unix "
    "/var/run/docker.sock: connect: no such file or directory",  # 20.10's `DOCKER_BUILDKIT=1 docker build`
    "failed to connect to the docker API at unix:///var/run/docker.sock; check if the path is correct and if the "
    "daemon is running: dial unix /var/run/docker.sock: connect: no such file or directory",  # 28.3 and later
    "error during connect: Get \"http://%2F%2F.%2Fpipe%2Fdocker_engine/v1.24/version\": open //./pipe/docker_engine: "
    "The system cannot find the file specified.",  # a remote or Windows engine
    "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock: Get "
    "\"http://%2Fvar%2Frun%2Fdocker.sock/v1.45/version\": dial unix /var/run/docker.sock: connect: permission denied",
    "Error while fetching server API version: ('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))",
]
NOT_THE_DAEMON = [
    "cp: cannot stat 'x': No such file or directory",
    "#7 ERROR: process \"/bin/sh -c pip install torch\" did not complete successfully: exit code: 1",
    "ERROR: failed to solve: connection refused by the package index",
]


@pytest.mark.parametrize("text", RECORDED)
def test_unreachable_wording_of_every_client(text):
    assert engine.unreachable(text)


@pytest.mark.parametrize("text", NOT_THE_DAEMON)
def test_a_failed_build_step_is_not_an_unreachable_engine(text):
    assert not engine.unreachable(text)


def _clients() -> list[str]:
    found = []
    for exe in ("/usr/bin/docker", "/usr/local/bin/docker", shutil.which("docker")):
        if exe and exe not in found and shutil.which(exe):
            found.append(exe)
    return found


def test_real_clients_say_it_in_words_we_recognise(tmp_path):
    """Every docker client on this machine (CI installs Debian's 20.10 beside whatever is there), asked for
    the daemon's version and for a build against a socket nobody listens on."""
    clients = _clients()
    assert clients, "no docker client on this machine (scripts/test installs docker.io)"
    env = {"PATH": "/usr/bin:/bin", "DOCKER_HOST": f"unix://{tmp_path}/absent.sock", "DOCKER_BUILDKIT": "1", "HOME": str(tmp_path)}
    for exe in clients:
        proc = subprocess.run([exe, "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode != 0 and engine.unreachable(proc.stderr), (exe, proc.stderr)
        built = subprocess.run([exe, "build", "-q", str(tmp_path)], capture_output=True, text=True, env=env, timeout=60)
        said = built.stdout + built.stderr
        assert built.returncode != 0
        if "buildx component is missing" not in said:  # a new client without buildx says that first
            assert engine.unreachable(said), (exe, said)


def test_the_sdk_s_words_too(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    with pytest.raises(DockerError, match="no daemon socket there.*apt-get install docker.io"):
        engine.Engine().ping()


def test_permission_denied_says_how_to_get_it():
    err = engine.unreachable_error(next(t for t in RECORDED if "permission" in t), "unix:///var/run/docker.sock")
    assert "usermod -aG docker" in str(err) and err.reason == "permission denied"


def test_where_the_engine_is(tmp_path):
    assert engine.host({}) == engine.DEFAULT_HOST
    assert engine.host({"DOCKER_HOST": "tcp://10.0.0.1:2376"}) == "tcp://10.0.0.1:2376"
    # a Docker context, as `docker context use` leaves it
    meta = tmp_path / "contexts" / "meta" / hashlib.sha256(b"remote").hexdigest()
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(json.dumps({"Name": "remote", "Endpoints": {"docker": {"Host": "ssh://me@box"}}}))
    (tmp_path / "config.json").write_text(json.dumps({"currentContext": "remote"}))
    assert engine.host({"DOCKER_CONFIG": str(tmp_path)}) == "ssh://me@box"
    assert engine.host({"DOCKER_CONFIG": str(tmp_path), "DOCKER_CONTEXT": "default"}) == engine.DEFAULT_HOST
    assert engine.host({"DOCKER_CONFIG": str(tmp_path), "DOCKER_HOST": "unix:///x.sock"}) == "unix:///x.sock"


def test_run_options_translate_the_matrix_flags():
    kw = engine.run_options(MATRIX.backend("rocm").run)
    assert kw["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert kw["group_add"] == ["video"] and kw["ipc_mode"] == "host" and kw["shm_size"] == "8g"
    assert kw["security_opt"] == ["seccomp=unconfined"] and kw["cap_add"] == ["SYS_PTRACE"]
    cuda = engine.run_options(MATRIX.backend("cuda").run)
    (req,) = cuda["device_requests"]
    assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]
    hpu = engine.run_options(MATRIX.backend("hpu").run)
    assert hpu["runtime"] == "habana" and hpu["environment"]["HABANA_VISIBLE_DEVICES"] == "all"
    assert engine.run_options(RunSpec()) == {}


def test_only_the_engine_module_imports_the_docker_sdk():
    from envbuild.core.paths import PACKAGE

    import ast

    def sdk(node: ast.AST) -> bool:  # the docker package itself, not envbuild.engine.docker
        if isinstance(node, ast.Import):
            return any(a.name.split(".")[0] == "docker" for a in node.names)
        return isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "docker"

    users = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                   if any(sdk(n) for n in ast.walk(ast.parse(p.read_text()))))
    assert users == ["engine/docker.py"]


_LIGHT = r"""
import http.server, json, socketserver, sys, threading
from envbuild.engine import docker as engine

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        images = {"/images/reg.example:5000/envbuild/x:cpu/json": {"Id": "sha256:" + "a" * 64, "Config": {"Labels": {"k": "v"}},
                                                                 "Os": "linux", "Architecture": "amd64", "Size": 7}}
        status, doc = (200, "OK") if self.path == "/_ping" else (200, images[self.path]) if self.path in images else \
            (500, {"message": "the daemon broke"}) if "broken" in self.path else (404, {"message": "No such image"})
        body = (doc if isinstance(doc, str) else json.dumps(doc)).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass

class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    def get_request(self):
        request, _ = super().get_request()
        return request, ("local", 0)

server = Server(sys.argv[1], Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
e = engine.Engine()
e.ping()
image = e.image("reg.example:5000/envbuild/x:cpu")
print(image.id[:10], image.labels, image.size, e.image("absent:1"))
try:
    e.image("broken:1")
except engine.EngineError as exc:
    print("EngineError", exc)
print("docker" in sys.modules, "requests" in sys.modules)
"""


def test_a_local_engine_answers_ping_and_image_questions_without_the_sdk(tmp_path):
    """What a no-op build asks (a ping, image ids) goes to a local socket directly: the docker SDK's import
    would cost it about 0.1 s."""
    sock = tmp_path / "docker.sock"
    proc = subprocess.run([sys.executable, "-c", _LIGHT, str(sock)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DOCKER_HOST": f"unix://{sock}"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["sha256:aaa {'k': 'v'} 7 None",
                                        "EngineError cannot inspect image broken:1: the daemon broke", "False False"]


# --- the contract: Engine and the unit tests' FakeEngine take the same parameters ------------------------

def _contract() -> dict[str, object]:
    return engine_contract.contract()


@pytest.mark.parametrize("name", sorted(_contract()))
def test_engine_and_fake_take_the_contracts_parameters(name):
    """Each method a stage may call, with the parameters EngineAPI names (names, kinds, defaults, annotations), in
    both: a call with a wrong or missing name fails against the fake as it would against the daemon."""
    for cls in engine_contract.IMPLEMENTATIONS:  # Engine, Podman, FakeEngine, and any engine added by the recipe
        problem = engine_contract.method_problem(cls, name)
        assert problem is None, problem


class _Nameless(engine.EngineAPI):
    def __init__(self) -> None:
        self.timeout = 1


@pytest.mark.parametrize("name", sorted(engine_contract.attributes()))
def test_each_engine_gives_the_contracts_attributes(name):
    """What a stage reads of an engine (host, kind, doctor's check name and purposes), given by each."""
    for cls in engine_contract.IMPLEMENTATIONS:
        problem = engine_contract.attribute_problem(cls, name)
        assert problem is None, problem
    assert engine_contract.attribute_problem(_Nameless, name) == f"_Nameless does not set {name}"


def test_neither_has_public_methods_beyond_the_contract():
    """What a stage may call is the contract; the fake's extras only set the scene, the engine's only connect."""
    contract = set(_contract())
    for cls in engine_contract.IMPLEMENTATIONS:
        assert engine_contract.public(cls) - contract == engine_contract.EXTRAS.get(cls, {"connect"}), cls.__name__


CONCRETE = {"Engine", "Podman"}  # the engines themselves; a stage names the contract, EngineAPI


def concrete_annotations(source: str) -> list[str]:
    """Where `source` annotates (a parameter, a return, a variable) with a concrete engine class: 'LINE: NAME'.
    Quoted annotations are read too."""
    tree = ast.parse(source)
    found = []

    def names(node: ast.AST | None) -> list[str]:
        if node is None:
            return []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval")
            except SyntaxError:
                return []
        return [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
                if isinstance(n, ast.Name) and n.id in CONCRETE or isinstance(n, ast.Attribute) and n.attr in CONCRETE]

    for node in ast.walk(tree):
        annotations: list[ast.AST | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            annotations += [arg.annotation for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if arg]
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        found += [f"{node.lineno}: {name}" for ann in annotations for name in names(ann)]
    return found


def test_the_detector_sees_a_concrete_engine_in_any_annotation():
    assert concrete_annotations("def f(e: Engine, p: 'Podman | None') -> int: ...") == ["1: Engine", "1: Podman"]
    assert concrete_annotations("x: list[engine.Engine] = []\ndef g(f: Callable[[], Engine]): ...") == ["1: Engine", "2: Engine"]
    assert concrete_annotations("def f(e: EngineAPI) -> EngineAPI:\n    return Engine()") == []


def test_stages_take_the_engine_contract_not_an_engine():
    """Outside engine/ (where the engines live) and cli/ (which makes one), every signature names EngineAPI: a stage
    that names Engine would be written against Docker's, and Podman and the fake could drift from what it uses."""
    from pathlib import Path

    import envbuild

    root = Path(envbuild.__file__).parent
    wrong = [f"{path.relative_to(root.parent)}:{where}" for path in sorted(root.rglob("*.py"))
             if path.relative_to(root).parts[0] not in ("engine", "cli")
             for where in concrete_annotations(path.read_text(encoding="utf-8"))]
    assert not wrong, "annotate with EngineAPI (engine/docker.py), not the concrete engine: " + ", ".join(wrong)


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

@pytest.mark.parametrize("value", ["not a url", "tcp://", "http://[::1", "tcp://host:port"])
def test_a_docker_host_that_is_no_address_exits_2(value, invoke, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", value)
    result = invoke("doctor", "--backend", "cpu", "--matrix", MATRIX_PATH)
    assert result.exit_code == 2 and "DOCKER_HOST=" in result.stderr


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

def test_a_container_whose_creation_was_interrupted_is_removed_by_name():
    from envbuild.engine.docker import Engine
    from envbuild.matrix.model import RunSpec

    removed = []

    class Api:
        def remove_container(self, ref, force, v):
            removed.append(ref)

    class Containers:
        def create(self, *a, **k):
            raise KeyboardInterrupt  # Ctrl-C while the daemon was creating it

    class Client:
        api, containers = Api(), Containers()

    with pytest.raises(KeyboardInterrupt):
        Engine(client=Client()).run("img", ["true"], name="envbuild-smoke-cpu-abc", labels={}, run=RunSpec(), timeout=5)
    assert removed == ["envbuild-smoke-cpu-abc"]


# --- the builder: which docker client builds ------------------------------------------------------------------

@pytest.fixture
def fresh_builder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))  # no answer remembered from elsewhere
    engine.find_builder.cache_clear()
    yield
    engine.find_builder.cache_clear()


def test_find_builder_skips_a_new_client_without_buildx(tmp_path, monkeypatch, fake_docker, fresh_builder):
    new = fake_docker(tmp_path / "new", "28.2.2", buildx=False)
    old = fake_docker(tmp_path / "old", "20.10.24+dfsg1", buildx=False)
    monkeypatch.delenv("ENVBUILD_DOCKER", raising=False)
    monkeypatch.setenv("PATH", f"{new.parent}{os.pathsep}{old.parent}")
    b = engine.find_builder()
    assert b.argv == (str(old), "build") and dict(b.env) == {"DOCKER_BUILDKIT": "1"}
    monkeypatch.setenv("PATH", str(new.parent))
    engine.find_builder.cache_clear()
    with pytest.raises(DockerError, match="buildx plugin"):
        engine.find_builder()
    fake_docker(tmp_path / "bx", "28.2.2", buildx=True)
    monkeypatch.setenv("PATH", f"{new.parent}{os.pathsep}{tmp_path / 'bx'}")
    engine.find_builder.cache_clear()
    assert engine.find_builder().argv[1:] == ("buildx", "build", "--load")


def test_the_answer_is_remembered_until_a_client_or_the_plugin_changes(tmp_path, monkeypatch, fake_docker, fresh_builder):
    old = fake_docker(tmp_path / "old", "20.10.24+dfsg1", buildx=False)
    monkeypatch.delenv("ENVBUILD_DOCKER", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    monkeypatch.setenv("PATH", str(old.parent))
    assert engine.find_builder().argv == (str(old), "build")
    asked = []
    monkeypatch.setattr(engine, "ask_client", lambda argv, timeout=30: asked.append(argv) or (1, ""))
    engine.find_builder.cache_clear()
    assert engine.find_builder().argv == (str(old), "build") and asked == []  # from the cache: no client started
    plugin = tmp_path / "docker-config" / "cli-plugins" / "docker-buildx"
    plugin.parent.mkdir(parents=True)
    plugin.write_text("#!/bin/sh\n")  # the buildx plugin installed: asked again
    engine.find_builder.cache_clear()
    with pytest.raises(DockerError):
        engine.find_builder()
    assert asked


def test_envbuild_docker_picks_the_client(tmp_path, monkeypatch, fake_docker, fresh_builder):
    old = fake_docker(tmp_path / "old", "20.10.24+dfsg1", buildx=False)
    fake_docker(tmp_path / "bx", "28.2.2", buildx=True)
    monkeypatch.setenv("PATH", str(tmp_path / "bx"))
    monkeypatch.setenv("ENVBUILD_DOCKER", str(old))
    assert engine.find_builder().argv == (str(old), "build")


# --- the engine's seam: no stage asks which engine it holds --------------------------------------------------

SCHEMES = ("unix://", "npipe://", "podman://")  # where an engine is: only the engine reads its host
# `pick --for TOOL` prints how to run an image with the tool people name (docker, podman, apptainer, ...): a table of
# commands to print, not of the engine envbuild holds.
ALLOWED = {("host/launch.py", "a table by engine")}


def engine_names_in(source: str) -> list[str]:
    """Where a module asks which engine it holds: an engine's name (select.NAMES) compared or used as a key, an
    engine host's scheme, an engine class named (select.ENGINES)."""
    from envbuild.engine import select

    classes = {spec.partition(":")[2] for spec, _ in select.ENGINES.values()}
    found = []

    def named(node: ast.AST) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(n) for n in node.elts)
        return isinstance(node, ast.Constant) and node.value in select.NAMES

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(named(n) for n in (node.left, *node.comparators)):
            found.append(f"{node.lineno}: an engine's name compared")
        elif isinstance(node, ast.Dict) and any(k is not None and named(k) for k in node.keys):
            found.append(f"{node.lineno}: a table by engine")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and any(s in node.value for s in SCHEMES):
            found.append(f"{node.lineno}: an engine host's scheme")
        elif isinstance(node, ast.Name) and node.id in classes or isinstance(node, ast.Attribute) and node.attr in classes:
            found.append(f"{node.lineno}: an engine class")
        elif isinstance(node, ast.ImportFrom) and any(a.name in classes for a in node.names):
            found.append(f"{node.lineno}: an engine class imported")
    return found


def test_the_detector_finds_every_way_to_ask_which_engine():
    assert engine_names_in("if engine.kind == 'podman': pass") == ["1: an engine's name compared"]
    assert engine_names_in("x = kind in ('docker', 'x')") == ["1: an engine's name compared"]
    assert engine_names_in("CHECK = {'docker': 'docker daemon'}") == ["1: a table by engine"]
    assert engine_names_in("local = host.startswith(('unix://', 'tcp://'))") == ["1: an engine host's scheme"]
    assert engine_names_in("from envbuild.engine.podman import Podman") == ["1: an engine class imported"]
    assert engine_names_in("e = docker.Engine(5)") == ["1: an engine class"]
    assert engine_names_in("e = select.choose(None).engine\nok = e.is_local()\nb = e.builder()") == []


def test_no_module_outside_the_engine_asks_which_engine_it_holds():
    """Every Docker/Podman difference is the engine's (envbuild/engine/): the stages ask the engine they hold
    (its builder, whether it is local, its checks), never which one it is."""
    from envbuild.core.paths import PACKAGE

    found = [f"{path.relative_to(PACKAGE)}:{where}" for path in sorted(PACKAGE.rglob("*.py"))
             if path.relative_to(PACKAGE).parts[0] != "engine"
             for where in engine_names_in(path.read_text(encoding="utf-8"))
             if (str(path.relative_to(PACKAGE)), where.split(": ", 1)[1]) not in ALLOWED]
    assert not found, "ask the engine (EngineAPI), not which engine it is: " + ", ".join(found)


# --- what the stages ask the engine instead of which one it is --------------------------------------------------

@pytest.mark.parametrize("host, local", [("unix:///var/run/docker.sock", True), ("npipe:////./pipe/docker_engine", True),
                                         ("tcp://10.0.0.2:2376", False), ("ssh://builder@farm", False)])
def test_a_docker_daemon_is_local_on_a_socket_or_pipe_here(monkeypatch, host, local):
    """A registry this process cannot reach, a daemon on this machine cannot either (ship/session.py)."""
    monkeypatch.setenv("DOCKER_HOST", host)
    assert engine.Engine().is_local() is local


def test_podman_is_local_and_builds_with_buildah(monkeypatch):
    from envbuild.engine import podman

    monkeypatch.setattr(podman, "executable", lambda: "/usr/bin/podman")
    found = podman.Podman(exe="/usr/bin/podman")
    assert found.is_local() and found.builder().argv == ("/usr/bin/podman", "build") and found.builder().reader
    assert found.builder().refusal("--cache-to").startswith("--cache-to is BuildKit's") and not found.builder().buildx
    assert found.builder_check().name == "podman build" and found.builder_check().ok
    monkeypatch.setattr(podman, "executable", lambda: None)
    assert not found.builder_check().ok and "no `podman` command on PATH" in found.builder_check().detail


def test_docker_builds_with_the_client_find_builder_found(monkeypatch):
    legacy = engine.Builder(("/usr/bin/docker", "build"), (("DOCKER_BUILDKIT", "1"),), False)
    monkeypatch.setattr(engine, "find_builder", lambda: legacy)
    assert engine.Engine().builder() is legacy and legacy.reader is None and legacy.refusal("--cache-to") is None
    check = engine.Engine().builder_check()
    assert check.ok and check.detail == ("`DOCKER_BUILDKIT=1 /usr/bin/docker build` (a client older than 23.0, which "
                                         "builds with BuildKit itself)")


def test_engine_names_are_one_list_and_auto(monkeypatch):
    """--engine's choices, ENVBUILD_ENGINE's words and the classes made: select.ENGINES, one table."""
    from envbuild.engine import select

    assert select.NAMES == tuple(select.ENGINES) == ("docker", "podman")
    assert [select.engine_class(n).kind for n in select.NAMES] == list(select.NAMES)
    assert select.wanted("AUTO") == (None, "auto")
    with pytest.raises(InvalidInput, match="give docker, podman or auto"):
        select.wanted("containerd")


# --- issue 51: the first contact has a deadline; an answer of any shape is no crash ----------------------------------

def _hung_socket(tmp_path, answer: bytes | None = None):
    """A unix socket that accepts and then says nothing (a wedged daemon), or answers `answer` to every request."""
    import socket
    import threading

    path = tmp_path / "engine.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)
    held = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if answer is not None:
                conn.recv(65536)
                conn.sendall(answer)
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return path, server


def test_a_daemon_that_never_answers_its_ping_is_given_up_at_the_first_contacts_deadline(tmp_path, monkeypatch):
    from envbuild.core.errors import DockerError
    from envbuild.engine.docker import CONNECT_TIMEOUT_ENV, Engine

    path, server = _hung_socket(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    monkeypatch.setenv(CONNECT_TIMEOUT_ENV, "1")
    try:
        engine = Engine()
        assert engine.timeout == 600 and engine.connect_timeout == 1
        with pytest.raises(DockerError, match="timed out"):
            engine.ping()
    finally:
        server.close()


def test_an_answer_nested_too_deep_is_said_as_text_not_a_recursion_error(tmp_path, monkeypatch):
    from envbuild.engine.docker import Engine, EngineError

    body = b"[" * 200_000
    answer = b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    path, server = _hung_socket(tmp_path, answer)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    try:
        with pytest.raises(EngineError) as caught:
            Engine().ping()
        assert len(str(caught.value)) < 2100
    finally:
        server.close()
