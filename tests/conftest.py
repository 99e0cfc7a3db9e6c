"""Shared, generic fixtures for envbuild's tests: paths, a CLI runner and a matrix-file writer."""

from __future__ import annotations

import socket
import stat
from pathlib import Path
from typing import Callable

import pytest
from click.testing import CliRunner, Result


@pytest.fixture(autouse=True)
def _no_outside_registry(monkeypatch) -> None:
    """doctor asks only a registry on this machine in a test (a fake /v2/ on 127.0.0.1, a closed port): another
    registry's check says it was not asked, as a test never depends on the network."""
    from envbuild.core.checks import skip
    from envbuild.host import doctor

    real = doctor.check_registry

    def check_registry(name, ref, fix, **kw):
        if ref.startswith(("127.0.0.1:", "localhost:", "[::1]:")):
            return real(name, ref, fix, **kw)
        return skip(name, f"{ref}: no outside registry is asked in tests")

    monkeypatch.setattr(doctor, "check_registry", check_registry)


@pytest.fixture(autouse=True)
def _no_outside_index(monkeypatch) -> None:
    """The network probes (indexes, registries before a lock or a build) ask only this machine's loopback in a
    test: another host is answered "not asked", as a test never depends on the network."""
    import urllib.parse

    from envbuild.net import netprobe

    real = netprobe._ask

    def ask(target, environ, *args, **kw):
        via = netprobe._proxy(target.url, environ) or target.url  # a proxy on the loopback may be asked
        if urllib.parse.urlsplit(via).hostname in ("127.0.0.1", "localhost", "::1"):
            return real(target, environ, *args, **kw)
        return True, "not asked in tests", "directly"

    monkeypatch.setattr(netprobe, "_ask", ask)


@pytest.fixture(autouse=True)
def _no_site_settings(monkeypatch, tmp_path_factory) -> None:
    """No test reads the settings of whoever runs it (~/.config/envbuild/config.toml, ENVBUILD_* variables)."""
    from envbuild.core.settings import KEYS

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    for spec in KEYS.values():
        monkeypatch.delenv(spec.env, raising=False)


@pytest.fixture
def runner() -> CliRunner:
    """A CliRunner with stderr kept apart (result.stderr); result.output holds both on click >= 8.2."""
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        return CliRunner()  # click >= 8.2 always separates them


@pytest.fixture
def invoke(runner: CliRunner) -> Callable[..., Result]:
    """Run `envbuild ARGS...` in-process and check it never dies with a traceback."""
    from envbuild.cli import cli

    def run(*args: str) -> Result:
        result = runner.invoke(cli, [str(a) for a in args])
        assert "Traceback" not in result.output, result.output
        # CliRunner swallows unexpected exceptions into result.exception; only a clean exit is allowed.
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        return result

    return run


@pytest.fixture
def write_matrix(tmp_path: Path) -> Callable[..., Path]:
    """Write matrix text (str or bytes) to tmp_path/NAME and return the path."""

    def write(text: str | bytes, name: str = "matrix.yaml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    return write

@pytest.fixture
def closed_socket(tmp_path, monkeypatch) -> str:
    """DOCKER_HOST pointing at a unix socket nobody listens on: a host where Docker does not run (and no Podman is
    installed, so that auto has no engine to fall back on)."""
    monkeypatch.setenv("ENVBUILD_PODMAN", str(tmp_path / "no-podman"))
    monkeypatch.delenv("ENVBUILD_ENGINE", raising=False)
    path = tmp_path / "docker.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    return str(path)


@pytest.fixture
def fake_docker():
    """Writes a fake `docker` client into a folder: answers `--version` and whether `buildx` works, and
    logs every call to DIR/calls. For the engine module's own client discovery (envbuild.engine.docker.client_executables,
    envbuild.engine.docker.find_builder); everything behind the engine is faked by support/fakes.py's FakeEngine."""

    def make(dirpath: Path, version: str, buildx: bool) -> Path:
        dirpath.mkdir(parents=True, exist_ok=True)
        exe = dirpath / "docker"
        exe.write_text(
            "#!/bin/sh\n"
            f'echo "$@" >> {dirpath}/calls\n'
            f'if [ "$1" = buildx ]; then exit {0 if buildx else 1}; fi\n'
            f'if [ "$1" = --version ]; then echo "Docker version {version}, build 0123abc"; exit 0; fi\n'
            "exit 1\n"
        )
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
        return exe

    return make


@pytest.fixture
def buildkit_client(tmp_path, fake_docker, monkeypatch):
    """A docker client that builds with BuildKit (28.2.2, with buildx) first on PATH, whether or not this machine has
    one: for the unit tests of what a build is handed (the fake engine runs it), which ask which client builds."""
    import os

    from envbuild.engine import docker as docker_engine

    exe = fake_docker(tmp_path / "client-bin", "28.2.2", buildx=True)
    monkeypatch.delenv("ENVBUILD_DOCKER", raising=False)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    forget = docker_engine.find_builder.cache_clear  # a test may replace find_builder itself
    forget()
    yield exe
    forget()

# Real engine and registry fixtures (tests/support/fixtures.py).
pytest_plugins = ["support.fixtures"]


# tests/faults/ kill and restart the Docker daemon: collected only when asked for (`pytest --faults tests/faults`,
# which scripts/test runs after the rest of the suite).
def pytest_addoption(parser):
    parser.addoption("--faults", action="store_true", help="run tests/faults/ (they restart dockerd)")


def pytest_ignore_collect(collection_path, config):
    if collection_path.name == "faults" and collection_path.parent.name == "tests" and not config.getoption("faults"):
        return True
    return None


# The arm64 module last: its base is made under QEMU in the background meanwhile (scripts/test, support/prefetch.py).
LAST = ("test_arm64.py",)


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: item.path.name in LAST)  # stable: every other test keeps its place


# Outside programs a test runs (`@pytest.mark.needs("chromium")`), and the Debian package scripts/test installs
# each from. Without one such a test is skipped, saying which and how to get it; with CI set it fails instead:
# CI's test bed installs them all, so a missing one there is a broken test bed, not a reason to skip.
NEEDS = {"chromium": "chromium", "skopeo": "skopeo", "htpasswd": "apache2-utils"}


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(*programs): runs these outside programs (see NEEDS in tests/conftest.py)")


def pytest_runtest_setup(item):
    import os
    import shutil

    for marker in item.iter_markers("needs"):
        for program in marker.args:
            found = shutil.which(program) or (program == "chromium" and (os.environ.get("ENVBUILD_CHROMIUM")
                                                                       or shutil.which("chromium-browser")))
            if not found:
                why = f"needs {program}, which is not installed (scripts/test installs it: apt-get install {NEEDS[program]})"
                if os.environ.get("CI"):
                    pytest.fail(why)
                pytest.skip(why)
