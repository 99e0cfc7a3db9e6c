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
    """A wait that says itself: every `quiet` seconds, 'still waiting for WHAT: Ns'."""

    def __init__(self, echo: Callable[[str], None], what: str, quiet: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.echo, self.what, self.clock = echo, what, clock
        self.quiet = QUIET if quiet is None else quiet
        self.since = self.said = clock()

    def tick(self) -> None:
        now = self.clock()
        if now - self.said >= self.quiet:
            self.said = now
            self.echo(f"still waiting for {self.what}: {now - self.since:.0f}s")


def waiting(echo: Callable[[str], None] | None, what: str, quiet: float | None = None) -> contextlib.AbstractContextManager:
    """While the block runs, say every `quiet` seconds that it still waits for `what` (nothing without `echo`)."""
    if echo is None:
        return contextlib.nullcontext()
    return beating(Waiting(echo, what, quiet).tick)
