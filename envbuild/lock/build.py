"""A build from its lock: `envbuild build`'s orchestration. The lock is ensured first (the current one, or
resolved and written, or refused with --locked), then the image stage builds a plan that holds it.

This lives with the lock, above the image stage, so the image stage never asks for a lock: it is handed one, as
data in its plan (envbuild.lock.locking.with_lock). Planning, the lock and the build run under one hold of the
backend's build context (records.locked), so two builds of a backend never resolve or write over each other.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

from envbuild.core.errors import BuildError, LockError, StaleLock
from envbuild.imagebuild import BuildResult, build_plan, check_platform, records
from envbuild.imagebuild.plan import make_plan
from envbuild.lock import locking

if TYPE_CHECKING:
    from envbuild.core.engine import EngineAPI
    from envbuild.imagebuild.plan import BuildOptions
    from envbuild.imagebuild.status import StatusBoard
    from envbuild.matrix import Backend, Matrix

__all__ = ["build", "build_many"]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def build(matrix: Matrix, backend: Backend, opts: BuildOptions, engine: EngineAPI, *,
          echo: Callable[[str], None] = _stderr, verbose: bool = False, locked: bool = False,
          status: Callable[[str], None] | None = None) -> BuildResult:
    """Build one backend's image from its lock and tag it; the old tags stay put when anything fails.
    A missing or stale lock is resolved and written first (said so), or refused with `locked`."""
    start = time.monotonic()
    check_platform(backend, opts.platform)
    with records.locked(opts.context_dir, backend.name, echo):
        plan = make_plan(matrix, backend, opts, engine)
        try:
            lockfile = locking.ensure(matrix, backend, plan, opts, engine, locked=locked, echo=echo, verbose=verbose)
        except StaleLock:
            raise
        except LockError as exc:  # the image could not be resolved: a failed build, with the resolver's log
            return BuildResult(backend.name, False, [], seconds=time.monotonic() - start, log=exc.log, error=str(exc))
        return build_plan(matrix, backend, locking.with_lock(plan, lockfile), opts, engine, echo=echo, verbose=verbose,
                          status=status, start=start)


def build_many(matrix: Matrix, backends: list[Backend], opts: BuildOptions, engine: EngineAPI, *, jobs: int = 1,
               echo: Callable[[str], None] = _stderr, verbose: bool = False, locked: bool = False,
               board: StatusBoard | None = None) -> list[BuildResult]:
    """Build several backends, `jobs` at a time (threads, one builder process each); results in input order.

    A backend that fails does not stop the others. When backends share steps (same base, same commands),
    BuildKit on the one daemon runs each shared step once, whichever build reaches it first.
    """
    def one(backend: Backend) -> BuildResult:
        name = backend.name
        say = board.echo if board else echo
        if board:
            board.start(name)
        try:
            result = build(matrix, backend, opts, engine, echo=say, verbose=verbose, locked=locked,
                           status=(lambda text: board.step(name, text)) if board else None)
        except (BuildError, LockError) as exc:
            if len(backends) == 1:
                raise
            result = BuildResult(backend=name, ok=False, tags=[], error=str(exc))
        if board:
            board.finish(name, result.ok, (result.image_id or "")[:19] if result.ok else (result.error or "failed"))
        return result

    if jobs <= 1 or len(backends) == 1:
        return [one(b) for b in backends]
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="envbuild-build") as pool:
        futures = [pool.submit(one, b) for b in backends]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise
