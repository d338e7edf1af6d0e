#!/usr/bin/python3
"""SamplerLCMUpscale (comfy_extras/nodes_advanced_samplers.py) through ComfyUI's SamplerCustom on the
tiny SD1 checkpoint of the shared test data.

usage: /usr/bin/python3 gen_lcm_upscale_ref.py COMFY EINOPS CLIP TESTDATA [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts;
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors and its manifest).
Writes lcm_upscale_ref.safetensors and manifest.json beside this script.

Each case: CLIPTextEncode x2, EmptyLatentImage, BasicScheduler(model, scheduler, steps, 1.0),
SamplerLCMUpscale(scale_ratio, scale_steps, upscale_method), then
comfy_extras.nodes_custom_sampler.SamplerCustom(model, add_noise=True, noise_seed, cfg, positive,
negative, sampler, sigmas, latent); stored: its output latent and its denoised_output (the last
step's x0), each of the size the sampler grew it to. sample_lcm_upscale draws its step noise with
torch.randn_like on torch's default generator, which SamplerCustom's prepare_noise seeded with the
noise seed and drew the initial noise from; for a batch of two or more, bislerp hands back a
channels-last tensor, whose randn_like torch fills element by element. Runs on Debian's python3-torch 1.13, CPU, float32.
"""
import json
import os
import sys

comfy_root, einops_root, clip_root, testdata = sys.argv[1:5]
out_dir = sys.argv[5] if len(sys.argv) > 5 else os.path.dirname(os.path.abspath(__file__))
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "../../../../shared/tools/comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(comfy_root, einops_root, clip_root)
import torch  # noqa: E402
import stio  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.supported_models as sm  # noqa: E402
import comfy_extras.nodes_custom_sampler as custom_sampler  # noqa: E402
import comfy_extras.nodes_advanced_samplers as advanced_samplers  # noqa: E402
import nodes  # noqa: E402

cfg = json.load(open(os.path.join(testdata, "manifest.json")))["models"]["sd1"]["config"]
u = cfg["unet_config"]


class TinySD15(sm.SD15):
    unet_config = {"context_dim": u["context_dim"], "model_channels": u["model_channels"],
                   "use_linear_in_transformer": False, "adm_in_channels": None,
                   "use_temporal_attention": False, "transformer_depth": u["transformer_depth"]}


sm.models.insert(0, TinySD15)
model, clip, _, _ = comfy.sd.load_checkpoint_guess_config(
    os.path.join(testdata, "models/tiny-sd1.safetensors"), output_vae=False, output_clip=True,
    te_model_options={"clip_l_model_config": dict(cfg["clip_l"])})

settings = {"width": 128, "height": 128, "batch_size": 1, "seed": 7, "steps": 4, "cfg": 6.0, "scheduler": "normal",
            "positive": "a red brick wall", "negative": "blurry"}
pos = nodes.CLIPTextEncode().encode(clip, settings["positive"])[0]
neg = nodes.CLIPTextEncode().encode(clip, settings["negative"])[0]
tensors, cases = {}, []
for cid, sampler, over in (
        ("bislerp_default_steps", {"scale_ratio": 1.5, "scale_steps": -1, "upscale_method": "bislerp"}, {"steps": 6}),
        ("bislerp_2_steps", {"scale_ratio": 1.5, "scale_steps": 2, "upscale_method": "bislerp"}, {}),
        ("bislerp_batch2", {"scale_ratio": 1.5, "scale_steps": 2, "upscale_method": "bislerp"},
         {"steps": 3, "batch_size": 2, "width": 64}),
        ("bilinear_2_steps", {"scale_ratio": 1.5, "scale_steps": 2, "upscale_method": "bilinear"}, {}),
        ("bilinear_default_steps", {"scale_ratio": 1.5, "scale_steps": -1, "upscale_method": "bilinear"},
         {"seed": 11, "scheduler": "karras"}),
        # more upscale steps than steps: the last prediction is resized too, after its noise-free step
        ("nearest_every_step", {"scale_ratio": 1.3, "scale_steps": 9, "upscale_method": "nearest-exact"},
         {"steps": 3, "width": 96}),
        ("area_shrink", {"scale_ratio": 0.75, "scale_steps": 1, "upscale_method": "area"}, {})):
    s = dict(settings, **over)
    m = model
    sigmas = custom_sampler.BasicScheduler.execute(m, s["scheduler"], s["steps"], 1.0).result[0]
    smp = advanced_samplers.SamplerLCMUpscale.execute(**sampler).result[0]
    lat = nodes.EmptyLatentImage().generate(s["width"], s["height"], s["batch_size"])[0]
    res = custom_sampler.SamplerCustom.execute(m, True, s["seed"], s["cfg"], pos, neg, smp, sigmas, lat).result
    tensors[cid + "/latent"] = res[0]["samples"].float()
    tensors[cid + "/denoised"] = res[1]["samples"].float()
    cases.append({"id": cid, "sampler": {"node": "SamplerLCMUpscale", "inputs": sampler}, "settings": s,
                  "latent": cid + "/latent", "denoised": cid + "/denoised", "atol": 0.04, "rtol": 0.002,
                  "tolerance_note": "the final latent's tolerance of the shared e2e_sd1 case (same model, 6 "
                                    "steps there): the UNet's float32 sums in another order"})

stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "lcm_upscale_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/lcm_upscale/gen_lcm_upscale_ref.py",
               "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors",
               "function": "comfy_extras.nodes_custom_sampler.SamplerCustom with "
                           "comfy_extras.nodes_advanced_samplers.SamplerLCMUpscale",
               "file": "lcm_upscale_ref.safetensors", "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
