#!/usr/bin/env bash
# PyTorch checkpoints (.ckpt/.pt) through the weights-only reader, end to end:
# a random sd1-tiny checkpoint from `sdflow synth`, converted to torch.save's
# zip format (Lightning's {"state_dict": ...}) by tests/data/torch/torchsave.py
# (python3 standard library only; also in the legacy pre-1.6 stream format),
# gives exactly the run of its .safetensors:
# the same image bytes, and the same dumped tensors when loaded under its own
# .ckpt name; a standalone VAE as .pt decodes the same. When the shared test
# data is there, the same for a Kohya LoRA
# as .pt and a ControlNet as .pth. A malicious .ckpt is refused, naming the
# global and the node, and nothing is written.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bin=${SDFLOW_BIN:?}; src=${SDFLOW_SOURCE_DIR:?}
td=${SDFLOW_TESTDATA:-${SDFLOW_TESTDATA_DEFAULT:-$src/../shared/testdata}}
t=${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_ckpt
rm -rf "$t"; mkdir -p "$t"; cd "$t"
passed=0
fail() { echo "FAIL: $*"; echo "$passed passed, 1 failed"; exit 1; }
ok() { passed=$((passed + 1)); }
conv() { python3 "$src/tests/data/torch/torchsave.py" to-ckpt "$@" || fail "conversion of $1 failed"; }

"$bin" synth --preset sd1-tiny --models-dir st --tokenizer-dir tok >/dev/null
st_file=st/checkpoints/sdflow-random-sd1-tiny.safetensors
mkdir -p pt/checkpoints both/checkpoints lg/checkpoints
conv "$st_file" pt/checkpoints/model.ckpt --lightning
conv "$st_file" lg/checkpoints/model.ckpt --lightning --legacy
cp "$st_file" st/checkpoints/model.ckpt # safetensors bytes under the same name: told apart by content
cp "$st_file" both/checkpoints/tiny.safetensors
cp pt/checkpoints/model.ckpt both/checkpoints/tiny.ckpt
head -c 2 pt/checkpoints/model.ckpt | grep -q PK || fail "converted file is not a zip"

run() { # NAME MODELS_DIR CKPT_NAME [extra args]: a 64x64 two-step txt2img
    local name=$1 dir=$2 ck=$3
    shift 3
    "$bin" run "$src/workflows/txt2img_sd15.json" --models-dir "$dir" --tokenizer-dir tok \
        --output-dir "out-$name" --no-cache --quiet --set 4.ckpt_name="$ck" \
        --set 5.width=64 --set 5.height=64 --set 3.steps=2 "$@" 2>"$name.err" >"$name.out" ||
        { cat "$name.err"; fail "$name: run failed"; }
}
run st st model.ckpt
run pt pt model.ckpt
run lg lg model.ckpt
a=$(ls out-st/*.png | head -1); b=$(ls out-pt/*.png | head -1); c=$(ls out-lg/*.png | head -1)
cmp -s "$a" "$b" || fail "the .ckpt gives a different image from its .safetensors"
ok
cmp -s "$a" "$c" || fail "the legacy-format .ckpt gives a different image from its .safetensors"
ok
run dst both tiny.safetensors --dump dump-st
run dpt both tiny.ckpt --dump dump-pt
n=0
for f in dump-st/*.safetensors; do
    cmp -s "$f" "dump-pt/$(basename "$f")" || fail "output $(basename "$f") differs between .safetensors and .ckpt"
    n=$((n + 1))
done
[ "$n" -ge 3 ] || fail "only $n dumped outputs"
ok

# a standalone VAE as .pt (VAELoader): the same image as the checkpoint's own VAE
mkdir -p both/vae
conv "$st_file" both/vae/v.pt --lightning --strip first_stage_model.
python3 - "$src/workflows/txt2img_sd15.json" vae.json <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
g["10"] = {"class_type": "VAELoader", "inputs": {"vae_name": "v.pt"}}
g["8"]["inputs"]["vae"] = ["10", 0]
json.dump(g, open(sys.argv[2], "w"))
PY
"$bin" run vae.json --models-dir both --tokenizer-dir tok --output-dir out-vae --no-cache --quiet \
    --set 4.ckpt_name=tiny.safetensors --set 5.width=64 --set 5.height=64 --set 3.steps=2 --dump dump-vae \
    2>vae.err >/dev/null || { cat vae.err; fail "VAELoader with a .pt failed"; }
cmp -s dump-st/8_0.safetensors dump-vae/8_0.safetensors || fail "the VAE from a .pt decodes differently"
ok

# a LoRA as .pt (shared test data)
if [ -f "$td/models/tiny-lora-sd1.safetensors" ] && [ -f "$td/models/tiny-sd1.safetensors" ]; then
    mkdir -p lm/checkpoints lm/loras
    ln -s "$td/models/tiny-sd1.safetensors" lm/checkpoints/tiny-sd1.safetensors
    cp "$td/models/tiny-lora-sd1.safetensors" lm/loras/l.safetensors
    conv "$td/models/tiny-lora-sd1.safetensors" lm/loras/l.pt
    for ext in safetensors pt; do
        "$bin" run "$src/workflows/lora_sd15.json" --models-dir lm --tokenizer-dir "$td/../data/clip" \
            --output-dir "lout-$ext" --no-cache --quiet --dump "ldump-$ext" \
            --set 4.ckpt_name=tiny-sd1.safetensors --set 10.lora_name="l.$ext" \
            --set 5.width=64 --set 5.height=64 --set 3.steps=1 2>"lora-$ext.err" >/dev/null ||
            { cat "lora-$ext.err"; fail "LoRA .$ext run failed"; }
    done
    for f in ldump-safetensors/*.safetensors; do
        cmp -s "$f" "ldump-pt/$(basename "$f")" || fail "LoRA output $(basename "$f") differs between .safetensors and .pt"
    done
    ok
    # a ControlNet as .pth (control_model.* keys, as lllyasviel's files)
    mkdir -p lm/controlnet in
    sd_test_write_png in/hint.png
    cp "$td/models/tiny-controlnet-sd1.safetensors" lm/controlnet/c.safetensors
    conv "$td/models/tiny-controlnet-sd1.safetensors" lm/controlnet/c.pth
    for ext in safetensors pth; do
        "$bin" run "$src/workflows/controlnet_canny_sd15.json" --models-dir lm --tokenizer-dir "$td/../data/clip" \
            --input-dir in --output-dir "cout-$ext" --no-cache --quiet --dump "cdump-$ext" \
            --set 4.ckpt_name=tiny-sd1.safetensors --set 13.control_net_name="c.$ext" --set 11.image=hint.png \
            --set 5.width=64 --set 5.height=64 --set 3.steps=1 2>"cn-$ext.err" >/dev/null ||
            { cat "cn-$ext.err"; fail "ControlNet .$ext run failed"; }
    done
    cmp -s cdump-safetensors/3_0.safetensors cdump-pth/3_0.safetensors ||
        fail "ControlNet .pth gives different samples from its .safetensors"
    ok
else
    echo "note: shared test data absent, LoRA .pt and ControlNet .pth parts not run"
fi

# a malicious checkpoint: refused, naming the global and the node, nothing run
cp "$src/tests/data/torch/bad-reduce.pt" pt/checkpoints/evil.ckpt
if "$bin" run "$src/workflows/txt2img_sd15.json" --models-dir pt --tokenizer-dir tok --output-dir out-evil \
    --no-cache --quiet --set 4.ckpt_name=evil.ckpt 2>evil.err >/dev/null; then
    fail "a checkpoint calling os.system was loaded"
fi
grep -q "posix.system" evil.err || fail "refusal does not name the global: $(cat evil.err)"
grep -q "CheckpointLoaderSimple" evil.err || fail "refusal does not name the node: $(cat evil.err)"
[ ! -d out-evil ] || [ -z "$(ls out-evil)" ] || fail "images written although the checkpoint was refused"
ok
echo "$passed passed, 0 failed"
