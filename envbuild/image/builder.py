"""The builder process: `docker buildx build`, or `DOCKER_BUILDKIT=1 docker build` with a client older than 23.0;
with the Podman engine, `podman build` (buildah: the same Dockerfile, secrets and cache mounts).

Only this module builds; the client process is found and started by the engine (envbuild/engine/docker.py). It streams
BuildKit's plain output into one line per step (or everything with -v), keeps the full log, and tells a failed
build from an engine that did not answer.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from packaging.version import InvalidVersion, Version

from envbuild.engine import docker as engine
from envbuild.core.credential_env import CREDENTIAL_ENV
from envbuild.core.errors import BuildError, DockerError
from envbuild.core.files import write_atomic
from envbuild.core.distbase import base_ways_out
from envbuild.core.output import Scrubber
from envbuild.core.paths import cache_dir


@dataclass(frozen=True)
class Builder:
    """How to run a BuildKit build: the argv prefix and extra environment."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    buildx: bool
    kind: str = "docker"  # the engine it builds for: "docker" (BuildKit) or "podman" (buildah)

    def describe(self) -> str:
        prefix = " ".join(f"{k}={v}" for k, v in self.env)
        return f"{prefix} {' '.join(self.argv)}".strip()


# Where Docker's CLI looks for the buildx plugin besides $DOCKER_CONFIG/cli-plugins.
_PLUGIN_DIRS = ("/usr/local/lib/docker/cli-plugins", "/usr/local/libexec/docker/cli-plugins", "/usr/lib/docker/cli-plugins",
                "/usr/libexec/docker/cli-plugins")


def _builder_key(candidates: list[str]) -> list:
    """What the answer of find_builder depends on: each client's file, and the buildx plugin's wherever the
    clients look for it. A client or plugin installed, removed or upgraded changes it."""
    config = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    files = [*candidates, *(os.path.join(d, "docker-buildx") for d in (os.path.join(config, "cli-plugins"), *_PLUGIN_DIRS))]
    key = []
    for path in files:
        try:
            st = os.stat(path)
            key.append([path, st.st_size, st.st_mtime_ns, st.st_ino])
        except OSError:
            key.append([path, None])
    return key


def _remembered(key: list) -> Builder | None:
    try:
        doc = json.loads(cache_dir("builder.json").read_text(encoding="utf-8"))
        if doc["key"] == key:
            return Builder(tuple(doc["argv"]), tuple(tuple(kv) for kv in doc["env"]), bool(doc["buildx"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _remember(key: list, found: Builder) -> None:
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        write_atomic(cache_dir("builder.json"), json.dumps({"key": key, "argv": found.argv, "env": found.env,
                                                            "buildx": found.buildx}) + "\n")
    except OSError:  # a cache that cannot be written: asked again next time
        pass


def podman_builder() -> Builder:
    """The Podman engine's builder: `podman build` (buildah), which reads the same Dockerfile features."""
    from envbuild.engine.podman import INSTALL_HINT, executable

    exe = executable()
    if not exe:
        raise DockerError(f"no `podman` command on PATH: {INSTALL_HINT}")
    return Builder(argv=(exe, "build"), env=(), buildx=False, kind="podman")


def builder_for(kind: str) -> Builder:
    """The builder of an engine kind (EngineAPI.kind)."""
    return podman_builder() if kind == "podman" else find_builder()


@lru_cache(maxsize=1)
def find_builder() -> Builder:
    """Prefer `docker buildx build`; else a client older than 23.0, which runs BuildKit itself.

    Asking costs a start of every client (about 0.1 s of every build, a no-op included): the answer is kept in
    envbuild's cache for as long as the clients and the buildx plugin files stay the same."""
    candidates = engine.client_executables()
    key = _builder_key(candidates)
    found = _remembered(key) if candidates else None
    if found is None:
        found = _ask_builder(candidates)
        _remember(key, found)
    return found


def _ask_builder(candidates: list[str]) -> Builder:
    if not candidates:
        raise DockerError(
            "no `docker` client on PATH: install Docker's CLI with the buildx plugin "
            "(docker-ce-cli + docker-buildx-plugin) or Debian's docker.io"
        )
    # Both questions to every candidate at once: each answer costs a client start-up. `docker --version`
    # answers from the client alone (`docker version` would also ask the daemon).
    questions = [[exe, "buildx", "version"] for exe in candidates] + [[exe, "--version"] for exe in candidates]
    with ThreadPoolExecutor(max_workers=len(questions)) as pool:
        answers = list(pool.map(engine.ask_client, questions))
    buildx, versions = answers[: len(candidates)], answers[len(candidates):]
    for exe, (rc, _) in zip(candidates, buildx):
        if rc == 0:
            return Builder(argv=(exe, "buildx", "build", "--load"), env=(), buildx=True)
    for exe, (rc, out) in zip(candidates, versions):
        # "Docker version 20.10.24+dfsg1, build 297e128"
        m = re.search(r"(\d+\.\d+(?:\.\d+)?)", out) if rc == 0 else None
        try:
            legacy = bool(m) and Version(m.group(1)) < Version("23.0")
        except InvalidVersion:
            legacy = False
        if legacy:
            return Builder(argv=(exe, "build"), env=(("DOCKER_BUILDKIT", "1"),), buildx=False)
    raise DockerError(
        f"no BuildKit-capable docker client found (tried: {', '.join(candidates)}). Install the buildx plugin "
        "(Debian/Ubuntu: `apt-get install docker-buildx` or docker-buildx-plugin), or set ENVBUILD_DOCKER to a "
        "client that builds with BuildKit (e.g. Debian's docker.io 20.10 at /usr/bin/docker)."
    )


# --- progress ------------------------------------------------------------------------------------------

_STEP = re.compile(r"^#(\d+) \[(?:([\w.-]+) )?(\d+/\d+)\] (.*)$")
_DONE = re.compile(r"^#(\d+) (DONE [\d.]+s|CACHED|ERROR.*)$")
_OUTPUT = re.compile(r"^#(\d+) \d+\.\d+ (.*)$")  # a step's own output: "#11 0.157 error: ..."
_WARNS = re.compile(r"\b(?:WARNING|Retrying|retry|timed out|unreachable)\b", re.IGNORECASE)
_SAYS_WHY = re.compile(r"^\s*(?:error|ERROR|cause|Caused by|×|╰─▶)\b|\berror:", re.IGNORECASE)
# buildah's (podman build) plain output: "[1/2] STEP 3/7: RUN ..." (a stage of several), "STEP 3/7: RUN ..." (one),
# "--> Using cache ID" / "--> ID" when a step ends, "Error: building at STEP ..." when one failed.
_PSTEP = re.compile(r"^(?:\[(\d+)/\d+\] )?STEP (\d+/\d+): (.*)$")
_PDONE = re.compile(r"^--> (Using cache )?[0-9a-f]{6,}$")
_PERROR = re.compile(r"^Error: (?:error )?(?:building at STEP|creating build container|while running runtime)")
_PSTAGE = re.compile(r"^FROM \S+ AS ([\w.-]+)", re.IGNORECASE)
_MOUNT = re.compile(r"--mount=\S+\s*")
_OPTION = re.compile(r"\s(?:--(?:python|find-links|index-url|extra-index-url|constraint|link-mode|target))[ =]\S+"
                     r"|\s--(?:compile-bytecode|no-deps|break-system-packages)\b")


def summarize(instruction: str) -> str:
    """A step as people want to read it: RUN with its mounts, secret boilerplate and installer options cut,
    e.g. 'RUN uv pip install "torch==2.13.0"' instead of five lines of --mount."""
    keyword, _, rest = instruction.partition(" ")
    if keyword != "RUN":
        return instruction
    rest = _MOUNT.sub("", rest)
    parts = [p.strip() for p in re.split(r"\s+&&\s+", rest)]
    # whole conditionals (credentials, which pip) and exports are set-up, not what the step does
    parts = [p for p in parts if not (p.startswith("if ") and p.endswith("; fi") or p.startswith(("export ", ". /run/")))] or parts
    text = " && ".join(parts).replace("/run/uv/uv ", "uv ")
    return "RUN " + " ".join(_OPTION.sub("", text).split())


QUIET = 5.0  # seconds a running step may go without a line on the screen before its latest output is shown


class Progress:
    """Turns BuildKit's plain output into one line per step; -v passes everything through. A step that has shown
    nothing for QUIET seconds (a resolver fetching, retrying a dead index) gets a line with its time so far and
    the latest line it printed, and any warning since: no step waits in silence (tick(), called by run()).

    `status` (optional) hears the step running now, for a live status line.
    """

    def __init__(self, backend: str, echo: Callable[[str], None], verbose: bool = False,
                 status: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 quiet: float = QUIET):
        self.backend = backend
        self.echo = echo
        self.verbose = verbose
        self.status = status
        self.clock = clock
        self.quiet = quiet
        self.names: dict[str, str] = {}
        self.started: dict[str, float] = {}
        self.output: dict[str, list[str]] = {}  # each step's last lines
        self.warning: dict[str, str] = {}  # each step's latest warning or retry not yet shown
        self.failed: str | None = None  # the number of the step that failed
        self.failed_name = "a step"
        self._open: tuple[str, float] | None = None  # buildah: the step running now, since when
        self._count = 0
        self._stages: dict[str, str] = {}  # buildah's stage number -> its name (FROM ... AS name)
        self.said = clock()  # when a line was last shown
        self.lock = threading.Lock()  # feed() and tick() come from two threads

    def _say(self, text: str) -> None:
        self.said = self.clock()
        self.echo(text)

    def feed(self, line: str) -> None:
        with self.lock:
            self._feed(line)

    def _feed(self, line: str) -> None:
        if self.verbose:
            self._say(f"[{self.backend}] {line}")
        if not self._buildah(line):
            self._buildkit(line)

    def _buildkit(self, line: str) -> None:
        out = _OUTPUT.match(line)
        if out:
            self.output[out.group(1)] = (self.output.get(out.group(1), []) + [out.group(2)])[-40:]
            if _WARNS.search(out.group(2)):
                self.warning[out.group(1)] = out.group(2)
        m = _STEP.match(line)
        if m and m.group(1) not in self.names:
            stage = m.group(2) or ""
            stage = "" if re.fullmatch(r"stage-\d+", stage) else stage  # the unnamed final stage
            self.names[m.group(1)] = f"{stage + ' ' if stage else ''}{m.group(3)} {summarize(m.group(4))[:90]}"
            self.started[m.group(1)] = self.clock()
            if self.status:
                self.status(self.names[m.group(1)])
            return
        m = _DONE.match(line)
        if m and m.group(1) in self.names:
            if m.group(2).startswith("ERROR"):
                self.failed = m.group(1)
            text = f"{self.names.pop(m.group(1))} ... {m.group(2).split(':')[0]}"
            self.warning.pop(m.group(1), None)
            if not self.verbose:
                self._say(f"[{self.backend}] {text}")
            if self.status and self.names:
                self.status(next(reversed(self.names.values())))
            if self.failed == m.group(1):
                self.failed_name = text.rsplit(" ... ", 1)[0]

    def tick(self) -> None:
        """Show the running step that printed last, when nothing was shown for `quiet` seconds."""
        with self.lock:
            now = self.clock()
            if not self.names or now - self.said < self.quiet:
                return
            talking = [n for n in self.names if self.output.get(n)]
            step = talking[-1] if talking else next(reversed(self.names))
            latest = (self.output.get(step) or [""])[-1].strip()
            warning = self.warning.pop(step, "").strip()
            said = " | ".join(dict.fromkeys(x[:160] for x in (warning, latest) if x))
            self._say(f"[{self.backend}] {self.names[step]} ... {now - self.started.get(step, now):.0f}s"
                      f"{': ' + said if said else ' (no output yet)'}")

    def _buildah(self, line: str) -> bool:
        """One line of buildah's output (podman build), read into the same steps; False: not buildah's."""
        import time

        step, done = _PSTEP.match(line), _PDONE.match(line)
        if step or done or (self._open and _PERROR.match(line)):
            if self._open:
                number, since = self._open
                how = "CACHED" if done and done.group(1) else ("ERROR" if _PERROR.match(line) else f"DONE {time.monotonic() - since:.1f}s")
                self._buildkit(f"#{number} {how}")
                self._open = None
            if step:
                self._count += 1
                number = str(100000 + self._count)  # apart from BuildKit's numbers
                self._open = (number, time.monotonic())
                named = _PSTAGE.match(step.group(3))
                if named and step.group(1):
                    self._stages[step.group(1)] = named.group(1)
                stage = self._stages.get(step.group(1) or "", "")
                self._buildkit(f"#{number} [{stage + ' ' if stage else ''}{step.group(2)}] {step.group(3)}")
            return True
        if self._open and not line.startswith(("COMMIT ", "Successfully tagged ")):
            number = self._open[0]
            self.output[number] = (self.output.get(number, []) + [line])[-40:]
            return True
        return False

    def why(self) -> str | None:
        """What the failed step itself said went wrong (an installer's error and its cause), if it said."""
        said = [ln.strip() for ln in self.output.get(self.failed or "", []) if _SAYS_WHY.search(ln)]
        if not said:
            return None
        return f"{self.failed_name} failed: {'; '.join(said[:4])}"


# --- running it -------------------------------------------------------------------------------------------

# BuildKit's words when the base image cannot be had (no registry answers, no access, no such tag).
_BASE = re.compile(r"failed to create LLB definition|failed to resolve source metadata for|"
                   r"failed to do request: Head|pull access denied|failed to authorize|"
                   r"initializing source docker://|creating build container", re.IGNORECASE)  # the last two: buildah's
_BASE_WHY = (("no such host", "no DNS answer for its registry"), ("i/o timeout", "its registry does not answer"),
             ("connection refused", "its registry refused the connection"), ("tls handshake timeout", "its registry does not answer"),
             ("pull access denied", "access denied"), ("unauthorized", "access denied"), ("not found", "no such image or tag"),
             ("manifest unknown", "no such image or tag"))


def base_failure(error: str, base: str, backend: str) -> str | None:
    """A build or lock that failed for want of its base image, said so with the ways out; None otherwise."""
    if not _BASE.search(error):
        return None
    low = error.lower()
    why = next((w for key, w in _BASE_WHY if key in low), "its registry did not serve it")

    return f"cannot pull the base image {base} ({why}). {base_ways_out(base, backend)} BuildKit said: {error[-300:]}"


# What an installer says when a cache entry it trusted is broken (uv: "The wheel is invalid: Missing .dist-info
# directory"; pip: a bad zip or hash from its HTTP cache).
_CACHE_FAULT = re.compile(r"wheel is invalid|dist-info|RECORD|distribution cache|cache entry|BadZipFile|"
                          r"not a zip file|corrupt|stale|failed to (?:read|unzip|extract|persist)", re.IGNORECASE)
_INSTALL_STEP = re.compile(r"uv pip install|pip install|resolve\.py")


def cache_failure(error: str) -> str | None:
    """A failed install step whose error a broken build cache can explain, with the way out; None otherwise."""
    if not (_INSTALL_STEP.search(error) and _CACHE_FAULT.search(error)):
        return None
    return (f"{error}. A broken build cache can cause this (an earlier build cut off, e.g. by a killed daemon, "
            "although envbuild's install steps set such a cache aside by themselves): `envbuild clean --build-cache` "
            "removes envbuild's own build caches (nobody else's); then build again")


def environment(keep: tuple[str, ...] = (), kind: str = "docker") -> dict[str, str]:
    """The builder's environment: this process's without envbuild's registry credentials (unless a --build-arg
    names one, in `keep`), with what the client needs to build with BuildKit."""
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_ENV or k in keep}
    return {**env, **dict((podman_builder() if kind == "podman" else find_builder()).env)}


def run_build(argv: list[str], build_args: tuple[str, ...], log: Path, progress: Progress,
              engine_: engine.EngineAPI | None = None) -> str | None:
    """run() with the environment and the masking that the build args call for: a bare NAME takes its value
    from this environment (as docker does: never on a command line), and no value reaches the log."""
    given = dict(a.split("=", 1) for a in build_args if "=" in a)
    keep = tuple(a for a in build_args if "=" not in a)
    env = environment(keep + tuple(given), engine_.kind if engine_ is not None else "docker")
    env.update(given)  # NAME=VALUE: the argv says --build-arg NAME; the value is here, never on a command line
    secrets = tuple(given.values()) + tuple(env.get(k, "") for k in keep)
    if engine_ is None:
        return run(argv, env, log, progress, secrets)
    return run(argv, env, log, progress, secrets, alive=lambda: answers(engine_), start=engine_.start_client)


def answers(engine_: engine.EngineAPI) -> bool:
    """Whether the engine answers a ping now."""
    try:
        engine_.ping()
    except engine.DockerError:
        return False
    return True


def masked(argv: list[str]) -> list[str]:
    """The argv with --build-arg values hidden: they may carry credentials (a proxy URL with a password)."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--build-arg" and "=" in out[i + 1]:
            out[i + 1] = out[i + 1].split("=", 1)[0] + "=***"
    return out


def _heartbeat(done: threading.Event, tick: Callable[[], None]) -> None:
    while not done.wait(1.0):
        tick()


def run(argv: list[str], env: dict[str, str], log: Path, progress: Progress, secrets: tuple[str, ...] = (),
        alive: Callable[[], bool] | None = None, start: Callable[[list[str], dict[str, str]], Any] | None = None
        ) -> str | None:
    """Run the builder (started by `start`: the engine's Engine.start_client; none: a client process of its own);
    None when it succeeded, else the line that says why. The log keeps everything but the `secrets` (build-arg
    values), masked wherever they appear."""
    scrub = Scrubber(extra=secrets)  # the build-arg values, the environment's secrets, every token's shape

    with open(log, "w", encoding="utf-8", buffering=1) as fh:  # by line: `tail -f` on the log follows the build
        fh.write("$ " + scrub(" ".join(masked(argv))) + "\n")
        try:
            proc = (start or engine.start_client)(argv, env)
        except OSError as exc:
            raise BuildError(f"cannot run {argv[0]}: {exc.strerror}") from None
        tail: list[str] = []
        done = threading.Event()
        tick = getattr(progress, "tick", None)
        beat = threading.Thread(target=_heartbeat, args=(done, tick), daemon=True) if tick else None
        if beat:
            beat.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = scrub(line)
                fh.write(line)
                line = line.rstrip("\n")
                progress.feed(line)
                tail = (tail + [line])[-15:]
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            done.set()
            if beat:
                beat.join()
    if rc == 0:
        return None
    said = next((ln for ln in tail if engine.unreachable(ln)), None)
    if said is not None:
        raise engine.unreachable_error(said, engine.host(env))
    if alive is not None and not alive():  # a daemon that died mid-build leaves the client saying other things
        raise engine.Unreachable(engine.host(env), f"it stopped answering during the build; the client said: {tail[-1] if tail else rc}")
    errors = [ln for ln in tail if "ERROR" in ln or "error" in ln.lower()]
    return (progress.why() or (errors[-1] if errors else (tail[-1] if tail else f"exit code {rc}")))[:600]
