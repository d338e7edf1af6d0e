#!/usr/bin/env bash
# Who may talk to `sdflow serve`: same-origin browsers and loopback Host
# names without a token, --enable-cors-header, --token, NUL in query values,
# per-address connection limits and the header deadline against slow clients
# (tests/server/guard_test.mjs; docs/server.md "Threat model").
set -u
T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_server_guard"
rm -rf "$T" && mkdir -p "$T"
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
. "$SDFLOW_SOURCE_DIR/tests/server/setup.sh"
sd_server_models "$T"
cd "$SRV" && exec node guard_test.mjs "$SDFLOW_BIN" "$T" "$T/models.json"
