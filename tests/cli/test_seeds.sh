# Seeds up to 0xffffffffffffffff (ComfyUI's KSampler max) keep every digit
# through workflow JSON, --set, Lua export/import, recipes and the PNG
# prompt chunk, and reach the torch generator unchanged: torch seeds its
# mt19937 with the low 32 bits of the seed modulo 2^64, so 2^64-1 must give
# the noise of 2^32-1 and 2^63 that of 0, while 2^64-2 differs. Out-of-range
# and negative seeds are validation errors naming the node and input.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_seeds CheckpointLoaderSimple CLIPTextEncode EmptyLatentImage KSampler VAEDecode SaveImage
CKPT="$DATA/models/tiny-sd1.safetensors"
VOCAB="$DATA/../data/clip"
sd_test_need_path "$CKPT"
sd_test_need_path "$VOCAB" "tokenizer $VOCAB"

mkdir -p "$T/models/checkpoints" "$T/output"
ln -s "$CKPT" "$T/models/checkpoints/tiny-sd1.safetensors"
MAX=18446744073709551615

cat > "$T/wf.json" <<J
{"4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny-sd1.safetensors"}},
 "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "a cat", "clip": ["4", 1]}},
 "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
 "3": {"class_type": "KSampler", "inputs": {"seed": $MAX, "steps": 1, "cfg": 7, "sampler_name": "euler",
       "scheduler": "normal", "denoise": 1, "model": ["4", 0], "positive": ["6", 0],
       "negative": ["6", 0], "latent_image": ["5", 0]}},
 "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
 "9": {"class_type": "SaveImage", "inputs": {"images": ["8", 0], "filename_prefix": "seed"}}}
J

# run NAME WORKFLOW [args]: dumps into $T/NAME, the written files in $T/NAME.files
run() {
    local name=$1
    shift
    "$SDFLOW_BIN" run "$@" --no-cache --quiet --models-dir "$T/models" --tokenizer-dir "$VOCAB" \
        --output-dir "$T/output" --dump "$T/$name" > "$T/$name.files" 2> "$T/$name.err"
}
same() { cmp -s "$T/$1/3_0.safetensors" "$T/$2/3_0.safetensors"; }

run max "$T/wf.json" || fail "seed 2^64-1: $(cat "$T/max.err")"
[ -f "$T/max/3_0.safetensors" ] || fail "no KSampler dump"
run low32 "$T/wf.json" --set 3.seed=4294967295 || fail "seed 2^32-1: $(cat "$T/low32.err")"
same max low32 || fail "seed 2^64-1 and 2^32-1 must give the same noise (torch uses the low 32 bits)"
run maxm1 "$T/wf.json" --set 3.seed=18446744073709551614 || fail "seed 2^64-2: $(cat "$T/maxm1.err")"
same max maxm1 && fail "seeds 2^64-1 and 2^64-2 gave the same result"
run p63 "$T/wf.json" --set 3.seed=9223372036854775808 || fail "seed 2^63: $(cat "$T/p63.err")"
run zero "$T/wf.json" --set 3.seed=0 || fail "seed 0: $(cat "$T/zero.err")"
same p63 zero || fail "seed 2^63 must give the noise of seed 0"
run set_max "$T/wf.json" --set 3.seed=1 --set "3.seed=$MAX" || fail "--set seed=2^64-1: $(cat "$T/set_max.err")"
same max set_max || fail "--set seed=2^64-1 differs from the JSON literal"

# The PNG carries every digit and reruns to the same result.
png=$(head -1 "$T/max.files")
[ -f "$png" ] || fail "no PNG written"
grep -aq "\"seed\": *$MAX" "$png" || fail "the PNG prompt chunk lost digits of the seed"
run png "$png" || fail "rerun of the PNG: $(cat "$T/png.err")"
same max png || fail "rerun of the PNG changed the result"

# Lua: export prints the 64 bits exactly, import and run keep them; a string of
# digits works too, a rounded decimal literal is refused with advice.
"$SDFLOW_BIN" export --lua "$T/wf.json" > "$T/wf.lua" 2> "$T/export.err" || fail "export --lua: $(cat "$T/export.err")"
grep -q "seed = 0xffffffffffffffff" "$T/wf.lua" || fail "export --lua: $(grep seed "$T/wf.lua")"
"$SDFLOW_BIN" export --json "$T/wf.lua" > "$T/back.json" || fail "export --json"
grep -q "\"seed\":[[:space:]]*$MAX\b" "$T/back.json" || fail "JSON -> Lua -> JSON lost the seed: $(grep seed "$T/back.json")"
run lua "$T/wf.lua" || fail "Lua run: $(cat "$T/lua.err")"
same max lua || fail "the exported Lua gave another result"
sed "s/seed = 0xffffffffffffffff[^,]*/seed = \"$MAX\"/" "$T/wf.lua" > "$T/str.lua"
run str "$T/str.lua" || fail "Lua seed as a string: $(cat "$T/str.lua.err" 2> /dev/null; cat "$T/str.err")"
same max str || fail "Lua seed as a string of digits gave another result"
sed "s/seed = 0xffffffffffffffff[^,]*/seed = $MAX/" "$T/wf.lua" > "$T/dec.lua"
run dec "$T/dec.lua" && fail "a rounded Lua decimal seed was accepted"
grep -q "hex" "$T/dec.err" || fail "rounded Lua seed: unclear error: $(cat "$T/dec.err")"

# Recipes: the lock keeps the digits (workflow and seeds) and its run agrees.
"$SDFLOW_BIN" run "$T/wf.json" --lock "$T/recipe.json" --no-cache --quiet --models-dir "$T/models" \
    --tokenizer-dir "$VOCAB" --output-dir "$T/output" > /dev/null 2> "$T/lock.err" || fail "--lock: $(cat "$T/lock.err")"
[ "$(grep -o "$MAX" "$T/recipe.json" | wc -l)" -ge 2 ] || fail "recipe lost digits of the seed"
run recipe "$T/recipe.json" || fail "recipe run: $(cat "$T/recipe.err")"
same max recipe || fail "the recipe gave another result"

# Out of range: named node and input, nothing run.
run big "$T/wf.json" --set 3.seed=18446744073709551616
[ $? -eq 1 ] || fail "seed 2^64 must fail validation"
grep -q "node 3 (KSampler) input 'seed': value_bigger_than_max: value 18446744073709551616 bigger than max of $MAX" \
    "$T/big.err" || fail "seed 2^64: $(cat "$T/big.err")"
run neg "$T/wf.json" --set 3.seed=-1
[ $? -eq 1 ] || fail "seed -1 must fail validation (ComfyUI's min is 0)"
grep -q "input 'seed': value_smaller_than_min" "$T/neg.err" || fail "seed -1: $(cat "$T/neg.err")"

sd_test_end "seeds ok"
