"""What a new user sees in the first hour: `list` sized for people, `show` without CI internals, a `run --dry-run`
line that pastes, the accelerator named as people know it."""

from __future__ import annotations

import shlex
import subprocess

from support.constants import FIXED

from envbuild.tools.run import pasteable


def test_list_fits_100_columns_with_description_and_transformers(invoke) -> None:
    out = invoke("list", "--matrix", FIXED).stdout
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "TRANSFORMERS" in out and "AMD GPU (ROCm)" in out and "CONTAINERIZABLE" not in out


def test_show_leaves_ci_labels_to_verbose_and_json(invoke) -> None:
    plain = invoke("show", "rocm", "--matrix", FIXED).stdout
    assert "gpu-amd" not in plain and "runs_on" not in plain and "device string" not in plain
    verbose = invoke("show", "rocm", "--verbose", "--matrix", FIXED).stdout
    assert "runs_on:" in verbose and "gpu-amd" in verbose
    assert "gpu-amd" in invoke("show", "rocm", "--json", "--matrix", FIXED).stdout


def test_run_dry_run_is_one_line_that_pastes(invoke) -> None:
    result = invoke("run", "--dry-run", "--backend", "cpu", "--matrix", FIXED, "--", "python", "-c", "print(1)\nprint('two')")
    assert result.exit_code == 0
    line = result.stdout.rstrip("\n")
    assert "\n" not in line and line.startswith("docker run ")
    assert line.endswith("python -c $'print(1)\\nprint(\\'two\\')'")


def test_a_pasted_argument_is_the_same_text() -> None:
    for value in ["plain", "a b", "x\ny", "it's", "tab\there", "esc\x1bA", "bidi\u202eX", "back\\slash\n"]:
        said = subprocess.run(["bash", "-c", f"printf %s {pasteable(value)}"], capture_output=True, text=True).stdout
        assert said == value, (value, pasteable(value))
    assert pasteable("a b") == shlex.quote("a b")
