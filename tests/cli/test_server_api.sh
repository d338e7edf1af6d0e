#!/usr/bin/env bash
# `sdflow serve` against a real ComfyUI client (@stable-canvas/comfyui-client
# under node): every example workflow queued, WebSocket progress followed,
# images fetched through /view equal `sdflow run`'s bytes (the GLIGEN and
# unCLIP examples with the stand-ins of tests/cli/lib.sh); a cached rerun, a
# validation failure, a queued and a running prompt cancelled by id, the
# history and the read-only endpoints (tests/server/api_test.mjs).
set -u
T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_server_api"
rm -rf "$T" && mkdir -p "$T"
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
. "$SDFLOW_SOURCE_DIR/tests/server/setup.sh"
sd_server_models "$T" examples
cd "$SRV" && exec node api_test.mjs "$SDFLOW_BIN" "$SDFLOW_SOURCE_DIR" "$T" "$T/models.json"
