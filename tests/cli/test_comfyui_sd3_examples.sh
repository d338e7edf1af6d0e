# ComfyUI's own SD3 and SD3.5 example workflows (tests/data/comfyui_examples/sd3:
# the API and UI forms embedded in the pictures of ComfyUI_examples' SD3
# page) run unmodified but for --set of sizes and steps, on the SD3 set's
# tiny files placed under the names they use (tests/cli/sd3_models.py), with
# its tiny CLIP-L's and CLIP-G's head counts from its manifest:
#   - each UI save converts to the graph of its API twin (class types and
#     inputs; these API forms carry no _meta titles);
#   - the API and the UI form both run and save the same pixels;
#   - the SD3.5 text-encoder example loads sd3.5_large.safetensors (MMDiT +
#     VAE, no text encoders, as Stability publishes it) through
#     CheckpointLoaderSimple and takes the CLIP of TripleCLIPLoader; its
#     unconnected CLIPLoader and DualCLIPLoader (type sd3) are not run;
#   - the SD3 (2024) examples load SD3 Medium files: the set's single file
#     without MMDiT-X's second attention, and the log says so (0 MMDiT-X
#     blocks), the SD3.5 ones the set's MMDiT-X (1);
#   - the anime example's negative is ConditioningZeroOut of the positive.
#   - the SD3 ControlNet example (InstantX canny through ControlNetApplySD3,
#     the tiny ControlNet of tests/data/sd3_controlnet as
#     sd3_controlnet_canny.safetensors) runs on a made-up input picture, and
#     the ControlNet changes its pixels (the same run with strength 0).
#   - the SD3.5 Large canny example (Stability's SD3.5 ControlNet through
#     ControlNetApplyAdvanced with the VAE; the canny ControlNet of
#     tests/data/sd35_controlnet as sd3.5_large_controlnet_canny.safetensors)
#     runs on the same picture, and the ControlNet changes its pixels.
# Needs the SD3 reference set, the CLIP vocabulary and python3.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_comfyui_sd3_examples CheckpointLoaderSimple TripleCLIPLoader EmptySD3LatentImage \
    ConditioningZeroOut KSampler ControlNetLoader ControlNetApplySD3 ControlNetApplyAdvanced Canny ImageScale \
    LoadImage
SD3="$DATA/sd3"
EX="$SDFLOW_SOURCE_DIR/tests/data/comfyui_examples/sd3"
sd_test_need_path "$SD3/manifest.json" "the SD3 reference set ($SD3)"
sd_test_need_path "$TOK/vocab.json" "CLIP vocabulary $TOK"
sd_test_need_cmd python3

M="$T/models"
python3 "$SDFLOW_SOURCE_DIR/tests/cli/sd3_models.py" "$SD3" "$M" "$T/tok" "$TOK" || fail "placing the SD3 set's files"
heads=$(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))["models"]
print(m["clip_l"]["config"]["num_attention_heads"], m["clip_g"]["config"]["num_attention_heads"])' "$SD3/manifest.json")
set -- $heads
HEADS=(--clip-l-heads "$1" --clip-g-heads "$2")

"$SDFLOW_BIN" nodes --json > "$T/nodes.json" || fail "sdflow nodes --json"
cat > "$T/tool.py" << 'PY'
import json, struct, sys

def optional_default(nodes, ct, name):
    """(True, value) for an optional widget input of ct: its default, else a
    combo's first choice (what the frontend gives a widget with no saved
    value); (False, None) for anything else"""
    spec = nodes.get(ct, {}).get("input", {}).get("optional", {}).get(name)
    if not spec:
        return False, None
    opts = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
    if "default" in opts:
        return True, opts["default"]
    choices = spec[0] if isinstance(spec[0], list) else opts.get("options")
    return (True, choices[0]) if choices else (False, None)

def same_graph(a, b, nodes_json):
    """the same nodes, class types and inputs (titles aside); an optional
    widget added to a node since the API form was saved (DualCLIPLoader's
    device) is in the UI form's conversion with its default, as today's
    frontend sends it, and is not a difference"""
    nodes = json.load(open(nodes_json))
    g = [{k: (v["class_type"], v["inputs"]) for k, v in json.load(open(p)).items()} for p in (a, b)]
    # the 2024 frontend also queued LoadImage's upload button ("upload":
    # "image"), a widget that is no input of the node (ComfyUI's executor
    # ignores it); a UI save does not convert to it
    for k, (ct, ins) in g[0].items():
        if ins.get("upload") == "image" and "upload" not in g[1].get(k, (None, {}))[1]:
            del ins["upload"]
    for k, (ct, ins) in g[1].items():
        api = g[0].get(k, (None, {}))[1]
        for name in [n for n in ins if n not in api]:
            has, d = optional_default(nodes, ct, name)
            if has and ins[name] == d:
                del ins[name]
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
    "$SDFLOW_BIN" run "$file" --models-dir "$M" --tokenizer-dir "$T/tok" "${HEADS[@]}" --no-cache \
        --output-dir "$T/out/$name" "$@" > "$T/$name.out" 2> "$T/$name.err" ||
        { fail "$name: $(tail -3 "$T/$name.err")"; return 1; }
    local png
    png=$(ls "$T/out/$name"/*.png 2> /dev/null | head -1)
    [ -n "$png" ] || { fail "$name: no PNG written"; return 1; }
    ln -sf "$png" "$T/$name.png"
}

# example NAME SETS...: the API and UI forms convert to one graph, run, and
# save the same pixels
example() {
    local name=$1
    shift
    local api="$EX/$name.api.json" ui="$EX/$name.ui.json"
    [ -f "$api" ] && [ -f "$ui" ] || { fail "$name: missing from $EX"; return 1; }
    "$SDFLOW_BIN" export --json "$api" > "$T/$name.api.txt" 2> "$T/$name.export.err" &&
        "$SDFLOW_BIN" export --json "$ui" > "$T/$name.ui.txt" 2>> "$T/$name.export.err" ||
        { fail "$name: export: $(cat "$T/$name.export.err")"; return 1; }
    python3 "$T/tool.py" same_graph "$T/$name.api.txt" "$T/$name.ui.txt" "$T/nodes.json" ||
        fail "$name: the UI save converts to another graph than its API form"
    run "$name.api" "$api" "$@" && run "$name.ui" "$ui" "$@" || return 1
    python3 "$T/tool.py" pixels "$T/$name.api.png" "$T/$name.ui.png" ||
        fail "$name: the API and UI forms saved different pixels"
    echo "  $name: ran (API and UI, same pixels)"
}

SMALL=(--set 3.steps=2 --set 53.width=64 --set 53.height=48)
example sd3.5_simple_example "${SMALL[@]}"
example sd3.5_text_encoders_example "${SMALL[@]}"
example sd3_simple_example "${SMALL[@]}"
example sd3_text_encoders_example "${SMALL[@]}"
example sd3_anime_example --set 3.steps=2 --set 33.width=64 --set 33.height=48

# the SD3 ControlNet example, on a 64x64 picture of stripes and a square
mkdir -p "$T/input"
python3 - "$T/input/sd3_controlnet_example_input.png" << 'PY'
import struct, sys, zlib
w = h = 64
rows = b"".join(b"\0" + bytes(v for x in range(w) for v in
                ((255, 255, 255) if (x // 8 + y // 8) % 2 or 20 <= x < 44 and 20 <= y < 44 else (0, 0, 0)))
                for y in range(h))
chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                              + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
PY
CN=(--input-dir "$T/input" --temp-dir "$T/temp" --set 3.steps=2 --set 33.width=64 --set 33.height=48
    --set 48.width=64 --set 48.height=48)
example sd3_controlnet_example "${CN[@]}"
grep -q "ControlNet sd3_controlnet_canny.safetensors: SD3" "$T/sd3_controlnet_example.api.err" ||
    fail "sd3_controlnet_example: the log does not name the SD3 ControlNet"
if run sd3_controlnet_example.off "$EX/sd3_controlnet_example.api.json" "${CN[@]}" --set 44.strength=0; then
    python3 "$T/tool.py" pixels "$T/sd3_controlnet_example.api.png" "$T/sd3_controlnet_example.off.png" &&
        fail "sd3_controlnet_example: the ControlNet did not change the picture"
fi

# the SD3.5 Large canny example (Stability's SD3.5 ControlNet), the same picture
cp "$T/input/sd3_controlnet_example_input.png" "$T/input/sd3_controlnet_example.png"
example sd3.5_large_canny_controlnet_example "${CN[@]}"
grep -q "ControlNet sd3.5_large_controlnet_canny.safetensors: SD3.5 (Stability's), .*control type canny" \
    "$T/sd3.5_large_canny_controlnet_example.api.err" ||
    fail "sd3.5_large_canny_controlnet_example: the log does not name the SD3.5 canny ControlNet"
if run sd35_canny.off "$EX/sd3.5_large_canny_controlnet_example.api.json" "${CN[@]}" --set 51.strength=0; then
    python3 "$T/tool.py" pixels "$T/sd3.5_large_canny_controlnet_example.api.png" "$T/sd35_canny.off.png" &&
        fail "sd3.5_large_canny_controlnet_example: the ControlNet did not change the picture"
fi

# the files load as what their keys say: SD3.5 Medium's MMDiT-X blocks, SD3
# Medium's plain joint blocks
for name in sd3.5_simple_example sd3.5_text_encoders_example sd3.5_large_canny_controlnet_example; do
    grep -q "sd3 MMDiT, .* (1 MMDiT-X)" "$T/$name.api.err" ||
        fail "$name: the log does not name the MMDiT-X block: $(grep checkpoint "$T/$name.api.err")"
done
for name in sd3_simple_example sd3_text_encoders_example sd3_anime_example sd3_controlnet_example; do
    grep -q "sd3 MMDiT, .* (0 MMDiT-X)" "$T/$name.api.err" ||
        fail "$name: the log does not say SD3 Medium's plain blocks: $(grep checkpoint "$T/$name.api.err")"
done
# the text-encoder examples' unconnected CLIPLoader and DualCLIPLoader do not run
for name in sd3.5_text_encoders_example sd3_text_encoders_example; do
    grep -q "CLIPLoader #4[12]" "$T/$name.api.err" && fail "$name: an unconnected loader ran"
    grep -q "TripleCLIPLoader #43" "$T/$name.api.err" || fail "$name: TripleCLIPLoader did not run"
done

sd_test_end "ok: ComfyUI's SD3 and SD3.5 examples ran unmodified on the tiny files"
