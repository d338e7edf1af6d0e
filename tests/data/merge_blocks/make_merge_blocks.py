#!/usr/bin/python3
"""Per-block model merges computed by ComfyUI's own nodes (ModelMergeBlocks,
ModelMergeSD1 / SD2 / SDXL / Flux1, and ModelMergeSimple on Flux) on the tiny
models of the shared test data.

usage: /usr/bin/python3 make_merge_blocks.py COMFY EINOPS CLIP NODE_MODULES SHARED SD1_MODEL2 SDXL_MODEL2 [OUT_DIR]
  COMFY EINOPS CLIP: the trees shared/tools/comfyref/extract_refs.sh extracts
  NODE_MODULES:      the npm folder of shared/tools/comfyref/flux/package.json (flux_env; unused here)
  SHARED:            ../shared (testdata/models/tiny-sd1, tiny-sdxl; testdata/flux/models/tiny-flux1-dev)
  SD1_MODEL2:        `sdflow synth --preset sd1-tiny --seed 7` (the test writes the same bytes)
  SDXL_MODEL2:       `sdflow synth --preset sdxl-tiny --seed 7`
Flux's model2 is made here and kept beside this script (flux_model2.safetensors,
BF16): the tiny dev DiT plus N(0, 0.05) noise from torch.Generator seed 1234
per tensor in sorted key order, rounded to BF16.

Every case merges model2 into model1 with its node and inputs, patches the
model as ComfyUI does before sampling (ModelPatcher.patch_model with
force_patch_weights) and records, for every diffusion-model parameter of the
manifest's key list of that family (ComfyUI's state-dict order), the first HEAD
elements of the merged weight (float32) as one tensor [keys, HEAD] named after
the case. Weights of model1 and model2 differ at every element, so a wrong
ratio for any key shows.
"""
import json
import os
import sys
import tempfile
import types

comfy, einops, clip, node_modules, shared, sd1_m2, sdxl_m2 = sys.argv[1:8]
out_dir = sys.argv[8] if len(sys.argv) > 8 else os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(shared, "tools", "comfyref"))
sys.path.insert(0, os.path.join(shared, "tools", "comfyref", "flux"))
import flux_env  # noqa: E402

flux_env.setup(comfy, einops, clip, node_modules)
server = types.ModuleType("server")
server.PromptServer = types.SimpleNamespace(instance=None)
sys.modules.setdefault("server", server)

import torch  # noqa: E402
import stio  # noqa: E402
import folder_paths  # noqa: E402
import nodes  # noqa: E402
import comfy.model_management  # noqa: E402
import comfy_extras.nodes_model_merging as mm  # noqa: E402
import comfy_extras.nodes_model_merging_model_specific as mms  # noqa: E402

HEAD = 4
testdata = os.path.join(shared, "testdata")
setcfg = {k: v["config"] for k, v in json.load(open(os.path.join(testdata, "manifest.json")))["models"].items()
          if k in ("sd1", "sdxl")}
import comfy.sd  # noqa: E402
import comfy.supported_models as sm  # noqa: E402


def tiny_unet_config(u):
    keys = ("context_dim", "model_channels", "use_linear_in_transformer", "adm_in_channels",
            "use_temporal_attention", "transformer_depth")
    return {k: u[k] for k in keys}


class TinySD15(sm.SD15):
    unet_config = tiny_unet_config(setcfg["sd1"]["unet_config"])


class TinySDXL(sm.SDXL):
    unet_config = tiny_unet_config(setcfg["sdxl"]["unet_config"])


sm.models.insert(0, TinySDXL)
sm.models.insert(0, TinySD15)
TE = {"sd1": {"clip_l_model_config": dict(setcfg["sd1"]["clip_l"])},
      "sdxl": {"clip_l_model_config": dict(setcfg["sdxl"]["clip_l"]),
               "clip_g_model_config": dict(setcfg["sdxl"]["clip_g"],
                                           projection_dim=setcfg["sdxl"]["clip_g"]["hidden_size"])}}

fdir = os.path.join(testdata, "flux")
fman = json.load(open(os.path.join(fdir, "manifest.json")))
dev = fman["models"]["flux_dev"]["config"]
head_dim = dev["hidden_size"] // dev["num_heads"]
flux_env.install_overrides({head_dim: dev["axes_dim"]}, fman["models"]["ae"]["config"], {})


def ckpt(path, kind):
    return comfy.sd.load_checkpoint_guess_config(path, output_vae=False, output_clip=False,
                                                 te_model_options=TE[kind])[0]


# Flux model2: the dev DiT plus seeded noise, BF16
flux1_path = os.path.join(fdir, fman["models"]["flux_dev"]["file"])
flux2_path = os.path.join(out_dir, "flux_model2.safetensors")
sd = stio.load(flux1_path)
noisy = {}
for i, k in enumerate(sorted(sd)):
    g = torch.Generator().manual_seed(1234 + i)
    w = sd[k].float()
    noisy[k] = (w + 0.05 * torch.randn(w.shape, generator=g)).to(torch.bfloat16)
stio.save(noisy, flux2_path, metadata={"generator": "make_merge_blocks.py"})

root = tempfile.mkdtemp(prefix="merge_blocks_")
os.makedirs(os.path.join(root, "diffusion_models"), exist_ok=True)
for name, src in (("flux1.safetensors", flux1_path), ("flux2.safetensors", flux2_path)):
    dst = os.path.join(root, "diffusion_models", name)
    if os.path.lexists(dst):
        os.unlink(dst)
    os.symlink(os.path.abspath(src), dst)
folder_paths.folder_names_and_paths["diffusion_models"] = (
    [os.path.join(root, "diffusion_models")], set(folder_paths.supported_pt_extensions))
for k in list(getattr(folder_paths, "filename_list_cache", {}).keys()):
    del folder_paths.filename_list_cache[k]


def unet(name):
    return nodes.UNETLoader().load_unet(unet_name=name, weight_dtype="default")[0]


models = {
    "sd1": (ckpt(os.path.join(testdata, "models/tiny-sd1.safetensors"), "sd1"), ckpt(sd1_m2, "sd1")),
    "sdxl": (ckpt(os.path.join(testdata, "models/tiny-sdxl.safetensors"), "sdxl"), ckpt(sdxl_m2, "sdxl")),
    "flux": (unet("flux1.safetensors"), unet("flux2.safetensors")),
}


def ratios(names, step):
    """A spread of ratios over the inputs: (i * step mod 11) / 10, 0 and 1 included."""
    return {n: ((i * step) % 11) / 10.0 for i, n in enumerate(names)}


def float_inputs(cls):
    req = cls.INPUT_TYPES()["required"]
    return [k for k, v in req.items() if v[0] == "FLOAT"]


CASES = [
    {"name": "sd1_blocks", "family": "sd1", "node": "ModelMergeBlocks",
     "inputs": {"input": 0.3, "middle": 0.65, "out": 0.85}},
    {"name": "sd1_specific", "family": "sd1", "node": "ModelMergeSD1",
     "inputs": ratios(float_inputs(mms.ModelMergeSD1), 7)},
    {"name": "sd2_alias", "family": "sd1", "node": "ModelMergeSD2",
     "inputs": ratios(float_inputs(mms.ModelMergeSD1), 3)},
    {"name": "sdxl_specific", "family": "sdxl", "node": "ModelMergeSDXL",
     "inputs": ratios(float_inputs(mms.ModelMergeSDXL), 5)},
    {"name": "sdxl_blocks", "family": "sdxl", "node": "ModelMergeBlocks",
     "inputs": {"input": 0.0, "middle": 0.4, "out": 1.0}},
    {"name": "flux_specific", "family": "flux", "node": "ModelMergeFlux1",
     "inputs": ratios(float_inputs(mms.ModelMergeFlux1), 4)},
    {"name": "flux_simple", "family": "flux", "node": "ModelMergeSimple", "inputs": {"ratio": 0.35}},
]
NODE = {"ModelMergeBlocks": mm.ModelMergeBlocks, "ModelMergeSD1": mms.ModelMergeSD1,
        "ModelMergeSD2": mms.NODE_CLASS_MAPPINGS["ModelMergeSD2"], "ModelMergeSDXL": mms.ModelMergeSDXL,
        "ModelMergeFlux1": mms.ModelMergeFlux1, "ModelMergeSimple": mm.ModelMergeSimple}

keys = {}
for fam, (m1, _) in models.items():
    keys[fam] = [k for k, v in m1.model.diffusion_model.state_dict().items()]
    for k in keys[fam]:
        n = m1.model.diffusion_model.state_dict()[k].numel()
        assert n >= HEAD, (k, n)

out = {}
for case in CASES:
    m1, m2 = models[case["family"]]
    merged = NODE[case["node"]]().merge(m1, m2, **case["inputs"])[0]
    merged.patch_model(force_patch_weights=True)
    sdm = merged.model.diffusion_model.state_dict()
    rows = [sdm[k].detach().float().flatten()[:HEAD].clone() for k in keys[case["family"]]]
    merged.unpatch_model()
    out[case["name"]] = torch.stack(rows).contiguous()
    comfy.model_management.unload_all_models()

stio.save(out, os.path.join(out_dir, "merge_blocks_ref.safetensors"), metadata={"generator": "make_merge_blocks.py"})

manifest = {
    "description": "Per-block model merges by ComfyUI's own nodes; per case, the first `head` elements "
                   "of every diffusion-model weight of the merged model (rows in the family's key order).",
    "generator": "make_merge_blocks.py",
    "command": "/usr/bin/python3 make_merge_blocks.py COMFY EINOPS CLIP NODE_MODULES SHARED SD1_MODEL2 SDXL_MODEL2",
    "comfyui_commit": fman["reference"]["comfyui_commit"],
    "code": "comfy_extras.nodes_model_merging.ModelMergeBlocks.merge (ModelMergeSD1/SD2/SDXL/Flux1 of "
            "nodes_model_merging_model_specific are subclasses), ModelMergeSimple.merge; "
            "ModelPatcher.patch_model(force_patch_weights=True) then diffusion_model.state_dict()",
    "torch": "Debian python3-torch 1.13.1, CPU, float32",
    "file": "merge_blocks_ref.safetensors",
    "head": HEAD,
    "models": {
        "sd1": {"model1": "testdata/models/tiny-sd1.safetensors", "loader": "CheckpointLoaderSimple",
                "model2": {"synth": "sd1-tiny", "seed": 7}},
        "sdxl": {"model1": "testdata/models/tiny-sdxl.safetensors", "loader": "CheckpointLoaderSimple",
                 "model2": {"synth": "sdxl-tiny", "seed": 7}},
        "flux": {"model1": "testdata/flux/" + fman["models"]["flux_dev"]["file"], "loader": "UNETLoader",
                 "model2": {"file": "flux_model2.safetensors"}},
    },
    "keys": keys,
    "cases": CASES,
}
json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
print("wrote", len(out), "cases")
