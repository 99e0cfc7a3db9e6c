"""Publish/pull logic with the fake engine: credentials, names, error messages, the manifest, smoke summaries,
and the push/pull paths a real registry rarely shows (a push that breaks off, a tag that moves mid-pull).

Fakes are fine here, never as proof that a push works: tests/engine/test_publish.py pushes and pulls for real.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.constants import MATRIX as MATRIX_PATH
from support.fakes import FakeEngine

from envbuild.maintain import ci
from envbuild.report import report
from envbuild.engine.docker import StreamBroken
from envbuild.core.errors import (
    DigestMismatchError,
    EnvbuildError,
    InvalidInput,
    ManifestError,
    PublishError,
    RegistryAuthError,
    RegistryUnreachableError,
)
from envbuild.matrix import load
from envbuild.net import credentials
from envbuild.ship import manifest
from envbuild.ship.publish import PublishOptions, Published, publish
from envbuild.ship.pull import pull
from envbuild.core.imageref import check_repository, with_tags
from envbuild.ship.session import Session, registry_error

MATRIX = load(MATRIX_PATH)
CPU = MATRIX.backend("cpu")
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
PASSWORD = "pa55-w0rd-never-shown"
LABELS = {
    "dev.envbuild.backend": "cpu",
    "dev.envbuild.torch": CPU.torch.version,
    "dev.envbuild.plugin": "",
    "dev.envbuild.transformers": MATRIX.transformers,
    "dev.envbuild.accelerate": MATRIX.accelerate,
}
ENV = {credentials.USER_ENV: "bot", credentials.PASSWORD_ENV: PASSWORD}


@pytest.fixture
def client() -> FakeEngine:
    c = FakeEngine()
    c.add_image("sha256:" + "a" * 64, [MATRIX.tags(CPU)[0]], LABELS)
    return c


def run_publish(client: FakeEngine, tmp_path: Path, env: dict | None = None, **kw) -> list[Published]:
    kw.setdefault("registry", "registry.test:5000/envbuild")
    opts = PublishOptions(manifest=tmp_path / "m.json", **kw)
    return publish(MATRIX, [CPU], opts, client, environ=ENV if env is None else env)


# --- credentials and names ---------------------------------------------------------------------------------


def test_credentials_from_the_environment_only():
    creds = credentials.from_env("registry.test", ENV)
    assert (creds.username, creds.password) == ("bot", PASSWORD)
    assert PASSWORD not in repr(creds)
    assert credentials.from_env("registry.test", {}) is None
    # GitHub's token counts for GHCR only
    gh = {"GITHUB_ACTOR": "octo", "GITHUB_TOKEN": "ghs_x"}
    assert credentials.from_env("ghcr.io", gh).username == "octo"
    assert credentials.from_env("registry.test", gh) is None


@pytest.mark.parametrize("env, missing", [({credentials.USER_ENV: "bot"}, credentials.PASSWORD_ENV), ({credentials.PASSWORD_ENV: "x"}, credentials.USER_ENV)])
def test_half_the_credentials_is_an_error(env, missing):
    with pytest.raises(RegistryAuthError, match=missing):
        credentials.from_env("registry.test", env)


def test_ghcr_token_without_actor_is_an_error():
    with pytest.raises(RegistryAuthError, match="GITHUB_ACTOR"):
        credentials.from_env("ghcr.io", {"GITHUB_TOKEN": "ghs_x"})


@pytest.mark.parametrize("registry, host", [
    ("ghcr.io/org/envbuild", "ghcr.io"), ("registry.test:5000/envbuild", "registry.test:5000"),
    ("org/envbuild", "docker.io"), ("index.docker.io/org/envbuild", "docker.io"), ("localhost/x", "localhost"),
])
def test_credentials_go_only_to_the_registry_that_receives_the_push(client, tmp_path, registry, host):
    """Every push carries credentials, and the one host they were checked against is the one Docker pushes to
    (read by the table in the test, not by envbuild's parser)."""
    run_publish(client, tmp_path, registry=registry)
    assert client.logins == [("bot", host)]
    assert client.pushed and all(auth == {"username": "bot", "password": PASSWORD} for _, auth in client.pushed)
    first = [ref.split("/", 1)[0] for ref, _ in client.pushed]
    pushed_to = [f if "." in f or ":" in f.split(":", 1)[0] or f.startswith("localhost") else "docker.io" for f in first]
    assert set(pushed_to) == {"docker.io" if host == "docker.io" else host}


@pytest.mark.parametrize("registry", ["ghcr.io", "ghcr.io/", "localhost:5000", "localhost", "quay.io"])
def test_a_bare_registry_host_is_refused_before_any_credentials_are_offered(client, tmp_path, registry):
    """Docker reads `ghcr.io:cpu` as docker.io/library/ghcr.io:cpu: a GHCR token would go to Docker Hub."""
    env = {"GITHUB_ACTOR": "octo", "GITHUB_TOKEN": PASSWORD}
    with pytest.raises(InvalidInput, match="names a registry but no repository"):
        run_publish(client, tmp_path, env=env, registry=registry)
    assert client.logins == [] and client.pushed == []


def test_a_session_offers_its_credentials_to_its_own_registry_only():
    session = Session(FakeEngine(), "ghcr.io/org/envbuild", {"GITHUB_ACTOR": "octo", "GITHUB_TOKEN": PASSWORD})
    for ref in ("ghcr.io:cpu", "org/envbuild:cpu", "quay.io/org/envbuild:cpu"):
        with pytest.raises(PublishError, match="not offered"):
            session.push(ref, lambda s: None)
    assert session.engine.pushed == []


@pytest.mark.parametrize("value, fragment", [
    ("ghcr.io/org/envbuild:cpu", "without a tag"),
    ("localhost:5000", "no repository"),
    ("ghcr.io", "no repository"),
    ("ghcr.io/Org/envbuild", "must be lowercase"),
    ("ghcr.io/org/envbuild@sha256:" + "1" * 64, "without a tag or digest"),
    ("ghcr.io/org/env build", "is not an image reference"),
])
def test_bad_registry_names(value, fragment):
    with pytest.raises(InvalidInput, match=fragment):
        check_repository(value)


def test_target_refs_are_the_matrix_tags_under_the_registry():
    refs = with_tags("localhost:5000/envbuild", MATRIX.tags(CPU))
    assert refs == [f"localhost:5000/envbuild:{t.rsplit(':', 1)[1]}" for t in MATRIX.tags(CPU)]
    assert refs[0] == "localhost:5000/envbuild:cpu"


@pytest.mark.parametrize("message, kind", [
    ("login attempt to http://r/v2/ failed with status: 401 Unauthorized", RegistryAuthError),
    ("unauthorized: authentication required", RegistryAuthError),
    ("no basic auth credentials", RegistryAuthError),
    ("denied: requested access to the resource is denied", RegistryAuthError),
    ('Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused', RegistryUnreachableError),
    ("dial tcp: lookup nosuch.example: no such host", RegistryUnreachableError),
    ("blob upload unknown: sha256:0401aa0403", PublishError),
])
def test_registry_errors_are_classified(message, kind):
    err = registry_error("r.test", message, credentials.Scrubber(None), "pushing r.test/x:cpu")
    assert type(err) is kind
    if kind is RegistryAuthError:
        assert "authentication failed for r.test" in str(err) and credentials.USER_ENV in str(err)
    if kind is RegistryUnreachableError:
        assert "registry r.test unreachable" in str(err)


def test_a_password_echoed_by_the_registry_is_masked():
    creds = credentials.Credentials("bot", PASSWORD, "ENV")
    err = registry_error("r.test", f"unauthorized: bad password {PASSWORD}", credentials.Scrubber(creds), "logging in", creds)
    assert PASSWORD not in str(err) and "***" in str(err)


# --- the manifest ------------------------------------------------------------------------------------------


def test_missing_manifest_is_empty_for_publish_and_an_error_for_pull(tmp_path):
    assert manifest.load(tmp_path / "m.json", must_exist=False) == {"schema": 1, "images": {}}
    with pytest.raises(InvalidInput, match="no such file") as err:  # a file the user named: exit 2
        manifest.load(tmp_path / "m.json", must_exist=True)
    assert err.value.exit_code == 2


@pytest.mark.parametrize("text, fragment", [
    ("{not json", "not valid JSON"),
    ("[]", "is this an envbuild manifest"),
    ('{"schema": 2, "images": {}}', "schema 2 is not supported"),
    ('{"schema": 1, "images": {"cpu": {"digest": "sha256:short"}}}', "images.cpu"),
])
def test_broken_manifests_are_refused(tmp_path, text, fragment):
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=fragment) as info:  # the user's file: invalid input, exit 2
        manifest.load(path, must_exist=True)
    assert info.value.exit_code == 2


def test_record_replaces_one_backend_and_keeps_the_others(tmp_path):
    path = tmp_path / "m.json"
    manifest.record(path, {"backend": "cuda", "digest": D2})
    manifest.record(path, {"backend": "cpu", "digest": D2})
    manifest.record(path, {"backend": "cpu", "digest": D1})
    doc = json.loads(path.read_text())
    assert doc == {"schema": 1, "images": {"cpu": {"backend": "cpu", "digest": D1}, "cuda": {"backend": "cuda", "digest": D2}}}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]  # no temporary files left


def test_smoke_results_single_or_list(tmp_path):
    one = {"backend": "cpu", "ok": True, "checks": [{"name": "load", "ok": True}, {"name": "device", "ok": True}], "date": "2026-01-01T00:00:00Z"}
    (tmp_path / "one.json").write_text(json.dumps(one))
    (tmp_path / "many.json").write_text(json.dumps([one, {**one, "backend": "cuda", "ok": False}]))
    assert list(manifest.load_smoke_results(tmp_path / "one.json")) == ["cpu"]
    assert list(manifest.load_smoke_results(tmp_path / "many.json")) == ["cpu", "cuda"]
    s = manifest.smoke_summary(one)
    assert (s["ok"], s["passed"], s["failed"], s["date"]) == (True, 2, 0, "2026-01-01T00:00:00Z")
    (tmp_path / "bad.json").write_text('{"hello": 1}')
    with pytest.raises(EnvbuildError, match="not the output of `envbuild smoke --json`"):
        manifest.load_smoke_results(tmp_path / "bad.json")


# --- publish -----------------------------------------------------------------------------------------------


def test_publish_records_what_landed(client, tmp_path):
    (tmp_path / "smoke.json").write_text(json.dumps({
        "backend": "cpu", "ok": True, "image_id": "sha256:" + "a" * 64, "checks": [{"name": "load", "ok": True}],
    }))
    [r] = run_publish(client, tmp_path, smoke_json=tmp_path / "smoke.json")
    assert r.ok and r.digest == D1
    assert client.logins == [("bot", "registry.test:5000")]
    # the pinned tag first, the moving one last: a publish cut short never moves REG:cpu
    assert [ref for ref, _ in client.pushed] == [f"registry.test:5000/envbuild:{t.rsplit(':', 1)[1]}" for t in MATRIX.tags(CPU)[::-1]]
    entry = json.loads((tmp_path / "m.json").read_text())["images"]["cpu"]
    assert entry["digest"] == D1 and entry["tags"] == r.refs
    assert entry["versions"] == {"torch": CPU.torch.version, "plugin": None, "transformers": MATRIX.transformers, "accelerate": MATRIX.accelerate}
    assert entry["smoke"]["ok"] is True and entry["smoke"]["passed"] == 1
    assert entry["date"].endswith("Z") and "git_revision" in entry
    assert PASSWORD not in (tmp_path / "m.json").read_text()


def test_a_push_that_breaks_off_records_nothing_and_drops_its_tags(client, tmp_path):
    manifest.record(tmp_path / "m.json", {"backend": "cuda", "digest": D2})
    before = (tmp_path / "m.json").read_bytes()
    client.push_lines = lambda repo, tag: [{"status": "Pushing", "id": "abc", "progressDetail": {"current": 1}}]  # no digest
    with pytest.raises(PublishError, match="broke off"):
        run_publish(client, tmp_path)
    assert (tmp_path / "m.json").read_bytes() == before
    assert set(client.removed) == set(with_tags("registry.test:5000/envbuild", MATRIX.tags(CPU)))


def test_a_dropped_connection_mid_push_is_a_clear_error(client, tmp_path):
    def lines(repo, tag):
        yield {"status": "Pushing", "id": "abc", "progressDetail": {}}
        raise StreamBroken("pushing x broke off (ChunkedEncodingError: Connection broken: IncompleteRead)")

    client.push_lines = lines
    with pytest.raises(PublishError, match="broke off"):
        run_publish(client, tmp_path)
    assert not (tmp_path / "m.json").exists()


def test_second_tag_failing_records_nothing(client, tmp_path):
    def lines(repo, tag):
        if tag == "cpu":
            return [{"aux": {"Tag": tag, "Digest": D1}}]
        return [{"errorDetail": {"message": "unauthorized: authentication required"}, "error": "unauthorized"}]

    client.push_lines = lines
    with pytest.raises(RegistryAuthError, match="authentication failed for registry.test:5000"):
        run_publish(client, tmp_path)
    assert not (tmp_path / "m.json").exists()


def test_a_failed_login_stops_before_any_push(client, tmp_path):
    client.login_error = "login attempt to http://registry.test:5000/v2/ failed with status: 401 Unauthorized"
    with pytest.raises(RegistryAuthError) as exc:
        run_publish(client, tmp_path)
    assert client.pushed == [] and PASSWORD not in str(exc.value)
    assert not (tmp_path / "m.json").exists()


def test_failed_smoke_is_refused_unless_forced(client, tmp_path):
    (tmp_path / "smoke.json").write_text(json.dumps({"backend": "cpu", "ok": False, "error": "device: no cpu", "checks": [{"name": "device", "ok": False}]}))
    with pytest.raises(PublishError, match="smoke test failed"):
        run_publish(client, tmp_path, smoke_json=tmp_path / "smoke.json")
    assert client.pushed == []
    [r] = run_publish(client, tmp_path, smoke_json=tmp_path / "smoke.json", force=True)
    entry = json.loads((tmp_path / "m.json").read_text())["images"]["cpu"]
    assert entry["smoke"]["ok"] is False and entry["forced"] is True


def test_smoke_of_another_image_is_refused(client, tmp_path):
    (tmp_path / "smoke.json").write_text(json.dumps({"backend": "cpu", "ok": True, "image_id": "sha256:" + "b" * 64, "checks": []}))
    with pytest.raises(PublishError, match="smoke result is for image"):
        run_publish(client, tmp_path, smoke_json=tmp_path / "smoke.json")


def test_image_that_disagrees_with_the_matrix_is_refused(client, tmp_path):
    client.refs[MATRIX.tags(CPU)[0]].labels["dev.envbuild.torch"] = "1.0.0"
    with pytest.raises(PublishError, match="torch is '1.0.0' in the image"):
        run_publish(client, tmp_path)
    assert client.pushed == []


def test_missing_local_image_says_how_to_build_it(client, tmp_path):
    with pytest.raises(PublishError, match="envbuild build --backend cpu"):
        run_publish(client, tmp_path, image="nothing/here:x")


def test_several_backends_go_on_past_a_missing_image(client, tmp_path):
    opts = PublishOptions(registry="registry.test:5000/envbuild", manifest=tmp_path / "m.json")
    results = publish(MATRIX, [MATRIX.backend("cuda"), CPU], opts, client, environ=ENV)
    assert [(r.backend, r.ok) for r in results] == [("cuda", False), ("cpu", True)]
    assert list(json.loads((tmp_path / "m.json").read_text())["images"]) == ["cpu"]


# --- pull --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def held(engineless_registry, tmp_path_factory) -> tuple[str, str]:
    """(repository, the digest of its cpu image): a real registry holds the image that pull asks about."""
    import io
    import tarfile

    from support import testbed

    tar = tmp_path_factory.mktemp("rootfs") / "cpu.tar"
    with tarfile.open(tar, "w") as t:
        info = tarfile.TarInfo("etc/which")
        info.size = 3
        t.addfile(info, io.BytesIO(b"cpu"))
    tag = MATRIX.tags(CPU)[1].rsplit(":", 1)[1]
    digest = testbed.push_rootfs(engineless_registry, tar, f"envbuild/pulled:{tag}", "amd64")
    return f"{engineless_registry.host}/envbuild/pulled", digest


def _registry_has(client: FakeEngine, held: tuple[str, str], pulled: str | None = None) -> str:
    """The registry's tag of the cpu image; the engine's pull of it yields an image of digest `pulled` (default:
    the one the registry holds)."""
    repository, digest = held
    ref = f"{repository}:{MATRIX.tags(CPU)[1].rsplit(':', 1)[1]}"
    iid = "sha256:" + "c" * 64

    def pull_lines(repo, tag):
        img = client.add_image(iid, [f"{repo}:{tag}"], LABELS)
        img.repo_digests = [f"{repo}@{pulled or digest}"]
        return [{"status": f"Digest: {pulled or digest}"}]

    client.pull_lines = pull_lines
    return ref


def test_pull_verifies_and_tags_for_smoke(client, held, tmp_path):
    ref = _registry_has(client, held)
    manifest.record(tmp_path / "m.json", {"backend": "cpu", "digest": held[1]})
    r = pull(MATRIX, CPU, client, registry=held[0], manifest=tmp_path / "m.json", environ={})
    assert (r.ref, r.digest, r.verified) == (ref, held[1], True)
    assert client.image_id(MATRIX.tags(CPU)[0]) == r.image_id
    assert r.docker_run.startswith("docker run --rm") and ref in r.docker_run


def test_pull_refuses_a_moved_tag_before_pulling(client, held, tmp_path):
    _registry_has(client, held)
    manifest.record(tmp_path / "m.json", {"backend": "cpu", "digest": D1})
    local = client.image_id(MATRIX.tags(CPU)[0])
    with pytest.raises(DigestMismatchError, match=f"registry has digest {held[1]}.*records {D1}"):
        pull(MATRIX, CPU, client, registry=held[0], manifest=tmp_path / "m.json", environ={})
    assert client.pulled == []  # refused before a layer moved
    assert client.image_id(MATRIX.tags(CPU)[0]) == local  # the matrix tag did not move


def test_pull_undoes_a_tag_that_moved_during_the_pull(client, held, tmp_path):
    ref = _registry_has(client, held, pulled=D2)  # the registry said its digest a moment ago; the pull then got D2
    manifest.record(tmp_path / "m.json", {"backend": "cpu", "digest": held[1]})
    local = client.image_id(MATRIX.tags(CPU)[0])
    with pytest.raises(DigestMismatchError):
        pull(MATRIX, CPU, client, registry=held[0], manifest=tmp_path / "m.json", environ={})
    assert ref in client.removed and ref not in client.refs
    assert client.image_id(MATRIX.tags(CPU)[0]) == local


def test_a_tag_the_registry_lacks_is_said_before_pulling(client, held, tmp_path):
    """remote_digest asks the registry itself (core/regclient), not the engine: a tag it lacks is `missing`."""
    manifest.record(tmp_path / "m.json", {"backend": "cpu", "digest": held[1]})
    with pytest.raises(PublishError, match="is not in the registry: has `envbuild publish --backend cpu`"):
        pull(MATRIX, CPU, client, registry=held[0], tag="no-such-tag", manifest=tmp_path / "m.json", environ={})
    assert client.pulled == []


def test_a_slow_registry_asked_about_a_tag_is_said_while_it_is_asked(monkeypatch):
    """Before a pull, the registry is asked what the tag serves: a slow one (30 s a read, three tries) is said."""
    import threading

    from envbuild.core import heartbeat
    from envbuild.ship import session as sessions

    monkeypatch.setattr(heartbeat, "PERIOD", 0.01)
    monkeypatch.setattr(heartbeat, "QUIET", 0.0)
    heard = threading.Event()
    said: list[str] = []

    def echo(text: str) -> None:
        said.append(text)
        if text.startswith("still asking the registry about registry.test:5000/envbuild:cpu: "):
            heard.set()

    class Slow:
        def __init__(self, ref, environ):
            pass

        def manifest(self, ref):
            assert heard.wait(30)  # answers only once the wait was said
            return type("Found", (), {"digest": D1})()

    monkeypatch.setattr(sessions, "Registry", Slow)
    session = sessions.Session(FakeEngine(), "registry.test:5000/envbuild", {})
    monkeypatch.setattr(session, "check_reachable", lambda: None)
    assert session.remote_digest("registry.test:5000/envbuild:cpu", "missing", echo) == D1
    assert heard.is_set()


def test_pull_needs_the_backend_in_the_manifest(client, tmp_path):
    manifest.record(tmp_path / "m.json", {"backend": "cuda", "digest": D1})
    with pytest.raises(ManifestError, match="no image for backend 'cpu'"):
        pull(MATRIX, CPU, client, manifest=tmp_path / "m.json", environ={})


def test_pull_missing_tag(client, tmp_path):
    client.pull_lines = lambda repo, tag: [{"errorDetail": {"message": f"manifest for {repo}:{tag} not found: manifest unknown"}}]
    with pytest.raises(PublishError, match="is not in the registry"):
        pull(MATRIX, CPU, client, registry="registry.test:5000/envbuild", environ={})


# --- transient failures, unreachable registries -----------------------------------------------------------------


def _flaky(failures: int, message: str = "received unexpected HTTP status: 503 Service Unavailable"):
    """push_lines that fail `failures` times, then confirm a digest."""
    calls = []

    def lines(repo, tag):
        calls.append(tag)
        if len(calls) <= failures:
            return [{"errorDetail": {"message": message}}]
        return [{"aux": {"Tag": tag, "Digest": "sha256:" + "2" * 64, "Size": 1}}]

    return lines, calls


def test_a_transient_registry_error_is_retried_with_backoff(monkeypatch):
    from envbuild.ship import session as sessions

    sleeps = []
    monkeypatch.setattr(sessions.time, "sleep", sleeps.append)
    engine = FakeEngine()
    engine.push_lines, calls = _flaky(2)
    said = []
    digest = sessions.Session(engine, "registry.test:5000/envbuild", {}).push("registry.test:5000/envbuild:cpu", said.append)
    assert digest == "sha256:" + "2" * 64 and len(calls) == 3 and sleeps == [1.0, 2.0]
    assert any("trying again in 1s (attempt 2 of 3)" in line for line in said)


def test_retries_are_bounded_and_the_error_says_how_long(monkeypatch):
    from envbuild.ship import session as sessions

    monkeypatch.setattr(sessions.time, "sleep", lambda s: None)
    engine = FakeEngine()
    engine.push_lines, calls = _flaky(99)
    with pytest.raises(PublishError, match=r"503 Service Unavailable.*gave up after 3 attempts in [0-9.]+s"):
        sessions.Session(engine, "registry.test:5000/envbuild", {}).push("registry.test:5000/envbuild:cpu", print)
    assert len(calls) == 3


def test_what_cannot_pass_is_not_retried(monkeypatch):
    from envbuild.ship import session as sessions

    monkeypatch.setattr(sessions.time, "sleep", lambda s: pytest.fail("no retry expected"))
    engine = FakeEngine()
    engine.push_lines, calls = _flaky(99, "unauthorized: authentication required")
    with pytest.raises(RegistryAuthError):
        sessions.Session(engine, "registry.test:5000/envbuild", {}).push("registry.test:5000/envbuild:cpu", print)
    assert len(calls) == 1


# --- the CI matrix and summaries ----------------------------------------------------------------------------


def test_github_matrix_has_every_containerizable_backend_with_its_runners():
    doc = ci.github_matrix(MATRIX)
    assert [j["backend"] for j in doc["include"]] == [b.name for b in MATRIX.containerizable()]
    assert len(doc["include"]) == 15 and "mps" not in [j["backend"] for j in doc["include"]]
    for job in doc["include"]:
        b = MATRIX.backend(job["backend"])
        assert job["runs-on"] == list(b.runs_on)
        assert job["image"] == MATRIX.tags(b)[0] and job["pinned"] == MATRIX.tags(b)[1]
        assert job["smoke"] is (b.device == "cpu" or "self-hosted" in b.runs_on)
        assert "--model synthetic" in job["smoke_args"]


def test_matrix_command_github_format(invoke):
    result = invoke("matrix", "--format", "github", "--matrix", MATRIX_PATH)
    assert result.exit_code == 0
    assert result.stdout.count("\n") == 1  # one line, for $GITHUB_OUTPUT
    assert json.loads(result.stdout) == ci.github_matrix(MATRIX)
    one = invoke("matrix", "--format", "github", "--matrix", MATRIX_PATH, "--backend", "cpu,rocm")
    assert [j["backend"] for j in json.loads(one.stdout)["include"]] == ["cpu", "rocm"]
    mps = invoke("matrix", "--format", "github", "--matrix", MATRIX_PATH, "--backend", "mps")
    assert mps.exit_code == 2 and "cannot run in a container" in mps.stderr


def test_summary_command(invoke, tmp_path):
    (tmp_path / "cpu.json").write_text(json.dumps({"backend": "cpu", "ok": True, "seconds": 3.2, "image": "r:cpu",
                                                   "checks": [{"name": "load", "ok": True}]}))
    (tmp_path / "rocm.json").write_text(json.dumps({"backend": "rocm", "ok": False, "seconds": 1, "image": "r:rocm", "error": "device: no | gpu",
                                                    "checks": [{"name": "device", "ok": False}]}))
    result = invoke("summary", tmp_path, "--backend", "cpu,rocm,cuda", "--format", "markdown", "--matrix", MATRIX_PATH)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "| cpu | passed | 1/1 | 3 | r:cpu |   |" in lines
    assert any(ln.startswith("| rocm | FAILED | 0/1 |") and "device: no \\| gpu" in ln for ln in lines)
    assert any(ln.startswith("| cuda | no result |") for ln in lines)
    strict = invoke("summary", tmp_path, "--backend", "cpu", "--strict", "--matrix", MATRIX_PATH)
    assert strict.exit_code == 1


def test_published_rows():
    rows = report.published_rows([{"backend": "cpu", "tags": ["r:cpu"], "digest": D1, "git_revision": "abcdef1234567890",
                                   "smoke": {"ok": True, "passed": 8, "failed": 0}}])
    assert rows == [{"backend": "cpu", "tags": "`r:cpu`", "digest": f"`{D1}`", "smoke": "passed (8/8 checks)", "revision": "abcdef123456"}]


@pytest.mark.parametrize("command", [["publish", "--help"], ["pull", "--help"], ["matrix", "--help"], ["summary", "--help"]])
def test_help(invoke, command):
    result = invoke(*command)
    assert result.exit_code == 0 and result.stdout


def test_no_password_option():
    from envbuild.cli import app

    for name in ("publish", "pull"):
        opts = {o for p in app.every_command()[name].params for o in p.opts}
        assert not any("pass" in o or "token" in o for o in opts), opts


@pytest.mark.parametrize("args, fragment", [
    (["publish", "--registry", "ghcr.io/org/envbuild:cpu"], "without a tag"),
    (["pull", "--registry", "localhost:5000"], "no repository"),
    (["publish", "--registry", "ghcr.io"], "no repository"),
    (["pull", "--tag", "bad tag"], "is not a valid image tag"),
])
def test_invalid_registry_arguments_exit_2_through_the_cli(invoke, closed_socket, args, fragment):
    result = invoke(*args, "--backend", "cpu", "--matrix", MATRIX_PATH)
    assert result.exit_code == 2 and fragment in result.stderr


def test_a_stream_that_goes_silent_is_abandoned_after_the_stall_time_and_its_connection_closed():
    """The daemon may retry a cut download for minutes without a word: the reader must not wait on it."""
    import threading
    import time

    from envbuild.ship.session import Session

    release = threading.Event()
    closed = []

    class Silent(FakeEngine):
        def close(self) -> None:  # what unblocks the reader on a real engine: its connection goes
            closed.append(True)
            release.set()

    def stream():
        yield {"status": "Pulling fs layer", "id": "abc"}
        release.wait(30)  # says nothing more until its connection is closed
        yield {"status": "Downloading", "id": "abc", "progressDetail": {"current": 1}}

    session = Session(Silent(), "127.0.0.1:5000/envbuild", environ={"ENVBUILD_STALL_SECONDS": "0.5"})
    start = time.monotonic()
    with pytest.raises(PublishError, match=r"no data moved for 0.5s \(the daemon said: nothing\)"):
        session._transfer(stream, "ref", "pulling ref", lambda s: None)
    assert time.monotonic() - start < 5 and closed


def test_a_long_transfer_says_how_it_goes_while_the_daemon_is_quiet(monkeypatch):
    """A push of gigabytes: the daemon's layer lines are not shown, so every QUIET seconds a line says what is moving
    and for how long, also while the daemon says nothing at all (waiting on the registry)."""
    import re
    import threading

    from envbuild.core import heartbeat
    from envbuild.ship.session import Session

    monkeypatch.setattr(heartbeat, "QUIET", 0.05)
    said: list[str] = []
    heard = threading.Event()

    def echo(text: str) -> None:
        said.append(text)
        if text.startswith("still "):
            heard.set()

    def stream():
        yield {"status": "The push refers to repository [127.0.0.1:5000/envbuild]"}
        yield {"status": "Pushing", "id": "a1b2c3", "progressDetail": {"current": 1, "total": 9},
               "progress": "[=>        ]  1.2GB/3.1GB"}
        assert heard.wait(30)  # quiet until the heartbeat speaks
        yield {"aux": {"Tag": "cpu", "Digest": "sha256:" + "2" * 64, "Size": 1}}

    digest = Session(FakeEngine(), "127.0.0.1:5000/envbuild", {}).\
        _transfer(stream, "ref", "pushing 127.0.0.1:5000/envbuild:cpu", echo)
    assert digest == "sha256:" + "2" * 64
    assert said[0] == "The push refers to repository [127.0.0.1:5000/envbuild]"
    assert re.fullmatch(r"still pushing 127\.0\.0\.1:5000/envbuild:cpu: \d+s \(a1b2c3: Pushing 1\.2GB/3\.1GB\)", said[1])


# --- image indexes: joining per-platform publishes ------------------------------------------------------------


def test_index_from_joins_platform_records_and_refuses_disagreement(tmp_path):
    from envbuild.ship.index import _joined, local_image, platform_ref

    repo = "registry.test:5000/envbuild"
    amd = {"schema": 1, "images": {"cpu": {"repository": repo, "digest": D1, "platforms": {"linux/amd64": {"digest": D1}}}}}
    arm = {"schema": 1, "images": {"cpu": {"repository": repo, "digest": D2, "platforms": {"linux/arm64": {"digest": D2}}}}}
    files = (tmp_path / "a.json", tmp_path / "b.json")
    assert _joined(CPU, repo, [amd, arm], files) == {"linux/amd64": {"digest": D1}, "linux/arm64": {"digest": D2}}
    clash = {"schema": 1, "images": {"cpu": {"repository": repo, "digest": D2, "platforms": {"linux/amd64": {"digest": D2}}}}}
    with pytest.raises(PublishError, match="two different digests for cpu on linux/amd64"):
        _joined(CPU, repo, [amd, clash], files)
    with pytest.raises(PublishError, match="was pushed to registry.test:5000/envbuild, not elsewhere.test/x"):
        _joined(CPU, "elsewhere.test/x", [amd], files[:1])
    pinned = MATRIX.tags(CPU)[1].rsplit(":", 1)[1]
    assert platform_ref(MATRIX, CPU, repo, "linux/arm64") == f"{repo}:{pinned}-arm64"
    from envbuild.ship.index import single_platform_ref

    assert single_platform_ref(MATRIX, CPU, repo, "linux/amd64") == f"{repo}:cpu-amd64"  # for tools without an index
    assert local_image(MATRIX, CPU, "linux/arm64" if ci_host_is_amd64() else "linux/amd64").endswith(
        ":cpu-arm64" if ci_host_is_amd64() else ":cpu-amd64")


def test_an_index_names_only_platforms_with_a_passing_smoke_result(tmp_path):
    """A per-platform record without a smoke result, or with a failed one, is left out (the issue-21 rule); with
    nothing left there is no index to push, and the error names each platform and why."""
    from envbuild.ship.index import publish_platforms

    repo = "registry.test:5000/envbuild"
    failed = {"ok": False, "error": "device not visible", "failed_checks": []}
    amd = {"schema": 1, "images": {"cpu": {"repository": repo, "platforms": {"linux/amd64": {"digest": D1}}}}}
    arm = {"schema": 1, "images": {"cpu": {"repository": repo, "platforms": {"linux/arm64": {"digest": D2, "smoke": failed}}}}}
    files = (tmp_path / "a.json", tmp_path / "b.json")
    opts = PublishOptions(platforms=("linux/amd64", "linux/arm64"), index_from=files, manifest=tmp_path / "m.json")
    with pytest.raises(PublishError) as err:
        publish_platforms(MATRIX, CPU, repo, None, {}, opts, lambda s: None, [amd, arm], {})
    assert "linux/amd64: no smoke result for linux/amd64" in str(err.value)
    assert "envbuild smoke --backend cpu --platform linux/amd64 --json-file FILE" in str(err.value)
    assert "linux/arm64: its smoke test failed (device not visible)" in str(err.value)
    assert not (tmp_path / "m.json").exists()


def ci_host_is_amd64() -> bool:
    from envbuild.core.platform import host_platform

    return host_platform() == "linux/amd64"


def test_the_docker_config_s_login_goes_to_its_own_host_only(tmp_path):
    """One reader of the Docker config's logins for doctor, the registry API and signing: a host's own entry (any
    of the forms docker writes), Docker Hub's only for docker.io, never another host's."""
    import base64

    from envbuild.net.regclient import Registry
    from envbuild.ship.trust.oci import Client

    def auth(pair: str) -> dict:
        return {"auth": base64.b64encode(pair.encode()).decode()}

    (tmp_path / "config.json").write_text(json.dumps({"auths": {
        "https://index.docker.io/v1/": auth("hubuser:hubpass"), "https://ghcr.io": auth("ghuser:ghpass")}}))
    env = {"DOCKER_CONFIG": str(tmp_path)}
    assert credentials.config_login("docker.io", env).username == "hubuser"
    assert credentials.config_login("ghcr.io", env).password == "ghpass"
    assert credentials.config_login("quay.io", env) is None  # not Docker Hub's login
    assert Registry("quay.io/org/img", env).creds is None and Registry("org/img", env).creds.username == "hubuser"
    assert Client("quay.io", env).registry.creds is None and Client("ghcr.io", env).registry.creds.password == "ghpass"
    assert credentials.config_login("ghcr.io", {"DOCKER_CONFIG": str(tmp_path / "none")}) is None


def test_tags_made_for_a_push_go_with_it_and_tags_already_there_stay():
    """One rule for the tags a push makes (publish's, an index's platforms): kept after a publish that landed,
    removed after one that failed or was interrupted, and after a platform's push always; a tag the image had
    before is never removed."""
    from envbuild.ship import session as sessions

    engine = FakeEngine()
    engine.add_image("sha256:" + "a" * 64, ["reg.test:5000/e:cpu"])
    session = sessions.Session(engine, "reg.test:5000/e", {})
    iid = "sha256:" + "a" * 64
    with session.tagged(iid, ["reg.test:5000/e:cpu", "reg.test:5000/e:pinned"], keep=True):
        assert engine.image_id("reg.test:5000/e:pinned") == iid
    assert engine.image_id("reg.test:5000/e:pinned") == iid and engine.removed == []
    for failure in (PublishError("push broke off"), KeyboardInterrupt()):
        with pytest.raises(type(failure)):
            with session.tagged(iid, ["reg.test:5000/e:cpu", "reg.test:5000/e:other"], keep=True):
                raise failure
        assert engine.image_id("reg.test:5000/e:other") is None and engine.image_id("reg.test:5000/e:cpu") == iid
    with session.tagged(iid, ["reg.test:5000/e:cpu-arm64"], keep=False):
        pass
    assert engine.image_id("reg.test:5000/e:cpu-arm64") is None
    assert "reg.test:5000/e:cpu" not in engine.removed
