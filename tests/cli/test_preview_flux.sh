# --preview on a Flux dev txt2img (the Flux reference set's tiny split files
# under their ComfyUI names): latent2rgb with Flux's 16-channel factors at
# 1/8 of the picture; with a TAEF1 decoder in vae_approx/ the decoder's
# full-size picture (method "taesd"), found by ComfyUI's rule (the first file
# whose name starts with taef1_decoder). The TAEF1 decoder is made from the
# real TAEF2 decoder in shared/data/taesd: the same network with the first
# 16 of its 32 latent input channels and no GroupNorm side branches, which is
# TAEF1's layout (shared/data/taesd/ARCHITECTURE.md).
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_preview_flux UNETLoader DualCLIPLoader VAELoader CLIPTextEncode FluxGuidance \
    EmptySD3LatentImage KSampler VAEDecode SaveImage
FLUX="$DATA/flux"
TAEF2="$SHARED/data/taesd/taef2_decoder.safetensors"
sd_test_need_path "$FLUX/manifest.json" "the Flux reference set"
sd_test_need_path "$TAEF2"
sd_test_need_path "$TOK/vocab.json" "the CLIP vocabulary"
sd_test_need_cmd python3

# models and tokenizers where a ComfyUI installation has them
M="$T/models"
mkdir -p "$M/diffusion_models" "$M/text_encoders" "$M/vae" "$M/vae_approx" "$T/tok/t5_tokenizer"
ln -s "$FLUX/models/tiny-flux1-dev.safetensors" "$M/diffusion_models/flux1-dev.safetensors"
ln -s "$FLUX/models/tiny-t5xxl_fp16.safetensors" "$M/text_encoders/t5xxl_fp16.safetensors"
ln -s "$FLUX/models/tiny-clip_l.safetensors" "$M/text_encoders/clip_l.safetensors"
ln -s "$FLUX/models/tiny-ae.safetensors" "$M/vae/ae.safetensors"
for f in vocab.json merges.txt; do ln -s "$TOK/$f" "$T/tok/$f"; done
ln -s "$FLUX/tokenizer/tokenizer.json" "$T/tok/t5_tokenizer/tokenizer.json"

cat > "$T/flux.json" << 'JSON'
{"1": {"class_type": "UNETLoader", "inputs": {"unet_name": "flux1-dev.safetensors", "weight_dtype": "default"}},
 "2": {"class_type": "DualCLIPLoader", "inputs": {"clip_name1": "t5xxl_fp16.safetensors", "clip_name2": "clip_l.safetensors", "type": "flux"}},
 "3": {"class_type": "VAELoader", "inputs": {"vae_name": "ae.safetensors"}},
 "4": {"class_type": "CLIPTextEncode", "inputs": {"text": "a red fox in the snow", "clip": ["2", 0]}},
 "5": {"class_type": "FluxGuidance", "inputs": {"conditioning": ["4", 0], "guidance": 3.5}},
 "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["2", 0]}},
 "7": {"class_type": "EmptySD3LatentImage", "inputs": {"width": 128, "height": 96, "batch_size": 1}},
 "8": {"class_type": "KSampler", "inputs": {"model": ["1", 0], "seed": 3, "steps": 3, "cfg": 1.0, "sampler_name": "euler",
       "scheduler": "simple", "positive": ["5", 0], "negative": ["6", 0], "latent_image": ["7", 0], "denoise": 1.0}},
 "9": {"class_type": "VAEDecode", "inputs": {"samples": ["8", 0], "vae": ["3", 0]}},
 "10": {"class_type": "SaveImage", "inputs": {"filename_prefix": "flux", "images": ["9", 0]}}}
JSON

png_size() {
    python3 - "$1" << 'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n" and d[12:16] == b"IHDR", "not a PNG"
print("%dx%d" % struct.unpack(">II", d[16:24]))
PY
}
run() {
    "$SDFLOW_BIN" run "$T/flux.json" --models-dir "$M" --tokenizer-dir "$T/tok" --no-cache --output-dir "$T/out" \
        --preview "$T/$1.png" --progress=json > "$T/$1.ev" 2> "$T/$1.err" || fail "$1: $(cat "$T/$1.err")"
}

# latent2rgb: 16x12 for a 128x96 picture, every step, the last one included
run l2r
grep -q '"event":"preview","node":"8","class_type":"KSampler".*"step":3,"steps":3,.*"method":"latent2rgb"' "$T/l2r.ev" ||
    fail "no latent2rgb preview of the last step: $(grep preview "$T/l2r.ev")"
[ "$(png_size "$T/l2r.png" 2>&1)" = "16x12" ] || fail "latent2rgb preview size $(png_size "$T/l2r.png" 2>&1)"

# TAEF1 from vae_approx/ (a .safetensors with a suffix: ComfyUI takes the first name starting with taef1_decoder)
python3 - "$TAEF2" "$M/vae_approx/taef1_decoder_tiny.safetensors" << 'PY'
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
d = open(src, "rb").read()
n = struct.unpack("<Q", d[:8])[0]
head = json.loads(d[8:8 + n])
base = 8 + n
out, blobs, off = {}, [], 0
for k, v in sorted(head.items()):
    if k == "__metadata__" or ".pool." in k:
        continue
    a, b = v["data_offsets"]
    data, shape = d[base + a:base + b], list(v["shape"])
    if k == "1.weight":  # [64, 32, 3, 3] -> [64, 16, 3, 3]
        per_in = 9 * 2  # 3x3 F16
        data = b"".join(data[o * 32 * per_in:o * 32 * per_in + 16 * per_in] for o in range(shape[0]))
        shape[1] = 16
    out[k] = {"dtype": v["dtype"], "shape": shape, "data_offsets": [off, off + len(data)]}
    blobs.append(data)
    off += len(data)
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(dst, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
[ -s "$M/vae_approx/taef1_decoder_tiny.safetensors" ] || fail "could not write the TAEF1 decoder"
run taesd
grep -q '"event":"preview","node":"8".*"step":3,"steps":3,.*"method":"taesd"' "$T/taesd.ev" ||
    fail "no taesd preview: $(grep preview "$T/taesd.ev")"
[ "$(png_size "$T/taesd.png" 2>&1)" = "128x96" ] || fail "taesd preview size $(png_size "$T/taesd.png" 2>&1)"
# the picture itself is the same either way
cmp -s "$T/out/flux_00001_.png" "$T/out/flux_00002_.png" || fail "the preview decoder changed the saved image"

sd_test_end "Flux previews: latent2rgb (16 channels) and TAEF1 from vae_approx/"
