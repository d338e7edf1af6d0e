# `sdflow nodes --json` (what `sdflow serve` answers on /object_info) against
# ComfyUI's own /object_info for every node type sdflow registers, field by
# field. The expected entries were made by ComfyUI's code
# (scripts/comfyui_object_info.py: server.py's node_info for each class of
# the pinned ComfyUI, commit in their "_source"); the nodes of custom node
# packs sdflow implements come from the pack itself (tests/data/gguf/
# object_info.json: city96/ComfyUI-GGUF, by tests/data/gguf/gen/
# make_object_info.py). Every key of every entry is compared (inputs with
# their types, choices, defaults, ranges, steps, rounding, tooltips, display
# and dynamicPrompts flags; hidden inputs; outputs, names, list flags and
# tooltips; name, display_name, description, python_module, category,
# output_node, deprecated, experimental, api_node...), with null and false
# kept distinct from absent, as a client sees them. Only lists of files are
# not compared ("<files>": they depend on the machine), plus the known
# differences below, each with its reason. Every node sdflow lists must have
# an expected entry (a new node: regenerate the file, docs/nodes.md), and
# the CLI's alias classes must not be listed.
set -u
: "${SDFLOW_BIN:?}" "${SDFLOW_SOURCE_DIR:?}"
command -v python3 > /dev/null || { echo "SKIP: python3 is needed to compare JSON"; exit 77; }
T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_object_info"
rm -rf "$T" && mkdir -p "$T/models"
"$SDFLOW_BIN" nodes --json --models-dir "$T/models" > "$T/ours.json" 2> "$T/err" || { echo "FAIL: sdflow nodes --json: $(cat "$T/err")"; exit 1; }
"$SDFLOW_BIN" nodes > "$T/table.txt" 2> "$T/err" || { echo "FAIL: sdflow nodes: $(cat "$T/err")"; exit 1; }
python3 - "$T/ours.json" "$T/table.txt" "$SDFLOW_SOURCE_DIR/tests/data/comfyui_object_info.json" \
    "$SDFLOW_SOURCE_DIR/tests/data/gguf/object_info.json" << 'PY'
import json, sys
ours = json.load(open(sys.argv[1]))
table = open(sys.argv[2]).read().splitlines()
exp, source = {}, json.load(open(sys.argv[3]))["_source"]
for f in sys.argv[3:]:
    exp.update({k: v for k, v in json.load(open(f)).items() if not k.startswith("_")})
FILES = "<files>"
probs = []

def p(node, path, want, got):
    show = lambda v: v if isinstance(v, str) else json.dumps(v)[:160]
    probs.append("%s%s: ComfyUI %s, sdflow %s" % (node, path, show(want), show(got)))

def known(node, path, want, got):
    # sdflow has no pixel-space models to offer
    if node == "VAELoader" and path.endswith("vae_name[0]") and want == [FILES, "pixel_space"]:
        return isinstance(got, list)
    # ComfyUI's V1 PreviewAny writes ("*", {}): an empty options object, which
    # every client reads as no options (the only V1 input written so)
    return node == "PreviewAny" and path == ".input.required.source" and want == ["*", {}] and got == ["*"]

def same(node, path, want, got):
    if known(node, path, want, got):
        return
    if want == [FILES] and (path.endswith("[0]") or path.endswith(".options")):
        if not isinstance(got, list) or not all(isinstance(x, str) for x in got):
            p(node, path, "a list of files", got)
        return
    if isinstance(want, dict) and isinstance(got, dict):
        for k in want:
            if k in got: same(node, "%s.%s" % (path, k), want[k], got[k])
            else: p(node, "%s.%s" % (path, k), want[k], "(absent)")
        for k in got:
            if k not in want: p(node, "%s.%s" % (path, k), "(absent)", got[k])
        return
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got) and \
            any(isinstance(x, (list, dict)) for x in want):
        for i, (a, b) in enumerate(zip(want, got)): same(node, "%s[%d]" % (path, i), a, b)
        return
    # 8.0 == 8 as JSON numbers; true is not 1, null is not absent
    if want != got or (type(want) is bool) != (type(got) is bool) or (want is None) != (got is None):
        p(node, path, want, got)

for name in sorted(set(exp) | set(ours)):
    if name not in ours: p(name, "", "an entry", "(absent from sdflow nodes --json)")
    elif name not in exp: p(name, "", "(no entry: regenerate tests/data/comfyui_object_info.json)", "an entry")
    else: same(name, "", exp[name], ours[name])
# the CLI's alias classes: usable in workflow files, listed by the table as aliases only
aliases = [l.split()[0] for l in table if " alias of " in l]
for a in ("CLIPEncode", "LoadCheckpoint", "LoRA", "ControlNet"):
    if a not in aliases: probs.append("%s: not listed as an alias by sdflow nodes" % a)
    if a in ours: probs.append("%s: an alias listed by sdflow nodes --json" % a)
for line in probs: print("FAIL:", line)
checked = len(set(exp) & set(ours))
print("%d node types compared with ComfyUI %s: %d differences" % (checked, source["commit"], len(probs)))
sys.exit(1 if probs or checked == 0 else 0)
PY
