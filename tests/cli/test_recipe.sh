# Recipes end to end: `sdflow run --lock` writes the workflow with the SHA-256
# and size of every file it read, the seeds and sdflow's version; running the
# recipe in separate processes, without the cache, with a fresh cache and with
# a warm one, gives byte-identical PNGs; the PNGs carry the hashes; a changed
# model or input fails the check (from the recipe and from the PNG) before
# anything runs; --relock accepts the change. The txt2img part uses the tiny
# SD1 checkpoint; without it (or the vocabulary) the rest runs and the test
# then skips (a partial run is not a pass; a failure under
# SDFLOW_REQUIRE_DATA=1).
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_recipe LoadImage ImageInvert SaveImage


mkdir -p "$T/input" "$T/models/checkpoints"
printf '%s' 'iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAYAAACddGYaAAAAHUlEQVR4nGNgYDjxP4DhBMMCIM3AUAHkVAA5QBoAiIwL9aAmuykAAAAASUVORK5CYII=' \
    | base64 -d > "$T/input/in.png"

MODEL="$DATA/models/tiny-sd1.safetensors"
sd_test_need_nodes CheckpointLoaderSimple CLIPTextEncode EmptyLatentImage KSampler VAEDecode
t2i=1
[ -f "$MODEL" ] && [ -d "$TOK" ] || t2i=0
if [ $t2i = 1 ]; then
    cp "$MODEL" "$T/models/checkpoints/tiny.safetensors"
    cat > "$T/wf.json" <<'JSON'
{
  "1": {"class_type": "LoadImage", "inputs": {"image": "in.png"}},
  "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
  "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "inv"}},
  "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}},
  "5": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["4", 1], "text": "a red fox"}},
  "6": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["4", 1], "text": ""}},
  "7": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
  "8": {"class_type": "KSampler", "inputs": {"model": ["4", 0], "positive": ["5", 0], "negative": ["6", 0],
        "latent_image": ["7", 0], "seed": 123456789012, "steps": 3, "cfg": 7.5,
        "sampler_name": "euler_ancestral", "scheduler": "normal", "denoise": 1.0}},
  "9": {"class_type": "VAEDecode", "inputs": {"samples": ["8", 0], "vae": ["4", 2]}},
  "10": {"class_type": "SaveImage", "inputs": {"images": ["9", 0], "filename_prefix": "t2i"}}
}
JSON
else
    echo "note: tiny-sd1 or its nodes are missing: checking recipes on the image nodes only"
    cat > "$T/wf.json" <<'JSON'
{
  "1": {"class_type": "LoadImage", "inputs": {"image": "in.png"}},
  "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
  "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "inv"}}
}
JSON
fi

run() { # run OUTDIR ARGS...
    local out="$1"
    shift
    mkdir -p "$T/$out"
    "$SDFLOW_BIN" run "$@" --input-dir "$T/input" --models-dir "$T/models" --tokenizer-dir "$TOK" \
        --output-dir "$T/$out" --temp-dir "$T/temp"
}

# --- lock -------------------------------------------------------------------------
run lock "$T/wf.json" --lock "$T/r.json" --no-cache > /dev/null 2> "$T/err" || fail "--lock run: $(cat "$T/err")"
[ -f "$T/r.json" ] || fail "--lock wrote no recipe"
grep -q '"sdflow_recipe"' "$T/r.json" || fail "recipe lacks sdflow_recipe"
grep -q '"prompt"' "$T/r.json" || fail "recipe lacks the prompt"
img_hash=$(sha256sum "$T/input/in.png" | cut -d' ' -f1)
grep -q "$img_hash" "$T/r.json" || fail "recipe lacks the input image's sha256"
grep -q "\"size\":[[:space:]]*$(stat -c %s "$T/input/in.png")" "$T/r.json" || fail "recipe lacks the input image's size"
version=$("$SDFLOW_BIN" version | awk '{print $2}')
grep -q "\"version\":[[:space:]]*\"$version\"" "$T/r.json" || fail "recipe lacks the sdflow version $version"
grep -q '"build"' "$T/r.json" || fail "recipe lacks the build options"
if [ $t2i = 1 ]; then
    model_hash=$(sha256sum "$T/models/checkpoints/tiny.safetensors" | cut -d' ' -f1)
    grep -q "$model_hash" "$T/r.json" || fail "recipe lacks the checkpoint's sha256"
    grep -q '"seed":[[:space:]]*123456789012' "$T/r.json" || fail "recipe lacks the seed"
fi
cp "$T/r.json" "$T/r.orig.json"

# --- same recipe, separate processes: no cache, fresh cache, warm cache ------------
run a "$T/r.json" --no-cache > /dev/null 2> "$T/err" || fail "recipe run A: $(cat "$T/err")"
run b "$T/r.json" --cache "$T/c.db" > /dev/null 2> "$T/err" || fail "recipe run B: $(cat "$T/err")"
rm -f "$T"/b/*.png # so the output nodes run again, on top of cached results
run b "$T/r.json" --cache "$T/c.db" > /dev/null 2> "$T/errc" || fail "recipe run C: $(cat "$T/errc")"
grep -Eq 'done: [0-9]+ executed, [1-9][0-9]* cached' "$T/errc" || fail "warm-cache run used no cache: $(cat "$T/errc")"
cmp -s "$T/r.json" "$T/r.orig.json" || fail "a plain recipe run rewrote the recipe"
# The same recipe into another folder, all of it cached: the images still
# arrive there, under ComfyUI's names, and the run says they came from the cache.
run b2 "$T/r.json" --cache "$T/c.db" > /dev/null 2> "$T/errd" || fail "recipe run D: $(cat "$T/errd")"
grep -Eq 'done: 0 executed, [1-9][0-9]* cached' "$T/errd" || fail "run D into a new folder executed something: $(cat "$T/errd")"
grep -q 'SaveImage #3 cached, files written again' "$T/errd" || fail "run D does not say the image came from the cache: $(cat "$T/errd")"
for prefix in inv $([ $t2i = 1 ] && echo t2i); do
    ref="$T/lock/${prefix}_00001_.png"
    [ -f "$ref" ] || { fail "no $prefix PNG from the --lock run"; continue; }
    for f in "$T/a/${prefix}_00001_.png" "$T/b/${prefix}_00001_.png" "$T/b2/${prefix}_00001_.png"; do
        [ -f "$f" ] || { fail "missing $f"; continue; }
        cmp -s "$ref" "$f" || fail "$f differs from the --lock run's PNG"
    done
    grep -aq "sdflow_recipe" "$ref" || fail "$prefix PNG has no sdflow_recipe chunk"
    grep -aq "$img_hash" "$ref" || fail "$prefix PNG lacks the file hashes"
done

# --- the PNG is a recipe too --------------------------------------------------------
png="$T/lock/inv_00001_.png"
run frompng "$png" --no-cache > /dev/null 2> "$T/err" || fail "run from PNG: $(cat "$T/err")"
[ -f "$T/frompng/inv_00001_.png" ] && cmp -s "$png" "$T/frompng/inv_00001_.png" ||
    fail "rerun from the PNG did not give the same PNG"

# --- a changed file fails before anything runs --------------------------------------
if [ $t2i = 1 ]; then changed="$T/models/checkpoints/tiny.safetensors"; name=tiny.safetensors
else changed="$T/input/in.png"; name=in.png; fi
cp "$changed" "$T/saved"
printf 'x' >> "$changed"
if run bad "$T/r.json" --no-cache > /dev/null 2> "$T/err"; then fail "recipe ran with a changed $name"; fi
grep -q "$name differs" "$T/err" || fail "the error does not name $name: $(cat "$T/err")"
[ -z "$(ls "$T/bad" 2> /dev/null)" ] || fail "something ran despite the failed check"
if run bad "$png" --no-cache > /dev/null 2> "$T/err"; then fail "PNG recipe ran with a changed $name"; fi
grep -q "$name differs" "$T/err" || fail "the PNG check does not name $name: $(cat "$T/err")"
# the workflow itself (no recipe) still runs
[ $t2i = 1 ] || { run plain "$T/wf.json" --no-cache > /dev/null 2> "$T/err" || fail "plain run: $(cat "$T/err")"; }

# --- --relock accepts the current files ----------------------------------------------
if [ $t2i = 1 ]; then cp "$T/saved" "$changed"; printf 'y' >> "$T/input/in.png"; fi # a loadable model again
run relock "$T/r.json" --relock --no-cache > /dev/null 2> "$T/err" || fail "--relock: $(cat "$T/err")"
cmp -s "$T/r.json" "$T/r.orig.json" && fail "--relock did not update the recipe"
grep -q "$(sha256sum "$T/input/in.png" | cut -d' ' -f1)" "$T/r.json" || fail "--relock did not record the new hash"
run again "$T/r.json" --no-cache > /dev/null 2> "$T/err" || fail "run after --relock: $(cat "$T/err")"
if run x "$T/wf.json" --relock --no-cache > /dev/null 2> "$T/err"; then fail "--relock on a plain workflow accepted"; fi

[ $t2i = 1 ] || sd_test_skip_data "the txt2img half did not run: $MODEL or $TOK is absent"
sd_test_end "recipe tests passed"
