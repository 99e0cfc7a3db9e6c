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
from typing import Any, NamedTuple

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


class Entry(NamedTuple):
    """One command, as the group knows it before its module loads: `--help` and the reference read these, and a
    start imports only the module of the command it runs (`--help` none)."""

    name: str
    home: str  # the module of envbuild/cli/ that declares it: use, build, publish or maintain
    section: str  # its group in the top-level help, by what people do
    line: str  # its line there: its docstring's first sentence (tests/unit/test_cli_app.py holds them equal)
    engine: bool = False  # it works on images: it takes --engine


USE, BUILD, SHIP = "Use an image", "Build and test", "Publish and maintain"

# Every command, once, in the order of the top-level help. A command declared without a row here still runs and is
# listed under "Other commands".
COMMANDS: tuple[Entry, ...] = (
    Entry("list", "use", USE, "Every backend: what it is, its base image, torch and transformers."),
    Entry("show", "use", USE, "One backend in full, with the `docker run` flags for its device."),
    Entry("detect", "use", USE, "Which backends this host can run, with the evidence."),
    Entry("doctor", "use", USE, "Whether this host can build, run (and publish) a backend.", engine=True),
    Entry("pick", "use", USE, "The one image reference that fits this host's driver and devices."),
    Entry("pull", "use", USE, "Pull a backend's prebuilt image, verify it, say how to run it.", engine=True),
    Entry("run", "use", USE, "Work in a backend's image: a shell, or a command.", engine=True),
    Entry("env", "use", USE, "A native virtual environment with an image's pins (mps, no Docker)."),
    Entry("verify", "use", USE, "Check an image's signature and attestations in its registry."),
    Entry("init", "build", BUILD, "Write the packaged matrix into a folder to start your own."),
    Entry("validate", "build", BUILD, "Check the matrix, one located error per line."),
    Entry("config", "build", BUILD, "The site's settings and their origin; `config set` writes one."),
    Entry("render", "build", BUILD, "Write one Dockerfile per backend into dockerfiles/."),
    Entry("lock", "build", BUILD, "Pin and hash every package an image adds to its base.", engine=True),
    Entry("build", "build", BUILD, "Build a backend's image on the local Docker or Podman engine.", engine=True),
    Entry("smoke", "build", BUILD, "Prove a model loads and runs on the backend's device.", engine=True),
    Entry("clean", "build", BUILD, "Remove the containers and untagged images envbuild left.", engine=True),
    Entry("base", "build", BUILD, "Make a Debian or Ubuntu base image from the distribution's archive."),
    Entry("publish", "publish", SHIP, "Push images and record their digests in the manifest.", engine=True),
    Entry("attest", "publish", SHIP, "Add a signed smoke result to an image in its registry."),
    Entry("keygen", "publish", SHIP, "Make a cosign signing key pair."),
    Entry("sbom", "publish", SHIP, "An image's bill of materials (CycloneDX JSON).", engine=True),
    Entry("outdated", "maintain", SHIP, "What is newer than each pin, and whether it fits."),
    Entry("bump", "maintain", SHIP, "Move pins to what fits: edit matrix.yaml, render, relock.", engine=True),
    Entry("metadata", "maintain", SHIP, "Check or refresh the pins' metadata cache (matrix.metadata.json)."),
    Entry("matrix", "maintain", SHIP, "The CI job matrix derived from matrix.yaml."),
    Entry("summary", "maintain", SHIP, "One table of `smoke --json` results."),
    Entry("site", "maintain", SHIP, "A static status site of the smoke results."),
    Entry("docs", "maintain", SHIP, "Write (or check) the generated CLI and matrix reference pages."),
)


def entry(name: str) -> Entry | None:
    """The command's row (read at each call, so that a row added to COMMANDS is all a new command needs)."""
    return next((e for e in COMMANDS if e.name == name), None)


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


def every_command() -> dict[str, click.Command]:
    """Every command by name, each module loaded: for what reads the whole group at once (tests)."""
    ctx = click.Context(cli)
    return {name: command for name in cli.list_commands(ctx) if (command := cli.get_command(ctx, name))}


class Group(click.Group):
    """Turns every envbuild error into 'Error: ...' and its exit code: one place, no tracebacks. What a message
    echoes of the user's input is escaped: it can neither repaint the terminal nor forge another line."""

    command_class = Command

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """As each command is declared: its backends and platforms complete from the matrix, and a command whose
        row says it works on images takes --engine."""
        super().add_command(cmd, name)
        wire_completion(cmd)
        row = entry(name or cmd.name or "")
        if row is not None and row.engine:
            engine_option(cmd)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *(e.name for e in COMMANDS)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """click's lazy group: the command's module is imported when the command is first asked for."""
        row = entry(cmd_name)
        if row is not None and cmd_name not in self.commands:
            import importlib

            importlib.import_module(f"envbuild.cli.{row.home}")
        command = super().get_command(ctx, cmd_name)
        if command is not None and row is not None:
            command.short_help = row.line  # the reference's and the shells' one line: the table's
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands by what people do with them, each with its whole line from the table (so that the help
        loads no command module); one declared without a row, under "Other commands"."""
        sections: dict[str, list[tuple[str, str]]] = {}
        for e in COMMANDS:
            sections.setdefault(e.section, []).append((e.name, e.line))
        others = [(name, command.get_short_help_str(limit=1000)) for name, command in sorted(self.commands.items())
                  if entry(name) is None and not command.hidden]
        for title, rows in [*sections.items(), ("Other commands", others)]:
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
        argv = kwargs.get("args")
        # The group's own help is this module's text and the command table, no value from outside: no shape to guess
        # at, and compiling the masker's shapes would be a tenth of a start that completion pays on every Tab.
        static = list(sys.argv[1:] if argv is None else argv) in (["--help"], ["-h"])
        try:
            with guarded(guess=not static):  # every line printed from here on: secrets masked, escapes shown
                status = super().main(*args, standalone_mode=False, **kwargs)
        except OutputFault as exc:  # outside a command (help, usage)
            sys.exit(_output_fault(exc))
        except click.ClickException as exc:  # usage errors (exit 2), with the input they quote made safe
            exc.message = shown("\n".join(error_lines(scrub_text(exc.message))), keep="\n")  # each line capped
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
