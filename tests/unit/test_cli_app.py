"""envbuild/cli/app.py: the group that loads a command's module only when that command runs (app.HOMES), and the
layout of cli/ (one module per help group, none over 600 lines). Start-up times are the benchmark's
(benchmarks/bench.py, rows help and render); what a start imports is checked here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.cli import app, cli

CLI = Path(app.__file__).parent
COMMAND_MODULES = {f"envbuild.cli.{m}" for m in app.HOMES}


def loaded_by(*argv: str) -> set[str]:
    """The envbuild modules a fresh `envbuild ARGV` imports (exit status aside)."""
    script = ("import json, sys\nfrom envbuild.cli import main\nsys.argv = ['envbuild', *sys.argv[1:]]\n"
              "try:\n    main()\nexcept SystemExit:\n    pass\n"
              "print(json.dumps(sorted(m for m in sys.modules if m.startswith('envbuild'))), file=sys.stderr)")
    env = {**os.environ, "PYTHONPATH": str(CLI.parent.parent), "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env, timeout=120)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_every_command_is_declared_in_the_module_homes_names():
    assert sorted(app.HOME) == sorted(cli.commands)
    for name, command in cli.commands.items():
        assert command.callback.__module__ == f"envbuild.cli.{app.HOME[name]}", name
    assert {n for _, names in app.SECTIONS for n in names} == set(app.HOME) == set(app.SHORT)


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


def test_whoever_reads_every_command_gets_every_command_with_engine_and_completion():
    """cli.commands read whole (docs, tests) loads every module; --engine and completion are set as each command
    is declared, whichever module loads first."""
    assert {"build", "docs", "publish", "pick"} <= set(cli.commands)
    assert any("--engine" in p.opts for p in cli.commands["smoke"].params)
    assert not any("--engine" in p.opts for p in cli.commands["render"].params)
    backend = next(p for p in cli.commands["pull"].params if p.name == "backends")
    assert backend._custom_shell_complete is not None
