# `sdflow generate` on Flux, with the tiny random files of `sdflow synth
# --preset flux-dev-tiny / flux-schnell-tiny` (their real layouts):
#   - -m with the fp8 single file: the family is read from the file and
#     the graph is ComfyUI's Flux checkpoint example (EmptySD3LatentImage,
#     FluxGuidance 3.5 on the prompt for dev, KSampler cfg 1 euler / simple,
#     20 steps for dev and 4 for schnell, 1024 x 1024), options override
#     each default;
#   - split files (--diffusion-model, --t5xxl, --clip-l, --vae,
#     --weight-dtype): UNETLoader, DualCLIPLoader (type flux), VAELoader;
#   - both run to a picture of the asked size, the same bytes as `sdflow
#     run` of the printed graph; --vae replaces a checkpoint's VAE;
#   - usage errors name the options (split options without
#     --diffusion-model, a split model without its encoders, -m with
#     --diffusion-model, --guidance on an SD model, a bare DiT given as -m,
#     an SD file as --diffusion-model, a missing file).
# Needs the CLIP vocabulary and the Flux set's T5 tokenizer.json, python3.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_generate_flux CheckpointLoaderSimple UNETLoader DualCLIPLoader VAELoader FluxGuidance \
    EmptySD3LatentImage KSampler
sd_test_need_path "$TOK/vocab.json" "the CLIP vocabulary"
sd_test_need_path "$DATA/flux/tokenizer/tokenizer.json" "the Flux set's T5 tokenizer"
sd_test_need_cmd python3

M="$T/models"
for p in flux-dev-tiny flux-schnell-tiny; do
    "$SDFLOW_BIN" synth --preset $p --models-dir "$M" > /dev/null || fail "synth $p"
done
"$SDFLOW_BIN" synth --preset sd1-tiny --models-dir "$M" > /dev/null || fail "synth sd1-tiny"
cp "$M/diffusion_models/sdflow-random-flux-dev-tiny.safetensors" "$M/checkpoints/bare-dit.safetensors"
cp "$M/checkpoints/sdflow-random-sd1-tiny.safetensors" "$M/diffusion_models/sd1.safetensors"
mkdir -p "$T/tok/t5_tokenizer"
for f in vocab.json merges.txt; do ln -s "$TOK/$f" "$T/tok/$f"; done
ln -s "$DATA/flux/tokenizer/tokenizer.json" "$T/tok/t5_tokenizer/tokenizer.json"
E=(--models-dir "$M" --tokenizer-dir "$T/tok" --no-cache --quiet)
DEV=sdflow-random-flux-dev-tiny-fp8.safetensors
SCH=sdflow-random-flux-schnell-tiny-fp8.safetensors
SPLIT=(--diffusion-model sdflow-random-flux-dev-tiny.safetensors --t5xxl sdflow-random-tiny-t5xxl_fp16.safetensors
       --clip-l sdflow-random-tiny-clip_l.safetensors --vae sdflow-random-tiny-ae.safetensors)

# node ID's class_type and inputs, one line: "class {input: value, ...}"
node() {
    python3 - "$1" "$2" << 'PY'
import json, sys
g = json.load(open(sys.argv[1]))
n = g.get(sys.argv[2])
print("absent" if n is None else n["class_type"] + " " + json.dumps(n["inputs"], sort_keys=True))
PY
}
png_size() {
    python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read(); assert d[:8]==b"\x89PNG\r\n\x1a\n"; print("%dx%d" % struct.unpack(">II", d[16:24]))' "$1"
}
expect() { # FILE ID WANT
    local got
    got=$(node "$1" "$2")
    [ "$got" = "$3" ] || fail "$(basename "$1") node $2: $got, want $3"
}

# ---- the fp8 single file: defaults of dev and schnell ----
"$SDFLOW_BIN" generate -m "$DEV" -p "a red fox" "${E[@]}" --print-workflow > "$T/dev.json" 2> "$T/err" ||
    fail "dev --print-workflow: $(cat "$T/err")"
expect "$T/dev.json" 3 'KSampler {"cfg": 1, "denoise": 1, "latent_image": ["5", 0], "model": ["4", 0], "negative": ["7", 0], "positive": ["15", 0], "sampler_name": "euler", "scheduler": "simple", "seed": 0, "steps": 20}'
expect "$T/dev.json" 5 'EmptySD3LatentImage {"batch_size": 1, "height": 1024, "width": 1024}'
expect "$T/dev.json" 15 'FluxGuidance {"conditioning": ["6", 0], "guidance": 3.5}'
expect "$T/dev.json" 4 "CheckpointLoaderSimple {\"ckpt_name\": \"$DEV\"}"
expect "$T/dev.json" 6 'CLIPTextEncode {"clip": ["4", 1], "text": "a red fox"}'
expect "$T/dev.json" 8 'VAEDecode {"samples": ["3", 0], "vae": ["4", 2]}'
"$SDFLOW_BIN" generate -m "$SCH" -p "a red fox" "${E[@]}" --print-workflow > "$T/sch.json" 2> "$T/err" ||
    fail "schnell --print-workflow: $(cat "$T/err")"
expect "$T/sch.json" 3 'KSampler {"cfg": 1, "denoise": 1, "latent_image": ["5", 0], "model": ["4", 0], "negative": ["7", 0], "positive": ["6", 0], "sampler_name": "euler", "scheduler": "simple", "seed": 0, "steps": 4}'
expect "$T/sch.json" 15 absent
# every default gives way to its option
"$SDFLOW_BIN" generate -m "$DEV" -p x "${E[@]}" --print-workflow --steps 9 --cfg 2.5 --sampler heun \
    --scheduler beta -W 512 -H 768 --guidance 5 --seed 77 > "$T/opt.json" 2> "$T/err" || fail "options: $(cat "$T/err")"
expect "$T/opt.json" 3 'KSampler {"cfg": 2.5, "denoise": 1, "latent_image": ["5", 0], "model": ["4", 0], "negative": ["7", 0], "positive": ["15", 0], "sampler_name": "heun", "scheduler": "beta", "seed": 77, "steps": 9}'
expect "$T/opt.json" 5 'EmptySD3LatentImage {"batch_size": 1, "height": 768, "width": 512}'
expect "$T/opt.json" 15 'FluxGuidance {"conditioning": ["6", 0], "guidance": 5}'
"$SDFLOW_BIN" generate -m "$SCH" -p x "${E[@]}" --print-workflow --guidance 2 > "$T/sg.json" 2> /dev/null
expect "$T/sg.json" 15 'FluxGuidance {"conditioning": ["6", 0], "guidance": 2}'
# SD keeps its defaults
"$SDFLOW_BIN" generate -m sdflow-random-sd1-tiny.safetensors -p x "${E[@]}" --print-workflow > "$T/sd.json" 2> /dev/null
expect "$T/sd.json" 5 'EmptyLatentImage {"batch_size": 1, "height": 512, "width": 512}'
python3 -c 'import json,sys; k=json.load(open(sys.argv[1]))["3"]["inputs"]; sys.exit(0 if (k["cfg"],k["scheduler"],k["steps"])==(8,"normal",20) else 1)' \
    "$T/sd.json" || fail "SD defaults changed: $(node "$T/sd.json" 3)"

# ---- split files ----
"$SDFLOW_BIN" generate "${SPLIT[@]}" --weight-dtype fp8_e4m3fn -p "a red fox" "${E[@]}" --print-workflow \
    > "$T/split.json" 2> "$T/err" || fail "split --print-workflow: $(cat "$T/err")"
expect "$T/split.json" 12 'UNETLoader {"unet_name": "sdflow-random-flux-dev-tiny.safetensors", "weight_dtype": "fp8_e4m3fn"}'
expect "$T/split.json" 13 'DualCLIPLoader {"clip_name1": "sdflow-random-tiny-t5xxl_fp16.safetensors", "clip_name2": "sdflow-random-tiny-clip_l.safetensors", "type": "flux"}'
expect "$T/split.json" 14 'VAELoader {"vae_name": "sdflow-random-tiny-ae.safetensors"}'
expect "$T/split.json" 4 absent
expect "$T/split.json" 6 'CLIPTextEncode {"clip": ["13", 0], "text": "a red fox"}'
expect "$T/split.json" 8 'VAEDecode {"samples": ["3", 0], "vae": ["14", 0]}'
expect "$T/split.json" 3 'KSampler {"cfg": 1, "denoise": 1, "latent_image": ["5", 0], "model": ["12", 0], "negative": ["7", 0], "positive": ["15", 0], "sampler_name": "euler", "scheduler": "simple", "seed": 0, "steps": 20}'
# --vae on a checkpoint replaces its VAE
"$SDFLOW_BIN" generate -m "$DEV" --vae sdflow-random-tiny-ae.safetensors -p x "${E[@]}" --print-workflow \
    > "$T/vae.json" 2> /dev/null
expect "$T/vae.json" 8 'VAEDecode {"samples": ["3", 0], "vae": ["14", 0]}'

# ---- runs: the asked size, the bytes `sdflow run` of the printed graph saves ----
SMALL=(-W 64 -H 48 --steps 2 --seed 5)
runs() { # NAME GENERATE-ARGS...
    local name=$1
    shift
    "$SDFLOW_BIN" generate "$@" -p "a red fox in the snow" "${SMALL[@]}" "${E[@]}" -o "$T/$name.png" > /dev/null \
        2> "$T/$name.err" || { fail "$name run: $(tail -3 "$T/$name.err")"; return; }
    [ "$(png_size "$T/$name.png")" = 64x48 ] || fail "$name: size $(png_size "$T/$name.png")"
    "$SDFLOW_BIN" generate "$@" -p "a red fox in the snow" "${SMALL[@]}" "${E[@]}" --print-workflow > "$T/$name.json" \
        2> /dev/null || fail "$name --print-workflow"
    "$SDFLOW_BIN" run "$T/$name.json" "${E[@]}" --output-dir "$T/run_$name" > "$T/$name.files" 2> "$T/$name.err" ||
        fail "$name: run of the printed graph: $(tail -3 "$T/$name.err")"
    cmp -s "$(head -1 "$T/$name.files")" "$T/$name.png" || fail "$name: generate and run saved different bytes"
}
runs dev -m "$DEV"
runs schnell -m "$SCH"
runs split "${SPLIT[@]}"
runs split_schnell --diffusion-model sdflow-random-flux-schnell-tiny.safetensors --t5xxl sdflow-random-tiny-t5xxl_fp16.safetensors \
    --clip-l sdflow-random-tiny-clip_l.safetensors --vae sdflow-random-tiny-ae.safetensors

# ---- usage errors ----
check_usage() { # expected-text args...
    local want="$1"
    shift
    if "$SDFLOW_BIN" generate "$@" "${E[@]}" > "$T/out" 2> "$T/err"; then fail "generate $* succeeded"; return; fi
    grep -q -- "$want" "$T/err" || fail "generate $*: stderr lacks '$want': $(cat "$T/err")"
}
check_usage "--t5xxl goes with --diffusion-model" -m "$DEV" --t5xxl a.safetensors -p x
check_usage "--weight-dtype goes with --diffusion-model" -m "$DEV" --weight-dtype fp8_e5m2 -p x
check_usage "needs its text encoders and VAE" --diffusion-model sdflow-random-flux-dev-tiny.safetensors -p x
check_usage "exclude each other" -m "$DEV" "${SPLIT[@]}" -p x
check_usage "--guidance is Flux's" -m sdflow-random-sd1-tiny.safetensors --guidance 3 -p x --print-workflow
check_usage "give it as --diffusion-model" -m bare-dit.safetensors -p x --print-workflow
check_usage "not a Flux, SD3 or Z-Image model" --diffusion-model sd1.safetensors --t5xxl a --clip-l b --vae c -p x --print-workflow
check_usage "-m: " -m nope.safetensors -p x --print-workflow
grep -q "nope.safetensors" "$T/err" || fail "a missing model is not named: $(cat "$T/err")"
check_usage "--weight-dtype" "${SPLIT[@]}" --weight-dtype fp16 -p x

sd_test_end "generate on Flux: fp8 single file and split files, family defaults, runs, usage errors"
