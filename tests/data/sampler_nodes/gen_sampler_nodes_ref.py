#!/usr/bin/python3
"""Reference runs of ComfyUI's SamplerXxx nodes whose options reach inside the
sampler (SamplerSEEDS2, SamplerER_SDE, SamplerSASolver, SamplerDPMAdaptative,
SamplerEulerCFGpp), computed by
ComfyUI's own code: each case calls the node's execute(**inputs) for its
KSAMPLER and runs KSAMPLER.sample (noise_scaling, the sampler function with
the node's options, inverse_noise_scaling) behind comfy.samplers.cfg_function
(post-CFG functions included), with the diffusion model replaced by an
analytic function as in ../flow_samplers, on an SD1 (eps, discrete) and a
Flux (CONST) model sampling.

usage: /usr/bin/python3 gen_sampler_nodes_ref.py REF_DIR [OUT_DIR]
  REF_DIR: what ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at
  the commit in shared/tools/comfyref/COMFY_COMMIT, einops, CLIP); Debian's
  python3-torch, CPU.
Writes sampler_nodes.safetensors and manifest.json beside this script (or
into OUT_DIR). The samplers' own noise is ComfyUI's default noise sampler
(a CPU generator seeded seed + 1).
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
COMMIT = open(os.path.join(os.path.dirname(comfy_env.__file__), "COMFY_COMMIT")).read().strip()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import stio  # noqa: E402
import comfy.model_sampling as cms  # noqa: E402
import comfy.samplers as cs  # noqa: E402
import comfy_extras.nodes_custom_sampler as ncs  # noqa: E402
import comfy_extras.nodes_advanced_samplers as nas  # noqa: E402

K = {"K1": 0.9, "K2": 0.25, "K3": 1.5, "K4": 0.05, "K5": 0.37, "K6": 3.0}
COND = [{"a": 1.0, "phi": 0.0}, {"a": -0.5, "phi": 1.0}]  # positive, negative
CFG = 2.5
SHAPE = (1, 4, 3, 3)
SEED = 42


def sd1_sampling():
    class MS(cms.ModelSamplingDiscrete, cms.EPS):
        pass
    return MS()  # model_config None: SD1's scaled_linear 0.00085..0.012, 1000 steps


def flux_sampling(shift):
    class MS(cms.ModelSamplingFlux, cms.CONST):
        pass
    ms = MS()
    ms.set_parameters(shift=shift)
    return ms


def model_fn(x_in, t, c, t_div):
    """F: s = t / t_div; v_i = K1*x_i + K2*(1-s)*tanh(K3*x_i) + K4*a*sin(K5*i + phi + K6*s),
    in double from the float32 inputs, rounded once to float32 (the eps or the velocity)."""
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
    """A CFGGuider as the samplers see it (see ../flow_samplers)."""

    def __init__(self, ms, t_div):
        sli = lambda x, sigma, noise, latent_image: ms.noise_scaling(
            sigma.reshape([sigma.shape[0]] + [1] * (len(noise.shape) - 1)), noise, latent_image)
        self.inner_model = types.SimpleNamespace(model_sampling=ms, scale_latent_inpaint=sli)
        self.model_patcher = types.SimpleNamespace(get_model_object=lambda name: ms)
        self.ms, self.t_div = ms, t_div
        self.guider_calls = self.model_calls = 0

    def apply(self, x, sigma, c):
        self.model_calls += 1
        x_in = self.ms.calculate_input(sigma, x)
        t = self.ms.timestep(sigma).float()
        return self.ms.calculate_denoised(sigma, model_fn(x_in, t, c, self.t_div), x)

    def __call__(self, x, sigma, model_options={}, seed=None):
        self.guider_calls += 1
        cond = self.apply(x, sigma, 0)
        if math.isclose(CFG, 1.0) and not model_options.get("disable_cfg1_optimization", False):
            uncond = torch.zeros_like(x)
        else:
            uncond = self.apply(x, sigma, 1)
        return cs.cfg_function(None, cond, uncond, CFG, x, sigma, model_options=model_options)


CONFIGS = {
    "sd1_karras_7": {"model_sampling": "sd1_eps", "t_div": 1000.0, "scheduler": "karras", "steps": 7,
                     "make": sd1_sampling},
    "flux_simple_6": {"model_sampling": "flux", "shift": 1.15, "t_div": 1.0, "scheduler": "simple", "steps": 6,
                      "make": lambda: flux_sampling(1.15)},
}

NODE_CASES = [
    ("SamplerSEEDS2", ncs.SamplerSEEDS2, {"solver_type": "phi_1", "eta": 1.0, "s_noise": 1.0, "r": 0.5}),
    ("SamplerSEEDS2", ncs.SamplerSEEDS2, {"solver_type": "phi_2", "eta": 0.5, "s_noise": 0.8, "r": 0.7}),
    ("SamplerSEEDS2", ncs.SamplerSEEDS2, {"solver_type": "phi_2", "eta": 0.0, "s_noise": 1.0, "r": 1.0}),
    ("SamplerER_SDE", ncs.SamplerER_SDE, {"solver_type": "ER-SDE", "max_stage": 3, "eta": 1.0, "s_noise": 1.0}),
    ("SamplerER_SDE", ncs.SamplerER_SDE, {"solver_type": "ER-SDE", "max_stage": 2, "eta": 0.3, "s_noise": 0.7}),
    ("SamplerER_SDE", ncs.SamplerER_SDE, {"solver_type": "Reverse-time SDE", "max_stage": 3, "eta": 0.5, "s_noise": 0.9}),
    ("SamplerER_SDE", ncs.SamplerER_SDE, {"solver_type": "Reverse-time SDE", "max_stage": 2, "eta": 0.0, "s_noise": 1.0}),
    ("SamplerER_SDE", ncs.SamplerER_SDE, {"solver_type": "ODE", "max_stage": 1, "eta": 1.0, "s_noise": 1.0}),
    ("SamplerEulerCFGpp", nas.SamplerEulerCFGpp, {"version": "regular"}),
    ("SamplerEulerCFGpp", nas.SamplerEulerCFGpp, {"version": "alternative"}),
]
DPM = dict(order=3, rtol=0.05, atol=0.0078, h_init=0.05, pcoeff=0.0, icoeff=1.0, dcoeff=0.0, accept_safety=0.81,
           eta=0.0, s_noise=1.0)
for over in ({}, {"order": 2}, {"order": 3, "eta": 0.5, "s_noise": 0.8, "rtol": 0.1, "atol": 0.01},
             {"order": 2, "pcoeff": 0.1, "dcoeff": 0.05, "accept_safety": 0.7, "h_init": 0.2, "eta": 1.0}):
    NODE_CASES.append(("SamplerDPMAdaptative", ncs.SamplerDPMAdaptative, dict(DPM, **over)))
# SamplerSASolver takes the MODEL (its sampling resolves the window's percents): the config's
SA = dict(eta=1.0, sde_start_percent=0.2, sde_end_percent=0.8, s_noise=1.0, predictor_order=3, corrector_order=4,
          use_pece=False, simple_order_2=False)
for over in ({}, {"eta": 0.6, "sde_start_percent": 0.1, "sde_end_percent": 0.9, "s_noise": 0.8,
                  "predictor_order": 2, "corrector_order": 2, "use_pece": True, "simple_order_2": True},
             {"predictor_order": 2, "corrector_order": 2, "simple_order_2": True},
             {"predictor_order": 5, "corrector_order": 6, "sde_start_percent": 0.0, "sde_end_percent": 1.0},
             {"predictor_order": 1, "corrector_order": 0, "eta": 0.0},
             {"predictor_order": 4, "corrector_order": 3, "use_pece": True, "s_noise": 0.0}):
    NODE_CASES.append(("SamplerSASolver", ncs.SamplerSASolver, dict(SA, **over)))


def main():
    tensors, cases = {}, []
    for cid, cfg in CONFIGS.items():
        ms = cfg["make"]()
        sig = cs.calculate_sigmas(ms, cfg["scheduler"], cfg["steps"]).float()
        torch.manual_seed(SEED)
        noise = torch.randn(SHAPE)
        latent = torch.zeros(SHAPE)
        tensors[cid + "/sigmas"], tensors[cid + "/noise"] = sig, noise
        for k, (node_name, node, inputs) in enumerate(NODE_CASES):
            args = dict(inputs)
            if node_name == "SamplerSASolver":
                args["model"] = types.SimpleNamespace(get_model_object=lambda name: ms)
            sampler = node.execute(**args)
            sampler = sampler.result[0] if hasattr(sampler, "result") else sampler[0]
            guider = Guider(ms, cfg["t_div"])
            traj_x, traj_d = [], []

            def cb(i, den, x, total):
                traj_x.append(x.clone())
                traj_d.append(den.clone())
            out = sampler.sample(guider, sig.clone(), {"seed": SEED, "model_options": {}}, cb, noise.clone(),
                                 latent_image=latent, denoise_mask=None, disable_pbar=True)
            key = "%s/%d" % (cid, k)
            tensors[key + "/x_final"] = out.float()
            tensors[key + "/traj_x"] = torch.stack(traj_x)
            tensors[key + "/traj_denoised"] = torch.stack(traj_d)
            cases.append({"id": key, "config": cid, "node": node_name, "inputs": inputs,
                          "model_input": node_name == "SamplerSASolver",
                          "guider_calls": guider.guider_calls, "model_calls": guider.model_calls,
                          "callbacks": len(traj_x)})
    stio.save(tensors, os.path.join(out_dir, "sampler_nodes.safetensors"),
              metadata={"generator": "gen_sampler_nodes_ref.py", "comfyui_commit": COMMIT})
    settings = {cid: {k: v for k, v in c.items() if k != "make"} for cid, c in CONFIGS.items()}
    manifest = {
        "file": "sampler_nodes.safetensors",
        "generator": "gen_sampler_nodes_ref.py",
        "command": "/usr/bin/python3 gen_sampler_nodes_ref.py REF_DIR (extract_refs.sh output)",
        "comfyui_commit": COMMIT,
        "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
        "model": {
            "what": "BaseModel.apply_model with the network replaced: x_in = calculate_input(sigma, x); "
                    "t = timestep(sigma).float(); out = F(x_in, t, cond); denoised = calculate_denoised(sigma, out, x) "
                    "(sd1_eps: out is eps; flux: out is the velocity)",
            "F": "s = t / t_div; v_i = K1*x_i + K2*(1 - s)*tanh(K3*x_i) + K4*a*sin(K5*i + phi + K6*s) in double "
                 "from the float32 inputs, rounded once to float32 (i: flat index within one batch item)",
            "constants": K, "cond": COND[0], "uncond": COND[1],
            "guider": "cond and uncond every call, comfy.samplers.cfg_function (post-CFG functions included)",
        },
        "model_samplings": {"sd1_eps": "ModelSamplingDiscrete + EPS with model_config None (SD1's betas)",
                            "flux": "ModelSamplingFlux + CONST at the config's shift"},
        "model_input": "a case with model_input gives the node a MODEL whose model_sampling is the config's "
                       "(SamplerSASolver resolves sde_start/end_percent through it)",
        "cfg": CFG, "shape": list(SHAPE), "seed": SEED,
        "noise": "noise: torch.manual_seed(seed); torch.randn(shape); latent zeros; the samplers' own noise: "
                 "default_noise_sampler (generator seeded seed + 1)",
        "outputs": "<config>/<k>/x_final: KSAMPLER.sample's result; traj_x / traj_denoised: the callback's x and "
                   "denoised per step; <config>/sigmas, noise: shared inputs",
        "settings": settings,
        "tolerance": {"atol": 2e-4, "rtol": 2e-4,
                      "SamplerDPMAdaptative": {"atol": 1e-3, "rtol": 0.0,
                                               "why": "its step acceptance may branch differently under tiny "
                                                      "differences (as in ../flow_samplers)"},
                      "why": "float32 sampler scalar math (exp/log/expm1/pow, Sleef vs libm) differs by an ulp now "
                             "and then and accumulates over the steps; the bound of ../flow_samplers"},
        "cases": cases,
        "test": "tests/nodes/test_golden_sampler_nodes.c",
    }
    json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
    print(len(cases), "cases")


main()
