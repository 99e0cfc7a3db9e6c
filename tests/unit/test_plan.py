"""The content key of a cell: what decides its image, computed the same by any machine from the same checkout, so a
registry can be asked whether it holds that image (REG:BACKEND-in-KEY) before anything is built or pushed."""

from __future__ import annotations

import shutil
from pathlib import Path

from support.constants import MATRIX

from envbuild.image.plan import BuildOptions, content_key, make_plan
from envbuild.image.locking import planned_content_key
from envbuild.core.platform import Platform
from envbuild.matrix import load
from envbuild.ship.shared import content_tag
import os
import pytest
from envbuild.image import plan
from envbuild.core.errors import BuildError, EnvbuildError, InvalidInput

LOCK = b"# a lock: its inputs name the base image, its registry digest for the platform, the indexes and wheels\n"


def key(folder: Path, overrides: list[str] = (), backend: str = "cpu", **opts) -> str:
    """The key of `backend` for a checkout copied into `folder` (its own context folder, its own paths)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(MATRIX, folder / "matrix.yaml")
    m = load(folder / "matrix.yaml", list(overrides))
    o = BuildOptions(context_dir=folder / ".envbuild" / "context", locks_dir=folder / "locks", **opts)
    plan = make_plan(m, m.backend(backend), o, None, lock=LOCK, write_cache=False)
    return content_key(plan, o)


def test_the_same_checkout_in_two_folders_gives_the_same_key(tmp_path, buildkit_client):
    assert key(tmp_path / "a") == key(tmp_path / "clone-elsewhere")


def test_a_change_to_the_cell_changes_its_key_and_another_backends_does_not(tmp_path, buildkit_client):
    cpu = key(tmp_path / "a")
    assert key(tmp_path / "b", ["backends.cpu.apt=[less]"]) != cpu  # its Dockerfile
    assert key(tmp_path / "c", ["transformers.version=5.23.0"]) != cpu  # a pin every image carries
    assert key(tmp_path / "d", ["backends.xpu.torch.version=2.14.0"]) == cpu  # another backend's entry
    assert key(tmp_path / "e", platform="linux/arm64") != cpu  # another platform
    assert key(tmp_path / "f", build_args=("PIP_EXTRA_FLAG=1",)) != cpu  # a build argument may change what is built
    # a proxy only changes how the build reaches the network (Docker keeps it out of its cache keys too)
    assert key(tmp_path / "g", build_args=("HTTP_PROXY=http://proxy:3128",)) == cpu


def test_labels_and_the_engine_are_no_part_of_it(tmp_path, buildkit_client):
    """A revision label differs on every commit; the engine, its ids and the builder's argv decide no content."""
    cpu = key(tmp_path / "a")
    assert key(tmp_path / "b", labels=("org.opencontainers.image.revision=0123abcd",)) == cpu
    assert key(tmp_path / "c", tags=("elsewhere/else:cpu",), no_cache=True) == cpu


def test_the_planned_key_needs_the_committed_lock(tmp_path):
    m = load(MATRIX)
    opts = BuildOptions(locks_dir=tmp_path / "locks", context_dir=tmp_path / "ctx")
    assert planned_content_key(m, m.backend("cpu"), opts, Platform("linux/amd64")) is None  # not known before resolving
    assert content_tag(m.backend("cpu"), "ab" * 32) == "cpu-in-abababababababab"


def test_the_index_takes_a_platform_not_rebuilt_from_the_registrys_image_of_its_content(monkeypatch):
    """`matrix --changed` leaves out a platform whose content the registry holds; the index job joins it from there."""
    from types import SimpleNamespace

    from envbuild.net import regclient
    from envbuild.net.regclient import Manifest
    from envbuild.image import locking
    from envbuild.ship import index

    m = load(MATRIX)
    cpu = m.backend("cpu")
    asked = []

    class Held:
        def __init__(self, ref, environ=None):
            pass

        def manifest(self, ref):
            asked.append(ref)
            if ref.endswith(":cpu-in-" + "cd" * 8):
                return Manifest("application/vnd.oci.image.manifest.v1+json", "sha256:" + "e" * 64, b"{}")
            return None

    monkeypatch.setattr(regclient, "Registry", Held)
    monkeypatch.setattr(locking, "planned_content_key", lambda *a, **k: "cd" * 32)
    session, unsigned = SimpleNamespace(environ={}), SimpleNamespace(sign_key=None)

    def held(opts):
        return index._held_content(m, cpu, "reg.example/eb", "linux/arm64", session, opts, lambda s: None)

    rec = held(unsigned)
    assert rec["digest"] == "sha256:" + "e" * 64 and rec["ref"] == "reg.example/eb:cpu-in-" + "cd" * 8
    assert rec["unchanged_since"]  # its smoke attestation stays on the digest: not asked of this run
    monkeypatch.setattr(locking, "planned_content_key", lambda *a, **k: "ab" * 32)
    assert held(unsigned) is None
    monkeypatch.setattr(locking, "planned_content_key", lambda *a, **k: None)  # no committed lock: not known
    assert held(unsigned) is None
    assert len(asked) == 2


def test_a_signed_index_leaves_out_held_content_that_does_not_verify(monkeypatch):
    """The index is signed: it must not vouch for a content tag that anyone able to push could have put there. The
    digest read is the one verified (the tag may move in between); what does not verify is left out, and said."""
    from types import SimpleNamespace

    from envbuild.net import regclient
    from envbuild.net.regclient import Manifest
    from envbuild.image import locking
    from envbuild.ship import index
    from envbuild.ship.trust import TrustError
    from envbuild.ship.trust import verify as verify_mod

    m = load(MATRIX)
    digest = "sha256:" + "e" * 64

    class Held:
        def __init__(self, ref, environ=None):
            pass

        def manifest(self, ref):
            return Manifest("application/vnd.oci.image.manifest.v1+json", digest, b"{}")

    checked = []

    def refuse(repo, reference, key, **kw):
        checked.append((repo, reference, key))
        raise TrustError("no signature by this key")

    monkeypatch.setattr(regclient, "Registry", Held)
    monkeypatch.setattr(locking, "planned_content_key", lambda *a, **k: "cd" * 32)
    monkeypatch.setattr(verify_mod, "verify", refuse)
    signed = SimpleNamespace(sign_key=SimpleNamespace(public=lambda: "the public half"))
    said: list[str] = []
    assert index._held_content(m, m.backend("cpu"), "reg.example/eb", "linux/arm64", SimpleNamespace(environ={}),
                               signed, said.append) is None
    assert checked == [("reg.example/eb", digest, "the public half")]
    assert any("does not verify with the signing key" in s and "leaving it out" in s and "linux/arm64" in s for s in said), said
    monkeypatch.setattr(verify_mod, "verify", lambda *a, **k: None)  # it verifies: joined
    assert index._held_content(m, m.backend("cpu"), "reg.example/eb", "linux/arm64", SimpleNamespace(environ={}),
                               signed, said.append)["digest"] == digest


# --- What the commands call, called directly (the CLI parses and prints) (from test_command_library.py)

def test_build_options_refuse_special_files_and_a_missing_ca_bundle(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for given in ({"ca_bundle": fifo}, {"netrc": fifo}):
        with pytest.raises(InvalidInput, match=r"(--ca-bundle|--netrc) .*fifo: not a regular file"):
            plan.options(**given)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "gone.pem"))
    with pytest.raises(BuildError, match=r"gone.pem \(from the environment\) does not exist"):
        plan.options()
    assert plan.options(no_ca_bundle=True).ca_bundle is None  # --no-ca-bundle: not even the environment's
    pem = tmp_path / "ca.pem"
    pem.write_text("not read here")
    monkeypatch.setenv("SSL_CERT_FILE", str(pem))
    assert plan.options().ca_bundle == pem
    opts = plan.options(no_ca_bundle=True, tags=("a/b:c",), locks_dir=tmp_path / "locks")
    assert opts.tags == ("a/b:c",) and opts.locks_dir == tmp_path / "locks"
    with pytest.raises(InvalidInput, match="starts with '-'"):  # and every value the builder reads is checked
        plan.options(no_ca_bundle=True, build_args=("-x=1",))


def test_a_bad_netrc_is_named_never_quoted(tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine example.org login u password n3trc-Pa55word extra-token\n")
    with pytest.raises(EnvbuildError, match="not a valid netrc file") as info:
        plan.options(no_ca_bundle=True, netrc=netrc)
    assert "n3trc-Pa55word" not in str(info.value) and f"--netrc {netrc}:" in str(info.value)
