"""`envbuild run`: work in a backend's image, as `docker run` would, with what the backend needs.

The backend's device flags from the matrix, its shared-memory or IPC setting, one cache volume at /cache
(downloads and compiled kernels survive the container), the current folder as the working directory, a
terminal when one is attached, and the command's own exit status. The docker client runs the container
(`--rm`, its signal proxy): Ctrl-C and SIGTERM reach the command, and the container is removed after it.
When the host refuses a flag the backend needs (e.g. `--privileged`), the error says which and why.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.core.errors import EnvbuildError, InvalidInput
from envbuild.core import text
from envbuild.core.output import scrub, secret_name
from envbuild.core.text import unsafe_char
from envbuild.engine import owner
from envbuild.engine.cachemount import CACHE, DEFAULT_CACHE, VOLUME_NAME as _VOLUME_NAME  # noqa: F401
from envbuild.engine.cachemount import cache_mount as _cache_mount, is_folder as _is_folder
from envbuild.ship.trust import VerifyError
from envbuild.smoke import preflight

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI
    from envbuild.matrix import Backend, Matrix

WORKDIR = "/workspace"
RUN_LABEL = "dev.envbuild.run"
# Values of variables with such names are never printed (a --dry-run, an error).
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
REFUSED = 125  # docker run's status when the daemon or runtime would not start the container


class RunRefused(EnvbuildError):
    """The host would not start the container with a flag the backend needs."""

    exit_code = REFUSED


@dataclass(frozen=True)
class RunOptions:
    image: str | None = None
    cache: str | None = None  # a host folder (contains '/' or starts with '.') or a volume name
    volumes: tuple[str, ...] = ()  # SRC:DST[:ro]
    env: tuple[str, ...] = ()  # NAME (its value from this environment) or NAME=VALUE
    workdir: str | None = None  # the host folder mounted at /workspace [default: the current folder]
    mount_workdir: bool = True
    command: tuple[str, ...] = ()
    tty: bool | None = None  # None: when stdin and stdout are terminals


@dataclass(frozen=True)
class Invocation:
    """A `docker run` line: its arguments, and the values that go through the client's environment only."""

    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # NAME=VALUE given on envbuild's command line: passed by name

    def display(self, client: str = "docker", args: list[str] | None = None) -> str:
        """The line, shell-quoted, as a person can run it; no value of a secret-looking variable in it. `args`: what
        the engine's client is given instead (EngineAPI.client_args: Podman's words for the devices)."""
        shown = [client, *(self.args if args is None else args)]
        given = dict(self.env)
        for i, arg in enumerate(shown[:-1]):
            name = shown[i + 1]
            if arg == "-e" and name in given:
                value = "***" if SECRET_NAME.search(name) or secret_name(name) else given[name]
                shown[i + 1] = f"{name}={value}"
        # secrets by value too (a URL's password, a token's shape, whatever the variable is called); escapes shown
        return text.shown(scrub(" ".join(pasteable(arg) for arg in shown)))


def pasteable(arg: str) -> str:
    """One argument quoted for a POSIX shell; one that holds a newline or another control character as bash's
    $'...' with that character escaped, so the pasted line is one line and runs the very same text."""
    if text.unsafe_char(arg) is None:
        return shlex.quote(arg)
    named = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    out = []
    for ch in arg:
        if ch in named:
            out.append(named[ch])
        elif text.unsafe_char(ch) is None:
            out.append(ch)
        else:
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x80 else f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "$'" + "".join(out) + "'"


SHELL = ("sh", "-c", "command -v bash >/dev/null && exec bash || exec sh")  # no command: a shell


def invocation(matrix: Matrix, backend: Backend, opts: RunOptions, *, interactive: bool,
               uid: int | None = None, books: bool = True) -> Invocation:
    """The `docker run` arguments for `opts` (pure: the tests read them, --dry-run prints them). With `books`
    (a run envbuild starts), the container's one-off name and the labels envbuild keeps its books by (whose run
    it is: this machine, its boot, the process); without (--dry-run, the status page: a line to use without
    envbuild), neither."""
    image = opts.image or matrix.tags(backend)[0]
    args = ["run", "--rm", "--init"]
    if books:
        args += ["--name", f"envbuild-run-{backend.name}-{uuid.uuid4().hex[:8]}",
                 "--label", f"{RUN_LABEL}=1", "--label", f"dev.envbuild.backend={backend.name}"]
        for key, value in owner.labels().items():  # whose: a clean never takes a live run's container
            args += ["--label", f"{key}={value}"]
    if opts.tty if opts.tty is not None else interactive:
        args.append("-it")
    elif interactive or not opts.command:
        args.append("-i")
    args += backend.run.docker_args()
    args += ["-v", _cache_mount(opts.cache)]
    host_folders = _is_folder(opts.cache or "")
    if opts.mount_workdir:
        folder = Path(opts.workdir or Path.cwd()).expanduser().resolve()
        if not folder.is_dir():
            raise InvalidInput(f"--workdir {opts.workdir}: no such folder")
        args += ["-v", f"{folder}:{WORKDIR}", "-w", WORKDIR]
        host_folders = True
    for volume in opts.volumes:
        src, sep, rest = volume.partition(":")
        if not sep or not src or not rest.startswith("/") or unsafe_char(volume) is not None or src.startswith("-"):
            flag = " (-v is --volume, as in docker run; --verbose has no short form)" if volume.startswith("-") else ""
            raise InvalidInput(f"-v {volume!r}: expected SRC:DST[:ro] with an absolute DST and no control characters, "
                               f"e.g. ./data:/data:ro{flag}")
        if _is_folder(src):
            src = str(Path(src).expanduser().resolve())
            host_folders = True
        args += ["-v", f"{src}:{rest}"]
    given: list[tuple[str, str]] = []
    for item in opts.env:
        name, sep, value = item.partition("=")
        if not _ENV_NAME.match(name):
            raise InvalidInput(f"-e {name!r}: not an environment variable name")
        if name.upper().startswith("ENVBUILD_"):  # the image's own controls (the device, the probe), as in the matrix
            raise InvalidInput(f"-e {name}: ENVBUILD_* variables are reserved: the image sets them from the matrix")
        if sep:
            given.append((name, value))
        args += ["-e", name]  # by name: the value never lands on a command line
    if host_folders and backend.user != "root":
        # Files written into your folders are yours: your uid, with group 0 (the image's folders allow it).
        args += ["--user", f"{os.getuid() if uid is None else uid}:0"]
    args.append(image)
    args += list(opts.command or SHELL)
    return Invocation(tuple(args), tuple(given))


def run(matrix: Matrix, backend: Backend, opts: RunOptions, engine: EngineAPI, *, dry_run: bool = False,
        out=None, ignore_host: bool = False, key=None) -> int:
    """Run `docker run ...` on this terminal and return the command's exit status (the terminal and the signals
    are the command's); with dry_run, print that line instead. A flag the host refuses is explained."""
    call = invocation(matrix, backend, opts, interactive=sys.stdin.isatty() and sys.stdout.isatty(), books=not dry_run)
    if dry_run:
        print(call.display(engine.kind, engine.client_args(list(call.args))), file=out or sys.stdout)
        return 0
    preflight.require(backend, engine)
    if not ignore_host:
        from envbuild.matrix.compat import host_driver, image_arch

        host = host_driver(backend)
        preflight.require_host(backend, host, matrix=matrix)
    if opts.cache and _is_folder(opts.cache):
        Path(opts.cache).expanduser().mkdir(parents=True, exist_ok=True)  # the image's user writes into it
    image = opts.image or matrix.tags(backend)[0]
    if engine.image_id(image) is None:
        raise EnvbuildError(f"image {image} is not on this Docker engine: build it with `envbuild build --backend "
                            f"{backend.name}` or pull it with `envbuild pull --backend {backend.name}`"
                            + ("" if opts.image else " (or pass --image)"))
    if not ignore_host:  # with the architectures the image's build measured
        preflight.require_host(backend, host, matrix=matrix, measured_arch=image_arch(engine, image),
                               echo=lambda line: print(line, file=sys.stderr))
    if key is not None:  # a trust.keys.PublicKey: nothing starts unless the image verifies with it
        verify_local(engine, image, key)
    status, stderr = engine.client_run(list(call.args), dict(call.env))
    if status == REFUSED:
        why = preflight.refused(backend, stderr)
        if why:
            raise RunRefused(why)
    return status


def verify_local(engine: EngineAPI, image: str, key) -> object:
    """A local image verifies when one of its registry digests does (signature, attestations, smoke passed)."""
    from envbuild.ship.trust.verify import verify

    found = engine.image(image)
    pulled = [d.split("@", 1) for d in (found.repo_digests if found else []) if "@" in d]
    if not pulled:
        raise VerifyError("unsigned", f"image {image} has no registry digest (built here, never pulled): there is no "
                                      "signature to check; pull it with `envbuild pull`, or pass --insecure-skip-verify")
    failed = None
    for repository, digest in pulled:
        try:
            return verify(repository, digest, key)
        except VerifyError as exc:
            failed = exc
    raise failed
