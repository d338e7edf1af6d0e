#!/usr/bin/python3
"""Reference numbers for the latent formats sdflow implements
(models/sampling/latent_format.h), computed by ComfyUI's own code:
comfy.latent_formats.SD15 / SDXL / Flux process_in and process_out, and
latent_preview.Latent2RGBPreviewer's linear map of a latent to RGB.

usage: /usr/bin/python3 make_latent_formats_ref.py REF_DIR [OUT_DIR]
  REF_DIR: what ../shared/tools/comfyref/extract_refs.sh extracts; imported
  through shared/tools/comfyref/comfy_env.py on Debian's python3-torch (CPU).
Writes latent_formats.safetensors and manifest.json next to this script (or
into OUT_DIR). The inputs are torch.manual_seed(0) randn draws.
"""
import json
import os
import sys

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
import comfy.latent_formats as lf  # noqa: E402
import latent_preview  # noqa: E402

COMMIT = open("/work/shared/tools/comfyref/COMFY_COMMIT").read().strip()
FORMATS = {"sd1": lf.SD15, "sdxl": lf.SDXL, "flux": lf.Flux}

torch.manual_seed(0)
tensors, entries = {}, {}
for name, cls in FORMATS.items():
    fmt = cls()
    c = fmt.latent_channels
    z = torch.randn(2, c, 5, 7) * 1.5
    z[1].zero_()
    tensors[name + ".z"] = z
    tensors[name + ".process_in"] = fmt.process_in(z)
    tensors[name + ".process_out"] = fmt.process_out(z)
    p = latent_preview.Latent2RGBPreviewer(fmt.latent_rgb_factors, fmt.latent_rgb_factors_bias,
                                           fmt.latent_rgb_factors_reshape)
    # decode_latent_to_preview's float image before preview_to_image's
    # ((v + 1) / 2).clamp(0, 1) * 255 -> uint8: the first image of the batch
    x0 = z[0]
    rgb = torch.nn.functional.linear(x0.movedim(0, -1), p.latent_rgb_factors, bias=p.latent_rgb_factors_bias)
    tensors[name + ".preview_rgb"] = (rgb + 1.0) / 2.0
    tensors[name + ".preview_u8"] = torch.from_numpy(np.array(p.decode_latent_to_preview(z), dtype=np.int32))
    entries[name] = {"class": "comfy.latent_formats." + cls.__name__, "latent_channels": c,
                     "scale_factor": float(fmt.scale_factor), "shift_factor": float(getattr(fmt, "shift_factor", 0.0)),
                     "taesd_decoder_name": fmt.taesd_decoder_name}
stio.save(tensors, os.path.join(out_dir, "latent_formats.safetensors"),
          metadata={"generator": "make_latent_formats_ref.py", "comfyui_commit": COMMIT})
json.dump({
    "file": "latent_formats.safetensors",
    "generator": "make_latent_formats_ref.py",
    "command": "/usr/bin/python3 make_latent_formats_ref.py REF_DIR (extract_refs.sh output)",
    "comfyui_commit": COMMIT,
    "torch": "Debian python3-torch 1.13, CPU, float32",
    "formats": entries,
    "tensors": {
        "<name>.z": "torch.manual_seed(0); randn(2, C, 5, 7) * 1.5 per format in this order, the second batch item zeroed",
        "<name>.process_in / .process_out": "the format's process_in(z) / process_out(z)",
        "<name>.preview_rgb": "Latent2RGBPreviewer: linear(z[0].movedim(0, -1), factors, bias), then (v + 1) / 2 (before the clamp and the uint8 cast), [5, 7, 3]",
        "<name>.preview_u8": "Latent2RGBPreviewer.decode_latent_to_preview(z) as uint8 pixels (stored as I32), [5, 7, 3]",
    },
    "tolerance": {"process": "exact (one or two float32 ops)",
                  "preview_rgb": {"atol": 1e-6, "why": "torch's linear sums the channels in its GEMM's order"},
                  "preview_u8": {"max_diff": 1, "why": "a value at a multiple of 1/255 may truncate either way after an ulp"}},
    "test": "tests/models/test_latent_format.c",
}, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
