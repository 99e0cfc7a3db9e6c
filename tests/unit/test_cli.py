"""Tests for the envbuild command line (envbuild.cli.cli) through click.testing.CliRunner.

Every invocation goes through the `invoke` fixture (conftest.py), which fails the test on any traceback
or unexpected exception. Outputs go to tmp_path; the committed dockerfiles/ are only ever read.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from support.constants import ALL, CONTAINERIZABLE, DOCKERFILES, FIXED, GOLDEN, MATRIX
from support.hostile import SECRET_FORMS, SHAPES

from envbuild.core import files
from envbuild import matrix
from envbuild.core.errors import MatrixError
import click
from envbuild.cli import app
import base64


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())} if folder.exists() else {}


# --------------------------------------------------------------------------------------------------
# Help and version.


@pytest.mark.parametrize("args", [["--help"], ["validate", "--help"], ["render", "--help"], ["list", "--help"],
                                  ["show", "--help"], ["--version"]])
def test_help(args: list[str], invoke) -> None:
    result = invoke(*args)
    assert result.exit_code == 0
    assert result.stdout


# --------------------------------------------------------------------------------------------------
# validate.


def test_validate_ok(invoke) -> None:
    result = invoke("validate", "--matrix", FIXED)
    assert result.exit_code == 0
    assert result.stdout.strip() == f"{FIXED}: ok (11 backends; 10 images to build)"
    assert result.stderr == ""


def test_validate_uses_matrix_yaml_in_the_current_folder(invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(MATRIX.parent)
    result = invoke("validate")
    assert result.exit_code == 0
    assert result.stdout.startswith("matrix.yaml: ok")


def test_validate_without_matrix_file_uses_the_installed_one(invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a checkout, commands fall back to the matrix installed with envbuild."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENVBUILD_MATRIX", raising=False)
    result = invoke("validate")
    assert result.exit_code == 0, result.output
    # counted as the README counts them: eleven backends, the variants apart
    assert "envbuild/matrix/matrix.yaml: ok (11 backends and 5 variants; 15 images to build)" in result.stdout


def test_validate_missing_matrix_file(invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("validate", "--matrix", "matrix.yaml")
    assert result.exit_code == 2
    assert result.stderr.strip() == "Error: matrix.yaml: no such file (pass --matrix FILE, or run from the envbuild checkout)"


def test_a_missing_matrix_named_by_matrix_gets_no_hint_to_pass_matrix(invoke, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("validate", "--matrix", "team/images.yaml")
    assert result.exit_code == 2
    assert result.stderr.strip() == "Error: team/images.yaml: no such file"


# --------------------------------------------------------------------------------------------------
# No command shows a traceback for a user error; each exits non-zero with a located message.


BROKEN = FIXED.read_text(encoding="utf-8").replace("    base_image: debian:bookworm-slim", "    base_image: 'debian:bookworm-slim'\n    device: cpu", 1)


@pytest.mark.parametrize(
    "command",
    [["validate"], ["render"], ["render", "--check"], ["render", "--backend", "cpu"], ["list"], ["list", "--json"],
     ["show", "cpu"], ["show", "cpu", "--json"]],
    ids=lambda c: " ".join(c),
)
@pytest.mark.parametrize("problem", ["duplicate-key", "missing-file", "yaml-syntax", "bad-set"])
def test_user_errors_never_show_a_traceback(command: list[str], problem: str, invoke, write_matrix,
                                            tmp_path: Path) -> None:
    out = tmp_path / "out"
    extra = ["--output", str(out)] if command[0] == "render" else []
    if problem == "duplicate-key":
        path, expect = write_matrix(BROKEN), "duplicate key 'device' in backends.cpu"
    elif problem == "missing-file":
        path, expect = tmp_path / "absent.yaml", "no such file"
    elif problem == "yaml-syntax":
        path, expect = write_matrix("image: [\n"), "YAML syntax error"
    else:
        path, expect = FIXED, "--set backends.cpu.torch.version=abc"
    sets = ["--set", "backends.cpu.torch.version=abc"] if problem == "bad-set" else []
    result = invoke(*command, *extra, "--matrix", path, *sets)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.startswith("Error: ")
    assert expect in result.stderr
    assert not out.exists()


# --------------------------------------------------------------------------------------------------
# render.


def test_render_writes_every_containerizable_backend(invoke, tmp_path: Path) -> None:
    out = tmp_path / "dockerfiles"
    result = invoke("render", "--matrix", FIXED, "--output", out)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.Dockerfile" for n in CONTAINERIZABLE)
    assert result.stdout.splitlines() == [f"wrote {out / n}.Dockerfile" for n in CONTAINERIZABLE]
    for name in CONTAINERIZABLE:  # the same bytes as the goldens (same fixed matrix)
        assert (out / f"{name}.Dockerfile").read_bytes() == (GOLDEN / f"{name}.Dockerfile").read_bytes()
    assert not (out / "mps.Dockerfile").exists()


def test_render_twice_is_byte_identical_and_leaves_unchanged_files_alone(invoke, tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert invoke("render", "--matrix", FIXED, "-o", first).exit_code == 0
    assert invoke("render", "--matrix", FIXED, "-o", second).exit_code == 0
    assert snapshot(first).keys() == snapshot(second).keys()
    assert all((first / n).read_bytes() == (second / n).read_bytes() for n in snapshot(first))

    past = 1_000_000_000_000_000_000
    for p in first.iterdir():
        os.utime(p, ns=(past, past))
    before = snapshot(first)
    result = invoke("render", "--matrix", FIXED, "-o", first)
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [f"unchanged {first / n}.Dockerfile" for n in CONTAINERIZABLE]
    assert snapshot(first) == before


def test_render_selected_backends(invoke, tmp_path: Path) -> None:
    result = invoke("render", "--matrix", FIXED, "-o", tmp_path, "--backend", "rocm", "-b", "cpu", "-b", "rocm")
    assert result.exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu.Dockerfile", "rocm.Dockerfile"]


def test_render_all_keyword(invoke, tmp_path: Path) -> None:
    assert invoke("render", "--matrix", FIXED, "-o", tmp_path, "-b", "all").exit_code == 0
    assert len(list(tmp_path.iterdir())) == 10


def test_render_mps_explains_why_and_what_instead(invoke, tmp_path: Path) -> None:
    result = invoke("render", "--matrix", FIXED, "-o", tmp_path / "out", "--backend", "mps")
    assert result.exit_code != 0
    message = result.stderr
    assert message.startswith("Error: backend 'mps' cannot run in a container")
    assert "Metal" in message and "MPS" in message and "Linux containers" in message
    assert "Instead:" in message and "cpu image" in message and "envbuild env --backend mps" in message
    assert not (tmp_path / "out").exists()


def test_render_unknown_backend_lists_the_valid_ones(invoke, tmp_path: Path) -> None:
    result = invoke("render", "--matrix", FIXED, "-o", tmp_path / "out", "--backend", "cdua")
    assert result.exit_code != 0
    assert "unknown backend 'cdua'" in result.stderr
    for name in CONTAINERIZABLE:
        assert name in result.stderr
    assert not (tmp_path / "out").exists()


def test_render_with_set_changes_the_dockerfile(invoke, tmp_path: Path) -> None:
    plain, changed = tmp_path / "plain", tmp_path / "changed"
    assert invoke("render", "--matrix", FIXED, "-o", plain, "-b", "cpu").exit_code == 0
    result = invoke("render", "--matrix", FIXED, "-o", changed, "-b", "cpu", "--set", "transformers.version=5.0.0")
    assert result.exit_code == 0, result.output
    new = (changed / "cpu.Dockerfile").read_text()
    assert new != (plain / "cpu.Dockerfile").read_text()
    assert 'dev.envbuild.transformers="5.0.0"' in new and "transformers=5.23.0" not in new


def test_render_failure_keeps_old_file(invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "cpu.Dockerfile"
    target.write_text("the old, complete file\n")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", boom)
    result = invoke("render", "--matrix", FIXED, "-o", tmp_path, "-b", "cpu")
    monkeypatch.undo()
    assert result.exit_code != 0
    assert "No space left on device" in result.stderr
    assert target.read_text() == "the old, complete file\n"
    assert [p.name for p in tmp_path.iterdir()] == ["cpu.Dockerfile"]


# --------------------------------------------------------------------------------------------------
# render --check.


@pytest.fixture
def fresh(invoke, tmp_path: Path) -> Path:
    out = tmp_path / "dockerfiles"
    assert invoke("render", "--matrix", FIXED, "-o", out).exit_code == 0
    return out


def test_check_fresh(invoke, fresh: Path) -> None:
    before = snapshot(fresh)
    result = invoke("render", "--check", "--matrix", FIXED, "-o", fresh)
    assert result.exit_code == 0
    assert result.stdout.strip() == f"10 Dockerfile(s) up to date in {fresh}/"
    assert snapshot(fresh) == before


def test_check_stale(invoke, fresh: Path) -> None:
    (fresh / "cuda.Dockerfile").write_text((fresh / "cuda.Dockerfile").read_text().replace("2.15.0", "2.14.0"))
    before = snapshot(fresh)
    result = invoke("render", "--check", "--matrix", FIXED, "-o", fresh)
    assert result.exit_code == 1
    assert result.stdout.startswith("stale: cuda.Dockerfile (")
    assert len(result.stdout.splitlines()) == 1
    assert "1 Dockerfile(s) out of date: run `envbuild render`." in result.stderr
    assert snapshot(fresh) == before


def test_check_stale_after_set(invoke, fresh: Path) -> None:
    result = invoke("render", "--check", "--matrix", FIXED, "-o", fresh, "--set", "accelerate.version=1.0.0")
    assert result.exit_code == 1
    assert len(result.stdout.splitlines()) == 10
    assert all(line.startswith("stale: ") for line in result.stdout.splitlines())


def test_check_missing_and_extra(invoke, fresh: Path) -> None:
    (fresh / "rocm.Dockerfile").unlink()
    (fresh / "gone.Dockerfile").write_text("FROM scratch\n")
    before = snapshot(fresh)
    result = invoke("render", "--check", "--matrix", FIXED, "-o", fresh)
    assert result.exit_code == 1
    assert sorted(result.stdout.splitlines()) == [
        "extra: gone.Dockerfile (no backend in the matrix renders it)", "missing: rocm.Dockerfile"]
    assert "2 Dockerfile(s) out of date" in result.stderr
    assert snapshot(fresh) == before  # nothing written, nothing deleted


def test_check_of_selected_backends_ignores_the_others(invoke, fresh: Path) -> None:
    (fresh / "gone.Dockerfile").write_text("FROM scratch\n")
    (fresh / "cuda.Dockerfile").write_text("stale\n")
    result = invoke("render", "--check", "--matrix", FIXED, "-o", fresh, "-b", "cpu")
    assert result.exit_code == 0
    assert invoke("render", "--check", "--matrix", FIXED, "-o", fresh, "-b", "cuda").exit_code == 1


def test_check_into_an_absent_folder_writes_nothing(invoke, tmp_path: Path) -> None:
    out = tmp_path / "absent"
    result = invoke("render", "--check", "--matrix", FIXED, "-o", out)
    assert result.exit_code == 1
    assert len(result.stdout.splitlines()) == 10
    assert not out.exists()


def test_check_committed_dockerfiles_with_repo_matrix(invoke) -> None:
    result = invoke("render", "--check", "--matrix", MATRIX, "-o", DOCKERFILES)
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------------------------------
# list.


def test_list_table(invoke) -> None:
    result = invoke("list", "--matrix", FIXED)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["BACKEND", "DESCRIPTION", "TORCH", "TRANSFORMERS", "BASE", "IMAGE"]
    assert [ln.split()[0] for ln in lines[1:]] == ALL
    assert all(len(line) <= 100 for line in lines)  # the base image is cut to fit; `show` has it whole
    mps = next(ln for ln in lines if ln.startswith("mps "))
    assert "no container" in mps and "True" not in result.stdout
    rocm = next(ln for ln in lines if ln.startswith("rocm "))
    assert "AMD GPU (ROCm)" in rocm and "(base)" in rocm and " cuda " not in rocm


def test_list_json(invoke) -> None:
    result = invoke("list", "--json", "--matrix", FIXED)
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert [row["backend"] for row in rows] == ALL
    by_name = {row["backend"]: row for row in rows}
    assert by_name["mps"]["containerizable"] is False
    assert by_name["cpu"] == {
        "backend": "cpu", "device": "cpu", "description": "CPU", "containerizable": True,
        "base_image": "debian:bookworm-slim", "torch": "2.15.0", "plugin": "-", "transformers": "5.23.0"}
    assert by_name["npu"]["plugin"] == "torch-npu==2.14.0"
    assert by_name["rocm"]["device"] == "cuda"


# --------------------------------------------------------------------------------------------------
# show.


def test_show_rocm_prints_the_device_flags(invoke) -> None:
    result = invoke("show", "rocm", "--matrix", FIXED)
    assert result.exit_code == 0
    out = result.stdout
    for flag in ("--device /dev/kfd", "--device /dev/dri", "--group-add video"):
        assert flag in out
    assert "docker run --rm --device /dev/kfd --device /dev/dri --group-add video" in out
    assert "rocm/pytorch:" in out


def test_show_rocm_json(invoke) -> None:
    result = invoke("show", "rocm", "--json", "--matrix", FIXED)
    assert result.exit_code == 0
    detail = json.loads(result.stdout)
    flags = detail["docker_run_flags"]
    for pair in (["--device", "/dev/kfd"], ["--device", "/dev/dri"], ["--group-add", "video"]):
        assert any(flags[i:i + 2] == pair for i in range(len(flags) - 1)), pair
    assert detail["torch"] == {"version": "2.14.0", "source": "base", "index_url": None}
    assert detail["tags"][0] == "ghcr.io/envbuild/envbuild:rocm"
    assert detail["docker_run"].startswith("docker run --rm --device /dev/kfd")


def test_show_cuda_uses_gpus_all(invoke) -> None:
    detail = json.loads(invoke("show", "cuda", "--json", "--matrix", FIXED).stdout)
    assert detail["docker_run_flags"] == ["--gpus=all", "--ipc=host"]


def test_show_mps_says_it_is_not_containerizable(invoke) -> None:
    result = invoke("show", "mps", "--matrix", FIXED)
    assert result.exit_code == 0
    assert "not containerizable" in result.stdout and "Metal" in result.stdout
    detail = json.loads(invoke("show", "mps", "--json", "--matrix", FIXED).stdout)
    assert detail["containerizable"] is False and "tags" not in detail and "Metal" in detail["reason"]


def test_show_unknown_backend(invoke) -> None:
    result = invoke("show", "nope", "--matrix", FIXED)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: unknown backend 'nope'; valid backends: {', '.join(ALL)}"


# --------------------------------------------------------------------------------------------------
# --set.


def test_set_applies_to_show(invoke) -> None:
    result = invoke("show", "cpu", "--json", "--matrix", FIXED, "--set", "backends.cpu.torch.version=2.13.0")
    assert result.exit_code == 0, result.output
    detail = json.loads(result.stdout)
    assert detail["torch"]["version"] == "2.13.0"
    assert "2.13.0" in detail["tags"][1]


def test_set_applies_to_list(invoke) -> None:
    rows = json.loads(invoke("list", "--json", "--matrix", FIXED, "--set", "backends.cpu.torch.version=2.13.0").stdout)
    assert rows[0]["torch"] == "2.13.0"


def test_set_several(invoke) -> None:
    result = invoke("show", "npu", "--json", "--matrix", FIXED, "--set", "backends.npu.torch.version=2.13.0",
                    "--set", "backends.npu.plugin.version=2.13.0")
    assert result.exit_code == 0, result.output
    detail = json.loads(result.stdout)
    assert (detail["torch"]["version"], detail["plugin"]["version"]) == ("2.13.0", "2.13.0")


def test_set_invalid_version(invoke) -> None:
    result = invoke("validate", "--matrix", FIXED, "--set", "backends.cpu.torch.version=abc")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: --set backends.cpu.torch.version=abc: backends.cpu.torch.version:")
    assert "'abc' is not a valid version" in line


def test_set_that_breaks_a_pairing_rule(invoke) -> None:
    result = invoke("validate", "--matrix", FIXED, "--set", "backends.npu.torch.version=2.13.0")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "backends.npu.plugin.version" in line and "rule same-release" in line


@pytest.mark.parametrize(
    ("override", "fragment"),
    [("backends.cpu.torch", "expected DOTTED.PATH=VALUE"),
     ("backends.cpu.torch.verison=2.13.0", "unknown key 'verison' in backends.cpu.torch (did you mean 'version'?)"),
     # A typo in an intermediate part of the path creates a new section: still the --set's fault.
     ("backends.cpu.torhc.version=2.13.0", "unknown key 'torhc' in backends.cpu (did you mean 'torch'?)"),
     ("backends.cpuu.torch.version=2.13.0", "backends.cpuu"),
     ('backends.cpu.description="x\\ny"', "newline"),
     ('image.vendor=a"b', "without quotes")],
    ids=["no-equals", "typo-leaf", "typo-intermediate", "typo-backend", "newline", "quote"],
)
def test_set_errors(override: str, fragment: str, invoke) -> None:
    result = invoke("validate", "--matrix", FIXED, "--set", override)
    assert result.exit_code == 2
    assert fragment in result.stderr
    # Every message blames the --set, not a line of the file the override never touched.
    for line in result.stderr.splitlines():
        assert line.startswith(f"Error: --set {override}: "), result.stderr


def test_matrix_is_a_folder(invoke, tmp_path: Path) -> None:
    result = invoke("validate", "--matrix", tmp_path)
    assert result.exit_code == 2
    assert "is a directory" in result.stderr


def test_relative_matrix_path_in_messages(invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copyfile(FIXED, tmp_path / "m.yaml")
    text = (tmp_path / "m.yaml").read_text().replace("  cpu:\n    description: CPU\n", "  cpu:\n    descripton: CPU\n    description: CPU\n", 1)
    (tmp_path / "m.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    result = invoke("validate", "--matrix", "m.yaml")
    assert result.exit_code == 2
    line = text[: text.index("descripton")].count("\n") + 1
    assert result.stderr.strip() == f"Error: m.yaml:{line}: unknown key 'descripton' in backends.cpu (did you mean 'description'?)"
    # The library reports the same.
    with pytest.raises(MatrixError) as info:
        matrix.load("m.yaml")
    assert str(info.value) == f"m.yaml:{line}: unknown key 'descripton' in backends.cpu (did you mean 'description'?)"


# --- One meaning per flag across every command (from test_flags.py)

def options():
    for name, command in sorted(app.every_command().items()):
        for param in command.params:
            if isinstance(param, click.Option):
                yield name, param


def test_a_short_flag_means_one_thing_everywhere() -> None:
    meaning: dict[str, set[str]] = {}
    for _, param in options():
        longs = [o for o in param.opts if o.startswith("--")]
        for short in (o for o in param.opts if not o.startswith("--")):
            meaning.setdefault(short, set()).update(longs)
    assert {s: m for s, m in meaning.items() if len(m) > 1} == {}
    assert meaning["-v"] == {"--volume"}  # as in docker run


def test_json_is_json_on_stdout_everywhere() -> None:
    for name, param in options():
        if "--json" in param.opts:
            assert param.is_flag, f"{name} --json takes a value"
        if param.name == "json_path":
            assert param.opts == ["--json-file"], name


def test_every_command_acting_on_a_backend_takes_backend() -> None:
    acting = {"attest", "build", "bump", "doctor", "env", "lock", "matrix", "outdated", "publish", "pull", "render",
              "run", "sbom", "show", "smoke", "summary"}
    commands = app.every_command()
    for name in acting & set(commands):
        assert any("--backend" in p.opts for p in commands[name].params), name


def test_tag_is_a_tag_and_image_a_reference() -> None:
    for name, param in options():
        if "--tag" in param.opts:
            assert param.metavar in (None, "TAG"), name
    assert not any("--tag" in p.opts for p in app.every_command()["build"].params)


def test_show_takes_backend_as_an_option_too(invoke) -> None:
    by_option = invoke("show", "--backend", "rocm", "--matrix", FIXED)
    assert by_option.exit_code == 0, by_option.output
    assert by_option.stdout == invoke("show", "rocm", "--matrix", FIXED).stdout
    assert invoke("show", "AMD", "--matrix", FIXED).stdout == by_option.stdout
    both = invoke("show", "cpu", "--backend", "rocm", "--matrix", FIXED)
    assert both.exit_code == 2 and "show takes one" in both.stderr
    assert invoke("show", "--matrix", FIXED).exit_code == 2


def test_build_json_wants_no_value(invoke, closed_socket) -> None:
    result = invoke("build", "--backend", "rocm", "--json", "--matrix", FIXED)
    assert "requires an argument" not in result.stderr


# --- What a new user sees in the first hour (from test_first_hour.py)

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


def test_run_dry_run_is_one_line_that_pastes(invoke, monkeypatch) -> None:
    monkeypatch.setenv("ENVBUILD_ENGINE", "docker")  # auto would take Podman where no Docker daemon answers
    result = invoke("run", "--dry-run", "--backend", "cpu", "--matrix", FIXED, "--", "python", "-c", "print(1)\nprint('two')")
    assert result.exit_code == 0
    line = result.stdout.rstrip("\n")
    assert "\n" not in line and line.startswith("docker run ")
    assert line.endswith("python -c $'print(1)\\nprint(\\'two\\')'")


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


def test_init_keeps_envbuilds_own_folder_out_of_git_once(invoke, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("ENVBUILD_MATRIX", raising=False)
    fresh = tmp_path / "fresh"
    assert invoke("init", str(fresh)).exit_code == 0
    assert (fresh / ".gitignore").read_text() == ".envbuild/\n"
    team = tmp_path / "team"
    team.mkdir()
    (team / ".gitignore").write_text("*.log")  # a team's own, without a final newline: kept, and added to
    made = invoke("init", str(team))
    assert made.exit_code == 0 and "added .envbuild/ to" in made.stdout
    assert invoke("init", str(team), "--force").exit_code == 0  # said once, whatever init runs again
    assert (team / ".gitignore").read_text() == "*.log\n.envbuild/\n"
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("private")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".gitignore").symlink_to(elsewhere)  # never written through
    assert invoke("init", str(linked)).exit_code == 0
    assert elsewhere.read_text() == "private"


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

@pytest.mark.parametrize("args", [["env", "--dir", "--help"], ["pull", "--backend", "cpu", "--manifest", "missing.json"],
                                  ["attest", "--backend", "cpu", "--tag", "a\nError: forged", "--smoke-json", "s.json"]])
def test_option_values_that_are_bad_input_exit_2(args, invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.json").write_text("{}")
    result = invoke(*args, "--matrix", MATRIX)
    assert result.exit_code == 2, result.output
    assert "\nError: forged" not in result.stderr


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

@pytest.mark.parametrize("args,fragment", [
    (["build", "--backend", "cpu", "--mirror", "docker.io=evil\nRUN id"], "--mirror"),
    (["build", "--backend", "cpu", "--mirror", "docker.io=a b"], "--mirror"),
    (["build", "--backend", "cpu", "--image", "bad tag!"], "--image"),
    (["build", "--backend", "cpu", "--image", "--privileged"], "--image"),
    (["build", "--backend", "cpu", "--build-arg", "=x"], "--build-arg"),
    (["build", "--backend", "cpu", "--build-arg", "A=b\x1b[2J"], "--build-arg"),
    (["build", "--backend", "cpu", "--label", "NOEQUALS"], "--label"),
    (["build", "--backend", "cpu", "--platform", "linux/sparc"], "--platform"),
    (["build", "--backend", "cpu", "--network", "a b"], "--network"),
    (["build", "--backend", "cpu", "--cache-from", "--output=/etc"], "--cache-from"),
    (["pull", "--backend", "cpu", "--tag", "bad tag!"], "--tag"),
    (["publish", "--backend", "cpu", "--registry", "localhost:5000/x", "--image", "bad ref!!"], "--image"),
    (["smoke", "--backend", "cpu", "--image", "-x"], "--image"),
    (["smoke", "--backend", "cpu", "--model", "./absent"], "--model"),
    (["sbom", "--backend", "cpu", "--image", "a b"], "--image"),
    (["doctor", "--backend", "cpu", "--registry", "bad ref!!"], "--registry"),
    (["render", "--output", str(MATRIX)], "--output"),
    (["env", "--backend", "cpu", "--dir", "x\nrm -rf ~", "--dry-run"], "--dir"),
    (["env", "--backend", "cpu", "--dir", "x", "--python", "-c", "--dry-run"], "--python"),
    (["run", "--backend", "cpu", "--dry-run", "-v", "a\nb:/c"], "-v"),
])
def test_invalid_arguments_exit_2_before_any_work(args, fragment, invoke, closed_socket):
    """closed_socket: no Docker engine answers, so nothing could have been started for these."""
    result = invoke(*args, "--matrix", MATRIX)
    assert result.exit_code == 2, result.output
    assert fragment in result.stderr, result.stderr
    assert "\x1b" not in result.stderr and "\nrm -rf" not in result.stderr


def test_an_unexpected_error_is_scrubbed_too(invoke, monkeypatch):
    from envbuild import render

    monkeypatch.setenv("ENVBUILD_REGISTRY_USER", "robot")
    monkeypatch.setenv("ENVBUILD_REGISTRY_PASSWORD", "s3cr3t-p@ss")

    def boom(*a, **k):
        raise RuntimeError("failed with " + base64.b64encode(b"robot:s3cr3t-p@ss").decode())

    monkeypatch.setattr(render, "render", boom)
    result = invoke("render", "--matrix", MATRIX, "--backend", "cpu", "--output", "x")
    assert result.exit_code == 70 and "internal error" in result.stderr and "***" in result.stderr
    assert base64.b64encode(b"robot:s3cr3t-p@ss").decode()[:10] not in result.stderr




@pytest.mark.parametrize("shape", SHAPES)
def test_reports_envbuild_writes_hold_no_secret(shape, tmp_path):
    from envbuild.cli.options import append_output as _append_output, write_output as _write_output

    value, hidden = SECRET_FORMS[shape]
    doc = __import__("json").dumps({"error": f"pull failed: {value}"})
    _write_output(str(tmp_path / "r.json"), doc)
    _append_output(str(tmp_path / "summary.md"), f"| cpu | {value} |\n")
    for name in ("r.json", "summary.md"):
        assert hidden.splitlines()[0] not in (tmp_path / name).read_text(), name
    __import__("json").loads((tmp_path / "r.json").read_text())  # still the JSON it was


# --- issue 51: every quoted input capped; a --matrix that names no file --------------------------------------------

@pytest.mark.parametrize("args", [["build", "--backend", "cpu", "--platform", "x" * 10_000],
                                  ["lock", "--backend", "cpu", "--platform", "linux/" + "a" * 10_000],
                                  ["pick", "--for", "y" * 10_000], ["smoke", "--backend", "cpu", "--image", "Z" * 10_000]])
def test_a_long_value_is_not_quoted_whole_in_its_error(invoke, args):
    result = invoke(*args, "--matrix", MATRIX)
    long = args[-1][-1] * 1001
    assert result.exit_code == 2 and long not in result.stderr and len(result.stderr) < 2500, result.stderr[:300]


@pytest.mark.parametrize("value", ["/no/such/folder/matrix.yaml", "", "missing.yaml"])
def test_config_with_a_matrix_that_names_no_file_says_so_and_exits_2(invoke, tmp_path, monkeypatch, value):
    monkeypatch.chdir(tmp_path)
    result = invoke("config", "--matrix", value)
    assert result.exit_code == 2 and "does not exist" in result.stderr and result.stdout == ""


@pytest.mark.parametrize("args", [["attest", "--backend", "cpu", "--tag", "t" * 10_000],
                                  ["pick", "--root", "--" + "o" * 10_000]])
def test_the_option_types_quote_a_long_value_capped(invoke, args):
    result = invoke(*args, "--matrix", MATRIX)
    assert result.exit_code == 2 and "more characters" in result.stderr and len(result.stderr) < 1500, result.stderr[:300]
