"""ComfyUI's /object_info entries of ComfyUI-GGUF's nodes that sdflow implements.

    /usr/bin/python3 make_object_info.py REF_DIR COMFYUI_GGUF NODES.json OUT.json

REF_DIR: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI/, einops/, CLIP/);
COMFYUI_GGUF: a city96/ComfyUI-GGUF tree in a folder named ComfyUI-GGUF (the name its README clones
it under, which ComfyUI makes its python_module: custom_nodes.ComfyUI-GGUF), its commit in a
.commit file; NODES.json: `sdflow nodes --json` (only the class names are used). ComfyUI is loaded as
scripts/comfyui_object_info.py loads it, the pack as ComfyUI loads a custom node pack
(nodes.load_custom_node), and each entry is server.py's node_info (that script's node_info()): file
lists are the marker "<files>", everything else as a client receives it. tests/cli/test_object_info.sh
reads this file together with tests/data/comfyui_object_info.json.
"""
import asyncio
import json
import os
import sys

ref_dir, cgguf, nodes_json, out = sys.argv[1:5]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "scripts"))
import comfyui_object_info as coi  # noqa: E402

nodes, _ = coi.load_comfyui(ref_dir)
before = set(nodes.NODE_CLASS_MAPPINGS)
if not asyncio.run(nodes.load_custom_node(os.path.abspath(cgguf))):
    sys.exit("ComfyUI could not load the pack in %s" % cgguf)
ours = json.load(open(nodes_json))
result = {}
for name in sorted(set(nodes.NODE_CLASS_MAPPINGS) - before):
    if name in ours:
        result[name] = coi.files_marked(coi.plain(coi.node_info(nodes, name)))
commit = open(os.path.join(cgguf, ".commit")).read().strip() if os.path.exists(os.path.join(cgguf, ".commit")) else "?"
pin = os.path.join(os.environ.get("COMFYREF", os.path.join(HERE, "../../../../../shared/tools/comfyref")),
                   "COMFY_COMMIT")
result["_source"] = {"comfyui_gguf": "city96/ComfyUI-GGUF", "commit": commit,
                     "comfyui_commit": open(pin).read().strip() if os.path.exists(pin) else "?",
                     "generated_by": "tests/data/gguf/gen/make_object_info.py",
                     "note": "server.py's node_info for each class; file lists are \"<files>\""}
with open(out, "w") as f:
    json.dump(result, f, indent=1, sort_keys=True, ensure_ascii=False)
    f.write("\n")
print(sorted(k for k in result if not k.startswith("_")))
