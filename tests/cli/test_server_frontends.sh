#!/usr/bin/env bash
# ComfyUI's two official web frontends (../shared/frontends) hosted by
# `sdflow serve --front-end-root`, driven in headless Chromium: the current
# one (tests/server/frontend_test.mjs), also against `serve --redis` with a
# worker, and the legacy one (tests/server/legacy_frontend_test.mjs).
set -u
T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_server_frontends"
rm -rf "$T" && mkdir -p "$T"
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
. "$SDFLOW_SOURCE_DIR/tests/server/setup.sh"
CHROMIUM=$(command -v chromium || true)
[ -n "$CHROMIUM" ] || { echo "SKIP: Debian chromium is not installed (bash scripts/setup-test-tools.sh installs it)"; exit 77; }
[ -d "$SRV/node_modules/playwright-core" ] || { echo "SKIP: playwright-core missing (bash scripts/setup-test-tools.sh)"; exit 77; }
FRONT="${SDFLOW_SHARED:-${SDFLOW_SHARED_DEFAULT:-$SDFLOW_SOURCE_DIR/../shared}}/frontends"
[ -f "$FRONT/comfyui-frontend-1.35.9/index.html" ] && [ -f "$FRONT/comfyui-legacy-frontend/web/index.html" ] ||
    { echo "SKIP: the frontends are not in $FRONT"; exit 77; }
sd_server_models "$T"
cd "$SRV" || exit 1
rc=0
mkdir -p "$T/current" && node frontend_test.mjs "$SDFLOW_BIN" "$T/current" "$T/models.json" "$CHROMIUM" "$FRONT/comfyui-frontend-1.35.9" local || rc=1
mkdir -p "$T/legacy" && node legacy_frontend_test.mjs "$SDFLOW_BIN" "$T/legacy" "$T/models.json" "$CHROMIUM" "$FRONT/comfyui-legacy-frontend/web" || rc=1
# a failure above is a failure, whether or not the --redis half can run
command -v redis-server > /dev/null || {
    [ $rc -eq 0 ] || exit $rc
    echo "SKIP: redis-server is not installed (bash scripts/setup-test-tools.sh installs it): the --redis half did not run"
    exit 77
}
mkdir -p "$T/redis" && node frontend_test.mjs "$SDFLOW_BIN" "$T/redis" "$T/models.json" "$CHROMIUM" "$FRONT/comfyui-frontend-1.35.9" redis || rc=1
exit $rc
