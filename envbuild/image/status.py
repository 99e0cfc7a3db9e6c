"""Live status for parallel builds: one line per backend, rewritten in place on a terminal.

On a terminal each backend keeps one line (state, elapsed seconds, the step running now), redrawn with
ANSI cursor codes; elsewhere (CI logs, pipes) every message is a plain line prefixed with its backend,
as a sequential build prints them.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import TextIO

from envbuild.core.output import no_color, scrub
from envbuild.core.text import shown

_UP = "\x1b[{n}F"  # cursor to the start of the line n lines up
_CLEAR = "\x1b[2K"  # clear the whole line


class StatusBoard:
    def __init__(self, names: list[str], stream: TextIO | None = None, live: bool | None = None, tick: float = 0.5):
        self.stream = stream or sys.stderr
        self.live = (self.stream.isatty() and not no_color()) if live is None else live  # a board redraws with escapes
        self.names = list(names)
        self.width = max(len(n) for n in self.names) if self.names else 0
        self.state = {n: "waiting" for n in self.names}
        self.detail = {n: "" for n in self.names}
        self.started: dict[str, float] = {}
        self.seconds: dict[str, float] = {}
        self.lock = threading.Lock()
        self.drawn = 0
        self.closed = threading.Event()
        self.ticker: threading.Thread | None = None
        self.tick = tick

    # -- the events a build reports ----------------------------------------------------------------
    def start(self, name: str) -> None:
        with self.lock:
            self.state[name] = "building"
            self.started[name] = time.monotonic()
            self._draw()

    def step(self, name: str, text: str) -> None:
        with self.lock:
            self.detail[name] = text
            self._draw()

    def finish(self, name: str, ok: bool, text: str) -> None:
        with self.lock:
            self.state[name] = "ok" if ok else "FAILED"
            self.detail[name] = text
            self.seconds[name] = time.monotonic() - self.started.get(name, time.monotonic())
            self._draw()

    def echo(self, line: str) -> None:
        """A message from a build: printed as is without a live board; on a terminal the board says it."""
        if not self.live:
            with self.lock:
                print(line, file=self.stream, flush=True)

    # -- drawing -----------------------------------------------------------------------------------
    def __enter__(self) -> "StatusBoard":
        if self.live:
            with self.lock:
                self._draw()
            self.ticker = threading.Thread(target=self._tick, name="envbuild-status", daemon=True)
            self.ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closed.set()
        if self.ticker:
            self.ticker.join(timeout=2)
        if self.live:
            with self.lock:
                self._draw()

    def _tick(self) -> None:
        while not self.closed.wait(self.tick):
            with self.lock:
                self._draw()

    def line(self, name: str, columns: int = 120) -> str:
        state = self.state[name]
        if name in self.seconds:
            secs = f"{self.seconds[name]:4.0f}s"
        elif name in self.started:
            secs = f"{time.monotonic() - self.started[name]:4.0f}s"
        else:
            secs = "     "
        text = f"{name:<{self.width}}  {state:<8} {secs}  {self.detail[name]}"
        return text if len(text) <= columns else text[: max(columns - 3, 0)] + "..."

    def _draw(self) -> None:
        if not self.live:
            return
        columns = shutil.get_terminal_size((120, 24)).columns - 1
        out = [_UP.format(n=self.drawn)] if self.drawn else []
        for name in self.names:  # the board's own cursor codes around lines made safe to print
            out.append(_CLEAR + shown(scrub(self.line(name, columns))) + "\n")
        stream = getattr(self.stream, "raw", self.stream)  # past envbuild's SafeStream, which escapes them
        stream.write("".join(out))
        stream.flush()
        self.drawn = len(self.names)
