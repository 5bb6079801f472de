#!/usr/bin/env bash
# Check that a patch series applies, in order, to the pinned vLLM source release.
#
#   patch-check.sh --sdist vllm-0.33.0.tar.gz --sha256 HEX --series docker/patches/series
#
# Verifies the sdist's sha256 (a cached file that changed is never trusted), extracts the files the
# patches touch into a scratch directory outside any git work tree, and runs apply-series.sh
# --check, which applies each patch on top of the previous ones and names the first one that does
# not apply.
# `make patch-check` fetches and caches the sdist, then calls this.
set -euo pipefail

die() { echo "patch-check: $*" >&2; exit 1; }

sdist="" sha="" series=""
while [ $# -gt 0 ]; do
    case "$1" in
        --sdist) sdist="${2:?}"; shift 2 ;;
        --sha256) sha="${2:?}"; shift 2 ;;
        --series) series="${2:?}"; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
[ -n "$sdist" ] && [ -n "$sha" ] && [ -n "$series" ] || die "usage: patch-check.sh --sdist FILE --sha256 HEX --series FILE"
[ -f "$sdist" ] || die "sdist not found: $sdist (make patch-check downloads it)"

actual="$(sha256sum "$sdist" | cut -d' ' -f1)"
[ "$actual" = "$sha" ] || die "$sdist has sha256 $actual, expected $sha: delete it and run make patch-check again"

here="$(cd "$(dirname "$0")" && pwd)"
series_dir="$(cd "$(dirname "$series")" && pwd)"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/patch-check.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

# Only the files the patches touch are extracted (git apply reads nothing else): seconds instead
# of unpacking the whole 47 MB release. A path missing from the release makes git apply fail and
# name the patch, as it should.
top="$(basename "$sdist" .tar.gz)"  # an sdist unpacks into NAME-VERSION/
mapfile -t touched < <(
    "$here/apply-series.sh" --list --series "$series" | while IFS= read -r name; do
        sed -nE -e 's#^--- a/([^[:space:]]+).*#\1#p' -e 's#^\+\+\+ b/([^[:space:]]+).*#\1#p' \
            -e 's#^(rename|copy) from (.+)#\2#p' "$series_dir/$name"
    done | sort -u
)
if [ "${#touched[@]}" -gt 0 ]; then
    members=()
    for path in "${touched[@]}"; do members+=("$top/$path"); done
    tar -xzf "$sdist" -C "$scratch" --strip-components=1 "${members[@]}" 2>/dev/null || true
fi
mkdir -p "$scratch/vllm"
echo "patch-check: $(basename "$sdist") (sha256 ok): ${#touched[@]} file(s) touched by $series"
"$here/apply-series.sh" --check --tool git --series "$series" --tree "$scratch"
