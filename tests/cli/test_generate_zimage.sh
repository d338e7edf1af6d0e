# `sdflow generate` on Z-Image-Turbo, with the Z-Image set's tiny files
# under ComfyUI's names (tests/cli/zimage_models.py) and its tiny Qwen3's
# width from its manifest (--qwen3-4b-width):
#   - split files (--diffusion-model, --text-encoder, --vae): the family is
#     read from the file and the graph is ComfyUI's Z-Image template
#     (UNETLoader, CLIPLoader type lumina2, VAELoader, ModelSamplingAuraFlow
#     3, ConditioningZeroOut of the prompt as the negative,
#     EmptySD3LatentImage, KSampler cfg 1 res_multistep / simple, 8 steps,
#     1024 x 1024); options override each default (-n gives a
#     CLIPTextEncode negative, --shift the AuraFlow shift);
#   - it runs to a picture of the asked size, the same bytes as `sdflow run`
#     of the printed graph, and the pixels of workflows/txt2img_zimage_turbo.json
#     with the same settings;
#   - usage errors name the options (no --text-encoder, Flux/SD3 encoders
#     on Z-Image, --text-encoder on another family, a bare DiT as -m).
# Needs the Z-Image reference set and python3.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_generate_zimage UNETLoader CLIPLoader VAELoader ModelSamplingAuraFlow ConditioningZeroOut \
    EmptySD3LatentImage KSampler
ZI="$DATA/zimage"
sd_test_need_path "$ZI/manifest.json" "the Z-Image reference set ($ZI)"
sd_test_need_cmd python3

M="$T/models"
width=$(python3 "$SDFLOW_SOURCE_DIR/tests/cli/zimage_models.py" "$ZI" "$M" "$T/tok") || fail "placing the Z-Image set's files"
"$SDFLOW_BIN" synth --preset sd1-tiny --models-dir "$M" > /dev/null || fail "synth sd1-tiny"
mkdir -p "$M/checkpoints"
cp "$M/diffusion_models/z_image_turbo_bf16.safetensors" "$M/checkpoints/bare-zimage.safetensors"
E=(--models-dir "$M" --tokenizer-dir "$T/tok" --qwen3-4b-width "$width" --no-cache --quiet)
SPLIT=(--diffusion-model z_image_turbo_bf16.safetensors --text-encoder qwen_3_4b.safetensors --vae ae.safetensors)

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
pixels() {
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

"$SDFLOW_BIN" generate "${SPLIT[@]}" -p "a red fox" "${E[@]}" --print-workflow > "$T/split.json" 2> "$T/err" ||
    fail "split --print-workflow: $(cat "$T/err")"
expect "$T/split.json" 3 'KSampler {"cfg": 1, "denoise": 1, "latent_image": ["5", 0], "model": ["16", 0], "negative": ["7", 0], "positive": ["6", 0], "sampler_name": "res_multistep", "scheduler": "simple", "seed": 0, "steps": 8}'
expect "$T/split.json" 5 'EmptySD3LatentImage {"batch_size": 1, "height": 1024, "width": 1024}'
expect "$T/split.json" 12 'UNETLoader {"unet_name": "z_image_turbo_bf16.safetensors", "weight_dtype": "default"}'
expect "$T/split.json" 13 'CLIPLoader {"clip_name": "qwen_3_4b.safetensors", "type": "lumina2"}'
expect "$T/split.json" 14 'VAELoader {"vae_name": "ae.safetensors"}'
expect "$T/split.json" 16 'ModelSamplingAuraFlow {"model": ["12", 0], "shift": 3}'
expect "$T/split.json" 6 'CLIPTextEncode {"clip": ["13", 0], "text": "a red fox"}'
expect "$T/split.json" 7 'ConditioningZeroOut {"conditioning": ["6", 0]}'
expect "$T/split.json" 8 'VAEDecode {"samples": ["3", 0], "vae": ["14", 0]}'
expect "$T/split.json" 4 absent
"$SDFLOW_BIN" generate "${SPLIT[@]}" -p x -n "blurry" --shift 6 --steps 4 --cfg 2 --sampler euler "${E[@]}" \
    --print-workflow > "$T/opt.json" 2> "$T/err" || fail "options: $(cat "$T/err")"
expect "$T/opt.json" 7 'CLIPTextEncode {"clip": ["13", 0], "text": "blurry"}'
expect "$T/opt.json" 16 'ModelSamplingAuraFlow {"model": ["12", 0], "shift": 6}'
expect "$T/opt.json" 3 'KSampler {"cfg": 2, "denoise": 1, "latent_image": ["5", 0], "model": ["16", 0], "negative": ["7", 0], "positive": ["6", 0], "sampler_name": "euler", "scheduler": "simple", "seed": 0, "steps": 4}'

# ---- a run: its size, the bytes of `sdflow run` of the printed graph, the example workflow's pixels ----
PROMPT="a red fox in a snowy forest at dawn, soft light, detailed fur"
SMALL=(-W 64 -H 48 --steps 2 --seed 47447417949230)
"$SDFLOW_BIN" generate "${SPLIT[@]}" -p "$PROMPT" "${SMALL[@]}" "${E[@]}" -o "$T/gen.png" > /dev/null 2> "$T/gen.err" ||
    fail "run: $(tail -3 "$T/gen.err")"
if [ -f "$T/gen.png" ]; then
    [ "$(png_size "$T/gen.png")" = 64x48 ] || fail "size $(png_size "$T/gen.png")"
    "$SDFLOW_BIN" generate "${SPLIT[@]}" -p "$PROMPT" "${SMALL[@]}" "${E[@]}" --print-workflow > "$T/gen.json" 2> /dev/null
    "$SDFLOW_BIN" run "$T/gen.json" "${E[@]}" --output-dir "$T/run" > "$T/run.files" 2> "$T/run.err" ||
        fail "run of the printed graph: $(tail -3 "$T/run.err")"
    cmp -s "$(head -1 "$T/run.files")" "$T/gen.png" || fail "generate and run saved different bytes"
    "$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/txt2img_zimage_turbo.json" "${E[@]}" --output-dir "$T/wf" \
        --set 3.steps=2 --set 13.width=64 --set 13.height=48 > "$T/wf.files" 2> "$T/wf.err" ||
        fail "workflows/txt2img_zimage_turbo.json: $(tail -3 "$T/wf.err")"
    pixels "$(head -1 "$T/wf.files")" "$T/gen.png" ||
        fail "generate and workflows/txt2img_zimage_turbo.json made different pictures"
fi

check_usage() { # expected-text args...
    local want="$1"
    shift
    if "$SDFLOW_BIN" generate "$@" "${E[@]}" > "$T/out" 2> "$T/err"; then fail "generate $* succeeded"; return; fi
    grep -q -- "$want" "$T/err" || fail "generate $*: stderr lacks '$want': $(cat "$T/err")"
}
check_usage "needs its text encoders and VAE" --diffusion-model z_image_turbo_bf16.safetensors --vae ae.safetensors -p x
check_usage "its text encoder is --text-encoder" --diffusion-model z_image_turbo_bf16.safetensors \
    --t5xxl qwen_3_4b.safetensors --clip-l qwen_3_4b.safetensors --vae ae.safetensors -p x --print-workflow
check_usage "--text-encoder is Z-Image's" -m sdflow-random-sd1-tiny.safetensors --text-encoder qwen_3_4b.safetensors \
    -p x --print-workflow
check_usage "give it as --diffusion-model with --text-encoder" -m bare-zimage.safetensors -p x --print-workflow

sd_test_end "generate on Z-Image: split files, template defaults, a run, usage errors"
