#!/usr/bin/python3
"""MODEL patch nodes (FreeU, FreeU_V2, ...) in ComfyUI's sampler, on the tiny SD1 checkpoint of the shared
test data.

usage: /usr/bin/python3 gen_model_patch_ref.py COMFY EINOPS CLIP TESTDATA [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts;
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors and its manifest).
Writes model_patch_ref.safetensors and manifest.json beside this script.

Two kinds of case:
  "fourier": comfy_extras.nodes_freelunch.Fourier_filter(x, threshold=1, scale) on a random x;
    stored: x and the result.
  "ksampler": nodes.common_ksampler on the tiny SD1 model (prompts through CLIPTextEncode,
    EmptyLatentImage) with the model (or, for the nodes marked "on": "clip", the CLIP the prompts
    are encoded with) patched by the case's nodes in order (each node's own execute on the
    previous one's output); stored: the output latent. A case without nodes is the unpatched run.
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
import comfy_extras.nodes_freelunch as freelunch  # noqa: E402
import comfy_extras.nodes_attention_multiply as attn_mult  # noqa: E402
import comfy_extras.nodes_pag as pag  # noqa: E402
import comfy_extras.nodes_cfg as nodes_cfg  # noqa: E402
import comfy_extras.nodes_eps as nodes_eps  # noqa: E402
import comfy_extras.nodes_mahiro as nodes_mahiro  # noqa: E402
import comfy_extras.nodes_apg as nodes_apg  # noqa: E402
import comfy_extras.nodes_tcfg as nodes_tcfg  # noqa: E402
import comfy_extras.nodes_differential_diffusion as nodes_dd  # noqa: E402
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

NODES = {"FreeU": freelunch.FreeU, "FreeU_V2": freelunch.FreeU_V2,
         "UNetSelfAttentionMultiply": attn_mult.UNetSelfAttentionMultiply,
         "UNetCrossAttentionMultiply": attn_mult.UNetCrossAttentionMultiply,
         "CLIPAttentionMultiply": attn_mult.CLIPAttentionMultiply,
         "PerturbedAttentionGuidance": pag.PerturbedAttentionGuidance,
         "CFGZeroStar": nodes_cfg.CFGZeroStar, "CFGNorm": nodes_cfg.CFGNorm,
         "Epsilon Scaling": nodes_eps.EpsilonScaling, "Mahiro": nodes_mahiro.Mahiro,
         "APG": nodes_apg.APG, "TCFG": nodes_tcfg.TCFG,
         "DifferentialDiffusion": nodes_dd.DifferentialDiffusion}
ON_CLIP = {"CLIPAttentionMultiply"}  # nodes patching the CLIP (the prompts are encoded with it)
tensors, cases = {}, []
U = 2.0 ** -24


def rand(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ---- Fourier_filter on its own ------------------------------------------------------------------
for cid, shape, scale in (("fourier_8x8", (2, 3, 8, 8), 0.2), ("fourier_5x7", (1, 2, 5, 7), 0.9),
                          ("fourier_2x3", (1, 2, 2, 3), 1.7), ("fourier_1x4", (1, 1, 1, 4), 0.5)):
    x = rand(len(cases) + 1, *shape)
    out = freelunch.Fourier_filter(x, threshold=1, scale=scale)
    tensors[cid + "/x"], tensors[cid + "/out"] = x, out
    # torch's float32 FFT and inverse FFT of an n-point plane (n = H W) each err by at most about
    # log2(n) + 1 roundings of the plane's 2-norm (the transform is orthogonal up to sqrt(n), its
    # butterflies add one rounding per stage); ours is computed in double. Bound: both transforms
    # of the largest plane, doubled, plus the final rounding to float32.
    n = shape[2] * shape[3]
    norm = float(x.flatten(0, 1).norm(dim=1).max())
    tol = 2 * 2 * (math.log2(n) + 1) * U * norm * max(1.0, abs(scale)) + U * float(out.abs().max())
    cases.append({"id": cid, "kind": "fourier", "scale": scale, "x": cid + "/x", "out": cid + "/out",
                  "atol": tol, "rtol": 0.0,
                  "tolerance_note": "float32 FFT + inverse FFT rounding of the largest plane's 2-norm (see the "
                                    "generator); sdflow sums the four changed frequencies in double"})

# ---- KSampler with the patched model ------------------------------------------------------------
latent = nodes.EmptyLatentImage().generate(128, 128, 1)[0]
settings = {"width": 128, "height": 128, "seed": 7, "steps": 3, "cfg": 6.0, "sampler_name": "euler",
            "scheduler": "normal", "positive": "a red brick wall", "negative": "blurry"}
FREEU = {"b1": 1.1, "b2": 1.2, "s1": 0.9, "s2": 0.2}
FREEU_V2 = {"b1": 1.3, "b2": 1.4, "s1": 0.9, "s2": 0.2}
for cid, chain, *case_cfg in (("ksampler_plain", []),
                   ("ksampler_freeu", [("FreeU", FREEU)]),
                   ("ksampler_freeu_b1", [("FreeU", dict(FREEU, b1=1.5))]),
                   ("ksampler_freeu_v2", [("FreeU_V2", FREEU_V2)]),
                   ("ksampler_freeu_stacked", [("FreeU", FREEU), ("FreeU_V2", dict(FREEU_V2, s2=0.5))]),
                   ("ksampler_self_attn_mult", [("UNetSelfAttentionMultiply", {"q": 1.2, "k": 0.8, "v": 1.1, "out": 0.9})]),
                   ("ksampler_cross_attn_mult", [("UNetCrossAttentionMultiply", {"q": 1.0, "k": 1.3, "v": 0.7, "out": 1.2})]),
                   ("ksampler_clip_attn_mult", [("CLIPAttentionMultiply", {"q": 1.1, "k": 0.9, "v": 1.2, "out": 0.8})]),
                   ("ksampler_freeu_cross_attn", [("FreeU", FREEU),
                                                  ("UNetCrossAttentionMultiply", {"q": 1.0, "k": 1.0, "v": 1.5, "out": 1.0})]),
                   ("ksampler_pag", [("PerturbedAttentionGuidance", {"scale": 3.0})]),
                   ("ksampler_freeu_pag", [("FreeU", FREEU), ("PerturbedAttentionGuidance", {"scale": 1.5})]),
                   ("ksampler_cfg_zero_star", [("CFGZeroStar", {})]),
                   ("ksampler_cfg_norm", [("CFGNorm", {"strength": 0.9})]),
                   ("ksampler_eps_scaling", [("Epsilon Scaling", {"scaling_factor": 1.02})]),
                   ("ksampler_mahiro", [("Mahiro", {})]),
                   ("ksampler_zero_star_norm", [("CFGZeroStar", {}), ("CFGNorm", {"strength": 1.0})]),
                   ("ksampler_apg", [("APG", {"eta": 1.0, "norm_threshold": 5.0, "momentum": 0.0})]),
                   ("ksampler_apg_momentum", [("APG", {"eta": 0.5, "norm_threshold": 2.0, "momentum": 0.5})]),
                   ("ksampler_tcfg", [("TCFG", {})]),
                   ("ksampler_tcfg_apg", [("TCFG", {}), ("APG", {"eta": 0.0, "norm_threshold": 0.0, "momentum": -0.5})]),
                   ("ksampler_plain_cfg1", [], 1.0),
                   ("ksampler_plain_masked", [], 6.0, "mask"),
                   ("ksampler_diff_diff", [("DifferentialDiffusion", {"strength": 1.0})], 6.0, "mask"),
                   ("ksampler_diff_diff_half", [("DifferentialDiffusion", {"strength": 0.5})], 6.0, "mask"),
                   ("ksampler_apg_cfg1", [("APG", {"eta": 2.0, "norm_threshold": 0.0, "momentum": 0.2})], 1.0),
                   # (Mahiro and CFGZeroStar change nothing at cfg 1: the zero uncond leaves out as it is)
                   ("ksampler_eps_scaling_cfg1", [("Epsilon Scaling", {"scaling_factor": 1.05})], 1.0)):
    m, c = model, clip
    for node, inputs in chain:
        if node in ON_CLIP:
            c = NODES[node].execute(c, **inputs).result[0]
        else:
            m = NODES[node].execute(m, **inputs).result[0]
    pos = nodes.CLIPTextEncode().encode(c, "a red brick wall")[0]
    neg = nodes.CLIPTextEncode().encode(c, "blurry")[0]
    case_settings = dict(settings, cfg=case_cfg[0]) if case_cfg else settings
    lat = latent
    if len(case_cfg) > 1:  # a noise mask: a horizontal ramp over the image (SetLatentNoiseMask resizes it)
        mask = torch.linspace(0.0, 1.0, settings["width"]).reshape(1, 1, -1).repeat(1, settings["height"], 1)
        tensors["noise_mask"] = mask
        lat = nodes.SetLatentNoiseMask().set_mask(latent, mask)[0]
    res = nodes.common_ksampler(m, settings["seed"], settings["steps"], case_settings["cfg"], settings["sampler_name"],
                                settings["scheduler"], pos, neg, lat)[0]["samples"]
    tensors[cid + "/latent"] = res.float()
    cases.append({"id": cid, "kind": "ksampler",
                  "nodes": [{"node": n, "on": "clip" if n in ON_CLIP else "model",
                             "inputs": [{"name": k, "type": "FLOAT", "value": v} for k, v in i.items()]}
                            for n, i in chain],
                  "settings": case_settings, "latent": cid + "/latent", "atol": 0.04, "rtol": 0.002,
                  **({"noise_mask": "noise_mask"} if len(case_cfg) > 1 else {}),
                  "tolerance_note": "the final latent's tolerance of the shared e2e_sd1 case (same model and "
                                    "sampler, 6 steps there): the UNet's float32 sums in another order"})

stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "model_patch_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/model_patch/gen_model_patch_ref.py",
               "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors",
               "file": "model_patch_ref.safetensors", "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
