"""Runs that do not touch each other: a container is left behind only when the process that started it is gone."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.fakes import FakeEngine

from envbuild.tools import clean
from envbuild.core import owner
from envbuild.core.owner import OWNED_LABEL, OWNER_LABEL, Container, Owner


def _labels(o: Owner) -> dict[str, str]:
    return {OWNED_LABEL: "1", OWNER_LABEL: str(o)}


@pytest.fixture(scope="module")
def dead() -> Owner:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    me = owner.me()
    start = owner._start_time(child.pid)
    child.wait()
    return Owner(me.host, me.boot, child.pid, start or "")


@pytest.fixture
def live():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    me = owner.me()
    yield Owner(me.host, me.boot, child.pid, owner._start_time(child.pid))
    child.kill()
    child.wait()


def test_this_process_is_the_owner_and_alive():
    labels = owner.labels()
    assert Owner.read(labels[OWNER_LABEL]) == owner.me()
    assert owner.gone(labels) is False


def test_a_process_that_ended_is_gone(dead):
    assert owner.gone(_labels(dead)) is True


def test_a_running_process_is_not_gone_and_a_reused_pid_is_told_apart(live):
    assert owner.gone(_labels(live)) is False
    assert owner.gone(_labels(Owner(live.host, live.boot, live.pid, str(int(live.start) - 1)))) is True


def test_another_boot_is_gone_and_another_machine_cannot_be_judged(live):
    assert owner.gone(_labels(Owner(live.host, "another-boot", live.pid, live.start))) is True
    assert owner.gone(_labels(Owner("elsewhere/0123", live.boot, live.pid, live.start))) is None
    assert owner.gone({OWNED_LABEL: "1"}) is True  # an envbuild that wrote no owner: stopped means left


def test_only_stopped_containers_of_gone_runs_are_removed(dead, live):
    elsewhere = Owner("elsewhere/0123", live.boot, live.pid, live.start)
    containers = [
        Container("dead-exited", "exited", _labels(dead)),
        Container("dead-created", "created", _labels(dead)),
        Container("dead-running", "running", _labels(dead)),
        Container("live-created", "created", _labels(live)),  # another smoke, between create and start
        Container("live-exited", "exited", _labels(live)),  # another smoke whose logs are still to be read
        Container("elsewhere-exited", "exited", _labels(elsewhere)),
    ]
    engine = FakeEngine(containers=tuple(containers))
    assert owner.left_behind(engine) == ["dead-exited", "dead-created"]
    done = clean.clean(engine)
    assert done.containers == ["dead-exited", "dead-created"]
    assert [c.name for c in engine.leftovers] == ["dead-running", "live-created", "live-exited", "elsewhere-exited"]
