# The executor with real model nodes on the tiny SD1 checkpoint: loaded
# models (handles) are never persisted, a loader whose consumers all hit is
# not run, and a changed seed re-executes exactly what depends on it (the
# loader included, since KSampler needs the model again).
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_run_models CheckpointLoaderSimple CLIPTextEncode EmptyLatentImage KSampler VAEDecode SaveImage
CKPT="$DATA/models/tiny-sd1.safetensors"
VOCAB="$TOK"
sd_test_need_path "$CKPT"
sd_test_need_path "$VOCAB" "tokenizer $VOCAB"

mkdir -p "$T/models/checkpoints" "$T/output"
ln -s "$CKPT" "$T/models/checkpoints/tiny-sd1.safetensors"
flat() { tr -d ' \t\n' < "$1"; }
status() {
    local s
    s=$(flat "$1" | grep -o "\"$2\":{\"class_type\":\"[^\"]*\",\"status\":\"[a-z]*\"" | sed 's/.*"status":"//; s/"$//')
    echo "${s:-absent}"
}
count() { flat "$1" | grep -o "\"$2\":[0-9]*" | head -1 | cut -d: -f2; }

cat > "$T/t2i.json" <<'J'
{"4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny-sd1.safetensors"}},
 "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a photo of a cat", "clip": ["4", 1]}},
 "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
 "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
 "3": {"class_type": "KSampler", "inputs": {"seed": 1, "steps": 3, "cfg": 7, "sampler_name": "euler",
       "scheduler": "normal", "denoise": 1, "model": ["4", 0], "positive": ["6", 0],
       "negative": ["7", 0], "latent_image": ["5", 0]}},
 "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["8", 0], "filename_prefix": "t2i"}}}
J

run() {
    local name=$1
    shift
    "$SDFLOW_BIN" run "$T/t2i.json" --models-dir "$T/models" --tokenizer-dir "$VOCAB" \
        --output-dir "$T/output" --cache "$T/cache.db" --report "$T/$name.json" --quiet "$@" \
        > /dev/null 2> "$T/$name.err" || fail "$name: $(cat "$T/$name.err")"
}

run first
[ "$(count "$T/first.json" executed)" = "7" ] || fail "first: expected 7 executed"

run second
[ "$(count "$T/second.json" executed)" = "0" ] || fail "second: expected nothing executed"
[ "$(status "$T/second.json" 4)" = "absent" ] || fail "second: the loader was visited"

run seed --set 3.seed=2
[ "$(count "$T/seed.json" executed)" = "4" ] || fail "seed: expected 4 executed"
for n in 4 3 8 9; do [ "$(status "$T/seed.json" $n)" = "executed" ] || fail "seed: node $n not executed"; done
for n in 6 7 5; do [ "$(status "$T/seed.json" $n)" = "cached" ] || fail "seed: node $n not cached"; done

# A prompt change: the text encoder and everything after it, not the latent.
run prompt --set "6.text=a photo of a dog" --set 3.seed=2
for n in 4 6 3 8 9; do [ "$(status "$T/prompt.json" $n)" = "executed" ] || fail "prompt: node $n not executed"; done
for n in 7 5; do [ "$(status "$T/prompt.json" $n)" = "cached" ] || fail "prompt: node $n not cached"; done

# Two loaders of the same file under another id share one cache entry.
sed 's/"4"/"40"/g' "$T/t2i.json" > "$T/renumbered.json"
"$SDFLOW_BIN" run "$T/renumbered.json" --models-dir "$T/models" --tokenizer-dir "$VOCAB" \
    --output-dir "$T/output" --cache "$T/cache.db" --report "$T/renumbered.report.json" --quiet \
    > /dev/null 2>&1 || fail "renumbered run failed"
[ "$(count "$T/renumbered.report.json" executed)" = "0" ] || fail "renumbered: expected nothing executed"

# --comfyui-dir alone: models from DIR/models and the CLIP vocabulary from
# ComfyUI's bundled DIR/comfy/sd1_tokenizer (no --tokenizer-dir, no env).
mkdir -p "$T/comfy/models/checkpoints" "$T/comfy/comfy/sd1_tokenizer" "$T/comfy-out"
ln -s "$CKPT" "$T/comfy/models/checkpoints/tiny-sd1.safetensors"
cp "$VOCAB/vocab.json" "$VOCAB/merges.txt" "$T/comfy/comfy/sd1_tokenizer/"
env -u SDFLOW_TOKENIZER_DIR -u SDFLOW_MODELS_DIR "$SDFLOW_BIN" run "$T/t2i.json" \
    --comfyui-dir "$T/comfy" --output-dir "$T/comfy-out" --no-cache --quiet > /dev/null 2> "$T/comfy.err" ||
    fail "--comfyui-dir without --tokenizer-dir: $(cat "$T/comfy.err")"
ls "$T/comfy-out"/t2i_*.png > /dev/null 2>&1 || fail "--comfyui-dir run wrote no image"
rm "$T/comfy/comfy/sd1_tokenizer/vocab.json"
if env -u SDFLOW_TOKENIZER_DIR "$SDFLOW_BIN" run "$T/t2i.json" --comfyui-dir "$T/comfy" \
    --output-dir "$T/comfy-out" --no-cache --quiet > /dev/null 2> "$T/comfy2.err"; then
    fail "a run without any vocabulary succeeded"
fi
grep -q "tokenizer" "$T/comfy2.err" || fail "no vocabulary: the error does not say so: $(cat "$T/comfy2.err")"

sd_test_end "all model run checks passed"
