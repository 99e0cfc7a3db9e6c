"""Issue 26 in pure logic: which cache mounts are envbuild's, and which build errors name the way out."""

from __future__ import annotations

import json

from support.fakes import FakeEngine

from envbuild import clean
from envbuild.build import builder

UV_STEP = ('cached mount /root/.cache/uv from exec /bin/sh -c if [ -s /run/secrets/ca_bundle ]; then export '
           'SSL_CERT_FILE=/run/secrets/ca_bundle; fi && c="/root/.cache/uv/${ENVBUILD_CACHE_ID:-envbuild}" && '
           'export UV_CACHE_DIR="$c/$g" && /run/uv/uv pip install --python /opt/venv/bin/python -r /run/layer.txt')
OLD_UV_STEP = "cached mount /root/.cache/uv from exec /bin/sh -c export UV_LINK_MODE=copy && /run/uv/uv pip install -r /run/layer.txt"
PIP_STEP = ('cached mount /root/.cache/pip from exec /bin/sh -c export PIP_CACHE_DIR="/root/.cache/pip/${ENVBUILD_CACHE_ID:-envbuild}" '
            '&& /opt/venv/bin/pip install --find-links /run/wheelhouse --target /opt/uv "uv==0.13.8"')
FOREIGN = [
    "cached mount /root/.cache/uv from exec /bin/sh -c uv pip install -r requirements.txt",  # someone's own uv
    "cached mount /root/.cache/pip from exec /bin/sh -c pip install flask",
    "cached mount /var/cache/apt from exec /bin/sh -c apt-get update && apt-get install -y g++",
    "cached mount /go/pkg/mod from exec /bin/sh -c /run/uv/uv pip install x",  # envbuild's words, another target
]


def engine_with(*descriptions: str, in_use: int | None = None) -> FakeEngine:
    e = FakeEngine()
    e.cache_mounts = [{"ID": f"id{i:02d}xxxxxxxxxxxx", "Type": "exec.cachemount", "Description": d, "Size": 100 + i,
                       "InUse": i == in_use} for i, d in enumerate(descriptions)]
    return e


def test_only_envbuild_s_uv_and_pip_cache_mounts_are_its_own():
    e = engine_with(UV_STEP, OLD_UV_STEP, PIP_STEP, *FOREIGN)
    assert [r["Description"] for r in clean.own_build_caches(e)] == [UV_STEP, OLD_UV_STEP, PIP_STEP]


def test_clean_build_cache_removes_them_keeps_a_live_one_and_everyone_else_s():
    e = engine_with(UV_STEP, PIP_STEP, OLD_UV_STEP, *FOREIGN, in_use=2)
    done = clean.clean(e, images=False, build_cache=True)
    assert [r["Description"] for r in e.cache_mounts] == [OLD_UV_STEP, *FOREIGN]  # the live one and the foreign stay
    assert len(done.build_caches) == 2 and done.freed == 100 + 101
    assert any("a build is using it now" in k for k in done.kept)


def test_plain_clean_leaves_build_caches_alone():
    e = engine_with(UV_STEP, PIP_STEP)
    done = clean.clean(e, images=True)
    assert len(e.cache_mounts) == 2 and done.build_caches == []


def test_clean_build_cache_on_the_command_line(invoke, monkeypatch):
    e = engine_with(UV_STEP, *FOREIGN)
    monkeypatch.setattr("envbuild.cli._engine", lambda *a, **k: e)
    result = invoke("clean", "--build-cache", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["build_caches"]) == 1 and doc["freed_bytes"] == 100
    text = invoke("clean", "--build-cache")
    assert "nothing to clean" in text.stdout  # the second time there is nothing of envbuild's left


def test_an_install_step_broken_by_a_cache_names_the_way_out():
    said = ('torch 1/1 RUN uv pip install --require-hashes -r /run/layer.txt failed: error: Failed to install: '
            'sympy-1.14.0-py3-none-any.whl (sympy==1.14.0); Caused by: The wheel is invalid: Missing .dist-info directory')
    message = builder.cache_failure(said)
    assert message and "envbuild clean --build-cache" in message and said in message


def test_other_failures_are_not_blamed_on_the_cache():
    for said in ("torch 1/1 RUN uv pip install -r /run/layer.txt failed: error: Hash mismatch for torch==2.13.0",
                 "RUN apt-get update failed: E: Unable to locate package python3",
                 "deps RUN python -c import torch failed: ModuleNotFoundError: No module named 'torch'"):
        assert builder.cache_failure(said) is None, said
