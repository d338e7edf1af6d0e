# img2img (VAEEncode + KSampler denoise 0.6) and inpainting (VAEEncodeForInpaint;
# VAEEncode + SetLatentNoiseMask) workflows through `sdflow run` on the tiny
# SD1 checkpoint of the shared test data, checked for what must hold: output
# shapes, the mask, the latent region outside the mask unchanged (ComfyUI
# pins it to the input latent every step), the repainted region changed,
# runs deterministic, cache on and off identical. Also: checkpoints found
# through --comfyui-dir, SDFLOW_MODELS_DIR / SDFLOW_COMFYUI_DIR /
# SDFLOW_TOKENIZER_DIR, a tokenizer beside the checkpoint, and the error
# without a tokenizer. Needs the shared data, a
# tokenizer and python3 (reads the dumps); else exit 77.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_sd1_workflows
MODEL="$DATA/models/tiny-sd1.safetensors"
sd_test_need_path "$MODEL"
sd_test_need_path "$TOK" "tokenizer directory $TOK"
command -v python3 > /dev/null || { echo "SKIP: python3 is needed to read the dumps"; exit 77; }

mkdir -p "$T/models/checkpoints" "$T/input"
ln -s "$MODEL" "$T/models/checkpoints/tiny-sd1.safetensors"

cat > "$T/tool.py" << 'PY'
import json, math, os, struct, sys, zlib

def png(path):
    """64x64 RGBA: transparent (LoadImage mask 1) where x < 32."""
    w = h = 64
    rows = b""
    for y in range(h):
        row = b"\x00"
        for x in range(w):
            r = int(127 + 100 * math.sin(0.2 * x + 0.1 * y))
            g = int(127 + 100 * math.cos(0.15 * x - 0.12 * y))
            b = (x * 4 + y * 2) % 256
            a = 0 if x < 32 else 255
            row += bytes((r, g, b, a))
        rows += row
    def chunk(t, d):
        c = struct.pack(">I", len(d)) + t + d
        return c + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0))
    data += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    open(path, "wb").write(data)

def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        out = {}
        for name, e in hdr.items():
            if name == "__metadata__":
                continue
            b, end = e["data_offsets"]
            f.seek(8 + n + b)
            raw = f.read(end - b)
            out[name] = (e["shape"], struct.unpack("<%df" % (len(raw) // 4), raw), raw)
        return out

def tensor(dump, node, name):
    d = read_st(os.path.join(dump, "%s_0.safetensors" % node))
    return d[name]

def col_diff(a, b, shape, c0, c1):
    B, C, H, W = shape
    m = 0.0
    for i in range(B * C * H):
        for x in range(c0, c1):
            m = max(m, abs(a[i * W + x] - b[i * W + x]))
    return m

def scale(a, shape, c0, c1):
    B, C, H, W = shape
    return max(abs(a[i * W + x]) for i in range(B * C * H) for x in range(c0, c1))

def check(kind, dump):
    bad = 0
    def expect(cond, msg):
        nonlocal bad
        if not cond:
            print("FAIL: %s: %s" % (kind, msg)); bad += 1
    enc_node = "11" if kind == "noise_mask" else "10"
    out_shape, out, _ = tensor(dump, "3", "samples")
    in_shape, lat, _ = tensor(dump, enc_node, "samples")
    expect(out_shape == [1, 4, 8, 8], "KSampler latent shape %s" % out_shape)
    expect(in_shape == out_shape, "encoded latent shape %s" % in_shape)
    img_shape = tensor(dump, "8", "IMAGE")[0]
    expect(img_shape == [1, 64, 64, 3], "decoded image shape %s" % img_shape)
    if kind == "img2img":
        d = col_diff(out, lat, out_shape, 0, 8)
        expect(d > 1e-3, "denoise 0.6 left the latent unchanged")
    else:
        mshape, mask, _ = tensor(dump, enc_node, "noise_mask")
        want = [1, 1, 64, 64]
        expect(mshape == want, "noise_mask shape %s" % mshape)
        if kind == "inpaint":  # grown by 6: pixels x < 35 are repainted
            expect(mask[20 * 64 + 34] == 1.0 and mask[20 * 64 + 35] == 0.0, "grown mask edge")
        # latent columns 4..7 sample mask pixels >= 35.5: mask 0 -> kept
        s = scale(lat, in_shape, 4, 8)
        kept = col_diff(out, lat, out_shape, 4, 8)
        expect(kept <= 1e-5 * (1 + s), "kept region changed by %g" % kept)
        changed = col_diff(out, lat, out_shape, 0, 3)
        expect(changed > 1e-3, "masked region unchanged (%g)" % changed)
        print("  %s: kept region max|diff| %.3g, repainted %.3g" % (kind, kept, changed))
    sys.exit(1 if bad else 0)

def same(a, b):
    fa = sorted(f for f in os.listdir(a) if f.endswith(".safetensors"))
    fb = sorted(f for f in os.listdir(b) if f.endswith(".safetensors"))
    if fa != fb:
        print("FAIL: dump files differ"); sys.exit(1)
    bad = 0
    for f in fa:
        da, db = read_st(os.path.join(a, f)), read_st(os.path.join(b, f))
        for k in da:
            if k not in db or da[k][2] != db[k][2] or da[k][0] != db[k][0]:
                print("FAIL: %s %s differs between %s and %s" % (f, k, a, b)); bad += 1
    sys.exit(1 if bad else 0)

if __name__ == "__main__":
    {"png": png, "check": check, "same": same}[sys.argv[1]](*sys.argv[2:])
PY
python3 "$T/tool.py" png "$T/input/example.png"

run_wf() { # KIND WORKFLOW
    local kind=$1 wf=$2 W="$T/$1"
    mkdir -p "$W"
    local common=(--models-dir "$T/models" --input-dir "$T/input" --output-dir "$W/out"
        --tokenizer-dir "$TOK" --quiet --set 4.ckpt_name=tiny-sd1.safetensors --set 3.steps=4)
    if ! "$SDFLOW_BIN" run "$wf" "${common[@]}" --no-cache --dump "$W/d1" > /dev/null 2> "$W/err"; then
        fail "$kind: sdflow run failed: $(cat "$W/err")"
        return
    fi
    python3 "$T/tool.py" check "$kind" "$W/d1" || fail "$kind: properties"
    "$SDFLOW_BIN" run "$wf" "${common[@]}" --no-cache --dump "$W/d2" > /dev/null 2>&1 || fail "$kind: rerun"
    python3 "$T/tool.py" same "$W/d1" "$W/d2" || fail "$kind: not deterministic"
    "$SDFLOW_BIN" run "$wf" "${common[@]}" --cache "$W/c.db" --dump "$W/d3" > /dev/null 2>&1 || fail "$kind: cached run"
    "$SDFLOW_BIN" run "$wf" "${common[@]}" --cache "$W/c.db" --dump "$W/d4" > /dev/null 2>&1 || fail "$kind: cache hit run"
    python3 "$T/tool.py" same "$W/d1" "$W/d3" || fail "$kind: cache on differs from cache off"
    python3 "$T/tool.py" same "$W/d1" "$W/d4" || fail "$kind: cached results differ"
}

run_wf img2img "$SDFLOW_SOURCE_DIR/workflows/img2img_sd15.json"
run_wf inpaint "$SDFLOW_SOURCE_DIR/workflows/inpaint_sd15.json"
run_wf noise_mask "$SDFLOW_SOURCE_DIR/tests/workflows/inpaint_noise_mask_sd15.json"

# SamplerCustomAdvanced (RandomNoise + CFGGuider + KSamplerSelect + BasicScheduler)
# gives KSampler's latent bit for bit (with a seed past 2^63, to carry all 64
# bits through RandomNoise); its outputs are cached like KSampler's
C="$T/custom"
small=(--models-dir "$T/models" --output-dir "$C/out" --tokenizer-dir "$TOK" --quiet
    --set 4.ckpt_name=tiny-sd1.safetensors --set 5.width=64 --set 5.height=64)
if "$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/txt2img_sd15.json" "${small[@]}" --set 3.steps=4 \
    --set 3.seed=18446744073709551615 \
    --no-cache --dump "$C/ks" > /dev/null 2> "$C.err" &&
    "$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/txt2img_custom_sd15.json" "${small[@]}" --set 13.steps=4 \
        --set 10.noise_seed=18446744073709551615 --no-cache --dump "$C/adv" > /dev/null 2>> "$C.err"; then
    python3 - "$C" << 'PY' || fail "custom sampling: SamplerCustomAdvanced differs from KSampler"
import sys
sys.path.insert(0, sys.argv[1] + "/..")
from tool import read_st
d = sys.argv[1]
a, b = read_st(d + "/ks/3_0.safetensors"), read_st(d + "/adv/3_0.safetensors")
ia, ib = read_st(d + "/ks/8_0.safetensors"), read_st(d + "/adv/8_0.safetensors")
ok = a["samples"][2] == b["samples"][2] and a["samples"][0] == b["samples"][0] == [1, 4, 8, 8]
ok = ok and ia["IMAGE"][2] == ib["IMAGE"][2]
print("  custom sampling: KSampler and SamplerCustomAdvanced latents %s" % ("identical" if ok else "DIFFER"))
sys.exit(0 if ok else 1)
PY
    for i in 1 2; do
        "$SDFLOW_BIN" run "$SDFLOW_SOURCE_DIR/workflows/txt2img_custom_sd15.json" "${small[@]}" --set 13.steps=4 \
            --set 10.noise_seed=18446744073709551615 --cache "$C/c.db" --dump "$C/cached$i" > /dev/null 2>> "$C.err" || fail "custom sampling: cached run $i"
    done
    python3 "$T/tool.py" same "$C/adv" "$C/cached1" || fail "custom sampling: cache on differs from cache off"
    # all hits: the GUIDER (it holds the MODEL, so it is never stored) is not
    # needed and not rebuilt; the sampler's two latents come from the cache
    mkdir -p "$C/adv_no_guider" && cp "$C"/adv/*.safetensors "$C/adv_no_guider/" && rm "$C/adv_no_guider/11_0.safetensors"
    python3 "$T/tool.py" same "$C/adv_no_guider" "$C/cached2" || fail "custom sampling: cached results differ"
else
    fail "custom sampling runs: $(cat "$C.err")"
fi

# Models found through --comfyui-dir (an installation's models/checkpoints)
mkdir -p "$T/comfy/models/checkpoints" "$T/empty"
ln -s "$MODEL" "$T/comfy/models/checkpoints/tiny-sd1.safetensors"
WF="$SDFLOW_SOURCE_DIR/tests/workflows/e2e_sd1.json"
"$SDFLOW_BIN" run "$WF" --models-dir "$T/empty" --comfyui-dir "$T/comfy" --tokenizer-dir "$TOK" \
    --no-cache --quiet --output-dir "$T/comfy_out" > /dev/null 2> "$T/comfy.err" \
    || fail "--comfyui-dir: $(cat "$T/comfy.err")"
# Without a tokenizer the text encode fails saying how to configure one
if env -u SDFLOW_TOKENIZER_DIR "$SDFLOW_BIN" run "$WF" --models-dir "$T/comfy/models" --no-cache \
    --quiet --output-dir "$T/comfy_out" > /dev/null 2> "$T/notok.err"; then
    fail "ran without a tokenizer"
fi
grep -q "tokenizer-dir" "$T/notok.err" || fail "no hint about --tokenizer-dir: $(cat "$T/notok.err")"
grep -q "SDFLOW_TOKENIZER_DIR" "$T/notok.err" || fail "no hint about SDFLOW_TOKENIZER_DIR: $(cat "$T/notok.err")"

# The same folders through the environment: SDFLOW_MODELS_DIR, SDFLOW_COMFYUI_DIR,
# SDFLOW_TOKENIZER_DIR (no flags)
env_run() { # NAME VAR=VALUE...: run the e2e workflow with only these variables set
    local name=$1
    shift
    env -u SDFLOW_MODELS_DIR -u SDFLOW_COMFYUI_DIR -u SDFLOW_TOKENIZER_DIR "$@" \
        "$SDFLOW_BIN" run "$WF" --no-cache --quiet --output-dir "$T/comfy_out" > /dev/null 2> "$T/$name.err"
}
env_run env_models SDFLOW_MODELS_DIR="$T/comfy/models" SDFLOW_TOKENIZER_DIR="$TOK" ||
    fail "SDFLOW_MODELS_DIR + SDFLOW_TOKENIZER_DIR: $(cat "$T/env_models.err")"
env_run env_comfy SDFLOW_MODELS_DIR="$T/empty" SDFLOW_COMFYUI_DIR="$T/comfy" SDFLOW_TOKENIZER_DIR="$TOK" ||
    fail "SDFLOW_COMFYUI_DIR: $(cat "$T/env_comfy.err")"
env_run env_nomodel SDFLOW_MODELS_DIR="$T/empty" SDFLOW_TOKENIZER_DIR="$TOK" &&
    fail "ran with a models directory that lacks the checkpoint"
grep -q "ckpt_name" "$T/env_nomodel.err" || fail "missing checkpoint error lacks the input: $(cat "$T/env_nomodel.err")"
# A tokenizer carried beside the checkpoint is used without any configuration
mkdir -p "$T/own/checkpoints"
ln -s "$MODEL" "$T/own/checkpoints/tiny-sd1.safetensors"
if [ -f "$TOK/vocab.json" ] && [ -f "$TOK/merges.txt" ]; then
    ln -s "$TOK/vocab.json" "$T/own/checkpoints/vocab.json"
    ln -s "$TOK/merges.txt" "$T/own/checkpoints/merges.txt"
else
    ln -s "$TOK/bpe_simple_vocab_16e6.txt.gz" "$T/own/checkpoints/bpe_simple_vocab_16e6.txt.gz"
fi
env_run env_owntok SDFLOW_MODELS_DIR="$T/own" ||
    fail "tokenizer beside the checkpoint not used: $(cat "$T/env_owntok.err")"

[ "$failures" -eq 0 ] && echo "ok" || echo "$failures failures"
[ "$failures" -eq 0 ]
