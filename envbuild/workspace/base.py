"""`envbuild base`: a Debian or Ubuntu base image made from the distribution's archive, for a site no registry serves.

mmdebstrap makes the minimal root filesystem (`--variant=minbase`, as Docker's official debian and ubuntu images
are) from the archive or a site's mirror of it; the tarball is loaded into the engine under the name the backend's
base_image uses, so the next build finds it locally. The same inputs give the same tarball, bit for bit, and so
the same layer (diff id): SOURCE_DATE_EPOCH (by default the archive's own Release date) clamps every time stamp,
and what varies by host (/etc/hostname, /etc/resolv.conf: the engine provides them) is left out. The inputs are
the archive's signed Release file (which fixes every package's version), the epoch and the options: a tarball
made from the same ones is kept in envbuild's cache and reused.
"""

from __future__ import annotations

import email.utils
import hashlib
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from envbuild.core import heartbeat, paths
from envbuild.core.distbase import MADE_LABEL, Suite, suite_for
from envbuild.core.errors import DockerError, EnvbuildError, InvalidInput
from envbuild.core.platform import arch as host_arch

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI, Image
    from envbuild.matrix.model import Backend

# The slim images' dpkg excludes (Docker's debian:*-slim): no manuals, docs (but their copyright), info, locales.
SLIM = ("path-exclude=/usr/share/man/*", "path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
        "path-exclude=/usr/share/info/*", "path-exclude=/usr/share/groff/*", "path-exclude=/usr/share/lintian/*",
        "path-exclude=/usr/share/locale/*")
CONFIG = ("ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 'CMD ["bash"]')
RELEASE_TIMEOUT = 15.0


class BaseError(EnvbuildError):
    """Making a base failed: the archive did not answer, mmdebstrap failed or is missing."""


@dataclass(frozen=True)
class BasePlan:
    backend: str
    image: str  # the name it is loaded as: the backend's base_image
    suite: Suite
    codename: str  # the suite asked for (--suite, else the image's)
    mirror: str
    arch: str
    slim: bool
    epoch: str | None  # SOURCE_DATE_EPOCH from the environment; None: the archive's Release date

    def argv(self, output: str, epoch: str) -> list[str]:
        argv = ["mmdebstrap", "--variant=minbase", "--format=tar", f"--architectures={self.arch}",
                f"--components={','.join(self.suite.components)}", '--aptopt=Acquire::Retries "3"',
                # what differs between hosts, and the engine provides in every container anyway
                '--customize-hook=rm -f "$1/etc/hostname" "$1/etc/resolv.conf"']
        if self.suite.distribution != "Debian":
            argv.append(f"--keyring={self.suite.keyring}")
        argv += [f"--dpkgopt={opt}" for opt in (SLIM if self.slim else ())]
        return [*argv, self.codename, output, self.mirror]

    def describe(self) -> list[str]:
        epoch = self.epoch or "the archive's Release date"
        return [f"[{self.backend}] would make {self.image} from {self.suite.distribution}'s archive: suite {self.codename}, "
                f"{self.arch}, minbase{' (slim)' if self.slim else ''}, from {self.mirror}, SOURCE_DATE_EPOCH={epoch}",
                f"$ {' '.join(_quoted(self.argv('BASE.tar', self.epoch or 'EPOCH')))}",
                f"then load it into the engine as {self.image}",
                *([] if shutil.which("mmdebstrap") else ["mmdebstrap is not installed: `apt-get install mmdebstrap` first"])]


@dataclass(frozen=True)
class Made:
    plan: BasePlan
    tar: Path
    layer: str  # sha256:... of the tarball: the layer's diff id once loaded
    epoch: str
    cached: bool
    image: Image | None = None  # the engine's, once loaded

    def to_json(self) -> dict:
        return {"backend": self.plan.backend, "image": self.plan.image, "suite": self.plan.codename,
                "archive": self.plan.mirror, "arch": self.plan.arch, "source_date_epoch": self.epoch, "tar": str(self.tar),
                "layer": self.layer, "cached": self.cached, "image_id": self.image.id if self.image else None}


def _quoted(argv: list[str]) -> list[str]:
    import shlex

    return [shlex.quote(a) for a in argv]


def plan(backend: Backend, *, suite: str | None = None, mirror: str | None = None, arch: str | None = None,
         environ: dict | None = None) -> BasePlan:
    """What `envbuild base` makes for `backend`; CannotMake (exit 2) for a base no archive makes, saying why."""
    environ = os.environ if environ is None else environ
    if not backend.base_image:
        raise InvalidInput(f"{backend.name} has no base image to make: it is not built in a container")
    found = suite_for(backend.base_image, backend.name)
    machine = arch or host_arch()
    epoch = environ.get("SOURCE_DATE_EPOCH") or None
    if epoch is not None and not (epoch.isascii() and epoch.isdigit()):  # isdigit alone takes '١٧٠٠'
        raise InvalidInput(f"SOURCE_DATE_EPOCH={epoch[:40]!r} is not a number of seconds since 1970")
    if mirror is not None and not mirror.startswith(("http://", "https://", "file://")):
        raise InvalidInput(f"--archive {mirror!r}: give the archive's URL, e.g. {found.mirror(machine)} (http, https or file)")
    return BasePlan(backend.name, backend.base_image, found, suite or found.suite, (mirror or found.mirror(machine)).rstrip("/"),
                    machine, "slim" in backend.base_image.rpartition(":")[2], epoch)


def release(p: BasePlan) -> bytes:
    """The suite's signed Release file: which package versions the archive serves now. Fails in seconds."""
    errors = []
    for name in ("InRelease", "Release"):
        url = f"{p.mirror}/dists/{p.codename}/{name}"
        try:
            with urllib.request.urlopen(url, timeout=RELEASE_TIMEOUT) as answer:
                return answer.read(8 << 20)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            errors.append(f"{url}: {getattr(exc, 'reason', None) or exc}")
    raise BaseError(f"cannot read the {p.suite.distribution} archive's {p.codename} suite ({'; '.join(errors)}). Ways out: "
                    f"a mirror of the archive that answers (`envbuild base --backend {p.backend} --archive URL`, http or "
                    "file://); or another suite (`--suite NAME`)")


def release_epoch(text: bytes) -> str:
    """The Release file's Date, as seconds since 1970: the archive's own time, the same for everyone reading it."""
    for line in text.decode("utf-8", "replace").splitlines():
        if line.startswith("Date:"):
            try:
                return str(int(email.utils.parsedate_to_datetime(line[5:].strip()).timestamp()))
            except (TypeError, ValueError):
                break
    raise BaseError("the archive's Release file has no readable Date: set SOURCE_DATE_EPOCH yourself")


def _mmdebstrap_version() -> str:
    out = subprocess.run(["mmdebstrap", "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def key(p: BasePlan, release_text: bytes, epoch: str) -> str:
    """Every input of the tarball: the archive's Release (every package's version), the epoch, mmdebstrap's
    version and its command line."""
    h = hashlib.sha256()
    for part in (release_text, epoch.encode(), _mmdebstrap_version().encode(), "\0".join(p.argv("OUT", epoch)).encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def make_tar(p: BasePlan, *, echo: Callable[[str], None], cache: bool = True, cache_dir: Path | None = None) -> Made:
    """The base's tarball, made by mmdebstrap (or the cached one from the same inputs), with its layer digest."""
    if not shutil.which("mmdebstrap"):
        raise BaseError("mmdebstrap is not installed: `apt-get install mmdebstrap` (Debian, Ubuntu), then run again")
    if p.suite.distribution != "Debian" and not Path(p.suite.keyring).exists():
        raise BaseError(f"{p.suite.keyring} is missing: {p.suite.distribution}'s archive keys are needed to check it "
                        f"(`apt-get install {p.suite.distribution.lower()}-keyring`)")
    echo(f"[{p.backend}] reading {p.mirror}/dists/{p.codename}/InRelease")
    text = release(p)
    epoch = p.epoch or release_epoch(text)
    folder = cache_dir or paths.cache_dir("bases")
    tar = folder / f"{p.suite.distribution.lower()}-{p.codename}-{p.arch}-{key(p, text, epoch)[:20]}.tar"
    if cache and tar.exists():
        echo(f"[{p.backend}] {tar.name}: made before from the same archive state and SOURCE_DATE_EPOCH={epoch}; reused")
        return Made(p, tar, _sha256(tar), epoch, cached=True)
    folder.mkdir(parents=True, exist_ok=True)
    part = tar.with_suffix(f".{os.getpid()}.part")
    argv = p.argv(str(part), epoch)
    echo(f"[{p.backend}] making {p.image} from {p.suite.distribution}'s archive (1 to 3 minutes): {' '.join(_quoted(argv))}")
    env = {**os.environ, "SOURCE_DATE_EPOCH": epoch}
    tail: list[str] = []
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", env=env)
        assert proc.stdout is not None
        # mmdebstrap says each stage ("I: ...") as it starts; downloading or installing may take minutes
        wait = heartbeat.Waiting(lambda s: echo(f"[{p.backend}] {s}"), f"making {p.image} with mmdebstrap")
        with heartbeat.beating(wait.tick):
            for line in proc.stdout:
                line = line.rstrip()
                tail = [*tail[-19:], line]
                if line.startswith(("I:", "E:", "W:")):
                    echo(f"[{p.backend}] mmdebstrap: {line}")
                    wait.spoke()
                elif line.strip():
                    wait.detail = line.strip()
            rc = proc.wait()
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    if rc != 0:
        part.unlink(missing_ok=True)
        raise BaseError(f"mmdebstrap failed (exit {rc}) making {p.image} from {p.mirror}: {' | '.join(tail[-5:])}")
    part.replace(tar)
    return Made(p, tar, _sha256(tar), epoch, cached=False)


def make(p: BasePlan, engine: EngineAPI | None, *, output: Path | None = None, echo: Callable[[str], None],
         cache: bool = True, cache_dir: Path | None = None) -> Made:
    """Make the base; with `output`, only write the tarball there; else load it into the engine as the backend's
    base_image, and check that the engine's layer is the tarball."""
    made = make_tar(p, echo=echo, cache=cache, cache_dir=cache_dir)
    if output is not None:
        part = output.with_name(f".{output.name}.{os.getpid()}.part")
        try:
            shutil.copyfile(made.tar, part)
            part.replace(output)  # whole or not at all
        finally:
            part.unlink(missing_ok=True)
        echo(f"[{p.backend}] wrote {output} (layer {made.layer}); `docker import` it as {p.image} where it is needed")
        return made
    assert engine is not None
    label = f"mmdebstrap {p.codename} {p.arch} {p.mirror} SOURCE_DATE_EPOCH={made.epoch}"
    image = engine.import_image(str(made.tar), p.image, list(CONFIG), {MADE_LABEL: label})
    if made.layer not in image.layers:
        raise DockerError(f"the engine loaded {p.image} with layers {', '.join(image.layers) or 'none'}, not the "
                          f"tarball's {made.layer}")
    echo(f"[{p.backend}] loaded {p.image} (layer {made.layer}); `envbuild build --backend {p.backend}` builds on it")
    return Made(p, made.tar, made.layer, made.epoch, made.cached, image)
