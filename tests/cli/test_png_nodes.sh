# Image nodes end to end through `sdflow run`: LoadImage -> ImageInvert ->
# SaveImage (prefix with a subfolder) and PreviewImage; the embedded prompt
# uses ComfyUI's json.dumps spacing, the extra_pnginfo of a PNG-carried
# workflow is written again, no temporary file is left behind, and a saved
# PNG runs again as a workflow with the counter continuing.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_png_nodes LoadImage ImageInvert SaveImage PreviewImage


mkdir -p "$T/input" "$T/output" "$T/temp"
# 3x2 RGBA, the middle column transparent
printf '%s' 'iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAYAAACddGYaAAAAHUlEQVR4nGNgYDjxP4DhBMMCIM3AUAHkVAA5QBoAiIwL9aAmuykAAAAASUVORK5CYII=' \
    | base64 -d > "$T/input/in.png"

cat > "$T/wf.json" <<'JSON'
{
  "1": {"class_type": "LoadImage", "inputs": {"image": "in.png"}},
  "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
  "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "inv/x"}},
  "4": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}
}
JSON

run() {
    "$SDFLOW_BIN" run "$@" --no-cache --quiet --input-dir "$T/input" --output-dir "$T/output" \
        --temp-dir "$T/temp"
}

run "$T/wf.json" 2> "$T/err1" || fail "run: $(cat "$T/err1")"
out="$T/output/inv/x_00001_.png"
[ -f "$out" ] || fail "SaveImage did not write inv/x_00001_.png"
ls "$T/temp"/ComfyUI_temp_?????_00001_.png > /dev/null 2>&1 || fail "PreviewImage did not write into the temp dir"
[ -z "$(find "$T/output" "$T/temp" -name '*.tmp*' -o -name '.sdflow-tmp-*')" ] || fail "temporary files left behind"
# tEXt "prompt" with Python json.dumps separators
if [ -f "$out" ]; then
    grep -aq '"class_type": "ImageInvert"' "$out" || fail "prompt chunk missing or not in json.dumps form"
    head -c 8 "$out" | od -An -c | grep -q 'P   N   G' || fail "output is not a PNG"
fi

# The saved PNG runs again as a workflow; the counter continues.
if [ -f "$out" ]; then
    run "$out" 2> "$T/err2" || fail "run from PNG: $(cat "$T/err2")"
    [ -f "$T/output/inv/x_00002_.png" ] || fail "second run did not write inv/x_00002_.png"
fi

# A PNG as ComfyUI writes it (PIL: tEXt "prompt" = json.dumps(prompt) and
# "workflow" = the UI graph, before IDAT; a seed past 2^53 among the widget
# values) reruns, and the output carries the UI workflow with every digit.
if command -v python3 > /dev/null; then
    python3 - "$T/comfy.png" <<'PY'
import json, struct, sys, zlib
prompt = {"1": {"inputs": {"image": "in.png", "upload": "image"}, "class_type": "LoadImage",
                "_meta": {"title": "Load Image"}},
          "2": {"inputs": {"image": ["1", 0]}, "class_type": "ImageInvert", "_meta": {"title": "Invert Image"}},
          "3": {"inputs": {"filename_prefix": "comfy", "images": ["2", 0]}, "class_type": "SaveImage",
                "_meta": {"title": "Save Image"}}}
workflow = {"last_node_id": 3, "last_link_id": 2, "version": 0.4,
            "nodes": [{"id": 9, "type": "KSampler", "widgets_values": [18446744073709551615, "fixed"]}],
            "links": []}
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
raw = b"".join(b"\0" + bytes([200, 100, 50]) * 2 for _ in range(2))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
       + chunk(b"tEXt", b"prompt\0" + json.dumps(prompt).encode("latin-1"))
       + chunk(b"tEXt", b"workflow\0" + json.dumps(workflow).encode("latin-1"))
       + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
open(sys.argv[1], "wb").write(png)
PY
    run "$T/comfy.png" 2> "$T/err_comfy" || fail "run of a ComfyUI PNG: $(cat "$T/err_comfy")"
    cout="$T/output/comfy_00001_.png"
    [ -f "$cout" ] || fail "the ComfyUI PNG's workflow wrote no comfy_00001_.png"
    if [ -f "$cout" ]; then
        grep -aq '"class_type": "SaveImage"' "$cout" || fail "ComfyUI PNG rerun: no prompt chunk"
        grep -aq '18446744073709551615' "$cout" || fail "ComfyUI PNG rerun: the UI workflow lost digits"
    fi
fi

# A broken input image is an error that names the file.
printf 'not a png' > "$T/input/bad.png"
sed 's/in.png/bad.png/' "$T/wf.json" > "$T/bad.json"
if run "$T/bad.json" 2> "$T/err3"; then
    fail "corrupt input PNG accepted"
else
    grep -q 'bad.png' "$T/err3" || fail "error does not name the file: $(cat "$T/err3")"
fi

# The decoding limit (decompression bombs): in.png has 3x2 = 6 pixels.
if run "$T/wf.json" --max-image-pixels 5 2> "$T/err4"; then
    fail "an image over --max-image-pixels was loaded"
else
    grep -q "LoadImage" "$T/err4" && grep -q "in.png" "$T/err4" && grep -q "limit of 5 pixels" "$T/err4" ||
        fail "the limit error does not name the node, file and limit: $(cat "$T/err4")"
fi
run "$T/wf.json" --max-image-pixels 6 2> "$T/err5" || fail "an image at the limit was refused: $(cat "$T/err5")"
if SDFLOW_MAX_IMAGE_PIXELS=5 run "$T/wf.json" 2> "$T/err6"; then
    fail "SDFLOW_MAX_IMAGE_PIXELS was not applied"
fi
if SDFLOW_MAX_IMAGE_PIXELS=lots run "$T/wf.json" 2> "$T/err7"; then
    fail "a bad SDFLOW_MAX_IMAGE_PIXELS was accepted"
else
    grep -q "lots" "$T/err7" || fail "the error does not quote the bad value: $(cat "$T/err7")"
fi

sd_test_end "all png node checks passed"
