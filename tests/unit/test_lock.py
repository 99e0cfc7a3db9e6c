"""The lock without an engine: its format (byte for byte), its layers, staleness from the header alone, bad
lock files, extras in the matrix, and --locked. tests/engine/test_lock.py resolves against a real index."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest
from hypothesis import given, strategies as st
from support.constants import FIXED, MATRIX as MATRIX_PATH
from support.fakes import REPORT, FakeEngine
from support.properties import FILES, KINDS, exits_cleanly, file_bytes, own_error, plant

from envbuild.engine import docker as docker_engine
from envbuild.image import lockstate as locks
from envbuild.image import builder, plan
from envbuild.image import build, locking
from envbuild.core.errors import LockError, MatrixError, StaleLock
from envbuild.image import lockfile
from envbuild.matrix import load, loads
from pathlib import Path

PINNED = "debian:bookworm-slim@sha256:" + "a" * 64  # a digest-pinned base: nothing is asked of a registry
MATRIX = load(MATRIX_PATH, [f"backends.cpu.base_image={PINNED}"])
CPU = MATRIX.backend("cpu")
AMD64 = "linux/amd64"
INPUTS = {"backend": "cpu", "format": 1, "requirements": ["torch==2.15.0", "transformers==5.23.0", "accelerate==1.15.0"]}
LEGACY = builder.Builder(argv=("docker", "build"), env=(("DOCKER_BUILDKIT", "1"),), buildx=False)


def made(report=REPORT, extras=(), inputs=INPUTS) -> lockfile.LockFile:
    return lockfile.from_report("cpu", report, inputs, ["torch==2.15.0"], list(extras),
                                {"platform": "linux/amd64", "python": "3.11.2", "resolver": "pip 23.0.1"})


def test_the_layers_follow_what_torch_needs_and_what_transformers_adds():
    lock = made()
    layers = {layer: [p.name for p in lock.layer(layer)] for layer in lockfile.LAYERS}
    # torch's closure, with markers evaluated for the resolving platform (triton is for Windows only there)
    assert layers["torch"] == ["filelock", "mpmath", "sympy", "torch", "typing-extensions"]
    assert layers["deps"] == ["huggingface-hub", "numpy", "psutil"]
    assert layers["top"] == ["accelerate", "transformers"]
    assert layers["extras"] == []
    assert lock.pins()["torch"] == "2.15.0+cpu"


def test_an_extra_gets_its_own_layer_and_its_dependencies_go_with_the_rest():
    report = copy.deepcopy(REPORT)
    report["install"] += [
        {"metadata": {"name": "Datasets", "version": "4.0.0", "requires_dist": ["pyarrow>=15"]},
         "download_info": {"url": "https://x/datasets.whl", "archive_info": {"hash": "sha256=" + "d" * 64}}},
        {"metadata": {"name": "pyarrow", "version": "22.0.0"},
         "download_info": {"url": "https://x/pyarrow.whl", "archive_info": {"hashes": {"sha256": "e" * 64}}}},
    ]
    lock = made(report, extras=["datasets>=4"])
    assert [p.name for p in lock.layer("extras")] == ["datasets"]
    assert "pyarrow" in [p.name for p in lock.layer("deps")]
    assert lock.layer("extras")[0].sha256 == ("d" * 64,)


def test_the_text_is_byte_identical_and_reads_back():
    text = made().text()
    assert made().text() == text
    assert text.startswith("# envbuild lock of backend cpu: ")
    assert f"# inputs: {json.dumps(INPUTS, sort_keys=True)}\n" in text
    back = lockfile.parse(text, "locks/cpu.txt")
    assert back == made() and back.text() == text
    # pip and uv read it as requirements with hashes: NAME==VERSION lines, each with its --hash
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert body[0].endswith(" \\") and body[1].startswith("    --hash=sha256:")
    top = made().requirements("top")
    assert top.startswith("accelerate==1.15.0 \\\n    --hash=sha256:") and "transformers==5.23.0" in top and "numpy" not in top


@pytest.mark.parametrize("change, fragment", [
    (lambda t: t.replace("numpy==2.4.6", "numpy>=2.4.6"), "locks/cpu.txt:{line}: 'numpy>=2.4.6' is not NAME==VERSION"),
    (lambda t: t.replace("# layer: deps", "# layer: everything"), "locks/cpu.txt:{line}: unknown layer 'everything'"),
    (lambda t: t.replace("# inputs: {", "# inputs: {{"), "locks/cpu.txt:3: the inputs line is not JSON"),
    (lambda t: t.split("\n", 4)[4], "locks/cpu.txt: not an envbuild lock"),
    (lambda t: t.replace("# layer: torch\n", "# layer: torch\n    --hash=sha256:" + "0" * 64 + "\n"), "a --hash without the requirement"),
])
def test_a_broken_lock_names_its_file_and_line(change, fragment):
    text = change(made().text())
    line = next((n for n, ln in enumerate(text.splitlines(), 1) if "numpy>=" in ln or "everything" in ln), 0)
    with pytest.raises(LockError, match=fragment.format(line=line).replace("(", r"\(").replace(")", r"\)")):
        lockfile.parse(text, "locks/cpu.txt")


def test_a_requirement_without_its_hash_is_refused():
    text = made().text()
    lines = text.splitlines()
    at = next(n for n, ln in enumerate(lines) if ln.startswith("psutil=="))
    del lines[at + 1]
    lines[at] = lines[at].rstrip(" \\")
    with pytest.raises(LockError, match=rf"locks/cpu.txt:{at + 1}: psutil==7.2.2 has no --hash"):
        lockfile.parse("\n".join(lines) + "\n", "locks/cpu.txt")


def test_an_unhashed_archive_cannot_be_locked():
    report = copy.deepcopy(REPORT)
    report["install"][0]["download_info"] = {"url": "file:///src/torch", "dir_info": {}}
    with pytest.raises(LockError, match="torch 2.15.0\\+cpu comes from file:///src/torch, which has no sha256"):
        made(report)


def test_staleness_is_decided_by_the_header_alone():
    current = made()
    assert locks.stale(current, INPUTS) == []
    assert locks.stale(None, INPUTS) == ["there is no lock"]
    bumped = {**INPUTS, "requirements": ["torch==2.15.0", "transformers==5.24.0", "accelerate==1.15.0"]}
    (why,) = locks.stale(current, bumped)
    assert why.startswith("requirements: ") and "transformers==5.24.0" in why
    # a base digest that was not asked (lock --check, files only) is not compared; one that was asked is
    with_digest = made(inputs={**INPUTS, "platform": AMD64, "base_digest": "sha256:" + "1" * 64})
    assert locks.stale(with_digest, {**INPUTS, "platform": AMD64, "base_digest": None}) == []
    moved = locks.stale(with_digest, {**INPUTS, "platform": AMD64, "base_digest": "sha256:" + "2" * 64})
    assert moved == [f"base_digest: sha256:{'1' * 64} -> sha256:{'2' * 64}"]
    # the platform is an input: an amd64 lock is not the lock of arm64
    assert locks.stale(with_digest, {**INPUTS, "platform": "linux/arm64", "base_digest": None}) == [
        "platform: linux/amd64 -> linux/arm64"]


def test_requirements_keep_what_the_base_carries():
    assert locks.requirements(MATRIX, CPU) == [f"torch=={CPU.torch.version}", f"transformers=={MATRIX.transformers}",
                                                f"accelerate=={MATRIX.accelerate}"]
    npu, rocm = MATRIX.backend("npu"), MATRIX.backend("rocm")
    assert locks.requirements(MATRIX, npu)[:2] == [f"torch=={npu.torch.version}", f"torch-npu=={npu.plugin.version}"]
    assert not [r for r in locks.requirements(MATRIX, rocm) if r.startswith("torch")]  # the vendor's own torch
    m = load(MATRIX_PATH, ['packages=["datasets>=4"]', 'backends.cpu.packages=["peft==0.17.0"]'])
    assert locks.requirements(m, m.backend("cpu"))[-2:] == ["datasets>=4", "peft==0.17.0"]
    assert locks.requirements(m, m.backend("cuda"))[-1] == "datasets>=4"


def test_a_conflict_names_the_extra():
    m = load(MATRIX_PATH, ['backends.cpu.packages=["envbuild-wants-torch>=1"]'])
    said = ("ERROR: Cannot install -r /run/lock/requirements.in (line 3), -r /run/lock/requirements.in (line 4) and "
            "torch==2.15.0 because these package versions have conflicting dependencies.\nThe conflict is caused by:\n"
            "    The user requested torch==2.15.0\n    envbuild_wants_torch 1.0 depends on torch==2.14.0")
    message = locking._conflict(m.backend("cpu"), m, locks.requirements(m, m.backend("cpu")), said)
    assert "the extra 'envbuild-wants-torch>=1' (packages: in the matrix) cannot be installed" in message
    assert f"Cannot install accelerate=={m.accelerate}, envbuild-wants-torch>=1 and torch==2.15.0" in message
    assert "envbuild_wants_torch 1.0 depends on torch==2.14.0" in message


# --- the matrix's extras --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, fragment", [
    ('["datasets @ https://x.example/d.whl"]', "names a URL"),
    ('["not a requirement!"]', "is not a PEP 508 requirement"),
    ("""['peft; os_name == "posix"']""", "contains a quote"),
    ('"datasets"', "expected a list"),
])
def test_extras_are_checked_at_validate_time(value, fragment):
    with pytest.raises(MatrixError, match=fragment):
        loads(FIXED.read_text(), "matrix.yaml", [f"backends.cpu.packages={value}"])


def test_extras_in_the_file_are_located(write_matrix):
    text = FIXED.read_text().replace("\nbackends:\n", "\npackages:\n  - datasets>=4\n  - bad req!\nbackends:\n", 1)
    with pytest.raises(MatrixError) as info:
        load(write_matrix(text))
    (problem,) = info.value.problems
    assert problem.line == text[: text.index("bad req!")].count("\n") + 1 and "packages[1]" in problem.message


# --- building from the lock ---------------------------------------------------------------------------------


def test_locked_refuses_a_missing_or_stale_lock_without_resolving(tmp_path, monkeypatch):
    monkeypatch.setattr(docker_engine, "find_builder", lambda: LEGACY)
    monkeypatch.setattr(builder.engine, "start_client", lambda *a: pytest.fail("a builder was started around the engine"))
    engine = FakeEngine()
    opts = plan.BuildOptions(log_dir=tmp_path / "logs", context_dir=tmp_path / "ctx", locks_dir=tmp_path / "locks")
    monkeypatch.setattr("envbuild.core.platform.host_platform", lambda *a: AMD64)
    file = tmp_path / "locks" / "cpu" / "linux-amd64.txt"
    with pytest.raises(StaleLock, match=rf"{file} is missing: run `envbuild lock --backend cpu --platform linux/amd64`"):
        build.build(MATRIX, CPU, opts, engine, locked=True, echo=lambda s: None)
    file.parent.mkdir(parents=True)
    file.write_text(made(inputs={**locks.inputs(MATRIX, CPU, AMD64, "sha256:" + "a" * 64), "uv": "0.0.1"}).text())
    with pytest.raises(StaleLock, match=r"linux-amd64.txt is stale \(uv: 0.0.1 -> "):
        build.build(MATRIX, CPU, opts, engine, locked=True, echo=lambda s: None)
    assert engine.builds == []  # --locked resolves nothing
    assert file.read_text().count('"uv": "0.0.1"') == 1  # --locked writes nothing


def test_lock_check_reads_files_only(invoke, tmp_path, closed_socket, monkeypatch):
    """No docker client on PATH, DOCKER_HOST pointing nowhere, a base in no reachable registry: --check still answers,
    per platform."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr("envbuild.core.platform.host_platform", lambda *a: AMD64)
    locks_dir = tmp_path / "locks"
    args = ["--matrix", MATRIX_PATH, "--locks", locks_dir, "--no-ca-bundle", "--set", f"backends.cpu.base_image={PINNED}"]
    assert invoke("lock", "--check", *args).stdout.strip() == f"no locks to check in {locks_dir}/"
    missing = invoke("lock", "--check", "--backend", "cpu", *args)
    assert missing.exit_code == 1 and f"cpu (linux/amd64): {locks_dir}/cpu/linux-amd64.txt missing" in missing.stdout
    current = made(inputs=locks.inputs(MATRIX, CPU, AMD64, "sha256:" + "a" * 64))
    (locks_dir / "cpu").mkdir(parents=True)
    (locks_dir / "cpu" / "linux-amd64.txt").write_text(current.text())
    # a lock for amd64 alone: arm64, which the backend lists, has none
    half = invoke("lock", "--check", *args)
    assert half.exit_code == 1, half.stdout
    assert f"cpu (linux/amd64): {locks_dir}/cpu/linux-amd64.txt up to date (10 distributions)" in half.stdout
    assert f"cpu (linux/arm64): {locks_dir}/cpu/linux-arm64.txt missing: there is no lock for linux/arm64" in half.stdout
    ok = invoke("lock", "--check", *args, "--platform", AMD64)
    assert ok.exit_code == 0, ok.stdout
    # the base moved to another digest: stale, read from the matrix alone
    moved = invoke("lock", "--check", *args, "--platform", AMD64, "--set",
                   f"backends.cpu.base_image=debian:bookworm-slim@sha256:{'b' * 64}", "--json")
    (result,) = json.loads(moved.stdout)
    assert moved.exit_code == 1 and result["status"] == "stale"
    assert any(w.startswith("base_digest: sha256:aaa") for w in result["why"]), result["why"]
    stale = invoke("lock", "--check", *args, "--platform", AMD64, "--set", "transformers.version=5.22.0", "--json")
    assert stale.exit_code == 1
    (result,) = json.loads(stale.stdout)
    assert result["status"] == "stale" and any("transformers==5.22.0" in w for w in result["why"])
    assert (locks_dir / "cpu" / "linux-amd64.txt").read_text() == current.text()
    # a platform the backend does not list is refused with the list
    other = invoke("lock", "--check", *args, "--platform", "linux/s390x")
    assert other.exit_code == 2 and "backend cpu lists linux/amd64, linux/arm64" in other.stderr


def test_a_gpu_lock_with_a_cpu_only_torch_is_refused(invoke, tmp_path, closed_socket, monkeypatch):
    """The aarch64 trap: PyPI's torch for aarch64 (2.9.1) is a CPU build; a cuda lock that resolved it fails."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    m = load(MATRIX_PATH, [f"backends.cuda.base_image={PINNED}"])
    cuda = m.backend("cuda")
    report = copy.deepcopy(REPORT)
    report["environment"]["platform_machine"] = "aarch64"
    torch = next(i for i in report["install"] if i["metadata"]["name"] == "torch")
    torch["metadata"]["version"] = "2.9.1"
    wrong = lockfile.from_report("cuda", report, locks.inputs(m, cuda, "linux/arm64", "sha256:" + "a" * 64),
                                 ["torch==2.9.1"], [], {"platform": "linux/arm64"})
    why = locks.torch_problem(cuda, wrong)
    assert why and "locked torch==2.9.1 is a CPU-only build" in why and cuda.torch.index_url in why
    assert locks.torch_problem(MATRIX.backend("cpu"), wrong) is None  # a CPU backend wants exactly that
    # a CUDA build (local version label, or the nvidia-* wheels it pulls) passes
    torch["metadata"]["version"] = "2.15.0+cu132"
    assert locks.torch_problem(cuda, lockfile.from_report("cuda", report, {}, ["torch==2.15.0"], [], {})) is None
    file = tmp_path / "locks" / "cuda" / "linux-arm64.txt"
    file.parent.mkdir(parents=True)
    file.write_text(wrong.text())
    checked = invoke("lock", "--check", "--backend", "cuda", "--platform", "linux/arm64", "--matrix", MATRIX_PATH,
                     "--locks", tmp_path / "locks", "--no-ca-bundle", "--set", f"backends.cuda.base_image={PINNED}")
    assert checked.exit_code == 1 and "wrong torch" in checked.stdout and "CPU-only build" in checked.stdout


def test_an_unreachable_registry_builds_from_a_lock_current_in_every_other_input(tmp_path, monkeypatch):
    """Offline: the base's digest cannot be asked, a lock current in everything else is used (said so); without
    one, the error names the registry and how to lock without asking it."""
    monkeypatch.setattr(docker_engine, "find_builder", lambda: LEGACY)
    monkeypatch.setattr("envbuild.core.platform.host_platform", lambda *a: AMD64)
    m = load(MATRIX_PATH, ["backends.cpu.base_image=127.0.0.1:1/envbuild-test/debian:bookworm"])  # nothing listens
    cpu = m.backend("cpu")
    opts = plan.BuildOptions(log_dir=tmp_path / "logs", context_dir=tmp_path / "ctx", locks_dir=tmp_path / "locks")
    p = plan.make_plan(m, cpu, opts, FakeEngine())
    with pytest.raises(LockError, match=r"cannot resolve the base image 127.0.0.1:1/envbuild-test/debian:bookworm for "
                                        r"linux/amd64 .*--mirror 127.0.0.1:1=MIRROR.*local registry.*REF@sha256"):
        locking.ensure(m, cpu, p, opts, FakeEngine(), locked=True, echo=lambda s: None)
    file = tmp_path / "locks" / "cpu" / "linux-amd64.txt"
    file.parent.mkdir(parents=True)
    file.write_text(made(inputs=locks.inputs(m, cpu, AMD64, "sha256:" + "c" * 64)).text())
    said = []
    got = locking.ensure(m, cpu, p, opts, FakeEngine(), locked=True, echo=said.append)
    assert got.inputs["base_digest"] == "sha256:" + "c" * 64
    assert said and "note: " in said[0] and f"building from {file}" in said[0]


# --- each file by its URL and hash (format 3) ---------------------------------------------------------------


def test_each_file_is_locked_with_its_url_and_reads_back():
    report = copy.deepcopy(REPORT)
    torch = report["install"][0]
    torch["download_info"]["url"] = "file:///run/wheelhouse/torch-2.15.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    report["install"][1]["download_info"]["url"] += "#sha256=" + "0" * 64  # a fragment is not part of the URL
    lock = made(report)
    text = lock.text()
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    # a hashed requirements file still (pip reads `    # url:` as a comment), each file's URL below its hash
    assert body[:3] == ["filelock==4.3.1 \\", f"    --hash=sha256:{lock.packages[0].sha256[0]}",
                        "    # url: https://files.example/filelock-4.3.1-py3-none-any.whl"]
    byname = {p.name: p for p in lockfile.parse(text, "locks/cpu.txt").packages}
    assert byname["torch"].url == "wheelhouse:torch-2.15.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert byname["torch"].filename == "torch-2.15.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert byname["numpy"].url == "https://files.example/numpy-2.4.6-py3-none-any.whl"
    assert lockfile.parse(text, "locks/cpu.txt") == lock and all(p.url for p in lock.packages)
    with pytest.raises(LockError, match=r"locks/cpu.txt:6: a url line without the requirement"):
        lockfile.parse(text.replace("# layer: torch\n", "# layer: torch\n    # url: https://x/y.whl\n"), "locks/cpu.txt")


def _layer(lock: lockfile.LockFile, layer: str, wheelhouse=None, mirrors=()) -> dict:
    import tomllib

    return {p["name"]: p for p in tomllib.loads(lock.pylock(layer, wheelhouse or {}, mirrors))["packages"]}


def test_a_layer_installs_from_the_locked_urls_as_a_pylock_toml():
    lock = made()
    layer = _layer(lock, "torch")
    assert sorted(layer) == [p.name for p in lock.layer("torch")]  # the layer alone, in the lock's order
    (wheel,) = layer["torch"]["wheels"]
    torch = next(p for p in lock.packages if p.name == "torch")
    assert wheel == {"name": torch.filename, "url": torch.url, "hashes": {"sha256": torch.sha256[0]}}
    assert layer["torch"]["version"] == "2.15.0+cpu"
    assert lock.pylock("extras", {}) == ""  # an empty layer's step installs nothing


def test_a_wheel_folder_or_a_mirror_serves_a_file_by_name_and_hash():
    report = copy.deepcopy(REPORT)
    report["install"][0]["download_info"]["url"] = "https://download.pytorch.org/whl/cpu/torch-2.15.0%2Bcpu-cp311-none-any.whl"
    lock = made(report)
    torch, numpy = (next(p for p in lock.packages if p.name == n) for n in ("torch", "numpy"))
    mirrors = [("https://download.pytorch.org/whl", "https://mirror.corp/pt"), ("https://files.example", "https://pypi.corp/f")]
    # the same name and sha256 in the wheel folder: taken from there, whatever the mirrors
    assert lockfile.source(torch, {torch.filename: torch.sha256[0]}, mirrors) == f"file:///run/wheelhouse/{torch.filename}"
    # the same name with another hash is not the locked file: the URL (through its mirror) is
    assert lockfile.source(torch, {torch.filename: "f" * 64}, mirrors) == \
        "https://mirror.corp/pt/cpu/torch-2.15.0%2Bcpu-cp311-none-any.whl"
    assert lockfile.source(numpy, {}, mirrors) == "https://pypi.corp/f/numpy-2.4.6-py3-none-any.whl"
    assert lockfile.source(numpy, {}, [("https://elsewhere", "https://x")]) == numpy.url  # no prefix: as locked
    # the rewritten URL is what the layer installs, the hash stays the lock's
    (wheel,) = _layer(lock, "torch", {}, mirrors)["torch"]["wheels"]
    assert wheel["url"].startswith("https://mirror.corp/pt/") and wheel["hashes"]["sha256"] == torch.sha256[0]


def test_a_file_locked_from_a_wheel_folder_needs_that_file():
    report = copy.deepcopy(REPORT)
    report["install"][0]["download_info"]["url"] = "file:///run/wheelhouse/torch-2.15.0+cpu-py3-none-any.whl"
    torch = next(p for p in made(report).packages if p.name == "torch")
    with pytest.raises(LockError, match=r"torch==2.15.0\+cpu is locked from a wheel folder .* no wheel folder holds it: "
                                        r"pass --wheelhouse with that very file"):
        lockfile.source(torch, {})
    with pytest.raises(LockError, match=r"the wheel folder's torch-2.15.0\+cpu-py3-none-any.whl has another sha256"):
        lockfile.source(torch, {torch.filename: "f" * 64})
    assert lockfile.source(torch, {torch.filename: torch.sha256[0]}).startswith("file:///run/wheelhouse/")
    with pytest.raises(LockError, match=r"the lock names no URL for its file .*run `envbuild lock`"):
        lockfile.source(lockfile.Locked("numpy", "2.4.6", ("a" * 64,), "deps"), {})  # a format 2 lock's entry


def test_where_files_come_from_is_no_part_of_the_content_key_or_the_lock(tmp_path, monkeypatch):
    """A wheel folder or an index mirror changes where files come from, never the image's content key (the lock's
    names and hashes decide it); the lock's inputs take no build options at all: a lock made online stays current
    offline."""
    monkeypatch.setattr(docker_engine, "find_builder", lambda: LEGACY)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.15.0+cpu-py3-none-any.whl").write_bytes(b"a wheel")
    lock = made().text().encode()
    keys = set()
    for extra in ({}, {"wheelhouse": wheels}, {"index_mirrors": (("https://files.example", "https://m.corp"),)}):
        opts = plan.BuildOptions(context_dir=tmp_path / "ctx", **extra)
        p = plan.make_plan(MATRIX, CPU, opts, None, lock=lock)
        keys.add(plan.content_key(p, opts, {}))
    assert len(keys) == 1
    # nor how the build reaches the network (a proxy), unlike a build argument that may change what is built
    p = plan.make_plan(MATRIX, CPU, plan.BuildOptions(context_dir=tmp_path / "ctx"), None, lock=lock)
    for args, same in ((("HTTPS_PROXY=http://127.0.0.1:9", "https_proxy=http://127.0.0.1:9", "NO_PROXY"), True),
                       (("PIP_EXTRA=1",), False)):
        assert (plan.content_key(p, plan.BuildOptions(build_args=args), {"NO_PROXY": "x"}) in keys) is same
    changed = plan.make_plan(MATRIX, CPU, plan.BuildOptions(context_dir=tmp_path / "ctx"), None,
                             lock=lock.replace(b"numpy==2.4.6", b"numpy==2.4.7"))
    assert plan.content_key(changed, plan.BuildOptions(), {}) not in keys


def test_the_build_context_holds_each_layer_with_its_sources(tmp_path, monkeypatch):
    monkeypatch.setattr(docker_engine, "find_builder", lambda: LEGACY)
    import tomllib

    report = copy.deepcopy(REPORT)
    report["install"][0]["download_info"] = {"url": "file:///run/wheelhouse/torch-2.15.0+cpu-py3-none-any.whl",
                                             "archive_info": {"hashes": {"sha256": hashlib.sha256(b"w").hexdigest()}}}
    lock = made(report)
    torch = next(p for p in lock.packages if p.name == "torch")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / torch.filename).write_bytes(b"w")
    opts = plan.BuildOptions(context_dir=tmp_path / "ctx", wheelhouse=wheels)
    p = locking.with_lock(plan.make_plan(MATRIX, CPU, opts, None), lock)  # the lock hands the image stage its layers
    plan.write_context(p)
    folder = tmp_path / "ctx" / "cpu" / "lock"
    assert (folder / "lock.txt").read_text() == lock.text()
    torch_layer = tomllib.loads((folder / "pylock.torch.toml").read_text())
    assert {w["url"] for pkg in torch_layer["packages"] for w in pkg["wheels"]} >= {f"file:///run/wheelhouse/{torch.filename}"}
    assert "numpy" in (folder / "pylock.deps.toml").read_text() and (folder / "pylock.extras.toml").read_text() == ""


# --- the lock's torch is the backend's build ---------------------------------------------------------------------


def _cuda_report(version="2.15.0") -> dict:
    """PyPI's default torch for linux x86_64: a CUDA build, with its runtime wheels and triton."""
    report = copy.deepcopy(REPORT)
    torch = report["install"][0]
    torch["metadata"]["version"] = version
    torch["metadata"]["requires_dist"] += ["nvidia-cublas==13.1.0.3; platform_system == 'Linux'",
                                           "cuda-bindings==13.0.3; platform_system == 'Linux'", "triton==3.6.0"]
    report["install"] += [_fake_item("nvidia-cublas", "13.1.0.3"), _fake_item("cuda-bindings", "13.0.3"),
                          _fake_item("triton", "3.6.0")]
    return report


def _fake_item(name, version):
    from support.fakes import _item

    return _item(name, version)


def test_a_cpu_lock_holding_cuda_torch_is_refused_naming_the_ways_out():
    cuda_lock = made(_cuda_report(), inputs={**INPUTS, "platform": AMD64})
    why = locks.torch_problem(CPU, cuda_lock)
    assert why and "cpu (CPU) on linux/amd64: the locked torch==2.15.0 is not the CPU build" in why
    assert "CUDA wheels (cuda-bindings, nvidia-cublas, triton: 3 of them)" in why
    assert "https://download.pytorch.org/whl/cpu" in why and "--wheelhouse" in why
    assert "backends.cpu.torch.index_url=" in why and "backends.cpu.torch.any_build: true" in why
    # where the CPU index is declared, an x86_64 torch without +cpu is PyPI's, even without its CUDA wheels
    plain = made(inputs={**INPUTS, "platform": AMD64}, report=_relabel(REPORT, "2.15.0"))
    assert "no `+cpu` version label" in locks.torch_problem(CPU, plain)
    # aarch64: PyTorch's CPU index serves torch without the label there; that is the CPU build
    assert locks.torch_problem(CPU, made(inputs={**INPUTS, "platform": "linux/arm64"}, report=_relabel(REPORT, "2.15.0"))) is None
    assert locks.torch_problem(CPU, made(inputs={**INPUTS, "platform": AMD64})) is None  # 2.15.0+cpu


def _relabel(report, version):
    report = copy.deepcopy(report)
    report["install"][0]["metadata"]["version"] = version
    return report


def test_any_torch_build_is_taken_only_when_the_matrix_says_so_and_the_lock_records_it(tmp_path):
    m = load(MATRIX_PATH, [f"backends.cpu.base_image={PINNED}", "backends.cpu.torch.any_build=true"])
    cpu = m.backend("cpu")
    assert cpu.torch.any_build and not CPU.torch.any_build
    wanted = locks.inputs(m, cpu, AMD64, None)
    assert wanted["torch_build"] == "any (torch.any_build)"
    assert locks.inputs(MATRIX, CPU, AMD64, None)["torch_build"] == "the backend's"
    accepted = made(_cuda_report(), inputs=wanted)
    assert locks.torch_problem(cpu, accepted) is None
    assert '"torch_build": "any (torch.any_build)"' in accepted.text()  # recorded in the header
    # the choice is an input: taking it back makes the lock stale (and then refused once resolved again)
    assert locks.stale(accepted, locks.inputs(MATRIX, CPU, AMD64, None)) == [
        "torch_build: any (torch.any_build) -> the backend's"]


def test_lock_check_refuses_a_cpu_lock_with_cuda_torch(invoke, tmp_path, closed_socket, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    wrong = made(_cuda_report(), inputs=locks.inputs(MATRIX, CPU, AMD64, "sha256:" + "a" * 64))
    file = tmp_path / "locks" / "cpu" / "linux-amd64.txt"
    file.parent.mkdir(parents=True)
    file.write_text(wrong.text())
    checked = invoke("lock", "--check", "--backend", "cpu", "--platform", AMD64, "--matrix", MATRIX_PATH,
                     "--locks", tmp_path / "locks", "--no-ca-bundle", "--set", f"backends.cpu.base_image={PINNED}")
    assert checked.exit_code == 1 and "wrong torch" in checked.stdout and "is not the CPU build" in checked.stdout


def test_lock_check_writes_nothing_with_a_wheelhouse(invoke, tmp_path, closed_socket, monkeypatch):
    """--wheelhouse hashes the wheels: the digest cache a build keeps is not written by a check."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr("envbuild.core.platform.host_platform", lambda *a: AMD64)
    work = tmp_path / "work"
    (work / "wheels").mkdir(parents=True)
    (work / "wheels" / "x-1.0-py3-none-any.whl").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    monkeypatch.chdir(work)
    before = sorted(p for p in work.rglob("*"))
    result = invoke("lock", "--check", "--backend", "cpu", "--platform", AMD64, "--matrix", MATRIX_PATH,
                    "--locks", work / "locks", "--no-ca-bundle", "--wheelhouse", work / "wheels",
                    "--set", f"backends.cpu.base_image={PINNED}")
    assert result.exit_code == 1 and "missing" in result.stdout, result.output
    assert sorted(p for p in work.rglob("*")) == before  # no .envbuild/context/cpu/.wheel-digests.json


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_lock_check_writes_nothing(tmp_path, monkeypatch):
    from envbuild.image import plan

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "x-1.0-py3-none-any.whl").write_bytes(b"PK")
    digests = tmp_path / "ctx" / "digests.json"
    assert plan.wheels(wheels, digests, write=False) and not digests.exists()
    assert plan.wheels(wheels, digests) and digests.exists()  # a build keeps it


def test_lock_check_through_the_cli_leaves_the_folder_as_it_was(invoke, tmp_path, monkeypatch, closed_socket):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "cpu.txt").write_text("# not a lock\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "x-1.0-py3-none-any.whl").write_bytes(b"PK")
    before = _snapshot(tmp_path)
    result = invoke("lock", "--check", "--matrix", MATRIX_PATH, "--wheelhouse", wheels)
    assert result.exit_code in (0, 1, 2) and _snapshot(tmp_path) == before and not (tmp_path / ".envbuild").exists()


NUMPY_URL = "https://files.example/numpy-2.4.6-py3-none-any.whl"
NUMPY_HASH = "--hash=sha256:" + "6e756d70796e756d70796e756d70796e756d70796e756d70796e756d70796e75"


@pytest.mark.parametrize("change, fragment", [
    (lambda t: t.replace(NUMPY_URL, "file:///etc/passwd"), "numpy: file:///etc/passwd is not an https URL"),
    (lambda t: t.replace(NUMPY_URL, "http://files.example/numpy.whl"), "a plain http:// URL from an index the lock's"),
    (lambda t: t.replace(NUMPY_URL, "https://bob:S3cret@files.example/numpy.whl"), "is not an https URL"),
    (lambda t: t.replace(NUMPY_URL, "wheelhouse:../../etc/passwd"), "wheelhouse:../../etc/passwd: a wheel folder's file"),
    (lambda t: t.replace(NUMPY_URL, "wheelhouse:/etc/passwd"), "a wheel folder's file is named by its plain file name"),
    (lambda t: t.replace(NUMPY_URL, "wheelhouse:sub/numpy.whl"), "a wheel folder's file is named by its plain file name"),
    (lambda t: t.replace(NUMPY_HASH, "--hash=md5:" + "0" * 32), "a hash must read --hash=sha256:<64 lowercase hex digits>"),
    (lambda t: t.replace(NUMPY_HASH, "--hash=sha256:" + "A" * 64), "a hash must read --hash=sha256"),
    (lambda t: t.replace("# layer: top\n", "# layer: top\nnumpy==2.4.6 \\\n    --hash=sha256:" + "1" * 64 + "\n"),
     "numpy is locked twice (first on line"),
    (lambda t: t.replace("# layer: extras\n", "# layer: extras\n# layer: deps\n"), "layer deps after layer extras"),
    (lambda t: t.replace("# layer: torch\n", ""), "comes before any `# layer:` line"),
    (lambda t: t.replace("# inputs: {", "# inputs: " + "[" * 100_000 + "{"), "the inputs line is longer than"),
    (lambda t: t.replace("# inputs: {", "# inputs: {\"x\": " + "[" * 20_000 + "]" * 20_000 + ", "), "nested too deeply"),
    (lambda t: t.replace('"linux/amd64"', '["linux/amd64"]'), "the resolved line has a platform that is not a string"),
    (lambda t: t.replace('"cpu", "format"', '"cpu\\u001b[2J", "format"'), "the inputs line holds a control character"),
])
def test_the_body_of_a_lock_is_checked_line_by_line(change, fragment):
    """A pull request may bring any lock: a file URL outside https (or the matrix's own index), a wheel folder name
    with a folder part, a distribution twice, a hash not sha256, layers out of order: each names its line."""
    text = change(made().text())
    with pytest.raises(lockfile.BrokenLock) as caught:
        lockfile.parse(text, "locks/cpu/linux-amd64.txt")
    message = str(caught.value)
    assert fragment in message, message
    assert message.startswith("locks/cpu/linux-amd64.txt:") and caught.value.exit_code == 2
    line = int(message.split(":")[1])
    if "inputs" not in fragment and "resolved" not in fragment and "twice" not in fragment:
        wrong = text.splitlines()[line - 1]  # the line named is the one changed
        assert wrong not in made().text().splitlines() or "layer" in fragment, wrong


def test_a_plain_http_url_is_taken_from_an_index_the_lock_names():
    """A local index over http (a test index on loopback, a site's own) is the matrix's choice, in the inputs."""
    inputs = {**INPUTS, "indexes": ["http://127.0.0.1:8080/simple"]}
    text = made(inputs=inputs).text().replace(NUMPY_URL, "http://127.0.0.1:8080/files/numpy-2.4.6-py3-none-any.whl")
    assert lockfile.parse(text, "locks/cpu.txt").pins()["numpy"] == "2.4.6"
    with pytest.raises(lockfile.BrokenLock, match="a plain http:// URL"):
        lockfile.parse(text.replace("127.0.0.1:8080/files", "127.0.0.1:8081/files"), "locks/cpu.txt")


def _check_args(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr("envbuild.core.platform.host_platform", lambda *a: AMD64)
    locks_dir = tmp_path / "locks"
    (locks_dir / "cpu").mkdir(parents=True, exist_ok=True)
    args = ["--matrix", MATRIX_PATH, "--locks", locks_dir, "--no-ca-bundle", "--set", f"backends.cpu.base_image={PINNED}",
            "--platform", AMD64]
    current = made(inputs=locks.inputs(MATRIX, CPU, AMD64, "sha256:" + "a" * 64))
    return locks_dir / "cpu" / "linux-amd64.txt", args, current.text()


def test_lock_check_reads_the_body(invoke, tmp_path, closed_socket, monkeypatch):
    """The check CI runs on a pull request: an otherwise current lock whose body fetches a file from file:// is
    refused, exit 2, naming the file and line."""
    file, args, text = _check_args(tmp_path, monkeypatch)
    file.write_text(text)
    assert invoke("lock", "--check", *args).exit_code == 0
    file.write_text(text.replace(NUMPY_URL, "file:///etc/passwd"))
    bad = invoke("lock", "--check", *args)
    line = next(n for n, ln in enumerate(file.read_text().splitlines(), 1) if "file:///" in ln)
    assert bad.exit_code == 2 and f"{file}:{line}: numpy: file:///etc/passwd is not an https URL" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("kind", ["link out", "loop", "fifo", "link to nothing"])
def test_a_lock_that_is_no_regular_file_of_the_locks_folder_is_refused_unquoted(invoke, tmp_path, closed_socket,
                                                                               monkeypatch, kind):
    """A lock that links to a private file: refused by name, exit 2, nothing of that file quoted (CI's log is
    public); a loop, a FIFO (never waited on) and a dangling link alike."""
    import os

    file, args, _ = _check_args(tmp_path, monkeypatch)
    private = tmp_path / "private.txt"
    private.write_text("SECRET-LINE-OF-A-PRIVATE-FILE\n")
    if kind == "link out":
        file.symlink_to(private)
    elif kind == "loop":
        file.symlink_to(file.name)
    elif kind == "fifo":
        os.mkfifo(file)
    else:
        file.symlink_to(tmp_path / "gone.txt")
    bad = invoke("lock", "--check", *args)
    said = bad.stdout + bad.stderr
    assert bad.exit_code == 2 and str(file) in said and "give a regular file" in said, said
    assert "SECRET" not in said and "Traceback" not in said


def test_a_link_inside_the_locks_folder_is_followed(tmp_path):
    """A lock may link to another in the same locks folder (one platform's lock shared): that is no way out."""
    (tmp_path / "locks" / "cpu").mkdir(parents=True)
    (tmp_path / "locks" / "shared.txt").write_text(made().text())
    (tmp_path / "locks" / "cpu" / "linux-amd64.txt").symlink_to(tmp_path / "locks" / "shared.txt")
    assert locks.read(tmp_path / "locks" / "cpu" / "linux-amd64.txt") == made()


@FILES
@given(file_bytes(made().text().encode()))
def test_any_bytes_as_a_lock_are_read_or_refused(data):
    lock = own_error(lambda: lockfile.parse(data.decode("utf-8", "replace"), "locks/cpu/linux-amd64.txt"))
    if lock is not None:  # what is read back is what the checks promise
        assert len({p.name for p in lock.packages}) == len(lock.packages)
        assert all(p.url.startswith(("https://", "http://", lockfile.WHEELHOUSE)) or not p.url for p in lock.packages)
        assert all("/" not in p.filename and ".." not in p.filename for p in lock.packages if p.url.startswith("wheel"))


@FILES
@given(st.data())
def test_any_lock_file_gives_lock_check_exit_0_1_or_2_and_no_secret(invoke, tmp_path_factory, monkeypatch, data):
    tmp = tmp_path_factory.mktemp("check")
    file, args, text = _check_args(tmp, monkeypatch)
    plant(file, data.draw(st.sampled_from(KINDS)), data.draw(file_bytes(text.encode())), tmp / "private.txt")
    exits_cleanly(invoke("lock", "--check", *args))
# --- the format's edges: two hashes, cycles, markers with extras, a header missing a line ------------------------

def _report(*items) -> dict:
    from support.fakes import _item

    return {"environment": dict(REPORT["environment"]), "install": [_item(*i) for i in items]}


def test_a_package_with_two_hashes_round_trips():
    two = lockfile.Locked("numpy", "2.4.6", ("a" * 64, "b" * 64), "deps", "https://x/numpy-2.4.6.tar.gz")
    one = lockfile.Locked("psutil", "7.2.2", ("c" * 64,), "deps")  # no url (a format 2 entry)
    lock = lockfile.LockFile("cpu", {"k": 1}, {"python": "3.11"}, (two, one))
    assert two.lines() == ["numpy==2.4.6 \\", f"    --hash=sha256:{'a' * 64} \\", f"    --hash=sha256:{'b' * 64}",
                           "    # url: https://x/numpy-2.4.6.tar.gz"]
    assert one.lines() == ["psutil==7.2.2 \\", f"    --hash=sha256:{'c' * 64}"]
    back = lockfile.parse(lock.text(), "l.txt")
    assert back == lock and back.packages[0].sha256 == ("a" * 64, "b" * 64) and back.text() == lock.text()
    assert lock.requirements("deps") == "\n".join(two.lines()) + "\n" + "\n".join(one.lines()) + "\n"
    # the wheel folder's file serves when it has either hash; the pylock pins the first, as an sdist
    assert lockfile.source(two, {"numpy-2.4.6.tar.gz": "b" * 64}) == "file:///run/wheelhouse/numpy-2.4.6.tar.gz"
    pylock = lockfile.LockFile("cpu", {}, {}, (two,)).pylock("deps", {})
    assert ('sdist = { name = "numpy-2.4.6.tar.gz", url = "https://x/numpy-2.4.6.tar.gz", '
            f'hashes = {{ sha256 = "{"a" * 64}" }} }}') in pylock.splitlines()
    assert pylock.startswith('lock-version = "1.0"\ncreated-by = "envbuild"\n\n[[packages]]\nname = "numpy"\n')
    assert lock.pylock("torch", {}) == ""  # an empty layer installs nothing


def test_a_lock_without_its_inputs_or_backend_line_is_not_a_lock():
    text = made().text()
    no_inputs = "".join(ln for ln in text.splitlines(True) if not ln.startswith("# inputs:"))
    with pytest.raises(LockError, match="^l.txt: not an envbuild lock .no header naming its backend and inputs"):
        lockfile.parse(no_inputs, "l.txt")
    no_backend = "".join(ln for ln in text.splitlines(True) if not ln.startswith("# envbuild lock of backend"))
    with pytest.raises(LockError, match="not an envbuild lock"):
        lockfile.parse(no_backend, "l.txt")
    no_resolved = "".join(ln for ln in text.splitlines(True) if not ln.startswith("# resolved:"))
    back = lockfile.parse(no_resolved, "l.txt")  # the resolved line is informational
    assert back.resolved == {} and back.inputs == INPUTS and back.backend == "cpu" and back.packages == made().packages
    with pytest.raises(LockError, match="^l.txt:3: the inputs line is not a JSON object"):
        lockfile.parse("".join('# inputs: ["x"]\n' if ln.startswith("# inputs:") else ln
                               for ln in text.splitlines(True)), "l.txt")
    with pytest.raises(LockError, match="^l.txt:4: the resolved line is not JSON"):
        lockfile.parse(text.replace("# resolved: {", "# resolved: {{", 1), "l.txt")


def test_the_body_parts_and_their_errors():
    head = '# envbuild lock of backend cpu: x\n# inputs: {}\n# layer: deps\n'
    h = "a" * 64
    # a continuation split over lines; the url after the last hash
    lock = lockfile.parse(head + f"Foo_Bar==1.0 \\\n  --hash=sha256:{h}\n  # url: https://x/foo_bar-1.0-py3-none-any.whl\n", "l")
    assert lock.packages == (lockfile.Locked("foo-bar", "1.0", (h,), "deps", "https://x/foo_bar-1.0-py3-none-any.whl"),)
    assert lock.packages[0].filename == "foo_bar-1.0-py3-none-any.whl"
    with pytest.raises(LockError, match=r"^l:7: a url line without the requirement"):
        lockfile.parse(head + f"foo==1 \\\n  --hash=sha256:{h}\n  # url: https://x/a.whl\n  # url: https://x/b.whl\n", "l")
    with pytest.raises(LockError, match=r"^l:4: a url line without the requirement"):
        lockfile.parse(head + "# url: https://x/a.whl\n", "l")
    with pytest.raises(LockError, match=r"^l:4: foo==1 has no --hash"):
        lockfile.parse(head + "foo==1\n", "l")
    with pytest.raises(LockError, match=r"^l:4: foo==1 has no --hash"):
        lockfile.parse(head + f"foo==1\n  --hash=sha256:{h}\n", "l")  # no continuation: the hash is not its
    with pytest.raises(LockError, match=r"^l:5: 'x' is not NAME==VERSION"):
        lockfile.parse(head + "   \nx\n", "l")
    with pytest.raises(LockError, match=r"^l:5: a hash must read --hash=sha256"):  # a short hash is no hash
        lockfile.parse(head + f"foo==1 \\\n  --hash=sha256:{h[:-1]}\n", "l")
    assert lockfile.parse(head + "# layer: top\n# a comment\n", "l").packages == ()
    tight = lockfile.parse(head.replace("# layer: deps", "#layer: top") + f"foo==1 \\\n  --hash=sha256:{h}\n", "l")
    assert tight.packages[0].layer == "top"  # a comment is read after its '#', with or without a space


def test_filenames_and_recorded_urls():
    assert lockfile.Locked("a", "1", ("a",), "deps", "https://x/p/a%2Bb-1.whl?x=1").filename == "a+b-1.whl"
    assert lockfile.Locked("a", "1", ("a",), "deps", "wheelhouse:a-1.whl").filename == "a-1.whl"
    assert lockfile._recorded("https://x/a-1.whl#sha256=abc") == "https://x/a-1.whl"
    assert lockfile._recorded("file:///run/wheelhouse/torch-2.9%2Bcpu.whl") == "wheelhouse:torch-2.9+cpu.whl"
    assert lockfile._recorded("file:///elsewhere/a.whl") == "file:///elsewhere/a.whl"


def test_a_dependency_cycle_closes():
    report = _report(("torch", "2.15.0", ["a"]), ("a", "1", ["b"]), ("b", "1", ["a", "torch"]), ("c", "1", ["a"]))
    lock = lockfile.from_report("cpu", report, {}, ["torch==2.15.0"], [], {})
    assert [p.name for p in lock.layer("torch")] == ["a", "b", "torch"] and [p.name for p in lock.layer("deps")] == ["c"]


def test_markers_with_extras_follow_the_extras_asked_for():
    report = _report(
        ("torch", "2.15.0", ["kit[gpu]>=1", 'plain; python_version >= "3"', 'never; sys_platform == "win32"',
                             "broken ;;; x", 'badmarker; python_version >>> "3"']),
        ("kit", "1", ['gpulib; extra == "gpu"', 'cpulib; extra == "cpu"', 'both; extra == "gpu" or extra == "cpu"']),
        ("gpulib", "1"), ("cpulib", "1"), ("both", "1"), ("plain", "1"), ("never", "1"),
        ("transformers", "5", ["kit[cpu]"]),
    )
    lock = lockfile.from_report("cpu", report, {}, ["torch==2.15.0"], [], {})
    assert [p.name for p in lock.layer("torch")] == ["both", "gpulib", "kit", "plain", "torch"]
    assert [p.name for p in lock.layer("deps")] == ["cpulib", "never"] and [p.name for p in lock.layer("top")] == ["transformers"]
    # the same name reached again with another extra follows that extra too
    both = lockfile.from_report("cpu", report, {}, ["torch==2.15.0", "kit[cpu]"], [], {})
    assert "cpulib" in [p.name for p in both.layer("torch")]
    # a root already in the base (not in the report) pulls nothing in
    assert lockfile.from_report("cpu", report, {}, ["numpy"], [], {}).layer("torch") == ()


def test_a_report_that_is_not_pips_is_refused():
    with pytest.raises(LockError, match="lists nothing to install"):
        lockfile.from_report("cpu", {"install": {}}, {}, [], [], {})
    with pytest.raises(LockError, match="an entry without a name or version"):
        lockfile.from_report("cpu", {"install": [{"metadata": {"name": "x"}}]}, {}, [], [], {})
    with pytest.raises(LockError, match="an entry without a name or version"):
        lockfile.from_report("cpu", {"install": [{"metadata": {"version": "1"}}]}, {}, [], [], {})
    with pytest.raises(LockError, match=r"^x 1 comes from \? which has no sha256|^x 1 comes from \?, which"):
        lockfile.from_report("cpu", {"install": [{"metadata": {"name": "x", "version": "1"}}]}, {}, [], [], {})
    legacy = {"install": [{"metadata": {"name": "X", "version": "1"},
                           "download_info": {"url": "https://x/x.whl#frag", "archive_info": {"hash": "sha256=" + "f" * 64}}}]}
    lock = lockfile.from_report("cpu", legacy, {"i": 1}, [], ["x"], {"r": 2})
    assert lock.packages == (lockfile.Locked("x", "1", ("f" * 64,), "extras", "https://x/x.whl"),)
    assert (lock.backend, lock.inputs, lock.resolved) == ("cpu", {"i": 1}, {"r": 2})


def test_the_format_is_3_and_every_lock_records_it():
    # 3: each file's URL beside its hash; a change stales every committed lock, so it is a decision, not an edit
    assert lockfile.FORMAT == 3 and locks.inputs(MATRIX, CPU, AMD64, None)["format"] == 3


def test_a_wheel_folder_name_with_dots_or_a_header_name_not_a_string_is_refused():
    text = made().text()
    url = next(ln for ln in text.splitlines() if "# url: " in ln).split("# url: ")[1]
    with pytest.raises(lockfile.BrokenLock, match="wheelhouse:numpy..whl"):
        lockfile.parse(text.replace(url, "wheelhouse:numpy..whl", 1), "l")  # '..' in a plain name too
    for key in ("platform", "backend", "python"):
        header = next(ln for ln in text.splitlines() if ln.startswith("# resolved: "))
        doc = json.loads(header[len("# resolved: "):]) | {key: 3}
        with pytest.raises(lockfile.BrokenLock, match=f"the resolved line has a {key} that is not a string"):
            lockfile.parse(text.replace(header, "# resolved: " + json.dumps(doc)), "l")
