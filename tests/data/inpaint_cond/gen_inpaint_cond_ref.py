#!/usr/bin/python3
"""InpaintModelConditioning and a 9-channel inpainting UNet in ComfyUI's sampler, on a tiny SD1
inpainting checkpoint derived from the shared tiny SD1.

usage: /usr/bin/python3 gen_inpaint_cond_ref.py COMFY EINOPS CLIP TESTDATA [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts;
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors and its manifest).
Writes inpaint_cond_ref.safetensors and manifest.json beside this script (or in OUT_DIR).

The inpainting checkpoint is tiny-sd1.safetensors with one tensor replaced: "input_conv" in the
reference file (F16 [32, 9, 3, 3]: the original input convolution's 4 input channels, then 5 more
from torch.randn(seed 9) * 0.1), which a test puts into a copy of the shared file the same way.
ComfyUI detects it as an SD1 inpainting model (in_channels 9).

Each case: an image and a mask (stored), the checkpoint's CLIPTextEncode of two prompts, then
nodes.InpaintModelConditioning (noise_mask on or off) and nodes.common_ksampler with the inpainting
MODEL on its outputs. Stored: the node's outputs (the latent's samples and noise_mask, the
entries' concat_latent_image and concat_mask), the first comfy.samplers.calc_cond_batch result
(positive, negative x0 predictions) and the KSampler latent.
Runs on Debian's python3-torch 1.13, CPU, float32.
"""
import json
import os
import sys
import tempfile

comfy_root, einops_root, clip_root, testdata = sys.argv[1:5]
out_dir = sys.argv[5] if len(sys.argv) > 5 else os.path.dirname(os.path.abspath(__file__))
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "../../../../shared/tools/comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(comfy_root, einops_root, clip_root)
import torch  # noqa: E402
import stio  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.samplers  # noqa: E402
import comfy.supported_models as sm  # noqa: E402
import nodes  # noqa: E402

cfg = json.load(open(os.path.join(testdata, "manifest.json")))["models"]["sd1"]["config"]
u = cfg["unet_config"]


class TinySD15(sm.SD15):
    unet_config = {"context_dim": u["context_dim"], "model_channels": u["model_channels"],
                   "use_linear_in_transformer": False, "adm_in_channels": None,
                   "use_temporal_attention": False, "transformer_depth": u["transformer_depth"]}


sm.models.insert(0, TinySD15)

KEY = "model.diffusion_model.input_blocks.0.0.weight"
sd = stio.load(os.path.join(testdata, "models/tiny-sd1.safetensors"))
w4 = sd[KEY]
extra = torch.randn(w4.shape[0], 5, *w4.shape[2:], generator=torch.Generator().manual_seed(9)) * 0.1
sd[KEY] = torch.cat([w4.float(), extra], 1).to(w4.dtype)
tensors = {"input_conv": sd[KEY]}
tmp = tempfile.mkdtemp()
path9 = os.path.join(tmp, "tiny-sd1-inpaint.safetensors")
stio.save(sd, path9)
model, clip, _, _ = comfy.sd.load_checkpoint_guess_config(
    path9, output_vae=False, output_clip=True, te_model_options={"clip_l_model_config": dict(cfg["clip_l"])})
# comfy.sd.VAE's detection assumes the full-size VAE: the tiny one's config given (comfy_env.load_vae)
vae = comfy_env.load_vae(path9, "sd1", {"sd1": cfg})
assert model.model.concat_keys == ("mask", "masked_image"), model.model.concat_keys

recorded = []
_calc = comfy.samplers.calc_cond_batch


def recording_calc(m, conds, x_in, timestep, model_options):
    out = _calc(m, conds, x_in, timestep, model_options)
    recorded.append([o.clone() for o in out])
    return out


comfy.samplers.calc_cond_batch = recording_calc


def blob_mask(h, w, cy, cx, r, soft):
    yy = torch.arange(h, dtype=torch.float32).view(h, 1).expand(h, w)
    xx = torch.arange(w, dtype=torch.float32).view(1, w).expand(h, w)
    d = ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt()
    return ((r + soft - d) / soft).clamp(0.0, 1.0).unsqueeze(0)


# an image whose size is not a multiple of 8 (the node cuts it), a smaller mask (resized)
tensors["image"] = torch.rand(1, 68, 76, 3, generator=torch.Generator().manual_seed(5))
tensors["mask"] = blob_mask(30, 26, 12.0, 14.0, 6.0, 3.0)
SETTINGS = {"seed": 11, "steps": 3, "cfg": 6.0, "sampler_name": "euler", "scheduler": "normal",
            "positive": "a red brick wall", "negative": "blurry"}
pos = nodes.CLIPTextEncode().encode(clip, SETTINGS["positive"])[0]
neg = nodes.CLIPTextEncode().encode(clip, SETTINGS["negative"])[0]
VAE_TOL = {"atol": 0.0002, "rtol": 0.001}   # the shared vae_sd1 case's enc.latent (the same VAE)
# a separable bilinear mix of values in [0, 1]: per pass two products and a sum (3 roundings of at most
# 2^-24 each, the weights summing to 1 so an input error passes through), plus the weights' own rounding
# (2^-24 times |a - b| <= 1) per pass: 8 roundings in all
MASK_TOL = {"atol": 8 * 2.0 ** -24, "rtol": 0.0}
PRED_TOL = {"atol": 0.002, "rtol": 0.002}  # the shared e2e_sd1 step0.cond_denoised (the same UNet's first call)
LAT_TOL = {"atol": 0.04, "rtol": 0.002}    # the shared e2e_sd1 latent_out (the same UNet and sampler)
cases = []
for cid, noise_mask in (("noise_mask", True), ("no_noise_mask", False)):
    p2, n2, lat = nodes.InpaintModelConditioning().encode(pos, neg, tensors["image"], vae, tensors["mask"],
                                                          noise_mask)
    outputs = []

    def out(name, t, tol, what):
        tensors[cid + "/" + name] = t.float().contiguous()
        outputs.append(dict(tol, tensor=cid + "/" + name, what=what))

    out("latent.samples", lat["samples"], VAE_TOL, "latent samples")
    if noise_mask:
        out("latent.noise_mask", lat["noise_mask"], MASK_TOL, "latent noise_mask")
    out("concat_latent_image", p2[0][1]["concat_latent_image"], VAE_TOL, "concat_latent_image")
    out("concat_mask", p2[0][1]["concat_mask"], MASK_TOL, "concat_mask")
    assert n2[0][1]["concat_mask"] is p2[0][1]["concat_mask"]
    recorded.clear()
    res = nodes.common_ksampler(model, SETTINGS["seed"], SETTINGS["steps"], SETTINGS["cfg"], SETTINGS["sampler_name"],
                                SETTINGS["scheduler"], p2, n2, lat)[0]["samples"]
    out("step0.cond", recorded[0][0], PRED_TOL, "step0 cond")
    out("step0.uncond", recorded[0][1], PRED_TOL, "step0 uncond")
    out("latent", res, LAT_TOL, "latent")
    cases.append({"id": cid, "noise_mask": noise_mask, "outputs": outputs})

stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "inpaint_cond_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/inpaint_cond/gen_inpaint_cond_ref.py",
               "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors with %s replaced by input_conv" % KEY,
               "replaced_key": KEY, "input_conv": "input_conv", "image": "image", "mask": "mask",
               "reference": "nodes.CLIPTextEncode, nodes.InpaintModelConditioning, nodes.common_ksampler; step0.* = "
                            "the first comfy.samplers.calc_cond_batch result [positive, negative]",
               "tolerance_note": "latents: the shared vae_sd1 enc.latent tolerance (the same VAE); masks: a bilinear "
                                 "mix of values in [0, 1], 8 float32 roundings (see the generator); step0 predictions and the latent: "
                                 "the shared e2e_sd1 step0.cond_denoised and latent_out tolerances",
               "settings": SETTINGS, "file": "inpaint_cond_ref.safetensors", "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
