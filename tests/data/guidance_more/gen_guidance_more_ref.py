#!/usr/bin/python3
"""More guidance nodes (SelfAttentionGuidance, PerpNeg, PerpNegGuider, RenormCFG, FreSca) in ComfyUI's
sampler, on the tiny SD1 checkpoint of the shared test data.

usage: /usr/bin/python3 gen_guidance_more_ref.py REF_DIR TESTDATA [OUT_DIR]
  REF_DIR: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at the commit in
  shared/tools/comfyref/COMFY_COMMIT, einops, CLIP); TESTDATA: ../shared/testdata
  (models/tiny-sd1.safetensors and its manifest).
Writes guidance_more_ref.safetensors and manifest.json beside this script (or into OUT_DIR).

Three kinds of case:
  "fresca": comfy_extras.nodes_fresca.Fourier_filter(x, scale_low, scale_high, freq_cutoff) on a random x;
    stored: x and the result.
  "ksampler": nodes.common_ksampler on the tiny SD1 model (prompts through CLIPTextEncode,
    EmptyLatentImage) with the model patched by the case's nodes in order (each node's own execute on
    the previous one's output; a CONDITIONING input is the CLIPTextEncode of its "text"); stored: the
    output latent. A case without nodes is the unpatched run at its cfg and size.
  "perpneg_guider": PerpNegGuider(model, positive, negative, empty_conditioning, cfg, neg_scale) driven
    as SamplerCustomAdvanced drives a GUIDER (RandomNoise(seed), KSamplerSelect(sampler_name),
    BasicScheduler(scheduler, steps, denoise 1)); stored: the output latent.
Runs on Debian's python3-torch 1.13, CPU, float32.
"""
import json
import math
import os
import sys

ref_dir, testdata = sys.argv[1:3]
out_dir = sys.argv[3] if len(sys.argv) > 3 else os.path.dirname(os.path.abspath(__file__))
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, "/work/shared/tools/comfyref")
sys.path.insert(0, os.path.join(here, "../../../../shared/tools/comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(os.path.join(ref_dir, "ComfyUI"), os.path.join(ref_dir, "einops"), os.path.join(ref_dir, "CLIP"))
COMMIT = open(os.path.join(os.path.dirname(comfy_env.__file__), "COMFY_COMMIT")).read().strip()
import torch  # noqa: E402
import stio  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.samplers  # noqa: E402
import comfy.supported_models as sm  # noqa: E402
import comfy_extras.nodes_freelunch as freelunch  # noqa: E402
import comfy_extras.nodes_sag as nodes_sag  # noqa: E402
import comfy_extras.nodes_perpneg as nodes_perpneg  # noqa: E402
import comfy_extras.nodes_lumina2 as nodes_lumina2  # noqa: E402
import comfy_extras.nodes_fresca as nodes_fresca  # noqa: E402
import comfy_extras.nodes_custom_sampler as ncs  # noqa: E402
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

NODES = {"FreeU": freelunch.FreeU, "SelfAttentionGuidance": nodes_sag.SelfAttentionGuidance,
         "PerpNeg": nodes_perpneg.PerpNeg, "RenormCFG": nodes_lumina2.RenormCFG, "FreSca": nodes_fresca.FreSca}
tensors, cases = {}, []
U = 2.0 ** -24

# SAG's mask is (attention mass of a key > 1.0): a mass within rounding of 1.0 could flip between
# implementations. Every mass ComfyUI thresholds is recorded here; the manifest keeps the smallest
# distance to 1.0 of each case (it must be far above float32 rounding for the case to be meaningful).
sag_margin = [math.inf]
_blur = nodes_sag.create_blur_map


def blur_watch(x0, attn, sigma=3.0, threshold=1.0):
    b = x0.shape[0]
    mass = attn.reshape(b, -1, attn.shape[1], attn.shape[2]).mean(1).sum(1)
    sag_margin[0] = min(sag_margin[0], float((mass - threshold).abs().min()))
    return _blur(x0, attn, sigma, threshold)


nodes_sag.create_blur_map = blur_watch


def rand(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def encode(text):
    return nodes.CLIPTextEncode().encode(clip, text)[0]


def node_inputs(inputs):
    """The manifest's form of a node's inputs, and the values its execute takes."""
    man, kw = [], {}
    for k, v in inputs.items():
        if isinstance(v, tuple):  # ("CONDITIONING", text)
            man.append({"name": k, "type": "CONDITIONING", "text": v[1]})
            kw[k] = encode(v[1])
        elif isinstance(v, int) and not isinstance(v, bool):
            man.append({"name": k, "type": "INT", "value": v})
            kw[k] = v
        else:
            man.append({"name": k, "type": "FLOAT", "value": v})
            kw[k] = v
    return man, kw


# ---- FreSca's Fourier_filter on its own -------------------------------------------------------------
for cid, shape, lo, hi, cut in (("fresca_8x8", (2, 3, 8, 8), 1.0, 1.25, 20), ("fresca_8x8_c2", (1, 2, 8, 8), 0.7, 1.5, 2),
                                ("fresca_5x7_c1", (1, 2, 5, 7), 0.5, 1.3, 1), ("fresca_6x9_c3", (1, 1, 6, 9), 1.2, 0.8, 3),
                                ("fresca_1x4", (1, 1, 1, 4), 0.0, 2.0, 1)):
    x = rand(len(cases) + 1, *shape)
    out = nodes_fresca.Fourier_filter(x, scale_low=lo, scale_high=hi, freq_cutoff=cut)
    tensors[cid + "/x"], tensors[cid + "/out"] = x, out
    # torch's float32 FFT and inverse FFT of an n-point plane (n = H W) each err by at most about
    # log2(n) + 1 roundings of the plane's 2-norm per output (the transform is orthogonal up to
    # sqrt(n), its butterflies add one rounding per stage); sdflow's transform is computed in double.
    # Bound: both transforms of the largest plane, doubled, times the largest scale, plus the final
    # rounding to float32.
    n = shape[2] * shape[3]
    norm = float(x.flatten(0, 1).norm(dim=1).max())
    tol = 2 * 2 * (math.log2(n) + 1) * U * norm * max(1.0, abs(lo), abs(hi)) + U * float(out.abs().max())
    cases.append({"id": cid, "kind": "fresca", "scale_low": lo, "scale_high": hi, "freq_cutoff": cut,
                  "x": cid + "/x", "out": cid + "/out", "atol": tol, "rtol": 0.0,
                  "tolerance_note": "float32 FFT + inverse FFT rounding of the largest plane's 2-norm (see the "
                                    "generator); sdflow computes the transform in double"})

# ---- KSampler with the patched model ---------------------------------------------------------------
settings = {"width": 128, "height": 128, "seed": 7, "steps": 3, "cfg": 6.0, "sampler_name": "euler",
            "scheduler": "normal", "positive": "a red brick wall", "negative": "blurry"}
TOL = {"atol": 0.04, "rtol": 0.002,
       "tolerance_note": "the final latent's tolerance of the shared e2e_sd1 case (same model and sampler, 6 "
                         "steps there): the UNet's float32 sums in another order"}
FREEU = {"b1": 1.1, "b2": 1.2, "s1": 0.9, "s2": 0.2}
KS = (
    ("ksampler_plain", [], {}),
    ("ksampler_sag", [("SelfAttentionGuidance", {"scale": 0.5, "blur_sigma": 2.0})], {}),
    ("ksampler_sag_strong", [("SelfAttentionGuidance", {"scale": 2.5, "blur_sigma": 1.0})], {}),
    ("ksampler_freeu_sag", [("FreeU", FREEU), ("SelfAttentionGuidance", {"scale": 0.5, "blur_sigma": 2.0})], {}),
    ("ksampler_perpneg", [("PerpNeg", {"empty_conditioning": ("CONDITIONING", ""), "neg_scale": 1.0})], {}),
    ("ksampler_perpneg_2", [("PerpNeg", {"empty_conditioning": ("CONDITIONING", "a photo"), "neg_scale": 2.5})], {}),
    ("ksampler_renorm", [("RenormCFG", {"cfg_trunc": 100.0, "renorm_cfg": 1.0})], {}),
    ("ksampler_renorm_trunc", [("RenormCFG", {"cfg_trunc": 2.0, "renorm_cfg": 0.0})], {}),
    ("ksampler_renorm_half", [("RenormCFG", {"cfg_trunc": 10.0, "renorm_cfg": 0.6})], {}),
    ("ksampler_fresca", [("FreSca", {"scale_low": 0.9, "scale_high": 1.25, "freq_cutoff": 20})], {}),
    ("ksampler_fresca_c3", [("FreSca", {"scale_low": 1.0, "scale_high": 1.5, "freq_cutoff": 3})], {}),
    ("ksampler_plain_cfg1", [], {"cfg": 1.0}),
    ("ksampler_sag_cfg1", [("SelfAttentionGuidance", {"scale": 1.0, "blur_sigma": 2.0})], {"cfg": 1.0}),
    # (no PerpNeg case at cfg 1: with the negative prediction zero there, perp_neg returns
    # c + e - (e . p / |p|^2) p, p = c - e small against e, which grows the latent past 2000 in three
    # steps and amplifies float32 rounding beyond any meaningful tolerance)
    ("ksampler_plain_wide", [], {"width": 192}),
    ("ksampler_sag_wide", [("SelfAttentionGuidance", {"scale": 0.8, "blur_sigma": 2.0})], {"width": 192}),
)
for cid, chain, over in KS:
    s = dict(settings, **over)
    m = model
    man_nodes = []
    for node, inputs in chain:
        man, kw = node_inputs(inputs)
        m = NODES[node].execute(m, **kw).result[0]
        man_nodes.append({"node": node, "on": "model", "inputs": man})
    pos, neg = encode(s["positive"]), encode(s["negative"])
    latent = nodes.EmptyLatentImage().generate(s["width"], s["height"], 1)[0]
    sag_margin[0] = math.inf
    res = nodes.common_ksampler(m, s["seed"], s["steps"], s["cfg"], s["sampler_name"], s["scheduler"], pos, neg,
                                latent)[0]["samples"]
    tensors[cid + "/latent"] = res.float()
    case = {"id": cid, "kind": "ksampler", "nodes": man_nodes, "settings": s, "latent": cid + "/latent", **TOL}
    if any(n == "SelfAttentionGuidance" for n, _ in chain):
        case["sag_mass_margin"] = sag_margin[0]
    cases.append(case)

# ---- PerpNegGuider through SamplerCustomAdvanced ------------------------------------------------------
for cid, gset in (("perpneg_guider", {"cfg": 6.0, "neg_scale": 1.0, "empty": ""}),
                  ("perpneg_guider_neg0", {"cfg": 6.0, "neg_scale": 0.0, "empty": ""}),
                  ("perpneg_guider_photo", {"cfg": 4.0, "neg_scale": 1.5, "empty": "a photo"})):
    s = dict(settings)
    pos, neg, empty = encode(s["positive"]), encode(s["negative"]), encode(gset["empty"])
    guider = nodes_perpneg.PerpNegGuider.execute(model, pos, neg, empty, gset["cfg"], gset["neg_scale"]).result[0]
    latent = nodes.EmptyLatentImage().generate(s["width"], s["height"], 1)[0]
    sigmas = comfy.samplers.calculate_sigmas(model.get_model_object("model_sampling"), s["scheduler"],
                                             s["steps"]).cpu()
    sampler = comfy.samplers.sampler_object(s["sampler_name"])
    noise = ncs.Noise_RandomNoise(s["seed"])
    res = guider.sample(noise.generate_noise(latent), latent["samples"], sampler, sigmas, denoise_mask=None,
                        callback=None, disable_pbar=True, seed=noise.seed)
    tensors[cid + "/latent"] = res.float()
    cases.append({"id": cid, "kind": "perpneg_guider", "settings": s, "guider": gset, "latent": cid + "/latent",
                  **TOL})

stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "guidance_more_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/guidance_more/gen_guidance_more_ref.py", "comfyui_commit": COMMIT,
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors",
               "file": "guidance_more_ref.safetensors", "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
