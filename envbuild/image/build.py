"""Stage 3: a rendered backend -> an image, built with BuildKit on the local engine.

plan.py gathers everything that decides the image into one BuildPlan; records.py answers an unchanged
plan from the last good build; builder.py runs BuildKit. A build first ensures its lock (locking.py resolves one
with the same builder and plan), then builds a plan that holds it (its text and each layer's pylock.toml, as data).
BuildKit names the image only once the whole build succeeded (its id also lands in an --iidfile), so a
failed build never moves a tag away from a good image. Secrets (CA bundle, index credentials) go in as
BuildKit secrets: mounted for single RUN steps, never stored in a layer.
"""

from __future__ import annotations

import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from envbuild.engine import owner
from envbuild.core.errors import BuildError, LockError, StaleLock, UnreachableError
from envbuild.core.platform import Platform, require_runnable
from envbuild.image import builder, locking, reach, records
from envbuild.image.plan import BuildOptions, BuildPlan, content_key, make_plan, with_content_label, write_context

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI
    from envbuild.image.status import StatusBoard
    from envbuild.matrix import Backend, Matrix

@dataclass
class BuildResult:
    backend: str
    ok: bool
    tags: list[str]
    image_id: str | None = None
    seconds: float = 0.0
    log: Path | None = None
    error: str | None = None
    up_to_date: bool = False  # nothing changed since the last build: the builder did not run

    def to_json(self) -> dict:
        return {
            "backend": self.backend,
            "ok": self.ok,
            "image_id": self.image_id,
            "tags": self.tags,
            "seconds": round(self.seconds, 2),
            "log": str(self.log) if self.log else None,
            "error": self.error,
            "up_to_date": self.up_to_date,
        }


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def build_plan(matrix: Matrix, backend: Backend, plan: BuildPlan, opts: BuildOptions, engine: EngineAPI, *,
               echo: Callable[[str], None] = _stderr, verbose: bool = False, status: Callable[[str], None] | None = None,
               start: float | None = None) -> BuildResult:
    """Build the image of a plan that holds its lock (envbuild.image.build made it, under records.locked) and tag it;
    the old tags stay put when anything fails. `start`: when the build began (the lock's time counts)."""
    start = time.monotonic() if start is None else start
    plan = with_content_label(plan, content_key(plan, opts))
    unchanged = records.answer(plan, engine)
    if unchanged:
        return BuildResult(backend.name, True, list(plan.tags), unchanged, time.monotonic() - start, up_to_date=True)
    records.forget(plan)
    if plan.base_id is None and plan.base_image:  # BuildKit will fetch the base: its registry must answer
        try:
            reach.require(matrix, backend, what=f"building {backend.name}", base_image=plan.base_image,
                          indexes=False, ca_bundle=opts.ca_bundle)
        except UnreachableError as exc:
            return BuildResult(backend.name, False, [], seconds=time.monotonic() - start, error=str(exc))
    write_context(plan)
    opts.log_dir.mkdir(parents=True, exist_ok=True)
    log = opts.log_dir / f"build-{backend.name}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    echo(f"[{backend.name}] building {plan.base_image} -> {plan.tags[0]} (log: {log})")
    with tempfile.TemporaryDirectory(prefix=f"envbuild-{backend.name}-") as tmp:
        iidfile = Path(tmp) / "iid"
        argv = [*plan.argv[:-1], "--iidfile", str(iidfile), plan.argv[-1]]
        error = builder.run_build(argv, opts.build_args, log, builder.Progress(
            backend.name, echo, verbose, status, others=lambda: records.building(opts.context_dir, backend.name)), engine)
        image_id = iidfile.read_text().strip() if error is None and iidfile.exists() else None
    result = BuildResult(backend.name, False, list(plan.tags), seconds=time.monotonic() - start, log=log)
    if image_id is None:
        error = error or "the builder wrote no image id"
        result.error = (builder.base_failure(error, plan.base_image, backend.name) or builder.cache_failure(error)
                        or error)
        return result
    records.remember(plan, image_id)
    owner.note_image(image_id, opts.context_dir.parent / owner.IMAGES_MADE.name)  # `clean`'s scope: made here
    result.ok, result.image_id = True, image_id
    return result


def check_platform(backend: Backend, platform: str | Platform | None, what: str = "building") -> bool:
    """Refuse a platform the backend does not list (with the list) or this host can neither run nor emulate (with
    the fix); True when the platform is emulated here. Any of Docker's spellings of a listed platform is that
    platform (linux/aarch64, linux/arm64/v8 and aarch64 are the linux/arm64 a backend lists)."""
    if not platform:
        return False
    # the CLI gave it read; a library caller's by the same rule (one platform a build)
    found = backend.listed(Platform.of(platform))
    return require_runnable(found, f"{what} {backend.name} for {found}")


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
