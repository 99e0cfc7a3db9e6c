"""Faults injected under envbuild, on the real engine and a real registry: the Docker daemon killed mid-build and
mid-smoke, a registry killed or its connection cut mid-push and mid-pull, 5xx answers, a registry that cannot be
reached, two runs at once, corrupt state, a full disk, SIGTERM. Each test asserts that nothing is lost, that
the message names the cause, and that a rerun after the fault clears succeeds.

Collected only with `pytest --faults` (scripts/test runs them after the rest): they kill and restart dockerd.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import testbed
from support.constants import MATRIX
from support.faultproxy import FaultProxy
from support.fixtures import start_registry

pytestmark = pytest.mark.docker

REPO = "envbuild-test/faults"


@pytest.fixture(scope="session", autouse=True)
def own_dockerd():
    """These tests kill dockerd: only where envbuild's tests started it (CI, scripts/test), never a system one."""
    if os.path.isdir("/run/systemd/system") and subprocess.run(["systemctl", "is-active", "--quiet", "docker"]).returncode == 0:
        if os.environ.get("CI"):
            pytest.fail("CI is set but dockerd is a systemd service here: the fault suite needs its own dockerd")
        pytest.skip("dockerd is a systemd service here: the fault suite kills dockerd only where scripts/test started it")
    if os.geteuid() != 0:
        pytest.fail("the fault suite kills and starts dockerd and mounts a tmpfs: run it as root (CI does)")
    yield
    testbed.start_dockerd()  # whatever happened, leave an engine that answers


def envbuild(*args, cwd: Path, timeout: int = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(["envbuild", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, **(env or {})})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


class Running:
    """envbuild in the background, its output in a file (so nothing blocks on a pipe)."""

    def __init__(self, *args, cwd: Path):
        self.out = cwd / f"out-{time.monotonic_ns()}.txt"
        self.fh = open(self.out, "w")
        self.proc = subprocess.Popen(["envbuild", *map(str, args)], cwd=cwd, stdout=self.fh, stderr=subprocess.STDOUT)

    def wait_for(self, text: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.out.read_text():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"ended before {text!r}:\n{self.out.read_text()}")
            time.sleep(0.2)
        raise AssertionError(f"no {text!r} within {timeout}s:\n{self.out.read_text()}")

    def finish(self, timeout: float = 300) -> tuple[int, str]:
        rc = self.proc.wait(timeout=timeout)
        self.fh.close()
        text = self.out.read_text()
        assert "Traceback" not in text, text
        return rc, text


def image_id(docker_client, ref: str) -> str | None:
    try:
        return docker_client.images.get(ref).id
    except Exception:  # absent
        return None


@pytest.fixture
def project(tmp_path, cpu_image) -> Path:
    """A project folder with the cpu image's locks (resolving them again costs seconds, not the point here)."""
    cpu_image.copy_locks(tmp_path)
    return tmp_path


def faults_set(cpu_image, *extra: str) -> list[str]:
    return [*cpu_image.overrides, "--set", f"image.repository={REPO}", *extra]


def build_args(cpu_image, wheelhouse, ca_bundle, *extra: str) -> list:
    return ["build", "--backend", "cpu", "--matrix", MATRIX, *faults_set(cpu_image), "--wheelhouse", wheelhouse,
            "--ca-bundle", ca_bundle, *extra]


# --- the Docker daemon dies -------------------------------------------------------------------------------------


# dockerd killed mid-build: tests/faults/test_build_cache_killed.py (the torch layer, at three moments).


def test_dockerd_killed_mid_smoke_leaves_nothing_that_clean_does_not_remove(cpu_image, tmp_path, docker_client):
    running = Running("smoke", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, cwd=tmp_path)
    running.wait_for("smoke:")
    time.sleep(4)  # the probe is running in its container
    testbed.kill_dockerd()
    try:
        rc, out = running.finish(timeout=180)
    finally:
        testbed.start_dockerd()
    assert rc != 0 and "daemon" in out.lower(), out
    cleaned = envbuild("clean", "--json", cwd=tmp_path)
    assert cleaned.returncode == 0, cleaned.stderr
    left = docker_client.containers.list(all=True, filters={"label": "dev.envbuild.owned"})
    assert left == [], [c.name for c in left]
    # and smoke works again on the restarted daemon
    again = envbuild("smoke", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr


# --- the registry dies, cuts the connection, answers 5xx, cannot be reached ----------------------------------------


@pytest.fixture
def own_registry(tmp_path):
    reg = start_registry(tmp_path / "registry")
    yield reg
    reg.stop()


def publish_args(cpu_image, registry: str, manifest: Path) -> list:
    return ["publish", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--registry", f"{registry}/envbuild",
            "--image", cpu_image.tag, "--manifest", manifest]


def test_registry_killed_mid_push_changes_no_manifest_and_the_rerun_completes(own_registry, cpu_image, tmp_path, docker_client):
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"schema": 1, "images": {"cuda": {"backend": "cuda", "digest": "sha256:' + "a" * 64 + '"}}}\n')
    before = manifest.read_bytes()
    running = Running(*publish_args(cpu_image, own_registry.host, manifest), cwd=tmp_path)
    running.wait_for("pushing")
    time.sleep(2)
    own_registry.kill()
    rc, out = running.finish(timeout=300)
    assert rc != 0 and own_registry.host in out, out
    assert manifest.read_bytes() == before
    # the temporary local tags made for the push went with it
    assert not [t for img in docker_client.images.list() for t in img.tags if t.startswith(own_registry.host)]
    own_registry.restart()
    again = envbuild(*publish_args(cpu_image, own_registry.host, manifest), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert set(json.loads(manifest.read_text())["images"]) == {"cpu", "cuda"}


@pytest.fixture
def unique_image(own_registry, base_image, docker_client, cpu_image):
    """An image only the registry has (a 48 MiB layer of random bytes): pushed under the cpu backend's tags, then
    removed here, so that a pull really downloads it."""
    import io

    dockerfile = f"FROM {base_image}\nRUN head -c 50331648 /dev/urandom > /blob\n"
    image, _ = docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), nocache=True, rm=True)
    from envbuild.matrix import load

    m = load(MATRIX, [o for o in cpu_image.overrides if o != "--set"])
    tags = [t.rsplit(":", 1)[1] for t in m.tags(m.backend("cpu"))]
    for tag in tags:
        image.tag(f"{own_registry.host}/envbuild", tag)
        for line in docker_client.images.push(f"{own_registry.host}/envbuild", tag=tag, stream=True, decode=True):
            assert "error" not in line, line
    docker_client.images.remove(image.id, force=True)
    return own_registry, image.id


def test_a_pull_whose_connections_are_cut_tags_nothing_and_the_rerun_completes(unique_image, cpu_image, tmp_path, docker_client):
    registry, image = unique_image
    from envbuild.matrix import load

    m = load(MATRIX, [o for o in cpu_image.overrides if o != "--set"])
    pinned = m.tags(m.backend("cpu"))[1].rsplit(":", 1)[1]  # what pull asks for by default
    proxy = FaultProxy(("127.0.0.1", int(registry.host.rsplit(":", 1)[1])), mode="cut", after=4 << 20).start()
    ref = f"{proxy.host}/envbuild:{pinned}"
    # pull tags what it pulled as the matrix's REPO:cpu: a repository of its own, so the session's cpu image stays
    pull = ["pull", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--set", "image.repository=envbuild-test/faults-pulled",
            "--registry", f"{proxy.host}/envbuild"]
    try:
        start = time.monotonic()
        # the daemon retries each cut download for minutes; envbuild gives a transfer that moves nothing 10 s
        failed = envbuild(*pull, cwd=tmp_path, timeout=600, env={"ENVBUILD_STALL_SECONDS": "10"})
        assert failed.returncode != 0 and proxy.host in failed.stderr, failed.stderr
        assert "no data moved for 10s" in failed.stderr and "gave up after 3 attempts in" in failed.stderr
        assert time.monotonic() - start < 300 and proxy.hits > 0
        assert image_id(docker_client, ref) is None  # no tag names a half-pulled image
        proxy.mode = "pass"
        again = envbuild(*pull, cwd=tmp_path, timeout=600)
        assert again.returncode == 0, again.stderr
        assert image_id(docker_client, ref) == image
    finally:
        proxy.stop()
        try:
            docker_client.images.remove(image, force=True)
        except Exception:
            pass


@pytest.fixture
def small_cpu_image(base_image, cpu_image, docker_client):
    """What publish checks of the cpu image (its dev.envbuild.* labels) on the base and a 16 MiB layer: a push of
    seconds where the retries, not the bytes, are the point."""
    import io

    labels = docker_client.images.get(cpu_image.image_id).labels or {}
    # not its content key: this is other content, and with the cpu image's key publish would move its tags there
    lines = "".join(f"LABEL {json.dumps(k)}={json.dumps(v)}\n" for k, v in labels.items()
                    if k.startswith("dev.envbuild.") and k != "dev.envbuild.content")
    dockerfile = f"FROM {base_image}\nRUN head -c 16777216 /dev/urandom > /blob\n{lines}"
    tag = f"{REPO}-small:cpu"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), rm=True, tag=tag)
    yield tag
    try:
        docker_client.images.remove(tag, force=True)
    except Exception:
        pass


def test_a_registry_answering_503_is_retried_then_named(small_cpu_image, cpu_image, tmp_path, own_registry):
    """503 to every request: the daemon retries each upload four times (50 s), then envbuild says so, names the
    registry and tries again; the registry answers again and the publish completes. (Giving up after the third
    attempt: the pull test below.)"""
    proxy = FaultProxy(("127.0.0.1", int(own_registry.host.rsplit(":", 1)[1])), mode="503").start()
    args = ["publish", "--backend", "cpu", "--matrix", MATRIX, *cpu_image.overrides, "--registry", f"{proxy.host}/envbuild",
            "--image", small_cpu_image, "--manifest", tmp_path / "m.json"]
    try:
        running = Running(*args, cwd=tmp_path)
        running.wait_for("trying again in 1s (attempt 2 of 3)", timeout=240)
        assert not (tmp_path / "m.json").exists()  # nothing recorded while it failed
        hits, proxy.mode = proxy.hits, "pass"
        rc, out = running.finish(timeout=300)
    finally:
        proxy.stop()
    assert hits >= 1 and proxy.host in out and "503" in out, out
    assert rc == 0, out
    assert "cpu" in json.loads((tmp_path / "m.json").read_text())["images"]


@pytest.fixture
def dropped() -> str:
    """A loopback port whose packets are dropped (an iptables rule): a connection to it can only time out."""
    port = testbed.free_port()
    rule = ["OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", str(port), "-j", "DROP"]
    subprocess.run(["iptables", "-I", *rule], check=True)
    yield f"127.0.0.1:{port}"
    subprocess.run(["iptables", "-D", *rule], check=False)


@pytest.mark.parametrize("where", ["no-dns", "dropped"])
def test_a_registry_that_cannot_be_reached_fails_in_seconds(where, cpu_image, tmp_path, request):
    address = "no-such-registry.invalid" if where == "no-dns" else request.getfixturevalue("dropped")
    start = time.monotonic()
    proc = envbuild(*publish_args(cpu_image, address, tmp_path / "m.json"), cwd=tmp_path, timeout=120)
    assert proc.returncode != 0 and f"registry {address} unreachable from here" in proc.stderr, proc.stderr
    assert time.monotonic() - start < 30  # one 10 s connection check, not the content query's timeouts before it


# --- two runs at once -------------------------------------------------------------------------------------------


def _record(args):
    from envbuild.ship import manifest

    path, i = args
    manifest.record(Path(path), {"backend": f"b{i:02d}", "digest": "sha256:" + f"{i:064x}"})


def test_concurrent_publishes_keep_every_manifest_entry(tmp_path):
    path = tmp_path / "manifest.json"
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        pool.map(_record, [(str(path), i) for i in range(24)])
    doc = json.loads(path.read_text())
    assert sorted(doc["images"]) == [f"b{i:02d}" for i in range(24)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]  # no lock or temporary file left


def test_two_builds_of_one_backend_wait_for_each_other(project, cpu_image, wheelhouse, ca_bundle, docker_client):
    args = build_args(cpu_image, wheelhouse, ca_bundle, "--build-arg", "FAULT=twice")
    first = Running(*args, cwd=project)
    first.wait_for("building")
    second = Running(*args, cwd=project)
    rc1, out1 = first.finish()
    rc2, out2 = second.finish()
    assert (rc1, rc2) == (0, 0), out1 + out2
    assert "waiting for another envbuild that holds the cpu build" in out2
    assert "up to date" in out2  # it found the first one's good build, not a half-written record
    record = json.loads((project / ".envbuild" / "context" / "cpu" / "last-build.json").read_text())
    assert record["image_id"] == image_id(docker_client, f"{REPO}:cpu")


# --- corrupt state ------------------------------------------------------------------------------------------------


def test_corrupt_state_is_named_or_rebuilt_never_trusted(project, cpu_image, wheelhouse, ca_bundle, tmp_path):
    args = build_args(cpu_image, wheelhouse, ca_bundle)
    assert envbuild(*args, cwd=project).returncode == 0
    record = project / ".envbuild" / "context" / "cpu" / "last-build.json"
    record.write_text(record.read_text()[: len(record.read_text()) // 2])  # truncated
    rebuilt = envbuild(*args, cwd=project)
    assert rebuilt.returncode == 0 and "up to date" not in rebuilt.stderr, rebuilt.stderr
    bad_manifest = tmp_path / "bad.json"
    bad_manifest.write_text('{"schema": 1, "images": ')
    proc = envbuild(*publish_args(cpu_image, "127.0.0.1:1", bad_manifest), cwd=tmp_path)
    assert proc.returncode == 2 and str(bad_manifest) in proc.stderr and bad_manifest.read_text() == '{"schema": 1, "images": '
    lock = project / "locks" / "cpu" / "linux-amd64.txt"
    lock.write_text(lock.read_text() + "this is not a requirement line\n")
    proc = envbuild(*args, cwd=project)
    assert proc.returncode != 0 and "locks/cpu/linux-amd64.txt" in proc.stderr, proc.stderr


# --- a full disk ------------------------------------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path):
    """A 512 KiB tmpfs; fill() takes the rest of it."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], check=True)

    def fill() -> None:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # ENOSPC: full
            pass
        finally:
            os.close(fd)

    yield mount, fill
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_gives_a_clear_error_and_keeps_the_previous_files(full_disk, cpu_image, wheelhouse, ca_bundle):
    from envbuild.core.errors import ManifestError
    from envbuild.ship import manifest as manifests

    mount, fill = full_disk
    out = mount / "dockerfiles"
    assert envbuild("render", "--matrix", MATRIX, "--output", out, cwd=mount).returncode == 0
    rendered = {p.name: p.read_bytes() for p in out.iterdir()}
    manifest = mount / "manifest.json"
    manifests.record(manifest, {"backend": "cuda", "digest": "sha256:" + "a" * 64})
    kept = manifest.read_bytes()
    fill()
    proc = envbuild("render", "--matrix", MATRIX, "--output", out, "--set", "transformers.version=5.22.0", cwd=mount)
    assert proc.returncode == 1 and "No space left on device" in proc.stderr, proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == rendered
    with pytest.raises(ManifestError, match="No space left on device"):
        manifests.record(manifest, {"backend": "cpu", "digest": "sha256:" + "b" * 64})
    assert manifest.read_bytes() == kept
    proc = envbuild(*build_args(cpu_image, wheelhouse, ca_bundle), cwd=mount)
    assert proc.returncode != 0 and "No space left on device" in proc.stderr, proc.stderr
    assert not [p for p in mount.rglob(".*.*") if p.is_file() and p.name.startswith(".manifest")]


# --- SIGTERM (a CI cancel) -------------------------------------------------------------------------------------


def _builders_running(context: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "build"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(context) in line]


def test_sigterm_during_build_stops_the_builder_and_moves_no_tag(project, cpu_image, wheelhouse, ca_bundle, docker_client):
    before = image_id(docker_client, f"{REPO}:cpu")
    running = Running(*build_args(cpu_image, wheelhouse, ca_bundle, "--no-cache", "--build-arg", "FAULT=sigterm"), cwd=project)
    running.wait_for("building")
    time.sleep(2)
    running.proc.send_signal(signal.SIGTERM)
    rc, out = running.finish(timeout=60)
    assert rc != 0 and "Interrupted" in out, out
    time.sleep(1)
    assert _builders_running(project / ".envbuild" / "context") == []
    assert image_id(docker_client, f"{REPO}:cpu") == before


def test_sigterm_during_publish_changes_no_manifest_and_leaves_no_tag(own_registry, cpu_image, tmp_path, docker_client):
    manifest = tmp_path / "manifest.json"
    running = Running(*publish_args(cpu_image, own_registry.host, manifest), cwd=tmp_path)
    running.wait_for("pushing")
    running.proc.send_signal(signal.SIGTERM)
    rc, out = running.finish(timeout=120)
    assert rc != 0 and not manifest.exists(), out
    assert not [t for img in docker_client.images.list() for t in img.tags if t.startswith(own_registry.host)]


def test_the_engine_answers_after_the_suite():
    assert testbed.engine_answers()
    assert shutil.which("docker")
