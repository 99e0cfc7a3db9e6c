"""The envbuild command group: its global options (--debug, --yes), its help (the commands by what people do, each
option in one clause) and the one place every error becomes 'Error: ...' and its exit code.

The commands live beside it by help group (use.py, build.py, publish.py, maintain.py); the options they share in
options.py. Each command parses, calls one library function and prints. This module is imported for every start
(`envbuild --help` included): it imports click and the output layer, nothing else.
"""

from __future__ import annotations

import re
import signal
import sys
from typing import Any

import click

from envbuild.cli.completion import wire_completion
from envbuild.core.errors import EnvbuildError
from envbuild.core.output import OutputFault, capped, guarded, scrub
from envbuild.core.text import shown


def _sigterm_as_interrupt() -> None:
    """A CI cancel (SIGTERM) cleans up as Ctrl-C does: containers, temporary tags, staged files."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (tests invoking the CLI from one)
        pass


def scrub_text(text: str) -> str:
    """No secret (by name or by shape) reaches the terminal, even in an unexpected error."""
    return scrub(text)


MAX_ERROR_LINES = 50  # problems printed of one error; the rest are counted


def error_lines(text: str) -> list[str]:
    lines = text.split("\n")
    more = len(lines) - MAX_ERROR_LINES
    lines = [capped(line) for line in lines[:MAX_ERROR_LINES]]
    return lines + ([f"... and {more} more problem(s) like these"] if more > 0 else [])


MAX_WIDTH = 100  # of help text


# The top-level help, by what people do; a command not named here is listed under "Other commands".
SECTIONS = (
    ("Use an image", ("list", "show", "detect", "doctor", "pick", "pull", "run", "env", "verify")),
    ("Build and test", ("init", "validate", "config", "render", "lock", "build", "smoke", "clean", "base")),
    ("Publish and maintain", ("publish", "attest", "keygen", "sbom", "outdated", "bump", "metadata", "matrix",
                              "summary", "site", "docs")),
)


# Each command in one line of the top-level help (its docstring's first sentence says more).
SHORT = {
    "list": "Every backend: what it is, its base image, torch and transformers.",
    "show": "One backend in full, with the `docker run` flags for its device.",
    "detect": "Which backends this host can run, with the evidence.",
    "doctor": "Whether this host can build, run (and publish) a backend.",
    "pick": "The one image reference that fits this host's driver and devices.",
    "pull": "Pull a backend's prebuilt image, verify it, say how to run it.",
    "run": "Work in a backend's image: a shell, or a command.",
    "env": "A native virtual environment with an image's pins (mps, no Docker).",
    "verify": "Check an image's signature and attestations in its registry.",
    "init": "Write the packaged matrix into a folder to start your own.",
    "validate": "Check the matrix, one located error per line.",
    "config": "The site's settings (mirrors, wheels, CA bundle) and their origin.",
    "render": "Write one Dockerfile per backend into dockerfiles/.",
    "lock": "Pin and hash every package an image adds to its base.",
    "build": "Build a backend's image on the local Docker engine.",
    "smoke": "Prove a model loads and runs on the backend's device.",
    "clean": "Remove the containers and untagged images envbuild left.",
    "base": "Make a Debian or Ubuntu base image from the distribution's archive.",
    "publish": "Push images and record their digests in the manifest.",
    "attest": "Add a signed smoke result to an image in its registry.",
    "keygen": "Make a cosign signing key pair.",
    "sbom": "An image's bill of materials (CycloneDX JSON).",
    "outdated": "What is newer than each pin, and whether it fits.",
    "bump": "Move pins to what fits: edit matrix.yaml, render, relock.",
    "metadata": "Check or refresh the pins' metadata cache (matrix.metadata.json).",
    "matrix": "The CI job matrix derived from matrix.yaml.",
    "summary": "One table of `smoke --json` results.",
    "site": "A static status site of the smoke results.",
    "docs": "Write (or check) the generated CLI and matrix reference pages.",
}


_CLAUSE = re.compile(r"\.\s|;\s|:\s|\s\(|\s\[|,\s(?:e\.g\.|as in|such as)")


def _short_option_help(text: str) -> str:
    """An option's help in a command's --help: its first clause that says what it is (not a qualifier such as
    "With --compat:" alone, never inside `code`), not the details after it."""
    text = " ".join(text.split())
    for cut in _CLAUSE.finditer(text):
        short = text[:cut.start()]
        least = {":": 25, ";": 20, " (": 12}.get(cut.group()[:2].rstrip(), 8)  # "With --compat:" is no clause
        if short.count("`") % 2 == 0 and len(short) >= least:
            return short.rstrip(".")
    return text.rstrip(".")


class Command(click.Command):
    """A command whose --help fits a screen: the description, the examples, and each option in one clause."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        import copy

        records = []
        for param in self.get_params(ctx):
            if isinstance(param, click.Option) and param.help:
                param = copy.copy(param)
                param.help = _short_option_help(param.help)
            record = param.get_help_record(ctx)
            if record is not None:
                records.append(record)
        if records:
            with formatter.section("Options"):
                formatter.write_dl(records)


# Where each command is declared: a start imports only the module of the command it runs (`--help` none, its lines
# are SHORT's). A new command is named here, in the module of its help group (test_cli_app.py holds them in step).
HOMES = {
    "use": ("list", "show", "detect", "doctor", "pick", "pull", "run", "env", "verify"),
    "build": ("init", "validate", "config", "render", "lock", "build", "smoke", "clean", "base"),
    "publish": ("publish", "attest", "keygen", "sbom"),
    "maintain": ("outdated", "bump", "metadata", "matrix", "summary", "site", "docs"),
}
HOME = {name: module for module, names in HOMES.items() for name in names}


def load_all() -> None:
    """Every command module: for what reads the whole group (docs, completion of command names, tests)."""
    import importlib

    for module in HOMES:
        importlib.import_module(f"envbuild.cli.{module}")


class _Commands(dict):
    """The group's commands, declared as their modules load. Whoever reads the whole mapping (`cli.commands`: docs,
    tests) gets every command; the group itself loads one module per command it runs (`Group.get_command`)."""

    complete = False  # every command module loaded

    def _all(self) -> None:
        if not self.complete:
            self.complete = True
            load_all()

    def __iter__(self):
        self._all()
        return super().__iter__()

    def __len__(self) -> int:
        self._all()
        return super().__len__()

    def __contains__(self, name: object) -> bool:
        self._all()
        return super().__contains__(name)

    def __getitem__(self, name: str) -> click.Command:
        if not super().__contains__(name):
            self._all()
        return super().__getitem__(name)

    def get(self, name: str, default: Any = None) -> Any:
        self._all()
        return super().get(name, default)

    def keys(self):
        self._all()
        return super().keys()

    def values(self):
        self._all()
        return super().values()

    def items(self):
        self._all()
        return super().items()


class Group(click.Group):
    """Turns every envbuild error into 'Error: ...' and its exit code: one place, no tracebacks. What a message
    echoes of the user's input is escaped: it can neither repaint the terminal nor forge another line."""

    command_class = Command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self.commands)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """As each command is declared: its backends and platforms complete from the matrix, and a command that
        works on images takes --engine."""
        super().add_command(cmd, name)
        wire_completion(cmd)
        if (name or cmd.name) in ENGINE_COMMANDS:
            engine_option(cmd)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        declared = dict.get(self.commands, cmd_name)
        if declared is None and cmd_name in HOME:
            import importlib

            importlib.import_module(f"envbuild.cli.{HOME[cmd_name]}")
            declared = dict.get(self.commands, cmd_name)
        return declared

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(dict.keys(self.commands)) | set(HOME))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands by what people do with them, each with its whole one-line description (SHORT's, so that
        the help loads no command module)."""
        commands = {name: SHORT.get(name) or self.get_command(ctx, name) for name in self.list_commands(ctx)}
        commands = {name: c for name, c in commands.items() if c is not None and (isinstance(c, str) or not c.hidden)}
        listed = {name for _, names in SECTIONS for name in names}
        sections = [*SECTIONS, ("Other commands", tuple(sorted(set(commands) - listed)))]
        for title, names in sections:
            rows = [(name, SHORT.get(name) or commands[name].get_short_help_str(limit=1000)) for name in names
                    if name in commands]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        from envbuild.core.output import no_color

        if no_color():  # click then strips its styles, as it does off a terminal
            extra.setdefault("color", False)
        return super().make_context(info_name, args, parent, **extra)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # `envbuild` alone: the help, as --help prints it. click >= 8.2 raises it as a usage error instead, whose
        # message main() would escape onto one line (literal \n).
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit()
        return super().parse_args(ctx, args)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        _sigterm_as_interrupt()
        if _completing(kwargs):  # click writes the shell's script and candidates itself, as bytes: let them through
            return super().main(*args, **kwargs)

        try:
            with guarded():  # every line printed from here on: secrets masked, escapes shown
                status = super().main(*args, standalone_mode=False, **kwargs)
        except OutputFault as exc:  # outside a command (help, usage)
            sys.exit(_output_fault(exc))
        except click.ClickException as exc:  # usage errors (exit 2), with the input they quote made safe
            exc.message = shown(scrub_text(exc.message))
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)  # ctx.exit(N) comes back as N here

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EnvbuildError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            if isinstance(exc, OutputFault):
                ctx.exit(_output_fault(exc))
            for line in error_lines(scrub_text(str(exc))) or [type(exc).__name__]:
                click.secho(f"Error: {shown(line)}", fg="red", err=True)
            ctx.exit(exc.exit_code)
        except OSError as exc:  # the world's fault (a permission, a full disk), not a bug: say which file
            if ctx.obj and ctx.obj.get("debug"):
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            for line in error_lines(scrub_text(f"{where}{exc.strerror or exc}")):
                click.secho(f"Error: {shown(line)}", fg="red", err=True)
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Exception as exc:  # a bug, not a user error: say so briefly; --debug shows the traceback
            if ctx.obj and ctx.obj.get("debug"):
                raise
            said = shown(error_lines(scrub_text(str(exc)))[0])
            click.secho(f"Error: internal error: {type(exc).__name__}: {said} (rerun with --debug for the traceback)", fg="red", err=True)
            ctx.exit(70)


def _completing(kwargs: dict) -> bool:
    """Whether the shell asks for completion (_ENVBUILD_COMPLETE=bash_source, zsh_complete, ...)."""
    import os

    name = (kwargs.get("prog_name") or "envbuild").replace("-", "_").replace(".", "_").upper()
    return bool(os.environ.get(kwargs.get("complete_var") or f"_{name}_COMPLETE"))


def _output_fault(exc) -> int:
    """A closed pipe ends quietly (as `yes | head` does); a full device is said on stderr. Exit 1."""
    if not exc.closed:
        try:
            click.secho(f"Error: {exc}", fg="red", err=True)
        except Exception:  # stderr is gone too
            pass
    return 1


ENGINE_COMMANDS = ("build", "lock", "bump", "smoke", "clean", "run", "doctor", "publish", "pull", "sbom")


def engine_option(command: click.Command) -> None:
    """--engine on each command that works on images: kept for options.engine() (and doctor) to read."""
    def keep(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value:
            ctx.ensure_object(dict)
            ctx.find_root().obj["engine"] = value

    from envbuild.engine.select import NAMES

    command.params.append(click.Option(
        ["--engine"], type=click.Choice([*NAMES, "auto"]), expose_value=False, callback=keep,
        help=f"{', '.join(NAMES)}, or auto (Docker if it answers). Default: $ENVBUILD_ENGINE, else auto."))


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": MAX_WIDTH})
@click.option("--debug", is_flag=True, help="Show the full traceback of an error (for bug reports).")
@click.option("--yes", "-y", is_flag=True, help="Answer yes to envbuild's questions: where no Docker engine answers (Debian, Ubuntu), install docker.io and start it without asking; where a build's Debian or Ubuntu base cannot be pulled, make it from the archive (`envbuild base`).")
@click.version_option(package_name="envbuild")
@click.pass_context
def cli(ctx: click.Context, debug: bool, yes: bool) -> None:
    """Build, smoke-test and ship PyTorch + Transformers images for every accelerator.

    matrix.yaml describes each backend once; `render` writes one Dockerfile per backend into
    dockerfiles/, `build` builds it on your Docker engine, and `smoke` proves a model loads on the device.

    \b
    Quick start:
      envbuild list                    # every backend
      envbuild doctor --backend rocm   # can this host build it? run it?
      envbuild build --backend cpu && envbuild smoke --backend cpu
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    ctx.obj["yes"] = yes


def main() -> None:
    cli(prog_name="envbuild")
