#!/usr/bin/python3
"""InstructPixToPixConditioning and an 8-channel InstructPix2Pix UNet in ComfyUI's sampler, on a
tiny SD1 ip2p checkpoint derived from the shared tiny SD1.

usage: /usr/bin/python3 gen_ip2p_cond_ref.py COMFY EINOPS CLIP TESTDATA [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts;
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors and its manifest).
Writes ip2p_cond_ref.safetensors and manifest.json beside this script (or in OUT_DIR).

The inpainting checkpoint is tiny-sd1.safetensors with one tensor replaced: "input_conv" in the
reference file (F16 [32, 8, 3, 3]: the original input convolution's 4 input channels, then 4 more
from torch.randn(seed 9) * 0.1), which a test puts into a copy of the shared file the same way.
ComfyUI detects it as SD15_instructpix2pix (in_channels 8; a tiny subclass of that config).

The case: an image (stored), the checkpoint's CLIPTextEncode of two prompts, then
comfy_extras.nodes_ip2p.InstructPixToPixConditioning and nodes.common_ksampler with the ip2p MODEL
on its outputs. Stored: the node's outputs (the zero latent, the entries' concat_latent_image), the
first comfy.samplers.calc_cond_batch result (positive, negative x0 predictions) and the KSampler
latent.
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


class TinySD15IP2P(sm.SD15_instructpix2pix):
    unet_config = dict(TinySD15.unet_config, in_channels=8)


sm.models.insert(0, TinySD15)
sm.models.insert(0, TinySD15IP2P)
import comfy_extras.nodes_ip2p as nodes_ip2p  # noqa: E402

KEY = "model.diffusion_model.input_blocks.0.0.weight"
sd = stio.load(os.path.join(testdata, "models/tiny-sd1.safetensors"))
w4 = sd[KEY]
extra = torch.randn(w4.shape[0], 4, *w4.shape[2:], generator=torch.Generator().manual_seed(9)) * 0.1
sd[KEY] = torch.cat([w4.float(), extra], 1).to(w4.dtype)
tensors = {"input_conv": sd[KEY]}
tmp = tempfile.mkdtemp()
path9 = os.path.join(tmp, "tiny-sd1-ip2p.safetensors")
stio.save(sd, path9)
model, clip, _, _ = comfy.sd.load_checkpoint_guess_config(
    path9, output_vae=False, output_clip=True, te_model_options={"clip_l_model_config": dict(cfg["clip_l"])})
# comfy.sd.VAE's detection assumes the full-size VAE: the tiny one's config given (comfy_env.load_vae)
vae = comfy_env.load_vae(path9, "sd1", {"sd1": cfg})
assert type(model.model).__name__ == "SD15_instructpix2pix", type(model.model)

recorded = []
_calc = comfy.samplers.calc_cond_batch


def recording_calc(m, conds, x_in, timestep, model_options):
    out = _calc(m, conds, x_in, timestep, model_options)
    recorded.append([o.clone() for o in out])
    return out


comfy.samplers.calc_cond_batch = recording_calc


# an image whose size is not a multiple of 8 (the node cuts it)
tensors["image"] = torch.rand(1, 68, 76, 3, generator=torch.Generator().manual_seed(5))
SETTINGS = {"seed": 11, "steps": 3, "cfg": 6.0, "sampler_name": "euler", "scheduler": "normal",
            "positive": "make it a red brick wall", "negative": "blurry"}
pos = nodes.CLIPTextEncode().encode(clip, SETTINGS["positive"])[0]
neg = nodes.CLIPTextEncode().encode(clip, SETTINGS["negative"])[0]
VAE_TOL = {"atol": 0.0002, "rtol": 0.001}   # the shared vae_sd1 case's enc.latent (the same VAE)
PRED_TOL = {"atol": 0.002, "rtol": 0.002}  # the shared e2e_sd1 step0.cond_denoised (the same UNet's first call)
LAT_TOL = {"atol": 0.04, "rtol": 0.002}    # the shared e2e_sd1 latent_out (the same UNet and sampler)
cases = []
for cid in ("ip2p",):
    r = nodes_ip2p.InstructPixToPixConditioning.execute(pos, neg, tensors["image"], vae)
    p2, n2, lat = r.result if hasattr(r, "result") else r
    outputs = []

    def out(name, t, tol, what):
        tensors[cid + "/" + name] = t.float().contiguous()
        outputs.append(dict(tol, tensor=cid + "/" + name, what=what))

    out("latent.samples", lat["samples"], {"atol": 0.0, "rtol": 0.0}, "latent samples")
    out("concat_latent_image", p2[0][1]["concat_latent_image"], VAE_TOL, "concat_latent_image")
    assert n2[0][1]["concat_latent_image"] is p2[0][1]["concat_latent_image"]
    recorded.clear()
    res = nodes.common_ksampler(model, SETTINGS["seed"], SETTINGS["steps"], SETTINGS["cfg"], SETTINGS["sampler_name"],
                                SETTINGS["scheduler"], p2, n2, lat)[0]["samples"]
    out("step0.cond", recorded[0][0], PRED_TOL, "step0 cond")
    out("step0.uncond", recorded[0][1], PRED_TOL, "step0 uncond")
    out("latent", res, LAT_TOL, "latent")
    cases.append({"id": cid, "outputs": outputs})

stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "ip2p_cond_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/ip2p_cond/gen_ip2p_cond_ref.py",
               "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors with %s replaced by input_conv" % KEY,
               "replaced_key": KEY, "input_conv": "input_conv", "image": "image",
               "reference": "nodes.CLIPTextEncode, comfy_extras.nodes_ip2p.InstructPixToPixConditioning, nodes.common_ksampler; step0.* = "
                            "the first comfy.samplers.calc_cond_batch result [positive, negative]",
               "tolerance_note": "the zero latent: exact; concat_latent_image: the shared vae_sd1 enc.latent "
                                 "tolerance (the same VAE); step0 predictions and the latent: "
                                 "the shared e2e_sd1 step0.cond_denoised and latent_out tolerances",
               "settings": SETTINGS, "file": "ip2p_cond_ref.safetensors", "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
