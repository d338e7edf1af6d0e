# ComfyUI's own Flux example workflows (tests/data/comfyui_examples/flux:
# the API and UI forms embedded in the pictures of ComfyUI_examples' Flux
# page) run unmodified but for --set of sizes and steps, on the Flux set's
# tiny files placed under the names they use:
#   - each UI save converts to the graph of its API twin (class types and
#     inputs; these 2024 API forms carry no _meta titles);
#   - the API and the UI form both run and save the same pixels;
#   - the Kontext example edits a picture (input/fennec_girl_sing.png, any
#     picture here) through ReferenceLatent;
#   - the schnell example's 4-channel EmptyLatentImage is widened to Flux's
#     16 channels as ComfyUI's fix_empty_latent_channels does: the same pixels
#     as the graph with EmptySD3LatentImage;
#   - the schnell split example finds its model in unet/ (where the page puts
#     it), and the schnell fp8 checkpoint runs as schnell: the reference set
#     has none, so the test writes one, the tiny dev fp8 checkpoint without
#     its guidance_in tensors (what tells schnell from dev); the run's log
#     says which it loaded.
# Needs the Flux reference set, the CLIP vocabulary and python3.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_comfyui_flux_examples UNETLoader DualCLIPLoader ModelSamplingFlux FluxGuidance \
    EmptySD3LatentImage SamplerCustomAdvanced ReferenceLatent FluxKontextImageScale
FLUX="$DATA/flux"
EX="$SDFLOW_SOURCE_DIR/tests/data/comfyui_examples/flux"
sd_test_need_path "$FLUX/manifest.json" "the Flux reference set ($FLUX)"
sd_test_need_path "$TOK/vocab.json" "CLIP vocabulary $TOK"
sd_test_need_cmd python3

M="$T/models"
mkdir -p "$M/diffusion_models" "$M/unet" "$M/text_encoders" "$M/vae" "$M/checkpoints" "$T/tok/t5_tokenizer"
ln -s "$FLUX/models/tiny-flux1-dev.safetensors" "$M/diffusion_models/flux1-dev.safetensors"
# (Kontext dev is a dev-layout file: the tiny dev model stands in for it)
ln -s "$FLUX/models/tiny-flux1-dev.safetensors" "$M/diffusion_models/flux1-kontext-dev.safetensors"
ln -s "$FLUX/models/tiny-flux1-schnell.safetensors" "$M/unet/flux1-schnell.safetensors"
ln -s "$FLUX/models/tiny-t5xxl_fp16.safetensors" "$M/text_encoders/t5xxl_fp16.safetensors"
ln -s "$FLUX/models/tiny-clip_l.safetensors" "$M/text_encoders/clip_l.safetensors"
ln -s "$FLUX/models/tiny-ae.safetensors" "$M/vae/ae.safetensors"
ln -s "$FLUX/models/tiny-flux1-dev-fp8.safetensors" "$M/checkpoints/flux1-dev-fp8.safetensors"
ln -s "$FLUX/tokenizer/tokenizer.json" "$T/tok/t5_tokenizer/tokenizer.json"
for f in vocab.json merges.txt; do ln -s "$TOK/$f" "$T/tok/$f"; done
# the Kontext example edits this picture (any picture will do)
mkdir -p "$T/input"
sd_test_write_png "$T/input/fennec_girl_sing.png"

"$SDFLOW_BIN" nodes --json > "$T/nodes.json" || fail "sdflow nodes --json"
cat > "$T/tool.py" << 'PY'
import json, struct, sys

def schnell_fp8(src, dst):
    """src without its guidance_in tensors, the data of the rest as it is."""
    data = open(src, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out, parts, pos = {}, [], 0
    for k, v in head.items():
        if k == "__metadata__":
            out[k] = v
            continue
        if ".guidance_in." in k:
            continue
        a, b = v["data_offsets"]
        parts.append(body[a:b])
        out[k] = dict(v, data_offsets=[pos, pos + b - a])
        pos += b - a
    dropped = len(head) - len(out)
    assert dropped == 4, "expected guidance_in's 4 tensors, dropped %d" % dropped
    h = json.dumps(out).encode()
    h += b" " * (-len(h) % 8)
    open(dst, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(parts))

def optional_default(nodes, ct, name):
    """(True, value) for an optional widget input of ct: its default, else a
    combo's first choice (what the frontend gives a widget with no saved
    value); (False, None) for anything else"""
    spec = nodes.get(ct, {}).get("input", {}).get("optional", {}).get(name)
    if not spec:
        return False, None
    opts = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
    if "default" in opts:
        return True, opts["default"]
    choices = spec[0] if isinstance(spec[0], list) else opts.get("options")
    return (True, choices[0]) if choices else (False, None)

def same_graph(a, b, nodes_json):
    """the same nodes, class types and inputs (titles aside); an optional
    widget added to a node since the API form was saved (DualCLIPLoader's
    device) is in the UI form's conversion with its default, as today's
    frontend sends it, and is not a difference"""
    nodes = json.load(open(nodes_json))
    g = [{k: (v["class_type"], v["inputs"]) for k, v in json.load(open(p)).items()} for p in (a, b)]
    for k, (ct, ins) in g[1].items():
        api = g[0].get(k, (None, {}))[1]
        for name in [n for n in ins if n not in api]:
            has, d = optional_default(nodes, ct, name)
            if has and ins[name] == d:
                del ins[name]
    if g[0] != g[1]:
        for k in sorted(set(g[0]) | set(g[1])):
            if g[0].get(k) != g[1].get(k):
                print("  node %s: %s / %s" % (k, g[0].get(k), g[1].get(k)))
        sys.exit(1)

def pixels(*paths):
    def pix(path):
        data, pos, out = open(path, "rb").read(), 8, b""
        while pos < len(data):
            n = struct.unpack(">I", data[pos:pos + 4])[0]
            if data[pos + 4:pos + 8] in (b"IHDR", b"IDAT"):
                out += data[pos + 8:pos + 8 + n]
            pos += 12 + n
        return out
    first = pix(paths[0])
    sys.exit(0 if all(pix(p) == first for p in paths[1:]) else 1)

def retype(src, nid, class_type, dst):
    w = json.load(open(src))
    w[nid]["class_type"] = class_type
    json.dump(w, open(dst, "w"))

if __name__ == "__main__":
    {"schnell_fp8": schnell_fp8, "same_graph": same_graph, "pixels": pixels, "retype": retype}[sys.argv[1]](*sys.argv[2:])
PY
python3 "$T/tool.py" schnell_fp8 "$FLUX/models/tiny-flux1-dev-fp8.safetensors" \
    "$M/checkpoints/flux1-schnell-fp8.safetensors" || fail "writing the schnell fp8 checkpoint"

# run NAME FILE ARGS...: sdflow run, small; its PNG's path in $T/NAME.png
run() {
    local name=$1 file=$2
    shift 2
    "$SDFLOW_BIN" run "$file" --models-dir "$M" --tokenizer-dir "$T/tok" --input-dir "$T/input" --no-cache \
        --output-dir "$T/out/$name" \
        "$@" > "$T/$name.out" 2> "$T/$name.err" || { fail "$name: $(tail -3 "$T/$name.err")"; return 1; }
    local png
    png=$(ls "$T/out/$name"/*.png 2> /dev/null | head -1)
    [ -n "$png" ] || { fail "$name: no PNG written"; return 1; }
    ln -sf "$png" "$T/$name.png"
}

# example NAME SETS...: the API and UI forms convert to one graph, run, and
# save the same pixels
example() {
    local name=$1
    shift
    local api="$EX/$name.api.json" ui="$EX/$name.ui.json"
    [ -f "$api" ] && [ -f "$ui" ] || { fail "$name: missing from $EX"; return 1; }
    "$SDFLOW_BIN" export --json "$api" > "$T/$name.api.txt" 2> "$T/$name.export.err" &&
        "$SDFLOW_BIN" export --json "$ui" > "$T/$name.ui.txt" 2>> "$T/$name.export.err" ||
        { fail "$name: export: $(cat "$T/$name.export.err")"; return 1; }
    python3 "$T/tool.py" same_graph "$T/$name.api.txt" "$T/$name.ui.txt" "$T/nodes.json" ||
        fail "$name: the UI save converts to another graph than its API form"
    run "$name.api" "$api" "$@" && run "$name.ui" "$ui" "$@" || return 1
    python3 "$T/tool.py" pixels "$T/$name.api.png" "$T/$name.ui.png" ||
        fail "$name: the API and UI forms saved different pixels"
    echo "  $name: ran (API and UI, same pixels)"
}

example flux_dev_example --set 27.width=64 --set 27.height=48 --set 30.width=64 --set 30.height=48 --set 17.steps=2
example flux_schnell_example --set 5.width=64 --set 5.height=48 --set 17.steps=2
example flux_dev_checkpoint_example --set 27.width=64 --set 27.height=48 --set 31.steps=2
example flux_schnell_checkpoint_example --set 27.width=64 --set 27.height=48 --set 31.steps=2
# Kontext: LoadImage, FluxKontextImageScale, VAEEncode, ReferenceLatent
example flux_kontext_example --set 27.width=64 --set 27.height=48 --set 30.width=64 --set 30.height=48 \
    --set 17.steps=2

# the 4-channel empty latent of the schnell example is Flux's 16-channel one
python3 "$T/tool.py" retype "$EX/flux_schnell_example.api.json" 5 EmptySD3LatentImage "$T/schnell_sd3.json"
run schnell_sd3 "$T/schnell_sd3.json" --set 5.width=64 --set 5.height=48 --set 17.steps=2 &&
    { python3 "$T/tool.py" pixels "$T/flux_schnell_example.api.png" "$T/schnell_sd3.png" ||
        fail "EmptyLatentImage and EmptySD3LatentImage gave the schnell example different pixels"; }

# the checkpoints load as what their keys say: dev with guidance, schnell without
grep -q "flux dev," "$T/flux_dev_checkpoint_example.api.err" ||
    fail "the dev fp8 checkpoint's log does not say dev: $(cat "$T/flux_dev_checkpoint_example.api.err")"
grep -q "flux schnell," "$T/flux_schnell_checkpoint_example.api.err" ||
    fail "the schnell fp8 checkpoint's log does not say schnell: $(cat "$T/flux_schnell_checkpoint_example.api.err")"

sd_test_end "ok: ComfyUI's Flux examples ran unmodified on the tiny files"
