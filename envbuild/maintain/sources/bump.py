"""Apply what `outdated` found to fit: matrix.yaml edited in place, the Dockerfiles rendered again, both
written together or not at all; the locks that exist are then refreshed by the caller."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from envbuild.core import files
from envbuild import render
from envbuild.image import lockstate as locks
from envbuild.core.errors import EnvbuildError, InvalidInput
from envbuild.matrix import edit, facts
from envbuild.matrix.load import MAX_MATRIX, loads
from envbuild.core.paths import PACKAGE
from envbuild.matrix.model import Matrix
from envbuild.matrix.rules import torch_required
from envbuild.matrix.schema import check_field
from envbuild.maintain.sources import Finding, Sources, outdated

if TYPE_CHECKING:
    from envbuild.image.locking import LockResult
    from envbuild.image.plan import BuildOptions
    from envbuild.engine.docker import EngineAPI
    from envbuild.matrix.model import Backend

# --only takes a dotted field or one of these kinds
KINDS = {"transformers": "transformers.", "accelerate": "accelerate.", "uv": "uv.", "torch": ".torch.version",
         "plugin": ".plugin.version", "base_image": ".base_image"}


@dataclass
class Bump:
    changes: dict[str, str] = field(default_factory=dict)  # dotted field -> new value
    diff: str = ""  # unified diff of matrix.yaml
    written: list[str] = field(default_factory=list)  # files replaced (the matrix, its metadata cache, Dockerfiles,
    # COMPATIBILITY.md beside the matrix)
    backends: list[str] = field(default_factory=list)  # whose images change (their locks to refresh)
    matrix: Matrix | None = None  # the bumped matrix

    def to_json(self) -> dict[str, Any]:
        return {"changes": self.changes, "diff": self.diff, "written": self.written, "backends": self.backends}


def select(findings: list[Finding], only: tuple[str, ...]) -> list[Finding]:
    if not only:
        return findings
    chosen = []
    for f in findings:
        for o in only:
            kind = KINDS.get(o)
            if f.field == o or f.field.startswith(o + ".") or (kind and (f.field.startswith(kind) or f.field.endswith(kind))):
                chosen.append(f)
                break
    return chosen


def check_only(only: tuple[str, ...]) -> None:
    for o in only:
        if o not in KINDS and not (o.startswith(("transformers", "accelerate", "uv", "backends.")) and " " not in o):
            raise InvalidInput(f"--only {o!r}: expected one of {', '.join(KINDS)} or a dotted field such as backends.cuda.base_image")


_TO_FIELD = {"transformers": "transformers.version", "accelerate": "accelerate.version", "uv": "uv.version",
             "torch": "backends.any.torch.version", "plugin": "backends.any.plugin.version", "base_image": "backends.any.base_image"}


def check_to(only: tuple[str, ...], to: str | None) -> None:
    """--to, checked by the schema of the field --only names before anything is asked of an index (the field it
    lands in is checked again once the findings name it)."""
    if to is None:
        return
    for o in only:
        dotted = _TO_FIELD.get(o) or (o if "." in o else f"{o}.version")
        why = check_field(dotted, to)
        if why and not why.endswith(("no such field in the matrix", "not a field that holds one value")):
            raise InvalidInput(f"--to: {o}: {why}")


def changes(findings: list[Finding], only: tuple[str, ...] = (), to: str | None = None, *,
            matrix: Matrix | None = None, sources: Sources | None = None) -> dict[str, str]:
    """The fields to write. With `to`, exactly one pin is chosen and set to it (checked like the rest)."""
    chosen = [f for f in select(findings, only) if f.bumpable]
    if to is None:
        out: dict[str, str] = {}
        for f in chosen:
            out.update(f.changes)
        return out
    if len(chosen) != 1:
        names = ", ".join(f.field for f in chosen) or "none"
        raise InvalidInput(f"--to {to} needs exactly one pin; --only chose {len(chosen)} ({names}): name one field, "
                           "e.g. --only transformers or --only backends.cuda.torch.version")
    f = chosen[0]
    if why := check_field(f.field, to):  # the same check matrix.yaml gets, before anything is asked or written
        raise InvalidInput(f"--to: {f.field}: {why}")
    out = {f.field: to}
    dist = f.field.split(".")[0]
    if dist in ("transformers", "accelerate") and matrix is not None and sources is not None:
        from envbuild.maintain.sources import needs_torch

        spec = needs_torch(sources, matrix, dist, to)
        if spec:
            out[f"{dist}.torch"] = spec
        for b in matrix.containerizable():
            if why := torch_required(dist, to, spec, b.torch.version):
                raise InvalidInput(f"--to {to}: backend {b.name}: {why}")
    return out


def placed(text: str, matrix: Matrix, new: dict[str, str]) -> dict[str, str]:
    """Each change where the matrix holds it. A field a variant inherits stays inherited when its base has, or
    is given, the same value; another value is written into the variant, which from then on holds its own."""
    doc = edit.load(text)
    out = {}
    for dotted, value in new.items():
        parts = dotted.split(".")
        if parts[0] == "backends" and len(parts) > 2 and not edit.holds(doc, dotted):
            of = next((b.variant_of for b in matrix.backends if b.name == parts[1]), None)
            if of is not None:
                inherited = ".".join(["backends", of, *parts[2:]])
                if new.get(inherited, _value(matrix, of, parts[2:])) == value:
                    continue
        out[dotted] = value
    return out


def _value(matrix: Matrix, backend: str, path: list[str]) -> Any:
    node: Any = matrix.backend(backend)
    for part in path:
        node = getattr(node, part, None)
    return node


def affected(old: Matrix, new: Matrix) -> list[str]:
    """The backends whose images the edit alters: its own settings or one it inherits (a variant's), or a pin
    every image shares."""
    before = {b.name: b for b in old.backends}
    shared = replace(old, backends=(), path="") != replace(new, backends=(), path="")
    return [b.name for b in new.containerizable() if shared or before.get(b.name) != b]


EDIT_WAIT = 120.0  # seconds a bump waits for another one editing the same matrix, then refuses: busy


def working(matrix_path: Path) -> None:
    """Refuse the matrix installed with envbuild (inside the package, site-packages): bump edits a working folder's."""
    p = Path(matrix_path).absolute()
    if p.is_relative_to(PACKAGE) or any(part in ("site-packages", "dist-packages") for part in p.parts):
        raise InvalidInput(f"{matrix_path} is the matrix installed with envbuild, not one in a working folder: bump "
                           f"would have changed {p}; run it where your own matrix is (`envbuild init DIR` writes one)")


def bump(matrix_path: Path, new: dict[str, str], dockerfiles: Path, *, dry_run: bool = False, index: Any = None) -> Bump:
    """Edit the matrix and write every file derived from it: the Dockerfiles, the metadata cache (refreshed from
    `index` for the new pins, where the matrix has one) and COMPATIBILITY.md beside the matrix (where there is one),
    all or nothing, unless `dry_run`. The edited matrix must validate against the refreshed facts first. One edit
    of a matrix at a time (a lock on its folder): each reads the file afresh under the lock, so concurrent bumps
    keep every change."""
    if dry_run:
        return _bump(matrix_path, new, dockerfiles, dry_run=True, index=index)
    working(matrix_path)
    with files.exclusive(matrix_path.resolve().parent, str(matrix_path), wait=EDIT_WAIT):
        return _bump(matrix_path, new, dockerfiles, dry_run=False, index=index)


def _bump(matrix_path: Path, new: dict[str, str], dockerfiles: Path, *, dry_run: bool, index: Any) -> Bump:
    result = Bump(changes=dict(new))
    old_text = files.read_user(matrix_path, str(matrix_path), limit=MAX_MATRIX).decode("utf-8")
    if not new:
        return result
    before = loads(old_text, str(matrix_path))
    result.changes = placed(old_text, before, new)
    text = edit.apply(old_text, result.changes, str(matrix_path))
    cache_path = facts.path_for(matrix_path)
    cache = facts.read(cache_path)
    if cache is not None and index is not None:
        from envbuild.maintain.sources.metadata import refresh

        errors = refresh(loads(text, str(matrix_path)), cache, index)
        if errors:
            raise InvalidInput(f"cannot read the metadata of the new pins ({'; '.join(errors)}): nothing was written")
    result.matrix = loads(text, str(matrix_path), facts=cache)  # it must validate before anything is written
    result.diff = "".join(difflib.unified_diff(old_text.splitlines(True), text.splitlines(True),
                                               f"a/{matrix_path.name}", f"b/{matrix_path.name}"))
    result.backends = affected(before, result.matrix)
    if dry_run:
        return result
    rendered = render.render(result.matrix, result.matrix.containerizable())
    derived = {dockerfiles / name: body for name, body in rendered.items()}
    if cache is not None:
        derived[cache_path] = cache.text()
    compat = Path(matrix_path).parent / "COMPATIBILITY.md"
    if compat.is_file():  # what `list --compat --check COMPATIBILITY.md` compares with
        from envbuild.report import report

        derived[compat] = report.compat_markdown(report.compat_rows(result.matrix))
    # all or nothing; unchanged files are left out: what is listed was written
    written = files.write_all({matrix_path: text, **derived})
    result.written = [str(p) for p in written]
    return result


def refresh_locks(result: Bump, opts: BuildOptions, engine: Callable[[], EngineAPI], *, no_lock: bool = False,
                  echo: Callable[[str], None] = lambda line: None) -> tuple[list[LockResult], list[str]]:
    """After a bump that was written: the locks (locks/BACKEND/OS-ARCH.txt) that exist of the backends whose images
    change, refreshed, and those left as they were, each with why. A backend that cannot be resolved here (its
    vendor's registry, no engine) is named, not fatal; with `no_lock` none is refreshed. `engine` is asked for the
    engine only when a lock is to be resolved."""
    from envbuild.image import locking

    refreshed: list[LockResult] = []
    left: list[str] = []
    if not result.written or result.matrix is None:
        return refreshed, left
    existing = [b for b in map(result.matrix.backend, result.backends)
                if any(locks.path(opts, b, p).is_file() for p in b.platforms)]
    if no_lock:
        return refreshed, [str(locks.path(opts, b, p)) for b in existing for p in b.platforms
                           if locks.path(opts, b, p).is_file()]
    for b in existing:
        try:
            refreshed += locking.lock(result.matrix, [b], opts, locking.LockOptions(), engine(), echo=echo)
        except EnvbuildError as exc:
            left.append(f"{locks.path(opts, b)} ({str(exc).splitlines()[0][:300]})")
    return refreshed, left


@dataclass
class BumpRun:
    """What `envbuild bump` did: what was found, what of it was applied, and the locks after it."""

    findings: list[Finding]
    new: dict[str, str]  # dotted field -> the value it was bumped to (empty: nothing to bump)
    result: Bump
    locks_refreshed: list[LockResult] = field(default_factory=list)
    locks_left: list[str] = field(default_factory=list)

    def to_json(self, dry_run: bool) -> dict[str, Any]:
        return {**self.result.to_json(), "dry_run": dry_run, "locks": [r.to_json() for r in self.locks_refreshed],
                "locks_left": self.locks_left}


def run(matrix_path: Path, matrix: Matrix, backends: list[Backend], sources: Sources, opts: BuildOptions,
        engine: Callable[[], EngineAPI], *, dockerfiles: Path, only: tuple[str, ...] = (), to: str | None = None,
        dry_run: bool = False, no_lock: bool = False, progress: Callable[[str], None] | None = None,
        echo: Callable[[str], None] = lambda line: None) -> BumpRun:
    """`envbuild bump`: ask the sources what is newer (outdated), keep what fits of the pins chosen (--only, --to),
    edit the matrix and write what derives from it (unless `dry_run`), then refresh the locks that exist of the
    images that change (refresh_locks). --only and --to are checked (check_only, check_to) and the matrix is one of
    a working folder (working) before any source is asked: the caller does that before loading `matrix`."""
    findings = outdated(matrix, backends, sources, progress=progress)
    new = changes(findings, only, to, matrix=matrix, sources=sources)
    result = bump(matrix_path, new, dockerfiles, dry_run=dry_run, index=sources.index)
    refreshed, left = refresh_locks(result, opts, engine, no_lock=no_lock, echo=echo)
    return BumpRun(findings, new, result, refreshed, left)
