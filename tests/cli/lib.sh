# lib.sh - helpers shared by the CLI shell tests (sourced, not a test itself).
# A 16x16 RGB gradient PNG.
SD_TEST_PNG_B64='iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAIAAACQkWg2AAABlklEQVR42hXRURVEIQhFUSMYgQhGMAIRiGCEE8EIRiACEYhABCLMG7/ZrMt1jMEcyGAN9kAHNjgDBnfwBj6IQQ5q0IMxJnMikzXZE53Y5EyY3Mmb+CQmOalJzw8IUxBhCVtQwYQjIFzhCS6EkEIJLR9YzIUs1mIvdGGLs2BxF2/hi1jkoha9PrCZG9mszd7oxjZnw+Zu3sY3sclNbXp/QJmKKEvZiiqmHAXlKk9xJZRUSmn9gDENMZaxDTXMOAbGNZ7hRhhplNH2gcM8yGEd9kEPdjgHDvfwDn6IQx7q0OcD/wK/Sr4jv9hfkG/1N/x/Fx44BCQU9Pc94zIvclmXfdGLXc79j9/Lu/glLnmpS98PPOZDHuuxH/qwx3n/5ffxHv6IRz7q0e8DznTEWc521DHn+D/KdZ7jTjjplNP+gWAGEqxgBxpYcOIf/AYv8CCCDCro+EAyE0lWshNNLDn5P/MmL/Ekkkwq6fxAMQspVrELLaw49S/lFq/wIoosquj6QDMbaVazG22sOf2v8Dav8SaabKrp5geIAnAQC3NfwAAAAABJRU5ErkJggg=='

# The output cache ctest gives this test (SDFLOW_CACHE under
# $SDFLOW_TEST_TMP/cli-cache/, tests/CMakeLists.txt) starts empty every run:
# results cached by an earlier run (another CPU path or build, which rounds
# differently) must not stand in for this run's computations.
case "${SDFLOW_CACHE:-}" in
"${SDFLOW_TEST_TMP:-/nonexistent}"/cli-cache/*.db)
    mkdir -p "${SDFLOW_CACHE%/*}" && rm -f "$SDFLOW_CACHE" "$SDFLOW_CACHE-wal" "$SDFLOW_CACHE-shm" "$SDFLOW_CACHE-journal" ;;
esac

sd_test_write_png() { printf '%s' "$SD_TEST_PNG_B64" | base64 -d > "$1"; }

# Fail (exit 1) unless every named node type is registered: a node missing
# from `sdflow nodes` is a broken build, never a reason to skip.
sd_test_need_nodes() {
    local list
    list=$("$SDFLOW_BIN" nodes) || { echo "sdflow nodes failed"; exit 1; }
    # a here-string, not `printf | grep -q`: under the callers' pipefail,
    # grep -q quitting at the match while printf still writes the rest of
    # the ~33 KB list made the pipeline fail with SIGPIPE now and then (a
    # node near the end of the list read as "not registered")
    for c in "$@"; do
        if ! grep -q "^$c " <<< "$list"; then
            echo "FAIL: node type $c is not registered (sdflow nodes)"
            exit 1
        fi
    done
}

# sd_test_skip_data MSG: the test's reference data is absent: exit 77
# (skipped), or 1 when SDFLOW_REQUIRE_DATA=1 (set by .ci/run: CI always has
# ../shared, so absent data there is a failure) or when a check already
# failed (a skip must not hide it).
sd_test_skip_data() {
    if [ "${failures:-0}" -ne 0 ]; then
        echo "FAIL: $failures failure(s) before this skip: $*"
        exit 1
    fi
    if [ "${SDFLOW_REQUIRE_DATA:-0}" = 1 ]; then
        echo "FAIL (SDFLOW_REQUIRE_DATA=1: the reference data must be present): $*"
        exit 1
    fi
    echo "SKIP: $*"
    exit 77
}

# The report with all whitespace removed, for grepping fixed key orders.
sd_test_flat() { tr -d ' \t\n' < "$1"; }

# Status of node $2 in report $1 ("executed", "cached", ... or "absent").
sd_test_status() {
    local s
    s=$(sd_test_flat "$1" | grep -o "\"$2\":{\"class_type\":\"[^\"]*\",\"status\":\"[a-z]*\"" | sed 's/.*"status":"//; s/"$//')
    echo "${s:-absent}"
}

sd_test_count() { sd_test_flat "$1" | grep -o "\"$2\":[0-9]*" | head -1 | cut -d: -f2; }

# A random-weight SD1 checkpoint and stand-in vocabulary under $1 (models/,
# tok/), the txt2img workflow made small (64x64, 3 steps) as $1/tiny.json,
# and the arguments that run it: sd_test_tiny_sd1 DIR; then
# "$SDFLOW_BIN" run "${SD_TINY_ARGS[@]}" ... (works for repl too).
sd_test_tiny_sd1() {
    "$SDFLOW_BIN" synth --preset sd1-tiny --models-dir "$1/models" --tokenizer-dir "$1/tok" > /dev/null ||
        { echo "sdflow synth failed"; exit 1; }
    "$SDFLOW_BIN" export --json "$SDFLOW_SOURCE_DIR/workflows/txt2img_sd15.json" \
        --set 4.ckpt_name=sdflow-random-sd1-tiny.safetensors --set 5.width=64 --set 5.height=64 \
        --set 3.steps=3 > "$1/tiny.json" || { echo "sdflow export failed"; exit 1; }
    SD_TINY_ARGS=("$1/tiny.json" --models-dir "$1/models" --tokenizer-dir "$1/tok")
}

# Stand-ins for the GLIGEN and unCLIP example workflows' models, shared by
# the tests that run those examples (cli.lua, cli.ui_workflows,
# cli.server_api):
# sd_test_gligen_model MODELS NAME: tests/data/gligen's tiny GLIGEN (it fits
# the shared tiny SD1) as MODELS/gligen/NAME.
sd_test_gligen_model() {
    mkdir -p "$1/gligen" &&
        ln -sf "$SDFLOW_SOURCE_DIR/tests/data/gligen/tiny_gligen_sd1.safetensors" "$1/gligen/$2"
}
# sd_test_unclip_model WORK OUT: an SD2.1 unCLIP checkpoint written to OUT:
# the tiny SD2 (`sdflow synth --preset sd2-tiny --seed 1`, under WORK/sd2)
# with tests/data/unclip's label_emb and vision tower (tests/cli/unclip_model.py,
# as nodes.golden_unclip derives it). Non-zero on failure, the reason in
# WORK/unclip.err.
sd_test_unclip_model() {
    "$SDFLOW_BIN" synth --preset sd2-tiny --seed 1 --models-dir "$1/sd2" > /dev/null 2> "$1/unclip.err" &&
        python3 "$SDFLOW_SOURCE_DIR/tests/cli/unclip_model.py" "$1/sd2/checkpoints/sdflow-random-sd2-tiny.safetensors" \
            "$SDFLOW_SOURCE_DIR/tests/data/unclip" "$2" 2>> "$1/unclip.err"
}

# ---- the preamble every CLI test shares --------------------------------------
# sd_test_begin NAME [NODE_TYPE...]
#   Checks the variables ctest sets (tests/CMakeLists.txt: sd_test_env), fails
#   unless every named node type is registered, and sets:
#     T       a fresh scratch folder, $SDFLOW_TEST_TMP/NAME
#     DATA    the reference data: SDFLOW_TESTDATA, else the build's default
#             (../shared/testdata beside the checkout)
#     SHARED  SDFLOW_SHARED, else the build's default (../shared)
#     TOK     the real CLIP vocabulary: SDFLOW_TOKENIZER_DIR, else $SHARED/data/clip
#     failures=0, and fail MSG, which counts a failure and goes on
#   A test ends with sd_test_end MSG (exit 1 when anything failed).
sd_test_begin() {
    : "${SDFLOW_BIN:?set by ctest}" "${SDFLOW_SOURCE_DIR:?set by ctest}"
    local name=$1
    shift
    [ $# -eq 0 ] || sd_test_need_nodes "$@"
    T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/$name"
    rm -rf "$T" && mkdir -p "$T" || { echo "cannot make $T"; exit 1; }
    DATA="${SDFLOW_TESTDATA:-${SDFLOW_TESTDATA_DEFAULT:-$SDFLOW_SOURCE_DIR/../shared/testdata}}"
    SHARED="${SDFLOW_SHARED:-${SDFLOW_SHARED_DEFAULT:-$SDFLOW_SOURCE_DIR/../shared}}"
    TOK="${SDFLOW_TOKENIZER_DIR:-$SHARED/data/clip}"
    failures=0
}

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# sd_test_end MSG: "MSG" when nothing failed, else the count and exit 1.
sd_test_end() {
    if [ "${failures:-0}" -ne 0 ]; then
        echo "$failures failure(s)"
        exit 1
    fi
    echo "$1"
}

# Skip unless the data file or folder exists (sd_test_skip_data: a failure
# under SDFLOW_REQUIRE_DATA=1) / the command is installed (exit 77: a tool
# the machine lacks, which scripts/setup-test-tools.sh installs).
sd_test_need_path() { [ -e "$1" ] || sd_test_skip_data "${2:-$1} is missing"; }
sd_test_need_cmd() { command -v "$1" > /dev/null || { echo "SKIP: $1 is not installed"; exit 77; }; }
