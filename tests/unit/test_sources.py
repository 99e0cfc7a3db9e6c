"""Pure logic of outdated and bump: tag shapes, requirement metadata, in-place matrix edits, transformers'
torch requirement in validate, and which pins bump writes."""

from __future__ import annotations

import pytest
from support.constants import MATRIX
from support.hostile import failing_replace, snapshot

from envbuild.core.errors import InvalidInput, MatrixError
from envbuild.matrix import load, loads
from envbuild.matrix.edit import apply
from envbuild.maintain.sources import Finding
from envbuild.maintain.sources.bump import bump, changes, check_only, select
from envbuild.maintain.sources.index import _from_html, requirement_of
from envbuild.core.imageref import Reference
from envbuild.maintain.sources.tags import follow, newer_tags
import os
import subprocess
import sys
from pathlib import Path
from envbuild.core.errors import EnvbuildError
from envbuild.maintain.sources import Sources


@pytest.mark.parametrize("current, tags, repo, expected", [
    ("13.2.1-base-ubuntu24.04", ["13.2.2-base-ubuntu24.04", "13.3.0-base-ubuntu26.04", "13.2.2-runtime-ubuntu24.04",
                                 "13.10.0-base-ubuntu24.04", "12.9.9-base-ubuntu24.04"], "nvidia/cuda",
     ["13.10.0-base-ubuntu24.04", "13.2.2-base-ubuntu24.04"]),
    ("rocm10.1.0_ubuntu24.04_py3.12_pytorch_release_2.14.0",
     ["rocm10.2.0_ubuntu24.04_py3.12_pytorch_release_2.15.0", "rocm10.2.0_ubuntu24.04_py3.13_pytorch_release_2.15.0",
      "rocm10.2.0_ubuntu22.04_py3.12_pytorch_release_2.15.0"], "rocm/pytorch",
     ["rocm10.2.0_ubuntu24.04_py3.12_pytorch_release_2.15.0"]),
    ("3.12-slim-bookworm", ["3.13-slim-bookworm", "3.12.8-slim-bookworm"], "library/python", []),
    ("bookworm-slim", ["trixie-slim"], "library/debian", []),
])
def test_newer_tags_compare_only_tags_of_the_same_shape(current, tags, repo, expected):
    assert newer_tags(current, tags, repo) == expected


def test_a_vendor_base_carries_its_torch_and_plugin_in_the_tag():
    assert follow("v1.23.1-torch2.1.0-ubuntu22.04-py310", "v1.33.1-torch2.11.0-ubuntu22.04-py310", "2.1.0") == "2.11.0"
    assert follow("v1.23.1-torch2.1.0-ubuntu22.04-py310", "v1.33.1-torch2.11.0-ubuntu22.04-py310", "1.23.1") == "1.33.1"
    assert follow("1.24.1-latest", "1.25.0-latest", "2.11.0") is None  # the tag does not say


def test_image_refs_keep_dockers_short_form():
    ref = Reference.parse("debian:bookworm-slim")
    assert (ref.registry, ref.path, ref.tag, ref.digest) == ("docker.io", "library/debian", "bookworm-slim", None)
    assert str(ref.with_tag("trixie-slim")) == "debian:trixie-slim"
    d = "sha256:" + "a" * 64
    ref = Reference.parse(f"127.0.0.1:5000/v/cuda:13@{d}")
    assert (ref.registry, ref.path, ref.tag, ref.digest) == ("127.0.0.1:5000", "v/cuda", "13", d)
    assert str(ref.with_tag("14").with_digest(d)) == f"127.0.0.1:5000/v/cuda:14@{d}"


def test_requirements_read_through_the_extra_and_unconditionally():
    lines = ['torch>=2.6; extra == "torch"', 'torchvision; extra == "vision"', "numpy>=1.17", 'torch>=2.2; extra == "dev"']
    assert requirement_of(lines, "torch", "torch") == ">=2.6"
    assert requirement_of(lines, "torch") is None  # only through an extra
    assert requirement_of(["torch>=2.0.0", 'torch>=2.8; extra == "x"'], "torch", "x") == ">=2.0.0"


def test_simple_html_pages_give_versions_metadata_and_yanks():
    page = ('<a href="../../files/uv-0.13.9-py3-none-any.whl#sha256=' + "b" * 64 + '" data-core-metadata="sha256=x">uv</a>'
            '<a href="../../files/uv-0.14.0-py3-none-any.whl" data-yanked="">uv</a><a href="other.txt">x</a>')
    files = _from_html(page, "http://h/simple/uv/")
    assert [(str(f.version), f.metadata, f.yanked, f.sha256 is not None) for f in files] == [
        ("0.13.9", True, False, True), ("0.14.0", False, True, False)]
    assert files[0].url == "http://h/files/uv-0.13.9-py3-none-any.whl#sha256=" + "b" * 64


TEXT = """\
# head comment
transformers:
  version: "5.23.0"  # why this pin
uv:
  version: '0.13.8'
backends:
  cpu:
    base_image: debian:bookworm-slim   # the base
"""


def test_edit_replaces_only_the_scalar_and_adds_a_missing_sibling_at_its_indentation():
    out = apply(TEXT, {"transformers.version": "5.24.0", "uv.version": "0.13.9", "transformers.torch": ">=2.6",
                       "backends.cpu.base_image": "debian:trixie-slim"})
    assert out == TEXT.replace('"5.23.0"', '"5.24.0"').replace("'0.13.8'", "'0.13.9'").replace(
        "  version: \"5.24.0\"  # why this pin\n", "  version: \"5.24.0\"  # why this pin\n  torch: \">=2.6\"\n").replace(
        "debian:bookworm-slim   #", "debian:trixie-slim   #")


def test_edit_of_a_field_not_in_the_matrix_is_a_located_error():
    with pytest.raises(MatrixError, match="backends.gpu: not in the matrix"):
        apply(TEXT, {"backends.gpu.torch.version": "1"})


def test_edit_adds_after_a_nested_block_and_adds_the_mappings_a_field_lacks():
    text = "backends:\n  a:\n    torch:\n      index_url: x  # cu126\n\n    # why\n  b:\n    base_image: y"
    out = apply(text, {"backends.a.torch.version": "2.14.0", "backends.a.base_image": "z",
                       "backends.b.torch.version": "2.13.0"})
    assert out == ("backends:\n  a:\n    torch:\n      index_url: x  # cu126\n      version: \"2.14.0\"\n"
                   "    base_image: \"z\"\n\n    # why\n  b:\n    base_image: y\n"
                   "    torch:\n      version: \"2.13.0\"\n")


# The shipped matrix with two variants of cuda: one sets its own torch index, the other only its base.
VARIANTS = MATRIX.read_text().replace("\n  # AMD ships torch", """
  cuda-13-0:
    variant_of: cuda
    base_image: nvidia/cuda:13.2.0-base-ubuntu24.04

  # AMD ships torch""", 1)  # beside the matrix's own (cuda-cu130, cuda-cu126): one that sets no torch of its own


def test_bump_keeps_what_a_variant_inherits_inherited_and_refreshes_every_image_it_changes(tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_text(VARIANTS)
    cuda = loads(VARIANTS, "m").backend("cuda").torch.version
    # The same release found for cuda and both variants: written once, where the variants take it from.
    new = {f"backends.{b}.torch.version": "2.16.0" for b in ("cuda", "cuda-cu130", "cuda-cu126", "cuda-13-0")}
    r = bump(path, new, tmp_path / "dockerfiles", dry_run=True)
    assert r.changes == {"backends.cuda.torch.version": "2.16.0"}
    assert [line for line in r.diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        f'-      version: "{cuda}"', '+      version: "2.16.0"']
    assert {b.name: b.torch.version for b in r.matrix.backends if b.family == "cuda"} == dict.fromkeys(
        ["cuda", "cuda-cu130", "cuda-cu126", "cuda-13-0"], "2.16.0")
    assert r.backends == ["cuda", "cuda-cu130", "cuda-cu126", "cuda-13-0"]  # every image the inherited pin is in (their locks)
    # A release only the variant's own index has: the variant then holds its own pin, cuda keeps its.
    r = bump(path, {"backends.cuda-cu126.torch.version": "2.14.0", "backends.cuda-13-0.torch.version": "2.14.1"},
             tmp_path / "dockerfiles", dry_run=True)
    versions = {b.name: b.torch.version for b in r.matrix.backends if b.family == "cuda"}
    assert versions == {"cuda": cuda, "cuda-cu130": cuda, "cuda-cu126": "2.14.0", "cuda-13-0": "2.14.1"}
    assert r.matrix.backend("cuda-13-0").torch.index_url == r.matrix.backend("cuda").torch.index_url
    assert r.backends == ["cuda-cu126", "cuda-13-0"]
    # A field the variant sets itself is its own; its base's change does not reach it.
    r = bump(path, {"backends.cuda.base_image": "nvidia/cuda:13.2.2-base-ubuntu24.04"}, tmp_path / "dockerfiles",
             dry_run=True)
    assert r.backends == ["cuda"]
    assert path.read_text() == VARIANTS  # dry runs


def test_validate_holds_every_backend_to_the_torch_transformers_requires(tmp_path):
    text = MATRIX.read_text()
    path = tmp_path / "matrix.yaml"
    path.write_text(text.replace('  torch: ">=2.6"', '  torch: ">=2.15"', 1))
    with pytest.raises(MatrixError) as err:
        load(path)
    messages = [str(p) for p in err.value.problems]
    rocm_line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("  rocm:"))
    rocm = next(m for m in messages if "backends.rocm.torch.version" in m)
    version_line = int(rocm.split(":")[1])
    assert rocm.startswith(f"{path}:") and version_line > rocm_line
    assert "torch 2.14.0 is below what transformers" in rocm and "requires (torch>=2.15)" in rocm
    assert f"transformers.torch at {path}:" in rocm
    assert not any("backends.cpu." in m for m in messages)  # 2.15.0 carries it


def test_the_shipped_matrix_records_what_its_transformers_needs():
    m = load(MATRIX)
    assert m.transformers_torch and m.accelerate_torch
    from envbuild.matrix.rules import torch_required

    for b in m.backends:
        assert torch_required("transformers", m.transformers, m.transformers_torch, b.torch.version) is None, b.name


def test_a_torch_requirement_must_be_a_specifier():
    text = MATRIX.read_text().replace('  torch: ">=2.6"', '  torch: "2.6 or newer"', 1)
    with pytest.raises(MatrixError, match="transformers.torch: '2.6 or newer' is not a valid version specifier"):
        loads(text, "m.yaml")


def _f(field: str, current: str, fits: str | None, also: dict | None = None, bumpable: bool = True) -> Finding:
    return Finding(field, None, "src", current, fits, fits, also=also or {}, bumpable=bumpable)


def test_bump_writes_what_fits_and_what_moves_with_it_only_for_the_pins_chosen():
    found = [_f("transformers.version", "5.23.0", "5.24.0", {"transformers.torch": ">=2.7"}),
             _f("uv.version", "0.13.8", "0.13.8"),
             _f("backends.rocm.base_image", "r:1", "r:2", {"backends.rocm.torch.version": "2.15.0"}),
             _f("packages[0]", "datasets>=4", "4.1", bumpable=False)]
    assert changes(found) == {"transformers.version": "5.24.0", "transformers.torch": ">=2.7",
                              "backends.rocm.base_image": "r:2", "backends.rocm.torch.version": "2.15.0"}
    assert [f.field for f in select(found, ("base_image",))] == ["backends.rocm.base_image"]
    assert changes(found, ("uv",), "0.14.0") == {"uv.version": "0.14.0"}
    with pytest.raises(InvalidInput, match="--to 1 needs exactly one pin; --only chose 2"):
        changes(found, ("transformers", "uv"), "1")
    with pytest.raises(InvalidInput, match="--only 'tranformers'"):
        check_only(("tranformers",))


def test_bump_takes_no_set_and_names_an_unknown_only(invoke, tmp_path):
    result = invoke("bump", "--matrix", MATRIX, "--set", "uv.version=1")
    assert result.exit_code == 2 and "takes no --set" in result.output
    result = invoke("bump", "--matrix", MATRIX, "--only", "nope")
    assert result.exit_code == 2 and "--only 'nope': expected one of" in result.output


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)



@pytest.mark.parametrize("k", range(1, 12))
def test_bump_is_all_or_nothing_whichever_replacement_fails(k, monkeypatch, tmp_path):
    from envbuild.maintain.sources.bump import bump

    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.read_text())
    from envbuild import render
    from envbuild.matrix import load

    m = load(path)
    render.write(render.render(m, m.containerizable()), tmp_path / "dockerfiles")
    before = snapshot(tmp_path)
    failing_replace(monkeypatch, k)
    with pytest.raises(EnvbuildError, match="nothing was written"):
        bump(path, {"accelerate.version": "1.14.0"}, tmp_path / "dockerfiles")
    monkeypatch.undo()
    assert snapshot(tmp_path) == before


BUMP_ONE = """
import sys
from pathlib import Path
from envbuild.core.errors import EnvbuildError
from envbuild.maintain.sources.bump import bump
try:
    bump(Path(sys.argv[1]), {f"backends.{sys.argv[2]}.description": f"Edited {sys.argv[2]}"}, Path(sys.argv[3]))
except EnvbuildError as exc:
    print(exc, file=sys.stderr)
    sys.exit(3 if str(exc).startswith("busy") else 1)
"""


def test_concurrent_bumps_keep_every_change(tmp_path):
    from envbuild.matrix import load

    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.read_text())
    names = [b.name for b in load(path).backends]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, "-c", BUMP_ONE, str(path), n, str(tmp_path / "dockerfiles")], env=env,
                              stderr=subprocess.PIPE, text=True) for n in names]
    codes = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert all(code in (0, 3) for code, _ in codes), codes
    m = load(path)
    for name, (code, _) in zip(names, codes):
        if code == 0:  # kept; a refusal says busy and wrote nothing
            assert m.backend(name).description == f"Edited {name}", name
    assert sum(code == 0 for code, _ in codes) >= 1


def test_shared_caches_use_names_of_their_own(tmp_path):
    import threading

    from envbuild.maintain.sources.index import _store

    target = tmp_path / "cache" / "x.METADATA"
    errors = []

    def run(i):
        try:
            for _ in range(20):
                _store(target, f"Metadata-Version: 2.1\nName: n{i}\n")
        except Exception as exc:  # pragma: no cover - the failure being tested
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and target.read_text().startswith("Metadata-Version") and len(list(target.parent.iterdir())) == 1


def test_a_held_edit_lock_makes_a_bump_refuse_busy(tmp_path, monkeypatch):
    from envbuild.maintain.sources import bump as bumping

    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.read_text())
    monkeypatch.setattr(bumping, "EDIT_WAIT", 0.2)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)", str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(EnvbuildError, match="^busy: "):
            bumping.bump(path, {"uv.version": "0.13.9"}, tmp_path / "dockerfiles")
    finally:
        holder.kill()
        holder.wait()
    assert path.read_text() == MATRIX.read_text()


TO_PAYLOADS = ["5.24.0\n  env: {LD_PRELOAD: /tmp/x.so}", '5.24.0"', "5.24.0'", "5.24.0 # c", "x: y", "../../etc/passwd",
               "5.24.0\r", "5.24.0\x85", "5.24.0\u2028", "{a: 1}", "[1]", "&a 5", "*a", "!!python/object:os.system",
               "9" * 5000, "", " 5.24.0", "5.24.0\t", "5.24.0\\n", "--privileged"]


@pytest.mark.parametrize("payload", TO_PAYLOADS, ids=range(len(TO_PAYLOADS)))
def test_bump_to_is_validated_like_the_matrix_before_anything_is_written(payload, tmp_path):
    from envbuild.core.errors import InvalidInput
    from envbuild.maintain.sources import Finding
    from envbuild.maintain.sources.bump import changes

    found = [Finding("transformers.version", None, "src", "5.23.0", "5.24.0", "5.24.0")]
    with pytest.raises(InvalidInput) as err:
        changes(found, ("transformers",), payload)
    assert str(err.value).startswith("--to: transformers.version: ") and len(str(err.value)) < 400


class _Answer:
    """A stand-in for the index's HTTP answer: a status, a reason phrase, a body (possibly endless)."""

    def __init__(self, status=200, reason="OK", body=b"", content_type="application/vnd.pypi.simple.v1+json", endless=False):
        self.status_code, self.reason, self.body, self.endless = status, reason, body, endless
        self.headers = {"Content-Type": content_type}
        self.url = "https://idx.example/simple/x/"
        self.read = 0

    def iter_content(self, size):
        if self.endless:
            while True:
                self.read += size
                yield b"x" * size
        yield self.body

    def close(self):
        pass


def _client(answer):
    from envbuild.maintain.sources.index import IndexClient

    client = IndexClient()
    client._open = lambda *a, **k: answer
    return client


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"files": 3}', b'{"files": [1, "x", null]}', b'{"files": [{"filename": 5}]}',
                                  b'{"files": [{"filename": "x-1.0-py3-none-any.whl", "url": 7, "hashes": "no"}]}',
                                  b"\xff\xfe", b"[" * 100000, b'{"files": [{"filename": "x-1.0-py3-none-any.whl", "url": "u", '
                                  b'"hashes": {"sha256": "../../../../etc/x"}}]}'])
def test_malformed_index_answers_are_source_errors(body):
    from envbuild.maintain.sources.index import SourceError

    try:
        files = _client(_Answer(body=body)).files("https://idx.example/simple", "x")
    except SourceError:
        return
    assert all(f.sha256 is None or len(f.sha256) == 64 for f in files)


def test_an_endless_index_answer_is_cut_at_the_cap(monkeypatch):
    from envbuild.maintain.sources import index

    monkeypatch.setattr(index, "MAX_PAGE", 1 << 20)
    answer = _Answer(endless=True)
    with pytest.raises(index.SourceError, match="more than 1 MiB"):
        _client(answer).files("https://idx.example/simple", "x")
    assert answer.read <= (1 << 20) + (1 << 16) * 2  # stopped at the cap, not after


@pytest.mark.parametrize("reason", ["\x1b]8;;https://evil.example\x07click\x1b]8;;\x07", "OK\r\nError: all good", "\x9b2J" * 50,
                                    "x" * 10000])
def test_an_index_reason_phrase_reaches_no_terminal_raw(reason):
    from envbuild.core.output import SafeStream, Scrubber
    from envbuild.maintain.sources.index import SourceError

    with pytest.raises(SourceError) as err:
        _client(_Answer(status=503, reason=reason)).files("https://idx.example/simple", "x")
    import io

    out = io.StringIO()
    SafeStream(out, "output", Scrubber(environ={})).write(str(err.value) + "\n")
    assert "\x1b" not in out.getvalue() and "\x9b" not in out.getvalue() and out.getvalue().count("\n") == 1
    assert len(str(err.value)) < 300


@pytest.mark.parametrize("body", [b"{", b"[]", b'{"tags": 5}', b'{"tags": [1, null, "ok-1", "bad tag", "-x"]}', b"\xff",
                                  b"[" * 100000])
def test_malformed_registry_answers_are_registry_errors(body):
    from envbuild.core.errors import RegistryError
    from envbuild.net.regclient import tag_list

    try:
        tags = tag_list(body, "reg.example")
    except RegistryError:
        return
    assert tags == ["ok-1"]


@pytest.mark.parametrize("garbage", [b"\xff\xfe\x00", b"", os.urandom(512)])
def test_a_corrupt_metadata_cache_is_fetched_again(garbage, tmp_path):
    from envbuild.maintain.sources.index import _cached

    path = tmp_path / ("a" * 64 + ".METADATA")
    path.write_bytes(garbage)
    assert _cached(path) in (None, "")
    os.unlink(path)
    os.mkfifo(path)
    assert _cached(path) is None  # never waited on


@pytest.mark.parametrize("only", ["transformers", "uv", "torch", "base_image", "backends.cuda.base_image"])
@pytest.mark.parametrize("payload", TO_PAYLOADS, ids=range(len(TO_PAYLOADS)))
def test_bump_to_is_refused_before_any_index_is_asked(only, payload, invoke, tmp_path, closed_socket):
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.read_text())
    result = invoke("bump", "--matrix", path, "--only", only, "--to", payload, "--output", tmp_path / "df")
    assert result.exit_code == 2, (only, payload, result.output)
    assert path.read_text() == MATRIX.read_text() and not (tmp_path / "df").exists()
    assert "\x1b" not in result.output and "LD_PRELOAD: /tmp" not in result.stdout


# --- What the commands call, called directly (the CLI parses and prints) (from test_command_library.py)

def test_sources_are_checked_before_anything_is_asked(tmp_path, monkeypatch):
    with pytest.raises(InvalidInput, match="--mirror"):
        Sources.checked(["not a rule"])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInput, match=r"--netrc .*fifo: not a regular file"):
        Sources.checked(netrc=fifo)
    pem = tmp_path / "ca.pem"
    pem.write_text("")
    monkeypatch.setenv("SSL_CERT_FILE", str(pem))
    sources = Sources.checked(["docker.io=mirror.example:5000"])
    assert sources.ca_bundle == pem and sources.mirrors == ("docker.io=mirror.example:5000",)


# `outdated`'s exit status: an answer that is not whole is never "nothing newer".

@pytest.mark.parametrize("findings, flags, status", [
    ([Finding("transformers.version", None, "https://pypi.org/simple", "5.23.0", fits="5.23.0")], [], 0),
    ([Finding("transformers.version", None, "https://pypi.org/simple", "5.23.0", fits="5.23.0")], ["--exit-code"], 0),
    ([Finding("transformers.version", None, "https://pypi.org/simple", "5.23.0", fits="5.24.0")], ["--exit-code"], 1),
    ([Finding("transformers.version", None, "https://pypi.org/simple", "5.23.0", error="no answer within 5 s")], [], 1),
    ([Finding("transformers.version", None, "https://pypi.org/simple", "5.23.0", error="no answer within 5 s")],
     ["--exit-code"], 3),
    ([Finding("transformers.version", None, "https://pypi.org/simple", "5.23.0", fits="5.24.0"),
      Finding("uv.version", None, "https://pypi.org/simple", "0.13.8", error="connection refused")], ["--exit-code"], 1),
    ([Finding("uv.version", None, "https://pypi.org/simple", "0.13.8", error="connection refused")], ["--json"], 1),
])
def test_outdated_exits_non_zero_when_a_source_did_not_answer(monkeypatch, findings, flags, status):
    from click.testing import CliRunner

    from envbuild.cli import cli
    from envbuild.cli import maintain

    monkeypatch.setattr(maintain, "_outdated", lambda *a, **k: findings)
    result = CliRunner().invoke(cli, ["outdated", "--matrix", str(MATRIX), *flags])
    assert result.exit_code == status, result.output
    unasked = status == 3 or (status == 1 and "--exit-code" not in flags)
    assert ("could not be asked" in result.stderr) == unasked, result.stderr


def test_outdated_says_it_still_waits_for_a_source_that_does_not_answer(monkeypatch):
    """A dead source costs its timeout (30 s a read): the wait says which backend's sources it is asking."""
    import threading

    from envbuild import matrix
    from envbuild.core import heartbeat
    from envbuild.maintain import sources as src

    monkeypatch.setattr(heartbeat, "PERIOD", 0.01)
    monkeypatch.setattr(heartbeat, "QUIET", 0.0)
    heard = threading.Event()
    lines: list[str] = []

    def say(text: str) -> None:
        lines.append(text)
        if text.startswith("still asking the sources of cpu: "):
            heard.set()

    def slow(sources, m, backend):
        assert heard.wait(30)  # answers only once the wait was said
        return ["cpu's finding"]

    monkeypatch.setattr(src, "_shared", lambda *a: "shared")
    monkeypatch.setattr(src, "_uv", lambda *a: "uv")
    monkeypatch.setattr(src, "_extras", lambda *a: [])
    monkeypatch.setattr(src, "_backend", slow)
    m = matrix.load(str(matrix.default_path()))
    assert src.outdated(m, m.select(["cpu"]), sources=object(), progress=say)[-1] == "cpu's finding"
    assert "asking the sources of cpu" in lines and heard.is_set()
