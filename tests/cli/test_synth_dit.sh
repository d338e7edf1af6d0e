# `sdflow synth --preset sd35-medium-tiny / zimage-turbo-tiny` (the code
# path of the real-size sd35-medium and zimage-turbo presets at tiny
# widths) writes the files the SD3.5 and Z-Image-Turbo workflows load, and
# they run under their real names (links), unmodified but for --set of
# sizes and steps:
#   - sd35-medium-tiny: checkpoints/sdflow-random-sd35-medium-tiny (MMDiT-X
#     + VAE, as Stability's sd3.5_medium.safetensors), text_encoders/
#     sdflow-random-tiny-{clip_l,clip_g,t5xxl_fp16}, vae/sdflow-random-tiny-
#     sd3_vae; workflows/txt2img_sd35_medium.json (UNETLoader of the
#     checkpoint, VAELoader, TripleCLIPLoader) and ComfyUI's
#     sd3.5_text_encoders_example (CheckpointLoaderSimple's MODEL and VAE +
#     TripleCLIPLoader; it names sd3.5_large.safetensors: the Medium file is
#     linked under that name) run, and the log names the MMDiT-X block;
#   - zimage-turbo-tiny: diffusion_models/sdflow-random-zimage-turbo-tiny,
#     text_encoders/sdflow-random-tiny-qwen_3_4b, vae/sdflow-random-tiny-ae;
#     workflows/txt2img_zimage_turbo.json and ComfyUI's
#     z_image_turbo_example run (--qwen3-4b-width 64: no file says which
#     width is Qwen3-4B's), and the log names the NextDiT;
#   - the files shared with Flux (T5, CLIP-L, ae) are kept, not rewritten,
#     when flux-dev-tiny runs after them; every file says it is random.
# Needs the CLIP vocabulary, the Flux set's T5 tokenizer.json and the
# Z-Image set's Qwen2 tokenizer files.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_synth_dit UNETLoader CheckpointLoaderSimple TripleCLIPLoader CLIPLoader VAELoader \
    ModelSamplingAuraFlow ConditioningZeroOut EmptySD3LatentImage KSampler
sd_test_need_path "$TOK/vocab.json" "the CLIP vocabulary"
sd_test_need_path "$DATA/flux/tokenizer/tokenizer.json" "the Flux set's T5 tokenizer"
sd_test_need_path "$DATA/zimage/tokenizer/vocab.json" "the Z-Image set's Qwen2 tokenizer"
EX="$SDFLOW_SOURCE_DIR/tests/data/comfyui_examples"
M="$T/models"

for p in sd35-medium-tiny zimage-turbo-tiny; do
    "$SDFLOW_BIN" synth --preset $p --models-dir "$M" > "$T/synth-$p.out" 2>&1 ||
        fail "synth $p: $(tail -2 "$T/synth-$p.out")"
    grep -q RANDOM "$T/synth-$p.out" || fail "synth $p does not say the weights are random"
done
for f in checkpoints/sdflow-random-sd35-medium-tiny text_encoders/sdflow-random-tiny-clip_l \
    text_encoders/sdflow-random-tiny-clip_g text_encoders/sdflow-random-tiny-t5xxl_fp16 \
    vae/sdflow-random-tiny-sd3_vae diffusion_models/sdflow-random-zimage-turbo-tiny \
    text_encoders/sdflow-random-tiny-qwen_3_4b vae/sdflow-random-tiny-ae; do
    [ -f "$M/$f.safetensors" ] || fail "synth wrote no $f.safetensors"
done
"$SDFLOW_BIN" synth --preset flux-dev-tiny --models-dir "$M" > "$T/synth-flux.out" 2>&1 || fail "synth flux-dev-tiny"
for f in t5xxl_fp16 clip_l ae; do
    grep -q "^kept .*sdflow-random-tiny-$f.safetensors" "$T/synth-flux.out" ||
        fail "flux-dev-tiny did not keep the shared $f file: $(cat "$T/synth-flux.out")"
done

# the real names, as links
ln -s ../checkpoints/sdflow-random-sd35-medium-tiny.safetensors "$M/diffusion_models/sd3.5_medium.safetensors"
ln -s sdflow-random-sd35-medium-tiny.safetensors "$M/checkpoints/sd3.5_large.safetensors"
ln -s sdflow-random-tiny-sd3_vae.safetensors "$M/vae/sd3_vae.safetensors"
for f in clip_l clip_g t5xxl_fp16; do ln -s sdflow-random-tiny-$f.safetensors "$M/text_encoders/$f.safetensors"; done
ln -s sdflow-random-zimage-turbo-tiny.safetensors "$M/diffusion_models/z_image_turbo_bf16.safetensors"
ln -s sdflow-random-tiny-qwen_3_4b.safetensors "$M/text_encoders/qwen_3_4b.safetensors"
ln -s sdflow-random-tiny-ae.safetensors "$M/vae/ae.safetensors"
mkdir -p "$T/tok/t5_tokenizer" "$T/tok/qwen25_tokenizer"
for f in vocab.json merges.txt; do ln -s "$TOK/$f" "$T/tok/$f"; done
ln -s "$DATA/flux/tokenizer/tokenizer.json" "$T/tok/t5_tokenizer/tokenizer.json"
for f in "$DATA/zimage/tokenizer"/*; do ln -s "$f" "$T/tok/qwen25_tokenizer/"; done

# run NAME FILE ARGS...: sdflow run, small; a PNG and the log in $T/NAME.err
run() {
    local name=$1 file=$2
    shift 2
    "$SDFLOW_BIN" run "$file" --models-dir "$M" --tokenizer-dir "$T/tok" --no-cache --output-dir "$T/out/$name" \
        "$@" > "$T/$name.out" 2> "$T/$name.err" || { fail "$name: $(tail -3 "$T/$name.err")"; return 1; }
    ls "$T/out/$name"/*.png > /dev/null 2>&1 || { fail "$name: no PNG written"; return 1; }
    grep -q RANDOM "$T/$name.err" || fail "$name: the run does not warn that the model is random"
    echo "  $name: ran"
}

SD3=(--set 3.steps=2 --set 53.width=64 --set 53.height=48)
run sd35_medium "$SDFLOW_SOURCE_DIR/workflows/txt2img_sd35_medium.json" "${SD3[@]}" &&
    { grep -q "sd3 MMDiT, hidden 128, 2 joint blocks (1 MMDiT-X)" "$T/sd35_medium.err" ||
        fail "sd35_medium: the log does not name the tiny MMDiT-X: $(grep -i mmdit "$T/sd35_medium.err")"; }
run sd35_example "$EX/sd3/sd3.5_text_encoders_example.api.json" "${SD3[@]}" &&
    { grep -q "(1 MMDiT-X)" "$T/sd35_example.err" || fail "sd35_example: no MMDiT-X in the log"; }
ZI=(--set 3.steps=2 --set 13.width=64 --set 13.height=48 --qwen3-4b-width 64)
run zimage "$SDFLOW_SOURCE_DIR/workflows/txt2img_zimage_turbo.json" "${ZI[@]}" &&
    { grep -q "zimage NextDiT, dim 64" "$T/zimage.err" ||
        fail "zimage: the log does not name the tiny NextDiT: $(grep -i nextdit "$T/zimage.err")"; }
run zimage_example "$EX/z_image/z_image_turbo_example.api.json" "${ZI[@]}"

sd_test_end "ok: the synthesized tiny SD3.5 and Z-Image files ran our and ComfyUI's example workflows"
