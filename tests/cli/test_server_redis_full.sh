#!/usr/bin/env bash
# `sdflow serve --redis` and three `sdflow worker`s over a Redis that fills
# up (maxmemory, noeviction) while prompts run: every prompt ends in exactly
# one recorded outcome, none stays running, none runs twice, `success` only
# with its pictures fetchable, the full Redis named by prompts that failed
# on it and by POST /prompt (503 redis_full), a worker started on a full
# Redis waits (tests/server/redis_full_test.mjs, docs/scaling.md).
set -u
T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_server_redis_full"
rm -rf "$T" && mkdir -p "$T"
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
. "$SDFLOW_SOURCE_DIR/tests/server/setup.sh"
command -v redis-server > /dev/null && command -v redis-cli > /dev/null ||
    { echo "SKIP: redis-server is not installed (bash scripts/setup-test-tools.sh installs it: apt-get install redis-server)"; exit 77; }
"$SDFLOW_BIN" worker --help > /dev/null 2>&1 ||
    { echo "FAIL: this sdflow has no worker (libhiredis-dev missing at build time: bash scripts/setup.sh)"; exit 1; }
sd_server_models "$T"
cd "$SRV" && exec node redis_full_test.mjs "$SDFLOW_BIN" "$SDFLOW_SOURCE_DIR" "$T" "$T/models.json"
