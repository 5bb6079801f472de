#!/usr/bin/env bash
# Apply (or check) a quilt-style patch series to a vLLM source tree or an installed vllm package.
#
#   apply-series.sh --hash  --series DIR/series
#   apply-series.sh --list  --series DIR/series      (the patch files, in order)
#   apply-series.sh --check --series DIR/series --tree TREE [--tool git|patch]
#   apply-series.sh --apply --series DIR/series --tree TREE [--tool git|patch] [--expect-hash HEX]
#
# TREE is the directory that holds `vllm/` (an extracted sdist, or site-packages): patches use
# `a/vllm/...` paths and are applied with -p1. The series file lists patch files (relative to its
# directory) one per line, in order; `#` starts a comment. Every *.patch in that directory must be
# listed (an unlisted patch is almost always a forgotten one).
#
# --check applies cumulatively to TREE (so patch N is checked on top of 1..N-1): run it on a
# scratch copy. Any patch that does not apply exactly (no fuzz) fails the whole run, naming it.
#
# The series hash: sha256 of the lines "<sha256 of patch>  <name>\n" in series order. The same
# definition lives in canary/kube_values.py (patch_series_hash); tests keep them equal.
set -euo pipefail

die() { echo "apply-series: $*" >&2; exit 1; }

mode="" series="" tree="" tool="" expect_hash=""
while [ $# -gt 0 ]; do
    case "$1" in
        --hash|--list|--check|--apply) mode="${1#--}"; shift ;;
        --series) series="${2:?--series needs a path}"; shift 2 ;;
        --tree) tree="${2:?--tree needs a directory}"; shift 2 ;;
        --tool) tool="${2:?--tool needs git or patch}"; shift 2 ;;
        --expect-hash) expect_hash="${2-}"; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
[ -n "$mode" ] || die "give one of --hash, --list, --check, --apply"
[ -n "$series" ] || die "--series is required"
[ -f "$series" ] || die "series file not found: $series"
series_dir="$(cd "$(dirname "$series")" && pwd)"

# Entries of the series file, comments and blank lines dropped.
entries=()
while IFS= read -r line || [ -n "$line" ]; do
    line="${line%%#*}"
    line="$(printf '%s' "$line" | tr -d '[:space:]')"
    [ -n "$line" ] && entries+=("$line")
done < "$series"
[ "${#entries[@]}" -gt 0 ] || die "$series lists no patches"

declare -A listed=()
for name in "${entries[@]}"; do
    case "$name" in
        /*|*..*) die "$series: entry '$name' must be a file name inside $series_dir" ;;
    esac
    [ -z "${listed[$name]+x}" ] || die "$series: '$name' is listed twice"
    listed[$name]=1
    [ -f "$series_dir/$name" ] || die "$series: '$name' is listed but $series_dir/$name does not exist"
done
for file in "$series_dir"/*.patch; do
    [ -e "$file" ] || continue
    name="$(basename "$file")"
    [ -n "${listed[$name]+x}" ] || die "$file is not listed in $series (add it, or delete it)"
done

series_hash() {
    local name
    for name in "${entries[@]}"; do
        printf '%s  %s\n' "$(sha256sum "$series_dir/$name" | cut -d' ' -f1)" "$name"
    done | sha256sum | cut -d' ' -f1
}

if [ "$mode" = hash ]; then
    series_hash
    exit 0
fi
if [ "$mode" = list ]; then
    printf '%s\n' "${entries[@]}"
    exit 0
fi

[ -n "$tree" ] || die "--tree is required for --$mode"
[ -d "$tree/vllm" ] || die "$tree does not contain a vllm/ directory (give the sdist root or site-packages)"
if [ -z "$tool" ]; then
    if command -v git >/dev/null 2>&1; then tool=git; elif command -v patch >/dev/null 2>&1; then tool=patch; else
        die "neither git nor patch is installed"
    fi
fi
case "$tool" in git|patch) ;; *) die "--tool must be git or patch, not '$tool'" ;; esac
command -v "$tool" >/dev/null 2>&1 || die "--tool $tool: $tool is not installed"

if [ -n "$expect_hash" ]; then
    actual="$(series_hash)"
    [ "$actual" = "$expect_hash" ] || die "series hash is $actual, but $expect_hash was expected (recompute with --hash)"
fi

cd "$tree"
# git must not discover an enclosing repository: `git apply` inside a work tree silently skips
# paths outside the current directory.
export GIT_CEILING_DIRECTORIES="$(dirname "$(pwd)")"

applied=()
for name in "${entries[@]}"; do
    file="$series_dir/$name"
    if [ "$tool" = git ]; then
        check=(git apply --check --verbose -p1 "$file")
        really=(git apply -p1 "$file")
    else
        check=(patch -p1 --forward --batch --fuzz=0 --dry-run --input "$file")
        really=(patch -p1 --forward --batch --fuzz=0 --silent --input "$file")
    fi
    if ! output="$("${check[@]}" 2>&1)"; then
        echo "apply-series: FAILED: $name does not apply to $tree" >&2
        if [ "${#applied[@]}" -gt 0 ]; then
            echo "apply-series: (checked on top of: ${applied[*]})" >&2
        fi
        printf '%s\n' "$output" | sed 's/^/    /' >&2
        exit 1
    fi
    "${really[@]}" >/dev/null || die "FAILED: $name passed the dry run but did not apply"
    applied+=("$name")
    echo "apply-series: ok   $name"
done
verb=applied
[ "$mode" = check ] && verb=checked
echo "apply-series: ${#applied[@]} patch(es) $verb; series sha256 $(series_hash)"
