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
# Parsing and the series hash (sha256 of the lines "<sha256 of patch>  <name>\n" in series order)
# are canary/images/patchseries.py's, run with python3: one implementation for the image, the canary and
# the overlays.
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
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
[ -n "$mode" ] || die "give one of --hash, --list, --check, --apply"
[ -n "$series" ] || die "--series is required"
[ -f "$series" ] || die "series file not found: $series"
series_dir="$(cd "$(dirname "$series")" && pwd)"
series="$series_dir/$(basename "$series")"  # absolute: the apply loop runs inside TREE

# canary/images/patchseries.py is the one parser and hash of a series (the rules above); this script only
# applies. In the image build it sits at the same place relative to this script.
here="$(cd "$(dirname "$0")" && pwd)"
patchseries="${PATCHSERIES_PY:-$here/../canary/images/patchseries.py}"
[ -f "$patchseries" ] || die "$patchseries not found (set PATCHSERIES_PY)"
command -v python3 >/dev/null 2>&1 || die "python3 is required (it parses and hashes the series)"
listing="$(python3 "$patchseries" list "$series")" || exit 1
mapfile -t entries <<< "$listing"

series_hash() {
    python3 "$patchseries" hash "$series"
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
