#!/bin/sh
# The image's entrypoint (/opt/envbuild/bin/envbuild-entrypoint). Clusters run images read-only, as any uid:gid
# (Apptainer: the host user's own group, not group 0) and with a HOME of their own; `docker run --user` does the
# same without the read-only part. Then /cache, where the image points the Hugging Face, Inductor and Triton
# caches, cannot be written: they move to a folder this user can write ($HOME/.cache, else $TMPDIR's or /tmp's),
# said once on stderr. A writable volume at /cache keeps them there. Then the command runs in this process.
# The probe does the same by itself where an entrypoint is not run (apptainer exec, a pod's `command`).

envbuild_writable() {
    [ -d "$1" ] && [ -w "$1" ] && [ -x "$1" ]
}

# Can a program written under $1 run? Not on a noexec mount (Docker's --tmpfs default): torch.compile's kernels
# are loaded from where the Inductor cache is, and would fail deep in its loader.
envbuild_runs_code() {
    f="$1/.envbuild-exec-$$"
    { printf '#!/bin/sh\nexit 0\n' >"$f" && chmod +x "$f" && "$f"; } 2>/dev/null
    ok=$?
    rm -f "$f"
    return $ok
}

envbuild_caches() {
    root=${ENVBUILD_CACHE_ROOT:-/cache}
    if envbuild_writable "$root"; then
        return 0
    fi
    base=
    noexec=
    for candidate in "${HOME:-}" "${TMPDIR:-}" /tmp; do
        if [ -n "$candidate" ] && envbuild_writable "$candidate"; then
            if envbuild_runs_code "$candidate"; then
                base=${candidate%/}
                noexec=
                break
            fi
            [ -n "$base" ] || { base=${candidate%/}; noexec=1; }  # writable: the caches can live there, not compile
        fi
    done
    if [ -z "$base" ]; then
        echo "envbuild: $root cannot be written, nor HOME, TMPDIR or /tmp: downloads and compiled kernels will fail; mount a writable volume at $root" >&2
        return 0
    fi
    moved=$base/.cache
    for name in XDG_CACHE_HOME HF_HOME TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR; do
        value=
        eval "value=\${$name:-}"
        case $value in
            "$root" | "$root"/*) export "$name=$moved${value#"$root"}" ;;
        esac
    done
    home=
    if [ -z "${HOME:-}" ] || ! envbuild_writable "$HOME"; then
        home=" and HOME to $base (${HOME:-unset} cannot be written)"
        export HOME="$base"
    fi
    mkdir -p "$moved" 2>/dev/null
    echo "envbuild: $root cannot be written by uid $(id -u):$(id -g) here (read-only, or not group 0): caches moved to $moved$home for this run; mount a writable volume at $root to keep them" >&2
    if [ -n "$noexec" ]; then
        echo "envbuild: no writable place here can run compiled code ($base is mounted noexec): torch.compile will fail; mount a writable volume at $root (docker run -v envbuild-cache:$root) or let /tmp run code (docker run --tmpfs /tmp:exec)" >&2
    fi
}

envbuild_caches
if [ "$#" -eq 0 ]; then
    set -- "$(command -v bash || echo /bin/sh)"
fi
exec "$@"
