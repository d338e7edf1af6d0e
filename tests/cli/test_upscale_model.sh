#!/usr/bin/env bash
# Upscale models through `sdflow run`: LoadImage -> ImageUpscaleWithModel
# (UpscaleModelLoader) -> SaveImage with the tiny models of tests/data/upscale.
# An ESRGAN x4 .safetensors and the same file converted to a torch .pth
# (tests/data/torch/torchsave.py, python3 standard library) give identical
# upscaled tensors (--dump) and PNGs of 4x the input size; a Compact x4 .pth and a pixel-unshuffle x2 run
# too, at their scales. A file of another kind is refused at validation,
# naming the node, the input, the file and what it holds, and nothing is saved.
# Under --max-memory the tile shrinks until its activations fit, and a limit
# not even a 128-pixel tile fits fails the node naming its input.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_upscale_model UpscaleModelLoader ImageUpscaleWithModel
sd_test_need_cmd python3 # torchsave.py (the .pth) and the 300x300 workflow
cd "$T"
data=$SDFLOW_SOURCE_DIR/tests/data/upscale
mkdir -p models/upscale_models input
sd_test_write_png input/grad.png # 16x16
cp "$data/esrgan_old_4x.safetensors" "$data/compact_4x.pth" "$data/esrgan_new_2x.safetensors" \
    "$data/esrgan_old_2x.pth" models/upscale_models/
python3 "$SDFLOW_SOURCE_DIR/tests/data/torch/torchsave.py" to-ckpt \
    "$data/esrgan_old_4x.safetensors" models/upscale_models/esrgan_old_4x.pth ||
    { echo "FAIL: conversion to .pth failed"; exit 1; }
cp "$SDFLOW_SOURCE_DIR/tests/data/torch/embedding.safetensors" models/upscale_models/not_an_upscaler.safetensors

cat > wf.json <<'JSON'
{
  "1": {"class_type": "UpscaleModelLoader", "inputs": {"model_name": "esrgan_old_4x.safetensors"}},
  "2": {"class_type": "LoadImage", "inputs": {"image": "grad.png"}},
  "3": {"class_type": "ImageUpscaleWithModel", "inputs": {"upscale_model": ["1", 0], "image": ["2", 0]}},
  "4": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "up"}}
}
JSON

# PNG width and height from the IHDR chunk
png_size() { od -An -tu1 -j16 -N8 "$1" | awk '{print $1*16777216+$2*65536+$3*256+$4 "x" $5*16777216+$6*65536+$7*256+$8}'; }

run() { # NAME MODEL: run the workflow with MODEL into out-NAME (tensors in dump-NAME)
    "$SDFLOW_BIN" run wf.json --models-dir models --input-dir input --output-dir "out-$1" \
        --dump "dump-$1" --no-cache --quiet --set 1.model_name="$2" > "$1.out" 2> "$1.err" ||
        { cat "$1.err"; return 1; }
}

run st esrgan_old_4x.safetensors || fail "ESRGAN .safetensors run failed"
run pth esrgan_old_4x.pth || fail "ESRGAN .pth run failed"
a=$(ls out-st/*.png 2>/dev/null | head -1); b=$(ls out-pth/*.png 2>/dev/null | head -1)
[ -n "$a" ] && [ "$(png_size "$a")" = 64x64 ] || fail "ESRGAN x4 of 16x16 is not 64x64: ${a:+$(png_size "$a")}"
# the PNGs differ in their embedded prompt (model_name): compare the upscaled tensors
cmp -s dump-st/3_0.safetensors dump-pth/3_0.safetensors ||
    fail "the .pth gives another image than its .safetensors"

run compact compact_4x.pth || fail "Compact .pth run failed"
c=$(ls out-compact/*.png 2>/dev/null | head -1)
[ -n "$c" ] && [ "$(png_size "$c")" = 64x64 ] || fail "Compact x4 output size ${c:+$(png_size "$c")}"
run unshuffle esrgan_new_2x.safetensors || fail "Real-ESRGAN x2 (pixel unshuffle) run failed"
d=$(ls out-unshuffle/*.png 2>/dev/null | head -1)
[ -n "$d" ] && [ "$(png_size "$d")" = 32x32 ] || fail "x2 output size ${d:+$(png_size "$d")}"

# another kind of file: refused by the loader, nothing saved
if run bad not_an_upscaler.safetensors; then
    fail "a textual-inversion embedding was accepted as an upscale model"
else
    grep -q "UpscaleModelLoader" bad.err || fail "the error does not name the node: $(cat bad.err)"
    grep -q "model_name" bad.err || fail "the error does not name the input: $(cat bad.err)"
    grep -q "not_an_upscaler.safetensors" bad.err || fail "the error does not name the file: $(cat bad.err)"
    grep -q "unknown upscale model architecture" bad.err || fail "unexpected error: $(cat bad.err)"
fi
[ -z "$(ls out-bad 2>/dev/null)" ] || fail "an image was saved after the loader failed"

# --max-memory: the tile is halved until one tile's activations fit (a
# 300x300 image in 256-pixel tiles: 4 of them, where 512 would be one) ...
python3 - wf.json wf300.json << 'PY'
import json, sys
w = json.load(open(sys.argv[1]))
w["5"] = {"class_type": "ImageScale", "inputs": {"image": ["2", 0], "upscale_method": "nearest-exact",
          "width": 300, "height": 300, "crop": "disabled"}}
w["3"]["inputs"]["image"] = ["5", 0]
json.dump(w, open(sys.argv[2], "w"))
PY
"$SDFLOW_BIN" run wf300.json --models-dir models --input-dir input --output-dir out-300 --no-cache \
    --set 1.model_name=esrgan_old_2x.pth --max-memory 100M --progress=json > 300.out 2> 300.err ||
    fail "300x300 under --max-memory 100M failed: $(tail -3 300.err)"
cat 300.out 300.err | grep '"node":"3"' | grep -q '"step":4,"steps":4' ||
    fail "not upscaled in four tiles under --max-memory: $(cat 300.out 300.err | grep '"node":"3"' | tail -2)"
# ... and when even a 128-pixel tile does not fit, the node fails at once
if "$SDFLOW_BIN" run wf.json --models-dir models --input-dir input --output-dir out-mem --no-cache \
    --max-memory 200K > mem.out 2> mem.err; then
    fail "a 200K memory limit was not enforced"
else
    grep -q "ImageUpscaleWithModel" mem.err && grep -q "input 'image'" mem.err &&
        grep -q "activations" mem.err || fail "memory error: $(cat mem.err)"
fi

sd_test_end "upscale model workflows: ok"
