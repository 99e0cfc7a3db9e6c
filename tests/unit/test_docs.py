"""The docs cannot drift: the README routes, docs/ builds strictly, the references are generated from the code and
current, and every `envbuild ...` line shown in the README and docs/ is a real command with real options."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys

import click
import pytest
import yaml
from support.constants import REPO

from envbuild.cli import cli
from envbuild.matrix import schema
from envbuild.maintain import docgen

README = REPO / "README.md"
DOCS = REPO / "docs"


def _real(code: str) -> list[str]:
    return docgen.check_line(cli, code)


# --- the references are generated and current ----------------------------------------------------------


def test_the_generated_references_are_current() -> None:
    """As `render --check` does for the Dockerfiles: `envbuild docs` refreshes them."""
    assert docgen.stale(REPO, docgen.generated(cli)) == []


def _commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(cli, info_name="envbuild")
    return [(" ".join(path), c) for path, c, _ in docgen._commands(cli, ctx)]


def test_the_cli_reference_names_every_command_and_every_option() -> None:
    page = (REPO / docgen.CLI_PAGE).read_text(encoding="utf-8")
    assert len(_commands()) >= 20
    for path, command in _commands():
        section = page.split(f"\n## envbuild {path}\n", 1)[1].split("\n## envbuild ", 1)[0]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                for name in (*param.opts, *param.secondary_opts):
                    assert f"`{name}`" in section, f"envbuild {path}: {name} missing from the CLI reference"
    build = page.split("\n## envbuild build\n", 1)[1].split("\n## envbuild ", 1)[0]
    assert "`--backend`" in build and "`--locked`" in build and "`--mirror`" in build


def test_the_matrix_reference_names_every_field_of_the_schema() -> None:
    page = (REPO / docgen.MATRIX_PAGE).read_text(encoding="utf-8")
    for path, _, _ in docgen._field_rows(schema.TOP, ""):
        assert f"| `{path}` |" in page
    for path, _, _ in docgen._field_rows(schema.BACKEND, ""):
        assert f"| `backends.NAME.{path}` |" in page
    assert "| `backends.NAME.torch.version` | a version (PEP 440)" in page
    assert "an image reference such as" in page  # a string field's hint, from the schema's own patterns


def test_docs_check_names_a_stale_reference_and_docs_writes_it(tmp_path, invoke) -> None:
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / "README.md").write_text("# x\n\n```sh\nenvbuild build --backend cpu\n```\n")
    result = invoke("docs", "--check", "--root", str(tmp_path))
    assert result.exit_code == 1 and "stale: docs/reference/cli.md" in result.output
    result = invoke("docs", "--root", str(tmp_path))
    assert result.exit_code == 0 and "wrote docs/reference/cli.md" in result.output
    assert invoke("docs", "--check", "--root", str(tmp_path)).exit_code == 0
    (tmp_path / "docs" / "bad.md").write_text("Run `envbuild biuld --backend cpu`.\n")
    result = invoke("docs", "--check", "--root", str(tmp_path))
    assert result.exit_code == 1 and "docs/bad.md:1" in result.output and "no command `envbuild biuld`" in result.output


# --- every command line shown is real --------------------------------------------------------------------


def test_every_envbuild_line_in_the_readme_and_docs_is_a_real_command() -> None:
    files = docgen.doc_files(REPO)
    assert README in files and len(files) >= 10
    seen = sum(1 for f in files for _ in docgen.command_lines(f.read_text(encoding="utf-8")))
    assert seen >= 50
    assert docgen.summary(docgen.check_files(cli, files, REPO)) == []


@pytest.mark.parametrize("code, fragment", [
    ("envbuild biuld --backend cpu", "no command `envbuild biuld`"),
    ("envbuild build --backend cpu --no-such-option", "`envbuild build` has no option --no-such-option"),
    ("envbuild build --backend cpu --junit x.xml", "`envbuild build` has no option --junit"),  # smoke's, not build's
    ("pip install . && envbuild smoke --backend cpu --bogus", "has no option --bogus"),
    ("envbuild --nope build", "`envbuild` has no option --nope"),
    ("envbuild run [--backend B|auto] [--imagee REF]", "has no option --imagee"),
    ("python -m envbuild lock --chek", "has no option --chek"),
])
def test_a_line_that_names_what_does_not_exist_fails(code: str, fragment: str) -> None:
    problems = _real(code)
    assert any(fragment in p for p in problems), problems


@pytest.mark.parametrize("code", [
    "envbuild build --backend cpu",
    "envbuild --yes build --backend cpu",
    "envbuild run --backend cuda -- python train.py --epochs 3",  # after --, the command's own options
    "envbuild run [--backend B|auto] [--image REF] [-e NAME[=VALUE]] [--dry-run] [-- COMMAND ...]",
    "ENVBUILD_KEY_PASSWORD=… envbuild keygen",
    "envbuild build --backend=cpu -j 2",
    "envbuild list --compat --check COMPATIBILITY.md",
    "envbuild",
    "docker run --rm IMAGE envbuild-probe",  # not the envbuild command
    "pip install 'envbuild[site]'",
])
def test_real_lines_and_synopses_pass(code: str) -> None:
    assert _real(code) == []


def test_command_lines_come_from_shell_blocks_and_inline_code_only() -> None:
    text = "\n".join([
        "Prose about envbuild biuld is not code.",
        "Inline: `envbuild biuld`.",
        "```sh",
        "envbuild build \\",
        "  --backend cpu   # a comment naming envbuild nothing",
        "```",
        "```yaml",
        "packages: [envbuild biuld]",
        "```",
        "```text",
        "$ envbuild outdated --backend npu",
        "```",
    ])
    found = list(docgen.command_lines(text))
    assert found == [(2, "envbuild biuld"), (4, "envbuild build  --backend cpu"), (11, "$ envbuild outdated --backend npu")]


# --- the README routes; docs/ is a strict MkDocs site --------------------------------------------------------

FAMILIES = ["NVIDIA", "AMD", "Intel GPU", "Intel Gaudi", "Huawei Ascend", "AWS Trainium", "Google TPU", "Cambricon",
            "Moore Threads", "Apple Silicon", "CPU only"]


def test_the_readme_routes() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    rows = [line for line in text.splitlines() if line.startswith("| ") and "envbuild" in line]
    for family in FAMILIES:
        (row,) = [r for r in rows if r.startswith(f"| {family}")]
        assert re.search(r"`envbuild \w+ --backend \w+", row), row
        assert any(s in row for s in ("published and smoke-tested", "in CI on a stand-in base", "rendered and linted only",
                                      "no container can reach MPS"))
    amd = next(r for r in rows if r.startswith("| AMD"))
    assert "envbuild build --backend rocm" in amd and "envbuild pull --backend rocm" in amd
    assert "envbuild pull --backend cuda" in next(r for r in rows if r.startswith("| NVIDIA"))
    # the two set-up commands, and CI still runs the README's test command
    assert "pip install . && envbuild build --backend cpu && envbuild smoke --backend cpu" in text
    assert "\nscripts/test\n" in text and "scripts/test" in (REPO / ".ci" / "run").read_text()
    # first contact: a venv (PEP 668 refuses a bare pip install on Debian 12), what the test command does to the
    # machine and what the quick check takes, how to change an image: render shows the Dockerfiles to review first
    assert "python3 -m venv .venv && . .venv/bin/activate && pip install ." in text
    assert "kills and restarts the Docker daemon" in text and "`scripts/test tests/unit`" in text
    assert re.search(r"`scripts/test tests/unit` \(the unit tests alone: about \d+ minutes", text)
    change = text[text.index("## Change an image"):]
    assert "envbuild init" in change and "matrix.yaml" in change and "\nenvbuild render " in change
    assert "locks/" in text


def _nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [] if node.startswith("http") else [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    return [p for v in node.values() for p in _nav_pages(v)]


def test_every_page_is_in_the_nav_and_there_are_the_pages_the_reader_needs() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True and config["theme"]["name"] == "material"
    nav = _nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages and len(pages) >= 10
    for needed in ("get-started/nvidia.md", "get-started/amd-rocm.md", "get-started/cpu.md", "get-started/mac.md",
                   "how-to/pull-and-verify.md", "how-to/run.md", "reference/cli.md", "reference/matrix.md",
                   "explanation/design.md", "explanation/performance.md"):
        assert needed in pages
    assert "https://envbuild.github.io/envbuild/" in str(config["nav"])  # the status page, from the docs
    assert 'docs/index.html">documentation' in (REPO / "envbuild/report/site/base.html.j2").read_text()  # and back


def test_ci_builds_the_docs_strictly_and_checks_them() -> None:
    ci_run = (REPO / ".ci" / "run").read_text()
    assert "envbuild docs --check" in ci_run and "mkdocs build --strict" in ci_run
    assert "'.[test,docs]'" in (REPO / "scripts" / "test").read_text()


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
                    reason="the docs extra is not installed (pip install '.[docs]')")
def test_mkdocs_builds_strictly(tmp_path) -> None:
    """Broken internal links, missing anchors and pages left out of the nav fail the build."""
    def build(root):
        return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                              cwd=root, capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    done = build(REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()
    copy = tmp_path / "copy"
    shutil.copytree(REPO / "docs", copy / "docs")
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    with (copy / "docs" / "index.md").open("a") as f:
        f.write("\n[gone](how-to/no-such-page.md)\n")
    done = build(copy)
    assert done.returncode != 0 and "no-such-page.md" in done.stderr


def test_what_to_commit_is_said_and_what_not_is_ignored() -> None:
    ignored = (REPO / ".gitignore").read_text(encoding="utf-8").split()
    assert "/site/" in ignored and "/.envbuild/" in ignored  # mkdocs' output, this machine's logs and records
    page = (DOCS / "get-started" / "cpu.md").read_text(encoding="utf-8")
    section = page.split("## What to commit", 1)[1].split("\n## ", 1)[0]
    assert "| `locks/` | yes |" in section and "| `.envbuild/` | no |" in section
