#!/usr/bin/env bash
# `sdflow serve --redis` and three `sdflow worker`s with folders of their own
# over a redis-server the test starts on a free port (no persistence): 60
# prompts with one worker killed mid-prompt (each prompt once in the history,
# unique output names, images through the server's /view, some equal to
# `sdflow run`'s), the heartbeat of a long prompt, cancel and interrupt by id,
# an upload used by a worker, prompts surviving a server restart
# (tests/server/redis_test.mjs, docs/scaling.md).
set -u
T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_server_redis"
rm -rf "$T" && mkdir -p "$T"
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
. "$SDFLOW_SOURCE_DIR/tests/server/setup.sh"
command -v redis-server > /dev/null && command -v redis-cli > /dev/null ||
    { echo "SKIP: redis-server is not installed (bash scripts/setup-test-tools.sh installs it: apt-get install redis-server)"; exit 77; }
"$SDFLOW_BIN" worker --help > /dev/null 2>&1 ||
    { echo "FAIL: this sdflow has no worker (libhiredis-dev missing at build time: bash scripts/setup.sh)"; exit 1; }
sd_server_models "$T"
cd "$SRV" && exec node redis_test.mjs "$SDFLOW_BIN" "$SDFLOW_SOURCE_DIR" "$T" "$T/models.json"
