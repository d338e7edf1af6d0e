# The manifest's end-to-end cases as ComfyUI API workflows through `sdflow
# run`, compared with the golden tensors through --dump: text conditionings,
# the KSampler LATENT and the decoded IMAGE, each at the manifest's tolerance.
# Each workflow is generated from its case's settings (size, seed, steps, cfg,
# sampler, scheduler, prompts, LoRA), so the test follows whatever reference
# set it is given; a case a file-based workflow cannot express (a float
# ControlNet hint image, which no 8-bit PNG holds) is named and left to
# nodes.golden_e2e. The same workflow run again with a
# persistent cache (once executing, once from the cache) must dump
# bit-identical tensors. Data: SDFLOW_TESTDATA (default ../shared/testdata),
# tokenizer SDFLOW_TOKENIZER_DIR (default ../shared/data/clip); missing data
# or python3 (used to read safetensors): exit 77.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_sd1_golden_e2e
sd_test_need_path "$DATA/manifest.json"
sd_test_need_path "$TOK" "tokenizer directory $TOK"
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

def cmd_cases(manifest_path):
    """The ids of the manifest's end-to-end cases, one per line."""
    for c in json.load(open(manifest_path))["cases"]:
        if c.get("component") == "e2e":
            print(c["id"])

def cmd_workflow(manifest_path, cid, ckpt_name, out_path):
    """Write the API workflow of case cid (its model as ckpt_name); print the
    LoRA file it needs, if any. Exit 3 when a workflow file cannot express it."""
    c = case_of(json.load(open(manifest_path)), cid)
    s = c["settings"]
    for k in ("controlnet", "init_image", "mask"):
        if k in s:
            print("needs %s input that no workflow file can hold exactly" % k)
            sys.exit(3)
    wf = {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": ckpt_name}},
        "5": {"class_type": "EmptyLatentImage",
              "inputs": {"width": s["width"], "height": s["height"], "batch_size": s.get("batch_size", 1)}},
        "3": {"class_type": "KSampler",
              "inputs": {"seed": s["seed"], "steps": s["steps"], "cfg": s["cfg"],
                         "sampler_name": s["sampler"], "scheduler": s["scheduler"],
                         "denoise": s.get("denoise", 1.0), "model": ["4", 0],
                         "positive": ["6", 0], "negative": ["7", 0], "latent_image": ["5", 0]}},
        "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
        "9": {"class_type": "SaveImage", "inputs": {"images": ["8", 0], "filename_prefix": cid}},
    }
    model, clip = ["4", 0], ["4", 1]
    lora = s.get("lora")
    if lora:
        wf["10"] = {"class_type": "LoraLoader",
                    "inputs": {"model": model, "clip": clip,
                               "lora_name": os.path.basename(lora["file"]),
                               "strength_model": lora["strength_model"],
                               "strength_clip": lora["strength_clip"]}}
        model, clip = ["10", 0], ["10", 1]
        print(lora["file"])
    wf["3"]["inputs"]["model"] = model
    wf["6"] = {"class_type": "CLIPTextEncode", "inputs": {"text": s["positive"], "clip": clip}}
    wf["7"] = {"class_type": "CLIPTextEncode", "inputs": {"text": s["negative"], "clip": clip}}
    json.dump(wf, open(out_path, "w"), indent=1)

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
    {"model": cmd_model, "check": cmd_check, "same": cmd_same, "cases": cmd_cases,
     "workflow": cmd_workflow}[sys.argv[1]](*sys.argv[2:])
PY

ran=0
for id in $(python3 "$T/check.py" cases "$DATA/manifest.json"); do
    set -- $(python3 "$T/check.py" model "$DATA/manifest.json" "$id")
    if [ $# -ne 2 ]; then fail "$id: no manifest model for it"; continue; fi
    model="$DATA/$1"
    golden="$DATA/$2"
    if [ ! -f "$model" ] || [ ! -f "$golden" ]; then fail "$id: the manifest lists $model and $golden, one is absent"; continue; fi
    W="$T/$id"
    mkdir -p "$W/models/checkpoints" "$W/models/loras"
    ln -s "$model" "$W/models/checkpoints/$(basename "$model")"
    wf="$W/$id.json"
    extra=$(python3 "$T/check.py" workflow "$DATA/manifest.json" "$id" "$(basename "$model")" "$wf")
    case $? in
    0) ;;
    3) echo "$id: $extra; skipped here (nodes.golden_e2e checks it)"; continue ;;
    *) fail "$id: could not make its workflow: $extra"; continue ;;
    esac
    for f in $extra; do
        [ -f "$DATA/$f" ] || { fail "$id: $DATA/$f missing"; continue 2; }
        ln -s "$DATA/$f" "$W/models/loras/$(basename "$f")"
    done
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
[ "$ran" -gt 0 ] || fail "no e2e workflow ran"
sd_test_end "ok: $ran workflows"
