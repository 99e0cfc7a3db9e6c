"""The host readers (core/hostfacts.py, and each stack's in matrix/stacks/) take what a host file or vendor tool says as hostile: a FIFO is never
waited on, a link loop or a huge file is unknown, escapes never become a version, a tool's flood or hang is cut."""

from __future__ import annotations

import os
import sys
import time

import pytest

from envbuild.core import hostfacts
from envbuild.matrix import stacks
from envbuild.matrix.stacks import cuda
import re
from hypothesis import given, strategies as st
from support.properties import FILES, HEAVY, HOSTILE, KINDS, PROPS, exits_cleanly, file_bytes, plant

NVRM = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"


def _root(tmp_path, rel: str):
    path = tmp_path / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _read(driver, tmp_path):
    return stacks.read_driver(driver, tmp_path, path_env="", runner=lambda argv: None)


def test_the_nvidia_version_is_read_from_procs_line(tmp_path):
    _root(tmp_path, "/proc/driver/nvidia/version").write_text(NVRM)
    assert _read("nvidia", tmp_path).version == "535.104.05"


@pytest.mark.parametrize("make", ["fifo", "loop", "huge", "folder"])
def test_a_host_file_that_is_no_small_file_is_unknown_at_once(make, tmp_path):
    path = _root(tmp_path, "/proc/driver/nvidia/version")
    if make == "fifo":
        os.mkfifo(path)  # no writer: opening it must not wait
    elif make == "loop":
        os.symlink(path.parent / "b", path)
        os.symlink(path, path.parent / "b")
    elif make == "huge":
        with open(path, "wb") as fh:
            fh.truncate(1 << 30)  # sparse: a gigabyte that costs nothing
    else:
        path.mkdir()
    started = time.monotonic()
    found = _read("nvidia", tmp_path)
    assert time.monotonic() - started < 5
    assert found.version is None and found.notes


@pytest.mark.parametrize("text", ["Version=24.1.rc2\x1b[2J\n", "Version=\x1b]8;;https://x\x07\n", "Version=24.1\u202e\n",
                                  "Version=" + "9" * 5000 + "\n"])
def test_escapes_never_become_a_version(text, tmp_path):
    _root(tmp_path, "/usr/local/Ascend/driver/version.info").write_text(text)
    _root(tmp_path, "/sys/module/habanalabs/version").write_text(text.removeprefix("Version="))
    for driver in ("ascend", "habanalabs"):
        version = _read(driver, tmp_path).version
        assert version is None or version.isascii() and version.isprintable() and len(version) <= 64


def test_a_kfd_node_with_a_number_too_long_for_int_is_no_gpu(tmp_path):
    _root(tmp_path, "/sys/class/kfd/kfd/topology/nodes/1/properties").write_text("gfx_target_version " + "9" * 5000 + "\n")
    assert _read("amdgpu", tmp_path).archs is None


def test_compute_caps_take_ascii_digits_only():
    assert cuda.compute_caps("9.0\n8.6\n") == ["sm_90", "sm_86"]
    assert cuda.compute_caps("\u0669.\u0660\n9.0\x1b[2J\n[N/A]\n") == []


def test_a_tool_that_floods_or_hangs_is_cut_off():
    flood = [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('9.0\\n' * 10000)"]
    started = time.monotonic()
    assert hostfacts.run_tool(flood, timeout=20, limit=1 << 20) is None
    hang = [sys.executable, "-c", "import time; print('9.0', flush=True); time.sleep(60)"]
    assert hostfacts.run_tool(hang, timeout=1) is None
    assert time.monotonic() - started < 15
    assert hostfacts.run_tool([sys.executable, "-c", "print('9.0')"]) == "9.0\n"
    assert hostfacts.run_tool([sys.executable, "-c", "raise SystemExit(3)"]) is None
    assert hostfacts.run_tool(["/nonexistent/nvidia-smi"]) is None


# --- Property tests (hypothesis): any input is parsed or refused with envbuild's own clean error (from test_properties.py)

VERSIONS = st.from_regex(r"\A[0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{2})?\Z")


@PROPS
@given(VERSIONS, st.sampled_from(["x86_64", "aarch64", "ppc64le"]), st.booleans(), HOSTILE)
def test_the_kernels_nvidia_line_gives_its_version(version, machine, open_module, tail):
    from envbuild.matrix.stacks.cuda import nvidia_version

    module = f"Kernel Module for {machine}" if open_module else "Kernel Module"
    line = f"NVRM version: NVIDIA UNIX {machine} {module}  {version}  Sat Aug 19 01:15:15 UTC 2023\n"
    assert nvidia_version(line + "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n" + tail.replace("Kernel", "")) == version
    assert nvidia_version(version + "\n") == version  # /sys/module/nvidia/version


@PROPS
@given(HOSTILE)
def test_any_text_gives_a_clean_version_or_none(text):
    from envbuild.matrix.stacks.cuda import compute_caps, nvidia_version

    version = nvidia_version(text)
    assert version is None or re.fullmatch(r"[0-9]{1,5}(?:\.[0-9]{1,5}){1,2}", version)
    assert all(re.fullmatch(r"sm_[0-9]{2,4}", c) for c in compute_caps(text))


@PROPS
@given(st.lists(st.from_regex(r"\A[0-9]{1,2}\.[0-9]\Z"), min_size=1, max_size=8))
def test_nvidia_smis_compute_caps_read_back(caps):
    from envbuild.matrix.stacks.cuda import compute_caps

    assert compute_caps("\n".join(caps) + "\n") == ["sm_" + c.replace(".", "") for c in caps]


@HEAVY
@given(HOSTILE, st.sampled_from(["ascend", "habanalabs", "neuron", "amdgpu", "nvidia"]))
def test_a_host_file_full_of_anything_gives_a_printable_version(tmp_path_factory, text, driver):

    root = tmp_path_factory.mktemp("root")
    for rel in ("usr/local/Ascend/driver/version.info", f"sys/module/{driver}/version", "proc/driver/nvidia/version"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"Version={text}\n" if "Ascend" in rel else text, encoding="utf-8", errors="surrogatepass")
    found = stacks.read_driver(driver, root, path_env="", runner=lambda argv: None)
    assert found.version is None or (found.version.isascii() and found.version.isprintable() and len(found.version) <= 64)


# Every host file a reader of a fake root reads (pick --root): a driver's version, a GPU's sysfs attributes.
HOST_FILES = {
    "proc/driver/nvidia/version": NVRM.encode(), "sys/module/nvidia/version": b"535.104.05\n",
    "sys/module/amdgpu/version": b"6.8.5\n", "sys/module/neuron/version": b"2.19.64.0\n",
    "sys/module/habanalabs/version": b"1.18.0-ee698fb\n", "usr/local/Ascend/driver/version.info": b"Version=24.1.rc3\n",
    "sys/class/kfd/kfd/topology/nodes/1/properties": b"gfx_target_version 90402\n",
    "sys/bus/pci/devices/0000:01:00.0/vendor": b"0x10de\n", "sys/bus/pci/devices/0000:01:00.0/class": b"0x030200\n",
    "sys/bus/pci/devices/0000:01:00.0/device": b"0x2330\n", "sys/class/drm/renderD128/device/vendor": b"0x1002\n",
}
BACKENDS = ["cuda", "rocm", "neuron", "hpu", "npu", "cpu"]


@FILES
@given(st.sampled_from(BACKENDS), st.sampled_from(sorted(HOST_FILES)), st.sampled_from(KINDS), st.data())
def test_any_host_file_gives_pick_exit_0_1_or_2_and_no_secret(tmp_path_factory, invoke, backend, rel, kind, data):
    """Any bytes (or a FIFO, a loop, a link to a private file) where pick reads a host's driver or GPU: an answer
    or a clean refusal, never a traceback, never a private file's content."""
    from support.hosts import VENDORS, make_root

    tmp = tmp_path_factory.mktemp("host")
    root = make_root(tmp, *(VENDORS[backend] if backend in VENDORS else ((), (), None)))
    for other, text in HOST_FILES.items():
        (root / other).parent.mkdir(parents=True, exist_ok=True)
        (root / other).write_bytes(text)
    plant(root / rel, kind, data.draw(file_bytes(HOST_FILES[rel])), tmp / "private.txt")
    exits_cleanly(invoke("pick", "--root", root, *data.draw(st.sampled_from([["--json"], [], ["--backend", "cuda"]]))))
