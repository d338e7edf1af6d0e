# setup.sh - sourced by the server tests (tests/cli/test_server*.sh): finds
# node and the npm packages that scripts/setup-test-tools.sh installs, makes
# the models, and writes $T/models.json for the node scripts. Exit 77 only
# when a tool is missing, with the command that installs it.
: "${SDFLOW_BIN:?}" "${SDFLOW_SOURCE_DIR:?}"
SRV="$SDFLOW_SOURCE_DIR/tests/server"
command -v node > /dev/null || { echo "SKIP: node is not installed (bash scripts/setup-test-tools.sh installs it)"; exit 77; }
# playwright-core needs Node.js 20, and Node 18's fetch ends multipart bodies
# in a way Debian's civetweb 1.15 refuses (docs/server.md, "Not done"):
# Debian 12's own nodejs is 18, so say so instead of failing on the tool.
node_major=$(node -p 'process.versions.node.split(".")[0]' 2> /dev/null || echo 0)
[ "$node_major" -ge 20 ] 2> /dev/null ||
    { echo "SKIP: the server tests need Node.js 20 or newer, this is $(node --version) (Debian 12 ships 18; install nodejs 20 from Debian 13 or NodeSource)"; exit 77; }
[ -d "$SRV/node_modules/@stable-canvas/comfyui-client" ] && [ -d "$SRV/node_modules/ws" ] ||
    { echo "SKIP: tests/server/node_modules missing (bash scripts/setup-test-tools.sh installs them)"; exit 77; }
"$SDFLOW_BIN" serve --help > /dev/null 2>&1 || { echo "FAIL: this sdflow has no server (libcivetweb-dev missing at build time)"; exit 1; }

# The models: the shared test data when it is there (every workflow runs,
# LoRA and ControlNet included), else random ones from `sdflow synth`.
# With "examples", the GLIGEN and unCLIP examples' models too (shared data
# only; tests/cli/lib.sh makes them), named in models.json as "gligen" and
# "unclip" (lib.mjs tweak puts them in those workflows).
sd_server_models() { # DIR [examples]
    local d=$1 data="${SDFLOW_TESTDATA:-${SDFLOW_TESTDATA_DEFAULT:-$SDFLOW_SOURCE_DIR/../shared/testdata}}"
    local shared="${SDFLOW_SHARED_DEFAULT:-$SDFLOW_SOURCE_DIR/../shared}" tok
    mkdir -p "$d/models/checkpoints" "$d/models/loras" "$d/models/controlnet" "$d/input"
    tok="${SDFLOW_TOKENIZER_DIR:-$shared/data/clip}"
    sd_test_write_png "$d/example.png"
    if [ -f "$data/models/tiny-sd1.safetensors" ] && [ -f "$data/models/tiny-sdxl.safetensors" ] && [ -d "$tok" ]; then
        ln -s "$data/models/tiny-sd1.safetensors" "$d/models/checkpoints/tiny-sd1.safetensors"
        ln -s "$data/models/tiny-sdxl.safetensors" "$d/models/checkpoints/tiny-sdxl.safetensors"
        ln -s "$data/models/tiny-lora-sd1.safetensors" "$d/models/loras/tiny-lora-sd1.safetensors"
        ln -s "$data/models/tiny-controlnet-sd1.safetensors" "$d/models/controlnet/tiny-controlnet-sd1.safetensors"
        local extra=""
        if [ "${2:-}" = examples ]; then
            # the GLIGEN and unCLIP examples' stand-ins, as the CLI tests
            # place them (tests/cli/lib.sh; the GLIGEN one fits the shared
            # tiny SD1)
            sd_test_gligen_model "$d/models" tiny_gligen_sd1.safetensors ||
                { echo "FAIL: placing the GLIGEN model"; exit 1; }
            sd_test_unclip_model "$d" "$d/models/checkpoints/tiny-sd21-unclip.safetensors" ||
                { echo "FAIL: making the unCLIP checkpoint: $(cat "$d/unclip.err")"; exit 1; }
            extra='"gligen": "tiny_gligen_sd1.safetensors", "unclip": "tiny-sd21-unclip.safetensors", '
        fi
        printf '{"models_dir": "%s", "tokenizer_dir": "%s", "sd1": "tiny-sd1.safetensors", "sdxl": "tiny-sdxl.safetensors", "lora": "tiny-lora-sd1.safetensors", "controlnet": "tiny-controlnet-sd1.safetensors", %s"input_png": "%s", "src": "%s"}\n' \
            "$d/models" "$tok" "$extra" "$d/example.png" "$SDFLOW_SOURCE_DIR" > "$d/models.json"
    else
        "$SDFLOW_BIN" synth --preset sd1-tiny --models-dir "$d/models" --tokenizer-dir "$d/tok" > /dev/null &&
        "$SDFLOW_BIN" synth --preset sdxl-tiny --models-dir "$d/models" > /dev/null || { echo "FAIL: sdflow synth"; exit 1; }
        printf '{"models_dir": "%s", "tokenizer_dir": "%s", "sd1": "sdflow-random-sd1-tiny.safetensors", "sdxl": "sdflow-random-sdxl-tiny.safetensors", "input_png": "%s", "src": "%s"}\n' \
            "$d/models" "$d/tok" "$d/example.png" "$SDFLOW_SOURCE_DIR" > "$d/models.json"
    fi
}
