#!/usr/bin/env bash
# Files a loader cannot load are refused at validation (sd_input_def.file_probe),
# before any node runs: a checkpoint of another architecture (a few Flux-like
# keys, no model part), a broken Flux DiT (its detection's reason), a file
# with no diffusion model given to
# CheckpointLoaderSimple, a checkpoint without a VAE given to VAELoader, a
# T2I-Adapter given to ControlNetLoader and an unknown upscaler each fail `sdflow run` with exit 1, "nothing was run", an
# invalid_model_file problem naming the node, the input and the loader's own
# reason, and a report in which nothing executed. The valid workflow still runs.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_model_file_check CheckpointLoaderSimple VAELoader UpscaleModelLoader ControlNetLoader ControlNetApply
sd_test_need_cmd python3
cd "$T"
sd_test_tiny_sd1 "$T"
mkdir -p models/vae models/upscale_models input out
sd_test_write_png input/grad.png

# st FILE KEY...: a safetensors of one small F32 tensor per key (no SD layout)
st() {
    python3 - "$@" <<'PY' || { echo "FAIL: cannot write $1"; exit 1; }
import json, struct, sys
path, keys = sys.argv[1], sys.argv[2:]
hdr, off = {}, 0
for k in keys:
    hdr[k] = {"dtype": "F32", "shape": [2, 2], "data_offsets": [off, off + 16]}
    off += 16
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes(off))
PY
}
st models/checkpoints/flux.safetensors double_blocks.0.img_attn.qkv.weight img_in.weight
st models/checkpoints/fluxbad.safetensors double_blocks.0.img_attn.norm.key_norm.scale img_in.weight
st models/upscale_models/swinir.safetensors layers.0.residual_group.blocks.0.attn.qkv.weight
# the tiny checkpoint's VAE alone: no diffusion model in it
python3 "$SDFLOW_SOURCE_DIR/tests/data/torch/torchsave.py" to-ckpt \
    models/checkpoints/sdflow-random-sd1-tiny.safetensors models/checkpoints/vae_only.pt \
    --strip first_stage_model. > /dev/null 2>&1 || { echo "FAIL: conversion failed"; exit 1; }
st models/vae/novae.safetensors cond_stage_model.transformer.bar

# bad NAME NODE CLASS INPUT REASON WORKFLOW: validation refuses, nothing runs
bad() {
    local name=$1 node=$2 class=$3 input=$4 reason=$5 wf=$6
    rm -f "$name.report.json"
    "$SDFLOW_BIN" run "$wf" --models-dir models --tokenizer-dir "$T/tok" --input-dir input \
        --output-dir out --no-cache --quiet --report "$name.report.json" > /dev/null 2> "$name.err"
    local rc=$?
    [ "$rc" -eq 1 ] || fail "$name: exit code $rc, expected 1: $(cat "$name.err")"
    grep -q "nothing was run" "$name.err" || fail "$name: not refused at validation: $(cat "$name.err")"
    grep -qF "node $node ($class) input '$input': invalid_model_file" "$name.err" ||
        fail "$name: the problem does not name node $node and input $input: $(cat "$name.err")"
    grep -qF "$reason" "$name.err" || fail "$name: no '$reason' in: $(cat "$name.err")"
    [ "$(sd_test_count "$name.report.json" executed)" = "0" ] || fail "$name: report says something executed"
    sd_test_flat "$name.report.json" | grep -q '"nodes":{}' || fail "$name: report lists nodes"
    [ -z "$(ls -A out)" ] || fail "$name: something was written to the output dir"
}

set_ckpt() { "$SDFLOW_BIN" export --json tiny.json --set "4.ckpt_name=$1" > "$2" || fail "export $2"; }
set_ckpt flux.safetensors flux.json
bad flux 4 CheckpointLoaderSimple ckpt_name "no model part found" flux.json
set_ckpt fluxbad.safetensors fluxbad.json
bad fluxbad 4 CheckpointLoaderSimple ckpt_name "Flux model: img_in.weight has 2 inputs" fluxbad.json
set_ckpt vae_only.pt vae_only.json
bad vae_only 4 CheckpointLoaderSimple ckpt_name "is not a checkpoint: no diffusion model" vae_only.json

python3 - tiny.json novae.json <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
g["10"] = {"class_type": "VAELoader", "inputs": {"vae_name": "novae.safetensors"}}
g["8"]["inputs"]["vae"] = ["10", 0]
json.dump(g, open(sys.argv[2], "w"))
PY
bad novae 10 VAELoader vae_name "holds no VAE" novae.json

cat > up.json <<'J'
{"1": {"class_type": "UpscaleModelLoader", "inputs": {"model_name": "swinir.safetensors"}},
 "2": {"class_type": "LoadImage", "inputs": {"image": "grad.png"}},
 "3": {"class_type": "ImageUpscaleWithModel", "inputs": {"upscale_model": ["1", 0], "image": ["2", 0]}},
 "4": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "up"}}}
J
bad upscale 1 UpscaleModelLoader model_name "unknown upscale model architecture" up.json

# a T2I-Adapter given to ControlNetLoader
mkdir -p models/controlnet
st models/controlnet/adapter.safetensors body.0.in_conv.weight conv_in.weight
python3 - tiny.json cn.json <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
g["20"] = {"class_type": "ControlNetLoader", "inputs": {"control_net_name": "adapter.safetensors"}}
g["21"] = {"class_type": "LoadImage", "inputs": {"image": "grad.png"}}
g["22"] = {"class_type": "ControlNetApply", "inputs": {"conditioning": ["6", 0], "control_net": ["20", 0],
           "image": ["21", 0], "strength": 1.0}}
g["3"]["inputs"]["positive"] = ["22", 0]
json.dump(g, open(sys.argv[2], "w"))
PY
bad controlnet 20 ControlNetLoader control_net_name "T2I-Adapters are not supported" cn.json

# the valid workflow still passes validation and runs
"$SDFLOW_BIN" run "${SD_TINY_ARGS[@]}" --input-dir input --output-dir out --no-cache --quiet \
    > /dev/null 2> good.err || fail "the valid workflow failed: $(cat good.err)"
ls out/*.png > /dev/null 2>&1 || fail "the valid workflow saved no image"

sd_test_end "model files checked at validation"
