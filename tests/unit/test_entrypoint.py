"""The image's entrypoint (render/scripts/entrypoint.sh), run for real under sh and bash as another uid:gid: where
the cache root cannot be written the caches move to a writable HOME (else TMPDIR), said once; a writable root keeps
them; the command runs with its arguments and exit status."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from envbuild.render import ENTRYPOINT

SHOW = 'printf "%s\\n" "$XDG_CACHE_HOME" "$HF_HOME" "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR" "$HOME"; exit 3'


def run_as_other(shell: str, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The script as uid:gid 4242:4242 (setpriv, as root) or as this user where it is not root."""
    argv = [shell, str(ENTRYPOINT), "sh", "-c", SHOW]
    if os.getuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) runs the script as another user"
        argv = [setpriv, "--reuid", "4242", "--regid", "4242", "--clear-groups", *argv]
    return subprocess.run(argv, env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, timeout=30)


def _made_tree(under: str | None = None):
    """Folders the other uid can reach (pytest's tmp_path sits under a folder only its owner may enter)."""
    base = Path(tempfile.mkdtemp(prefix="envbuild-entrypoint-", dir=under))
    base.chmod(0o755)
    yield _tree(base)
    for p in base.rglob("*"):
        if p.is_dir():
            p.chmod(0o755)
    shutil.rmtree(base)


@pytest.fixture
def tree():
    yield from _made_tree()


def _tree(base: Path) -> dict[str, Path]:
    paths = {"root": base / "cache", "home": base / "home", "tmp": base / "tmp"}
    for p in paths.values():
        p.mkdir()
    paths["root"].chmod(0o555)  # as a read-only /cache, or one of group 0 seen by another group
    paths["tmp"].chmod(0o777)
    return paths


def env_for(tree: dict[str, Path], home: Path) -> dict[str, str]:
    root = str(tree["root"])
    return {"ENVBUILD_CACHE_ROOT": root, "HOME": str(home), "TMPDIR": str(tree["tmp"]), "XDG_CACHE_HOME": root,
            "HF_HOME": f"{root}/huggingface", "TORCHINDUCTOR_CACHE_DIR": f"{root}/torchinductor",
            "TRITON_CACHE_DIR": "/somewhere/else"}


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_caches_move_to_a_writable_place_when_the_root_cannot_be_written(shell, tree):
    done = run_as_other(shell, tree["root"].parent, env_for(tree, tree["home"]))  # HOME: root's, not 4242's
    assert done.returncode == 3, done.stderr
    moved = f"{tree['tmp']}/.cache"
    assert done.stdout.split() == [moved, f"{moved}/huggingface", f"{moved}/torchinductor", "/somewhere/else",
                                   str(tree["tmp"])]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and f"{tree['root']} cannot be written by uid" in lines[0]
    assert f"caches moved to {moved} and HOME to {tree['tmp']}" in lines[0] and "mount a writable volume" in lines[0]


def test_a_writable_home_takes_them_and_stays_home(tree):
    tree["home"].chmod(0o777)
    done = run_as_other("sh", tree["root"].parent, env_for(tree, tree["home"]))
    assert done.stdout.split()[0] == f"{tree['home']}/.cache" and done.stdout.split()[-1] == str(tree["home"])
    assert "and HOME to" not in done.stderr


def test_a_writable_root_keeps_them_and_says_nothing(tree):
    tree["root"].chmod(0o777)  # a volume at /cache
    done = run_as_other("sh", tree["root"].parent, env_for(tree, tree["home"]))
    assert done.returncode == 3 and done.stderr == ""
    assert done.stdout.split()[:3] == [str(tree["root"]), f"{tree['root']}/huggingface", f"{tree['root']}/torchinductor"]


def test_the_command_gets_its_arguments_unchanged(tmp_path):
    done = subprocess.run(["sh", str(ENTRYPOINT), "printf", "[%s]", "a b", "$HOME", "*"], capture_output=True,
                          text=True, env={"PATH": os.environ["PATH"], "ENVBUILD_CACHE_ROOT": str(tmp_path)}, timeout=30)
    assert done.returncode == 0 and done.stdout == "[a b][$HOME][*]"


@pytest.fixture
def tree_off_tmp():
    """The same folders outside /tmp, so that /tmp itself can be mounted over."""
    yield from _made_tree("/var/tmp")


def _run_with_noexec(tree: dict[str, Path], noexec: str, **env: str) -> subprocess.CompletedProcess:
    """The script as 4242:4242 with `noexec` mounted as a noexec tmpfs (Docker's --tmpfs default), in a mount
    namespace of its own: root only, which CI is."""
    if os.getuid() != 0:
        pytest.skip("mounting a noexec tmpfs needs root (CI runs as root)")
    script = tree["root"].parent / "entrypoint.sh"  # beside the tree: the checkout may be under the /tmp mounted over
    shutil.copyfile(ENTRYPOINT, script)
    script.chmod(0o755)
    inner = (f'mount -t tmpfs -o noexec,mode=1777 tmpfs "$1" && exec setpriv --reuid 4242 --regid 4242 '
             f'--clear-groups sh {script} sh -c \'{SHOW}\'')
    return subprocess.run(["unshare", "-m", "sh", "-c", inner, "sh", noexec],
                          env={"PATH": os.environ["PATH"], **env_for(tree, tree["home"]), **env},
                          capture_output=True, text=True, timeout=30)


def test_where_no_writable_place_runs_code_the_image_says_so_in_one_line_naming_the_mount(tree_off_tmp):
    tree = tree_off_tmp
    tree["tmp"].chmod(0o555)  # HOME and TMPDIR cannot be written; /tmp can, and is noexec (docker run --tmpfs /tmp)
    done = _run_with_noexec(tree, "/tmp")
    assert done.returncode == 3, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and "caches moved to /tmp/.cache" in lines[0]
    assert lines[1] == (f"envbuild: no writable place here can run compiled code (/tmp is mounted noexec): "
                        f"torch.compile will fail; mount a writable volume at {tree['root']} (docker run -v "
                        f"envbuild-cache:{tree['root']}) or let /tmp run code (docker run --tmpfs /tmp:exec)")


def test_a_noexec_home_gives_way_to_a_place_that_runs_code(tree):
    tree["home"].chmod(0o777)
    done = _run_with_noexec(tree, str(tree["home"]))  # a writable HOME, noexec; TMPDIR writable and runs code
    assert done.returncode == 3, done.stderr
    assert done.stdout.split()[0] == f"{tree['tmp']}/.cache"
    assert len(done.stderr.splitlines()) == 1 and "noexec" not in done.stderr
