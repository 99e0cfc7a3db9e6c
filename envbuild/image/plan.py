"""Everything that decides an image, gathered once, up front, into one frozen BuildPlan with one key.

The plan holds the Dockerfile, probe and uv step script bytes, the wheelhouse (each wheel by content), the
builder's argv, the environment that steers the client, engine, builder and platform (and the values that
pass-through build arguments take from it), and the local id of the base image. The build context is written
from the plan, never read again from the template, the probe or the script, so what is built is what is keyed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from envbuild.engine import select
from envbuild.engine.docker import buildx_selection
from envbuild.core.errors import BuildError, InvalidInput
from envbuild.core.files import read_netrc, write_atomic
from envbuild.core.paths import PROBE
from envbuild.core.imageref import InvalidReference, Reference, is_loopback, mirror, parse_mirror
from envbuild.core.platform import Platform, foreign_arch
from envbuild.core.text import unsafe_char, unsafe_message
from envbuild.image.builder import Builder
from envbuild.image.records import RECORD
from envbuild.render import ENTRYPOINT, UV_STEP, render_backend

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI
    from envbuild.matrix import Backend, Matrix

WHEEL_SUFFIXES = (".whl", ".gz", ".zip")
DIGESTS = ".wheel-digests.json"  # in the context folder: content digests by file identity, so a no-op rehashes nothing
# The environment that picks the docker client, the engine, the builder and the platform, or that changes
# what a build produces: a different value is a different build.
STEERING = (
    "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_API_VERSION",
    "DOCKER_BUILDKIT", "DOCKER_DEFAULT_PLATFORM", "BUILDX_BUILDER", "BUILDX_CONFIG", "BUILDKIT_HOST",
    "SOURCE_DATE_EPOCH", "ENVBUILD_DOCKER",
)


CA_ENV_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT")


def default_ca_bundle() -> Path | None:
    """The bundle the host already trusts, from the usual variables (first one set wins)."""
    value = next((os.environ[v] for v in CA_ENV_VARS if os.environ.get(v)), None)
    return Path(value) if value else None


# What the builder's client (docker, its plugins, the loader) reads from its environment: no --build-arg may set it.
CLIENT_ENV = re.compile(r"^(?:PATH|HOME|TMPDIR|LD_\w*|DYLD_\w*|DOCKER_\w*|BUILDX_\w*|BUILDKIT_(?:HOST|PROGRESS|COLORS)|"
                        r"XDG_\w*|SSL_CERT_\w*|GOMAXPROCS|GODEBUG)$")


@dataclass(frozen=True)
class BuildOptions:
    wheelhouse: Path | None = None
    ca_bundle: Path | None = None
    netrc: Path | None = None
    tags: tuple[str, ...] = ()
    build_args: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    mirrors: tuple[str, ...] = ()
    # A site's package index mirrors (index URL -> mirror URL, core/settings.py): the build and the resolver ask
    # the mirror; the image's content key and the lock's inputs keep the index's own URL.
    index_mirrors: tuple[tuple[str, str], ...] = ()
    no_cache: bool = False
    platform: Platform | None = None  # a str given is read as Docker reads it (linux/aarch64 is linux/arm64)
    builder: str | None = None
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    network: str | None = None  # the network of RUN steps (`host`: an index on this machine's loopback)
    log_dir: Path = Path(".envbuild") / "logs"
    context_dir: Path = Path(".envbuild") / "context"
    locks_dir: Path = Path("locks")

    def __post_init__(self) -> None:
        if isinstance(self.platform, str) and not isinstance(self.platform, Platform):
            if (found := Platform.normal(self.platform)) is not None:  # what is none is refused by check()
                object.__setattr__(self, "platform", found)

    def check(self) -> None:
        """Refuse, before any work, values the builder would read as options or that would corrupt its command
        line or logs (they go to its argv, never through a shell)."""
        for option, values in (("--image", self.tags), ("--build-arg", self.build_args), ("--label", self.labels),
                               ("--platform", (self.platform or "",)), ("--builder", (self.builder or "",)),
                               ("--cache-from", self.cache_from), ("--cache-to", self.cache_to),
                               ("--network", (self.network or "",))):
            for value in values:
                if (ch := unsafe_char(value)) is not None:
                    raise InvalidInput(f"{option}: {unsafe_message(value, ch)}")
                if value.startswith("-"):
                    raise InvalidInput(f"{option} {value!r} starts with '-': the builder would read it as an option")
        for option, values, example in (("--build-arg", self.build_args, "HTTP_PROXY=http://proxy:3128"),
                                        ("--label", self.labels, "org.example.team=ml")):
            for value in values:
                key, sep, _ = value.partition("=")
                if option == "--build-arg" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) and CLIENT_ENV.match(key):
                    raise InvalidInput(f"--build-arg {key}: the builder's client reads this variable itself (values go "
                                       "to it through its environment, never its command line); pass another name")
                if option == "--build-arg" and not sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                    continue  # NAME alone: its value comes from the environment, never the command line
                if option == "--build-arg" and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                    raise InvalidInput(f"--build-arg {value.partition('=')[0]!r}: expected NAME=VALUE or NAME with NAME "
                                       "a variable name, e.g. --build-arg HTTP_PROXY=http://proxy:3128")
                if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", key):
                    raise InvalidInput(f"{option} {value!r}: expected KEY=VALUE{' or NAME' if option == '--build-arg' else ''}, "
                                       f"e.g. {option} {example}")
        for rule in self.mirrors:  # FROM=TO, both registry[/path]: the result lands in a FROM line
            parse_mirror(rule)
        for tag in self.tags:
            try:
                ref = Reference.parse(tag, "--image")
            except InvalidReference as exc:
                raise InvalidInput(f"{exc} (e.g. 'myorg/envbuild:cpu')") from None
            if ref.digest:
                raise InvalidInput(f"--image {tag!r}: the tag to give cannot carry a digest (e.g. 'myorg/envbuild:cpu')")
        if self.platform:  # the CLI gave it read (canonical); a library caller's is read here, by the same rule
            Platform.parse(self.platform)
        if self.network and not re.fullmatch(r"[A-Za-z0-9_.-]+", self.network):
            raise InvalidInput(f"--network {self.network!r} is not a network name such as host, none or default")


def options(*, ca_bundle: Path | None = None, no_ca_bundle: bool = False, netrc: Path | None = None,
            **values: Any) -> BuildOptions:
    """The options of a build or lock from what the user gave, checked before any work: --ca-bundle and --netrc
    regular files (a FIFO or a device would hang the builder), the netrc readable (a bad one is named here, never
    quoted: pip would quote it), the CA bundle by default the host's (a variable naming a missing file is an
    error, not a silent build without it), and every value the builder reads (BuildOptions.check)."""
    for option, given in (("--ca-bundle", ca_bundle), ("--netrc", netrc)):
        if given is not None and not given.is_file():
            raise InvalidInput(f"{option} {given}: not a regular file")
    if netrc is not None:
        read_netrc(netrc)
    ca = None if no_ca_bundle else (ca_bundle or default_ca_bundle())
    if ca and not ca.is_file():
        raise BuildError(f"CA bundle {ca} (from the environment) does not exist: pass --ca-bundle FILE or --no-ca-bundle")
    opts = BuildOptions(ca_bundle=ca, netrc=netrc, **values)
    opts.check()
    return opts


@dataclass(frozen=True)
class Wheel:
    name: str
    source: str
    size: int
    mtime_ns: int
    sha256: str


@dataclass(frozen=True)
class BuildPlan:
    backend: str
    base_image: str  # after --mirror
    base_id: str | None  # the engine's local image of base_image; None: BuildKit asks the registry
    dockerfile: bytes  # as built: with the site's registry and index mirrors
    # The Dockerfile as any site renders it (no mirror): what the content key digests, so that an image built
    # through a mirror is the same image.
    dockerfile_digest: str
    probe: bytes
    uv_step: bytes  # the install steps' cache logic, read by their shell (render/scripts/uv-step.sh)
    wheels: tuple[Wheel, ...]
    lock: bytes  # the lock the image installs (locks/<backend>.txt); empty while the lock is being resolved
    index_mirrors: tuple[tuple[str, str], ...]  # where the layers' files are fetched (not content: the hash is)
    context: str  # the build context folder (stable per backend: the client's file sync keys by it)
    argv: tuple[str, ...]  # the builder's command line, without --iidfile (new every build)
    environment: tuple[tuple[str, str | None], ...]  # STEERING, the builder's own, pass-through build-arg values
    tags: tuple[str, ...]
    # Whether the record of the last good build may answer for this plan: only a plain build by the engine's
    # own BuildKit, which builds from the local base without asking the registry.
    answerable: bool = field(default=False)
    entrypoint: bytes = b""  # the image's entrypoint script (render/scripts/entrypoint.sh)
    # Each layer of the lock as a pylock.toml, (layer, text), as the lock stage made it from the lock, the wheels and
    # the index mirrors (envbuild.image.locking.with_lock): the image stage writes them and never reads a lock itself.
    lock_layers: tuple[tuple[str, str], ...] = ()

    def key(self) -> str:
        """One digest of every field: a field added later is in the key without anyone remembering it."""
        h = hashlib.sha256()
        for f in fields(self):
            h.update(json.dumps([f.name, _canonical(getattr(self, f.name))]).encode())
            h.update(b"\0")
        return h.hexdigest()

    @property
    def context_path(self) -> Path:
        return Path(self.context)


# Docker's predefined proxy arguments: how the build reaches the network, never what it builds (BuildKit keeps them
# out of its cache keys too), so no part of the content key.
PROXY_ARGS = ("HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY")
CONTENT_LABEL = "dev.envbuild.content"  # the image's content key (content_key): the same on any machine


def content_key(plan: BuildPlan, opts: BuildOptions, environ: Mapping[str, str] | None = None) -> str:
    """What decides the image's content, as any machine computes it from the same checkout: the Dockerfile, the
    probe, the uv step script, the lock (its record of the base image's registry digest for the platform, and every
    file by its name and sha256), the build arguments' values and the platform. Not where the files come from (an
    index, a mirror, the wheel folder: the hash is what is trusted), labels (a revision), the engine, its ids, a
    path, the time or who builds: a registry holding an image
    under this key (REPO:BACKEND-in-KEY) holds this very image, and publishing it again uploads nothing."""
    from envbuild.core.platform import target

    env = os.environ if environ is None else environ
    digest = lambda data: hashlib.sha256(data).hexdigest()  # noqa: E731
    doc = {
        "format": 1,
        "dockerfile": plan.dockerfile_digest, "probe": digest(plan.probe), "uv_step": digest(plan.uv_step),
        "entrypoint": digest(plan.entrypoint),
        # names the base image, its digest for the platform, and every file by its name and sha256: not where the
        # files come from (an index, a mirror, a wheel folder), which the hash makes the same
        "lock": digest(plan.lock),
        "build_args": sorted([a.partition("=")[0], a.partition("=")[2] if "=" in a else env.get(a)] for a in opts.build_args
                             if a.partition("=")[0].upper() not in PROXY_ARGS),
        "platform": target(opts.platform),  # labels are not content: a revision label differs on every commit
    }
    return digest(json.dumps(doc, sort_keys=True).encode())


def with_content_label(plan: BuildPlan, key: str) -> BuildPlan:
    """The plan whose image carries its content key as a label (the key itself never depends on it)."""
    return dataclasses.replace(plan, argv=(*plan.argv[:-1], "--label", f"{CONTENT_LABEL}={key}", plan.argv[-1]))


def _canonical(value: Any) -> Any:
    if isinstance(value, bytes):
        return "sha256:" + hashlib.sha256(value).hexdigest()
    if dataclasses.is_dataclass(value):
        return [_canonical(getattr(value, f.name)) for f in fields(value)]
    if isinstance(value, (tuple, list)):
        return [_canonical(v) for v in value]
    return value


# --- making a plan -------------------------------------------------------------------------------------------


def make_plan(matrix: Matrix, backend: Backend, opts: BuildOptions, engine: EngineAPI | None,
              environ: Mapping[str, str] | None = None, lock: bytes = b"", write_cache: bool = True) -> BuildPlan:
    """Read every input of one backend's build, once. Without an engine the base image's id is unknown;
    without write_cache nothing is written (`lock --check`)."""
    env = os.environ if environ is None else environ
    base = mirror(backend.base_image, opts.mirrors) if backend.base_image else ""
    canonical = render_backend(matrix, backend).encode("utf-8")
    dockerfile = canonical
    if base != backend.base_image or opts.index_mirrors:
        backend = dataclasses.replace(backend, base_image=base)
        dockerfile = render_backend(matrix, backend, opts.index_mirrors).encode("utf-8")
    for what, path in (("--ca-bundle", opts.ca_bundle), ("--netrc", opts.netrc)):
        if path and not path.is_file():
            raise BuildError(f"{what} {path}: no such file")
    builder = select.builder(engine)

    tags: tuple[str, ...] = tuple(opts.tags) or tuple(matrix.tags(backend, foreign_arch(opts.platform)))
    context = (opts.context_dir / backend.name).resolve()
    environment = [("engine", engine.host if engine else None)] + [(name, env.get(name)) for name in STEERING]
    environment += [(f"builder {k}", v) for k, v in builder.env]
    # --build-arg values (given or from the environment) reach the builder through its environment: keyed here
    environment += [(f"--build-arg {a.partition('=')[0]}", a.partition("=")[2] if "=" in a else env.get(a))
                    for a in opts.build_args]
    environment.append(("buildx current builder", buildx_selection(env)))
    engine_builds = not builder.buildx or (not env.get("BUILDX_BUILDER") and buildx_selection(env) in (None, "default"))
    plan = BuildPlan(
        backend=backend.name,
        base_image=base,
        base_id=engine.image_id(base) if base and engine else None,
        dockerfile=dockerfile,
        dockerfile_digest=hashlib.sha256(canonical).hexdigest(),
        probe=PROBE.read_bytes(),
        uv_step=UV_STEP.read_bytes(),
        entrypoint=ENTRYPOINT.read_bytes(),
        wheels=wheels(opts.wheelhouse, context / DIGESTS, write=write_cache),
        lock=lock,
        index_mirrors=tuple(opts.index_mirrors),
        context=str(context),
        argv=tuple(command(builder, context, opts, tags, base)),
        environment=tuple(environment),
        tags=tags,
    )
    answerable = (bool(tags) and plan.base_id is not None and engine_builds
                  and not (opts.no_cache or opts.platform or opts.builder or opts.cache_to or env.get("DOCKER_DEFAULT_PLATFORM")))
    return dataclasses.replace(plan, answerable=answerable)


FRESH_CACHE = ".fresh-cache"  # beside the context's files, never sent (.dockerignore): the nonce of a --no-cache build


def fresh_cache_file(context: Path) -> Path:
    """A new nonce for the fresh_cache secret of a --no-cache build (the uv steps start an empty cache for it)."""
    path = context / FRESH_CACHE
    context.mkdir(parents=True, exist_ok=True)
    write_atomic(path, uuid.uuid4().hex + "\n")
    return path


def command(builder: Builder, context: Path, opts: BuildOptions, tags: tuple[str, ...], base: str = "") -> list[str]:
    """The builder's argv for these options (secrets as files, never values)."""
    argv = [*builder.argv, "--progress=plain", "-f", str(context / "Dockerfile")]
    for option, value in (("--builder", opts.builder), ("--cache-to", opts.cache_to)):
        if value and builder.refusal(option):  # what the builder cannot do, refused by name (never dropped)
            raise BuildError(builder.refusal(option))
    if builder.loopback_base and base and is_loopback(Reference.parse(base).registry):
        argv += builder.loopback_base  # a base on loopback is plain HTTP, as Docker treats it
    for tag in tags:  # BuildKit names the image only when the build succeeded
        argv += ["-t", tag]
    if opts.ca_bundle:
        argv += ["--secret", f"id=ca_bundle,src={opts.ca_bundle}"]
    if opts.netrc:
        argv += ["--secret", f"id=netrc,src={opts.netrc}"]
    for arg in opts.build_args:  # NAME only: the client reads its value from its environment (run_build sets it)
        argv += ["--build-arg", arg.partition("=")[0]]
    for label in opts.labels:
        argv += ["--label", label]
    if opts.no_cache:
        # Not every BuildKit empties cache mounts for --no-cache: a new value in the fresh_cache secret makes the
        # Dockerfile's uv steps start an empty uv cache too (render/scripts/uv-step.sh), so the build really starts
        # from nothing. A secret, not a build argument: it is no part of a step's cache key, so the next plain
        # build reuses this one's layers.
        argv += ["--no-cache", "--secret", f"id=fresh_cache,src={fresh_cache_file(context)}"]
    if opts.platform:
        argv += ["--platform", opts.platform]
    if opts.network:
        argv += ["--network", opts.network]
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
            raise BuildError(f"--cache-from {spec}: {builder.called} reads only registry caches; local caches need buildx")
        if not builder.buildx and spec.startswith("type=registry,"):
            # The legacy client and podman take an image reference (podman: a repository), not a buildx cache spec.
            ref = dict(kv.split("=", 1) for kv in spec.split(",") if "=" in kv).get("ref")
            if not ref:
                raise BuildError(f"--cache-from {spec}: no ref=IMAGE in the spec")
            spec = ref
        argv += ["--cache-from", spec]
    argv.append(str(context))
    return argv


# --- the wheelhouse --------------------------------------------------------------------------------------------


def wheels(wheelhouse: Path | None, digests: Path, write: bool = True) -> tuple[Wheel, ...]:
    """Each wheel by name, size, mtime and content digest. A digest is hashed again only when the file's
    identity changed (device, inode, size, mtime, ctime: any write changes the ctime)."""
    if not wheelhouse:
        return ()
    if not wheelhouse.is_dir():
        raise BuildError(f"--wheelhouse {wheelhouse}: no such directory")
    try:
        known = json.loads(digests.read_text(encoding="utf-8"))
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    found, seen = [], {}
    for path in sorted(p for p in wheelhouse.iterdir() if p.is_file() and p.name.endswith(WHEEL_SUFFIXES)):
        st = path.stat()
        identity = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        source = str(path.resolve())
        entry = known.get(source)
        if isinstance(entry, list) and entry[:-1] == identity and isinstance(entry[-1], str):
            digest = entry[-1]
        else:
            digest = _sha256(path)
        seen[source] = [*identity, digest]
        found.append(Wheel(path.name, source, st.st_size, st.st_mtime_ns, digest))
    if seen != known and write:
        try:
            write_atomic(digests, json.dumps(seen, indent=1) + "\n")
        except OSError:  # only costs the next build a rehash
            pass
    return tuple(found)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# --- the build context ------------------------------------------------------------------------------------------


def lock_command(plan: BuildPlan, out: Path, run: str) -> list[str]:
    """The builder's argv for the Dockerfile's `lock` target: the plan's, exported to `out`, tagging nothing.
    `run` is new every time: resolving is asked for, never answered from BuildKit's cache."""
    argv, skip = [], False
    for arg in plan.argv[:-1]:
        if skip or arg == "--load":
            skip = False
            continue
        if arg == "-t":
            skip = True
            continue
        argv.append(arg)
    return [*argv, "--target", "lock", "--output", f"type=local,dest={out}", "--build-arg", f"ENVBUILD_LOCK_RUN={run}",
            plan.argv[-1]]


def write_context(plan: BuildPlan) -> None:
    """Dockerfile, probe, the uv steps' script and wheelhouse, from the plan. Unchanged files keep their size and
    mtime, so the docker client sends nothing for them again (a 200 MB torch wheel costs seconds per build otherwise)."""
    into = plan.context_path
    into.mkdir(parents=True, exist_ok=True)
    # envbuild's own state beside the context is never part of it
    write_atomic(into / ".dockerignore", f"{RECORD}\n{DIGESTS}\n{FRESH_CACHE}\n")
    write_atomic(into / "Dockerfile", plan.dockerfile)
    write_atomic(into / "probe.py", plan.probe, 0o755)
    write_atomic(into / UV_STEP.name, plan.uv_step)
    write_atomic(into / ENTRYPOINT.name, plan.entrypoint, 0o755)
    # The lock, and each of its layers as the lock stage wrote it, a pylock.toml naming each file's source: a layer's
    # step is cached by its file's content.
    write_atomic(into / "lock" / "lock.txt", plan.lock)
    for layer, text in plan.lock_layers:
        write_atomic(into / "lock" / f"pylock.{layer}.toml", text)
    folder = into / "wheelhouse"
    folder.mkdir(exist_ok=True)
    wanted = {w.name: w for w in plan.wheels}
    for old in folder.iterdir():
        if old.name not in wanted:
            old.unlink() if not old.is_dir() or old.is_symlink() else shutil.rmtree(old)
    for wheel in plan.wheels:
        dst = folder / wheel.name
        if dst.exists():
            have = dst.stat()
            if os.path.samefile(dst, wheel.source):
                continue
            dst.unlink()
        try:
            os.link(wheel.source, dst)  # free when on the same filesystem
        except OSError:
            shutil.copy2(wheel.source, dst)  # keeps the mtime, so the next build sees an unchanged file
        have = dst.stat()
        if (have.st_size, have.st_mtime_ns) != (wheel.size, wheel.mtime_ns):
            raise BuildError(f"--wheelhouse: {wheel.source} changed while the build was being planned; run it again")
