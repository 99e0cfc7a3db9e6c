"""The one fake of envbuild.engine.docker.Engine, for unit tests of pure logic: a daemon, its images, containers, a
registry and the builder process (Engine.start_client) in memory. Never the proof that a command works:
tests/engine/ runs the real engine.

What it does not replace is the engine module's own process code, tested with a real child process (a shell
script named docker: tests/conftest.py's fake_docker, test_run's and test_hostile_input's clients): finding
the clients on PATH and whether they build with BuildKit, the environment a build's client gets, and
Engine.client_run's terminal hand-over. A fake of the door cannot test the door itself."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from envbuild.core.checks import Check
from envbuild.core.errors import DockerError
from envbuild.engine import docker
from envbuild.engine.api import Builder
from envbuild.engine.docker import EngineAPI, EngineError, Exited, Image
from envbuild.core.imageref import Reference
from envbuild.engine.owner import OWNED_LABEL, Container

if TYPE_CHECKING:
    from envbuild.engine.runspec import RunSpec


def _split(ref: str) -> tuple[str, str]:
    """A reference as the engine takes it apart (the repository as written, the tag or 'latest')."""
    r = Reference.parse(ref).tagged()
    return ref.rsplit(":", 1)[0] if r.tag and ref.endswith(":" + r.tag) else ref, r.tag or r.digest


def _item(name: str, version: str, requires: list[str] = (), digest: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)},
            "download_info": {"url": f"https://files.example/{name}-{version}-py3-none-any.whl",
                              "archive_info": {"hashes": {"sha256": digest or (name.encode().hex() * 64)[:64]}}}}


# What `pip install --dry-run --report` says for the cpu image: torch and what it needs, transformers,
# accelerate and what they need (a shared dependency too), in pip's shape (trimmed).
REPORT = {
    "version": "1", "pip_version": "23.0.1",
    "environment": {"python_full_version": "3.11.2", "sys_platform": "linux", "platform_machine": "x86_64",
                    "python_version": "3.11", "platform_system": "Linux", "os_name": "posix",
                    "implementation_name": "cpython", "platform_python_implementation": "CPython"},
    "install": [
        _item("torch", "2.15.0+cpu", ["filelock", "typing-extensions>=4.10.0", "sympy>=1.13.3",
                                      'triton==3.5.0; platform_system == "Windows"']),
        _item("filelock", "4.3.1"), _item("typing_extensions", "4.16.0"), _item("sympy", "1.14.0", ["mpmath<1.4,>=1.1.0"]),
        _item("mpmath", "1.3.0"),
        _item("transformers", "5.23.0", ["huggingface-hub<3.0,>=1.0", "numpy>=1.17", "filelock",
                                         'torch>=2.6; extra == "torch"']),
        _item("huggingface-hub", "2.4.0", ["filelock", "typing-extensions>=4.1"]), _item("numpy", "2.4.6"),
        _item("accelerate", "1.15.0", ["numpy<3.0.0,>=1.17", "torch>=2.0.0", "psutil"]), _item("psutil", "7.2.2"),
    ],
}


@dataclass
class FakeImage:
    id: str
    labels: dict[str, str] = field(default_factory=dict)
    repo_digests: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    layers: tuple[str, ...] = ()


class FakeEngine(EngineAPI):
    """Answers like a daemon would; records what was asked (logins, pushes, pulls, removed tags). Its engine methods
    take EngineAPI's parameters exactly (tests/unit/test_engine.py checks); add_image sets the scene."""

    host = "fake://engine"  # not a local socket: sessions skip their network reachability check
    kind = "docker"  # builds with the docker client's BuildKit (the scripted builder answers)
    check_name = "docker daemon"
    purposes = docker.Engine.purposes

    def __init__(self, runtimes: tuple[str, ...] = ("runc",), root: str = "/", containers: tuple[str, ...] = (),
                 version: dict[str, Any] | None = None):
        self.refs: dict[str, FakeImage] = {}
        self.removed: list[str] = []
        self.pushed: list[tuple[str, Any]] = []
        self.pulled: list[tuple[str, str | None]] = []  # (ref, platform) of each pull
        self.logins: list[tuple[str, str]] = []
        self.login_error: str | None = None
        self.leftovers = list(containers)
        self.volumes: list[str] = []  # volumes made
        self.volumes_removed: list[str] = []
        self.cache_mounts: list[dict[str, Any]] = []  # BuildKit's exec.cachemount records
        self.start_error: str | None = None  # what the daemon says when it will not start a container
        self.runs: list[dict[str, Any]] = []  # each container run asked for: image, command and options
        self.exited: Any = None  # what a run ends with (an engine.Exited); None: the fake runs no container
        self._info = {"Runtimes": {r: {} for r in runtimes}, "DockerRootDir": str(root)}
        self._version = version or {"Version": "28.2.2", "ApiVersion": "1.50", "Os": "linux", "Arch": "amd64"}
        self.closed = False
        self.push_lines: Callable[[str, str], Any] = lambda repo, tag: [
            {"status": f"The push refers to repository [{repo}]"}, {"aux": {"Tag": tag, "Digest": "sha256:" + "1" * 64, "Size": 1}}]
        self.pull_lines: Callable[[str, str], Any] = lambda repo, tag: [{"status": "Digest: sha256:" + "1" * 64}]
        # the builder (Engine.start_client): each argv started, what it prints, its exit status
        self.builds: list[list[str]] = []
        self.build_lines = ["#1 [1/1] FROM base", "#1 DONE 0.1s"]
        self.build_rc = 0

    # -- setting the scene ---------------------------------------------------------------------------
    def add_image(self, iid: str, refs: list[str] = (), labels: dict[str, str] | None = None) -> FakeImage:
        img = FakeImage(iid, dict(labels or {}))
        for ref in refs:
            self.refs[ref] = img
        return img

    # -- the Engine interface --------------------------------------------------------------------------
    def ping(self) -> None:
        pass

    def version(self) -> dict[str, Any]:
        return self._version

    def info(self) -> dict[str, Any]:
        return self._info

    def runtimes(self) -> set[str]:
        return set(self._info["Runtimes"])

    def _find(self, ref: str) -> FakeImage | None:
        return self.refs.get(ref) or next((img for img in self.refs.values() if img.id == ref), None)

    def image(self, ref: str) -> Image | None:
        img = self._find(ref)
        if img is None:
            return None
        return Image(img.id, img.labels, "linux", "amd64", tuple(img.repo_digests), 0, None, img.layers)

    def import_image(self, tar: str, ref: str, changes: list[str], labels: dict[str, str]) -> Image:
        import hashlib

        digest = "sha256:" + hashlib.sha256(open(tar, "rb").read()).hexdigest()
        self.imported = [*getattr(self, "imported", []), (tar, ref, list(changes), dict(labels))]
        self.add_image("sha256:" + hashlib.sha256(digest.encode()).hexdigest(), [ref], labels).layers = (digest,)
        return self.image(ref)

    def image_id(self, ref: str) -> str | None:
        img = self._find(ref)
        return img.id if img else None

    def tag(self, image: str, refs: list[str]) -> None:
        img = self._find(image)
        for ref in refs:
            self.refs[ref] = img

    def untag(self, ref: str) -> None:
        self.removed.append(ref)
        self.refs.pop(ref, None)

    def read_file(self, image: str, path: str, limit: int = 64 << 20) -> bytes | None:
        img = self._find(image)
        data = img.files.get(path) if img else None
        if data is not None and len(data) > limit:
            raise EngineError(f"cannot read {path} from {image}", f"larger than {limit >> 20} MiB")
        return data

    def containers(self, label: str, stopped: bool = False) -> list[str]:
        return [c.name for c in self.container_list(label) if not stopped or c.state != "running"]

    def container_list(self, label: str) -> list[Container]:
        """`containers` given as names are stopped ones of an envbuild that wrote no owner; Container objects as they are."""
        return [c if isinstance(c, Container) else Container(c, "exited", {OWNED_LABEL: "1"}) for c in self.leftovers]

    def dangling_images(self, label: str) -> list[str]:
        return list(getattr(self, "dangling", []))  # set `dangling` (image ids) to have some

    def remove_image(self, ref: str) -> str | None:
        img = self._find(ref)
        self.removed.append(ref)
        self.dangling = [i for i in getattr(self, "dangling", []) if i != ref]
        self.refs = {r: i for r, i in self.refs.items() if i is not img and r != ref}
        return None

    def build_cache_mounts(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.cache_mounts]

    def prune_build_cache(self, record: str) -> int:
        gone = [r for r in self.cache_mounts if r["ID"] == record]
        self.cache_mounts = [r for r in self.cache_mounts if r["ID"] != record]
        return sum(int(r.get("Size") or 0) for r in gone)

    def remove_container(self, ref: str) -> None:
        self.leftovers = [c for c in self.leftovers if getattr(c, "name", c) != ref]

    def login(self, host: str, username: str, password: str) -> None:
        self.logins.append((username, host))
        if self.login_error:
            raise EngineError(f"logging in to {host}", self.login_error)

    def push(self, ref: str, auth: dict[str, str] | None) -> Iterator[dict[str, Any]]:
        repo, tag = _split(ref)
        self.pushed.append((ref, auth))
        return iter(self.push_lines(repo, tag))

    def pull(self, ref: str, auth: dict[str, str] | None, platform: str | None = None) -> Iterator[dict[str, Any]]:
        repo, tag = _split(ref)
        self.pulled.append((ref, platform))
        return iter(self.pull_lines(repo, tag))

    def run(self, image: str, command: list[str], *, name: str, labels: dict[str, str], run: RunSpec,
            volumes: list[str] = (), environment: dict[str, str] | None = None, timeout: float,
            user: str | None = None, read_only: bool = False, on_line: Callable[[str], None] | None = None) -> Exited:
        if self.start_error:
            raise EngineError(f"cannot run {image}", self.start_error)
        if self.exited is None:
            raise NotImplementedError("the fake runs no container: tests/engine/ does")
        self.runs.append({"image": image, "command": command, "name": name, "labels": labels, "run": run,
                          "volumes": volumes, "environment": environment, "timeout": timeout, "user": user, "read_only": read_only,
                          "volumes_alive": [v for v in self.volumes if v not in self.volumes_removed]})
        if on_line is not None:
            for line in self.exited.stderr.decode("utf-8", "replace").splitlines():
                on_line(line)
        return self.exited

    @contextlib.contextmanager
    def volume(self, name: str, labels: dict[str, str]) -> Iterator[str]:
        self.volumes.append(name)
        try:
            yield name
        finally:
            self.volumes_removed.append(name)

    def start_client(self, argv: list[str], env: dict[str, str]) -> FakeBuild:
        self.builds.append(list(argv))
        return FakeBuild(argv, self.build_lines, self.build_rc)

    def client_args(self, args: list[str]) -> list[str]:
        return list(args)

    def client_run(self, args: list[str], env: dict[str, str]) -> tuple[int, str]:
        raise NotImplementedError("the fake starts no docker client: test_run binds Engine.client_run to it")

    def host_checks(self) -> list[Check]:
        return []

    def builder(self) -> Builder:
        return docker.find_builder()  # Docker's client (a test may replace find_builder)

    def builder_check(self) -> Check:
        return docker.builder_check()

    def failed_check(self, exc: DockerError, why: str) -> Check:
        return Check(self.check_name, False, f"the fake engine did not answer: {exc} ({why})")

    def answer_check(self, version: dict[str, Any], why: str) -> Check:
        return docker.answer_check(self.check_name, self.host, version, why, docker.MIN_SERVER)

    def is_local(self) -> bool:
        return False  # sessions skip their network reachability check

    def close(self) -> None:
        self.closed = True


class FakeBuild:
    """The docker client process of a build, scripted: prints `lines`, exits with `rc`, and writes what BuildKit
    would: the image id (--iidfile), or for the `lock` target the resolver's report (REPORT)."""

    def __init__(self, argv: list[str], lines: list[str], rc: int):
        self.stdout = iter(line + "\n" for line in lines)
        self.rc = rc
        if rc == 0 and "--target" in argv:
            out = Path(argv[argv.index("--output") + 1].split("dest=", 1)[1])
            (out / "report.json").write_text(json.dumps(REPORT))
            (out / "status.json").write_text(json.dumps({"resolver": "pip 23.0.1", "kept_previous": False}))
        elif rc == 0:
            Path(argv[argv.index("--iidfile") + 1]).write_text("sha256:" + "f" * 64)

    def wait(self) -> int:
        return self.rc

    def kill(self) -> None:
        pass
