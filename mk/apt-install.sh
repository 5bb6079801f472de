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
install() {
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@"
}
if ! apt-cache show "$@" > /dev/null 2>&1; then
  echo "== apt-get update (apt does not know $* yet)"
  $sudo apt-get update -q
fi
if ! install "$@"; then
  echo "== apt-get update (install failed: package lists out of date?) and retry"
  $sudo apt-get update -q
  install "$@"
fi
