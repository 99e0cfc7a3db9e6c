"""registry -> local image: resolve the tag from the matrix, check the registry's digest against the manifest
before and after pulling (a mismatch is refused and nothing is tagged), then tag the image as the matrix's
default tag so that `envbuild smoke --backend B` finds it without flags."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..errors import DigestMismatchError, EnvbuildError, InvalidInput, ManifestError
from . import manifest as manifests
from ..imageref import TAG, Reference, check_repository
from .session import Session

if TYPE_CHECKING:
    from ..engine import Engine
    from ..matrix import Backend, Matrix


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


def pull(m: Matrix, backend: Backend, engine: Engine, *, registry: str | None = None, tag: str | None = None,
         manifest: Path | None = None, echo: Callable[[str], None] = lambda s: None,
         environ: Mapping[str, str] | None = None, ignore_host: bool = False, root: Path = Path("/")) -> Pulled:
    """Pull REG:TAG (default: the matrix's repository and pinned tag), verify its digest, tag it for smoke.
    An image this host's driver is known not to run is refused before anything is downloaded."""
    from ..smoke import preflight

    if not ignore_host:
        from ..host.compat import host_driver

        preflight.require_host(backend, host_driver(backend, root), matrix=m, echo=echo)

    registry = check_repository(registry or m.image.repository, "--registry" if registry else "image.repository")
    tag = tag or Reference.parse(m.tags(backend)[1]).tag
    if not TAG.match(tag):
        raise InvalidInput(f"--tag {tag!r} is not a valid image tag (letters, digits, '_', '.', '-'; at most 128)")
    ref = f"{registry}:{tag}"
    expected = None
    if manifest is not None:
        entry = manifests.load(manifest, must_exist=True)["images"].get(backend.name)
        if entry is None:
            raise ManifestError(f"manifest {manifest} has no image for backend '{backend.name}' (it was never published there)")
        expected = entry["digest"]
    missing = f"{ref} is not in the registry: has `envbuild publish --backend {backend.name}` pushed it there?"
    session = Session(engine, registry, environ)
    session.login(lambda s: None)
    if expected:
        # Ask the registry first: a tag that moved is refused before a single layer is fetched.
        remote = session.remote_digest(ref, missing)
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
    return Pulled(backend.name, ref, digest or "", image.id, tagged, bool(expected), shlex.join(backend.run.command_line(ref, ["envbuild-probe"])))


def _mismatch(ref: str, got: str | None, expected: str, manifest: Path | None) -> DigestMismatchError:
    return DigestMismatchError(
        f"refusing {ref}: the registry has digest {got}, but manifest {manifest} records {expected}. The tag was "
        "re-pushed or the manifest is for another image; nothing was tagged"
    )


def _undo_pull(engine: Engine, ref: str, before: str | None) -> None:
    """The pulled reference goes away (or back to the image it named before the pull)."""
    try:
        if before is None:
            engine.untag(ref)
        else:
            engine.tag(before, [ref])
    except EnvbuildError:
        pass
