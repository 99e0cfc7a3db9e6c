"""A heartbeat: while something runs that may say nothing for long (a builder's step, a probe, a lock another
envbuild holds, a push), a thread asks a `tick` every second whether it is time to say what is being waited for.
The tick decides what to say and when (it knows when a line was last shown); this only keeps it beating."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator

QUIET = 10.0  # seconds a wait may go without a line on the screen (the promise: nothing silent over 15 s)
PERIOD = 1.0  # how often a tick is asked


@contextlib.contextmanager
def beating(tick: Callable[[], None], period: float | None = None, name: str = "envbuild-heartbeat") -> Iterator[None]:
    """Call `tick` every `period` seconds (PERIOD), in a thread of its own, while the block runs."""
    done = threading.Event()
    period = PERIOD if period is None else period

    def beat() -> None:
        while not done.wait(period):
            tick()

    thread = threading.Thread(target=beat, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=2)


class Waiting:
    """A wait that says itself: every `quiet` seconds without a line, 'still DOING: Ns', with the latest thing the
    waited-for process said (`detail`), e.g. 'still installing torch: 40s; last: Downloading torch-2.13.0...'."""

    def __init__(self, echo: Callable[[str], None], doing: str, quiet: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.echo, self.doing, self.clock = echo, doing, clock
        self.quiet = QUIET if quiet is None else quiet
        self.since = self.said = clock()
        self.detail = ""

    def spoke(self) -> None:
        """A line was just shown (the work's own): the next heartbeat is `quiet` seconds from now."""
        self.said = self.clock()

    def tick(self) -> None:
        now = self.clock()
        if now - self.said >= self.quiet:
            self.said = now
            self.echo(f"still {self.doing}: {now - self.since:.0f}s{'; last: ' + self.detail[:160] if self.detail else ''}")


def waiting(echo: Callable[[str], None] | None, doing: str, quiet: float | None = None) -> contextlib.AbstractContextManager:
    """While the block runs, say every `quiet` seconds that it is still `doing` (nothing without `echo`)."""
    if echo is None:
        return contextlib.nullcontext()
    return beating(Waiting(echo, doing, quiet).tick)
