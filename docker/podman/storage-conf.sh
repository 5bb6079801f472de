#!/usr/bin/env bash
# Print the containers/storage settings file podman and buildah use here:
#   $CONTAINERS_STORAGE_CONF   where it is set (your own file wins);
#   storage.conf (overlay)     where podman opens that store;
#   storage-vfs.conf (vfs)     otherwise (no overlay mounts: an unprivileged container, an odd
#                              filesystem), or where podman is not installed yet.
# One answer per machine: `make` (mk/containers.mk, docker/build-image.sh), the canary's podman
# container target (canary/targets/container_cli.py) and the image tests all ask this script, so
# they see one store.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -n "${CONTAINERS_STORAGE_CONF:-}" ]; then
    echo "$CONTAINERS_STORAGE_CONF"
    exit 0
fi
if command -v podman > /dev/null 2>&1 \
    && CONTAINERS_STORAGE_CONF="$here/storage.conf" CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}" \
        timeout 60 podman info --format '{{.Store.GraphDriverName}}' 2> /dev/null | grep -qx overlay; then
    echo "$here/storage.conf"
else
    echo "$here/storage-vfs.conf"
fi
