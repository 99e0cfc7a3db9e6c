"""Help that guides: the top-level help groups the commands by what people do, each in one whole line; every
command's help fits a screen, holds no control character and no hand-typed version."""

from __future__ import annotations

import re

import pytest

from envbuild.cli import app

COMMANDS = sorted(app.every_command())


@pytest.fixture
def columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


def test_the_top_level_help_groups_the_commands(invoke, columns) -> None:
    out = invoke("--help").stdout
    for heading in ("Use an image:", "Build and test:", "Publish and maintain:"):
        assert f"\n{heading}\n" in out
    for name in COMMANDS:  # one line each, not cut off
        line = next(line for line in out.splitlines() if line.startswith(f"  {name} "))
        assert line.rstrip().endswith("."), line


def test_envbuild_alone_prints_the_help_as_help_does(invoke, columns) -> None:
    """click >= 8.2 raises the no-argument help as a usage error, whose message the error path escaped onto one
    line with literal \\n (2,757 bytes); the help is the same lines as --help's, on stdout, exit 0."""
    alone, helped = invoke(), invoke("--help")
    assert alone.exit_code == 0, alone.output
    assert alone.stdout == helped.stdout
    assert "\\n" not in alone.stdout and alone.stdout.count("\n") > 20


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_help_fits_a_screen(name: str, invoke, columns) -> None:
    result = invoke(name, "--help")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert len(lines) <= 45, f"{name} --help: {len(lines)} lines"
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", result.stdout), f"{name} --help holds a control character"
    assert not re.search(r"(?:torch|transformers)\d+\.\d+", result.stdout), f"{name} --help types a version"


@pytest.mark.parametrize(("text", "short"), [
    ("Build every layer afresh.", "Build every layer afresh"),
    ("Pull base images from a mirror, e.g. docker.io=mirror.corp:5000 (repeatable).", "Pull base images from a mirror"),
    ("With --compat: Markdown, as COMPATIBILITY.md holds it.", "With --compat: Markdown, as COMPATIBILITY.md holds it"),
    ("Write nothing; exit 1 if any file is stale.", "Write nothing; exit 1 if any file is stale"),
    ("github: one line for `strategy.matrix: x`; json: the same.", "github: one line for `strategy.matrix: x`"),
])
def test_an_option_shows_its_first_whole_clause(text: str, short: str) -> None:
    from envbuild.cli.app import _short_option_help

    assert _short_option_help(text) == short
