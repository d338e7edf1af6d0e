#!/usr/bin/python3
"""Reference runs of every ComfyUI sampler on flow-matching (CONST) model
samplings, computed by ComfyUI's own code: the schedules and model sampling
objects of comfy/model_sampling.py, the sigma schedules of comfy/samplers.py,
comfy.samplers.KSAMPLER.sample (noise_scaling, the k-diffusion sampler,
inverse_noise_scaling) and comfy.samplers.cfg_function, with the diffusion
model replaced by an analytic function (below) so that no weights are needed.

usage: /usr/bin/python3 make_flow_samplers_ref.py REF_DIR [OUT_DIR]
  REF_DIR: what ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at
  the commit in shared/tools/comfyref/COMFY_COMMIT, einops, CLIP); imported
  through shared/tools/comfyref/comfy_env.py on Debian's python3-torch (CPU).
Writes flow_samplers.safetensors and manifest.json next to this script (or
into OUT_DIR). Nothing is computed here that ComfyUI does not compute, except
the analytic model's velocity (documented in the manifest).

The SDE samplers whose default noise is torchsde's Brownian tree get a
deterministic noise_sampler instead (the k-diffusion functions take one; call
k draws torch.randn(x.shape) from torch.Generator().manual_seed(NOISE_BASE +
k)); every other sampler uses its own default noise (a CPU generator seeded
with seed + 1), as in ComfyUI.
"""
import json
import math
import os
import sys
import types

here = os.path.dirname(os.path.abspath(__file__))
ref = sys.argv[1]
out_dir = sys.argv[2] if len(sys.argv) > 2 else here
sys.path.insert(0, "/work/shared/tools/comfyref")
sys.path.insert(0, os.path.join(here, "../../../../shared/tools/comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(os.path.join(ref, "ComfyUI"), os.path.join(ref, "einops"), os.path.join(ref, "CLIP"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import stio  # noqa: E402
import comfy.model_sampling as cms  # noqa: E402
import comfy.samplers as cs  # noqa: E402
import comfy.k_diffusion.sampling as ks  # noqa: E402

COMMIT = open("/work/shared/tools/comfyref/COMFY_COMMIT").read().strip()
K = {"K1": 0.9, "K2": 0.25, "K3": 1.5, "K4": 0.05, "K5": 0.37, "K6": 3.0}
COND = [{"a": 1.0, "phi": 0.0}, {"a": -0.5, "phi": 1.0}]  # positive, negative
CFG = 2.5
SHAPE = (1, 16, 2, 2)
SEED = 42
NOISE_BASE = 1000
BROWNIAN = ["dpmpp_sde", "dpmpp_sde_gpu", "dpmpp_2m_sde", "dpmpp_2m_sde_gpu", "dpmpp_2m_sde_heun",
            "dpmpp_2m_sde_heun_gpu", "dpmpp_3m_sde", "dpmpp_3m_sde_gpu"]


def flux_sampling(shift):
    class MS(cms.ModelSamplingFlux, cms.CONST):
        pass
    ms = MS()
    ms.set_parameters(shift=shift)
    return ms


def flow_sampling(shift, multiplier):
    class MS(cms.ModelSamplingDiscreteFlow, cms.CONST):
        pass
    ms = MS()
    ms.set_parameters(shift=shift, multiplier=multiplier)
    return ms


def velocity(x_in, t, c, t_div):
    """The analytic 'model': v = K1*x + K2*(1-s)*tanh(K3*x) + K4*a*sin(K5*i + phi + K6*s),
    s = t / t_div, i = flat index within one batch item, in float64 from the
    float32 inputs, rounded once to float32."""
    x = x_in.double().numpy()
    per = x[0].size
    idx = np.arange(per, dtype=np.float64).reshape(x.shape[1:])
    out = np.empty_like(x)
    for b in range(x.shape[0]):
        s = float(t[b]) / t_div
        arg = K["K5"] * idx + COND[c]["phi"] + K["K6"] * s
        out[b] = K["K1"] * x[b] + K["K2"] * (1.0 - s) * np.tanh(K["K3"] * x[b]) + K["K4"] * COND[c]["a"] * np.sin(arg)
    return torch.from_numpy(out.astype(np.float32))


class Guider:
    """What KSAMPLER.sample's model_wrap is to the samplers (a CFGGuider):
    model_sampling where they look for it, sampling_function's cond/uncond
    evaluation and ComfyUI's own cfg_function (post-CFG hooks included)."""

    def __init__(self, ms, cfg, t_div):
        # BaseModel.scale_latent_inpaint: model_sampling.noise_scaling at sigma
        sli = lambda x, sigma, noise, latent_image: ms.noise_scaling(
            sigma.reshape([sigma.shape[0]] + [1] * (len(noise.shape) - 1)), noise, latent_image)
        self.inner_model = types.SimpleNamespace(model_sampling=ms, scale_latent_inpaint=sli)
        self.model_patcher = types.SimpleNamespace(get_model_object=lambda name: ms)
        self.ms, self.cfg, self.t_div = ms, cfg, t_div
        self.guider_calls = self.model_calls = 0

    def apply(self, x, sigma, c):
        self.model_calls += 1
        x_in = self.ms.calculate_input(sigma, x)
        t = self.ms.timestep(sigma).float()
        return self.ms.calculate_denoised(sigma, velocity(x_in, t, c, self.t_div), x)

    def __call__(self, x, sigma, model_options={}, seed=None):
        self.guider_calls += 1
        cond = self.apply(x, sigma, 0)
        if math.isclose(self.cfg, 1.0) and not model_options.get("disable_cfg1_optimization", False):
            uncond = torch.zeros_like(x)
        else:
            uncond = self.apply(x, sigma, 1)
        return cs.cfg_function(None, cond, uncond, self.cfg, x, sigma, model_options=model_options)


def brownian_stand_in():
    k = [0]

    def ns(sigma, sigma_next):
        g = torch.Generator().manual_seed(NOISE_BASE + k[0])
        k[0] += 1
        return torch.randn(SHAPE, generator=g)
    return ns


def sampler_for(name):
    if name in BROWNIAN:
        return cs.KSAMPLER(getattr(ks, "sample_" + name), extra_options={"noise_sampler": brownian_stand_in()})
    return cs.sampler_object(name)


# (id, model sampling, t_div, scheduler, steps, sigma slice, latent, description, denoise mask)
def configs():
    dev = flux_sampling(1.15)
    node = flux_sampling((768 * 1344 / 256) * ((1.15 - 0.5) / 3840) + (0.5 - (1.15 - 0.5) / 3840 * 256))
    schnell = flow_sampling(1.0, 1.0)
    sd3 = flow_sampling(3.0, 1000.0)
    g = torch.Generator().manual_seed(7)
    latent = torch.randn(SHAPE, generator=g) * 0.5
    zeros = torch.zeros(SHAPE)
    mask = torch.zeros(SHAPE)
    mask[:, :, :, 1:] = 1.0  # regenerate the right half
    full = lambda s: s
    return [
        ("flux_simple_6", dev, 1.0, "simple", 6, full, zeros, "ModelSamplingFlux shift 1.15 (Flux dev default), simple 6", None),
        ("fluxnode_beta_5", node, 1.0, "beta", 5, full, zeros, "ModelSamplingFlux node 768x1344 (max 1.15, base 0.5), beta 5", None),
        ("schnell_simple_4", schnell, 1.0, "simple", 4, full, zeros, "ModelSamplingDiscreteFlow shift 1 multiplier 1 (schnell), simple 4", None),
        ("sd3_sgm_5", sd3, 1000.0, "sgm_uniform", 5, full, zeros, "ModelSamplingDiscreteFlow shift 3 multiplier 1000 (SD3), sgm_uniform 5", None),
        ("flux_img2img", dev, 1.0, "simple", 10, lambda s: s[-7:], latent,
         "Flux dev default, simple 10, last 7 sigmas (KSampler denoise ~0.6), a non-zero model-space latent", None),
        ("flux_leftover", dev, 1.0, "normal", 8, lambda s: s[:5], zeros,
         "Flux dev default, normal 8 cut after 4 steps (KSamplerAdvanced leftover noise: inverse_noise_scaling at a non-zero sigma)", None),
        ("flux_inpaint", dev, 1.0, "simple", 6, full, latent,
         "Flux dev default, simple 6, a non-zero latent and a denoise mask (KSamplerX0Inpaint: the kept half re-noised by the CONST noise_scaling)", mask),
    ]


def main():
    tensors, cases = {}, []
    names = list(cs.SAMPLER_NAMES)
    for cid, ms, t_div, sched, steps, cut, latent, desc, mask in configs():
        sig = cut(cs.calculate_sigmas(ms, sched, steps).float())
        tensors[cid + "/sigmas"] = sig
        tensors[cid + "/latent"] = latent
        if mask is not None:
            tensors[cid + "/mask"] = mask
        torch.manual_seed(SEED)
        noise = torch.randn(SHAPE)
        tensors[cid + "/noise"] = noise
        for name in names:
            guider = Guider(ms, CFG, t_div)
            traj_x, traj_d = [], []

            def cb(i, den, x, total):
                traj_x.append(x.clone())
                traj_d.append(den.clone())
            s = sampler_for(name)
            x_start = ms.noise_scaling(sig[0], noise.clone(), latent, s.max_denoise(guider, sig))
            # each run gets its own copy: uni_pc writes 0.001 over a final 0 in the tensor it is given,
            # which KSAMPLER.sample then hands to inverse_noise_scaling (kept: that is ComfyUI's result)
            out = s.sample(guider, sig.clone(), {"seed": SEED, "model_options": {}}, cb, noise.clone(),
                           latent_image=latent, denoise_mask=mask, disable_pbar=True)
            key = "%s/%s" % (cid, name)
            tensors[key + "/x_final"] = out.float()
            if traj_x:
                tensors[key + "/traj_x"] = torch.stack(traj_x)
                tensors[key + "/traj_denoised"] = torch.stack(traj_d)
            if name == names[0]:
                tensors[cid + "/x_start"] = x_start.float()
            cases.append({"id": key, "config": cid, "sampler": name, "guider_calls": guider.guider_calls,
                          "model_calls": guider.model_calls, "callbacks": len(traj_x),
                          "noise": "brownian stand-in" if name in BROWNIAN else "sampler default"})
        print(cid, "done", file=sys.stderr)
    stio.save(tensors, os.path.join(out_dir, "flow_samplers.safetensors"),
              metadata={"generator": "make_flow_samplers_ref.py", "comfyui_commit": COMMIT})
    settings = {}
    for cid, ms, t_div, sched, steps, cut, latent, desc, mask in configs():
        kind = "flux" if isinstance(ms, cms.ModelSamplingFlux) else "flow"
        settings[cid] = {"model_sampling": kind, "shift": float(ms.shift),
                         "multiplier": float(getattr(ms, "multiplier", 1.0)), "t_div": t_div,
                         "scheduler": sched, "steps": steps, "description": desc}
    manifest = {
        "file": "flow_samplers.safetensors",
        "generator": "make_flow_samplers_ref.py",
        "command": "/usr/bin/python3 make_flow_samplers_ref.py REF_DIR (extract_refs.sh output)",
        "comfyui_commit": COMMIT,
        "torch": "Debian python3-torch 1.13, CPU, float32",
        "model": {
            "what": "BaseModel.apply_model with the DiT replaced: x_in = calculate_input(sigma, x) (CONST: x); "
                    "t = timestep(sigma).float(); v = F(x_in, t, cond); denoised = calculate_denoised(sigma, v, x) "
                    "(CONST: x - v*sigma)",
            "F": "s = t / t_div (double); for flat index i within one batch item: "
                 "v_i = K1*x_i + K2*(1 - s)*tanh(K3*x_i) + K4*a*sin(K5*i + phi + K6*s), evaluated in double "
                 "(numpy tanh/sin) from the float32 inputs, rounded once to float32",
            "constants": K, "cond": COND[0], "uncond": COND[1],
            "guider": "cond and uncond evaluated each call (cfg != 1), combined by comfy.samplers.cfg_function "
                      "(with the samplers' post-CFG hooks: the CFG++ samplers read uncond_denoised)",
        },
        "cfg": CFG, "shape": list(SHAPE), "seed": SEED,
        "noise": "noise = torch.manual_seed(seed); torch.randn(shape) (prepare_noise); x_start = "
                 "model_sampling.noise_scaling(sigmas[0], noise, latent, max_denoise) (CONST: sigma*noise + "
                 "(1 - sigma)*latent); the samplers' own noise: default_noise_sampler (seed + 1) except "
                 + ", ".join(BROWNIAN) + ": call k of their noise_sampler is torch.randn(shape) from "
                 "torch.Generator().manual_seed(%d + k)" % NOISE_BASE,
        "brownian_noise_base": NOISE_BASE,
        "brownian_samplers": BROWNIAN,
        "outputs": "<config>/<sampler>/x_final: KSAMPLER.sample's result (inverse_noise_scaling applied at the "
                   "last sigma of the tensor the sampler was given: uni_pc / uni_pc_bh2 overwrite a final 0 "
                   "there with 0.001, so theirs is x / 0.999); "
                   "traj_x / traj_denoised: the callback's x and denoised per step (absent when the sampler "
                   "made no callback); <config>/x_start, sigmas, noise, latent, mask (the denoise mask, "
                   "where a config has one): shared inputs",
        "settings": settings,
        "tolerance": {"atol": 2e-4, "rtol": 2e-4,
                      "dpm_adaptive": {"atol": 1e-3, "rtol": 0.0,
                                       "why": "its step acceptance may branch differently under tiny differences"},
                      "why": "float32 sampler scalar math (exp/log/expm1, Sleef vs libm) differs by an ulp now "
                             "and then and accumulates over the steps; the same bound as the SD sampler goldens"},
        "cases": cases,
        "test": "tests/models/test_golden_flow_samplers.c",
    }
    json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)


main()
