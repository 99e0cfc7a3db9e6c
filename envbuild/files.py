"""Files envbuild writes for users: whole or not at all."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import EnvbuildError


def write_atomic(path: Path, text: str | bytes, mode: int = 0o644) -> bool:
    """Write only when the content changes; a crash mid-write leaves the old file whole. True if written."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if path.is_file() and not path.is_symlink() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def read_json(path: Path, label: str, error: type[EnvbuildError] = EnvbuildError) -> Any:
    """A JSON file, or `error` naming the file (and the line of a syntax error)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{label}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise error(f"{label}:{exc.lineno}: not valid JSON ({exc.msg})") from None
