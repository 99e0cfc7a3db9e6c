"""matrix.yaml -> a buildx bake definition (JSON) and the build contexts it names, for build farms.

One target per cell `envbuild matrix --per-platform` lists (backend or variant, and platform). Each target's
context is what `envbuild build` hands BuildKit for that cell: the plan's context (image/plan.py make_plan and
write_context, the lock's layers from locking.with_lock), so `docker buildx bake -f FILE TARGET` on any builder
builds the image `envbuild build` builds, with the same content key label. Secrets go by id and file, never their
values. Every lock is checked first, as `build --locked` checks it, and nothing is written unless all are current;
then the whole folder is replaced at once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from envbuild.core.errors import InvalidInput, StaleLock
from envbuild.core.files import write_atomic
from envbuild.core.platform import Platform, target
from envbuild.image import locking
from envbuild.image.plan import CONTENT_LABEL, content_key, make_plan, write_context
from envbuild.maintain import ci

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI
    from envbuild.image.plan import BuildOptions, BuildPlan
    from envbuild.matrix import Backend, Matrix

FILE = "docker-bake.json"
CONTEXTS = "contexts"
# Beside the bake file: the folder is envbuild's to replace. A folder without it is never replaced (--output . in
# a checkout would otherwise take the checkout with it).
MARKER = ".envbuild-bake"
# buildx's rule for target and group names (bake/bake.go, validTargetNameChars)
NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
ALL_GROUPS = ("default", "all")


@dataclass(frozen=True)
class Cell:
    backend: Backend
    platform: Platform

    @property
    def name(self) -> str:
        return target_name(self.backend.name, self.platform)


def target_name(backend: str, platform: str) -> str:
    """cpu, linux/arm64 -> cpu-linux-arm64: only the characters buildx allows in a target name."""
    return re.sub(r"[^a-zA-Z0-9_-]", "-", f"{backend}-{platform}".replace("/", "-"))


def cells(m: Matrix, backends: list[Backend] | None = None) -> list[Cell]:
    """The cells `envbuild matrix --per-platform` lists, in its order."""
    doc = ci.github_matrix(m, backends, per_platform=True)
    return [Cell(m.backend(job["backend"]), Platform(job["platform"])) for job in doc["include"]]


def cell_options(opts: BuildOptions, platform: Platform) -> BuildOptions:
    """The options of one cell's build, as `envbuild build` takes them: --platform for any but this host's own."""
    return opts if platform == target(opts.platform) else dataclasses.replace(opts, platform=platform)


def _check_options(opts: BuildOptions) -> None:
    """Refuse what a bake file cannot carry as `envbuild build` does it, rather than build another image."""
    for arg in opts.build_args:
        if "=" not in arg:
            raise InvalidInput(f"--build-arg {arg}: a bake file holds each argument's value, and a value taken from "
                               f"the environment is not written into it: give {arg}=VALUE")
    if opts.network:
        raise InvalidInput("--network: a bake target names no network for its RUN steps; set it on the builder "
                           "(buildkitd's network mode) instead")
    if opts.no_cache:
        raise InvalidInput("--no-cache: pass it to `docker buildx bake --no-cache` instead")


def check_locks(m: Matrix, chosen: list[Cell], opts: BuildOptions) -> None:
    """Every cell's lock missing or stale, named at once from the files alone (as `lock --check` reads them: no
    registry asked), so an offline machine names the lock rather than the registry."""
    bad = []
    for cell in chosen:
        popts = dataclasses.replace(opts, platform=cell.platform)
        for r in locking.check(m, [cell.backend], popts, require=True):
            if r.status != "up to date":
                bad.append(f"{r.path} is {r.status} ({'; '.join(r.why)}): run `envbuild lock --backend "
                           f"{cell.backend.name} --platform {cell.platform}`")
    if bad:
        raise StaleLock("no bake file written: it builds only from current locks, as `build --locked` does, and "
                        f"{len(bad)} {'is' if len(bad) == 1 else 'are'} not:\n  " + "\n  ".join(bad)
                        + "\nthen commit the locks")


def plans(m: Matrix, chosen: list[Cell], opts: BuildOptions, engine: EngineAPI | None = None,
          echo: Callable[[str], None] = lambda s: None) -> list[tuple[Cell, BuildOptions, BuildPlan]]:
    """Each cell's plan holding its lock, refused as `build --locked` refuses (locking.ensure): nothing written."""
    out = []
    for cell in chosen:
        popts = cell_options(opts, cell.platform)
        plan = make_plan(m, cell.backend, popts, engine, write_cache=False)
        lockfile = locking.ensure(m, cell.backend, plan, popts, engine, locked=True, echo=echo)
        out.append((cell, popts, locking.with_lock(plan, lockfile)))
    return out


def target_doc(plan: BuildPlan, opts: BuildOptions, platform: Platform, context: Path) -> dict[str, Any]:
    """One bake target: the fields `envbuild build` gives its builder (plan.py command()), as bake names them."""
    labels = dict(label.split("=", 1) for label in opts.labels)
    labels[CONTENT_LABEL] = content_key(plan, opts)
    secret = [f"id={name},src={path}" for name, path in (("ca_bundle", opts.ca_bundle), ("netrc", opts.netrc)) if path]
    doc: dict[str, Any] = {
        "context": str(context),
        "dockerfile": "Dockerfile",
        "args": dict(arg.split("=", 1) for arg in opts.build_args),
        "labels": labels,
        "tags": list(plan.tags),
        "platforms": [str(platform)],
    }
    if secret:
        doc["secret"] = secret
    if opts.cache_from:
        doc["cache-from"] = list(opts.cache_from)
    if opts.cache_to:
        doc["cache-to"] = list(opts.cache_to)
    return doc


def definition(made: list[tuple[Cell, BuildOptions, BuildPlan]], contexts: Path) -> dict[str, Any]:
    """The bake file: a target per cell, a group per backend (its platforms) and `default` and `all` (every one)."""
    targets: dict[str, Any] = {}
    groups: dict[str, list[str]] = {}
    for cell, popts, plan in made:
        targets[cell.name] = target_doc(plan, popts, cell.platform, contexts / cell.name)
        groups.setdefault(cell.backend.name, []).append(cell.name)
    names = list(targets)
    for name in ALL_GROUPS:
        groups[name] = names
    clash = sorted(set(groups) & set(targets)) or [n for n in [*targets, *groups] if not NAME.match(n)]
    if len(set(names)) != len(made) or clash:
        raise InvalidInput(f"backend names {', '.join(clash) or 'that clash'} cannot be bake target names (letters, "
                           "digits, '-' and '_'; none named default or all): rename them in the matrix")
    return {"group": {g: {"targets": t} for g, t in groups.items()}, "target": targets}


def write(m: Matrix, backends: list[Backend] | None, opts: BuildOptions, out: Path, *, engine: EngineAPI | None = None,
          echo: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Check every lock, then write OUT/docker-bake.json and OUT/contexts/TARGET/ in a folder beside OUT and put it
    in OUT's place: a failure leaves OUT as it was."""
    _check_options(opts)
    out = out.absolute()
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--output {out}: not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise InvalidInput(f"--output {out}: a folder envbuild did not write (no {MARKER} in it), which it would "
                           "replace whole: name a new or empty folder")
    chosen = cells(m, backends)
    check_locks(m, chosen, opts)
    made = plans(m, chosen, opts, engine, echo)
    doc = definition(made, out / CONTEXTS)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        for cell, _, plan in made:
            write_context(dataclasses.replace(plan, context=str(stage / CONTEXTS / cell.name)))
        write_atomic(stage / MARKER, "written by `envbuild matrix --format bake`: replaced whole by the next one\n")
        write_atomic(stage / FILE, json.dumps(doc, indent=2) + "\n")
        _swap(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return doc


def _swap(new: Path, out: Path) -> None:
    """Put `new` in `out`'s place: the old folder is moved aside first and removed only once the new one is there."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / out.name)
    try:
        os.replace(new, out)
    except BaseException:
        if old is not None:
            os.replace(old / out.name, out)
            old.rmdir()
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
