# The memory estimate before large allocations (core/membudget.h): a node
# whose allocation cannot fit the budget fails at once, naming the node, the
# input that set the size and the bytes needed, instead of growing until the
# allocator fails. --max-memory and SDFLOW_MAX_MEMORY set the budget; a bad
# value is refused naming it; 0 means no limit; a small run fits.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_max_memory EmptyLatentImage SaveLatent EmptyImage ImagePadForOutpaint ImageScaleBy PreviewImage LatentUpscaleBy

mkdir -p "$T/output" "$T/temp"
run() {
    "$SDFLOW_BIN" run "$@" --no-cache --quiet --output-dir "$T/output" --temp-dir "$T/temp"
}

# issue 14: a 16384x16384 latent at batch 64 (4 GiB of zeros, then far more
# in any sampler) against a 1 GiB budget
cat > "$T/latent.json" <<'JSON'
{"1": {"class_type": "EmptyLatentImage", "inputs": {"width": 16384, "height": 16384, "batch_size": 64}},
 "2": {"class_type": "SaveLatent", "inputs": {"samples": ["1", 0], "filename_prefix": "l"}}}
JSON
if run "$T/latent.json" --max-memory 1G 2> "$T/err"; then
    fail "the 16384^2 x 64 latent ran under --max-memory 1G"
else
    grep -q "node 1 (EmptyLatentImage)" "$T/err" || fail "error does not name the node: $(cat "$T/err")"
    grep -q "batch_size" "$T/err" || fail "error does not name the input: $(cat "$T/err")"
    grep -q "4294967296 bytes" "$T/err" || fail "error does not give the bytes needed: $(cat "$T/err")"
    grep -q "1.0 GiB" "$T/err" || fail "error does not give the limit: $(cat "$T/err")"
fi
# the same through the environment variable
if SDFLOW_MAX_MEMORY=512MiB run "$T/latent.json" 2> "$T/err"; then
    fail "SDFLOW_MAX_MEMORY=512MiB was not applied"
else
    grep -q "512.0 MiB" "$T/err" || fail "env budget not in the error: $(cat "$T/err")"
fi

# ImagePadForOutpaint with huge padding; the largest padding is named
cat > "$T/pad.json" <<'JSON'
{"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
 "2": {"class_type": "ImagePadForOutpaint", "inputs": {"image": ["1", 0], "left": 8, "top": 4096,
       "right": 16384, "bottom": 100, "feathering": 40}},
 "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}}}
JSON
if run "$T/pad.json" --max-memory 256M 2> "$T/err"; then
    fail "ImagePadForOutpaint to 16k x 16k ran under 256M"
else
    grep -q "node 2 (ImagePadForOutpaint)" "$T/err" || fail "pad: node not named: $(cat "$T/err")"
    grep -q "input 'right'" "$T/err" || fail "pad: input not named: $(cat "$T/err")"
fi

# resizing: ImageScaleBy and LatentUpscaleBy name scale_by
cat > "$T/scale.json" <<'JSON'
{"1": {"class_type": "EmptyImage", "inputs": {"width": 2048, "height": 2048, "batch_size": 1, "color": 0}},
 "2": {"class_type": "ImageScaleBy", "inputs": {"image": ["1", 0], "upscale_method": "nearest-exact", "scale_by": 8.0}},
 "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}}}
JSON
if run "$T/scale.json" --max-memory 1G 2> "$T/err"; then
    fail "ImageScaleBy to 16k x 16k ran under 1G"
else
    grep -q "node 2 (ImageScaleBy)" "$T/err" && grep -q "input 'scale_by'" "$T/err" ||
        fail "scale: node or input not named: $(cat "$T/err")"
fi
cat > "$T/lscale.json" <<'JSON'
{"1": {"class_type": "EmptyLatentImage", "inputs": {"width": 1024, "height": 1024, "batch_size": 16}},
 "2": {"class_type": "LatentUpscaleBy", "inputs": {"samples": ["1", 0], "upscale_method": "nearest-exact", "scale_by": 8.0}},
 "3": {"class_type": "SaveLatent", "inputs": {"samples": ["2", 0], "filename_prefix": "l"}}}
JSON
if run "$T/lscale.json" --max-memory 64M 2> "$T/err"; then
    fail "LatentUpscaleBy x8 at batch 16 ran under 64M"
else
    grep -q "node 2 (LatentUpscaleBy)" "$T/err" && grep -q "input 'scale_by'" "$T/err" ||
        fail "latent scale: node or input not named: $(cat "$T/err")"
fi

# model nodes, on a random tiny checkpoint: KSampler estimates the UNet's
# activations for its latent (cond + uncond), VAEEncode the encoder's
src=${SDFLOW_SOURCE_DIR:?}
if "$SDFLOW_BIN" synth --preset sd1-tiny --models-dir "$T/models" --tokenizer-dir "$T/tok" > /dev/null 2>&1; then
    mrun() { run "$@" --models-dir "$T/models" --tokenizer-dir "$T/tok"; }
    if mrun "$src/workflows/txt2img_sd15.json" --max-memory 64M --set 4.ckpt_name=sdflow-random-sd1-tiny.safetensors \
        --set 5.width=1024 --set 5.height=1024 --set 5.batch_size=4 --set 3.steps=1 2> "$T/err"; then
        fail "KSampler on a 1024^2 x 4 latent ran under 64M"
    else
        grep -q "node 3 (KSampler) input 'latent_image'" "$T/err" && grep -q "UNet's activations" "$T/err" ||
            fail "KSampler: node, input or what not named: $(cat "$T/err")"
    fi
    mrun "$src/workflows/txt2img_sd15.json" --max-memory 64M --set 4.ckpt_name=sdflow-random-sd1-tiny.safetensors \
        --set 5.width=64 --set 5.height=64 --set 3.steps=1 2> "$T/err" ||
        fail "a 64x64 txt2img under 64M: $(cat "$T/err")"
    cat > "$T/enc.json" <<'JSON'
{"1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sdflow-random-sd1-tiny.safetensors"}},
 "2": {"class_type": "EmptyImage", "inputs": {"width": 1024, "height": 1024, "batch_size": 1, "color": 0}},
 "3": {"class_type": "VAEEncode", "inputs": {"pixels": ["2", 0], "vae": ["1", 2]}},
 "4": {"class_type": "SaveLatent", "inputs": {"samples": ["3", 0], "filename_prefix": "e"}}}
JSON
    if mrun "$T/enc.json" --max-memory 64M 2> "$T/err"; then
        fail "VAEEncode of 1024^2 ran under 64M"
    else
        grep -q "node 3 (VAEEncode) input 'pixels'" "$T/err" && grep -q "VAEEncodeTiled" "$T/err" ||
            fail "VAEEncode: node, input or hint not named: $(cat "$T/err")"
    fi
else
    fail "sdflow synth failed"
fi

# bad values are refused naming the option
run "$T/latent.json" --max-memory lots 2> "$T/err" && fail "--max-memory lots accepted"
grep -q -- "--max-memory" "$T/err" && grep -q "lots" "$T/err" || fail "bad --max-memory: $(cat "$T/err")"
SDFLOW_MAX_MEMORY=-5 run "$T/latent.json" 2> "$T/err" && fail "SDFLOW_MAX_MEMORY=-5 accepted"
grep -q "SDFLOW_MAX_MEMORY" "$T/err" || fail "bad SDFLOW_MAX_MEMORY not named: $(cat "$T/err")"

# a small run fits the default budget and a small explicit one
cat > "$T/small.json" <<'JSON'
{"1": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 1}},
 "2": {"class_type": "SaveLatent", "inputs": {"samples": ["1", 0], "filename_prefix": "s"}}}
JSON
run "$T/small.json" 2> "$T/err" || fail "small latent under the default budget: $(cat "$T/err")"
run "$T/small.json" --max-memory 1M 2> "$T/err" || fail "small latent under 1M: $(cat "$T/err")"
run "$T/small.json" --max-memory 0 2> "$T/err" || fail "--max-memory 0 (no limit): $(cat "$T/err")"

sd_test_end "max_memory: latent, pad, resize refused with node, input and bytes; env and option; bad values named"
