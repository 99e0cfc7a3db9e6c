"""bump moves linked facts together or proposes nothing, against a stub index (support/pyindex.py: real HTTP on
loopback, wheels with real-looking metadata) and a stub registry (tags in memory): a CUDA base with and without a
torch index for its release, a plugin whose metadata needs a newer torch, a transformers that drops a Python. After
each bump every check CI runs passes on the result, or nothing was written."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.pyindex import SimpleIndex

from envbuild import render
from envbuild.report import report
from envbuild.core.errors import InvalidInput, MatrixError
from envbuild.matrix import facts, load
from envbuild.maintain.sources import Sources, outdated
from envbuild.maintain.sources.bump import bump, changes, working
from envbuild.maintain.sources.index import IndexClient
from envbuild.maintain.sources.metadata import update
from envbuild.core.imageref import Reference

X86 = "cp312-cp312-manylinux_2_28_x86_64"

MATRIX = """\
# linked facts: every comment stays
image:
  repository: envbuild-test/linked
  source: https://github.com/envbuild/envbuild
transformers:
  version: "5.20.0"
  torch: ">=2.6"
accelerate:
  version: "1.15.0"
  torch: ">=2.0.0"
uv:
  version: "0.13.8"
index:
  url: {pypi}
backends:
  cuda:
    description: NVIDIA GPU
    device: cuda
    base_image: nvidia/cuda:13.2.1-base-ubuntu24.04
    platforms: [linux/amd64]
    python:
      version: "3.12"
      apt: [python3, python3-venv]
    torch:
      version: "2.15.0"
      index_url: {whl}/cu132
    host:
      stack: cuda
      version: "13.2"
    ci:
      runs_on: [ubuntu-latest]
  tpu:
    description: TPU
    device: tpu
    base_image: python:3.12-slim-bookworm
    platforms: [linux/amd64]
    python:
      version: "3.12"
    torch:
      version: "2.15.0"
      index_url: {whl}/cpu
    plugin:
      package: torch-tpu
      version: "0.2.0"
      torch: ">=2.11.0,<=2.15.0"
    import: torch_tpu
    ci:
      runs_on: [ubuntu-latest]
  old:
    description: A vendor base with Python 3.10
    device: mlu
    base_image: vendor.example/old:v1-torch2.11.0-py310
    platforms: [linux/amd64]
    python:
      version: "3.10"
    torch:
      source: base
      version: "2.11.0"
    ci:
      runs_on: [ubuntu-latest]
"""


class Registry:
    """Tags per repository, as a registry's tags/list answers them."""

    def __init__(self, tags: dict[str, list[str]]):
        self.known = tags

    def tags(self, ref: Reference) -> list[str]:
        return self.known.get(ref.path, [])

    def digest(self, ref: Reference, tag: str) -> str:
        raise AssertionError("no base is pinned by digest here")


REGISTRY = {"nvidia/cuda": ["13.2.1-base-ubuntu24.04", "13.3.0-base-ubuntu24.04", "13.3.0-runtime-ubuntu24.04"],
            "library/python": ["3.12-slim-bookworm"], "old": ["v1-torch2.11.0-py310"]}


def _index(root: Path, *, cu133: bool) -> SimpleIndex:
    idx = SimpleIndex(root)
    for v, python in (("5.20.0", ">=3.10.0"), ("5.20.2", ">=3.10.0"), ("5.21.0", ">=3.11.0")):  # 5.21 drops 3.10
        idx.add("transformers", v, ('torch>=2.6; extra == "torch"',), requires_python=python, metadata=True)
    idx.add("accelerate", "1.15.0", ("torch>=2.0.0",), requires_python=">=3.10.0", metadata=True)
    idx.add("uv", "0.13.8")
    idx.add("torch-tpu", "0.2.0", ("torch>=2.11.0,<=2.15.0", "libtpu>=0.0.50"), tag=X86, requires_python=">=3.12")
    idx.add("torch-tpu", "0.3.0", ("torch>=2.16.0,<=2.16.0", "libtpu>=0.0.60"), tag=X86, requires_python=">=3.12")
    for folder in ("whl/cu132", "whl/cpu", *(["whl/cu133"] if cu133 else [])):
        idx.add("torch", "2.15.0", tag=X86, folder=folder)
    return idx


@pytest.fixture(params=[False, True], ids=["no-cu133-index", "cu133-index"])
def world(request, tmp_path):
    with _index(tmp_path / "index", cu133=request.param) as idx:
        project = tmp_path / "project"
        project.mkdir()
        path = project / "matrix.yaml"
        path.write_text(MATRIX.format(pypi=idx.url, whl=idx.url_of("whl")))
        index = IndexClient()
        _, errors, _ = update(str(path), index)  # the cache, as `envbuild metadata --refresh` writes it
        assert errors == []
        m = load(path)
        render.write(render.render(m, m.containerizable()), project / "dockerfiles")
        (project / "COMPATIBILITY.md").write_text(report.compat_markdown(report.compat_rows(m)))
        yield {"index": idx, "cu133": request.param, "path": path, "project": project,
               "sources": Sources(index=index, registry=Registry(REGISTRY))}


def _ci_checks(invoke, project: Path) -> None:
    """What CI's lint job runs on a bump pull request."""
    m = ["--matrix", project / "matrix.yaml"]
    for args in (["validate", *m], ["render", "--check", *m, "-o", project / "dockerfiles"],
                 ["list", "--compat", "--check", project / "COMPATIBILITY.md", *m],
                 ["lock", "--check", *m, "--locks", project / "locks"], ["metadata", *m]):
        result = invoke(*args)
        assert result.exit_code == 0, (args, result.output)


def _snapshot(project: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(project.rglob("*")) if p.is_file()}


def test_bump_moves_linked_facts_together_or_proposes_nothing_and_every_ci_check_passes(world, invoke):
    path, sources = world["path"], world["sources"]
    _ci_checks(invoke, world["project"])
    m = load(path)
    found = {f.field: f for f in outdated(m, m.containerizable(), sources)}

    t = found["transformers.version"]  # 5.21.0 drops Python 3.10, which `old` runs
    assert (t.newest, t.fits) == ("5.21.0", "5.20.2"), t
    assert any("5.21.0 needs Python >=3.11.0: old has 3.10" in w for w in t.why), t.why
    plugin = found["backends.tpu.plugin.version"]  # 0.3.0's metadata needs torch 2.16: not written
    assert (plugin.newest, plugin.fits, plugin.newer) == ("0.3.0", "0.2.0", False), plugin
    assert any("0.3.0: it requires torch<=2.16.0,>=2.16.0, the backend has torch 2.15.0" in w for w in plugin.why), plugin.why

    base = found["backends.cuda.base_image"]
    if world["cu133"]:  # the base, host.version and the torch index move as one
        assert base.fits == "nvidia/cuda:13.3.0-base-ubuntu24.04", base
        assert base.also == {"backends.cuda.host.version": "13.3",
                             "backends.cuda.torch.index_url": world["index"].url_of("whl") + "/cu133"}, base.also
    else:  # no torch index for CUDA 13.3: nothing of it is proposed, and why is said
        assert base.fits == "nvidia/cuda:13.2.1-base-ubuntu24.04" and not base.also, base
        assert any("13.3.0-base-ubuntu24.04: no torch index for CUDA 13.3" in w for w in base.why), base.why

    result = bump(path, changes(list(found.values())), world["project"] / "dockerfiles", index=sources.index)
    bumped = load(path)
    assert bumped.transformers == "5.20.2" and bumped.backend("tpu").plugin.version == "0.2.0"
    cuda = bumped.backend("cuda")
    dockerfile = (world["project"] / "dockerfiles" / "cuda.Dockerfile").read_text()
    if world["cu133"]:
        assert (cuda.base_image, cuda.host.version, cuda.torch.index_url) == (
            "nvidia/cuda:13.3.0-base-ubuntu24.04", "13.3", world["index"].url_of("whl") + "/cu133")
        # the label follows the base: 13.x's floor under minor version compatibility, 13.3's own minimum natively
        assert 'dev.envbuild.requires.driver="nvidia>=580.65.06; native>=610.43.02"' in dockerfile
        assert 'NVIDIA_REQUIRE_CUDA="cuda>=13.0"' in dockerfile
        assert "nvidia >= 580.65.06 (cuda 13.3; minor version compatibility; >= 610.43.02 native)" in (
            world["project"] / "COMPATIBILITY.md").read_text()
    else:
        assert (cuda.base_image, cuda.host.version) == ("nvidia/cuda:13.2.1-base-ubuntu24.04", "13.2")
        assert 'dev.envbuild.requires.driver="nvidia>=580.65.06; native>=595.45.04"' in dockerfile
    cache = facts.read(facts.path_for(path))
    assert "5.20.2" in cache.releases("transformers")  # the cache knows the new pin: validate checks it offline
    assert str(facts.path_for(path)) in result.written or cache.text() == facts.path_for(path).read_text()
    _ci_checks(invoke, world["project"])


def test_a_bump_the_facts_refuse_writes_nothing(world):
    path, sources = world["path"], world["sources"]
    before = _snapshot(world["project"])
    with pytest.raises(MatrixError, match=r"backend old \(Python 3.10, torch 2.11.0\) cannot carry transformers 5.21.0: "
                                          r"it requires Python >=3.11.0.*the newest transformers that fits .* is 5.20.2"):
        bump(path, {"transformers.version": "5.21.0"}, world["project"] / "dockerfiles", index=sources.index)
    with pytest.raises(MatrixError, match="torch-tpu 0.3.0: it requires torch<=2.16.0,>=2.16.0"):
        bump(path, {"backends.tpu.plugin.version": "0.3.0", "backends.tpu.plugin.torch": ">=2.11.0"},
             world["project"] / "dockerfiles", index=sources.index)
    with pytest.raises(MatrixError, match="carries CUDA 13.3"):  # a base without its linked facts
        bump(path, {"backends.cuda.base_image": "nvidia/cuda:13.3.0-base-ubuntu24.04"}, world["project"] / "dockerfiles",
             index=sources.index)
    assert _snapshot(world["project"]) == before


def test_bump_refuses_the_matrix_installed_with_envbuild_and_names_it(tmp_path, invoke):
    from envbuild.core.paths import PACKAGED_MATRIX

    with pytest.raises(InvalidInput, match="installed with envbuild.*would have changed .*matrix.yaml"):
        working(PACKAGED_MATRIX)
    installed = tmp_path / "lib" / "python3.11" / "site-packages" / "envbuild" / "matrix" / "matrix.yaml"
    installed.parent.mkdir(parents=True)
    installed.write_text("x")
    result = invoke("bump", "--matrix", installed)
    assert result.exit_code == 2 and f"would have changed {installed}" in result.output, result.output
    assert installed.read_text() == "x"
    working(tmp_path / "matrix.yaml")  # a working folder's matrix is fine


# --- the shipped matrix and its facts ------------------------------------------------------------------------------


def test_the_shipped_matrix_declares_each_base_python_and_its_cache_knows_every_pin():
    from support.constants import MATRIX

    from envbuild.core.paths import PACKAGE

    m = load(MATRIX)  # validated against matrix.metadata.json beside it
    assert {b.name: b.python.version for b in m.containerizable() if not b.python.version} == {}
    cache = facts.read(facts.path_for(MATRIX))
    assert cache is not None and facts.missing(m, cache) == []
    assert facts.problems(m, cache) == []
    # mlu and musa run Python 3.10: transformers 5.21+ requires 3.11, so they carry the newest for 3.10
    for name in ("mlu", "musa"):
        b = m.backend(name)
        assert b.python.version == "3.10" and m.pin("transformers", b) == cache.newest_fit("transformers", "3.10", b.torch.version)
    assert (PACKAGE / "matrix" / "matrix.metadata.json").read_bytes() == facts.path_for(MATRIX).read_bytes()


def _shipped_copy(tmp_path: Path, edit) -> Path:
    from support.constants import MATRIX

    path = tmp_path / "matrix.yaml"
    path.write_text(edit(MATRIX.read_text()))
    facts.path_for(path).write_bytes(facts.path_for(MATRIX).read_bytes())
    return path


def test_validate_names_both_sides_and_the_newest_release_that_fits(tmp_path):
    own = '    transformers:\n      version: "5.20.2"\n      torch: ">=2.6"\n    import: torch_mlu'
    path = _shipped_copy(tmp_path, lambda t: t.replace(own, "    import: torch_mlu"))
    with pytest.raises(MatrixError) as err:
        load(path)
    (message,) = [str(p) for p in err.value.problems]
    assert message.startswith(f"{path}:") and "transformers.version: backend mlu (Python 3.10, torch 2.11.0) cannot carry " in message
    assert "transformers 5.24.0: it requires Python >=3.11.0, the base runs Python 3.10" in message
    assert "the newest transformers that fits Python 3.10 and torch 2.11.0 is 5.20.2" in message
    # a plugin without a pairing rule is still held to its own Requires-Dist on torch
    path = _shipped_copy(tmp_path, lambda t: t.replace('torch: ">=2.11.0,<=2.15.0"', 'torch: ">=2.11.0"').replace(
        '      version: "2.15.0"\n      index_url: https://download.pytorch.org/whl/cpu\n    plugin:\n      package: torch-tpu',
        '      version: "2.16.0"\n      index_url: https://download.pytorch.org/whl/cpu\n    plugin:\n      package: torch-tpu'))
    with pytest.raises(MatrixError, match=r"backends.tpu.plugin.version: backend tpu \(Python 3.12, torch 2.16.0\) cannot "
                                          r"carry torch-tpu 0.2.0: it requires torch<=2.15.0,>=2.11.0"):
        load(path)
    assert load(path, with_facts=False)  # the schema alone cannot know it


def test_a_base_whose_python_differs_fails_the_build_and_the_lock():
    from support.constants import FIXED, MATRIX

    m = load(MATRIX)
    text = render.render_backend(m, m.backend("mlu"))
    check = ("python3 -c \"import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '3.10' else "
             "'the base image runs Python ' + v + '; the matrix declares 3.10 (backends.mlu.python.version)')\"")
    base = text.split("FROM system AS base")[1].split("FROM ")[0]  # the image and the lock (FROM base AS lock-resolve) both run it
    assert check in base and "AS lock-resolve" in text.split(check)[1]
    fixed = load(FIXED)  # no python.version declared: nothing rendered (the golden files stay)
    assert "sys.version_info" not in render.render_backend(fixed, fixed.backend("mlu"))


def test_bump_names_the_locks_it_leaves_stale(world, invoke):
    project = world["project"]
    (project / "locks" / "old").mkdir(parents=True)  # one lock per platform: locks/BACKEND/OS-ARCH.txt
    (project / "locks" / "old" / "linux-amd64.txt").write_text("# a lock of the old image\n")
    result = invoke("bump", "--matrix", world["path"], "--no-lock", "--locks", project / "locks", "-o", project / "dockerfiles")
    assert result.exit_code == 0, result.output
    assert f"not refreshed: {project / 'locks' / 'old' / 'linux-amd64.txt'} (--no-lock)" in result.output, result.output
    assert load(world["path"]).transformers == "5.20.2"


def test_the_bump_command_s_library_run(world):
    """sources.bump.run, as `envbuild bump` calls it: a dry run writes nothing and says what it would do; a real one
    writes the matrix and names the locks it leaves (--no-lock), asking no engine."""
    from envbuild.image import plan
    from envbuild.maintain.sources import bump as bumping

    path, project = world["path"], world["project"]
    lock = project / "locks" / "old" / "linux-amd64.txt"
    lock.parent.mkdir(parents=True)
    lock.write_text("# a lock of the old image\n")
    opts = plan.BuildOptions(locks_dir=project / "locks", context_dir=project / "ctx")
    m = load(path)
    no_engine = lambda: pytest.fail("--no-lock asked for an engine")  # noqa: E731
    before = _snapshot(project)
    dry = bumping.run(path, m, m.containerizable(), world["sources"], opts, no_engine, dockerfiles=project / "dockerfiles",
                      dry_run=True)
    assert dry.new["transformers.version"] == "5.20.2" and dry.result.written == [] and _snapshot(project) == before
    assert any(line.startswith("+") and "5.20.2" in line for line in dry.result.diff.splitlines())
    assert dry.to_json(True)["dry_run"] is True and dry.locks_left == []
    done = bumping.run(path, m, m.containerizable(), world["sources"], opts, no_engine, dockerfiles=project / "dockerfiles",
                       only=("transformers",), no_lock=True)
    assert done.new == {"transformers.version": "5.20.2"} and str(path) in done.result.written
    assert load(path).transformers == "5.20.2" and done.locks_left == [str(lock)] and done.locks_refreshed == []
