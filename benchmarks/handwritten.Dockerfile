# The benchmark's anchor: a cpu image written by hand in the style of Hugging Face's torch-light CI image (one
# apt layer; a venv with uv; torch; then transformers and accelerate, their versions as ARGs just before the last
# layer), built in the same run as envbuild's: same base, wheelhouse, apt packages and CA bundle. Not a product file.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv g++ python3-dev \
    && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
# The CA bundle as a secret (no layer keeps it); pip and uv read it from SSL_CERT_FILE.
# hadolint ignore=DL3013
RUN --mount=type=secret,id=ca_bundle,target=/run/secrets/ca_bundle \
    python3 -m venv /opt/venv \
    && if [ -s /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle; fi \
    && pip install --no-cache-dir uv
ARG TORCH=2.13.0
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=secret,id=ca_bundle,target=/run/secrets/ca_bundle \
    if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi \
    && uv pip install --no-cache --find-links /wheelhouse "torch==${TORCH}"
ARG TRANSFORMERS=5.24.0
ARG ACCELERATE=1.15.0
# The benchmark's run id (a new one each run, as envbuild's ENVBUILD_CACHE_ID): a bump measured in this run never
# finds the layer of an earlier run's same bump in BuildKit's cache.
ARG BENCH_RUN=none
RUN --mount=type=secret,id=ca_bundle,target=/run/secrets/ca_bundle \
    if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi \
    && uv pip install --no-cache "transformers==${TRANSFORMERS}" "accelerate==${ACCELERATE}"
