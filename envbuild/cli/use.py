"""The commands of "Use an image": list, show, detect, doctor, pick, pull, run, env, verify."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from envbuild.core.errors import EnvbuildError, InvalidInput, NoVariantFitsError
from envbuild.core.output import print_data
from envbuild.cli import options
from envbuild.cli.app import cli
from envbuild.engine.runspec import RUNTIMES
from envbuild.cli.options import PathArg, PlatformArg, auto, choose, emit_json, image_ref, listed, load, matrix_options, site_settings, verify_key, verify_options


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--compat", is_flag=True, help="The compatibility table: what each image needs of the host (minimum driver, architectures), its platforms, size and last smoke result.")
@click.option("--markdown", is_flag=True, help="With --compat: Markdown, as COMPATIBILITY.md holds it.")
@click.option("--manifest", type=PathArg(dir_okay=False, exists=True), help="With --compat: take image sizes and smoke results from this manifest.")
@click.option("--check", "check_path", type=PathArg(dir_okay=False), metavar="FILE", help="With --compat: write nothing; exit 1 when FILE is not the current Markdown table.")
@matrix_options
def list_(as_json: bool, compat: bool, markdown: bool, manifest: Path | None, check_path: Path | None, matrix_path: str,
          overrides: tuple[str, ...]) -> None:
    """Every backend: what it is, its base image, torch and transformers. In full: `show`, `--json`.

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
    from envbuild.core.files import read_host
    from envbuild.ship import manifest as manifests

    m = load(matrix_path, overrides)
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
            emit_json([{k: v for k, v in r.items()} for r in rows])
        elif markdown:
            click.echo(text, nl=False)
        else:
            click.echo(report.table(rows, report.COMPAT_COLUMNS))
        return
    if as_json:
        emit_json([report.backend_summary(b, m) for b in m.backends])
        return
    click.echo(report.fitted_table(report.list_rows(m), report.LIST_COLUMNS))


@cli.command()
@click.argument("backend_arg", metavar="[BACKEND]", required=False)
@click.option("--backend", "-b", "backend", metavar="NAME", help="The backend to show (or name it as the argument).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--verbose", is_flag=True, help="Also the device string, the probe's checks, apt packages, env and CI runner labels.")
@matrix_options
def show(backend_arg: str | None, backend: str | None, as_json: bool, verbose: bool, matrix_path: str,
         overrides: tuple[str, ...]) -> None:
    """One backend in full, with the `docker run` flags for its device.

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
    m = load(matrix_path, overrides)
    b = m.backend(backend_arg or backend)
    detail = report.backend_detail(m, b)
    if as_json:
        emit_json(detail, verbatim=True)
        return
    print_data(report.describe(detail, verbose=verbose))


@cli.command("run", context_settings={"allow_interspersed_args": False})
@click.option("--backend", "-b", default="auto", show_default=True, metavar="NAME", help="The backend whose image to run, or 'auto' (the one detected here).")
@click.option("--variant", metavar="NAME", help="Which of the backend's variants: its name (cuda-cu126), suffix (cu126) or stack release (12.6) [default: the newest this host runs; see `envbuild pick`].")
@click.option("--image", callback=image_ref, help="The image [default: the backend's REPO:BACKEND tag from the matrix].")
@click.option("--cache", metavar="DIR|VOLUME", help="What to mount at /cache (Hugging Face downloads, compiled kernels): a folder (with a '/', e.g. ./cache) or a volume name [default: the volume envbuild-cache].")
@click.option("--volume", "-v", "volumes", multiple=True, metavar="SRC:DST[:ro]", help="Mount a folder or volume, as in docker run (repeatable).")
@click.option("--env", "-e", "env", multiple=True, metavar="NAME[=VALUE]", help="Pass a variable; NAME alone takes its value from here, never printed (repeatable).")
@click.option("--workdir", type=click.Path(file_okay=False, exists=True), help="The folder mounted at /workspace, the working directory [default: the current folder].")
@click.option("--no-workdir", is_flag=True, help="Mount no folder at /workspace.")
@click.option("--tty/--no-tty", default=None, help="Allocate a terminal [default: when this one is a terminal].")
@click.option("--dry-run", is_flag=True, help="Print the exact `docker run` line (secret values masked) and run nothing.")
@click.option("--ignore-host", is_flag=True, help="Skip the check that this host's driver and device architecture can run the image (see `envbuild doctor`).")
@verify_options
@matrix_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run_(backend, variant, image, cache, volumes, env, workdir, no_workdir, tty, dry_run, ignore_host, key, insecure_skip_verify,
         matrix_path, overrides, command) -> None:
    """Work in a backend's image: a shell, or a command. `envbuild run [OPTIONS] [-- COMMAND ...]`; a shell
    without a command.

    The container gets the backend's device flags, a cache at /cache (downloads and compiled kernels stay), the
    current folder at /workspace (files written there are yours) and a terminal when this is one. The exit status
    is the command's; the container is removed afterwards.

    \b
    Examples:
      envbuild run --backend cuda -- python train.py
      envbuild run -e HF_TOKEN --cache ./cache -- python -c "import torch"
      envbuild run --dry-run --backend rocm
    """
    from envbuild.workspace import run as runner

    # Shared memory from the matrix; your uid and group 0 in the container; Ctrl-C and SIGTERM reach the command.
    # The host is checked first as for `smoke`; with --key (or $ENVBUILD_VERIFY_KEY) the image must verify
    # (signature, attestations, passed smoke) before it starts.

    m = load(matrix_path, overrides)
    b = choose(m, (backend,), variant, for_host=True)[0]
    opts = runner.RunOptions(image=image, cache=cache, volumes=volumes, env=env, workdir=workdir,
                             mount_workdir=not no_workdir, command=command, tty=tty)
    public = None if dry_run else verify_key(key, insecure_skip_verify, m)
    sys.exit(runner.run(m, b, opts, options.engine(setup=False) if dry_run else options.engine(), dry_run=dry_run, ignore_host=ignore_host, key=public))


@cli.command()
@click.option("--backend", "-b", default="auto", show_default=True, metavar="NAME", help="A backend (cuda: the newest of its variants this host runs), a variant by name (cuda-cu126), or 'auto' (the one detected here, or the kind --gpu names).")
@click.option("--variant", metavar="NAME", help="Choose the variant by hand: its name (cuda-cu126), suffix (cu126) or stack release (12.6); refused when this host cannot run it.")
@click.option("--driver", metavar="VERSION", help="Answer for a host with this GPU driver (535.104.05, as nvidia-smi prints it), e.g. the compute nodes seen from a login node: nothing of this machine is read.")
@click.option("--gpu", "gpus", multiple=True, metavar="ARCH", help="A GPU of the host described (repeatable, one per kind): its architecture (8.0, sm_80, gfx942) or a product name (A100, H100, V100, MI300X). Nothing of this machine is read.")
@click.option("--arch", "host_arch", type=click.Choice(["amd64", "arm64"]), help="With --driver/--gpu: the described host's CPU architecture, whose image carries its own GPU architectures (CUDA 13 on arm64 adds sm_110) [default: amd64].")
@click.option("--for", "tool", type=click.Choice(RUNTIMES), help="Print how to fetch and run the image with this tool (enroot: Slurm with pyxis; kubernetes: a pod spec as YAML) instead of the bare reference.")
@click.option("--root", type=PathArg(file_okay=False, exists=True), help="Read this folder as the host's root (its proc/, sys/, dev/ and PATH folders) instead of /, as `envbuild detect --root` does.")
@click.option("--manifest", type=PathArg(dir_okay=False), help="Print the image by the digest this manifest records (REPO@sha256:...), as `envbuild publish --manifest` wrote it.")
@click.option("--json", "as_json", is_flag=True, help="Print the choice as JSON: the image, native or minor-version, each GPU's verdict and every variant with why it fits or not (also when none fits).")
@matrix_options
def pick(backend, variant, driver, gpus, host_arch, tool, root, manifest, as_json, matrix_path, overrides) -> None:
    """The one image reference that fits this host's driver and devices. With --driver and --gpu, the one that
    fits the host they describe; either before any pull.

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
    from envbuild.host import pick as picking

    m = load(matrix_path, overrides)
    described = picking.describe(driver, gpus, f"linux/{host_arch}" if host_arch else None)
    if host_arch and described is None:
        raise click.UsageError("--arch describes a host with --driver/--gpu; without them pick reads this one")
    if described is not None and root is not None:
        raise click.UsageError("--root reads a host; --driver and --gpu describe one: give one or the other")
    try:
        answer = picking.pick(m, backend, variant_text=variant, described=described, root=root,
                              manifest=Path(manifest) if manifest else None)
    except NoVariantFitsError as exc:
        if as_json and exc.data is not None:
            emit_json(exc.data, verbatim=True)
            sys.exit(1)
        raise
    if as_json:
        emit_json(answer.to_json(), verbatim=True)
        return
    for line in answer.lines():
        click.echo(line, err=True)
    print_data(answer.how_to_run(tool) if tool else answer.ref)  # for scripts: as it is, never scrubbed by a guess


@cli.command("detect")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: every backend with its evidence and what is missing.")
@click.option("--root", type=PathArg(file_okay=False, exists=True), help="Read this folder as the host's root (its dev/, sys/ and PATH folders) instead of /, e.g. a fake host for tests; the Docker engine is then not asked.")
@matrix_options
def detect_(as_json: bool, root: Path | None, matrix_path: str, overrides: tuple[str, ...]) -> None:
    """Which backends this host can run, with the evidence.

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
    from envbuild.host import detect as d, pick as picking

    m = load(matrix_path, overrides)
    det = d.detect_host(m, root)
    if as_json:
        emit_json({**det.to_json(), "variants": picking.variant_fits(m, root), **report.root_facts(root)})
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
@click.option("--root", type=PathArg(file_okay=False, exists=True), help="Read device nodes, PCI devices and groups under this folder instead of / (a fake host for tests).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@matrix_options
def doctor(backend: str, registry: str | None, publish: bool, root: Path | None, as_json: bool, matrix_path: str,
           overrides: tuple[str, ...]) -> None:
    """Whether this host can build, run (and publish) a backend. Each failure comes with its fix.

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
    from envbuild.core.imageref import check_repository

    from envbuild.core import heartbeat

    try:
        m = load(matrix_path, overrides)
        name = auto(m, native=True) if backend == "auto" else backend
        if publish and not registry:
            registry = site_settings(matrix_path).get("registry") or m.image.repository
        if registry:
            registry = check_repository(registry)
        # each question is bounded (the engine 20 s, a registry or index 5 s), but several dead ones add up
        with heartbeat.waiting(None if as_json else lambda s: click.echo(s, err=True),
                               "checking (an engine, registry or index that does not answer takes seconds each)"):
            report = doc.diagnose(m, m.backend(name), registry=registry, root=root or "/", site=site_settings(matrix_path),
                                  connector=functools.partial(doc.connect, engine_name=(click.get_current_context().find_root().obj or {}).get("engine")))
    except EnvbuildError as exc:
        if not as_json:
            raise
        # a script reading --json gets JSON whatever went wrong: the error in it, the exit code as without --json
        emit_json({"ok": False, "error": str(exc), "exit_code": exc.exit_code})  # masked as all stdout is
        sys.exit(exc.exit_code)
    if as_json:
        emit_json({**report.to_json(), **reports.root_facts(root)})
    else:
        click.echo(reports.doctor_text(report))
        if root:  # which facts came from where
            click.echo(f"(--root {root}: device nodes, PCI, groups and driver files read under it; programs such as "
                       "nvidia-smi only this machine's, none run from under it; the engine is this machine's)")
    if not report.ok:
        sys.exit(1)


@cli.command("env")
@click.option("--backend", "-b", default="auto", show_default=True, metavar="NAME", help="cpu, mps (on a Mac with Apple Silicon), a pip-torch backend (cuda, xpu, npu, tpu), or 'auto' (the one detected here).")
@click.option("--dir", "directory", required=True, type=PathArg(file_okay=False), help="Where to make the environment (must not exist, or be empty, unless --force).")
@click.option("--python", "python", metavar="EXE", help="The interpreter to base it on [default: the one running envbuild].")
@click.option("--force", is_flag=True, help="Replace the virtual environment already at --dir.")
@click.option("--no-probe", is_flag=True, help="Do not run the probe once the environment is made.")
@click.option("--dry-run", is_flag=True, help="Print the exact commands, for any backend and platform; create nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (the plan with --dry-run; else the result with the probe's report).")
@click.option("--verbose", is_flag=True, help="Show pip's full output.")
@matrix_options
def env(backend: str, directory: Path, python: str | None, force: bool, no_probe: bool, dry_run: bool, as_json: bool,
        verbose: bool, matrix_path: str, overrides: tuple[str, ...]) -> None:
    """A native virtual environment with an image's pins (mps, no Docker). For where no container can go.

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

    m = load(matrix_path, overrides)
    b = m.backend(auto(m, native=True) if backend == "auto" else backend)
    if dry_run:
        p = venv.plan(m, b, directory, python=python)
        if as_json:
            emit_json({**p.to_json(), "dry_run": True})
        else:
            click.echo(p.script())
        return
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    result = venv.create(m, b, directory, python=python, force=force, probe=not no_probe, echo=echo, verbose=verbose)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(report.env_text(result))
    if not result.ok:
        sys.exit(1)


@cli.command()
@click.option("--backend", "-b", "backends", multiple=True, default=["auto"], show_default=True, metavar="NAME", help="Backend whose image to pull, 'all', or 'auto' (the one detected here) (repeatable).")
@click.option("--variant", metavar="NAME", help="Which of the backend's variants: its name (cuda-cu126), suffix (cu126) or stack release (12.6) [default: the newest this host runs; see `envbuild pick`].")
@click.option("--registry", metavar="REPOSITORY", help="Where to pull from [default: the site's registry setting, else the matrix's image.repository].")
@click.option("--tag", metavar="TAG", help="Tag to pull [default: the backend's pinned tag from the matrix, as `envbuild show BACKEND` prints it].")
@click.option("--manifest", type=PathArg(dir_okay=False), help="Refuse the image unless its digest is the one this manifest records.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--ignore-host", is_flag=True, help="Skip the check that this host's driver and device architecture can run the image (see `envbuild doctor`).")
@click.option("--platform", type=PlatformArg(), help="The platform to pull from the tag's image index [default: this host's]; another architecture only where QEMU (binfmt) runs it.")
@verify_options
@matrix_options
def pull(backends, variant, registry, tag, manifest, as_json, ignore_host, platform, key, insecure_skip_verify, matrix_path, overrides) -> None:
    """Pull a backend's prebuilt image, verify it, say how to run it.

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

    registry = registry or site_settings(matrix_path).get("registry")
    m = load(matrix_path, overrides)
    chosen = choose(m, backends, variant, for_host=True)
    listed(chosen, (platform,) if platform else ())
    if tag and len(chosen) > 1:
        raise click.UsageError("--tag needs a single backend")
    results = []
    engine = options.engine(setup=False)
    public = verify_key(key, insecure_skip_verify, m)
    for backend in chosen:
        r = p.pull(m, backend, engine, registry=registry, tag=tag, manifest=manifest, echo=lambda line: click.echo(line, err=True),
                   ignore_host=ignore_host, key=public, platform=platform)
        results.append(r)
        if not as_json:
            click.echo(report.pulled_text(r, manifest))
    if as_json:
        emit_json([r.to_json() for r in results])


@cli.command("verify")
@click.argument("image")
@click.option("--key", metavar="FILE", help="The public key (cosign.pub) [default: $ENVBUILD_VERIFY_KEY].")
@click.option("--no-smoke", is_flag=True, help="Do not require a signed smoke attestation (the signature and every attestation are still checked).")
@click.option("--json", "as_json", is_flag=True, help="Print what was proved as JSON.")
def verify_(image: str, key: str | None, no_smoke: bool, as_json: bool) -> None:
    """Check an image's signature and attestations in its registry. IMAGE (REPOSITORY:TAG or
    REPOSITORY@DIGEST) is checked against a public key.

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
        emit_json(proved.to_json())
    else:
        for line in proved.lines():
            click.echo(line)
