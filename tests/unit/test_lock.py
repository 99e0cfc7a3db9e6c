"""The lock without an engine: its format (byte for byte), its layers, staleness from the header alone, bad
lock files, extras in the matrix, and --locked. tests/engine/test_lock.py resolves against a real index."""

from __future__ import annotations

import copy
import json

import pytest
from support.constants import FIXED, MATRIX as MATRIX_PATH
from support.fakes import REPORT, FakeEngine

from envbuild import build, lock as locks
from envbuild.build import builder, plan
from envbuild.errors import LockError, MatrixError, StaleLock
from envbuild.lock import lockfile
from envbuild.matrix import load, loads

MATRIX = load(MATRIX_PATH)
CPU = MATRIX.backend("cpu")
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
    # a base image id that one side does not know is not compared; one that both know is
    with_id = made(inputs={**INPUTS, "base_id": "sha256:" + "1" * 64})
    assert locks.stale(with_id, {**INPUTS, "base_id": None}) == []
    assert locks.stale(with_id, {**INPUTS, "base_id": "sha256:" + "2" * 64})[0].startswith("base_id: ")


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
    message = locks._conflict(m.backend("cpu"), m, locks.requirements(m, m.backend("cpu")), said)
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
    calls = []
    monkeypatch.setattr(plan, "find_builder", lambda: LEGACY)
    monkeypatch.setattr(builder, "find_builder", lambda: LEGACY)
    monkeypatch.setattr(builder.engine, "start_client", lambda *a, **kw: calls.append(a) or (_ for _ in ()).throw(AssertionError))
    engine = FakeEngine()
    opts = plan.BuildOptions(log_dir=tmp_path / "logs", context_dir=tmp_path / "ctx", locks_dir=tmp_path / "locks")
    with pytest.raises(StaleLock, match=rf"{tmp_path}/locks/cpu.txt is missing: run `envbuild lock --backend cpu`"):
        build.build(MATRIX, CPU, opts, engine, locked=True, echo=lambda s: None)
    p = plan.make_plan(MATRIX, CPU, opts, engine)
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "cpu.txt").write_text(made(inputs={**locks.inputs(MATRIX, CPU, p), "uv": "0.0.1"}).text())
    with pytest.raises(StaleLock, match=r"cpu.txt is stale \(uv: 0.0.1 -> "):
        build.build(MATRIX, CPU, opts, engine, locked=True, echo=lambda s: None)
    assert calls == []
    assert (tmp_path / "locks" / "cpu.txt").read_text().count('"uv": "0.0.1"') == 1  # --locked writes nothing


def test_lock_check_through_the_cli(invoke, tmp_path, closed_socket, monkeypatch):
    monkeypatch.setattr(plan, "find_builder", lambda: LEGACY)
    locks_dir = tmp_path / "locks"
    args = ["--matrix", MATRIX_PATH, "--locks", locks_dir, "--no-ca-bundle"]
    assert invoke("lock", "--check", *args).stdout.strip() == f"no locks to check in {locks_dir}/"
    missing = invoke("lock", "--check", "--backend", "cpu", *args)
    assert missing.exit_code == 1 and f"cpu: {locks_dir}/cpu.txt missing" in missing.stdout
    opts = plan.BuildOptions(locks_dir=locks_dir, context_dir=tmp_path / "ctx")
    current = made(inputs=locks.inputs(MATRIX, CPU, plan.make_plan(MATRIX, CPU, opts, None)))
    locks_dir.mkdir()
    (locks_dir / "cpu.txt").write_text(current.text())
    ok = invoke("lock", "--check", *args)  # no engine here: the base id is unknown, the rest is compared
    assert ok.exit_code == 0 and ok.stdout.strip() == f"cpu: {locks_dir}/cpu.txt up to date (10 distributions)"
    stale = invoke("lock", "--check", *args, "--set", "transformers.version=5.22.0", "--json")
    assert stale.exit_code == 1
    (result,) = json.loads(stale.stdout)
    assert result["status"] == "stale" and "transformers==5.22.0" in result["why"][0]
    assert (locks_dir / "cpu.txt").read_text() == current.text()
