"""The envbuild command line: a thin layer over the library; each command calls one library function.

Heavy modules (docker, jinja2) are imported inside the commands that need them, so `--help` stays fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from .errors import EnvbuildError

MATRIX_HELP = "The matrix file (default: ./matrix.yaml)."
SET_HELP = "Override a matrix field for this run, e.g. backends.cpu.torch.version=2.13.0 (repeatable)."


class Group(click.Group):
    """Turns every envbuild error into 'Error: ...' and its exit code: one place, no tracebacks."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EnvbuildError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            for line in str(exc).splitlines() or [type(exc).__name__]:
                click.secho(f"Error: {line}", fg="red", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Exception as exc:  # a bug, not a user error: say so briefly; --debug shows the traceback
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.secho(f"Error: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", fg="red", err=True)
            ctx.exit(70)


def _matrix_options(f):
    f = click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE", help=SET_HELP)(f)
    f = click.option("--matrix", "matrix_path", default="matrix.yaml", show_default=True, type=click.Path(dir_okay=False), help=MATRIX_HELP)(f)
    return f


def _load(matrix_path: str, overrides: tuple[str, ...] = ()):
    from . import matrix

    return matrix.load(matrix_path, overrides)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, help="Show the full traceback of an error (for bug reports).")
@click.version_option(package_name="envbuild")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Build, smoke-test and ship PyTorch + Transformers images for every accelerator.

    matrix.yaml describes each backend once; `render` writes one Dockerfile per backend into
    dockerfiles/, `build` builds it on your Docker engine, and `smoke` proves a model loads on the device.

    \b
    Quick start (CPU):
      envbuild build --backend cpu && envbuild smoke --backend cpu
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


@cli.command()
@_matrix_options
def validate(matrix_path: str, overrides: tuple[str, ...]) -> None:
    """Check the matrix: exit 0 when valid, 2 with one located error per line when not."""
    m = _load(matrix_path, overrides)
    click.echo(f"{matrix_path}: ok ({len(m.backends)} backends, {len(m.containerizable())} containerizable)")


@cli.command()
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Render only this backend (repeatable; default: all).")
@click.option("--output", "-o", default="dockerfiles", show_default=True, type=click.Path(file_okay=False), help="Where to write the Dockerfiles.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if any file is stale, missing or extra.")
@_matrix_options
def render(backends: tuple[str, ...], output: str, check: bool, matrix_path: str, overrides: tuple[str, ...]) -> None:
    """Render dockerfiles/<backend>.Dockerfile for each containerizable backend.

    Output is deterministic and written atomically; unchanged files are not touched.
    """
    from . import render as r

    m = _load(matrix_path, overrides)
    chosen = m.select(backends)
    rendered = r.render(m, chosen)
    out = Path(output)
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
@_matrix_options
def list_(as_json: bool, matrix_path: str, overrides: tuple[str, ...]) -> None:
    """Every backend: device string, base image, torch and plugin pins, containerizable."""
    from . import report

    m = _load(matrix_path, overrides)
    rows = [report.backend_summary(m, b) for b in m.backends]
    if as_json:
        _emit_json(rows)
        return
    click.echo(report.table(rows, ["backend", "device", "containerizable", "base_image", "torch", "plugin"]))


@cli.command()
@click.argument("backend")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@_matrix_options
def show(backend: str, as_json: bool, matrix_path: str, overrides: tuple[str, ...]) -> None:
    """One backend in full, with the exact `docker run` flags that expose its device."""
    from . import report

    m = _load(matrix_path, overrides)
    b = m.backend(backend)
    detail = report.backend_detail(m, b)
    if as_json:
        _emit_json(detail)
        return
    click.echo(report.describe(detail))


def main() -> None:
    cli(prog_name="envbuild")


if __name__ == "__main__":
    main()
