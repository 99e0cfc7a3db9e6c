"""Files envbuild writes for users: whole or not at all."""

from __future__ import annotations

import contextlib
import errno
import json
import netrc
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from envbuild.core.errors import EnvbuildError
from envbuild.core import heartbeat


def stage(files: dict[Path, str | bytes], mode: int = 0o644) -> dict[Path, Path]:
    """Write each changed text to a temporary file beside its target; {target: temporary}. Nothing is replaced,
    and a failure removes what was staged: the caller renames them all once all are written."""
    staged: dict[Path, Path] = {}
    try:
        for path, text in files.items():
            data = text.encode("utf-8") if isinstance(text, str) else text
            if path.is_file() and not path.is_symlink() and path.read_bytes() == data:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            staged[path] = Path(tmp)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
    except BaseException as exc:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and not exc.filename:
            exc.filename = str(path)
        raise
    return staged


def commit(staged: dict[Path, Path]) -> None:
    """Put staged files in place, all or none: each target's old file is kept aside (a hard link, else a copy)
    before any is replaced; when one replacement fails, those already replaced get their old file back (a new
    file is removed again), every temporary file goes, and the error names the target that failed."""
    backups: dict[Path, Path] = {}
    done: list[Path] = []
    try:
        for target in staged:
            if os.path.lexists(target):
                backups[target] = _keep_aside(target)
        for target, tmp in staged.items():
            os.replace(tmp, target)
            done.append(target)
    except BaseException as exc:
        failed = next((t for t in staged if t not in done), None)
        unrestored = _restore(done, backups)
        for target, tmp in staged.items():
            if target not in done:
                tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            exc.filename = str(failed if failed is not None else exc.filename)
            if unrestored:
                exc.strerror = f"{exc.strerror or exc}; could not put back {', '.join(map(str, unrestored))}"
        raise
    finally:
        for backup in backups.values():
            with contextlib.suppress(OSError):
                backup.unlink(missing_ok=True)


def _keep_aside(target: Path) -> Path:
    """A second name for the target's current file, beside it (the replacement leaves this one untouched)."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.old.", dir=target.parent)
    os.close(fd)
    backup = Path(name)
    try:
        backup.unlink()
        os.link(target, backup, follow_symlinks=False)
    except OSError:  # no hard links here: a copy
        shutil.copy2(target, backup, follow_symlinks=False)
    return backup


def _restore(done: list[Path], backups: dict[Path, Path]) -> list[Path]:
    """Undo the replacements made; the targets that could not be put back."""
    failed = []
    for target in reversed(done):
        try:
            if target in backups:
                os.replace(backups.pop(target), target)
            else:
                target.unlink()
        except OSError:
            failed.append(target)
    return failed


def write_all(files: dict[Path, str | bytes], mode: int = 0o644) -> list[Path]:
    """Write several files all or none (stage every one, then replace, restoring on failure); the ones that
    changed. A failure is an EnvbuildError naming the file, and saying that nothing was written."""
    try:
        staged = stage(files, mode)
        commit(staged)
    except OSError as exc:
        raise EnvbuildError(f"cannot write {exc.filename or 'a file'}: {exc.strerror or exc}; nothing was written "
                            "(the files already replaced were put back)") from None
    return list(staged)


def write_atomic(path: Path, text: str | bytes, mode: int = 0o644) -> bool:
    """Write only when the content changes; a crash mid-write leaves the old file whole. True if written."""
    staged = stage({path: text}, mode)
    commit(staged)
    return bool(staged)


MAX_READ = 64 << 20  # no file a user names is read past this


def read_user(path: str | os.PathLike[str], label: str, error: type[EnvbuildError] = EnvbuildError,
              limit: int = MAX_READ) -> bytes:
    """The bytes of a file a user named: a regular file (after links), at most `limit` bytes. A FIFO, a device
    (/dev/zero), a folder or a huge file is refused with `error` naming it, never waited on or read whole."""
    return _read(path, label, error, limit, 0)


def _read(path: str | os.PathLike[str], label: str, error: type[EnvbuildError], limit: int, flags: int) -> bytes:
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link put there since it was resolved, or a loop
            raise error(f"{label}: a symbolic link that envbuild does not follow: give a regular file") from None
        raise error(f"{label}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, a device or a socket)"
            raise error(f"{label}: {kind}: give a regular file")
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            data = fh.read(limit + 1)
    except OSError as exc:  # EIO, EINVAL: a /sys attribute whose driver refuses the read
        raise error(f"{label}: cannot read: {exc.strerror or exc}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise error(f"{label}: larger than {limit >> 20} MiB: not read")
    return data


def read_project(path: str | os.PathLike[str], label: str, error: type[EnvbuildError] = EnvbuildError,
                 limit: int = MAX_READ, within: str | os.PathLike[str] | None = None) -> bytes:
    """The bytes of a file a pull request may bring (a matrix, settings, a lock, a manifest, a cache): as read_user,
    and where it is a symbolic link, one that ends inside `within` (default: the folder that names it). A link
    out of it, to nothing, or in a loop is refused by name; nothing of what it points at is read or quoted."""
    folder = os.path.abspath(within if within is not None else os.path.dirname(os.path.abspath(path)))
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise error(f"{label}: cannot read: {exc.strerror or exc}") from None
    real: str | os.PathLike[str] = path
    if stat.S_ISLNK(st.st_mode) or within is not None:
        try:
            real = os.path.realpath(path, strict=True)
            base = os.path.realpath(folder, strict=True)
        except OSError as exc:
            why = ("a symbolic link in a loop" if exc.errno == errno.ELOOP else
                   "a symbolic link to nothing" if exc.errno in (errno.ENOENT, errno.ENOTDIR) else
                   f"cannot read: {exc.strerror or exc}")
            raise error(f"{label}: {why}: give a regular file") from None
        except RuntimeError:  # a loop, as some Pythons say it
            raise error(f"{label}: a symbolic link in a loop: give a regular file") from None
        if os.path.commonpath([real, base]) != base:
            raise error(f"{label}: a symbolic link that leads out of {folder}: envbuild does not follow it (it "
                        "could reach files that are not the project's); give a regular file") from None
    return _read(real, label, error, limit, getattr(os, "O_NOFOLLOW", 0))


def read_json(path: Path, label: str, error: type[EnvbuildError] = EnvbuildError) -> Any:
    """A JSON file, or `error` naming the file (and the line of a syntax error)."""
    return parse_json(read_user(path, label, error), label, error)


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 30:  # no count, size or time envbuild writes has more digits
        raise ValueError(f"a number of {len(text.lstrip('-'))} digits")
    return int(text)


def _clean(value: Any) -> Any:
    """Lone surrogates (a JSON escape such as \\ud800) become "?": no later write or print trips on them."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8") if any("\ud800" <= c <= "\udfff" for c in value) else value
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    return value


def parse_json(data: bytes, label: str, error: type[EnvbuildError] = EnvbuildError) -> Any:
    """A JSON document from outside: UTF-8, not nested past reason, numbers finite and of sane size (NaN and
    Infinity read as null), strings free of lone surrogates; else `error` naming it."""
    try:
        return _clean(json.loads(data.decode("utf-8"), parse_constant=lambda _: None, parse_int=_bounded_int))
    except UnicodeDecodeError:
        raise error(f"{label}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise error(f"{label}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except ValueError as exc:
        raise error(f"{label}: not a JSON document envbuild reads ({exc})") from None
    except RecursionError:
        raise error(f"{label}: nested too deeply to be a JSON document envbuild wrote") from None


def read_host(path: Path, limit: int = 1 << 20) -> str | None:
    """A small text file of the host (or a fake root): None when it is missing, not a regular file, larger than
    `limit` or unreadable. Files under /proc and /sys are regular files that report no size: read, bounded."""
    try:
        return read_user(path, str(path), limit=limit).decode("utf-8", "replace")
    except EnvbuildError:
        return None


def read_netrc(path: Path):
    """A netrc file a user gave (--netrc), parsed; an error names the file and line and quotes none of it (a
    netrc holds passwords). Exit 1: the file is the world's, as a build would find it."""
    data = read_user(path, f"--netrc {path}", limit=1 << 20)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise EnvbuildError(f"--netrc {path}: not a netrc file (not UTF-8 text; its contents are not shown)") from None
    if b"\0" in data:
        raise EnvbuildError(f"--netrc {path}: not a netrc file (binary; its contents are not shown)")
    try:
        return netrc.netrc(str(path))
    except netrc.NetrcParseError as exc:
        raise EnvbuildError(f"--netrc {path}:{exc.lineno}: not a valid netrc file (its contents are not shown)") from None
    except (OSError, UnicodeError, ValueError) as exc:
        raise EnvbuildError(f"--netrc {path}: cannot read it ({type(exc).__name__}; its contents are not shown)") from None


@contextlib.contextmanager
def exclusive(path: Path, what: str, echo: Callable[[str], None] | None = None,
              wait: float | None = None) -> Iterator[None]:
    """One envbuild process at a time holds `path` (a lock file, or a folder: then no file is left beside what it
    guards): a second one says what it waits for, then waits (at most `wait` seconds, then it refuses: busy).
    The lock goes with the process, also when it is killed."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY if path.is_dir() else os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if echo:
                echo(f"waiting for another envbuild that holds {what} (lock {path})")
            if wait is None:
                with heartbeat.waiting(echo, f"waiting for another envbuild that holds {what}"):  # said again while it lasts
                    fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                deadline = time.monotonic() + wait
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise EnvbuildError(f"busy: another envbuild has been editing {what} for over {wait:.0f}s "
                                                f"(lock {path}); nothing was written: try again") from None
                        time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock
