"""The record of the last good build of a backend, keyed by its plan alone.

`build` answers "up to date" from it without running the builder when the plan's key is the recorded one
(the plan holds the local base image's id, so a newer base pulled since means a real build) and every tag
still names the image it made. A record that cannot be read is no record: the builder runs.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ContextManager

from envbuild.core.files import exclusive, write_atomic

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI
    from envbuild.image.plan import BuildPlan

RECORD = "last-build.json"  # in the backend's context folder


@dataclass(frozen=True)
class Record:
    key: str
    image_id: str
    tags: tuple[str, ...]


def read(context: Path) -> Record | None:
    try:
        doc = json.loads((context / RECORD).read_text(encoding="utf-8"))
        return Record(str(doc["key"]), str(doc["image_id"]), tuple(str(t) for t in doc["tags"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def answer(plan: BuildPlan, engine: EngineAPI) -> str | None:
    """The image id of the last good build when this plan is the one it was made from, else None."""
    if not plan.answerable:
        return None
    last = read(plan.context_path)
    if last is None or last.key != plan.key() or last.tags != plan.tags:
        return None
    return last.image_id if all(engine.image_id(t) == last.image_id for t in plan.tags) else None


def remember(plan: BuildPlan, image_id: str) -> None:
    """Record a good build; a plan that may not be answered from a record leaves none behind."""
    path = plan.context_path / RECORD
    if not plan.answerable:
        path.unlink(missing_ok=True)
        return
    doc = {"key": plan.key(), "image_id": image_id, "tags": list(plan.tags)}
    write_atomic(path, json.dumps(doc, indent=2) + "\n")


def forget(plan: BuildPlan) -> None:
    """Before a build runs: no record may claim success while the tags move."""
    (plan.context_path / RECORD).unlink(missing_ok=True)


def locked(context_dir: Path, backend: str, echo: Callable[[str], None] | None = None) -> ContextManager[None]:
    """One build at a time per backend and project folder (two envbuild processes, same backend)."""
    return exclusive(context_dir / f"{backend}.lock", f"the {backend} build in {context_dir}", echo)


_HELD = re.compile(r"^\d+: FLOCK\s.*\s([0-9a-f]+:[0-9a-f]+:\d+)\s")  # a held flock (a waiter's line has "->")


def building(context_dir: Path, but: str, locks: Path = Path("/proc/locks")) -> list[str]:
    """The other backends whose build lock in `context_dir` is held now (by another envbuild, or by this one's
    other threads): builds on the same engine that may hold a cache mount a silent step waits for. Read from
    Linux's /proc/locks; elsewhere, or when it cannot be read, none."""
    try:
        held = {m.group(1) for m in map(_HELD.match, locks.read_text(encoding="ascii", errors="replace").splitlines()) if m}
    except OSError:
        return []
    found = []
    for file in sorted(context_dir.glob("*.lock")):
        try:
            st = file.stat()
        except OSError:
            continue
        if file.stem != but and f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}" in held:
            found.append(file.stem)
    return found
