"""Apply what `outdated` found to fit: matrix.yaml edited in place, the Dockerfiles rendered again, both
written together or not at all; the locks that exist are then refreshed by the caller."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import files, render
from ..errors import InvalidInput
from ..matrix import edit
from ..matrix.load import MAX_MATRIX, loads
from ..matrix.model import Matrix
from ..matrix.rules import torch_required
from . import Finding, Sources

# --only takes a dotted field or one of these kinds
KINDS = {"transformers": "transformers.", "accelerate": "accelerate.", "uv": "uv.", "torch": ".torch.version",
         "plugin": ".plugin.version", "base_image": ".base_image"}


@dataclass
class Bump:
    changes: dict[str, str] = field(default_factory=dict)  # dotted field -> new value
    diff: str = ""  # unified diff of matrix.yaml
    written: list[str] = field(default_factory=list)  # files replaced
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
    out = {f.field: to}
    dist = f.field.split(".")[0]
    if dist in ("transformers", "accelerate") and matrix is not None and sources is not None:
        from . import _needs_torch

        spec = _needs_torch(sources, matrix, dist, to)
        if spec:
            out[f"{dist}.torch"] = spec
        for b in matrix.containerizable():
            if why := torch_required(dist, to, spec, b.torch.version):
                raise InvalidInput(f"--to {to}: backend {b.name}: {why}")
    return out


def affected(matrix: Matrix, fields: list[str]) -> list[str]:
    """The backends whose images a change of these fields alters."""
    if any(not f.startswith("backends.") for f in fields):
        return [b.name for b in matrix.containerizable()]
    names = {f.split(".")[1] for f in fields}
    return [b.name for b in matrix.containerizable() if b.name in names]


def bump(matrix_path: Path, new: dict[str, str], dockerfiles: Path, *, dry_run: bool = False) -> Bump:
    """Edit the matrix and render; write both (all or nothing) unless `dry_run`."""
    result = Bump(changes=dict(new))
    old_text = files.read_user(matrix_path, str(matrix_path), limit=MAX_MATRIX).decode("utf-8")
    if not new:
        return result
    text = edit.apply(old_text, new, str(matrix_path))
    result.matrix = loads(text, str(matrix_path))  # the edited matrix must validate before anything is written
    result.diff = "".join(difflib.unified_diff(old_text.splitlines(True), text.splitlines(True),
                                               f"a/{matrix_path.name}", f"b/{matrix_path.name}"))
    result.backends = affected(result.matrix, list(new))
    if dry_run:
        return result
    rendered = render.render(result.matrix, result.matrix.containerizable())
    staged = files.stage({matrix_path: text, **{dockerfiles / name: body for name, body in rendered.items()}})
    files.commit(staged)  # stage leaves unchanged files out: what is listed was written
    result.written = [str(p) for p in staged]
    return result
