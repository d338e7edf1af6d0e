#!/usr/bin/python3
"""LatentApplyOperationCFG in ComfyUI's sampler, on the tiny SD1 checkpoint of the shared test data.

usage: /usr/bin/python3 gen_latent_cfg_ref.py COMFY EINOPS CLIP TESTDATA [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts;
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors and its manifest).
Writes latent_cfg_ref.safetensors and manifest.json beside this script.

Two kinds of case:
  "pre_cfg": the pre-CFG function LatentApplyOperationCFG puts on a model
    (model_options["sampler_pre_cfg_function"][i]) called the way
    comfy.samplers.sampling_function calls it, on given cond/uncond predictions;
    stored: the inputs and conds_out[0] after every function of the list.
  "ksampler": nodes.KSampler on the tiny SD1 model (prompts through CLIPTextEncode,
    EmptyLatentImage) with and without the model patch; stored: the output latent.
Runs on Debian's python3-torch 1.13, CPU, float32.
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
import comfy_extras.nodes_post_processing  # noqa: E402,F401  (nodes_latent imports it back)
import comfy_extras.nodes_latent as nl  # noqa: E402
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

tensors, cases = {}, []


def op(kind, **kw):
    if kind == "sharpen":
        return nl.LatentOperationSharpen.execute(**kw).result[0], dict(kw, node="LatentOperationSharpen")
    return nl.LatentOperationTonemapReinhard.execute(**kw).result[0], dict(kw, node="LatentOperationTonemapReinhard")


def patched(m, ops):
    for f, _ in ops:
        m = nl.LatentApplyOperationCFG.execute(m, f).result[0]
    return m


def rand(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


U = 2.0 ** -24

# ---- the pre-CFG functions on given predictions ----------------------------------------------
for cid, ops, zero_uncond in (("pre_tonemap", [op("tonemap", multiplier=0.8)], False),
                              ("pre_sharpen_tonemap", [op("sharpen", sharpen_radius=2, sigma=1.0, alpha=0.5),
                                                       op("tonemap", multiplier=1.5)], False),
                              ("pre_tonemap_cfg1", [op("tonemap", multiplier=0.8)], True)):
    cond, uncond = rand(1, 2, 4, 9, 10), rand(2, 2, 4, 9, 10)
    if zero_uncond:  # calc_cond_batch's zeros for the skipped uncond (cfg 1)
        uncond = torch.zeros_like(cond)
    m = patched(model.clone(), ops)
    out = [cond.clone(), uncond.clone()]
    for fn in m.model_options["sampler_pre_cfg_function"]:
        out = fn({"conds": [None, None], "conds_out": out, "cond_scale": 5.0, "timestep": None, "input": None,
                  "sigma": None, "model": None, "model_options": m.model_options})
    tensors[cid + "/cond"], tensors[cid + "/uncond"], tensors[cid + "/out"] = cond, uncond, out[0]
    # bound, op by op on the chain's actual values: the tonemap's mean is a float32 sum over the
    # n = H*W pixels of an item (error <= n u relatively) that moves top = (5 std + mean) * multiplier,
    # and the result by at most |d top| (d new / d top = s^2 / (s + 1)^2 <= 1); the sharpen filter
    # as for ImageSharpen (tests/data/node_ops/gen_node_ops_ref.py sharpen_tol) on the normalised
    # latent (values within 1) times the largest norm. An error already in an operation's input
    # grows by at most its Lipschitz factor: 2 for the tonemap (magnitude and direction), 2 (1 + 20
    # alpha) for the sharpen (kernel sum of |w|, normalisation).
    x, tol = cond - uncond, 0.0
    for f, o in ops:
        norm = torch.linalg.vector_norm(x, dim=1)
        if o["node"] == "LatentOperationSharpen":
            k, a = 2 * o["sharpen_radius"] + 1, o["alpha"]
            own = ((k * k + 1) * (1 + 20 * a) + (3 * k * k + 1) * 10 * a + 2) * U * (float(norm.max()) + 1)
            tol = 2 * (1 + 20 * a) * tol + own
        else:
            m = norm + 1e-10
            top = float(((m.flatten(1).std(1) * 5 + m.flatten(1).mean(1)) * o["multiplier"]).max())
            tol = 2 * tol + (x.shape[2] * x.shape[3] + 16) * U * top
        x = f(latent=x)
    tol += 2 * U * float(out[0].abs().max())  # + uncond
    cases.append({"id": cid, "kind": "pre_cfg", "ops": [o for _, o in ops], "cond": cid + "/cond",
                  "uncond": cid + "/uncond", "out": cid + "/out", "atol": tol, "rtol": 0.0,
                  "tolerance_note": "per operation: its own float32 reduction error, plus its Lipschitz factor "
                                    "times the error of its input (see the generator)"})

# ---- KSampler with the patched model --------------------------------------------------------------
pos = nodes.CLIPTextEncode().encode(clip, "a red brick wall")[0]
neg = nodes.CLIPTextEncode().encode(clip, "blurry")[0]
latent = nodes.EmptyLatentImage().generate(128, 128, 1)[0]
settings = {"width": 128, "height": 128, "seed": 7, "steps": 3, "sampler_name": "euler", "scheduler": "normal",
            "positive": "a red brick wall", "negative": "blurry"}
for cid, ops, cfg_scale in (("ksampler_plain", [], 6.0),
                            ("ksampler_tonemap", [op("tonemap", multiplier=0.5)], 6.0),
                            ("ksampler_sharpen_tonemap", [op("sharpen", sharpen_radius=2, sigma=1.0, alpha=1.0),
                                                          op("tonemap", multiplier=0.5)], 6.0),
                            ("ksampler_tonemap_cfg1", [op("tonemap", multiplier=0.5)], 1.0)):
    m = patched(model.clone(), ops)
    res = nodes.common_ksampler(m, settings["seed"], settings["steps"], cfg_scale, settings["sampler_name"],
                                settings["scheduler"], pos, neg, latent)[0]["samples"]
    tensors[cid + "/latent"] = res.float()
    cases.append({"id": cid, "kind": "ksampler", "ops": [o for _, o in ops], "cfg": cfg_scale,
                  "settings": settings, "latent": cid + "/latent", "atol": 0.04, "rtol": 0.002,
                  "tolerance_note": "the final latent's tolerance of the shared e2e_sd1 case (same model and "
                                    "sampler, 6 steps there): the UNet's float32 sums in another order"})

stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "latent_cfg_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/latent_cfg/gen_latent_cfg_ref.py",
               "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors",
               "file": "latent_cfg_ref.safetensors", "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
