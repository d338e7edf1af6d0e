# `sdflow generate` on SD3 / SD3.5, with the SD3 set's tiny files under
# ComfyUI's names (tests/cli/sd3_models.py) and its tiny CLIP-L's and
# CLIP-G's head counts from its manifest (--clip-l-heads, --clip-g-heads):
#   - -m with the single file: the family is read from the file and the
#     graph is ComfyUI's SD3.5 example (CheckpointLoaderSimple,
#     EmptySD3LatentImage, KSampler euler / sgm_uniform, 20 steps, 1024 x
#     1024, the model's own shift: no ModelSamplingSD3) at cfg 4.5; options
#     override each default, --shift adds ModelSamplingSD3 after the LoRAs;
#   - split files (--diffusion-model, --clip-l, --clip-g, --t5xxl, --vae,
#     --weight-dtype): UNETLoader, TripleCLIPLoader (ComfyUI's order:
#     CLIP-L, CLIP-G, T5), VAELoader;
#   - a checkpoint without text encoders (MMDiT + VAE, as Stability
#     publishes sd3.5_medium.safetensors) with --clip-l, --clip-g, --t5xxl:
#     its MODEL and VAE, TripleCLIPLoader's CLIP (ComfyUI's SD3.5
#     text-encoder example);
#   - each runs to a picture of the asked size, the same bytes as `sdflow
#     run` of the printed graph; the split run's picture is the one of
#     workflows/txt2img_sd35_medium.json with the same settings;
#   - usage errors name the options (a part of the three encoders missing,
#     --clip-g or --shift on a Flux or SD model, a text-encoder-less or
#     VAE-less SD3 checkpoint without them).
# Needs the SD3 reference set, the CLIP vocabulary and python3.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_generate_sd3 CheckpointLoaderSimple UNETLoader TripleCLIPLoader VAELoader ModelSamplingSD3 \
    EmptySD3LatentImage KSampler
SD3="$DATA/sd3"
sd_test_need_path "$SD3/manifest.json" "the SD3 reference set ($SD3)"
sd_test_need_path "$TOK/vocab.json" "the CLIP vocabulary"
sd_test_need_cmd python3

M="$T/models"
python3 "$SDFLOW_SOURCE_DIR/tests/cli/sd3_models.py" "$SD3" "$M" "$T/tok" "$TOK" || fail "placing the SD3 set's files"
heads=$(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))["models"]
print(m["clip_l"]["config"]["num_attention_heads"], m["clip_g"]["config"]["num_attention_heads"])' "$SD3/manifest.json")
set -- $heads
"$SDFLOW_BIN" synth --preset sd1-tiny --models-dir "$M" > /dev/null || fail "synth sd1-tiny"
# a VAE-less SD3 checkpoint: the MMDiT alone under CheckpointLoaderSimple's folder
cp "$M/diffusion_models/sd3.5_medium.safetensors" "$M/checkpoints/bare-mmdit.safetensors"
E=(--models-dir "$M" --tokenizer-dir "$T/tok" --clip-l-heads "$1" --clip-g-heads "$2" --no-cache --quiet)
CKPT=sd3.5_medium_incl_clips_t5xxlfp8.safetensors
TE=(--clip-l clip_l.safetensors --clip-g clip_g.safetensors --t5xxl t5xxl_fp16.safetensors)
SPLIT=(--diffusion-model sd3.5_medium.safetensors "${TE[@]}" --vae sd3_vae.safetensors)

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
pixels() { # A.png B.png: the same IHDR and IDAT bytes
    python3 - "$1" "$2" << 'PY'
import struct, sys
def pix(path):
    data, pos, out = open(path, "rb").read(), 8, b""
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        if data[pos + 4:pos + 8] in (b"IHDR", b"IDAT"):
            out += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    return out
sys.exit(0 if pix(sys.argv[1]) == pix(sys.argv[2]) else 1)
PY
}
expect() { # FILE ID WANT
    local got
    got=$(node "$1" "$2")
    [ "$got" = "$3" ] || fail "$(basename "$1") node $2: $got, want $3"
}

# ---- the single file: the defaults ----
"$SDFLOW_BIN" generate -m "$CKPT" -p "a red fox" "${E[@]}" --print-workflow > "$T/ckpt.json" 2> "$T/err" ||
    fail "single file --print-workflow: $(cat "$T/err")"
expect "$T/ckpt.json" 3 'KSampler {"cfg": 4.5, "denoise": 1, "latent_image": ["5", 0], "model": ["4", 0], "negative": ["7", 0], "positive": ["6", 0], "sampler_name": "euler", "scheduler": "sgm_uniform", "seed": 0, "steps": 20}'
expect "$T/ckpt.json" 5 'EmptySD3LatentImage {"batch_size": 1, "height": 1024, "width": 1024}'
expect "$T/ckpt.json" 4 "CheckpointLoaderSimple {\"ckpt_name\": \"$CKPT\"}"
expect "$T/ckpt.json" 6 'CLIPTextEncode {"clip": ["4", 1], "text": "a red fox"}'
expect "$T/ckpt.json" 7 'CLIPTextEncode {"clip": ["4", 1], "text": ""}'
expect "$T/ckpt.json" 8 'VAEDecode {"samples": ["3", 0], "vae": ["4", 2]}'
expect "$T/ckpt.json" 15 absent
expect "$T/ckpt.json" 16 absent
# every default gives way to its option; --shift adds ModelSamplingSD3
"$SDFLOW_BIN" generate -m "$CKPT" -p x -n "blurry" "${E[@]}" --print-workflow --steps 9 --cfg 6 --sampler dpmpp_2m \
    --scheduler simple -W 512 -H 768 --seed 77 --shift 6 > "$T/opt.json" 2> "$T/err" || fail "options: $(cat "$T/err")"
expect "$T/opt.json" 3 'KSampler {"cfg": 6, "denoise": 1, "latent_image": ["5", 0], "model": ["16", 0], "negative": ["7", 0], "positive": ["6", 0], "sampler_name": "dpmpp_2m", "scheduler": "simple", "seed": 77, "steps": 9}'
expect "$T/opt.json" 5 'EmptySD3LatentImage {"batch_size": 1, "height": 768, "width": 512}'
expect "$T/opt.json" 16 'ModelSamplingSD3 {"model": ["4", 0], "shift": 6}'
expect "$T/opt.json" 7 'CLIPTextEncode {"clip": ["4", 1], "text": "blurry"}'
# the LoRAs come before the shift (the graph only)
"$SDFLOW_BIN" generate -m "$CKPT" -p x "${E[@]}" --print-workflow --shift 2 --lora a.safetensors:0.5 > "$T/lora.json" \
    2> "$T/err" || fail "--lora --shift: $(cat "$T/err")"
expect "$T/lora.json" 16 'ModelSamplingSD3 {"model": ["20", 0], "shift": 2}'
expect "$T/lora.json" 20 'LoraLoader {"clip": ["4", 1], "lora_name": "a.safetensors", "model": ["4", 0], "strength_clip": 0.5, "strength_model": 0.5}'

# ---- split files ----
"$SDFLOW_BIN" generate "${SPLIT[@]}" --weight-dtype fp8_e4m3fn -p "a red fox" "${E[@]}" --print-workflow \
    > "$T/split.json" 2> "$T/err" || fail "split --print-workflow: $(cat "$T/err")"
expect "$T/split.json" 12 'UNETLoader {"unet_name": "sd3.5_medium.safetensors", "weight_dtype": "fp8_e4m3fn"}'
expect "$T/split.json" 13 'TripleCLIPLoader {"clip_name1": "clip_l.safetensors", "clip_name2": "clip_g.safetensors", "clip_name3": "t5xxl_fp16.safetensors"}'
expect "$T/split.json" 14 'VAELoader {"vae_name": "sd3_vae.safetensors"}'
expect "$T/split.json" 4 absent
expect "$T/split.json" 6 'CLIPTextEncode {"clip": ["13", 0], "text": "a red fox"}'
expect "$T/split.json" 8 'VAEDecode {"samples": ["3", 0], "vae": ["14", 0]}'
expect "$T/split.json" 3 'KSampler {"cfg": 4.5, "denoise": 1, "latent_image": ["5", 0], "model": ["12", 0], "negative": ["7", 0], "positive": ["6", 0], "sampler_name": "euler", "scheduler": "sgm_uniform", "seed": 0, "steps": 20}'
# ---- a checkpoint without text encoders: its MODEL and VAE, TripleCLIPLoader's CLIP ----
"$SDFLOW_BIN" generate -m sd3.5_medium.safetensors "${TE[@]}" -p x "${E[@]}" --print-workflow > "$T/noclip.json" \
    2> "$T/err" || fail "text-encoder-less checkpoint: $(cat "$T/err")"
expect "$T/noclip.json" 4 'CheckpointLoaderSimple {"ckpt_name": "sd3.5_medium.safetensors"}'
expect "$T/noclip.json" 13 'TripleCLIPLoader {"clip_name1": "clip_l.safetensors", "clip_name2": "clip_g.safetensors", "clip_name3": "t5xxl_fp16.safetensors"}'
expect "$T/noclip.json" 6 'CLIPTextEncode {"clip": ["13", 0], "text": "x"}'
expect "$T/noclip.json" 8 'VAEDecode {"samples": ["3", 0], "vae": ["4", 2]}'

# ---- runs: the asked size, the bytes `sdflow run` of the printed graph saves ----
SMALL=(-W 64 -H 48 --steps 2 --seed 5)
PROMPT="a bottle with a pink and red galaxy inside it on top of a wooden table in a modern kitchen"
runs() { # NAME GENERATE-ARGS...
    local name=$1
    shift
    "$SDFLOW_BIN" generate "$@" -p "$PROMPT" "${SMALL[@]}" "${E[@]}" -o "$T/$name.png" > /dev/null \
        2> "$T/$name.err" || { fail "$name run: $(tail -3 "$T/$name.err")"; return; }
    [ "$(png_size "$T/$name.png")" = 64x48 ] || fail "$name: size $(png_size "$T/$name.png")"
    "$SDFLOW_BIN" generate "$@" -p "$PROMPT" "${SMALL[@]}" "${E[@]}" --print-workflow > "$T/$name.json" \
        2> /dev/null || fail "$name --print-workflow"
    "$SDFLOW_BIN" run "$T/$name.json" "${E[@]}" --output-dir "$T/run_$name" > "$T/$name.files" 2> "$T/$name.err" ||
        fail "$name: run of the printed graph: $(tail -3 "$T/$name.err")"
    cmp -s "$(head -1 "$T/$name.files")" "$T/$name.png" || fail "$name: generate and run saved different bytes"
}
runs ckpt -m "$CKPT"
runs split "${SPLIT[@]}"
runs noclip -m sd3.5_medium.safetensors "${TE[@]}"
runs shifted -m "$CKPT" --shift 6
# the split run is the example workflow with the same settings
"$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/txt2img_sd35_medium.json" "${E[@]}" --output-dir "$T/wf" \
    --set 3.seed=5 --set 3.steps=2 --set 53.width=64 --set 53.height=48 > "$T/wf.files" 2> "$T/wf.err" ||
    fail "workflows/txt2img_sd35_medium.json: $(tail -3 "$T/wf.err")"
[ -f "$T/split.png" ] && { pixels "$(head -1 "$T/wf.files")" "$T/split.png" ||
    fail "generate's split files and workflows/txt2img_sd35_medium.json made different pictures"; }
# the shift changes the picture
[ -f "$T/shifted.png" ] && [ -f "$T/ckpt.png" ] && pixels "$T/shifted.png" "$T/ckpt.png" &&
    fail "--shift 6 made the picture of the default shift 3"

# ---- usage errors ----
check_usage() { # expected-text args...
    local want="$1"
    shift
    if "$SDFLOW_BIN" generate "$@" "${E[@]}" > "$T/out" 2> "$T/err"; then fail "generate $* succeeded"; return; fi
    grep -q -- "$want" "$T/err" || fail "generate $*: stderr lacks '$want': $(cat "$T/err")"
}
check_usage "--clip-l, --clip-g and --t5xxl together" --diffusion-model sd3.5_medium.safetensors \
    --clip-l clip_l.safetensors --t5xxl t5xxl_fp16.safetensors --vae sd3_vae.safetensors -p x --print-workflow
check_usage "--clip-l, --clip-g and --t5xxl together" -m "$CKPT" --clip-g clip_g.safetensors -p x --print-workflow
check_usage "without text encoders" -m sd3.5_medium.safetensors -p x --print-workflow
check_usage "without a VAE" -m bare-mmdit.safetensors "${TE[@]}" -p x --print-workflow
check_usage "--clip-g is SD3's" -m sdflow-random-sd1-tiny.safetensors --clip-g clip_g.safetensors -p x --print-workflow
check_usage "--shift is SD3's" -m sdflow-random-sd1-tiny.safetensors --shift 3 -p x --print-workflow
check_usage "--guidance is Flux's" -m "$CKPT" --guidance 3 -p x --print-workflow
check_usage "--clip-l goes with --diffusion-model" -m sdflow-random-sd1-tiny.safetensors --clip-l clip_l.safetensors \
    -p x --print-workflow

sd_test_end "generate on SD3: single file, split files, text-encoder-less checkpoint, defaults, runs, usage errors"
