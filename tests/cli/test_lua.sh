# Lua workflows through the sdflow binary: every JSON example in workflows/
# has a Lua twin that builds the same graph and runs; export --lua/--json
# round trips; validation and Lua errors name the file and line; the sandbox
# refuses os/io unless --allow-unsafe-lua; a for-loop sweep shares its
# upstream node in one run.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_lua LoadImage ImageScale ImageInvert SaveImage


mkdir -p "$T/input" "$T/models/checkpoints" "$T/out"
img='iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAYAAACddGYaAAAAHUlEQVR4nGNgYDjxP4DhBMMCIM3AUAHkVAA5QBoAiIwL9aAmuykAAAAASUVORK5CYII='
printf '%s' "$img" | base64 -d > "$T/input/in.png"
# The examples name the real SD1.5 checkpoint; the tiny one stands in for it.
have_model=0
if [ -f "$DATA/models/tiny-sd1.safetensors" ] && [ -d "$TOK" ]; then
    ln -sf "$DATA/models/tiny-sd1.safetensors" "$T/models/checkpoints/v1-5-pruned-emaonly.safetensors"
    have_model=1
    # and for the SDXL, LoRA and ControlNet examples
    mkdir -p "$T/models/loras" "$T/models/controlnet"
    # (and the second checkpoint of the merge example and the v-prediction
    # one: the tiny SD1 again; the examples only have to run)
    for f in "tiny-sdxl checkpoints/sd_xl_base_1.0" "tiny-lora-sd1 loras/epiNoiseoffset_v2" \
        "tiny-controlnet-sd1 controlnet/control_v11p_sd15_canny" "tiny-sd1 checkpoints/dreamshaper_8" \
        "tiny-sd1 checkpoints/sd15_vpred_zsnr"; do
        set -- $f
        [ -f "$DATA/models/$1.safetensors" ] && ln -sf "$DATA/models/$1.safetensors" "$T/models/$2.safetensors"
    done
    # the GLIGEN example's model (lib.sh)
    sd_test_gligen_model "$T/models" gligen_sd14_textbox_pruned.safetensors
    # the inpainting example's checkpoint: the tiny SD1 with 9 input channels
    python3 "$SDFLOW_SOURCE_DIR/tests/cli/inpaint_model.py" "$DATA/models/tiny-sd1.safetensors" \
        "$SDFLOW_SOURCE_DIR/tests/data/inpaint_cond" "$T/models/checkpoints/sd-v1-5-inpainting.safetensors" ||
        fail "making the inpainting checkpoint"
    # the unCLIP example's (lib.sh)
    sd_test_unclip_model "$T" "$T/models/checkpoints/sd21-unclip-h.ckpt" ||
        fail "making the unCLIP checkpoint: $(cat "$T/unclip.err")"
fi
# The Flux examples name ComfyUI's Flux files; the Flux set's tiny ones (and
# the tiny GGUF files of tests/data/gguf) stand in for them (the tiny dev
# model for Kontext dev too: the same layout), with the T5
# tokenizer beside the CLIP vocabulary.
TOKS="$TOK"
have_flux=0
FLUX="$DATA/flux"
G="$SDFLOW_SOURCE_DIR/tests/data/gguf/models"
if [ -f "$FLUX/manifest.json" ] && [ -d "$TOK" ]; then
    have_flux=1
    mkdir -p "$T/models/diffusion_models" "$T/models/text_encoders" "$T/models/vae" "$T/tok/t5_tokenizer"
    for f in vocab.json merges.txt; do ln -sf "$TOK/$f" "$T/tok/$f"; done
    ln -sf "$FLUX/tokenizer/tokenizer.json" "$T/tok/t5_tokenizer/tokenizer.json"
    TOKS="$T/tok"
    for f in "$FLUX/models/tiny-flux1-dev.safetensors diffusion_models/flux1-dev.safetensors" \
        "$FLUX/models/tiny-flux1-schnell.safetensors diffusion_models/flux1-schnell.safetensors" \
        "$FLUX/models/tiny-flux1-dev.safetensors diffusion_models/flux1-kontext-dev.safetensors" \
        "$FLUX/models/tiny-flux1-dev-fp8.safetensors checkpoints/flux1-dev-fp8.safetensors" \
        "$FLUX/models/tiny-t5xxl_fp16.safetensors text_encoders/t5xxl_fp16.safetensors" \
        "$FLUX/models/tiny-t5xxl_fp16.safetensors text_encoders/t5xxl_fp8_e4m3fn.safetensors" \
        "$FLUX/models/tiny-clip_l.safetensors text_encoders/clip_l.safetensors" \
        "$FLUX/models/tiny-ae.safetensors vae/ae.safetensors" \
        "$G/tiny-flux1-schnell-Q4_K_S.gguf diffusion_models/flux1-schnell-Q4_K_S.gguf" \
        "$G/tiny-t5-v1_1-xxl-encoder-Q4_0.gguf text_encoders/t5-v1_1-xxl-encoder-Q8_0.gguf"; do
        set -- $f
        ln -sf "$1" "$T/models/$2"
    done
fi
# The SD3.5 examples name ComfyUI's SD3.5 files; the SD3 set's tiny ones
# (and GGUF files written from them, gguf_models.py) stand in for them in a
# models folder of their own (their clip_l and
# t5xxl_fp16 are not the Flux set's), run with the head counts of the set's
# tiny CLIP-L and CLIP-G (manifest.json; no file says them).
have_sd3=0
SD3="$DATA/sd3"
SD3ARGS=()
if [ -f "$SD3/manifest.json" ] && [ -d "$TOK" ] && command -v python3 > /dev/null; then
    python3 "$SDFLOW_SOURCE_DIR/tests/cli/sd3_models.py" "$SD3" "$T/sd3/models" "$T/sd3/tok" "$TOK" ||
        fail "placing the SD3 set's files"
    python3 "$SDFLOW_SOURCE_DIR/tests/cli/gguf_models.py" sd3 "$SD3" "$T/sd3/models" ||
        fail "writing the SD3 set's GGUF files"
    heads=$(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))["models"]
print(m["clip_l"]["config"]["num_attention_heads"], m["clip_g"]["config"]["num_attention_heads"])' "$SD3/manifest.json")
    set -- $heads
    SD3ARGS=(--models-dir "$T/sd3/models" --tokenizer-dir "$T/sd3/tok" --clip-l-heads "$1" --clip-g-heads "$2")
    have_sd3=1
fi
# The Z-Image examples name ComfyUI's Z-Image files; the Z-Image set's tiny
# ones (and GGUF files written from them) stand in for them in a folder of
# their own (its ae is not the Flux
# set's), with its Qwen2 tokenizer and its tiny Qwen3's width (manifest).
have_zi=0
ZI="$DATA/zimage"
ZIARGS=()
if [ -f "$ZI/manifest.json" ] && command -v python3 > /dev/null; then
    width=$(python3 "$SDFLOW_SOURCE_DIR/tests/cli/zimage_models.py" "$ZI" "$T/zi/models" "$T/zi/tok") ||
        fail "placing the Z-Image set's files"
    python3 "$SDFLOW_SOURCE_DIR/tests/cli/gguf_models.py" zimage "$ZI" "$T/zi/models" ||
        fail "writing the Z-Image set's GGUF files"
    ZIARGS=(--models-dir "$T/zi/models" --tokenizer-dir "$T/zi/tok" --qwen3-4b-width "$width")
    have_zi=1
fi
# example.png: 64x64, made by sdflow itself from a Lua one-liner
printf 'SaveImage{images = EmptyImage{width = 64, height = 64, batch_size = 1, color = 8405184}, filename_prefix = "ex"}\n' \
    > "$T/make_example.lua"
"$SDFLOW_BIN" run "$T/make_example.lua" --no-cache -q --output-dir "$T/gen" > /dev/null 2> "$T/err" ||
    fail "making example.png: $(cat "$T/err")"
cp "$T/gen/ex_00001_.png" "$T/input/example.png" 2> /dev/null || fail "no example.png"

# (the folders come before the arguments: a later --models-dir wins)
run() {
    local file=$1
    shift
    "$SDFLOW_BIN" run "$file" --no-cache --quiet --input-dir "$T/input" --output-dir "$T/out" --temp-dir "$T/temp" \
        --models-dir "$T/models" --tokenizer-dir "$TOKS" "$@"
}

# --- every example exists in both forms; both build the same graph and run ------------
n=0
for json in "$SDFLOW_SOURCE_DIR"/workflows/*.json; do
    [ -f "$json" ] || continue
    n=$((n + 1))
    base=$(basename "$json" .json)
    lua="${json%.json}.lua"
    [ -f "$lua" ] || { fail "workflows/$base.json has no Lua twin"; continue; }
    "$SDFLOW_BIN" export --lua "$json" > "$T/$base.exp.lua" 2> "$T/err" || fail "export --lua $base: $(cat "$T/err")"
    # the graph from the twin and from the exported Lua print the same Lua
    "$SDFLOW_BIN" export --lua "$lua" | tail -n +2 > "$T/$base.twin.lua"
    "$SDFLOW_BIN" export --lua "$T/$base.exp.lua" | tail -n +2 > "$T/$base.exp2.lua"
    tail -n +2 "$T/$base.exp.lua" > "$T/$base.exp1.lua"
    cmp -s "$T/$base.exp1.lua" "$T/$base.exp2.lua" || fail "$base: JSON -> Lua -> Lua is not stable"
    cmp -s "$T/$base.exp1.lua" "$T/$base.twin.lua" || fail "workflows/$base.lua does not build the graph of $base.json"
    # JSON -> Lua -> JSON -> Lua gives the same Lua again
    "$SDFLOW_BIN" export --json "$T/$base.exp.lua" > "$T/$base.back.json" || fail "export --json $base"
    "$SDFLOW_BIN" export --lua "$T/$base.back.json" | tail -n +2 > "$T/$base.exp3.lua"
    cmp -s "$T/$base.exp1.lua" "$T/$base.exp3.lua" || fail "$base: JSON -> Lua -> JSON changed the graph"
    # the SD3.5 examples: the SD3 set's files (after the ones given above)
    extra=()
    if grep -q '"sd3\.5_' "$json"; then
        if [ $have_sd3 = 0 ]; then
            [ "${SDFLOW_REQUIRE_DATA:-0}" = 1 ] && fail "workflows/$base.lua not run: no SD3 reference set"
            echo "note: not running workflows/$base.lua (no SD3 reference set)"
            continue
        fi
        extra=("${SD3ARGS[@]}")
    elif grep -q '"z_image_' "$json"; then
        if [ $have_zi = 0 ]; then
            [ "${SDFLOW_REQUIRE_DATA:-0}" = 1 ] && fail "workflows/$base.lua not run: no Z-Image reference set"
            echo "note: not running workflows/$base.lua (no Z-Image reference set)"
            continue
        fi
        extra=("${ZIARGS[@]}")
    elif grep -q '"CheckpointLoaderSimple"\|"unCLIPCheckpointLoader"' "$json" && ! grep -q '"flux1-' "$json" &&
        [ $have_model = 0 ]; then
        [ "${SDFLOW_REQUIRE_DATA:-0}" = 1 ] && fail "workflows/$base.lua not run: no tiny-sd1 checkpoint"
        echo "note: not running workflows/$base.lua (no tiny-sd1 checkpoint)"
        continue
    fi
    # (the Flux fp8 checkpoint example loads through CheckpointLoaderSimple)
    if [ ${#extra[@]} = 0 ] && grep -q '"UNETLoader"\|"UnetLoaderGGUF"\|"DualCLIPLoader\|"flux1-' "$json" &&
        [ $have_flux = 0 ]; then
        [ "${SDFLOW_REQUIRE_DATA:-0}" = 1 ] && fail "workflows/$base.lua not run: no Flux reference set"
        echo "note: not running workflows/$base.lua (no Flux reference set)"
        continue
    fi
    # small and short: same graph, tiny model, 2 steps, 64x64
    sets=()
    grep -q '"KSampler"' "$json" && sets+=(--set KSampler.steps=2)
    grep -q '"BasicScheduler"' "$json" && sets+=(--set BasicScheduler.steps=2)
    # (SelfAttentionGuidance lays its middle-block map out on 4 tokens or more: 128 x 128)
    px=64
    grep -q '"SelfAttentionGuidance"' "$json" && px=128
    grep -q '"EmptyLatentImage"' "$json" && sets+=(--set EmptyLatentImage.width=$px --set EmptyLatentImage.height=$px)
    grep -q '"EmptySD3LatentImage"' "$json" && sets+=(--set EmptySD3LatentImage.width=64 --set EmptySD3LatentImage.height=48)
    run "$lua" "${sets[@]}" "${extra[@]}" > "$T/files" 2> "$T/err" || fail "sdflow run workflows/$base.lua: $(cat "$T/err")"
    [ -s "$T/files" ] || fail "workflows/$base.lua wrote no file"
done
[ $n -gt 0 ] || fail "no JSON workflow in workflows/"

# --- errors point at the Lua file and line -------------------------------------------------
cat > "$T/bad_value.lua" <<'LUA'
local img = LoadImage{image = "in.png"}
-- the next node has a bad width
local s = ImageScale{image = img.IMAGE, upscale_method = "bilinear", width = "wide", height = 8,
                     crop = "disabled"}
SaveImage{images = s, filename_prefix = "x"}
LUA
if run "$T/bad_value.lua" 2> "$T/err"; then fail "a string width passed validation"; fi
grep -q "bad_value.lua:3" "$T/err" || fail "validation error does not name bad_value.lua:3: $(cat "$T/err")"
grep -q "nothing was run" "$T/err" || fail "validation failure not reported as such: $(cat "$T/err")"

printf 'local img = LoadImage{image = "in.png"}\nSaveImage{images = img.PICTURE}\n' > "$T/bad_output.lua"
if run "$T/bad_output.lua" 2> "$T/err"; then fail "an unknown output name was accepted"; fi
grep -q "bad_output.lua:2:.*PICTURE" "$T/err" || fail "unknown output error lacks file:line: $(cat "$T/err")"

printf 'local x = \n\nLoadImage{\n' > "$T/syntax.lua"
if run "$T/syntax.lua" 2> "$T/err"; then fail "a syntax error was accepted"; fi
grep -q "syntax.lua:" "$T/err" || fail "syntax error lacks the file name: $(cat "$T/err")"
if run "$T/missing.lua" 2> "$T/err"; then fail "a missing .lua file was accepted"; fi

# --- sandbox ----------------------------------------------------------------------------------
printf 'os.execute("touch %s/pwned")\nSaveImage{images = LoadImage{image = "in.png"}.IMAGE}\n' "$T" > "$T/unsafe.lua"
if run "$T/unsafe.lua" 2> "$T/err"; then fail "os.execute ran in the sandbox"; fi
[ -e "$T/pwned" ] && fail "os.execute had an effect"
grep -q "unsafe.lua:1:" "$T/err" || fail "sandbox error lacks file:line: $(cat "$T/err")"
run "$T/unsafe.lua" --allow-unsafe-lua > /dev/null 2> "$T/err" || fail "--allow-unsafe-lua: $(cat "$T/err")"
[ -e "$T/pwned" ] || fail "--allow-unsafe-lua did not open os.execute"
printf 'local f = io.open("%s/leak", "w")\n' "$T" > "$T/io.lua"
if "$SDFLOW_BIN" export --json "$T/io.lua" > /dev/null 2>&1; then fail "io.open available in the sandbox"; fi
[ -e "$T/leak" ] && fail "io.open had an effect"

# --- a sweep shares the upstream work ----------------------------------------------------------
cat > "$T/sweep.lua" <<'LUA'
local img = LoadImage{image = "in.png"}
for w = 1, 3 do
    local s = ImageScale{image = img.IMAGE, upscale_method = "nearest-exact", width = 4 * w, height = 4,
                         crop = "disabled"}
    SaveImage{images = ImageInvert{image = s}, filename_prefix = "sweep_" .. w}
end
LUA
"$SDFLOW_BIN" run "$T/sweep.lua" --no-cache --input-dir "$T/input" --output-dir "$T/out" --report "$T/rep.json" \
    > /dev/null 2> "$T/err" || fail "sweep: $(cat "$T/err")"
grep -q '"executed":[[:space:]]*10' "$T/rep.json" || fail "sweep did not run 10 nodes (1 loader + 3x3): $(cat "$T/rep.json")"
for w in 1 2 3; do [ -f "$T/out/sweep_${w}_00001_.png" ] || fail "sweep image $w missing"; done
# rerun with a cache: everything comes from it
"$SDFLOW_BIN" run "$T/sweep.lua" --cache "$T/c.db" --input-dir "$T/input" --output-dir "$T/out2" -q > /dev/null 2>&1
"$SDFLOW_BIN" run "$T/sweep.lua" --cache "$T/c.db" --input-dir "$T/input" --output-dir "$T/out2" --report "$T/rep2.json" \
    > /dev/null 2> "$T/err" || fail "sweep rerun: $(cat "$T/err")"
grep -q '"executed":[[:space:]]*0' "$T/rep2.json" || fail "sweep rerun executed nodes again"

# --- usage errors ---------------------------------------------------------------------------------
if "$SDFLOW_BIN" export "$T/sweep.lua" > /dev/null 2>&1; then fail "export without --lua/--json accepted"; fi

sd_test_end "lua CLI tests passed"
