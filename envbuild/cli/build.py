"""The commands of "Build and test": init, validate, config, render, lock, build, base, smoke, clean."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click

from envbuild.core.errors import BuildError, InvalidInput, LockError
from envbuild.core.text import shown
from envbuild.cli import options
from envbuild.cli.app import cli, error_lines, scrub_text
from envbuild.cli.options import MATRIX_HELP, PathArg, PlatformArg, choose, emit_json, image_ref, input_options, listed, load, matrix_options, packaged_matrix, site_settings, write_output


@cli.command("init")
@click.argument("directory", default=".", type=PathArg(file_okay=False))
@click.option("--force", is_flag=True, help="Replace a matrix.yaml or matrix.metadata.json already there.")
def init_(directory: Path, force: bool) -> None:
    """Write the packaged matrix into a folder to start your own. DIRECTORY gets the matrix packaged with
    envbuild, for your team to make its own.

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
    ignore = directory / ".gitignore"  # what envbuild keeps per checkout (build contexts, logs) stays out of git
    kept = ignore.read_text(encoding="utf-8") if ignore.is_file() and not ignore.is_symlink() else ""
    if not ignore.is_symlink() and not any(line.strip() in (".envbuild/", "/.envbuild/", ".envbuild")
                                           for line in kept.splitlines()):
        write_atomic(ignore, (kept + ("\n" if kept and not kept.endswith("\n") else "") + ".envbuild/\n").encode())
        click.echo(f"{'added .envbuild/ to' if kept else 'wrote'} {ignore}")
    click.echo(f"next: cd {directory}, edit matrix.yaml, then `envbuild validate` and `envbuild build --backend cpu` "
               "(build writes the Dockerfile it needs); commit matrix.yaml and locks/")


@cli.command()
@matrix_options
def validate(matrix_path: str, overrides: tuple[str, ...]) -> None:
    """Check the matrix, one located error per line. Exit 0 when valid, 2 with the errors when not.

    \b
    Examples:
      envbuild validate
      envbuild validate --matrix team/matrix.yaml
    """
    m = load(matrix_path, overrides)
    # Counted as the README and the Hardware page count them: a variant (cuda-cu126) is its backend's, not one more.
    variants = sum(1 for b in m.backends if b.variant_of)
    images = len(m.containerizable())
    click.echo(f"{m.path}: ok ({len(m.backends) - variants} backends"
               + (f" and {variants} variant{'s' * (variants != 1)}" if variants else "")
               + f"; {images} image{'s' * (images != 1)} to build)")


@cli.command()
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Render only this backend (repeatable; default: all).")
@click.option("--output", "-o", default="dockerfiles", show_default=True, type=click.Path(file_okay=False), help="Where to write the Dockerfiles.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if any file is stale, missing or extra.")
@matrix_options
def render(backends: tuple[str, ...], output: str, check: bool, matrix_path: str, overrides: tuple[str, ...]) -> None:
    """Write one Dockerfile per backend into dockerfiles/. Each containerizable backend gets
    dockerfiles/<backend>.Dockerfile.

    Output is deterministic and written atomically; unchanged files are not touched.
    """
    from envbuild import render as r

    packaged = packaged_matrix(matrix_path)
    m = load(matrix_path, overrides)
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


@cli.command()
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Backend to build, 'all', or 'auto' (the one detected here; see `envbuild detect`) (repeatable).")
@click.option("--variant", metavar="NAME", help="Which of the backend's variants: its name (cuda-cu126), suffix (cu126) or stack release (12.6) [default: the newest this host runs; see `envbuild pick`].")
@matrix_options
@input_options
@click.option("--locked", is_flag=True, help="Build only from a current lock: refuse, naming the command to run, when locks/BACKEND/OS-ARCH.txt is missing or stale (CI and publish use it).")
@click.option("--build-arg", "build_args", multiple=True, metavar="KEY=VALUE", help="Passed to the build (repeatable).")
@click.option("--image", "tags", multiple=True, metavar="IMAGE:TAG", help="Tag the image as this instead of the matrix's default tags (repeatable; one backend only); `smoke --image` tests it.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Extra image label, e.g. org.opencontainers.image.revision=SHA (repeatable).")
@click.option("--no-cache", is_flag=True, help="Build every layer afresh.")
@click.option("--platform", type=PlatformArg(), help="Target platform, one the backend lists, e.g. linux/arm64: built natively, or under QEMU (binfmt) on another architecture; tagged REPO:BACKEND-ARCH when it is not this host's. One per build (each installs its own lock); `envbuild publish --platform` joins several in one image index.")
@click.option("--builder", help="A buildx builder to use, e.g. a remote BuildKit (needs buildx).")
@click.option("--cache-from", multiple=True, metavar="SPEC", help="BuildKit cache source, e.g. type=registry,ref=REG/cache:cpu or type=local,src=DIR (local caches need buildx; repeatable).")
@click.option("--cache-to", multiple=True, metavar="SPEC", help="BuildKit cache export, e.g. type=registry,ref=REG/cache:cpu,mode=max or type=local,dest=DIR (needs buildx; repeatable).")
@click.option("--jobs", "-j", default=1, show_default=True, type=click.IntRange(min=1), help="Build this many backends at once (one live status line each on a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the build results as JSON (the progress goes to stderr).")
@click.option("--json-file", "json_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write the build results as JSON to FILE.")
@click.option("--verbose", is_flag=True, help="Show the builder's full output.")
def build(backends, variant, matrix_path, overrides, inputs, locked, build_args, tags, labels,
          no_cache, platform, builder, cache_from, cache_to, jobs, as_json, json_path, verbose) -> None:
    """Build a backend's image on the local Docker or Podman engine.

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
    from envbuild.image import build as b

    m = load(matrix_path, overrides)
    chosen = choose(m, backends, variant, for_host=True)
    listed(chosen, (platform,) if platform else ())
    if tags and len(chosen) > 1:
        raise click.UsageError("--image needs a single backend")
    opts = inputs.options(tags=tags, build_args=build_args, labels=labels, no_cache=no_cache, platform=platform,
                          builder=builder, cache_from=cache_from, cache_to=cache_to)
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    engine = options.engine()
    if jobs > 1 and len(chosen) > 1:
        from envbuild.image.status import StatusBoard

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

    for line in error_lines(scrub_text(error))[:1]:
        echo(f"{backend.name}: {shown(line)[:300]}")
    bases.make(bases.plan(backend), engine, echo=echo)
    return True


@cli.command("base")
@click.option("--backend", "-b", "backend", required=True, metavar="NAME", help="The backend whose base image to make (its base_image: Debian's or Ubuntu's).")
@click.option("--suite", metavar="NAME", help="The archive's suite (codename) to make it from [default: the image's, e.g. bookworm for debian:bookworm-slim].")
@click.option("--archive", "archive", metavar="URL", help="The distribution's archive, or a site's mirror of it (http, https or file://) [default: deb.debian.org, archive.ubuntu.com].")
@click.option("--output", "-o", type=PathArg(dir_okay=False), metavar="FILE", help="Only write the root filesystem tarball to FILE (`docker import FILE IMAGE` loads it); load nothing.")
@click.option("--dry-run", is_flag=True, help="Say what would be made, from where, with which command; make nothing.")
@click.option("--no-cache", is_flag=True, help="Make it afresh even when a tarball from the same archive state and SOURCE_DATE_EPOCH is cached.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@matrix_options
def base_(backend, suite, archive, output, dry_run, no_cache, as_json, matrix_path, overrides) -> None:
    """Make a Debian or Ubuntu base image from the distribution's archive. A backend's base, for a site no
    registry serves.

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

    m = load(matrix_path, overrides)
    chosen = m.select([backend])[0]
    p = bases.plan(chosen, suite=suite, mirror=archive)
    if dry_run:
        if as_json:
            emit_json({"backend": p.backend, "image": p.image, "suite": p.codename, "archive": p.mirror, "arch": p.arch,
                        "source_date_epoch": p.epoch, "command": p.argv("BASE.tar", p.epoch or "EPOCH")})
            return
        for line in p.describe():
            click.echo(line)
        return
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    made = bases.make(p, None if output else options.engine(), output=output, echo=echo, cache=not no_cache)
    if as_json:
        emit_json(made.to_json())
    else:
        where = str(output) if output else made.plan.image
        click.echo(f"{made.plan.backend}: {where} made from {p.mirror} {p.codename} (SOURCE_DATE_EPOCH={made.epoch}), "
                   f"layer {made.layer}{' (cached)' if made.cached else ''}")


@cli.command("lock")
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Backend to lock, or 'all' (repeatable) [default: all; with --check, the locks there are].")
@matrix_options
@input_options
@click.option("--upgrade", is_flag=True, help="Resolve afresh: take the newest releases the pins allow, keeping nothing of the old lock.")
@click.option("--upgrade-package", "upgrade_packages", multiple=True, metavar="NAME", help="Let this distribution move to its newest fitting release; everything else keeps its locked version where it fits (repeatable).")
@click.option("--check", is_flag=True, help="Write nothing, resolve nothing, read files only (no Docker, no network): exit 1 naming each stale lock, each missing platform, and a GPU backend's CPU-only torch.")
@click.option("--platform", type=PlatformArg(), help="Lock only this platform, e.g. linux/arm64 [default: every platform the backend lists; another architecture than this host's resolves under QEMU].")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--verbose", is_flag=True, help="Show the resolver's full output.")
def lock_(backends, matrix_path, overrides, inputs, upgrade, upgrade_packages, check, platform, as_json, verbose) -> None:
    """Pin and hash every package an image adds to its base. Written to locks/BACKEND/OS-ARCH.txt: per
    platform, every distribution the image adds, pinned and hashed.

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
    from envbuild.image import locking

    m = load(matrix_path, overrides)
    chosen = choose(m, backends) if backends else m.containerizable()
    listed(chosen, (platform,) if platform else ())
    opts = inputs.options(platform=platform)
    if check:
        if upgrade or upgrade_packages:
            raise click.UsageError("--check writes nothing: it takes no --upgrade or --upgrade-package")
        results = locking.check(m, chosen, opts, require=bool(backends))
    else:
        echo = lambda line: click.echo(line, err=True)  # noqa: E731
        lock_opts = locking.LockOptions(upgrade=upgrade, upgrade_packages=upgrade_packages)
        results = locking.lock(m, chosen, opts, lock_opts, options.engine(), echo=echo, verbose=verbose)
    if as_json:
        emit_json([r.to_json() for r in results])
    else:
        for r in results:
            click.echo(report.lock_line(r))
        if check and not results:
            click.echo(f"no locks to check in {opts.locks_dir}/")
    bad = [r for r in results if r.status in report.LOCK_PROBLEMS]
    if check and bad:
        click.secho(f"{len(bad)} lock(s) out of date or wrong: run `envbuild lock`.", fg="red", err=True)
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
        write_output(json_path, json.dumps([r.to_json() for r in results], indent=2) + "\n")
    if as_json:
        emit_json([r.to_json() for r in results])
    elif len(results) > 1:
        click.echo(report.table(report.build_rows(results), report.BUILD_COLUMNS))
    if not all(r.ok for r in results):
        sys.exit(1)


@cli.command()
@click.option("--backend", "-b", "backends", multiple=True, default=["auto"], show_default=True, metavar="NAME", help="Backend to test, 'all', or 'auto' (the one detected here; see `envbuild detect`) (repeatable).")
@click.option("--variant", metavar="NAME", help="Which of the backend's variants: its name (cuda-cu126), suffix (cu126) or stack release (12.6) [default: the newest this host runs; see `envbuild pick`].")
@click.option("--image", callback=image_ref, help="Image to test [default: the backend's REPO:BACKEND tag from the matrix].")
@click.option("--model", default="synthetic", show_default=True, help="'synthetic' (a tiny random model, offline), a local model directory (mounted read-only) or a hub id.")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(min=1), help="Seconds before the container is stopped and the smoke fails.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON, with the probe's report (the progress goes to stderr).")
@click.option("--json-file", "json_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write the result as JSON to FILE, with the probe's report.")
@click.option("--junit-file", "junit_path", type=click.Path(dir_okay=False), metavar="FILE", help="Write a JUnit XML report for CI to FILE.")
@click.option("--ignore-host", is_flag=True, help="Skip the check that this host's driver and device architecture can run the image (see `envbuild doctor`).")
@click.option("--cache", metavar="DIR|VOLUME", help="Mount this at /cache, as `envbuild run --cache` does: the probe's model and compiled kernels stay there, and the next smoke reuses them (a folder with a '/', or a volume name, e.g. envbuild-cache) [default: a new volume, removed afterwards].")
@click.option("--platform", type=PlatformArg(), help="Test the image of this platform, e.g. linux/arm64 [default: this host's]: REPO:BACKEND-ARCH when it is not this host's architecture, run under QEMU; the result says so.")
@matrix_options
def smoke(backends, variant, image, model, timeout, as_json, json_path, junit_path, ignore_host, cache, platform, matrix_path,
          overrides) -> None:
    """Prove a model loads and runs on the backend's device. The image starts with the backend's device flags.

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
    from envbuild import smoke as smoking

    m = load(matrix_path, overrides)
    chosen = choose(m, backends, variant, for_host=True)
    listed(chosen, (platform,) if platform else ())
    if image and len(chosen) > 1:
        raise click.UsageError("--image needs a single backend")
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    smoking.model_args(model)  # bad input before any engine
    if cache is not None:
        smoking.runner.cache_source(cache)
    results = smoking.smoke_each(m, chosen, options.engine(), keep_going=len(chosen) > 1 or bool(as_json or json_path or junit_path),
                           failed=lambda exc: click.secho(f"Error: {exc}", fg="red", err=True),
                           done=lambda result: click.echo(report.smoke_summary(result), err=as_json), image=image, model=model,
                           timeout=timeout, echo=echo, ignore_host=ignore_host, cache=cache, platform=platform)
    doc = results[0].to_json() if len(results) == 1 else [r.to_json() for r in results]
    if json_path:
        write_output(json_path, json.dumps(doc, indent=2) + "\n")
    if as_json:
        emit_json(doc)
    if junit_path:
        write_output(junit_path, report.junit_xml(results))
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
    """Remove the containers and untagged images envbuild left. The stopped containers are what a daemon killed
    during a smoke test leaves; the untagged images, build results a newer build replaced. By default only this checkout's
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
    from envbuild.core import heartbeat
    from envbuild.workspace import clean as cleaning

    engine = options.engine()
    # pruning gigabytes of build cache, or many images, takes a while: said on stderr (not with --json)
    with heartbeat.waiting(None if as_json else lambda s: click.echo(s, err=True), "cleaning (the engine is removing them)"):
        done = cleaning.clean(engine, images=not containers_only, build_cache=build_cache, every=every, dry_run=dry_run)
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


@cli.group("config", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: the files read and each setting with its origin.")
# exists: a --matrix naming no file would show the settings of a folder that is not there, and exit 0
@click.option("--matrix", "matrix_path", default=None, type=click.Path(dir_okay=False, exists=True), help=MATRIX_HELP + " Its folder's envbuild.toml is the project's settings.")
@click.pass_context
def config_(ctx: click.Context, as_json: bool, matrix_path: str | None) -> None:
    """The site's settings and their origin; `config set` writes one. Every site setting in effect, and where
    it came from.

    A site's mirrors, wheel folder, CA bundle, netrc, default registry, base images and matrix fields (the torch
    pin and index, a base image, the image repository: [matrix] for every backend, [matrix.NAME] for one) live in
    $XDG_CONFIG_HOME/envbuild/config.toml (the user's; default ~/.config/envbuild/config.toml) and envbuild.toml
    beside the matrix (the project's), and in ENVBUILD_* variables; a flag wins over a variable, a variable
    over the project's file, the project's over the user's (--set over them all). An unknown key or field is
    refused with its file and line. A netrc's contents are never shown. See docs/how-to/site-settings.md.

    \b
    Examples:
      envbuild config
      envbuild config set torch.version 2.13.0 --backend cpu
      ENVBUILD_WHEELHOUSE=/srv/wheels envbuild config --json
    """
    from envbuild.core import settings
    from envbuild.report import report

    ctx.ensure_object(dict)["config_matrix"] = matrix_path
    if ctx.invoked_subcommand is not None:
        return
    site = site_settings(matrix_path)
    if site.matrix_fields:  # a field that names nothing is said here too, at its file and line
        load(matrix_path)
    files = {"user": str(settings.user_file()), "project": str(settings.project_file(matrix_path))}
    rows = report.settings_rows(site.rows())
    if as_json:
        emit_json({"files": {k: {"path": v, "read": v in site.files} for k, v in files.items()}, "settings": rows})
        return
    for who, path in files.items():
        click.echo(f"{who} settings: {path}{'' if path in site.files else ' (none there)'}")
    click.echo(report.table([{**r, "value": "-" if r["value"] is None else r["value"]} for r in rows],
                            ["key", "value", "origin"]))


def _config_write(ctx: click.Context, key: str, value: str | None, backend: str | None, project: bool,
                  matrix_path: str | None) -> None:
    """Write KEY (None: remove it) into the chosen file, atomically, every other line kept; the result is read
    back as the settings are, and a matrix field is applied to the matrix, before the file is replaced."""
    import dataclasses

    from envbuild.core import settings
    from envbuild.core.files import write_atomic

    matrix_path = matrix_path or ctx.obj.get("config_matrix")
    file = settings.project_file(matrix_path) if project else settings.user_file()
    found = settings.place(key, backend)
    text = ""
    if file.exists() or file.is_symlink():  # read as the settings are: a regular file, bounded, UTF-8
        from envbuild.core.files import read_project, read_user

        raw = (read_project if project else read_user)(file, f"the settings {file}", InvalidInput, limit=settings.MAX_FILE)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"{shown(str(file))}: not UTF-8 text") from None
    toml = None if value is None else settings.toml_value(found, value, f"envbuild config set {key}")
    new = settings.edited(text, found, toml)
    if new == text:
        click.echo(f"{shown(key)}: not set in {file}; nothing to remove" if value is None else f"{file}: unchanged")
        return
    with tempfile.TemporaryDirectory(prefix="envbuild-config-") as tmp:  # checked where nothing is replaced
        trial = Path(tmp) / file.name
        trial.write_text(new, encoding="utf-8")
        values, origins = settings.read_file(trial, "the settings")
        if found.setting == "matrix":
            site = dataclasses.replace(settings.Settings(), values={"matrix": values.get("matrix", {})},
                                       origins={k: v.replace(str(trial), str(file)) for k, v in origins.items()})
            from envbuild import matrix

            matrix.load(matrix_path or matrix.default_path(), with_facts=False, site=site.matrix_fields)
    file.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(file, new)
    where = f"[{'.'.join(found.table)}] " if found.table else ""
    click.echo(f"{file}: {where}{found.key} {'removed' if value is None else '= ' + toml}")


_BACKEND_OPTION = click.option("--backend", "backend", metavar="NAME", help="The backend a matrix field is for (written under [matrix.NAME]); without it, every backend's (or the whole matrix's: image.repository).")
_WHICH = [click.option("--matrix", "matrix_path", default=None, type=click.Path(dir_okay=False), help="The matrix whose folder's envbuild.toml --project writes, and whose fields are checked [default: as `envbuild config`'s]."),
          click.option("--project", "project", flag_value=True, help="Write the project's envbuild.toml (beside the matrix: the team's, committed)."),
          click.option("--user", "project", flag_value=False, default=False, help="Write the user's file (this machine's, every project) [default].")]


def _which(f):
    for option in reversed(_WHICH):
        f = option(f)
    return f


@config_.command("set")
@click.argument("key")
@click.argument("value")
@_BACKEND_OPTION
@_which
@click.pass_context
def config_set(ctx: click.Context, key: str, value: str, backend: str | None, matrix_path: str | None,
               project: bool) -> None:
    """Write a setting, as `git config` does: the file's other lines stay as they are.

    KEY is a setting (wheelhouse, ca_bundle, netrc, registry), a table's entry (index_mirrors.URL,
    registry_mirrors.HOST, base_images.NAME) or a matrix field as --set names it: with --backend NAME one
    backend's (torch.version, torch.index_url, base_image), without it every backend's, or the whole matrix's
    (image.repository). A field that names nothing in the matrix is refused, and the file is left as it was.

    \b
    Examples:
      envbuild config set torch.version 2.13.0 --backend cpu
      envbuild config set image.repository registry.corp/ml/envbuild --project
      envbuild config set wheelhouse /srv/wheels
    """
    _config_write(ctx, key, value, backend, project, matrix_path)


@config_.command("unset")
@click.argument("key")
@_BACKEND_OPTION
@_which
@click.pass_context
def config_unset(ctx: click.Context, key: str, backend: str | None, matrix_path: str | None, project: bool) -> None:
    """Remove a setting `config set` wrote (the same KEY and --backend).

    \b
    Examples:
      envbuild config unset torch.version --backend cpu
    """
    _config_write(ctx, key, None, backend, project, matrix_path)
