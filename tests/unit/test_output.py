"""Unit tests of envbuild/core/output.py: the one output layer (what it scrubs from logs)."""

from __future__ import annotations
import os
import subprocess
import sys
from pathlib import Path
import pytest
from support.constants import MATRIX, MINIMAL
import pty
from support.constants import FIXED
from support.hostile import SECRET_FORMS, SECRET_VALUES, SHAPES


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

def test_a_build_log_keeps_a_uid_after_getent_passwd():
    from envbuild.core.output import scrub

    assert scrub("RUN if getent passwd 1000 >/dev/null; then", environ={}).endswith("passwd 1000 >/dev/null; then")
    assert scrub("machine h login u password hunter22", environ={}).endswith("password ***")


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

def _yaml(text: str) -> str:
    """A YAML double-quoted scalar holding the text (its escapes carry every character through --set)."""
    return '"' + "".join(c if c.isalnum() or c in " _-." else f"\\U{ord(c):08x}" for c in text) + '"'


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


# --- NO_COLOR, and output that is not a terminal, get no colour and no escape (from test_no_color.py)

ROOT = Path(__file__).resolve().parents[2]


def on_a_terminal(*args: str, **env: str) -> bytes:
    """What `envbuild ARGS` writes to a terminal (stdout and stderr both on it)."""
    main, sub = pty.openpty()
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **env}
    if "NO_COLOR" not in env:
        environ.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "envbuild", *args], stdin=sub, stdout=sub, stderr=sub, env=environ)
    os.close(sub)
    out = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(main)
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pty")
def test_no_color_on_a_terminal() -> None:
    coloured = on_a_terminal("show", "nope", "--matrix", str(FIXED))
    assert b"\x1b[31m" in coloured and b"unknown backend" in coloured  # a terminal gets the red line
    plain = on_a_terminal("show", "nope", "--matrix", str(FIXED), NO_COLOR="1")
    assert b"unknown backend" in plain and b"\x1b" not in plain


def test_no_escape_off_a_terminal() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("NO_COLOR", None)
    done = subprocess.run([sys.executable, "-m", "envbuild", "show", "nope", "--matrix", str(FIXED)],
                          capture_output=True, env=env, timeout=60)
    assert done.returncode == 2 and b"unknown backend" in done.stderr and b"\x1b" not in done.stderr + done.stdout


# --- issue 51: credentials in every shape; data for scripts as it is ------------------------------------------------

@pytest.mark.parametrize("text", ["docker.io/library/python:3.12@sha256:" + "a" * 64, "ubuntu:22.04@sha256:" + "0" * 64,
                                  "git@github.com:org/repo.git", "alice@example.org wrote", "localhost:5000/x:1.0",
                                  "ghcr.io/org/sk-learn-torch-images:cpu"])
def test_references_digests_and_addresses_without_a_password_are_left_alone(text):
    from envbuild.core.output import Scrubber

    assert Scrubber(environ={})(text) == text


@pytest.mark.parametrize("text, kept", [
    ("docker.io=bob:S3cret@mirror.corp:5000", "docker.io=***@mirror.corp:5000"),
    ("bob:S3cret@mirror.corp:5000/x", "***@mirror.corp:5000/x"),
    ("registry_mirrors: docker.io = bob:S3cret@mirror.corp:5000: expected", "docker.io = ***@mirror.corp:5000: expected"),
    ("Authorization: Bearer abc", "Authorization: Bearer ***"),
    ('{"Authorization": "Basic Ym9iOnMzY3JldA=="}', '"Authorization": "***'),
])
def test_the_masker_keeps_where_the_secret_was(text, kept):
    from envbuild.core.output import Scrubber

    out = Scrubber(environ={})(text)
    assert kept in out and "S3cret" not in out and "abc" not in out.split("Bearer")[-1] and "Ym9i" not in out


def test_masked_quotes_a_value_masked_escaped_and_capped():
    from envbuild.core.output import masked

    assert masked("bob:S3cret@mirror.corp:5000") == "***@mirror.corp:5000"
    assert masked("a\nb") == "a\\nb"
    long = masked("x" * 10_000)
    assert len(long) < 300 and long.endswith("(9800 more characters)")


def test_print_data_prints_a_token_shaped_value_as_it_is_but_masks_what_this_process_knows(capsys):
    from envbuild.core.output import guarded, print_data

    with guarded(environ={"DEPLOY_TOKEN": "kn0wn-secret-value"}):
        print_data("ghcr.io/org/sk-learn-torch-images:cpu hf_" + "a" * 20)
        print_data("kn0wn-secret-value\x1b[2J")
        print("npm_" + "b" * 24)  # the rest of stdout: scrubbed by shape as before
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ghcr.io/org/sk-learn-torch-images:cpu hf_" + "a" * 20
    assert out[1] == "***\\x1b[2J"
    assert out[2] == "***"


@pytest.mark.parametrize("args", [["show", "cpu", "--json"], ["show", "cpu"], ["matrix", "--format", "json"],
                                  ["matrix", "--format", "github"], ["matrix"]])
def test_show_and_matrix_print_a_token_shaped_repository_as_it_is(invoke, args):
    repository = "ghcr.io/org/sk-learn-torch-images"
    result = invoke(*args, "--matrix", MATRIX, "--set", f"image.repository={repository}")
    assert result.exit_code == 0 and repository in result.stdout and "***" not in result.stdout, result.stdout


@pytest.mark.parametrize("name", ["ENVBUILD_REGISTRY_PASSWORD", "ENVBUILD_KEY_PASSWORD", "COSIGN_PASSWORD", "GITHUB_TOKEN"])
def test_envbuilds_own_credential_variables_are_masked_even_when_short(name):
    from envbuild.core.output import Scrubber

    assert Scrubber(environ={name: "pw1x"})("the server said pw1x back") == "the server said *** back"


def test_a_scrubber_that_does_not_guess_masks_only_what_it_knows(monkeypatch):
    """The group's own help is printed so: its text holds no value from outside, and it should not pay for the
    shapes' compile; a secret this process holds is still masked."""
    from envbuild.core import output

    monkeypatch.setenv("ENVBUILD_REGISTRY_PASSWORD", "S3cret-known-value")
    text = "token ghp_0123456789abcdefghij and S3cret-known-value"
    assert output.Scrubber(guess=False)(text) == "token ghp_0123456789abcdefghij and ***"
    assert output.Scrubber()(text) == "token *** and ***"
