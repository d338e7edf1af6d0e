#!/usr/bin/python3
"""Stability's SD3.5 ControlNets (sd3.5_large_controlnet_{blur,canny,depth}: comfy.cldm.dit_embedder.
ControlNetEmbedder, loaded by comfy.controlnet.load_controlnet_sd35): tiny random-weight files in
Stability's key layout, and what ComfyUI's own code computes with them on the SD3 set's tiny MMDiT-X.

usage: /usr/bin/python3 make_sd35_controlnet.py COMFY EINOPS CLIP NODE_MODULES SHARED OUT_DIR
  (as tests/data/sd3_controlnet/gen/make_sd3_controlnet.py; NODE_MODULES unused)

Three ControlNets (ControlNetEmbedder, patch 2, 16 latent channels, hidden = the set's MMDiT's
(64 x its depth), heads = depth, every parameter N(0, 0.05) from torch.Generator seeded per
parameter (sorted names, seed base + index), rounded to F16), saved under the names Stability's
files use (MMDIT_MAP_BASIC's diffusers names for the embedders: time_text_embed.*, pos_embed.proj.*;
transformer_blocks.N.{adaLN_modulation.1, attn.qkv, attn.proj, mlp.fc1, mlp.fc2}.*,
controlnet_blocks.N.*, pos_embed_input.proj.*) plus a one-element control_type:
  single: double_y_emb False (y_embedder pooled -> hidden), 2 blocks, control_type 0 (blur); no
          x_embedder in the file (ControlNetSD35.pre_run copies the MMDiT's x_embedder).
  double: double_y_emb True (y_embedder hidden -> hidden, as SD3.5 Large's), 1 block, control_type 1
          (canny); no orig_y_embedder (pre_run copies the MMDiT's y_embedder).
  depth:  as single with 1 block, control_type 2 (depth: load_controlnet_sd35's preprocess_image is
          1 - a, which K.get.hint covers); made last, so the other two draw what they drew before.
One deviation: load_controlnet_sd35 builds the embedder with adm_in_channels=2048 (SD3's real pooled
width); the tiny set's pooled width is 28, so the generator wraps ControlNetEmbedder to pass the
set's width instead. Everything else is ComfyUI's code unchanged.

Cases (golden/sd35_controlnet.safetensors), per ControlNet K in (single, double, depth):
  K.fwd.output.N  ControlNetEmbedder.forward(x, timesteps, y, context, hint)["output"] after pre_run
                  (fwd.x / fwd.timesteps / fwd.context / fwd.y shared; K.fwd.hint)
  K.get.*         ControlNet.get_control on an IMAGE through set_cond_hint (strength, vae): K.get.hint =
                  the cond_hint it made (common_upscale nearest-exact center, preprocess_image of the
                  control_type, VAE.encode, latent_formats.SD3.process_in), K.get.output.N = the merged
                  outputs (strength applied), for x_noisy get.x at sigma get.sigma.
  K.dit.out       the MMDiT forward with K.get's outputs as control.
  ks_K.*          KSampler (nodes.common_ksampler) on ControlNetApplySD3's conditioning with ControlNet K
                  (the case's image, strength, start/end percent, the SD3 set's VAE) from the sd3 set's e2e_sd3
                  positive/negative, ModelSamplingSD3(shift) on the set's MMDiT: ks_K.latent_out, and the
                  same run without the ControlNet (ks_K.latent_nocontrol).
"""
import json
import os
import sys
import types

comfy_root, einops_root, clip_root, node_modules, shared, out_dir = sys.argv[1:7]
sys.path.insert(0, os.path.join(shared, "tools", "comfyref"))
sys.path.insert(0, os.path.join(shared, "tools", "comfyref", "flux"))
import flux_env  # noqa: E402

flux_env.setup(comfy_root, einops_root, clip_root, node_modules)
server = types.ModuleType("server")
server.PromptServer = types.SimpleNamespace(instance=None)
sys.modules.setdefault("server", server)

import torch  # noqa: E402

torch.set_grad_enabled(False)
import stio  # noqa: E402
import comfy.cldm.dit_embedder as dit_embedder  # noqa: E402
import comfy.controlnet  # noqa: E402
import comfy.model_detection  # noqa: E402
import comfy.model_management  # noqa: E402
import comfy.ops  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.utils  # noqa: E402
import nodes  # noqa: E402
from comfy_extras import nodes_model_advanced, nodes_sd3  # noqa: E402

sdir = os.path.join(shared, "testdata", "sd3")
man = json.load(open(os.path.join(sdir, "manifest.json")))
vae_cfg = man["models"]["sd35_ckpt"]["config"]["vae"]
flux_env.install_overrides({}, vae_cfg, {})

mmdit_path = os.path.join(sdir, man["models"]["mmdit"]["file"])
base_sd = comfy.utils.load_torch_file(mmdit_path)
unet_config = dict(comfy.model_detection.model_config_from_unet(base_sd, "", True).unet_config)
depth = unet_config["depth"]
ADM = unet_config["adm_in_channels"]
CTX = unet_config["context_embedder_config"]["params"]["in_features"]
hidden = 64 * depth

Orig = dit_embedder.ControlNetEmbedder


class TinyEmbedder(Orig):  # the one deviation: the set's pooled width instead of 2048
    def __init__(self, **kw):
        kw["adm_in_channels"] = ADM
        super().__init__(**kw)


dit_embedder.ControlNetEmbedder = TinyEmbedder

inv_basic = {k[0]: k[1] for k in comfy.utils.MMDIT_MAP_BASIC}
VARIANTS = [dict(id="single", double=False, blocks=2, control_type=0, seed=3100, strength=0.7),
            dict(id="double", double=True, blocks=1, control_type=1, seed=3200, strength=1.3),
            dict(id="depth", double=False, blocks=1, control_type=2, seed=3300, strength=0.8)]
os.makedirs(os.path.join(out_dir, "models"), exist_ok=True)
os.makedirs(os.path.join(out_dir, "golden"), exist_ok=True)

model = comfy.sd.load_diffusion_model(mmdit_path)
dm = model.model.diffusion_model.float()
ckpt_sd = comfy.utils.load_torch_file(os.path.join(sdir, man["models"]["sd35_ckpt"]["file"]))
vae_sd = comfy.utils.state_dict_prefix_replace(ckpt_sd, {"first_stage_model.": ""}, filter_keys=True)
vae = comfy.sd.VAE(sd=vae_sd)

out = {}
g = torch.Generator().manual_seed(91)
N, H, W, L = 2, 9, 12, 7
x = torch.randn(N, 16, H, W, generator=g)
ts = torch.tensor([870.0, 315.5])
ctx = torch.randn(N, L, CTX, generator=g)
y = torch.randn(N, ADM, generator=g)
out.update({"fwd.x": x, "fwd.timesteps": ts, "fwd.context": ctx, "fwd.y": y})
GH, GW = 6, 8  # get_control's latent size (image resized to 48x64)
sigma = 0.62
xg = torch.randn(1, 16, GH, GW, generator=g)
img = torch.rand(1, 40, 52, 3, generator=g)
out.update({"get.x": xg, "get.sigma": torch.tensor([sigma]), "get.image": img,
            "get.context": ctx[:1].contiguous(), "get.y": y[:1].contiguous()})
models = {}
for v in VARIANTS:
    K = v["id"]
    cm = TinyEmbedder(img_size=None, patch_size=2, in_chans=16, num_layers=v["blocks"], main_model_double=depth,
                      double_y_emb=v["double"], attention_head_dim=64, num_attention_heads=depth,
                      adm_in_channels=ADM, device="cpu", dtype=torch.float32,
                      operations=comfy.ops.disable_weight_init)
    file_sd = {}
    for i, (k, t) in enumerate(sorted(cm.state_dict().items())):
        if (not v["double"] and k.startswith("x_embedder.")) or k.startswith("orig_y_embedder."):
            continue  # pre_run copies these from the MMDiT
        gk = torch.Generator().manual_seed(v["seed"] + i)
        file_sd[inv_basic.get(k, k)] = (0.05 * torch.randn(t.shape, generator=gk)).to(torch.float16)
    file_sd["control_type"] = torch.tensor([float(v["control_type"])])
    fname = "models/tiny-sd35-controlnet-%s.safetensors" % K
    path = os.path.join(out_dir, fname)
    stio.save(file_sd, path, metadata={"generator": "make_sd35_controlnet.py"})
    models[K] = {"file": fname, "double_y_emb": v["double"], "blocks": v["blocks"],
                 "control_type": v["control_type"], "strength": v["strength"]}

    control = comfy.controlnet.load_controlnet(path)
    assert isinstance(control, comfy.controlnet.ControlNetSD35), type(control)
    control.control_model = control.control_model.float()
    control.pre_run(model.model, lambda p: model.model.model_sampling.percent_to_sigma(p))
    cmod = control.control_model
    hint = torch.randn(N, 16, H, W, generator=g)
    out[K + ".fwd.hint"] = hint
    res = cmod(x=x, timesteps=ts, y=y, context=ctx, hint=hint)["output"]
    for i, o in enumerate(res):
        out["%s.fwd.output.%d" % (K, i)] = o.float().contiguous()

    c2 = control.copy().set_cond_hint(img.movedim(-1, 1), v["strength"], (0.0, 1.0), vae=vae)
    c2.pre_run(model.model, lambda p: model.model.model_sampling.percent_to_sigma(p))
    got = c2.get_control(xg, torch.tensor([sigma]), {"c_crossattn": ctx[:1], "y": y[:1]}, 1, {})
    out[K + ".get.hint"] = c2.cond_hint.float().contiguous()
    for i, o in enumerate(got["output"]):
        out["%s.get.output.%d" % (K, i)] = o.float().contiguous()
    t_model = model.model.model_sampling.timestep(torch.tensor([sigma]))
    out[K + ".dit.out"] = dm(xg, t_model, context=ctx[:1], y=y[:1],
                             control={"output": [o.clone() for o in got["output"]]}).float()
    c2.cleanup()

e2e = next(c for c in man["cases"] if c["id"] == "e2e_sd3")
ge = stio.load(os.path.join(sdir, e2e["file"]))


def cond(prefix):
    return [[ge[prefix + ".cond"].float(), {"pooled_output": ge[prefix + ".pooled"].float()}]]


CASES = [dict(id="ks_single", controlnet="single", image=[1, 56, 72], width=64, height=48, strength=0.9,
              start_percent=0.0, end_percent=1.0, seed=21, steps=3, cfg=4.5, sampler="euler",
              scheduler="sgm_uniform", shift=3.0),
         dict(id="ks_double", controlnet="double", image=[1, 64, 64], width=64, height=64, strength=1.2,
              start_percent=0.1, end_percent=0.8, seed=8, steps=3, cfg=3.0, sampler="dpmpp_2m",
              scheduler="simple", shift=3.0)]
for c in CASES:
    gi = torch.Generator().manual_seed(c["seed"] + 100)
    img_c = torch.rand(c["image"][0], c["image"][1], c["image"][2], 3, generator=gi)
    out[c["id"] + ".image"] = img_c
    control = comfy.controlnet.load_controlnet(os.path.join(out_dir, models[c["controlnet"]]["file"]))
    (m,) = nodes_model_advanced.ModelSamplingSD3().patch(model, c["shift"])
    r = nodes_sd3.ControlNetApplySD3.execute(cond("positive"), cond("negative"), control, img_c, c["strength"],
                                             c["start_percent"], c["end_percent"], vae=vae)
    pos, neg = (r if isinstance(r, tuple) else r.result)[:2]
    latent = {"samples": torch.zeros([1, 16, c["height"] // 8, c["width"] // 8])}
    (res_l,) = nodes.common_ksampler(m, c["seed"], c["steps"], c["cfg"], c["sampler"], c["scheduler"], pos, neg,
                                     latent, denoise=1.0)
    out[c["id"] + ".latent_out"] = res_l["samples"].float()
    (res0,) = nodes.common_ksampler(m, c["seed"], c["steps"], c["cfg"], c["sampler"], c["scheduler"],
                                    cond("positive"), cond("negative"), latent, denoise=1.0)
    out[c["id"] + ".latent_nocontrol"] = res0["samples"].float()
    comfy.model_management.unload_all_models()
for p in ("positive", "negative"):
    for k in ("cond", "pooled"):
        out[p + "." + k] = ge[p + "." + k].float()

stio.save({k: t.contiguous() for k, t in out.items()}, os.path.join(out_dir, "golden", "sd35_controlnet.safetensors"),
          metadata={"generator": "make_sd35_controlnet.py"})
manifest = {
    "generator": "gen/make_sd35_controlnet.py",
    "command": "/usr/bin/python3 gen/make_sd35_controlnet.py COMFY EINOPS CLIP NODE_MODULES SHARED OUT_DIR",
    "reference": {
        "comfyui_commit": man["reference"]["comfyui_commit"],
        "functions": ["comfy.controlnet.load_controlnet -> load_controlnet_sd35 (ControlNetSD35, "
                      "comfy.cldm.dit_embedder.ControlNetEmbedder with adm_in_channels = the set's pooled width)",
                      "ControlNetSD35.pre_run, ControlNetEmbedder.forward (K.fwd.*)",
                      "ControlNet.set_cond_hint + get_control (K.get.*)",
                      "OpenAISignatureMMDITWrapper.forward with control (K.dit.out)",
                      "comfy_extras.nodes_sd3.ControlNetApplySD3.execute, nodes.common_ksampler (ks_*)"],
        "torch": "Debian python3-torch, CPU, float32",
    },
    "mmdit": "sd3 set: models.mmdit", "vae": "sd3 set: models.sd35_ckpt's first_stage_model.*",
    "controlnets": models,
    "forward": {"batch": N, "height": H, "width": W, "context_tokens": L, "timesteps": ts.tolist()},
    "get_control": {"latent_height": GH, "latent_width": GW, "sigma": sigma, "image": list(img.shape)},
    "tolerance": {"fwd": {"atol": 2e-4, "rtol": 2e-4}, "hint": {"atol": 2e-4, "rtol": 1e-3},
                  "get": {"atol": 5e-4, "rtol": 1e-3}, "dit": {"atol": 5e-4, "rtol": 1e-3},
                  "ks": {"atol": 2e-3, "rtol": 2e-3}},
    "conditioning": "positive.cond/.pooled, negative.cond/.pooled of the sd3 set's e2e_sd3 case (copied here)",
    "cases": CASES,
}
json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
print("wrote", sorted(out))
