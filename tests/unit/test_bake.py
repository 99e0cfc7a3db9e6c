"""`envbuild matrix --format bake` (envbuild/maintain/bake.py): the bake file against buildx's documented JSON form,
a target for every cell `envbuild matrix` lists, contexts as `envbuild build` writes them, no secret's value, and a
stale lock refused before anything is written. tests/engine/test_bake.py builds a target with Docker."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.constants import MATRIX
from support.fakes import REPORT

from envbuild.core.platform import Platform
from envbuild.image import locking, lockfile, lockstate
from envbuild.image.plan import CONTENT_LABEL, BuildOptions
from envbuild.maintain import bake
from envbuild.matrix import load

PINNED = "debian:bookworm-slim@sha256:" + "a" * 64  # a digest-pinned base: no registry is asked
SET = ["--matrix", str(MATRIX), "--set", f"backends.cpu.base_image={PINNED}"]
CA_VALUE = "CA-BUNDLE-CONTENT-7f3a"
NETRC_PASSWORD = "s3cret-netrc-password-91c2"

# The part of the bake file's JSON form envbuild writes, from the Bake file reference
# (https://docs.docker.com/build/bake/reference/, "Target" and "Group"; buildx docs/bake-reference.md): a target's
# attributes and their types, and buildx's rule for target names (bake/bake.go: [a-zA-Z0-9_-]+).
STRING, LIST, MAP = "string", "list of strings", "map of strings"
TARGET_ATTRIBUTES = {
    "args": MAP, "annotations": LIST, "attest": LIST, "cache-from": LIST, "cache-to": LIST, "context": STRING,
    "contexts": MAP, "dockerfile-inline": STRING, "dockerfile": STRING, "inherits": LIST, "labels": MAP,
    "no-cache-filter": LIST, "output": LIST, "platforms": LIST, "secret": LIST, "ssh": LIST, "tags": LIST,
    "target": STRING,
}
NAME = re.compile(r"^[a-zA-Z0-9_-]+$")


def schema_problems(doc) -> list[str]:
    """Where `doc` leaves the documented form: top-level `group` and `target` maps, each group a `targets` list of
    defined names, each target only documented attributes of their documented types."""
    def typed(value, kind) -> bool:
        if kind == STRING:
            return isinstance(value, str)
        if kind == LIST:
            return isinstance(value, list) and all(isinstance(v, str) for v in value)
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())

    problems = [f"top-level {k}" for k in doc if k not in ("group", "target", "variable", "function")]
    for name, target in doc.get("target", {}).items():
        problems += [f"target name {name}"] if not NAME.match(name) else []
        for key, value in target.items():
            if key not in TARGET_ATTRIBUTES:
                problems.append(f"{name}.{key}: not a target attribute")
            elif not typed(value, TARGET_ATTRIBUTES[key]):
                problems.append(f"{name}.{key}: not a {TARGET_ATTRIBUTES[key]}")
    for name, group in doc.get("group", {}).items():
        problems += [f"group name {name}"] if not NAME.match(name) else []
        if set(group) != {"targets"} or not typed(group["targets"], LIST):
            problems.append(f"group {name}: only a targets list")
        problems += [f"group {name}: {t} undefined" for t in group.get("targets", []) if t not in doc.get("target", {})]
    return problems


def write_lock(cwd: Path, m, backend_name: str, platform: str, **changed) -> None:
    """A lock current for the cell (its inputs as the matrix makes them), or stale in what `changed` sets."""
    backend = m.backend(backend_name)
    digest = PINNED.rpartition("@")[2] if backend_name == "cpu" else None
    wanted = {**lockstate.inputs(m, backend, Platform.of(platform), digest), **changed}
    lock = lockfile.from_report(backend_name, REPORT, wanted, ["torch==2.15.0"], [],
                                {"platform": platform, "python": "3.11.2", "resolver": "pip 23.0.1"})
    file = cwd / lockstate.path(BuildOptions(), backend, Platform.of(platform))
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(lock.text())


@pytest.fixture
def project(tmp_path, monkeypatch, buildkit_client):
    monkeypatch.chdir(tmp_path)
    ca = tmp_path / "ca.pem"
    ca.write_text(f"# {CA_VALUE}\n")
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine pypi.example.com login me password {NETRC_PASSWORD}\n")
    m = load(MATRIX, [f"backends.cpu.base_image={PINNED}"])
    for platform in m.backend("cpu").platforms:
        write_lock(tmp_path, m, "cpu", platform)
    return tmp_path, ["--ca-bundle", str(ca), "--netrc", str(netrc)]


def test_the_bake_file_has_the_documented_form_and_holds_no_secret_value(project, invoke):
    cwd, secrets = project
    result = invoke("matrix", "--format", "bake", "--output", "out", "--backend", "cpu", *SET, *secrets,
                    "--build-arg", "FOO=bar", "--label", "org.example.team=ml")
    assert result.exit_code == 0, result.output
    doc = json.loads((cwd / "out" / bake.FILE).read_text())
    assert schema_problems(doc) == []
    assert sorted(doc["target"]) == ["cpu-linux-amd64", "cpu-linux-arm64"]
    assert doc["group"]["cpu"]["targets"] == doc["group"]["default"]["targets"] == doc["group"]["all"]["targets"]
    amd64 = doc["target"]["cpu-linux-amd64"]
    assert amd64["platforms"] == ["linux/amd64"] and amd64["args"] == {"FOO": "bar"}
    assert amd64["secret"] == [f"id=ca_bundle,src={cwd / 'ca.pem'}", f"id=netrc,src={cwd / 'netrc'}"]
    assert amd64["labels"]["org.example.team"] == "ml"
    # the content key `matrix --changed` computes for the cell from the checkout alone
    m = load(MATRIX, [f"backends.cpu.base_image={PINNED}"])
    opts = BuildOptions(build_args=("FOO=bar",))
    for name, target in doc["target"].items():
        platform = target["platforms"][0]
        assert target["labels"][CONTENT_LABEL] == locking.planned_content_key(m, m.backend("cpu"), opts, platform)
        context = Path(target["context"])
        assert context == cwd / "out" / "contexts" / name and (context / target["dockerfile"]).is_file()
        files = sorted(str(p.relative_to(context)) for p in context.rglob("*") if p.is_file())
        assert files == [".dockerignore", "Dockerfile", "entrypoint.sh", "lock/lock.txt", "lock/pylock.deps.toml",
                         "lock/pylock.extras.toml", "lock/pylock.top.toml", "lock/pylock.torch.toml", "probe.py",
                         "uv-step.sh"]
        assert (context / "lock" / "lock.txt").read_text() == (cwd / "locks" / "cpu" / f"{platform.replace('/', '-')}.txt").read_text()
    assert doc["target"]["cpu-linux-amd64"]["labels"][CONTENT_LABEL] != doc["target"]["cpu-linux-arm64"]["labels"][CONTENT_LABEL]
    written = b"".join(p.read_bytes() for p in (cwd / "out").rglob("*") if p.is_file())
    assert CA_VALUE.encode() not in written and NETRC_PASSWORD.encode() not in written


def test_every_cell_envbuild_matrix_lists_has_a_target(project, invoke, monkeypatch):
    """The shipped matrix, every backend, variant and platform; the locks are stood in for (none is committed),
    the rest is real."""
    cwd, _ = project
    m = load(MATRIX)
    fake = lockfile.from_report("any", REPORT, {}, ["torch==2.15.0"], [], {"platform": "linux/amd64"})
    monkeypatch.setattr(locking, "check", lambda *a, **k: [])
    monkeypatch.setattr(locking, "ensure", lambda *a, **k: fake)
    result = invoke("matrix", "--format", "bake", "--output", "out", "--matrix", str(MATRIX), "--no-ca-bundle")
    assert result.exit_code == 0, result.output
    doc = json.loads((cwd / "out" / bake.FILE).read_text())
    listed = json.loads(invoke("matrix", "--format", "json", "--per-platform", "--matrix", str(MATRIX)).stdout)
    cells = [(job["backend"], job["platform"]) for job in listed["include"]]
    assert len(cells) > 10 and [bake.target_name(b, p) for b, p in cells] == list(doc["target"])
    for backend, platform in cells:
        target = doc["target"][bake.target_name(backend, platform)]
        assert target["platforms"] == [platform] and target["tags"][0].startswith(f"{m.image.repository}:{backend}")
        assert bake.target_name(backend, platform) in doc["group"][backend]["targets"]
    assert sorted(doc["group"]["all"]["targets"]) == sorted(doc["target"])
    assert schema_problems(doc) == []


def test_a_stale_lock_is_refused_before_anything_is_written(project, invoke):
    cwd, secrets = project
    assert invoke("matrix", "--format", "bake", "--output", "out", "--backend", "cpu", *SET, *secrets).exit_code == 0
    before = {p: p.read_bytes() for p in (cwd / "out").rglob("*") if p.is_file()}
    m = load(MATRIX, [f"backends.cpu.base_image={PINNED}"])
    write_lock(cwd, m, "cpu", "linux/arm64", uv="0.0.1")
    for out in ("out", "fresh"):
        result = invoke("matrix", "--format", "bake", "--output", out, "--backend", "cpu", *SET, *secrets)
        assert result.exit_code == 1, result.output
        assert "locks/cpu/linux-arm64.txt is stale (uv: 0.0.1 ->" in result.stderr
        assert "envbuild lock --backend cpu --platform linux/arm64" in result.stderr
        assert "linux-amd64" not in result.stderr  # the current one is not named
    assert {p: p.read_bytes() for p in (cwd / "out").rglob("*") if p.is_file()} == before
    assert not (cwd / "fresh").exists() and sorted(p.name for p in cwd.iterdir() if p.name.startswith(".")) == []


def test_a_missing_lock_is_refused_and_a_new_matrix_replaces_the_folder_whole(project, invoke):
    cwd, secrets = project
    assert invoke("matrix", "--format", "bake", "--output", "out", "--backend", "cpu", *SET, *secrets).exit_code == 0
    (cwd / "out" / "contexts" / "leftover").mkdir()
    (cwd / "locks" / "cpu" / "linux-arm64.txt").unlink()
    result = invoke("matrix", "--format", "bake", "--output", "out", "--backend", "cpu", *SET, *secrets)
    assert result.exit_code == 1 and "linux-arm64.txt is missing" in result.stderr
    assert (cwd / "out" / "contexts" / "leftover").is_dir()
    m = load(MATRIX, [f"backends.cpu.base_image={PINNED}"])
    write_lock(cwd, m, "cpu", "linux/arm64")
    assert invoke("matrix", "--format", "bake", "--output", "out", "--backend", "cpu", *SET, *secrets).exit_code == 0
    assert sorted(p.name for p in (cwd / "out" / "contexts").iterdir()) == ["cpu-linux-amd64", "cpu-linux-arm64"]


def test_what_a_bake_file_cannot_carry_is_refused(project, invoke):
    cwd, _ = project
    (cwd / "mine").mkdir()
    (cwd / "mine" / "notes.txt").write_text("keep me")
    result = invoke("matrix", "--format", "bake", "--output", "mine", "--backend", "cpu", *SET, "--no-ca-bundle")
    assert result.exit_code == 2 and "a folder envbuild did not write" in result.stderr
    assert (cwd / "mine" / "notes.txt").read_text() == "keep me"
    result = invoke("matrix", "--format", "bake", "--output", "out", "--backend", "cpu", *SET, "--build-arg", "HTTP_PROXY")
    assert result.exit_code == 2 and "give HTTP_PROXY=VALUE" in result.stderr
    assert invoke("matrix", "--format", "bake", *SET).exit_code == 2  # no --output
    assert invoke("matrix", "--output", "out", *SET).exit_code == 2  # --output without bake
    assert not (cwd / "out").exists()
