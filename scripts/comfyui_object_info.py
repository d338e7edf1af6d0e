#!/usr/bin/env python3
"""comfyui_object_info.py - ComfyUI's /object_info entries for the node types
sdflow implements, made by ComfyUI's own code.

usage: /usr/bin/python3 comfyui_object_info.py REF_DIR NODES.json OUT.json

REF_DIR: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI/,
einops/, CLIP/; Debian's python3-torch runs them, see that folder's README).
NODES.json: `sdflow nodes --json` (only its class names are used).

ComfyUI is imported as `main.py` starts it (nodes.py, then init_extra_nodes:
every comfy_extras module, V1 and V3 alike; the example custom node
custom_nodes/websocket_image_save.py that ComfyUI's repository ships, as
ComfyUI loads a custom node). Each entry is what server.py's node_info
answers for the class, written here by reading server.py: a V3 node's
GET_NODE_INFO_V1(), else the V1 fields (input, input_order, output,
output_is_list, output_name, name, display_name, description, python_module,
category, output_node, output_tooltips, deprecated/experimental when set,
api_node). Everything a client sees is kept, tooltips included. The only
change: lists of files (models folders, the input folder) are the marker
"<files>", since they depend on the machine.

The result is tests/data/comfyui_object_info.json, which
tests/cli/test_object_info.sh compares with `sdflow nodes --json` field by
field. Regenerate it when adding a node or moving to a newer ComfyUI and
review the diff. node_info() is also used by the generators of custom node
packs' entries (tests/data/gguf/gen/make_object_info.py).
"""
import asyncio
import json
import logging
import os
import sys
import tempfile
import types

FILES = "<files>"
HERE = os.path.dirname(os.path.abspath(__file__))
# custom nodes shipped inside ComfyUI's own repository that sdflow implements
SHIPPED_CUSTOM_NODES = ["custom_nodes/websocket_image_save.py"]


def setup(ref_dir):
    """Imports ComfyUI from REF_DIR on the comfyref shims, with file lists as FILES."""
    comfyref = os.environ.get("COMFYREF", os.path.join(HERE, "..", "..", "shared", "tools", "comfyref"))
    sys.path.insert(0, comfyref)
    import comfy_env
    logging.disable(logging.CRITICAL)  # ComfyUI's import warnings (no GPU, old torch) are not ours
    comfy_env.setup(os.path.join(ref_dir, "ComfyUI"), os.path.join(ref_dir, "einops"),
                    os.path.join(ref_dir, "CLIP"))
    logging.disable(logging.CRITICAL)
    # nodes_images imports server.py (aiohttp) for PromptServer.instance only
    server = types.ModuleType("server")
    server.PromptServer = type("PromptServer", (), {"instance": None})
    sys.modules.setdefault("server", server)
    import folder_paths
    empty = tempfile.mkdtemp()
    folder_paths.get_filename_list = lambda *a, **k: [FILES]
    folder_paths.get_input_directory = lambda *a, **k: empty
    folder_paths.filter_files_content_types = lambda files, *a, **k: [FILES]
    folder_paths.filter_files_extensions = lambda files, *a, **k: [FILES]
    return folder_paths


def load_comfyui(ref_dir):
    """ComfyUI's node classes as main.py loads them (api nodes and installed packs left out)."""
    setup(ref_dir)
    import nodes
    failed = asyncio.run(nodes.init_extra_nodes(init_custom_nodes=False, init_api_nodes=False))
    for f in SHIPPED_CUSTOM_NODES:
        if not asyncio.run(nodes.load_custom_node(os.path.join(ref_dir, "ComfyUI", f))):
            failed.append(f)
    return nodes, failed


def node_info(nodes, node_class):
    """server.py's node_info for one class."""
    from comfy_api.internal import _ComfyNodeInternal
    cls = nodes.NODE_CLASS_MAPPINGS[node_class]
    if issubclass(cls, _ComfyNodeInternal):
        return cls.GET_NODE_INFO_V1()
    it = cls.INPUT_TYPES()
    info = {"input": it, "input_order": {sec: list(v.keys()) for sec, v in cls.INPUT_TYPES().items()},
            "output": cls.RETURN_TYPES,
            "output_is_list": getattr(cls, "OUTPUT_IS_LIST", [False] * len(cls.RETURN_TYPES))}
    info["output_name"] = getattr(cls, "RETURN_NAMES", info["output"])
    info["name"] = node_class
    info["display_name"] = nodes.NODE_DISPLAY_NAME_MAPPINGS.get(node_class, node_class)
    info["description"] = getattr(cls, "DESCRIPTION", "")
    info["python_module"] = getattr(cls, "RELATIVE_PYTHON_MODULE", "nodes")
    info["category"] = getattr(cls, "CATEGORY", "sd")
    info["output_node"] = getattr(cls, "OUTPUT_NODE", False) is True
    if hasattr(cls, "OUTPUT_TOOLTIPS"):
        info["output_tooltips"] = cls.OUTPUT_TOOLTIPS
    if getattr(cls, "DEPRECATED", False):
        info["deprecated"] = True
    if getattr(cls, "EXPERIMENTAL", False):
        info["experimental"] = True
    if hasattr(cls, "API_NODE"):
        info["api_node"] = cls.API_NODE
    return info


def files_marked(entry):
    """A combo listing only FILES (several folders joined) lists it once."""
    for sec, inputs in entry["input"].items():
        for name, spec in inputs.items():
            if isinstance(spec, (list, tuple)) and spec and isinstance(spec[0], (list, tuple)) \
                    and spec[0] and all(x == FILES for x in spec[0]):
                inputs[name] = [[FILES]] + list(spec[1:])
    return entry


def plain(entry):
    """The entry as the JSON a client receives (tuples as lists, enums as values)."""
    return json.loads(json.dumps(entry, default=lambda o: getattr(o, "value", str(o))))


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    ref_dir, ours = argv[1], json.load(open(argv[2]))
    nodes, failed = load_comfyui(ref_dir)
    result = {}
    for name in sorted(ours):
        if name not in nodes.NODE_CLASS_MAPPINGS:
            print("not in ComfyUI's core: %s" % name, file=sys.stderr)
            continue
        result[name] = files_marked(plain(node_info(nodes, name)))
    commit = os.environ.get("COMFYUI_COMMIT")
    if not commit:
        pin = os.path.join(os.environ.get("COMFYREF", os.path.join(HERE, "..", "..", "shared", "tools", "comfyref")),
                           "COMFY_COMMIT")
        commit = open(pin).read().strip() if os.path.exists(pin) else "unknown"
    result["_source"] = {"comfyui": "ComfyUI as ../shared/tools/comfyref/extract_refs.sh extracts it",
                         "commit": commit, "generated_by": "scripts/comfyui_object_info.py",
                         "modules_not_imported": sorted(failed),
                         "note": "server.py's node_info for each class; file lists are \"<files>\""}
    with open(argv[3], "w") as f:
        json.dump(result, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
