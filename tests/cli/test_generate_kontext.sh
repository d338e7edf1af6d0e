# `sdflow generate --reference`: a Flux Kontext edit from the command line,
# with the Flux reference set's tiny files under the names people use (the
# tiny dev model stands in for flux1-dev-kontext_fp8_scaled: a Kontext file
# has FLUX.1-dev's keys):
#   - the graph is ComfyUI's Kontext example (workflows/edit_flux_kontext
#     and ComfyUI_examples' flux_kontext_example, compared node by node: ids,
#     class types, inputs, links, and every setting the user did not choose);
#     the latent is the size FluxKontextImageScale makes of the picture (run
#     here through the node itself) unless -W / -H say otherwise;
#   - more --reference pictures chain their own ReferenceLatent, the guider
#     takes the last; --reference-method adds the method node; a single-file
#     checkpoint replaces the three loaders;
#   - the run saves a PNG of the asked size, the bytes `sdflow run` of the
#     printed graph saves;
#   - errors name the option and the file: a model that is not Flux dev
#     (SD1, SD3, Flux schnell), the Kontext diffusion model given as -m, a
#     missing or non-PNG picture, options the Kontext graph has no place for.
# Needs the Flux reference set (and the SD3 set's single file), the CLIP
# vocabulary and python3.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_generate_kontext UNETLoader DualCLIPLoader VAELoader CheckpointLoaderSimple FluxGuidance \
    EmptySD3LatentImage ModelSamplingFlux SamplerCustomAdvanced BasicGuider ReferenceLatent FluxKontextImageScale \
    FluxKontextMultiReferenceLatentMethod
FLUX="$DATA/flux"
sd_test_need_path "$FLUX/manifest.json" "the Flux reference set ($FLUX)"
SD3="$DATA/sd3/models/tiny-sd3.5_medium_incl_clips_t5xxlfp8.safetensors" # refused: not Flux
sd_test_need_path "$SD3" "the SD3 reference set's single file"
sd_test_need_path "$TOK/vocab.json" "CLIP vocabulary $TOK"
sd_test_need_cmd python3

M="$T/models"
mkdir -p "$M/diffusion_models" "$M/text_encoders" "$M/vae" "$M/checkpoints" "$T/tok/t5_tokenizer" "$T/pics"
KONTEXT=flux1-dev-kontext_fp8_scaled.safetensors
ln -s "$FLUX/models/tiny-flux1-dev.safetensors" "$M/diffusion_models/$KONTEXT"
ln -s "$FLUX/models/tiny-flux1-schnell.safetensors" "$M/diffusion_models/flux1-schnell.safetensors"
ln -s "$FLUX/models/tiny-t5xxl_fp16.safetensors" "$M/text_encoders/t5xxl_fp16.safetensors"
ln -s "$FLUX/models/tiny-clip_l.safetensors" "$M/text_encoders/clip_l.safetensors"
ln -s "$FLUX/models/tiny-ae.safetensors" "$M/vae/ae.safetensors"
ln -s "$FLUX/models/tiny-flux1-dev-fp8.safetensors" "$M/checkpoints/flux1-dev-fp8.safetensors"
ln -s "$FLUX/tokenizer/tokenizer.json" "$T/tok/t5_tokenizer/tokenizer.json"
for f in vocab.json merges.txt; do ln -s "$TOK/$f" "$T/tok/$f"; done
"$SDFLOW_BIN" synth --preset sd1-tiny --models-dir "$M" > /dev/null || fail "synth sd1-tiny"
ln -s "$SD3" "$M/checkpoints/sd3.5_medium.safetensors"

# pictures of three aspect ratios (wide, tall) and one that is not a PNG
cat > "$T/tool.py" << 'PY'
import json, struct, sys, zlib

def png(path, w, h):
    rows = b"".join(b"\0" + bytes((x * 7 + y * 3) % 256 if c == 0 else (x * 2 + c) % 256 if c == 1 else (y * 5) % 256
                                  for x in range(w) for c in range(3)) for y in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                           chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))

def size(path):
    d = open(path, "rb").read()
    assert d[:8] == b"\x89PNG\r\n\x1a\n", path
    print("%d %d" % struct.unpack(">II", d[16:24]))

def scale_graph(image, out):
    """LoadImage -> FluxKontextImageScale -> SaveImage: the size the node makes."""
    json.dump({"1": {"class_type": "LoadImage", "inputs": {"image": image}},
               "2": {"class_type": "FluxKontextImageScale", "inputs": {"image": ["1", 0]}},
               "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "s"}}},
              open(out, "w"))

# what the user chose on the command line: these inputs may differ from the
# example's (its prompt, files, seed and size); everything else must not
USER = {("CLIPTextEncode", "text"), ("LoadImage", "image"), ("SaveImage", "filename_prefix"),
        ("RandomNoise", "noise_seed"), ("EmptySD3LatentImage", "width"), ("EmptySD3LatentImage", "height"),
        ("ModelSamplingFlux", "width"), ("ModelSamplingFlux", "height"), ("UNETLoader", "unet_name"),
        ("DualCLIPLoader", "clip_name1"), ("DualCLIPLoader", "clip_name2"), ("VAELoader", "vae_name")}

def same_as_example(example, got, want_json):
    """got is the example's graph: the same ids, class types, input names and
    links; the same values but for USER's, which are want_json's."""
    ex, g, want = json.load(open(example)), json.load(open(got)), json.loads(want_json)
    bad = []
    if sorted(ex) != sorted(g):
        bad.append("ids %s, the example has %s" % (sorted(g), sorted(ex)))
    for nid in sorted(set(ex) & set(g)):
        e, n = ex[nid], g[nid]
        if e["class_type"] != n["class_type"]:
            bad.append("#%s is %s, the example's is %s" % (nid, n["class_type"], e["class_type"]))
            continue
        if sorted(e["inputs"]) != sorted(n["inputs"]):
            bad.append("#%s %s inputs %s, the example's %s" % (nid, n["class_type"], sorted(n["inputs"]),
                                                            sorted(e["inputs"])))
        for k in sorted(set(e["inputs"]) & set(n["inputs"])):
            ev, nv, ct = e["inputs"][k], n["inputs"][k], n["class_type"]
            if (ct, k) in USER:
                w = want.get("%s.%s" % (ct, k))
                if w is not None and nv != w:
                    bad.append("#%s %s.%s = %r, asked for %r" % (nid, ct, k, nv, w))
            elif ev != nv:
                bad.append("#%s %s.%s = %r, the example's %r" % (nid, ct, k, nv, ev))
    for b in bad:
        print("  " + b)
    sys.exit(1 if bad else 0)

def references(got):
    """The pictures the guider sees, in chain order: from BasicGuider's
    conditioning back through each ReferenceLatent (latent <- VAEEncode <-
    FluxKontextImageScale <- LoadImage) to FluxGuidance on the prompt; the
    method node's value if one stands after the chain."""
    g = json.load(open(got))
    guider = [n for n in g.values() if n["class_type"] == "BasicGuider"]
    assert len(guider) == 1, "one BasicGuider"
    cur, names, method = guider[0]["inputs"]["conditioning"][0], [], "none"
    if g[cur]["class_type"] == "FluxKontextMultiReferenceLatentMethod":
        method = g[cur]["inputs"]["reference_latents_method"]
        cur = g[cur]["inputs"]["conditioning"][0]
    while g[cur]["class_type"] == "ReferenceLatent":
        enc = g[g[cur]["inputs"]["latent"][0]]
        assert enc["class_type"] == "VAEEncode", enc
        sc = g[enc["inputs"]["pixels"][0]]
        assert sc["class_type"] == "FluxKontextImageScale", sc
        load = g[sc["inputs"]["image"][0]]
        assert load["class_type"] == "LoadImage", load
        names.append(load["inputs"]["image"])
        cur = g[cur]["inputs"]["conditioning"][0]
    assert g[cur]["class_type"] == "FluxGuidance", g[cur]
    print(" ".join(reversed(names)), method)

if __name__ == "__main__":
    f = {"png": lambda p, w, h: png(p, int(w), int(h)), "size": size, "scale_graph": scale_graph,
         "same_as_example": same_as_example, "references": references}[sys.argv[1]]
    f(*sys.argv[2:])
PY
py() { python3 "$T/tool.py" "$@"; }
py png "$T/pics/wide.png" 96 64 && py png "$T/pics/tall.png" 40 60 && py png "$T/pics/square.png" 32 32 ||
    fail "writing the pictures"
echo "not a picture" > "$T/pics/notes.png"

E=(--models-dir "$M" --tokenizer-dir "$T/tok" --no-cache --quiet)
SPLIT=(--diffusion-model "$KONTEXT" --t5xxl t5xxl_fp16.safetensors --clip-l clip_l.safetensors --vae ae.safetensors)

# the size FluxKontextImageScale makes of a picture: the node itself runs
node_size() { # PICTURE -> "W H"
    py scale_graph "$(basename "$1")" "$T/scale.json"
    rm -rf "$T/scale_out"
    "$SDFLOW_BIN" run "$T/scale.json" "${E[@]}" --input-dir "$(dirname "$1")" --output-dir "$T/scale_out" \
        > /dev/null 2> "$T/scale.err" || { fail "FluxKontextImageScale of $1: $(tail -3 "$T/scale.err")"; return; }
    py size "$(ls "$T/scale_out"/*.png | head -1)"
}

# ---- the graph: ComfyUI's Kontext example, the latent sized by the node ----
"$SDFLOW_BIN" generate "${SPLIT[@]}" --reference "$T/pics/wide.png" -p "make it night" --seed 42 "${E[@]}" \
    --print-workflow > "$T/wide.json" 2> "$T/err" || fail "--print-workflow: $(cat "$T/err")"
read -r W H <<< "$(node_size "$T/pics/wide.png")"
WANT="{\"CLIPTextEncode.text\": \"make it night\", \"LoadImage.image\": \"wide.png\", \"RandomNoise.noise_seed\": 42,
  \"EmptySD3LatentImage.width\": ${W:-0}, \"EmptySD3LatentImage.height\": ${H:-0},
  \"ModelSamplingFlux.width\": ${W:-0}, \"ModelSamplingFlux.height\": ${H:-0}, \"UNETLoader.unet_name\": \"$KONTEXT\",
  \"DualCLIPLoader.clip_name1\": \"t5xxl_fp16.safetensors\", \"DualCLIPLoader.clip_name2\": \"clip_l.safetensors\",
  \"VAELoader.vae_name\": \"ae.safetensors\"}"
for ex in "$SDFLOW_SOURCE_DIR/workflows/edit_flux_kontext.json" \
    "$SDFLOW_SOURCE_DIR/tests/data/comfyui_examples/flux/flux_kontext_example.api.json"; do
    py same_as_example "$ex" "$T/wide.json" "$WANT" || fail "the graph is not $(basename "$ex")'s"
done
grep -q "run it with --input-dir $T/pics" "$T/err" ||
    fail "--print-workflow does not say the input folder: $(cat "$T/err")"
# a tall picture gets another size, the node's again
"$SDFLOW_BIN" generate "${SPLIT[@]}" --reference "$T/pics/tall.png" -p x "${E[@]}" --print-workflow \
    > "$T/tall.json" 2> "$T/err" || fail "tall --print-workflow: $(cat "$T/err")"
read -r TW TH <<< "$(node_size "$T/pics/tall.png")"
[ "$TW $TH" != "$W $H" ] || fail "the tall and the wide picture gave one size ($W x $H): pick pictures that differ"
py same_as_example "$SDFLOW_SOURCE_DIR/workflows/edit_flux_kontext.json" "$T/tall.json" \
    "{\"EmptySD3LatentImage.width\": ${TW:-0}, \"EmptySD3LatentImage.height\": ${TH:-0}}" ||
    fail "tall: the latent is not the size FluxKontextImageScale makes ($TW x $TH)"
# -W / -H (each alone too) and the sampling options replace the defaults
"$SDFLOW_BIN" generate "${SPLIT[@]}" --reference "$T/pics/tall.png" -p x -W 64 "${E[@]}" --print-workflow \
    > "$T/w.json" 2> /dev/null || fail "-W --print-workflow"
py same_as_example "$SDFLOW_SOURCE_DIR/workflows/edit_flux_kontext.json" "$T/w.json" \
    "{\"EmptySD3LatentImage.width\": 64, \"EmptySD3LatentImage.height\": ${TH:-0}, \"ModelSamplingFlux.width\": 64}" ||
    fail "-W 64: not the width asked"
"$SDFLOW_BIN" generate "${SPLIT[@]}" --reference "$T/pics/wide.png" -p x --steps 7 --guidance 3 --sampler heun \
    --scheduler beta "${E[@]}" --print-workflow > "$T/opt.json" 2> /dev/null || fail "options --print-workflow"
python3 - "$T/opt.json" << 'PY' || fail "--steps/--guidance/--sampler/--scheduler not in the graph"
import json, sys
g = {n["class_type"]: n["inputs"] for n in json.load(open(sys.argv[1])).values()}
assert g["BasicScheduler"]["steps"] == 7 and g["BasicScheduler"]["scheduler"] == "beta", g["BasicScheduler"]
assert g["KSamplerSelect"]["sampler_name"] == "heun" and g["FluxGuidance"]["guidance"] == 3, g
PY

# ---- more pictures, the method node, a checkpoint, LoRAs ----
"$SDFLOW_BIN" generate "${SPLIT[@]}" --reference "$T/pics/wide.png" --reference "$T/pics/tall.png" \
    --reference "$T/pics/square.png" -p x "${E[@]}" --print-workflow > "$T/three.json" 2> "$T/err" ||
    fail "three references: $(cat "$T/err")"
[ "$(py references "$T/three.json")" = "wide.png tall.png square.png none" ] ||
    fail "three references: the chain is $(py references "$T/three.json")"
"$SDFLOW_BIN" generate "${SPLIT[@]}" --reference "$T/pics/wide.png" --reference "$T/pics/tall.png" \
    --reference-method index -p x "${E[@]}" --print-workflow > "$T/method.json" 2> "$T/err" ||
    fail "--reference-method: $(cat "$T/err")"
[ "$(py references "$T/method.json")" = "wide.png tall.png index" ] ||
    fail "--reference-method: the chain is $(py references "$T/method.json")"
"$SDFLOW_BIN" generate -m flux1-dev-fp8.safetensors --reference "$T/pics/wide.png" --lora a.safetensors -p x "${E[@]}" \
    --print-workflow > "$T/ckpt.json" 2> "$T/err" || fail "-m --reference: $(cat "$T/err")"
python3 - "$T/ckpt.json" << 'PY' || fail "-m: the checkpoint does not feed the model, the prompt and the VAE"
import json, sys
g = json.load(open(sys.argv[1]))
by = {}
for nid, n in g.items():
    by.setdefault(n["class_type"], []).append(nid)
assert "UNETLoader" not in by and "DualCLIPLoader" not in by and "VAELoader" not in by, by
ck, lora = by["CheckpointLoaderSimple"][0], by["LoraLoader"][0]
assert g[lora]["inputs"]["model"] == [ck, 0] and g[lora]["inputs"]["clip"] == [ck, 1], g[lora]
assert g[by["ModelSamplingFlux"][0]]["inputs"]["model"] == [lora, 0]
assert g[by["CLIPTextEncode"][0]]["inputs"]["clip"] == [lora, 1]
assert all(g[v]["inputs"]["vae"] == [ck, 2] for v in by["VAEEncode"] + by["VAEDecode"])
PY

# ---- a run: a PNG of the asked size, the bytes `sdflow run` of the printed graph saves ----
SMALL=(-W 64 -H 48 --steps 2 --seed 5)
if "$SDFLOW_BIN" generate "${SPLIT[@]}" --reference "$T/pics/square.png" -p "make it night" "${SMALL[@]}" "${E[@]}" \
    -o "$T/edit.png" > /dev/null 2> "$T/edit.err"; then
    [ "$(py size "$T/edit.png")" = "64 48" ] || fail "the edit is $(py size "$T/edit.png"), not 64 x 48"
    "$SDFLOW_BIN" generate "${SPLIT[@]}" --reference "$T/pics/square.png" -p "make it night" "${SMALL[@]}" "${E[@]}" \
        --print-workflow > "$T/edit.json" 2> /dev/null || fail "edit --print-workflow"
    "$SDFLOW_BIN" run "$T/edit.json" "${E[@]}" --input-dir "$T/pics" --output-dir "$T/run_edit" > "$T/edit.files" \
        2> "$T/edit.err" || fail "run of the printed graph: $(tail -3 "$T/edit.err")"
    cmp -s "$(head -1 "$T/edit.files")" "$T/edit.png" || fail "generate and run of its graph saved different bytes"
else
    fail "the edit: $(tail -3 "$T/edit.err")"
fi

# ---- errors: the option and the file named ----
check_usage() { # expected-text args...
    local want="$1"
    shift
    if "$SDFLOW_BIN" generate "$@" "${E[@]}" > "$T/out" 2> "$T/err"; then fail "generate $* succeeded"; return; fi
    grep -qF -- "$want" "$T/err" || fail "generate $*: stderr lacks '$want': $(cat "$T/err")"
}
REFUSED="--reference makes a Flux Kontext edit, which needs a Flux Kontext dev model;"
check_usage "$REFUSED -m sdflow-random-sd1-tiny.safetensors is" -m sdflow-random-sd1-tiny.safetensors \
    --reference "$T/pics/wide.png" -p x --print-workflow
check_usage "--diffusion-model flux1-schnell.safetensors is Flux schnell" --diffusion-model flux1-schnell.safetensors \
    --t5xxl t5xxl_fp16.safetensors --clip-l clip_l.safetensors --vae ae.safetensors --reference "$T/pics/wide.png" \
    -p x --print-workflow
check_usage "$REFUSED -m sd3.5_medium.safetensors is" -m sd3.5_medium.safetensors --reference "$T/pics/wide.png" \
    -p x --print-workflow
# the Kontext file is a diffusion model: -m (checkpoints/) says which option takes it
check_usage "-m $KONTEXT: not a checkpoint (checkpoints/) but a diffusion model (diffusion_models/)" \
    -m "$KONTEXT" --reference "$T/pics/wide.png" -p x --print-workflow
check_usage "reference image '$T/pics/nope.png'" "${SPLIT[@]}" --reference "$T/pics/nope.png" -p x --print-workflow
check_usage "reference image '$T/pics/nope.png'" "${SPLIT[@]}" --reference "$T/pics/wide.png" \
    --reference "$T/pics/nope.png" -p x --print-workflow
check_usage "--reference" "${SPLIT[@]}" --reference "$T/pics/notes.png" -p x --print-workflow
grep -q "notes.png" "$T/err" || fail "a picture that is not a PNG is not named: $(cat "$T/err")"
check_usage "does not go with -i" "${SPLIT[@]}" --reference "$T/pics/wide.png" -i "$T/pics/tall.png" -p x
check_usage "-n does not go with it" "${SPLIT[@]}" --reference "$T/pics/wide.png" -n ugly -p x
check_usage "--cfg does not go with it" "${SPLIT[@]}" --reference "$T/pics/wide.png" --cfg 3 -p x
check_usage "--reference-method goes with --reference" "${SPLIT[@]}" --reference-method index -p x
mkdir -p "$T/elsewhere" && cp "$T/pics/tall.png" "$T/elsewhere/"
check_usage "--reference '$T/elsewhere/tall.png' is neither under --input-dir nor in the folder of --reference" \
    "${SPLIT[@]}" --reference "$T/pics/wide.png" --reference "$T/elsewhere/tall.png" -p x --print-workflow

sd_test_end "generate --reference: ComfyUI's Kontext example graph, sizes, chains, a run, errors"
