"""`envbuild outdated` and `envbuild bump` against a real package index (support/pyindex.py, HTTP on loopback)
and a real registry (Debian's docker-registry): several releases and tags, some that fit and some that break a
pairing rule; an index that cannot be reached; a digest-pinned base whose tag moved. Also the real PyPI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support import testbed
from support.constants import MATRIX
from support.pyindex import SimpleIndex

X86 = "cp312-cp312-manylinux_2_28_x86_64"
ARM = "cp312-cp312-manylinux_2_28_aarch64"
CUDA = "13.2.1-base-ubuntu24.04"
ROCM = "rocm10.1.0_ubuntu24.04_py3.12_pytorch_release_2.14.0"

MATRIX_TEXT = """\
# A test matrix: every comment here must survive a bump byte for byte.
image:
  repository: envbuild-test/outdated  # where images go
  source: https://github.com/envbuild/envbuild

# transformers: the shared pin
transformers:
  version: "5.23.0"   # pinned in November
  torch: ">=2.6"
accelerate:
  version: "1.15.0"
  torch: ">=2.0.0"
uv:
  version: '0.13.8'
index:
  url: {index}

backends:
  # pip torch on two platforms
  cpu:
    description: CPU
    device: cpu
    base_image: {registry}/vendor/cuda:{cuda}
    platforms: [linux/amd64, linux/arm64]
    torch:
      version: "2.14.0"   # keep me
      index_url: {index}
    ci:
      runs_on: [ubuntu-latest]

  # a plugin that pairs release for release
  npu:
    description: Pair
    device: npu
    base_image: {registry}/vendor/debian:bookworm-slim@{digest}
    platforms: [linux/amd64]
    torch:
      version: "2.14.0"
      index_url: {index}
    plugin:
      package: torch-pair
      version: "2.14.0"
      pairing: same-release
      index_url: {index}
    import: torch_pair
    ci:
      runs_on: [ubuntu-latest]

  # a vendor base that fixes its torch
  rocm:
    description: Vendor
    device: cuda
    base_image: {registry}/vendor/rocm:{rocm}
    platforms: [linux/amd64]
    torch:
      source: base
      version: "2.14.0"
    ci:
      runs_on: [ubuntu-latest]

  # an old vendor torch: it holds transformers back
  hpu:
    description: Old
    device: hpu
    base_image: {registry}/vendor/gaudi:1.24.1-pytorch-2.11.0
    platforms: [linux/amd64]
    torch:
      source: base
      version: "2.11.0"
    import: habana_frameworks.torch
    ci:
      runs_on: [ubuntu-latest]
"""


def _push(registry: testbed.Registry, ref: str, content: str, workdir: Path) -> str:
    """Push a tiny artifact under `ref` (an OCI manifest: the registry only counts tags and digests), through the
    registry client envbuild itself uses."""
    import json

    from envbuild.net.regclient import OCI_MANIFEST, Registry, split

    api = Registry(f"{registry.host}/{ref}")
    repo, tag = split(f"{registry.host}/{ref}")
    config = api.put_blob(repo, b"{}")
    layer = api.put_blob(repo, content.encode())
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": config, "size": 2},
                "layers": [{"mediaType": "text/plain", "digest": layer, "size": len(content.encode())}]}
    api.put_manifest(repo, tag, json.dumps(manifest).encode(), OCI_MANIFEST)
    return _digest(registry, ref)


def _digest(registry: testbed.Registry, ref: str) -> str:
    from envbuild.core.imageref import Reference
    from envbuild.maintain.sources.tags import RegistryClient

    parsed = Reference.parse(f"{registry.host}/{ref}")
    return RegistryClient().digest(parsed, parsed.tag)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("outdated")
    idx = SimpleIndex(root / "index")
    for v, torch in (("5.23.0", ">=2.6"), ("5.24.0", ">=2.6"), ("5.25.0", ">=2.12")):
        # 5.24.0 without PEP 658 metadata: read from its wheel
        idx.add("transformers", v, (f'torch{torch}; extra == "torch"', 'accelerate>=1.1.0; extra == "torch"'),
                metadata=v != "5.24.0")
    idx.add("transformers", "5.26.0rc1", ('torch>=2.12; extra == "torch"',), metadata=True)
    idx.add("accelerate", "1.15.0", ("torch>=2.0.0",), metadata=True)
    idx.add("accelerate", "1.16.0", ("torch>=2.0.0",), metadata=True)
    idx.add("uv", "0.13.8")
    idx.add("uv", "0.13.9")
    idx.add("uv", "0.14.0", yanked=True)
    for v in ("2.14.0", "2.15.0"):
        idx.add("torch", v, tag=X86)
        idx.add("torch", v, tag=ARM)
    idx.add("torch", "2.16.0", tag=X86)  # no arm64 wheel: cpu cannot take it
    idx.add("torch-pair", "2.14.0")
    idx.add("torch-pair", "2.15.0")
    registry = testbed.start_registry(root / "registry")
    work = root / "push"
    work.mkdir()
    for tag in (CUDA, "13.2.2-base-ubuntu24.04", "13.3.0-base-ubuntu26.04", "13.2.2-runtime-ubuntu24.04", "12.9.0-base-ubuntu24.04"):
        _push(registry, f"vendor/cuda:{tag}", tag, work)
    for tag in (ROCM, "rocm10.2.0_ubuntu24.04_py3.12_pytorch_release_2.15.0", "rocm10.3.0_ubuntu24.04_py3.13_pytorch_release_2.16.0"):
        _push(registry, f"vendor/rocm:{tag}", tag, work)
    _push(registry, "vendor/gaudi:1.24.1-pytorch-2.11.0", "gaudi", work)
    old_digest = _push(registry, "vendor/debian:bookworm-slim", "old", work)
    new_digest = _push(registry, "vendor/debian:bookworm-slim", "new", work)  # the tag moved
    with idx:
        project = root / "project"
        project.mkdir()
        (project / "matrix.yaml").write_text(MATRIX_TEXT.format(index=idx.url, registry=registry.host, cuda=CUDA, rocm=ROCM,
                                                                digest=old_digest))
        yield {"index": idx, "registry": registry, "project": project, "old": old_digest, "new": new_digest}
    registry.stop()


def envbuild(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(["envbuild", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def _findings(world, *args: str) -> dict[str, dict]:
    proc = envbuild("outdated", "--json", *args, cwd=world["project"])
    assert proc.returncode == 0, proc.stderr
    return {f["field"]: f for f in json.loads(proc.stdout)}


def test_outdated_names_the_newest_and_the_newest_that_fits_with_the_reasons(world):
    f = _findings(world)
    reg = world["registry"].host

    t = f["transformers.version"]  # 5.25.0 needs torch>=2.12: hpu's vendor torch 2.11.0 holds it back
    assert (t["current"], t["newest"], t["fits"], t["newer"]) == ("5.23.0", "5.25.0", "5.24.0", True)
    assert any("5.25.0 needs torch>=2.12" in w and "hpu has 2.11.0" in w for w in t["why"]), t["why"]
    assert any(w.startswith("hpu's torch 2.11.0 carries transformers 5.24.0") for w in t["why"]), t["why"]
    assert f["accelerate.version"]["fits"] == "1.16.0"
    assert (f["uv.version"]["newest"], f["uv.version"]["fits"]) == ("0.13.9", "0.13.9")  # 0.14.0 is yanked

    cpu = f["backends.cpu.torch.version"]  # 2.16.0 has no arm64 wheel
    assert (cpu["newest"], cpu["fits"]) == ("2.16.0", "2.15.0")
    assert any("2.16.0: no wheel for linux/arm64" in w for w in cpu["why"]), cpu["why"]
    npu = f["backends.npu.torch.version"]  # torch-pair has no 2.16.0
    assert npu["fits"] == "2.15.0" and any("torch-pair has no release for it" in w for w in npu["why"]), npu
    assert f["backends.npu.plugin.version"]["fits"] == "2.15.0"

    base = f["backends.cpu.base_image"]  # same shape only: not -runtime-, not ubuntu26.04, not older
    assert base["fits"] == f"{reg}/vendor/cuda:13.2.2-base-ubuntu24.04", base
    rocm = f["backends.rocm.base_image"]  # py3.13 is another shape; the base's torch moves with it
    assert rocm["fits"] == f"{reg}/vendor/rocm:rocm10.2.0_ubuntu24.04_py3.12_pytorch_release_2.15.0", rocm
    assert rocm["also"] == {"backends.rocm.torch.version": "2.15.0"}
    assert f["backends.hpu.base_image"]["newer"] is False


def test_a_moved_digest_is_reported_and_bump_refreshes_it(world, tmp_path):
    f = _findings(world, "--backend", "npu")
    base = f["backends.npu.base_image"]
    assert base["newer"] and base["fits"].endswith("@" + world["new"]), base
    assert any("moved" in w for w in base["why"]), base["why"]
    project = tmp_path / "p"
    project.mkdir()
    (project / "matrix.yaml").write_bytes((world["project"] / "matrix.yaml").read_bytes())
    proc = envbuild("bump", "--backend", "npu", "--only", "base_image", "--no-lock", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert world["new"] in (project / "matrix.yaml").read_text() and world["old"] not in (project / "matrix.yaml").read_text()


def test_an_index_that_cannot_be_reached_is_reported_for_its_pins_only(world, tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    closed = f"http://127.0.0.1:{testbed.free_port()}/simple"
    text = (world["project"] / "matrix.yaml").read_text()
    (project / "matrix.yaml").write_text(text.replace(
        "      version: \"2.14.0\"   # keep me\n      index_url: " + world["index"].url,
        "      version: \"2.14.0\"   # keep me\n      index_url: " + closed))
    proc = envbuild("outdated", cwd=project)
    assert proc.returncode == 1, proc.stderr  # the answer is not whole
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("backends.cpu.torch.version"))
    assert "not asked" in row and "connection refused" in row, row
    others = [ln for ln in proc.stdout.splitlines()[1:] if not ln.startswith("backends.cpu.torch.version")]
    assert others and not any("not asked" in ln for ln in others), proc.stdout
    assert "1 pin(s) could not be asked" in proc.stderr


def test_bump_changes_only_the_version_scalars_keeps_every_comment_and_renders(world, tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    before = (world["project"] / "matrix.yaml").read_text()
    (project / "matrix.yaml").write_text(before)
    proc = envbuild("bump", "--no-lock", cwd=project)
    assert proc.returncode == 0, proc.stderr
    after = (project / "matrix.yaml").read_text()
    assert proc.stdout.startswith("--- a/matrix.yaml"), proc.stdout
    old_lines, new_lines = before.splitlines(), after.splitlines()
    assert len(new_lines) == len(old_lines)  # transformers.torch existed: nothing inserted
    changed = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
    expected = {"transformers:5.24.0", "accelerate:1.16.0", "uv:0.13.9", "cpu.torch:2.15.0", "npu.torch:2.15.0",
                "npu.plugin:2.15.0", "cpu.base", "npu.base", "rocm.base", "rocm.torch:2.15.0"}
    assert len(changed) == len(expected), changed
    for a, b in changed:  # only the value moved: the key, quotes and a trailing comment stay byte for byte
        key = a.split(":", 1)[0]
        assert b.startswith(key + ":"), (a, b)
        if "#" in a:
            assert a[a.index("  #"):] == b[b.index("  #"):], (a, b)
    assert "  version: '0.13.9'" in new_lines  # its single quotes kept
    for comment in (ln for ln in old_lines if ln.lstrip().startswith("#")):
        assert comment in new_lines
    assert envbuild("validate", "--matrix", "matrix.yaml", cwd=project).returncode == 0
    check = envbuild("render", "--check", "--matrix", "matrix.yaml", cwd=project)
    assert check.returncode == 0, check.stdout + check.stderr  # bump rendered what the bumped matrix says
    again = envbuild("outdated", "--exit-code", "--backend", "cpu", cwd=project)
    assert again.returncode == 0, again.stdout  # nothing newer fits any more


def test_dry_run_and_outdated_write_nothing(world, tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "matrix.yaml").write_bytes((world["project"] / "matrix.yaml").read_bytes())
    snapshot = {p.name: p.read_bytes() for p in project.iterdir()}
    proc = envbuild("bump", "--dry-run", cwd=project)
    assert proc.returncode == 0 and "+  version: \"5.24.0\"" in proc.stdout, proc.stdout + proc.stderr
    assert envbuild("outdated", cwd=project).returncode == 0
    assert envbuild("outdated", "--exit-code", cwd=project).returncode == 1  # something newer fits
    assert {p.name: p.read_bytes() for p in project.iterdir()} == snapshot


def test_bump_to_a_release_a_backend_cannot_carry_is_refused_and_writes_nothing(world, tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "matrix.yaml").write_bytes((world["project"] / "matrix.yaml").read_bytes())
    proc = envbuild("bump", "--only", "transformers", "--to", "5.25.0", cwd=project)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "backend hpu: torch 2.11.0 is below what transformers 5.25.0 requires (torch>=2.12)" in proc.stderr
    assert (project / "matrix.yaml").read_bytes() == (world["project"] / "matrix.yaml").read_bytes()
    assert not (project / "dockerfiles").exists()
    ok = envbuild("bump", "--only", "transformers", "--to", "5.24.0", "--no-lock", cwd=project)
    assert ok.returncode == 0, ok.stderr
    assert 'version: "5.24.0"   # pinned in November' in (project / "matrix.yaml").read_text()


def test_the_real_pypi_is_asked_for_the_shipped_matrix(tmp_path):
    """The shipped matrix against PyPI itself: its transformers pin is on PyPI and nothing newer is left behind
    unexplained. Where a source cannot be reached, that is said for those pins, not raised, and the exit status
    says the answer is not whole."""
    proc = envbuild("outdated", "--json", "--backend", "cpu", "--matrix", str(MATRIX), cwd=tmp_path)
    found = {f["field"]: f for f in json.loads(proc.stdout)}
    # a source this machine cannot reach (no PyTorch index, no Docker Hub here) makes the answer not whole: exit 1
    unasked = [f for f in found.values() if f["error"]]
    assert proc.returncode == (1 if unasked else 0), proc.stderr
    assert ("could not be asked" in proc.stderr) == bool(unasked), proc.stderr
    t = found["transformers.version"]
    if t["error"]:
        assert "cannot be reached" in t["error"], t
        return
    from packaging.version import Version

    assert Version(t["newest"]) >= Version(t["current"])
    assert t["fits"] == t["current"] or t["why"] or t["newer"], t
    assert found["uv.version"]["error"] is None


def test_an_avoided_release_is_never_proposed_and_says_why(world, tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    text = (world["project"] / "matrix.yaml").read_text()
    (project / "matrix.yaml").write_text(text.replace("uv:\n  version: '0.13.8'\n", "uv:\n  version: '0.13.8'\n  avoid: [\"0.13.9\"]\n"))
    proc = envbuild("outdated", "--json", cwd=project)
    assert proc.returncode == 0, proc.stderr
    uv = next(f for f in json.loads(proc.stdout) if f["field"] == "uv.version")
    assert (uv["newest"], uv["fits"], uv["newer"]) == ("0.13.9", "0.13.8", False)
    assert uv["why"] == ["0.13.9: avoided (uv.avoid in the matrix)"]


def test_the_shipped_pins_fit_each_other_as_pypi_says_today(tmp_path):
    """The metadata cache refreshed from PyPI itself (a copy beside a copy of the shipped matrix): every
    containerizable backend's pins still fit its Python and torch, and the committed facts of the pins are PyPI's.
    Where PyPI cannot be reached, that is said, not raised."""
    from envbuild.matrix import facts, load

    path = tmp_path / "matrix.yaml"
    path.write_bytes(MATRIX.read_bytes())
    facts.path_for(path).write_bytes(facts.path_for(MATRIX).read_bytes())
    proc = envbuild("metadata", "--refresh", "--matrix", path, cwd=tmp_path)
    if "cannot be reached" in proc.stderr:
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr  # validated against what PyPI says now
    fresh, committed = facts.read(facts.path_for(path)), facts.read(facts.path_for(MATRIX))
    for b, dist, version, _ in facts.carried(load(MATRIX)):
        if b.python.version:
            assert fresh.wheel(dist, version, b.python.version) == committed.wheel(dist, version, b.python.version), (dist, version)
