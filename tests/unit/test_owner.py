"""Runs that do not touch each other: a container is left behind only when the process that started it is gone."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.fakes import FakeEngine

from envbuild.workspace import clean
from envbuild.engine import owner
from envbuild.engine.owner import OWNED_LABEL, OWNER_LABEL, Container, Owner


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
    done = clean.clean(engine, every=True)
    assert done.containers == ["dead-exited", "dead-created"]
    assert [c.name for c in engine.leftovers] == ["dead-running", "live-created", "live-exited", "elsewhere-exited"]


# --- clean's scope: this checkout's by default, --all for every checkout's; --dry-run removes nothing -------------

def _in(folder, o: Owner) -> dict[str, str]:
    return {**_labels(o), owner.CHECKOUT_LABEL: owner.checkout(folder)}


@pytest.fixture
def shared(tmp_path, dead, monkeypatch):
    """An engine two checkouts share: each left a container of a gone run and an untagged image it built."""
    here, there = tmp_path / "here", tmp_path / "there"
    for folder, image in ((here, "sha256:" + "a" * 64), (there, "sha256:" + "b" * 64)):
        folder.mkdir()
        owner.note_image(image, folder / owner.IMAGES_MADE)
    engine = FakeEngine(containers=(Container("here-exited", "exited", _in(here, dead)),
                                    Container("there-exited", "exited", _in(there, dead))))
    engine.dangling = ["sha256:" + "a" * 64, "sha256:" + "b" * 64, "sha256:" + "c" * 64]  # c: an older envbuild's
    monkeypatch.chdir(here)
    return engine


def test_clean_takes_only_this_checkout_s_containers_and_images_by_default(shared):
    done = clean.clean(shared)
    assert done.containers == ["here-exited"] and done.images == ["sha256:" + "a" * 64] and done.scope == "checkout"
    assert [c.name for c in shared.leftovers] == ["there-exited"]  # the other checkout loses nothing
    assert shared.dangling == ["sha256:" + "b" * 64, "sha256:" + "c" * 64]


def test_clean_all_takes_every_checkout_s(shared):
    done = clean.clean(shared, every=True)
    assert done.containers == ["here-exited", "there-exited"] and len(done.images) == 3
    assert shared.leftovers == [] and shared.dangling == []


def test_clean_dry_run_lists_and_removes_nothing(shared):
    done = clean.clean(shared, every=True, dry_run=True)
    assert done.containers == ["here-exited", "there-exited"] and len(done.images) == 3 and done.dry_run
    assert len(shared.leftovers) == 2 and len(shared.dangling) == 3 and shared.removed == []


def test_clean_on_the_command_line_says_its_scope(shared, invoke, monkeypatch):
    monkeypatch.setattr("envbuild.cli.options.engine", lambda *a, **k: shared)
    dry = invoke("clean", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "would remove container here-exited" in dry.stdout and "there-exited" not in dry.stdout
    assert "nothing removed (--dry-run)" in dry.stdout and len(shared.leftovers) == 2
    assert "would remove container there-exited" in invoke("clean", "--dry-run", "--all").stdout
    assert invoke("clean").stdout.startswith("removed container here-exited")
    assert [c.name for c in shared.leftovers] == ["there-exited"]


def test_every_container_envbuild_starts_names_its_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert owner.labels()[owner.CHECKOUT_LABEL] == owner.checkout(tmp_path) != owner.checkout(tmp_path.parent)


def test_the_list_of_images_made_here_keeps_each_once_and_the_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(owner, "IMAGES_KEPT", 3)
    ledger = tmp_path / ".envbuild" / "images-built.txt"
    for i in (1, 2, 2, 3, 4):
        owner.note_image(f"sha256:{i}", ledger)
    assert owner.images_made(ledger) == ["sha256:2", "sha256:3", "sha256:4"]
    assert owner.images_made(tmp_path / "none.txt") == []
