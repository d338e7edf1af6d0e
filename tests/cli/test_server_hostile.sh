#!/usr/bin/env bash
# `sdflow serve` under hostile input: oversized bodies and uploads, malformed
# JSON, multipart and request lines, path traversal and symlinks in /view
# and uploads, a WebSocket flood, a full queue, bounded history, wrong or
# missing tokens (tests/server/hostile_test.mjs).
set -u
T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_server_hostile"
rm -rf "$T" && mkdir -p "$T"
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
. "$SDFLOW_SOURCE_DIR/tests/server/setup.sh"
sd_server_models "$T"
cd "$SRV" && exec node hostile_test.mjs "$SDFLOW_BIN" "$T" "$T/models.json"
