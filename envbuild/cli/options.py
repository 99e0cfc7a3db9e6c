"""What the commands share: the option types (a path, a platform), the option groups (--matrix/--set, the build's
inputs, the sources, verification), and the small helpers between parsing and the library: the matrix as the site
sees it, the engine, the backends --backend names (host/pick.py chooses), JSON and file output.

Every command reaches the engine through `options.engine()` (a test swaps that one name). An import that costs
start-up time is made inside the function that needs it.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path
from typing import Any

import click

from envbuild.core.output import safe, scrub
from envbuild.core.text import quoted


MATRIX_HELP = "The matrix file [default: $ENVBUILD_MATRIX, else ./matrix.yaml, else the one installed with envbuild]."
SET_HELP = "Override a matrix field for this run (repeatable), e.g. backends.cpu.base_image=IMAGE."


class PathArg(click.Path):
    """click.Path whose value is a pathlib.Path. A value that is an option (`--dir --help`: click takes the next
    word as the value) is refused: such a folder is never what was meant; `./--help` still names one."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and value.startswith("-") and len(value) > 1:
            self.fail(f"{quoted(value)} is an option, not a path: give the path (./{quoted(value)} for a file named so)",
                      param, ctx)
        return super().convert(value, param, ctx)

    def coerce_path_result(self, value: Any) -> Any:
        return Path(value)


class PlatformArg(click.ParamType):
    """--platform: one platform (several, comma-separated, with `many`), read once by core.platform.Platform with
    Docker's spellings; the value is a Platform (its canonical string, 'linux/arm64'). The same refusal (exit 2, the
    value escaped) from every command, before any engine or registry is asked."""

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


def listed(chosen: list, platforms: tuple[str, ...]) -> None:
    """Each --platform is one every chosen backend lists (matrix.yaml): refused alike by every command, exit 2,
    before any engine or registry is asked."""
    for backend in chosen:
        for p in platforms:
            backend.listed(p)


def image_ref(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--image: a reference (REPO[:TAG][@DIGEST]) or an image id, never something the engine would misread."""
    from envbuild.matrix.schema import check_str

    if value is None or re.fullmatch(r"(?:sha256:)?[0-9a-f]{12,64}", value):
        return value
    _, why = check_str("image")(value)
    if why:
        raise click.BadParameter(f"{why}, or an image id")
    return value


def matrix_options(f):
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
        from envbuild.image.plan import options

        site = self.site
        return options(ca_bundle=site.path("ca_bundle"), no_ca_bundle=self.no_ca_bundle, netrc=site.path("netrc"),
                       wheelhouse=site.path("wheelhouse"), mirrors=site.registry_mirrors,
                       index_mirrors=site.index_mirrors, **self.values, **more)


def site_settings(matrix_path: str | None = None, **flags: Any):
    """The site's settings (user file < project file < ENVBUILD_* < flags), read once per command."""
    from envbuild.core import settings

    ctx = click.get_current_context(silent=True)
    said = ctx.find_root().obj if ctx is not None and isinstance(ctx.find_root().obj, dict) else {}
    cache = said.setdefault("site", {})
    if matrix_path not in cache:
        cache[matrix_path] = settings.load(matrix_path)
    return cache[matrix_path].with_flags(**flags)


SITE_NOTE = " [default: the site's settings, see `envbuild config`]"


def input_options(f):
    options = [
        click.option("--mirror", "mirrors", multiple=True, metavar="FROM=TO", help="Pull base images from a mirror, e.g. docker.io=mirror.corp:5000 (repeatable)" + SITE_NOTE + "."),
        click.option("--index-mirror", "index_mirrors", multiple=True, metavar="URL=MIRROR", help="Ask a mirror instead of a package index, e.g. https://download.pytorch.org/whl/cpu=https://pypi-mirror.corp/whl/cpu (repeatable; the lock still names the index)" + SITE_NOTE + "."),
        click.option("--wheelhouse", type=PathArg(file_okay=False, exists=True), help="A folder of wheels to take files from: a locked file of the same name and sha256 is taken from it, and the resolver may take wheels from it" + SITE_NOTE + "."),
        click.option("--ca-bundle", type=PathArg(dir_okay=False, exists=True), help="CA bundle for pip inside the build, passed as a BuildKit secret [default: the site's settings, else $SSL_CERT_FILE, $REQUESTS_CA_BUNDLE or $PIP_CERT]."),
        click.option("--no-ca-bundle", is_flag=True, help="Do not pass any CA bundle."),
        click.option("--netrc", type=PathArg(dir_okay=False, exists=True), help="A netrc file with package index credentials, passed as a BuildKit secret" + SITE_NOTE + "."),
        click.option("--network", metavar="MODE", help="The network of the build's RUN steps, e.g. host (an index on this machine's loopback)."),
        click.option("--locks", "locks_dir", default="locks", show_default=True, type=PathArg(file_okay=False), help="Where the locks are (BACKEND/OS-ARCH.txt)."),
    ]

    @functools.wraps(f)  # with the options already on f
    def wrapper(**kw):
        site = site_settings(kw.get("matrix_path"), registry_mirrors=kw.pop("mirrors"), index_mirrors=kw.pop("index_mirrors"),
                     wheelhouse=kw.pop("wheelhouse"), ca_bundle=kw.pop("ca_bundle"), netrc=kw.pop("netrc"))
        kw["inputs"] = _Inputs(site, *(kw.pop(n) for n in ("no_ca_bundle", "network", "locks_dir")))
        return f(**kw)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def engine(setup: bool = True):
    """The engine the command works on (--engine, $ENVBUILD_ENGINE, else a Docker daemon that answers, else Podman);
    with `setup`, where no Docker engine answers (Debian, Ubuntu), offer to install and start one."""
    from envbuild.engine.select import choose
    from envbuild.host.engine_setup import ensure_engine

    ctx = click.get_current_context()
    engine = choose(ctx.find_root().obj.get("engine") if ctx.find_root().obj else None).engine
    if setup:
        ask = (lambda question: click.confirm(question, err=True)) if sys.stdin.isatty() else None
        ensure_engine(engine, yes=bool(ctx.obj and ctx.obj.get("yes")), ask=ask, echo=lambda line: click.echo(line, err=True))
    return engine


def packaged_matrix(matrix_path: str | None) -> bool:
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


def load(matrix_path: str | None, overrides: tuple[str, ...] = (), *, fields: bool = True):
    """The matrix as the site sees it: the settings' base images (base_images) and matrix fields ([matrix]), each
    refused at its file and line when it names no field, then --set, which wins. Without `fields`, the file's own
    pins (bump edits them)."""
    from envbuild import matrix

    packaged_matrix(matrix_path)
    path = matrix_path or matrix.default_path()
    site = site_settings(matrix_path)
    bases = tuple((("backends", n, "base_image"), image, site.origin("base_images", n))
                  for n, image in site.base_images.items())
    fields = site.matrix_fields if fields else ()
    if not bases and not fields:
        return matrix.load(path, overrides)
    if bases:  # a base for a backend this matrix lacks is another project's: only the matrix's own take it
        names = {b.name for b in matrix.load(path, overrides, with_facts=False).backends}
        bases = tuple(b for b in bases if b[0][1] in names)
    return matrix.load(path, overrides, site=bases + tuple(fields))


def emit_json(data: Any, *, verbatim: bool = False) -> None:
    """A JSON document on stdout; `verbatim`: one built from data that holds no secret (the matrix, a host's facts),
    printed as it is, without the output layer's guesses at token shapes (see core/output.print_data)."""
    text = json.dumps(data, indent=2, sort_keys=False)
    if verbatim:
        from envbuild.core.output import print_data

        print_data(text)
    else:
        click.echo(text)


def auto(m, *, native: bool = False) -> str:
    """`--backend auto` (host/pick.py chooses), said on stderr with the evidence."""
    from envbuild.host import pick

    name, reason = pick.auto(m, native=native)
    click.echo(f"auto: chose {name} ({reason})", err=True)
    return name


def choose(m, backends: tuple[str, ...], variant: str | None = None, *, for_host: bool = False) -> list:
    """The backends --backend names (host/pick.py chooses; its choices said on stderr); no name, or 'all' with
    --variant, is a usage error."""
    from envbuild.host import pick

    names = pick.names(backends)
    if not names:
        raise click.UsageError("say which backend: --backend NAME (or --backend all, or --backend auto)")
    if "all" in names and variant:
        raise click.UsageError("--variant chooses within one backend: name it (--backend cuda --variant 12.6)")
    return pick.choose(m, names, variant, for_host=for_host, echo=lambda line: click.echo(line, err=True))


def tag_arg(value: str | None) -> str | None:
    """A tag as a registry takes it (128 characters of [A-Za-z0-9_.-], not starting with . or -), or exit 2."""
    from envbuild.core.imageref import TAG

    if value is not None and not TAG.match(value):
        raise click.BadParameter(f"{quoted(value)} is not a tag (letters, digits, '_', '.', '-'; at most 128)",
                                 param_hint="'--tag'")
    return value


def write_output(path: str, text: str) -> None:
    from envbuild.core.files import write_atomic

    write_atomic(Path(path), scrub(text))  # a report holds no secret either


def source_options(f):
    """Where outdated and bump ask: the same --mirror, --ca-bundle and --netrc as build."""
    for option in reversed([
        click.option("--mirror", "mirrors", multiple=True, metavar="FROM=TO", help="Ask a mirror for base image tags, e.g. docker.io=mirror.corp:5000 (repeatable)" + SITE_NOTE + "."),
        click.option("--ca-bundle", type=PathArg(dir_okay=False, exists=True), help="CA bundle for the indexes and registries [default: the site's settings, else $SSL_CERT_FILE, $REQUESTS_CA_BUNDLE or $PIP_CERT]."),
        click.option("--netrc", type=PathArg(dir_okay=False, exists=True), help="A netrc file with package index credentials" + SITE_NOTE + "."),
    ]):
        f = option(f)
    return f


def sources_for(mirrors, ca_bundle, netrc, matrix_path=None, index_mirrors=None):
    """outdated, bump and metadata ask through the site's settings (mirrors, CA bundle, netrc), as build does."""
    from envbuild.maintain.sources import Sources

    site = site_settings(matrix_path, registry_mirrors=mirrors, ca_bundle=ca_bundle, netrc=netrc)
    return Sources.checked(site.registry_mirrors, site.path("ca_bundle"), site.path("netrc"),
                           site.index_mirrors if index_mirrors is None else index_mirrors)


SKIP_VERIFY_HELP = ("Do not verify the image even though a key is configured: its signature, its signed attestations "
                    "(SBOM, provenance) and its signed smoke result are not checked.")


def verify_options(f):
    f = click.option("--insecure-skip-verify", is_flag=True, help=SKIP_VERIFY_HELP)(f)
    f = click.option("--key", metavar="FILE", help="Verify the image with this public key (cosign.pub) first, and refuse it unless signed by it with a passing smoke attestation [default: $ENVBUILD_VERIFY_KEY, else the matrix's trust.public_key].")(f)
    return f


def prompt():
    """Asks for a passphrase on a terminal (hidden); None where there is none to ask on."""
    if not sys.stdin.isatty():
        return None
    return lambda question: click.prompt(question, hide_input=True, err=True)


def signing_key(given: str | None):
    from envbuild.ship.trust import keys

    return keys.signing_key(given, prompt=prompt())


def verify_key(given: str | None, skip: bool, matrix=None):
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


def append_output(path: str, text: str) -> None:
    """Append (a CI job summary collects every step's lines)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(safe(text))
