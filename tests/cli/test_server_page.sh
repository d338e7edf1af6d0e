#!/usr/bin/env bash
# The page `sdflow serve` shows at /, in headless Chromium (Debian's
# chromium driven by playwright-core): queue a workflow, see progress, the
# preview and the finished image; errors; interrupt (tests/server/page_test.mjs);
# then the same against `serve --redis` with one `sdflow worker`.
set -u
T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_server_page"
rm -rf "$T" && mkdir -p "$T"
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
. "$SDFLOW_SOURCE_DIR/tests/server/setup.sh"
CHROMIUM=$(command -v chromium || true)
[ -n "$CHROMIUM" ] || { echo "SKIP: Debian chromium is not installed (bash scripts/setup-test-tools.sh installs it)"; exit 77; }
[ -d "$SRV/node_modules/playwright-core" ] || { echo "SKIP: playwright-core missing (bash scripts/setup-test-tools.sh)"; exit 77; }
sd_server_models "$T"
cd "$SRV" || exit 1
node page_test.mjs "$SDFLOW_BIN" "$T" "$T/models.json" "$CHROMIUM" local || exit 1
# the same page against `serve --redis` and one worker (needs redis-server)
command -v redis-server > /dev/null ||
    { echo "SKIP: redis-server is not installed (bash scripts/setup-test-tools.sh installs it): the --redis half did not run"; exit 77; }
mkdir -p "$T/redis" && node page_test.mjs "$SDFLOW_BIN" "$T/redis" "$T/models.json" "$CHROMIUM" redis
