"""`envbuild pick`: the one image that fits this host, for scripts, Kubernetes manifests and CI, chosen before
anything is pulled. A family of variants (cuda: CUDA 13.2, 13.0, 12.6) gives its newest that this host's driver and
devices run natively, else the newest that runs under minor version compatibility; `--variant` or a variant's own
name chooses by hand. `--driver` and `--gpu` describe another host (a compute node seen from a login node, a CI
runner) and nothing of this machine is read. `pull`, `run`, `smoke` and `build` choose the same way (`resolve`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from envbuild.core import hostfacts
from envbuild.core.errors import InvalidInput, NoVariantFitsError
from envbuild.core.text import quoted, shown
from envbuild.host import detect
from envbuild.matrix import Backend, Matrix, compat, stacks


@dataclass(frozen=True)
class Described:
    """A host given on the command line (`--driver`, `--gpu`): nothing of this machine is read."""

    driver: str | None
    archs: tuple[str, ...]  # sm_80, gfx942: one entry per --gpu
    platform: str | None = None

    @property
    def stack(self) -> str | None:
        """cuda or rocm from the GPUs named; cuda for a driver alone (a version is NVIDIA's way of saying it)."""
        kinds = {k for a in self.archs if (k := stacks.arch_stack(a))}
        if len(kinds) > 1:
            raise InvalidInput("--gpu names NVIDIA and AMD GPUs together: one host runs one image; ask once per kind")
        return kinds.pop() if kinds else ("cuda" if self.driver else None)

    def host(self, driver_name: str) -> hostfacts.HostDriver:
        said = [w for w, v in (("--driver", self.driver), ("--gpu", self.archs)) if v]
        notes = [] if self.driver else ["no --driver given"]
        return hostfacts.HostDriver(driver_name, self.driver, list(self.archs) or None, evidence=said, notes=notes)

    def to_json(self) -> dict[str, Any]:
        return {"driver": self.driver, "gpus": list(self.archs), "platform": self.platform}


def describe(driver: str | None, gpus: tuple[str, ...], platform: str | None = None) -> Described | None:
    """--driver/--gpu read into a described host (None when neither is given), or exit 2 naming what is wrong."""
    if driver is None and not gpus:
        return None
    # ASCII digits only: re's \d (and int()) also take Arabic-Indic or fullwidth digits, which no driver prints
    if driver is not None and not re.fullmatch(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}", driver.strip()):
        raise InvalidInput(f"--driver {quoted(driver)}: not a driver version (e.g. 535.104.05, as nvidia-smi prints it)")
    archs = []
    for g in gpus:
        for one in (x for x in g.split(",") if x.strip()):
            arch = stacks.gpu_arch(one)
            if arch is None:
                known = ", ".join(sorted(stacks.gpu_products()))
                raise InvalidInput(f"--gpu {quoted(one)}: not a GPU envbuild knows; give its architecture (8.0, sm_80, gfx942, as "
                                   f"`nvidia-smi --query-gpu=compute_cap --format=csv` or `rocminfo` says) or one of: {known}")
            archs.append(arch)
    if gpus and not archs:  # `--gpu ''` or `--gpu ,`: no GPU named, not a host without GPUs
        raise InvalidInput(f"--gpu {quoted(','.join(gpus))}: names no GPU; give its architecture (8.0, sm_80, gfx942) "
                           "or its product name (A100, MI300X)")
    return Described(driver.strip() if driver else None, tuple(archs), platform)


@dataclass(frozen=True)
class Picked:
    backend: Backend
    why: str  # which variant and why, in a sentence
    choice: compat.Choice | None  # the family's variants and their fit (None: a backend without variants)
    warnings: tuple[str, ...] = ()
    described: Described | None = None

    @property
    def mode(self) -> str | None:
        return self.choice.mode if self.choice else None

    @property
    def note(self) -> str | None:
        """The one line that says the choice runs only under minor version compatibility, and what it gives up."""
        return self.choice.minor_note if self.choice else None

    def to_json(self, ref: str | None) -> dict[str, Any]:
        return choice_json(self.backend.family, self.choice, described=self.described) | {
            "backend": self.backend.name, "image": ref, "why": self.why, "warnings": list(self.warnings)}


def choice_json(family: str, choice: compat.Choice | None, *, described: Described | None = None,
                refusal: str | None = None) -> dict[str, Any]:
    """What `pick --json` says, whether an image fits or not: the choice, native or minor-version, the host as read or
    described, each GPU's verdict, every variant with why it fits or not, and on a refusal the upgrade."""
    host = choice.host if choice else None
    up = choice.upgrade if choice else None
    return {
        "backend": None, "family": family, "image": None, "ok": refusal is None,
        "mode": choice.mode if choice and choice.chosen else None,
        "minor_version_note": choice.minor_note if choice else None,
        "host": {"source": "described (--driver/--gpu)" if described else "read", **(host.to_json() if host else {})},
        "gpus": choice.gpus() if choice else [],
        "variants": [f.to_json() for f in choice.fits] if choice else [],
        "refusal": refusal,
        "upgrade": {"driver": up.driver, "backend": up.backend.name, "mode": up.mode} if up else None,
        "warnings": [],
    }


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


def family_for(m: Matrix, described: Described) -> Backend:
    """`--backend auto` with a described host: the family of the GPUs named (cuda for a driver alone)."""
    stack = described.stack
    for b in m.backends:
        if not b.variant_of and b.host and b.host.stack == stack and b.containerizable:
            return b
    raise InvalidInput(f"the matrix has no image for {stacks.STACKS[stack].title if stack in stacks.STACKS else stack} GPUs")


def resolve(m: Matrix, b: Backend, *, variant_text: str | None = None, root: str | os.PathLike[str] = "/",
            picked_by_hand: bool | None = None, described: Described | None = None) -> Picked:
    """The image for backend `b` on this host (read under `root`, or `described`): `b` itself when it has no variants
    or was named as a variant; else the newest of its family that fits. Raises NoVariantFitsError, naming the driver
    and the upgrade (with the same as JSON in its `data`), when the one asked for (or every one) needs more."""
    members = m.family(b)
    if variant_text:
        b = variant(m, m.backend(b.family), variant_text)
    by_hand = picked_by_hand if picked_by_hand is not None else bool(variant_text or b.variant_of)
    host = None
    if described is not None:
        if b.host is None:
            raise InvalidInput(f"--driver and --gpu describe a GPU host; the {b.name} image needs no driver")
        if described.stack and described.stack != b.host.stack:
            raise InvalidInput(f"--gpu names {stacks.STACKS[described.stack].title} GPUs; the {b.name} image is for "
                               f"{stacks.STACKS[b.host.stack].title}")
        host = described.host(stacks.STACKS[b.host.stack].driver)
    platform = described.platform if described else None
    if len(members) < 2 and described is None:
        return Picked(b, f"{b.name} (no variants)", None)
    if by_hand or len(members) < 2:
        host = host or compat.host_driver(b, Path(root))
        fit = compat.fit(b, host, platform)
        choice = compat.Choice(b if fit.fits else None, "", (fit,), host)
        if not fit.fits:
            msg = (f"the {b.name} image does not run on this host: {fit.check.detail}"
                   + (f"; fix: {fit.check.fix}" if fit.check.fix else ""))
            raise NoVariantFitsError(msg, choice_json(b.family, choice, described=described, refusal=msg))
        warn = () if fit.check.ok else (fit.check.detail,)
        return Picked(b, f"{b.name}, as asked ({fit.check.detail})", choice, warn, described)
    choice = compat.choose_variant(members, Path(root), host=host, platform=platform)
    if choice.chosen is None:
        raise NoVariantFitsError(choice.why, choice_json(b.family, choice, described=described, refusal=choice.why))
    return Picked(choice.chosen, choice.why, choice, tuple(choice.warnings), described)


def single_platform_ref(m: Matrix, b: Backend, arch: str, manifest: Path | None = None) -> str:
    """For a tool that cannot read an image index (an older pyxis/enroot answers 404 for one): the image of one
    platform. With a manifest, the digest it records for that platform; else, where the backend lists several
    platforms (published as an index, beside a REPO:<backend>-<arch> tag for each), that tag; else the one tag,
    which is a single image already."""
    if manifest is not None:
        from envbuild.ship import manifest as manifests

        entry = manifests.load(manifest, must_exist=True)["images"].get(b.name) or {}
        record = (entry.get("platforms") or {}).get(f"linux/{arch}")
        if record:
            return f"{_repository(manifest, b.name, entry, m)}@{record['digest']}"
        return image_ref(m, b, manifest)
    return m.tags(b, arch)[0] if len(b.platforms) > 1 else m.tags(b)[0]


def image_ref(m: Matrix, b: Backend, manifest: Path | None = None) -> str:
    """The moving tag (REPO:cuda-cu130), or with a manifest the digest it records (REPO@sha256:...)."""
    if manifest is None:
        return m.tags(b)[0]
    from envbuild.ship import manifest as manifests

    entry = manifests.load(manifest, must_exist=True)["images"].get(b.name)
    if entry is None:
        raise InvalidInput(f"manifest {manifest} has no image for {b.name} (never published there: "
                           f"`envbuild publish --backend {b.name} --manifest {manifest}`)")
    return f"{_repository(manifest, b.name, entry, m)}@{entry['digest']}"


def _repository(manifest: Path, name: str, entry: dict[str, Any], m: Matrix) -> str:
    """The manifest's repository for this image, as written, once it is one (a manifest may come with a pull request:
    a newline, `$(...)`, quotes or spaces would reach a script's stdout); the matrix's where it names none."""
    from envbuild.core.imageref import Reference

    repo = entry.get("repository") or m.image.repository
    try:
        if repo != repo.strip().rstrip("/"):
            raise InvalidInput("spaces or a trailing slash")
        Reference.repository(repo, "repository")
    except InvalidInput:
        raise InvalidInput(f"manifest {shown(str(manifest), limit=200)}: images.{quoted(name)}.repository {quoted(repr(repo))} is "
                           "not an image repository such as 'ghcr.io/org/envbuild' (as `envbuild publish` writes "
                           "it; publish again to rewrite it)") from None
    return repo


# --- `envbuild pick`: the choice for a host, and what it says ------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What `envbuild pick` says: its lines for stderr, its JSON, and the reference (or how to run it with a tool)."""

    m: Matrix
    picked: Picked
    ref: str  # the moving tag, or the digest the manifest records
    detected: str | None = None  # `--backend auto` on this host: the evidence in words
    absent: str | None = None  # a backend asked for by name whose GPU this host lacks
    manifest: Path | None = None

    @property
    def warnings(self) -> list[str]:
        return ([self.absent] if self.absent else []) + list(self.picked.warnings)

    def lines(self) -> list[str]:
        """For stderr: that the host lacks the GPU, which image and why, and what minor version compatibility
        gives up."""
        why = self.detected if self.detected and self.picked.choice is None else self.picked.why
        out = [f"warning: {self.absent}"] if self.absent else []
        said = self.picked.choice.said if self.picked.choice else ()
        if said:  # a short first line, then the reasons one a line: the variant's name is said once
            out.append(f"{'warning: ' if self.picked.warnings else ''}{self.picked.backend.name}: {said[0]}")
            out += [f"  {line}" for line in said[1:]]
        else:
            out.append(f"{'warning: ' if self.picked.warnings else ''}{self.picked.backend.name}: {why}")
        return out + ([f"note: {self.picked.note}"] if self.picked.note else [])

    def to_json(self) -> dict[str, Any]:
        return {**self.picked.to_json(self.ref), "warnings": self.warnings, "detected": self.detected}

    def how_to_run(self, tool: str) -> str:
        """The lines that fetch and run the image with `tool` (host/launch.py); InvalidInput where it has no way."""
        from envbuild.host import launch

        ref = self.ref
        if tool == "enroot":  # older pyxis cannot read an image index: the platform's own image
            from envbuild.core.platform import host_platform, platform_arch

            described = self.picked.described
            arch = platform_arch(described.platform if described and described.platform else host_platform())
            ref = single_platform_ref(self.m, self.picked.backend, arch, self.manifest)
        return launch.how_to_run(self.picked.backend, ref, tool)


def pick(m: Matrix, backend: str, *, variant_text: str | None = None, described: Described | None = None,
         root: str | os.PathLike[str] | None = None, manifest: Path | None = None) -> Answer:
    """The image for this host (read under `root`) or the `described` one. `auto` takes the family of the GPUs
    described, else the backend detected here; a backend named for a GPU this host lacks is a warning. Raises
    NoVariantFitsError when none fits, its `data` (pick --json's refusal) saying what auto detected."""
    said, missing = None, None
    if backend.lower() == "auto" and described is not None:
        b = family_for(m, described)
    elif backend.lower() == "auto":
        name, said = auto(m, root=root)
        b = m.backend(m.backend(name).family)
    else:
        b = m.select([backend])[0]
        missing = None if described is not None else absent(m, b, root)
    try:
        picked = resolve(m, b, variant_text=variant_text, root=root or "/", described=described)
    except NoVariantFitsError as exc:
        if exc.data is not None:
            exc.data = {**exc.data, "detected": said}
        raise
    return Answer(m, picked, image_ref(m, picked.backend, manifest), said, missing, manifest)


# --- which backends a command works on (--backend, --variant, 'auto') --------------------------------------------
# The one rule for --backend's default: a command that uses this host's accelerator (run, smoke, pull, doctor, env)
# defaults to `auto`, the backend detected here; one that makes or ships an image for any host (build, sbom, attest,
# publish) needs it named; one that ranges over the matrix (render, lock, outdated, bump, matrix) takes every backend.


def names(backends: Iterable[str]) -> list[str]:
    """--backend values: repeatable and comma-separated; 'auto' and 'all' in any case."""
    found = [n.strip() for b in backends for n in b.split(",") if n.strip()]
    return [n.lower() if n.lower() in ("auto", "all") else n for n in found]


def auto(m: Matrix, *, native: bool = False, root: str | os.PathLike[str] | None = None) -> tuple[str, str]:
    """`--backend auto`: (the backend detected on this host, the evidence in words); cpu when none. The one
    auto-detect path: this host (its Docker engine asked for runtimes, unless `native`: env and doctor need no
    container), or the folder `root` read as a host's root. Several accelerators, or (unless native) only a
    non-containerizable one, are errors that ask for a choice."""
    det = detect.detect(m) if native and root is None else detect.detect_host(m, root)
    return detect.choose(det, m, native=native, root=root or "/")


def choose(m: Matrix, backends: Iterable[str], variant_text: str | None = None, *, for_host: bool = False,
           echo: Callable[[str], None] | None = None) -> list[Backend]:
    """The backends named by --backend (repeatable, comma-separated, 'all', or 'auto'). With `for_host` (build, smoke,
    pull, run: an image for this host) a family with variants (cuda) gives the newest variant this host runs, said
    through `echo`, and --variant (or a variant's own name) chooses by hand; otherwise a name is that cell. 'all' is
    every cell."""
    said = echo or (lambda line: None)
    wanted = names(backends)
    if not wanted:
        raise InvalidInput("say which backend: --backend NAME (or --backend all, or --backend auto)")
    if "all" in wanted:
        if variant_text:
            raise InvalidInput("--variant chooses within one backend: name it (--backend cuda --variant 12.6)")
        return m.select(wanted)
    chosen: dict[str, Backend] = {}
    for n in wanted:
        is_auto = n == "auto"
        if is_auto:
            n, reason = auto(m)
            said(f"auto: chose {n} ({reason})")
        b = m.select([n])[0]
        if variant_text:
            b = variant(m, m.backend(b.family), variant_text)
        elif for_host and not is_auto and not b.variant_of and len(m.family(b)) > 1:
            try:
                picked = resolve(m, b)
            except NoVariantFitsError as exc:
                family = ", ".join(v.name for v in m.family(b))
                raise NoVariantFitsError(f"{exc} (--variant chooses one of {family} by hand)") from None
            said(f"{b.name}: chose {picked.backend.name} ({picked.why}); --variant chooses another")
            if picked.note:  # the same one line as pick's: runs under minor version compatibility, and what it gives up
                said(f"note: {picked.note}")
            b = picked.backend
        chosen.setdefault(b.name, b)
    return m.select(list(chosen))


def absent(m: Matrix, b: Backend, root: str | os.PathLike[str] | None = None) -> str | None:
    """`pick --backend B` for a GPU this host (read under root) does not have: the warning that says so, as detect
    knows it, and how to ask for another host; None when it has one, or B needs no device."""
    if b.host is None:
        return None
    det = detect.detect_host(m, root)
    if b.family in det.detected:
        return None
    missing = "; ".join(det.finding(b.family).missing) or "its signs"
    return (f"this host has no {b.description or b.family} (found none of: {missing}); "
            "for the host the image is meant for, say --driver VERSION --gpu ARCH")


def variant_fits(m: Matrix, root: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every variant of every family that has some, with whether it fits this host (read under root)."""
    out = []
    for b in m.backends:
        members = m.family(b)
        if b.variant_of or len(members) < 2 or not b.containerizable:
            continue
        choice = compat.choose_variant(members, Path(root or "/"))
        out += [{"family": b.name, **f.to_json(), "chosen": f.backend is choice.chosen} for f in choice.fits]
    return out
