"""Shell completion: the scripts generate for bash, zsh and fish, and bash, sourcing its script, completes a
command, an option and a backend name (the real `envbuild` on PATH, run as the shell would)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def shell_env(tmp_path: Path) -> dict[str, str]:
    """PATH with an `envbuild` that runs this checkout's envbuild (the shell calls it by name)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "envbuild"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m envbuild "$@"\n', encoding="utf-8")
    exe.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("_ENVBUILD")}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["ENVBUILD_MATRIX"] = str(ROOT / "tests" / "data" / "matrix.yaml")
    return env


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_completion_script_generates(shell: str, shell_env: dict[str, str]) -> None:
    done = subprocess.run(["envbuild"], env={**shell_env, "_ENVBUILD_COMPLETE": f"{shell}_source"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "_ENVBUILD_COMPLETE" in done.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("words", "expected"), [
    ("envbuild bui", {"build"}),  # a command
    ("envbuild build --no-c", {"--no-cache", "--no-ca-bundle"}),  # an option
    ("envbuild build --backend ro", {"rocm"}),  # a backend, from the matrix
    ("envbuild run --backend c", {"cpu", "cuda"}),
    ("envbuild smoke --backend cpu,ro", {"cpu,rocm"}),  # a comma-separated list keeps what came before
    ("envbuild build --platform linux/a", {"linux/amd64", "linux/arm64"}),  # a platform, from the matrix
])
def test_bash_completes_from_the_sourced_script(words: str, expected: set[str], shell_env: dict[str, str]) -> None:
    script = ('eval "$(_ENVBUILD_COMPLETE=bash_source envbuild)"\n'
              f'COMP_WORDS=({words}); COMP_CWORD={len(words.split()) - 1}\n'
              '_envbuild_completion envbuild\n'
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    done = subprocess.run(["bash", "-c", script], env=shell_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == expected, done.stdout + done.stderr


def test_zsh_candidates_say_what_each_backend_is(shell_env: dict[str, str]) -> None:
    env = {**shell_env, "_ENVBUILD_COMPLETE": "zsh_complete", "COMP_WORDS": "envbuild show ", "COMP_CWORD": "2"}
    done = subprocess.run(["envbuild"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "rocm\nAMD GPU (ROCm)" in done.stdout


def test_the_cli_reference_documents_the_lines_that_work() -> None:
    """The lines a user copies: the same environment variable and values the tests above run."""
    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    for shell in ("bash", "zsh"):
        assert f'eval "$(_ENVBUILD_COMPLETE={shell}_source envbuild)"' in page
    assert "_ENVBUILD_COMPLETE=fish_source envbuild | source" in page
    assert "cli.md#shell-completion" in (ROOT / "README.md").read_text(encoding="utf-8")
