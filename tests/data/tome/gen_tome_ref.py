#!/usr/bin/python3
"""TomePatchModel (comfy_extras/nodes_tomesd.py) in ComfyUI's KSampler on the tiny SD1 checkpoint of the
shared test data.

usage: /usr/bin/python3 gen_tome_ref.py COMFY EINOPS CLIP TESTDATA [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts;
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors and its manifest).
Writes tome_ref.safetensors and manifest.json beside this script.

Each case: nodes.common_ksampler on the tiny SD1 model (prompts through CLIPTextEncode,
EmptyLatentImage) with the MODEL TomePatchModel(ratio) made (no nodes: the unpatched run, listed
before the patched cases of the same settings); stored: the output latent. ToMe draws its
destinations with torch.randint on torch's default generator, which prepare_noise seeded and drew
the initial noise from, once per full-resolution self-attention call.

Which tokens merge where depends on comparisons of float32 cosine similarities: a source's best
destination against its second best, and the r-th best source against the next. The generator
recomputes them beside ComfyUI's own function (the generator state saved and restored around it)
and records the smallest such gap of each case as "score_margin": an implementation whose scores
round differently picks the same tokens while that margin is well above its rounding (~1e-6).
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
import comfy_extras.nodes_tomesd as tomesd  # noqa: E402
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

# ---- the score margins, recomputed beside ComfyUI's matching ----------------------------------------
orig_matching = tomesd.bipartite_soft_matching_random2d
margins = []


def matching_with_margin(metric, w, h, sx, sy, r, no_rand=False):
    if not (r <= 0 or w == 1 or h == 1):
        state = torch.get_rng_state()
        B, N, _ = metric.shape
        hsy, wsx = h // sy, w // sx
        rand_idx = torch.randint(sy * sx, size=(hsy, wsx, 1), device=metric.device)
        buf = torch.zeros(hsy, wsx, sy * sx, dtype=torch.int64)
        buf.scatter_(dim=2, index=rand_idx, src=-torch.ones_like(rand_idx))
        buf = buf.view(hsy, wsx, sy, sx).transpose(1, 2).reshape(hsy * sy, wsx * sx)
        full = torch.zeros(h, w, dtype=torch.int64)
        full[:hsy * sy, :wsx * sx] = buf
        flat = full.reshape(-1)
        dst = (flat == -1).nonzero().squeeze(1)
        src = (flat == 0).nonzero().squeeze(1)
        m = metric / metric.norm(dim=-1, keepdim=True)
        scores = m[:, src] @ m[:, dst].transpose(-1, -2)
        rr = min(src.shape[0], r)
        top2 = scores.topk(2, dim=-1).values
        gap = (top2[..., 0] - top2[..., 1]).min().item()
        best = scores.max(dim=-1).values.sort(dim=-1, descending=True).values
        if rr < best.shape[-1]:
            gap = min(gap, (best[..., rr - 1] - best[..., rr]).min().item())
        margins.append(gap)
        torch.set_rng_state(state)
    return orig_matching(metric, w, h, sx, sy, r, no_rand)


tomesd.bipartite_soft_matching_random2d = matching_with_margin

settings = {"width": 128, "height": 128, "seed": 7, "steps": 3, "cfg": 6.0, "sampler_name": "euler",
            "scheduler": "normal", "positive": "a red brick wall", "negative": "blurry"}
pos = nodes.CLIPTextEncode().encode(clip, settings["positive"])[0]
neg = nodes.CLIPTextEncode().encode(clip, settings["negative"])[0]
tensors, cases = {}, []
for cid, ratio, over in (("plain", None, {}),
                         ("tome_0.3", 0.3, {}),
                         ("tome_0.6", 0.6, {}),
                         ("plain_ancestral", None, {"seed": 11, "sampler_name": "euler_ancestral", "width": 96}),
                         ("tome_0.5_ancestral", 0.5, {"seed": 11, "sampler_name": "euler_ancestral", "width": 96})):
    m = model if ratio is None else tomesd.TomePatchModel.execute(model, ratio).result[0]
    s = dict(settings, **over)
    lat = nodes.EmptyLatentImage().generate(s["width"], s["height"], 1)[0]
    del margins[:]
    res = nodes.common_ksampler(m, s["seed"], s["steps"], s["cfg"], s["sampler_name"], s["scheduler"],
                                pos, neg, lat)[0]["samples"]
    tensors[cid + "/latent"] = res.float()
    case = {"id": cid, "nodes": [] if ratio is None else
            [{"node": "TomePatchModel", "on": "model", "inputs": [{"name": "ratio", "type": "FLOAT", "value": ratio}]}],
            "settings": s, "latent": cid + "/latent", "atol": 0.04, "rtol": 0.002,
            "tolerance_note": "the final latent's tolerance of the shared e2e_sd1 case (same model and "
                              "sampler, 6 steps there): the UNet's float32 sums in another order"}
    if ratio is not None:
        case["merges"] = len(margins)
        case["score_margin"] = min(margins)
    cases.append(case)

stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "tome_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/tome/gen_tome_ref.py",
               "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors",
               "function": "nodes.common_ksampler with comfy_extras.nodes_tomesd.TomePatchModel",
               "file": "tome_ref.safetensors", "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases", [(c["id"], c.get("merges"), c.get("score_margin")) for c in cases])
