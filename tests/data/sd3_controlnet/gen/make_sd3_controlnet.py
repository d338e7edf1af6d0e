#!/usr/bin/python3
"""SD3 ControlNet (ControlNetApplySD3, ComfyUI's comfy.cldm.mmdit.ControlNet loaded by
comfy.controlnet.load_controlnet_mmdit): a tiny random-weight ControlNet file in the diffusers layout
InstantX's SD3 ControlNets are published in, and what ComfyUI's own code computes with it on the SD3
set's tiny MMDiT-X.

usage: /usr/bin/python3 make_sd3_controlnet.py COMFY EINOPS CLIP NODE_MODULES SHARED OUT_DIR
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts
  NODE_MODULES:      the npm folder of shared/tools/comfyref/flux/package.json (flux_env; unused here)
  SHARED:            ../shared (testdata/sd3: mmdit, the single file's VAE, e2e_sd3's conditioning)
  OUT_DIR:           tests/data/sd3_controlnet (models/, golden/, manifest.json)

The ControlNet: comfy.cldm.mmdit.ControlNet(num_blocks=NUM_BLOCKS, control_latent_channels=16,
**the unet_config ComfyUI detects from the set's MMDiT), every parameter N(0, 0.05) from
torch.Generator seeded per parameter (sorted names, seed 2024 + index), rounded to F16, then saved
under the diffusers names comfy.utils.mmdit_to_diffusers maps from (the inverse of ComfyUI's
convert_diffusers_mmdit: transformer_blocks.N.attn.to_q/k/v are row thirds of joint_blocks.N.
x_block.attn.qkv, add_q/k/v_proj of context_block's, pos_embed.proj = x_embedder.proj,
time_text_embed.* = t_embedder / y_embedder, pos_embed.pos_embed = pos_embed) plus
pos_embed_input.proj.* and controlnet_blocks.N.* as they are. ComfyUI then loads the file with its
own comfy.controlnet.load_controlnet (the "SD3 diffusers controlnet" branch): the test checks that
the loaded weights equal the F16 values.

Cases (golden/sd3_controlnet.safetensors):
  fwd.*     one ControlNet forward (ControlNet.forward(x, timesteps, y, context, hint)): seeded x,
            timesteps, context, y and hint latent; fwd.output.N = the "output" list (y zeroed inside,
            as ComfyUI does: "weird sd3 controlnet specific stuff").
  dit.*     the MMDiT forward (apply_model's diffusion_model(x, timesteps, context, y, control)) with
            that control added after joint block i (output[i]), and without (dit.out_nocontrol).
  hint.*    the hint ComfyUI's ControlNet.get_control makes from an IMAGE: common_upscale(nearest-exact,
            center) to latent size * 8 (compression_ratio 1 * the VAE's 8), VAE.encode, then
            latent_format SD3 with shift_factor 0 (x * 1.5305).
  ks_*      KSampler runs (nodes.common_ksampler) on ControlNetApplySD3's conditioning (strength,
            start/end percent per case) from the e2e_sd3 case's positive/negative, with
            ModelSamplingSD3(3) on the set's MMDiT; ks_*.latent_out, and the same run without the
            ControlNet (ks_*.latent_nocontrol).
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
import comfy.cldm.mmdit  # noqa: E402
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

NUM_BLOCKS = 1
mmdit_path = os.path.join(sdir, man["models"]["mmdit"]["file"])
base_sd = comfy.utils.load_torch_file(mmdit_path)
unet_config = dict(comfy.model_detection.model_config_from_unet(base_sd, "", True).unet_config)
depth = unet_config["depth"]

# ---- the ControlNet, random weights, in ComfyUI's layout ------------------------------------------
cn = comfy.cldm.mmdit.ControlNet(num_blocks=NUM_BLOCKS, control_latent_channels=16,
                                  operations=comfy.ops.disable_weight_init, device="cpu", dtype=torch.float32,
                                  **unet_config)
comfy_sd = {}
for i, (k, v) in enumerate(sorted(cn.state_dict().items())):
    g = torch.Generator().manual_seed(2024 + i)
    comfy_sd[k] = (0.05 * torch.randn(v.shape, generator=g)).to(torch.float16)

# ---- its diffusers names (inverse of convert_diffusers_mmdit) --------------------------------------
key_map = comfy.utils.mmdit_to_diffusers({"depth": depth, "num_blocks": NUM_BLOCKS}, output_prefix="")
diff_sd, used = {}, set()
for dk, t in key_map.items():
    if isinstance(t, str):
        if t in comfy_sd:
            diff_sd[dk] = comfy_sd[t]
            used.add(t)
        continue
    target, offset = t[0], t[1]
    fun = t[2] if len(t) > 2 else (lambda a: a)
    if target not in comfy_sd:
        continue
    w = comfy_sd[target]
    if offset is not None:
        w = w.narrow(offset[0], offset[1], offset[2])
    diff_sd[dk] = fun(w).contiguous()  # swap_scale_shift is its own inverse
    used.add(target)
for k, v in comfy_sd.items():
    if k not in used:
        assert k.startswith("controlnet_blocks.") or k.startswith("pos_embed_input."), k
        diff_sd[k] = v
os.makedirs(os.path.join(out_dir, "models"), exist_ok=True)
os.makedirs(os.path.join(out_dir, "golden"), exist_ok=True)
CN_FILE = "models/tiny-sd3-controlnet-instantx.safetensors"
cn_path = os.path.join(out_dir, CN_FILE)
stio.save(diff_sd, cn_path, metadata={"generator": "make_sd3_controlnet.py"})

# ---- ComfyUI loads it -------------------------------------------------------------------------------
control = comfy.controlnet.load_controlnet(cn_path)
assert isinstance(control.control_model, comfy.cldm.mmdit.ControlNet), type(control.control_model)
loaded = control.control_model.state_dict()
for k, v in comfy_sd.items():
    assert torch.equal(loaded[k].float(), v.float()), k
cm = control.control_model.float()

out = {}
g = torch.Generator().manual_seed(77)
N, H, W = 2, 10, 12
L, CTX, ADM = 9, unet_config["context_embedder_config"]["params"]["in_features"], unet_config["adm_in_channels"]
x = torch.randn(N, 16, H, W, generator=g)
ts = torch.tensor([870.0, 315.5])
ctx = torch.randn(N, L, CTX, generator=g)
y = torch.randn(N, ADM, generator=g)
hint = torch.randn(N, 16, H, W, generator=g)
res = cm(x=x, timesteps=ts, y=y, context=ctx, hint=hint)["output"]
out.update({"fwd.x": x, "fwd.timesteps": ts, "fwd.context": ctx, "fwd.y": y, "fwd.hint": hint})
for i, o in enumerate(res):
    out["fwd.output.%d" % i] = o.float().contiguous()

model = comfy.sd.load_diffusion_model(mmdit_path)
dm = model.model.diffusion_model.float()
out["dit.out"] = dm(x, ts, context=ctx, y=y, control={"output": [r.clone() for r in res]}).float()
out["dit.out_nocontrol"] = dm(x, ts, context=ctx, y=y).float()

# ---- the hint from an IMAGE, and KSampler with ControlNetApplySD3 ----------------------------------
ckpt_sd = comfy.utils.load_torch_file(os.path.join(sdir, man["models"]["sd35_ckpt"]["file"]))
vae_sd = comfy.utils.state_dict_prefix_replace(ckpt_sd, {"first_stage_model.": ""}, filter_keys=True)
vae = comfy.sd.VAE(sd=vae_sd)
e2e = next(c for c in man["cases"] if c["id"] == "e2e_sd3")
ge = stio.load(os.path.join(sdir, e2e["file"]))


def cond(prefix):
    return [[ge[prefix + ".cond"].float(), {"pooled_output": ge[prefix + ".pooled"].float()}]]


CASES = [
    dict(id="ks_a", image=[1, 100, 84], width=96, height=80, strength=0.8, start_percent=0.0, end_percent=1.0,
         seed=11, steps=3, cfg=4.5, sampler="euler", scheduler="sgm_uniform", shift=3.0),
    dict(id="ks_b", image=[1, 64, 64], width=64, height=64, strength=1.5, start_percent=0.2, end_percent=0.7,
         seed=5, steps=4, cfg=3.0, sampler="dpmpp_2m", scheduler="simple", shift=3.0),
]
for c in CASES:
    gi = torch.Generator().manual_seed(c["seed"] + 100)
    img = torch.rand(c["image"][0], c["image"][1], c["image"][2], 3, generator=gi)
    out[c["id"] + ".image"] = img
    # the hint get_control makes for this latent size
    hh, hw = c["height"] // 8 * 8, c["width"] // 8 * 8
    up = comfy.utils.common_upscale(img.movedim(-1, 1), hw, hh, "nearest-exact", "center")
    lat = vae.encode(up.movedim(1, -1))
    out[c["id"] + ".hint"] = (lat * 1.5305).float().contiguous()
    (m,) = nodes_model_advanced.ModelSamplingSD3().patch(model, c["shift"])
    r = nodes_sd3.ControlNetApplySD3.execute(cond("positive"), cond("negative"), control, img, c["strength"],
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

stio.save({k: v.contiguous() for k, v in out.items()}, os.path.join(out_dir, "golden", "sd3_controlnet.safetensors"),
          metadata={"generator": "make_sd3_controlnet.py"})
manifest = {
    "generator": "gen/make_sd3_controlnet.py",
    "command": "/usr/bin/python3 gen/make_sd3_controlnet.py COMFY EINOPS CLIP NODE_MODULES SHARED OUT_DIR",
    "reference": {
        "comfyui_commit": man["reference"]["comfyui_commit"],
        "functions": ["comfy.controlnet.load_controlnet -> load_controlnet_state_dict -> load_controlnet_mmdit "
                      "(convert_diffusers_mmdit, comfy.cldm.mmdit.ControlNet)",
                      "comfy.cldm.mmdit.ControlNet.forward (fwd.*)",
                      "comfy.ldm.modules.diffusionmodules.mmdit.OpenAISignatureMMDITWrapper.forward with control "
                      "(dit.*)",
                      "comfy.controlnet.ControlNet.get_control's hint: comfy.utils.common_upscale(nearest-exact, "
                      "center), comfy.sd.VAE.encode, latent_formats.SD3 with shift_factor 0 (hint.*)",
                      "comfy_extras.nodes_sd3.ControlNetApplySD3.execute, nodes.common_ksampler (ks_*)"],
        "torch": "Debian python3-torch 1.13.1, CPU, float32",
    },
    "models": {
        "controlnet": {"file": CN_FILE, "layout": "diffusers SD3ControlNetModel (InstantX): transformer_blocks.N.*, "
                       "pos_embed.*, pos_embed_input.proj.*, time_text_embed.*, context_embedder.*, "
                       "controlnet_blocks.N.*, F16", "num_blocks": NUM_BLOCKS, "depth": depth,
                       "comfy_name": "controlnet/sd3_controlnet.safetensors"},
        "mmdit": "sd3 set: models.mmdit (UNETLoader, diffusion_models/)",
        "vae": "sd3 set: models.sd35_ckpt's first_stage_model.* (CheckpointLoaderSimple's VAE)",
    },
    "conditioning": "positive.cond/.pooled, negative.cond/.pooled of the sd3 set's e2e_sd3 case (copied here)",
    "forward": {"batch": N, "height": H, "width": W, "context_tokens": L, "timesteps": ts.tolist(),
                "outputs": len(res)},
    "tolerance": {"fwd": {"atol": 2e-4, "rtol": 2e-4}, "dit": {"atol": 2e-4, "rtol": 2e-4},
                  "hint": {"atol": 2e-4, "rtol": 1e-3}, "ks": {"atol": 2e-3, "rtol": 2e-3}},
    "cases": CASES,
}
json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
print("wrote", sorted(out))
