# `sdflow nodes --json` against ComfyUI's /object_info for every node type we
# implement. The expected entries (tests/data/comfyui_object_info.json) were
# derived from ComfyUI's own definitions (nodes.py, comfy_extras V3 schemas,
# comfy/samplers.py) by scripts/comfyui_object_info.py and checked by
# reading; their "_source" names the ComfyUI commit. The nodes of custom node
# packs sdflow implements come from the pack itself (tests/data/gguf/
# object_info.json: city96/ComfyUI-GGUF, by tests/data/gguf/gen/make_object_info.py). Compared per node: the
# input order (required, optional), each input's type or combo options
# (file lists excepted), default/min/max/step/multiline/image_upload/
# control_after_generate, outputs and their names, display_name, category,
# output_node. What ComfyUI's editor implies is accepted where ComfyUI
# leaves it out (a combo's first option as default, step 1 for an INT, ""
# for a STRING, multiline false); min or max where ComfyUI has none is not. The few known
# differences are listed below with their reason.
set -u
: "${SDFLOW_BIN:?}" "${SDFLOW_SOURCE_DIR:?}"
command -v python3 > /dev/null || { echo "SKIP: python3 is needed to compare JSON"; exit 77; }
T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_object_info"
rm -rf "$T" && mkdir -p "$T/models"
"$SDFLOW_BIN" nodes --json --models-dir "$T/models" > "$T/ours.json" 2> "$T/err" || { echo "FAIL: sdflow nodes --json: $(cat "$T/err")"; exit 1; }
python3 - "$SDFLOW_SOURCE_DIR/tests/data/comfyui_object_info.json" "$T/ours.json" \
    "$SDFLOW_SOURCE_DIR/tests/data/gguf/object_info.json" << 'PY'
import json, sys
exp = json.load(open(sys.argv[1]))
ours = json.load(open(sys.argv[2]))
# custom node packs whose nodes sdflow implements, from their own definitions
for extra in sys.argv[3:]:
    x = json.load(open(extra))
    exp.update({k: v for k, v in x.items() if not k.startswith("_")})
FILES = "<files>"
# Known differences, each with its reason.
def known(node, inp, key, o, e):
    if key == "options" and node == "VAELoader":
        return e == [FILES, "pixel_space"]  # sdflow has no pixel-space models to offer
    return False
probs = []
def p(node, msg): probs.append("%s: %s" % (node, msg))
checked = 0
for name, e in sorted(exp.items()):
    if name.startswith("_"): continue
    o = ours.get(name)
    if o is None: p(name, "not in sdflow nodes --json"); continue
    checked += 1
    for sec in ("required", "optional"):
        eo, oo = e["input_order"].get(sec, []), o["input_order"].get(sec, [])
        if eo != oo: p(name, "%s inputs %s, ComfyUI %s" % (sec, oo, eo))
        for inp in eo:
            es, os_ = e["input"][sec][inp], o["input"].get(sec, {}).get(inp)
            if os_ is None: continue
            et, ot = es[0], os_[0]
            if isinstance(et, list):
                if not isinstance(ot, list): p(name, "%s: type %s, ComfyUI a combo" % (inp, ot))
                elif et != [FILES] and et != ot and not known(name, inp, "options", ot, et):
                    p(name, "%s: options %s, ComfyUI %s" % (inp, ot, et))
            elif et != ot: p(name, "%s: type %s, ComfyUI %s" % (inp, ot, et))
            eopt = es[1] if len(es) > 1 else {}
            oopt = os_[1] if len(os_) > 1 else {}
            for k in ("default", "min", "max", "step", "multiline", "image_upload", "control_after_generate"):
                if k in eopt:
                    # multiline false is what the editor assumes when it is left out
                    if oopt.get(k, False if k == "multiline" else None) != eopt[k]: p(name, "%s.%s = %s, ComfyUI %s" % (inp, k, oopt.get(k, "(none)"), eopt[k]))
                elif k in oopt:
                    implied = (k == "default" and isinstance(ot, list) and ot and oopt[k] == ot[0]) or \
                              (k == "default" and ot == "STRING" and oopt[k] == "") or \
                              (k == "step" and ot == "INT" and oopt[k] == 1)
                    if not implied: p(name, "%s.%s = %s, ComfyUI has none" % (inp, k, oopt[k]))
        extra = [i for i in o["input_order"].get(sec, []) if i not in eo]
        if extra: p(name, "%s inputs ComfyUI lacks: %s" % (sec, extra))
    for k in ("output", "output_name", "output_is_list", "display_name", "category", "output_node",
              "deprecated", "experimental"):
        if e[k] != o.get(k): p(name, "%s %s, ComfyUI %s" % (k, o.get(k), e[k]))
for line in probs: print("FAIL:", line)
print("%d node types compared with ComfyUI %s: %d differences" % (checked, exp["_source"]["commit"], len(probs)))
sys.exit(1 if probs or checked == 0 else 0)
PY
