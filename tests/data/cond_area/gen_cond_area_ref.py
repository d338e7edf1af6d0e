#!/usr/bin/python3
"""Area, mask, strength and timestep-range conditioning in ComfyUI's sampler, on the tiny SD1
checkpoint of the shared test data.

usage: /usr/bin/python3 gen_cond_area_ref.py COMFY EINOPS CLIP TESTDATA [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts;
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors and its manifest).
Writes cond_area_ref.safetensors and manifest.json beside this script (or in OUT_DIR).

Each case is a small graph of ComfyUI's own conditioning nodes (nodes.py: CLIPTextEncode,
ConditioningCombine, ConditioningSetArea, ConditioningSetAreaPercentage,
ConditioningSetAreaStrength, ConditioningSetMask, ConditioningSetTimestepRange,
ConditioningConcat, ConditioningAverage), listed in the manifest in order as
{"id", "node", "inputs"}: an input is a literal {"value", "kind"}, a stored tensor {"tensor"}
(masks), or another step's output {"ref": step id}; CLIPTextEncode's clip is the checkpoint's.
The case's "positive" and "negative" name steps; both go to nodes.common_ksampler (EmptyLatentImage
of the case's size, its seed/steps/cfg/sampler/scheduler). Stored per case:
  <case>/step0.cond, <case>/step0.uncond: what comfy.samplers.calc_cond_batch returned at the
    first model evaluation (the x0 predictions of the positive and negative lists, areas, masks,
    strengths and timestep ranges applied), recorded by wrapping that function;
  <case>/latent: the KSampler output latent.
Cases of kind "node" run ConditioningConcat / ConditioningAverage on stored conditionings (ComfyUI's
encodes; an input {"conditioning": [{"cond", "pooled_output"?} per entry]}) and store the output
entries' tensors as <case>/out/<entry>/<key>.
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
import comfy.samplers  # noqa: E402
import comfy.supported_models as sm  # noqa: E402
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

# the first calc_cond_batch of a run: its inputs' predictions
recorded = []
_calc = comfy.samplers.calc_cond_batch


def recording_calc(m, conds, x_in, timestep, model_options):
    out = _calc(m, conds, x_in, timestep, model_options)
    recorded.append([o.clone() for o in out])
    return out


comfy.samplers.calc_cond_batch = recording_calc

tensors, cases = {}, []


def blob_mask(h, w, cy, cx, r, soft):
    """A disc of ones (radius r around cy, cx) with a soft ramp of width `soft` outside it."""
    yy = torch.arange(h, dtype=torch.float32).view(h, 1).expand(h, w)
    xx = torch.arange(w, dtype=torch.float32).view(1, w).expand(h, w)
    d = ((yy - cy) ** 2 + (xx - cx) ** 2).sqrt()
    return ((r + soft - d) / soft).clamp(0.0, 1.0).unsqueeze(0)


def lit(v, kind):
    return {"value": v, "kind": kind}


NODES = {
    "CLIPTextEncode": lambda i: nodes.CLIPTextEncode().encode(clip, i["text"]),
    "ConditioningCombine": lambda i: nodes.ConditioningCombine().combine(i["conditioning_1"], i["conditioning_2"]),
    "ConditioningSetArea": lambda i: nodes.ConditioningSetArea().append(**i),
    "ConditioningSetAreaPercentage": lambda i: nodes.ConditioningSetAreaPercentage().append(**i),
    "ConditioningSetAreaStrength": lambda i: nodes.ConditioningSetAreaStrength().append(**i),
    "ConditioningSetMask": lambda i: nodes.ConditioningSetMask().append(**i),
    "ConditioningSetTimestepRange": lambda i: nodes.ConditioningSetTimestepRange().set_range(**i),
    "ConditioningConcat": lambda i: nodes.ConditioningConcat().concat(**i),
    "ConditioningAverage": lambda i: nodes.ConditioningAverage().addWeighted(**i),
}


def run_graph(cid, steps):
    outs = {}
    for s in steps:
        args = {}
        for k, v in s["inputs"].items():
            if "ref" in v:
                args[k] = outs[v["ref"]]
            elif "tensor" in v:
                args[k] = tensors[v["tensor"]]
            else:
                args[k] = v["value"]
        outs[s["id"]] = NODES[s["node"]](args)[0]
    return outs


def enc(sid, text):
    return {"id": sid, "node": "CLIPTextEncode", "inputs": {"text": lit(text, "STRING")}}


def step(sid, node, **inputs):
    return {"id": sid, "node": node, "inputs": inputs}


def ref(sid):
    return {"ref": sid}


# masks at the pixel size and smaller (the sampler resizes them to the latent, bilinear)
tensors["mask/disc64"] = blob_mask(64, 64, 22.0, 40.0, 12.0, 6.0)
tensors["mask/island80"] = blob_mask(80, 80, 25.0, 55.0, 9.0, 2.0)
tensors["mask/two48"] = torch.maximum(blob_mask(48, 48, 10.0, 12.0, 5.0, 4.0), blob_mask(48, 48, 30.0, 36.0, 6.0, 2.0))

P, A, B, N = "a red brick wall", "a blue glass sphere", "green grass field", "blurry"
SETTINGS = {"width": 128, "height": 128, "seed": 7, "steps": 4, "cfg": 6.0, "sampler_name": "euler",
            "scheduler": "normal"}
ATOL_PRED, RTOL_PRED = 0.002, 0.002  # shared e2e_sd1 step0.cond_denoised (the same model, first step)
ATOL_LAT, RTOL_LAT = 0.04, 0.002     # shared e2e_sd1 latent_out (the same model and sampler, 6 steps)

base = [enc("p", P), enc("a", A), enc("b", B), enc("n", N)]
GRAPHS = [
    ("plain", [], "p", "n"),
    ("area", [step("sa", "ConditioningSetArea", conditioning=ref("a"), width=lit(64, "INT"), height=lit(64, "INT"),
                   x=lit(32, "INT"), y=lit(32, "INT"), strength=lit(1.0, "FLOAT")),
              step("c", "ConditioningCombine", conditioning_1=ref("p"), conditioning_2=ref("sa"))], "c", "n"),
    ("area_border_strength", [step("sa", "ConditioningSetArea", conditioning=ref("a"), width=lit(64, "INT"),
                                   height=lit(128, "INT"), x=lit(64, "INT"), y=lit(0, "INT"),
                                   strength=lit(2.5, "FLOAT")),
                              step("sb", "ConditioningSetArea", conditioning=ref("b"), width=lit(72, "INT"),
                                   height=lit(80, "INT"), x=lit(8, "INT"), y=lit(40, "INT"),
                                   strength=lit(0.7, "FLOAT")),
                              step("c1", "ConditioningCombine", conditioning_1=ref("sa"), conditioning_2=ref("sb")),
                              step("c", "ConditioningCombine", conditioning_1=ref("p"), conditioning_2=ref("c1")),
                              step("nb", "ConditioningSetArea", conditioning=ref("b"), width=lit(64, "INT"),
                                   height=lit(64, "INT"), x=lit(64, "INT"), y=lit(64, "INT"),
                                   strength=lit(1.0, "FLOAT")),
                              step("nc", "ConditioningCombine", conditioning_1=ref("n"), conditioning_2=ref("nb"))],
     "c", "nc"),
    # 0.15625 * 16 = 2.5 and 0.40625 * 16 = 6.5: Python's round() goes to even
    ("area_percentage", [step("sa", "ConditioningSetAreaPercentage", conditioning=ref("a"), width=lit(0.5, "FLOAT"),
                              height=lit(0.40625, "FLOAT"), x=lit(0.15625, "FLOAT"), y=lit(0.1, "FLOAT"),
                              strength=lit(1.3, "FLOAT")),
                         step("c", "ConditioningCombine", conditioning_1=ref("p"), conditioning_2=ref("sa"))],
     "c", "n"),
    ("area_strength", [step("ss", "ConditioningSetAreaStrength", conditioning=ref("a"), strength=lit(0.35, "FLOAT")),
                       step("c", "ConditioningCombine", conditioning_1=ref("ss"), conditioning_2=ref("p"))],
     "c", "n"),
    ("mask_default", [step("sm", "ConditioningSetMask", conditioning=ref("a"), mask={"tensor": "mask/disc64"},
                           strength=lit(0.8, "FLOAT"), set_cond_area=lit("default", "STRING")),
                      step("c", "ConditioningCombine", conditioning_1=ref("p"), conditioning_2=ref("sm"))],
     "c", "n"),
    ("mask_bounds", [step("sm", "ConditioningSetMask", conditioning=ref("a"), mask={"tensor": "mask/island80"},
                          strength=lit(1.0, "FLOAT"), set_cond_area=lit("mask bounds", "STRING")),
                     step("ss", "ConditioningSetAreaStrength", conditioning=ref("sm"), strength=lit(1.5, "FLOAT")),
                     step("c", "ConditioningCombine", conditioning_1=ref("p"), conditioning_2=ref("ss")),
                     step("nm", "ConditioningSetMask", conditioning=ref("b"), mask={"tensor": "mask/two48"},
                          strength=lit(0.5, "FLOAT"), set_cond_area=lit("mask bounds", "STRING")),
                     step("nc", "ConditioningCombine", conditioning_1=ref("n"), conditioning_2=ref("nm"))],
     "c", "nc"),
    ("timestep_range", [step("ta", "ConditioningSetTimestepRange", conditioning=ref("a"), start=lit(0.0, "FLOAT"),
                             end=lit(0.4, "FLOAT")),
                        step("tp", "ConditioningSetTimestepRange", conditioning=ref("p"), start=lit(0.4, "FLOAT"),
                             end=lit(1.0, "FLOAT")),
                        step("c", "ConditioningCombine", conditioning_1=ref("ta"), conditioning_2=ref("tp"))],
     "c", "n"),
    ("concat", [step("c", "ConditioningConcat", conditioning_to=ref("p"), conditioning_from=ref("a"))], "c", "n"),
    ("average", [step("c", "ConditioningAverage", conditioning_to=ref("p"), conditioning_from=ref("a"),
                      conditioning_to_strength=lit(0.3, "FLOAT"))], "c", "n"),
]

latent = nodes.EmptyLatentImage().generate(SETTINGS["width"], SETTINGS["height"], 1)[0]
for cid, extra, pos, neg in GRAPHS:
    steps = base + extra
    outs = run_graph(cid, steps)
    recorded.clear()
    res = nodes.common_ksampler(model, SETTINGS["seed"], SETTINGS["steps"], SETTINGS["cfg"], SETTINGS["sampler_name"],
                                SETTINGS["scheduler"], outs[pos], outs[neg], latent)[0]["samples"]
    tensors[cid + "/step0.cond"], tensors[cid + "/step0.uncond"] = recorded[0][0], recorded[0][1]
    tensors[cid + "/latent"] = res.float()
    cases.append({"id": cid, "kind": "ksampler", "steps": extra, "positive": pos, "negative": neg,
                  "outputs": [{"tensor": cid + "/step0.cond", "what": "step0 cond", "atol": ATOL_PRED, "rtol": RTOL_PRED},
                              {"tensor": cid + "/step0.uncond", "what": "step0 uncond", "atol": ATOL_PRED,
                               "rtol": RTOL_PRED},
                              {"tensor": cid + "/latent", "what": "latent", "atol": ATOL_LAT, "rtol": RTOL_LAT}]})

# ---- the mixing nodes on stored conditionings (ComfyUI's encodes), bit for bit -------------------
# small random conditionings (the nodes do not care where the tokens came from): [1, L, 8], pooled [1, 8]
def rand_cond(seed, L, pooled=True):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(1, L, 8, generator=g)
    return [[t, {"pooled_output": torch.randn(1, 8, generator=g)} if pooled else {}]]


c5, c3, c7, c4n = rand_cond(1, 5), rand_cond(2, 3), rand_cond(3, 7), rand_cond(4, 4, pooled=False)


def cond_input(cid, name, c):
    entries = []
    for i, (t, d) in enumerate(c):
        e = {"cond": "%s/in/%s/%d/cond" % (cid, name, i)}
        tensors[e["cond"]] = t
        if d.get("pooled_output") is not None:
            e["pooled_output"] = "%s/in/%s/%d/pooled_output" % (cid, name, i)
            tensors[e["pooled_output"]] = d["pooled_output"]
        entries.append(e)
    return {"conditioning": entries}


for cid, node, to, frm, strength in (("concat_two", "ConditioningConcat", c5 + c3, c7 + c4n, None),
                                     ("average", "ConditioningAverage", c5, c5[:0] + [[c7[0][0][:, :5], c7[0][1]]], 0.3),
                                     ("average_pad", "ConditioningAverage", c7 + c4n, c3, 0.6),
                                     ("average_cut", "ConditioningAverage", c3 + c5, c7, 0.75),
                                     ("average_no_pooled_from", "ConditioningAverage", c5, c4n, 0.45)):
    inputs = {"conditioning_to": cond_input(cid, "conditioning_to", to),
              "conditioning_from": cond_input(cid, "conditioning_from", frm)}
    args = {"conditioning_to": to, "conditioning_from": frm}
    if strength is not None:
        inputs["conditioning_to_strength"] = lit(strength, "FLOAT")
        args["conditioning_to_strength"] = strength
    out = NODES[node](args)[0]
    outputs = []
    for i, (t, d) in enumerate(out):
        for k, v in (("cond", t), ("pooled_output", d.get("pooled_output"))):
            if v is not None:
                tensors["%s/out/%d/%s" % (cid, i, k)] = v
                outputs.append({"entry": i, "key": k, "tensor": "%s/out/%d/%s" % (cid, i, k), "atol": 0.0, "rtol": 0.0})
    cases.append({"id": "node_" + cid, "kind": "node", "node": node, "inputs": inputs, "outputs": outputs})

# the steps of every case share the base encodes: listed once
stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "cond_area_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/cond_area/gen_cond_area_ref.py",
               "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors",
               "reference": "nodes.py conditioning nodes -> nodes.common_ksampler; step0.* = the first "
                            "comfy.samplers.calc_cond_batch result [positive, negative]",
               "tolerance_note": "step0 predictions: the shared e2e_sd1 case's step0.cond_denoised tolerance (the same "
                                 "model's first UNet evaluation, float32 sums in another order); latent: its latent_out "
                                 "tolerance (same model and sampler, more steps there); node outputs: bit for bit "
                                 "(the same float32 operations)",
               "settings": SETTINGS, "base_steps": base,
               "file": "cond_area_ref.safetensors", "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
