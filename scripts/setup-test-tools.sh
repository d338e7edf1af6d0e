#!/usr/bin/env bash
# Installs the tools only the tests need, called by scripts/test.sh:
# Node.js and npm (Debian's, when the machine has none), Debian's chromium
# (the server page test drives it headless), Debian's redis-server (the
# worker tests start their own on a free port), Debian's python3-websocket
# (ComfyUI's script_examples import it), Debian's python3-pil (cli.server_view
# decodes /view's answers with it), and the npm packages pinned in
# tests/server/package-lock.json (a ComfyUI API client, `ws`, playwright-core),
# installed with `npm ci` into tests/server/node_modules. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=""
command -v node > /dev/null || missing="$missing nodejs"
command -v npm > /dev/null || missing="$missing npm"
command -v chromium > /dev/null || missing="$missing chromium"
command -v redis-server > /dev/null || missing="$missing redis-server"
/usr/bin/python3 -c 'import websocket' 2> /dev/null || missing="$missing python3-websocket"
/usr/bin/python3 -c 'import PIL' 2> /dev/null || missing="$missing python3-pil"
if [ -n "$missing" ]; then
  echo "setup-test-tools: installing$missing"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
major=$(node -p 'process.versions.node.split(".")[0]' 2> /dev/null || echo 0)
[ "$major" -ge 20 ] 2> /dev/null || echo "setup-test-tools: warning: node $(node --version) is older than 20: the server tests will be skipped (Debian 12 ships 18)"
lock=tests/server/package-lock.json
stamp=tests/server/node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ "$lock" -nt "$stamp" ]; then
  echo "setup-test-tools: npm ci in tests/server"
  (cd tests/server && npm ci --no-audit --no-fund --loglevel=error)
else
  echo "setup-test-tools: npm packages present"
fi
