# sdflow-bench's workflow phase on a tiny workflow (the random SD1
# checkpoint `sdflow synth --preset sd1-tiny` writes, with its stand-in
# vocabulary: no reference data needed): the phase runs the workflow through
# `sdflow run`'s code, writes its picture, and its report has a wall time, a
# peak RSS > 0, the model file it opened with a size > 0, issue 21's verdict
# line and a per-node table. Values are not checked against any figure
# (benchmarks are not timed tests). Also: a workflow that fails is exit 1
# with "failed" in the row; the phase refuses to share a run with others; 66
# distinct model files (65 LoRAs) are counted once each, a file opened again
# after the 64 the report names included.
set -u
. "$(dirname "$0")/../cli/lib.sh"
: "${SDFLOW_BENCH_BIN:?set by ctest}"
sd_test_begin bench_workflow_smoke CheckpointLoaderSimple KSampler VAEDecode SaveImage
export SDFLOW_CACHE="$T/cache.db" # the file-hash memo of --no-cache: this test's own
sd_test_tiny_sd1 "$T"

"$SDFLOW_BENCH_BIN" --workflow "$T/tiny.json" --models-dir "$T/models" --tokenizer-dir "$T/tok" \
    --work-dir "$T/work" --threads 1 --set 3.steps=2 > "$T/out.md" 2> "$T/err" ||
    fail "the phase failed: $(tail -5 "$T/err")"
cat "$T/out.md"

# the row: | workflow tiny.json (N nodes executed) | secs | min | executor s | peak | files | diff | sampler |
row=$(grep '^| workflow tiny.json' "$T/out.md")
[ -n "$row" ] || fail "no workflow row"
field() { awk -F'|' -v k="$1" '{ gsub(/^ +| +$/, "", $k); print $k }' <<< "$row"; }
positive() { awk -v v="$1" 'BEGIN { exit !(v + 0 > 0) }'; }
number() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
number "$(field 3)" || fail "wall time '$(field 3)' is not a number"
number "$(field 5)" || fail "executor time '$(field 5)' is not a number"
peak=$(field 6) files=$(field 7)
[[ "$peak" =~ ^[0-9.]+\ GiB$ ]] && positive "${peak% GiB}" || fail "peak RSS '$peak' is not a size > 0"
# the checkpoint is ~40 MB: 0.04 GiB with two decimals
[[ "$files" =~ ^[0-9.]+\ GiB$ ]] && positive "${files% GiB}" || fail "model files '$files' is not a size > 0"
[[ "$(field 2)" =~ "nodes executed" ]] || fail "no executed node count in '$(field 2)'"
grep -q "^- model files the loaders opened (1, .*checkpoints/sdflow-random-sd1-tiny.safetensors" "$T/out.md" ||
    fail "the opened checkpoint is not listed"
grep -Eq '^- peak RSS <= files \+ 3 GiB: (met|not met) ' "$T/out.md" || fail "no verdict line"
grep -q '^| 3 | KSampler | ' "$T/out.md" || fail "no per-node row for the KSampler"
# --set reaches the run: the KSampler ran 2 steps, not the file's 3
grep -Eq '^\| 3 \| KSampler \| .*steps/s \([^)]*, 2 steps\) \| [0-9.]+ GiB \| [0-9.]+ GiB \|$' "$T/out.md" || fail "no KSampler row with steps/s of 2 steps and RSS"
grep -q 'n/a: no PyTorch reference for a whole workflow' "$T/out.md" || fail "no PyTorch n/a line"
ls "$T/work/workflow-output/"*.png > /dev/null 2>&1 || fail "the workflow's picture was not written"
grep -q 'KSampler' "$T/err" || fail "no node progress on stderr"

# a workflow that fails: exit 1, the row says so
sed 's/sdflow-random-sd1-tiny.safetensors/missing.safetensors/' "$T/tiny.json" > "$T/bad.json"
"$SDFLOW_BENCH_BIN" --workflow "$T/bad.json" --models-dir "$T/models" --tokenizer-dir "$T/tok" \
    --work-dir "$T/work" --threads 1 > "$T/bad.md" 2> "$T/bad.err"
rc=$?
[ $rc -eq 1 ] || fail "a failing workflow exited $rc, want 1"
grep -q '^| workflow bad.json .* | failed |' "$T/bad.md" || fail "the failed run's row does not say failed"
grep -q '^- run 1 failed: ' "$T/bad.md" || fail "the failure is not reported"

# every distinct model file counted once, past the 64 the report names: the
# checkpoint and 65 one-matrix LoRAs chained with LoraLoaderModelOnly, the last
# loader opening the 65th LoRA again (beyond the named 64: it once counted twice)
python3 - "$T" <<'PY' || fail "could not write the LoRA chain"
import json, os, struct, sys
t = sys.argv[1]
os.makedirs(t + "/models/loras", exist_ok=True)
for i in range(65):  # zero lora_down/up on the tiny UNet's time_embed.0 (32 -> 128)
    shapes = {"lora_unet_time_embed_0.lora_down.weight": [1, 32], "lora_unet_time_embed_0.lora_up.weight": [128, 1]}
    hdr, off = {}, 0
    for k, s in shapes.items():
        hdr[k] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + 4 * s[0] * s[1]]}
        off += 4 * s[0] * s[1]
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    open("%s/models/loras/l%02d.safetensors" % (t, i), "wb").write(struct.pack("<Q", len(h)) + h + bytes(off))
wf = json.load(open(t + "/tiny.json"))
prev = ["4", 0]
for i, n in enumerate(["l%02d.safetensors" % i for i in range(65)] + ["l64.safetensors"]):
    wf[str(100 + i)] = {"class_type": "LoraLoaderModelOnly",
                        "inputs": {"model": prev, "lora_name": n, "strength_model": 1.0}}
    prev = [str(100 + i), 0]
wf["3"]["inputs"]["model"] = prev
json.dump(wf, open(t + "/many.json", "w"))
PY
"$SDFLOW_BENCH_BIN" --workflow "$T/many.json" --models-dir "$T/models" --tokenizer-dir "$T/tok" \
    --work-dir "$T/work" --threads 1 --set 3.steps=1 > "$T/many.md" 2> "$T/many.err" ||
    fail "the LoRA chain failed: $(tail -3 "$T/many.err")"
grep -Eq '^- model files the loaders opened \(66, .*loras/l62\.safetensors \([0-9.]+ GiB\), 2 more$' "$T/many.md" ||
    fail "66 distinct files, 64 named and 2 more, expected: $(grep '^- model files' "$T/many.md" | cut -c1-100)...$(grep -o ', [0-9]* more' "$T/many.md")"

# the phase runs alone
"$SDFLOW_BENCH_BIN" --workflow "$T/tiny.json" --phases workflow,unet > /dev/null 2> "$T/mix.err"
rc=$?
[ $rc -eq 2 ] || fail "workflow with another phase exited $rc, want 2"
sd_test_end "bench.workflow_smoke passed"
