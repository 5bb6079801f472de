#!/usr/bin/env bash
# Make the image's Python packages match pins like "nixl==1.5.0", then verify every pin.
#
#   pin-deps.sh "vllm==0.33.0" "nixl==1.5.0" "flashinfer-python==0.7.2.post1" ...
#
# vllm itself is never installed here: if the base image carries another vllm, the base is wrong
# and the build fails. Other packages are (re)installed only when their version differs, so the
# upstream image's layers stay untouched in the usual case. A changed flashinfer-python also
# fetches its precompiled kernels (cubins), as the upstream image does.
set -euo pipefail

installed_version() {
    python3 -c 'import sys
from importlib.metadata import PackageNotFoundError, version
try:
    print(version(sys.argv[1]))
except PackageNotFoundError:
    print("")' "$1"
}

to_install=()
for pin in "$@"; do
    name="${pin%%==*}" want="${pin#*==}"
    [ "$name" != "$pin" ] || { echo "pin-deps: '$pin' is not NAME==VERSION" >&2; exit 1; }
    have="$(installed_version "$name")"
    if [ "$have" = "$want" ]; then
        echo "pin-deps: $name $have (as pinned)"
    elif [ "$name" = vllm ]; then
        echo "pin-deps: the base image has vllm '${have:-none}', not $want: use the matching base image" >&2
        exit 1
    else
        echo "pin-deps: $name '${have:-none}' -> $want"
        to_install+=("$pin")
    fi
done

if [ "${#to_install[@]}" -gt 0 ]; then
    if command -v uv >/dev/null 2>&1; then
        uv pip install --system --no-cache "${to_install[@]}"
    else
        python3 -m pip install --no-cache-dir "${to_install[@]}"
    fi
    for pin in "${to_install[@]}"; do
        if [ "${pin%%==*}" = flashinfer-python ]; then
            flashinfer download-kernels
        fi
    done
fi

for pin in "$@"; do
    name="${pin%%==*}" want="${pin#*==}"
    have="$(installed_version "$name")"
    [ "$have" = "$want" ] || { echo "pin-deps: $name is '${have:-missing}' after install, pinned $want" >&2; exit 1; }
done
echo "pin-deps: all pins verified: $*"
