"""The commands of "Publish and maintain" that keep the pins and CI current: outdated, metadata, bump, matrix,
summary, site, docs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from envbuild.cli import options
from envbuild.cli.app import cli
from envbuild.cli.options import PathArg, choose, emit_json, input_options, load, matrix_options, source_options, sources_for


def _outdated(m, backends, sources, quiet: bool):
    from envbuild.maintain.sources import outdated

    chosen = choose(m, backends) if backends else m.containerizable()
    say = None if quiet else (lambda line: click.echo(f"envbuild: {line}", err=True))
    return outdated(m, chosen, sources, progress=say)


@cli.command("outdated")
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Only this backend's pins besides the shared ones (repeatable) [default: every containerizable backend].")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--markdown", is_flag=True, help="A Markdown table (a pull request body, a job summary).")
@click.option("--exit-code", is_flag=True, help="Exit 1 when something newer fits (CI: propose a bump); 3 when nothing newer was found but a pin's source did not answer.")
@source_options
@matrix_options
def outdated_(backends, as_json, markdown, exit_code, mirrors, ca_bundle, netrc, matrix_path, overrides) -> None:
    """What is newer than each pin, and whether it fits. What does not fit says why.

    Every pin (transformers, accelerate, uv, extras, each backend's torch, plugin and base image) is asked
    of its own source: the package index it installs from (PEP 691/503, metadata per PEP 658 or the wheel)
    and the registry of the base image (same-shaped tags; a moved digest). A newer release fits when every
    rule holds: the plugin's pairing and torch range, the torch that transformers and accelerate declare,
    wheels for each platform, a vendor base that fixes torch. A source that cannot be reached is reported
    for its pins; the rest still answer, and the command exits 1 (3 with --exit-code), since its answer is not
    whole. Writes nothing.

    \b
    Examples:
      envbuild outdated
      envbuild outdated --backend cuda --json
      envbuild outdated --exit-code --markdown > outdated.md   # CI
    """
    from envbuild.report import report

    m = load(matrix_path, overrides)
    findings = _outdated(m, backends, sources_for(mirrors, ca_bundle, netrc, matrix_path), quiet=as_json)
    if as_json:
        emit_json([f.to_json() for f in findings])
    elif markdown:
        click.echo(report.markdown_table(report.outdated_rows(findings), report.OUTDATED_COLUMNS), nl=False)
    else:
        click.echo(report.table(report.outdated_rows(findings), report.OUTDATED_COLUMNS))
    newer = any(f.newer or f.also for f in findings)
    if exit_code and newer:
        sys.exit(1)
    unasked = [f for f in findings if f.error]
    if unasked:  # an answer that is not whole is not "nothing newer"
        click.secho(f"{len(unasked)} pin(s) could not be asked: their source did not answer (the table says why); "
                    "`envbuild doctor` checks this machine's way to the indexes and registries.", fg="yellow", err=True)
        sys.exit(3 if exit_code else 1)


@cli.command("metadata")
@click.option("--refresh", is_flag=True, help="Read the pins' metadata from their indexes and write the cache (else: check it, offline).")
@source_options
@matrix_options
def metadata_(refresh, mirrors, ca_bundle, netrc, matrix_path, overrides) -> None:
    """Check or refresh the pins' metadata cache (matrix.metadata.json). The cache beside the matrix holds each
    pin's Requires-Python and what it requires of torch, read from its index (PEP 691/658, else the wheel).
    `validate` holds every backend's Python and torch to it with no network; `bump` refreshes it with the pins it
    moves.

    \b
    Examples:
      envbuild metadata              # offline: name each pin the cache lacks
      envbuild metadata --refresh    # ask the indexes, write the cache
    """
    from envbuild import matrix as matrix_mod
    from envbuild.matrix import metadata_check

    if overrides:
        raise click.UsageError("metadata reads the matrix file itself: it takes no --set")
    path = matrix_path or matrix_mod.default_path()
    if refresh:
        from envbuild.maintain.sources import metadata

        sources = sources_for(mirrors, ca_bundle, netrc, matrix_path)
        cache, errors, changed = metadata.update(path, sources.index, say=lambda line: click.echo(f"envbuild: {line}", err=True))
        for e in errors:
            click.secho(f"not asked: {e}", fg="yellow", err=True)
        click.echo(f"{'wrote' if changed else 'unchanged'} {cache.path}")
    m = load(path)  # validated against the cache
    checked = metadata_check.check(m, path)
    if checked.cache_path is None:
        click.secho(f"no metadata cache beside {path}: run `envbuild metadata --refresh`", fg="red", err=True)
        sys.exit(1)
    for line in checked.lacking:
        click.echo(f"missing: {line}")
    if checked.lacking:
        click.secho(f"{len(checked.lacking)} pin(s) unknown to {checked.cache_path}: run `envbuild metadata --refresh`.",
                    fg="red", err=True)
        sys.exit(1)
    click.echo(f"{checked.cache_path}: every pin of {path} is known and fits its backends")


@cli.command("bump")
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Only this backend's pins besides the shared ones (repeatable).")
@click.option("--only", "only", multiple=True, metavar="FIELD", help="Only these pins: transformers, accelerate, uv, torch, plugin, base_image, or a dotted field such as backends.cuda.base_image (repeatable).")
@click.option("--to", "to", metavar="VERSION", help="Set the one pin --only names to this version (checked like any other).")
@click.option("--dry-run", is_flag=True, help="Print the diff; write nothing.")
@click.option("--output", "-o", "dockerfiles", default="dockerfiles", show_default=True, type=PathArg(file_okay=False), help="Where the Dockerfiles are rendered.")
@click.option("--no-lock", is_flag=True, help="Do not refresh the locks that exist (then `envbuild lock --check` names them).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@matrix_options
@input_options
def bump_(backends, only, to, dry_run, dockerfiles, no_lock, as_json, matrix_path, overrides, inputs) -> None:
    """Move pins to what fits: edit matrix.yaml, render, relock. What `outdated` finds to fit is applied:
    matrix.yaml edited in place, the Dockerfiles rendered, the locks refreshed.

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
    m = load(str(path), fields=False)  # the file's own pins: a site's [matrix] fields are not bumped
    opts = inputs.options()
    sources = sources_for(inputs.mirrors, opts.ca_bundle, inputs.netrc, matrix_path, inputs.site.index_mirrors)
    done = bumping.run(path, m, choose(m, backends) if backends else m.containerizable(), sources, opts, options.engine,
                       dockerfiles=dockerfiles, only=only, to=to, dry_run=dry_run, no_lock=no_lock,
                       progress=None if as_json else (lambda line: click.echo(f"envbuild: {line}", err=True)),
                       echo=lambda line: click.echo(line, err=True))
    findings, new, result = done.findings, done.new, done.result
    locks_refreshed, locks_left = done.locks_refreshed, done.locks_left
    if as_json:
        emit_json(done.to_json(dry_run))
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


@cli.command("matrix")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "github", "bake"]), default="table", show_default=True,
              help="github: one line of JSON for `strategy.matrix: ${{ fromJSON(...) }}`; json: the same, indented; bake: a buildx bake file and its build contexts, written into --output.")
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Only these backends (repeatable, comma-separated) [default: every containerizable one].")
@click.option("--per-platform", is_flag=True, help="One job per backend and platform, each on a native runner of that architecture (hosted arm64: ubuntu-24.04-arm; self-hosted: the backend's labels with the architecture label set to x64 or arm64).")
@click.option("--changed", is_flag=True, help="Only the jobs whose image the registry does not hold yet: its content key (from the committed lock, the Dockerfile, the context's files) has no REG:BACKEND-in-KEY tag there. Needs --registry.")
@click.option("--registry", metavar="REPOSITORY", help="With --changed: the repository to ask, e.g. ghcr.io/org/envbuild.")
@click.option("--build-arg", "build_args", multiple=True, metavar="KEY=VALUE", help="With --changed or --format bake: the build arguments the builds get (they are part of the content).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="With --format bake: an extra image label, e.g. org.opencontainers.image.revision=SHA (repeatable).")
@click.option("--output", "-o", "output", type=PathArg(file_okay=False), metavar="DIR", help="With --format bake: where DIR/docker-bake.json and DIR/contexts/ go (replaced whole, once every lock is current).")
@input_options
@matrix_options
def matrix_(fmt, backends, per_platform, changed, registry, build_args, labels, output, inputs, matrix_path, overrides) -> None:
    """The CI job matrix derived from matrix.yaml. One job per containerizable backend.

    Each entry: backend, device, image, pinned tag, runs-on (ci.runs_on), self-hosted, smoke (the runner has the
    device) and smoke_args; workflows take their backends from here only. --format bake writes a buildx bake
    file for build farms (docs/how-to/build-farm.md): a target per backend and platform, built as `build`
    builds it; a missing or stale lock is refused first.

    \b
    Examples:
      envbuild matrix
      envbuild matrix --format github --per-platform
      envbuild matrix --format bake --output bake
    """
    from envbuild.maintain import ci
    from envbuild.report import report
    from envbuild.core.imageref import check_repository

    m = load(matrix_path, overrides)
    chosen = choose(m, backends) if backends else None
    if fmt == "bake":
        if output is None:
            raise click.UsageError("--format bake writes a folder: give --output DIR (e.g. --output bake)")
        if changed or registry or per_platform:
            raise click.UsageError("--format bake has one target per backend and platform already, every one: "
                                   "it takes no --per-platform, --changed or --registry")
        from envbuild.maintain import bake

        doc = bake.write(m, chosen, inputs.options(build_args=build_args, labels=labels), output,
                         echo=lambda line: click.echo(line, err=True))
        click.echo(f"wrote {output / bake.FILE} ({len(doc['target'])} targets) and their contexts in {output / bake.CONTEXTS}/")
        return
    if output is not None or labels:
        raise click.UsageError("--output and --label go with --format bake")
    doc = ci.github_matrix(m, chosen, per_platform=per_platform)
    if changed or registry:
        if not (changed and registry):
            raise click.UsageError("--changed and --registry go together: --changed --registry ghcr.io/org/envbuild")
        repo = check_repository(registry, "--registry")
        doc = ci.changed(m, doc, inputs.options(build_args=build_args), repo,
                         echo=lambda line: click.echo(line, err=True))
    from envbuild.core.output import print_data  # the jobs' images as they are: the matrix holds no secret

    if fmt == "github":
        print_data(json.dumps(doc, separators=(",", ":")))
    elif fmt == "json":
        emit_json(doc, verbatim=True)
    else:
        print_data(report.table(report.ci_rows(doc), report.CI_COLUMNS))


@cli.command()
@click.argument("results", nargs=-1, required=True, type=PathArg(exists=True))
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Backends that should have a result (repeatable, or 'all'): a missing one is a row that says so.")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown"]), default="table", show_default=True, help="markdown: for $GITHUB_STEP_SUMMARY.")
@click.option("--strict", is_flag=True, help="Exit 1 when a backend failed or has no result.")
@matrix_options
def summary(results, backends, fmt, strict, matrix_path, overrides) -> None:
    """One table of `smoke --json` results. Of `envbuild smoke --json` files, or folders searched for *.json.

    \b
    Example (a nightly run's artifacts):
      envbuild summary results/ --backend all --format markdown \\
          >> "$GITHUB_STEP_SUMMARY"
    """
    from envbuild.report import report

    docs = report.read_smoke_results(results)
    expected = [b.name for b in choose(load(matrix_path, overrides), backends)] if backends else []
    rows = report.smoke_rows(docs, expected)
    columns = ["backend", "result", "checks", "seconds", "image", "reason"]
    if fmt == "markdown":
        click.echo("### Smoke results\n\n" + report.markdown_table(rows, columns))
    else:
        click.echo(report.table(rows, columns))
    if strict and any(r["result"] != "passed" for r in rows):
        sys.exit(1)


@cli.command("site")
@click.option("--manifest", type=PathArg(dir_okay=False, exists=True), help="The current manifest (envbuild-manifest.json): digests, sizes, versions, signatures.")
@click.option("--smoke-json", "smoke_json", multiple=True, type=PathArg(exists=True), metavar="FILE|DIR", help="`envbuild smoke --json` reports of the current run: files, or folders searched for *.json (repeatable).")
@click.option("--history", type=PathArg(file_okay=False, exists=True), metavar="DIR", help="Earlier runs: one folder per run named by its UTC date (YYYY-MM-DD or YYYY-MM-DDTHHMMSSZ) holding its manifest and smoke reports; a published site's history/ folder is one.")
@click.option("--output", "-o", required=True, type=PathArg(file_okay=False), metavar="DIR", help="Where to write the site (a new or empty folder, or a site written before: replaced whole).")
@click.option("--keep", default=60, show_default=True, type=click.IntRange(min=1), help="Show and carry forward this many runs, the newest.")
@matrix_options
def site_(manifest, smoke_json, history, output, keep, matrix_path, overrides) -> None:
    """A static status site of the smoke results. Backends x platforms with the last smoke result, a page per
    backend, trends.

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
    m = load(matrix_path, overrides)
    inputs = site.Inputs(matrix_path=str(matrix_path or matrices.default_path()), manifest=manifest,
                         smoke=tuple(smoke_json), history=history, keep=keep)
    site.build(m, inputs, output, echo=click.echo)


@cli.command("docs")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when a generated reference page is stale or missing, or when a command line shown in README.md or docs/ names a command or option that does not exist.")
@click.option("--root", "repo", default=".", show_default=True, type=PathArg(file_okay=False, exists=True), metavar="DIR", help="The checkout whose README.md and docs/ to write or check.")
def docs_(check, repo) -> None:
    """Write (or check) the generated CLI and matrix reference pages. For maintainers: the reference pages
    generated from the code (docs/reference/cli.md from these commands, docs/reference/matrix.md from the matrix
    schema), and the check that every `envbuild ...` line in the README and docs/ is a real command with real
    options. CI runs `envbuild docs --check`.
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
