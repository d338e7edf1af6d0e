#!/usr/bin/env bash
# Installs every build and test dependency of sdflow from Debian packages.
# Idempotent: packages already present are not reinstalled, and apt is only
# touched when something is missing.
set -euo pipefail
PKGS="cmake gcc make pkg-config liblua5.4-dev libcjson-dev libpng-dev \
libsqlite3-dev libopenblas-dev libedit-dev clang libclang-rt-14-dev zlib1g-dev tmux python3 \
libdnnl-dev libzip-dev libcivetweb-dev libhiredis-dev libpcre2-dev libjpeg-dev libwebp-dev libyaml-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
else
  echo "setup: all dependencies present"
fi
# Tools only the tests use (node packages, chromium) are not needed to build
# or run sdflow: scripts/test.sh installs them with scripts/setup-test-tools.sh.
