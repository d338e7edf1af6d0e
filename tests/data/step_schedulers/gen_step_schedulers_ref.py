#!/usr/bin/python3
"""Reference sigmas of ComfyUI's table-driven schedulers: GITSScheduler
(comfy_extras/nodes_gits.py) and OptimalStepsScheduler (nodes_optimalsteps.py).

usage: /usr/bin/python3 gen_step_schedulers_ref.py COMFY EINOPS CLIP [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at
  the commit in COMFY_COMMIT there). Debian python3-torch 1.13, CPU.
Writes step_schedulers_ref.safetensors and manifest.json beside this script (or into OUT_DIR).

Each case calls the node's V3 execute(**inputs) and stores its SIGMAS output under the case's
name; an input ComfyUI refuses (a coeff with no table) is recorded with the exception's type.
The cases cover every table (every coeff, every model type), the table lengths exactly, step
counts that interpolate, and denoise below 1 including the empty and one-value results.
"""
import json
import os
import sys

comfy_root, einops_root, clip_root = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
out_dir = sys.argv[4] if len(sys.argv) > 4 else here
sys.path.insert(0, os.path.join(here, "../../../../shared/tools/comfyref"))
sys.path.insert(0, "/work/shared/tools/comfyref")
import comfy_env  # noqa: E402

# the commit the extracted tree is at (extract_refs.sh takes it from this file)
COMMIT = open(os.path.join(os.path.dirname(comfy_env.__file__), "COMFY_COMMIT")).read().strip()

comfy_env.setup(comfy_root, einops_root, clip_root)

import torch  # noqa: E402
import stio  # noqa: E402
import comfy_extras.nodes_gits as gits  # noqa: E402
import comfy_extras.nodes_optimalsteps as optimal  # noqa: E402

cases, tensors = [], {}


def run(name, node, inputs):
    case = {"name": name, "node": node.__name__, "inputs": inputs}
    try:
        out = node.execute(**inputs)
        sig = out.result[0] if hasattr(out, "result") else out[0]
        tensors[name] = sig.to(torch.float32).contiguous()
        case["length"] = int(sig.shape[0])
    except Exception as e:  # what ComfyUI refuses
        case["error"] = type(e).__name__
    cases.append(case)


coeffs = [round(0.80 + 0.05 * i, 2) for i in range(15)]
for c in coeffs:
    for steps in (2, 3, 10, 20, 21, 37):
        run(f"gits_c{c:.2f}_s{steps}", gits.GITSScheduler, {"coeff": c, "steps": steps, "denoise": 1.0})
for steps, denoise in ((10, 0.5), (20, 0.75), (25, 0.6), (7, 0.05), (9, 0.0), (2, 0.25), (12, 0.99)):
    run(f"gits_c1.20_s{steps}_d{denoise}", gits.GITSScheduler, {"coeff": 1.2, "steps": steps, "denoise": denoise})
run("gits_c0.83_s10", gits.GITSScheduler, {"coeff": 0.83, "steps": 10, "denoise": 1.0})

for mt in ("FLUX", "Wan", "Chroma"):
    for steps in (3, 10, 20, 40, 57):
        run(f"opt_{mt}_s{steps}", optimal.OptimalStepsScheduler, {"model_type": mt, "steps": steps, "denoise": 1.0})
    for steps, denoise in ((20, 0.5), (10, 0.35), (30, 0.01), (8, 0.0)):
        run(f"opt_{mt}_s{steps}_d{denoise}", optimal.OptimalStepsScheduler,
            {"model_type": mt, "steps": steps, "denoise": denoise})

stio.save(tensors, os.path.join(out_dir, "step_schedulers_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({
        "file": "step_schedulers_ref.safetensors",
        "generator": "gen_step_schedulers_ref.py",
        "command": "/usr/bin/python3 gen_step_schedulers_ref.py COMFY EINOPS CLIP",
        "comfyui_commit": COMMIT,
        "torch": "Debian python3-torch %s, CPU" % torch.__version__,
        "tensors": "one float32 SIGMAS per case under the case's name: the node's execute(**inputs) output",
        "tolerance": "0: the tables are float64 literals and np.interp/np.log/np.exp in float64, "
                     "rounded once to float32; sdflow does the same float64 steps",
        "test": "tests/nodes/test_golden_step_schedulers.c",
        "cases": cases,
    }, f, indent=1)
print(len(cases), "cases")
