"""Will this image run on this host? The image's needs (the matrix, or the image's own record) against the host's
driver and device architectures (envbuild.core.hostfacts), as one preflight check with its fix.

Verdicts: a known mismatch of a confirmed vendor fact blocks (doctor FAIL; smoke, run and pull refuse before
anything starts or downloads); an UNCONFIRMED fact only warns; whatever is unknown (a missing version file, no
published minimum, no declared architectures) is a warning that says what was not known, never a refusal.
"""

from __future__ import annotations

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
        have, need = stacks.parse_version(host.version), stacks.parse_version(n.min_driver)
        if have is not None and need is not None and have >= need and _arch_ok(n, host) is not False:
            found.append(other.name)
    return found


def _floor(n: Needs) -> str | None:
    """Without a declared or measured list: the oldest architecture the stack's release builds for (CUDA 13: sm_75)."""
    return None if n.arch or n.stack is None else stacks.arch_floor(n.stack, n.version)


def _image_archs(n: Needs) -> list[str]:
    floor = _floor(n)
    return list(n.arch) or ([floor.replace("sm_", "compute_")] if floor else [])


def _arch_ok(n: Needs, host: drivers.HostDriver) -> bool | None:
    rule = stacks.ARCH_RULES.get(n.stack.name) if n.stack else None
    archs = _image_archs(n)
    if rule is None or not archs or not host.archs:
        return None
    return all(rule(archs, a) for a in host.archs)


def check(backend: Backend, host: drivers.HostDriver | None, *, matrix: Matrix | None = None,
          measured_arch: list[str] | None = None) -> Check:
    """One check: ok, FAIL (a known mismatch of a confirmed fact) or warn (a mismatch of an UNCONFIRMED fact, or
    something unknown), with the fix."""

    n = needs(backend, measured_arch)
    if n.stack is None:
        if backend.device == "cpu":
            return Check(NAME, True, f"the {backend.name} image needs no host driver")
        return Check(NAME, True, f"not checked: envbuild knows no driver requirement of the {backend.name} image")
    st = n.stack
    host = host or drivers.HostDriver(st.driver, notes=["not read"])
    unknown = "; ".join(host.notes) or "no version found"
    seen = f"host {st.driver_title} {host.version}" + (f" ({', '.join(host.evidence)})" if host.evidence else "")
    problems, blocking, fixes = [], False, []
    if host.version is None:
        problems.append(f"cannot tell the host's {st.driver_title} version ({unknown}); the image needs {st.title} "
                        f"{n.version}" + (f" (driver >= {n.min_driver})" if n.min_driver else ""))
        fixes.append(f"check that the {st.driver_title} is loaded (`envbuild detect` shows the device); unknown is "
                     "not a mismatch, so nothing was refused")
    elif n.min_driver is None:
        problems.append(f"{seen}; no published minimum {st.driver_title} for {st.title} {n.version} (not checked)")
    else:
        have, need = stacks.parse_version(host.version), stacks.parse_version(n.min_driver)
        if have is not None and need is not None and have < need:
            newest = stacks.newest_supported(st, host.version) if st.minimum else None
            supports = f" supports {st.title} up to {newest}" if newest else ""
            problems.append(f"{seen}{supports}; this image needs driver >= {n.min_driver} for {st.title} {n.version}"
                            + ("" if n.confirmed else " (UNCONFIRMED vendor fact)"))
            blocking |= n.confirmed
            fixes.append(f"upgrade the {st.driver_title} to {n.min_driver} or later")
    arch_ok = _arch_ok(n, host)
    if arch_ok is False:
        rule = stacks.ARCH_RULES[st.name]
        bad = sorted({a for a in host.archs or () if not rule(_image_archs(n), a)})
        if _floor(n):
            problems.append(f"this host's devices are {', '.join(bad)}; {st.title} {n.version} builds for {_floor(n)} "
                            "and newer only")
        else:
            problems.append(f"this host's devices are {', '.join(bad)}; the image's torch was built for {', '.join(n.arch)}")
        blocking = True
        fixes.append(f"use an image whose torch is built for {', '.join(bad)}")
    if problems:
        alternatives = _alternatives(matrix, backend, host)
        if alternatives:
            fixes.append(f"use the {' or '.join(alternatives)} backend")
        fix = ", or ".join(fixes) if fixes else None
        return Check(NAME, False, "; ".join(problems), fix, blocking=blocking)
    parts = [seen]
    parts.append(f">= {n.min_driver} needed for {st.title} {n.version}" if n.min_driver else f"{st.title} {n.version}")
    if arch_ok and _floor(n):
        parts.append(f"devices {', '.join(sorted(set(host.archs or ())))} are {_floor(n)} or newer")
    elif arch_ok:
        parts.append(f"devices {', '.join(sorted(set(host.archs or ())))} are among the image's {', '.join(n.arch)}")
    elif not host.archs and stacks.ARCH_RULES.get(st.name):
        parts.append(f"device architecture unknown ({unknown})" if host.notes else "device architecture unknown")
    elif not n.arch and stacks.ARCH_RULES.get(st.name):
        parts.append("the image's architectures unknown (not checked)")
    return Check(NAME, True, "; ".join(parts))


def host_driver(backend: Backend, root: Path = Path("/"), *, path_env: str | None = None,
              runner: drivers.Runner = drivers.run_tool) -> drivers.HostDriver | None:
    """The host's side of this backend's stack (driver files, the vendor tool); None when it has no stack."""
    if backend.host is None:
        return None
    if path_env is None and root != Path("/"):  # a fake root's tools, never this machine's
        path_env = drivers.root_path(root)
    return drivers.read(stacks.STACKS[backend.host.stack].driver, root, path_env, runner)


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

    @property
    def fits(self) -> bool:
        """Not known to be refused: ok, or only a warning (an unknown driver is not a mismatch)."""
        return self.check.ok or not self.check.blocking

    def to_json(self) -> dict[str, Any]:
        n = needs(self.backend)
        return {"backend": self.backend.name, "fits": self.fits, "status": self.check.status,
                "stack_version": n.version, "min_driver": n.min_driver, "arch": list(n.arch) or None,
                "detail": self.check.detail, "fix": self.check.fix}


@dataclass(frozen=True)
class Choice:
    """The newest variant this host is not known to refuse (None: every one is refused), and why."""

    chosen: Backend | None
    why: str
    fits: tuple[Fit, ...]  # newest first
    host: drivers.HostDriver | None = None

    @property
    def warnings(self) -> list[str]:
        """What could not be read (an unknown driver or device): said, never a refusal."""
        fit = next((f for f in self.fits if f.backend is self.chosen), None)
        return [fit.check.detail] if fit and not fit.check.ok else []


def _newest_first(variants: list[Backend]) -> list[Backend]:
    def stack(b: Backend) -> Any:
        return stacks.parse_version(b.host.version if b.host else None) or stacks.parse_version("0")

    return sorted(variants, key=stack, reverse=True)  # stable: a family's own order among equals (npu's SoCs)


def choose_variant(variants: list[Backend], root: Path = Path("/"), *, path_env: str | None = None,
                   runner: drivers.Runner = drivers.run_tool) -> Choice:
    """Among one family's variants: the newest whose driver minimum and device generation this host meets (read
    under `root`); the newest of all when the host says nothing; None, with the way out, when each is refused."""
    ordered = _newest_first(variants)
    host = host_driver(ordered[0], root, path_env=path_env, runner=runner) if ordered else None
    fits = tuple(Fit(b, check(b, host)) for b in ordered)  # one family: one stack, one driver to read
    passed = [f for f in fits if not f.fits]
    for f in fits:
        if f.fits:
            why = (f"{f.backend.name} is the newest variant this host runs ({f.check.detail})" if f.check.ok else
                   f"{f.backend.name}, the newest variant ({f.check.detail.split(' (')[0]}: not a refusal)")
            if passed:
                why += "; passed over: " + "; ".join(f"{p.backend.name} ({_short(p.check.detail)})" for p in passed)
            return Choice(f.backend, why, fits, host)
    return Choice(None, refusal(fits, host), fits, host)


def _short(detail: str) -> str:
    return detail.split("; ", 1)[1] if "; " in detail else detail


def refusal(fits: tuple[Fit, ...], host: drivers.HostDriver | None) -> str:
    """Why no variant runs here, in the words of the oldest one, and the upgrade that lets it."""
    oldest = fits[-1]
    n = needs(oldest.backend)
    family = fits[0].backend.description or fits[0].backend.family
    st = n.stack
    if st and host and host.version and n.min_driver and (stacks.parse_version(host.version) or 0) < (stacks.parse_version(n.min_driver) or 0):
        newest = stacks.newest_supported(st, host.version) if st.minimum else None
        return (f"no {family} image fits this host: its {st.driver_title} is {host.version}"
                + (f" (up to {st.title} {newest})" if newest else "")
                + f"; the oldest variant, {oldest.backend.name} ({st.title} {n.version}), needs driver >= {n.min_driver}. "
                f"Upgrade the {st.driver_title} to {n.min_driver} or later"
                + (f" ({needs(fits[0].backend).min_driver} or later for the newest, {fits[0].backend.name})"
                   if len(fits) > 1 and needs(fits[0].backend).min_driver else ""))
    reasons = "; ".join(f"{f.backend.name}: {f.check.detail}" for f in fits)
    fix = oldest.check.fix or "see `envbuild doctor`"
    return f"no {family} image fits this host ({reasons}). {fix[0].upper()}{fix[1:]}"
