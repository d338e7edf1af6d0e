#!/usr/bin/python3
"""APG's momentum across sampler runs of one patched MODEL, in ComfyUI's own code, on the tiny SD1
checkpoint of the shared test data.

usage: /usr/bin/python3 gen_apg_runs_ref.py COMFY EINOPS CLIP TESTDATA [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts;
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors and its manifest).
Writes apg_runs_ref.safetensors and manifest.json beside this script.

comfy_extras/nodes_apg.py keeps `running_avg` and `prev_sigma` in the closure of the
pre_cfg_function the APG node sets on its MODEL clone: every later clone of that MODEL shares the
function (ModelPatcher.clone deep-copies model_options, and deepcopy keeps functions), so the
state lives as long as the patched MODEL and carries from one sampler run to the next; it resets
only when an evaluation's sigma is above the previous evaluation's.

A case is a sequence of "prompts" on ONE APG-patched MODEL, as a ComfyUI server keeps the APG
node's output in its cache between prompts: each prompt lists the KSamplerAdvanced runs its graph
holds and which of them execute (the others are cache hits of an earlier prompt, which ComfyUI does
not run again, so they do not touch the state). Each executing run is nodes.KSamplerAdvanced.sample
on that model, in order; stored: its output latent. For runs with "differs_from", a second tensor
from ComfyUI's same code with the state as a wrong implementation would have it (named in
"differs_note"): the test requires it to lie outside the tolerance, so that the case can tell.
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
import comfy_extras.nodes_apg as nodes_apg  # noqa: E402
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

settings = {"width": 128, "height": 128, "seed": 7, "steps": 4, "sampler_name": "euler", "scheduler": "normal",
            "positive": "a red brick wall", "negative": "blurry"}
pos = nodes.CLIPTextEncode().encode(clip, settings["positive"])[0]
neg = nodes.CLIPTextEncode().encode(clip, settings["negative"])[0]
empty = nodes.EmptyLatentImage().generate(settings["width"], settings["height"], 1)[0]
tensors, cases = {}, []


def apg_model(apg):
    return nodes_apg.APG.execute(model, **apg).result[0]


def pre_cfg_cell(m, name):
    """The closure cell `name` of the APG pre_cfg_function on m (to set up a wrong state)."""
    fn = m.model_options["sampler_pre_cfg_function"][-1]
    return fn.__closure__[fn.__code__.co_freevars.index(name)]


def sample(m, run, latents):
    lat = empty if run["latent"] is None else {"samples": latents[run["latent"]]}
    return nodes.KSamplerAdvanced().sample(
        m, run["add_noise"], settings["seed"], settings["steps"], run["cfg"], settings["sampler_name"],
        settings["scheduler"], pos, neg, lat, run["start_at_step"], run["end_at_step"],
        run["return_with_leftover_noise"])[0]["samples"]


def run_def(rid, latent, start, end, cfg, first):
    return {"id": rid, "latent": latent, "add_noise": "enable" if first else "disable",
            "start_at_step": start, "end_at_step": end, "cfg": cfg,
            "return_with_leftover_noise": "enable" if end < settings["steps"] else "disable"}


for cid, apg in (("apg_two_stage", {"eta": 1.0, "norm_threshold": 0.0, "momentum": 0.5}),
                 ("apg_two_stage_threshold", {"eta": 0.5, "norm_threshold": 2.0, "momentum": -0.5})):
    # a: the first half of the schedule; b: the second half on a's latent, in a later prompt (the
    # state a left carries: b's first sigma is below a's last); b2: b with another cfg in a third
    # prompt (the sigma rises from b's last: the state resets).
    a = run_def("a", None, 0, 2, 6.0, True)
    b = run_def("b", "a", 2, 10000, 6.0, False)
    b2 = run_def("b2", "a", 2, 10000, 4.5, False)
    runs = {r["id"]: r for r in (a, b, b2)}
    prompts = [{"runs": ["a"], "executes": ["a"]},
               {"runs": ["a", "b"], "executes": ["b"]},
               {"runs": ["a", "b2"], "executes": ["b2"]}]
    m = apg_model(apg)
    latents = {}
    for p in prompts:
        for rid in p["executes"]:
            if rid == "b2":  # the wrong state first: b's running average kept (no reset on the rise)
                prev_cell, avg_cell = pre_cfg_cell(m, "prev_sigma"), pre_cfg_cell(m, "running_avg")
                saved = (prev_cell.cell_contents, avg_cell.cell_contents)
                prev_cell.cell_contents = None
                tensors[cid + "/b2_no_reset"] = sample(m, runs["b2"], latents).float()
                prev_cell.cell_contents, avg_cell.cell_contents = saved
            latents[rid] = sample(m, runs[rid], latents)
            tensors[cid + "/" + rid] = latents[rid].float()
    # b on a MODEL whose state nothing carried into (a state per sampler run)
    tensors[cid + "/b_fresh"] = sample(apg_model(apg), runs["b"], latents).float()
    for r in runs.values():
        r["latent_out"] = cid + "/" + r["id"]
    runs["b"]["differs_from"] = cid + "/b_fresh"
    runs["b"]["differs_note"] = "b with a fresh APG state (the running average of a not carried)"
    runs["b2"]["differs_from"] = cid + "/b2_no_reset"
    runs["b2"]["differs_note"] = "b2 with b's running average kept (prev_sigma set to None before b2)"
    for k, t in tensors.items():
        if k.startswith(cid + "/"):
            print(k, float(t.abs().max()))
    for rid in ("b", "b2"):
        d = (tensors[cid + "/" + rid] - tensors[runs[rid]["differs_from"]]).abs().max()
        print(cid, rid, "max |expected - wrong state| =", float(d))
    cases.append({"id": cid, "kind": "apg_runs",
                  "apg": [{"name": k, "type": "FLOAT", "value": v} for k, v in apg.items()],
                  "settings": settings, "runs": list(runs.values()), "prompts": prompts,
                  "atol": 0.04, "rtol": 0.002,
                  "tolerance_note": "the final latent's tolerance of the shared e2e_sd1 case (same model and "
                                    "sampler, 6 steps there), as model_patch's APG cases: the UNet's float32 "
                                    "sums in another order"})

stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "apg_runs_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/apg_runs/gen_apg_runs_ref.py",
               "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
               "comfyui_functions": "comfy_extras.nodes_apg.APG.execute, nodes.CLIPTextEncode.encode, "
                                    "nodes.EmptyLatentImage.generate, nodes.KSamplerAdvanced.sample",
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors",
               "file": "apg_runs_ref.safetensors", "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
