"""`envbuild run`'s docker run line, the engine's self-setup where none answers, and what a failed base pull says;
without an engine (tests/engine/test_run.py runs containers)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from support.constants import MATRIX as MATRIX_PATH
from support.hostile import SECRET_FORMS, SHAPES

from envbuild.engine import docker as engines
from envbuild.engine import owner
from envbuild.workspace import run as runner
from envbuild.image import builder
from envbuild.core.errors import DockerError, InvalidInput
from envbuild.host import engine_setup
from envbuild.matrix import load
import shlex
import subprocess
from envbuild.workspace.run import pasteable

MATRIX = load(MATRIX_PATH)


def line(backend: str = "cpu", **kw) -> list[str]:
    return list(runner.invocation(MATRIX, MATRIX.backend(backend), runner.RunOptions(**kw), interactive=False, uid=1234).args)


def test_the_backend_s_device_flags_cache_and_work_folder(tmp_path):
    args = line("rocm", workdir=str(tmp_path), command=("python", "train.py"))
    assert args[:2] == ["run", "--rm"] and "--init" in args
    for flag in MATRIX.backend("rocm").run.docker_args():
        assert flag in args
    assert "--ipc=host" in args and "--shm-size" in args  # the shared memory the backend needs
    assert ["-v", f"{runner.DEFAULT_CACHE}:/cache"] == args[args.index(f"{runner.DEFAULT_CACHE}:/cache") - 1:][:2]
    assert ["-v", f"{tmp_path}:/workspace", "-w", "/workspace"] == args[args.index(f"{tmp_path}:/workspace") - 1:][:4]
    assert args[-3:] == [MATRIX.tags(MATRIX.backend("rocm"))[0], "python", "train.py"]
    # files written into your folder are yours: your uid, with the group the image's folders allow
    assert args[args.index("--user") + 1] == "1234:0"
    assert "--ipc=host" in line("cuda")


def test_no_command_is_a_shell_and_a_cache_folder_is_a_bind_mount(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = line(cache="./cache", mount_workdir=False)
    assert args[-len(runner.SHELL):] == list(runner.SHELL)
    assert f"{tmp_path / 'cache'}:/cache" in args and "-w" not in args and "--user" in args
    assert not (tmp_path / "cache").exists()  # working out the line creates nothing
    named = line(cache="team-cache", mount_workdir=False)
    assert "team-cache:/cache" in named and "--user" not in named  # the image's own user


def test_variables_go_by_name_and_secret_values_are_never_shown():
    call = runner.invocation(MATRIX, MATRIX.backend("cpu"), runner.RunOptions(
        env=("HF_TOKEN", "WANDB_API_KEY=k3y-v4lue", "LOG_LEVEL=debug"), mount_workdir=False), interactive=False)
    assert [a for i, a in enumerate(call.args) if call.args[i - 1] == "-e"] == ["HF_TOKEN", "WANDB_API_KEY", "LOG_LEVEL"]
    assert "k3y-v4lue" not in " ".join(call.args) and dict(call.env) == {"WANDB_API_KEY": "k3y-v4lue", "LOG_LEVEL": "debug"}
    shown = call.display()
    assert shown.startswith("docker run --rm")
    assert "-e HF_TOKEN " in shown and "-e 'WANDB_API_KEY=***'" in shown and "-e LOG_LEVEL=debug" in shown
    assert "k3y-v4lue" not in shown


@pytest.mark.parametrize("kw, fragment", [
    ({"env": ("1BAD",)}, "not an environment variable name"),
    ({"volumes": ("data",)}, "expected SRC:DST"),
    ({"volumes": ("./data:relative",)}, "expected SRC:DST"),
    ({"cache": "bad name!"}, "give a folder"),
    ({"workdir": "/nonexistent/folder"}, "no such folder"),
])
def test_bad_options_are_refused(kw, fragment):
    with pytest.raises(InvalidInput, match=fragment):
        line(**kw)


def test_a_terminal_gets_one():
    interactive = runner.invocation(MATRIX, MATRIX.backend("cpu"), runner.RunOptions(mount_workdir=False), interactive=True)
    assert "-it" in interactive.args
    piped = runner.invocation(MATRIX, MATRIX.backend("cpu"), runner.RunOptions(mount_workdir=False, command=("true",)),
                              interactive=False)
    assert "-it" not in piped.args and "-i" not in piped.args


def test_dry_run_through_the_cli_prints_and_writes_nothing(invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENVBUILD_ENGINE", "docker")  # auto would take Podman where no Docker daemon answers
    result = invoke("run", "--dry-run", "--backend", "cpu", "--cache", "./c", "-e", "HF_TOKEN=hf_s3cr3t", "--matrix",
                    MATRIX_PATH, "--", "sh", "-c", "exit 7")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("docker run --rm ") and "sh -c 'exit 7'" in result.stdout
    assert "hf_s3cr3t" not in result.output and not (tmp_path / "c").exists()
    # a line to use without envbuild: no one-off container name, no labels naming this machine, boot and process
    assert "--name" not in result.stdout and "--label" not in result.stdout and "dev.envbuild" not in result.stdout
    assert owner.me().host not in result.stdout and owner.me().boot not in result.stdout
    started = line()  # the run envbuild starts keeps them: `clean` tells a live run's container by them
    assert "--name" in started and f"{owner.OWNER_LABEL}={owner.me()}" in started
    assert invoke("run", "--dry-run", "--backend", "mps", "--matrix", MATRIX_PATH).exit_code == 2


def _client(tmp_path: Path, script: str) -> Path:
    """A stand-in for the docker client (ENVBUILD_DOCKER): the shell script given."""
    exe = tmp_path / "docker"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def _run_with(tmp_path, monkeypatch, backend: str, script: str) -> int:
    from support.fakes import FakeEngine

    monkeypatch.setenv("ENVBUILD_DOCKER", str(_client(tmp_path, script)))
    engine = FakeEngine()
    b = MATRIX.backend(backend)
    engine.add_image("sha256:x", [MATRIX.tags(b)[0]])
    return runner.run(MATRIX, b, runner.RunOptions(workdir=str(tmp_path), command=("true",)), engine_with_client(engine))


def engine_with_client(fake):
    """The fake daemon, with the real client_run (a child docker client, its stderr copied and kept)."""
    fake.client_run = engines.Engine.client_run.__get__(fake)
    return fake


def test_a_flag_the_host_refuses_is_named_and_the_status_is_docker_s(tmp_path, monkeypatch, capfd):
    said = ("docker: Error response from daemon: failed to create shim task: OCI runtime create failed: runc create "
            "failed: unable to start container process: unable to apply caps: operation not permitted: unknown.")
    with pytest.raises(runner.RunRefused) as info:
        _run_with(tmp_path, monkeypatch, "tpu", f"echo '{said}' >&2; exit 125\n")
    assert info.value.exit_code == 125
    assert str(info.value).startswith("this host refused `--privileged`, which the tpu backend's container needs")
    assert said in capfd.readouterr().err  # the client's own words reached the terminal as they came


def test_the_command_s_status_and_output_pass_through(tmp_path, monkeypatch, capfd):
    assert _run_with(tmp_path, monkeypatch, "tpu", "echo out; echo err >&2; exit 7\n") == 7
    out, err = capfd.readouterr()
    assert out == "out\n" and err == "err\n"
    # 125 without a refusal the backend's flags explain: Docker's status and words alone
    assert _run_with(tmp_path, monkeypatch, "tpu", "echo 'docker: invalid reference format.' >&2; exit 125\n") == 125


# --- an engine where none answers ---------------------------------------------------------------------------


class Dead:
    host = engines.DEFAULT_HOST

    def __init__(self, answers_after: int = 0):
        self.pings, self.answers_after = 0, answers_after

    def ping(self):
        self.pings += 1
        if self.answers_after == 0 or self.pings <= self.answers_after:
            raise engines.Unreachable(self.host, "no daemon socket there")


@pytest.fixture
def fake_host(tmp_path, monkeypatch):
    """apt-get, dockerd and sh that only write down how they were called; a Debian machine without systemd."""
    calls = tmp_path / "calls"
    for tool in ("apt-get", "sh"):
        exe = tmp_path / "bin" / tool
        exe.parent.mkdir(exist_ok=True)
        exe.write_text(f'#!/bin/bash\necho "{tool} $*" >> {calls}\n')
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(engine_setup, "debian_like", lambda root=Path("/"): True)
    monkeypatch.setattr(engine_setup.os, "geteuid", lambda: 0)
    return calls


def test_without_yes_nothing_is_installed_and_the_way_is_said(fake_host):
    with pytest.raises(DockerError, match="run again with --yes"):
        engine_setup.ensure_engine(Dead(), yes=False, ask=None, echo=lambda s: None)
    with pytest.raises(DockerError, match="no daemon socket there"):
        engine_setup.ensure_engine(Dead(), yes=False, ask=lambda q: False, echo=lambda s: None)
    assert not fake_host.exists()


def test_with_yes_it_installs_docker_io_and_starts_dockerd(fake_host):
    said = []
    engine = Dead(answers_after=1)
    engine_setup.ensure_engine(engine, yes=True, ask=None, echo=said.append, wait=5)
    calls = fake_host.read_text().splitlines()
    assert calls[0] == "apt-get update -qq"
    assert calls[1] == "apt-get install -y -qq --no-install-recommends docker.io"
    assert calls[2].startswith("sh -c nohup dockerd")
    assert said[-1] == f"the Docker engine answers at {engines.DEFAULT_HOST}"


def test_an_engine_elsewhere_is_never_installed(fake_host, monkeypatch):
    remote = Dead()
    remote.host = "tcp://10.1.2.3:2376"
    with pytest.raises(engines.Unreachable):
        engine_setup.ensure_engine(remote, yes=True, ask=None, echo=lambda s: None)
    assert not fake_host.exists()


def test_an_answering_engine_is_left_alone(fake_host):
    engine_setup.ensure_engine(Dead(answers_after=-1), yes=True, ask=None, echo=lambda s: None)
    assert not fake_host.exists()


# --- a base image that cannot be pulled ---------------------------------------------------------------------


def test_a_base_that_cannot_be_pulled_says_the_ways_out():
    said = ('failed to solve with frontend dockerfile.v0: failed to create LLB definition: failed to do request: Head '
            '"https://registry-1.docker.io/v2/library/debian/manifests/bookworm-slim": dial tcp: lookup registry-1.docker.io: no such host')
    message = builder.base_failure(said, "debian:bookworm-slim", "cpu")
    assert message.startswith("cannot pull the base image debian:bookworm-slim (no DNS answer for its registry)")
    assert "--mirror docker.io=MIRROR" in message and "--set backends.cpu.base_image=IMAGE" in message
    assert "registry:2" in message and "docker-registry" in message and "base_image=REF@sha256:" in message
    quay = builder.base_failure("pull access denied for quay.io/ascend/cann", "quay.io/ascend/cann:9.2.0", "npu")
    assert "(access denied)" in quay and "--mirror quay.io=MIRROR" in quay
    assert builder.base_failure("#9 ERROR: process did not complete successfully: exit code: 1", "debian:12", "cpu") is None


def test_os_release_decides_debian_like(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "os-release").write_text('NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n')
    assert engine_setup.debian_like(tmp_path)
    (tmp_path / "etc" / "os-release").write_text('ID=fedora\n')
    assert not engine_setup.debian_like(tmp_path)


def test_the_dev_container_runs_the_cpu_image_as_envbuild_run_does():
    import json

    from support.constants import REPO

    text = (REPO / ".devcontainer" / "devcontainer.json").read_text()
    doc = json.loads("\n".join(ln for ln in text.splitlines() if not ln.strip().startswith("//")))
    cpu = MATRIX.backend("cpu")
    assert doc["image"] == MATRIX.tags(cpu)[0]
    assert doc["runArgs"] == ["--init", *cpu.run.docker_args()]
    assert doc["mounts"] == [f"source={runner.DEFAULT_CACHE},target={runner.CACHE},type=volume"]
    assert doc["workspaceFolder"] == runner.WORKDIR and doc["remoteUser"] == "envbuild"


# --- What a new user sees in the first hour (from test_first_hour.py)

def test_a_pasted_argument_is_the_same_text() -> None:
    for value in ["plain", "a b", "x\ny", "it's", "tab\there", "esc\x1bA", "bidi\u202eX", "back\\slash\n"]:
        said = subprocess.run(["bash", "-c", f"printf %s {pasteable(value)}"], capture_output=True, text=True).stdout
        assert said == value, (value, pasteable(value))
    assert pasteable("a b") == shlex.quote("a b")


# --- Hostile input: what a matrix, a flag, a file or an answer from outside can do, each case fixed at its root (from test_hostile_input.py)



@pytest.mark.parametrize("shape", SHAPES)
def test_run_dry_run_prints_no_secret_whatever_the_variable_is_called(shape, invoke):
    value, hidden = SECRET_FORMS[shape]
    result = invoke("run", "--backend", "cpu", "--dry-run", "--matrix", MATRIX_PATH, "-e", f"SOME_SETTING={value.splitlines()[0]}",
                    "--", "true")
    assert result.exit_code == 0, result.output
    assert hidden.splitlines()[0] not in result.output and "SOME_SETTING=" in result.stdout


@pytest.mark.parametrize("name", ["ENVBUILD_DEVICE", "envbuild_device", "ENVBUILD_PLUGIN_IMPORT", "ENVBUILD_X"])
def test_run_refuses_the_images_own_variables(name, invoke):
    result = invoke("run", "--backend", "cpu", "--dry-run", "--matrix", MATRIX_PATH, "-e", f"{name}=cuda", "--", "true")
    assert result.exit_code == 2 and "reserved" in result.stderr
