#!/usr/bin/python3
"""Reference numbers for ModelSamplingDiscrete (eps, v_prediction, lcm, x0,
img_to_img; zsnr) and RescaleCFG, computed by ComfyUI's own code.

usage: /usr/bin/python3 make_model_sampling_ref.py COMFY_ROOT [OUT_DIR]
  COMFY_ROOT: a ComfyUI tree at the commit in shared/tools/comfyref/COMFY_COMMIT
  (only comfy/model_sampling.py, comfy/ldm/util.py,
  comfy/ldm/modules/diffusionmodules/util.py and
  comfy_extras/nodes_model_advanced.py are imported; extract them with
  `git show COMMIT:path`). Debian python3-torch (CPU, float32).
Writes model_sampling_ref.safetensors next to this script (or into OUT_DIR)
with shared/tools/comfyref/stio.py. Nothing is computed here except
what ComfyUI computes; the inputs are torch.manual_seed(0) randn draws.
"""
import os
import sys
import types

here = os.path.dirname(os.path.abspath(__file__))
comfy_root = sys.argv[1]
out_dir = sys.argv[2] if len(sys.argv) > 2 else here
sys.path.insert(0, os.path.join(here, "../../../../shared/tools/comfyref"))
sys.path.insert(0, "/work/shared/tools/comfyref")
sys.path.insert(0, comfy_root)

# Imports that the used functions never touch (einops is used by other
# helpers of diffusionmodules/util.py; the node module's other classes need
# the full ComfyUI): empty stand-ins.
# PIL only serves comfy/ldm/util.py's log_txt_as_img.
for name in ["einops", "PIL", "comfy.sd", "comfy.latent_formats", "nodes", "node_helpers"]:
    m = types.ModuleType(name)
    m.repeat = m.rearrange = m.Image = m.ImageDraw = m.ImageFont = None
    sys.modules[name] = m

import torch  # noqa: E402
import stio  # noqa: E402
import comfy.model_sampling  # noqa: E402
import comfy_extras.nodes_model_advanced as adv  # noqa: E402

torch.manual_seed(0)
SHAPE = (2, 4, 3, 3)
x = torch.randn(SHAPE)
model_out = torch.randn(SHAPE)
uncond = torch.randn(SHAPE)


class FakePatcher:
    """What ModelSamplingDiscrete.patch / RescaleCFG.patch use of a ModelPatcher."""

    def __init__(self):
        self.model = types.SimpleNamespace(model_config=None)  # SD1 sampling settings
        self.object_patches = {}
        self.cfg_fn = None

    def clone(self):
        return FakePatcher()

    def add_object_patch(self, name, obj):
        self.object_patches[name] = obj

    def set_model_sampler_cfg_function(self, fn):
        self.cfg_fn = fn


out = {"x": x, "model_out": model_out, "uncond": uncond}
sigma_probe = [0.05, 1.3, 14.6]
t_probe = torch.tensor([0.0, 19.0, 500.5, 999.0, 1234.0])
for kind in ["eps", "v_prediction", "lcm", "x0", "img_to_img"]:
    for zsnr in [False, True]:
        (m,) = adv.ModelSamplingDiscrete().patch(FakePatcher(), kind, zsnr)
        ms = m.object_patches["model_sampling"]
        tag = kind + ("_zsnr" if zsnr else "")
        out[tag + ".sigmas"] = ms.sigmas.float()
        out[tag + ".log_sigmas"] = ms.log_sigmas.float()
        sig = torch.tensor(sigma_probe + [float(ms.sigma_max)])
        out[tag + ".probe_sigmas"] = sig
        out[tag + ".timestep"] = ms.timestep(sig).float()
        out[tag + ".sigma_of_t"] = ms.sigma(t_probe).float()
        out[tag + ".percent_to_sigma"] = torch.tensor(
            [ms.percent_to_sigma(p) for p in [0.1, 0.5, 0.9]], dtype=torch.float64)
        den, inp = [], []
        for s in sig:
            sb = s.repeat(SHAPE[0])
            den.append(ms.calculate_denoised(sb, model_out, x))
            inp.append(ms.calculate_input(sb, x))
        out[tag + ".denoised"] = torch.stack(den)
        out[tag + ".input"] = torch.stack(inp)

# RescaleCFG: comfy.samplers.cfg_function's args and result around the
# patch's sampler_cfg_function: cfg_result = x - fn(args)
for name, scale, mult, unc in [("rescale_cfg", 7.5, 0.7, uncond),
                               ("rescale_cfg1", 1.0, 0.7, torch.zeros(SHAPE)),
                               ("rescale_cfg_m0", 3.0, 0.0, uncond)]:
    (m,) = adv.RescaleCFG().patch(FakePatcher(), mult)
    sigma = torch.tensor([2.5] * SHAPE[0])
    args = {"cond": x - model_out, "uncond": x - unc, "cond_scale": scale, "timestep": sigma,
            "input": x, "sigma": sigma, "cond_denoised": model_out, "uncond_denoised": unc}
    out[name] = x - m.cfg_fn(args)
    out[name + ".params"] = torch.tensor([2.5, scale, mult], dtype=torch.float64)

stio.save({k: v.contiguous() for k, v in out.items()},
          os.path.join(out_dir, "model_sampling_ref.safetensors"),
          metadata={"generator": "make_model_sampling_ref.py"})
print("wrote", len(out), "tensors")
