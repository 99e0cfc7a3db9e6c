"""Rendered Dockerfile -> image, built with BuildKit on the local engine.

BuildKit names the image only once the whole build succeeded (its id also lands in an --iidfile), so a
failed build never moves a tag away from a good image. Secrets (CA bundle, index credentials) go in as
BuildKit secrets: they are mounted for single RUN steps and never stored in a layer.

The build context (Dockerfile, probe, wheelhouse) lives in a stable folder per backend
(.envbuild/context/BACKEND): the docker client keys its file sync by that folder, so an unchanged
wheelhouse is not sent again, and an unchanged rebuild costs about what Docker's own no-op costs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from . import engine
from .errors import DockerError, EnvbuildError
if TYPE_CHECKING:
    from .matrix import Backend, Matrix
    from .status import StatusBoard

PROBE = Path(__file__).with_name("probe.py")
CA_ENV_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT")
DEFAULT_LOG_DIR = Path(".envbuild") / "logs"
DEFAULT_CONTEXT_DIR = Path(".envbuild") / "context"
STATE_FILE = "last-build.json"  # in the backend's context folder: what the last good build was made from
# What the docker client prints when no engine answers; the build is the check (no extra round trip).
_NO_DAEMON = re.compile(r"Cannot connect to the Docker daemon|error during connect|Is the docker daemon running", re.I)


class BuildError(EnvbuildError):
    pass


@dataclass(frozen=True)
class BuildOptions:
    wheelhouse: Path | None = None
    ca_bundle: Path | None = None
    netrc: Path | None = None
    tags: tuple[str, ...] = ()
    build_args: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    no_cache: bool = False
    platform: str | None = None
    builder: str | None = None
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    log_dir: Path = DEFAULT_LOG_DIR
    context_dir: Path = DEFAULT_CONTEXT_DIR
    inputs: tuple[tuple[str, str], ...] = ()  # backend -> inputs_key(), recorded for the quick check


@dataclass
class BuildResult:
    backend: str
    ok: bool
    tags: list[str]
    image_id: str | None = None
    seconds: float = 0.0
    log: Path | None = None
    error: str | None = None
    steps: list[str] = field(default_factory=list)
    up_to_date: bool = False  # nothing changed since the last build: the builder did not run

    def to_json(self) -> dict:
        return {
            "backend": self.backend,
            "ok": self.ok,
            "image_id": self.image_id,
            "tags": self.tags,
            "seconds": round(self.seconds, 2),
            "log": str(self.log) if self.log else None,
            "error": self.error,
            "up_to_date": self.up_to_date,
        }


def default_ca_bundle() -> Path | None:
    """The bundle the host already trusts, from the usual variables (first one set wins)."""
    for var in CA_ENV_VARS:
        value = os.environ.get(var)
        if value:
            return Path(value)
    return None


# --- base image mirrors ------------------------------------------------------------------------------


def normalize_ref(ref: str) -> str:
    """Expand Docker's short names: 'debian:12' -> 'docker.io/library/debian:12'."""
    first, sep, rest = ref.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        ref = "docker.io/" + (ref if sep else "library/" + ref)
    return ref


def mirror_image(ref: str, mirrors: Iterable[str]) -> str:
    """Apply the first `--mirror FROM=TO` whose FROM prefixes the (normalized) reference."""
    full = normalize_ref(ref)
    for rule in mirrors:
        src, sep, dst = rule.partition("=")
        if not sep or not src or not dst:
            raise EnvbuildError(f"--mirror {rule!r}: expected FROM=TO, e.g. docker.io=mirror.example.com:5000")
        src = src.rstrip("/")
        if full == src or full.startswith(src + "/"):
            return dst.rstrip("/") + full[len(src):]
    return ref


# --- the build context ---------------------------------------------------------------------------------


def _write_if_changed(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Leave an unchanged file alone: the client's file sync compares size and mtime."""
    if path.is_file() and not path.is_symlink() and path.read_bytes() == data:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def prepare_context(dockerfile: str, wheelhouse: Path | None, into: Path) -> Path:
    """Dockerfile, probe and wheelhouse: everything the generated Dockerfile refers to.

    `into` is reused from build to build: files that did not change keep their size and mtime, so the
    docker client sends nothing for them again (a 200 MB torch wheel costs seconds per build otherwise).
    """
    if wheelhouse and not wheelhouse.is_dir():
        raise BuildError(f"--wheelhouse {wheelhouse}: no such directory")
    into.mkdir(parents=True, exist_ok=True)
    _write_if_changed(into / "Dockerfile", dockerfile.encode("utf-8"))
    _write_if_changed(into / "probe.py", PROBE.read_bytes(), 0o755)
    wheels = into / "wheelhouse"
    wheels.mkdir(exist_ok=True)
    wanted = {}
    if wheelhouse:
        wanted = {w.name: w for w in sorted(wheelhouse.iterdir()) if w.is_file() and w.suffix in (".whl", ".gz", ".zip")}
    for old in wheels.iterdir():
        if old.name not in wanted:
            old.unlink() if not old.is_dir() or old.is_symlink() else shutil.rmtree(old)
    for name, src in wanted.items():
        dst = wheels / name
        st = src.stat()
        if dst.exists():
            have = dst.stat()
            if (have.st_size, have.st_mtime_ns) == (st.st_size, st.st_mtime_ns):
                continue
            dst.unlink()
        try:
            os.link(src, dst)  # free when on the same filesystem
        except OSError:
            shutil.copy2(src, dst)  # keeps the mtime, so the next build sees an unchanged file
    return into


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One build at a time per context folder (two envbuild processes in one project, same backend)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            import fcntl
        except ImportError:  # not on POSIX: no lock, as before
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_command(builder: engine.Builder, context: Path, iidfile: Path, opts: BuildOptions, tags: Iterable[str] = ()) -> list[str]:
    argv = [*builder.argv, "--progress=plain", "--iidfile", str(iidfile), "-f", str(context / "Dockerfile")]
    for tag in tags:  # BuildKit names the image only when the build succeeded
        argv += ["-t", tag]
    if opts.ca_bundle:
        argv += ["--secret", f"id=ca_bundle,src={opts.ca_bundle}"]
    if opts.netrc:
        argv += ["--secret", f"id=netrc,src={opts.netrc}"]
    for arg in opts.build_args:
        argv += ["--build-arg", arg]
    for label in opts.labels:
        argv += ["--label", label]
    if opts.no_cache:
        argv.append("--no-cache")
    if opts.platform:
        argv += ["--platform", opts.platform]
    if opts.builder or opts.cache_to:
        if not builder.buildx:
            what = " and ".join(n for n, v in (("--builder", opts.builder), ("--cache-to", opts.cache_to)) if v)
            raise BuildError(
                f"{what} need{'s' if ' and ' not in what else ''} the buildx plugin, which {builder.argv[0]} lacks "
                "(`docker buildx version` fails): install docker-buildx (Debian/Ubuntu) or docker-buildx-plugin. "
                "Without it, a registry cache still works: build with --build-arg BUILDKIT_INLINE_CACHE=1, push the "
                "image, and pass it to later builds as --cache-from IMAGE."
            )
        if opts.builder:
            argv += ["--builder", opts.builder]
        for spec in opts.cache_to:
            argv += ["--cache-to", spec]
    for spec in opts.cache_from:
        if not builder.buildx and spec.startswith("type=") and not spec.startswith("type=registry,"):
            raise BuildError(f"--cache-from {spec}: the legacy `docker build` reads only registry caches; local caches need buildx")
        if not builder.buildx and spec.startswith("type=registry,"):
            # The legacy client takes an image reference, not a buildx cache spec.
            ref = dict(kv.split("=", 1) for kv in spec.split(",") if "=" in kv).get("ref")
            if not ref:
                raise BuildError(f"--cache-from {spec}: no ref=IMAGE in the spec")
            spec = ref
        argv += ["--cache-from", spec]
    argv.append(str(context))
    return argv


# --- progress ------------------------------------------------------------------------------------------

_STEP = re.compile(r"^#(\d+) \[(?:([\w.-]+) )?(\d+/\d+)\] (.*)$")
_DONE = re.compile(r"^#(\d+) (DONE [\d.]+s|CACHED|ERROR.*)$")


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
    parts = [p for p in parts if not p.startswith(("if [ -s /run/secrets/", "export "))] or parts
    text = " && ".join(parts).replace("/run/uv/uv ", "uv ")
    return "RUN " + " ".join(_OPTION.sub("", text).split())


class Progress:
    """Turns BuildKit's plain output into one line per step; -v passes everything through.

    `status` (optional) hears the step running now, for a live status line.
    """

    def __init__(self, backend: str, echo: Callable[[str], None], verbose: bool = False,
                 status: Callable[[str], None] | None = None):
        self.backend = backend
        self.echo = echo
        self.verbose = verbose
        self.status = status
        self.names: dict[str, str] = {}
        self.steps: list[str] = []

    def feed(self, line: str) -> None:
        if self.verbose:
            self.echo(f"[{self.backend}] {line}")
        m = _STEP.match(line)
        if m and m.group(1) not in self.names:
            stage = m.group(2) or ""
            stage = "" if re.fullmatch(r"stage-\d+", stage) else stage  # the unnamed final stage
            self.names[m.group(1)] = f"{stage + ' ' if stage else ''}{m.group(3)} {summarize(m.group(4))[:90]}"
            if self.status:
                self.status(self.names[m.group(1)])
            return
        m = _DONE.match(line)
        if m and m.group(1) in self.names:
            text = f"{self.names.pop(m.group(1))} ... {m.group(2).split(':')[0]}"
            self.steps.append(text)
            if not self.verbose:
                self.echo(f"[{self.backend}] {text}")
            if self.status and self.names:
                self.status(next(reversed(self.names.values())))


# --- the build -----------------------------------------------------------------------------------------


# --- up to date? ------------------------------------------------------------------------------------------
# Docker's own no-op still runs the whole solver. When nothing that goes into the image changed, envbuild
# answers from a record of the last good build instead: the same Dockerfile, context files and build
# options (the fingerprint), the same local base image, and every tag still on the image it made. The base
# is compared as the engine holds it locally, which is what BuildKit in the engine builds from (it asks the
# registry only for a base it does not have): a newer base pulled with `docker pull` makes a real build.


def fingerprint(context: Path, argv: list[str]) -> str:
    """What the build reads: the builder's arguments (minus the id file) and every context file (the
    wheelhouse by name, size and mtime, as the docker client's file sync compares them)."""
    import hashlib

    h = hashlib.sha256()
    args = [a for i, a in enumerate(argv) if a != "--iidfile" and (i == 0 or argv[i - 1] != "--iidfile")]
    h.update("\0".join(args).encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file() and p.name != STATE_FILE):
        rel = path.relative_to(context).as_posix()
        h.update(_as_synced(path, rel) if rel.startswith("wheelhouse/") else f"\0{rel}\0".encode() + path.read_bytes())
    return h.hexdigest()


def _as_synced(path: Path, name: str) -> bytes:
    """A wheel as the docker client's file sync sees it: name, size and mtime (not its 200 MB of content)."""
    st = path.stat()
    return f"\0{name}\0{st.st_size}\0{st.st_mtime_ns}".encode()


def _last_build(context: Path) -> dict:
    import json

    try:
        last = json.loads((context / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return last if isinstance(last, dict) and last.get("base_id") and last.get("image_id") else {}


def _still_there(last: dict) -> bool:
    """The local base is the one built from, and every tag still names the image built."""
    tags = last.get("tags") or []
    ids = engine.local_image_ids([last["base"], *tags])
    return bool(ids) and ids.get(last["base"]) == last["base_id"] and all(ids.get(t) == last["image_id"] for t in tags)


def _up_to_date(context: Path, fp: str, base: str, tags: list[str]) -> str | None:
    """The image id of the last good build when nothing changed since, else None."""
    last = _last_build(context)
    if not last or last.get("fingerprint") != fp or last.get("base") != base or sorted(last.get("tags", [])) != sorted(tags):
        return None
    return last["image_id"] if _still_there(last) else None


def _remember(context: Path, fp: str, base: str, tags: list[str], image_id: str, inputs: str | None = None) -> None:
    import json

    ids = engine.local_image_ids([base])
    state = context / STATE_FILE
    if not ids or not ids.get(base):  # a base the engine does not hold locally: BuildKit asks the registry
        state.unlink(missing_ok=True)
        return
    record = {"fingerprint": fp, "inputs": inputs, "base": base, "base_id": ids[base], "tags": tags, "image_id": image_id}
    _write_if_changed(state, (json.dumps(record, indent=2) + "\n").encode())


# The same question before anything is parsed: the build's raw inputs (envbuild's own source, the matrix
# file, the options, the wheelhouse listing) hashed as they are. Same raw inputs, same Dockerfile and
# context, so the record of the last good build answers without loading the matrix or rendering.


@functools.lru_cache(maxsize=1)
def _own_source() -> bytes:
    """envbuild's code, templates and probe: what turns a matrix into a Dockerfile and context (once a run)."""
    import hashlib

    from .paths import PACKAGE

    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix in (".py", ".j2", ".yaml") and "__pycache__" not in path.parts:
            h.update(f"\0{path.relative_to(PACKAGE).as_posix()}\0".encode() + path.read_bytes())
    return h.digest()


def inputs_key(backend: str, params: dict) -> str:
    import hashlib
    import json

    h = hashlib.sha256(json.dumps({"backend": backend, **params}, sort_keys=True, default=str).encode())
    h.update(_own_source())
    matrix = Path(params["matrix"])
    h.update(b"\0matrix\0" + (matrix.read_bytes() if matrix.is_file() else b"(missing)"))
    wheelhouse = params.get("wheelhouse")
    if wheelhouse and Path(wheelhouse).is_dir():
        for w in sorted(Path(wheelhouse).iterdir()):
            h.update(_as_synced(w, w.name))
    return h.hexdigest()


def quick_up_to_date(backends: list[str], params: dict, context_dir: Path = DEFAULT_CONTEXT_DIR) -> list[BuildResult] | None:
    """Results for every backend when none needs building, else None (then build as usual)."""
    results = []
    for name in dict.fromkeys(backends):
        start = time.monotonic()
        last = _last_build((context_dir / name).resolve())
        if not last or last.get("inputs") != inputs_key(name, params) or not _still_there(last):
            return None
        results.append(BuildResult(backend=name, ok=True, tags=last["tags"], image_id=last["image_id"],
                                   seconds=time.monotonic() - start, up_to_date=True))
    return results


def build(
    matrix: Matrix,
    backend: Backend,
    opts: BuildOptions,
    *,
    mirrors: Iterable[str] = (),
    echo: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
    verbose: bool = False,
    status: Callable[[str], None] | None = None,
) -> BuildResult:
    """Build one backend's image and tag it; the old tags stay put when anything fails."""
    mirrors = list(mirrors)
    if mirrors:
        from dataclasses import replace

        backend = replace(backend, base_image=mirror_image(backend.base_image or "", mirrors))
    multi_platform = bool(opts.platform and "," in opts.platform)
    tags = list(opts.tags) or matrix.tags(backend)
    if opts.ca_bundle and not opts.ca_bundle.is_file():
        raise BuildError(f"--ca-bundle {opts.ca_bundle}: no such file")
    if opts.netrc and not opts.netrc.is_file():
        raise BuildError(f"--netrc {opts.netrc}: no such file")
    builder = engine.find_builder()
    if multi_platform:
        if not builder.buildx:
            raise BuildError(f"--platform {opts.platform}: several platforms in one build need the buildx plugin "
                             "(install docker-buildx or docker-buildx-plugin), or build one platform at a time")
        # The local engine holds one platform per tag: the result stays in the builder (export it with
        # --cache-to), and nothing is tagged here.
        builder = engine.Builder(tuple(a for a in builder.argv if a != "--load"), builder.env, builder.buildx)
        tags = []
    start = time.monotonic()
    context_dir = (opts.context_dir / backend.name).resolve()
    # Only a plain build on the local engine can be answered from the record (see _up_to_date).
    recordable = bool(tags) and not (opts.no_cache or opts.platform or opts.builder or opts.cache_to)
    with _locked(opts.context_dir / f"{backend.name}.lock"), tempfile.TemporaryDirectory(prefix=f"envbuild-{backend.name}-") as tmp:
        from .render import render_backend

        context = prepare_context(render_backend(matrix, backend), opts.wheelhouse, context_dir)
        iidfile = Path(tmp) / "iid"
        argv = build_command(builder, context, iidfile, opts, tags)
        fp = fingerprint(context, argv) if recordable else ""
        unchanged = _up_to_date(context, fp, backend.base_image or "", tags) if recordable else None
        if unchanged:
            _remember(context, fp, backend.base_image or "", tags, unchanged, dict(opts.inputs).get(backend.name))
            return BuildResult(backend=backend.name, ok=True, tags=tags, image_id=unchanged,
                               seconds=time.monotonic() - start, up_to_date=True)
        opts.log_dir.mkdir(parents=True, exist_ok=True)
        log = opts.log_dir / f"build-{backend.name}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        result = BuildResult(backend=backend.name, ok=False, tags=tags, log=log)
        progress = Progress(backend.name, echo, verbose, status)
        target = tags[0] if tags else f"{opts.platform} (kept in the builder, not loaded)"
        echo(f"[{backend.name}] building {backend.base_image} -> {target} (log: {log})")
        env = {**os.environ, **dict(builder.env)}
        with open(log, "w", encoding="utf-8") as fh:
            fh.write("$ " + " ".join(argv) + "\n")
            try:
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                        errors="replace", stdin=subprocess.DEVNULL)
            except OSError as exc:
                raise BuildError(f"cannot run {argv[0]}: {exc.strerror}") from None
            try:
                assert proc.stdout is not None
                tail: list[str] = []
                for line in proc.stdout:
                    fh.write(line)
                    line = line.rstrip("\n")
                    progress.feed(line)
                    tail = (tail + [line])[-15:]
                rc = proc.wait()
            except BaseException:
                proc.kill()
                proc.wait()
                raise
        result.seconds = time.monotonic() - start
        result.steps = progress.steps
        if rc != 0 or not iidfile.exists():
            if any(_NO_DAEMON.search(ln) for ln in tail):
                where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
                raise DockerError(f"cannot reach the Docker daemon at {where}. {engine.NO_DAEMON_HINT}")
            errors = [ln for ln in tail if "ERROR" in ln or "error" in ln.lower()]
            result.error = (errors[-1] if errors else (tail[-1] if tail else f"exit code {rc}"))[:300]
            return result
        result.image_id = iidfile.read_text().strip()
        if recordable:
            _remember(context, fp, backend.base_image or "", tags, result.image_id, dict(opts.inputs).get(backend.name))
    result.ok = True
    return result


def build_many(
    matrix: Matrix,
    backends: list[Backend],
    opts: BuildOptions,
    *,
    jobs: int = 1,
    mirrors: Iterable[str] = (),
    echo: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
    verbose: bool = False,
    board: "StatusBoard | None" = None,
) -> list[BuildResult]:
    """Build several backends, `jobs` at a time (threads, one builder process each); results in input order.

    A backend that fails does not stop the others. When backends share steps (same base, same commands),
    BuildKit on the one daemon runs each shared step once, whichever build reaches it first.
    """
    from concurrent.futures import ThreadPoolExecutor

    mirrors = list(mirrors)

    def one(backend: Backend) -> BuildResult:
        name = backend.name
        say = board.echo if board else echo
        if board:
            board.start(name)
        try:
            result = build(matrix, backend, opts, mirrors=mirrors, echo=say, verbose=verbose,
                           status=(lambda text: board.step(name, text)) if board else None)
        except BuildError as exc:
            if len(backends) == 1:
                raise
            result = BuildResult(backend=name, ok=False, tags=[], error=str(exc))
        if board:
            board.finish(name, result.ok, (result.image_id or "")[:19] if result.ok else (result.error or "failed"))
        return result

    if jobs <= 1 or len(backends) == 1:
        return [one(b) for b in backends]
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="envbuild-build") as pool:
        futures = [pool.submit(one, b) for b in backends]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise
