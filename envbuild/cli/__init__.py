"""The envbuild command line: a thin layer over the library; each command calls one library function.

An import that costs more than 20 ms of start-up (a stage, the docker SDK) is made inside the command that needs it,
so `--help` stays fast; CONTRIBUTING.md ("Imports") lists them with their measured cost.
"""

from __future__ import annotations

import functools
import json
import re
import signal
import sys
from pathlib import Path
from typing import Any

import click

from envbuild.core.errors import BuildError, EnvbuildError, InvalidInput, LockError, NoVariantFitsError
from envbuild.core.files import read_host, write_atomic
from envbuild.core.imageref import Reference, check_repository
from envbuild.core.output import OutputFault, capped, guarded, safe, scrub
from envbuild.core.text import shown
from envbuild import smoke as smoking
from envbuild.ship import manifest as manifests
from envbuild.workspace import clean as cleaning, run as runner

MATRIX_HELP = "The matrix file [default: $ENVBUILD_MATRIX, else ./matrix.yaml, else the one installed with envbuild]."
SET_HELP = "Override a matrix field for this run (repeatable), e.g. backends.cpu.base_image=IMAGE."


class _PathArg(click.Path):
    """click.Path whose value is a pathlib.Path. A value that is an option (`--dir --help`: click takes the next
    word as the value) is refused: such a folder is never what was meant; `./--help` still names one."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and value.startswith("-") and len(value) > 1:
            self.fail(f"{shown(value)} is an option, not a path: give the path (./{shown(value)} for a file named so)",
                      param, ctx)
        return super().convert(value, param, ctx)

    def coerce_path_result(self, value: Any) -> Any:
        return Path(value)


class _PlatformArg(click.ParamType):
    """--platform: one platform (several, comma-separated, with `many`), read once by core.platform.Platform with
    Docker's spellings; the value is a Platform (its canonical string, 'linux/arm64'). The same refusal (exit 2, the value
    escaped) from every command, before any engine or registry is asked."""

    name = "OS/ARCH"

    def __init__(self, many: bool = False):
        self.many = many

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        from envbuild.core.platform import InvalidPlatform, Platform, parse_list

        if isinstance(value, tuple):  # already read (a default)
            return value
        try:
            return parse_list(value) if self.many else Platform.parse(value)
        except InvalidPlatform as exc:
            self.fail(str(exc), param, ctx)


def _listed(chosen: list, platforms: tuple[str, ...]) -> None:
    """Each --platform is one every chosen backend lists (matrix.yaml): refused alike by every command, exit 2,
    before any engine or registry is asked."""
    for backend in chosen:
        for p in platforms:
            backend.listed(p)


def _sigterm_as_interrupt() -> None:
    """A CI cancel (SIGTERM) cleans up as Ctrl-C does: containers, temporary tags, staged files."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (tests invoking the CLI from one)
        pass


def _scrub(text: str) -> str:
    """No secret (by name or by shape) reaches the terminal, even in an unexpected error."""
    return scrub(text)


MAX_ERROR_LINES = 50  # problems printed of one error; the rest are counted


def _error_lines(text: str) -> list[str]:
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


class Group(click.Group):
    """Turns every envbuild error into 'Error: ...' and its exit code: one place, no tracebacks. What a message
    echoes of the user's input is escaped: it can neither repaint the terminal nor forge another line."""

    command_class = Command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands by what people do with them, each with its whole one-line description."""
        commands = {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}
        commands = {name: c for name, c in commands.items() if c is not None and not c.hidden}
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
            exc.message = shown(_scrub(exc.message))
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
            for line in _error_lines(_scrub(str(exc))) or [type(exc).__name__]:
                click.secho(f"Error: {shown(line)}", fg="red", err=True)
            ctx.exit(exc.exit_code)
        except OSError as exc:  # the world's fault (a permission, a full disk), not a bug: say which file
            if ctx.obj and ctx.obj.get("debug"):
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            for line in _error_lines(_scrub(f"{where}{exc.strerror or exc}")):
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
            said = shown(_error_lines(_scrub(str(exc)))[0])
            click.secho(f"Error: internal error: {type(exc).__name__}: {said} (rerun with --debug for the traceback)", fg="red", err=True)
            ctx.exit(70)


def _completing(kwargs: dict) -> bool:
    """Whether the shell asks for completion (_ENVBUILD_COMPLETE=bash_source, zsh_complete, ...)."""
    import os

    name = (kwargs.get("prog_name") or "envbuild").replace("-", "_").replace(".", "_").upper()
    return bool(os.environ.get(kwargs.get("complete_var") or f"_{name}_COMPLETE"))


def _matrix_for_completion(ctx: click.Context):
    """The matrix a completion reads (--matrix when given before the word), or None when it cannot be read."""
    try:
        root = ctx.find_root()
        path = ctx.params.get("matrix_path") or (root.params.get("matrix_path") if root is not ctx else None)
        from envbuild import matrix  # not _load: a completion says nothing on the terminal

        return matrix.load(path or matrix.default_path(), tuple(ctx.params.get("overrides") or ()))
    except Exception:  # noqa: BLE001 - a completion never fails the shell: no candidates instead
        return None


def _complete_backend(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """Backend names from the matrix (with what each is, for zsh and fish), and 'all'/'auto' where taken."""
    from click.shell_completion import CompletionItem

    m = _matrix_for_completion(ctx)
    if m is None:
        return []
    from envbuild.matrix.names import human

    items = [CompletionItem(b.name, help=human(b)) for b in m.backends]
    if param.multiple or param.default == "auto":
        items += [CompletionItem("auto", help="the one detected here")]
    if param.multiple:
        items += [CompletionItem("all", help="every containerizable backend")]
    done, _, word = incomplete.rpartition(",")  # --backend cpu,ro: complete the last name, keep the others
    prefix = f"{done}," if done else ""
    return [CompletionItem(prefix + i.value, help=i.help) for i in items if i.value.startswith(word.lower())]


def _complete_platform(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """The platforms the matrix's backends list (linux/amd64, linux/arm64)."""
    from click.shell_completion import CompletionItem

    m = _matrix_for_completion(ctx)
    platforms = sorted({p for b in m.backends for p in b.platforms}) if m is not None else []
    return [CompletionItem(p) for p in platforms if p.startswith(incomplete)]


def _output_fault(exc) -> int:
    """A closed pipe ends quietly (as `yes | head` does); a full device is said on stderr. Exit 1."""
    if not exc.closed:
        try:
            click.secho(f"Error: {exc}", fg="red", err=True)
        except Exception:  # stderr is gone too
            pass
    return 1


def _image_ref(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--image: a reference (REPO[:TAG][@DIGEST]) or an image id, never something the engine would misread."""
    from envbuild.matrix.schema import check_str

    if value is None or re.fullmatch(r"(?:sha256:)?[0-9a-f]{12,64}", value):
        return value
    _, why = check_str("image")(value)
    if why:
        raise click.BadParameter(f"{why}, or an image id")
    return value


def _matrix_options(f):
    f = click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE", help=SET_HELP)(f)
    f = click.option("--matrix", "matrix_path", default=None, type=click.Path(dir_okay=False), help=MATRIX_HELP)(f)
    return f


class _Inputs:
    """What build and lock read besides the matrix: the site's settings (mirrors, wheels, CA bundle, netrc: the
    settings files, ENVBUILD_* variables and the flags, core/settings.py), the network, the locks."""

    def __init__(self, site, no_ca_bundle, network, locks_dir):
        self.site, self.no_ca_bundle = site, no_ca_bundle
        self.values = dict(network=network, locks_dir=locks_dir)

    @property
    def mirrors(self) -> tuple[str, ...]:
        return self.site.registry_mirrors

    @property
    def netrc(self) -> Path | None:
        return self.site.path("netrc")

    def options(self, **more: Any):
        from envbuild.imagebuild.plan import options

        site = self.site
        return options(ca_bundle=site.path("ca_bundle"), no_ca_bundle=self.no_ca_bundle, netrc=site.path("netrc"),
                       wheelhouse=site.path("wheelhouse"), mirrors=site.registry_mirrors,
                       index_mirrors=site.index_mirrors, **self.values, **more)


def _site(matrix_path: str | None = None, **flags: Any):
    """The site's settings (user file < project file < ENVBUILD_* < flags), read once per command."""
    from envbuild.core import settings

    ctx = click.get_current_context(silent=True)
    said = ctx.find_root().obj if ctx is not None and isinstance(ctx.find_root().obj, dict) else {}
    cache = said.setdefault("site", {})
    if matrix_path not in cache:
        cache[matrix_path] = settings.load(matrix_path)
    return cache[matrix_path].with_flags(**flags)


_SITE_NOTE = " [default: the site's settings, see `envbuild config`]"


def _input_options(f):
    options = [
        click.option("--mirror", "mirrors", multiple=True, metavar="FROM=TO", help="Pull base images from a mirror, e.g. docker.io=mirror.corp:5000 (repeatable)" + _SITE_NOTE + "."),
        click.option("--index-mirror", "index_mirrors", multiple=True, metavar="URL=MIRROR", help="Ask a mirror instead of a package index, e.g. https://download.pytorch.org/whl/cpu=https://pypi-mirror.corp/whl/cpu (repeatable; the lock still names the index)" + _SITE_NOTE + "."),
        click.option("--wheelhouse", type=_PathArg(file_okay=False, exists=True), help="A folder of wheels to take files from: a locked file of the same name and sha256 is taken from it, and the resolver may take wheels from it" + _SITE_NOTE + "."),
        click.option("--ca-bundle", type=_PathArg(dir_okay=False, exists=True), help="CA bundle for pip inside the build, passed as a BuildKit secret [default: the site's settings, else $SSL_CERT_FILE, $REQUESTS_CA_BUNDLE or $PIP_CERT]."),
        click.option("--no-ca-bundle", is_flag=True, help="Do not pass any CA bundle."),
        click.option("--netrc", type=_PathArg(dir_okay=False, exists=True), help="A netrc file with package index credentials, passed as a BuildKit secret" + _SITE_NOTE + "."),
        click.option("--network", metavar="MODE", help="The network of the build's RUN steps, e.g. host (an index on this machine's loopback)."),
        click.option("--locks", "locks_dir", default="locks", show_default=True, type=_PathArg(file_okay=False), help="Where the locks are (BACKEND/OS-ARCH.txt)."),
    ]

    @functools.wraps(f)  # with the options already on f
    def wrapper(**kw):
        site = _site(kw.get("matrix_path"), registry_mirrors=kw.pop("mirrors"), index_mirrors=kw.pop("index_mirrors"),
                     wheelhouse=kw.pop("wheelhouse"), ca_bundle=kw.pop("ca_bundle"), netrc=kw.pop("netrc"))
        kw["inputs"] = _Inputs(site, *(kw.pop(n) for n in ("no_ca_bundle", "network", "locks_dir")))
        return f(**kw)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def _engine(setup: bool = True):
    """The engine the command works on (--engine, $ENVBUILD_ENGINE, else a Docker daemon that answers, else Podman);
    with `setup`, where no Docker engine answers (Debian, Ubuntu), offer to install and start one."""
    from envbuild.core.engine_select import choose
    from envbuild.host.engine_setup import ensure_engine

    ctx = click.get_current_context()
    engine = choose(ctx.find_root().obj.get("engine") if ctx.find_root().obj else None).engine
    if setup:
        ask = (lambda question: click.confirm(question, err=True)) if sys.stdin.isatty() else None
        ensure_engine(engine, yes=bool(ctx.obj and ctx.obj.get("yes")), ask=ask, echo=lambda line: click.echo(line, err=True))
    return engine


ENGINE_COMMANDS = ("build", "lock", "bump", "smoke", "clean", "run", "doctor", "publish", "pull", "sbom")


def _engine_option(command: click.Command) -> None:
    """--engine on each command that works on images: kept for _engine() (and doctor) to read."""
    def keep(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value:
            ctx.ensure_object(dict)
            ctx.find_root().obj["engine"] = value

    command.params.append(click.Option(
        ["--engine"], type=click.Choice(["docker", "podman", "auto"]), expose_value=False, callback=keep,
        help="docker, podman, or auto (Docker if it answers). Default: $ENVBUILD_ENGINE, else auto."))


def _packaged(matrix_path: str | None) -> bool:
    """Whether the command reads the matrix packaged with envbuild (no --matrix, $ENVBUILD_MATRIX, ./matrix.yaml),
    which it then says on stderr, once."""
    from envbuild.core import paths

    if matrix_path or paths.default_matrix() != str(paths.PACKAGED_MATRIX):
        return False
    ctx = click.get_current_context(silent=True)
    said = ctx.find_root().obj if ctx is not None and isinstance(ctx.find_root().obj, dict) else {}
    if not said.get("matrix_noted"):
        said["matrix_noted"] = True
        click.echo(f"envbuild: no matrix.yaml here: using the matrix packaged with envbuild ({paths.PACKAGED_MATRIX}); "
                   "`envbuild init DIR` writes it into a folder to start your own", err=True)
    return True


def _load(matrix_path: str | None, overrides: tuple[str, ...] = ()):
    """The matrix, with the site's base images (settings' base_images; --set still wins) for its backends."""
    from envbuild import matrix

    _packaged(matrix_path)
    path = matrix_path or matrix.default_path()
    bases = _site(matrix_path).base_images
    m = matrix.load(path, overrides)
    names = {b.name for b in m.backends}
    given = tuple(f"backends.{n}.base_image={image}" for n, image in bases.items() if n in names)
    return matrix.load(path, given + tuple(overrides)) if given else m


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


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


@cli.command("init")
@click.argument("directory", default=".", type=_PathArg(file_okay=False))
@click.option("--force", is_flag=True, help="Replace a matrix.yaml or matrix.metadata.json already there.")
def init_(directory: Path, force: bool) -> None:
    """Write the matrix packaged with envbuild into DIRECTORY, to start your team's own.

    Writes matrix.yaml and its metadata cache matrix.metadata.json (the pins' Requires-Python and torch); the
    commands run in that folder then use them.

    \b
    Examples:
      envbuild init my-images && cd my-images && envbuild validate
      envbuild init . --force
    """
    from envbuild.core import paths
    from envbuild.core.files import write_atomic

    sources = [paths.PACKAGED_MATRIX, paths.metadata_path(paths.PACKAGED_MATRIX)]
    targets = [directory / p.name for p in sources]
    there = [str(t) for t in targets if t.exists() or t.is_symlink()]
    if there and not force:
        raise InvalidInput(f"{', '.join(there)} already there: pass --force to replace, or name another folder")
    if directory.exists() and not directory.is_dir():
        raise InvalidInput(f"{directory}: not a folder")
    directory.mkdir(parents=True, exist_ok=True)
    for source, target in zip(sources, targets):
        if source.exists():
            write_atomic(target, source.read_bytes())
            click.echo(f"wrote {target}")
    click.echo(f"next: cd {directory}, edit matrix.yaml, then `envbuild validate` and `envbuild build --backend cpu` "
               "(build writes the Dockerfile it needs); commit matrix.yaml and locks/")


@cli.command()
@_matrix_options
def validate(matrix_path: str, overrides: tuple[str, ...]) -> None:
    """Check the matrix: exit 0 when valid, 2 with one located error per line when not.

    \b
    Examples:
      envbuild validate
      envbuild validate --matrix team/matrix.yaml
    """
    m = _load(matrix_path, overrides)
    click.echo(f"{m.path}: ok ({len(m.backends)} backends, {len(m.containerizable())} containerizable)")


@cli.command()
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Render only this backend (repeatable; default: all).")
@click.option("--output", "-o", default="dockerfiles", show_default=True, type=click.Path(file_okay=False), help="Where to write the Dockerfiles.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if any file is stale, missing or extra.")
@_matrix_options
def render(backends: tuple[str, ...], output: str, check: bool, matrix_path: str, overrides: tuple[str, ...]) -> None:
    """Render dockerfiles/<backend>.Dockerfile for each containerizable backend.

    Output is deterministic and written atomically; unchanged files are not touched.
    """
    from envbuild import render as r

    packaged = _packaged(matrix_path)
    m = _load(matrix_path, overrides)
    rendered = r.render(m, m.select(backends))
    out = Path(output)
    if packaged and not check:  # outside a checkout: say where the files land
        click.echo(f"envbuild: writing the Dockerfiles into {out.resolve()}", err=True)
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--output {output}: not a folder")
    if check:
        diffs = r.check(rendered, out, complete=not backends)
        for d in diffs:
            click.echo(str(d))
        if diffs:
            click.secho(f"{len(diffs)} Dockerfile(s) out of date: run `envbuild render`.", fg="red", err=True)
            sys.exit(1)
        click.echo(f"{len(rendered)} Dockerfile(s) up to date in {out}/")
        return
    changed = r.write(rendered, out)
    for name in rendered:
        click.echo(f"{'wrote' if name in changed else 'unchanged'} {out / name}")


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--compat", is_flag=True, help="The compatibility table: what each image needs of the host (minimum driver, architectures), its platforms, size and last smoke result.")
@click.option("--markdown", is_flag=True, help="With --compat: Markdown, as COMPATIBILITY.md holds it.")
@click.option("--manifest", type=_PathArg(dir_okay=False, exists=True), help="With --compat: take image sizes and smoke results from this manifest.")
@click.option("--check", "check_path", type=_PathArg(dir_okay=False), metavar="FILE", help="With --compat: write nothing; exit 1 when FILE is not the current Markdown table.")
@_matrix_options
def list_(as_json: bool, compat: bool, markdown: bool, manifest: Path | None, check_path: Path | None, matrix_path: str,
          overrides: tuple[str, ...]) -> None:
    """Every backend: what it is, its torch and transformers, its base image (in full: `show`, `--json`).

    With --compat, which image fits which host: the table in COMPATIBILITY.md (`--markdown`), or JSON for
    tools (`--json`); `--check COMPATIBILITY.md` fails when the file is stale, as `render --check` does for the
    Dockerfiles.

    \b
    Examples:
      envbuild list
      envbuild list --compat
      envbuild list --json | jq '.[].backend'
    """

    from envbuild.report import report

    m = _load(matrix_path, overrides)
    if (markdown or manifest or check_path) and not compat:
        raise click.UsageError("--markdown, --manifest and --check go with --compat")
    if compat:
        rows = report.compat_rows(m, manifests.load(manifest, must_exist=True) if manifest else None)
        text = report.compat_markdown(rows)
        if check_path:
            if read_host(check_path) != text:
                click.secho(f"{check_path} is not the current compatibility table: run `envbuild list --compat "
                            f"--markdown > {check_path}`.", fg="red", err=True)
                sys.exit(1)
            click.echo(f"{check_path} is up to date")
        elif as_json:
            _emit_json([{k: v for k, v in r.items()} for r in rows])
        elif markdown:
            click.echo(text, nl=False)
        else:
            click.echo(report.table(rows, report.COMPAT_COLUMNS))
        return
    if as_json:
        _emit_json([report.backend_summary(b, m) for b in m.backends])
        return
    click.echo(report.fitted_table(report.list_rows(m), report.LIST_COLUMNS))


@cli.command()
@click.argument("backend_arg", metavar="[BACKEND]", required=False)
@click.option("--backend", "-b", "backend", metavar="NAME", help="The backend to show (or name it as the argument).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--verbose", is_flag=True, help="Also the device string, the probe's checks, apt packages, env and CI runner labels.")
@_matrix_options
def show(backend_arg: str | None, backend: str | None, as_json: bool, verbose: bool, matrix_path: str,
         overrides: tuple[str, ...]) -> None:
    """One backend in full, with the exact `docker run` flags that expose its device.

    \b
    Examples:
      envbuild show rocm
      envbuild show --backend nvidia --json
      envbuild show cpu --verbose
    """
    from envbuild.report import report

    if backend_arg and backend and backend_arg != backend:
        raise click.UsageError(f"two backends: {backend_arg} and --backend {backend}; show takes one")
    if not (backend_arg or backend):
        raise click.UsageError("say which backend: envbuild show BACKEND (or --backend BACKEND)")
    m = _load(matrix_path, overrides)
    b = m.backend(backend_arg or backend)
    detail = report.backend_detail(m, b)
    if as_json:
        _emit_json(detail)
        return
    click.echo(report.describe(detail, verbose=verbose))


def _auto(m, *, native: bool = False) -> str:
    """`--backend auto`: the backend detected on this host (cpu when none), said on stderr with the evidence.
    Several accelerators, or (unless native) only a non-containerizable one, are errors that ask for a choice."""
    from envbuild.host import detect as d

    runtimes = None if native else d.docker_runtimes_from_engine()
    name, reason = d.choose(d.detect(m, docker_runtimes=runtimes), m, native=native)
    click.echo(f"auto: chose {name} ({reason})", err=True)
    return name


def _names(backends: tuple[str, ...]) -> list[str]:
    """--backend values: repeatable and comma-separated."""
    names = [n.strip() for b in backends for n in b.split(",") if n.strip()]
    return [n.lower() if n.lower() in ("auto", "all") else n for n in names]


# The one rule for --backend's default: a command that uses this host's accelerator (run, smoke, pull, doctor, env)
# defaults to `auto`, the backend detected here; one that makes or ships an image for any host (build, sbom, attest,
# publish) needs it named; one that ranges over the matrix (render, lock, outdated, bump, matrix) takes every backend.
def _choose(m, backends: tuple[str, ...], variant: str | None = None, *, for_host: bool = False) -> list:
    """The backends named by --backend (repeatable, comma-separated, 'all', or 'auto'). With `for_host` (build, smoke,
    pull, run: an image for this host) a family with variants (cuda) gives the newest variant this host runs, said
    on stderr, and --variant (or a variant's own name) chooses by hand; otherwise a name is that cell. 'all' is
    every cell."""
    names = _names(backends)
    if not names:
        raise click.UsageError("say which backend: --backend NAME (or --backend all, or --backend auto)")
    if "all" in names:
        if variant:
            raise click.UsageError("--variant chooses within one backend: name it (--backend cuda --variant 12.6)")
        return m.select(names)
    from envbuild.host import pick

    chosen: dict[str, Any] = {}
    for n in names:
        auto = n == "auto"
        b = m.select([_auto(m) if auto else n])[0]
        if variant:
            b = pick.variant(m, m.backend(b.family), variant)
        elif for_host and not auto and not b.variant_of and len(m.family(b)) > 1:
            try:
                picked = pick.resolve(m, b)
            except NoVariantFitsError as exc:
                family = ", ".join(v.name for v in m.family(b))  # not `names`: that is the loop's own list
                raise NoVariantFitsError(f"{exc} (--variant chooses one of {family} by hand)") from None
            click.echo(f"{b.name}: chose {picked.backend.name} ({picked.why}); --variant chooses another", err=True)
            if picked.note:  # the same one line as pick's: runs under minor version compatibility, and what it gives up
                click.echo(f"note: {picked.note}", err=True)
            b = picked.backend
        chosen.setdefault(b.name, b)
    return m.select(list(chosen))


def _tag_arg(value: str | None) -> str | None:
    """A tag as a registry takes it (128 characters of [A-Za-z0-9_.-], not starting with . or -), or exit 2."""
    from envbuild.core.imageref import TAG

    if value is not None and not TAG.match(value):
        raise click.BadParameter(f"{shown(value)} is not a tag (letters, digits, '_', '.', '-'; at most 128)",
                                 param_hint="'--tag'")
    return value


def _write_output(path: str, text: str) -> None:
    write_atomic(Path(path), scrub(text))  # a report holds no secret either


@cli.command()
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Backend to build, 'all', or 'auto' (the one detected here; see `envbuild detect`) (repeatable).")
@click.option("--variant", metavar="NAME", help="Which of the backend's variants: its name (cuda-cu126), suffix (cu126) or stack release (12.6) [default: the newest this host runs; see `envbuild pick`].")
@_matrix_options
@_input_options
@click.option("--locked", is_flag=True, help="Build only from a current lock: refuse, naming the command to run, when locks/BACKEND/OS-ARCH.txt is missing or stale (CI and publish use it).")
@click.option("--build-arg", "build_args", multiple=True, metavar="KEY=VALUE", help="Passed to the build (repeatable).")
@click.option("--image", "tags", multiple=True, metavar="IMAGE:TAG", help="Tag the image as this instead of the matrix's default tags (repeatable; one backend only); `smoke --image` tests it.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Extra image label, e.g. org.opencontainers.image.revision=SHA (repeatable).")
@click.option("--no-cache", is_flag=True, help="Build every layer afresh.")
@click.option("--platform", type=_PlatformArg(), help="Target platform, one the backend lists, e.g. linux/arm64: built natively, or under QEMU (binfmt) on another architecture; tagged REPO:BACKEND-ARCH when it is not this host's. One per build (each installs its own lock); `envbuild publish --platform` joins several in one image index.")
@click.option("--builder", help="A buildx builder to use, e.g. a remote BuildKit (needs buildx).")
@click.option("--cache-from", multiple=True, metavar="SPEC", help="BuildKit cache source, e.g. type=registry,ref=REG/cache:cpu or type=local,src=DIR (local caches need buildx; repeatable).")
@click.option("--cache-to", multiple=True, metavar="SPEC", help="BuildKit cache export, e.g. type=registry,ref=REG/cache:cpu,mode=max or type=local,dest=DIR (needs buildx; repeatable).")
@click.option("--jobs", "-j", default=1, show_default=True, type=click.IntRange(min=1), help="Build this many backends at once (one live status line each on a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the build results as JSON (the progress goes to stderr).")
@click.option("--json-file", "json_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write the build results as JSON to FILE.")
@click.option("--verbose", is_flag=True, help="Show the builder's full output.")
def build(backends, variant, matrix_path, overrides, inputs, locked, build_args, tags, labels,
          no_cache, platform, builder, cache_from, cache_to, jobs, as_json, json_path, verbose) -> None:
    """Build the image of one backend (or all) on the local Docker or Podman engine.

    The image installs exactly its lock (locks/BACKEND/OS-ARCH.txt); a missing or stale lock is resolved first
    (--locked refuses instead). Tags move only after a build succeeded; the full log is kept under .envbuild/logs/.

    \b
    Examples:
      envbuild build --backend cpu
      envbuild build --backend all --jobs 2
      envbuild build --backend cpu --mirror docker.io=mirror.example.com:5000
    """
    # Up to date without running the builder: when nothing that decides the image changed since the last good build
    # from this folder (Dockerfile, probe and wheels by content, every option, the values --build-arg NAME takes from
    # the environment, DOCKER_*/BUILDX_*, the local base) and its tags are in place; --no-cache, --platform,
    # --builder and --cache-to always build. With several backends it goes on past a failure and exits 1 if any
    # failed. --jobs N runs N builder processes on one daemon: BuildKit runs a shared step once.
    from envbuild import imagebuild as b

    m = _load(matrix_path, overrides)
    chosen = _choose(m, backends, variant, for_host=True)
    _listed(chosen, (platform,) if platform else ())
    if tags and len(chosen) > 1:
        raise click.UsageError("--image needs a single backend")
    opts = inputs.options(tags=tags, build_args=build_args, labels=labels, no_cache=no_cache, platform=platform,
                          builder=builder, cache_from=cache_from, cache_to=cache_to)
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    engine = _engine()
    if jobs > 1 and len(chosen) > 1:
        from envbuild.imagebuild.status import StatusBoard

        # -v wants every line of every builder: then no live board, only prefixed lines
        live = False if verbose else None
        with StatusBoard([x.name for x in chosen], stream=click.get_text_stream("stderr"), live=live) as board:
            built = b.build_many(m, chosen, opts, engine, jobs=jobs, echo=echo, verbose=verbose, locked=locked, board=board)
    else:
        try:
            built = b.build_many(m, chosen, opts, engine, echo=echo, verbose=verbose, locked=locked)
        except (BuildError, LockError) as exc:
            if not _offer_base(chosen[0], str(exc), engine, opts, echo):
                raise
            built = b.build_many(m, chosen, opts, engine, echo=echo, verbose=verbose, locked=locked)
        else:  # a failed build comes back as a result, with the base's ways out in its error
            if len(built) == 1 and not built[0].ok and _offer_base(chosen[0], built[0].error or "", engine, opts, echo):
                built = b.build_many(m, chosen, opts, engine, echo=echo, verbose=verbose, locked=locked)
    _report_builds(built, json_path, as_json)


def _offer_base(backend, error: str, engine, opts, echo) -> bool:
    """Where the base image cannot be had and envbuild can make it from the distribution's archive (`envbuild
    base`), offer that on a terminal, as the Docker engine install is (--yes: without asking); True once made."""
    from envbuild.core.distbase import MADE_LABEL, makeable
    from envbuild.core.imageref import mirror

    name = mirror(backend.base_image, opts.mirrors) if backend.base_image else ""
    if "base image" not in error or name != backend.base_image or not makeable(name):
        return False
    have = engine.image(name)
    if have is not None and MADE_LABEL in have.labels:
        return False  # made already: the failure is another one
    ctx = click.get_current_context()
    question = (f"{name} cannot be pulled. Make it from the distribution's archive with mmdebstrap now "
                f"(`envbuild base --backend {backend.name}`, 1 to 3 minutes)?")
    if not (ctx.obj and ctx.obj.get("yes")) and not (sys.stdin.isatty() and click.confirm(question, err=True)):
        return False
    from envbuild.workspace import base as bases

    for line in _error_lines(_scrub(error))[:1]:
        echo(f"{backend.name}: {shown(line)[:300]}")
    bases.make(bases.plan(backend), engine, echo=echo)
    return True


@cli.command("base")
@click.option("--backend", "-b", "backend", required=True, metavar="NAME", help="The backend whose base image to make (its base_image: Debian's or Ubuntu's).")
@click.option("--suite", metavar="NAME", help="The archive's suite (codename) to make it from [default: the image's, e.g. bookworm for debian:bookworm-slim].")
@click.option("--archive", "archive", metavar="URL", help="The distribution's archive, or a site's mirror of it (http, https or file://) [default: deb.debian.org, archive.ubuntu.com].")
@click.option("--output", "-o", type=_PathArg(dir_okay=False), metavar="FILE", help="Only write the root filesystem tarball to FILE (`docker import FILE IMAGE` loads it); load nothing.")
@click.option("--dry-run", is_flag=True, help="Say what would be made, from where, with which command; make nothing.")
@click.option("--no-cache", is_flag=True, help="Make it afresh even when a tarball from the same archive state and SOURCE_DATE_EPOCH is cached.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_matrix_options
def base_(backend, suite, archive, output, dry_run, no_cache, as_json, matrix_path, overrides) -> None:
    """Make a backend's Debian or Ubuntu base image from the distribution's archive, for a site no registry serves.

    mmdebstrap makes the minimal root filesystem (minbase) from the archive or your mirror of it, and the image is
    loaded into the Docker engine under the backend's base_image name (cpu: debian:bookworm-slim), so the next
    build finds it there. The same inputs give the same layer, bit for bit: SOURCE_DATE_EPOCH (default: the
    archive's Release date) fixes every time stamp. Vendor bases (CUDA, ROCm, Ascend, ...) and python:* images
    carry what no archive holds: refused, saying what to do instead. Needs mmdebstrap (apt-get install mmdebstrap).

    \b
    Examples:
      envbuild base --backend cpu --dry-run
      envbuild base --backend cpu --archive http://debian.mirror.example.com/debian
      envbuild base --backend cpu --output bookworm-slim.tar
    """
    from envbuild.workspace import base as bases

    m = _load(matrix_path, overrides)
    chosen = m.select([backend])[0]
    p = bases.plan(chosen, suite=suite, mirror=archive)
    if dry_run:
        if as_json:
            _emit_json({"backend": p.backend, "image": p.image, "suite": p.codename, "archive": p.mirror, "arch": p.arch,
                        "source_date_epoch": p.epoch, "command": p.argv("BASE.tar", p.epoch or "EPOCH")})
            return
        for line in p.describe():
            click.echo(line)
        return
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    made = bases.make(p, None if output else _engine(), output=output, echo=echo, cache=not no_cache)
    if as_json:
        _emit_json(made.to_json())
    else:
        where = str(output) if output else made.plan.image
        click.echo(f"{made.plan.backend}: {where} made from {p.mirror} {p.codename} (SOURCE_DATE_EPOCH={made.epoch}), "
                   f"layer {made.layer}{' (cached)' if made.cached else ''}")


@cli.command("lock")
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Backend to lock, or 'all' (repeatable) [default: all; with --check, the locks there are].")
@_matrix_options
@_input_options
@click.option("--upgrade", is_flag=True, help="Resolve afresh: take the newest releases the pins allow, keeping nothing of the old lock.")
@click.option("--upgrade-package", "upgrade_packages", multiple=True, metavar="NAME", help="Let this distribution move to its newest fitting release; everything else keeps its locked version where it fits (repeatable).")
@click.option("--check", is_flag=True, help="Write nothing, resolve nothing, read files only (no Docker, no network): exit 1 naming each stale lock, each missing platform, and a GPU backend's CPU-only torch.")
@click.option("--platform", type=_PlatformArg(), help="Lock only this platform, e.g. linux/arm64 [default: every platform the backend lists; another architecture than this host's resolves under QEMU].")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--verbose", is_flag=True, help="Show the resolver's full output.")
def lock_(backends, matrix_path, overrides, inputs, upgrade, upgrade_packages, check, platform, as_json, verbose) -> None:
    """Write locks/BACKEND/OS-ARCH.txt: per platform, every distribution the image adds to its base, pinned and hashed.

    Resolved in the backend's own base on the engine that builds, with the same --mirror, --wheelhouse,
    --ca-bundle and --netrc as build; an unchanged lock is not resolved again.

    \b
    Examples:
      envbuild lock --backend cpu
      envbuild lock --backend cpu --upgrade-package huggingface-hub
      envbuild lock --check            # CI: are the locks current?
    """
    # pip runs in the vendor's base, so its torch and plugin are kept, never replaced. Same inputs, same bytes. The
    # header records the platform and the base's registry digest for it (asked of the registry, or given by a base
    # pinned by digest), so a lock made on one machine is current on every other.
    from envbuild.report import report
    from envbuild.imagebuild import locking

    m = _load(matrix_path, overrides)
    chosen = _choose(m, backends) if backends else m.containerizable()
    _listed(chosen, (platform,) if platform else ())
    opts = inputs.options(platform=platform)
    if check:
        if upgrade or upgrade_packages:
            raise click.UsageError("--check writes nothing: it takes no --upgrade or --upgrade-package")
        results = locking.check(m, chosen, opts, require=bool(backends))
    else:
        echo = lambda line: click.echo(line, err=True)  # noqa: E731
        lock_opts = locking.LockOptions(upgrade=upgrade, upgrade_packages=upgrade_packages)
        results = locking.lock(m, chosen, opts, lock_opts, _engine(), echo=echo, verbose=verbose)
    if as_json:
        _emit_json([r.to_json() for r in results])
    else:
        for r in results:
            click.echo(report.lock_line(r))
        if check and not results:
            click.echo(f"no locks to check in {opts.locks_dir}/")
    bad = [r for r in results if r.status in report.LOCK_PROBLEMS]
    if check and bad:
        click.secho(f"{len(bad)} lock(s) out of date or wrong: run `envbuild lock`.", fg="red", err=True)
        sys.exit(1)


def _source_options(f):
    """Where outdated and bump ask: the same --mirror, --ca-bundle and --netrc as build."""
    for option in reversed([
        click.option("--mirror", "mirrors", multiple=True, metavar="FROM=TO", help="Ask a mirror for base image tags, e.g. docker.io=mirror.corp:5000 (repeatable)" + _SITE_NOTE + "."),
        click.option("--ca-bundle", type=_PathArg(dir_okay=False, exists=True), help="CA bundle for the indexes and registries [default: the site's settings, else $SSL_CERT_FILE, $REQUESTS_CA_BUNDLE or $PIP_CERT]."),
        click.option("--netrc", type=_PathArg(dir_okay=False, exists=True), help="A netrc file with package index credentials" + _SITE_NOTE + "."),
    ]):
        f = option(f)
    return f


def _sources(mirrors, ca_bundle, netrc, matrix_path=None, index_mirrors=None):
    """outdated, bump and metadata ask through the site's settings (mirrors, CA bundle, netrc), as build does."""
    from envbuild.maintain.sources import Sources

    site = _site(matrix_path, registry_mirrors=mirrors, ca_bundle=ca_bundle, netrc=netrc)
    return Sources.checked(site.registry_mirrors, site.path("ca_bundle"), site.path("netrc"),
                           site.index_mirrors if index_mirrors is None else index_mirrors)


def _outdated(m, backends, sources, quiet: bool):
    from envbuild.maintain.sources import outdated

    chosen = _choose(m, backends) if backends else m.containerizable()
    say = None if quiet else (lambda line: click.echo(f"envbuild: {line}", err=True))
    return outdated(m, chosen, sources, progress=say)


@cli.command("outdated")
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Only this backend's pins besides the shared ones (repeatable) [default: every containerizable backend].")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--markdown", is_flag=True, help="A Markdown table (a pull request body, a job summary).")
@click.option("--exit-code", is_flag=True, help="Exit 1 when something newer fits (CI: propose a bump).")
@_source_options
@_matrix_options
def outdated_(backends, as_json, markdown, exit_code, mirrors, ca_bundle, netrc, matrix_path, overrides) -> None:
    """What is newer than each pin, what of that fits, and why the rest does not.

    Every pin (transformers, accelerate, uv, extras, each backend's torch, plugin and base image) is asked
    of its own source: the package index it installs from (PEP 691/503, metadata per PEP 658 or the wheel)
    and the registry of the base image (same-shaped tags; a moved digest). A newer release fits when every
    rule holds: the plugin's pairing and torch range, the torch that transformers and accelerate declare,
    wheels for each platform, a vendor base that fixes torch. A source that cannot be reached is reported
    for its pins; the rest still answer. Writes nothing.

    \b
    Examples:
      envbuild outdated
      envbuild outdated --backend cuda --json
      envbuild outdated --exit-code --markdown > outdated.md   # CI
    """
    from envbuild.report import report

    m = _load(matrix_path, overrides)
    findings = _outdated(m, backends, _sources(mirrors, ca_bundle, netrc, matrix_path), quiet=as_json)
    if as_json:
        _emit_json([f.to_json() for f in findings])
    elif markdown:
        click.echo(report.markdown_table(report.outdated_rows(findings), report.OUTDATED_COLUMNS), nl=False)
    else:
        click.echo(report.table(report.outdated_rows(findings), report.OUTDATED_COLUMNS))
        unreachable = [f for f in findings if f.error]
        if unreachable:
            click.secho(f"{len(unreachable)} pin(s) could not be asked: their source did not answer.", fg="yellow", err=True)
    if exit_code and any(f.newer or f.also for f in findings):
        sys.exit(1)


@cli.command("metadata")
@click.option("--refresh", is_flag=True, help="Read the pins' metadata from their indexes and write the cache (else: check it, offline).")
@_source_options
@_matrix_options
def metadata_(refresh, mirrors, ca_bundle, netrc, matrix_path, overrides) -> None:
    """The metadata cache beside the matrix (matrix.yaml -> matrix.metadata.json): each pin's Requires-Python and
    what it requires of torch, read from its index (PEP 691/658, else the wheel). `validate` holds every backend's
    Python and torch to it with no network; `bump` refreshes it with the pins it moves.

    \b
    Examples:
      envbuild metadata              # offline: name each pin the cache lacks
      envbuild metadata --refresh    # ask the indexes, write the cache
    """
    from envbuild import matrix as matrix_mod
    from envbuild.matrix import facts

    if overrides:
        raise click.UsageError("metadata reads the matrix file itself: it takes no --set")
    path = matrix_path or matrix_mod.default_path()
    if refresh:
        from envbuild.maintain.sources import metadata

        sources = _sources(mirrors, ca_bundle, netrc, matrix_path)
        cache, errors, changed = metadata.update(path, sources.index, say=lambda line: click.echo(f"envbuild: {line}", err=True))
        for e in errors:
            click.secho(f"not asked: {e}", fg="yellow", err=True)
        click.echo(f"{'wrote' if changed else 'unchanged'} {cache.path}")
    m = _load(path)  # validated against the cache
    cache = facts.read(facts.path_for(path))
    if cache is None:
        click.secho(f"no metadata cache beside {path}: run `envbuild metadata --refresh`", fg="red", err=True)
        sys.exit(1)
    lacking = facts.missing(m, cache)
    for line in lacking:
        click.echo(f"missing: {line}")
    if lacking:
        click.secho(f"{len(lacking)} pin(s) unknown to {cache.path}: run `envbuild metadata --refresh`.", fg="red", err=True)
        sys.exit(1)
    click.echo(f"{cache.path}: every pin of {path} is known and fits its backends")


@cli.command("bump")
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Only this backend's pins besides the shared ones (repeatable).")
@click.option("--only", "only", multiple=True, metavar="FIELD", help="Only these pins: transformers, accelerate, uv, torch, plugin, base_image, or a dotted field such as backends.cuda.base_image (repeatable).")
@click.option("--to", "to", metavar="VERSION", help="Set the one pin --only names to this version (checked like any other).")
@click.option("--dry-run", is_flag=True, help="Print the diff; write nothing.")
@click.option("--output", "-o", "dockerfiles", default="dockerfiles", show_default=True, type=_PathArg(file_okay=False), help="Where the Dockerfiles are rendered.")
@click.option("--no-lock", is_flag=True, help="Do not refresh the locks that exist (then `envbuild lock --check` names them).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_matrix_options
@_input_options
def bump_(backends, only, to, dry_run, dockerfiles, no_lock, as_json, matrix_path, overrides, inputs) -> None:
    """Apply what `outdated` finds to fit: edit matrix.yaml in place, render, refresh the locks.

    Only the changed values differ in matrix.yaml: every comment, key order and layout stays. The edited
    matrix is validated, then it and the Dockerfiles are written together (or nothing is); the locks of
    the backends whose images change are refreshed where locks/BACKEND/OS-ARCH.txt exists. Prints the diff.

    \b
    Examples:
      envbuild bump --dry-run
      envbuild bump --only transformers --only uv
      envbuild bump --only backends.cuda.base_image
      envbuild bump --only transformers --to VERSION
    """
    from envbuild import matrix as matrix_mod
    from envbuild.maintain.sources import bump as bumping

    if overrides:
        raise click.UsageError("bump edits the matrix file itself: it takes no --set")
    bumping.check_only(only)
    bumping.check_to(only, to)  # before any index is asked
    path = Path(matrix_path or matrix_mod.default_path())
    if not dry_run:
        bumping.working(path)  # before any source is asked
    m = _load(str(path))
    opts = inputs.options()
    sources = _sources(inputs.mirrors, opts.ca_bundle, inputs.netrc, matrix_path, inputs.site.index_mirrors)
    done = bumping.run(path, m, _choose(m, backends) if backends else m.containerizable(), sources, opts, _engine,
                       dockerfiles=dockerfiles, only=only, to=to, dry_run=dry_run, no_lock=no_lock,
                       progress=None if as_json else (lambda line: click.echo(f"envbuild: {line}", err=True)),
                       echo=lambda line: click.echo(line, err=True))
    findings, new, result = done.findings, done.new, done.result
    locks_refreshed, locks_left = done.locks_refreshed, done.locks_left
    if as_json:
        _emit_json(done.to_json(dry_run))
        return
    if not new:
        click.echo("nothing to bump: every pin is the newest that fits (see `envbuild outdated`)")
        for f in findings:  # what is newer, and why it was not proposed
            if f.newest and f.why and f.newest not in (f.current, f.fits):
                click.echo(f"  {f.field} stays {f.current}: {'; '.join(f.why)}")
        return
    click.echo(result.diff, nl=False)
    if dry_run:
        click.echo(f"(dry run: {path} and {dockerfiles}/ left as they are)")
        return
    for written in result.written:
        click.echo(f"wrote {written}")
    for r in locks_refreshed:
        click.echo(f"{r.backend}: {r.path} {r.status}")
    for left in locks_left:
        why = " (--no-lock)" if no_lock else ""
        click.echo(f"not refreshed: {left}{why}: resolve it with `envbuild lock` on its backend's runner")
    if locks_left and not no_lock:
        sys.exit(1)


def _report_builds(results: list, json_path: str | None, as_json: bool = False) -> None:
    from envbuild.report import report

    for result in results:
        if result.ok:
            click.echo(report.build_line(result), err=as_json)
        else:
            click.secho(report.build_line(result), fg="red", err=True)
            if result.log:
                click.echo(f"{result.backend}: full log: {result.log}", err=True)
    if json_path:
        _write_output(json_path, json.dumps([r.to_json() for r in results], indent=2) + "\n")
    if as_json:
        _emit_json([r.to_json() for r in results])
    elif len(results) > 1:
        click.echo(report.table(report.build_rows(results), report.BUILD_COLUMNS))
    if not all(r.ok for r in results):
        sys.exit(1)


@cli.command()
@click.option("--backend", "-b", "backends", multiple=True, default=["auto"], show_default=True, metavar="NAME", help="Backend to test, 'all', or 'auto' (the one detected here; see `envbuild detect`) (repeatable).")
@click.option("--variant", metavar="NAME", help="Which of the backend's variants: its name (cuda-cu126), suffix (cu126) or stack release (12.6) [default: the newest this host runs; see `envbuild pick`].")
@click.option("--image", callback=_image_ref, help="Image to test [default: the backend's REPO:BACKEND tag from the matrix].")
@click.option("--model", default="synthetic", show_default=True, help="'synthetic' (a tiny random model, offline), a local model directory (mounted read-only) or a hub id.")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(min=1), help="Seconds before the container is stopped and the smoke fails.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON, with the probe's report (the progress goes to stderr).")
@click.option("--json-file", "json_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write the result as JSON to FILE, with the probe's report.")
@click.option("--junit-file", "junit_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write a JUnit XML report for CI to FILE.")
@click.option("--ignore-host", is_flag=True, help="Skip the check that this host's driver and device architecture can run the image (see `envbuild doctor`).")
@click.option("--cache", metavar="DIR|VOLUME", help="Mount this at /cache, as `envbuild run --cache` does: the probe's model and compiled kernels stay there, and the next smoke reuses them (a folder with a '/', or a volume name, e.g. envbuild-cache) [default: a new volume, removed afterwards].")
@click.option("--platform", type=_PlatformArg(), help="Test the image of this platform, e.g. linux/arm64 [default: this host's]: REPO:BACKEND-ARCH when it is not this host's architecture, run under QEMU; the result says so.")
@_matrix_options
def smoke(backends, variant, image, model, timeout, as_json, json_path, junit_path, ignore_host, cache, platform, matrix_path,
          overrides) -> None:
    """Start the image with the backend's device flags and prove a model runs on the device.

    The probe checks the device is visible (never falling back to CPU) and the pins, loads the model on the
    device, runs a forward pass and compares it with the CPU. Exit 0 only when every check passed.

    \b
    Examples:
      envbuild smoke                                   # the backend detected here
      envbuild smoke --backend cpu --json-file smoke.json --junit-file junit.xml
    """
    # One container, one run, as a uid the image does not know with group 0 (as OpenShift runs images); always
    # removed. A causal LM also generates greedy tokens; torch.compile is checked where the matrix asks. Under QEMU
    # (another architecture) the result says so and timings and torch.compile are skipped with the reason.
    from envbuild.report import report

    m = _load(matrix_path, overrides)
    chosen = _choose(m, backends, variant, for_host=True)
    _listed(chosen, (platform,) if platform else ())
    if image and len(chosen) > 1:
        raise click.UsageError("--image needs a single backend")
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    smoking.model_args(model)  # bad input before any engine
    if cache is not None:
        smoking.runner.cache_source(cache)
    results = smoking.smoke_each(m, chosen, _engine(), keep_going=len(chosen) > 1 or bool(as_json or json_path or junit_path),
                           failed=lambda exc: click.secho(f"Error: {exc}", fg="red", err=True),
                           done=lambda result: click.echo(report.smoke_summary(result), err=as_json), image=image, model=model,
                           timeout=timeout, echo=echo, ignore_host=ignore_host, cache=cache, platform=platform)
    doc = results[0].to_json() if len(results) == 1 else [r.to_json() for r in results]
    if json_path:
        _write_output(json_path, json.dumps(doc, indent=2) + "\n")
    if as_json:
        _emit_json(doc)
    if junit_path:
        _write_output(junit_path, report.junit_xml(results))
    if not all(r.ok for r in results):
        sys.exit(1)


@cli.command()
@click.option("--containers-only", is_flag=True, help="Keep the images: remove only stopped envbuild containers.")
@click.option("--build-cache", is_flag=True,
              help="Also remove envbuild's BuildKit cache mounts (its uv and pip caches), nobody else's; every checkout on this engine shares them.")
@click.option("--all", "every", is_flag=True, help="Every envbuild-made container and untagged image on this engine, whichever checkout made it [default: only this folder's].")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def clean(containers_only: bool, build_cache: bool, every: bool, dry_run: bool, as_json: bool) -> None:
    """Remove what envbuild left on the engine: its stopped containers (a daemon killed during a smoke test
    leaves them) and its untagged images (build results a newer build replaced). By default only this checkout's
    (the project folder you run it in: its containers by their label, its images by the list its builds keep in
    .envbuild/), so an engine other checkouts share loses none of theirs; --all takes every envbuild-made one.
    Running containers, tagged images and anything envbuild did not make are never touched; an image a container
    still uses stays. With --build-cache, the cache mounts of envbuild's install steps go too (the next build
    downloads again): the way out when a build fails in a way a broken cache can cause.

    \b
    Examples:
      envbuild clean --dry-run
      envbuild clean
      envbuild clean --all --containers-only
    """
    done = cleaning.clean(_engine(), images=not containers_only, build_cache=build_cache, every=every, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps(done.to_json(), indent=2))
        return
    verb = "would remove" if dry_run else "removed"
    for name in done.containers:
        click.echo(f"{verb} container {name}")
    for image in done.images:
        click.echo(f"{verb} image {image[:19]}")
    for record in done.build_caches:
        click.echo(f"{verb} build cache {record}")
    for kept in done.kept:
        click.echo(f"kept {kept}" if kept.startswith("build cache") else f"kept image {kept}")
    where = "on this engine" if every else "from this checkout (--all: every checkout's on this engine)"
    if not (done.containers or done.images or done.build_caches):
        click.echo(f"nothing to clean {where}")
    elif dry_run:
        click.echo(f"nothing removed (--dry-run); the above is what `envbuild clean{' --all' if every else ''}` removes {where}")


# --- signing and verifying (envbuild/ship/trust) ---------------------------------------------------------------

SKIP_VERIFY_HELP = ("Do not verify the image even though a key is configured: its signature, its signed attestations "
                    "(SBOM, provenance) and its signed smoke result are not checked.")


def _verify_options(f):
    f = click.option("--insecure-skip-verify", is_flag=True, help=SKIP_VERIFY_HELP)(f)
    f = click.option("--key", metavar="FILE", help="Verify the image with this public key (cosign.pub) first, and refuse it unless signed by it with a passing smoke attestation [default: $ENVBUILD_VERIFY_KEY, else the matrix's trust.public_key].")(f)
    return f


def _prompt():
    """Asks for a passphrase on a terminal (hidden); None where there is none to ask on."""
    if not sys.stdin.isatty():
        return None
    return lambda question: click.prompt(question, hide_input=True, err=True)


def _signing_key(given: str | None):
    from envbuild.ship.trust import keys

    return keys.signing_key(given, prompt=_prompt())


def _verify_key(given: str | None, skip: bool, matrix=None):
    """The public key pull and run verify with (--key, $ENVBUILD_VERIFY_KEY, the matrix's trust.public_key), or
    None; with --insecure-skip-verify, None and a warning."""
    from envbuild.ship.trust import keys

    public = keys.verify_key(given, default=matrix.trust_key if matrix is not None else None)
    if skip:
        if public is not None:
            click.secho("warning: --insecure-skip-verify: the image's signature, its signed attestations (SBOM, provenance) "
                        "and its signed smoke result are NOT checked", fg="yellow", err=True)
        return None
    return public


@cli.command("run", context_settings={"allow_interspersed_args": False})
@click.option("--backend", "-b", default="auto", show_default=True, metavar="NAME", help="The backend whose image to run, or 'auto' (the one detected here).")
@click.option("--variant", metavar="NAME", help="Which of the backend's variants: its name (cuda-cu126), suffix (cu126) or stack release (12.6) [default: the newest this host runs; see `envbuild pick`].")
@click.option("--image", callback=_image_ref, help="The image [default: the backend's REPO:BACKEND tag from the matrix].")
@click.option("--cache", metavar="DIR|VOLUME", help="What to mount at /cache (Hugging Face downloads, compiled kernels): a folder (with a '/', e.g. ./cache) or a volume name [default: the volume envbuild-cache].")
@click.option("--volume", "-v", "volumes", multiple=True, metavar="SRC:DST[:ro]", help="Mount a folder or volume, as in docker run (repeatable).")
@click.option("--env", "-e", "env", multiple=True, metavar="NAME[=VALUE]", help="Pass a variable; NAME alone takes its value from here, never printed (repeatable).")
@click.option("--workdir", type=click.Path(file_okay=False, exists=True), help="The folder mounted at /workspace, the working directory [default: the current folder].")
@click.option("--no-workdir", is_flag=True, help="Mount no folder at /workspace.")
@click.option("--tty/--no-tty", default=None, help="Allocate a terminal [default: when this one is a terminal].")
@click.option("--dry-run", is_flag=True, help="Print the exact `docker run` line (secret values masked) and run nothing.")
@click.option("--ignore-host", is_flag=True, help="Skip the check that this host's driver and device architecture can run the image (see `envbuild doctor`).")
@_verify_options
@_matrix_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run_(backend, variant, image, cache, volumes, env, workdir, no_workdir, tty, dry_run, ignore_host, key, insecure_skip_verify,
         matrix_path, overrides, command) -> None:
    """Work in a backend's image: `envbuild run [OPTIONS] [-- COMMAND ...]`, a shell without a command.

    The container gets the backend's device flags, a cache at /cache (downloads and compiled kernels stay), the
    current folder at /workspace (files written there are yours) and a terminal when this is one. The exit status
    is the command's; the container is removed afterwards.

    \b
    Examples:
      envbuild run --backend cuda -- python train.py
      envbuild run -e HF_TOKEN --cache ./cache -- python -c "import torch"
      envbuild run --dry-run --backend rocm
    """
    # Shared memory from the matrix; your uid and group 0 in the container; Ctrl-C and SIGTERM reach the command.
    # The host is checked first as for `smoke`; with --key (or $ENVBUILD_VERIFY_KEY) the image must verify
    # (signature, attestations, passed smoke) before it starts.

    m = _load(matrix_path, overrides)
    b = _choose(m, (backend,), variant, for_host=True)[0]
    opts = runner.RunOptions(image=image, cache=cache, volumes=volumes, env=env, workdir=workdir,
                             mount_workdir=not no_workdir, command=command, tty=tty)
    public = None if dry_run else _verify_key(key, insecure_skip_verify, m)
    sys.exit(runner.run(m, b, opts, _engine(setup=False) if dry_run else _engine(), dry_run=dry_run, ignore_host=ignore_host, key=public))


def _variant_fits(m, root: Path | None) -> list[dict[str, Any]]:
    """Every variant of every family that has some, with whether it fits this host (read under root)."""
    from envbuild.matrix import compat

    out = []
    for b in m.backends:
        members = m.family(b)
        if b.variant_of or len(members) < 2 or not b.containerizable:
            continue
        choice = compat.choose_variant(members, root or Path("/"))
        out += [{"family": b.name, **f.to_json(), "chosen": f.backend is choice.chosen} for f in choice.fits]
    return out


@cli.command()
@click.option("--backend", "-b", default="auto", show_default=True, metavar="NAME", help="A backend (cuda: the newest of its variants this host runs), a variant by name (cuda-cu126), or 'auto' (the one detected here, or the kind --gpu names).")
@click.option("--variant", metavar="NAME", help="Choose the variant by hand: its name (cuda-cu126), suffix (cu126) or stack release (12.6); refused when this host cannot run it.")
@click.option("--driver", metavar="VERSION", help="Answer for a host with this GPU driver (535.104.05, as nvidia-smi prints it), e.g. the compute nodes seen from a login node: nothing of this machine is read.")
@click.option("--gpu", "gpus", multiple=True, metavar="ARCH", help="A GPU of the host described (repeatable, one per kind): its architecture (8.0, sm_80, gfx942) or a product name (A100, H100, V100, MI300X). Nothing of this machine is read.")
@click.option("--arch", "host_arch", type=click.Choice(["amd64", "arm64"]), help="With --driver/--gpu: the described host's CPU architecture, whose image carries its own GPU architectures (CUDA 13 on arm64 adds sm_110) [default: amd64].")
@click.option("--for", "tool", type=click.Choice(["docker", "podman", "apptainer", "enroot", "kubernetes"]), help="Print how to fetch and run the image with this tool (enroot: Slurm with pyxis; kubernetes: a pod spec as YAML) instead of the bare reference.")
@click.option("--root", type=_PathArg(file_okay=False, exists=True), help="Read this folder as the host's root (its proc/, sys/, dev/ and PATH folders) instead of /, as `envbuild detect --root` does.")
@click.option("--manifest", type=_PathArg(dir_okay=False), help="Print the image by the digest this manifest records (REPO@sha256:...), as `envbuild publish --manifest` wrote it.")
@click.option("--json", "as_json", is_flag=True, help="Print the choice as JSON: the image, native or minor-version, each GPU's verdict and every variant with why it fits or not (also when none fits).")
@_matrix_options
def pick(backend, variant, driver, gpus, host_arch, tool, root, manifest, as_json, matrix_path, overrides) -> None:
    """Print the image that fits this host (or the host --driver and --gpu describe), before any pull.

    One reference on stdout, for scripts, Kubernetes manifests and CI. A backend with variants (cuda: CUDA 13.2, 13.0
    and 12.6) gives the newest that the driver runs natively and every GPU of the host is built for; else the newest
    that runs under CUDA minor version compatibility (any 12.x on driver >= 525.60.13, 13.x on >= 580.65.06), said on
    stderr with what it gives up. When none fits it exits 1, naming the driver, the lowest upgrade that gives an image
    and what is left without one. A driver it cannot read is a warning, not a refusal: the newest is printed.

    \b
    Examples:
      envbuild pick
      docker pull "$(envbuild pick --backend cuda)"
      envbuild pick --driver 535.104.05 --gpu A100 --for enroot   # from a Slurm login node
      envbuild pick --gpu gfx942 --for kubernetes > pod.yaml
      envbuild pick --backend cuda --manifest envbuild-manifest.json --json
    """
    from envbuild.host import detect as d, pick as picking

    m = _load(matrix_path, overrides)
    described = picking.describe(driver, gpus, f"linux/{host_arch}" if host_arch else None)
    if host_arch and described is None:
        raise click.UsageError("--arch describes a host with --driver/--gpu; without them pick reads this one")
    if described is not None and root is not None:
        raise click.UsageError("--root reads a host; --driver and --gpu describe one: give one or the other")
    said, absent = None, None
    if backend.lower() == "auto" and described is not None:
        b = picking.family_for(m, described)
    elif backend.lower() == "auto":
        det = d.detect_host(m, root)
        name, said = d.choose(det, m, root=root or "/")
        b = m.backend(m.backend(name).family)
    else:
        b = m.select([backend])[0]
        if described is None and b.host is not None:  # no GPU of this kind here: say so, as detect knows
            det = d.detect_host(m, root)
            if b.family not in det.detected:
                absent = (f"this host has no {b.description or b.family} (found none of: {'; '.join(det.finding(b.family).missing) or 'its signs'}); "
                          "for the host the image is meant for, say --driver VERSION --gpu ARCH")
    try:
        picked = picking.resolve(m, b, variant_text=variant, root=root or "/", described=described)
    except NoVariantFitsError as exc:
        if as_json and exc.data is not None:
            _emit_json({**exc.data, "detected": said})
            sys.exit(1)
        raise
    ref = picking.image_ref(m, picked.backend, Path(manifest) if manifest else None)
    warnings = ([absent] if absent else []) + list(picked.warnings)
    if as_json:
        _emit_json({**picked.to_json(ref), "warnings": warnings, "detected": said})
        return
    why = said if said and picked.choice is None else picked.why
    if absent:
        click.echo(f"warning: {absent}", err=True)
    click.echo(f"{'warning: ' if picked.warnings else ''}{picked.backend.name}: {why}", err=True)
    if picked.note:
        click.echo(f"note: {picked.note}", err=True)
    if tool:
        from envbuild.host import launch

        if tool == "enroot":  # older pyxis cannot read an image index: the platform's own image
            from envbuild.core.platform import host_platform, platform_arch

            ref = picking.single_platform_ref(m, picked.backend, host_arch or platform_arch(host_platform()),
                                              Path(manifest) if manifest else None)
        click.echo(launch.how_to_run(picked.backend, ref, tool))
    else:
        click.echo(ref)


@cli.command("detect")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: every backend with its evidence and what is missing.")
@click.option("--root", type=_PathArg(file_okay=False, exists=True), help="Read this folder as the host's root (its dev/, sys/ and PATH folders) instead of /, e.g. a fake host for tests; the Docker engine is then not asked.")
@_matrix_options
def detect_(as_json: bool, root: Path | None, matrix_path: str, overrides: tuple[str, ...]) -> None:
    """Which backends this host can run, each with its evidence.

    Evidence: device nodes (/dev), PCI vendor IDs and classes (/sys/bus/pci), vendor tools on PATH,
    container runtimes registered with the Docker daemon, and macOS on arm64 for mps. Needs no Docker:
    without a daemon the runtimes are "not checked". cpu is always available. Also says what
    `--backend auto` would choose.

    \b
    Examples:
      envbuild detect
      envbuild detect --json
    """

    from envbuild.report import report
    from envbuild.host import detect as d

    m = _load(matrix_path, overrides)
    det = d.detect_host(m, root)
    if as_json:
        _emit_json({**det.to_json(), "variants": _variant_fits(m, root), **report.root_facts(root)})
        return
    click.echo(report.detect_text(det))
    if root is not None:  # which facts came from where
        click.echo(f"(--root {root}: files read under it, nothing run from it; vendor tools found there are not run; "
                   "the Docker engine not asked)")
    try:
        name, reason = d.choose(det, m, root=root or "/")
        click.echo(f"--backend auto would choose {name} ({reason})")
    except EnvbuildError as exc:
        click.echo(str(exc))


@cli.command()
@click.option("--backend", "-b", default="auto", show_default=True, metavar="NAME", help="The backend to check, or 'auto' (the one detected on this host).")
@click.option("--registry", metavar="REGISTRY", help="Also check push credentials for this registry (a host or a repository such as ghcr.io/org/envbuild).")
@click.option("--publish", is_flag=True, help="Also check push credentials for the matrix's image repository.")
@click.option("--root", type=_PathArg(file_okay=False, exists=True), help="Read device nodes, PCI devices and groups under this folder instead of / (a fake host for tests).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_matrix_options
def doctor(backend: str, registry: str | None, publish: bool, root: Path | None, as_json: bool, matrix_path: str,
           overrides: tuple[str, ...]) -> None:
    """Whether this host can build a backend's image, and run it, with a fix for each failure.

    Building needs the Docker daemon, BuildKit, disk and the base image's registry; running also needs the
    device, its container runtime, device nodes and groups. With --publish (or --registry) it also asks the
    registry to publish to and finds push credentials. Exit 1 when a blocking check fails.

    \b
    Examples:
      envbuild doctor                      # the backend detected here
      envbuild doctor --backend rocm --publish
    """
    # For mps (no container can reach it) it checks the platform and Python's venv instead.

    from envbuild.report import report as reports
    from envbuild.host import doctor as doc

    m = _load(matrix_path, overrides)
    name = _auto(m, native=True) if backend == "auto" else backend
    if publish and not registry:
        registry = _site(matrix_path).get("registry") or m.image.repository
    if registry:
        registry = check_repository(registry)
    report = doc.diagnose(m, m.backend(name), registry=registry, root=root or "/", site=_site(matrix_path),
                          connector=functools.partial(doc.connect, engine_name=(click.get_current_context().find_root().obj or {}).get("engine")))
    if as_json:
        _emit_json({**report.to_json(), **reports.root_facts(root)})
    else:
        click.echo(reports.doctor_text(report))
        if root:  # which facts came from where
            click.echo(f"(--root {root}: device nodes, PCI, groups and driver files read under it; programs such as "
                       "nvidia-smi only this machine's, none run from under it; the engine is this machine's)")
    if not report.ok:
        sys.exit(1)


@cli.command("config")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: the files read and each setting with its origin.")
@click.option("--matrix", "matrix_path", default=None, type=click.Path(dir_okay=False), help=MATRIX_HELP + " Its folder's envbuild.toml is the project's settings.")
def config_(as_json: bool, matrix_path: str | None) -> None:
    """Show every site setting in effect and where it came from.

    A site's mirrors, wheel folder, CA bundle, netrc, default registry and base images live in
    $XDG_CONFIG_HOME/envbuild/config.toml (the user's; default ~/.config/envbuild/config.toml) and envbuild.toml
    beside the matrix (the project's), and in ENVBUILD_* variables; a flag wins over a variable, a variable
    over the project's file, the project's over the user's. An unknown key is refused with its file and line.
    A netrc's contents are never shown. See docs/how-to/site-settings.md.

    \b
    Examples:
      envbuild config
      ENVBUILD_WHEELHOUSE=/srv/wheels envbuild config --json
    """
    from envbuild.core import settings
    from envbuild.report import report

    site = _site(matrix_path)
    files = {"user": str(settings.user_file()), "project": str(settings.project_file(matrix_path))}
    rows = report.settings_rows(site.rows())
    if as_json:
        _emit_json({"files": {k: {"path": v, "read": v in site.files} for k, v in files.items()}, "settings": rows})
        return
    for who, path in files.items():
        click.echo(f"{who} settings: {path}{'' if path in site.files else ' (none there)'}")
    click.echo(report.table([{**r, "value": "-" if r["value"] is None else r["value"]} for r in rows],
                            ["key", "value", "origin"]))


@cli.command("env")
@click.option("--backend", "-b", default="auto", show_default=True, metavar="NAME", help="cpu, mps (on a Mac with Apple Silicon), a pip-torch backend (cuda, xpu, npu, tpu), or 'auto' (the one detected here).")
@click.option("--dir", "directory", required=True, type=_PathArg(file_okay=False), help="Where to make the environment (must not exist, or be empty, unless --force).")
@click.option("--python", "python", metavar="EXE", help="The interpreter to base it on [default: the one running envbuild].")
@click.option("--force", is_flag=True, help="Replace the virtual environment already at --dir.")
@click.option("--no-probe", is_flag=True, help="Do not run the probe once the environment is made.")
@click.option("--dry-run", is_flag=True, help="Print the exact commands, for any backend and platform; create nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (the plan with --dry-run; else the result with the probe's report).")
@click.option("--verbose", is_flag=True, help="Show pip's full output.")
@_matrix_options
def env(backend: str, directory: Path, python: str | None, force: bool, no_probe: bool, dry_run: bool, as_json: bool,
        verbose: bool, matrix_path: str, overrides: tuple[str, ...]) -> None:
    """A native virtual environment with the image's pins, for where no container can go.

    For mps (Docker on macOS cannot reach Apple's GPU), or when you want no container. It gets
    torch for this platform from the backend's index (and the plugin at its pin), transformers and
    accelerate at the matrix's pins, and the image's probe as DIR/bin/envbuild-probe; DIR/envbuild-env.json
    records the pins. It is made in DIR.tmp-XXXXXX and moved to DIR only once every pin has landed;
    then the probe runs (exit 1 if it fails). Backends whose torch comes only inside the vendor's
    image (rocm, hpu, neuron, mlu, musa) are refused: use their container.

    \b
    Example:
      envbuild env --backend cpu --dir .venv-cpu
    """

    from envbuild.report import report
    from envbuild.workspace import venv

    m = _load(matrix_path, overrides)
    b = m.backend(_auto(m, native=True) if backend == "auto" else backend)
    if dry_run:
        p = venv.plan(m, b, directory, python=python)
        if as_json:
            _emit_json({**p.to_json(), "dry_run": True})
        else:
            click.echo(p.script())
        return
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    result = venv.create(m, b, directory, python=python, force=force, probe=not no_probe, echo=echo, verbose=verbose)
    if as_json:
        _emit_json(result.to_json())
    else:
        click.echo(report.env_text(result))
    if not result.ok:
        sys.exit(1)


MANIFEST_HELP = "The manifest of published images [default: ./envbuild-manifest.json]."


def _append_output(path: str, text: str) -> None:
    """Append (a CI job summary collects every step's lines)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(safe(text))


@cli.command()
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Backend to publish, or 'all' (repeatable).")
@click.option("--registry", metavar="REPOSITORY", help="Where to push, e.g. ghcr.io/org/envbuild or localhost:5000/envbuild [default: the site's registry setting, else the matrix's image.repository].")
@click.option("--image", callback=_image_ref, help="The local image to publish (one backend) [default: the backend's REPO:BACKEND tag from the matrix].")
@click.option("--manifest", type=_PathArg(dir_okay=False), help=MANIFEST_HELP)
@click.option("--smoke-json", "smoke_json", multiple=True, type=_PathArg(dir_okay=False, exists=True), help="`envbuild smoke --json` output for this image (one per platform: repeatable): summarized into the manifest; a failed result refuses the push, and a platform of an index (--platform, --no-index) needs its own.")
@click.option("--platform", "platforms", multiple=True, type=_PlatformArg(many=True), help="Publish these platforms' images as one image index under the backend's tags (repeatable or comma-separated, e.g. linux/amd64,linux/arm64); each is checked and smoke-tested first, a failed one is left out and the publish exits 1.")
@click.option("--no-index", is_flag=True, help="With --platform: push the platform's image (REG:PINNED-ARCH) and record it, but no index: a native runner's part, joined later with --index-from.")
@click.option("--index-from", "index_from", multiple=True, type=_PathArg(dir_okay=False, exists=True), help="Manifests written by per-platform publishes (--no-index): push one index of their platforms under the backend's tags (repeatable).")
@click.option("--force", is_flag=True, help="Push even when the smoke result failed or the image's labels disagree with the matrix (the manifest says so).")
@click.option("--rebuild", is_flag=True, help="Push the image even when the registry holds its content already (its REG:BACKEND-in-KEY tag); without it only the tags move there.")
@click.option("--summary", "summary_path", type=click.Path(dir_okay=False), help="Append a Markdown table of what landed to this file, e.g. $GITHUB_STEP_SUMMARY.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--sign-key", metavar="FILE|env://VAR", help="Sign every pushed digest and attest the image with this cosign key [default: $ENVBUILD_SIGNING_KEY, the key's text, when set]; passphrase from $ENVBUILD_KEY_PASSWORD or $COSIGN_PASSWORD, else asked.")
@_matrix_options
def publish(backends, registry, image, manifest, smoke_json, platforms, no_index, index_from, force, rebuild, summary_path,
            as_json, sign_key, matrix_path, overrides) -> None:
    """Push a backend's image (or all) and record each pushed digest in the manifest.

    Pushes REG:BACKEND and the pinned tag; the manifest entry is replaced only once every tag landed and the
    registry confirmed the digest. An image whose content the registry already holds (its content key, the
    dev.envbuild.content label, as the tag REG:BACKEND-in-KEY) is not pushed again: its tags move there. Credentials: ENVBUILD_REGISTRY_USER + ENVBUILD_REGISTRY_PASSWORD, else
    `docker login REGISTRY`; never on the command line, never printed.

    \b
    Examples:
      envbuild smoke --backend cpu --json-file smoke.json
      envbuild publish --backend cpu --registry ghcr.io/org/envbuild \\
          --smoke-json smoke.json
    """
    # The entry: backend, tags, digest, torch / plugin / transformers / accelerate versions (from the image's labels),
    # git revision, date and the smoke result. An image whose labels disagree with the matrix, or whose smoke failed,
    # is refused unless --force. For ghcr.io GITHUB_ACTOR + GITHUB_TOKEN also serve; credential helpers too.
    from envbuild.report import report
    from envbuild.ship import publish as p

    m = _load(matrix_path, overrides)
    chosen = _choose(m, backends)
    if image and len(chosen) > 1:
        raise click.UsageError("--image needs a single backend")
    wanted = tuple(dict.fromkeys(p_ for many in platforms for p_ in many))
    _listed(chosen, wanted)
    if no_index and (not wanted or index_from):
        raise click.UsageError("--no-index goes with --platform (and not with --index-from)")
    if image and len(wanted) > 1:
        raise click.UsageError("--image names one platform's image: give one --platform")
    registry = registry or _site(matrix_path).get("registry")
    opts = p.PublishOptions(registry=registry, image=image, manifest=manifest or Path(manifests.DEFAULT),
                            smoke_json=smoke_json[0] if smoke_json else None, smoke_jsons=tuple(smoke_json[1:]),
                            force=force, platforms=wanted, no_index=no_index, index_from=tuple(index_from),
                            sign_key=_signing_key(sign_key), rebuild=rebuild)
    results = p.publish(m, chosen, opts, _engine(setup=False), echo=lambda line: click.echo(line, err=True))
    for r in results:
        for line in report.published_lines(r, opts.manifest):
            click.echo(line, err=as_json)
        if not r.ok:
            click.secho(f"{r.backend}: publish FAILED: {r.error}", fg="red", err=True)
    if as_json:
        _emit_json([r.to_json() for r in results])
    if summary_path:
        _append_output(summary_path, report.published_summary([r.entry for r in results if r.ok and r.entry]) + "\n")
    if not all(r.ok for r in results):
        sys.exit(1)


@cli.command()
@click.option("--backend", "-b", "backends", multiple=True, default=["auto"], show_default=True, metavar="NAME", help="Backend whose image to pull, 'all', or 'auto' (the one detected here) (repeatable).")
@click.option("--variant", metavar="NAME", help="Which of the backend's variants: its name (cuda-cu126), suffix (cu126) or stack release (12.6) [default: the newest this host runs; see `envbuild pick`].")
@click.option("--registry", metavar="REPOSITORY", help="Where to pull from [default: the site's registry setting, else the matrix's image.repository].")
@click.option("--tag", metavar="TAG", help="Tag to pull [default: the backend's pinned tag from the matrix, as `envbuild show BACKEND` prints it].")
@click.option("--manifest", type=_PathArg(dir_okay=False), help="Refuse the image unless its digest is the one this manifest records.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--ignore-host", is_flag=True, help="Skip the check that this host's driver and device architecture can run the image (see `envbuild doctor`).")
@click.option("--platform", type=_PlatformArg(), help="The platform to pull from the tag's image index [default: this host's]; another architecture only where QEMU (binfmt) runs it.")
@_verify_options
@_matrix_options
def pull(backends, variant, registry, tag, manifest, as_json, ignore_host, platform, key, insecure_skip_verify, matrix_path, overrides) -> None:
    """Pull a backend's prebuilt image, verify it, and print how to run it.

    The tag is the matrix's pinned one (`envbuild show BACKEND` prints it); the image is then tagged REPO:BACKEND,
    so `smoke` and `run` find it. With --manifest its digest must be the recorded one; with --key its signature.

    \b
    Examples:
      envbuild pull --backend cpu && envbuild smoke --backend cpu
      envbuild pull --backend rocm --manifest envbuild-manifest.json
    """
    # The digest is checked before and after the pull; a mismatch is refused and nothing is tagged. Credentials as
    # for `publish`.
    from envbuild.report import report
    from envbuild.ship import pull as p

    registry = registry or _site(matrix_path).get("registry")
    m = _load(matrix_path, overrides)
    chosen = _choose(m, backends, variant, for_host=True)
    _listed(chosen, (platform,) if platform else ())
    if tag and len(chosen) > 1:
        raise click.UsageError("--tag needs a single backend")
    results = []
    engine = _engine(setup=False)
    public = _verify_key(key, insecure_skip_verify, m)
    for backend in chosen:
        r = p.pull(m, backend, engine, registry=registry, tag=tag, manifest=manifest, echo=lambda line: click.echo(line, err=True),
                   ignore_host=ignore_host, key=public, platform=platform)
        results.append(r)
        if not as_json:
            click.echo(report.pulled_text(r, manifest))
    if as_json:
        _emit_json([r.to_json() for r in results])


@cli.command("sbom")
@click.option("--backend", "-b", required=True, metavar="NAME", help="The backend whose image to describe.")
@click.option("--image", callback=_image_ref, help="The image [default: the backend's REPO:BACKEND tag from the matrix].")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the SBOM to this file [default: standard output].")
@_matrix_options
def sbom_(backend, image, output, matrix_path, overrides) -> None:
    """The image's software bill of materials, as CycloneDX 1.6 JSON.

    Read from the image without running it: every Python distribution installed in it with its version
    (those it locked with their sha256, and those of its base), its labels and its base image. `publish`
    writes one beside the manifest. Read one with `jq '.components[] | [.name, .version] | @tsv'`.

    \b
    Examples:
      envbuild sbom --backend cpu -o sbom.json
    """
    from envbuild.ship.sbom import sbom

    m = _load(matrix_path, overrides)
    b = m.select([backend])[0]
    text = sbom(_engine(setup=False), image or m.tags(b)[0])
    if output:
        _write_output(output, text)
    else:
        click.echo(text, nl=False)


@cli.command("keygen")
@click.option("--output-key-prefix", "prefix", default="cosign", show_default=True, type=_PathArg(dir_okay=False), help="Write PREFIX.key and PREFIX.pub.")
@click.option("--force", is_flag=True, help="Replace a key pair already there.")
def keygen(prefix: Path, force: bool) -> None:
    """Make a signing key pair in cosign's format: PREFIX.key (encrypted, mode 0600) and PREFIX.pub.

    The passphrase comes from $ENVBUILD_KEY_PASSWORD, else $COSIGN_PASSWORD, else it is asked twice on the
    terminal; it is never an argument and never printed. `cosign verify --key cosign.pub` reads what
    `envbuild publish --sign-key cosign.key` signs. Keep cosign.key secret (in CI: a repository secret);
    commit cosign.pub.

    \b
    Examples:
      envbuild keygen
      envbuild keygen --output-key-prefix keys/team
    """

    from envbuild.ship.trust import keys

    secret = keys.passphrase(prompt=_prompt(), confirm=True)
    private, public = keys.write_pair(prefix, secret, force=force)
    click.echo(f"wrote {private} (private: keep it secret) and {public} (public: share it, commit it)")
    click.echo(f"key {keys.load_public(public.read_bytes(), str(public)).fingerprint()}")


@cli.command("verify")
@click.argument("image")
@click.option("--key", metavar="FILE", help="The public key (cosign.pub) [default: $ENVBUILD_VERIFY_KEY].")
@click.option("--no-smoke", is_flag=True, help="Do not require a signed smoke attestation (the signature and every attestation are still checked).")
@click.option("--json", "as_json", is_flag=True, help="Print what was proved as JSON.")
def verify_(image: str, key: str | None, no_smoke: bool, as_json: bool) -> None:
    """Check IMAGE (REPOSITORY:TAG or REPOSITORY@DIGEST) in its registry against a public key.

    Proves: a signature by the key over the manifest digest the tag names now (cosign's sha256-<hex>.sig);
    every attestation beside it (sha256-<hex>.att: SBOM, provenance, smoke result) is a DSSE envelope
    signed by the key whose in-toto subject is that digest; the signed smoke result passed. Exit 1 naming
    the reason otherwise: unsigned, other-key, tampered, smoke-missing, smoke-failed, attestation.

    \b
    Examples:
      envbuild verify ghcr.io/org/envbuild:cpu --key cosign.pub
    """
    from envbuild.ship.trust import keys
    from envbuild.ship.trust.verify import split_image, verify

    repo, reference = split_image(image)
    public = keys.verify_key(key)
    if public is None:
        raise InvalidInput(f"no key to verify with: pass --key cosign.pub or set {keys.VERIFY_KEY_ENV}")
    proved = verify(repo, reference, public, require_smoke=not no_smoke)
    if as_json:
        _emit_json(proved.to_json())
    else:
        for line in proved.lines():
            click.echo(line)


@cli.command("attest")
@click.option("--backend", "-b", required=True, metavar="NAME", help="The backend whose published image the smoke result is for.")
@click.option("--registry", metavar="REPOSITORY", help="Where the image is [default: the site's registry setting, else the matrix's image.repository].")
@click.option("--tag", callback=lambda ctx, param, value: _tag_arg(value), help="Its tag [default: the backend's pinned tag from the matrix].")
@click.option("--smoke-json", required=True, type=_PathArg(dir_okay=False, exists=True), help="`envbuild smoke --json` output for that image (pulled from the registry).")
@click.option("--sign-key", metavar="FILE|env://VAR", help="The cosign key [default: $ENVBUILD_SIGNING_KEY].")
@click.option("--force", is_flag=True, help="Attest even a failed result (verify then refuses the image); never one of another image.")
@_matrix_options
def attest_(backend, registry, tag, smoke_json, sign_key, force, matrix_path, overrides) -> None:
    """Add a signed smoke attestation to an image already in the registry (e.g. a nightly run on hardware).

    The result must be of that very image: its image id is the registry manifest's config digest.

    \b
    Examples:
      envbuild attest --backend cuda --smoke-json smoke.json
    """
    from envbuild.ship.trust.attest import attest_smoke

    m = _load(matrix_path, overrides)
    b = m.select([backend])[0]
    key = _signing_key(sign_key)
    if key is None:
        raise InvalidInput("no signing key: pass --sign-key FILE or set ENVBUILD_SIGNING_KEY")
    registry = registry or _site(matrix_path).get("registry")
    repo = check_repository(registry or m.image.repository, "--registry" if registry else "image.repository")
    result = manifests.load_smoke_results(smoke_json).get(b.name)
    if result is None:
        raise InvalidInput(f"--smoke-json {smoke_json} has no result for backend {b.name}")
    done = attest_smoke(repo, tag or Reference.parse(m.tags(b)[1]).tag, result, key, force=force, echo=lambda line: click.echo(line, err=True))
    for a in done.attestations:
        click.echo(f"{b.name}: attested {repo}@{a['digest']} ({a['tag']})")


@cli.command("matrix")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "github"]), default="table", show_default=True,
              help="github: one line of JSON for `strategy.matrix: ${{ fromJSON(...) }}`; json: the same, indented.")
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Only these backends (repeatable, comma-separated) [default: every containerizable one].")
@click.option("--per-platform", is_flag=True, help="One job per backend and platform, each on a native runner of that architecture (hosted arm64: ubuntu-24.04-arm; self-hosted: the backend's labels with the architecture label set to x64 or arm64).")
@click.option("--changed", is_flag=True, help="Only the jobs whose image the registry does not hold yet: its content key (from the committed lock, the Dockerfile, the context's files) has no REG:BACKEND-in-KEY tag there. Needs --registry.")
@click.option("--registry", metavar="REPOSITORY", help="With --changed: the repository to ask, e.g. ghcr.io/org/envbuild.")
@click.option("--build-arg", "build_args", multiple=True, metavar="KEY=VALUE", help="With --changed: the build arguments the builds get (they are part of the content).")
@_input_options
@_matrix_options
def matrix_(fmt, backends, per_platform, changed, registry, build_args, inputs, matrix_path, overrides) -> None:
    """The CI job matrix derived from matrix.yaml: one job per containerizable backend.

    Each entry: backend, device, image (REPO:BACKEND), pinned (the pinned tag), runs-on (the runner labels
    from the backend's ci.runs_on), self-hosted, smoke (whether that runner has the device: the CPU always,
    accelerators on self-hosted runners) and smoke_args. Workflows take their backend list from here only.

    \b
    Examples:
      envbuild matrix
      envbuild matrix --format github --per-platform
    """
    from envbuild.maintain import ci
    from envbuild.report import report

    m = _load(matrix_path, overrides)
    chosen = _choose(m, backends) if backends else None
    doc = ci.github_matrix(m, chosen, per_platform=per_platform)
    if changed or registry:
        if not (changed and registry):
            raise click.UsageError("--changed and --registry go together: --changed --registry ghcr.io/org/envbuild")
        repo = check_repository(registry, "--registry")
        doc = ci.changed(m, doc, inputs.options(build_args=build_args), repo,
                         echo=lambda line: click.echo(line, err=True))
    if fmt == "github":
        click.echo(json.dumps(doc, separators=(",", ":")))
    elif fmt == "json":
        _emit_json(doc)
    else:
        click.echo(report.table(report.ci_rows(doc), report.CI_COLUMNS))


@cli.command()
@click.argument("results", nargs=-1, required=True, type=_PathArg(exists=True))
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Backends that should have a result (repeatable, or 'all'): a missing one is a row that says so.")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown"]), default="table", show_default=True, help="markdown: for $GITHUB_STEP_SUMMARY.")
@click.option("--strict", is_flag=True, help="Exit 1 when a backend failed or has no result.")
@_matrix_options
def summary(results, backends, fmt, strict, matrix_path, overrides) -> None:
    """One table of `envbuild smoke --json` results: files, or folders searched for *.json.

    \b
    Example (a nightly run's artifacts):
      envbuild summary results/ --backend all --format markdown \\
          >> "$GITHUB_STEP_SUMMARY"
    """
    from envbuild.report import report

    docs = report.read_smoke_results(results)
    expected = [b.name for b in _choose(_load(matrix_path, overrides), backends)] if backends else []
    rows = report.smoke_rows(docs, expected)
    columns = ["backend", "result", "checks", "seconds", "image", "reason"]
    if fmt == "markdown":
        click.echo("### Smoke results\n\n" + report.markdown_table(rows, columns))
    else:
        click.echo(report.table(rows, columns))
    if strict and any(r["result"] != "passed" for r in rows):
        sys.exit(1)


@cli.command("site")
@click.option("--manifest", type=_PathArg(dir_okay=False, exists=True), help="The current manifest (envbuild-manifest.json): digests, sizes, versions, signatures.")
@click.option("--smoke-json", "smoke_json", multiple=True, type=_PathArg(exists=True), metavar="FILE|DIR", help="`envbuild smoke --json` reports of the current run: files, or folders searched for *.json (repeatable).")
@click.option("--history", type=_PathArg(file_okay=False, exists=True), metavar="DIR", help="Earlier runs: one folder per run named by its UTC date (YYYY-MM-DD or YYYY-MM-DDTHHMMSSZ) holding its manifest and smoke reports; a published site's history/ folder is one.")
@click.option("--output", "-o", required=True, type=_PathArg(file_okay=False), metavar="DIR", help="Where to write the site (a new or empty folder, or a site written before: replaced whole).")
@click.option("--keep", default=60, show_default=True, type=click.IntRange(min=1), help="Show and carry forward this many runs, the newest.")
@_matrix_options
def site_(manifest, smoke_json, history, output, keep, matrix_path, overrides) -> None:
    """A static status site: backends x platforms with the last smoke result, a page per backend, trends.

    HTML, CSS and SVG charts: open OUTPUT/index.html, or publish the folder (GitHub Pages). OUTPUT/grid.md
    is the same grid in Markdown, for $GITHUB_STEP_SUMMARY; OUTPUT/history/ holds the runs shown, in the
    --history format. Without --manifest and --smoke-json the latest history run is the current one.

    \b
    Example (a nightly run):
      envbuild site --manifest envbuild-manifest.json --smoke-json results \\
          --history history --output site
    """
    from envbuild import matrix as matrices
    from envbuild.report import site

    if not (manifest or smoke_json or history):
        raise click.UsageError("give something to show: --manifest, --smoke-json or --history")
    m = _load(matrix_path, overrides)
    inputs = site.Inputs(matrix_path=str(matrix_path or matrices.default_path()), manifest=manifest,
                         smoke=tuple(smoke_json), history=history, keep=keep)
    site.build(m, inputs, output, echo=click.echo)


def _wire_completion(group: click.Group) -> None:
    """Backend names and platforms complete from the matrix in every command that takes them (set here, once,
    for each --backend/-b, a BACKEND argument and --platform)."""
    for command in group.commands.values():
        for param in command.params:
            if param.name in ("backend", "backends", "backend_arg") and param._custom_shell_complete is None:
                param._custom_shell_complete = _complete_backend
            elif param.name in ("platform", "platforms") and param._custom_shell_complete is None:
                param._custom_shell_complete = _complete_platform


_wire_completion(cli)


def main() -> None:
    cli(prog_name="envbuild")



@cli.command("docs")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when a generated reference page is stale or missing, or when a command line shown in README.md or docs/ names a command or option that does not exist.")
@click.option("--root", "repo", default=".", show_default=True, type=_PathArg(file_okay=False, exists=True), metavar="DIR", help="The checkout whose README.md and docs/ to write or check.")
def docs_(check, repo) -> None:
    """Maintainers: the reference pages generated from the code (docs/reference/cli.md from these commands,
    docs/reference/matrix.md from the matrix schema), and the check that every `envbuild ...` line in the
    README and docs/ is a real command with real options. CI runs `envbuild docs --check`.
    """
    from envbuild.maintain import docgen

    pages = docgen.generated(cli)
    problems = docgen.check_files(cli, docgen.doc_files(repo), repo)
    if check:
        for rel in docgen.stale(repo, pages):
            click.echo(f"stale: {rel} (run `envbuild docs` to refresh it)", err=True)
            problems.append(rel)
    else:
        for rel in docgen.write(repo, pages):
            click.echo(f"wrote {rel}")
    for line in docgen.summary([p for p in problems if isinstance(p, docgen.Problem)]):
        click.echo(line, err=True)
    if problems:
        sys.exit(1)


for _name in ENGINE_COMMANDS:  # after every command is declared
    _engine_option(cli.commands[_name])
