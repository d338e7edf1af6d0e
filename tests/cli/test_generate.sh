# `sdflow generate`: the options become ComfyUI's graph and run through the
# executor. A txt2img generate and `sdflow run` of the same graph written by
# hand save the same PNG bytes (picture and embedded prompt), and
# --print-workflow prints that graph; img2img (size of -i, denoise =
# strength), inpaint (VAEEncodeForInpaint, or SetLatentNoiseMask below
# strength 1) and a LoRA chain make the expected graphs; -o writes exactly
# that file, also on a cached rerun, leaving no private folder behind;
# usage errors are named.
set -u
: "${SDFLOW_BIN:?}" "${SDFLOW_SOURCE_DIR:?}" "${SDFLOW_TEST_TMP:?}"
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
command -v python3 > /dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
sd_test_need_nodes CheckpointLoaderSimple KSampler VAEDecode SaveImage LoadImage LoadImageMask VAEEncode \
    VAEEncodeForInpaint SetLatentNoiseMask LoraLoader
T="$SDFLOW_TEST_TMP/cli_generate"
rm -rf "$T" && mkdir -p "$T/pics"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
sd_test_tiny_sd1 "$T"
M=(--models-dir "$T/models" --tokenizer-dir "$T/tok")
CK=sdflow-random-sd1-tiny.safetensors
gen() { "$SDFLOW_BIN" generate -m "$CK" "${M[@]}" --quiet "$@"; }
flat() { tr -d ' \t\n' < "$1"; }
png_size() { python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read(); assert d[:8]==b"\x89PNG\r\n\x1a\n"; print("%dx%d" % struct.unpack(">II", d[16:24]))' "$1"; }

# ---- txt2img: the same bytes as the graph written by hand ----
cat > "$T/hand.json" << 'J'
{"3": {"inputs": {"seed": 12345678901234567890, "steps": 3, "cfg": 7.5, "sampler_name": "euler_ancestral",
                  "scheduler": "karras", "denoise": 1, "model": ["4", 0], "positive": ["6", 0],
                  "negative": ["7", 0], "latent_image": ["5", 0]},
       "class_type": "KSampler", "_meta": {"title": "KSampler"}},
 "4": {"inputs": {"ckpt_name": "sdflow-random-sd1-tiny.safetensors"}, "class_type": "CheckpointLoaderSimple",
       "_meta": {"title": "Load Checkpoint"}},
 "5": {"inputs": {"width": 64, "height": 48, "batch_size": 1}, "class_type": "EmptyLatentImage",
       "_meta": {"title": "Empty Latent Image"}},
 "6": {"inputs": {"text": "a lighthouse at dawn", "clip": ["4", 1]}, "class_type": "CLIPTextEncode",
       "_meta": {"title": "CLIP Text Encode (Prompt)"}},
 "7": {"inputs": {"text": "blurry", "clip": ["4", 1]}, "class_type": "CLIPTextEncode",
       "_meta": {"title": "CLIP Text Encode (Prompt)"}},
 "8": {"inputs": {"samples": ["3", 0], "vae": ["4", 2]}, "class_type": "VAEDecode", "_meta": {"title": "VAE Decode"}},
 "9": {"inputs": {"filename_prefix": "sdflow", "images": ["8", 0]}, "class_type": "SaveImage",
       "_meta": {"title": "Save Image"}}}
J
G=(-p "a lighthouse at dawn" -n blurry -W 64 -H 48 --steps 3 --cfg 7.5 --seed 12345678901234567890
   --sampler euler_ancestral --scheduler karras)
gen "${G[@]}" --print-workflow > "$T/gen.json" 2> "$T/err" || fail "--print-workflow: $(cat "$T/err")"
"$SDFLOW_BIN" export --json "$T/hand.json" > "$T/hand.export.json" || fail "export of the hand-written graph"
cmp -s "$T/gen.json" "$T/hand.export.json" || fail "--print-workflow differs from the hand-written graph:
$(diff "$T/gen.json" "$T/hand.export.json")"
"$SDFLOW_BIN" run "$T/hand.json" "${M[@]}" --no-cache --output-dir "$T/hand_out" --quiet > "$T/hand.files" 2> "$T/err" ||
    fail "run of the hand-written graph: $(cat "$T/err")"
out=$(gen "${G[@]}" --no-cache -o "$T/pics/gen.png" 2> "$T/err") || fail "generate -o: $(cat "$T/err")"
[ "$out" = "$T/pics/gen.png" ] || fail "generate -o printed '$out'"
cmp -s "$(head -1 "$T/hand.files")" "$T/pics/gen.png" || fail "generate and run of the same graph saved different bytes"
[ "$(png_size "$T/pics/gen.png")" = "64x48" ] || fail "size of the generated picture"
ls -a "$T/pics" | grep -q 'sdflow-generate' && fail "-o left its private folder behind: $(ls -a "$T/pics")"
# the printed graph runs to the same picture, too
"$SDFLOW_BIN" run "$T/gen.json" "${M[@]}" --no-cache --output-dir "$T/gen_out" --quiet > "$T/gen.files" 2> /dev/null ||
    fail "run of the printed graph"
cmp -s "$(head -1 "$T/gen.files")" "$T/pics/gen.png" || fail "the printed graph saved different bytes"
# a rerun hits the cache and still writes exactly -o
gen "${G[@]}" -o "$T/pics/gen.png" > /dev/null 2>&1 # fills the cache
rm -f "$T/pics/gen.png"
gen "${G[@]}" -o "$T/pics/gen.png" --report "$T/rep.json" > /dev/null 2> "$T/err" || fail "cached rerun: $(cat "$T/err")"
cmp -s "$(head -1 "$T/hand.files")" "$T/pics/gen.png" || fail "cached rerun: -o has other bytes or is missing"
[ "$(sd_test_count "$T/rep.json" executed)" = 0 ] || fail "cached rerun executed nodes: $(cat "$T/rep.json")"
ls "$T/pics" | grep -vq '^gen.png$' && fail "cached rerun left files: $(ls -a "$T/pics")"
# without -o: SaveImage's own naming in --output-dir, printed on stdout
out=$(gen "${G[@]}" --output-dir "$T/plain_out" 2> /dev/null) || fail "generate without -o"
[ "$out" = "$T/plain_out/sdflow_00001_.png" ] && [ -f "$out" ] || fail "generate without -o printed '$out'"

# ---- img2img: LoadImage + VAEEncode, denoise = strength, the picture's size ----
"$SDFLOW_BIN" run "$T/hand.json" "${M[@]}" --no-cache --output-dir "$T/init" --quiet --set 5.width=32 --set 5.height=40 \
    > /dev/null 2>&1 && mv "$T/init/sdflow_00001_.png" "$T/pics/init.png" || fail "making an init picture"
gen -p x --steps 2 -i "$T/pics/init.png" --strength 0.4 --print-workflow > "$T/i2i.json" 2> "$T/i2i.err" ||
    fail "img2img --print-workflow: $(cat "$T/i2i.err")"
flat "$T/i2i.json" | grep -q '"1":{"inputs":{"image":"init.png"},"class_type":"LoadImage"' || fail "img2img: no LoadImage"
flat "$T/i2i.json" | grep -q '"denoise":0.4,.*"latent_image":\["10",0\]' || fail "img2img: denoise/latent: $(flat "$T/i2i.json")"
flat "$T/i2i.json" | grep -q '"10":{"inputs":{"pixels":\["1",0\],"vae":\["4",2\]},"class_type":"VAEEncode"' ||
    fail "img2img: no VAEEncode"
flat "$T/i2i.json" | grep -q 'EmptyLatentImage' && fail "img2img: an EmptyLatentImage"
grep -q "note: run it with --input-dir $T/pics" "$T/i2i.err" || fail "img2img: the input folder is not named"
gen -p x --steps 2 -i "$T/pics/init.png" --strength 0.4 -o "$T/i2i.png" > /dev/null 2> "$T/err" ||
    fail "img2img run: $(cat "$T/err")"
[ "$(png_size "$T/i2i.png")" = "32x40" ] || fail "img2img: not the init picture's size"
# an init picture inside --input-dir is named relative to it
mkdir -p "$T/inputs/sub" && cp "$T/pics/init.png" "$T/inputs/sub/"
gen -p x -i "$T/inputs/sub/init.png" --input-dir "$T/inputs" --print-workflow 2> /dev/null | flat /dev/stdin |
    grep -q '"image":"sub/init.png"' || fail "img2img: a picture under --input-dir is not named relative to it"

# ---- inpaint ----
python3 - "$T/pics/mask.png" << 'PY'
import struct, sys, zlib
w, h = 32, 40
raw = b"".join(b"\0" + bytes(v for x in range(w) for v in ((255,) * 3 if 8 <= x < 24 and 10 <= y < 30 else (0,) * 3))
               for y in range(h))
chunk = lambda k, d: struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                              chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
PY
gen -p x --steps 2 -i "$T/pics/init.png" --mask "$T/pics/mask.png" --print-workflow > "$T/inp.json" 2> /dev/null ||
    fail "inpaint --print-workflow"
flat "$T/inp.json" | grep -q '"2":{"inputs":{"image":"mask.png","channel":"red"},"class_type":"LoadImageMask"' ||
    fail "inpaint: no LoadImageMask"
flat "$T/inp.json" | grep -q '"10":{"inputs":{"pixels":\["1",0\],"vae":\["4",2\],"mask":\["2",0\],"grow_mask_by":6},"class_type":"VAEEncodeForInpaint"' ||
    fail "inpaint: no VAEEncodeForInpaint: $(flat "$T/inp.json")"
flat "$T/inp.json" | grep -q '"denoise":1,' || fail "inpaint: denoise is not 1"
gen -p x --steps 2 -i "$T/pics/init.png" --mask "$T/pics/mask.png" --strength 0.6 --print-workflow 2> /dev/null > "$T/inp2.json"
flat "$T/inp2.json" | grep -q '"latent_image":\["11",0\]' || fail "soft inpaint: KSampler does not read the noise mask"
flat "$T/inp2.json" | grep -q '"11":{"inputs":{"samples":\["10",0\],"mask":\["2",0\]},"class_type":"SetLatentNoiseMask"' ||
    fail "soft inpaint: no SetLatentNoiseMask"
for s in "" "--strength 0.6"; do
    gen -p x --steps 2 -i "$T/pics/init.png" --mask "$T/pics/mask.png" $s -o "$T/inp.png" > /dev/null 2> "$T/err" ||
        fail "inpaint run ($s): $(cat "$T/err")"
    [ "$(png_size "$T/inp.png")" = "32x40" ] || fail "inpaint ($s): size"
done

# ---- LoRA chain ----
gen -p x --lora first.safetensors:0.5 --lora sub/second.safetensors --print-workflow > "$T/lora.json" 2> /dev/null ||
    fail "lora --print-workflow"
f=$(flat "$T/lora.json")
echo "$f" | grep -q '"20":{"inputs":{"lora_name":"first.safetensors","strength_model":0.5,"strength_clip":0.5,"model":\["4",0\],"clip":\["4",1\]},"class_type":"LoraLoader"' ||
    fail "lora: first link of the chain: $f"
echo "$f" | grep -q '"21":{"inputs":{"lora_name":"sub/second.safetensors","strength_model":1,"strength_clip":1,"model":\["20",0\],"clip":\["20",1\]}' ||
    fail "lora: second link of the chain"
echo "$f" | grep -q '"model":\["21",0\],"positive"' || fail "lora: KSampler does not use the last LoRA"
[ "$(echo "$f" | grep -o '"clip":\["21",1\]' | wc -l)" -eq 2 ] || fail "lora: the text encoders do not use the last LoRA"
gen -p x --lora missing.safetensors -o "$T/l.png" > /dev/null 2> "$T/err" && fail "a missing LoRA ran"
grep -q "node 20 (LoraLoader) input 'lora_name'" "$T/err" || fail "missing LoRA: $(cat "$T/err")"

# ---- --set works on the generated graph too ----
gen -p x --set KSampler.steps=7 --print-workflow 2> /dev/null | flat /dev/stdin | grep -q '"steps":7,' ||
    fail "--set on generate"

# ---- usage errors ----
check_usage() { # expected-text args...
    local want="$1"
    shift
    if "$SDFLOW_BIN" generate "$@" > "$T/out" 2> "$T/err"; then fail "generate $* succeeded"; return; fi
    grep -q -- "$want" "$T/err" || fail "generate $*: stderr lacks '$want': $(cat "$T/err")"
}
check_usage "-p PROMPT are required" -m "$CK"
check_usage "-m MODEL and" -p x
check_usage "--strength goes with -i" -m "$CK" -p x --strength 0.5
check_usage "--strength must be a number from 0 to 1" -m "$CK" -p x -i "$T/pics/init.png" --strength 2
check_usage "--mask needs the picture" -m "$CK" -p x --mask "$T/pics/mask.png"
check_usage "init image '$T/nope.png'" -m "$CK" -p x -i "$T/nope.png"
check_usage "--seed must be a whole number" -m "$CK" -p x --seed -1 --print-workflow
check_usage "--steps needs a whole number" -m "$CK" -p x --steps many
# -o is checked before any work (issue 23: a folder failed only at the end
# and lost the picture; x.jpg got PNG bytes)
check_usage "-o $T/pics/ is a folder" -m "$CK" -p x -o "$T/pics/"
check_usage "-o $T/pics is a folder" -m "$CK" -p x -o "$T/pics"
check_usage "writes PNG pictures" -m "$CK" -p x -o "$T/x.jpg"
[ -e "$T/x.jpg" ] && fail "-o x.jpg wrote a file"
check_usage "does not exist" -m "$CK" -p x -o "$T/no/such/dir/x.png"
ls -a "$T/pics" | grep -q 'sdflow-generate' && fail "a refused -o left a private folder: $(ls -a "$T/pics")"
"$SDFLOW_BIN" generate -m "$CK" -p x --lora ':0.5' --print-workflow > /dev/null 2> "$T/err" && fail "an empty LoRA name was taken"
grep -q "expected NAME or NAME:WEIGHT" "$T/err" || fail "empty LoRA name: $(cat "$T/err")"

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "generate ok"
