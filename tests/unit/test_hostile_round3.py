"""Hostile input, round three: the surfaces of keys, signing, verify, the site, registries and platforms. Each case
is one class of attack, fixed at its root: key files are new, exclusive, 0600 and never written through a link; an
attestation binds to the image it is about; credentials never leave over plain HTTP to another host; every remote
answer is bounded in size and time and every JSON document from outside checked for shape; a folder is replaced only
when envbuild wrote it; bad input exits 2 with the value escaped. No Docker engine: loopback HTTP servers stand in."""

from __future__ import annotations

import http.server
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.constants import MATRIX

from envbuild.core.errors import InvalidInput
from envbuild.ship.trust import TrustError

PASSPHRASE = "correct horse battery staple"


def keygen(cwd: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("ENVBUILD_KEY_PASSWORD", "COSIGN_PASSWORD")}
    environ.update(env or {"ENVBUILD_KEY_PASSWORD": PASSPHRASE})
    return subprocess.run([sys.executable, "-m", "envbuild", "keygen", *extra], cwd=cwd, env=environ,
                          capture_output=True, timeout=120)


# --- keys: new files, 0600, never through a link --------------------------------------------------------------


def test_a_stale_temporary_file_in_the_way_does_not_make_the_key_readable(tmp_path):
    for stale in ("cosign.key.tmp", ".cosign.key.tmp"):
        (tmp_path / stale).write_text("left over")
        (tmp_path / stale).chmod(0o644)
    proc = keygen(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((tmp_path / "cosign.key").stat().st_mode) == 0o600
    assert (tmp_path / "cosign.key.tmp").read_text() == "left over"  # not reused, not written


def test_no_key_is_written_through_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    work = tmp_path / "work"
    work.mkdir()
    (work / "cosign.key.tmp").symlink_to(victim)  # where a naive writer puts its temporary file
    assert keygen(work).returncode == 0
    assert victim.read_text() == "the user's file"
    # --force over links standing at the key's own names: the links are replaced, their targets untouched
    for name in ("cosign.key", "cosign.pub"):
        (work / name).unlink()
        (work / name).symlink_to(victim)
    assert keygen(work, "--force").returncode == 0
    assert victim.read_text() == "the user's file"
    assert not (work / "cosign.key").is_symlink() and not (work / "cosign.pub").is_symlink()
    assert stat.S_IMODE((work / "cosign.key").stat().st_mode) == 0o600


def test_a_dangling_link_at_the_key_name_counts_as_there(tmp_path):
    (tmp_path / "cosign.key").symlink_to(tmp_path / "nowhere")
    proc = keygen(tmp_path)
    assert proc.returncode == 2 and b"exists" in proc.stderr and not (tmp_path / "nowhere").exists()


def test_a_passphrase_that_is_not_utf8_is_its_bytes(tmp_path):
    env = {k.encode(): v.encode() for k, v in os.environ.items() if k not in ("ENVBUILD_KEY_PASSWORD", "COSIGN_PASSWORD")}
    env[b"ENVBUILD_KEY_PASSWORD"] = b"caf\xe9-\xff"
    proc = subprocess.run([sys.executable, "-m", "envbuild", "keygen"], cwd=tmp_path, env=env, capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    from envbuild.ship.trust import keys

    keys.load_private((tmp_path / "cosign.key").read_bytes(), b"caf\xe9-\xff", "k")  # opens with those very bytes


# --- attestations bind to the image they are about ----------------------------------------------------------


@pytest.mark.parametrize("image_id", [None, "", "sha256:short", "sha256:" + "a" * 64 + "\n", 42, ["sha256:" + "a" * 64]])
def test_a_smoke_result_that_names_no_image_is_never_attested(image_id):
    from envbuild.ship.trust.attest import attest_smoke

    result = {"backend": "cpu", "ok": True, "checks": []}
    if image_id is not None:
        result["image_id"] = image_id
    for force in (False, True):
        with pytest.raises(InvalidInput, match="names no image"):
            attest_smoke("127.0.0.1:9/none", "cpu", result, key=None, force=force)  # refused before any registry


def test_a_digest_with_a_trailing_newline_is_no_digest():
    from envbuild.core.imageref import DIGEST, TAG

    assert DIGEST.match("sha256:" + "a" * 64) and not DIGEST.match("sha256:" + "a" * 64 + "\n")
    assert not TAG.match("cpu\n")


# --- registries: credentials, tokens, bounded answers ------------------------------------------------------------


class _Server:
    """A loopback HTTP server whose handler is `respond(handler)`; what each request carried is kept."""

    def __init__(self, respond, host: str = "127.0.0.1"):
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
                respond(self)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.host = f"{host}:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def _send(handler, status: int, body: bytes = b"", headers: dict | None = None):
    handler.send_response(status)
    for k, v in (headers or {}).items():
        handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def creds(monkeypatch):
    monkeypatch.setenv("ENVBUILD_REGISTRY_USER", "alice")
    monkeypatch.setenv("ENVBUILD_REGISTRY_PASSWORD", "s3cret-pa55word")


def test_the_password_never_goes_to_a_token_service_elsewhere_over_plain_http(creds):
    from envbuild.core.errors import RegistryAuthError
    from envbuild.core.regclient import Registry

    tokens = _Server(lambda h: _send(h, 200, b'{"token": "abcdefgh"}'), host="127.0.0.2")
    registry = _Server(lambda h: _send(h, 401, headers={"WWW-Authenticate": f'Bearer realm="http://{tokens.host}/token",service="x"'}))
    try:
        with pytest.raises(RegistryAuthError, match="plain HTTP on another host") as err:
            Registry(f"{registry.host}/team/app").read_manifest("team/app", "cpu")
        assert "s3cret" not in str(err.value)
        assert tokens.seen == []  # not even asked
    finally:
        tokens.close()
        registry.close()


@pytest.mark.parametrize("answer", [b"<html>login</html>", b"[1, 2]", b'"token"', b'{"token": "abc\\r\\nX-Evil: 1"}',
                                    b'{"token": 5}', b"[" * 100000])
def test_a_token_service_that_answers_no_token_is_a_clear_error(answer, creds):
    from envbuild.core.errors import RegistryAuthError
    from envbuild.core.regclient import Registry

    server = _Server(lambda h: _send(h, 200, answer) if h.path.startswith("/token")
                     else _send(h, 401, headers={"WWW-Authenticate": f'Bearer realm="http://{server.host}/token"'}))
    try:
        with pytest.raises(RegistryAuthError, match="answered no usable token"):
            Registry(f"{server.host}/team/app").read_manifest("team/app", "cpu")
    finally:
        server.close()


def test_a_registry_error_that_echoes_the_token_prints_it_masked(creds, invoke, tmp_path):
    token = "tok-" + "Zq9" * 10

    def respond(h):
        if h.path.startswith("/token"):
            return _send(h, 200, json.dumps({"token": token}).encode())
        if h.headers.get("Authorization") == f"Bearer {token}":
            return _send(h, 500, f"internal: bad token {token}".encode())
        return _send(h, 401, headers={"WWW-Authenticate": f'Bearer realm="http://{server.host}/token"'})

    server = _Server(respond)
    try:
        key = tmp_path / "k.pub"
        from envbuild.ship.trust import keys

        key.write_bytes(keys.generate(b"x").public_pem)
        result = invoke("verify", f"{server.host}/team/app:cpu", "--key", key)
        assert result.exit_code == 1 and token not in result.output and "***" in result.output, result.output
    finally:
        server.close()


def test_an_answer_that_trickles_is_cut_off(monkeypatch):
    from envbuild.core import regclient
    from envbuild.core.errors import RegistryUnreachableError

    def respond(h):
        h.send_response(200)
        h.send_header("Content-Length", "1000")
        h.end_headers()
        for _ in range(1000):
            try:
                h.wfile.write(b"x")
                h.wfile.flush()
            except OSError:
                return
            time.sleep(0.2)

    monkeypatch.setenv("ENVBUILD_NET_DEADLINE", "1")
    server = _Server(respond)
    try:
        started = time.monotonic()
        with pytest.raises(RegistryUnreachableError):
            regclient.Registry(f"{server.host}/team/app").read_manifest("team/app", "cpu")
        assert time.monotonic() - started < 5
    finally:
        server.close()


# --- JSON from outside: shape, depth, numbers, text ---------------------------------------------------------------


@pytest.mark.parametrize("data", [b"not json", b"[]", b'"a string"', b"[" * 100000 + b"]" * 100000, b"\xff\xfe"])
def test_a_manifest_that_is_not_a_json_object_is_a_trust_error(data):
    from envbuild.ship.trust.oci import Manifest

    with pytest.raises(TrustError, match="not a JSON object"):
        Manifest(data, "application/vnd.oci.image.manifest.v1+json", "sha256:" + "0" * 64).json()


@pytest.mark.parametrize("doc", [b'{"config": "a string"}', b'{"config": {"digest": 5}}', b"[1]"])
def test_a_registry_manifest_of_the_wrong_shape_is_a_registry_error(doc):
    from envbuild.core.errors import RegistryAnswerError
    from envbuild.core.regclient import Manifest

    from envbuild.core.regclient import Registry

    reg = Registry("127.0.0.1:9/team/app")
    reg.manifest = lambda ref: Manifest("application/vnd.oci.image.manifest.v1+json", "sha256:" + "0" * 64, doc)
    with pytest.raises(RegistryAnswerError, match="not a JSON object|names no config digest"):
        reg.platform_digest("127.0.0.1:9/team/app:cpu", "linux/amd64")


@pytest.mark.parametrize("value, fragment", [("1" + "0" * 400, "digits"), ("[" * 100000, "nested too deeply"),
                                             ('"\\ud800"', None), ("Infinity", None), ("NaN", None)])
def test_json_from_outside_is_bounded_and_clean(value, fragment, tmp_path):
    from envbuild.core.files import read_json

    f = tmp_path / "x.json"
    f.write_text('{"seconds": %s}' % value if not value.startswith("[") else value)
    if fragment:
        with pytest.raises(InvalidInput, match=fragment):
            read_json(f, "x.json", InvalidInput)
    else:
        doc = read_json(f, "x.json", InvalidInput)
        json.dumps(doc).encode("utf-8")  # printable and writable again
        assert doc["seconds"] in (None, "?")


@pytest.mark.parametrize("smoke", [
    {"seconds": 10 ** 400}, {"seconds": float("inf")}, {"checks": [{"name": "device", "ok": True, "message": "\ud800"}]},
    {"backend": "[x](http://evil.example) <b>|"}, {"checks": "device ok"},
])
def test_the_site_takes_hostile_smoke_results_without_an_internal_error(smoke, invoke, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    doc = {"backend": "cpu", "ok": True, "image": "x:cpu", "seconds": 1.0, "date": "2026-12-02T00:00:00Z",
           "checks": [{"name": "device", "ok": True, "message": "ok"}], **smoke}
    (results / "r.json").write_text(json.dumps(doc, allow_nan=True).replace("\\\\ud800", "\\ud800"), encoding="utf-8",
                                    errors="surrogatepass")
    result = invoke("site", "--smoke-json", results, "--output", tmp_path / "site", "--matrix", MATRIX)
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 0:
        grid = (tmp_path / "site" / "grid.md").read_text()
        assert "](http://evil" not in grid and "<b>" not in grid


def test_site_output_replaces_only_a_site_it_wrote(invoke, tmp_path):
    out = tmp_path / "mine"
    (out / ".envbuild-site").mkdir(parents=True)  # a folder named like the marker is not the marker
    (out / "thesis.tex").write_text("months of work")
    result = invoke("site", "--output", out, "--matrix", MATRIX)
    assert result.exit_code == 2 and (out / "thesis.tex").read_text() == "months of work"
    (out / ".envbuild-site").rmdir()
    (out / ".envbuild-site").write_text("I made this\n")  # a marker it did not write
    assert invoke("site", "--output", out, "--matrix", MATRIX).exit_code == 2 and (out / "thesis.tex").exists()


def test_index_from_manifests_of_the_wrong_shape_exit_2(tmp_path):
    from envbuild.matrix import load
    from envbuild.ship.index import _joined

    b = load(MATRIX).backend("cpu")
    for platforms in (["linux/amd64"], {"linux/amd64": "sha256:x"}, {"linux/amd64": {"digest": 5}},
                      {"linux/\x1b[2J": {"digest": "sha256:" + "a" * 64}}):
        doc = {"images": {"cpu": {"repository": "reg/x", "platforms": platforms}}}
        with pytest.raises(InvalidInput):
            _joined(b, "reg/x", [doc], (tmp_path / "m.json",))


# --- bad input exits 2, the value escaped -------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["not a url", "tcp://", "http://[::1", "tcp://host:port"])
def test_a_docker_host_that_is_no_address_exits_2(value, invoke, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", value)
    result = invoke("doctor", "--backend", "cpu", "--matrix", MATRIX)
    assert result.exit_code == 2 and "DOCKER_HOST=" in result.stderr


@pytest.mark.parametrize("args", [["env", "--dir", "--help"], ["pull", "--backend", "cpu", "--manifest", "missing.json"],
                                  ["attest", "--backend", "cpu", "--tag", "a\nError: forged", "--smoke-json", "s.json"]])
def test_option_values_that_are_bad_input_exit_2(args, invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.json").write_text("{}")
    result = invoke(*args, "--matrix", MATRIX)
    assert result.exit_code == 2, result.output
    assert "\nError: forged" not in result.stderr


@pytest.mark.parametrize("name", ["PIP_CONSTRAINT", "uv_constraint"])
def test_the_matrix_cannot_lift_the_vendor_torch_guard(name, invoke):
    for field in ("env", "run.env"):
        result = invoke("validate", "--matrix", MATRIX, "--set", f"backends.cpu.{field}.{name}=/dev/null")
        assert result.exit_code == 2 and "is reserved" in result.stderr


def test_the_metadata_cache_that_is_no_file_exits_2(tmp_path, invoke):
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(MATRIX.read_text())
    os.mkfifo(tmp_path / "matrix.metadata.json")
    result = invoke("validate", "--matrix", matrix)
    assert result.exit_code == 2, result.output


def test_a_build_log_keeps_a_uid_after_getent_passwd():
    from envbuild.core.output import scrub

    assert scrub("RUN if getent passwd 1000 >/dev/null; then", environ={}).endswith("passwd 1000 >/dev/null; then")
    assert scrub("machine h login u password hunter22", environ={}).endswith("password ***")
