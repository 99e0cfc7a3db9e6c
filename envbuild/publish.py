"""Images <-> a registry: publish pushes a backend's tags and records what landed; pull fetches and verifies.

publish: the local image gets the matrix's tags under `--registry REG` (REG:<backend>, REG:<pinned tag>), each
is pushed, and only when every tag landed and the registry confirmed one digest is the backend's entry in
the manifest (default ./envbuild-manifest.json) replaced, atomically. The entry says what the image is
(backend, tags, digest, versions from its labels), where it came from (git revision, date) and what tested
it (the summary of a `smoke --json` result, when one is given).

pull: resolves the tag from the matrix, checks the registry's digest against the manifest before and after
pulling (a mismatch is refused and nothing is tagged), then tags the image as the matrix's default tag so
that `envbuild smoke --backend B` finds it without flags.

Credentials come from ENVBUILD_REGISTRY_USER / ENVBUILD_REGISTRY_PASSWORD (for ghcr.io also GITHUB_ACTOR /
GITHUB_TOKEN), else from the Docker config (`docker login`, credential helpers); never from the command line.
Every message passes through a scrubber that masks the password, in case a registry echoes it back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from . import engine
from .errors import DockerError, EnvbuildError
from .matrix import Backend, Matrix
from .render import write_atomic

MANIFEST_SCHEMA = 1
DEFAULT_MANIFEST = "envbuild-manifest.json"
USER_ENV = "ENVBUILD_REGISTRY_USER"
PASSWORD_ENV = "ENVBUILD_REGISTRY_PASSWORD"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# Same shape as matrix.yaml's image.repository: a repository, no tag, no digest.
REPOSITORY = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
LABEL = "dev.envbuild."
REVISION_LABEL = "org.opencontainers.image.revision"

_AUTH = re.compile(r"unauthorized|authentication required|no basic auth credentials|denied|forbidden|\b40[13]\b", re.IGNORECASE)
_NETWORK = re.compile(
    r"connection refused|no such host|i/o timeout|network is unreachable|dial tcp|connection reset|"
    r"tls handshake timeout|server misbehaving|no route to host",
    re.IGNORECASE,
)


class PublishError(EnvbuildError):
    """A push or pull did not complete; nothing was recorded or tagged for it."""


class RegistryAuthError(PublishError):
    pass


class RegistryUnreachableError(PublishError):
    pass


class DigestMismatchError(PublishError):
    pass


class ManifestError(EnvbuildError):
    pass


# --- credentials ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str = ""  # the variables they came from, for messages (never the values)

    def auth_config(self) -> dict[str, str]:
        return {"username": self.username, "password": self.password}


def credentials_from_env(host: str, environ: Mapping[str, str] | None = None) -> Credentials | None:
    """ENVBUILD_REGISTRY_USER/_PASSWORD; for ghcr.io also GITHUB_ACTOR/GITHUB_TOKEN; else None (Docker config)."""
    env = os.environ if environ is None else environ
    user, password = env.get(USER_ENV, ""), env.get(PASSWORD_ENV, "")
    if user or password:
        if not (user and password):
            missing = PASSWORD_ENV if user else USER_ENV
            raise RegistryAuthError(f"{missing} is not set: set both {USER_ENV} and {PASSWORD_ENV}, or neither to use the Docker config")
        return Credentials(user, password, f"{USER_ENV}/{PASSWORD_ENV}")
    if host == "ghcr.io" and env.get("GITHUB_TOKEN"):
        if not env.get("GITHUB_ACTOR"):
            raise RegistryAuthError("GITHUB_TOKEN is set but GITHUB_ACTOR is not: GHCR needs both (the user and the token)")
        return Credentials(env["GITHUB_ACTOR"], env["GITHUB_TOKEN"], "GITHUB_ACTOR/GITHUB_TOKEN")
    return None


class Scrubber:
    """Masks secrets in any text that reaches the user."""

    def __init__(self, creds: Credentials | None):
        self.secrets = [creds.password] if creds and creds.password else []

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


# --- names ----------------------------------------------------------------------------------------------


def check_repository(value: str, what: str = "--registry") -> str:
    """A repository prefix such as 'ghcr.io/org/envbuild' or 'localhost:5000/envbuild' (no tag, no digest)."""
    repo = value.strip().rstrip("/")
    if "/" not in repo and ":" in repo:
        raise PublishError(f"{what} {value!r} names a registry but no repository in it: add a path, e.g. '{repo}/envbuild'")
    if "@" in repo or not REPOSITORY.match(repo):
        hint = " (give the repository without a tag: the tags come from the matrix)" if re.search(r":[^/]*[^0-9/][^/]*$", repo) else ""
        raise PublishError(f"{what} {value!r} is not an image repository such as 'ghcr.io/org/envbuild' or 'localhost:5000/envbuild'{hint}")
    return repo


def registry_host(repository: str) -> str:
    """'ghcr.io/org/x' -> 'ghcr.io'; 'localhost:5000/x' -> 'localhost:5000'; 'org/x' -> 'docker.io'."""
    first, sep, _ = repository.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def target_refs(m: Matrix, backend: Backend, registry: str) -> list[str]:
    """The matrix's tags (REPO:<backend>, REPO:<pinned>) moved under the registry repository."""
    return [f"{registry}:{engine.split_ref(t)[1]}" for t in m.tags(backend)]


def _same_repo(a: str, b: str) -> bool:
    def norm(r: str) -> str:
        r = r.removeprefix("docker.io/").removeprefix("index.docker.io/")
        return r.removeprefix("library/")

    return norm(a) == norm(b)


# --- registry errors ------------------------------------------------------------------------------------


def registry_error(host: str, message: str, scrub: Scrubber, action: str, creds: Credentials | None = None) -> PublishError:
    """A daemon/registry message -> the error class and a message that says what to do."""
    msg = scrub(" ".join(message.split()))[:400]
    if _AUTH.search(msg):
        used = f"the credentials from {creds.source}" if creds else "the Docker config (no credentials in the environment)"
        ghcr = " (GHCR takes GITHUB_ACTOR and a GITHUB_TOKEN with packages: write)" if host == "ghcr.io" else ""
        return RegistryAuthError(
            f"authentication failed for {host} while {action} ({msg}); used {used}. Check {USER_ENV} and {PASSWORD_ENV}"
            f"{ghcr}, or run `docker login {host}`"
        )
    if _NETWORK.search(msg):
        return RegistryUnreachableError(f"registry {host} unreachable while {action} ({msg}): is it running, and is the address right?")
    return PublishError(f"{action} failed: {msg}")


def _api_message(exc: Exception) -> str:
    return str(getattr(exc, "explanation", None) or exc)


def login(c: Any, host: str, creds: Credentials, scrub: Scrubber) -> None:
    """Check the credentials against the registry up front (the daemon's /auth), before anything is pushed."""
    import docker
    import requests

    try:
        c.login(creds.username, creds.password, registry=None if host == "docker.io" else host, reauth=True)
    except docker.errors.APIError as exc:
        raise registry_error(host, _api_message(exc), scrub, "logging in", creds) from None
    except requests.exceptions.RequestException as exc:
        raise DockerError(scrub(f"the Docker daemon broke off while logging in to {host}: {exc}")) from None


def _stream(lines: Any, host: str, ref: str, scrub: Scrubber, action: str, creds: Credentials | None,
            echo: Callable[[str], None]) -> str | None:
    """Consume a push/pull stream; raise on an error line; return the digest the registry confirmed."""
    import requests

    digest = None
    try:
        for line in lines:
            if not isinstance(line, dict):
                continue
            if line.get("error") or line.get("errorDetail"):
                detail = line.get("errorDetail") or {}
                raise registry_error(host, str(detail.get("message") or line.get("error")), scrub, action, creds)
            aux = line.get("aux") or {}
            if isinstance(aux, dict) and aux.get("Digest"):
                digest = str(aux["Digest"])
            status = str(line.get("status") or "")
            if status.startswith("Digest: "):  # pull's confirmation
                digest = status.split(" ", 1)[1].strip()
            elif status and not line.get("id") and not line.get("progressDetail"):
                echo(scrub(status))
    except requests.exceptions.RequestException as exc:
        raise PublishError(scrub(f"{action} broke off ({type(exc).__name__}: {exc}); the registry did not confirm {ref}")) from None
    return digest


# --- the manifest ---------------------------------------------------------------------------------------


def _read_json(path: Path, label: str, error: type[EnvbuildError]) -> Any:
    """A JSON file, or `error` naming the file (and the line of a syntax error)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{label}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise error(f"{label}:{exc.lineno}: not valid JSON ({exc.msg})") from None


def load_manifest(path: Path, *, must_exist: bool) -> dict[str, Any]:
    """{"schema": 1, "images": {backend: entry}}; a missing file is an empty manifest unless must_exist."""
    if not path.exists():
        if must_exist:
            raise ManifestError(f"manifest {path}: no such file (publish writes it: `envbuild publish --manifest {path}`)")
        return {"schema": MANIFEST_SCHEMA, "images": {}}
    doc = _read_json(path, f"manifest {path}", ManifestError)
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), dict):
        raise ManifestError(f"manifest {path}: expected an object with \"schema\" and \"images\" (is this an envbuild manifest?)")
    if doc.get("schema") != MANIFEST_SCHEMA:
        raise ManifestError(f"manifest {path}: schema {doc.get('schema')!r} is not supported (this envbuild reads schema {MANIFEST_SCHEMA})")
    for name, entry in doc["images"].items():
        if not isinstance(entry, dict) or not DIGEST.match(str(entry.get("digest", ""))):
            raise ManifestError(f"manifest {path}: images.{name}: expected an entry with a \"digest\" such as sha256:<64 hex>")
    return doc


def record(path: Path, entry: dict[str, Any]) -> None:
    """Replace one backend's entry, keep the others; re-read first, write atomically."""
    doc = load_manifest(path, must_exist=False)
    doc["images"][entry["backend"]] = entry
    doc["images"] = dict(sorted(doc["images"].items()))
    try:
        write_atomic(path, json.dumps(doc, indent=2, sort_keys=False) + "\n")
    except OSError as exc:
        raise ManifestError(f"cannot write manifest {path}: {exc.strerror or exc}") from None


# --- smoke results --------------------------------------------------------------------------------------


def load_smoke_results(path: Path) -> dict[str, dict[str, Any]]:
    """`envbuild smoke --json` output (one result or a list) -> {backend: result}."""
    doc = _read_json(path, f"--smoke-json {path}", EnvbuildError)
    docs = doc if isinstance(doc, list) else [doc]
    out: dict[str, dict[str, Any]] = {}
    for d in docs:
        if not isinstance(d, dict) or not isinstance(d.get("backend"), str) or not isinstance(d.get("ok"), bool):
            raise EnvbuildError(f"--smoke-json {path}: not the output of `envbuild smoke --json` (each result needs \"backend\" and \"ok\")")
        out[d["backend"]] = d
    return out


def smoke_summary(result: dict[str, Any], source: Path | None = None) -> dict[str, Any]:
    """What the manifest keeps of a smoke result: the verdict, the checks, when and on what."""
    checks = [c for c in result.get("checks") or [] if isinstance(c, dict)]
    date = result.get("date")
    if not date and source is not None:
        date = datetime.fromtimestamp(source.stat().st_mtime, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "ok": bool(result.get("ok")),
        "passed": sum(1 for c in checks if c.get("ok")),
        "failed": sum(1 for c in checks if not c.get("ok")),
        "failed_checks": [str(c.get("name")) for c in checks if not c.get("ok")],
        "error": result.get("error"),
        "image": result.get("image"),
        "image_id": result.get("image_id"),
        "seconds": result.get("seconds"),
        "date": date,
    }


# --- provenance -----------------------------------------------------------------------------------------


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git_revision(where: Path) -> tuple[str | None, bool | None]:
    """(HEAD, dirty) of the checkout holding `where`, or (None, None) outside one."""
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout if proc.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if not head:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return head.strip(), (bool(status.strip()) if status is not None else None)


def image_versions(labels: Mapping[str, str]) -> dict[str, Any]:
    plugin = labels.get(LABEL + "plugin") or ""
    package, _, version = plugin.partition("==")
    return {
        "torch": labels.get(LABEL + "torch"),
        "plugin": {"package": package, "version": version} if package else None,
        "transformers": labels.get(LABEL + "transformers"),
        "accelerate": labels.get(LABEL + "accelerate"),
    }


def label_mismatches(m: Matrix, backend: Backend, labels: Mapping[str, str]) -> list[str]:
    """Why the image is not what the matrix's tags say it is (empty when it is)."""
    if not labels.get(LABEL + "backend"):
        return ["it has no dev.envbuild.* labels (it was not built by `envbuild build`)"]
    expected = {
        "backend": backend.name,
        "torch": backend.torch.version,
        "plugin": f"{backend.plugin.package}=={backend.plugin.version}" if backend.plugin else "",
        "transformers": m.transformers,
        "accelerate": m.accelerate,
    }
    return [
        f"{key} is {labels.get(LABEL + key)!r} in the image but {value!r} in the matrix"
        for key, value in expected.items()
        if (labels.get(LABEL + key) or "") != value
    ]


# --- publish --------------------------------------------------------------------------------------------


@dataclass
class Published:
    backend: str
    ok: bool
    image: str | None = None
    refs: list[str] = field(default_factory=list)
    digest: str | None = None
    error: str | None = None
    entry: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "ok": self.ok, "image": self.image, "tags": self.refs, "digest": self.digest, "error": self.error}


@dataclass(frozen=True)
class PublishOptions:
    registry: str | None = None
    image: str | None = None
    manifest: Path = Path(DEFAULT_MANIFEST)
    smoke_json: Path | None = None
    force: bool = False


def publish(
    m: Matrix,
    backends: list[Backend],
    opts: PublishOptions,
    *,
    echo: Callable[[str], None] = lambda s: None,
    docker_client: Any = None,
    environ: Mapping[str, str] | None = None,
) -> list[Published]:
    """Push each backend's tags and record each that fully landed. One backend: errors raise; several:
    the others go on past an image problem, but an authentication or network failure stops them all."""
    if opts.image and len(backends) > 1:
        raise EnvbuildError("--image needs a single backend")
    registry = check_repository(opts.registry or m.image.repository, "--registry" if opts.registry else "image.repository")
    host = registry_host(registry)
    creds = credentials_from_env(host, environ)
    scrub = Scrubber(creds)
    smoke_results = load_smoke_results(opts.smoke_json) if opts.smoke_json else {}
    load_manifest(opts.manifest, must_exist=False)  # refuse a broken manifest before pushing anything
    c = docker_client or engine.client()
    if creds:
        echo(f"logging in to {host} as {creds.username} (from {creds.source})")
        login(c, host, creds, scrub)
    results = []
    for backend in backends:
        try:
            results.append(_publish_one(m, backend, registry, host, creds, scrub, smoke_results, opts, c, echo))
        except (RegistryAuthError, RegistryUnreachableError):
            raise
        except EnvbuildError as exc:
            if len(backends) == 1:
                raise
            results.append(Published(backend.name, False, error=str(exc)))
    return results


def _publish_one(m: Matrix, backend: Backend, registry: str, host: str, creds: Credentials | None, scrub: Scrubber,
                 smoke_results: dict[str, dict[str, Any]], opts: PublishOptions, c: Any, echo: Callable[[str], None]) -> Published:
    import docker

    source = opts.image or m.tags(backend)[0]
    try:
        image = c.images.get(source)
    except docker.errors.ImageNotFound:
        raise PublishError(
            f"image {source} is not on this Docker engine: build it with `envbuild build --backend {backend.name}` (or pass --image)"
        ) from None
    except docker.errors.APIError as exc:
        raise DockerError(f"cannot inspect image {source}: {_api_message(exc)}") from None
    labels = image.labels or {}
    problems = label_mismatches(m, backend, labels)
    if problems and not opts.force:
        raise PublishError(
            f"refusing to publish {source} as {backend.name}: {'; '.join(problems)}. Its tags would not say what it "
            "carries; build it from this matrix (same --set), or pass --force"
        )
    smoke = None
    if opts.smoke_json:
        result = smoke_results.get(backend.name)
        if result is None:
            echo(f"[{backend.name}] note: {opts.smoke_json} has no result for {backend.name}; the manifest records no smoke test")
        else:
            smoke = smoke_summary(result, opts.smoke_json)
            if not smoke["ok"] and not opts.force:
                raise PublishError(
                    f"refusing to publish {backend.name}: its smoke test failed ({smoke['error'] or ', '.join(smoke['failed_checks'])}); "
                    "fix it and smoke again, or pass --force"
                )
            if smoke["image_id"] and smoke["image_id"] != image.id and not opts.force:
                raise PublishError(
                    f"refusing to publish {backend.name}: the smoke result is for image {smoke['image_id'][:19]}, not {image.id[:19]} "
                    f"({source}); smoke this image, or pass --force"
                )
    refs = target_refs(m, backend, registry)
    created = [r for r in refs if engine.image_id(c, r) != image.id]
    engine.tag_image(c, image.id, created)
    auth = creds.auth_config() if creds else None
    digests: dict[str, str] = {}
    try:
        for ref in refs:
            repo, tag = engine.split_ref(ref)
            echo(f"[{backend.name}] pushing {ref}")
            try:
                lines = c.api.push(repo, tag=tag, stream=True, decode=True, auth_config=auth)
            except docker.errors.APIError as exc:
                raise registry_error(host, _api_message(exc), scrub, f"pushing {ref}", creds) from None
            digest = _stream(lines, host, ref, scrub, f"pushing {ref}", creds, lambda s: echo(f"[{backend.name}] {s}"))
            if not digest or not DIGEST.match(digest):
                raise PublishError(f"the push of {ref} broke off: the registry never confirmed a digest; nothing was recorded")
            digests[ref] = digest
    except BaseException:
        for ref in created:  # tags made only for this push: gone with it
            try:
                c.images.remove(ref, noprune=True)
            except docker.errors.APIError:
                pass
        raise
    if len(set(digests.values())) != 1:
        raise PublishError(f"the registry confirmed different digests for the tags of {backend.name}: {digests}; nothing was recorded")
    digest = next(iter(digests.values()))
    revision = labels.get(REVISION_LABEL)
    head, dirty = git_revision(Path(m.path).resolve().parent)
    entry = {
        "backend": backend.name,
        "device": backend.device,
        "repository": registry,
        "tags": refs,
        "digest": digest,
        "image_id": image.id,
        "platform": f"{image.attrs.get('Os', 'linux')}/{image.attrs.get('Architecture', 'unknown')}",
        "versions": image_versions(labels) if labels.get(LABEL + "backend") else {
            "torch": backend.torch.version,
            "plugin": {"package": backend.plugin.package, "version": backend.plugin.version} if backend.plugin else None,
            "transformers": m.transformers,
            "accelerate": m.accelerate,
        },
        "git_revision": revision or head,
        "git_dirty": None if revision else dirty,
        "date": utc_now(),
        "smoke": smoke,
        "forced": bool(problems or (smoke and not smoke["ok"])) or None,
    }
    entry = {k: v for k, v in entry.items() if v is not None or k in ("git_revision", "smoke")}
    record(opts.manifest, entry)
    return Published(backend.name, True, image=source, refs=refs, digest=digest, entry=entry)


# --- pull -----------------------------------------------------------------------------------------------


@dataclass
class Pulled:
    backend: str
    ref: str
    digest: str
    image_id: str
    tagged: list[str]
    verified: bool
    docker_run: str

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "image": self.ref, "digest": self.digest, "image_id": self.image_id,
            "tagged": self.tagged, "verified_against_manifest": self.verified, "docker_run": self.docker_run,
        }


def pull(
    m: Matrix,
    backend: Backend,
    *,
    registry: str | None = None,
    tag: str | None = None,
    manifest: Path | None = None,
    echo: Callable[[str], None] = lambda s: None,
    docker_client: Any = None,
    environ: Mapping[str, str] | None = None,
) -> Pulled:
    """Pull REG:TAG (default: the matrix's repository and pinned tag), verify its digest, tag it for smoke."""
    import docker

    from . import report

    registry = check_repository(registry or m.image.repository, "--registry" if registry else "image.repository")
    tag = tag or engine.split_ref(m.tags(backend)[1])[1]
    if not TAG.match(tag):
        raise PublishError(f"--tag {tag!r} is not a valid image tag (letters, digits, '_', '.', '-'; at most 128)")
    ref = f"{registry}:{tag}"
    expected = None
    if manifest is not None:
        entry = load_manifest(manifest, must_exist=True)["images"].get(backend.name)
        if entry is None:
            raise ManifestError(f"manifest {manifest} has no image for backend '{backend.name}' (it was never published there)")
        expected = entry["digest"]
    host = registry_host(registry)
    creds = credentials_from_env(host, environ)
    scrub = Scrubber(creds)
    c = docker_client or engine.client()
    if creds:
        login(c, host, creds, scrub)
    auth = creds.auth_config() if creds else None
    if expected:
        # Ask the registry first: a tag that moved is refused before a single layer is fetched.
        try:
            remote = c.images.get_registry_data(ref, auth_config=auth).id
        except docker.errors.NotFound:
            raise PublishError(f"{ref} is not in the registry: has `envbuild publish --backend {backend.name}` pushed it there?") from None
        except docker.errors.APIError as exc:
            raise registry_error(host, _api_message(exc), scrub, f"asking the registry about {ref}", creds) from None
        if remote != expected:
            raise _mismatch(ref, remote, expected, manifest)
    before = engine.image_id(c, ref)
    echo(f"[{backend.name}] pulling {ref}")
    try:
        lines = c.api.pull(registry, tag=tag, stream=True, decode=True, auth_config=auth)
    except docker.errors.NotFound:
        raise PublishError(f"{ref} is not in the registry: has `envbuild publish --backend {backend.name}` pushed it there?") from None
    except docker.errors.APIError as exc:
        raise registry_error(host, _api_message(exc), scrub, f"pulling {ref}", creds) from None
    try:
        streamed = _stream(lines, host, ref, scrub, f"pulling {ref}", creds, lambda s: echo(f"[{backend.name}] {s}"))
    except PublishError as exc:
        if "not found" in str(exc).lower() or "manifest unknown" in str(exc).lower():
            raise PublishError(f"{ref} is not in the registry: has `envbuild publish --backend {backend.name}` pushed it there?") from None
        raise
    image = c.images.get(ref)
    digests = [d.split("@", 1)[1] for d in image.attrs.get("RepoDigests") or [] if "@" in d and _same_repo(d.split("@", 1)[0], registry)]
    digest = streamed if streamed in digests or not digests else digests[0]
    if expected and expected not in digests:
        _undo_pull(c, ref, before)
        raise _mismatch(ref, digest, expected, manifest)
    local = m.tags(backend)[0]
    tagged = [ref]
    if local != ref:
        engine.tag_image(c, image.id, [local])
        tagged.append(local)
    return Pulled(backend.name, ref, digest, image.id, tagged, bool(expected), report.run_command(m, backend, image=ref))


def _mismatch(ref: str, got: str | None, expected: str, manifest: Path | None) -> DigestMismatchError:
    return DigestMismatchError(
        f"refusing {ref}: the registry has digest {got}, but manifest {manifest} records {expected}. The tag was "
        "re-pushed or the manifest is for another image; nothing was tagged"
    )


def _undo_pull(c: Any, ref: str, before: str | None) -> None:
    """The pulled reference goes away (or back to the image it named before the pull)."""
    import docker

    try:
        if before is None:
            c.images.remove(ref, noprune=False)
        else:
            engine.tag_image(c, before, [ref])
    except (docker.errors.APIError, DockerError):
        pass
