"""`envbuild base`: which base images a distribution's archive makes (the suite mapping, as data), which it refuses
and why, the command mmdebstrap gets, the archive's epoch, and the cache keyed by every input. The real make (twice,
the same layer) is tests/engine/test_base_engine.py."""

from __future__ import annotations

import re
import os
import stat
from pathlib import Path

import pytest

from envbuild import matrix
from envbuild.core import distbase
from envbuild.core.distbase import CannotMake, base_ways_out, makeable, suite_for
from envbuild.core.errors import InvalidInput
from envbuild.workspace import base

RELEASE = b"""-----BEGIN PGP SIGNED MESSAGE-----
Hash: SHA256

Origin: Debian
Codename: bookworm
Date: Sat, 11 Jul 2026 10:16:37 UTC
"""


@pytest.mark.parametrize("image, distribution, suite", [
    ("debian:bookworm-slim", "Debian", "bookworm"),
    ("debian:bookworm", "Debian", "bookworm"),
    ("docker.io/library/debian:bookworm-20260101-slim", "Debian", "bookworm"),
    ("debian:12", "Debian", "bookworm"),
    ("debian:12.15-slim", "Debian", "bookworm"),
    ("debian:trixie-slim", "Debian", "trixie"),
    ("debian:13", "Debian", "trixie"),
    ("ubuntu:24.04", "Ubuntu", "noble"),
    ("ubuntu:noble-20260101", "Ubuntu", "noble"),
    ("ubuntu:22.04", "Ubuntu", "jammy"),
    ("ubuntu:jammy", "Ubuntu", "jammy"),
])
def test_a_debian_or_ubuntu_base_maps_to_its_suite(image: str, distribution: str, suite: str) -> None:
    found = suite_for(image)
    assert (found.distribution, found.suite) == (distribution, suite)
    assert makeable(image)


@pytest.mark.parametrize("image, says", [
    ("nvidia/cuda:13.2.1-base-ubuntu24.04", "NVIDIA's CUDA libraries"),
    ("rocm/pytorch:rocm10.1.0_ubuntu24.04_py3.12_pytorch_release_2.14.0", "ROCm"),
    ("quay.io/ascend/cann:9.2.0-910b-ubuntu22.04-py3.12", "CANN"),
    ("public.ecr.aws/neuron/pytorch-training-neuronx:2.14.3-neuronx-py314-sdk2.33.0-ubuntu26.04", "Neuron"),
    ("vault.habana.ai/gaudi-docker/1.24.1/ubuntu24.04/habanalabs/pytorch-installer-2.11.0:latest", "Gaudi"),
    ("python:3.12-slim-bookworm", "its own CPython build"),
    ("debian:buster-slim", "only Debian (bookworm, trixie)"),  # no suite for it: said, not guessed
    ("ubuntu:20.04", "Ubuntu (24.04, 22.04)"),
    ("ghcr.io/example/debian:bookworm-slim", "what its maker put in it"),  # not Docker's official image
    ("debian:bookworm-slim@sha256:" + "a" * 64, "pinned by digest"),
])
def test_a_base_no_archive_makes_is_refused_saying_why(image: str, says: str) -> None:
    with pytest.raises(CannotMake) as exc:
        suite_for(image, "cpu")
    assert says in str(exc.value)
    assert not makeable(image)
    assert isinstance(exc.value, InvalidInput)  # exit 2: the input asks for what cannot be


def test_the_python_image_names_the_alternative() -> None:
    with pytest.raises(CannotMake) as exc:
        suite_for("python:3.12-slim-bookworm", "tpu")
    said = str(exc.value)
    assert "--set backends.tpu.base_image=debian:bookworm-slim" in said and "envbuild base --backend tpu" in said
    assert "docker save python:3.12-slim-bookworm" in said


def test_every_base_in_the_packaged_matrix_is_made_or_refused() -> None:
    m = matrix.load(str(matrix.default_path()))
    made = {b.name for b in m.backends if b.base_image and makeable(b.base_image)}
    assert {"cpu", "xpu"} <= made  # debian:bookworm-slim, ubuntu:24.04
    assert not made & {"cuda", "rocm", "npu", "tpu"}


def test_the_ways_out_name_envbuild_base_only_where_it_can_make_the_base() -> None:
    assert "envbuild base --backend cpu" in base_ways_out("debian:bookworm-slim", "cpu")
    assert "envbuild base" not in base_ways_out("nvidia/cuda:13.2.1-base-ubuntu24.04", "cuda")


def _backend(name: str = "cpu"):
    return matrix.load(str(matrix.default_path())).select([name])[0]


def test_the_plan_is_minbase_reproducible_and_leaves_out_what_varies_by_host() -> None:
    p = base.plan(_backend(), arch="amd64", environ={})
    argv = p.argv("out.tar", "1783764997")
    assert argv[:3] == ["mmdebstrap", "--variant=minbase", "--format=tar"]
    assert argv[-3:] == ["bookworm", "out.tar", "http://deb.debian.org/debian"]
    assert any("etc/hostname" in a and "etc/resolv.conf" in a for a in argv)
    assert "--dpkgopt=path-exclude=/usr/share/doc/*" in argv  # -slim, as Docker's
    assert (p.image, p.epoch) == ("debian:bookworm-slim", None)


def test_the_plan_takes_the_suite_archive_and_epoch_asked_for() -> None:
    p = base.plan(_backend(), suite="bookworm-updates", mirror="file:///srv/debian/", arch="arm64",
                  environ={"SOURCE_DATE_EPOCH": "1700000000"})
    assert (p.codename, p.mirror, p.arch, p.epoch) == ("bookworm-updates", "file:///srv/debian", "arm64", "1700000000")
    ubuntu = base.plan(_backend("xpu"), arch="arm64", environ={})
    assert ubuntu.mirror == distbase.UBUNTU_PORTS and "--keyring=" + distbase.UBUNTU_KEYRING in ubuntu.argv("o", "1")


@pytest.mark.parametrize("kw, says", [
    ({"mirror": "deb.debian.org/debian"}, "give the archive's URL"),
    ({"environ": {"SOURCE_DATE_EPOCH": "yesterday"}}, "not a number"),
])
def test_bad_input_is_refused(kw: dict, says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        base.plan(_backend(), **{"environ": {}, **kw})


def test_the_epoch_is_the_archive_release_date() -> None:
    assert base.release_epoch(RELEASE) == "1783764997"
    with pytest.raises(base.BaseError, match="SOURCE_DATE_EPOCH"):
        base.release_epoch(b"Origin: Debian\n")


def test_a_dead_archive_fails_in_seconds_naming_the_way_out(tmp_path: Path) -> None:
    p = base.plan(_backend(), mirror=f"file://{tmp_path}/none", environ={})
    with pytest.raises(base.BaseError) as exc:
        base.release(p)
    assert "--archive URL" in str(exc.value) and f"{tmp_path}/none/dists/bookworm/InRelease" in str(exc.value)


@pytest.fixture
def archive(tmp_path: Path, monkeypatch) -> Path:
    """A file:// archive holding only a Release file, and an mmdebstrap on PATH that writes a tarball made of
    its arguments and SOURCE_DATE_EPOCH, counting its runs."""
    root = tmp_path / "archive"
    (root / "dists" / "bookworm").mkdir(parents=True)
    (root / "dists" / "bookworm" / "InRelease").write_bytes(RELEASE)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fake = bin_ / "mmdebstrap"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "mmdebstrap 1.3.5"; exit 0; }\n'
                    f'echo run >> {tmp_path}/runs\necho "I: creating tarball..."\n'
                    'for a; do out=$prev; prev=$a; done\nprintf "%s" "$* $SOURCE_DATE_EPOCH" > "$out"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    return root


def test_a_tarball_from_the_same_inputs_is_reused_and_any_input_makes_it_again(archive: Path, tmp_path: Path) -> None:
    lines: list[str] = []
    cache = tmp_path / "cache"
    p = base.plan(_backend(), mirror=f"file://{archive}", environ={})
    first = base.make_tar(p, echo=lines.append, cache_dir=cache)
    assert not first.cached and first.epoch == "1783764997" and "SOURCE_DATE_EPOCH" not in p.argv("o", "1")
    assert any("mmdebstrap: I: creating tarball" in line for line in lines)  # its progress is shown
    again = base.make_tar(p, echo=lines.append, cache_dir=cache)
    assert again.cached and again.tar == first.tar and again.layer == first.layer
    assert (tmp_path / "runs").read_text().count("run") == 1
    # another archive state (a point release): made again
    (archive / "dists" / "bookworm" / "InRelease").write_bytes(RELEASE.replace(b"10:16:37", b"10:16:38"))
    moved = base.make_tar(p, echo=lines.append, cache_dir=cache)
    assert not moved.cached and moved.tar != first.tar
    # another epoch: made again
    epoch = base.plan(_backend(), mirror=f"file://{archive}", environ={"SOURCE_DATE_EPOCH": "1"})
    assert not base.make_tar(epoch, echo=lines.append, cache_dir=cache).cached
    assert not base.make_tar(p, echo=lines.append, cache_dir=cache, cache=False).cached
    assert (tmp_path / "runs").read_text().count("run") == 4


def test_the_made_base_is_loaded_under_the_backends_name_with_the_tarballs_layer(archive: Path, tmp_path: Path,
                                                                                 monkeypatch) -> None:
    from support.fakes import FakeEngine

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    engine = FakeEngine()
    p = base.plan(_backend(), mirror=f"file://{archive}", environ={})
    made = base.make(p, engine, echo=lambda line: None)
    (tar, ref, changes, labels), = engine.imported
    assert ref == "debian:bookworm-slim" and tar == str(made.tar)
    assert 'CMD ["bash"]' in changes and distbase.MADE_LABEL in labels
    assert made.image.layers == (made.layer,)


def test_output_writes_only_the_tarball(archive: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    p = base.plan(_backend(), mirror=f"file://{archive}", environ={})
    out = tmp_path / "bookworm.tar"
    made = base.make(p, None, output=out, echo=lambda line: None)
    assert out.read_bytes() == made.tar.read_bytes()


def test_mmdebstrap_missing_says_how_to_get_it(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "`apt-get install mmdebstrap` first" in base.plan(_backend(), environ={}).describe()[-1]  # --dry-run too
    with pytest.raises(base.BaseError, match="apt-get install mmdebstrap"):
        base.make_tar(base.plan(_backend(), environ={}), echo=lambda line: None)


def test_the_command_refuses_a_vendor_base_and_dry_runs_a_debian_one(invoke) -> None:
    refused = invoke("base", "--backend", "cuda", "--dry-run")
    assert refused.exit_code == 2 and "NVIDIA's CUDA libraries" in refused.stderr
    dry = invoke("base", "--backend", "cpu", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "debian:bookworm-slim" in dry.stdout and "mmdebstrap --variant=minbase" in dry.stdout


def test_a_made_base_stands_for_the_registry_digest_in_a_lock_only_when_envbuild_made_it(archive: Path, tmp_path: Path,
                                                                                        monkeypatch) -> None:
    from support.fakes import FakeEngine

    from envbuild.image.locking import made_base_digest

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    engine = FakeEngine()
    assert made_base_digest(engine, "debian:bookworm-slim") is None  # none here
    engine.add_image("sha256:" + "b" * 64, ["debian:bookworm-slim"]).layers = ("sha256:" + "c" * 64,)
    assert made_base_digest(engine, "debian:bookworm-slim") is None  # pulled, not made: the registry decides
    made = base.make(base.plan(_backend(), mirror=f"file://{archive}", environ={}), engine, echo=lambda line: None)
    assert made_base_digest(engine, "debian:bookworm-slim") == made.layer


def test_a_build_whose_base_cannot_be_pulled_makes_it_when_told_yes_then_builds(invoke, monkeypatch) -> None:
    """The offer's wiring: the build's base failure (as lock and build say it), `--yes`, the base made under the
    backend's name, the build run again. Refused without --yes off a terminal: the error stands, naming the way."""
    from support.fakes import FakeEngine

    from envbuild.cli import options
    from envbuild.core.errors import LockError
    from envbuild.image import build

    engine, calls, made = FakeEngine(), [], []
    monkeypatch.setattr(options, "engine", lambda: engine)

    def build_many(m, chosen, opts, eng, **kw):
        calls.append(chosen[0].name)
        if not made:
            raise LockError(f"cpu: cannot resolve the base image debian:bookworm-slim for linux/amd64 in its registry "
                            f"(no answer). {base_ways_out('debian:bookworm-slim', 'cpu')}")
        return []

    monkeypatch.setattr(build, "build_many", build_many)
    monkeypatch.setattr(base, "make", lambda p, eng, **kw: made.append((p.image, eng)))
    refused = invoke("build", "--backend", "cpu")
    assert refused.exit_code == 1 and "envbuild base --backend cpu" in refused.stderr and not made
    told = invoke("--yes", "build", "--backend", "cpu")
    assert told.exit_code == 0, told.output
    assert made == [("debian:bookworm-slim", engine)] and calls == ["cpu", "cpu", "cpu"]


def test_a_failed_build_result_naming_the_base_is_offered_the_make_too(invoke, monkeypatch) -> None:
    """build() returns a lock's or BuildKit's base failure as a failed result (not raised): the same offer."""
    from support.fakes import FakeEngine

    from envbuild.cli import options
    from envbuild.image.build import BuildResult
    from envbuild.image import build
    from envbuild.image.builder import base_failure

    engine, made = FakeEngine(), []
    monkeypatch.setattr(options, "engine", lambda: engine)
    said = base_failure("failed to resolve source metadata for docker.io/library/debian:bookworm-slim: i/o timeout",
                        "debian:bookworm-slim", "cpu")
    monkeypatch.setattr(build, "build_many", lambda *a, **kw: [
        BuildResult("cpu", bool(made), ["x:cpu"], "sha256:" + "1" * 64 if made else None, 1.0, error=None if made else said)])
    monkeypatch.setattr(base, "make", lambda p, eng, **kw: made.append(p.image))
    assert invoke("build", "--backend", "cpu").exit_code == 1 and not made  # off a terminal, without --yes: asked nothing
    told = invoke("--yes", "build", "--backend", "cpu")
    assert told.exit_code == 0, told.output
    assert made == ["debian:bookworm-slim"]


def test_a_long_mmdebstrap_stage_says_it_is_still_going(archive: Path, tmp_path: Path, monkeypatch) -> None:
    """Downloading or installing the packages is one stage ("I: ...") that may take minutes: a heartbeat says the
    base is still being made, with mmdebstrap's latest line."""
    from envbuild.core import heartbeat

    monkeypatch.setattr(heartbeat, "PERIOD", 0.01)
    monkeypatch.setattr(heartbeat, "QUIET", 0.0)
    heard = tmp_path / "heard"
    fake = tmp_path / "bin" / "mmdebstrap"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "mmdebstrap 1.3.5"; exit 0; }\n'
                    'echo "I: downloading packages with apt..."\necho "Get:1 http://deb.debian.org libc6 [2.8 MB]"\n'
                    f'i=0; while [ ! -e {heard} ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done\n'
                    'for a; do out=$prev; prev=$a; done\nprintf "%s" "$*" > "$out"\n')
    lines: list[str] = []

    def echo(line: str) -> None:
        lines.append(line)
        if "still making" in line and "last: Get:1" in line:
            heard.touch()

    base.make_tar(base.plan(_backend(), mirror=f"file://{archive}", environ={}), echo=echo, cache=False,
                  cache_dir=tmp_path / "cache")
    still = [line for line in lines if "still making" in line]
    assert heard.exists() and still
    assert re.fullmatch(r"\[cpu\] still making \S+ with mmdebstrap: \d+s; last: Get:1 http://deb.debian.org libc6 "
                        r"\[2\.8 MB\]", still[-1]), still
