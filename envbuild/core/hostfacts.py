"""What the host has of an accelerator stack's driver: its version and device architectures, read from the files a
real host carries (under --root), and from the vendor's tool where no file says it. What each stack needs (vendor
facts) is part of the matrix (envbuild.matrix.stacks), which compares the two; each stack's module there holds its
vendor-specific reader, built from the generic ones here.

Unknown stays unknown: a file that is absent or unreadable gives None and a note, never a guess.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from envbuild.core.files import read_host


# --------------------------------------------------------------------------------------------------
# The host's side.


@dataclass
class HostDriver:
    """What the host says of one vendor's driver: None where it could not be read (see notes)."""

    driver: str  # "nvidia"
    version: str | None = None
    archs: list[str] | None = None  # one per device, e.g. ["sm_90", "sm_90"]; None: unknown
    evidence: list[str] = field(default_factory=list)  # where the answers came from
    notes: list[str] = field(default_factory=list)  # what could not be read, and why

    def to_json(self) -> dict:
        return {"driver": self.driver, "version": self.version, "archs": self.archs, "evidence": self.evidence,
                "notes": self.notes}


Runner = Callable[[list[str]], str | None]


TOOL_OUTPUT = 1 << 20  # bytes of a vendor tool's answer read; a tool that says more is not believed


def run_tool(argv: list[str], timeout: float = 10, limit: int = TOOL_OUTPUT) -> str | None:
    """A vendor tool's output, or None when it fails, hangs (a wedged driver can hang nvidia-smi) or says more than
    `limit` bytes: read as it comes, never whole, and the tool is killed then."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    end = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                if not sel.select(left):
                    continue
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    return None
                chunks.append(chunk)
        code = proc.wait(max(0.1, end - time.monotonic()))
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    return b"".join(chunks).decode("utf-8", "replace") if code == 0 else None


# What a host file or tool may say, in ASCII (re.ASCII: no other script's digits), bounded in length: a version
# read anywhere is only ever one of these, so no escape or other control character reaches what is printed.
VERSION = r"([0-9][0-9A-Za-z.+_~-]{0,63})"
def first_file(root: Path, paths: list[str], pattern: "str | re.Pattern[str]", found: HostDriver) -> str | None:
    """The version from the first of `paths` (under root) whose text matches `pattern`; a note per miss."""
    for rel in paths:
        text = read_host(root / rel.lstrip("/"), limit=4096)
        if text is None:
            found.notes.append(f"{rel} is absent")
            continue
        m = pattern.search(text) if isinstance(pattern, re.Pattern) else re.search(pattern, text, re.MULTILINE | re.ASCII)
        if m:
            found.evidence.append(rel)
            return m.group(1)
        found.notes.append(f"{rel} does not say a version")
    return None


def tool(name: str, args: list[str], path_env: str | None, runner: Runner, found: HostDriver,
         root: Path = Path("/")) -> str | None:
    """A vendor tool's output. A folder given to be read (a fake root) is only read: no program under it runs.
    With one, the tool is this machine's own (its PATH), and the evidence says so."""
    real = Path(root).resolve() == Path("/")
    exe = shutil.which(name, path=path_env if real else None)
    if exe is not None and not real and _inside(Path(exe), Path(root)):
        exe = None
    if exe is None:
        found.notes.append(f"{name} is not on PATH" if real else f"{name} is not on this machine's PATH (nothing under {root} is run)")
        return None
    out = runner([exe, *args])
    where = "" if real else f" (run on this machine, not under {root})"
    if out is None:
        found.notes.append(f"`{name} {' '.join(args)}` failed{where}")
        return None
    found.evidence.append(f"{name} {' '.join(args)}{where}")
    return out


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def module_reader(name: str) -> Callable[[Path, str | None, Runner], HostDriver]:
    """A reader of the bare version in /sys/module/NAME/version (Gaudi's habanalabs, Neuron's neuron)."""

    def read(root: Path, path_env: str | None, runner: Runner) -> HostDriver:
        found = HostDriver(name)
        found.version = first_file(root, [f"/sys/module/{name}/version"], rf"\A[ \t]*{VERSION}[ \t]*$", found)
        return found

    return read


def root_path(root: Path) -> str:
    """This PATH's folders inside a fake root: where its vendor tools are."""
    folders = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p.startswith("/")]
    return os.pathsep.join(str(root / p.lstrip("/")) for p in folders)
