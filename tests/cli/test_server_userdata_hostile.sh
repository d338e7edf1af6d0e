#!/usr/bin/env bash
# Hostile input against the routes ComfyUI's web frontends use: userdata path
# escapes and links, oversized, chunked, cut and malformed uploads, concurrent
# saves and settings, a kill -9 mid-save and a restart
# (tests/server/userdata_hostile_test.mjs).
set -u
T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_server_userdata_hostile"
rm -rf "$T" && mkdir -p "$T"
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
. "$SDFLOW_SOURCE_DIR/tests/server/setup.sh"
sd_server_models "$T"
cd "$SRV" || exit 1
node userdata_hostile_test.mjs "$SDFLOW_BIN" "$T" "$T/models.json"
