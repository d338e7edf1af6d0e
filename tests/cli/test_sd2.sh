#!/usr/bin/env bash
# SD2.x end to end: `sdflow synth --preset sd2-tiny` (v-prediction) and
# sd2-tiny-eps write random SD2 checkpoints in the real single-file layout;
# the SD1 txt2img workflow runs on both through `sdflow run` (OpenCLIP-H text
# encoder, linear-proj UNet, v / eps denoising), the loader names the family
# and the prediction type it detected, and the picture is not a flat image
# (NaN latents decode to a single colour, whose PNG is tiny).
source "$(dirname "$0")/lib.sh"
sd_test_begin cli_sd2
cd "$T"
bin=$SDFLOW_BIN

"$bin" synth --preset sd2-tiny --models-dir models --tokenizer-dir tok > /dev/null || fail "synth sd2-tiny"
"$bin" synth --preset sd2-tiny-eps --models-dir models > /dev/null || fail "synth sd2-tiny-eps"

for v in sd2-tiny sd2-tiny-eps; do
    "$bin" run "$SDFLOW_SOURCE_DIR/workflows/txt2img_sd15.json" --models-dir models --tokenizer-dir tok \
        --output-dir "out-$v" --no-cache --progress=plain \
        --set 4.ckpt_name=sdflow-random-$v.safetensors \
        --set 5.width=64 --set 5.height=64 --set 3.steps=2 2> "err-$v.txt" ||
        { cat "err-$v.txt"; fail "txt2img on $v failed"; continue; }
    png=$(ls "out-$v"/*.png 2> /dev/null | head -1)
    [ -n "$png" ] || { fail "$v: no PNG written"; continue; }
    size=$(stat -c %s "$png")
    [ "$size" -gt 2000 ] || fail "$v: PNG of $size bytes, a flat picture?"
done
grep -q "sd2 v-prediction" err-sd2-tiny.txt || { cat err-sd2-tiny.txt; fail "sd2-tiny not detected as v-prediction"; }
grep -q "sd2, UNet" err-sd2-tiny-eps.txt || { cat err-sd2-tiny-eps.txt; fail "sd2-tiny-eps not detected as sd2 eps"; }
sd_test_end "sd2 passed"
