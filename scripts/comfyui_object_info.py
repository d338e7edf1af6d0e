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
import re
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
        return "*" if name == "ANY" else name


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
    import comfy.comfy_types.node_typing
    comfy.comfy_types.node_typing.IO = IO
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


class V3Output:
    def __init__(self, kind, display_name=None, is_output_list=False, **opts):
        self.kind, self.display_name, self.is_output_list = kind, display_name, is_output_list


class AnyAttr:
    """io.Hidden.prompt, io.NumberDisplay.number, ...: values the entries leave out."""

    def __getattr__(self, name):
        return name


# io.<Kind> -> the type name ComfyUI gives it (the rest are Kind.upper())
V3_TYPES = {"Clip": "CLIP", "Vae": "VAE", "UpscaleModel": "UPSCALE_MODEL",
            "LatentOperation": "LATENT_OPERATION"}


class V3IO:
    """comfy_api.latest.io as a schema reads it: io.<Kind>.Input / .Output for any kind."""

    def __init__(self):
        self.Schema = lambda **k: k
        self.Hidden = AnyAttr()
        self.NumberDisplay = AnyAttr()

    def __getattr__(self, kind):
        tname = V3_TYPES.get(kind, kind.upper())
        ns = types.SimpleNamespace()
        ns.Input = lambda name, *a, **o: V3Input(tname, name, **o)
        ns.Output = lambda display_name=None, *a, **o: V3Output(tname, display_name, **o)
        ns.Template = ns.TemplatePrefix = ns.Option = lambda *a, **o: None
        setattr(self, kind, ns)
        return ns


def v3_io():
    return V3IO()


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
         "output": [o.kind for o in outs], "output_name": [o.display_name or o.kind for o in outs],
         "output_is_list": [bool(o.is_output_list) for o in outs],
         "display_name": schema.get("display_name") or schema["node_id"],
         "category": schema.get("category", ""), "output_node": bool(schema.get("is_output_node")),
         "deprecated": bool(schema.get("is_deprecated")), "experimental": bool(schema.get("is_experimental"))}
    if opt:
        e["input"]["optional"] = opt
        e["input_order"]["optional"] = order_o
    return e


def v3_nodes(comfy_dir, files, unread):
    """The V3 entries of files; unread[node class name] says why a schema was not read."""
    io = v3_io()
    import comfy.samplers  # the stub with the real sampler/scheduler lists
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
                    # class attributes a schema may read through cls. (upscale_methods, ...)
                    attrs = {}
                    for st in cls.body:
                        if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
                            try:
                                attrs[st.targets[0].id] = ast.literal_eval(st.value)
                            except ValueError:
                                pass
                    env = {"io": io, "IO": io, "comfy": comfy, "sys": sys,
                           "cls": types.SimpleNamespace(**attrs),
                           "nodes": types.SimpleNamespace(MAX_RESOLUTION=MAX_RESOLUTION),
                           "MAX_RESOLUTION": MAX_RESOLUTION,
                           "folder_paths": types.SimpleNamespace(get_filename_list=lambda f: [FILES])}
                    # enums a schema lists (PorterDuffMode)
                    for st in tree.body:
                        if isinstance(st, ast.ClassDef) and any(getattr(b, "id", "") == "Enum" for b in st.bases):
                            members = [t.targets[0].id for t in st.body if isinstance(t, ast.Assign)]
                            env[st.name] = EnumStub(members)
                    try:
                        schema = eval(compile(ast.Expression(ret.value), f, "eval"), env)
                    except Exception as ex:  # a node of a kind this reading does not model
                        node_id = re.search(r'node_id="([^"]+)"', ast.get_source_segment(src, fn) or "")
                        unread[node_id.group(1) if node_id else cls.name] = "%s: %s" % (f, ex)
                        continue
                    out[schema["node_id"]] = v3_entry(schema)
    return out


class EnumStub:
    """A class-level Enum as a schema reads it: iteration gives members with .name, and
    Enum.MEMBER.name the member's name."""

    def __init__(self, members):
        self._members = [types.SimpleNamespace(name=m) for m in members]
        for m in self._members:
            setattr(self, m.name, m)

    def __iter__(self):
        return iter(self._members)


MAX_RESOLUTION = None
# comfy_extras modules whose nodes are V3 schemas (comfy_api.latest.io), read without running them
V3_FILES = ["nodes_canny", "nodes_clip_sdxl", "nodes_align_your_steps", "nodes_upscale_model",
            "nodes_custom_sampler", "nodes_mask", "nodes_images", "nodes_post_processing",
            "nodes_compositing", "nodes_morphology", "nodes_rebatch", "nodes_latent",
            "nodes_primitive", "nodes_string", "nodes_sd3", "nodes_flux"]
# comfy_extras modules of V1 nodes (INPUT_TYPES), run with their imports stubbed
EXTRA_V1 = ["nodes_model_merging", "nodes_model_advanced", "nodes_preview_any"]


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
    unread = {}
    v3 = v3_nodes(comfy_dir, ["comfy_extras/%s.py" % f for f in V3_FILES], unread)
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
        if name in unread:
            sys.exit("%s: its V3 schema could not be read: %s" % (name, unread[name]))
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
        e["output_is_list"] = list(getattr(cls, "OUTPUT_IS_LIST", None) or [False] * len(cls.RETURN_TYPES))
        e["display_name"] = display.get(name, name)
        e["category"] = cls.CATEGORY
        e["output_node"] = bool(getattr(cls, "OUTPUT_NODE", False))
        e["deprecated"] = bool(getattr(cls, "DEPRECATED", False))
        e["experimental"] = bool(getattr(cls, "EXPERIMENTAL", False))
        result[name] = e
    result["_source"] = {"comfyui": "a ComfyUI tree as ../shared/tools/comfyref/extract_refs.sh extracts it", "commit": os.environ.get("COMFYUI_COMMIT", "unknown"),
                         "generated_by": "scripts/comfyui_object_info.py",
                         "note": "file lists are \"<files>\"; tooltips are left out"}
    with open(argv[3], "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
