#!/usr/bin/env bash
# Install Debian packages, for mk/prometheus.mk, mk/postgres.mk and mk/chromium.mk (run through mk/step.sh).
#
#   mk/apt-install.sh PACKAGE...
#
# `apt-get update` runs only when apt does not know a package yet, or once when the install fails
# (package lists out of date), then the install is retried. Not root: through sudo. Nothing is
# started as a service.
set -euo pipefail

if [ "$#" -eq 0 ]; then
  echo "usage: mk/apt-install.sh PACKAGE..." >&2
  exit 2
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
# `make -j` runs several install steps at once and dpkg takes one lock for the whole machine: the
# steps queue on this lock (and apt waits up to 10 minutes for a dpkg lock held by anything else).
lock=${CANARY_APT_LOCK:-/tmp/vllm-canary-apt.lock}
exec 9>> "$lock"
flock --timeout 900 9 || { echo "mk/apt-install.sh: waited 15 minutes for $lock" >&2; exit 1; }
install() {
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "$@"
}
if ! apt-cache show "$@" > /dev/null 2>&1; then
  echo "== apt-get update (apt does not know $* yet)"
  $sudo apt-get update -q -o DPkg::Lock::Timeout=600
fi
if ! install "$@"; then
  echo "== apt-get update (install failed: package lists out of date?) and retry"
  $sudo apt-get update -q -o DPkg::Lock::Timeout=600
  install "$@"
fi
