"""Which envbuild process started a container, and whether that process is gone.

Every container envbuild starts (smoke, run) carries the owned label and its owner: this host, its boot, the
process id and the process's start time (so a reused pid is not taken for the owner). Only the containers of
owners known to be gone are left behind: a live run's container, created or just exited and not yet read, is
never removed by another run, and a container started from another machine on a shared engine is not judged.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from envbuild.engine.docker import Engine

OWNED_LABEL = "dev.envbuild.owned"  # on every container and volume envbuild starts: what leftovers are
OWNER_LABEL = "dev.envbuild.owner"  # "HOST BOOT PID START" of the process that started it
CHECKOUT_LABEL = "dev.envbuild.checkout"  # the project folder it was started from (checkout()): clean's scope
IMAGES_MADE = Path(".envbuild") / "images-built.txt"  # the ids of the images builds in this folder made
IMAGES_KEPT = 1000  # the newest ids the list keeps


@dataclass(frozen=True)
class Owner:
    host: str
    boot: str
    pid: int
    start: str  # the process's start time, in clock ticks after boot ('' where /proc does not say)

    def __str__(self) -> str:
        return f"{self.host} {self.boot} {self.pid} {self.start}"

    @classmethod
    def read(cls, value: str | None) -> "Owner | None":
        parts = (value or "").split(" ")
        if len(parts) != 4 or not (parts[2].isascii() and parts[2].isdigit()):
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3])


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (after the command name, which may hold spaces); None: no such process. Without
    /proc (macOS), '' for a process that exists."""
    if not os.path.isdir("/proc/self"):
        return "" if _exists(pid) else None
    stat = _read(f"/proc/{pid}/stat")
    return stat.rpartition(")")[2].split()[19] if stat else None


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@lru_cache(maxsize=1)
def me() -> Owner:
    # The machine id where there is one; the host name tells apart containers (CI jobs) sharing a kernel.
    host = f"{socket.gethostname()}/{_read('/etc/machine-id')[:12] or '-'}".replace(" ", "_")
    return Owner(host, _read("/proc/sys/kernel/random/boot_id") or "-", os.getpid(), _start_time(os.getpid()) or "")


def checkout(folder: str | os.PathLike[str] | None = None) -> str:
    """The project folder envbuild works in (its matrix, locks and .envbuild/: a checkout), on this machine, as a
    short id: what `envbuild clean` takes as "here" on an engine several checkouts share."""
    where = os.path.realpath(folder or os.getcwd())
    return hashlib.sha256(f"{me().host}\0{where}".encode()).hexdigest()[:16]


def labels() -> dict[str, str]:
    """The labels for a container or volume this process starts."""
    return {OWNED_LABEL: "1", OWNER_LABEL: str(me()), CHECKOUT_LABEL: checkout()}


def note_image(image_id: str, ledger: Path = IMAGES_MADE) -> None:
    """Remember an image a build in this folder made (an image carries no label of the folder: it would differ
    between the checkouts that build the same image, and travel with it when published)."""
    made = images_made(ledger)
    if image_id in made:
        return
    kept = [*made, image_id][-IMAGES_KEPT:]
    ledger.parent.mkdir(parents=True, exist_ok=True)
    tmp = ledger.with_name(f"{ledger.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(f"{i}\n" for i in kept), encoding="ascii")
    tmp.replace(ledger)


def images_made(ledger: Path = IMAGES_MADE) -> list[str]:
    try:
        text = ledger.read_text(encoding="ascii", errors="replace")
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip().startswith("sha256:")]


def gone(labels: Mapping[str, str]) -> bool | None:
    """Whether the process that started a container is gone: True, False (it runs), None (another machine's, or
    its boot's: cannot tell). A container of an envbuild that wrote no owner is taken as gone once stopped."""
    owner = Owner.read(labels.get(OWNER_LABEL))
    if owner is None:
        return True
    here = me()
    if owner.host != here.host:
        return None
    if owner.boot != here.boot:
        return True  # this machine restarted since
    start = _start_time(owner.pid)
    return start is None or (bool(owner.start) and bool(start) and start != owner.start)


@dataclass(frozen=True)
class Container:
    name: str
    state: str  # created, running, exited, dead, paused, restarting, removing
    labels: Mapping[str, str]


def left_behind(engine: Engine, scope: str | None = None) -> list[str]:
    """envbuild's containers that no longer run and whose run is gone: what a crash (a killed daemon or process)
    left. A live run's container is not among them, whatever its state. With `scope` (a checkout()), only the
    ones started from that folder."""
    return [c.name for c in engine.container_list(OWNED_LABEL)
            if c.state in ("created", "exited", "dead") and gone(c.labels) is True
            and (scope is None or c.labels.get(CHECKOUT_LABEL) == scope)]


def remove_left_behind(engine: Engine, scope: str | None = None, dry_run: bool = False) -> list[str]:
    names = left_behind(engine, scope)
    for name in names if not dry_run else ():
        engine.remove_container(name)
    return names
