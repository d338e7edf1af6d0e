#!/usr/bin/env python3
"""comfyui_object_info.py - derive ComfyUI's /object_info entries for the
node types sdflow implements, from a ComfyUI checkout, without torch.

usage: comfyui_object_info.py COMFYUI_DIR NODES.json OUT.json

NODES.json is `sdflow nodes --json` (only its class names are used). The
script runs nodes.py (and the V1 modules of comfy_extras it knows) with
every heavy import replaced by a stub, calls
INPUT_TYPES() of the V1 node classes (the sampler/scheduler lists are read
from comfy/samplers.py), and turns the V3 schemas (io.Schema in
comfy_extras/) into the same V1 shape. File lists (models, input files) are
written as the marker "<files>": they depend on the machine. The result is
tests/data/comfyui_object_info.json, which tests/cli/test_object_info.sh
compares with `sdflow nodes --json`; regenerate it when moving to a newer
ComfyUI and review the diff.
"""
import ast
import importlib.abc
import importlib.machinery
import json
import os
import sys
import tempfile
import types

FILES = "<files>"


class Stub(types.ModuleType):
    """Any attribute or call gives another stub; enough for module bodies."""

    def __init__(self, name="stub"):
        super().__init__(name)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        s = Stub(self.__name__ + "." + name)
        setattr(self, name, s)
        return s

    def __call__(self, *a, **k):
        return Stub(self.__name__ + "()")

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases):
        return (object,)


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stubs every module except the standard library and ours."""

    def __init__(self, real):
        self.real = real

    def find_spec(self, name, path, target=None):
        if name in sys.modules or name.split(".")[0] in self.real:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return Stub(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def sampler_lists(comfy_dir):
    tree = ast.parse(open(os.path.join(comfy_dir, "comfy", "samplers.py")).read())
    env = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("KSAMPLER_NAMES", "SAMPLER_NAMES"):
                env[name] = eval(compile(ast.Expression(node.value), "samplers", "eval"), {}, env)
            if name == "SCHEDULER_HANDLERS":
                env["SCHEDULER_NAMES"] = [k.value for k in node.value.keys]
    return env["SAMPLER_NAMES"], env["SCHEDULER_NAMES"]


class IOType(str):
    pass


class IOEnum(type):
    def __getattr__(cls, name):
        return name


class IO(metaclass=IOEnum):
    pass


def install_stubs(comfy_dir, input_dir):
    samplers, schedulers = sampler_lists(comfy_dir)
    real = set(sys.stdlib_module_names) | {"nodes"}
    sys.meta_path.insert(0, Finder(real))
    import comfy.samplers  # a stub package
    comfy.samplers.KSampler = type("KSampler", (), {"SAMPLERS": samplers, "SCHEDULERS": schedulers})
    comfy.samplers.SAMPLER_NAMES = samplers
    comfy.samplers.SCHEDULER_NAMES = schedulers
    import comfy.comfy_types
    comfy.comfy_types.IO = IO
    comfy.comfy_types.ComfyNodeABC = object
    comfy.comfy_types.InputTypeDict = dict
    comfy.comfy_types.FileLocator = dict
    import folder_paths
    folder_paths.get_filename_list = lambda *a, **k: [FILES]
    folder_paths.get_input_directory = lambda *a, **k: input_dir
    folder_paths.get_output_directory = lambda *a, **k: input_dir
    folder_paths.get_temp_directory = lambda *a, **k: input_dir
    folder_paths.filter_files_content_types = lambda files, *a, **k: [FILES]
    folder_paths.filter_files_extensions = lambda files, *a, **k: [FILES]


# ---- V3 schemas (comfy_api.latest.io) turned into V1 entries --------------------------

class V3Input:
    def __init__(self, kind, name, **opts):
        self.kind, self.name, self.opts = kind, name, opts


def v3_io():
    io = types.SimpleNamespace()
    for kind in ("Int", "Float", "String", "Boolean", "Image", "Mask", "Latent", "Clip", "Conditioning",
                 "Model", "Vae", "Combo", "UpscaleModel", "Sigmas", "Sampler", "Noise", "Guider"):
        tname = {"Clip": "CLIP", "Vae": "VAE", "UpscaleModel": "UPSCALE_MODEL"}.get(kind, kind.upper())
        ns = types.SimpleNamespace()
        ns.Input = (lambda t: lambda name, **o: V3Input(t, name, **o))(tname)
        ns.Output = (lambda t: lambda display_name=None, **o: (t, display_name))(tname)
        setattr(io, kind, ns)
    io.Schema = lambda **k: k
    return io


def v3_entry(schema):
    req, opt, order_r, order_o = {}, {}, [], []
    for i in schema["inputs"]:
        o = {k: v for k, v in i.opts.items() if k not in ("tooltip", "optional", "display_mode")}
        if i.kind == "COMBO":
            spec = [o.pop("options")] + ([o] if o else [])
        else:
            spec = [i.kind] + ([o] if o else [])
        (opt if i.opts.get("optional") else req)[i.name] = spec
        (order_o if i.opts.get("optional") else order_r).append(i.name)
    outs = schema.get("outputs", [])
    e = {"input": {"required": req}, "input_order": {"required": order_r},
         "output": [t for t, _ in outs], "output_name": [n or t for t, n in outs],
         "display_name": schema.get("display_name") or schema["node_id"],
         "category": schema.get("category", ""), "output_node": bool(schema.get("is_output_node"))}
    if opt:
        e["input"]["optional"] = opt
        e["input_order"]["optional"] = order_o
    return e


def v3_nodes(comfy_dir, files):
    io = v3_io()
    out = {}
    for f in files:
        src = open(os.path.join(comfy_dir, f)).read()
        tree = ast.parse(src)
        for cls in tree.body:
            if not isinstance(cls, ast.ClassDef):
                continue
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "define_schema":
                    ret = next(s for s in ast.walk(fn) if isinstance(s, ast.Return))
                    env = {"io": io, "nodes": types.SimpleNamespace(MAX_RESOLUTION=MAX_RESOLUTION),
                           "folder_paths": types.SimpleNamespace(get_filename_list=lambda f: [FILES])}
                    schema = eval(compile(ast.Expression(ret.value), f, "eval"), env)
                    out[schema["node_id"]] = v3_entry(schema)
    return out


MAX_RESOLUTION = None
EXTRA_V1 = ["nodes_custom_sampler", "nodes_model_merging", "nodes_model_advanced"]


def main(argv):
    global MAX_RESOLUTION
    if len(argv) != 4:
        sys.exit(__doc__)
    comfy_dir, ours = argv[1], json.load(open(argv[2]))
    tmp = tempfile.mkdtemp()
    install_stubs(comfy_dir, tmp)
    sys.path.insert(0, comfy_dir)
    import nodes
    MAX_RESOLUTION = nodes.MAX_RESOLUTION
    v3 = v3_nodes(comfy_dir, ["comfy_extras/nodes_canny.py", "comfy_extras/nodes_clip_sdxl.py",
                              "comfy_extras/nodes_align_your_steps.py",
                              "comfy_extras/nodes_upscale_model.py"])
    # V1 nodes of comfy_extras: their own NODE_CLASS_MAPPINGS
    classes, display = dict(nodes.NODE_CLASS_MAPPINGS), dict(nodes.NODE_DISPLAY_NAME_MAPPINGS)
    import importlib.util
    for f in EXTRA_V1:
        spec = importlib.util.spec_from_file_location("comfy_extras_" + f,
                                                      os.path.join(comfy_dir, "comfy_extras", f + ".py"))
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        classes.update(getattr(m, "NODE_CLASS_MAPPINGS", {}))
        display.update(getattr(m, "NODE_DISPLAY_NAME_MAPPINGS", {}))
    result = {}
    for name, info in sorted(ours.items()):
        if "alias_of" in info:
            continue
        if name in v3:
            result[name] = v3[name]
            continue
        cls = classes.get(name)
        if cls is None:
            print("not in ComfyUI's core: %s" % name, file=sys.stderr)
            continue
        it = cls.INPUT_TYPES()
        e = {"input": {}, "input_order": {}}
        for sec in ("required", "optional"):
            if sec in it:
                e["input"][sec] = {}
                for k, v in it[sec].items():
                    o = {kk: vv for kk, vv in v[1].items() if kk != "tooltip"} if len(v) > 1 else {}
                    e["input"][sec][k] = [v[0]] + ([o] if o else [])
                e["input_order"][sec] = list(it[sec])
        e["output"] = list(cls.RETURN_TYPES)
        e["output_name"] = list(getattr(cls, "RETURN_NAMES", None) or cls.RETURN_TYPES)
        e["display_name"] = display.get(name, name)
        e["category"] = cls.CATEGORY
        e["output_node"] = bool(getattr(cls, "OUTPUT_NODE", False))
        result[name] = e
    result["_source"] = {"comfyui": comfy_dir, "commit": os.environ.get("COMFYUI_COMMIT", "unknown"),
                         "generated_by": "scripts/comfyui_object_info.py",
                         "note": "file lists are \"<files>\"; tooltips are left out"}
    with open(argv[3], "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
