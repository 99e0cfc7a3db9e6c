"""envbuild/cli/app.py: the one table of commands (app.COMMANDS), the group that loads a command's module only when
that command runs, and the
layout of cli/ (one module per help group, none over 600 lines). Start-up times are the benchmark's
(benchmarks/bench.py, rows help and render); what a start imports is checked here."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from envbuild.cli import app, cli

CLI = Path(app.__file__).parent
COMMAND_MODULES = {f"envbuild.cli.{e.home}" for e in app.COMMANDS}


def loaded_by(*argv: str) -> set[str]:
    """The envbuild modules a fresh `envbuild ARGV` imports (exit status aside)."""
    script = ("import json, sys\nfrom envbuild.cli import main\nsys.argv = ['envbuild', *sys.argv[1:]]\n"
              "try:\n    main()\nexcept SystemExit:\n    pass\n"
              "print(json.dumps(sorted(m for m in sys.modules if m.startswith('envbuild'))), file=sys.stderr)")
    env = {**os.environ, "PYTHONPATH": str(CLI.parent.parent), "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env, timeout=120)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_every_command_is_declared_in_the_module_its_row_names_once():
    commands = app.every_command()
    assert [e.name for e in app.COMMANDS] == sorted(commands, key=[e.name for e in app.COMMANDS].index)
    assert sorted(e.name for e in app.COMMANDS) == sorted(commands)  # one row each, no command without one
    for e in app.COMMANDS:
        assert commands[e.name].callback.__module__ == f"envbuild.cli.{e.home}", e.name
        assert e.section in (app.USE, app.BUILD, app.SHIP), e.name


def first_sentence(help_text: str) -> str:
    """A docstring's first sentence: its first paragraph up to the first full stop that ends a sentence."""
    paragraph = " ".join(inspect.cleandoc(help_text).split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s", paragraph, maxsplit=1)[0]


@pytest.mark.parametrize("row", app.COMMANDS, ids=lambda e: e.name)
def test_the_table_line_is_the_first_sentence_of_the_command_docstring(row):
    """The help's line (read without importing the command) and the command's own help cannot drift apart."""
    assert first_sentence(app.every_command()[row.name].help or "") == row.line


@pytest.mark.parametrize("row", app.COMMANDS, ids=lambda e: e.name)
def test_a_command_takes_engine_where_its_row_says_so(row):
    takes = any("--engine" in p.opts for p in app.every_command()[row.name].params)
    assert takes == row.engine, row.name


def test_no_file_of_the_cli_is_over_600_lines():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in CLI.glob("*.py")}
    assert sizes and max(sizes.values()) <= 600, sizes


def test_the_help_imports_no_command_module_and_no_stage():
    loaded = loaded_by("--help")
    assert "envbuild.cli.app" in loaded and not loaded & COMMAND_MODULES
    assert loaded <= {"envbuild", "envbuild.cli", "envbuild.cli.app", "envbuild.cli.completion", "envbuild.core",
                      "envbuild.core.errors", "envbuild.core.output", "envbuild.core.text",
                      "envbuild.core.credential_env"}, loaded


@pytest.mark.parametrize("command, home", [("render", "build"), ("pick", "use"), ("keygen", "publish"),
                                           ("outdated", "maintain")])
def test_a_command_loads_its_own_module_only(command, home):
    loaded = loaded_by(command, "--help")
    assert loaded & COMMAND_MODULES == {f"envbuild.cli.{home}"}
    assert not {m for m in loaded if m.split(".")[1:2] in (["smoke"], ["ship"], ["workspace"], ["imagebuild"], ["maintain"],
                                                            ["lock"], ["matrix"], ["render"], ["report"], ["host"])}, loaded


def test_the_lazy_group_loads_a_command_when_asked_and_lists_every_one_before():
    """click's lazy group: list_commands names every row (help, completion of command names) without loading, and
    get_command loads the one module; the reference's line is the table's."""
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(e.name for e in app.COMMANDS)
    smoke = cli.get_command(ctx, "smoke")
    assert smoke is not None and smoke.get_short_help_str(limit=120) == app.entry("smoke").line
    backend = next(p for p in cli.get_command(ctx, "pull").params if p.name == "backends")
    assert backend._custom_shell_complete is not None
    assert cli.get_command(ctx, "no-such-command") is None
