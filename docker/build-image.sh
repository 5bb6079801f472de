#!/usr/bin/env bash
# Build one container image, or find it already built: docker where its engine answers, else
# buildah (daemonless: overlay or vfs storage by docker/podman/storage-conf.sh, chroot isolation,
# runc; docker/podman/*.conf).
#
#   build-image.sh build --name NAME --ref REF --file DOCKERFILE --context DIR [--ignorefile FILE]
#                        [--base-arg ARG --base-default IMAGE --base-fallback REF]
#                        [--build-arg K=V]... [--host-pip] [--skip-unpullable]
#   build-image.sh base  --ref REF      a Debian base image from packages (mmdebstrap), no registry
#   build-image.sh size REF             the image's size in bytes
#
# Caching: the input hash is the sha256 of the Dockerfile, the ignore file, every file of the build
# context (the `!` entries of the ignore file, or the whole context without one; caches left out),
# the build args and the base image's id. It becomes the label dev.vllm.canary.input-sha256; when
# REF in storage carries the same hash, nothing is built. A rebuild removes the image it replaces
# once that has no tag left (under vfs every layer is a full copy).
#
# Base: --base-arg names the Dockerfile's base build arg. CANARY_BASE_SOURCE=auto (default) uses
# --base-default where it is in storage or can be pulled, else --base-fallback (built with `base`
# when missing); =pull always the default, =debian always the fallback. Without a fallback, a base
# that cannot be had fails the build, or with --skip-unpullable prints a SKIPPED line (exit 0).
#
# --host-pip: pip inside the build uses this machine's pip settings (`pip config list`): the CA
# bundle (`cert`) and the `find-links` folders are mounted read-only and passed as PIP_CERT and
# PIP_FIND_LINKS build args, and PIP_EXTRA_INDEX_URL is set empty (the host's wheels stand in for
# any extra index). buildah only: docker build cannot mount, its builds use the Dockerfiles'
# defaults (PyPI, and PyTorch's CPU index for the engine).
#
# One line per image on stdout: built or cached, seconds, size. The build's output goes to
# $IMAGE_LOGS/NAME.log (default .cache/images/logs), its last lines to stderr on failure.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
INPUT_LABEL=dev.vllm.canary.input-sha256
BASE_PACKAGES="${CANARY_BASE_PACKAGES:-ca-certificates,python3,python3-venv,python-is-python3,python3-pip}"
BASE_CODENAME="${CANARY_BASE_CODENAME:-bookworm}"
logs="${IMAGE_LOGS:-$repo/.cache/images/logs}"

die() { echo "build-image: $*" >&2; exit 1; }
cleanup_dir=""
trap '[ -z "$cleanup_dir" ] || rm -rf "$cleanup_dir"' EXIT

DOCKER="${DOCKER:-docker}"
engine="${CONTAINER_ENGINE:-}"
if [ -z "$engine" ]; then
    if command -v "$DOCKER" > /dev/null 2>&1 && "$DOCKER" info > /dev/null 2>&1; then engine=docker; else engine=buildah; fi
fi
case "$engine" in
    docker)
        command -v "$DOCKER" > /dev/null 2>&1 && "$DOCKER" info > /dev/null 2>&1 \
            || die "no Docker engine reachable here ('$DOCKER info' failed); CONTAINER_ENGINE=buildah builds without one"
        ;;
    buildah)
        for tool in buildah podman; do
            command -v "$tool" > /dev/null 2>&1 || die "$tool is not installed: run make container-tools"
        done
        export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/podman/containers.conf}"
        CONTAINERS_STORAGE_CONF="$("$here/podman/storage-conf.sh")"
        export CONTAINERS_STORAGE_CONF
        ;;
    *) die "CONTAINER_ENGINE must be docker or buildah, not '$engine'" ;;
esac

# podman reads the storage buildah writes: one inspect syntax for both engines.
inspector() { if [ "$engine" = docker ]; then echo "$DOCKER"; else echo podman; fi; }
image_id() { "$(inspector)" image inspect --format '{{.Id}}' "$1" 2> /dev/null || true; }
image_label() { "$(inspector)" image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2> /dev/null || true; }
image_size() { "$(inspector)" image inspect --format '{{.Size}}' "$1"; }
image_tags() { "$(inspector)" image inspect --format '{{len .RepoTags}}' "$1" 2> /dev/null || echo 0; }
human() { numfmt --to=si --suffix=B --format='%.1f' "$1"; }

# Remove OLD_ID when it has lost its last tag to the image just built.
drop_replaced() {
    local old="$1" new="$2"
    if [ -n "$old" ] && [ "$old" != "$new" ] && [ "$(image_tags "$old")" = 0 ]; then
        "$(inspector)" rmi "$old" > /dev/null 2>&1 || true
    fi
}

# sha256 of the files under the given paths (relative to the current directory), caches left out.
hash_files() {
    find "$@" \( -name __pycache__ -o -name .mypy_cache -o -name .pytest_cache -o -name .ruff_cache \) -prune \
        -o -type f ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
}

# The value of a pip setting on this machine (pip config list: environment first, then files).
host_pip_setting() {
    python3 -m pip config list 2> /dev/null | sed -n "s/^[^=]*\\.$1='\\(.*\\)'\$/\\1/p" | head -1
}

run_logged() {
    local log="$1"; shift
    mkdir -p "$(dirname "$log")"
    if ! "$@" > "$log" 2>&1; then
        tail -n 40 "$log" >&2
        die "failed (full log: $log): $*"
    fi
}

cmd_base() {
    local ref="" name=base
    while [ $# -gt 0 ]; do
        case "$1" in
            --ref) ref="${2:?}"; shift 2 ;;
            --name) name="${2:?}"; shift 2 ;;
            *) die "base: unknown argument $1" ;;
        esac
    done
    [ -n "$ref" ] || die "base: --ref is required"
    command -v mmdebstrap > /dev/null 2>&1 || die "mmdebstrap is not installed: run make container-tools"
    local sources hash start
    sources="$("$here/base/debian-sources.sh" "$BASE_CODENAME")"
    hash="$({ echo "base v2 $BASE_CODENAME $BASE_PACKAGES"; echo "$sources"; mmdebstrap --version;
              sha256sum "$here/base/debian-sources.sh" | cut -d' ' -f1; } | sha256sum | cut -d' ' -f1)"
    start=$(date +%s)
    if [ "$(image_label "$ref" "$INPUT_LABEL")" = "$hash" ]; then
        echo "image $name $ref: cached ($(( $(date +%s) - start )) s, $(human "$(image_size "$ref")"))"
        return
    fi
    local old tmp
    old="$(image_id "$ref")"
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/canary-base.XXXXXX")"
    cleanup_dir="$tmp"
    mapfile -t mirrors <<< "$sources"
    run_logged "$logs/$name.log" mmdebstrap --variant=minbase --include="$BASE_PACKAGES" \
        "$BASE_CODENAME" "$tmp/rootfs.tar" "${mirrors[@]}"
    # label values without spaces: docker's import splits an unquoted LABEL value at blanks
    local importer; importer="$(inspector)"
    run_logged "$logs/$name.import.log" "$importer" import \
        --change "LABEL $INPUT_LABEL=$hash" \
        --change "LABEL org.opencontainers.image.title=vllm-canary-base" \
        --change "LABEL dev.vllm.canary.base-suite=$BASE_CODENAME" \
        --change "LABEL dev.vllm.canary.base-packages=$BASE_PACKAGES" \
        --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --change "ENV LANG=C.UTF-8" \
        --change 'CMD ["/bin/bash"]' \
        "$tmp/rootfs.tar" "$ref"
    rm -rf "$tmp"
    drop_replaced "$old" "$(image_id "$ref")"
    echo "image $name $ref: built in $(( $(date +%s) - start )) s ($(human "$(image_size "$ref")"))"
}

# Where the base can be had: in storage, or pulled (bounded: a registry that does not answer).
pullable() {
    [ -n "$(image_id "$1")" ] && return 0
    if [ "$engine" = docker ]; then
        timeout 300 "$DOCKER" pull -q "$1" > /dev/null 2>&1
    else
        timeout 300 podman pull -q "$1" > /dev/null 2>&1
    fi
}

cmd_build() {
    local name="" ref="" file="" context="" ignorefile="" base_arg="" base_default="" base_fallback="" host_pip=0 skip_unpullable=0
    local -a build_args=()
    while [ $# -gt 0 ]; do
        case "$1" in
            --name) name="${2:?}"; shift 2 ;;
            --ref) ref="${2:?}"; shift 2 ;;
            --file) file="${2:?}"; shift 2 ;;
            --context) context="${2:?}"; shift 2 ;;
            --ignorefile) ignorefile="${2:?}"; shift 2 ;;
            --base-arg) base_arg="${2:?}"; shift 2 ;;
            --base-default) base_default="${2:?}"; shift 2 ;;
            --base-fallback) base_fallback="${2:?}"; shift 2 ;;
            --build-arg) build_args+=("${2:?}"); shift 2 ;;
            --host-pip) host_pip=1; shift ;;
            --skip-unpullable) skip_unpullable=1; shift ;;
            *) die "build: unknown argument $1" ;;
        esac
    done
    [ -n "$name" ] && [ -n "$ref" ] && [ -f "$file" ] && [ -d "$context" ] \
        || die "build: --name, --ref, --file (a file) and --context (a directory) are required"
    [ -z "$ignorefile" ] || [ -f "$ignorefile" ] || die "build: ignore file $ignorefile not found"
    local start; start=$(date +%s)

    local -a mounts=()
    local base="" base_note=""
    if [ -n "$base_arg" ]; then
        # the base default is the Dockerfile's own (ARG NAME=default): one place
        [ -n "$base_default" ] || base_default="$(sed -n "s/^ARG $base_arg=//p" "$file" | head -1)"
        local source="${CANARY_BASE_SOURCE:-auto}"
        if [ "$source" = debian ] && [ -z "$base_fallback" ]; then source=auto; fi  # no Debian stand-in
        case "$source" in
            pull) base="$base_default" ;;
            debian) base="$base_fallback" ;;
            auto)
                if pullable "$base_default"; then base="$base_default"
                elif [ -n "$base_fallback" ]; then
                    base="$base_fallback"
                    base_note=", FROM $base_fallback: $base_default cannot be pulled here"
                elif [ "$skip_unpullable" = 1 ]; then
                    echo "image $name $ref: SKIPPED: its base $base_default cannot be pulled here"
                    return 0
                else
                    die "$name: its base $base_default is not in storage and cannot be pulled"
                fi ;;
            *) die "CANARY_BASE_SOURCE must be auto, pull or debian" ;;
        esac
        [ -n "$base" ] || die "build: --base-arg $base_arg has no default in $file and no --base-fallback"
        # the base's own line only where it was built now
        if [ "$base" = "$base_fallback" ]; then "$0" base --ref "$base_fallback" | sed '/: cached (/d'; fi
        build_args+=("$base_arg=$base")
    fi
    local wheels_listing=""
    if [ "$host_pip" = 1 ] && [ "$engine" = buildah ]; then
        local cert links dir i=0 ctr_links=""
        cert="$(host_pip_setting cert)"
        if [ -n "$cert" ] && [ -f "$cert" ]; then
            mounts+=(-v "$cert:/run/host-pip/ca.pem:ro")
            build_args+=("PIP_CERT=/run/host-pip/ca.pem")
        fi
        links="$(host_pip_setting find-links)"
        for dir in $links; do
            [ -d "$dir" ] || continue
            mounts+=(-v "$dir:/run/host-pip/links$i:ro")
            ctr_links+="${ctr_links:+ }/run/host-pip/links$i"
            wheels_listing+="$(cd "$dir" && find . -maxdepth 1 -type f -printf '%f %s\n' | LC_ALL=C sort)"
            i=$((i + 1))
        done
        if [ -n "$ctr_links" ]; then build_args+=("PIP_FIND_LINKS=$ctr_links" "PIP_EXTRA_INDEX_URL="); fi
        local timeout_s; timeout_s="$(host_pip_setting default-timeout)"
        if [ -n "$timeout_s" ]; then build_args+=("PIP_DEFAULT_TIMEOUT=$timeout_s"); fi
    fi

    local -a inputs=()
    if [ -n "$ignorefile" ]; then
        mapfile -t inputs < <(sed -n 's|^!\(.*[^/]\)/*$|\1|p' "$ignorefile")
    else
        inputs=(.)
    fi
    local hash
    hash="$({ echo "build v2 (buildah: --format docker)"; sha256sum "$file" ${ignorefile:+"$ignorefile"} | cut -d' ' -f1;
              printf '%s\n' "${build_args[@]}" | LC_ALL=C sort;
              [ -z "$base" ] || echo "base $(image_id "$base")";
              echo "$wheels_listing";
              (cd "$context" && hash_files "${inputs[@]}"); } | sha256sum | cut -d' ' -f1)"
    if [ "$(image_label "$ref" "$INPUT_LABEL")" = "$hash" ]; then
        echo "image $name $ref: cached ($(( $(date +%s) - start )) s, $(human "$(image_size "$ref")")$base_note)"
        return
    fi

    local old; old="$(image_id "$ref")"
    local -a args=(-f "$file" -t "$ref" --label "$INPUT_LABEL=$hash")
    local arg
    for arg in "${build_args[@]}"; do args+=(--build-arg "$arg"); done
    if [ "$engine" = docker ]; then
        run_logged "$logs/$name.log" "$DOCKER" build "${args[@]}" "$context"
    else
        # buildah reads no <Dockerfile>.dockerignore by itself: pass it.
        run_logged "$logs/$name.log" buildah bud --isolation chroot --format docker --pull=false \
            ${ignorefile:+--ignorefile "$ignorefile"} "${mounts[@]}" "${args[@]}" "$context"
    fi
    drop_replaced "$old" "$(image_id "$ref")"
    echo "image $name $ref: built in $(( $(date +%s) - start )) s ($(human "$(image_size "$ref")")$base_note)"
}

main() {
    local cmd="${1:-}"
    [ $# -gt 0 ] && shift
    case "$cmd" in
        base) cmd_base "$@" ;;
        build) cmd_build "$@" ;;
        size) image_size "${1:?size REF}" ;;
        -h|--help|"") sed -n '2,/^set -euo/p' "$0" | sed '$d' ;;
        *) die "unknown command $cmd (see --help)" ;;
    esac
}

# One line, read whole before it runs: editing this file during a build cannot derail it.
main "$@"; exit $?
