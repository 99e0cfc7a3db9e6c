"""registry -> local image: resolve the tag from the matrix, check the registry's digest against the manifest
before and after pulling (a mismatch is refused and nothing is tagged), then tag the image as the matrix's
default tag so that `envbuild smoke --backend B` finds it without flags."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from envbuild.core.errors import PlatformError, PublishError, RegistryDeadlineError, RegistryUnreachableError
from envbuild.core.errors import DigestMismatchError, EnvbuildError, InvalidInput, ManifestError
from envbuild.ship import manifest as manifests
from envbuild.core.imageref import TAG, Reference, check_repository
from envbuild.core.platform import Platform, can_run, emulation_fix, foreign_arch, host_platform
from envbuild.net.regclient import Registry
from envbuild.ship.session import Session
from envbuild.smoke import preflight

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI
    from envbuild.matrix import Backend, Matrix


@dataclass
class Pulled:
    backend: str
    ref: str
    digest: str
    image_id: str
    tagged: list[str]
    verified: bool
    docker_run: str
    signature: dict[str, Any] | None = None  # what trust.verify proved, when a key was configured
    platform: Platform | None = None
    emulated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "image": self.ref, "digest": self.digest, "image_id": self.image_id,
            "tagged": self.tagged, "verified_against_manifest": self.verified, "docker_run": self.docker_run,
            "signature": self.signature,
            "platform": self.platform, "emulated": self.emulated,
        }


def pull(m: Matrix, backend: Backend, engine: EngineAPI, *, registry: str | None = None, tag: str | None = None,
         manifest: Path | None = None, echo: Callable[[str], None] = lambda s: None,
         environ: Mapping[str, str] | None = None, ignore_host: bool = False, root: Path = Path("/"),
         key: Any = None, platform: str | Platform | None = None) -> Pulled:
    """Pull REG:TAG (default: the matrix's repository and pinned tag), verify its digest, tag it for smoke.
    An image this host's driver is known not to run is refused before anything is downloaded. With `key` (a
    trust.keys.PublicKey) the image must be signed by it, with a passing signed smoke result, before a layer moves;
    the digest verified is the one that must arrive. A tag naming an image index gives this host's platform (or
    `platform`: another architecture only where QEMU runs it), pulled by that platform's digest, which must be the
    one the manifest records (an index's platforms are verified with it)."""
    if not ignore_host:
        from envbuild.matrix.compat import host_driver

        preflight.require_host(backend, host_driver(backend, root), matrix=m, echo=echo)

    registry = check_repository(registry or m.image.repository, "--registry" if registry else "image.repository")
    tag = tag or Reference.parse(m.tags(backend)[1]).tag
    if not TAG.match(tag):
        raise InvalidInput(f"--tag {tag!r} is not a valid image tag (letters, digits, '_', '.', '-'; at most 128)")
    ref = f"{registry}:{tag}"
    entry = None
    if manifest is not None:
        entry = manifests.load(manifest, must_exist=True)["images"].get(backend.name)
        if entry is None:
            raise ManifestError(f"manifest {manifest} has no image for backend '{backend.name}' (it was never published there)")
    expected = entry["digest"] if entry else None
    missing = f"{ref} is not in the registry: has `envbuild publish --backend {backend.name}` pushed it there?"
    session = Session(engine, registry, environ)
    session.login(lambda s: None)
    against_manifest = expected is not None
    signature = None
    if key is not None:
        from envbuild.ship.trust.verify import verify

        proved = verify(registry, tag, key, environ=environ)
        echo(f"[{backend.name}] verified {ref}: signed by {key.source}, smoke attestation passed ({proved.digest})")
        if expected and proved.digest != expected:
            raise _mismatch(ref, proved.digest, expected, manifest)
        expected, signature = proved.digest, proved.to_json()
    chosen, remote = _platform_digest(ref, Platform.of(platform) if platform else None, manifest, entry, root, environ,
                                      missing)
    if chosen is not None:
        return _pull_platform(m, backend, engine, session, ref, manifest, echo, missing, *chosen)
    if expected:
        # Ask the registry first: a tag that moved is refused before a single layer is fetched.
        remote = remote or session.remote_digest(ref, missing, lambda s: echo(f"[{backend.name}] {s}"))
        if remote != expected:
            raise _mismatch(ref, remote, expected, manifest)
    before = engine.image_id(ref)
    echo(f"[{backend.name}] pulling {ref}")
    streamed = session.pull(ref, lambda s: echo(f"[{backend.name}] {s}"), missing)
    image = engine.image(ref)
    if image is None:
        raise EnvbuildError(f"the pull of {ref} ended, but the engine has no such image")
    wanted = Reference.parse(registry)
    digests = [r.digest for r in map(Reference.parse, image.repo_digests) if r.digest and wanted.same_repository(r)]
    digest = streamed if streamed in digests or not digests else digests[0]
    if expected and expected not in digests:
        _undo_pull(engine, ref, before)
        raise _mismatch(ref, digest, expected, manifest)
    local = m.tags(backend)[0]
    tagged = [ref]
    if local != ref:
        engine.tag(image.id, [local])
        tagged.append(local)
    return Pulled(backend.name, ref, digest or "", image.id, tagged, against_manifest,
                  shlex.join(backend.run.command_line(ref, ["envbuild-probe"])), signature)


def _mismatch(ref: str, got: str | None, expected: str, manifest: Path | None) -> DigestMismatchError:
    if manifest is None:  # the digest came from verifying the signature
        return DigestMismatchError(f"refusing {ref}: the registry now serves digest {got}, but the signed digest it "
                                   f"verified was {expected} (the tag moved meanwhile); nothing was tagged")
    return DigestMismatchError(
        f"refusing {ref}: the registry has digest {got}, but manifest {manifest} records {expected}. The tag was "
        "re-pushed or the manifest is for another image; nothing was tagged"
    )


def _undo_pull(engine: EngineAPI, ref: str, before: str | None) -> None:
    """The pulled reference goes away (or back to the image it named before the pull)."""
    try:
        if before is None:
            engine.untag(ref)
        else:
            engine.tag(before, [ref])
    except EnvbuildError:
        pass


def _platform_digest(ref: str, platform: Platform | None, manifest: Path | None, entry: dict | None, root: Path,
                     environ: Mapping[str, str] | None, missing: str) -> tuple[tuple[Platform, str, bool] | None, str | None]:
    """((platform, its digest, emulated), None) when `ref` names an image index; (None, its digest) for a single
    image, pulled as before (its digest read once, here); (None, None) when this process cannot reach the registry.
    Everything is decided from the registry's index and the manifest's `entry`, before a layer is downloaded."""
    try:
        top = Registry(ref, environ).manifest(ref)
    except RegistryDeadlineError:
        raise  # it answers, too slowly: the daemon's pull would wait on it as well
    except RegistryUnreachableError:
        if platform:
            raise
        return None, None  # the daemon may reach it where this process cannot (a proxy): it picks this host's platform
    if top is None:
        raise PublishError(missing)
    if not top.is_index:
        if platform:
            raise PublishError(f"{ref} is a single image, not an index: --platform has nothing to choose")
        return None, top.digest
    if entry is not None and entry.get("digest") != top.digest:
        raise _mismatch(ref, top.digest, entry.get("digest") or "?", manifest)
    here = host_platform()
    wanted = platform or here
    offered = top.platforms()
    if wanted not in offered:
        raise PlatformError(f"{ref} has no image for {wanted}{' (this host)' if not platform else ''}: its index lists "
                            f"{', '.join(sorted(offered))}" + ("" if platform else
                            "; pass --platform to pull one of those to run under emulation"))
    runs, emulated, how = can_run(wanted, str(root), here)
    if not runs:
        raise PlatformError(f"{ref} for {wanted}: this host ({here}) cannot run it: {how}. Set up emulation: "
                            f"{emulation_fix(wanted)}; nothing was downloaded")
    digest = offered[wanted]
    recorded = ((entry or {}).get("platforms") or {}).get(wanted, {}).get("digest")
    if entry is not None and recorded != digest:
        raise _mismatch(f"{ref} ({wanted})", digest, recorded or "(no record of this platform)", manifest)
    return (wanted, digest, emulated), None


def _pull_platform(m: Matrix, backend: Backend, engine: EngineAPI, session: Session, ref: str, manifest: Path | None,
                   echo: Callable[[str], None], missing: str, platform: Platform, digest: str, emulated: bool) -> Pulled:
    repo = ref.rpartition(":")[0]
    by_digest = f"{repo}@{digest}"
    echo(f"[{backend.name}] pulling {ref} for {platform}{' (to run under QEMU emulation)' if emulated else ''}: {by_digest}")
    session.pull(by_digest, lambda s: echo(f"[{backend.name}] {s}"), missing, platform=platform)
    image = engine.image(by_digest)
    if image is None:
        raise EnvbuildError(f"the pull of {by_digest} ended, but the engine has no such image")
    if not any(d.endswith("@" + digest) for d in image.repo_digests):
        raise _mismatch(by_digest, ", ".join(image.repo_digests) or "nothing", digest, manifest)
    arch = foreign_arch(platform)
    tagged = [f"{ref}-{arch}" if arch else ref, m.tags(backend, arch)[0]]
    engine.tag(image.id, tagged)
    return Pulled(backend.name, ref, digest, image.id, tagged, manifest is not None,
                  shlex.join(backend.run.command_line(tagged[0], ["envbuild-probe"])), platform=platform, emulated=emulated)
