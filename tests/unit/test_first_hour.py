"""What a new user sees in the first hour: `list` sized for people, `show` without CI internals, a `run --dry-run`
line that pastes, the accelerator named as people know it."""

from __future__ import annotations

import shlex
import subprocess

from support.constants import FIXED

from envbuild.workspace.run import pasteable


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


def test_outside_a_checkout_commands_say_which_matrix_and_where_they_write(invoke, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENVBUILD_MATRIX", raising=False)
    listed = invoke("list")
    assert listed.exit_code == 0 and "using the matrix packaged with envbuild" in listed.stderr
    assert listed.stderr.count("envbuild init DIR") == 1
    rendered = invoke("render", "--backend", "cpu")
    assert rendered.exit_code == 0
    assert "using the matrix packaged with envbuild" in rendered.stderr
    assert f"writing the Dockerfiles into {tmp_path.resolve() / 'dockerfiles'}" in rendered.stderr


def test_in_a_checkout_nothing_is_said(invoke, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("ENVBUILD_MATRIX", raising=False)
    assert invoke("list", "--matrix", FIXED).stderr == ""


def test_init_writes_the_packaged_matrix_to_start_your_own(invoke, tmp_path, monkeypatch) -> None:
    from envbuild.core import paths

    monkeypatch.delenv("ENVBUILD_MATRIX", raising=False)
    team = tmp_path / "team"
    made = invoke("init", str(team))
    assert made.exit_code == 0, made.output
    assert (team / "matrix.yaml").read_bytes() == paths.PACKAGED_MATRIX.read_bytes()
    assert (team / "matrix.metadata.json").exists()
    again = invoke("init", str(team))
    assert again.exit_code == 2 and "--force" in again.stderr
    assert invoke("init", str(team), "--force").exit_code == 0
    monkeypatch.chdir(team)
    checked = invoke("validate")
    assert checked.exit_code == 0 and checked.stdout.startswith("matrix.yaml: ok") and checked.stderr == ""
