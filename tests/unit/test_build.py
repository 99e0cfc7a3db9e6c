"""The build plan, its key, the record of the last good build, the build context and the build flow, with the
fake engine (its scripted builder included). tests/engine/test_build_smoke.py builds for real."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.constants import MATRIX as MATRIX_PATH
from support.fakes import FakeEngine

from envbuild.engine import docker as docker_engine
from envbuild.image import build as imagebuild
from envbuild.image import builder, plan, records
from envbuild.image import build
from envbuild.image.status import StatusBoard
from envbuild.engine import owner
from envbuild.core.errors import BuildError, EnvbuildError
from envbuild.matrix import load
from envbuild.render import UV_STEP

MATRIX = load(MATRIX_PATH, ["backends.cpu.base_image=debian:bookworm-slim@sha256:" + "a" * 64])  # the lock asks no registry
CPU = MATRIX.backend("cpu")
LEGACY = builder.Builder(argv=("docker", "build"), env=(("DOCKER_BUILDKIT", "1"),), buildx=False)
BUILDX = builder.Builder(argv=("docker", "buildx", "build", "--load"), env=(), buildx=True)
BASE_ID = "sha256:" + "b" * 64


@pytest.fixture
def legacy(monkeypatch):
    monkeypatch.setattr(docker_engine, "find_builder", lambda: LEGACY)


@pytest.fixture
def engine() -> FakeEngine:
    e = FakeEngine()
    e.add_image(BASE_ID, [CPU.base_image])
    return e


def opts(tmp_path: Path, **kw: Any) -> plan.BuildOptions:
    return plan.BuildOptions(log_dir=tmp_path / "logs", context_dir=tmp_path / "ctx", locks_dir=tmp_path / "locks", **kw)


def make(tmp_path: Path, engine: FakeEngine, environ: dict[str, str] | None = None, **kw: Any) -> plan.BuildPlan:
    env = {"HOME": str(tmp_path), "DOCKER_CONFIG": str(tmp_path / "docker-config"), **(environ or {})}
    return plan.make_plan(MATRIX, CPU, opts(tmp_path, **kw), engine, env)


# --- the key ---------------------------------------------------------------------------------------------------


def _changed(value: Any) -> Any:
    """Another value of the same kind: the generated test below changes one field at a time."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, bytes):
        return value + b"#"
    if isinstance(value, str):
        return value + "x"
    if value is None:
        return "sha256:" + "c" * 64
    if isinstance(value, tuple):
        if value and isinstance(value[0], plan.Wheel):
            return value[:-1] + (dataclasses.replace(value[-1], sha256="0" * 64),)
        if value and isinstance(value[0], tuple):
            return value[:-1] + ((value[-1][0], (value[-1][1] or "") + "x"),)
        return value + ("x",)
    raise AssertionError(f"no way to change a {type(value).__name__}: teach _changed about it")


def test_every_field_of_the_plan_changes_the_key(tmp_path, engine, legacy):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0-cp311-none-any.whl").write_bytes(b"x" * 10)
    p = make(tmp_path, engine, {"ENVBUILD_X": "1"}, wheelhouse=wheels, build_args=("ENVBUILD_X",))
    key = p.key()
    assert p.key() == key and dataclasses.replace(p).key() == key
    names = [f.name for f in dataclasses.fields(plan.BuildPlan)]
    assert len(names) >= 10
    for name in names:
        other = dataclasses.replace(p, **{name: _changed(getattr(p, name))})
        assert other.key() != key, f"changing {name} leaves the key as it is"


def test_a_pass_through_build_arg_takes_its_value_into_the_key(tmp_path, engine, legacy):
    one = make(tmp_path, engine, {"PIP_INDEX": "https://a.example/simple"}, build_args=("PIP_INDEX",))
    two = make(tmp_path, engine, {"PIP_INDEX": "https://b.example/simple"}, build_args=("PIP_INDEX",))
    unset = make(tmp_path, engine, {}, build_args=("PIP_INDEX",))
    assert len({one.key(), two.key(), unset.key()}) == 3
    assert "https://a.example/simple" not in " ".join(one.argv)  # the value goes to the builder through the environment


def test_a_given_build_arg_value_is_in_the_key_but_not_on_the_argv(tmp_path, engine, legacy):
    one = make(tmp_path, engine, {}, build_args=("TOKEN_ARG=value-one",))
    two = make(tmp_path, engine, {}, build_args=("TOKEN_ARG=value-two",))
    assert one.key() != two.key()
    assert "value-one" not in " ".join(one.argv) and "TOKEN_ARG" in one.argv


# Written out here, not read from plan.STEERING: a name dropped there must fail this test.
STEERING_ENV = (
    "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_API_VERSION",
    "DOCKER_BUILDKIT", "DOCKER_DEFAULT_PLATFORM", "BUILDX_BUILDER", "BUILDX_CONFIG", "BUILDKIT_HOST",
    "SOURCE_DATE_EPOCH", "ENVBUILD_DOCKER",
)


@pytest.mark.parametrize("name", STEERING_ENV)
def test_the_environment_that_steers_the_build_is_in_the_key(tmp_path, engine, legacy, name):
    base = {"DOCKER_CONFIG": str(tmp_path / "docker-config")}
    assert make(tmp_path, engine, {**base, name: "1"}).key() != make(tmp_path, engine, base).key()
    assert make(tmp_path, engine, {**base, name: "1"}).key() != make(tmp_path, engine, {**base, name: "2"}).key()


def _wheelhouse(tmp_path: Path, content: bytes = b"x" * 10, name: str = "torch-2.13.0-cp311-none-any.whl") -> Path:
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    for old in wheels.iterdir():
        old.unlink()
    (wheels / name).write_bytes(content)
    os.utime(wheels / name, ns=(10**18, 10**18))
    return wheels


def _input_changes(tmp_path: Path, engine: FakeEngine, monkeypatch) -> dict[str, Any]:
    """Each input of a build, changed in the world one at a time (not the plan's fields rewritten): what the test
    below requires the key to notice. Each entry returns the plan made after its change."""
    env = {"HOME": str(tmp_path), "DOCKER_CONFIG": str(tmp_path / "docker-config")}

    def again(environ: dict[str, str] | None = None, lock: bytes = b"", **kw: Any) -> plan.BuildPlan:
        return plan.make_plan(MATRIX, CPU, opts(tmp_path, **kw), engine, env if environ is None else environ, lock)

    def other_engine_host() -> plan.BuildPlan:
        other = FakeEngine()
        other.add_image(BASE_ID, [CPU.base_image])
        other.host = "tcp://elsewhere:2376"
        return plan.make_plan(MATRIX, CPU, opts(tmp_path), other, env)

    def newer_base() -> plan.BuildPlan:
        engine.add_image("sha256:" + "d" * 64, [CPU.base_image])
        return again()

    def buildx_selected() -> plan.BuildPlan:
        (tmp_path / "docker-config" / "buildx").mkdir(parents=True)
        (tmp_path / "docker-config" / "buildx" / "current").write_text(json.dumps({"Name": "remote-builder"}))
        return again()

    def builder_env() -> plan.BuildPlan:
        monkeypatch.setattr(docker_engine, "find_builder", lambda: dataclasses.replace(LEGACY, env=(("DOCKER_BUILDKIT", "0"),)))
        return again()

    def builder_client() -> plan.BuildPlan:
        monkeypatch.setattr(docker_engine, "find_builder", lambda: dataclasses.replace(LEGACY, argv=("/opt/docker", "build")))
        return again()

    def probe() -> plan.BuildPlan:
        (tmp_path / "probe.py").write_bytes(b"print('another probe')\n")
        monkeypatch.setattr(plan, "PROBE", tmp_path / "probe.py")
        return again()

    def template_input() -> plan.BuildPlan:
        return plan.make_plan(MATRIX, dataclasses.replace(CPU, env=(("A", "1"),)), opts(tmp_path), engine, env)

    def wheel_content() -> plan.BuildPlan:  # same name, size and mtime: only the bytes differ
        _wheelhouse(tmp_path)
        plan.make_plan(MATRIX, CPU, opts(tmp_path, wheelhouse=tmp_path / "wheels"), engine, env)
        return plan.make_plan(MATRIX, CPU, opts(tmp_path, wheelhouse=_wheelhouse(tmp_path, b"y" * 10)), engine, env)

    def secret_file(option: str) -> Any:
        def change() -> plan.BuildPlan:
            (tmp_path / option).write_text("secret")
            return again(**{option: tmp_path / option})
        return change

    return {
        "engine host": other_engine_host,
        "base image id": newer_base,
        "buildx selected builder": buildx_selected,
        "builder environment": builder_env,
        "builder client": builder_client,
        "probe": probe,
        "template input": template_input,
        "lock": lambda: again(lock=b"torch==2.13.0\n"),
        "context folder": lambda: plan.make_plan(MATRIX, CPU, dataclasses.replace(opts(tmp_path), context_dir=tmp_path / "ctx2"), engine, env),
        "wheel added": lambda: again(wheelhouse=_wheelhouse(tmp_path)),
        "wheel content": wheel_content,
        "pass-through build-arg value": lambda: plan.make_plan(MATRIX, CPU, opts(tmp_path, build_args=("PIP_X",)), engine, {**env, "PIP_X": "1"}),
        **{f"${name}": (lambda name=name: again(environ={**env, name: "1"})) for name in STEERING_ENV if name != "DOCKER_CONFIG"},
        "$DOCKER_CONFIG": lambda: again(environ={**env, "DOCKER_CONFIG": str(tmp_path / "other-config")}),
        "--label": lambda: again(labels=("a=b",)),
        "--tag": lambda: again(tags=("r:x",)),
        "--build-arg": lambda: again(build_args=("A=1",)),
        "--cache-from": lambda: again(cache_from=("reg/cache:cpu",)),
        "--mirror": lambda: again(mirrors=("docker.io=mirror.test:5000",)),
        "--no-cache": lambda: again(no_cache=True),
        "--platform": lambda: again(platform="linux/arm64"),
        "--network": lambda: again(network="host"),
        "--netrc": secret_file("netrc"),
        "--ca-bundle": secret_file("ca_bundle"),
    }


INPUTS = list(_input_changes(Path("/nonexistent"), None, None))


@pytest.mark.parametrize("what", INPUTS)
def test_each_input_of_a_build_changes_the_key(tmp_path, engine, legacy, monkeypatch, what):
    before = make(tmp_path, engine)
    after = _input_changes(tmp_path, engine, monkeypatch)[what]()
    assert after.key() != before.key(), f"{what} changed and the key did not"


def test_the_test_s_inputs_cover_the_keyed_environment():
    """The other way round: an input added to the plan's environment needs its row in INPUTS."""
    assert set(plan.STEERING) <= set(STEERING_ENV)


def test_the_base_image_as_the_engine_holds_it_is_in_the_key(tmp_path, engine, legacy):
    key = make(tmp_path, engine).key()
    engine.add_image("sha256:" + "d" * 64, [CPU.base_image])  # a newer base pulled since
    assert make(tmp_path, engine).key() != key


def test_envbuild_s_own_template_and_probe_are_in_the_key(tmp_path, engine, legacy, monkeypatch):
    key = make(tmp_path, engine).key()
    monkeypatch.setattr(plan, "PROBE", tmp_path / "probe.py")
    (tmp_path / "probe.py").write_bytes(b"print('another probe')\n")
    assert make(tmp_path, engine).key() != key
    monkeypatch.undo()
    monkeypatch.setattr(docker_engine, "find_builder", lambda: LEGACY)
    edited = MATRIX.backend("cpu")
    other = plan.make_plan(MATRIX, dataclasses.replace(edited, env=(("A", "1"),)), opts(tmp_path), engine,
                           {"HOME": str(tmp_path), "DOCKER_CONFIG": str(tmp_path / "docker-config")})
    assert other.key() != key and b'A="1"' in other.dockerfile


@pytest.mark.parametrize("option", [
    {"labels": ("a=b",)}, {"tags": ("r:x",)}, {"build_args": ("A=1",)}, {"cache_from": ("reg/cache:cpu",)},
    {"mirrors": ("docker.io=mirror.test:5000",)}, {"netrc": "netrc"}, {"ca_bundle": "ca"},
], ids=lambda o: next(iter(o)))
def test_every_option_is_in_the_key(tmp_path, engine, legacy, option):
    name, value = next(iter(option.items()))
    if isinstance(value, str):  # a secret file: its path goes to the builder
        (tmp_path / value).write_text("secret")
        value = tmp_path / value
    assert make(tmp_path, engine, **{name: value}).key() != make(tmp_path, engine).key()


# --- when the record may answer --------------------------------------------------------------------------------


@pytest.mark.parametrize("option, environ", [
    ({"no_cache": True}, {}), ({"platform": "linux/amd64"}, {}), ({"cache_to": ("type=inline",)}, {}),
    ({}, {"DOCKER_DEFAULT_PLATFORM": "linux/arm64"}),
])
def test_only_a_plain_build_by_the_engine_may_be_answered_from_the_record(tmp_path, engine, monkeypatch, option, environ):
    monkeypatch.setattr(docker_engine, "find_builder", lambda: BUILDX)
    assert make(tmp_path, engine).answerable
    assert not make(tmp_path, engine, environ, **option).answerable


def test_a_buildx_builder_of_its_own_resolves_the_base_itself(tmp_path, engine, monkeypatch):
    monkeypatch.setattr(docker_engine, "find_builder", lambda: BUILDX)
    assert not make(tmp_path, engine, builder="remote").answerable
    assert not make(tmp_path, engine, {"BUILDX_BUILDER": "remote"}).answerable
    current = tmp_path / "docker-config" / "buildx" / "current"
    current.parent.mkdir(parents=True)
    current.write_text('{"Key": "unix:///var/run/docker.sock", "Name": "remote", "Global": false}')
    selected = make(tmp_path, engine)
    assert not selected.answerable
    current.write_text('{"Key": "unix:///var/run/docker.sock", "Name": "default", "Global": false}')
    assert make(tmp_path, engine).answerable and make(tmp_path, engine).key() != selected.key()


def test_a_base_the_engine_does_not_hold_is_never_answered(tmp_path, legacy):
    """BuildKit asks the registry for such a base on every build; so must we (no record, no shortcut)."""
    p = make(tmp_path, FakeEngine())
    assert p.base_id is None and not p.answerable
    records.remember(p, "sha256:img")
    assert not (p.context_path / records.RECORD).exists()


def test_the_record_answers_only_its_plan_with_every_tag_in_place(tmp_path, engine, legacy):
    p = make(tmp_path, engine)
    image = "sha256:" + "e" * 64
    engine.add_image(image, list(p.tags))
    assert records.answer(p, engine) is None  # nothing recorded yet
    records.remember(p, image)
    assert records.answer(p, engine) == image
    assert records.answer(make(tmp_path, engine, labels=("a=b",)), engine) is None  # another plan
    engine.untag(p.tags[1])
    assert records.answer(p, engine) is None  # a tag moved away: build (which puts it back)
    engine.tag(image, [p.tags[1]])
    (p.context_path / records.RECORD).write_text("{truncated")
    assert records.answer(p, engine) is None  # a record that cannot be read is no record


# --- the context is written from the plan ----------------------------------------------------------------------


def test_the_context_holds_the_plan_s_bytes_not_a_second_read(tmp_path, engine, legacy):
    assert make(tmp_path, engine).uv_step == UV_STEP.read_bytes()  # the install steps' script: in the key
    p = dataclasses.replace(make(tmp_path, engine), dockerfile=b"FROM scratch\n", probe=b"print('planned')\n",
                            uv_step=b"true\n")
    plan.write_context(p)
    assert (p.context_path / "Dockerfile").read_bytes() == b"FROM scratch\n"
    assert (p.context_path / "uv-step.sh").read_bytes() == b"true\n"
    assert (p.context_path / "probe.py").read_bytes() == b"print('planned')\n"
    assert os.stat(p.context_path / "probe.py").st_mode & 0o777 == 0o755


def test_the_wheelhouse_is_linked_once_and_unchanged_files_stay_untouched(tmp_path, engine, legacy):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0-cp311-none-any.whl").write_bytes(b"x" * 1000)
    (wheels / "README.txt").write_text("not a wheel")
    p = make(tmp_path, engine, wheelhouse=wheels)
    assert [w.name for w in p.wheels] == ["torch-2.13.0-cp311-none-any.whl"]
    plan.write_context(p)

    def sent() -> dict[str, tuple[int, int]]:  # what the builder reads, by mtime and inode
        files = [p.context_path / "Dockerfile", p.context_path / "probe.py", *(p.context_path / "wheelhouse").iterdir()]
        return {q.name: (q.stat().st_mtime_ns, q.stat().st_ino) for q in files}

    first = sent()
    assert (p.context_path / ".dockerignore").read_text().split() == [records.RECORD, plan.DIGESTS, plan.FRESH_CACHE]
    time.sleep(0.01)
    again = make(tmp_path, engine, wheelhouse=wheels)
    assert again.key() == p.key()  # linking changed the wheel's ctime: rehashed, same content, same key
    plan.write_context(again)
    assert sent() == first
    # A wheel gone from the wheelhouse leaves the context; a new one arrives.
    (wheels / "torch-2.13.0-cp311-none-any.whl").unlink()
    (wheels / "extra-1.0-py3-none-any.whl").write_bytes(b"y")
    plan.write_context(make(tmp_path, engine, wheelhouse=wheels))
    assert sorted(q.name for q in (p.context_path / "wheelhouse").iterdir()) == ["extra-1.0-py3-none-any.whl"]


def test_a_wheel_rewritten_with_the_same_size_and_mtime_is_another_key(tmp_path, engine, legacy):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / "a-1-py3-none-any.whl"
    wheel.write_bytes(b"aaaa")
    key = make(tmp_path, engine, wheelhouse=wheels).key()
    st = wheel.stat()
    wheel.write_bytes(b"bbbb")
    os.utime(wheel, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert make(tmp_path, engine, wheelhouse=wheels).key() != key


def test_a_wheel_that_changes_after_planning_is_refused(tmp_path, engine, legacy):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "a-1-py3-none-any.whl").write_bytes(b"a")
    p = make(tmp_path, engine, wheelhouse=wheels)
    (wheels / "a-1-py3-none-any.whl").write_bytes(b"changed")
    with pytest.raises(BuildError, match="changed while the build was being planned"):
        plan.write_context(p)


def test_a_missing_wheelhouse_is_a_clear_error(tmp_path, engine, legacy):
    with pytest.raises(EnvbuildError, match="no such directory"):
        make(tmp_path, engine, wheelhouse=tmp_path / "absent")


# --- the builder's command line --------------------------------------------------------------------------------


def _argv(client, **kw):
    return plan.command(client, Path("/ctx"), plan.BuildOptions(**kw), ("r/e:cpu",))


def test_secrets_go_as_files_never_as_values(tmp_path):
    ca = tmp_path / "ca.pem"
    argv = plan.command(LEGACY, tmp_path, plan.BuildOptions(ca_bundle=ca, build_args=("A=1",), no_cache=True),
                        ("r/e:cpu", "r/e:cpu-pinned"))
    assert argv[:2] == ["docker", "build"]
    assert f"id=ca_bundle,src={ca}" in argv
    # BuildKit names the image only when the whole build succeeded (test_failed_build_keeps_the_old_tag
    # proves it on a real engine), so the tags go to the builder itself.
    assert argv.count("-t") == 2 and "r/e:cpu-pinned" in argv
    assert argv[-1] == str(tmp_path)
    with pytest.raises(EnvbuildError, match="buildx"):
        plan.command(LEGACY, tmp_path, plan.BuildOptions(cache_to=("type=local,dest=x",)), ())


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


# --- the build, with a fake builder process --------------------------------------------------------------------


@pytest.fixture
def fake_builder(monkeypatch, legacy, engine):
    """The engine's scripted builder (FakeEngine.start_client); a client started around the engine fails the test."""
    monkeypatch.setattr(builder.engine, "start_client", lambda *a: pytest.fail("a builder was started around the engine"))
    return engine


def builds(calls: list[list[str]]) -> list[list[str]]:
    return [c for c in calls if "--target" not in c]


def test_an_unchanged_plan_is_answered_without_the_builder(tmp_path, engine, fake_builder, monkeypatch):
    first = build.build(MATRIX, CPU, opts(tmp_path), engine, echo=lambda s: None)
    assert first.ok and not first.up_to_date and len(builds(engine.builds)) == 1
    # the image this folder's build made: `envbuild clean` takes it (untagged later) as this checkout's
    assert owner.images_made(opts(tmp_path).context_dir.parent / owner.IMAGES_MADE.name) == [first.image_id]
    engine.add_image(first.image_id, first.tags)  # BuildKit tagged it
    again = build.build(MATRIX, CPU, opts(tmp_path), engine, echo=lambda s: None)
    assert again.ok and again.up_to_date and again.image_id == first.image_id and len(builds(engine.builds)) == 1
    # a pass-through build argument whose value changed: the builder runs again
    monkeypatch.setenv("ENVBUILD_TEST_ARG", "one")
    build.build(MATRIX, CPU, opts(tmp_path, build_args=("ENVBUILD_TEST_ARG",)), engine, echo=lambda s: None)
    assert len(builds(engine.builds)) == 2
    assert build.build(MATRIX, CPU, opts(tmp_path, build_args=("ENVBUILD_TEST_ARG",)), engine, echo=lambda s: None).up_to_date
    monkeypatch.setenv("ENVBUILD_TEST_ARG", "two")
    assert not build.build(MATRIX, CPU, opts(tmp_path, build_args=("ENVBUILD_TEST_ARG",)), engine, echo=lambda s: None).up_to_date
    assert len(builds(engine.builds)) == 3
    assert len(engine.builds) == 4  # the lock was resolved once, by the first build


def test_a_failed_build_leaves_no_record(tmp_path, engine, fake_builder, monkeypatch):
    ok = build.build(MATRIX, CPU, opts(tmp_path), engine, echo=lambda s: None)
    engine.add_image(ok.image_id, ok.tags)
    engine.build_rc = 1
    engine.build_lines = ["#5 ERROR: process did not complete successfully: exit code: 1"]
    failed = build.build(MATRIX, CPU, opts(tmp_path, labels=("a=b",)), engine, echo=lambda s: None)
    assert not failed.ok and "exit code: 1" in failed.error and failed.log.read_text().startswith("$ docker build")
    assert not (tmp_path / "ctx" / "cpu" / records.RECORD).exists()


def test_platforms_are_built_one_at_a_time_and_only_those_the_backend_lists(monkeypatch, tmp_path, engine, fake_builder):
    monkeypatch.setattr(docker_engine, "find_builder", lambda: BUILDX)
    with pytest.raises(EnvbuildError, match="'linux/amd64,linux/arm64' is several platforms; one is taken here .`envbuild publish --platform` joins"):
        build.build(MATRIX, CPU, opts(tmp_path, platform="linux/amd64,linux/arm64"), engine, echo=lambda s: None)
    with pytest.raises(EnvbuildError, match=r"--platform linux/s390x: backend cpu lists linux/amd64, linux/arm64"):
        build.build(MATRIX, CPU, opts(tmp_path, platform="linux/s390x"), engine, echo=lambda s: None)
    assert builds(engine.builds) == []


def test_another_architecture_without_emulation_names_the_fix(monkeypatch, tmp_path, engine, fake_builder):
    from envbuild.core import platform as platforms

    monkeypatch.setattr(platforms, "host_platform", lambda *a: "linux/amd64")
    monkeypatch.setattr(platforms, "BINFMT", str(tmp_path / "no-binfmt"))
    with pytest.raises(EnvbuildError) as info:
        build.build(MATRIX, CPU, opts(tmp_path, platform="linux/arm64"), engine, echo=lambda s: None)
    said = str(info.value)
    assert "building cpu for linux/arm64 needs linux/arm64, which this host (linux/amd64) cannot run" in said
    assert "apt-get install qemu-user-static binfmt-support" in said and "update-binfmts --enable qemu-aarch64" in said
    assert builds(engine.builds) == []


def test_emulation_is_read_from_binfmt_misc(tmp_path):
    from envbuild.core import platform as platforms

    folder = tmp_path / "proc/sys/fs/binfmt_misc"
    folder.mkdir(parents=True)
    assert platforms.can_run("linux/arm64", str(tmp_path), "linux/amd64") == (
        False, False, "binfmt_misc is not mounted at /proc/sys/fs/binfmt_misc")
    (folder / "status").write_text("enabled\n")
    entry = "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: {}\noffset 0\n"
    (folder / "qemu-aarch64").write_text(entry.format("P"))
    runs, emulated, how = platforms.can_run("linux/arm64", str(tmp_path), "linux/amd64")
    assert not runs and "lacks flag F" in how
    (folder / "qemu-aarch64").write_text(entry.format("PF"))
    assert platforms.can_run("linux/arm64", str(tmp_path), "linux/amd64")[:2] == (True, True)
    assert platforms.can_run("linux/amd64", str(tmp_path), "linux/amd64")[:2] == (True, False)
    assert platforms.can_run("linux/amd64", str(tmp_path), "linux/arm64")[2] == "no binfmt entry qemu-x86_64 in /proc/sys/fs/binfmt_misc"


def test_a_build_that_cannot_reach_the_daemon_says_what_to_do(monkeypatch, tmp_path, engine, fake_builder):
    build.build(MATRIX, CPU, opts(tmp_path), engine, echo=lambda s: None)  # the lock
    engine.build_rc = 1
    engine.build_lines = [
        "ERROR: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"]
    with pytest.raises(EnvbuildError, match="cannot reach the Docker daemon.*apt-get install docker.io"):
        build.build(MATRIX, CPU, opts(tmp_path), engine, echo=lambda s: None)


def test_a_daemon_that_died_mid_build_is_named_whatever_the_client_said(monkeypatch, tmp_path, engine, fake_builder):
    from envbuild.engine import docker as engines

    build.build(MATRIX, CPU, opts(tmp_path), engine, echo=lambda s: None)  # the lock
    engine.build_rc = 1
    engine.build_lines = ["cannot write /tmp/x/iid because server did not provide an image ID"]

    def gone():
        raise engines.Unreachable(engine.host, "connection refused")

    monkeypatch.setattr(engine, "ping", gone)
    with pytest.raises(engines.Unreachable, match="Docker daemon.*stopped answering during the build.*no.*image ID"):
        build.build(MATRIX, CPU, opts(tmp_path, labels=("x=y",)), engine, echo=lambda s: None)
    assert not (tmp_path / "ctx" / "cpu" / records.RECORD).exists()


def test_build_many_runs_jobs_at_once_and_keeps_the_order(monkeypatch):
    running, peak, lock = [0], [0], threading.Lock()
    names = [b.name for b in MATRIX.containerizable()][:4]

    def fake_build(matrix, backend, opts, engine, *, echo=print, verbose=False, locked=False, status=None):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        if status:
            status("1/1 RUN something")
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        if backend.name == names[1]:
            raise BuildError("base image not found")
        return imagebuild.BuildResult(backend=backend.name, ok=True, tags=[f"r:{backend.name}"], image_id="sha256:1")

    monkeypatch.setattr(build, "build", fake_build)
    chosen = [MATRIX.backend(n) for n in names]
    board = StatusBoard(names, stream=io.StringIO())
    with board:
        results = build.build_many(MATRIX, chosen, plan.BuildOptions(), FakeEngine(), jobs=2, board=board)
    assert [r.backend for r in results] == names
    assert peak[0] == 2
    assert [r.ok for r in results] == [True, False, True, True] and "base image not found" in results[1].error
    assert board.state[names[1]] == "FAILED" and board.state[names[0]] == "ok"
