# Image nodes end to end through `sdflow run`: LoadImage -> ImageInvert ->
# SaveImage (prefix with a subfolder) and PreviewImage; the embedded prompt
# uses ComfyUI's json.dumps spacing, the extra_pnginfo of a PNG-carried
# workflow is written again, no temporary file is left behind, and a saved
# PNG runs again as a workflow with the counter continuing.
set -u
: "${SDFLOW_BIN:?}" "${SDFLOW_TEST_TMP:?}"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for c in LoadImage ImageInvert SaveImage PreviewImage; do
    if ! "$SDFLOW_BIN" nodes | grep -q "^$c "; then
        echo "SKIP: node type $c is not registered yet"
        exit 77
    fi
done

T="$SDFLOW_TEST_TMP/cli_png_nodes"
rm -rf "$T"
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
[ -z "$(find "$T/output" "$T/temp" -name '*.tmp*')" ] || fail "temporary files left behind"
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

# A broken input image is an error that names the file.
printf 'not a png' > "$T/input/bad.png"
sed 's/in.png/bad.png/' "$T/wf.json" > "$T/bad.json"
if run "$T/bad.json" 2> "$T/err3"; then
    fail "corrupt input PNG accepted"
else
    grep -q 'bad.png' "$T/err3" || fail "error does not name the file: $(cat "$T/err3")"
fi

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "all png node checks passed"
