#!/usr/bin/python3
"""DiffusersLoader (nodes.py -> comfy.diffusers_load.load_diffusers) on a tiny diffusers folder
written from the shared tiny SD1 checkpoint, computed by ComfyUI's own code.

usage: /usr/bin/python3 make_diffusers_loader.py COMFY EINOPS CLIP SHARED [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts
  SHARED:            ../shared (testdata/models/tiny-sd1.safetensors and its manifest)
  OUT_DIR:           tests/data/diffusers_loader (golden/, folder/, manifest.json)

The folder (diffusers and transformers are not installed here, so it is written with ComfyUI's own
key maps, in the names those libraries save):
  unet/diffusion_pytorch_model.safetensors   the checkpoint's model.diffusion_model.* under the diffusers
                                              names of comfy.utils.unet_to_diffusers (its inverse);
  vae/diffusion_pytorch_model.safetensors    first_stage_model.* under the diffusers AutoencoderKL names of
                                              comfy.diffusers_convert's vae_conversion_map(_attn) (inverse;
                                              mid-block attention to_q/to_k/to_v/to_out.0 as 2-D Linear
                                              weights, the 1x1 convs' [C, C, 1, 1] squeezed);
  text_encoder/model.safetensors             cond_stage_model.transformer.* without that prefix (HF
                                              CLIPTextModel: text_model.*);
  model_index.json and each part's config.json (what a diffusers pipeline folder holds; ComfyUI's loader
  reads none of them, only model_index.json's presence lists the folder).
Only the json files are stored (folder/); the manifest's "files" say which checkpoint tensor each name
takes (and which are squeezed), so a test writes the same folder.

Shims, in this script only (ComfyUI's detection knows the real widths):
  * model_detection.unet_config_from_diffusers_unet accepts the tiny SD1 UNet config;
  * comfy.sd.load_clip gets the tiny CLIP-L config as model_options["model_config"];
  * comfy.sd.VAE gets the tiny VAE config when none is given (as comfy_env.load_vae does).

Golden (golden/diffusers_loader.safetensors):
  unet.*  model.model.diffusion_model(x, timesteps, context) of DiffusersLoader's MODEL;
  vae.*   VAEDecode of its VAE on a latent;
  clip.*  CLIPTextEncode of its CLIP: cond and pooled_output.
"""
import json
import os
import sys
import tempfile
import types

comfy_root, einops_root, clip_root, shared = sys.argv[1:5]
out_dir = sys.argv[5] if len(sys.argv) > 5 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(shared, "tools", "comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(comfy_root, einops_root, clip_root)
server = types.ModuleType("server")
server.PromptServer = types.SimpleNamespace(instance=None)
sys.modules.setdefault("server", server)

import torch  # noqa: E402

torch.set_grad_enabled(False)
import stio  # noqa: E402
import comfy.diffusers_convert as dc  # noqa: E402
import comfy.model_detection as md  # noqa: E402
import comfy.model_management  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.utils  # noqa: E402
import folder_paths  # noqa: E402
import nodes  # noqa: E402

testdata = os.path.join(shared, "testdata")
tman = json.load(open(os.path.join(testdata, "manifest.json")))
S1 = tman["models"]["sd1"]["config"]
U = dict(S1["unet_config"])
CKPT = "testdata/" + tman["models"]["sd1"]["file"]
base = comfy.utils.load_torch_file(os.path.join(shared, CKPT))

import comfy.supported_models as sm  # noqa: E402


class TinySD15(sm.SD15):
    # the tiny UNet's widths, so that ComfyUI's model configs accept it (as make_diff_controlnet.py)
    unet_config = {k: U[k] for k in ("context_dim", "model_channels", "use_linear_in_transformer",
                                     "adm_in_channels", "use_temporal_attention", "transformer_depth")}


sm.models.insert(0, TinySD15)

# ---- shims ----------------------------------------------------------------------------------------
_orig_detect = md.unet_config_from_diffusers_unet


def detect_with_tiny(state_dict, dtype=None):
    r = _orig_detect(state_dict, dtype)
    if r is None and "conv_in.weight" in state_dict and state_dict["conv_in.weight"].shape[0] == U["model_channels"]:
        r = md.convert_config(dict(U, dtype=dtype))
    return r


md.unet_config_from_diffusers_unet = detect_with_tiny
_orig_load_clip = comfy.sd.load_clip
# load_text_encoder_state_dicts (long_clipl.model_options_long_clip) makes model_options["model_config"]
# plus the file's position count the CLIP-L config
TE_OPTIONS = {"model_config": dict(S1["clip_l"])}
comfy.sd.load_clip = lambda paths, embedding_directory=None, **kw: _orig_load_clip(
    paths, embedding_directory=embedding_directory, model_options=TE_OPTIONS)
_VAE = comfy.sd.VAE
VAE_CFG = {"params": {"ddconfig": comfy_env.vae_ddconfig(S1["vae"]), "embed_dim": S1["vae"]["embed_dim"]}}


class TinyVAE(_VAE):
    def __init__(self, sd=None, device=None, config=None, **kw):
        super().__init__(sd=sd, device=device, config=config if config is not None else VAE_CFG, **kw)


comfy.sd.VAE = TinyVAE

# ---- the folder ---------------------------------------------------------------------------------------
files = {}
# UNet: the inverse of unet_to_diffusers (module names + .weight/.bias)
cfg = md.convert_config(dict(U))
unet = {}
for dk, lk in comfy.utils.unet_to_diffusers(cfg).items():
    ck = "model.diffusion_model." + lk
    if ck in base and not dk.startswith("add_embedding."):
        unet[dk] = ck
n_unet = sum(1 for k in base if k.startswith("model.diffusion_model."))
assert len(unet) == n_unet, (len(unet), n_unet)
files["unet/diffusion_pytorch_model.safetensors"] = {"keys": unet}
# VAE: the inverse of convert_vae_state_dict's replacements
vae, squeeze = {}, []
for ck in base:
    if not ck.startswith("first_stage_model."):
        continue
    k = ck[len("first_stage_model."):]
    d = k
    for sd_part, hf_part in dc.vae_conversion_map:
        d = d.replace(sd_part, hf_part)
    if "mid_block.attentions" in d:
        for sd_part, hf_part in [("norm.", "group_norm."), ("q.", "to_q."), ("k.", "to_k."), ("v.", "to_v."),
                                 ("proj_out.", "to_out.0.")]:
            if d.split("mid_block.attentions.0.")[1].startswith(sd_part):
                d = d.replace("mid_block.attentions.0." + sd_part, "mid_block.attentions.0." + hf_part)
                break
        if base[ck].ndim == 4:
            squeeze.append(d)
    vae[d] = ck
files["vae/diffusion_pytorch_model.safetensors"] = {"keys": vae, "squeeze": sorted(squeeze)}
# CLIP-L: HF CLIPTextModel names
te = {ck[len("cond_stage_model.transformer."):]: ck for ck in base if ck.startswith("cond_stage_model.transformer.")}
files["text_encoder/model.safetensors"] = {"keys": te}

NAME = "tiny-sd1"
tmp = tempfile.mkdtemp(prefix="diffusers_")
folder = os.path.join(tmp, NAME)
jsons = {
    "model_index.json": {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0",
                         "text_encoder": ["transformers", "CLIPTextModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
                         "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
                         "scheduler": ["diffusers", "PNDMScheduler"], "safety_checker": [None, None],
                         "feature_extractor": [None, None]},
    "unet/config.json": {"_class_name": "UNet2DConditionModel", "in_channels": U["in_channels"],
                         "out_channels": U["out_channels"], "layers_per_block": U["num_res_blocks"][0],
                         "block_out_channels": [U["model_channels"] * m for m in U["channel_mult"]],
                         "cross_attention_dim": U["context_dim"], "attention_head_dim": U["num_heads"]},
    "vae/config.json": {"_class_name": "AutoencoderKL", "latent_channels": S1["vae"]["z_channels"],
                        "block_out_channels": [S1["vae"]["ch"] * m for m in S1["vae"]["ch_mult"]],
                        "layers_per_block": S1["vae"]["num_res_blocks"], "scaling_factor": S1["latent_scale_factor"]},
    "text_encoder/config.json": dict(S1["clip_l"], architectures=["CLIPTextModel"], model_type="clip_text_model",
                                     vocab_size=49408, max_position_embeddings=77),
}
for rel, obj in jsons.items():
    for root in (folder, os.path.join(out_dir, "folder")):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        json.dump(obj, open(os.path.join(root, rel), "w"), indent=1)
for rel, spec in files.items():
    sd = {}
    for d, ck in spec["keys"].items():
        t = base[ck]
        if d in spec.get("squeeze", []):
            t = t.reshape(t.shape[0], t.shape[1])
        sd[d] = t.contiguous()
    stio.save(sd, os.path.join(folder, rel))

# ---- ComfyUI's DiffusersLoader ---------------------------------------------------------------------------
folder_paths.folder_names_and_paths["diffusers"] = ([tmp], ["folder"])
listed = nodes.DiffusersLoader.INPUT_TYPES()["required"]["model_path"][0]
assert listed == [NAME], listed
model, clip, vae = nodes.DiffusersLoader().load_checkpoint(NAME)
# every weight arrived (ComfyUI loads with strict=False: a missed name would stay random)
loaded = {"model.diffusion_model." + k: v for k, v in model.model.diffusion_model.state_dict().items()}
loaded.update({"first_stage_model." + k: v for k, v in vae.first_stage_model.state_dict().items()})
loaded.update({"cond_stage_model.transformer." + k: v
               for k, v in clip.cond_stage_model.clip_l.transformer.state_dict().items()})
checked = 0
for ck, t in base.items():
    if ck in loaded and not ck.endswith("position_ids"):
        assert torch.equal(loaded[ck].float(), t.float().reshape(loaded[ck].shape)), ck
        checked += 1
want = sum(1 for k in base if k.split(".")[0] in ("model", "first_stage_model", "cond_stage_model")
           and not k.endswith("position_ids"))
assert checked == want, (checked, want)

out = {}
g = torch.Generator().manual_seed(5)
N, H, W, L = 2, 8, 6, 77
x = torch.randn(N, U["in_channels"], H, W, generator=g)
ts = torch.tensor([999.0, 420.0])
ctx = torch.randn(N, L, U["context_dim"], generator=g)
dm = model.model.diffusion_model.float()
out.update({"unet.x": x, "unet.timesteps": ts, "unet.context": ctx,
            "unet.out": dm(x, ts, context=ctx).float()})
lat = torch.randn(1, S1["vae"]["z_channels"], 6, 8, generator=g)
(img,) = nodes.VAEDecode().decode(vae, {"samples": lat})
out.update({"vae.latent": lat, "vae.image": img.float()})
PROMPT = "a photo of a cat, (sharp:1.2)"
(cond,) = nodes.CLIPTextEncode().encode(clip, PROMPT)
out.update({"clip.cond": cond[0][0].float(), "clip.pooled": cond[0][1]["pooled_output"].float()})
comfy.model_management.unload_all_models()

os.makedirs(os.path.join(out_dir, "golden"), exist_ok=True)
stio.save({k: v.contiguous() for k, v in out.items()}, os.path.join(out_dir, "golden", "diffusers_loader.safetensors"),
          metadata={"generator": "make_diffusers_loader.py"})
manifest = {
    "generator": "gen/make_diffusers_loader.py",
    "command": "/usr/bin/python3 gen/make_diffusers_loader.py COMFY EINOPS CLIP SHARED OUT_DIR",
    "reference": {
        "comfyui_commit": tman["reference"]["comfyui_commit"],
        "functions": ["nodes.DiffusersLoader (INPUT_TYPES: folders with model_index.json; load_checkpoint -> "
                      "comfy.diffusers_load.load_diffusers: comfy.sd.load_diffusion_model, comfy.sd.load_clip, "
                      "comfy.sd.VAE)",
                      "UNetModel.forward (unet.*)", "nodes.VAEDecode (vae.*)", "nodes.CLIPTextEncode (clip.*)"],
        "shims": ["the tiny SD1 UNet config accepted by model_detection.unet_config_from_diffusers_unet",
                  "the tiny CLIP-L config given to comfy.sd.load_clip as model_options",
                  "the tiny VAE config given to comfy.sd.VAE"],
        "torch": "Debian python3-torch 1.13.1, CPU, float32",
    },
    "checkpoint": CKPT,
    "name": NAME,
    "json": "folder/ (copied into the folder as they are)",
    "files": files,
    "prompt": PROMPT,
    "tolerance": {"unet": {"atol": 2e-4, "rtol": 2e-4}, "vae": {"atol": 2e-4, "rtol": 2e-4},
                  "clip": {"atol": 2e-4, "rtol": 2e-4}},
}
json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
print("wrote", sorted(out), {k: len(v["keys"]) for k, v in files.items()})
