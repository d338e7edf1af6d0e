#!/usr/bin/env bash
# The main job: build sdflow and run a real txt2img workflow (ComfyUI's default
# graph, workflows/txt2img_sd15.json) with no downloads. With no checkpoint of
# your own, `sdflow synth` writes a tiny RANDOM-weight SD1 checkpoint in the
# real single-file layout (the image is noise: the point is the whole pipeline
# running), and a stand-in tokenizer vocabulary when none is configured
# (SDFLOW_TOKENIZER_DIR). The PNG lands in ./output with the workflow inside.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)"

work=build/demo
tok="${SDFLOW_TOKENIZER_DIR:-}"
if [ -z "$tok" ]; then
  tok="$work/tokenizer"
  synth_tok=(--tokenizer-dir "$tok")
else
  synth_tok=()
fi
build/sdflow synth --preset sd1-tiny --models-dir "$work/models" "${synth_tok[@]}"
build/sdflow run workflows/txt2img_sd15.json \
  --models-dir "$work/models" --tokenizer-dir "$tok" --output-dir output \
  --set 4.ckpt_name=sdflow-random-sd1-tiny.safetensors \
  --set 5.width=256 --set 5.height=256 --set 3.steps=10 "$@"
echo "demo: the PNG above holds the workflow in its 'prompt' chunk; rerun it with: build/sdflow run <that png>"
