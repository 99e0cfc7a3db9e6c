"""Which backends can this host run? Evidence-based detection, driven by each backend's `detect:` data.

Rules (all data comes from the matrix; only these generic rules live here):

* Device nodes: every literal path in `device_nodes` must exist; of the glob patterns at least one must
  match (they are alternatives, e.g. TPU v4's /dev/accel* vs v5's /dev/vfio/*). Any file type counts.
* Shared nodes: nodes under /dev/dri/ (render nodes) exist for every GPU vendor, so one counts for a
  backend only when its PCI vendor (sys/class/drm/NAME/device/vendor) is one of the backend's pci_vendors.
* PCI: a backend with pci_vendors also needs a PCI device of one of them, of a class that can be an
  accelerator (see `counts_as_accelerator`). A root without sys/bus/pci skips this check (noted).
* os/arch: a backend with `os` (mps: darwin + arm64) is detected from `system`/`machine`; --root never
  changes them. `arch` also filters device-node backends.
* Tools on PATH and Docker runtimes are supporting evidence: reported, and listed in `missing`, never required.
* The backend whose device is "cpu" is always available: the fallback.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
from dataclasses import dataclass, field
from glob import escape, glob
from pathlib import Path
from typing import Any

from envbuild.core import hostfacts as drivers
from envbuild.core.errors import InvalidInput, NotContainerizableError, NoVariantFitsError
from envbuild.core.files import read_host
from envbuild.matrix import Backend, Detect, Matrix, not_containerizable_message, stacks
from envbuild.core.platform import arch as arch_name
from envbuild.matrix import compat
from envbuild.smoke.preflight import daemon_runtimes

DISPLAY, PROCESSING_ACCELERATOR = 0x03, 0x12
# Cloud vendors' own chips (AWS Trainium, Google TPU) enumerate as "system peripheral"/"unassigned" classes;
# their vendor ids also cover the VMs' NICs (ENA, gVNIC), NVMe disks and bridges, which never count.
CLOUD_ACCELERATOR_VENDORS = frozenset({"0x1d0f", "0x1ae0"})
NEVER_ACCELERATOR_CLASSES = frozenset({0x01, 0x02, 0x06})  # mass storage, network, bridge
SHARED_NODE_DIRS = {"/dev/dri/": "sys/class/drm"}  # node dir -> sysfs class holding NAME/device/vendor
_SUMMARY_KINDS = ("device", "pci", "os")


@dataclass(frozen=True)
class Evidence:
    kind: str  # device | pci | tool | runtime | os | fallback | note
    detail: str


@dataclass
class Finding:
    backend: str
    device: str
    detected: bool
    evidence: list[Evidence] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "description": self.description,
            "device": self.device,
            "detected": self.detected,
            "evidence": [{"kind": e.kind, "detail": e.detail} for e in self.evidence],
            "missing": list(self.missing),
        }


@dataclass
class Detection:
    findings: list[Finding]
    fallback: str = "cpu"

    @property
    def detected(self) -> list[str]:
        """Detected backends in matrix order, without the fallback."""
        return [f.backend for f in self.findings if f.detected and f.backend != self.fallback]

    def finding(self, backend: str) -> Finding:
        for f in self.findings:
            if f.backend == backend:
                return f
        raise KeyError(backend)

    def to_json(self) -> dict[str, Any]:
        return {"detected": self.detected, "fallback": self.fallback, "backends": [f.to_json() for f in self.findings]}


class AmbiguousBackendError(InvalidInput):
    """`--backend auto` found several containerizable backends."""

    def __init__(self, candidates: list[Finding]):
        self.candidates = [f.backend for f in candidates]
        listed = "; ".join(f"{f.backend} ({_summary(f)})" for f in candidates)
        super().__init__(
            f"--backend auto found several accelerators: {listed}. "
            f"Pass an explicit --backend ({' or '.join(self.candidates)})."
        )


@dataclass(frozen=True)
class PciDevice:
    address: str
    vendor: str  # "0x10de"
    pci_class: int  # 0x030200

    def describe(self) -> str:
        return f"{self.address} vendor {self.vendor} class 0x{self.pci_class:06x}"


def counts_as_accelerator(dev: PciDevice) -> bool:
    """PCI rule: display controllers (0x03xxxx) and processing accelerators (0x12xxxx) count for any vendor;
    for AWS (0x1d0f) and Google (0x1ae0) any class counts except storage, network and bridges."""
    base = dev.pci_class >> 16
    if base in (DISPLAY, PROCESSING_ACCELERATOR):
        return True
    return dev.vendor in CLOUD_ACCELERATOR_VENDORS and base not in NEVER_ACCELERATOR_CLASSES


# --------------------------------------------------------------------------------------------------
# Reading the host (or a fake root).


def _read_hex(path: Path) -> str | None:
    text = (read_host(path, limit=64) or "").strip().lower()
    return text if re.fullmatch(r"0x[0-9a-f]+", text) else None


def pci_devices(root: Path) -> list[PciDevice] | None:
    """PCI devices under root/sys/bus/pci/devices; None when the root has no sys/bus/pci at all."""
    if not (root / "sys/bus/pci").is_dir():
        return None
    found = []
    for dev in sorted((root / "sys/bus/pci/devices").glob("*")):
        vendor, cls = _read_hex(dev / "vendor"), _read_hex(dev / "class")
        if vendor and cls:
            found.append(PciDevice(dev.name, vendor, int(cls, 16)))
    return found


def _natural(text: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _nodes(root: Path, pattern: str) -> list[str]:
    """Host paths (as seen from inside root) matching a /dev pattern; any file type."""
    base = escape(str(root).rstrip("/") or "/")
    hits = glob(os.path.join(base, pattern.lstrip("/")))
    return sorted(("/" + os.path.relpath(h, root) for h in hits), key=_natural)


def _node_vendor(root: Path, node: str) -> str | None:
    for prefix, sys_class in SHARED_NODE_DIRS.items():
        if node.startswith(prefix):
            return _read_hex(root / sys_class / os.path.basename(node) / "device/vendor")
    return None


def _is_shared(pattern: str) -> bool:
    return any(pattern.startswith(prefix) for prefix in SHARED_NODE_DIRS)


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


# --------------------------------------------------------------------------------------------------
# One backend's evidence.


def _check_nodes(det: Detect, root: Path, f: Finding) -> bool | None:
    """Device-node rule (module docstring); None when the backend declares no nodes."""
    if not det.device_nodes:
        return None
    vendors = {v.lower() for v in det.pci_vendors}
    literal_ok, glob_hit, globs = True, False, []
    for pattern in det.device_nodes:
        counted = []
        for node in _nodes(root, pattern):
            if not _is_shared(pattern):
                counted.append(Evidence("device", node))
            elif (vendor := _node_vendor(root, node)) in vendors:
                counted.append(Evidence("device", f"{node} (PCI vendor {vendor})"))
        f.evidence += counted
        wanted = f"{pattern} of PCI vendor {'/'.join(sorted(vendors)) or '(none declared)'}" if _is_shared(pattern) else pattern
        if _is_glob(pattern):
            glob_hit |= bool(counted)
            globs.append(wanted)
        elif not counted:
            literal_ok = False
            f.missing.append(f"device node {wanted}")
    if globs and not glob_hit:
        f.missing.append(f"a device node matching {' or '.join(globs)}")
    return literal_ok and (glob_hit or not globs)


def _check_pci(det: Detect, pci: list[PciDevice] | None, f: Finding) -> bool | None:
    if not det.pci_vendors or pci is None:
        return None
    vendors = {v.lower() for v in det.pci_vendors}
    hits = [d for d in pci if d.vendor in vendors and counts_as_accelerator(d)]
    f.evidence += [Evidence("pci", d.describe()) for d in hits]
    if not hits:
        f.missing.append(f"a PCI accelerator of vendor {' or '.join(sorted(vendors))}")
    return bool(hits)


def _check_platform(det: Detect, system: str, machine: str, f: Finding) -> bool | None:
    if not det.os and not det.arch:
        return None
    os_ok = not det.os or system.lower() == det.os
    arch_ok = not det.arch or arch_name(machine) in {arch_name(a) for a in det.arch}
    if os_ok and arch_ok:
        if det.os:
            f.evidence.append(Evidence("os", f"{system} on {machine}"))
        return True
    wanted = " on ".join(x for x in (det.os, "/".join(det.arch)) if x)
    f.missing.append(f"{wanted} (this host: {system} on {machine})")
    return False


def _check_support(det: Detect, path_env: str | None, runtimes: set[str] | None, f: Finding) -> None:
    for tool in det.tools:
        where = shutil.which(tool, path=path_env)
        if where:
            f.evidence.append(Evidence("tool", where))
        else:
            f.missing.append(f"tool {tool} on PATH")
    for name in det.runtimes:
        if runtimes is None:
            f.missing.append(f"Docker runtime '{name}' (not checked: no Docker engine information)")
        elif name in runtimes:
            f.evidence.append(Evidence("runtime", f"Docker runtime '{name}' registered"))
        else:
            f.missing.append(f"Docker runtime '{name}' (not registered with the Docker engine)")


def _find(b: Backend, root: Path, pci: list[PciDevice] | None, env: dict[str, Any]) -> Finding:
    f = Finding(b.name, b.device, False, description=b.description)
    if b.device == "cpu":
        f.detected = True
        f.evidence.append(Evidence("fallback", "always"))
        return f
    det = b.detect
    nodes = _check_nodes(det, root, f)
    plat = _check_platform(det, env["system"], env["machine"], f)
    pci_ok = _check_pci(det, pci, f)
    _check_support(det, env["path_env"], env["docker_runtimes"], f)
    sources = [x for x in (nodes, plat if det.os else None) if x is not None]
    if not sources:
        f.missing.insert(0, "no device_nodes or os in the matrix's detect data")
    f.detected = bool(sources) and all(sources) and plat is not False and pci_ok is not False
    if f.detected and det.pci_vendors and pci is None:
        f.evidence.append(Evidence("note", f"PCI not checked: {root / 'sys/bus/pci'} is absent"))
    if f.detected and b.host is not None:
        _driver(b, root, env, f)
    return f


def _driver(b: Backend, root: Path, env: dict[str, Any], f: Finding) -> None:
    """The detected device's driver version and architectures: evidence when known, a hint when not (never a
    reason to call the device absent)."""
    stack = stacks.STACKS[b.host.stack]
    cache = env.setdefault("drivers", {})
    if stack.driver not in cache:
        cache[stack.driver] = stacks.read_driver(stack.driver, root, env["path_env"], env.get("runner") or drivers.run_tool)
    host = cache[stack.driver]
    if host.version:
        f.evidence.append(Evidence("driver", f"{stack.driver_title} {host.version} ({', '.join(host.evidence)})"))
    else:
        f.missing.append(f"the {stack.driver_title} version ({'; '.join(host.notes)})")
    if host.archs:
        f.evidence.append(Evidence("arch", ", ".join(host.archs)))


# --------------------------------------------------------------------------------------------------
# Public API.


def detect(
    matrix: Matrix,
    root: str | os.PathLike[str] = "/",
    *,
    path_env: str | None = None,
    docker_runtimes: set[str] | None = None,
    system: str | None = None,
    machine: str | None = None,
) -> Detection:
    """Which of the matrix's backends this host (or a fake `root`) can run, each with its evidence."""
    rootp = Path(root)
    env = {
        "path_env": path_env,
        "docker_runtimes": docker_runtimes,
        "system": system or platform.system(),
        "machine": machine or platform.machine(),
    }
    pci = pci_devices(rootp)
    # One finding per family: variants (cuda-cu126) share their backend's detect rules; which of them fits is
    # the driver's and the devices' question (envbuild.matrix.compat.choose_variant), not detection's.
    findings = [_find(b, rootp, pci, env) for b in matrix.backends if not b.variant_of]
    fallback = next((b.name for b in matrix.backends if b.device == "cpu"), "cpu")
    return Detection(findings, fallback)


def detect_host(matrix: Matrix, root: str | os.PathLike[str] | None = None) -> Detection:
    """`envbuild detect`: this host, with the runtimes its Docker engine registers; or, with `root`, that folder read
    as a host's root: its dev/ and sys/, and the folders of this PATH under it (found there, never run), the engine
    not asked."""
    if root is None:
        return detect(matrix, docker_runtimes=docker_runtimes_from_engine())
    folders = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p.startswith("/")]
    return detect(matrix, root, path_env=os.pathsep.join(str(Path(root) / p.lstrip("/")) for p in folders))


def docker_runtimes_from_engine() -> set[str] | None:
    """Runtimes registered with the Docker daemon (e.g. {'runc', 'nvidia'}); None when none is reachable."""
    from envbuild.engine.select import daemon

    engine = daemon(timeout=5)
    try:
        return daemon_runtimes(engine)
    finally:
        engine.close()


def _summary(f: Finding, per_kind: int = 3) -> str:
    """The deciding evidence (device nodes, PCI devices, os), at most `per_kind` of each."""
    parts = []
    for kind in _SUMMARY_KINDS:
        items = [("PCI " if kind == "pci" else "") + e.detail for e in f.evidence if e.kind == kind]
        parts += items[:per_kind] + ([f"(+{len(items) - per_kind} more)"] if len(items) > per_kind else [])
    return ", ".join(parts)


def choose(detection: Detection, matrix: Matrix, *, native: bool = False,
           root: str | os.PathLike[str] = "/") -> tuple[str, str]:
    """`--backend auto`: (backend, reason). Raises when several backends, or only a non-containerizable one, are found.
    Variants of one backend (cuda, cuda-cu126) are one choice: the newest whose needs this host's driver and
    devices meet (read under `root`).

    native=True (for `envbuild env` and `doctor`, which need no container) counts non-containerizable backends too.
    """
    found = [detection.finding(name) for name in detection.detected]
    boxes = [f for f in found if native or matrix.backend(f.backend).containerizable]
    if len(boxes) > 1:
        raise AmbiguousBackendError(boxes)
    if boxes and len(members := matrix.family(matrix.backend(boxes[0].backend))) > 1:
        chosen = compat.choose_variant(members, Path(root))
        f = boxes[0]
        if chosen.chosen is None:
            raise NoVariantFitsError(f"--backend auto detected {f.description or f.backend} ({_summary(f)}), but "
                                     + chosen.why)
        return chosen.chosen.name, f"detected {f.description or f.backend}: {_summary(f)}; {chosen.why}"
    if boxes:
        f = boxes[0]
        return f.backend, f"detected {f.description or f.backend}: {_summary(f)}"
    if found:
        b = matrix.backend(found[0].backend)
        msg = f"--backend auto detected {b.description} ({_summary(found[0])}), but " + not_containerizable_message(b)
        if not b.alternatives:
            msg += f" Use --backend {detection.fallback} for a CPU image, or `envbuild env --backend {b.name}` natively."
        raise NotContainerizableError(msg)
    return detection.fallback, "no accelerator detected"
