"""Will this image run on this host? The image's needs (the matrix, or the image's own record) against the host's
driver and device architectures (envbuild.core.hostfacts), as one preflight check with its fix.

Verdicts: a known mismatch of a confirmed vendor fact blocks (doctor FAIL; smoke, run and pull refuse before
anything starts or downloads); an UNCONFIRMED fact only warns; whatever is unknown (a missing version file, no
published minimum, no declared architectures) is a warning that says what was not known, never a refusal.
"""

from __future__ import annotations

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


def _arch_ok(n: Needs, host: drivers.HostDriver) -> bool | None:
    rule = stacks.ARCH_RULES.get(n.stack.name) if n.stack else None
    if rule is None or not n.arch or not host.archs:
        return None
    return all(rule(list(n.arch), a) for a in host.archs)


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
        bad = sorted({a for a in host.archs or () if not rule(list(n.arch), a)})
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
    if arch_ok:
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
