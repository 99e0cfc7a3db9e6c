"""CONTRIBUTING.md's recipes, followed: a backend and a variant added to a copy of matrix.yaml alone reach every
place derived from it (through the CLI, as a user runs it), a command added as the recipe says reaches the help and
the generated reference, and an engine declared as the recipe says passes the contract's conformance check."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

import click
import pytest
from support import engine_contract
from support.constants import REPO

from envbuild.core.checks import Check
from envbuild.core.errors import BuildError, DockerError
from envbuild.engine.api import Builder
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

# The minimal engine's builder: a real process, started by the engine, that does what a builder must for the build
# path (the argv the plan made, the environment the engine's Builder gives, the image id in --iidfile).
BUILDER_SCRIPT = """#!/bin/sh
here=$(dirname "$0")
printf '%s\\n' "$@" > "$here/argv"
echo "MINIMAL_BUILDER=$MINIMAL_BUILDER" > "$here/env"
while [ $# -gt 0 ]; do
  if [ "$1" = --iidfile ]; then echo "sha256:$(printf '%064d' 7)" > "$2"; fi
  shift
done
echo "#1 [1/1] FROM base"
echo "#1 DONE 0.1s"
"""


class Minimal(EngineAPI):
    """The least an engine is: it declares EngineAPI and defines each method with the protocol's parameters. Its
    images are a table; its builder is BUILDER_SCRIPT (where `exe` says)."""

    host = "minimal://"
    kind = "minimal"
    check_name = "minimal"
    purposes = {"minimal": ("build", "run")}
    exe = "/nonexistent/minimal-builder"
    images: dict[str, str] = {}

    def __init__(self, timeout: float | None = None):
        self.images = dict(type(self).images)

    def connect(self) -> None: ...
    def ping(self) -> None: ...
    def version(self) -> dict[str, Any]: return {}
    def info(self) -> dict[str, Any]: return {}
    def runtimes(self) -> set[str]: return set()
    def image(self, ref: str) -> Image | None: return None
    def image_id(self, ref: str) -> str | None: return self.images.get(ref)
    def tag(self, image: str, refs: list[str]) -> None: ...
    def untag(self, ref: str) -> None: ...
    def import_image(self, tar: str, ref: str, changes: list[str], labels: dict[str, str]) -> Image: raise NotImplementedError

    def run(self, image: str, command: list[str], *, name: str, labels: dict[str, str], run: RunSpec,
            volumes: list[str] = (), environment: dict[str, str] | None = None, timeout: float,
            user: str | None = None, read_only: bool = False, on_line: Callable[[str], None] | None = None) -> Exited: raise NotImplementedError

    def volume(self, name: str, labels: dict[str, str]) -> ContextManager[str]: raise NotImplementedError
    def read_file(self, image: str, path: str, limit: int = 64 << 20) -> bytes | None: return None

    def start_client(self, argv: list[str], env: dict[str, str]) -> Any:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

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

    def builder(self) -> Builder:
        return Builder(argv=(self.exe, "build"), env=(("MINIMAL_BUILDER", "1"),), buildx=False,
                       cannot=(("--cache-to", "--cache-to: the minimal engine keeps no cache"),))

    def builder_check(self) -> Check: return Check("minimal build", True, self.builder().describe())
    def failed_check(self, exc: DockerError, why: str) -> Check: return Check(self.check_name, False, f"{exc} ({why})")
    def answer_check(self, version: dict[str, Any], why: str) -> Check: return Check(self.check_name, True, why)
    def is_local(self) -> bool: return True
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


def test_the_places_the_engine_recipe_names_hold_what_it_says():
    from envbuild.cli import cli
    from envbuild.engine import select as engine_select
    from envbuild.engine.podman import Podman

    section = _section("add an engine")
    assert "`ENGINES`" in section and "envbuild/engine/select.py" in section
    assert engine_select.engine_class("podman") is Podman and Podman in engine_contract.IMPLEMENTATIONS
    assert engine_contract.problems(Podman) == []  # the worked example
    # --engine's choices are the engine list, and auto
    ctx = click.Context(cli)
    for name in ("build", "doctor"):
        (option,) = [p for p in cli.get_command(ctx, name).params if p.name == "engine"]
        assert list(option.type.choices) == [*engine_select.NAMES, "auto"]


@pytest.fixture
def minimal(tmp_path, monkeypatch):
    """The recipe followed for Minimal: the module (this one), its name in select.ENGINES, its builder on disk."""
    from envbuild.engine import select as engine_select

    monkeypatch.setitem(engine_select.ENGINES, "minimal", (f"{__name__}:Minimal", "Minimal"))
    monkeypatch.setattr(engine_select, "NAMES", tuple(engine_select.ENGINES))
    exe = tmp_path / "bin" / "minimal-builder"
    exe.parent.mkdir()
    exe.write_text(BUILDER_SCRIPT)
    exe.chmod(0o755)
    monkeypatch.setattr(Minimal, "exe", str(exe))
    return exe


def test_a_minimal_engine_added_as_the_recipe_says_builds_through_the_real_path(tmp_path, minimal):
    """--engine minimal picks it; the plan takes its builder's argv; the build stage runs that builder (a real
    process, started by the engine) with its environment, and takes the image id it wrote."""
    from envbuild.cli.app import engine_option
    from envbuild.engine import select as engine_select
    from envbuild.image import build, locking, plan
    from envbuild.matrix import load
    from support.constants import MATRIX as MATRIX_PATH

    command = click.Command("x")
    engine_option(command)
    assert "minimal" in command.params[0].type.choices  # --engine minimal, with no other edit
    choice = engine_select.choose("minimal")
    assert isinstance(choice.engine, Minimal) and choice.why == "--engine minimal chose Minimal"
    assert engine_select.builder(choice.engine).argv == (str(minimal), "build")

    matrix = load(MATRIX_PATH, ["backends.cpu.base_image=debian:bookworm-slim@sha256:" + "a" * 64])
    cpu = matrix.backend("cpu")
    engine = choice.engine
    engine.images[cpu.base_image] = "sha256:" + "b" * 64  # the engine holds the base: nothing asks a registry
    opts = plan.BuildOptions(log_dir=tmp_path / "logs", context_dir=tmp_path / "ctx", locks_dir=tmp_path / "locks")
    made = plan.make_plan(matrix, cpu, opts, engine, {"HOME": str(tmp_path)})
    assert made.argv[:2] == (str(minimal), "build") and ("builder MINIMAL_BUILDER", "1") in made.environment
    lines: list[str] = []
    result = build.build_plan(matrix, cpu, locking.with_lock(made, None), opts, engine, echo=lines.append)
    assert result.ok and result.image_id == "sha256:" + "0" * 63 + "7", result.error
    argv = (minimal.parent / "argv").read_text().splitlines()
    assert argv[:2] == ["build", "--progress=plain"] and argv[argv.index("--iidfile") + 1] and argv[-1] == made.argv[-1]
    assert (minimal.parent / "env").read_text() == "MINIMAL_BUILDER=1\n"  # the engine's builder environment
    assert any("1/1 FROM base ... DONE" in line for line in lines)  # its output read as BuildKit's steps
    with pytest.raises(BuildError, match="the minimal engine keeps no cache"):  # what it cannot do, refused by name
        plan.make_plan(matrix, cpu, plan.BuildOptions(context_dir=tmp_path / "ctx", cache_to=("type=local,dest=x",)),
                       engine, {"HOME": str(tmp_path)})


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
