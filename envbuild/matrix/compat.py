"""Will this image run on this host? The image's needs (the matrix, or the image's own record) against the host's
driver and device architectures (envbuild.core.hostfacts), as one preflight check with its fix.

Verdicts: a known mismatch of a confirmed vendor fact blocks (doctor FAIL; smoke, run and pull refuse before
anything starts or downloads); an UNCONFIRMED fact only warns; whatever is unknown (a missing version file, no
published minimum, no declared architectures) is a warning that says what was not known, never a refusal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.core.checks import Check
from envbuild.matrix.stacks import ARCH_FILE, Needs, needs  # noqa: F401 (the image's needs, for the host's check)
from envbuild.core import hostfacts as drivers
from envbuild.matrix import stacks

if TYPE_CHECKING:
    from envbuild.matrix import Backend, Matrix

NAME = "host driver"


def image_arch(engine: Any, image: str) -> list[str] | None:
    """The architectures the build measured in `image` (its torch's own list), read without starting it."""
    try:
        data = engine.read_file(image, ARCH_FILE)
    except Exception:  # an image from before this record, an engine that cannot: unknown
        return None
    if not data:
        return None
    return sorted(set(data.decode("utf-8", "replace").split())) or None


NATIVE, MINOR = "native", "minor-version"


def driver_mode(n: Needs, version: str | None) -> str | None:
    """How a driver runs the image: 'native' (at or above the release's own minimum), 'minor-version' (at or above
    its major's compatibility floor only), 'below' (neither), None (not known: no version, or no minimum)."""
    have, need = stacks.parse_version(version), stacks.parse_version(n.min_driver)
    if have is None or need is None:
        return None
    if have >= need:
        return NATIVE
    floor = stacks.parse_version(n.compat_driver)
    return MINOR if floor is not None and have >= floor else "below"


def _alternatives(matrix: Matrix | None, backend: Backend, host: drivers.HostDriver) -> list[str]:
    """Other backends for the same device whose needs this host meets (variants such as cuda-cu126)."""
    if matrix is None:
        return []
    found = []
    for other in matrix.backends:
        if other.name == backend.name or other.device != backend.device or not other.containerizable:
            continue
        n = needs(other)
        if n.stack is None or n.min_driver is None or host.version is None:
            continue
        mode = driver_mode(n, host.version)
        if mode in (NATIVE, MINOR) and _arch_ok(n, host, ptx=mode == NATIVE) is not False:
            found.append(other.name)
    return found


def _floor(n: Needs) -> str | None:
    """Without a declared or measured list: the oldest architecture the stack's release builds for (CUDA 13: sm_75)."""
    return None if n.arch or n.stack is None else stacks.arch_floor(n.stack, n.version)


def _image_archs(n: Needs) -> list[str]:
    floor = _floor(n)
    return list(n.arch) or ([n.stack.floor_arch(floor)] if floor and n.stack else [])


def _runs(n: Needs, arch: str, ptx: bool = True) -> bool:
    rule = n.stack.arch_runs if n.stack else None
    if rule is None:
        return True
    return rule(_image_archs(n), arch, ptx=ptx or not n.arch)  # a floor is no PTX claim


def _arch_ok(n: Needs, host: drivers.HostDriver, ptx: bool = True) -> bool | None:
    rule = n.stack.arch_runs if n.stack else None
    archs = _image_archs(n)
    if rule is None or not archs or not host.archs:
        return None
    return all(_runs(n, a, ptx) for a in host.archs)


def check(backend: Backend, host: drivers.HostDriver | None, *, matrix: Matrix | None = None,
          measured_arch: list[str] | None = None, platform: str | None = None) -> Check:
    """One check: ok, FAIL (a known mismatch of a confirmed fact) or warn (a mismatch of an UNCONFIRMED fact, or
    something unknown), with the fix. A driver below the release's own minimum but at or above its major's
    compatibility floor passes, and the detail says it runs under minor version compatibility."""

    n = needs(backend, measured_arch, platform)
    if n.stack is None:
        if backend.device == "cpu":
            return Check(NAME, True, f"the {backend.name} image needs no host driver")
        return Check(NAME, True, f"not checked: envbuild knows no driver requirement of the {backend.name} image")
    st = n.stack
    host = host or drivers.HostDriver(st.driver, notes=["not read"])
    unknown = "; ".join(host.notes) or "no version found"
    seen = f"host {st.driver_title} {host.version}" + (f" ({', '.join(host.evidence)})" if host.evidence else "")
    problems, blocking, fixes = [], False, []
    mode = driver_mode(n, host.version)
    newest = stacks.newest_supported(st, host.version) if st.minimum and host.version else None
    supports = f" supports {st.title} up to {newest}" if newest else ""
    if host.version is None:
        problems.append(f"cannot tell the host's {st.driver_title} version ({unknown}); the image needs {st.title} "
                        f"{n.version}" + (f" (driver >= {n.lowest_driver})" if n.lowest_driver else ""))
        fixes.append(f"check that the {st.driver_title} is loaded (`envbuild detect` shows the device); unknown is "
                     "not a mismatch, so nothing was refused")
    elif n.min_driver is None:
        problems.append(f"{seen}; no published minimum {st.driver_title} for {st.title} {n.version} (not checked)")
    elif mode == "below":
        natively = f" ({n.min_driver} runs it natively)" if n.compat_driver else ""
        problems.append(f"{seen}{supports}; this image needs driver >= {n.lowest_driver} for {st.title} {n.version}"
                        + natively + ("" if n.confirmed else " (UNCONFIRMED vendor fact)"))
        blocking |= n.confirmed
        fixes.append(f"upgrade the {st.driver_title} to {n.lowest_driver} or later")
    ptx = mode != MINOR
    arch_ok = _arch_ok(n, host, ptx)
    if arch_ok is False:
        bad = sorted({a for a in host.archs or () if not _runs(n, a, ptx)})
        named = ", ".join(stacks.arch_title(a) for a in bad)
        if _floor(n):
            problems.append(f"this host's devices are {named}; {st.title} {n.version} builds for {_floor(n)} "
                            "and newer only")
        else:
            problems.append(f"this host's devices are {named}; the image's torch was built for {', '.join(n.arch)}"
                            + (" (its PTX cannot be compiled by a driver older than the build's CUDA)"
                               if mode == MINOR and all(_runs(n, a) for a in bad) else ""))
        blocking = True
        fixes.append(f"use an image whose torch is built for {', '.join(bad)}")
    if problems:
        alternatives = _alternatives(matrix, backend, host)
        if alternatives:
            fixes.append(f"use the {' or '.join(alternatives)} backend")
        fix = ", or ".join(fixes) if fixes else None
        return Check(NAME, False, "; ".join(problems), fix, blocking=blocking)
    parts = [seen]
    if mode == MINOR:
        parts.append(f"{st.title} {n.version} runs under minor version compatibility (driver >= {n.compat_driver}; "
                     f">= {n.min_driver} runs it natively)")
    else:
        parts.append(f">= {n.min_driver} needed for {st.title} {n.version}" if n.min_driver else f"{st.title} {n.version}")
    if arch_ok and _floor(n):
        parts.append(f"devices {', '.join(sorted(set(host.archs or ())))} are {_floor(n)} or newer")
    elif arch_ok:
        parts.append(f"devices {', '.join(sorted(set(host.archs or ())))} are among the image's {', '.join(n.arch)}")
    elif not host.archs and st.arch_runs:
        parts.append(f"device architecture unknown ({unknown})" if host.notes else "device architecture unknown")
    elif not n.arch and st.arch_runs:
        parts.append("the image's architectures unknown (not checked)")
    return Check(NAME, True, "; ".join(parts))


def host_driver(backend: Backend, root: Path = Path("/"), *, path_env: str | None = None,
              runner: drivers.Runner = drivers.run_tool) -> drivers.HostDriver | None:
    """The host's side of this backend's stack (driver files, the vendor tool); None when it has no stack."""
    if backend.host is None:
        return None
    if path_env is None and root != Path("/"):  # a fake root's tools, never this machine's
        path_env = drivers.root_path(root)
    return stacks.read_driver(stacks.STACKS[backend.host.stack].driver, root, path_env, runner)


def family_check(matrix: Matrix, backend: Backend, root: Path = Path("/"), *, path_env: str | None = None,
                 runner: drivers.Runner = drivers.run_tool) -> Check:
    """doctor's host check of a backend with variants (cuda: 13.2, 13.0, 12.6), named by its family: the one answer
    `envbuild pick` gives, the variant it chooses (native or under minor version compatibility), or its refusal
    with the same lowest driver upgrade."""
    members = matrix.family(backend)
    if backend.variant_of or len(members) < 2:
        return host_check(backend, root, matrix=matrix, path_env=path_env, runner=runner)
    if path_env is None and root != Path("/"):
        path_env = drivers.root_path(root)
    choice = choose_variant(members, root, path_env=path_env, runner=runner)
    f = choice.chosen_fit
    if f is None:
        up = choice.upgrade
        fix = (f"upgrade the {needs(backend).stack.driver_title} to {up.driver} or later (then `envbuild pick` gives "
               f"{up.backend.name})" if up and needs(backend).stack else None)
        return Check(NAME, False, choice.why, fix or WAY_OUT.format(stack=needs(backend).stack.title
                                                                   if needs(backend).stack else "release"))
    how = " under minor version compatibility" if f.mode == MINOR else ""
    detail = f"`envbuild pick` gives {f.backend.name}{how}: {f.check.detail}"
    if f.mode == MINOR and choice.minor_note:
        detail += f"; {choice.minor_note}"
    return Check(NAME, f.check.ok, detail, f.check.fix, blocking=f.check.blocking)


def host_check(backend: Backend, root: Path = Path("/"), *, matrix: Matrix | None = None, path_env: str | None = None,
               runner: drivers.Runner = drivers.run_tool, measured_arch: list[str] | None = None) -> Check:
    """Read the host's side for this backend's stack, then `check`."""
    host = host_driver(backend, root, path_env=path_env, runner=runner)
    return check(backend, host, matrix=matrix, measured_arch=measured_arch)


# --------------------------------------------------------------------------------------------------
# Variants: which image of a family (cuda, cuda-cu130, cuda-cu126) fits this host.


@dataclass(frozen=True)
class Fit:
    backend: Backend
    check: Check
    mode: str | None = None  # native, minor-version, below, or None (not known)

    @property
    def fits(self) -> bool:
        """Not known to be refused: ok, or only a warning (an unknown driver is not a mismatch)."""
        return self.check.ok or not self.check.blocking

    def to_json(self) -> dict[str, Any]:
        n = needs(self.backend)
        return {"backend": self.backend.name, "fits": self.fits, "status": self.check.status,
                "mode": self.mode if self.fits else None, "stack_version": n.version, "min_driver": n.min_driver,
                "compat_driver": n.compat_driver, "arch": list(n.arch) or None,
                "detail": self.check.detail, "fix": self.check.fix}


def fit(backend: Backend, host: drivers.HostDriver | None, platform: str | None = None) -> Fit:
    n = needs(backend, platform=platform)
    return Fit(backend, check(backend, host, platform=platform), driver_mode(n, host.version if host else None))


@dataclass(frozen=True)
class Upgrade:
    """The lowest driver that gives this host an image, and the image it gives there."""

    driver: str
    backend: Backend
    mode: str | None


@dataclass(frozen=True)
class Choice:
    """The newest variant this host runs natively, else the newest it runs under minor version compatibility, else
    the newest it is not known to refuse (None: every one is refused), and why."""

    chosen: Backend | None
    why: str
    fits: tuple[Fit, ...]  # newest first
    host: drivers.HostDriver | None = None
    upgrade: Upgrade | None = None  # with no choice: the lowest driver that would give one (None: none would)
    said: tuple[str, ...] = ()  # `why` for a person, a line each: what was chosen, why, each variant passed over

    @property
    def chosen_fit(self) -> Fit | None:
        return next((f for f in self.fits if f.backend is self.chosen), None)

    @property
    def mode(self) -> str | None:
        f = self.chosen_fit
        return f.mode if f else None

    @property
    def warnings(self) -> list[str]:
        """What could not be read (an unknown driver or device): said, never a refusal."""
        fit = self.chosen_fit
        return [fit.check.detail] if fit and not fit.check.ok else []

    @property
    def minor_note(self) -> str | None:
        """One line when the choice runs only under minor version compatibility: so, and what it gives up."""
        f = self.chosen_fit
        if f is None or f.mode != MINOR:
            return None
        n = needs(f.backend)
        st = n.stack
        have = self.host.version if self.host else "?"
        newest = stacks.newest_supported(st, have) if st else None
        return (f"{f.backend.name} ({st.title} {n.version}) runs on driver {have}"
                + (f" (native up to {st.title} {newest})" if newest else "")
                + f" under {st.title} minor version compatibility: {st.minor_gives_up}; driver >= {n.min_driver} "
                "runs it natively")

    def gpus(self) -> list[dict[str, Any]]:
        """Each distinct device of the host: which variants carry it (as this driver runs them), and whether the
        chosen one does."""
        out = []
        for arch in _arch_order(self.host.archs) if self.host else ():
            carried = [f.backend.name for f in self.fits if f.mode in (NATIVE, MINOR, None) and f.backend.host
                       and _image_archs(needs(f.backend)) and _runs(needs(f.backend), arch, f.mode != MINOR)]
            ok = self.chosen is not None and self.chosen.name in carried
            out.append({"arch": arch, "name": stacks.arch_title(arch), "count": (self.host.archs or []).count(arch),
                        "verdict": "runs" if ok else "not carried by any variant this driver runs",
                        "carried_by": carried})
        return out


def _arch_order(archs: Any) -> list[str]:
    """Distinct architectures, oldest first (sm_50 before sm_120; gfx by name)."""
    def key(a: str) -> tuple[int, str]:
        m = re.fullmatch(r"(?:sm|compute)_(\d+)[af]?", a)
        return (int(m.group(1)), a) if m else (0, a)

    return sorted(set(archs or ()), key=key)


def _newest_first(variants: list[Backend]) -> list[Backend]:
    def stack(b: Backend) -> Any:
        return stacks.parse_version(b.host.version if b.host else None) or stacks.parse_version("0")

    return sorted(variants, key=stack, reverse=True)  # stable: a family's own order among equals (npu's SoCs)


def _pick(fits: tuple[Fit, ...]) -> Fit | None:
    """Native first (the newest), then under minor version compatibility (the newest), then the newest not known
    to be refused (an unknown driver)."""
    for want in ((NATIVE,), (MINOR,), (None, NATIVE, MINOR, "below")):
        for f in fits:
            if f.fits and f.mode in want:
                return f
    return None


def choose_variant(variants: list[Backend], root: Path = Path("/"), *, path_env: str | None = None,
                   runner: drivers.Runner = drivers.run_tool, host: drivers.HostDriver | None = None,
                   platform: str | None = None) -> Choice:
    """Among one family's variants: the newest whose driver minimum and device generation this host meets (read
    under `root`, or `host` as described), preferring one that runs natively over one that runs only under minor
    version compatibility; the newest of all when the host says nothing; None, with the way out, when each is
    refused."""
    ordered = _newest_first(variants)
    if host is None and ordered:
        host = host_driver(ordered[0], root, path_env=path_env, runner=runner)
    fits = tuple(fit(b, host, platform) for b in ordered)  # one family: one stack, one driver to read
    f = _pick(fits)
    if f is not None:
        passed = [p for p in fits if p is not f and fits.index(p) < fits.index(f)]
        if f.check.ok:
            how = " under minor version compatibility" if f.mode == MINOR else ""
            why = f"{f.backend.name} is the newest variant this host runs{how} ({f.check.detail})"
            said = (f"the newest variant this host runs{',' + how if how else ''}", f.check.detail)
        else:
            why = f"{f.backend.name}, the newest variant ({f.check.detail.split(' (')[0]}: not a refusal)"
            said = ("the newest variant", f"{f.check.detail.split(' (')[0]}: not a refusal")
        if passed:
            why += "; passed over: " + "; ".join(f"{p.backend.name} ({_passed(p)})" for p in passed)
        said += tuple(f"passed over {p.backend.name}: {_passed(p)}" for p in passed)
        return Choice(f.backend, why, fits, host, said=said)
    upgrade = lowest_upgrade(ordered, host, platform)
    return Choice(None, refusal(fits, host, upgrade), fits, host, upgrade)


def _passed(p: Fit) -> str:
    if p.fits and p.mode == MINOR:
        return f"runs only under minor version compatibility here; driver >= {needs(p.backend).min_driver} runs it natively"
    return _short(p.check.detail)


def lowest_upgrade(ordered: list[Backend], host: drivers.HostDriver | None,
                   platform: str | None = None) -> Upgrade | None:
    """The lowest driver (of the minimums and floors the variants name) at which this host's devices get an image,
    and which: what doctor and pick both name as the upgrade. None when no driver would do (a device no variant
    carries)."""
    if host is None:
        return None
    have = stacks.parse_version(host.version)
    drivers_named = {d for b in ordered if (n := needs(b, platform=platform)).stack
                     for d in (n.min_driver, n.compat_driver) if d}
    for d in sorted(drivers_named, key=lambda v: stacks.parse_version(v) or stacks.parse_version("0")):
        if have is not None and (stacks.parse_version(d) or have) <= have:
            continue
        trial = drivers.HostDriver(host.driver, d, list(host.archs) if host.archs else None)
        f = _pick(tuple(fit(b, trial, platform) for b in ordered))
        if f is not None and f.check.ok:
            return Upgrade(d, f.backend, f.mode)
    return None


def _short(detail: str) -> str:
    """A check's detail without its first part when that says what the host has (the message said it already)."""
    return detail.split("; ", 1)[1] if detail.startswith("host ") and "; " in detail else detail


WAY_OUT = ("where the driver cannot be upgraded (a shared cluster): the CPU image (`envbuild pick --backend cpu`), "
           "or a matrix variant of your own with an older {stack} (docs/get-started/nvidia.md, \"When the driver cannot be upgraded\")")


def refusal(fits: tuple[Fit, ...], host: drivers.HostDriver | None, upgrade: Upgrade | None = None) -> str:
    """Why no variant runs here, and the lowest driver upgrade that gives an image (and which), else the devices
    no variant carries; then what is left where the driver cannot change."""
    family = fits[0].backend.description or fits[0].backend.family
    st = needs(fits[0].backend).stack
    head = f"no {family} image fits this host"
    if st is None or host is None:
        reasons = "; ".join(f"{f.backend.name}: {f.check.detail}" for f in fits)
        fix = fits[-1].check.fix or "see `envbuild doctor`"
        return f"{head} ({reasons}). {fix[0].upper()}{fix[1:]}"
    newest = stacks.newest_supported(st, host.version) if st.minimum and host.version else None
    said = (f"its {st.driver_title} is {host.version}" if host.version else
            f"its {st.driver_title} version is not known") + (f" (up to {st.title} {newest})" if newest else "")
    bad = _arch_order({a for a in host.archs or () if not any(
        f.mode in (NATIVE, MINOR) and _runs(needs(f.backend), a, f.mode != MINOR) for f in fits)})
    if bad and any(f.mode in (NATIVE, MINOR) for f in fits):
        said += (f"; its {', '.join(stacks.arch_title(a) for a in bad)} GPU{'s are' if len(bad) > 1 else ' is'} "
                 "carried by no variant this driver runs")
    elif all(f.mode == "below" for f in fits):
        oldest = fits[-1]
        n = needs(oldest.backend)
        said += f"; the oldest variant, {oldest.backend.name} ({st.title} {n.version}), needs driver >= {n.lowest_driver}"
    else:
        said += "; " + "; ".join(f"{f.backend.name}: {_short(f.check.detail)}" for f in fits)
    if upgrade is not None:
        un = needs(upgrade.backend)
        how = " under minor version compatibility" if upgrade.mode == MINOR else ""
        newest_b = fits[0].backend
        up = (f"Upgrade the {st.driver_title} to {upgrade.driver} or later: {upgrade.backend.name} ({st.title} "
              f"{un.version}) runs there{how}" + (f"; {needs(newest_b).min_driver} or later runs the newest, "
                                                 f"{newest_b.name}, natively" if newest_b is not upgrade.backend and
                                                 needs(newest_b).min_driver else ""))
    else:
        carried = {a: [f.backend.name for f in fits if _image_archs(needs(f.backend)) and _runs(needs(f.backend), a)]
                   for a in bad}
        none = [a for a, c in carried.items() if not c]
        every = _arch_order(host.archs)
        each = "; ".join(f"{stacks.arch_title(a)}: " + (", ".join(
            f.backend.name for f in fits if _image_archs(needs(f.backend)) and _runs(needs(f.backend), a)) or "none")
            for a in every)
        up = (f"No variant carries {', '.join(stacks.arch_title(a) for a in none)}: no driver upgrade helps"
              if none else f"No one variant carries every GPU of this host ({each}): run each kind of GPU with its own "
                           "image (`envbuild pick --gpu ARCH` for each)")
    return f"{head}: {said}. {up}. Or, {WAY_OUT.format(stack=st.title)}."
