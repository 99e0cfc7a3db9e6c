"""One meaning per flag across every command: a short flag names one long option everywhere, --json is JSON on
stdout everywhere, and every command that acts on a backend takes --backend."""

from __future__ import annotations

import click

from support.constants import FIXED

from envbuild.cli import cli


def options():
    for name, command in sorted(cli.commands.items()):
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
    for name in acting & set(cli.commands):
        assert any("--backend" in p.opts for p in cli.commands[name].params), name


def test_tag_is_a_tag_and_image_a_reference() -> None:
    for name, param in options():
        if "--tag" in param.opts:
            assert param.metavar in (None, "TAG"), name
    assert not any("--tag" in p.opts for p in cli.commands["build"].params)


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
