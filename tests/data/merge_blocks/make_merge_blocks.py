#!/usr/bin/python3
"""Per-block model merges computed by ComfyUI's own nodes (ModelMergeBlocks,
ModelMergeSD1 / SD2 / SDXL / Flux1 / SD3_2B / SD35_Large, and ModelMergeSimple /
Add / Subtract on the DiTs) on the tiny models of the shared test data.

usage: /usr/bin/python3 make_merge_blocks.py COMFY EINOPS CLIP NODE_MODULES SHARED SD1_MODEL2 SDXL_MODEL2 [OUT_DIR]
  COMFY EINOPS CLIP: the trees shared/tools/comfyref/extract_refs.sh extracts
  NODE_MODULES:      the npm folder of shared/tools/comfyref/flux/package.json (flux_env; unused here)
  SHARED:            ../shared (testdata/models/tiny-sd1, tiny-sdxl; testdata/flux/models/tiny-flux1-dev;
                     testdata/sd3 (mmdit), testdata/zimage (zimage))
  SD1_MODEL2:        `sdflow synth --preset sd1-tiny --seed 7` (the test writes the same bytes)
  SDXL_MODEL2:       `sdflow synth --preset sdxl-tiny --seed 7`
Flux's model2 is made here and kept beside this script (flux_model2.safetensors,
BF16): the tiny dev DiT plus N(0, 0.05) noise from torch.Generator seed 1234
per tensor in sorted key order, rounded to BF16.
SD3's and Z-Image's model2 (made here, not kept: the test makes the same bytes)
are the set's DiT with every tensor flattened, rolled by one element and negated
(model2[i] = -model1[(i + 1) mod n], same dtype: exact, a sign-bit flip),
manifest "derive": "negate_roll".

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


if not hasattr(torch.nn.RMSNorm, "reset_parameters"):
    # the shims' torch.nn.RMSNorm (torch 1.13 has none) lacks what torch's own __init__ ends with:
    # self.reset_parameters(), where ComfyUI's ops.RMSNorm sets its bias to None
    _rms_init = torch.nn.RMSNorm.__init__

    def _rms_init_reset(self, *a, **kw):
        _rms_init(self, *a, **kw)
        if hasattr(self, "reset_parameters"):
            self.reset_parameters()

    torch.nn.RMSNorm.__init__ = _rms_init_reset

# ComfyUI's detection knows Z-Image by its real width; for the tiny dim the set's manifest gives the
# values detection derives from the width (the set's own override, as its README says)
zdir = os.path.join(testdata, "zimage")
zman = json.load(open(os.path.join(zdir, "manifest.json")))
zcfg = zman["models"]["zimage"]["config"]
import comfy.model_detection  # noqa: E402

_detect = comfy.model_detection.detect_unet_config


def detect_tiny(state_dict, key_prefix, metadata=None):
    c = _detect(state_dict, key_prefix, metadata=metadata)
    if c is not None and c.get("image_model") == "lumina2" and c.get("dim") == zcfg["dim"]:
        c.update({"n_heads": zcfg["n_heads"], "n_kv_heads": zcfg["n_kv_heads"], "axes_dims": zcfg["axes_dims"],
                  "axes_lens": zcfg["axes_lens"], "rope_theta": zcfg["rope_theta"],
                  "ffn_dim_multiplier": 8.0 / 3.0, "z_image_modulation": True, "time_scale": zcfg["time_scale"],
                  "pad_tokens_multiple": zcfg["pad_tokens_multiple"]})
    return c


comfy.model_detection.detect_unet_config = detect_tiny


class TinyZImage(sm.ZImage):
    unet_config = {"image_model": "lumina2", "dim": zcfg["dim"]}


sm.models.insert(0, TinyZImage)
sdir = os.path.join(testdata, "sd3")
sman = json.load(open(os.path.join(sdir, "manifest.json")))


def negate_roll(path):
    """model2 of the DiT at path: every tensor flattened, rolled by one, negated (same dtype)"""
    out = {}
    for k, w in stio.load(path).items():
        out[k] = (-torch.roll(w.flatten(), -1)).reshape(w.shape).contiguous()
        assert out[k].dtype == w.dtype
    return out


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
os.makedirs(root, exist_ok=True)
os.makedirs(os.path.join(root, "diffusion_models"), exist_ok=True)
sd3_1_path = os.path.join(sdir, sman["models"]["mmdit"]["file"])
z1_path = os.path.join(zdir, zman["models"]["zimage"]["file"])
derived = {}
for name, src in (("sd3_2.safetensors", sd3_1_path), ("zimage_2.safetensors", z1_path)):
    derived[name] = os.path.join(root, name)
    stio.save(negate_roll(src), derived[name], metadata={"generator": "make_merge_blocks.py"})
for name, src in (("flux1.safetensors", flux1_path), ("flux2.safetensors", flux2_path),
                  ("sd3_1.safetensors", sd3_1_path), ("sd3_2.safetensors", derived["sd3_2.safetensors"]),
                  ("zimage_1.safetensors", z1_path), ("zimage_2.safetensors", derived["zimage_2.safetensors"])):
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
    "sd3": (unet("sd3_1.safetensors"), unet("sd3_2.safetensors")),
    "zimage": (unet("zimage_1.safetensors"), unet("zimage_2.safetensors")),
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
    {"name": "sd3_specific", "family": "sd3", "node": "ModelMergeSD3_2B",
     "inputs": ratios(float_inputs(mms.ModelMergeSD3_2B), 5)},
    {"name": "sd35_large", "family": "sd3", "node": "ModelMergeSD35_Large",
     "inputs": ratios(float_inputs(mms.ModelMergeSD35_Large), 3)},
    {"name": "sd3_blocks", "family": "sd3", "node": "ModelMergeBlocks",
     "inputs": {"input": 0.2, "middle": 0.6, "out": 0.9}},
    {"name": "sd3_simple", "family": "sd3", "node": "ModelMergeSimple", "inputs": {"ratio": 0.3}},
    {"name": "sd3_add", "family": "sd3", "node": "ModelMergeAdd", "inputs": {}},
    {"name": "sd3_subtract", "family": "sd3", "node": "ModelMergeSubtract", "inputs": {"multiplier": 0.7}},
    {"name": "zimage_simple", "family": "zimage", "node": "ModelMergeSimple", "inputs": {"ratio": 0.6}},
    {"name": "zimage_add", "family": "zimage", "node": "ModelMergeAdd", "inputs": {}},
    {"name": "zimage_subtract", "family": "zimage", "node": "ModelMergeSubtract", "inputs": {"multiplier": 1.5}},
    {"name": "zimage_blocks", "family": "zimage", "node": "ModelMergeBlocks",
     "inputs": {"input": 0.25, "middle": 0.5, "out": 0.75}},
]
NODE = {"ModelMergeBlocks": mm.ModelMergeBlocks, "ModelMergeSD1": mms.ModelMergeSD1,
        "ModelMergeSD2": mms.NODE_CLASS_MAPPINGS["ModelMergeSD2"], "ModelMergeSDXL": mms.ModelMergeSDXL,
        "ModelMergeFlux1": mms.ModelMergeFlux1, "ModelMergeSimple": mm.ModelMergeSimple,
        "ModelMergeSD3_2B": mms.ModelMergeSD3_2B, "ModelMergeSD35_Large": mms.ModelMergeSD35_Large,
        "ModelMergeAdd": mm.ModelAdd, "ModelMergeSubtract": mm.ModelSubtract}

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
    "code": "comfy_extras.nodes_model_merging.ModelMergeBlocks.merge (ModelMergeSD1/SD2/SDXL/Flux1/SD3_2B/"
            "SD35_Large of nodes_model_merging_model_specific are subclasses), ModelMergeSimple.merge, "
            "ModelAdd.merge (ModelMergeAdd), ModelSubtract.merge (ModelMergeSubtract); "
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
        "sd3": {"model1": "testdata/sd3/" + sman["models"]["mmdit"]["file"], "loader": "UNETLoader",
                "model2": {"derive": "negate_roll"}},
        "zimage": {"model1": "testdata/zimage/" + zman["models"]["zimage"]["file"], "loader": "UNETLoader",
                   "model2": {"derive": "negate_roll"}},
    },
    "keys": keys,
    "cases": CASES,
}
json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
print("wrote", len(out), "cases")
