# UI-format workflows (what ComfyUI's "Save" writes) run as their API twins:
#   - every example workflows/NAME.json has a UI twin workflows/ui/NAME.json
#     (with reroutes, a primitive, bypassed and muted nodes, notes, groups)
#     and `sdflow export --json` prints the same text for both;
#   - run with the same options, the twin saves the same PNG as the API form:
#     byte for byte once the "workflow" chunk, which only the UI run carries
#     (as ComfyUI does), is taken out; that chunk holds the UI file;
#   - a PNG with only a "workflow" chunk runs from it, to the same pixels;
#   - pictures and model files that are not workflows are named as such.
# The model runs need the tiny checkpoints of the shared data and a
# tokenizer (else only the model-free parts run); python3 reads the PNGs.
set -u
: "${SDFLOW_BIN:?}" "${SDFLOW_SOURCE_DIR:?}"
. "$(dirname "$0")/lib.sh"
DATA="${SDFLOW_TESTDATA:-${SDFLOW_TESTDATA_DEFAULT:-$SDFLOW_SOURCE_DIR/../shared/testdata}}"
SHARED="${SDFLOW_SHARED_DEFAULT:-$SDFLOW_SOURCE_DIR/../shared}"
TOK="${SDFLOW_TOKENIZER_DIR:-$SHARED/data/clip}"
M="$DATA/models"
WF="$SDFLOW_SOURCE_DIR/workflows"
command -v python3 > /dev/null || { echo "SKIP: python3 is needed to read the PNGs"; exit 77; }

T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_ui_workflows"
rm -rf "$T" && mkdir -p "$T/models/checkpoints" "$T/models/loras" "$T/models/controlnet" "$T/input"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

cat > "$T/tool.py" << 'PY'
import json, struct, sys, zlib

def chunks(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, out = 8, []
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        out.append((data[pos + 4:pos + 8], data[pos:pos + 12 + n]))
        pos += 12 + n
    return out

def text_of(raw):
    body = raw[8:-4]
    key, _, value = body.partition(b"\0")
    return key.decode(), value

def keyed(path, key):
    for t, raw in chunks(path):
        if t == b"tEXt" and text_of(raw)[0] == key:
            return text_of(raw)[1].decode("latin-1")
        if t == b"iTXt" and text_of(raw)[0] == key:
            v = text_of(raw)[1]
            comp, v = v[0], v[2:]
            v = v.split(b"\0", 2)[2]
            return (zlib.decompress(v) if comp else v).decode("utf-8")
    return None

def without(path, key):
    return b"\x89PNG\r\n\x1a\n" + b"".join(raw for t, raw in chunks(path)
                                            if not (t in (b"tEXt", b"iTXt") and text_of(raw)[0] == key))

def same_png(api_png, ui_png, ui_file):
    """ui_png minus its workflow chunk is api_png; the chunk is ui_file."""
    bad = 0
    if keyed(api_png, "workflow") is not None:
        print("FAIL: the API run carries a workflow chunk"); bad += 1
    if without(ui_png, "workflow") != open(api_png, "rb").read():
        print("FAIL: %s and %s differ beyond the workflow chunk" % (api_png, ui_png)); bad += 1
    w = keyed(ui_png, "workflow")
    if w is None or json.loads(w) != json.load(open(ui_file)):
        print("FAIL: %s: the workflow chunk is not %s" % (ui_png, ui_file)); bad += 1
    sys.exit(1 if bad else 0)

def strip(src, key, dst):
    open(dst, "wb").write(without(src, key))

def pixels(a, b):
    ia = b"".join(raw for t, raw in chunks(a) if t in (b"IHDR", b"IDAT"))
    ib = b"".join(raw for t, raw in chunks(b) if t in (b"IHDR", b"IDAT"))
    sys.exit(0 if ia == ib else 1)

if __name__ == "__main__":
    {"same": same_png, "strip": strip, "pixels": pixels}[sys.argv[1]](*sys.argv[2:])
PY

# ---- every example has a twin that converts to the same API text ------------------
for api in "$WF"/*.json; do
    name=$(basename "$api")
    ui="$WF/ui/$name"
    [ -f "$ui" ] || { fail "$name has no UI twin workflows/ui/$name"; continue; }
    grep -q '"links"' "$ui" && grep -q '"widgets_values"' "$ui" || fail "$ui does not look like a UI save"
    "$SDFLOW_BIN" export --json "$api" > "$T/$name.api.txt" 2> "$T/$name.err" || fail "export $name: $(cat "$T/$name.err")"
    "$SDFLOW_BIN" export --json "$ui" > "$T/$name.ui.txt" 2> "$T/$name.err" || fail "export ui/$name: $(cat "$T/$name.err")"
    cmp -s "$T/$name.api.txt" "$T/$name.ui.txt" || fail "ui/$name converts to another API form: $(diff "$T/$name.api.txt" "$T/$name.ui.txt" | head -5)"
done

# ---- same PNG from both forms ---------------------------------------------------------
sd_test_write_png "$T/input/example.png"
# both NAME ARGS...: runs workflows/NAME.json and workflows/ui/NAME.json
both() {
    local name=$1
    shift
    local a="$T/run/$name/api" u="$T/run/$name/ui"
    local common=(--models-dir "$T/models" --input-dir "$T/input" --tokenizer-dir "${UI_TOK:-$TOK}" --no-cache --quiet "$@")
    if ! "$SDFLOW_BIN" run "$WF/$name.json" "${common[@]}" --output-dir "$a" > /dev/null 2> "$T/$name.api.err"; then
        fail "$name (API): $(cat "$T/$name.api.err")"
        return 1
    fi
    if ! "$SDFLOW_BIN" run "$WF/ui/$name.json" "${common[@]}" --output-dir "$u" > /dev/null 2> "$T/$name.ui.err"; then
        fail "$name (UI): $(cat "$T/$name.ui.err")"
        return 1
    fi
    local pa pu
    pa=$(ls "$a"/*.png 2> /dev/null | head -1)
    pu=$(ls "$u"/*.png 2> /dev/null | head -1)
    [ -n "$pa" ] && [ -n "$pu" ] || { fail "$name: no PNG written"; return 1; }
    python3 "$T/tool.py" same "$pa" "$pu" "$WF/ui/$name.json" || fail "$name: the UI twin saved another PNG"
    echo "  $name: same PNG"
}

both image_invert
# A PNG with only the workflow chunk (the UI form) runs from it
png=$(ls "$T/run/image_invert/ui"/*.png | head -1)
python3 "$T/tool.py" strip "$png" prompt "$T/ui_only.png"
"$SDFLOW_BIN" run "$T/ui_only.png" --input-dir "$T/input" --output-dir "$T/from_png" --no-cache --quiet \
    > /dev/null 2> "$T/from_png.err" || fail "PNG with a workflow chunk only: $(cat "$T/from_png.err")"
out=$(ls "$T/from_png"/*.png 2> /dev/null | head -1)
[ -n "$out" ] && python3 "$T/tool.py" pixels "$png" "$out" || fail "the workflow chunk ran to other pixels"

if [ -d "$TOK" ] && [ -f "$M/tiny-sd1.safetensors" ]; then
    for f in tiny-sd1 tiny-sdxl; do ln -s "$M/$f.safetensors" "$T/models/checkpoints/$f.safetensors" 2> /dev/null; done
    ln -s "$M/tiny-lora-sd1.safetensors" "$T/models/loras/" 2> /dev/null
    ln -s "$M/tiny-controlnet-sd1.safetensors" "$T/models/controlnet/" 2> /dev/null
    SD1=(--set 4.ckpt_name=tiny-sd1.safetensors --set 3.steps=2)
    both txt2img_sd15 "${SD1[@]}" --set 5.width=64 --set 5.height=64
    both img2img_sd15 "${SD1[@]}"
    [ -f "$WF/txt2img_custom_sd15.json" ] && both txt2img_custom_sd15 --set 4.ckpt_name=tiny-sd1.safetensors \
        --set 13.steps=2 --set 5.width=64 --set 5.height=64
    both inpaint_sd15 "${SD1[@]}"
    both inpaint_composite_sd15 "${SD1[@]}"
    both area_composition_sd15 "${SD1[@]}" --set 5.width=64 --set 5.height=64
    if python3 "$SDFLOW_SOURCE_DIR/tests/cli/inpaint_model.py" "$M/tiny-sd1.safetensors" \
        "$SDFLOW_SOURCE_DIR/tests/data/inpaint_cond" "$T/models/checkpoints/tiny-sd1-inpainting.safetensors"; then
        both inpaint_model_conditioning_sd15 --set 4.ckpt_name=tiny-sd1-inpainting.safetensors --set 3.steps=2
    else
        fail "making the inpainting checkpoint"
    fi
    # the unCLIP example's (lib.sh)
    if sd_test_unclip_model "$T" "$T/models/checkpoints/tiny-sd21-unclip.safetensors"; then
        both unclip_sd21 --set 4.ckpt_name=tiny-sd21-unclip.safetensors --set 3.steps=2 --set 5.width=64 --set 5.height=64
    else
        fail "making the unCLIP checkpoint: $(cat "$T/unclip.err")"
    fi
    [ -f "$M/tiny-lora-sd1.safetensors" ] &&
        both lora_sd15 "${SD1[@]}" --set 5.width=64 --set 5.height=64 --set 10.lora_name=tiny-lora-sd1.safetensors
    both merge_sd15 "${SD1[@]}" --set 11.ckpt_name=tiny-sd1.safetensors --set 5.width=64 --set 5.height=64
    both vpred_zsnr_sd15 "${SD1[@]}" --set 5.width=64 --set 5.height=64
    both freeu_sag_sd15 "${SD1[@]}" --set 5.width=128 --set 5.height=128
    sd_test_gligen_model "$T/models" tiny_gligen_sd1.safetensors
    both gligen_textbox_sd15 "${SD1[@]}" --set 5.width=64 --set 5.height=64 \
        --set 10.gligen_name=tiny_gligen_sd1.safetensors
    [ -f "$M/tiny-controlnet-sd1.safetensors" ] &&
        both controlnet_canny_sd15 "${SD1[@]}" --set 5.width=64 --set 5.height=64 \
            --set 13.control_net_name=tiny-controlnet-sd1.safetensors
    if [ -f "$M/tiny-sdxl.safetensors" ]; then
        XL=(--set 4.ckpt_name=tiny-sdxl.safetensors --set 3.steps=2 --set 5.width=128 --set 5.height=96)
        for id in 6 7; do
            XL+=(--set $id.width=128 --set $id.height=96 --set $id.target_width=128 --set $id.target_height=96)
        done
        both txt2img_sdxl "${XL[@]}"
    fi
else
    echo "  (no tiny checkpoint or tokenizer: only the model-free workflow ran)"
fi

# The Flux examples on the Flux set's tiny files under ComfyUI's names, with
# the T5 tokenizer beside the CLIP vocabulary
FLUX="$DATA/flux"
if [ -d "$TOK" ] && [ -f "$FLUX/manifest.json" ]; then
    mkdir -p "$T/models/diffusion_models" "$T/models/text_encoders" "$T/models/vae" "$T/tok/t5_tokenizer"
    for f in vocab.json merges.txt; do ln -s "$TOK/$f" "$T/tok/$f"; done
    ln -s "$FLUX/tokenizer/tokenizer.json" "$T/tok/t5_tokenizer/tokenizer.json"
    for f in "flux1-dev diffusion_models/flux1-dev" "flux1-schnell diffusion_models/flux1-schnell" \
        "flux1-dev diffusion_models/flux1-kontext-dev" \
        "flux1-dev-fp8 checkpoints/flux1-dev-fp8" "t5xxl_fp16 text_encoders/t5xxl_fp16" \
        "clip_l text_encoders/clip_l" "ae vae/ae"; do
        set -- $f
        ln -s "$FLUX/models/tiny-$1.safetensors" "$T/models/$2.safetensors"
    done
    UI_TOK="$T/tok"
    FLUXSMALL=(--set 27.width=64 --set 27.height=48)
    both txt2img_flux_dev "${FLUXSMALL[@]}" --set 3.steps=2
    both txt2img_flux_dev_fp8 "${FLUXSMALL[@]}" --set 3.steps=2
    both txt2img_flux_schnell "${FLUXSMALL[@]}" --set 17.steps=2
    both edit_flux_kontext "${FLUXSMALL[@]}" --set 17.steps=2
else
    echo "  (no Flux reference set or tokenizer: the Flux examples did not run)"
fi

# The SD3.5 examples on the SD3 set's tiny files under ComfyUI's names (a
# models folder of their own; the GGUF example on GGUF files written from
# them by gguf_models.py), with the head counts of its tiny CLIP-L and
# CLIP-G from its manifest
SD3="$DATA/sd3"
if [ -d "$TOK" ] && [ -f "$SD3/manifest.json" ]; then
    python3 "$SDFLOW_SOURCE_DIR/tests/cli/sd3_models.py" "$SD3" "$T/sd3/models" "$T/sd3/tok" "$TOK" ||
        fail "placing the SD3 set's files"
    python3 "$SDFLOW_SOURCE_DIR/tests/cli/gguf_models.py" sd3 "$SD3" "$T/sd3/models" ||
        fail "writing the SD3 set's GGUF files"
    heads=$(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))["models"]
print(m["clip_l"]["config"]["num_attention_heads"], m["clip_g"]["config"]["num_attention_heads"])' "$SD3/manifest.json")
    set -- $heads
    SD3ARGS=(--models-dir "$T/sd3/models" --tokenizer-dir "$T/sd3/tok" --clip-l-heads "$1" --clip-g-heads "$2"
        --set 53.width=64 --set 53.height=48 --set 3.steps=2)
    both txt2img_sd35_medium "${SD3ARGS[@]}"
    both txt2img_sd35_medium_ckpt "${SD3ARGS[@]}"
    both txt2img_sd35_medium_gguf "${SD3ARGS[@]}"
else
    echo "  (no SD3 reference set or tokenizer: the SD3.5 examples did not run)"
fi

# The Z-Image examples on the Z-Image set's tiny files under ComfyUI's names
# (a models folder of their own; the GGUF one on GGUF files written from them
# by gguf_models.py), its Qwen2 tokenizer and its tiny Qwen3's width from its
# manifest
ZI="$DATA/zimage"
if [ -f "$ZI/manifest.json" ]; then
    width=$(python3 "$SDFLOW_SOURCE_DIR/tests/cli/zimage_models.py" "$ZI" "$T/zi/models" "$T/zi/tok") ||
        fail "placing the Z-Image set's files"
    python3 "$SDFLOW_SOURCE_DIR/tests/cli/gguf_models.py" zimage "$ZI" "$T/zi/models" ||
        fail "writing the Z-Image set's GGUF files"
    for w in txt2img_zimage_turbo txt2img_zimage_turbo_gguf; do
        both $w --models-dir "$T/zi/models" --tokenizer-dir "$T/zi/tok" --qwen3-4b-width "$width" \
            --set 13.width=64 --set 13.height=48 --set 3.steps=2
    done
else
    echo "  (no Z-Image reference set: the Z-Image example did not run)"
fi

# ---- files that are not workflows --------------------------------------------------------
printf 'RIFF\022\000\000\000WEBPVP8L\006\000\000\000\057\000\000\000\000\000' > "$T/photo.webp"
"$SDFLOW_BIN" run "$T/photo.webp" --no-cache > /dev/null 2> "$T/webp.err" && fail "a WebP without a workflow ran"
grep -q "WebP picture without an embedded ComfyUI workflow" "$T/webp.err" || fail "webp: $(cat "$T/webp.err")"
grep -q "invalid JSON" "$T/webp.err" && fail "webp parsed as JSON: $(cat "$T/webp.err")"
printf 'PK\003\004\024\000\000\000' > "$T/model.ckpt"
"$SDFLOW_BIN" export --json "$T/model.ckpt" > /dev/null 2> "$T/ckpt.err" && fail "a zip exported"
grep -q "zip archive" "$T/ckpt.err" || fail "ckpt: $(cat "$T/ckpt.err")"

[ "$failures" -eq 0 ] && echo "ok" || echo "$failures failures"
[ "$failures" -eq 0 ]
