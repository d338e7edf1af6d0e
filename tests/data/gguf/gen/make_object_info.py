"""ComfyUI's /object_info entries of ComfyUI-GGUF's nodes that sdflow implements.

    /usr/bin/python3 make_object_info.py COMFY EINOPS CLIP COMFYUI_GGUF NODES.json OUT.json

COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts; COMFYUI_GGUF: a
city96/ComfyUI-GGUF tree (its commit in a .commit file); NODES.json: `sdflow nodes --json` (only
the class names are used). The pack is imported as ComfyUI imports a custom node pack, and each
entry is made as ComfyUI's server.py node_info makes it (display_name from the pack's
NODE_DISPLAY_NAME_MAPPINGS, its TITLEs); file lists are the marker "<files>" and tooltips are left
out, as in tests/data/comfyui_object_info.json, which tests/cli/test_object_info.sh reads together
with this file (tests/data/gguf/object_info.json).
"""
import importlib.util
import json
import os
import sys
import types

comfy_root, einops_root, clip_root, cgguf, nodes_json, out = sys.argv[1:7]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "../../../../../shared/tools/comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(comfy_root, einops_root, clip_root)
FILES = "<files>"
import folder_paths  # noqa: E402

folder_paths.get_filename_list = lambda *a, **k: [FILES]
spec = importlib.util.spec_from_file_location("ComfyUI_GGUF", os.path.join(cgguf, "__init__.py"),
                                              submodule_search_locations=[cgguf])
pack = importlib.util.module_from_spec(spec)
sys.modules["ComfyUI_GGUF"] = pack
spec.loader.exec_module(pack)
ours = json.load(open(nodes_json))
result = {}
for name, cls in sorted(pack.NODE_CLASS_MAPPINGS.items()):
    if name not in ours:
        continue
    it = cls.INPUT_TYPES()
    e = {"input": {}, "input_order": {}}
    for sec in ("required", "optional"):
        if sec in it:
            e["input"][sec] = {}
            for k, v in it[sec].items():
                t = v[0]
                if isinstance(t, list) and t and all(x == FILES for x in t):
                    t = [FILES]
                o = {kk: vv for kk, vv in v[1].items() if kk != "tooltip"} if len(v) > 1 else {}
                e["input"][sec][k] = [t] + ([o] if o else [])
            e["input_order"][sec] = list(it[sec])
    e["output"] = list(cls.RETURN_TYPES)
    e["output_name"] = list(getattr(cls, "RETURN_NAMES", None) or cls.RETURN_TYPES)
    e["output_is_list"] = list(getattr(cls, "OUTPUT_IS_LIST", None) or [False] * len(cls.RETURN_TYPES))
    e["display_name"] = pack.NODE_DISPLAY_NAME_MAPPINGS.get(name, name)
    e["category"] = cls.CATEGORY
    e["output_node"] = bool(getattr(cls, "OUTPUT_NODE", False))
    e["deprecated"] = bool(getattr(cls, "DEPRECATED", False))
    e["experimental"] = bool(getattr(cls, "EXPERIMENTAL", False))
    result[name] = e
commit = open(os.path.join(cgguf, ".commit")).read().strip() if os.path.exists(os.path.join(cgguf, ".commit")) else "?"
result["_source"] = {"comfyui_gguf": "city96/ComfyUI-GGUF", "commit": commit,
                     "comfyui_commit": open(os.path.join(HERE, "../../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip()
                     if os.path.exists(os.path.join(HERE, "../../../../../shared/tools/comfyref/COMFY_COMMIT")) else "?",
                     "generated_by": "tests/data/gguf/gen/make_object_info.py",
                     "note": "file lists are \"<files>\"; tooltips are left out"}
with open(out, "w") as f:
    json.dump(result, f, indent=1, sort_keys=True)
    f.write("\n")
print(sorted(k for k in result if not k.startswith("_")))
