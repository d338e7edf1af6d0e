# --precision on `sdflow run`: f32 is the default; bf16 either computes (a
# build with the CPU bf16 path: oneDNN) or fails before any node runs with
# a message naming the option (a build without it), never a silent f32 run;
# the precision is part of the cache key, so an f32 result is not served to
# a bf16 run; an unknown precision is refused, and f16 too on the CPU.
# --vae-precision / --clip-precision change only the VAE / text-encoder
# nodes (and what reads their outputs). Needs the tiny SD1 checkpoint and a
# tokenizer; else exit 77.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_precision CheckpointLoaderSimple CLIPTextEncode EmptyLatentImage KSampler VAEDecode SaveImage
MODEL="$DATA/models/tiny-sd1.safetensors"
sd_test_need_path "$MODEL"
sd_test_need_path "$TOK" "tokenizer directory $TOK"

mkdir -p "$T/models/checkpoints"
ln -s "$MODEL" "$T/models/checkpoints/tiny-sd1.safetensors"

sed -e 's/v1-5-pruned-emaonly.safetensors/tiny-sd1.safetensors/' -e 's/"width": 512, "height": 512/"width": 64, "height": 64/' \
    -e 's/"steps": 20/"steps": 3/' "$SDFLOW_SOURCE_DIR/workflows/txt2img_sd15.json" > "$T/wf.json"

# run NAME [args...]: report in $T/NAME.json, stderr in $T/NAME.err, output in $T/NAME/
run() {
    local name=$1; shift
    mkdir -p "$T/$name"
    "$SDFLOW_BIN" run "$T/wf.json" --models-dir "$T/models" --tokenizer-dir "$TOK" --cache "$T/cache.db" \
        --output-dir "$T/$name" --report "$T/$name.json" --quiet "$@" 2> "$T/$name.err" > /dev/null
}
png_of() { find "$T/$1" -name '*.png' | head -1; }

run f32 || fail "f32 run: $(cat "$T/f32.err")"
[ "$(sd_test_status "$T/f32.json" 3)" = executed ] || fail "f32: KSampler not executed"

run unknown --precision f64 && fail "--precision f64 was accepted"
grep -q -- "--precision" "$T/unknown.err" || fail "--precision f64: message does not name the option: $(cat "$T/unknown.err")"
for opt in --precision --vae-precision --clip-precision; do
    run f16 --device cpu $opt f16 && fail "$opt f16 was accepted on the CPU"
    grep -q -- "$opt f16: the cpu backend of this build cannot compute in f16" "$T/f16.err" ||
        fail "$opt f16 on the CPU: message does not name the option and the backend: $(cat "$T/f16.err")"
done

if "$SDFLOW_BIN" version | grep -q 'dnnl=ON'; then
    run bf16 --precision bf16 || fail "bf16 run: $(cat "$T/bf16.err")"
    # Precision is in the key: nothing computed in f32 may be served here
    # (the loader and the latent are precision-free data but keyed alike).
    for id in 3 6 7 8; do
        [ "$(sd_test_status "$T/bf16.json" $id)" = executed ] || fail "bf16: node $id was not executed (served from the f32 run?)"
    done
    a=$(png_of f32) b=$(png_of bf16)
    [ -n "$a" ] && [ -n "$b" ] || fail "missing PNG outputs"
    cmp -s "$a" "$b" && fail "bf16 and f32 gave byte-identical images: bf16 did not round anything"
    run bf16_again --precision bf16 || fail "bf16 rerun: $(cat "$T/bf16_again.err")"
    [ "$(sd_test_count "$T/bf16_again.json" executed)" = 0 ] || fail "bf16 rerun: nodes re-executed instead of the cache"
    # only the VAE decode (8) and what saves it (9) are computed again (the
    # loader 4 too: its handles are never stored); the sampler is cached
    run vae_bf16 --vae-precision bf16 || fail "--vae-precision bf16 run: $(cat "$T/vae_bf16.err")"
    [ "$(sd_test_status "$T/vae_bf16.json" 3)" = cached ] || fail "--vae-precision bf16: KSampler not served from the f32 run"
    for id in 8 9; do
        [ "$(sd_test_status "$T/vae_bf16.json" $id)" = executed ] || fail "--vae-precision bf16: node $id not executed"
    done
    cmp -s "$(png_of f32)" "$(png_of vae_bf16)" && fail "--vae-precision bf16 gave the f32 image: the VAE did not round anything"
    # the text encoders (6, 7) and everything after them
    run clip_bf16 --clip-precision bf16 || fail "--clip-precision bf16 run: $(cat "$T/clip_bf16.err")"
    for id in 6 7 3 8 9; do
        [ "$(sd_test_status "$T/clip_bf16.json" $id)" = executed ] || fail "--clip-precision bf16: node $id not executed"
    done
else
    run bf16 --precision bf16 && fail "a build without oneDNN accepted --precision bf16"
    grep -q "oneDNN" "$T/bf16.err" || fail "bf16 without oneDNN: message does not say what is missing: $(cat "$T/bf16.err")"
    [ -f "$T/bf16.json" ] && [ "$(sd_test_status "$T/bf16.json" 3)" != absent ] && fail "bf16 without oneDNN: nodes ran"
fi

sd_test_end "OK"
