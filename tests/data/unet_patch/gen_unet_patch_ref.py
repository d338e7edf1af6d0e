#!/usr/bin/python3
"""UNet model patches of issue 24 (ModelSamplingContinuousEDM / V, PatchModelAddDownscale, ...) in
ComfyUI's sampler, on the tiny SD1 checkpoint of the shared test data.

usage: /usr/bin/python3 gen_unet_patch_ref.py COMFY EINOPS CLIP TESTDATA [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts;
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors and its manifest).
Writes unet_patch_ref.safetensors and manifest.json beside this script.

Two kinds of case, each with a chain of MODEL patch nodes applied in order (each node's own
function on the previous one's output):
  "sigmas": the patched MODEL's model_sampling.sigmas (its whole table) and what
    comfy_extras.nodes_custom_sampler.BasicScheduler gives for each listed scheduler.
  "ksampler": nodes.common_ksampler on the tiny SD1 model (prompts through CLIPTextEncode,
    EmptyLatentImage) with the patched model; stored: the output latent. A case without nodes
    is the unpatched run (one for each settings the patched cases use, listed before them).
Runs on Debian's python3-torch 1.13, CPU, float32.
"""
import json
import math
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
import comfy_extras.nodes_model_advanced as advanced  # noqa: E402
import comfy_extras.nodes_custom_sampler as custom_sampler  # noqa: E402
import comfy_extras.nodes_model_downscale as downscale  # noqa: E402
import comfy_extras.nodes_hypertile as hypertile  # noqa: E402
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


def v1(cls, fn):
    return lambda m, **kw: getattr(cls(), fn)(m, **kw)[0]


NODES = {"ModelSamplingContinuousEDM": v1(advanced.ModelSamplingContinuousEDM, "patch"),
         "ModelSamplingContinuousV": v1(advanced.ModelSamplingContinuousV, "patch"),
         "PatchModelAddDownscale": lambda m, **kw: downscale.PatchModelAddDownscale.execute(m, **kw).result[0],
         # (HyperTile.execute returns a plain tuple at this commit)
         "HyperTile": lambda m, **kw: hypertile.HyperTile.execute(m, **kw)[0]}
tensors, cases = {}, []
U = 2.0 ** -24


def typed(v):
    return "STRING" if isinstance(v, str) else "BOOLEAN" if isinstance(v, bool) else \
        "INT" if isinstance(v, int) else "FLOAT"


def patched(chain):
    m = model
    for node, inputs in chain:
        m = NODES[node](m, **inputs)
    return m


def node_list(chain):
    return [{"node": n, "on": "model", "inputs": [{"name": k, "type": typed(v), "value": v} for k, v in i.items()]}
            for n, i in chain]


# ---- the patched MODEL's sigmas -------------------------------------------------------------------
SCHEDULERS = ("normal", "karras", "simple", "sgm_uniform")
for cid, chain in (("sigmas_edm_v", [("ModelSamplingContinuousEDM", {"sampling": "v_prediction", "sigma_max": 120.0, "sigma_min": 0.002})]),
                   ("sigmas_edm_edm", [("ModelSamplingContinuousEDM", {"sampling": "edm", "sigma_max": 80.0, "sigma_min": 0.002})]),
                   ("sigmas_edm_eps", [("ModelSamplingContinuousEDM", {"sampling": "eps", "sigma_max": 14.6, "sigma_min": 0.03})]),
                   ("sigmas_edm_cosmos", [("ModelSamplingContinuousEDM", {"sampling": "cosmos_rflow", "sigma_max": 80.0, "sigma_min": 0.002})]),
                   ("sigmas_cont_v", [("ModelSamplingContinuousV", {"sampling": "v_prediction", "sigma_max": 500.0, "sigma_min": 0.03})])):
    m = patched(chain)
    ms = m.get_model_object("model_sampling")
    tensors[cid + "/table"] = ms.sigmas.float()
    scheds = []
    cont_v = chain[-1][0] == "ModelSamplingContinuousV"
    for sched in SCHEDULERS:
        steps = 5
        s = custom_sampler.BasicScheduler.execute(m, sched, steps, 1.0).result[0]
        tensors[cid + "/" + sched] = s.float()
        # ContinuousV's normal / sgm_uniform go through timestep(sigma) = atan(sigma) * 2 / pi and
        # back: sdflow's atan is glibc's, torch's Sleef's (an ulp apart at times). One ulp of t
        # (2^-24 near 1) moves sigma = tan(t pi / 2) by pi/2 (1 + sigma^2) 2^-24, relative
        # pi/2 sigma 2^-24 at the top: two such ulps. Everything else: one float32 ulp.
        via_t = cont_v and sched in ("normal", "sgm_uniform")
        rtol = math.pi * chain[-1][1]["sigma_max"] * U if via_t else 2 * U
        scheds.append({"scheduler": sched, "steps": steps, "denoise": 1.0, "sigmas": cid + "/" + sched,
                       "rtol": rtol,
                       "tolerance_note": "two ulps of atan's t through tan (see the generator)" if via_t else
                                         "one float32 ulp: the same float32 ops"})
    cases.append({"id": cid, "kind": "sigmas", "nodes": node_list(chain), "table": cid + "/table",
                  "schedulers": scheds, "table_rtol": 2 * U,
                  "table_note": "torch's float32 linspace and Sleef exp, emulated: equal up to the last bit "
                                "(rtol one float32 ulp)"})

# ---- KSampler with the patched model ------------------------------------------------------------
latent = nodes.EmptyLatentImage().generate(128, 128, 1)[0]
settings = {"width": 128, "height": 128, "seed": 7, "steps": 3, "cfg": 6.0, "sampler_name": "euler",
            "scheduler": "normal", "positive": "a red brick wall", "negative": "blurry"}
DOWNSCALE = {"block_number": 3, "downscale_factor": 2.0, "start_percent": 0.0, "end_percent": 0.35,
             "downscale_after_skip": True, "downscale_method": "bicubic", "upscale_method": "bicubic"}
HYPERTILE = {"tile_size": 32, "swap_size": 3, "max_depth": 0, "scale_depth": False}
pos = nodes.CLIPTextEncode().encode(clip, settings["positive"])[0]
neg = nodes.CLIPTextEncode().encode(clip, settings["negative"])[0]
for cid, chain, *over in (("ksampler_plain", []),
                          ("ksampler_plain_11", [], {"seed": 11}),
                          ("ksampler_plain_karras", [], {"scheduler": "karras"}),
                          ("ksampler_plain_dpmpp", [], {"scheduler": "karras", "sampler_name": "dpmpp_2m"}),
                          ("ksampler_plain_4", [], {"steps": 4}),
                          ("ksampler_edm_eps", [("ModelSamplingContinuousEDM", {"sampling": "eps", "sigma_max": 14.6, "sigma_min": 0.03})]),
                          ("ksampler_edm_v_karras", [("ModelSamplingContinuousEDM", {"sampling": "v_prediction", "sigma_max": 20.0, "sigma_min": 0.002})],
                           {"scheduler": "karras"}),
                          ("ksampler_edm_edm", [("ModelSamplingContinuousEDM", {"sampling": "edm", "sigma_max": 80.0, "sigma_min": 0.002})],
                           {"scheduler": "karras", "sampler_name": "dpmpp_2m"}),
                          ("ksampler_edm_cosmos", [("ModelSamplingContinuousEDM", {"sampling": "cosmos_rflow", "sigma_max": 80.0, "sigma_min": 0.002})]),
                          ("ksampler_cont_v", [("ModelSamplingContinuousV", {"sampling": "v_prediction", "sigma_max": 500.0, "sigma_min": 0.03})]),
                          ("ksampler_downscale", [("PatchModelAddDownscale", DOWNSCALE)]),
                          ("ksampler_downscale_before_skip", [("PatchModelAddDownscale", dict(
                              DOWNSCALE, block_number=1, downscale_factor=1.5, end_percent=0.7, downscale_after_skip=False,
                              downscale_method="bilinear", upscale_method="nearest-exact"))]),
                          ("ksampler_downscale_3x", [("PatchModelAddDownscale", dict(
                              DOWNSCALE, block_number=4, downscale_factor=3.0, end_percent=0.7,
                              downscale_method="area", upscale_method="bislerp"))]),
                          ("ksampler_downscale_late", [("PatchModelAddDownscale", dict(
                              DOWNSCALE, block_number=2, downscale_factor=1.7, start_percent=0.5, end_percent=1.0,
                              downscale_method="bislerp", upscale_method="area"))], {"steps": 4}),
                          ("ksampler_downscale_edm", [("ModelSamplingContinuousEDM", {"sampling": "eps", "sigma_max": 14.6, "sigma_min": 0.03}),
                                                      ("PatchModelAddDownscale", dict(DOWNSCALE, end_percent=0.5))]),
                          # HyperTile draws its tiles from torch's default generator, which
                          # prepare_noise seeded and drew the noise from
                          ("ksampler_hypertile", [("HyperTile", HYPERTILE)]),
                          ("ksampler_hypertile_depth", [("HyperTile", dict(HYPERTILE, swap_size=2, max_depth=1))]),
                          ("ksampler_hypertile_scale", [("HyperTile", dict(HYPERTILE, max_depth=1, scale_depth=True))],
                           {"seed": 11}),
                          ("ksampler_plain_wide", [], {"width": 128, "height": 192}),
                          ("ksampler_hypertile_wide", [("HyperTile", HYPERTILE)], {"width": 128, "height": 192}),
                          ("ksampler_plain_tall", [], {"width": 192, "height": 128}),
                          ("ksampler_hypertile_tall", [("HyperTile", dict(HYPERTILE, swap_size=4))], {"width": 192, "height": 128})):
    m = patched(chain)
    s = dict(settings, **(over[0] if over else {}))
    lat = nodes.EmptyLatentImage().generate(s["width"], s["height"], 1)[0]
    res = nodes.common_ksampler(m, s["seed"], s["steps"], s["cfg"], s["sampler_name"], s["scheduler"],
                                pos, neg, lat)[0]["samples"]
    tensors[cid + "/latent"] = res.float()
    cases.append({"id": cid, "kind": "ksampler", "nodes": node_list(chain), "settings": s,
                  "latent": cid + "/latent", "atol": 0.04, "rtol": 0.002,
                  "tolerance_note": "the final latent's tolerance of the shared e2e_sd1 case (same model and "
                                    "sampler, 6 steps there): the UNet's float32 sums in another order"})

stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "unet_patch_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/unet_patch/gen_unet_patch_ref.py",
               "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors",
               "file": "unet_patch_ref.safetensors", "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
