"""The commands of "Publish and maintain" that ship and sign images: publish, sbom, keygen, attest."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from envbuild.core.errors import InvalidInput
from envbuild.cli import options
from envbuild.cli.app import cli
from envbuild.cli.options import PathArg, PlatformArg, append_output, choose, emit_json, image_ref, listed, load, matrix_options, prompt, signing_key, site_settings, tag_arg, write_output


MANIFEST_HELP = "The manifest of published images [default: ./envbuild-manifest.json]."


@cli.command()
@click.option("--backend", "-b", "backends", multiple=True, metavar="NAME", help="Backend to publish, or 'all' (repeatable).")
@click.option("--registry", metavar="REPOSITORY", help="Where to push, e.g. ghcr.io/org/envbuild or localhost:5000/envbuild [default: the site's registry setting, else the matrix's image.repository].")
@click.option("--image", callback=image_ref, help="The local image to publish (one backend) [default: the backend's REPO:BACKEND tag from the matrix].")
@click.option("--manifest", type=PathArg(dir_okay=False), help=MANIFEST_HELP)
@click.option("--smoke-json", "smoke_json", multiple=True, type=PathArg(dir_okay=False, exists=True), help="`envbuild smoke --json` output for this image (one per platform: repeatable): summarized into the manifest; a failed result refuses the push, and a platform of an index (--platform, --no-index) needs its own.")
@click.option("--platform", "platforms", multiple=True, type=PlatformArg(many=True), help="Publish these platforms' images as one image index under the backend's tags (repeatable or comma-separated, e.g. linux/amd64,linux/arm64); each is checked and smoke-tested first, a failed one is left out and the publish exits 1.")
@click.option("--no-index", is_flag=True, help="With --platform: push the platform's image (REG:PINNED-ARCH) and record it, but no index: a native runner's part, joined later with --index-from.")
@click.option("--index-from", "index_from", multiple=True, type=PathArg(dir_okay=False, exists=True), help="Manifests written by per-platform publishes (--no-index): push one index of their platforms under the backend's tags (repeatable).")
@click.option("--force", is_flag=True, help="Push even when the smoke result failed or the image's labels disagree with the matrix (the manifest says so).")
@click.option("--rebuild", is_flag=True, help="Push the image even when the registry holds its content already (its REG:BACKEND-in-KEY tag); without it only the tags move there.")
@click.option("--summary", "summary_path", type=click.Path(dir_okay=False), help="Append a Markdown table of what landed to this file, e.g. $GITHUB_STEP_SUMMARY.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--sign-key", metavar="FILE|env://VAR", help="Sign every pushed digest and attest the image with this cosign key [default: $ENVBUILD_SIGNING_KEY, the key's text, when set]; passphrase from $ENVBUILD_KEY_PASSWORD or $COSIGN_PASSWORD, else asked.")
@matrix_options
def publish(backends, registry, image, manifest, smoke_json, platforms, no_index, index_from, force, rebuild, summary_path,
            as_json, sign_key, matrix_path, overrides) -> None:
    """Push images and record their digests in the manifest. One backend's image, or all.

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
    from envbuild.ship import manifest as manifests

    m = load(matrix_path, overrides)
    chosen = choose(m, backends)
    if image and len(chosen) > 1:
        raise click.UsageError("--image needs a single backend")
    wanted = tuple(dict.fromkeys(p_ for many in platforms for p_ in many))
    listed(chosen, wanted)
    if no_index and (not wanted or index_from):
        raise click.UsageError("--no-index goes with --platform (and not with --index-from)")
    if image and len(wanted) > 1:
        raise click.UsageError("--image names one platform's image: give one --platform")
    registry = registry or site_settings(matrix_path).get("registry")
    opts = p.PublishOptions(registry=registry, image=image, manifest=manifest or Path(manifests.DEFAULT),
                            smoke_json=smoke_json[0] if smoke_json else None, smoke_jsons=tuple(smoke_json[1:]),
                            force=force, platforms=wanted, no_index=no_index, index_from=tuple(index_from),
                            sign_key=signing_key(sign_key), rebuild=rebuild)
    results = p.publish(m, chosen, opts, options.engine(setup=False), echo=lambda line: click.echo(line, err=True))
    for r in results:
        for line in report.published_lines(r, opts.manifest):
            click.echo(line, err=as_json)
        if not r.ok:
            click.secho(f"{r.backend}: publish FAILED: {r.error}", fg="red", err=True)
    if as_json:
        emit_json([r.to_json() for r in results])
    if summary_path:
        append_output(summary_path, report.published_summary([r.entry for r in results if r.ok and r.entry]) + "\n")
    if not all(r.ok for r in results):
        sys.exit(1)


@cli.command("sbom")
@click.option("--backend", "-b", required=True, metavar="NAME", help="The backend whose image to describe.")
@click.option("--image", callback=image_ref, help="The image [default: the backend's REPO:BACKEND tag from the matrix].")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the SBOM to this file [default: standard output].")
@matrix_options
def sbom_(backend, image, output, matrix_path, overrides) -> None:
    """An image's bill of materials (CycloneDX JSON). Its software bill of materials, as CycloneDX 1.6 JSON.

    Read from the image without running it: every Python distribution installed in it with its version
    (those it locked with their sha256, and those of its base), its labels and its base image. `publish`
    writes one beside the manifest. Read one with `jq '.components[] | [.name, .version] | @tsv'`.

    \b
    Examples:
      envbuild sbom --backend cpu -o sbom.json
    """
    from envbuild.ship.sbom import sbom

    m = load(matrix_path, overrides)
    b = m.select([backend])[0]
    text = sbom(options.engine(setup=False), image or m.tags(b)[0])
    if output:
        write_output(output, text)
    else:
        click.echo(text, nl=False)


@cli.command("keygen")
@click.option("--output-key-prefix", "prefix", default="cosign", show_default=True, type=PathArg(dir_okay=False), help="Write PREFIX.key and PREFIX.pub.")
@click.option("--force", is_flag=True, help="Replace a key pair already there.")
def keygen(prefix: Path, force: bool) -> None:
    """Make a cosign signing key pair. PREFIX.key (encrypted, mode 0600) and PREFIX.pub, in cosign's format.

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

    secret = keys.passphrase(prompt=prompt(), confirm=True)
    private, public = keys.write_pair(prefix, secret, force=force)
    click.echo(f"wrote {private} (private: keep it secret) and {public} (public: share it, commit it)")
    click.echo(f"key {keys.load_public(public.read_bytes(), str(public)).fingerprint()}")


@cli.command("attest")
@click.option("--backend", "-b", required=True, metavar="NAME", help="The backend whose published image the smoke result is for.")
@click.option("--registry", metavar="REPOSITORY", help="Where the image is [default: the site's registry setting, else the matrix's image.repository].")
@click.option("--tag", callback=lambda ctx, param, value: tag_arg(value), help="Its tag [default: the backend's pinned tag from the matrix].")
@click.option("--smoke-json", required=True, type=PathArg(dir_okay=False, exists=True), help="`envbuild smoke --json` output for that image (pulled from the registry).")
@click.option("--sign-key", metavar="FILE|env://VAR", help="The cosign key [default: $ENVBUILD_SIGNING_KEY].")
@click.option("--force", is_flag=True, help="Attest even a failed result (verify then refuses the image); never one of another image.")
@matrix_options
def attest_(backend, registry, tag, smoke_json, sign_key, force, matrix_path, overrides) -> None:
    """Add a signed smoke result to an image in its registry. A signed smoke attestation, for an image already
    pushed (e.g. a nightly run on hardware).

    The result must be of that very image: its image id is the registry manifest's config digest.

    \b
    Examples:
      envbuild attest --backend cuda --smoke-json smoke.json
    """
    from envbuild.ship.trust.attest import attest_smoke
    from envbuild.core.imageref import Reference
    from envbuild.core.imageref import check_repository
    from envbuild.ship import manifest as manifests

    m = load(matrix_path, overrides)
    b = m.select([backend])[0]
    key = signing_key(sign_key)
    if key is None:
        raise InvalidInput("no signing key: pass --sign-key FILE or set ENVBUILD_SIGNING_KEY")
    registry = registry or site_settings(matrix_path).get("registry")
    repo = check_repository(registry or m.image.repository, "--registry" if registry else "image.repository")
    result = manifests.load_smoke_results(smoke_json).get(b.name)
    if result is None:
        raise InvalidInput(f"--smoke-json {smoke_json} has no result for backend {b.name}")
    done = attest_smoke(repo, tag or Reference.parse(m.tags(b)[1]).tag, result, key, force=force, echo=lambda line: click.echo(line, err=True))
    for a in done.attestations:
        click.echo(f"{b.name}: attested {repo}@{a['digest']} ({a['tag']})")
