"""Rendered Dockerfile -> image, built with BuildKit on the local engine.

The build runs untagged (its id lands in an --iidfile) and the tags move only after it succeeded, so a
failed build never replaces a good image. Secrets (CA bundle, index credentials) go in as BuildKit
secrets: they are mounted for single RUN steps and never stored in a layer.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from . import engine
from .errors import EnvbuildError
from .matrix import Backend, Matrix
from .render import render_backend

PROBE = Path(__file__).with_name("probe.py")
CA_ENV_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT")
DEFAULT_LOG_DIR = Path(".envbuild") / "logs"


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

    def to_json(self) -> dict:
        return {
            "backend": self.backend,
            "ok": self.ok,
            "image_id": self.image_id,
            "tags": self.tags,
            "seconds": round(self.seconds, 2),
            "log": str(self.log) if self.log else None,
            "error": self.error,
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


def prepare_context(dockerfile: str, wheelhouse: Path | None, into: Path) -> Path:
    """Dockerfile, probe and wheelhouse: everything the generated Dockerfile refers to."""
    into.mkdir(parents=True, exist_ok=True)
    (into / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    shutil.copyfile(PROBE, into / "probe.py")
    os.chmod(into / "probe.py", 0o755)
    wheels = into / "wheelhouse"
    wheels.mkdir()
    if wheelhouse:
        if not wheelhouse.is_dir():
            raise BuildError(f"--wheelhouse {wheelhouse}: no such directory")
        for whl in sorted(wheelhouse.iterdir()):
            if whl.is_file() and whl.suffix in (".whl", ".gz", ".zip"):
                try:
                    os.link(whl, wheels / whl.name)  # free when on the same filesystem
                except OSError:
                    shutil.copy2(whl, wheels / whl.name)
    return into


def build_command(builder: engine.Builder, context: Path, iidfile: Path, opts: BuildOptions) -> list[str]:
    argv = [*builder.argv, "--progress=plain", "--iidfile", str(iidfile), "-f", str(context / "Dockerfile")]
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
            raise BuildError("--builder and --cache-to need the buildx plugin (`docker buildx version` fails here)")
        if opts.builder:
            argv += ["--builder", opts.builder]
        for spec in opts.cache_to:
            argv += ["--cache-to", spec]
    for spec in opts.cache_from:
        argv += ["--cache-from", spec]
    argv.append(str(context))
    return argv


# --- progress ------------------------------------------------------------------------------------------

_STEP = re.compile(r"^#(\d+) \[(?:[\w-]+ )?(\d+/\d+)\] (.*)$")
_DONE = re.compile(r"^#(\d+) (DONE [\d.]+s|CACHED|ERROR.*)$")


class Progress:
    """Turns BuildKit's plain output into one line per step; -v passes everything through."""

    def __init__(self, backend: str, echo: Callable[[str], None], verbose: bool = False):
        self.backend = backend
        self.echo = echo
        self.verbose = verbose
        self.names: dict[str, str] = {}
        self.steps: list[str] = []

    def feed(self, line: str) -> None:
        if self.verbose:
            self.echo(f"[{self.backend}] {line}")
            return
        m = _STEP.match(line)
        if m and m.group(1) not in self.names:
            self.names[m.group(1)] = f"{m.group(2)} {m.group(3)[:90]}"
            return
        m = _DONE.match(line)
        if m and m.group(1) in self.names:
            text = f"{self.names.pop(m.group(1))} ... {m.group(2).split(':')[0]}"
            self.steps.append(text)
            self.echo(f"[{self.backend}] {text}")


# --- the build -----------------------------------------------------------------------------------------


def build(
    matrix: Matrix,
    backend: Backend,
    opts: BuildOptions,
    *,
    mirrors: Iterable[str] = (),
    echo: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
    verbose: bool = False,
) -> BuildResult:
    """Build one backend's image and tag it; the old tags stay put when anything fails."""
    mirrors = list(mirrors)
    if mirrors:
        from dataclasses import replace

        backend = replace(backend, base_image=mirror_image(backend.base_image or "", mirrors))
    tags = list(opts.tags) or matrix.tags(backend)
    if opts.ca_bundle and not opts.ca_bundle.is_file():
        raise BuildError(f"--ca-bundle {opts.ca_bundle}: no such file")
    if opts.netrc and not opts.netrc.is_file():
        raise BuildError(f"--netrc {opts.netrc}: no such file")
    builder = engine.find_builder()
    docker = engine.client()
    opts.log_dir.mkdir(parents=True, exist_ok=True)
    log = opts.log_dir / f"build-{backend.name}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    result = BuildResult(backend=backend.name, ok=False, tags=tags, log=log)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"envbuild-{backend.name}-") as tmp:
        context = prepare_context(render_backend(matrix, backend), opts.wheelhouse, Path(tmp) / "context")
        iidfile = Path(tmp) / "iid"
        argv = build_command(builder, context, iidfile, opts)
        progress = Progress(backend.name, echo, verbose)
        echo(f"[{backend.name}] building {backend.base_image} -> {tags[0]} (log: {log})")
        env = {**os.environ, **dict(builder.env)}
        with open(log, "w", encoding="utf-8") as fh:
            fh.write("$ " + " ".join(argv) + "\n")
            try:
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, errors="replace")
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
            errors = [ln for ln in tail if "ERROR" in ln or "error" in ln.lower()]
            result.error = (errors[-1] if errors else (tail[-1] if tail else f"exit code {rc}"))[:300]
            return result
        result.image_id = iidfile.read_text().strip()
    engine.tag_image(docker, result.image_id, tags)
    result.ok = True
    return result
