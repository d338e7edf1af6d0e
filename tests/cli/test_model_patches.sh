# The model-patch examples through `sdflow run` with the output cache, on
# random-weight checkpoints (no shared data needed):
#   - workflows/vpred_zsnr_sd15: changing ModelSamplingDiscrete's sampling or
#     RescaleCFG's multiplier reruns the sampler (the patch is part of what
#     the cache keys see) while the text encodings come from the cache;
#     going back to the first settings serves the first latent from it;
#     ModelSamplingFlux in its place: its width changes the latent and reruns
#     the sampler, the first settings come from the cache again;
#   - workflows/merge_sd15: at ratio 1 the second checkpoint does not matter
#     (the same latent whichever model2 is), at 0.6 it does; the merge
#     nodes' outputs are never stored (they hold a MODEL / CLIP).
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_model_patches ModelSamplingDiscrete ModelSamplingFlux RescaleCFG ModelMergeSimple CLIPMergeSimple
sd_test_tiny_sd1 "$T"
"$SDFLOW_BIN" synth --preset sd1-tiny --seed 7 --models-dir "$T/m2" > /dev/null || fail "synth --seed 7"
mv "$T/m2/checkpoints/sdflow-random-sd1-tiny.safetensors" "$T/models/checkpoints/other.safetensors" ||
    fail "no second checkpoint"
CK=sdflow-random-sd1-tiny.safetensors
common=(--models-dir "$T/models" --tokenizer-dir "$T/tok" --quiet --output-dir "$T/out" --cache "$T/cache.db"
    --set 5.width=64 --set 5.height=64 --set 3.steps=2)

# run NAME WORKFLOW ARGS...: report in $T/NAME.json, dump in $T/NAME/
run() {
    local name=$1 wf=$2
    shift 2
    "$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/$wf.json" "${common[@]}" --report "$T/$name.json" \
        --dump "$T/$name" "$@" > /dev/null 2> "$T/$name.err" || fail "$name: $(cat "$T/$name.err")"
}
latent() { cat "$T/$1/3_0.safetensors" 2> /dev/null | sha256sum | cut -c1-64; }

# ---- ModelSamplingDiscrete / RescaleCFG ---------------------------------------------
V=(--set 4.ckpt_name=$CK)
run v1 vpred_zsnr_sd15 "${V[@]}"
run eps vpred_zsnr_sd15 "${V[@]}" --set 10.sampling=eps
run mult vpred_zsnr_sd15 "${V[@]}" --set 11.multiplier=0.3
run v2 vpred_zsnr_sd15 "${V[@]}"
[ -s "$T/v1/3_0.safetensors" ] || fail "no latent dumped"
[ "$(latent v1)" != "$(latent eps)" ] || fail "sampling eps gave the v_prediction latent"
[ "$(latent v1)" != "$(latent mult)" ] || fail "RescaleCFG multiplier 0.3 gave the 0.7 latent"
[ "$(latent v1)" = "$(latent v2)" ] || fail "the same settings gave another latent"
for r in eps mult; do
    [ "$(sd_test_status "$T/$r.json" 3)" = executed ] || fail "$r: KSampler not rerun ($(sd_test_status "$T/$r.json" 3))"
    [ "$(sd_test_status "$T/$r.json" 6)" = cached ] || fail "$r: the text encode was not cached"
done
[ "$(sd_test_status "$T/v2.json" 3)" = cached ] || fail "v2: KSampler not served from the cache"

# ---- ModelSamplingFlux: the same workflow with node 10 replaced ---------------------------
python3 - "$SDFLOW_SOURCE_DIR/workflows/vpred_zsnr_sd15.json" "$T/flux_patch.json" << 'PY' || fail "no flux workflow"
import json, sys
wf = json.load(open(sys.argv[1]))
wf["10"] = {"class_type": "ModelSamplingFlux", "inputs": {"model": ["4", 0], "max_shift": 1.15,
            "base_shift": 0.5, "width": 1024, "height": 1024}}
json.dump(wf, open(sys.argv[2], "w"))
PY
runf() {
    local name=$1
    shift
    "$SDFLOW_BIN" run "$T/flux_patch.json" "${common[@]}" "${V[@]}" --report "$T/$name.json" --dump "$T/$name" "$@" \
        > /dev/null 2> "$T/$name.err" || fail "$name: $(cat "$T/$name.err")"
}
runf f1
runf f512 --set 10.width=512
runf f1b
[ -s "$T/f1/3_0.safetensors" ] || fail "no latent dumped with ModelSamplingFlux"
[ "$(latent f1)" != "$(latent v1)" ] || fail "ModelSamplingFlux gave the ModelSamplingDiscrete latent"
[ "$(latent f1)" != "$(latent f512)" ] || fail "ModelSamplingFlux width 512 gave the 1024 latent"
[ "$(sd_test_status "$T/f512.json" 3)" = executed ] || fail "f512: KSampler not rerun"
[ "$(sd_test_status "$T/f1b.json" 3)" = cached ] || fail "f1b: KSampler not served from the cache"
[ "$(latent f1)" = "$(latent f1b)" ] || fail "ModelSamplingFlux: the same settings gave another latent"

# ---- merges -------------------------------------------------------------------------
M=(--set 4.ckpt_name=$CK --set 11.ckpt_name=other.safetensors)
run r1 merge_sd15 "${M[@]}" --set 12.ratio=1 --set 13.ratio=1
run r1self merge_sd15 --set 4.ckpt_name=$CK --set 11.ckpt_name=$CK --set 12.ratio=1 --set 13.ratio=1
run r06 merge_sd15 "${M[@]}"
[ -s "$T/r1/3_0.safetensors" ] || fail "no merged latent dumped"
[ "$(latent r1)" = "$(latent r1self)" ] || fail "ratio 1: model2 changed the result"
[ "$(latent r1)" != "$(latent r06)" ] || fail "ratio 0.6 gave the ratio 1 latent"
[ "$(sd_test_status "$T/r06.json" 3)" = executed ] || fail "r06: KSampler not rerun"

sd_test_end "model patches: cache keys follow the patches, merges as expected"
