"""The builder process without an engine: BuildKit's output as one line per step, and the live status board of
parallel builds (which docker client builds: test_engine.py). tests/engine/ builds for real."""

from __future__ import annotations

import io

import pytest

from envbuild.image import builder
from envbuild.image.status import StatusBoard
from support.constants import MATRIX
from support.hostile import SECRET_VALUES


def test_progress_prints_a_line_per_finished_step():
    lines: list[str] = []
    p = builder.Progress("cpu", lines.append)
    for raw in [
        "#5 [2/7] RUN apt-get update",
        "#5 0.3 Get:1 http://deb.debian.org bookworm InRelease",
        "#5 DONE 7.3s",
        "#6 [3/7] RUN python3 -m venv /opt/venv",
        "#6 CACHED",
    ]:
        p.feed(raw)
    assert lines == ["[cpu] 2/7 RUN apt-get update ... DONE 7.3s", "[cpu] 3/7 RUN python3 -m venv /opt/venv ... CACHED"]


def test_step_summaries_drop_mounts_and_installer_boilerplate():
    run = ('RUN --mount=type=cache,target=/root/.cache/uv,id=${ENVBUILD_CACHE_ID}-uv     --mount=type=secret,id=ca_bundle,'
           'target=/run/secrets/ca_bundle     if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi'
           '     && export UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never     && /run/uv/uv pip install --python /opt/venv/bin/python'
           ' --compile-bytecode --find-links /run/wheelhouse         --index-url "https://pypi.org/simple" "torch==2.13.0"')
    assert builder.summarize(run) == 'RUN uv pip install "torch==2.13.0"'
    assert builder.summarize("COPY probe.py /opt/envbuild/probe.py") == "COPY probe.py /opt/envbuild/probe.py"
    # today's steps: the cache logic is one line, the script the step's shell reads
    now = ('RUN --mount=type=bind,source=uv-step.sh,target=/run/uv-step.sh     . /run/uv-step.sh     && /run/uv/uv pip '
           'install --python /opt/venv/bin/python --compile-bytecode -r /run/layer.txt')
    assert builder.summarize(now) == "RUN uv pip install -r /run/layer.txt"
    lines, status = [], []
    p = builder.Progress("cpu", lines.append, status=status.append)
    for raw in ["#8 [torch 1/1] " + run, "#8 DONE 8.7s", "#9 [stage-4 2/3] RUN apt-get update", "#9 CACHED"]:
        p.feed(raw)
    assert lines == ['[cpu] torch 1/1 RUN uv pip install "torch==2.13.0" ... DONE 8.7s', "[cpu] 2/3 RUN apt-get update ... CACHED"]
    assert status[0] == 'torch 1/1 RUN uv pip install "torch==2.13.0"'


def test_verbose_progress_passes_every_line_through():
    lines: list[str] = []
    p = builder.Progress("cpu", lines.append, verbose=True)
    for raw in ["#5 [2/7] RUN apt-get update", "#5 0.3 Get:1 http://deb.debian.org", "#5 DONE 7.3s"]:
        p.feed(raw)
    assert lines == ["[cpu] #5 [2/7] RUN apt-get update", "[cpu] #5 0.3 Get:1 http://deb.debian.org", "[cpu] #5 DONE 7.3s"]


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_quiet_step_shows_its_latest_line_every_few_seconds():
    """A resolver fetching from a dead index for minutes: every `quiet` seconds without a shown line, the running
    step's time so far, its latest line and any warning since; nothing while lines are being shown."""
    lines: list[str] = []
    clock = _Clock()
    p = builder.Progress("cpu", lines.append, clock=clock, quiet=5)
    p.tick()
    assert lines == []  # nothing runs
    p.feed("#9 [lock-resolve 1/1] RUN python3 /run/lock/resolve.py --out /out")
    clock.now += 4
    p.tick()
    assert lines == []  # not quiet long enough
    clock.now += 2
    p.tick()
    assert lines == ["[cpu] lock-resolve 1/1 RUN python3 /run/lock/resolve.py --out /out ... 6s (no output yet)"]
    for raw in ["#9 0.4 Looking in indexes: https://pypi.org/simple, https://download.pytorch.org/whl/cpu",
                "#9 1.2 WARNING: Retrying (Retry(total=4, connect=None, read=None)) after connection broken by "
                "'ConnectTimeoutError': /whl/cpu/torch/",
                "#9 3.0 Collecting torch==2.15.0"]:
        p.feed(raw)
    clock.now += 3
    p.tick()
    assert len(lines) == 1  # 3 s since the last shown line
    clock.now += 3
    p.tick()
    assert lines[-1] == ("[cpu] lock-resolve 1/1 RUN python3 /run/lock/resolve.py --out /out ... 12s: WARNING: Retrying "
                         "(Retry(total=4, connect=None, read=None)) after connection broken by 'ConnectTimeoutError': "
                         "/whl/cpu/torch/ | Collecting torch==2.15.0")
    clock.now += 5
    p.tick()
    assert lines[-1].endswith("... 17s: Collecting torch==2.15.0")  # the warning was shown once
    p.feed("#9 DONE 18.0s")
    clock.now += 30
    p.tick()
    assert lines[-1] == "[cpu] lock-resolve 1/1 RUN python3 /run/lock/resolve.py --out /out ... DONE 18.0s"


_APT = ("RUN --mount=type=cache,target=/var/cache/apt,id=envbuild-apt-cache,sharing=locked     --mount=type=cache,"
        "target=/var/lib/apt/lists,id=envbuild-apt-lists,sharing=locked     apt-get update")


def test_a_silent_step_with_a_locked_cache_names_the_other_build_that_may_hold_it():
    """Two builds on one engine: the second's apt step waits, printing nothing, while the first holds the apt cache
    (`sharing=locked`). Its heartbeat says what it may be waiting for, and which other build envbuild is running."""
    lines: list[str] = []
    clock = _Clock()
    p = builder.Progress("cpu", lines.append, clock=clock, quiet=5, others=lambda: ["rocm"])
    p.feed("#7 [system 2/6] " + _APT)
    clock.now += 6
    p.tick()
    assert lines == ["[cpu] system 2/6 RUN apt-get update ... 6s (no output yet: waiting for the build caches "
                     "envbuild-apt-cache, envbuild-apt-lists, held by another build? envbuild is building rocm here too)"]
    p.feed("#7 0.2 Get:1 http://deb.debian.org bookworm InRelease")
    clock.now += 5
    p.tick()
    assert lines[-1] == "[cpu] system 2/6 RUN apt-get update ... 11s: Get:1 http://deb.debian.org bookworm InRelease"
    p.feed("#7 DONE 11.2s")
    p.feed("#8 [system 3/6] COPY probe.py /opt/envbuild/probe.py")  # no cache mount: the other build is only named
    clock.now += 5
    p.tick()
    assert lines[-1] == "[cpu] system 3/6 COPY probe.py /opt/envbuild/probe.py ... 5s (no output yet; envbuild is building rocm here too)"


def test_a_silent_step_with_a_locked_cache_asks_about_another_build_only_after_a_while_when_none_is_known():
    """No other envbuild build known (another project's build on the same engine may still hold the cache): a step
    that shows nothing for ALONE seconds asks; before that, and for a step with no locked cache, no guess."""
    lines: list[str] = []
    clock = _Clock()
    p = builder.Progress("cpu", lines.append, clock=clock, quiet=5, others=lambda: [])
    p.feed("#7 [system 2/6] " + _APT)
    p.feed("#8 [uv 1/1] COPY --from=ghcr.io/astral-sh/uv /uv /opt/uv/bin/uv")
    clock.now += 6
    p.tick()
    assert lines[-1] == "[cpu] uv 1/1 COPY --from=ghcr.io/astral-sh/uv /uv /opt/uv/bin/uv ... 6s (no output yet)"
    p.feed("#8 DONE 6.1s")
    clock.now += 24
    p.tick()
    assert lines[-1] == "[cpu] system 2/6 RUN apt-get update ... 30s (no output yet: waiting for the build caches " \
                        "envbuild-apt-cache, envbuild-apt-lists, held by another build?)"


def test_podman_s_silent_step_says_it_too():
    """buildah's steps (Podman) read into the same steps: the same words for its RUN with a locked cache."""
    from envbuild.engine.podman import BuildahReader

    lines: list[str] = []
    clock = _Clock()
    p = builder.Progress("cpu", lines.append, clock=clock, quiet=5, reader=BuildahReader, others=lambda: ["rocm"])
    p.feed("[2/4] STEP 3/6: " + _APT.replace("apt-get update", "apt-get install -y python3"))
    clock.now += 15
    p.tick()
    assert lines == ["[cpu] 3/6 RUN apt-get install -y python3 ... 15s (no output yet: waiting for the build caches "
                     "envbuild-apt-cache, envbuild-apt-lists, held by another build? envbuild is building rocm here too)"]


def test_buildkit_s_own_slow_work_is_said_too_and_only_while_it_is_slow():
    """Between steps BuildKit works on its own: asking the base's registry for its metadata, exporting the layers of
    a large image (a minute for CUDA's). No step runs then, yet the heartbeat says what is going on; a quick one
    prints nothing, as before."""
    lines: list[str] = []
    clock = _Clock()
    p = builder.Progress("cuda", lines.append, clock=clock, quiet=5)
    for raw in ['#0 building with "default" instance using docker driver',
                "#1 [internal] load build definition from Dockerfile", "#1 transferring dockerfile: 2.1kB done",
                "#1 DONE 0.0s", "#3 [internal] load metadata for docker.io/nvidia/cuda:12.8.1-runtime-ubuntu24.04"]:
        p.feed(raw)
    clock.now += 6
    p.tick()
    assert lines == ["[cuda] [internal] load metadata for docker.io/nvidia/cuda:12.8.1-runtime-ubuntu24.04 ... 6s"]
    for raw in ["#3 DONE 6.5s", "#9 [torch 1/1] RUN uv pip install torch", "#9 DONE 80.2s",
                "#14 exporting to image", "#14 exporting layers"]:
        p.feed(raw)
    clock.now += 6
    p.tick()
    assert lines[-2:] == ["[cuda] torch 1/1 RUN uv pip install torch ... DONE 80.2s",
                          "[cuda] exporting to image ... 6s: exporting layers"]
    clock.now += 40
    p.tick()
    assert lines[-1] == "[cuda] exporting to image ... 46s: exporting layers"
    p.feed("#14 exporting layers 45.2s done")
    p.feed("#14 DONE 46.0s")
    clock.now += 10
    p.tick()
    assert len(lines) == 4  # nothing runs, nothing said; no line for BuildKit's own work when it is done


def test_run_shows_a_quiet_builder_s_latest_line(tmp_path, monkeypatch, buildkit_client):
    """The heartbeat runs beside the builder's output: a client quiet for longer than `quiet` gets its line shown."""
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\necho '#3 [lock-resolve 1/1] RUN python3 /run/lock/resolve.py'\n"
                    "echo '#3 0.1 Collecting transformers==5.23.0'\nsleep 3\necho '#3 DONE 3.1s'\n")
    fake.chmod(0o755)
    lines: list[str] = []
    p = builder.Progress("cpu", lines.append, quiet=1)
    assert builder.run_build([str(fake), "build", "."], (), tmp_path / "lock.log", p) is None
    assert any(ln.endswith(": Collecting transformers==5.23.0") and "lock-resolve 1/1" in ln for ln in lines), lines
    assert "Collecting transformers==5.23.0" in (tmp_path / "lock.log").read_text()


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


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)

def test_build_arg_values_stay_out_of_logs_and_the_builder_gets_no_registry_credentials(tmp_path, monkeypatch, buildkit_client):
    from envbuild.image import builder

    monkeypatch.setenv("ENVBUILD_REGISTRY_PASSWORD", "registry-secret")
    monkeypatch.setenv("PROXY_FROM_ENV", "http://u:proxy-secret@proxy:3128")
    fake = tmp_path / "docker"
    fake.write_text('#!/bin/sh\necho "step: $*"\nenv | grep -c registry-secret || true\necho "value http://u:argv-secret@p:1"\n')
    fake.chmod(0o755)
    log = tmp_path / "build.log"
    progress = builder.Progress("cpu", lambda s: None, False)
    error = builder.run_build([str(fake), "build", "--build-arg", "HTTP_PROXY=http://u:argv-secret@p:1",
                               "--build-arg", "PROXY_FROM_ENV", "."],
                              ("HTTP_PROXY=http://u:argv-secret@p:1", "PROXY_FROM_ENV"), log, progress)
    assert error is None
    text = log.read_text()
    assert "argv-secret" not in text and "proxy-secret" not in text and "HTTP_PROXY=***" in text
    assert "\n0\n" in text  # the builder's environment held no registry password




def test_builder_logs_mask_secret_shapes(tmp_path, buildkit_client):
    from envbuild.image import builder

    fake = tmp_path / "docker"
    secret = SECRET_VALUES["huggingface"]
    fake.write_text(f'#!/bin/sh\necho "downloading with {secret} from https://u:log-pass-1@idx/simple"\n')
    fake.chmod(0o755)
    log = tmp_path / "build.log"
    assert builder.run_build([str(fake), "build", "."], (), log, builder.Progress("cpu", lambda s: None, False)) is None
    text = log.read_text()
    assert secret not in text and "log-pass-1" not in text and "https://***@idx/simple" in text


@pytest.mark.parametrize("value", [SECRET_VALUES["github-classic"], "http://u:proxy-pw-1@proxy:3128", "plain value with spaces",
                                   "a=b=c", ""])
def test_build_arg_values_reach_the_builder_through_its_environment_only(value, tmp_path, buildkit_client):
    from envbuild.image import builder, plan

    argv = plan.command(plan.Builder(("docker", "build"), (), False), tmp_path, plan.BuildOptions(build_args=(f"MY_ARG={value}",)), ())
    assert "--build-arg" in argv and argv[argv.index("--build-arg") + 1] == "MY_ARG"
    assert all(value not in a for a in argv) or not value
    fake = tmp_path / "docker"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/argv\nprintf "%s" "$MY_ARG" > {tmp_path}/env\n')
    fake.chmod(0o755)
    error = builder.run_build([str(fake), *argv[1:]], (f"MY_ARG={value}",), tmp_path / "log",
                              builder.Progress("cpu", lambda s: None, False))
    assert error is None
    assert (tmp_path / "env").read_text() == value  # the builder got it, from its environment
    assert not value or value not in (tmp_path / "argv").read_text()


@pytest.mark.parametrize("name", ["PATH", "HOME", "LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "DOCKER_HOST",
                                  "DOCKER_CONFIG", "BUILDX_BUILDER", "TMPDIR"])
def test_a_build_arg_may_not_set_what_the_client_reads(name, invoke, closed_socket):
    result = invoke("build", "--backend", "cpu", "--matrix", MATRIX, "--build-arg", f"{name}=/tmp/x")
    assert result.exit_code == 2 and f"--build-arg {name}" in result.stderr
