"""The builder process: the engine's builder (EngineAPI.builder: Docker's BuildKit client, Podman's `podman build`),
run with the argv the plan made.

Only this module builds; which builder, its environment and how its output reads are the engine's (envbuild/engine/),
and the engine starts its process. It streams BuildKit's plain output (or the engine's, read into BuildKit's steps)
into one line per step (or everything with -v), keeps the full log, and tells a failed build from an engine that did
not answer.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

from envbuild.engine import docker as engine
from envbuild.engine import select
from envbuild.engine.api import Builder
from envbuild.core import heartbeat
from envbuild.core.credential_env import CREDENTIAL_ENV
from envbuild.core.errors import BuildError
from envbuild.core.distbase import base_ways_out
from envbuild.core.output import Scrubber


# --- progress ------------------------------------------------------------------------------------------

_STEP = re.compile(r"^#(\d+) \[(?:([\w.-]+) )?(\d+/\d+)\] (.*)$")
_DONE = re.compile(r"^#(\d+) (DONE [\d.]+s|CACHED|ERROR.*)$")
_OUTPUT = re.compile(r"^#(\d+) \d+\.\d+ (.*)$")  # a step's own output: "#11 0.157 error: ..."
_OTHER = re.compile(r"^#(\d+) (\S.*)$")  # BuildKit's own work: "#3 [internal] load metadata for ...", "#14 exporting to image"
_WARNS = re.compile(r"\b(?:WARNING|Retrying|retry|timed out|unreachable)\b", re.IGNORECASE)
_SAYS_WHY = re.compile(r"^\s*(?:error|ERROR|cause|Caused by|×|╰─▶)\b|\berror:", re.IGNORECASE)
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
# A RUN step's cache mounts that one build at a time may hold (`sharing=locked`: a step of another build that holds
# one makes this step wait, with no output, until that step ends).
_LOCKED_CACHE = re.compile(r"--mount=type=cache,\S*?\bid=([\w.-]+)\S*?\bsharing=locked|"
                           r"--mount=type=cache,\S*?\bsharing=locked\S*?\bid=([\w.-]+)")
ALONE = 30.0  # seconds without output after which a step with a locked cache asks whether another build holds it


class Progress:
    """Turns BuildKit's plain output into one line per step; -v passes everything through. A step that has shown
    nothing for QUIET seconds (a resolver fetching, retrying a dead index) gets a line with its time so far and
    the latest line it printed, and any warning since: no step waits in silence (tick(), called by run()).

    `status` (optional) hears the step running now, for a live status line. `reader` (optional) reads a builder's
    own output into BuildKit's steps (the engine's Builder.reader, made with this Progress: run_build sets it).
    `others` (optional) names the other envbuild builds running now (records.building): a silent step with a
    locked cache mount says it may be waiting for one of them.
    """

    def __init__(self, backend: str, echo: Callable[[str], None], verbose: bool = False,
                 status: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 quiet: float = QUIET, reader: Callable[[Progress], Any] | None = None,
                 others: Callable[[], list[str]] | None = None):
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
        self.caches: dict[str, list[str]] = {}  # each running step's locked cache mounts
        self.internal: dict[str, tuple[str, float, str]] = {}  # BuildKit's own work now: its name, start, latest line
        self.others = others
        self.failed: str | None = None  # the number of the step that failed
        self.failed_name = "a step"
        self.reader = reader(self) if reader else None
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
        if not (self.reader and self.reader.feed(line)):
            self.step(line)

    def step_output(self, number: str, line: str) -> None:
        """A line a step printed (a reader's)."""
        self.output[number] = (self.output.get(number, []) + [line])[-40:]

    def step(self, line: str) -> None:
        """One line of BuildKit's plain output."""
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
            self.caches[m.group(1)] = [a or b for a, b in _LOCKED_CACHE.findall(m.group(4))]
            if self.status:
                self.status(self.names[m.group(1)])
            return
        m = _DONE.match(line)
        if m and m.group(1) in self.internal:
            del self.internal[m.group(1)]  # BuildKit's own work is not a step: said only while it is slow
            return
        other = _OTHER.match(line)
        if other and not out and not m and other.group(1) not in self.names and other.group(1) != "0":  # 0: the builder's name
            number, text = other.groups()
            name, since, _ = self.internal.get(number, (text[:120], self.clock(), ""))
            self.internal[number] = (name, since, "" if name == text[:120] else text[:160])
            return
        if m and m.group(1) in self.names:
            if m.group(2).startswith("ERROR"):
                self.failed = m.group(1)
            text = f"{self.names.pop(m.group(1))} ... {m.group(2).split(':')[0]}"
            self.warning.pop(m.group(1), None)
            self.caches.pop(m.group(1), None)
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
            if now - self.said < self.quiet:
                return
            if not self.names:  # no step runs: BuildKit's own work (fetching the base's metadata, exporting layers)
                if self.internal:
                    name, since, latest = next(reversed(self.internal.values()))
                    self._say(f"[{self.backend}] {name} ... {now - since:.0f}s{': ' + latest if latest else ''}")
                return
            talking = [n for n in self.names if self.output.get(n)]
            step = talking[-1] if talking else next(reversed(self.names))
            latest = (self.output.get(step) or [""])[-1].strip()
            warning = self.warning.pop(step, "").strip()
            said = " | ".join(dict.fromkeys(x[:160] for x in (warning, latest) if x))
            took = now - self.started.get(step, now)
            self._say(f"[{self.backend}] {self.names[step]} ... {took:.0f}s"
                      f"{': ' + said if said else ' ' + self._silent(step, took)}")

    def _silent(self, step: str, took: float) -> str:
        """Why a step may show nothing: its locked cache, held by another build (named when envbuild knows one)."""
        caches = self.caches.get(step)
        others = self.others() if self.others else []
        if not caches:  # still worth knowing: the engine (its storage, its network) is shared with that build
            return f"(no output yet; envbuild is building {', '.join(others)} here too)" if others else "(no output yet)"
        if not others and took < ALONE:
            return "(no output yet)"
        cache = f"the build cache{'s' if len(caches) > 1 else ''} {', '.join(caches)}"
        running = f" envbuild is building {', '.join(others)} here too" if others else ""
        return f"(no output yet: waiting for {cache}, held by another build?{running})"

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


def environment(builder: Builder, keep: tuple[str, ...] = ()) -> dict[str, str]:
    """The builder's environment: this process's without envbuild's registry credentials (unless a --build-arg
    names one, in `keep`), with what the builder needs (the legacy docker client: DOCKER_BUILDKIT=1)."""
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_ENV or k in keep}
    return {**env, **dict(builder.env)}


def run_build(argv: list[str], build_args: tuple[str, ...], log: Path, progress: Progress,
              engine_: engine.EngineAPI | None = None) -> str | None:
    """run() with the environment and the masking that the build args call for: a bare NAME takes its value
    from this environment (as docker does: never on a command line), and no value reaches the log."""
    given = dict(a.split("=", 1) for a in build_args if "=" in a)
    keep = tuple(a for a in build_args if "=" not in a)
    builder = select.builder(engine_)
    if builder.reader and isinstance(progress, Progress) and progress.reader is None:
        progress.reader = builder.reader(progress)  # the builder's own output, read into BuildKit's steps
    env = environment(builder, keep + tuple(given))
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
        tick = getattr(progress, "tick", None)
        try:
            with heartbeat.beating(tick) if tick else contextlib.nullcontext():
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
    if rc == 0:
        return None
    said = next((ln for ln in tail if engine.unreachable(ln)), None)
    if said is not None:
        raise engine.unreachable_error(said, engine.host(env))
    if alive is not None and not alive():  # a daemon that died mid-build leaves the client saying other things
        raise engine.Unreachable(engine.host(env), f"it stopped answering during the build; the client said: {tail[-1] if tail else rc}")
    errors = [ln for ln in tail if "ERROR" in ln or "error" in ln.lower()]
    return (progress.why() or (errors[-1] if errors else (tail[-1] if tail else f"exit code {rc}")))[:600]
