#!/usr/bin/env bash
# `sdflow synth` makes a random checkpoint and a stand-in vocabulary with
# which ComfyUI's default txt2img graph runs end to end (the README main job),
# and the files say plainly that the weights are random.
set -euo pipefail
bin=${SDFLOW_BIN:?}; src=${SDFLOW_SOURCE_DIR:?}
t=${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_synth
rm -rf "$t"; mkdir -p "$t"; cd "$t"
fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }

out=$("$bin" synth --preset sd1-tiny --models-dir models --tokenizer-dir tok)
echo "$out" | grep -q RANDOM || fail "synth does not say the weights are random"
[ -f models/checkpoints/sdflow-random-sd1-tiny.safetensors ] || fail "no checkpoint written"
[ -f tok/vocab.json ] && [ -f tok/merges.txt ] || fail "no vocabulary written"
"$bin" synth --preset sdxl-tiny --models-dir models >/dev/null || fail "sdxl-tiny preset"
[ -f models/checkpoints/sdflow-random-sdxl-tiny.safetensors ] || fail "no SDXL checkpoint written"
"$bin" synth --preset nope --models-dir models >/dev/null 2>&1 && fail "unknown preset accepted"

"$bin" run "$src/workflows/txt2img_sd15.json" --models-dir models --tokenizer-dir tok \
  --output-dir out --no-cache --quiet --report rep.json \
  --set 4.ckpt_name=sdflow-random-sd1-tiny.safetensors \
  --set 5.width=64 --set 5.height=64 --set 3.steps=2 2>err.txt || { cat err.txt; fail "txt2img run failed"; }
grep -q RANDOM err.txt || fail "the run does not warn that the model is random"
png=$(ls out/*.png | head -1)
[ -n "$png" ] || fail "no PNG written"
grep -a -q '"KSampler"' "$png" || fail "workflow not embedded in the PNG"
echo "4 passed, 0 failed"
