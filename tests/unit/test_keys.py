"""Unit tests of envbuild/ship/trust/keys.py: signing keys are new files, 0600, never written through a link."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

PASSPHRASE = "correct horse battery staple"


def keygen(cwd: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("ENVBUILD_KEY_PASSWORD", "COSIGN_PASSWORD")}
    environ.update(env or {"ENVBUILD_KEY_PASSWORD": PASSPHRASE})
    return subprocess.run([sys.executable, "-m", "envbuild", "keygen", *extra], cwd=cwd, env=environ,
                          capture_output=True, timeout=120)


def test_a_stale_temporary_file_in_the_way_does_not_make_the_key_readable(tmp_path):
    for stale in ("cosign.key.tmp", ".cosign.key.tmp"):
        (tmp_path / stale).write_text("left over")
        (tmp_path / stale).chmod(0o644)
    proc = keygen(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((tmp_path / "cosign.key").stat().st_mode) == 0o600
    assert (tmp_path / "cosign.key.tmp").read_text() == "left over"  # not reused, not written


def test_no_key_is_written_through_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    work = tmp_path / "work"
    work.mkdir()
    (work / "cosign.key.tmp").symlink_to(victim)  # where a naive writer puts its temporary file
    assert keygen(work).returncode == 0
    assert victim.read_text() == "the user's file"
    # --force over links standing at the key's own names: the links are replaced, their targets untouched
    for name in ("cosign.key", "cosign.pub"):
        (work / name).unlink()
        (work / name).symlink_to(victim)
    assert keygen(work, "--force").returncode == 0
    assert victim.read_text() == "the user's file"
    assert not (work / "cosign.key").is_symlink() and not (work / "cosign.pub").is_symlink()
    assert stat.S_IMODE((work / "cosign.key").stat().st_mode) == 0o600


def test_a_dangling_link_at_the_key_name_counts_as_there(tmp_path):
    (tmp_path / "cosign.key").symlink_to(tmp_path / "nowhere")
    proc = keygen(tmp_path)
    assert proc.returncode == 2 and b"exists" in proc.stderr and not (tmp_path / "nowhere").exists()


def test_a_passphrase_that_is_not_utf8_is_its_bytes(tmp_path):
    env = {k.encode(): v.encode() for k, v in os.environ.items() if k not in ("ENVBUILD_KEY_PASSWORD", "COSIGN_PASSWORD")}
    env[b"ENVBUILD_KEY_PASSWORD"] = b"caf\xe9-\xff"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "keygen"], cwd=tmp_path, env=env, capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    from envbuild.ship.trust import keys

    keys.load_private((tmp_path / "cosign.key").read_bytes(), b"caf\xe9-\xff", "k")  # opens with those very bytes
