"""Performance machinery without an engine: the reused build context, the builder cache, cache/builder/platform
pass-through, step summaries, the live status board and parallel builds. test_build_smoke.py and
test_bench.py build for real."""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path

import pytest

from envbuild import build, engine
from envbuild.errors import DockerError, EnvbuildError
from envbuild.matrix import load
from envbuild.status import StatusBoard

REPO = Path(__file__).resolve().parents[1]
MATRIX = load(REPO / "matrix.yaml")
LEGACY = engine.Builder(argv=("docker", "build"), env=(("DOCKER_BUILDKIT", "1"),), buildx=False)
BUILDX = engine.Builder(argv=("docker", "buildx", "build", "--load"), env=(), buildx=True)


# --- the build context is reused, so an unchanged wheelhouse is not sent again -----------------------------


def test_prepare_context_keeps_unchanged_files_untouched(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0-cp311-none-any.whl").write_bytes(b"x" * 1000)
    (wheels / "README.txt").write_text("not a wheel")
    ctx = build.prepare_context("FROM scratch\n", wheels, tmp_path / "ctx")
    first = {p.name: p.stat() for p in ctx.rglob("*") if p.is_file()}
    assert sorted(first) == ["Dockerfile", "probe.py", "torch-2.13.0-cp311-none-any.whl"]
    time.sleep(0.01)
    build.prepare_context("FROM scratch\n", wheels, ctx)
    again = {p.name: p.stat() for p in ctx.rglob("*") if p.is_file()}
    assert {n: (s.st_mtime_ns, s.st_ino) for n, s in again.items()} == {n: (s.st_mtime_ns, s.st_ino) for n, s in first.items()}
    # A changed Dockerfile is rewritten; a wheel gone from the wheelhouse leaves the context.
    (wheels / "torch-2.13.0-cp311-none-any.whl").unlink()
    (wheels / "extra-1.0-py3-none-any.whl").write_bytes(b"y")
    build.prepare_context("FROM scratch\nLABEL a=b\n", wheels, ctx)
    assert (ctx / "Dockerfile").read_text() == "FROM scratch\nLABEL a=b\n"
    assert sorted(p.name for p in (ctx / "wheelhouse").iterdir()) == ["extra-1.0-py3-none-any.whl"]
    assert os.stat(ctx / "probe.py").st_mode & 0o777 == 0o755


def test_prepare_context_without_wheelhouse_empties_it(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "a-1-py3-none-any.whl").write_bytes(b"a")
    ctx = build.prepare_context("FROM scratch\n", wheels, tmp_path / "ctx")
    build.prepare_context("FROM scratch\n", None, ctx)
    assert list((ctx / "wheelhouse").iterdir()) == []
    with pytest.raises(EnvbuildError, match="no such directory"):
        build.prepare_context("FROM scratch\n", tmp_path / "absent", ctx)


# --- cache, builder and platform options for buildx and the legacy client ----------------------------------


def _argv(client, **kw):
    return build.build_command(client, Path("/ctx"), Path("/iid"), build.BuildOptions(**kw), ["r/e:cpu"])


def test_buildx_gets_every_cache_builder_and_platform_option():
    argv = _argv(BUILDX, cache_from=("type=registry,ref=reg/cache:cpu", "type=local,src=/c"),
                 cache_to=("type=registry,ref=reg/cache:cpu,mode=max",), builder="remote", platform="linux/arm64")
    assert argv[:4] == ["docker", "buildx", "build", "--load"]
    assert ["--builder", "remote"] == argv[argv.index("--builder"):argv.index("--builder") + 2]
    assert argv.count("--cache-from") == 2 and "type=local,src=/c" in argv
    assert "type=registry,ref=reg/cache:cpu,mode=max" in argv
    assert ["--platform", "linux/arm64"] == argv[argv.index("--platform"):argv.index("--platform") + 2]


def test_legacy_client_reads_registry_caches_and_says_what_needs_buildx():
    # The legacy client takes an image reference (an inline cache); a buildx registry spec is translated.
    argv = _argv(LEGACY, cache_from=("type=registry,ref=reg/cache:cpu", "reg/other:cpu"), platform="linux/amd64")
    assert argv[argv.index("--cache-from") + 1] == "reg/cache:cpu" and "reg/other:cpu" in argv
    assert "--platform" in argv
    with pytest.raises(EnvbuildError, match="--cache-to needs the buildx plugin"):
        _argv(LEGACY, cache_to=("type=local,dest=/c",))
    with pytest.raises(EnvbuildError, match="--builder needs the buildx plugin"):
        _argv(LEGACY, builder="remote")
    with pytest.raises(EnvbuildError, match="local caches need buildx"):
        _argv(LEGACY, cache_from=("type=local,src=/c",))


def test_several_platforms_need_buildx_and_are_not_loaded(monkeypatch, tmp_path):
    monkeypatch.setattr(engine, "find_builder", lambda: LEGACY)
    opts = build.BuildOptions(platform="linux/amd64,linux/arm64", log_dir=tmp_path / "logs", context_dir=tmp_path / "ctx")
    with pytest.raises(EnvbuildError, match="several platforms in one build need the buildx plugin"):
        build.build(MATRIX, MATRIX.backend("cpu"), opts, echo=lambda s: None)
    seen = {}

    class Proc:
        stdout = iter(["#1 DONE 0.1s\n"])

        def __init__(self, argv, **kw):
            seen["argv"] = argv
            Path(argv[argv.index("--iidfile") + 1]).write_text("sha256:abc")

        def wait(self):
            return 0

    monkeypatch.setattr(engine, "find_builder", lambda: BUILDX)
    monkeypatch.setattr(build.subprocess, "Popen", Proc)
    result = build.build(MATRIX, MATRIX.backend("cpu"), opts, echo=lambda s: None)
    assert result.ok and result.tags == []
    assert "--load" not in seen["argv"] and "-t" not in seen["argv"]


# --- the builder is remembered while the clients stay the same ---------------------------------------------


def test_find_builder_remembers_its_answer_until_a_client_changes(tmp_path, monkeypatch, fake_docker):
    old = fake_docker(tmp_path / "old", "20.10.24+dfsg1", buildx=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "dockercfg"))
    monkeypatch.delenv("ENVBUILD_DOCKER", raising=False)
    monkeypatch.setenv("PATH", str(old.parent))
    try:
        for _ in range(2):
            engine.find_builder.cache_clear()
            assert engine.find_builder().argv == (str(old), "build")
        assert (tmp_path / "old" / "calls").read_text().count("--version") == 1  # asked once, then remembered
        # A buildx plugin installed for this user changes the plugin folder: asked again.
        (tmp_path / "dockercfg" / "cli-plugins").mkdir(parents=True)
        fake_docker(tmp_path / "old", "20.10.24+dfsg1", buildx=True)
        engine.find_builder.cache_clear()
        assert engine.find_builder().buildx
    finally:
        engine.find_builder.cache_clear()


# --- what people see ----------------------------------------------------------------------------------------


def test_step_summaries_drop_mounts_and_installer_boilerplate():
    run = ('RUN --mount=type=cache,target=/root/.cache/uv,id=${ENVBUILD_CACHE_ID}-uv     --mount=type=secret,id=ca_bundle,'
           'target=/run/secrets/ca_bundle     if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi'
           '     && export UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never     && /run/uv/uv pip install --python /opt/venv/bin/python'
           ' --compile-bytecode --find-links /run/wheelhouse         --index-url "https://pypi.org/simple" "torch==2.13.0"')
    assert build.summarize(run) == 'RUN uv pip install "torch==2.13.0"'
    assert build.summarize("COPY probe.py /opt/envbuild/probe.py") == "COPY probe.py /opt/envbuild/probe.py"
    lines, status = [], []
    p = build.Progress("cpu", lines.append, status=status.append)
    for raw in ["#8 [torch 1/1] " + run, "#8 DONE 8.7s", "#9 [stage-4 2/3] RUN apt-get update", "#9 CACHED"]:
        p.feed(raw)
    assert lines == ['[cpu] torch 1/1 RUN uv pip install "torch==2.13.0" ... DONE 8.7s', "[cpu] 2/3 RUN apt-get update ... CACHED"]
    assert status[0] == 'torch 1/1 RUN uv pip install "torch==2.13.0"'


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_status_board_rewrites_one_line_per_backend_on_a_terminal():
    out = _Tty()
    with StatusBoard(["cpu", "cuda"], stream=out, tick=60) as board:
        board.echo("[cpu] a step line")  # the board says it instead
        board.start("cpu")
        board.step("cpu", "torch 1/1 RUN uv pip install torch")
        board.finish("cpu", True, "sha256:abc")
        board.start("cuda")
        board.finish("cuda", False, "ERROR: pull access denied")
    text = out.getvalue()
    assert "a step line" not in text
    assert "\x1b[2F" in text and "\x1b[2K" in text  # up two lines, clear, redraw
    last = text.rsplit("\x1b[2F", 1)[1]
    assert "cpu   ok" in last and "sha256:abc" in last and "cuda  FAILED" in last


def test_status_board_prints_plain_prefixed_lines_elsewhere():
    out = io.StringIO()
    with StatusBoard(["cpu"], stream=out) as board:
        board.start("cpu")
        board.echo("[cpu] 2/3 RUN apt-get update ... DONE 4.4s")
        board.finish("cpu", True, "sha256:abc")
    assert out.getvalue() == "[cpu] 2/3 RUN apt-get update ... DONE 4.4s\n"


def test_build_many_runs_jobs_at_once_and_keeps_the_order(monkeypatch):
    running, peak, lock = [0], [0], threading.Lock()
    names = [b.name for b in MATRIX.containerizable()][:4]

    def fake_build(matrix, backend, opts, *, mirrors=(), echo=print, verbose=False, status=None):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        if status:
            status("1/1 RUN something")
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        if backend.name == names[1]:
            raise build.BuildError("base image not found")
        return build.BuildResult(backend=backend.name, ok=True, tags=[f"r:{backend.name}"], image_id="sha256:1")

    monkeypatch.setattr(build, "build", fake_build)
    chosen = [MATRIX.backend(n) for n in names]
    board = StatusBoard(names, stream=io.StringIO())
    with board:
        results = build.build_many(MATRIX, chosen, build.BuildOptions(), jobs=2, board=board)
    assert [r.backend for r in results] == names
    assert peak[0] == 2
    assert [r.ok for r in results] == [True, False, True, True] and "base image not found" in results[1].error
    assert board.state[names[1]] == "FAILED" and board.state[names[0]] == "ok"


def test_a_build_that_cannot_reach_the_daemon_says_what_to_do(monkeypatch, tmp_path):
    class Proc:
        stdout = iter(["ERROR: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n"])

        def __init__(self, *a, **kw):
            pass

        def wait(self):
            return 1

    monkeypatch.setattr(engine, "find_builder", lambda: LEGACY)
    monkeypatch.setattr(build.subprocess, "Popen", Proc)
    opts = build.BuildOptions(log_dir=tmp_path / "logs", context_dir=tmp_path / "ctx")
    with pytest.raises(DockerError, match="cannot reach the Docker daemon.*apt-get install docker.io"):
        build.build(MATRIX, MATRIX.backend("cpu"), opts, echo=lambda s: None)
