# Legacy group nodes (a UI file's `workflow/NAME` nodes, defined under
# extra.groupNodes) against ComfyUI's frontend, on tests/data/group_nodes
# (made by the legacy frontend's own groupNode.js; gen_group_nodes.mjs):
#   - for every case of the manifest, `sdflow export --json CASE.ui.json`
#     gives the prompt the manifest names as expected (the legacy frontend's
#     graphToPrompt, or the current frontend's where the manifest says why),
#     node by node and input by input (titles aside: the legacy frontend
#     sends none);
#   - the same file with the newer "workflow>NAME" spelling converts alike;
#   - a case with a group node runs end to end on the tiny SD1 checkpoint and
#     saves the picture its API form saves;
#   - a group node without a definition, or with an inner node type sdflow
#     lacks, is refused naming the group node.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_group_nodes
sd_test_need_cmd python3
G="$SDFLOW_SOURCE_DIR/tests/data/group_nodes"

cat > "$T/cmp.py" << 'PY'
import json, sys
want, got = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for n in got.values():
    n.pop("_meta", None)
bad = []
for k in sorted(set(want) | set(got)):
    if k not in got: bad.append(f"node {k} ({want[k]['class_type']}) missing")
    elif k not in want: bad.append(f"node {k} ({got[k]['class_type']}) not in the frontend's prompt")
    elif want[k] != got[k]: bad.append(f"node {k}: frontend {json.dumps(want[k])}\n    sdflow   {json.dumps(got[k])}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
cases=$(python3 -c 'import json,sys; [print(c["name"], c["ui"], c["expected"]) for c in json.load(open(sys.argv[1]))["cases"]]' "$G/manifest.json") ||
    fail "cannot read $G/manifest.json"
[ -n "$cases" ] || fail "no cases in $G/manifest.json"
while read -r name ui expected; do
    [ -n "$name" ] || continue
    if ! "$SDFLOW_BIN" export --json "$G/$ui" > "$T/$name.json" 2> "$T/$name.err"; then
        fail "$name: export: $(tail -2 "$T/$name.err")"
        continue
    fi
    python3 "$T/cmp.py" "$G/$expected" "$T/$name.json" > "$T/$name.diff" || fail "$name: $(cat "$T/$name.diff")"
    # the spelling of frontend 1.3 and later converts alike
    sed 's#"workflow/#"workflow>#g' "$G/$ui" > "$T/$name.new.ui.json"
    "$SDFLOW_BIN" export --json "$T/$name.new.ui.json" > "$T/$name.new.json" 2> "$T/$name.new.err" &&
        python3 "$T/cmp.py" "$G/$expected" "$T/$name.new.json" > /dev/null ||
        fail "$name: the workflow>NAME spelling: $(tail -2 "$T/$name.new.err")"
done <<< "$cases"

# refusals: no definition; an inner node type sdflow lacks
python3 - "$G/encoders.ui.json" "$T" << 'PY'
import json, sys
ui = json.load(open(sys.argv[1]))
nodef = json.loads(json.dumps(ui)); nodef["extra"]["groupNodes"] = {}
json.dump(nodef, open(sys.argv[2] + "/nodef.json", "w"))
unknown = json.loads(json.dumps(ui))
next(iter(unknown["extra"]["groupNodes"].values()))["nodes"][1]["type"] = "NoSuchNodeAnywhere"
json.dump(unknown, open(sys.argv[2] + "/unknown.json", "w"))
PY
"$SDFLOW_BIN" export --json "$T/nodef.json" > /dev/null 2> "$T/nodef.err" && fail "a group node without a definition was converted"
grep -q "workflow/encoders" "$T/nodef.err" && grep -q "extra.groupNodes" "$T/nodef.err" ||
    fail "no-definition refusal: $(cat "$T/nodef.err")"
"$SDFLOW_BIN" export --json "$T/unknown.json" > /dev/null 2> "$T/unknown.err" && fail "an unknown inner node type was converted"
grep -q "NoSuchNodeAnywhere" "$T/unknown.err" && grep -q "workflow/encoders" "$T/unknown.err" ||
    fail "unknown inner type refusal: $(cat "$T/unknown.err")"

# end to end: the group node file runs and saves what its API form saves
if [ -f "$DATA/models/tiny-sd1.safetensors" ] && [ -f "$TOK/vocab.json" ]; then
    mkdir -p "$T/models/checkpoints"
    ln -s "$DATA/models/tiny-sd1.safetensors" "$T/models/checkpoints/tiny-sd1.safetensors"
    SMALL=(--set 3.steps=2 --set 5.width=64 --set 5.height=64 --models-dir "$T/models" --tokenizer-dir "$TOK" --no-cache --quiet)
    "$SDFLOW_BIN" run "$G/encoders.ui.json" "${SMALL[@]}" --output-dir "$T/out/ui" > /dev/null 2> "$T/run_ui.err" ||
        fail "running encoders.ui.json: $(tail -3 "$T/run_ui.err")"
    "$SDFLOW_BIN" run "$G/encoders.api.json" "${SMALL[@]}" --output-dir "$T/out/api" > /dev/null 2> "$T/run_api.err" ||
        fail "running encoders.api.json: $(tail -3 "$T/run_api.err")"
    python3 - "$T/out/ui" "$T/out/api" << 'PY' || fail "the group node file and its API form saved different pixels"
import glob, struct, sys
def pix(d):
    p = sorted(glob.glob(d + "/*.png"))[0]
    data, pos, out = open(p, "rb").read(), 8, b""
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        if data[pos + 4:pos + 8] in (b"IHDR", b"IDAT"): out += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    return out
sys.exit(0 if pix(sys.argv[1]) == pix(sys.argv[2]) else 1)
PY
else
    sd_test_skip_data "the tiny SD1 checkpoint or the CLIP vocabulary (for the end-to-end run)"
fi
sd_test_end "ok: legacy group nodes convert as the frontend does and run"
