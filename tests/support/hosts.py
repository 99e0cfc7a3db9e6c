"""Fake host roots: plain files stand in for device nodes and sysfs, one host per vendor."""

from __future__ import annotations

from pathlib import Path


def make_root(base: Path, nodes=(), pci=(), drm=None, with_pci_bus=True) -> Path:
    """nodes: /dev paths; pci: (address, vendor, class); drm: render node name -> PCI vendor."""
    root = base / "root"
    root.mkdir(exist_ok=True)
    binfmt = root / "proc/sys/fs/binfmt_misc"  # QEMU for the other architecture, as scripts/test sets up
    binfmt.mkdir(parents=True, exist_ok=True)
    (binfmt / "status").write_text("enabled\n")
    for qemu in ("aarch64", "x86_64"):
        (binfmt / f"qemu-{qemu}").write_text(f"enabled\ninterpreter /usr/libexec/qemu-binfmt/{qemu}-binfmt-P\nflags: PF\n")
    for node in nodes:
        p = root / node.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    if with_pci_bus:
        (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
    for address, vendor, cls in pci:
        d = root / "sys/bus/pci/devices" / address
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(cls + "\n")
    for name, vendor in (drm or {}).items():
        d = root / "sys/class/drm" / name / "device"
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
    return root


# One fake host per vendor: (nodes, pci, drm); the key names the backend it must detect.
VENDORS = {
    "cuda": (["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"], [("0000:01:00.0", "0x10de", "0x030200")], None),
    "rocm": (["/dev/kfd", "/dev/dri/renderD128", "/dev/dri/card0"], [("0000:03:00.0", "0x1002", "0x038000")], {"renderD128": "0x1002"}),
    "neuron": (["/dev/neuron0", "/dev/neuron1"], [("0000:00:1e.0", "0x1d0f", "0x088000"), ("0000:00:05.0", "0x1d0f", "0x020000")], None),
    "tpu-v4": (["/dev/accel0", "/dev/accel1"], [("0000:00:04.0", "0x1ae0", "0xff0000")], None),
    "tpu-v5": (["/dev/vfio/0", "/dev/vfio/vfio"], [("0000:00:05.0", "0x1ae0", "0x120000")], None),
    "xpu": (["/dev/dri/renderD128", "/dev/dri/card0"], [("0000:00:02.0", "0x8086", "0x030000"), ("0000:00:00.0", "0x8086", "0x060000")], {"renderD128": "0x8086"}),
    "hpu": (["/dev/accel/accel0", "/dev/accel/accel_controlD0"], [("0000:33:00.0", "0x1da3", "0x120000")], None),
    "npu": (["/dev/davinci0", "/dev/davinci_manager", "/dev/devmm_svm"], [("0000:c1:00.0", "0x19e5", "0x120000")], None),
    "mlu": (["/dev/cambricon_dev0", "/dev/cambricon_ctl"], [("0000:41:00.0", "0xcabc", "0x120000")], None),
    "musa": (["/dev/mtgpu.0"], [("0000:81:00.0", "0x1ed5", "0x030000")], None),
}


def add_driver(root: Path, files: dict[str, str]) -> Path:
    """Driver files of a fake host: path under root -> content (see DRIVERS)."""
    for rel, text in files.items():
        p = root / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def nvidia_version(version: str) -> dict[str, str]:
    return {"/proc/driver/nvidia/version": f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Sat Aug 19 "
                                          "01:22:32 UTC 2026\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"}


def kfd_nodes(*gfx_target_versions: int) -> dict[str, str]:
    """A KFD topology: node 0 is the CPU (gfx_target_version 0), then one node per GPU."""
    nodes = {}
    for i, v in enumerate((0, *gfx_target_versions)):
        nodes[f"/sys/class/kfd/kfd/topology/nodes/{i}/properties"] = f"cpu_cores_count 0\nsimd_count 304\ngfx_target_version {v}\n"
    return nodes


def own_path(tmp_path: Path, monkeypatch) -> Path:
    """This machine's PATH: only a folder of its own, where a test puts the vendor tool that runs (with a fake
    root, a tool under the root is never run; this machine's is)."""
    bindir = tmp_path / "this-machine-bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))
    return bindir


# What runc and the daemon answer when a host will not start a container as asked (their own words).
REFUSALS = {
    "tpu": ("OCI runtime create failed: runc create failed: unable to start container process: unable to apply caps: "
            "operation not permitted: unknown", "--privileged"),
    "cuda": ('could not select device driver "" with capabilities: [[gpu]]', "--gpus=all"),
    "hpu": ("unknown or invalid runtime name: habana", "--runtime=habana"),
    "rocm": ("unable to find group video: no matching entries in group file", "--group-add video"),
}
