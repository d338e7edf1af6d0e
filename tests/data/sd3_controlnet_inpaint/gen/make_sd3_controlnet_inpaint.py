#!/usr/bin/python3
"""ControlNetInpaintingAliMamaApply (comfy_extras/nodes_controlnet.py) with an inpainting SD3 ControlNet:
a tiny random-weight 17-channel ControlNet (comfy.cldm.mmdit.ControlNet, control_latent_channels=17, the
layout of alimama-creative's SD3-Controlnet-Inpainting: InstantX's diffusers SD3ControlNetModel names) and
what ComfyUI's own code computes with it on the SD3 set's tiny MMDiT-X.

usage: /usr/bin/python3 make_sd3_controlnet_inpaint.py COMFY EINOPS CLIP NODE_MODULES SHARED OUT_DIR
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts
  NODE_MODULES:      flux_env's npm folder (unused here; any path)
  SHARED:            ../shared (testdata/sd3: mmdit, the single file's VAE, e2e_sd3's conditioning)
  OUT_DIR:           tests/data/sd3_controlnet_inpaint (models/, golden/, manifest.json)

The ControlNet is made as ../../sd3_controlnet/gen/make_sd3_controlnet.py makes its 16-channel one
(every parameter N(0, 0.05) from torch.Generator seeded per parameter, sorted names, seed 4048 + index,
F16; saved under the diffusers names comfy.utils.mmdit_to_diffusers maps from) with 17 hint channels,
so that ComfyUI's load_controlnet_mmdit sets concat_mask.

Cases (golden/sd3_controlnet_inpaint.safetensors), each from an IMAGE and a MASK drawn from
torch.Generator(seed + 100) (the mask binary when the case says so):
  <id>.image, <id>.mask     the node's inputs
  <id>.cond_hint_original   what the node hands nodes.ControlNetApplyAdvanced (ComfyUI's
                            ControlNet.cond_hint_original: image * round(bilinear(1 - mask)), NCHW)
  <id>.extra_concat         the ControlNet's extra_concat_orig[0] (1 - mask as [B, 1, H, W])
  <id>.hint                 ControlNet.cond_hint after get_control at the case's latent size (VAE latent
                            x 1.5305 with the mask resized nearest-exact and concatenated: 17 channels)
  <id>.control.N            get_control's "output" list (strength applied) for x = <id>.x at sigma
                            <id>.sigma with batched_number 2 (cond and uncond in one batch), context and
                            y of the e2e_sd3 positive, after pre_run on ModelSamplingSD3(shift)
  <id>.latent_out           KSampler (nodes.common_ksampler) on the node's positive/negative
  <id>.latent_nocontrol     the same without the ControlNet
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
from comfy_extras import nodes_controlnet, nodes_model_advanced  # noqa: E402

sdir = os.path.join(shared, "testdata", "sd3")
man = json.load(open(os.path.join(sdir, "manifest.json")))
vae_cfg = man["models"]["sd35_ckpt"]["config"]["vae"]
flux_env.install_overrides({}, vae_cfg, {})

NUM_BLOCKS = 1
HINT_CH = 17
mmdit_path = os.path.join(sdir, man["models"]["mmdit"]["file"])
base_sd = comfy.utils.load_torch_file(mmdit_path)
unet_config = dict(comfy.model_detection.model_config_from_unet(base_sd, "", True).unet_config)
depth = unet_config["depth"]

# ---- the ControlNet, random weights, in ComfyUI's layout, then its diffusers names ----------------
cn = comfy.cldm.mmdit.ControlNet(num_blocks=NUM_BLOCKS, control_latent_channels=HINT_CH,
                                  operations=comfy.ops.disable_weight_init, device="cpu", dtype=torch.float32,
                                  **unet_config)
comfy_sd = {}
for i, (k, v) in enumerate(sorted(cn.state_dict().items())):
    g = torch.Generator().manual_seed(4048 + i)
    comfy_sd[k] = (0.05 * torch.randn(v.shape, generator=g)).to(torch.float16)
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
    diff_sd[dk] = fun(w).contiguous()
    used.add(target)
for k, v in comfy_sd.items():
    if k not in used:
        assert k.startswith("controlnet_blocks.") or k.startswith("pos_embed_input."), k
        diff_sd[k] = v
os.makedirs(os.path.join(out_dir, "models"), exist_ok=True)
os.makedirs(os.path.join(out_dir, "golden"), exist_ok=True)
CN_FILE = "models/tiny-sd3-controlnet-inpainting.safetensors"
cn_path = os.path.join(out_dir, CN_FILE)
stio.save(diff_sd, cn_path, metadata={"generator": "make_sd3_controlnet_inpaint.py"})

control = comfy.controlnet.load_controlnet(cn_path)
assert isinstance(control.control_model, comfy.cldm.mmdit.ControlNet), type(control.control_model)
assert control.concat_mask, "a 17-channel SD3 ControlNet must load with concat_mask"
loaded = control.control_model.state_dict()
for k, v in comfy_sd.items():
    assert torch.equal(loaded[k].float(), v.float()), k
control.control_model.float()

model = comfy.sd.load_diffusion_model(mmdit_path)
ckpt_sd = comfy.utils.load_torch_file(os.path.join(sdir, man["models"]["sd35_ckpt"]["file"]))
vae_sd = comfy.utils.state_dict_prefix_replace(ckpt_sd, {"first_stage_model.": ""}, filter_keys=True)
vae = comfy.sd.VAE(sd=vae_sd)
e2e = next(c for c in man["cases"] if c["id"] == "e2e_sd3")
ge = stio.load(os.path.join(sdir, e2e["file"]))


def cond(prefix):
    return [[ge[prefix + ".cond"].float(), {"pooled_output": ge[prefix + ".pooled"].float()}]]


# image/mask: [batch, height, width]; binary: mask = (rand > 0.5)
CASES = [
    dict(id="ks_a", image=[1, 80, 96], mask=[1, 80, 96], binary=True, width=96, height=80, strength=0.9,
         start_percent=0.0, end_percent=1.0, seed=21, steps=3, cfg=4.0, sampler="euler", scheduler="sgm_uniform",
         shift=3.0, sigma=0.85),
    dict(id="ks_b", image=[1, 64, 72], mask=[2, 50, 44], binary=False, width=64, height=64, strength=1.3,
         start_percent=0.1, end_percent=0.8, seed=6, steps=3, cfg=3.5, sampler="dpmpp_2m", scheduler="simple",
         shift=3.0, sigma=0.7),
]
out = {}
for c in CASES:
    cid = c["id"]
    gi = torch.Generator().manual_seed(c["seed"] + 100)
    img = torch.rand(c["image"][0], c["image"][1], c["image"][2], 3, generator=gi)
    mask = torch.rand(c["mask"][0], c["mask"][1], c["mask"][2], generator=gi)
    if c["binary"]:
        mask = (mask > 0.5).float()
    out[cid + ".image"] = img
    out[cid + ".mask"] = mask
    (m,) = nodes_model_advanced.ModelSamplingSD3().patch(model, c["shift"])
    r = nodes_controlnet.ControlNetInpaintingAliMamaApply.execute(
        cond("positive"), cond("negative"), control, vae, img, mask, c["strength"], c["start_percent"],
        c["end_percent"])
    pos, neg = (r if isinstance(r, tuple) else r.result)[:2]
    c_net = pos[0][1]["control"]
    assert neg[0][1]["control"] is c_net
    out[cid + ".cond_hint_original"] = c_net.cond_hint_original.float().contiguous()
    assert len(c_net.extra_concat_orig) == 1
    out[cid + ".extra_concat"] = c_net.extra_concat_orig[0].float().contiguous()

    # get_control at one sigma on a cond+uncond batch
    lh, lw = c["height"] // 8, c["width"] // 8
    ms = m.get_model_object("model_sampling")
    c_net.pre_run(m.model, lambda a: ms.percent_to_sigma(a))
    gx = torch.Generator().manual_seed(c["seed"] + 200)
    x = torch.randn(2, 16, lh, lw, generator=gx)
    sigma = torch.tensor([c["sigma"]] * 2)
    cc = {"c_crossattn": torch.cat([ge["positive.cond"].float()] * 2),
          "y": torch.cat([ge["positive.pooled"].float()] * 2)}
    ctl = c_net.get_control(x, sigma, cc, 2, {})
    assert ctl is not None, "sigma outside the case's window"
    out[cid + ".x"] = x
    out[cid + ".hint"] = c_net.cond_hint.float().contiguous()
    for j, o in enumerate(ctl["output"]):
        out["%s.control.%d" % (cid, j)] = o.float().contiguous()
    c["control_outputs"] = len(ctl["output"])
    c_net.cleanup()

    latent = {"samples": torch.zeros([1, 16, lh, lw])}
    (res_l,) = nodes.common_ksampler(m, c["seed"], c["steps"], c["cfg"], c["sampler"], c["scheduler"], pos, neg,
                                     latent, denoise=1.0)
    out[cid + ".latent_out"] = res_l["samples"].float()
    (res0,) = nodes.common_ksampler(m, c["seed"], c["steps"], c["cfg"], c["sampler"], c["scheduler"],
                                    cond("positive"), cond("negative"), latent, denoise=1.0)
    out[cid + ".latent_nocontrol"] = res0["samples"].float()
    comfy.model_management.unload_all_models()
for p in ("positive", "negative"):
    for k in ("cond", "pooled"):
        out[p + "." + k] = ge[p + "." + k].float()

stio.save({k: v.contiguous() for k, v in out.items()},
          os.path.join(out_dir, "golden", "sd3_controlnet_inpaint.safetensors"),
          metadata={"generator": "make_sd3_controlnet_inpaint.py"})
manifest = {
    "generator": "gen/make_sd3_controlnet_inpaint.py",
    "command": "/usr/bin/python3 gen/make_sd3_controlnet_inpaint.py COMFY EINOPS CLIP NODE_MODULES SHARED OUT_DIR",
    "reference": {
        "comfyui_commit": man["reference"]["comfyui_commit"],
        "functions": [
            "comfy.controlnet.load_controlnet -> load_controlnet_mmdit (17 hint channels: concat_mask)",
            "comfy_extras.nodes_controlnet.ControlNetInpaintingAliMamaApply.execute -> "
            "nodes.ControlNetApplyAdvanced.apply_controlnet(vae, extra_concat) -> ControlNet.set_cond_hint "
            "(cond_hint_original, extra_concat)",
            "comfy.controlnet.ControlNet.pre_run + get_control (hint, control)",
            "nodes.common_ksampler (latent_out, latent_nocontrol)"],
        "torch": "Debian python3-torch 1.13.1, CPU, float32",
    },
    "models": {
        "controlnet": {"file": CN_FILE, "layout": "diffusers SD3ControlNetModel (InstantX / alimama-creative "
                       "SD3-Controlnet-Inpainting), pos_embed_input.proj in_channels 17, F16",
                       "num_blocks": NUM_BLOCKS, "depth": depth, "hint_channels": HINT_CH,
                       "comfy_name": "controlnet/sd3_controlnet_inpainting.safetensors"},
        "mmdit": "sd3 set: models.mmdit (UNETLoader, diffusion_models/)",
        "vae": "sd3 set: models.sd35_ckpt's first_stage_model.* (CheckpointLoaderSimple's VAE)",
    },
    "conditioning": "positive.cond/.pooled, negative.cond/.pooled of the sd3 set's e2e_sd3 case (copied here)",
    "tolerance": {"image": {"atol": 1e-6, "rtol": 0}, "hint": {"atol": 2e-4, "rtol": 1e-3},
                  "control": {"atol": 2e-4, "rtol": 2e-4}, "ks": {"atol": 2e-3, "rtol": 2e-3}},
    "cases": CASES,
}
json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
print("wrote", sorted(out))
