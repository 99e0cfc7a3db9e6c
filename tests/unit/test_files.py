"""Unit tests of envbuild/core/files.py: bounded, checked reads of files from outside."""

from __future__ import annotations

import json
import pytest
from envbuild.core.errors import InvalidInput
import os
import subprocess
import sys
import time
from pathlib import Path
from support.constants import MATRIX
from support.hostile import failing_replace, snapshot


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

@pytest.mark.parametrize("value, fragment", [("1" + "0" * 400, "digits"), ("[" * 100000, "nested too deeply"),
                                             ('"\\ud800"', None), ("Infinity", None), ("NaN", None)])
def test_json_from_outside_is_bounded_and_clean(value, fragment, tmp_path):
    from envbuild.core.files import read_json

    f = tmp_path / "x.json"
    f.write_text('{"seconds": %s}' % value if not value.startswith("[") else value)
    if fragment:
        with pytest.raises(InvalidInput, match=fragment):
            read_json(f, "x.json", InvalidInput)
    else:
        doc = read_json(f, "x.json", InvalidInput)
        json.dumps(doc).encode("utf-8")  # printable and writable again
        assert doc["seconds"] in (None, "?")


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

def _timed(*args: str, timeout: int = 30) -> subprocess.CompletedProcess:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, timeout=timeout)
    assert time.monotonic() - start < timeout and "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture
def specials(tmp_path) -> list[Path]:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    return [fifo, link, Path("/dev/zero")]


def test_special_files_are_never_waited_on_or_read_whole(specials, tmp_path):
    for special in specials:
        for args in (["validate", "--matrix", str(special)], ["summary", str(special)]):
            proc = _timed(*args)
            # a link to /dev/zero beside the matrix leads out of the project: refused as that, unread
            assert proc.returncode == 2 and "give a regular file" in proc.stderr, (args, proc.stderr)
    from envbuild.core.errors import InvalidInput
    from envbuild.ship import manifest

    for special in specials:
        with pytest.raises(InvalidInput, match="not a regular file"):
            manifest.load_smoke_results(special)
        with pytest.raises(InvalidInput, match="give a regular file"):
            manifest.load(special, must_exist=True)


def test_files_under_root_are_read_bounded(specials, tmp_path):
    from envbuild.core.files import read_host

    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "group").symlink_to("/dev/zero")
    (root / "etc" / "os-release").symlink_to(specials[0])
    assert read_host(root / "etc" / "group") is None and read_host(root / "etc" / "os-release") is None
    proc = _timed("detect", "--root", str(root))
    assert proc.returncode == 0


BAD_NETRCS = {
    "binary": b"\x00\x01\x02machine x password n3trc-Pa55word\xff\xfe",
    "not-utf8": b"machine x login y password n3trc-Pa55word\xe9\xff\n",
    "bad-token": b"machine x login y password n3trc-Pa55word\nbogus n3trc-Pa55word\n",
    "macdef-unterminated": b"macdef init\nn3trc-Pa55word",
    "quote": b'machine "x login y password n3trc-Pa55word\n',
    "empty-password-key": b"machine x login y password\n",
}


@pytest.mark.parametrize("kind", sorted(BAD_NETRCS))
def test_a_bad_netrc_is_an_error_that_quotes_nothing(kind, invoke, tmp_path, closed_socket):
    path = tmp_path / "netrc"
    path.write_bytes(BAD_NETRCS[kind])
    from envbuild.core.errors import EnvbuildError
    from envbuild.core.files import read_netrc

    refused = False
    try:
        read_netrc(path)
    except EnvbuildError as exc:
        assert "n3trc-Pa55word" not in str(exc) and str(path) in str(exc)
        refused = True
    result = invoke("outdated", "--matrix", MATRIX, "--netrc", path, "--backend", "cpu", "--json")
    assert result.exit_code in (0, 1) and "n3trc-Pa55word" not in result.output, result.output
    assert "internal error" not in result.output
    for command in (["build", "--backend", "cpu"], ["lock", "--check"]):
        result = invoke(*command, "--matrix", MATRIX, "--netrc", path)
        assert "n3trc-Pa55word" not in result.output and "internal error" not in result.output, result.output
        assert not refused or (result.exit_code == 1 and "--netrc" in result.stderr), result.output


def test_a_netrc_that_is_not_a_regular_file_is_refused(tmp_path):
    from envbuild.core.errors import EnvbuildError
    from envbuild.core.files import read_netrc

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(EnvbuildError, match="not a regular file"):
        read_netrc(fifo)




@pytest.mark.parametrize("k", range(1, 5))
def test_write_all_puts_back_new_files_too(k, monkeypatch, tmp_path):
    from envbuild.core.errors import EnvbuildError
    from envbuild.core.files import write_all

    (tmp_path / "a.txt").write_text("old a")
    (tmp_path / "c.txt").write_text("old c")
    before = snapshot(tmp_path)
    failing_replace(monkeypatch, k)
    files = {tmp_path / n: f"new {n}" for n in ("a.txt", "b.txt", "c.txt", "d.txt")}
    with pytest.raises(EnvbuildError, match="nothing was written"):
        write_all(files)
    monkeypatch.undo()
    assert snapshot(tmp_path) == before
    assert write_all(files) and snapshot(tmp_path) == {n: f"new {n}".encode() for n in ("a.txt", "b.txt", "c.txt", "d.txt")}


def test_a_project_file_is_a_regular_file_in_its_folder(tmp_path):
    """read_project: the door for files a pull request brings. A link inside its folder (or `within`) is followed;
    one out of it, in a loop or to nothing is refused by name, and nothing of the target is read."""
    from envbuild.core.errors import EnvbuildError
    from envbuild.core.files import read_project

    project, outside = tmp_path / "project", tmp_path / "private.txt"
    (project / "sub").mkdir(parents=True)
    outside.write_text("PRIVATE")
    (project / "real.txt").write_text("mine")
    (project / "in.txt").symlink_to("real.txt")
    (project / "sub" / "up.txt").symlink_to("../real.txt")
    (project / "out.txt").symlink_to(outside)
    (project / "loop.txt").symlink_to("loop.txt")
    (project / "gone.txt").symlink_to("nothing.txt")
    assert read_project(project / "in.txt", "in") == b"mine"
    assert read_project(project / "sub" / "up.txt", "up", within=project) == b"mine"
    for name, said in (("out.txt", "a symbolic link that leads out of"), ("loop.txt", "a symbolic link in a loop"),
                       ("gone.txt", "a symbolic link to nothing"), ("sub/up.txt", "leads out of"),
                       ("missing.txt", "cannot read: No such file")):
        with pytest.raises(EnvbuildError, match=said) as caught:
            read_project(project / name, name)
        assert "PRIVATE" not in str(caught.value) and str(caught.value).startswith(f"{name}: ")


def test_exclusive_says_again_what_it_waits_for_while_another_holds_it(tmp_path, monkeypatch):
    """A build waiting on another envbuild's build of the same backend says so, and keeps saying so with the time
    it has waited, instead of one line and then silence for as long as the other build runs."""
    import threading

    from envbuild.core import files, heartbeat

    monkeypatch.setattr(heartbeat, "PERIOD", 0.01)
    monkeypatch.setattr(heartbeat, "QUIET", 0.0)
    lines: list[str] = []
    again = threading.Event()

    def echo(text: str) -> None:
        lines.append(text)
        if text.startswith("still waiting"):
            again.set()

    lock = tmp_path / "cpu.lock"
    got = threading.Event()

    def second() -> None:
        with files.exclusive(lock, "the cpu build in .envbuild/context", echo):
            got.set()

    with files.exclusive(lock, "the cpu build in .envbuild/context"):
        waiter = threading.Thread(target=second)
        waiter.start()
        assert again.wait(10)
        assert not got.is_set()
    waiter.join(10)
    assert got.is_set()
    assert lines[0] == f"waiting for another envbuild that holds the cpu build in .envbuild/context (lock {lock})"
    assert lines[1].startswith("still waiting for another envbuild that holds the cpu build in .envbuild/context: ")
