# SDXL, LoRA and ControlNet graphs through `sdflow run` on the tiny
# checkpoints of the shared test data (the examples in workflows/ with their
# model names pointed at the tiny files), checked for what must hold:
#   SDXL      CLIPTextEncodeSDXL with the latent's size and text_g = text_l
#             samples exactly as CLIPTextEncode (ComfyUI's defaults); other
#             sizes change the result; CLIPTextEncodeSDXLRefiner runs, its
#             aesthetic score is ignored by a base model; VAEDecode falls back
#             to tiles (and says so) when the memory budget is too small.
#   LoRA      strength 0 = no LoRA (the node returns its inputs); strength 1
#             changes the result; the LoRA alias, diffusers names, model-only
#             loading (its text-encoder keys reported as unmatched).
#   ControlNet Canny from a plain PNG of an unusual size (100x75): the hint is
#             resized as ComfyUI resizes it (nearest-exact, centre crop) so the
#             run equals one given the hint pre-resized with ImageScale; the
#             same ControlNet in the diffusers layout samples identically.
#   errors    an SD1 LoRA on SDXL, a LoRA matching nothing, an SD1 ControlNet
#             on SDXL: the run fails naming node, class and input.
# Needs the shared data, a tokenizer and python3; else exit 77.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_xl_lora_cn
M="$DATA/models"
for f in tiny-sdxl tiny-sd1 tiny-lora-sd1 tiny-lora-sd1-diffusers tiny-controlnet-sd1; do
    sd_test_need_path "$M/$f.safetensors"
done
sd_test_need_path "$TOK" "tokenizer directory $TOK"
command -v python3 > /dev/null || { echo "SKIP: python3 is needed to read the dumps"; exit 77; }

mkdir -p "$T/models/checkpoints" "$T/models/loras" "$T/models/controlnet" "$T/input"
ln -s "$M/tiny-sdxl.safetensors" "$T/models/checkpoints/tiny-sdxl.safetensors"
ln -s "$M/tiny-sd1.safetensors" "$T/models/checkpoints/tiny-sd1.safetensors"
ln -s "$M/tiny-lora-sd1.safetensors" "$T/models/loras/tiny-lora-sd1.safetensors"
ln -s "$M/tiny-lora-sd1-diffusers.safetensors" "$T/models/loras/tiny-lora-sd1-diffusers.safetensors"
ln -s "$M/tiny-controlnet-sd1.safetensors" "$T/models/controlnet/tiny-controlnet-sd1.safetensors"
WF="$SDFLOW_SOURCE_DIR/workflows"

cat > "$T/tool.py" << 'PY'
import json, math, struct, sys, zlib

def png(path, w, h):
    """RGB picture with hard edges (a disc and bars) for Canny."""
    rows = b""
    for y in range(h):
        row = b"\x00"
        for x in range(w):
            disc = (x - w * 0.4) ** 2 + (y - h * 0.5) ** 2 < (h * 0.3) ** 2
            bar = (x // 9) % 2 == 0 and y > h * 0.7
            v = 230 if disc else (40 if bar else 120)
            row += bytes((v, (v + 30) % 256, 255 - v))
        rows += row
    def chunk(t, d):
        c = struct.pack(">I", len(d)) + t + d
        return c + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    data += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    open(path, "wb").write(data)

def lora_nothing(path):
    """A LoRA file whose keys name no module of any model."""
    t = struct.pack("<4f", 1, 2, 3, 4)
    hdr = {"lora_unet_no_such_block.lora_up.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
           "lora_unet_no_such_block.lora_down.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [16, 32]}}
    h = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + t + t)

def read(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        e = hdr[name]
        b, end = e["data_offsets"]
        f.seek(8 + n + b)
        raw = f.read(end - b)
        return e["shape"], struct.unpack("<%df" % (len(raw) // 4), raw)

def shape(path, name, *want):
    s, _ = read(path, name)
    if s != [int(w) for w in want]:
        print("FAIL: %s %s has shape %s, want %s" % (path, name, s, list(want))); sys.exit(1)

def diff(a, b, name):
    sa, va = read(a, name)
    sb, vb = read(b, name)
    if sa != sb:
        return float("inf")
    return max(abs(x - y) for x, y in zip(va, vb))

def same(a, b, name, tol="0"):
    d = diff(a, b, name)
    if d > float(tol):
        print("FAIL: %s differs between %s and %s by %g (allowed %s)" % (name, a, b, d, tol)); sys.exit(1)

def differ(a, b, name):
    d = diff(a, b, name)
    if not d > 1e-4:
        print("FAIL: %s: %s and %s should differ (max|diff| %g)" % (name, a, b, d)); sys.exit(1)

def edit(src, dst, *changes):
    """Copy a workflow with changes: ID.input=JSON, ID.class_type=NAME,
    ID=JSON (a whole node), or -ID (remove)."""
    g = json.load(open(src))
    for c in changes:
        if c.startswith("-"):
            del g[c[1:]]
            continue
        k, v = c.split("=", 1)
        if "." not in k:
            g[k] = json.loads(v)
            continue
        node, inp = k.split(".", 1)
        if inp == "class_type":
            g[node]["class_type"] = v
        else:
            g[node]["inputs"][inp] = json.loads(v)
    json.dump(g, open(dst, "w"), indent=1)

if __name__ == "__main__":
    f = {"png": png, "lora_nothing": lora_nothing, "shape": shape, "same": same,
         "differ": differ, "edit": edit}[sys.argv[1]]
    args = sys.argv[2:]
    f(args[0], int(args[1]), int(args[2])) if sys.argv[1] == "png" else f(*args)
PY
tool() { python3 "$T/tool.py" "$@"; }
tool png "$T/input/plain.png" 100 75
tool lora_nothing "$T/models/loras/nothing.safetensors"

# run NAME WORKFLOW [sdflow args...]: dumps into $T/NAME, stderr in $T/NAME.err
run() {
    local name=$1 wf=$2
    shift 2
    rm -rf "$T/$name"
    "$SDFLOW_BIN" run "$wf" --models-dir "$T/models" --input-dir "$T/input" --output-dir "$T/out" \
        --temp-dir "$T/temp" --tokenizer-dir "$TOK" --no-cache --dump "$T/$name" "$@" \
        > "$T/$name.out" 2> "$T/$name.err"
}
ok() { # NAME WORKFLOW [args]: the run must succeed
    run "$@" || { fail "$1: sdflow run failed: $(cat "$T/$1.err")"; return 1; }
}
fails_with() { # NAME WORKFLOW PATTERN...: the run must fail, stderr holding every pattern
    local name=$1 wf=$2
    shift 2
    if run "$name" "$wf"; then
        fail "$name: ran although it should fail"
        return
    fi
    for p in "$@"; do
        grep -qF -- "$p" "$T/$name.err" || fail "$name: error lacks '$p': $(cat "$T/$name.err")"
    done
}

# ---- SDXL txt2img -------------------------------------------------------------------------------
XL=(--set 4.ckpt_name=tiny-sdxl.safetensors --set 3.steps=2 --set 5.width=128 --set 5.height=96)
SIZE=()
for id in 6 7; do
    SIZE+=(--set $id.width=128 --set $id.height=96 --set $id.target_width=128 --set $id.target_height=96)
done
if ok xl "$WF/txt2img_sdxl.json" "${XL[@]}" "${SIZE[@]}"; then
    tool shape "$T/xl/8_0.safetensors" IMAGE 1 96 128 3 || fail "SDXL image shape"
    tool shape "$T/xl/6_0.safetensors" 0.pooled_output 1 192 || fail "SDXL pooled output"
    ls "$T/out"/ComfyUI_*.png > /dev/null 2>&1 || fail "SDXL: no PNG written"
    # plain CLIPTextEncode (sizes default to the latent's) = the SDXL node at those sizes
    tool edit "$WF/txt2img_sdxl.json" "$T/plain.json" \
        '6={"class_type": "CLIPTextEncode", "inputs": {"text": "evening sunset scenery blue sky nature, glass bottle with a galaxy in it", "clip": ["4", 1]}}' \
        '7={"class_type": "CLIPTextEncode", "inputs": {"text": "text, watermark", "clip": ["4", 1]}}'
    ok xl_plain "$T/plain.json" "${XL[@]}" && tool same "$T/xl/3_0.safetensors" "$T/xl_plain/3_0.safetensors" samples ||
        fail "CLIPTextEncodeSDXL at the latent size differs from CLIPTextEncode"
    # the example's 1024x1024 size conditioning, and a crop, change the samples
    ok xl_1024 "$WF/txt2img_sdxl.json" "${XL[@]}" &&
        tool differ "$T/xl/3_0.safetensors" "$T/xl_1024/3_0.safetensors" samples || fail "size conditioning has no effect"
    ok xl_crop "$WF/txt2img_sdxl.json" "${XL[@]}" "${SIZE[@]}" --set 6.crop_w=64 &&
        tool differ "$T/xl/3_0.safetensors" "$T/xl_crop/3_0.safetensors" samples || fail "crop_w has no effect"
    # CLIPTextEncodeSDXLRefiner: a base model ignores the aesthetic score
    for a in 6 2.5; do
        tool edit "$T/plain.json" "$T/ref$a.json" \
            '6={"class_type": "CLIPTextEncodeSDXLRefiner", "inputs": {"ascore": '$a', "width": 128, "height": 96, "text": "evening sunset scenery blue sky nature, glass bottle with a galaxy in it", "clip": ["4", 1]}}'
        ok "xl_ref$a" "$T/ref$a.json" "${XL[@]}" || continue
        tool same "$T/xl_plain/3_0.safetensors" "$T/xl_ref$a/3_0.safetensors" samples ||
            fail "CLIPTextEncodeSDXLRefiner (ascore $a) on a base model"
    done
    # VAEDecode's tiled fallback: said in the log, same picture
    export SDFLOW_VAE_DECODE_LIMIT=1000
    ok xl_tiles "$WF/txt2img_sdxl.json" "${XL[@]}" "${SIZE[@]}"
    tiles_rc=$?
    unset SDFLOW_VAE_DECODE_LIMIT
    if [ $tiles_rc -eq 0 ]; then
        grep -q "decoding in 512 px tiles" "$T/xl_tiles.err" || fail "no tiled fallback message: $(cat "$T/xl_tiles.err")"
        tool same "$T/xl/8_0.safetensors" "$T/xl_tiles/8_0.safetensors" IMAGE 1e-5 || fail "tiled fallback image"
    fi
    grep -q "tiles" "$T/xl.err" && fail "VAEDecode fell back to tiles with enough memory"
fi
# CLIPTextEncodeSDXL on an SD1 CLIP
tool edit "$WF/txt2img_sdxl.json" "$T/xl_on_sd1.json" '4.ckpt_name="tiny-sd1.safetensors"' \
    5.width=64 5.height=64 3.steps=1
fails_with xl_on_sd1 "$T/xl_on_sd1.json" "(CLIPTextEncodeSDXL) input 'clip'" "SDXL base"

# ---- LoRA -----------------------------------------------------------------------------------------
SD1=(--set 4.ckpt_name=tiny-sd1.safetensors --set 3.steps=2 --set 5.width=64 --set 5.height=64)
L=(--set 10.lora_name=tiny-lora-sd1.safetensors)
tool edit "$WF/txt2img_sd15.json" "$T/base.json" 3.seed=851616030078638 \
    '6.text="masterpiece best quality girl standing in victorian clothing"' '7.text="bad hands"'
if ok lora "$WF/lora_sd15.json" "${SD1[@]}" "${L[@]}" && ok nolora "$T/base.json" "${SD1[@]}"; then
    grep -q "UNet and .* text-encoder weights patched" "$T/lora.err" || fail "LoRA: no patch report: $(cat "$T/lora.err")"
    tool differ "$T/lora/3_0.safetensors" "$T/nolora/3_0.safetensors" samples || fail "LoRA has no effect"
    ok lora0 "$WF/lora_sd15.json" "${SD1[@]}" "${L[@]}" --set 10.strength_model=0 --set 10.strength_clip=0 &&
        tool same "$T/lora0/3_0.safetensors" "$T/nolora/3_0.safetensors" samples || fail "LoRA at strength 0"
    ok lora_clip0 "$WF/lora_sd15.json" "${SD1[@]}" "${L[@]}" --set 10.strength_clip=0 &&
        tool same "$T/lora_clip0/6_0.safetensors" "$T/nolora/6_0.safetensors" 0.cond &&
        tool differ "$T/lora_clip0/3_0.safetensors" "$T/nolora/3_0.safetensors" samples || fail "LoRA strength_clip 0"
    # the LoRA alias and the diffusers/PEFT names of the same LoRA
    tool edit "$WF/lora_sd15.json" "$T/alias.json" 10.class_type=LoRA
    ok lora_alias "$T/alias.json" "${SD1[@]}" "${L[@]}" &&
        tool same "$T/lora/3_0.safetensors" "$T/lora_alias/3_0.safetensors" samples || fail "LoRA alias"
    ok lora_diff "$WF/lora_sd15.json" "${SD1[@]}" --set 10.lora_name=tiny-lora-sd1-diffusers.safetensors &&
        tool differ "$T/lora_diff/3_0.safetensors" "$T/nolora/3_0.safetensors" samples || fail "diffusers LoRA"
    # model only: the text encoder is left alone, its LoRA keys are reported
    tool edit "$WF/lora_sd15.json" "$T/model_only.json" \
        '10={"class_type": "LoraLoaderModelOnly", "inputs": {"model": ["4", 0], "lora_name": "tiny-lora-sd1.safetensors", "strength_model": 1}}' \
        '6.clip=["4", 1]' '7.clip=["4", 1]'
    if ok lora_mo "$T/model_only.json" "${SD1[@]}"; then
        grep -q "LoRA keys matched nothing: lora_te_" "$T/lora_mo.err" ||
            fail "LoraLoaderModelOnly: unmatched text-encoder keys not reported: $(cat "$T/lora_mo.err")"
        tool same "$T/lora_mo/6_0.safetensors" "$T/nolora/6_0.safetensors" 0.cond || fail "model-only LoRA changed the text encoding"
        tool differ "$T/lora_mo/3_0.safetensors" "$T/nolora/3_0.safetensors" samples || fail "model-only LoRA has no effect"
    fi
fi
# an SD1 LoRA on SDXL, a LoRA that matches nothing
tool edit "$WF/lora_sd15.json" "$T/lora_xl.json" '4.ckpt_name="tiny-sdxl.safetensors"' \
    '10.lora_name="tiny-lora-sd1.safetensors"' 5.width=64 5.height=64 3.steps=1
# ComfyUI applies the patches whose shapes fit and leaves the rest out with a warning: so does
# sdflow, naming the count and the first in the log and the --report; --lora-strict refuses it
if ok lora_xl "$T/lora_xl.json" --report "$T/lora_xl.report.json"; then
    grep -q "LoRA tiny-lora-sd1.safetensors: [0-9]* LoRA patches did not fit the model and were left out: '" "$T/lora_xl.err" ||
        fail "lora_xl: the left-out patches are not reported: $(cat "$T/lora_xl.err")"
    python3 - "$T/lora_xl.report.json" <<'PY' || fail "lora_xl: the report lacks LoraLoader's warning"
import json, sys
w = json.load(open(sys.argv[1]))["nodes"]["10"].get("warnings", [])
sys.exit(0 if any("did not fit the model and were left out" in x for x in w) else 1)
PY
fi
if run lora_xl_strict "$T/lora_xl.json" --lora-strict; then
    fail "lora_xl_strict: ran although --lora-strict should refuse the LoRA"
else
    for p in "node 10 (LoraLoader) input 'lora_name'" "does not fit" "refused under --lora-strict"; do
        grep -qF -- "$p" "$T/lora_xl_strict.err" || fail "lora_xl_strict: error lacks '$p': $(cat "$T/lora_xl_strict.err")"
    done
fi
tool edit "$WF/lora_sd15.json" "$T/lora_nothing.json" '4.ckpt_name="tiny-sd1.safetensors"' \
    '10.lora_name="nothing.safetensors"' 5.width=64 5.height=64 3.steps=1
fails_with lora_nothing "$T/lora_nothing.json" "node 10 (LoraLoader) input 'lora_name'" \
    "2 LoRA keys matched nothing: lora_unet_no_such_block.lora_down.weight"
# a damaged torch zip renamed to .safetensors is read by content and refused as such, for LoRAs and ControlNets
printf 'PK\003\004 archive/data.pkl, not a safetensors header at all' > "$T/models/loras/renamed.safetensors"
cp "$T/models/loras/renamed.safetensors" "$T/models/controlnet/renamed.safetensors"
tool edit "$WF/lora_sd15.json" "$T/lora_pickle.json" '4.ckpt_name="tiny-sd1.safetensors"' \
    '10.lora_name="renamed.safetensors"' 5.width=64 5.height=64 3.steps=1
fails_with lora_pickle "$T/lora_pickle.json" "node 10 (LoraLoader) input 'lora_name'" "PyTorch checkpoint"
tool edit "$WF/controlnet_canny_sd15.json" "$T/cn_pickle.json" '4.ckpt_name="tiny-sd1.safetensors"' \
    '11.image="plain.png"' '13.control_net_name="renamed.safetensors"' 5.width=64 5.height=64 3.steps=1
fails_with cn_pickle "$T/cn_pickle.json" "node 13 (ControlNetLoader) input 'control_net_name'" "PyTorch checkpoint"

# ---- ControlNet with Canny from a plain 100x75 PNG ----------------------------------------------------
CN=(--set 11.image=plain.png --set 13.control_net_name=tiny-controlnet-sd1.safetensors)
if ok cn "$WF/controlnet_canny_sd15.json" "${SD1[@]}" "${CN[@]}"; then
    tool shape "$T/cn/12_0.safetensors" IMAGE 1 75 100 3 || fail "Canny output shape"
    ok cn_off "$WF/controlnet_canny_sd15.json" "${SD1[@]}" "${CN[@]}" --set 14.strength=0 &&
        tool differ "$T/cn/3_0.safetensors" "$T/cn_off/3_0.safetensors" samples || fail "ControlNet has no effect"
    # the hint resized beforehand as ComfyUI resizes it gives the same samples
    tool edit "$WF/controlnet_canny_sd15.json" "$T/cn_scaled.json" '14.image=["15", 0]' \
        '15={"class_type": "ImageScale", "inputs": {"image": ["12", 0], "upscale_method": "nearest-exact", "width": 64, "height": 64, "crop": "center"}}'
    ok cn_scaled "$T/cn_scaled.json" "${SD1[@]}" "${CN[@]}" &&
        tool same "$T/cn/3_0.safetensors" "$T/cn_scaled/3_0.safetensors" samples || fail "hint not resized as ComfyUI does"
fi
# the same ControlNet in the diffusers layout (controlnet_cond_embedding.*, down_blocks.*,
# controlnet_down_blocks.*; converted here from the control_model.* file) gives the same samples
cat > "$T/to_diffusers.py" << 'PY'
import json, struct, sys, re
src, dst = sys.argv[1], sys.argv[2]
d = open(src, "rb").read()
n = struct.unpack("<Q", d[:8])[0]
hdr = json.loads(d[8:8 + n]); base = 8 + n
P = "control_model."
names = [k for k in hdr if k != "__metadata__"]
ops = sorted(int(m.group(1)) for k in names for m in [re.match(re.escape(P) + r"input_blocks\.(\d+)\.0\.op\.weight$", k)] if m)
nrb = ops[0] - 1
res = {"in_layers.0.": "norm1.", "in_layers.2.": "conv1.", "emb_layers.1.": "time_emb_proj.",
       "out_layers.0.": "norm2.", "out_layers.3.": "conv2.", "skip_connection.": "conv_shortcut."}
fixed = {"time_embed.0.": "time_embedding.linear_1.", "time_embed.2.": "time_embedding.linear_2.",
         "label_emb.0.0.": "add_embedding.linear_1.", "label_emb.0.2.": "add_embedding.linear_2.",
         "input_blocks.0.0.": "conv_in.", "input_hint_block.0.": "controlnet_cond_embedding.conv_in.",
         "input_hint_block.14.": "controlnet_cond_embedding.conv_out.", "middle_block_out.0.": "controlnet_mid_block."}
def resm(rest):
    for a, b in res.items():
        if rest.startswith(a): return b + rest[len(a):]
    raise SystemExit("unmapped resnet member " + rest)
def conv(k):
    for a, b in fixed.items():
        if k.startswith(a): return b + k[len(a):]
    m = re.match(r"input_hint_block\.(\d+)\.(.*)", k)
    if m: return "controlnet_cond_embedding.blocks.%d.%s" % ((int(m.group(1)) - 2) // 2, m.group(2))
    m = re.match(r"zero_convs\.(\d+)\.0\.(.*)", k)
    if m: return "controlnet_down_blocks.%s.%s" % m.groups()
    m = re.match(r"input_blocks\.(\d+)\.(\d)\.(.*)", k)
    if m:
        i, s, rest = int(m.group(1)), int(m.group(2)), m.group(3)
        lvl, j = (i - 1) // (nrb + 1), (i - 1) % (nrb + 1)
        if j == nrb: return "down_blocks.%d.downsamplers.0.conv.%s" % (lvl, rest[len("op."):])
        if s == 0: return "down_blocks.%d.resnets.%d.%s" % (lvl, j, resm(rest))
        return "down_blocks.%d.attentions.%d.%s" % (lvl, j, rest)
    m = re.match(r"middle_block\.(\d)\.(.*)", k)
    if m:
        i, rest = int(m.group(1)), m.group(2)
        if i == 1: return "mid_block.attentions.0." + rest
        return "mid_block.resnets.%d.%s" % (0 if i == 0 else 1, resm(rest))
    raise SystemExit("unmapped " + k)
out = {}; blob = b""
for k in names:
    e = hdr[k]; b, end = e["data_offsets"]
    nk = conv(k[len(P):]) if k.startswith(P) else k
    out[nk] = {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [len(blob), len(blob) + end - b]}
    blob += d[base + b: base + end]
h = json.dumps(out).encode(); h += b" " * ((8 - len(h) % 8) % 8)
open(dst, "wb").write(struct.pack("<Q", len(h)) + h + blob)
print("nrb", nrb, "tensors", len(out))
PY
if python3 "$T/to_diffusers.py" "$M/tiny-controlnet-sd1.safetensors" "$T/models/controlnet/cn-diffusers.safetensors" > /dev/null; then
    ok cn_diffusers "$WF/controlnet_canny_sd15.json" "${SD1[@]}" "${CN[@]}" \
        --set 13.control_net_name=cn-diffusers.safetensors &&
        tool same "$T/cn/3_0.safetensors" "$T/cn_diffusers/3_0.safetensors" samples ||
        fail "diffusers-layout ControlNet differs from the original layout"
else
    fail "could not write the diffusers-layout ControlNet"
fi
# an SD1 ControlNet on SDXL
tool edit "$WF/controlnet_canny_sd15.json" "$T/cn_xl.json" '4.ckpt_name="tiny-sdxl.safetensors"' \
    '11.image="plain.png"' '13.control_net_name="tiny-controlnet-sd1.safetensors"' 5.width=64 5.height=64 3.steps=1
fails_with cn_xl "$T/cn_xl.json" "node 3 (KSampler) input 'positive'" "ControlNet does not fit the model"

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "ok"
