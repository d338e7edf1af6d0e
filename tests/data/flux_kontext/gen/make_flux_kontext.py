"""Flux.1 Kontext: reference latents on the Flux set's tiny dev DiT, as ComfyUI computes them.

    /usr/bin/python3 make_flux_kontext.py COMFY EINOPS CLIP SHARED OUT_DIR

COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at the commit in
its COMFY_COMMIT); SHARED: ../shared (the Flux set: models and manifest); OUT_DIR: tests/data/flux_kontext.
Writes OUT_DIR/golden/<case>.safetensors and OUT_DIR/manifest.json.

ComfyUI runs through ../shared/tools/comfyref/flux/flux_env.py (the Flux set's harness; its T5 tokenizer
is not used: every conditioning here is seeded random tokens). The model is the Flux set's tiny dev DiT
(flux_dev) loaded by nodes.UNETLoader (weight_dtype default): a Kontext checkpoint is a Flux dev-layout
checkpoint, ComfyUI loads it the same way.

Cases:
  component "dit_kontext": one comfy.ldm.flux.model.Flux.forward(x, sigma, context, y, guidance,
      ref_latents=[...], ref_latents_method=...) on seeded inputs (the reference latents are given in model
      space, as model_base.Flux.extra_conds hands them over). Recorded: input.x, input.sigma,
      input.context, input.y, input.guidance, input.ref<i>, out, and out_noref (the same forward without
      reference latents: the test checks that they matter).
  component "ksampler_kontext": ComfyUI's nodes on seeded random conditioning (cond, pooled_output):
      ReferenceLatent (comfy_extras.nodes_edit_model) once per reference latent (VAE-space latents), optionally
      FluxKontextMultiReferenceLatentMethod, FluxGuidance, then nodes.common_ksampler on zeros.
      Recorded: the conditioning tensors and reference latents fed, latent_in, and the KSampler's
      latent (out); out_noref is the same KSampler without the ReferenceLatent nodes.
"""
import json
import os
import sys
import tempfile
import types

comfy_root, einops_root, clip_root, shared, out = sys.argv[1:6]
sys.path.insert(0, os.path.join(shared, "tools", "comfyref"))
sys.path.insert(0, os.path.join(shared, "tools", "comfyref", "flux"))
import flux_env  # noqa: E402

flux_env.setup(comfy_root, einops_root, clip_root, "/nonexistent-node-modules")
server = types.ModuleType("server")
server.PromptServer = types.SimpleNamespace(instance=None)
sys.modules.setdefault("server", server)

import torch  # noqa: E402
import stio  # noqa: E402
import folder_paths  # noqa: E402
import nodes  # noqa: E402
import comfy.model_management  # noqa: E402
import comfy_extras.nodes_edit_model as nodes_edit  # noqa: E402
import comfy_extras.nodes_flux as nodes_flux  # noqa: E402

fdir = os.path.join(shared, "testdata", "flux")
fman = json.load(open(os.path.join(fdir, "manifest.json")))
dev = fman["models"]["flux_dev"]["config"]
head_dim = dev["hidden_size"] // dev["num_heads"]
aec = fman["models"]["ae"]["config"]
flux_env.install_overrides({head_dim: dev["axes_dim"]}, aec, {})
dit_case = [c for c in fman["cases"] if c["id"] == "dit_flux_dev"][0]
e2e_case = [c for c in fman["cases"] if c["id"] == "e2e_flux_dev"][0]
os.makedirs(os.path.join(out, "golden"), exist_ok=True)

root = tempfile.mkdtemp(prefix="flux_kontext_")
os.makedirs(os.path.join(root, "diffusion_models"))
m = fman["models"]["flux_dev"]
unet_name = os.path.basename(m["comfy_name"])
os.symlink(os.path.abspath(os.path.join(fdir, m["file"])), os.path.join(root, "diffusion_models", unet_name))
folder_paths.folder_names_and_paths["diffusion_models"] = ([os.path.join(root, "diffusion_models")],
                                                           set(folder_paths.supported_pt_extensions))
for k in list(getattr(folder_paths, "filename_list_cache", {}).keys()):
    del folder_paths.filename_list_cache[k]


def v1(cls, **kw):
    return tuple(getattr(cls(), cls.FUNCTION)(**kw))


def v3(cls, *a):
    r = cls.execute(*a)
    return r.result if hasattr(r, "result") else r


model = v1(nodes.UNETLoader, unet_name=unet_name, weight_dtype="default")[0]
comfy.model_management.load_models_gpu([model])
dm = model.model.diffusion_model

DIT_CASES = [
    {"id": "dit_one_ref", "seed": 21, "x": [1, 16, 10, 12], "refs": [[1, 16, 8, 10]], "method": None,
     "sigma": 0.7, "ctx_tokens": 7, "guidance": 2.5},
    {"id": "dit_two_refs", "seed": 22, "x": [1, 16, 9, 11], "refs": [[1, 16, 7, 9], [1, 16, 12, 6]],
     "method": None, "sigma": 0.45, "ctx_tokens": 5, "guidance": 3.5},
    {"id": "dit_two_refs_index", "seed": 23, "x": [1, 16, 8, 8], "refs": [[1, 16, 6, 10], [1, 16, 9, 7]],
     "method": "index", "sigma": 0.3, "ctx_tokens": 6, "guidance": 2.5},
    {"id": "dit_two_refs_uxo", "seed": 24, "x": [1, 16, 7, 10], "refs": [[1, 16, 8, 6], [1, 16, 5, 9]],
     "method": "uxo", "sigma": 0.85, "ctx_tokens": 4, "guidance": 4.0},
]

KS_CASES = [
    {"id": "ksampler_one_ref", "seed": 5, "cond_seed": 31, "latent": [1, 16, 12, 10], "refs": [[1, 16, 10, 8]],
     "method": None, "ctx_tokens": 7, "guidance": 2.5, "steps": 3, "cfg": 1.0, "sampler": "euler",
     "scheduler": "simple", "negative_refs": 0},
    {"id": "ksampler_two_refs_cfg", "seed": 6, "cond_seed": 32, "latent": [2, 16, 8, 11],
     "refs": [[1, 16, 9, 8], [1, 16, 6, 12]], "method": "index", "ctx_tokens": 5, "guidance": 3.0,
     "steps": 2, "cfg": 2.0, "sampler": "euler", "scheduler": "simple", "negative_refs": 1},
]

manifest = {
    "description": "Flux.1 Kontext: reference latents (ReferenceLatent, FluxKontextMultiReferenceLatentMethod) "
                   "on the Flux set's tiny dev DiT: DiT forwards with one and two reference latents of "
                   "other sizes (offset, index and uxo RoPE placements) and KSampler runs on "
                   "ReferenceLatent conditioning.",
    "reference": {"comfyui_commit": fman["reference"]["comfyui_commit"],
                  "code": "comfy_extras.nodes_edit_model.ReferenceLatent, "
                          "comfy_extras.nodes_flux.FluxKontextMultiReferenceLatentMethod / FluxGuidance, "
                          "comfy.model_base.Flux.extra_conds (reference_latents -> process_latent_in -> "
                          "CONDList ref_latents), comfy.ldm.flux.model.Flux._forward (ref_latents_method), "
                          "nodes.common_ksampler",
                  "generator": "gen/make_flux_kontext.py", "harness": "../shared/tools/comfyref/flux/flux_env.py"},
    "flux_set": "../shared/testdata/flux (model key flux_dev, UNETLoader weight_dtype default)",
    "model": "flux_dev",
    "cases": [],
}


def tensors_of(rec, tol, roles):
    return {k: {"role": roles(k), "shape": list(v.shape), "dtype": "F32", "tolerance": tol} for k, v in rec.items()}


for c in DIT_CASES:
    g = torch.Generator().manual_seed(c["seed"])
    inp = {"x": torch.randn(c["x"], generator=g),
           "sigma": torch.tensor([c["sigma"]], dtype=torch.float32),
           "context": torch.randn([1, c["ctx_tokens"], dev["context_in_dim"]], generator=g),
           "y": torch.randn([1, dev["vec_in_dim"]], generator=g),
           "guidance": torch.tensor([c["guidance"]], dtype=torch.float32)}
    refs = [torch.randn(s, generator=g) for s in c["refs"]]
    kw = {} if c["method"] is None else {"ref_latents_method": c["method"]}
    with torch.no_grad():
        o = dm(inp["x"], inp["sigma"], inp["context"], inp["y"], guidance=inp["guidance"], ref_latents=refs, **kw)
        o0 = dm(inp["x"], inp["sigma"], inp["context"], inp["y"], guidance=inp["guidance"])
    rec = {f"input.{k}": v.float() for k, v in inp.items()}
    for i, r in enumerate(refs):
        rec[f"input.ref{i}"] = r
    rec["out"] = o.float()
    rec["out_noref"] = o0.float()
    path = f"golden/{c['id']}.safetensors"
    stio.save({k: v.contiguous() for k, v in rec.items()}, os.path.join(out, path))
    manifest["cases"].append({
        "id": c["id"], "component": "dit_kontext", "file": path,
        "ref_latents_method": c["method"], "n_refs": len(refs),
        "inputs": {k: c[k] for k in ("seed", "x", "refs", "sigma", "ctx_tokens", "guidance")},
        "reference": "comfy.ldm.flux.model.Flux.forward(x, sigma, context, y, guidance, ref_latents=[input.ref<i>]"
                     + ("" if c["method"] is None else f", ref_latents_method='{c['method']}'") + ")",
        "tensors": tensors_of(rec, dit_case["tolerance"],
                              lambda k: "input" if k.startswith("input.") else "output"),
        "tolerance_note": "the Flux set's dit_flux_dev tolerance",
    })
    print(c["id"], "max |out - out_noref| =", float((o - o0).abs().max()))


def run_ks(c, pos, neg, latent):
    (res,) = nodes.common_ksampler(model, c["seed"], c["steps"], c["cfg"], c["sampler"], c["scheduler"],
                                   pos, neg, {"samples": latent}, denoise=1.0)
    return res["samples"].float()


for c in KS_CASES:
    g = torch.Generator().manual_seed(c["cond_seed"])
    rec = {"positive.cond": torch.randn([1, c["ctx_tokens"], dev["context_in_dim"]], generator=g),
           "positive.pooled": torch.randn([1, dev["vec_in_dim"]], generator=g),
           "negative.cond": torch.randn([1, c["ctx_tokens"], dev["context_in_dim"]], generator=g),
           "negative.pooled": torch.randn([1, dev["vec_in_dim"]], generator=g)}
    refs = [torch.randn(s, generator=g) for s in c["refs"]]
    for i, r in enumerate(refs):
        rec[f"ref{i}"] = r
    latent = torch.zeros(c["latent"])
    rec["latent_in"] = latent
    base_pos = [[rec["positive.cond"], {"pooled_output": rec["positive.pooled"]}]]
    base_neg = [[rec["negative.cond"], {"pooled_output": rec["negative.pooled"]}]]
    pos = base_pos
    for r in refs:
        (pos,) = v3(nodes_edit.ReferenceLatent, pos, {"samples": r})
    if c["method"] is not None:
        (pos,) = v3(nodes_flux.FluxKontextMultiReferenceLatentMethod, pos, c["method"])
    (pos,) = v3(nodes_flux.FluxGuidance, pos, c["guidance"])
    neg = base_neg
    for r in refs[:c["negative_refs"]]:
        (neg,) = v3(nodes_edit.ReferenceLatent, neg, {"samples": r})
    (pos0,) = v3(nodes_flux.FluxGuidance, base_pos, c["guidance"])
    assert len(pos[0][1]["reference_latents"]) == len(refs)
    rec["out"] = run_ks(c, pos, neg, latent)
    rec["out_noref"] = run_ks(c, pos0, base_neg, latent)
    comfy.model_management.unload_all_models()
    path = f"golden/{c['id']}.safetensors"
    stio.save({k: v.contiguous() for k, v in rec.items()}, os.path.join(out, path))
    manifest["cases"].append({
        "id": c["id"], "component": "ksampler_kontext", "file": path,
        "settings": {k: c[k] for k in ("seed", "steps", "cfg", "sampler", "scheduler", "guidance")},
        "ref_latents_method": c["method"], "n_refs": len(refs), "negative_refs": c["negative_refs"],
        "graph": "positive = FluxGuidance(guidance)(" + ("FluxKontextMultiReferenceLatentMethod(%s)(" % c["method"]
                 if c["method"] else "(") + "ReferenceLatent(ref<n-1>)(... ReferenceLatent(ref0)("
                 "[[positive.cond, {pooled_output: positive.pooled}]])))); negative = ReferenceLatent(ref<i>) "
                 "for i < negative_refs on [[negative.cond, {pooled_output: negative.pooled}]]; "
                 "out = KSampler(seed, steps, cfg, sampler, scheduler, denoise 1) on latent_in; out_noref: "
                 "the same without any ReferenceLatent (and without the method node)",
        "tensors": tensors_of(rec, e2e_case["tolerance"],
                              lambda k: "output" if k.startswith("out") else "input"),
        "tolerance_note": "the Flux set's e2e_flux_dev tolerance",
    })
    print(c["id"], "max |out - out_noref| =", float((rec["out"] - rec["out_noref"]).abs().max()))

json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)
open(os.path.join(out, "manifest.json"), "a").write("\n")
