"""One check of the host and its fix: what preflight (smoke, run, pull), compat and doctor all report in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    blocking: bool = True
    skipped: bool = False

    @property
    def status(self) -> str:
        if self.ok:
            return "ok"
        if self.skipped:
            return "skip"
        return "FAIL" if self.blocking else "warn"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "ok": self.ok, "blocking": self.blocking,
                "detail": self.detail, "fix": self.fix}


def skip(name: str, why: str) -> Check:
    return Check(name, False, f"not checked: {why}", blocking=False, skipped=True)
