# workflows/lora_extract_sd15 (JSON and Lua) end to end on random-weight
# checkpoints (no shared data needed): the "fine-tuned" model is sdflow synth
# seed 7, the base the default seed.
#   - the JSON and the Lua twin each write a LoRA under output/loras with
#     ComfyUI's counter (00001, then 00002), the same keys and shapes, and
#     values within float16 rounding of each other (one computation each);
#   - the extracted LoRA loads with LoraLoader on the base in
#     workflows/lora_sd15 with no key left unmatched or out, and changes the
#     sampled latent;
#   - rerun with the output cache: LoraSave is served from it while its file
#     is there, and runs again (00003) once the file is gone.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_lora_extract CheckpointLoaderSimple ModelMergeSubtract LoraSave LoraLoader
sd_test_tiny_sd1 "$T"
"$SDFLOW_BIN" synth --preset sd1-tiny --seed 7 --models-dir "$T/m2" > /dev/null || fail "synth --seed 7"
mv "$T/m2/checkpoints/sdflow-random-sd1-tiny.safetensors" "$T/models/checkpoints/tuned.safetensors" ||
    fail "no second checkpoint"
CK=sdflow-random-sd1-tiny.safetensors
common=(--models-dir "$T/models" --tokenizer-dir "$T/tok" --quiet --output-dir "$T/out"
    --set 1.ckpt_name=tuned.safetensors --set 2.ckpt_name=$CK --set 4.rank=8)
L="$T/out/loras"

"$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/lora_extract_sd15.json" --no-cache "${common[@]}" > "$T/json.out" \
    2> "$T/json.err" || fail "json: $(cat "$T/json.err")"
[ -s "$L/ComfyUI_extracted_lora_00001_.safetensors" ] || fail "the JSON workflow wrote no LoRA"
grep -q "ComfyUI_extracted_lora_00001_.safetensors" "$T/json.out" || fail "run did not list the saved LoRA"
"$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/lora_extract_sd15.lua" --no-cache "${common[@]}" > /dev/null \
    2> "$T/lua.err" || fail "lua: $(cat "$T/lua.err")"
[ -s "$L/ComfyUI_extracted_lora_00002_.safetensors" ] || fail "the Lua twin wrote no LoRA"
python3 - "$L/ComfyUI_extracted_lora_00001_.safetensors" "$L/ComfyUI_extracted_lora_00002_.safetensors" << 'PY' ||
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        assert v["dtype"] == "F16", (k, v["dtype"])
        s, e = v["data_offsets"]
        out[k] = (v["shape"], struct.unpack("<%de" % ((e - s) // 2), b[8 + n + s:8 + n + e]))
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b), "keys differ"
assert any(k.endswith(".lora_up.weight") for k in a) and any(k.endswith(".diff_b") for k in a), "no LoRA factors"
bad = 0
def close(x, y):
    return abs(x - y) <= 2.0 ** -10 * abs(y) + 2.0 ** -24
for k in a:
    (sa, va), (sb, vb) = a[k], b[k]
    assert sa == sb, (k, sa, sb)
    if k.endswith(".lora_down.weight"):
        continue
    if not k.endswith(".lora_up.weight"):
        bad += sum(not close(x, y) for x, y in zip(va, vb))
        continue
    # one float16 rounding apart, but a component (column j of up, row j of
    # down) may flip sign as a whole, which up @ down does not see
    d = k[:-len("lora_up.weight")] + "lora_down.weight"
    (_, da), (_, db) = a[d], b[d]
    r, n = sa[1], len(da) // sa[1]
    for j in range(r):
        col = range(j, len(va), r)
        f = -1.0 if sum(va[i] * vb[i] for i in col) < 0 else 1.0
        bad += sum(not close(va[i], f * vb[i]) for i in col)
        bad += sum(not close(da[i], f * db[i]) for i in range(j * n, (j + 1) * n))
assert bad == 0, "%d values differ" % bad
PY
    fail "the JSON and Lua LoRAs differ"

# ---- the extracted LoRA on the base ------------------------------------------------
mkdir -p "$T/models/loras"
cp "$L/ComfyUI_extracted_lora_00001_.safetensors" "$T/models/loras/extracted.safetensors"
lr=(--models-dir "$T/models" --tokenizer-dir "$T/tok" --quiet --no-cache --output-dir "$T/out2"
    --set 4.ckpt_name=$CK --set 5.width=64 --set 5.height=64 --set 3.steps=2)
"$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/lora_sd15.json" "${lr[@]}" --set 10.lora_name=extracted.safetensors \
    --dump "$T/with" > /dev/null 2> "$T/with.err" || fail "lora_sd15 with the extracted LoRA: $(cat "$T/with.err")"
grep -q "LoRA extracted" "$T/with.err" && fail "LoraLoader left keys out: $(grep "LoRA extracted" "$T/with.err")"
"$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/lora_sd15.json" "${lr[@]}" --set 10.lora_name=extracted.safetensors \
    --set 10.strength_model=0 --dump "$T/without" > /dev/null 2> "$T/without.err" || fail "lora_sd15 at strength 0"
[ -s "$T/with/3_0.safetensors" ] || fail "no latent dumped"
cmp -s "$T/with/3_0.safetensors" "$T/without/3_0.safetensors" && fail "the extracted LoRA changed nothing"

# ---- the output cache ---------------------------------------------------------------
cached=("${common[@]}" --cache "$T/cache.db")
"$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/lora_extract_sd15.json" "${cached[@]}" --report "$T/c1.json" \
    > /dev/null 2>&1 || fail "cached run 1"
"$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/lora_extract_sd15.json" "${cached[@]}" --report "$T/c2.json" \
    > /dev/null 2>&1 || fail "cached run 2"
[ "$(sd_test_status "$T/c2.json" 4)" = cached ] || fail "LoraSave not served from the cache"
rm -f "$L/ComfyUI_extracted_lora_00003_.safetensors"
"$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/lora_extract_sd15.json" "${cached[@]}" --report "$T/c3.json" \
    > /dev/null 2>&1 || fail "cached run 3"
[ "$(sd_test_status "$T/c3.json" 4)" = executed ] || fail "LoraSave not rerun when its file is gone"
[ -s "$L/ComfyUI_extracted_lora_00003_.safetensors" ] || fail "the rerun wrote no LoRA"

sd_test_end "LoRA extraction: JSON and Lua, loads back, cache follows the file"
