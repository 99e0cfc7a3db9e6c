"""`envbuild pick`: the one image that fits this host, for scripts, Kubernetes manifests and CI, chosen before
anything is pulled. A family of variants (cuda: CUDA 13.2, 13.0, 12.6) gives its newest that this host's driver and
devices run; `--variant` or a variant's own name chooses by hand. `pull`, `run`, `smoke` and `build` choose the same
way (`resolve`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuild.core.errors import InvalidInput, NoVariantFitsError
from envbuild.matrix import Backend, Matrix, compat


@dataclass(frozen=True)
class Picked:
    backend: Backend
    why: str  # which variant and why, in a sentence
    choice: compat.Choice | None  # the family's variants and their fit (None: a backend without variants)
    warnings: tuple[str, ...] = ()

    def to_json(self, ref: str) -> dict[str, Any]:
        return {"backend": self.backend.name, "family": self.backend.family, "image": ref, "why": self.why,
                "warnings": list(self.warnings),
                "variants": [f.to_json() for f in self.choice.fits] if self.choice else []}


def variant(m: Matrix, family: Backend, text: str) -> Backend:
    """--variant: a variant's full name (cuda-cu126), its suffix (cu126), or its stack release (12.6, cuda12.6)."""
    members = m.family(family)
    said = text.strip().lower()
    for b in members:
        spellings = {b.name, b.name.removeprefix(f"{b.family}-")}
        if b.host and m.stack_tag(b):
            spellings |= {b.host.version, m.stack_tag(b)}
        if said in {s.lower() for s in spellings}:
            return b
    listed = ", ".join(f"{b.name}" + (f" ({m.stack_tag(b)})" if m.stack_tag(b) else "") for b in members)
    raise InvalidInput(f"--variant {text}: {family.family} has no such variant; it has {listed}")


def resolve(m: Matrix, b: Backend, *, variant_text: str | None = None, root: str | os.PathLike[str] = "/",
            picked_by_hand: bool | None = None) -> Picked:
    """The image for backend `b` on this host (read under `root`): `b` itself when it has no variants or was named as
    a variant; else the newest of its family that fits. Raises NoVariantFitsError, naming the driver and the upgrade,
    when the one asked for (or every one) needs more of this host."""
    members = m.family(b)
    if variant_text:
        b = variant(m, m.backend(b.family), variant_text)
    by_hand = picked_by_hand if picked_by_hand is not None else bool(variant_text or b.variant_of)
    if len(members) < 2:
        return Picked(b, f"{b.name} (no variants)", None)
    if by_hand:
        fit = compat.Fit(b, compat.host_check(b, Path(root)))
        if not fit.fits:
            raise NoVariantFitsError(f"the {b.name} image does not run on this host: {fit.check.detail}"
                                     + (f"; fix: {fit.check.fix}" if fit.check.fix else ""))
        warn = () if fit.check.ok else (fit.check.detail,)
        return Picked(b, f"{b.name}, as asked ({fit.check.detail})", compat.Choice(b, "", (fit,)), warn)
    choice = compat.choose_variant(members, Path(root))
    if choice.chosen is None:
        raise NoVariantFitsError(choice.why)
    return Picked(choice.chosen, choice.why, choice, tuple(choice.warnings))


def image_ref(m: Matrix, b: Backend, manifest: Path | None = None) -> str:
    """The moving tag (REPO:cuda-cu130), or with a manifest the digest it records (REPO@sha256:...)."""
    if manifest is None:
        return m.tags(b)[0]
    from envbuild.ship import manifest as manifests

    entry = manifests.load(manifest, must_exist=True)["images"].get(b.name)
    if entry is None:
        raise InvalidInput(f"manifest {manifest} has no image for {b.name} (never published there: "
                           f"`envbuild publish --backend {b.name} --manifest {manifest}`)")
    return f"{entry.get('repository') or m.image.repository}@{entry['digest']}"
