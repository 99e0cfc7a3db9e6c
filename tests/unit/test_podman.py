"""The Podman engine's pure parts: podman's JSON answers read into the contract's shapes (as podman 4.3 prints
them), GPUs as CDI names or device nodes, what doctor checks, buildah's build output read into steps, what a
Podman build refuses, and which engine a command gets. tests/engine/test_podman.py runs real Podman."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from support.constants import MATRIX as MATRIX_PATH
from support.properties import FILES, JSON, clean

from envbuild.engine import select as engine_select
from envbuild.engine import podman
from envbuild.core.errors import BuildError, InvalidInput
from envbuild.image import builder, plan

# `podman version --format json`, `podman image inspect --format json` and `podman ps --all --format json` of
# podman 4.3.1 (Debian bookworm), trimmed.
VERSION = {"Client": {"APIVersion": "4.3.1", "Version": "4.3.1", "GoVersion": "go1.19.8", "OsArch": "linux/amd64", "Os": "linux"}}
INFO = {"host": {"cpus": 2, "memTotal": 25276190720, "ociRuntime": {"name": "runc", "path": "/usr/bin/runc"},
                 "security": {"rootless": False}},
        "store": {"graphDriverName": "overlay", "graphRoot": "/var/lib/containers/storage"}, "version": {"Version": "4.3.1"}}
INSPECT = [{
    "Id": "5ba282748ef906ccd9e15967279ea3420bf3351c3e1f9a3ae3d156da3720d622",
    "Digest": "sha256:9a5e4ce3e43c5646d1c3cf7661074d4f29dae54adcfe695cd0b9e42859b23854",
    "RepoTags": ["localhost/envbuild-podman-test:x", "127.0.0.1:5000/envbuild/envbuild:cpu"],
    "RepoDigests": ["localhost/envbuild-podman-test@sha256:9a5e4ce3e43c5646d1c3cf7661074d4f29dae54adcfe695cd0b9e42859b23854",
                    "127.0.0.1:5000/envbuild/envbuild@sha256:c352befd6dd69c65e7855bf90a2a097ebfbb5cb5d35f94f7622780f522d6b081"],
    "Created": "2026-12-06T06:03:26.15028565Z",
    "Config": {"Labels": {"foo": "hello", "io.buildah.version": "1.28.2"}, "User": "1000:0"},
    "Architecture": "amd64", "Os": "linux", "Size": 1355,
}]
PS = [{"Id": "0c1f", "Names": ["envbuild-smoke-cpu-1a2b"], "State": "exited",
       "Labels": {"dev.envbuild.owned": "1", "dev.envbuild.pid": "42"}},
      {"Id": "9d8e", "Names": ["envbuild-run-cpu-3c4d"], "State": "running", "Labels": {"dev.envbuild.owned": "1"}}]


def test_version_reads_as_dockers_answer_and_says_podman():
    v = podman.version_answer(VERSION)
    assert (v["Version"], v["ApiVersion"], v["Os"], v["Arch"], v["Platform"]["Name"]) == ("4.3.1", "4.3.1", "linux", "amd64", "Podman")
    remote = podman.version_answer({**VERSION, "Server": {**VERSION["Client"], "Version": "5.2.0", "OsArch": "linux/arm64"}})
    assert (remote["Version"], remote["Arch"]) == ("5.2.0", "arm64")  # a remote Podman: the server's


def test_info_names_runtime_storage_and_rootless():
    i = podman.info_answer(INFO)
    assert i["Runtimes"] == {"runc": {}} and i["DockerRootDir"] == "/var/lib/containers/storage"
    assert (i["Driver"], i["NCPU"], i["Rootless"]) == ("overlay", 2, False)


def test_image_inspect_reads_as_the_contracts_image():
    image = podman.image_answer(INSPECT[0])
    assert image.id == "sha256:5ba282748ef906ccd9e15967279ea3420bf3351c3e1f9a3ae3d156da3720d622"  # as Docker and --iidfile say it
    assert image.labels["foo"] == "hello" and (image.os, image.architecture, image.size) == ("linux", "amd64", 1355)
    # a digest Podman lists for its own local name was never pushed: not a registry's
    assert image.repo_digests == ("127.0.0.1:5000/envbuild/envbuild@sha256:c352befd6dd69c65e7855bf90a2a097ebfbb5cb5d35f94f7622780f522d6b081",)
    assert image.created is not None and image.created.year == 2026


def test_container_list_reads_names_states_labels():
    found = podman.containers_answer(PS)
    assert [(c.name, c.state) for c in found] == [("envbuild-smoke-cpu-1a2b", "exited"), ("envbuild-run-cpu-3c4d", "running")]
    assert found[0].labels["dev.envbuild.pid"] == "42"


def _host(tmp_path: Path, nodes=(), specs: dict[str, str] | None = None) -> Path:
    for node in nodes:
        (tmp_path / "dev" / node).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "dev" / node).touch()
    for rel, text in (specs or {}).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


NVIDIA_SPEC = "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n"
AMD_SPEC = json.dumps({"cdiVersion": "0.6.0", "kind": "amd.com/gpu", "devices": [{"name": "all"}]})


def test_gpus_become_the_cdi_name_where_the_host_has_the_spec(tmp_path):
    root = _host(tmp_path, ["nvidia0", "nvidiactl"], {"etc/cdi/nvidia.yaml": NVIDIA_SPEC})
    assert podman.device_args(["--gpus=all", "--runtime=nvidia", "--ipc=host"], root) == ["--device", "nvidia.com/gpu=all", "--ipc=host"]
    assert podman.device_args(["--gpus=device=1"], root) == ["--device", "nvidia.com/gpu=1"]


def test_gpus_become_device_nodes_without_a_spec(tmp_path):
    root = _host(tmp_path, ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"])
    assert podman.device_args(["--gpus=all", "-e", "A=1"], root) == [
        "--device", "/dev/nvidia-uvm", "--device", "/dev/nvidia0", "--device", "/dev/nvidia1", "--device", "/dev/nvidiactl",
        "-e", "A=1"]


def test_rocm_device_nodes_become_amds_cdi_name_only_with_its_spec(tmp_path):
    rocm = ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]
    assert podman.device_args(rocm, _host(tmp_path / "plain", ["kfd"])) == rocm
    root = _host(tmp_path / "cdi", ["kfd"], {"var/run/cdi/amd.json": AMD_SPEC})
    assert podman.device_args(rocm, root) == ["--device", "amd.com/gpu=all", "--group-add", "video"]


def test_cdi_check_names_the_generator_where_gpus_have_no_spec(tmp_path):
    check = podman.cdi_check(_host(tmp_path, ["nvidia0"]))
    assert not check.ok and not check.blocking and "nvidia-ctk cdi generate" in check.fix
    assert podman.cdi_check(_host(tmp_path / "none")).ok  # no GPU: nothing to give
    found = podman.cdi_check(_host(tmp_path / "spec", ["nvidia0"], {"etc/cdi/nvidia.yaml": NVIDIA_SPEC}))
    assert found.ok and "nvidia.com/gpu=all" in found.detail


def test_rootless_check_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    root = _host(tmp_path, specs={"etc/subuid": "alice:100000:65536\n", "etc/subgid": "bob:100000:65536\n"})
    checks = {c.name: c for c in podman.storage_checks(podman.info_answer(INFO), root, uid=1000, user="alice")}
    rootless = checks["podman rootless"]
    assert not rootless.ok
    assert "no range of 65536 subgids for alice in /etc/subgid" in rootless.detail and "subuid" not in rootless.detail.split(";")[0]
    assert "no newuidmap on PATH" in rootless.detail and "usermod --add-subuids" in rootless.fix
    assert "no access to" in rootless.detail and "dev/net/tun" in rootless.detail  # tried here: slirp4netns needs it
    assert checks["podman storage"].ok
    vfs = podman.storage_checks({**podman.info_answer(INFO), "Driver": "vfs"}, root, uid=0)
    assert not vfs[0].ok and "fuse-overlayfs" in vfs[0].fix
    assert vfs[1].ok and "rootful" in vfs[1].detail


def test_rootless_check_passes_with_ranges_and_tools(tmp_path, monkeypatch):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in ("newuidmap", "newgidmap"):
        (bin_ / tool).write_text("#!/bin/sh\n")
        (bin_ / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_))
    root = _host(tmp_path, ["net/tun"], {"etc/subuid": "1000:100000:65536\n", "etc/subgid": "alice:100000:65536\n"})
    rootless = next(c for c in podman.storage_checks(podman.info_answer(INFO), root, uid=1000, user="alice")
                    if c.name == "podman rootless")
    assert rootless.ok, rootless.detail


# --- the builder: buildah's output, and what a Podman build refuses ------------------------------------------

BUILDAH = """\
[1/2] STEP 1/2: FROM 127.0.0.1:46287/envbuild-test/debian-python3:bookworm AS base
[1/2] STEP 2/2: RUN echo hello
hello
--> 8f37af8879d
[2/2] STEP 1/2: FROM 8f37af8879db33186bd5e683cb9491b699275cede1efe7b7c12df9f628122998
--> Using cache 34e0e0f7a3f1879a9f4beba4e21a8bb2747bedb81ef97a20944a96d39aea556f
--> 34e0e0f7a3f
[2/2] STEP 2/2: RUN echo "error: no matching distribution for torch" && exit 3
error: no matching distribution for torch
Error: building at STEP "RUN echo "error: no matching distribution for torch" && exit 3": while running runtime: exit status 3
"""


def _buildah_steps(lines: list[str]) -> None:
    assert [line.rsplit(" ... ", 1)[0] for line in lines] == [
        "[cpu] base 1/2 FROM 127.0.0.1:46287/envbuild-test/debian-python3:bookworm AS base", "[cpu] base 2/2 RUN echo hello",
        "[cpu] 1/2 FROM 8f37af8879db33186bd5e683cb9491b699275cede1efe7b7c12df9f628122998",
        '[cpu] 2/2 RUN echo "error: no matching distribution for torch" && exit 3']
    assert [line.rsplit(" ... ", 1)[1].split()[0] for line in lines] == ["DONE", "DONE", "CACHED", "ERROR"]


def test_buildah_output_reads_as_one_line_per_step_and_says_why_it_failed():
    lines: list[str] = []
    p = builder.Progress("cpu", lines.append, reader=podman.BuildahReader)
    for line in BUILDAH.splitlines():
        p.feed(line)
    _buildah_steps(lines)
    assert p.why() == ('2/2 RUN echo "error: no matching distribution for torch" && exit 3 failed: '
                       "error: no matching distribution for torch")


def test_a_podman_build_reads_buildah_s_output_with_the_engine_s_reader(tmp_path, monkeypatch):
    """run_build with the Podman engine: its builder's environment, its process, its output read as steps."""
    (tmp_path / "out.txt").write_text(BUILDAH)
    exe = _script(tmp_path, f"[ \"$1\" = version ] && echo '{json.dumps(VERSION)}' && exit 0\n"
                            f"cat {tmp_path}/out.txt; env > {tmp_path}/env; exit 3\n")
    monkeypatch.setenv("ENVBUILD_PODMAN", exe)
    monkeypatch.setenv("DOCKER_BUILDKIT", "0")  # not Podman's: passed on as it is, nothing added
    engine = podman.Podman(exe=exe)
    lines: list[str] = []
    argv = plan.command(engine.builder(), tmp_path, plan.options(), ("x:cpu",))
    error = builder.run_build(argv, (), tmp_path / "log", builder.Progress("cpu", lines.append), engine)
    _buildah_steps(lines)
    assert error is not None and error.endswith("failed: error: no matching distribution for torch")
    assert "DOCKER_BUILDKIT=0" in (tmp_path / "env").read_text().splitlines()


def test_docker_s_builder_reads_no_buildah_output():
    lines: list[str] = []
    p = builder.Progress("cpu", lines.append)
    for line in BUILDAH.splitlines():
        p.feed(line)
    assert lines == []


@pytest.fixture
def podman_builder(monkeypatch):
    monkeypatch.setattr(podman, "executable", lambda: "/usr/bin/podman")
    return podman.Podman(exe="/usr/bin/podman").builder()


@pytest.mark.parametrize("option", ["builder", "cache_to"])
def test_a_podman_build_refuses_what_only_buildkit_does(tmp_path, option, podman_builder):
    opts = plan.options(**{option: "mine" if option == "builder" else ("type=local,dest=/tmp/c",)})
    with pytest.raises(BuildError, match=f"--{option.replace('_', '-')} is BuildKit's, and the Podman engine cannot do it"):
        plan.command(podman_builder, tmp_path, opts, ("x:cpu",))


def test_a_podman_build_keeps_secrets_args_and_reads_a_loopback_base_over_http(tmp_path, podman_builder):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    opts = plan.options(ca_bundle=ca, build_args=("HTTPS_PROXY",), cache_from=("type=registry,ref=reg.example/cache:cpu",))
    argv = plan.command(podman_builder, tmp_path, opts, ("x:cpu",), "127.0.0.1:5000/debian:bookworm")
    assert argv[:3] == ["/usr/bin/podman", "build", "--progress=plain"] and "--tls-verify=false" in argv
    assert ["--secret", f"id=ca_bundle,src={ca}"] == argv[argv.index("--secret"):argv.index("--secret") + 2]
    assert argv[argv.index("--cache-from") + 1] == "reg.example/cache:cpu" and "--load" not in argv
    assert "--tls-verify=false" not in plan.command(podman_builder, tmp_path, opts, ("x:cpu",), "ghcr.io/o/debian:12")


# --- which engine ------------------------------------------------------------------------------------------------

def _fake_podman(tmp_path: Path) -> Path:
    exe = tmp_path / "podman"
    exe.write_text(f"#!/bin/sh\ncase $1 in\n  version) echo '{json.dumps(VERSION)}';;\n  info) echo '{json.dumps(INFO)}';;\n"
                   "  *) echo '[]';;\nesac\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_auto_takes_podman_where_no_docker_daemon_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    monkeypatch.setenv("ENVBUILD_PODMAN", str(_fake_podman(tmp_path)))
    monkeypatch.delenv("ENVBUILD_ENGINE", raising=False)
    choice = engine_select.choose()
    assert choice.engine.kind == "podman" and "no Docker daemon answers" in choice.why and "Podman is installed" in choice.why
    monkeypatch.setenv("ENVBUILD_PODMAN", str(tmp_path / "absent"))
    choice = engine_select.choose()
    assert choice.engine.kind == "docker" and "Podman is not installed" in choice.why  # Docker's error says what to do


def test_a_named_engine_is_taken_without_asking_docker(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
    monkeypatch.setenv("ENVBUILD_ENGINE", "podman")
    assert engine_select.choose().engine.kind == "podman"
    assert engine_select.choose("docker").engine.kind == "docker"  # the flag over the environment
    assert "--engine docker" in engine_select.choose("docker").why
    monkeypatch.setenv("ENVBUILD_ENGINE", "containerd")
    with pytest.raises(InvalidInput, match="ENVBUILD_ENGINE=containerd: not an engine envbuild knows: give docker, podman or auto"):
        engine_select.choose()


def test_doctor_says_which_engine_and_why(tmp_path):
    """Through the CLI in a child process (a fresh import, PATH without podman/docker clients): --engine podman with a
    fake podman that answers its version."""
    env = {**os.environ, "ENVBUILD_PODMAN": str(_fake_podman(tmp_path)), "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    env.pop("ENVBUILD_ENGINE", None)
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--backend", "cpu", "--matrix", str(MATRIX_PATH),
                           "--engine", "podman", "--json"], capture_output=True, text=True, env=env, timeout=120)
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["podman"]["ok"] and "Podman 4.3.1" in checks["podman"]["detail"]
    assert "--engine podman chose Podman" in checks["podman"]["detail"]
    assert "docker daemon" not in checks


def _script(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "podman"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return str(exe)


def test_a_push_reports_the_digest_podman_wrote_and_credentials_go_to_a_file(tmp_path):
    """What the session reads from a push: progress, then the digest `podman push --digestfile` wrote; the password
    reaches podman in an auth file (mode 0600) that is gone afterwards, never on its command line."""
    exe = _script(tmp_path, f"""echo "$@" > {tmp_path}/argv
while [ $# -gt 0 ]; do
  case $1 in
    --digestfile) echo sha256:{'ab' * 32} > "$2"; shift;;
    --authfile) cat "$2" > {tmp_path}/auth; stat -c %a "$2" > {tmp_path}/mode; echo "$2" > {tmp_path}/authpath; shift;;
  esac; shift
done
echo "Copying blob 1234"; echo "Writing manifest to image destination"
""")
    engine = podman.Podman(exe=exe)
    lines = list(engine.push("127.0.0.1:5000/envbuild/envbuild:cpu", {"username": "u", "password": "pw-secret"}))
    assert lines[-1]["aux"]["Digest"] == "sha256:" + "ab" * 32
    assert all(line.get("progressDetail") for line in lines[:-1]) and len(lines) == 3
    argv = (tmp_path / "argv").read_text()
    assert "pw-secret" not in argv and "--tls-verify=false" in argv and "docker://127.0.0.1:5000/envbuild/envbuild:cpu" in argv
    assert json.loads((tmp_path / "auth").read_text())["auths"]["127.0.0.1:5000"]["auth"] == "dTpwdy1zZWNyZXQ="
    assert (tmp_path / "mode").read_text().strip() == "600"
    assert not Path((tmp_path / "authpath").read_text().strip()).exists()


def test_a_failed_push_ends_in_podmans_error():
    engine = podman.Podman(exe="/bin/sh")  # `sh push ...`: fails, saying why
    lines = list(engine.push("ghcr.io/o/envbuild:cpu", None))
    assert lines[-1].get("error") and "aux" not in lines[-1]


def test_a_missing_image_is_none_and_other_refusals_say_podmans_words(tmp_path):
    exe = _script(tmp_path, 'case $1 in image) echo "Error: inspecting object: x: image not known" >&2; exit 125;;\n'
                            '  *) echo "Error: short-name resolution enforced" >&2; exit 125;; esac\n')
    engine = podman.Podman(exe=exe)
    assert engine.image("x") is None
    with pytest.raises(Exception, match="cannot list containers: short-name resolution enforced"):
        engine.container_list("dev.envbuild.owned")


def test_no_podman_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("ENVBUILD_PODMAN", str(tmp_path / "absent"))
    with pytest.raises(podman.PodmanMissing, match="apt-get install podman"):
        podman.Podman().ping()


def test_podmans_checks_block_building_as_dockers_do():
    from envbuild.core.checks import Check
    from envbuild.host import doctor

    for name in ("podman", "podman storage", "podman rootless", "podman ulimits"):
        assert doctor.purposes(Check(name, False, "x")) == ("build", "run"), name
    assert doctor.purposes(Check("podman build", False, "x")) == ("build",)


def test_run_dry_run_prints_the_line_podman_is_given(tmp_path, monkeypatch):
    """`envbuild run --dry-run` under Podman: `podman run` with the GPUs in Podman's words (what client_run would
    hand podman), never Docker's --gpus."""
    import io

    from envbuild.matrix import load
    from envbuild.workspace import run as runs

    root = _host(tmp_path, ["nvidia0", "nvidiactl"], {"etc/cdi/nvidia.yaml": NVIDIA_SPEC})
    real = podman.device_args
    monkeypatch.setattr(podman, "device_args", lambda args, r=root: real(args, r))
    monkeypatch.setattr(podman, "init_path", lambda: None)
    m = load(MATRIX_PATH)
    out = io.StringIO()
    runs.run(m, m.backend("cuda"), runs.RunOptions(mount_workdir=False, command=["nvidia-smi"]),
             podman.Podman(exe="/bin/false"), dry_run=True, out=out)
    line = out.getvalue()
    assert line.startswith("podman run ") and "--device nvidia.com/gpu=all" in line and "--gpus" not in line, line
    # Docker's own line is unchanged
    from envbuild.engine.docker import Engine

    out = io.StringIO()
    runs.run(m, m.backend("cuda"), runs.RunOptions(mount_workdir=False, command=["nvidia-smi"]), Engine(), dry_run=True,
             out=out)
    assert out.getvalue().startswith("docker run ") and "--gpus" in out.getvalue()


# --- Answers from another program: any JSON (or none) from podman is data of unknown shape (issue 51) ----------

ASKS = [("version", ()), ("info", ()), ("runtimes", ()), ("image", ("reg.example/x:1",)), ("container_list", ("l",)),
        ("dangling_images", ("l",))]


@FILES
@given(st.sampled_from(ASKS), st.one_of(JSON.map(json.dumps), st.binary(max_size=200).map(lambda b: b.decode("utf-8", "replace")),
                                      st.sampled_from(["[" * 5000, '{"Client":' * 3000, "null", "[]", '"x"', "1e999"])))
def test_any_answer_from_podman_is_read_or_refused_with_an_engine_error(ask, answer):
    """`podman version`, `info`, `image inspect`, `ps` and `images` answering JSON of any shape (a list, strings
    for objects, very deep) or none: a value, or envbuild's own clean error, never an internal error."""
    from envbuild.core.errors import EnvbuildError

    engine = podman.Podman(exe="/bin/false")
    engine._run = lambda what, args, **kw: answer
    name, args = ask
    try:
        getattr(engine, name)(*args)
    except EnvbuildError as exc:
        assert clean(str(exc)), repr(str(exc))


# --- issue 51: Podman's answers are data of unknown shape; its first contact has a deadline -------------------------

def test_podman_4_3s_real_answers_have_the_shapes_read():
    for doc, shape in ((VERSION, podman.VERSION_SHAPE), (INFO, podman.INFO_SHAPE), (INSPECT, podman.INSPECT_SHAPE),
                       (PS, podman.PS_SHAPE), ([{"Id": "sha256:" + "a" * 64}], podman.IMAGES_SHAPE)):
        assert podman.read_answer("asking", "podman x", json.dumps(doc), shape) == doc


DEEP = "[" * 100_000 + "]" * 100_000
WRONG = {
    "version": ["[1, 2]", '"4.3.1"', '{"Client": "4.3.1"}', '{"Client": {"Version": {"x": 1}}}', '{"Server": [1]}', DEEP],
    "info": ["[]", '{"host": "x"}', '{"host": {"ociRuntime": "runc"}}', '{"store": [1]}', '{"host": {"cpus": "2"}}',
             '{"version": "4"}', DEEP],
    "ps": ['{"Names": ["x"]}', '["x"]', '[{"Labels": ["a"]}]', '[{"Names": [1]}]', '[{"State": {"x": 1}}]', DEEP],
    "image": ['{"Id": "x"}', '[{"Config": {}}]', '[{"Id": "x", "Config": "y"}]', '[{"Id": "x", "RepoDigests": "y"}]',
              '[{"Id": "x", "Size": "big"}]', DEEP],
    "images": ['{"Id": "x"}', '[{"Id": 5}]', "[[]]", DEEP],
}


@pytest.mark.parametrize("command, answer", [(c, a) for c, answers in WRONG.items() for a in answers],
                         ids=lambda v: v[:30] if isinstance(v, str) else v)
def test_an_answer_of_another_shape_is_one_error_naming_podman_and_what_it_said(tmp_path, command, answer):
    """A list where an object is expected, strings for objects, nesting too deep to read: an EngineError (exit 1)
    naming the command and quoting its answer escaped and capped, never a TypeError or RecursionError (exit 70)."""
    (tmp_path / "answer.json").write_text(answer)
    exe = _script(tmp_path, f'case $1 in {command}) cat {tmp_path / "answer.json"};; *) echo "{{}}";; esac\n')
    engine = podman.Podman(exe=exe)
    call = {"version": engine.version, "info": engine.info, "ps": lambda: engine.container_list("x"),
            "image": lambda: engine.image("x"), "images": lambda: engine.dangling_images("x")}[command]
    with pytest.raises(podman.EngineError) as caught:
        call()
    said = str(caught.value)
    assert f"`podman {command}" in said and ("another shape" in said or "nested too deep" in said), said
    assert len(said) < 700 and "\n" not in said


def test_an_answer_that_is_no_json_is_quoted_escaped_and_capped(tmp_path):
    exe = _script(tmp_path, "printf 'not json \\033[2J'; yes x | head -c 50000\n")
    with pytest.raises(podman.EngineError) as caught:
        podman.Podman(exe=exe).version()
    said = str(caught.value)
    assert "`podman version` answered no JSON: not json \\x1b[2J" in said and "more characters" in said and len(said) < 600


def test_ps_names_given_as_a_string_are_one_name_not_its_letters():
    assert [c.name for c in podman.containers_answer([{"Names": "envbuild-run-1", "State": "running"}])] == ["envbuild-run-1"]


def test_a_podman_that_never_answers_its_first_version_gives_up_naming_it(tmp_path, monkeypatch):
    """A hung podman (a stale lock) and the `sleep` it started, which holds its output open: given up at the first
    contact's deadline (not ENVBUILD_DOCKER_TIMEOUT's 600 s), the whole process group ended."""
    monkeypatch.setenv(podman.CONNECT_TIMEOUT_ENV, "1")
    exe = _script(tmp_path, "sleep 300 &\nwait\n")
    engine = podman.Podman(exe=exe)
    assert engine.timeout == 600 and engine.connect_timeout == 1
    with pytest.raises(podman.EngineError) as caught:
        engine.ping()
    assert f"{exe} did not answer within 1 s" in str(caught.value) and podman.CONNECT_TIMEOUT_ENV in str(caught.value)


def test_the_first_contact_deadline_is_short_by_default_and_never_longer_than_the_call_timeout(monkeypatch):
    monkeypatch.delenv(podman.CONNECT_TIMEOUT_ENV, raising=False)
    monkeypatch.delenv("ENVBUILD_DOCKER_TIMEOUT", raising=False)
    assert podman.Podman(exe="podman").connect_timeout == podman.CONNECT_TIMEOUT <= 15
    assert podman.Podman(timeout=3, exe="podman").connect_timeout == 3


@pytest.mark.parametrize("name", ["ENVBUILD_DOCKER_TIMEOUT", podman.CONNECT_TIMEOUT_ENV])
@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "inf", "1e9", "１０"])
def test_a_timeout_that_is_no_number_of_seconds_is_bad_input(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidInput, match=name):
        podman.Podman(exe="podman")
    if name == "ENVBUILD_DOCKER_TIMEOUT":  # Docker's engine reads it by the same rule
        from envbuild.engine.docker import Engine

        with pytest.raises(InvalidInput, match=name):
            Engine()


def test_doctor_json_prints_json_when_podmans_answer_has_another_shape(tmp_path):
    exe = _script(tmp_path, "case $1 in version) echo '{\"Client\": \"4.3.1\"}';; *) echo '[]';; esac\n")
    env = {**os.environ, "ENVBUILD_PODMAN": exe, "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    proc = subprocess.run([sys.executable, "-m", "envbuild", "doctor", "--backend", "cpu", "--matrix", str(MATRIX_PATH),
                           "--engine", "podman", "--json"], capture_output=True, text=True, env=env, timeout=120)
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert not checks["podman"]["ok"] and "`podman version` answered JSON of another shape" in checks["podman"]["detail"]


def test_subordinate_ids_are_read_in_ascii_digits_from_a_file_of_any_bytes(tmp_path):
    subuid = tmp_path / "subuid"
    subuid.write_bytes("me:100000:٦٥٥٣٦\nme:200000:65536\n".encode() + b"\xff\xfe not utf-8\n")
    assert podman._subids(subuid, "me", 1000) == 65536
    os.mkfifo(tmp_path / "fifo")
    assert podman._subids(tmp_path / "fifo", "me", 1000) == 0
