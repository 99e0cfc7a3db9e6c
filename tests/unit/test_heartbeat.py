"""The heartbeat of a long wait: what it says and when (a fake clock), and that it beats while the block runs."""

from __future__ import annotations

import threading

from envbuild.core import heartbeat


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_wait_says_what_it_waits_for_and_how_long_every_quiet_seconds():
    lines: list[str] = []
    clock = _Clock()
    w = heartbeat.Waiting(lines.append, "waiting for another envbuild that holds the cpu build", quiet=10, clock=clock)
    clock.now += 9
    w.tick()
    assert lines == []
    clock.now += 1
    w.tick()
    assert lines == ["still waiting for another envbuild that holds the cpu build: 10s"]
    clock.now += 5
    w.tick()
    assert len(lines) == 1  # 5 s since the last line
    clock.now += 7
    w.tick()
    assert lines[-1] == "still waiting for another envbuild that holds the cpu build: 22s"


def test_beating_ticks_while_the_block_runs_and_stops_after():
    ticked = threading.Event()
    calls: list[int] = []

    def tick() -> None:
        calls.append(1)
        ticked.set()

    with heartbeat.beating(tick, period=0.01):
        assert ticked.wait(10)
    seen = len(calls)
    threading.Event().wait(0.05)
    assert len(calls) == seen  # the thread is gone


def test_no_echo_no_heartbeat():
    with heartbeat.waiting(None, "anything"):
        pass
    assert not [t for t in threading.enumerate() if t.name == "envbuild-heartbeat"]


def test_a_wait_that_hears_its_work_says_the_latest_and_waits_from_the_last_line():
    lines: list[str] = []
    clock = _Clock()
    w = heartbeat.Waiting(lines.append, "installing torch==2.13.0", quiet=10, clock=clock)
    clock.now += 8
    w.detail = "Downloading torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl (915.3 MB)"
    w.spoke()  # the work's own line was shown
    clock.now += 8
    w.tick()
    assert lines == []
    clock.now += 2
    w.tick()
    assert lines == ["still installing torch==2.13.0: 18s; last: Downloading torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl "
                     "(915.3 MB)"]
