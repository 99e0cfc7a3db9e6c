"""Setting up a Docker engine where none answers: on Debian and Ubuntu, install Debian's docker.io and start dockerd,
after asking (or with --yes), so that the README's first command works on a fresh machine as its test command does.

System administration (apt-get, systemctl, dockerd as root), apart from the core and beside it in host/: the CLI
calls it before a command that needs an engine, no stage imports it. It starts no docker client; it asks the
engine only through envbuild.engine.docker (ping).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from envbuild.engine import docker as engines
from envbuild.core.errors import DockerError
from envbuild.core.files import read_host

if TYPE_CHECKING:
    from envbuild.engine.docker import EngineAPI

LOG = "/var/log/envbuild-dockerd.log"


def debian_like(root: Path = Path("/")) -> bool:
    if (root / "etc/debian_version").exists():
        return True
    release = read_host(root / "etc/os-release")
    if release is None:
        return False
    return any(line.startswith(("ID=debian", "ID=ubuntu", "ID_LIKE=")) and "debian" in line for line in release.splitlines())


def _as_root(argv: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return argv
    if not shutil.which("sudo"):
        raise DockerError(f"installing and starting Docker needs root: run `sudo {' '.join(argv)}` yourself")
    return ["sudo", *argv]


def _run(argv: list[str], echo: Callable[[str], None]) -> None:
    echo(f"$ {' '.join(argv)}")
    proc = subprocess.run(_as_root(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if proc.returncode != 0:
        raise DockerError(f"`{' '.join(argv)}` failed: {(proc.stderr or proc.stdout).strip()[-500:]}")


def ensure_engine(engine: EngineAPI, *, yes: bool, ask: Callable[[str], bool] | None,
                  echo: Callable[[str], None], wait: float = 60) -> None:
    """Return when the engine answers; install and start one first where that is ours to do and allowed."""
    try:
        engine.ping()
        return
    except engines.Unreachable as exc:
        if engine.host != engines.DEFAULT_HOST or not debian_like() or exc.reason == "permission denied":
            raise
        missing = not shutil.which("dockerd")
        what = ("install Debian's docker.io (apt-get) and start dockerd" if missing else "start dockerd")
        if not yes and not (ask and ask(f"No Docker engine answers at {engine.host}. {what[0].upper() + what[1:]} now?")):
            raise DockerError(f"{exc} Or let envbuild {what}: run again with --yes (`envbuild --yes ...`).") from None
    if missing:
        _run(["apt-get", "update", "-qq"], echo)
        _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "docker.io"], echo)
    if shutil.which("systemctl") and Path("/run/systemd/system").is_dir():
        _run(["systemctl", "start", "docker"], echo)
    else:  # no systemd (containers, CI images): the daemon on its own, its log beside the system's
        echo(f"$ dockerd (in the background, log: {LOG})")
        subprocess.Popen(_as_root(["sh", "-c", f"nohup dockerd >{LOG} 2>&1 &"]), stdin=subprocess.DEVNULL).wait()
    deadline = time.monotonic() + wait
    while True:
        try:
            engine.ping()
            echo(f"the Docker engine answers at {engine.host}")
            return
        except DockerError:
            if time.monotonic() > deadline:
                raise DockerError(f"dockerd did not answer within {wait:g}s; its log: {LOG}") from None
            time.sleep(0.5)
