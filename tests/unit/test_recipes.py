"""CONTRIBUTING.md's recipes, followed: a backend and a variant added to a copy of matrix.yaml alone reach every
place derived from it (through the CLI, as a user runs it), a command added as the recipe says reaches the help and
the generated reference, and an engine declared as the recipe says passes the contract's conformance check."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, ContextManager, Iterator

import click
import pytest
from support import engine_contract
from support.constants import REPO

from envbuild.core.checks import Check
from envbuild.engine.docker import EngineAPI, Exited, Image
from envbuild.engine.owner import Container
from envbuild.engine.runspec import RunSpec

CONTRIBUTING = REPO / "CONTRIBUTING.md"

# Recipe: add a backend. Its own base image (Ubuntu's) and its own torch (an older release, from the CPU index).
BACKEND = """\
  # A board of our own: Ubuntu's Python 3.12 and torch 2.14.0 from PyTorch's CPU index.
  myboard:
    description: My accelerator board
    device: cpu
    base_image: ubuntu:24.04
    platforms: [linux/amd64]
    python:
      version: "3.12"  # Ubuntu 24.04's python3
      apt: [python3, python3-venv]
    torch:
      version: "2.14.0"
      index_url: https://download.pytorch.org/whl/cpu
    ci:
      runs_on: [self-hosted, linux, x64, myboard]

"""

# Recipe: add a variant. CUDA 12.8 between the matrix's 13.0 and 12.6: a driver of the R570 branch runs it natively.
VARIANT = """\
  cuda-cu128:
    variant_of: cuda
    description: NVIDIA GPU (CUDA 12.8)
    base_image: nvidia/cuda:12.8.1-base-ubuntu24.04
    torch:
      index_url: https://download.pytorch.org/whl/cu128
    host:
      version: "12.8"
      arch: [sm_75, sm_80, sm_86, sm_90, sm_100, sm_120]
      arch_arm64: []

"""


def _copy(tmp_path: Path, entry: str = "") -> Path:
    """The checkout's matrix.yaml (and the metadata cache beside it, unedited) copied, with `entry` added as the
    first backend: the one edit the recipe makes."""
    text = (REPO / "matrix.yaml").read_text(encoding="utf-8")
    assert "\nbackends:\n" in text
    head, tail = text.split("\nbackends:\n", 1)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "matrix.yaml"
    path.write_text(f"{head}\nbackends:\n{entry}{tail}", encoding="utf-8")
    shutil.copy(REPO / "matrix.metadata.json", tmp_path / "matrix.metadata.json")
    return path


def _ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def _section(name: str) -> str:
    text = CONTRIBUTING.read_text(encoding="utf-8")
    assert f"\n## Recipe: {name}\n" in text, f"CONTRIBUTING.md has no recipe '{name}'"
    return text.split(f"\n## Recipe: {name}\n", 1)[1].split("\n## ", 1)[0]


# --- Recipe: add a backend -------------------------------------------------------------------------------------

def test_a_backend_added_to_the_matrix_alone_appears_everywhere(invoke, tmp_path):
    matrix = _copy(tmp_path, BACKEND)

    assert "ok" in _ok(invoke("validate", "--matrix", matrix))

    listed = _ok(invoke("list", "--matrix", matrix))
    assert re.search(r"^myboard\s+My accelerator board\s+2\.14\.0\s+\S+\s+ubuntu:24\.04", listed, re.M), listed

    shown = _ok(invoke("show", "myboard", "--matrix", matrix))
    assert "myboard: My accelerator board" in shown
    assert "ubuntu:24.04" in shown and "2.14.0" in shown and "whl/cpu" in shown

    out = tmp_path / "dockerfiles"
    _ok(invoke("render", "--matrix", matrix, "--backend", "myboard", "--output", out))
    dockerfile = (out / "myboard.Dockerfile").read_text(encoding="utf-8")
    assert "FROM ubuntu:24.04 AS system" in dockerfile
    assert "torch==2.14.0" in dockerfile and "https://download.pytorch.org/whl/cpu" in dockerfile

    jobs = json.loads(_ok(invoke("matrix", "--matrix", matrix, "--format", "json")))["include"]
    job = next(j for j in jobs if j["backend"] == "myboard")
    assert job["runs-on"] == ["self-hosted", "linux", "x64", "myboard"] and job["self-hosted"] is True
    assert job["image"].endswith(":myboard")

    compat = _ok(invoke("list", "--compat", "--markdown", "--matrix", matrix))
    assert "| myboard | cpu | 2.14.0 | - | none | any | amd64 |" in compat


def test_without_the_entry_the_backend_is_nowhere(invoke, tmp_path):
    """The test above can fail: the same commands on the unedited copy know no such backend."""
    matrix = _copy(tmp_path)
    assert "myboard" not in _ok(invoke("list", "--matrix", matrix))
    assert "myboard" not in _ok(invoke("matrix", "--matrix", matrix, "--format", "json"))
    assert "myboard" not in _ok(invoke("list", "--compat", "--markdown", "--matrix", matrix))
    assert invoke("show", "myboard", "--matrix", matrix).exit_code == 2


# --- Recipe: add a variant -------------------------------------------------------------------------------------

def test_a_variant_added_to_the_matrix_alone_is_listed_rendered_and_picked(invoke, tmp_path):
    matrix = _copy(tmp_path, VARIANT)
    _ok(invoke("validate", "--matrix", matrix))

    listed = _ok(invoke("list", "--matrix", matrix))
    assert re.search(r"^cuda-cu128\s+NVIDIA GPU \(CUDA 12\.8\)", listed, re.M), listed

    out = tmp_path / "dockerfiles"
    _ok(invoke("render", "--matrix", matrix, "--backend", "cuda-cu128", "--output", out))
    dockerfile = (out / "cuda-cu128.Dockerfile").read_text(encoding="utf-8")
    assert "FROM nvidia/cuda:12.8.1-base-ubuntu24.04" in dockerfile and "whl/cu128" in dockerfile

    host = ("--driver", "575.51.03", "--gpu", "sm_80")
    picked = invoke("pick", "--matrix", matrix, "--backend", "cuda", *host)
    assert _ok(picked) and picked.stdout == "ghcr.io/envbuild/envbuild:cuda-cu128\n"
    by_hand = invoke("pick", "--matrix", matrix, "--variant", "cuda-cu128", *host)
    assert _ok(by_hand) and by_hand.stdout == "ghcr.io/envbuild/envbuild:cuda-cu128\n"

    # without it, that driver gets the older 12.6 build
    before = invoke("pick", "--matrix", _copy(tmp_path / "before"), "--backend", "cuda", *host)
    assert _ok(before) and before.stdout == "ghcr.io/envbuild/envbuild:cuda-cu126\n"


# --- Recipe: add a command -------------------------------------------------------------------------------------

@pytest.fixture
def hello(request):
    """A command added as the recipe says: a library function, a click command on the group that calls it once,
    and one row in the table of commands (its name, module, help group and line)."""
    from envbuild.cli import cli

    def count_backends(path: str) -> int:  # step 1: the library function (here, of the matrix layer)
        from envbuild.matrix import load

        return len(load(path).backends)

    @cli.command("hello")  # step 2
    @click.option("--matrix", "path", default=str(REPO / "matrix.yaml"), metavar="FILE", help="The matrix file")
    def hello_(path) -> None:
        """Say how many backends the matrix holds.

        \b
        Examples:
          envbuild hello
        """
        click.echo(f"{count_backends(path)} backends")

    request.addfinalizer(lambda: cli.commands.pop("hello", None))

    # step 3: its row in the one table, which --help, the reference and the start read
    from envbuild.cli import app

    mp = pytest.MonkeyPatch()
    request.addfinalizer(mp.undo)
    mp.setattr(app, "COMMANDS", (*app.COMMANDS, app.Entry("hello", "use", app.USE,
                                                          "Say how many backends the matrix holds.")))
    return cli


def test_a_command_added_as_the_recipe_says_is_in_the_help_and_the_reference(hello, invoke):
    from envbuild.maintain import docgen

    top = _ok(invoke("--help"))
    use = top.split("Use an image:", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"^\s+hello\s+Say how many backends the matrix holds\.", use, re.M), top
    assert "Other commands" not in top

    assert "Say how many backends the matrix holds." in _ok(invoke("hello", "--help"))
    assert re.fullmatch(r"\d+ backends\n", _ok(invoke("hello")))

    reference = docgen.cli_reference(hello)
    assert "## envbuild hello" in reference and "- `--matrix` FILE: The matrix file" in reference
    assert "- [`envbuild hello`](#envbuild-hello): Say how many backends the matrix holds." in reference
    # step 4: the committed reference page no longer matches, until `envbuild docs` rewrites it
    assert docgen.CLI_PAGE in docgen.stale(REPO, docgen.generated(hello))
    assert docgen.check_line(hello, "envbuild hello --matrix matrix.yaml") == []


def test_the_committed_reference_matches_the_commands_without_it():
    """The invariant step 4 relies on: the tree's reference page is current, so a stale page means a new command."""
    from envbuild.cli import cli
    from envbuild.maintain import docgen

    assert "hello" not in cli.commands
    assert docgen.CLI_PAGE not in docgen.stale(REPO, docgen.generated(cli))


# --- Recipe: add an engine -------------------------------------------------------------------------------------

class Minimal(EngineAPI):
    """The least an engine is: it declares EngineAPI and defines each method with the protocol's parameters."""

    host = "minimal://"
    kind = "minimal"

    def connect(self) -> None: ...
    def ping(self) -> None: ...
    def version(self) -> dict[str, Any]: return {}
    def info(self) -> dict[str, Any]: return {}
    def runtimes(self) -> set[str]: return set()
    def image(self, ref: str) -> Image | None: return None
    def image_id(self, ref: str) -> str | None: return None
    def tag(self, image: str, refs: list[str]) -> None: ...
    def untag(self, ref: str) -> None: ...
    def import_image(self, tar: str, ref: str, changes: list[str], labels: dict[str, str]) -> Image: raise NotImplementedError

    def run(self, image: str, command: list[str], *, name: str, labels: dict[str, str], run: RunSpec,
            volumes: list[str] = (), environment: dict[str, str] | None = None, timeout: float,
            user: str | None = None, read_only: bool = False) -> Exited: raise NotImplementedError

    def volume(self, name: str, labels: dict[str, str]) -> ContextManager[str]: raise NotImplementedError
    def read_file(self, image: str, path: str, limit: int = 64 << 20) -> bytes | None: return None
    def start_client(self, argv: list[str], env: dict[str, str]) -> Any: raise NotImplementedError
    def client_args(self, args: list[str]) -> list[str]: return args
    def client_run(self, args: list[str], env: dict[str, str]) -> tuple[int, str]: return 1, ""
    def container_list(self, label: str) -> list[Container]: return []
    def containers(self, label: str, stopped: bool = False) -> list[str]: return []
    def dangling_images(self, label: str) -> list[str]: return []
    def remove_image(self, ref: str) -> str | None: return None
    def build_cache_mounts(self) -> list[dict[str, Any]]: return []
    def prune_build_cache(self, record: str) -> int: return 0
    def remove_container(self, ref: str) -> None: ...
    def login(self, host: str, username: str, password: str) -> None: ...
    def push(self, ref: str, auth: dict[str, str] | None) -> Iterator[dict[str, Any]]: return iter(())
    def pull(self, ref: str, auth: dict[str, str] | None, platform: str | None = None) -> Iterator[dict[str, Any]]: return iter(())
    def host_checks(self) -> list[Check]: return []
    def close(self) -> None: ...


def test_a_minimal_engine_passes_the_conformance_check_the_recipe_names():
    assert "engine_contract.py" in _section("add an engine") and "IMPLEMENTATIONS" in _section("add an engine")
    assert engine_contract.problems(Minimal) == []


def test_the_conformance_check_refuses_an_engine_that_strays():
    class Shaped:  # the methods without the declaration
        pass

    for name in engine_contract.contract():
        setattr(Shaped, name, getattr(Minimal, name))
    assert any("does not declare EngineAPI" in p for p in engine_contract.problems(Shaped))

    own = {name: value for name, value in vars(Minimal).items() if not name.startswith("__") and name != "close"}
    missing = type("Missing", (EngineAPI,), own)  # close would be the protocol's empty body
    assert any("does not define close" in p for p in engine_contract.problems(missing))

    class Renamed(Minimal):
        def pull(self, ref: str, auth: dict[str, str] | None, arch: str | None = None) -> Iterator[dict[str, Any]]:
            return iter(())

        def inspect_everything(self) -> None: ...

    found = engine_contract.problems(Renamed)
    assert any(p.startswith("Renamed.pull(") for p in found)
    assert any("beyond the contract: inspect_everything" in p for p in found)


def test_the_places_the_engine_recipe_names_hold_what_it_says(monkeypatch):
    from envbuild.engine import select as engine_select
    from envbuild.engine import podman
    from envbuild.image import builder

    assert "podman" in engine_select.ENGINES and callable(engine_select.choose)
    monkeypatch.setattr(podman, "executable", lambda: "/usr/bin/podman")  # a unit test needs no Podman installed
    assert builder.builder_for("podman").kind == "podman" and builder.builder_for("podman").argv[0] == "/usr/bin/podman"
    assert engine_contract.problems(engine_contract.IMPLEMENTATIONS[1]) == []  # Podman, the worked example


# --- the recipes, followed literally -----------------------------------------------------------------------------

RECIPES = ("add a backend", "add a variant", "add a command", "add an engine")


@pytest.mark.parametrize("name", RECIPES)
def test_every_path_a_recipe_names_exists(name):
    paths = {p for p in re.findall(r"`([\w./<>-]+\.(?:py|yaml|md|json|j2))`", _section(name))}
    assert paths
    for path in sorted(paths):
        if "NAME" in path or "<" in path:
            continue  # what the reader makes
        assert (REPO / path).exists() or (REPO / "envbuild" / path).exists(), f"{name}: {path} does not exist"


@pytest.mark.parametrize("name", RECIPES)
def test_every_command_line_a_recipe_gives_is_a_real_command(name):
    from envbuild.cli import cli
    from envbuild.maintain import docgen

    lines = re.findall(r"`(envbuild [^`]*)`", _section(name))
    for line in lines:
        line = re.sub(r"\s*[>|].*", "", line)  # a redirection is the shell's
        if line == "envbuild ...":
            continue  # prose: any command line
        assert docgen.check_line(cli, line) == [], line
