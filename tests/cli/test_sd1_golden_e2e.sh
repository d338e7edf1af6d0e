# The manifest's end-to-end cases as ComfyUI API workflow files
# (tests/workflows/<case id>.json) through `sdflow run`, compared with the
# golden tensors through --dump: text conditionings, the KSampler LATENT and
# the decoded IMAGE, each at the manifest's tolerance. The workflow's widget
# values must equal the case settings. The same workflow run again with a
# persistent cache (once executing, once from the cache) must dump
# bit-identical tensors. Data: SDFLOW_TESTDATA (default ../shared/testdata),
# tokenizer SDFLOW_TOKENIZER_DIR (default ../shared/data/clip); missing data
# or python3 (used to read safetensors): exit 77.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_sd1_golden_e2e
[ -f "$DATA/manifest.json" ] || { echo "SKIP: no $DATA/manifest.json"; exit 77; }
[ -d "$TOK" ] || { echo "SKIP: no tokenizer directory $TOK"; exit 77; }
command -v python3 > /dev/null || { echo "SKIP: python3 is needed to read the dumps"; exit 77; }


cat > "$T/check.py" << 'PY'
import json, os, struct, sys

def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, e in hdr.items():
            if name == "__metadata__":
                continue
            b, end = e["data_offsets"]
            f.seek(base + b)
            raw = f.read(end - b)
            if e["dtype"] == "F32":
                vals = struct.unpack("<%df" % (len(raw) // 4), raw)
            elif e["dtype"] == "F16":
                vals = struct.unpack("<%de" % (len(raw) // 2), raw)
            elif e["dtype"] == "I64":
                vals = struct.unpack("<%dq" % (len(raw) // 8), raw)
            else:
                vals = None
            out[name] = (e["shape"], vals, raw)
        return out

def case_of(manifest, cid):
    for c in manifest["cases"]:
        if c["id"] == cid:
            return c
    return None

def cmd_model(manifest_path, cid):
    """Print the model file of the case (the manifest model with clip_g iff the
    case has g token ids), or nothing."""
    m = json.load(open(manifest_path))
    c = case_of(m, cid)
    if not c:
        return
    want_g = "pos.g.ids" in c["tensors"]
    for mod in m["models"].values():
        cfg = mod.get("config", {})
        if "unet_config" in cfg and "clip_l" in cfg and ("clip_g" in cfg) == want_g:
            print(mod["file"], c["file"])
            return

def links(wf):
    ks = [k for k, n in wf.items() if n["class_type"] in ("KSampler",)]
    return ks

def cmd_check(manifest_path, data, wf_path, dump):
    m = json.load(open(manifest_path))
    cid = os.path.splitext(os.path.basename(wf_path))[0]
    c = case_of(m, cid)
    wf = json.load(open(wf_path))
    s = c["settings"]
    bad = 0
    ks_id = [k for k, n in wf.items() if n["class_type"] == "KSampler"][0]
    ks = wf[ks_id]["inputs"]
    lat = wf[ks["latent_image"][0]]["inputs"]
    pos_id, neg_id = ks["positive"][0], ks["negative"][0]
    want = {"seed": ks["seed"], "steps": ks["steps"], "cfg": ks["cfg"],
            "sampler": ks["sampler_name"], "scheduler": ks["scheduler"],
            "width": lat["width"], "height": lat["height"],
            "positive": wf[pos_id]["inputs"]["text"], "negative": wf[neg_id]["inputs"]["text"]}
    for k, v in want.items():
        if s.get(k) != v:
            print("FAIL: %s: workflow %s = %r, manifest says %r" % (cid, k, v, s.get(k)))
            bad += 1
    dec_id = [k for k, n in wf.items() if n["class_type"] == "VAEDecode"][0]
    pairs = [("%s_0" % ks_id, "samples", "latent_out"), ("%s_0" % dec_id, "IMAGE", "image"),
             ("%s_0" % pos_id, "0.cond", "pos.cond"), ("%s_0" % neg_id, "0.cond", "neg.cond"),
             ("%s_0" % pos_id, "0.pooled_output", "pos.pooled"),
             ("%s_0" % neg_id, "0.pooled_output", "neg.pooled")]
    gold = read_st(os.path.join(data, c["file"]))
    for fname, tname, gname in pairs:
        if gname not in c["tensors"]:
            continue
        path = os.path.join(dump, fname + ".safetensors")
        if not os.path.exists(path):
            print("FAIL: %s: no dump %s" % (cid, path)); bad += 1; continue
        d = read_st(path)
        if tname not in d:
            print("FAIL: %s: %s has no tensor %s" % (cid, path, tname)); bad += 1; continue
        shape, act, _ = d[tname]
        gshape, exp, _ = gold[gname]
        tol = c["tensors"][gname].get("tolerance", c["tolerance"])
        if shape != gshape:
            print("FAIL: %s %s: shape %s, expected %s" % (cid, gname, shape, gshape)); bad += 1; continue
        worst = 0.0; ok = True
        for a, e in zip(act, exp):
            diff = abs(a - e)
            worst = max(worst, diff)
            if not diff <= tol["atol"] + tol["rtol"] * abs(e):
                ok = False
        print("  %s %-12s max|diff| %.3g (atol %g rtol %g)%s" % (cid, gname, worst, tol["atol"], tol["rtol"], "" if ok else "  FAIL"))
        if not ok:
            bad += 1
    sys.exit(1 if bad else 0)

def cmd_same(a, b):
    """Every tensor of every dump file in a equals b's bit for bit."""
    bad = 0
    fa = sorted(f for f in os.listdir(a) if f.endswith(".safetensors"))
    fb = sorted(f for f in os.listdir(b) if f.endswith(".safetensors"))
    if fa != fb:
        print("FAIL: dump files differ: %s vs %s" % (fa, fb)); sys.exit(1)
    for f in fa:
        da, db = read_st(os.path.join(a, f)), read_st(os.path.join(b, f))
        if sorted(da) != sorted(db):
            print("FAIL: %s: tensor names differ" % f); bad += 1; continue
        for k in da:
            if da[k][0] != db[k][0] or da[k][2] != db[k][2]:
                print("FAIL: %s %s differs between %s and %s" % (f, k, a, b)); bad += 1
    sys.exit(1 if bad else 0)

if __name__ == "__main__":
    {"model": cmd_model, "check": cmd_check, "same": cmd_same}[sys.argv[1]](*sys.argv[2:])
PY

ran=0
for wf in "$SDFLOW_SOURCE_DIR"/tests/workflows/e2e_*.json; do
    id=$(basename "$wf" .json)
    set -- $(python3 "$T/check.py" model "$DATA/manifest.json" "$id")
    if [ $# -ne 2 ]; then echo "$id: not a manifest case with a model, skipped"; continue; fi
    model="$DATA/$1"
    golden="$DATA/$2"
    if [ ! -f "$model" ] || [ ! -f "$golden" ]; then echo "$id: data missing, skipped"; continue; fi
    W="$T/$id"
    mkdir -p "$W/models/checkpoints"
    ln -s "$model" "$W/models/checkpoints/$(basename "$model")"
    common=(--models-dir "$W/models" --tokenizer-dir "$TOK" --output-dir "$W/out" --quiet)
    if ! "$SDFLOW_BIN" run "$wf" "${common[@]}" --no-cache --dump "$W/d_nocache" 2> "$W/err1"; then
        fail "$id: sdflow run failed: $(cat "$W/err1")"; continue
    fi
    python3 "$T/check.py" check "$DATA/manifest.json" "$DATA" "$wf" "$W/d_nocache" || fail "$id: golden mismatch"
    "$SDFLOW_BIN" run "$wf" "${common[@]}" --cache "$W/cache.db" --dump "$W/d_exec" 2> "$W/err2" \
        || fail "$id: cached run 1 failed: $(cat "$W/err2")"
    "$SDFLOW_BIN" run "$wf" "${common[@]}" --cache "$W/cache.db" --dump "$W/d_cached" --report "$W/rep.json" 2> "$W/err3" \
        || fail "$id: cached run 2 failed: $(cat "$W/err3")"
    grep -q '"n_cached": *[1-9]' "$W/rep.json" 2>/dev/null || tr -d ' \n' < "$W/rep.json" | grep -q '"cached"' \
        || fail "$id: second run with the cache hit nothing"
    python3 "$T/check.py" same "$W/d_nocache" "$W/d_exec" || fail "$id: cache-on run differs from cache-off run"
    python3 "$T/check.py" same "$W/d_nocache" "$W/d_cached" || fail "$id: cached results differ from computed ones"
    ran=$((ran + 1))
done
[ "$ran" -gt 0 ] || { echo "SKIP: no e2e workflow could run"; exit 77; }
[ "$failures" -eq 0 ] && echo "ok: $ran workflows" || echo "$failures failures"
[ "$failures" -eq 0 ]
