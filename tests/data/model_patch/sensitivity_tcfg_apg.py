#!/usr/bin/python3
"""How far ComfyUI's own KSampler result moves for the chains TCFG -> APG (eta 0, norm_threshold 0,
momentum -0.5) -> CFGZeroStar, APG -> CFGZeroStar and TCFG -> CFGZeroStar on the tiny SD1 model (the
settings of gen_model_patch_ref.py's KSampler cases) when every model prediction is multiplied by
(1 + eps * N(0, 1)) before the pre-CFG functions: a stand-in for the rounding by which another
implementation's UNet output differs. Not a test and no reference data: it measures whether a
mismatch of such a chain is a bug or the chain's conditioning (docs/sampling.md, APG).

usage: /usr/bin/python3 sensitivity_tcfg_apg.py COMFY EINOPS CLIP TESTDATA
"""
import json
import os
import sys

comfy_root, einops_root, clip_root, testdata = sys.argv[1:5]
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "../../../../shared/tools/comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(comfy_root, einops_root, clip_root)
import torch  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.supported_models as sm  # noqa: E402
import comfy_extras.nodes_apg as apg  # noqa: E402
import comfy_extras.nodes_cfg as ncfg  # noqa: E402
import comfy_extras.nodes_tcfg as tcfg  # noqa: E402
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
pos = nodes.CLIPTextEncode().encode(clip, "a red brick wall")[0]
neg = nodes.CLIPTextEncode().encode(clip, "blurry")[0]
lat = nodes.EmptyLatentImage().generate(128, 128, 1)[0]


def chain(base, names):
    m = base
    for n in names:
        if n == "TCFG":
            m = tcfg.TCFG.execute(m).result[0]
        elif n == "APG":
            m = apg.APG.execute(m, 0.0, 0.0, -0.5).result[0]
        else:
            m = ncfg.CFGZeroStar.execute(m).result[0]
    return m


def run(base, names):
    return nodes.common_ksampler(chain(base, names), 7, 3, 6.0, "euler", "normal", pos, neg, lat)[0]["samples"]


for names in (["TCFG", "APG", "Z"], ["APG", "Z"], ["TCFG", "Z"]):
    ref = run(model, names)
    for eps in (2e-7, 2e-6):
        g = torch.Generator().manual_seed(123)

        def perturb(args, eps=eps, g=g):
            return [o * (1 + eps * torch.randn(o.shape, generator=g)) for o in args["conds_out"]]

        base = model.clone()
        base.set_model_sampler_pre_cfg_function(perturb)
        print("%-16s eps %g: max |diff| %g" % ("+".join(names), eps, (run(base, names) - ref).abs().max().item()))
