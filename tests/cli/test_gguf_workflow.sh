# workflows/txt2img_flux_schnell_gguf (ComfyUI-GGUF's UnetLoaderGGUF and
# DualCLIPLoaderGGUF, as a ComfyUI user saves them) through `sdflow run`,
# unmodified but for --set sizes, on the tiny GGUF files of tests/data/gguf
# placed under the workflow's file names (a tiny Q4_K_S Flux schnell as
# flux1-schnell-Q4_K_S.gguf in diffusion_models/, the tiny T5 GGUF as the
# T5 name in text_encoders/, the Flux set's clip_l and ae):
#   - the API JSON, its Lua twin and its UI-format twin all run and save the
#     same pixels; the model file is also found under the older unet/ folder;
#   - the GGUF loaders list .gguf files, UNETLoader and DualCLIPLoader do not
#     (ComfyUI's lists), so the same files named in them fail validation;
#   - a file that is no GGUF named in UnetLoaderGGUF is refused at
#     validation naming the file;
#   - `sdflow synth --preset flux-schnell-tiny` (our GGUF writer and
#     quantizer) writes files the workflow runs on; existing files are kept,
#     unknown types refused.
# Needs the Flux reference set, a CLIP vocabulary and python3.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_gguf_workflow UnetLoaderGGUF DualCLIPLoaderGGUF
FLUX="$DATA/flux"
G="$SDFLOW_SOURCE_DIR/tests/data/gguf"
WF="$SDFLOW_SOURCE_DIR/workflows"
sd_test_need_path "$FLUX/manifest.json" "the Flux reference set ($FLUX)"
sd_test_need_path "$TOK/vocab.json" "CLIP vocabulary $TOK"
sd_test_need_cmd python3

M="$T/models"
mkdir -p "$M/diffusion_models" "$M/unet" "$M/text_encoders" "$M/vae" "$T/tok/t5_tokenizer"
ln -s "$G/models/tiny-flux1-schnell-Q4_K_S.gguf" "$M/diffusion_models/flux1-schnell-Q4_K_S.gguf"
ln -s "$G/models/tiny-flux1-schnell-Q4_K_S.gguf" "$M/unet/old-flux1-schnell-Q4_K_S.gguf"
ln -s "$G/models/tiny-t5-v1_1-xxl-encoder-Q4_0.gguf" "$M/text_encoders/t5-v1_1-xxl-encoder-Q8_0.gguf"
ln -s "$FLUX/models/tiny-clip_l.safetensors" "$M/text_encoders/clip_l.safetensors"
ln -s "$FLUX/models/tiny-ae.safetensors" "$M/vae/ae.safetensors"
ln -s "$FLUX/models/tiny-flux1-schnell.safetensors" "$M/diffusion_models/not-gguf.gguf"
ln -s "$FLUX/tokenizer/tokenizer.json" "$T/tok/t5_tokenizer/tokenizer.json"
for f in vocab.json merges.txt; do ln -s "$TOK/$f" "$T/tok/$f"; done

SMALL=(--set 5.width=64 --set 5.height=48 --models-dir "$M" --tokenizer-dir "$T/tok" --no-cache --quiet)
run() { # run NAME FILE ARGS...
    local name=$1 file=$2
    shift 2
    "$SDFLOW_BIN" run "$file" "${SMALL[@]}" --output-dir "$T/out/$name" "$@" > "$T/$name.out" 2> "$T/$name.err" ||
        { fail "$name: $(tail -3 "$T/$name.err")"; return 1; }
    ls "$T/out/$name"/*.png > /dev/null 2>&1 || fail "$name: no PNG written"
}
run api "$WF/txt2img_flux_schnell_gguf.json"
run lua "$WF/txt2img_flux_schnell_gguf.lua"
run ui "$WF/ui/txt2img_flux_schnell_gguf.json"
run unet_folder "$WF/txt2img_flux_schnell_gguf.json" --set 10.unet_name=old-flux1-schnell-Q4_K_S.gguf

cat > "$T/pixels.py" << 'PY'
import struct, sys, zlib
def pix(path):
    data, pos, out = open(path, "rb").read(), 8, b""
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        if data[pos + 4:pos + 8] in (b"IHDR", b"IDAT"):
            out += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    return out
first = pix(sys.argv[1])
sys.exit(0 if all(pix(p) == first for p in sys.argv[2:]) else 1)
PY
pngs=()
for n in api lua ui unet_folder; do pngs+=("$(ls "$T/out/$n"/*.png 2> /dev/null | head -1)"); done
python3 "$T/pixels.py" "${pngs[@]}" || fail "the JSON, Lua and UI forms (and the unet/ copy) saved different pixels"

# ComfyUI's own loaders do not list .gguf files: the same names fail validation there
python3 - "$WF/txt2img_flux_schnell_gguf.json" "$T/plain.json" << 'PY'
import json, sys
w = json.load(open(sys.argv[1]))
w["10"] = {"class_type": "UNETLoader", "inputs": dict(w["10"]["inputs"], weight_dtype="default")}
json.dump(w, open(sys.argv[2], "w"))
PY
"$SDFLOW_BIN" run "$T/plain.json" "${SMALL[@]}" --output-dir "$T/out/x" > /dev/null 2> "$T/unetloader.err" &&
    fail "UNETLoader took a .gguf file"
grep -q "flux1-schnell-Q4_K_S.gguf" "$T/unetloader.err" || fail "UNETLoader refusal: $(tail -2 "$T/unetloader.err")"
# a safetensors file named .gguf is listed but refused before anything runs
"$SDFLOW_BIN" run "$WF/txt2img_flux_schnell_gguf.json" "${SMALL[@]}" --output-dir "$T/out/y" \
    --set 10.unet_name=not-gguf.gguf > /dev/null 2> "$T/notgguf.err" && fail "a file that is no GGUF ran"
grep -q "not-gguf.gguf" "$T/notgguf.err" && grep -q "not a GGUF file" "$T/notgguf.err" ||
    fail "no-GGUF refusal: $(tail -2 "$T/notgguf.err")"
# files written by `sdflow synth` (our own GGUF writer and quantizer) run the same workflow
S="$T/synth"
"$SDFLOW_BIN" synth --preset flux-schnell-tiny --layout gguf --quant Q8_0 --text-encoder-quant Q4_0 --models-dir "$S" > "$T/synth.out" 2>&1 ||
    fail "synth flux-schnell-tiny: $(tail -2 "$T/synth.out")"
grep -q "sdflow-random-flux-schnell-tiny-Q8_0.gguf" "$T/synth.out" || fail "synth: $(cat "$T/synth.out")"
"$SDFLOW_BIN" synth --preset flux-schnell-tiny --layout gguf --quant Q8_0 --models-dir "$S" 2>&1 | grep -q "^kept " ||
    fail "synth rewrote existing files without --force"
"$SDFLOW_BIN" synth --preset flux-schnell-tiny --layout gguf --quant Q3_K_M --models-dir "$S" > /dev/null 2> "$T/synth_bad.err" &&
    fail "synth took an unknown type"
grep -q "Q3_K_M" "$T/synth_bad.err" || fail "synth's refusal: $(cat "$T/synth_bad.err")"
"$SDFLOW_BIN" run "$WF/txt2img_flux_schnell_gguf.json" --set 5.width=64 --set 5.height=48 --models-dir "$S" \
    --tokenizer-dir "$T/tok" --no-cache --quiet --output-dir "$T/out/synth" \
    --set 10.unet_name=sdflow-random-flux-schnell-tiny-Q8_0.gguf --set 11.clip_name1=sdflow-random-tiny-clip_l.safetensors \
    --set 11.clip_name2=sdflow-random-tiny-t5xxl-Q4_0.gguf --set 12.vae_name=sdflow-random-tiny-ae.safetensors \
    > /dev/null 2> "$T/synth_run.err" || fail "the workflow on synth files: $(tail -3 "$T/synth_run.err")"
ls "$T/out/synth"/*.png > /dev/null 2>&1 || fail "synth run: no PNG"
sd_test_end "ok: the ComfyUI-GGUF workflow ran as JSON, Lua and UI, and on synth's GGUF files"
