#!/usr/bin/env python3
"""gen_slg.py - reference data for SkipLayerGuidanceSD3 (tests/data/sd3_slg), from ComfyUI's
own code (../../../../shared/tools/comfyref: unmodified ComfyUI at the pinned commit on Debian's
python3-torch, CPU, float32).

usage: /usr/bin/python3 gen_slg.py COMFY_ROOT EINOPS_ROOT CLIP_ROOT SD3_SET_DIR OUT_DIR
(the trees as ../shared/tools/comfyref/extract_refs.sh extracts them; $COMFYREF overrides where
comfy_env.py is looked for)

For each case of CASES: nodes.UNETLoader on the SD3 set's tiny MMDiT (its manifest's "mmdit"
file), comfy_extras.nodes_model_advanced.ModelSamplingSD3(shift), then
comfy_extras.nodes_sd3.SkipLayerGuidanceSD3(layers, scale, start_percent, end_percent),
nodes.common_ksampler (KSampler) with the conditioning the SD3 set's e2e_sd3 case recorded
(positive.cond/.pooled, negative.cond/.pooled) on EmptySD3LatentImage's zeros. Writes
slg.safetensors (<case>.latent_out = the KSampler LATENT, <case>.latent_noslg = the same
KSampler without SkipLayerGuidanceSD3, plus the conditioning used) and
manifest.json (settings per case; the ComfyUI functions used).
"""
import json
import os
import sys

COMFY, EINOPS, CLIP, SD3, OUT = sys.argv[1:6]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("COMFYREF", os.path.join(HERE, "..", "..", "..", "..", "shared", "tools", "comfyref")))
import comfy_env  # noqa: E402

comfy_env.setup(COMFY, EINOPS, CLIP)
import stio  # noqa: E402
import torch  # noqa: E402

torch.set_grad_enabled(False)
import comfy.sd  # noqa: E402
import comfy.utils  # noqa: E402
import nodes  # noqa: E402
from comfy_extras import nodes_model_advanced, nodes_sd3  # noqa: E402

man = json.load(open(os.path.join(SD3, "manifest.json")))
mmdit_path = os.path.join(SD3, man["models"]["mmdit"]["file"])
e2e = next(c for c in man["cases"] if c["id"] == "e2e_sd3")
g = stio.load(os.path.join(SD3, e2e["file"]))

CASES = [
    # id, layers, scale, start, end, width, height, seed, steps, cfg, sampler, scheduler, shift
    dict(id="slg_a", layers="0", scale=3.0, start_percent=0.01, end_percent=0.15, width=128,
         height=128, seed=42, steps=8, cfg=4.5, sampler="euler", scheduler="sgm_uniform", shift=3.0),
    dict(id="slg_b", layers="1, 0", scale=2.5, start_percent=0.0, end_percent=0.6, width=112,
         height=80, seed=5, steps=6, cfg=1.0, sampler="dpmpp_2m", scheduler="simple", shift=3.0),
    dict(id="slg_c", layers="7, 8, 9", scale=3.0, start_percent=0.01, end_percent=0.15, width=64,
         height=64, seed=3, steps=4, cfg=4.5, sampler="euler", scheduler="simple", shift=3.0),
]


def cond(prefix):
    return [[g[prefix + ".cond"].float(), {"pooled_output": g[prefix + ".pooled"].float()}]]


out = {}
model = comfy.sd.load_diffusion_model(mmdit_path)
for c in CASES:
    (m,) = nodes_model_advanced.ModelSamplingSD3().patch(model, c["shift"])
    m0 = m
    r = nodes_sd3.SkipLayerGuidanceSD3.execute(m, c["layers"], c["scale"], c["start_percent"], c["end_percent"])
    m = r[0] if isinstance(r, tuple) else r.result[0]
    latent = {"samples": torch.zeros([1, 16, c["height"] // 8, c["width"] // 8])}
    (res,) = nodes.common_ksampler(m, c["seed"], c["steps"], c["cfg"], c["sampler"], c["scheduler"],
                                   cond("positive"), cond("negative"), latent, denoise=1.0)
    out[c["id"] + ".latent_out"] = res["samples"].float()
    # the same run without the node: what the guidance changed
    (res0,) = nodes.common_ksampler(m0, c["seed"], c["steps"], c["cfg"], c["sampler"], c["scheduler"],
                                    cond("positive"), cond("negative"), latent, denoise=1.0)
    out[c["id"] + ".latent_noslg"] = res0["samples"].float()
for p in ("positive", "negative"):
    for k in ("cond", "pooled"):
        out[p + "." + k] = g[p + "." + k]
os.makedirs(OUT, exist_ok=True)
stio.save(out, os.path.join(OUT, "slg.safetensors"))
manifest = {
    "generator": "gen_slg.py",
    "reference": {
        "comfyui_commit": man["reference"]["comfyui_commit"],
        "functions": ["nodes.UNETLoader -> comfy.sd.load_diffusion_model",
                      "comfy_extras.nodes_model_advanced.ModelSamplingSD3.patch(shift)",
                      "comfy_extras.nodes_sd3.SkipLayerGuidanceSD3 -> nodes_slg.SkipLayerGuidanceDiT (post-CFG function)",
                      "nodes.common_ksampler (KSampler) on EmptySD3LatentImage zeros"],
    },
    "model": "sd3 set: models.mmdit (UNETLoader, diffusion_models/)",
    "conditioning": "positive.cond/.pooled, negative.cond/.pooled of the sd3 set's e2e_sd3 case (copied here)",
    "tolerance": {"atol": 0.002, "rtol": 0.002},
    "cases": CASES,
}
json.dump(manifest, open(os.path.join(OUT, "manifest.json"), "w"), indent=1)
print("wrote", sorted(out))
