# ComfyUI's own Z-Image-Turbo example workflow (tests/data/comfyui_examples/
# z_image: the API and UI forms embedded in the picture of ComfyUI_examples'
# Z-Image page) runs unmodified but for --set of sizes and steps, on the
# Z-Image set's tiny files placed under the names it uses, the set's Qwen2
# tokenizer files as qwen25_tokenizer/ and --qwen3-4b-width from its
# manifest (no file says which width is Qwen3-4B's):
#   - the UI save converts to the graph of its API twin (class types and
#     inputs; the API form carries no _meta titles);
#   - the API and the UI form both run and save the same pixels;
#   - without --qwen3-4b-width the tiny Qwen3 is refused naming its width.
# Needs the Z-Image reference set and python3.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_comfyui_zimage_examples UNETLoader CLIPLoader VAELoader EmptySD3LatentImage KSampler
ZI="$DATA/zimage"
EX="$SDFLOW_SOURCE_DIR/tests/data/comfyui_examples/z_image"
sd_test_need_path "$ZI/manifest.json" "the Z-Image reference set ($ZI)"
sd_test_need_cmd python3

M="$T/models"
width=$(python3 "$SDFLOW_SOURCE_DIR/tests/cli/zimage_models.py" "$ZI" "$M" "$T/tok") || fail "placing the Z-Image set's files"

cat > "$T/tool.py" << 'PY'
import json, struct, sys

def same_graph(a, b):
    """the same nodes, class types and inputs (titles aside)"""
    g = [{k: (v["class_type"], v["inputs"]) for k, v in json.load(open(p)).items()} for p in (a, b)]
    if g[0] != g[1]:
        for k in sorted(set(g[0]) | set(g[1])):
            if g[0].get(k) != g[1].get(k):
                print("  node %s: %s / %s" % (k, g[0].get(k), g[1].get(k)))
        sys.exit(1)

def pixels(*paths):
    def pix(path):
        data, pos, out = open(path, "rb").read(), 8, b""
        while pos < len(data):
            n = struct.unpack(">I", data[pos:pos + 4])[0]
            if data[pos + 4:pos + 8] in (b"IHDR", b"IDAT"):
                out += data[pos + 8:pos + 8 + n]
            pos += 12 + n
        return out
    first = pix(paths[0])
    sys.exit(0 if all(pix(p) == first for p in paths[1:]) else 1)

if __name__ == "__main__":
    {"same_graph": same_graph, "pixels": pixels}[sys.argv[1]](*sys.argv[2:])
PY

# run NAME FILE ARGS...: sdflow run, small; its PNG's path in $T/NAME.png
run() {
    local name=$1 file=$2
    shift 2
    "$SDFLOW_BIN" run "$file" --models-dir "$M" --tokenizer-dir "$T/tok" --no-cache --output-dir "$T/out/$name" \
        "$@" > "$T/$name.out" 2> "$T/$name.err" || { fail "$name: $(tail -3 "$T/$name.err")"; return 1; }
    local png
    png=$(ls "$T/out/$name"/*.png 2> /dev/null | head -1)
    [ -n "$png" ] || { fail "$name: no PNG written"; return 1; }
    ln -sf "$png" "$T/$name.png"
}

name=z_image_turbo_example
SMALL=(--set 3.steps=2 --set 13.width=64 --set 13.height=48)
api="$EX/$name.api.json" ui="$EX/$name.ui.json"
if [ -f "$api" ] && [ -f "$ui" ]; then
    "$SDFLOW_BIN" export --json "$api" > "$T/api.txt" 2> "$T/export.err" &&
        "$SDFLOW_BIN" export --json "$ui" > "$T/ui.txt" 2>> "$T/export.err" || fail "export: $(cat "$T/export.err")"
    python3 "$T/tool.py" same_graph "$T/api.txt" "$T/ui.txt" ||
        fail "the UI save converts to another graph than its API form"
    if run api "$api" "${SMALL[@]}" --qwen3-4b-width "$width" && run ui "$ui" "${SMALL[@]}" --qwen3-4b-width "$width"; then
        python3 "$T/tool.py" pixels "$T/api.png" "$T/ui.png" || fail "the API and UI forms saved different pixels"
        echo "  $name: ran (API and UI, same pixels)"
    fi
    # the tiny Qwen3 is not taken for Qwen3-4B without the option
    "$SDFLOW_BIN" run "$api" --models-dir "$M" --tokenizer-dir "$T/tok" --no-cache --output-dir "$T/out/plain" \
        "${SMALL[@]}" > /dev/null 2> "$T/plain.err" && fail "the tiny Qwen3 ran without --qwen3-4b-width"
    grep -q "$width wide" "$T/plain.err" || fail "the refusal does not name the width $width: $(tail -2 "$T/plain.err")"
else
    fail "$name: missing from $EX"
fi

sd_test_end "ok: ComfyUI's Z-Image-Turbo example ran unmodified on the tiny files"
