# --preview with a TAESD decoder in models/vae_approx/: the picture is
# decoded by it (full image size, method "taesd" in the JSON events) instead
# of latent2rgb. The SD1 decoder is made from the real TAEF2 decoder in
# shared/data/taesd (same network; only the first 4 of its 32 latent input
# channels are kept and the GroupNorm side branches dropped, which is the
# SD1 TAESD layout, ARCHITECTURE.md section 5). A decoder file that does not
# load is a warning and no preview, not a silent latent2rgb.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_preview_taesd CheckpointLoaderSimple KSampler VAEDecode SaveImage
TAEF2="$SHARED/data/taesd/taef2_decoder.safetensors"
sd_test_need_path "$TAEF2"
command -v python3 > /dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
sd_test_tiny_sd1 "$T"
mkdir -p "$T/models/vae_approx"

python3 - "$TAEF2" "$T/models/vae_approx/taesd_decoder.safetensors" << 'PY'
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
    if k == "1.weight":  # [64, 32, 3, 3] -> [64, 4, 3, 3]
        per_in = 9 * 2  # 3x3 F16
        data = b"".join(data[o * 32 * per_in:o * 32 * per_in + 4 * per_in] for o in range(shape[0]))
        shape[1] = 4
    out[k] = {"dtype": v["dtype"], "shape": shape, "data_offsets": [off, off + len(data)]}
    blobs.append(data)
    off += len(data)
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(dst, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
[ -s "$T/models/vae_approx/taesd_decoder.safetensors" ] || { echo "FAIL: could not write the decoder"; exit 1; }

png_size() {
    python3 - "$1" << 'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n" and d[12:16] == b"IHDR", "not a PNG"
print("%dx%d" % struct.unpack(">II", d[16:24]))
PY
}

"$SDFLOW_BIN" run "${SD_TINY_ARGS[@]}" --no-cache --output-dir "$T/out" --preview "$T/p.png" --progress=json \
    > "$T/ev.json" 2> "$T/err" || fail "run: $(cat "$T/err")"
grep -q '"event":"preview".*"step":3,"steps":3,.*"method":"taesd"' "$T/ev.json" ||
    fail "no taesd preview event: $(grep preview "$T/ev.json")"
[ "$(png_size "$T/p.png" 2>&1)" = "64x64" ] || fail "taesd preview size: $(png_size "$T/p.png" 2>&1)"
# the same through the --comfyui-dir fallback (ComfyUI's models/vae_approx)
mkdir -p "$T/comfy/models"
mv "$T/models/vae_approx" "$T/comfy/models/"
"$SDFLOW_BIN" run "${SD_TINY_ARGS[@]}" --comfyui-dir "$T/comfy" --no-cache --output-dir "$T/out" \
    --preview "$T/p2.png" --progress=json > "$T/ev2.json" 2> "$T/err" || fail "comfyui-dir run: $(cat "$T/err")"
grep -q '"method":"taesd"' "$T/ev2.json" || fail "--comfyui-dir: the decoder was not found"

# a decoder that does not load: one warning, no preview, the run succeeds
mkdir -p "$T/models/vae_approx"
printf 'garbage' > "$T/models/vae_approx/taesd_decoder.safetensors"
"$SDFLOW_BIN" run "${SD_TINY_ARGS[@]}" --no-cache --output-dir "$T/out" --preview "$T/p3.png" \
    > /dev/null 2> "$T/err" || fail "a broken decoder failed the run: $(cat "$T/err")"
grep -q 'warning: no more previews: .*taesd_decoder.safetensors' "$T/err" || fail "broken decoder: $(cat "$T/err")"
[ -e "$T/p3.png" ] && fail "a broken decoder still gave a (latent2rgb) preview"

sd_test_end "taesd preview ok"
