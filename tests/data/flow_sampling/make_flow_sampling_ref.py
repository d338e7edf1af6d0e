#!/usr/bin/python3
"""Reference numbers for the flow-matching model samplings (comfy/model_sampling.py
ModelSamplingFlux and ModelSamplingDiscreteFlow with CONST) and every
scheduler on their tables (comfy.samplers.calculate_sigmas, KSampler.set_steps),
computed by ComfyUI's own code.

usage: /usr/bin/python3 make_flow_sampling_ref.py REF_DIR [OUT_DIR]
  REF_DIR: what ../shared/tools/comfyref/extract_refs.sh extracts; imported
  through shared/tools/comfyref/comfy_env.py on Debian's python3-torch (CPU).
Writes flow_sampling.safetensors and manifest.json next to this script (or
into OUT_DIR). The probe inputs are torch.manual_seed(0) randn draws.
"""
import json
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

import torch  # noqa: E402
import stio  # noqa: E402
import comfy.model_sampling as cms  # noqa: E402
import comfy.samplers as cs  # noqa: E402

COMMIT = open("/work/shared/tools/comfyref/COMFY_COMMIT").read().strip()


def flux(shift):
    class MS(cms.ModelSamplingFlux, cms.CONST):
        pass
    m = MS()
    m.set_parameters(shift=shift)
    return m


def flow(shift, multiplier):
    class MS(cms.ModelSamplingDiscreteFlow, cms.CONST):
        pass
    m = MS()
    m.set_parameters(shift=shift, multiplier=multiplier)
    return m


CONFIGS = {
    "flux_default": ("flux", 1.15, 1.0, flux(1.15)),
    "flux_shift_0.62": ("flux", 0.62, 1.0, flux(0.62)),
    "schnell": ("flow", 1.0, 1.0, flow(1.0, 1.0)),
    "sd3": ("flow", 3.0, 1000.0, flow(3.0, 1000.0)),
    "auraflow": ("flow", 1.73, 1.0, flow(1.73, 1.0)),
}
STEPS = [1, 3, 10, 30]
PERCENTS = [0.0, 1e-4, 0.1, 0.5, 0.9, 1.0]
KSAMPLER = [("euler", 10, 1.0), ("dpm_2", 10, 1.0), ("uni_pc", 7, 1.0), ("euler", 10, 0.5), ("dpm_2", 6, 0.35)]

torch.manual_seed(0)
x = torch.randn(2, 16, 3, 3)
model_out = torch.randn(2, 16, 3, 3)
noise = torch.randn(2, 16, 3, 3)
tensors = {"x": x, "model_out": model_out, "noise": noise}
settings = {}
for cid, (kind, shift, mult, ms) in CONFIGS.items():
    settings[cid] = {"model_sampling": kind, "shift": shift, "multiplier": mult}
    tensors[cid + "/sigmas"] = ms.sigmas.float()
    tensors[cid + "/sigma_min_max"] = torch.tensor([float(ms.sigma_min), float(ms.sigma_max)])
    probe = torch.tensor([0.0005, 0.03, 0.5, 0.97, float(ms.sigma_max)])
    tensors[cid + "/probe_sigmas"] = probe
    tensors[cid + "/timestep"] = ms.timestep(probe).float()
    t_probe = ms.timestep(probe).float() * 0.75
    tensors[cid + "/probe_t"] = t_probe
    tensors[cid + "/sigma_of_t"] = ms.sigma(t_probe).float()
    tensors[cid + "/percent_to_sigma"] = torch.tensor([float(ms.percent_to_sigma(p)) for p in PERCENTS], dtype=torch.float64)
    for name in cs.SCHEDULER_NAMES:
        for steps in STEPS:
            tensors["%s/%s/%d" % (cid, name, steps)] = cs.calculate_sigmas(ms, name, steps).float()
    model = types.SimpleNamespace(get_model_object=lambda n, ms=ms: ms)
    for sampler, steps, denoise in KSAMPLER:
        ks = cs.KSampler.__new__(cs.KSampler)
        ks.model, ks.device, ks.scheduler, ks.sampler = model, "cpu", "simple", sampler
        ks.set_steps(steps, denoise)
        tensors["%s/ksampler/%s/%d/%g" % (cid, sampler, steps, denoise)] = ks.sigmas.float()
    s = torch.tensor([0.8, 0.3])
    tensors[cid + "/input"] = ms.calculate_input(s, x)
    tensors[cid + "/denoised"] = ms.calculate_denoised(s, model_out, x)
    tensors[cid + "/noise_scaling"] = ms.noise_scaling(s[0], noise, x, False)
    tensors[cid + "/inverse_noise_scaling"] = ms.inverse_noise_scaling(s[1], x)

stio.save(tensors, os.path.join(out_dir, "flow_sampling.safetensors"),
          metadata={"generator": "make_flow_sampling_ref.py", "comfyui_commit": COMMIT})
json.dump({
    "file": "flow_sampling.safetensors",
    "generator": "make_flow_sampling_ref.py",
    "command": "/usr/bin/python3 make_flow_sampling_ref.py REF_DIR (extract_refs.sh output)",
    "comfyui_commit": COMMIT,
    "torch": "Debian python3-torch 1.13, CPU, float32",
    "settings": settings,
    "schedulers": list(cs.SCHEDULER_NAMES), "steps": STEPS, "percents": PERCENTS,
    "ksampler": [{"sampler": a, "steps": b, "denoise": c} for a, b, c in KSAMPLER],
    "tensors": {
        "x, model_out, noise": "torch.manual_seed(0); three randn(2, 16, 3, 3) draws in that order",
        "<config>/sigmas, sigma_min_max": "the model sampling's table and its ends",
        "<config>/timestep": "timestep(probe_sigmas)",
        "<config>/sigma_of_t": "sigma(probe_t), probe_t = timestep(probe_sigmas) * 0.75",
        "<config>/percent_to_sigma": "percent_to_sigma(p) for p in percents (float64)",
        "<config>/<scheduler>/<steps>": "comfy.samplers.calculate_sigmas(model_sampling, scheduler, steps)",
        "<config>/ksampler/<sampler>/<steps>/<denoise>": "KSampler.set_steps(steps, denoise).sigmas with scheduler simple (the discard-penultimate rule, the denoise slice)",
        "<config>/input, denoised": "calculate_input / calculate_denoised at sigma [0.8, 0.3] (one per batch item)",
        "<config>/noise_scaling": "noise_scaling(0.8, noise, x, max_denoise=False)",
        "<config>/inverse_noise_scaling": "inverse_noise_scaling(0.3, x)",
    },
    "tolerance": "bit-exact (float32 as torch computes it; percent_to_sigma in double; a NaN matches a NaN), "
                 "except karras's first floor(steps/16)*16 values: 1 ulp (torch.pow over a float32 tensor "
                 "runs Sleef's 1-ulp powf on each full vector group on AVX2, libm's pow on the rest)",
    "test": "tests/models/test_golden_flow_sampling.c",
}, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
