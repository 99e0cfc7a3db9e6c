# shellcheck shell=sh
# The uv cache of one install step (and envbuild_compile, below), read by the step's own shell (`. /run/uv-step.sh`)
# before its commands: every uv step of an envbuild Dockerfile bind-mounts this file, and its content is part of the
# build's key.
#
# The cache mount holds one folder per ENVBUILD_CACHE_ID, and in it one generation (a folder) in use. A step marks
# its generation in flight and unmarks it when the step's shell exits with 0. A mark found at the start means a step
# was cut off (a killed daemon leaves the step's processes writing on), so that generation is never read again:
# the step starts a new, empty one, as does the first step of a --no-cache build (a new value in the fresh_cache
# secret: a secret, unlike a build argument, is no part of a step's cache key, so the next plain build reuses the
# layers of a --no-cache one). The mount is `sharing=locked`, so a live step's mark never reads as a dead one's.
# The index credentials and CA bundle come as BuildKit secrets, absent unless passed.

envbuild_uv_step() {
    if [ -s /run/secrets/ca_bundle ]; then export SSL_CERT_FILE=/run/secrets/ca_bundle; fi
    if [ -s /run/secrets/netrc ]; then export NETRC=/run/secrets/netrc; fi
    # copy, not link: the cache is another filesystem, and never lands in the image
    export UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never
    envbuild_root="/root/.cache/uv/${ENVBUILD_CACHE_ID:-envbuild}"
    mkdir -p "$envbuild_root" || return 1
    envbuild_gen="$(cat "$envbuild_root/current" 2>/dev/null || true)"
    envbuild_fresh="$(cat /run/secrets/fresh_cache 2>/dev/null || true)"
    if [ -z "$envbuild_gen" ] || [ ! -d "$envbuild_root/$envbuild_gen" ] || [ -e "$envbuild_root/$envbuild_gen.inflight" ] \
        || { [ -n "$envbuild_fresh" ] && [ "$envbuild_fresh" != "$(cat "$envbuild_root/fresh" 2>/dev/null)" ]; }; then
        if [ -n "$envbuild_gen" ]; then
            echo "envbuild: uv cache $envbuild_gen set aside (a step using it was cut off, or --no-cache)"
        fi
        find "$envbuild_root" -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null || true
        envbuild_gen="g$(date +%s)-$$"
        mkdir -p "$envbuild_root/$envbuild_gen" || return 1
        echo "$envbuild_gen" > "$envbuild_root/current" || return 1
        echo "$envbuild_fresh" > "$envbuild_root/fresh" || return 1
        echo "envbuild: uv cache $envbuild_gen: a new, empty one"
    fi
    export UV_CACHE_DIR="$envbuild_root/$envbuild_gen"
    touch "$UV_CACHE_DIR.inflight" || return 1
    trap envbuild_uv_done EXIT
    # A signal ends the step as a failure (the status the exit trap sees then is not the signal's in every shell).
    envbuild_signalled=""
    trap 'envbuild_signalled=1; exit 129' HUP
    trap 'envbuild_signalled=1; exit 130' INT
    trap 'envbuild_signalled=1; exit 143' TERM
}

# Unmarked only when the step's shell exits with 0: a failed or killed step leaves its mark.
envbuild_uv_done() {
    envbuild_status=$?
    if [ "$envbuild_status" -eq 0 ] && [ -z "$envbuild_signalled" ]; then rm -f "$UV_CACHE_DIR.inflight"; fi
    exit "$envbuild_status"
}

# Bytecode for what the step installed (the packages /run/layer/pylock.toml names, by their RECORD), compiled once here rather
# than in every container, as `uv pip install --compile-bytecode` would, but without the test suites wheels carry
# (folders named tests or test): no application imports them, and they are a quarter of the source of sympy,
# networkx and numpy. One pool of workers for all files; a file that does not compile is left as it is, as pip and
# uv leave it. Usage: envbuild_compile PYTHON
envbuild_compile() {
    "$1" - /run/layer/pylock.toml <<'PY'
import compileall, functools, re, sys
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata

with open(sys.argv[1]) as layer:
    names = re.findall(r'^name = "([A-Za-z0-9][A-Za-z0-9._-]*)"$', layer.read(), re.M)
files = []
for name in names:
    dist = metadata.distribution(name)
    files += [str(dist.locate_file(f)) for f in dist.files or () if f.suffix == ".py" and f.parts[0] != ".."
              and not {"tests", "test"} & set(f.parts[:-1])]
if files:
    with ProcessPoolExecutor() as pool:
        for _ in pool.map(functools.partial(compileall.compile_file, quiet=2), files, chunksize=64):
            pass
PY
}

envbuild_uv_step
