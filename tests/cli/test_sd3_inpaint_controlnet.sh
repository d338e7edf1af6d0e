# ControlNetInpaintingAliMamaApply in a workflow run by `sdflow run`: the SD3
# set's tiny files placed as workflows/txt2img_sd35_medium.json loads them
# (tests/cli/sd3_models.py), tests/data/sd3_controlnet_inpaint's tiny
# 17-channel ControlNet under its comfy_name, and a graph made from that
# workflow with LoadImage (an RGBA picture: its alpha gives the MASK),
# ControlNetLoader and the node between the prompts and KSampler:
#   - the graph validates and runs, and the log names the SD3 ControlNet;
#   - with one output cache for all runs, another mask (the same pixels,
#     another alpha) gives another picture, and the first mask again gives
#     the first picture: the mask reaches the sampler and is in the cache key;
#   - strength 0 gives the picture without the ControlNet.
# Needs the SD3 reference set, the CLIP vocabulary and python3.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_sd3_inpaint_controlnet UNETLoader VAELoader TripleCLIPLoader CLIPTextEncode \
    EmptySD3LatentImage KSampler VAEDecode SaveImage LoadImage ControlNetLoader ControlNetInpaintingAliMamaApply
SD3="$DATA/sd3"
CNDIR="$SDFLOW_SOURCE_DIR/tests/data/sd3_controlnet_inpaint"
sd_test_need_path "$SD3/manifest.json" "the SD3 reference set ($SD3)"
sd_test_need_path "$TOK/vocab.json" "CLIP vocabulary $TOK"
sd_test_need_cmd python3

M="$T/models"
python3 "$SDFLOW_SOURCE_DIR/tests/cli/sd3_models.py" "$SD3" "$M" "$T/tok" "$TOK" || fail "placing the SD3 set's files"
cn_name=$(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))["models"]["controlnet"]
print(m["file"], m["comfy_name"])' "$CNDIR/manifest.json") || fail "reading $CNDIR/manifest.json"
set -- $cn_name
mkdir -p "$(dirname "$M/$2")"
ln -sf "$CNDIR/$1" "$M/$2"
CN_FILE=$(basename "$2")
heads=$(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))["models"]
print(m["clip_l"]["config"]["num_attention_heads"], m["clip_g"]["config"]["num_attention_heads"])' "$SD3/manifest.json")
set -- $heads
HEADS=(--clip-l-heads "$1" --clip-g-heads "$2")

# the graph, and two 64x48 RGBA pictures with the same pixels: a centred
# hole (alpha 0) in a.png, the left half in b.png
mkdir -p "$T/input"
python3 - "$SDFLOW_SOURCE_DIR/workflows/txt2img_sd35_medium.json" "$T/wf.json" "$CN_FILE" "$T/input" << 'PY' ||
import json, struct, sys, zlib
src, dst, cn, indir = sys.argv[1:5]
g = json.load(open(src))
g["3"]["inputs"].update(steps=2, positive=["60", 0], negative=["60", 1])
g["53"]["inputs"].update(width=64, height=48)
g["58"] = {"class_type": "LoadImage", "inputs": {"image": "a.png"}}
g["59"] = {"class_type": "ControlNetLoader", "inputs": {"control_net_name": cn}}
g["60"] = {"class_type": "ControlNetInpaintingAliMamaApply",
           "inputs": {"positive": ["16", 0], "negative": ["40", 0], "control_net": ["59", 0],
                      "vae": ["10", 0], "image": ["58", 0], "mask": ["58", 1], "strength": 0.9,
                      "start_percent": 0.0, "end_percent": 1.0}}
json.dump(g, open(dst, "w"), indent=1)
w, h = 64, 48
def png(path, hole):
    rows = b"".join(b"\0" + bytes(v for x in range(w) for v in
                    ((x * 4) % 256, (y * 5) % 256, 128 if (x // 8 + y // 8) % 2 else 40, 0 if hole(x, y) else 255))
                    for y in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
png(indir + "/a.png", lambda x, y: 16 <= x < 48 and 12 <= y < 36)
png(indir + "/b.png", lambda x, y: x < 32)
PY
    fail "making the graph and its pictures"

# run NAME ARGS...: the graph with one cache for every run; its PNG in $T/NAME.png
run() {
    local name=$1
    shift
    "$SDFLOW_BIN" run "$T/wf.json" --models-dir "$M" --tokenizer-dir "$T/tok" "${HEADS[@]}" --cache "$T/cache.db" \
        --input-dir "$T/input" --temp-dir "$T/temp" --output-dir "$T/out/$name" "$@" > "$T/$name.out" 2> "$T/$name.err" ||
        { fail "$name: $(tail -3 "$T/$name.err")"; return 1; }
    local png
    png=$(ls "$T/out/$name"/*.png 2> /dev/null | head -1)
    [ -n "$png" ] || { fail "$name: no PNG written"; return 1; }
    ln -sf "$png" "$T/$name.png"
}
# same A B: the two saved pictures have the same pixels
same() {
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

if run a; then
    grep -q "ControlNet $CN_FILE: SD3" "$T/a.err" || fail "a: the log does not name the SD3 ControlNet"
fi
if run b --set 58.image=b.png && [ -f "$T/a.png" ]; then
    same "$T/a.png" "$T/b.png" && fail "another mask gave the same picture"
fi
if run a2 && [ -f "$T/a.png" ]; then
    same "$T/a.png" "$T/a2.png" || fail "the first mask again gave another picture"
fi
if run off --set 60.strength=0 && run plain --set 3.positive='["16",0]' --set 3.negative='["40",0]'; then
    same "$T/off.png" "$T/plain.png" || fail "strength 0 is not the picture without the ControlNet"
    [ -f "$T/a.png" ] && same "$T/a.png" "$T/off.png" && fail "the ControlNet did not change the picture"
fi

sd_test_end "ok: ControlNetInpaintingAliMamaApply ran in a workflow; the mask changes the picture"
