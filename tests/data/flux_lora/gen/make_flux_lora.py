"""LoRA on Flux: tiny LoRA files in the layouts people publish, and what ComfyUI's own
LoraLoaderModelOnly makes of them on the Flux set's tiny DiTs.

    /usr/bin/python3 make_flux_lora.py COMFY EINOPS CLIP NODE_MODULES SHARED OUT_DIR

COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at the commit
in its COMFY_COMMIT); NODE_MODULES: the npm folder of ../shared/tools/comfyref/flux/package.json
(flux_env's T5 tokenizer; not used here); SHARED: ../shared (the Flux set: models and manifest);
OUT_DIR: tests/data/flux_lora. Writes OUT_DIR/loras/*.safetensors, OUT_DIR/golden/*.safetensors and
OUT_DIR/manifest.json.

The LoRA files come from numpy's PCG64 seeded per file (no model is trained; only the key layouts and
the arithmetic matter):
  flux_lora_bfl       ComfyUI / BFL keys: diffusion_model.<BFL module>.lora_A/lora_B(.alpha), BF16;
                      also a linear1_qkv module (a slice of single_blocks.N.linear1), a full .diff on a
                      QK-norm scale and a .diff_b on a bias
  flux_lora_diffusers diffusers / PEFT keys: transformer.<diffusers module>.lora_A/lora_B, F16, no
                      alphas: to_q/to_k/to_v and add_*_proj (slices of the fused qkv), proj_mlp (a slice
                      of linear1), norm_out.linear (ComfyUI's swap_scale_shift), the embedders
  flux_lora_kohya     Kohya / sd-scripts keys: lora_unet_<BFL module with _>.lora_down/lora_up + alpha,
                      F32, on blocks present in dev and schnell alike
ComfyUI runs through ../shared/tools/comfyref/flux/flux_env.py (the Flux set's harness). Per case:
nodes.UNETLoader (weight_dtype default), then nodes.LoraLoaderModelOnly once per LoRA of the case (in
order), the model patched as ComfyUI patches it before sampling (ModelPatcher.patch_model: every
touched weight = comfy.lora.calculate_weight on the float32 weight), then one forward of the patched
comfy.ldm.flux.model.Flux on seeded inputs. Recorded: the inputs, the base model's output, the patched
output, and (cases of one LoRA) every parameter the LoRA changed (patched value, float32); the
manifest lists the changed parameters of every case.
"""
import json
import os
import sys
import tempfile
import types

import numpy as np

comfy_root, einops_root, clip_root, node_modules, shared, out = sys.argv[1:7]
sys.path.insert(0, os.path.join(shared, "tools", "comfyref"))
sys.path.insert(0, os.path.join(shared, "tools", "comfyref", "flux"))
import flux_env  # noqa: E402

flux_env.setup(comfy_root, einops_root, clip_root, node_modules)
server = types.ModuleType("server")
server.PromptServer = types.SimpleNamespace(instance=None)
sys.modules.setdefault("server", server)

import torch  # noqa: E402
import stio  # noqa: E402
import folder_paths  # noqa: E402
import nodes  # noqa: E402
import comfy.model_management  # noqa: E402

fdir = os.path.join(shared, "testdata", "flux")
fman = json.load(open(os.path.join(fdir, "manifest.json")))
dev = fman["models"]["flux_dev"]["config"]
head_dim = dev["hidden_size"] // dev["num_heads"]
aec = fman["models"]["ae"]["config"]
flux_env.install_overrides({head_dim: dev["axes_dim"]}, aec, {})
H = dev["hidden_size"]
MLP = int(H * dev["mlp_ratio"])
dit_case = [c for c in fman["cases"] if c["id"] == "dit_flux_dev"][0]
TOL = dit_case["tolerance"]

os.makedirs(os.path.join(out, "loras"), exist_ok=True)
os.makedirs(os.path.join(out, "golden"), exist_ok=True)

# ---- the LoRA files ----------------------------------------------------------------------------
RANK = 4


def factors(rng, rows, cols, dtype):
    """(up [rows, RANK], down [RANK, cols]) with entries ~ N(0, 0.15)"""
    up = torch.from_numpy(rng.normal(0, 0.15, (rows, RANK)).astype(np.float32)).to(dtype)
    down = torch.from_numpy(rng.normal(0, 0.15, (RANK, cols)).astype(np.float32)).to(dtype)
    return up, down


def bfl_lora():
    rng = np.random.Generator(np.random.PCG64(101))
    sd = {}
    mods = [  # (BFL module, rows, cols, alpha)
        ("double_blocks.0.img_attn.qkv", 3 * H, H, 2.0),
        ("double_blocks.0.img_mod.lin", 6 * H, H, 8.0),
        ("double_blocks.1.txt_mlp.0", MLP, H, None),
        ("double_blocks.1.txt_attn.proj", H, H, 4.0),
        ("single_blocks.0.linear1", 3 * H + MLP, H, 2.0),
        ("single_blocks.1.linear1_qkv", 3 * H, H, 3.0),
        ("single_blocks.1.linear2", H, H + MLP, 2.0),
        ("final_layer.linear", 4 * dev["out_channels"], H, 1.0),
        ("img_in", H, 4 * dev["in_channels"], 2.0),
        ("guidance_in.in_layer", H, 256, 4.0),
    ]
    for m, r, c, a in mods:
        up, down = factors(rng, r, c, torch.bfloat16)
        sd[f"diffusion_model.{m}.lora_B.weight"] = up
        sd[f"diffusion_model.{m}.lora_A.weight"] = down
        if a is not None:
            sd[f"diffusion_model.{m}.alpha"] = torch.tensor(a, dtype=torch.bfloat16)
    sd["diffusion_model.double_blocks.1.img_attn.norm.query_norm.scale.diff"] = torch.from_numpy(
        rng.normal(0, 0.2, (head_dim,)).astype(np.float32)).to(torch.bfloat16)
    sd["diffusion_model.txt_in.diff_b"] = torch.from_numpy(rng.normal(0, 0.2, (H,)).astype(np.float32)).to(torch.bfloat16)
    return sd


def diffusers_lora():
    rng = np.random.Generator(np.random.PCG64(202))
    sd = {}
    mods = [
        ("transformer_blocks.0.attn.to_q", H, H),
        ("transformer_blocks.1.attn.to_k", H, H),
        ("transformer_blocks.0.attn.to_v", H, H),
        ("transformer_blocks.1.attn.add_q_proj", H, H),
        ("transformer_blocks.0.attn.add_v_proj", H, H),
        ("transformer_blocks.1.attn.to_out.0", H, H),
        ("transformer_blocks.0.attn.to_add_out", H, H),
        ("transformer_blocks.0.ff.net.0.proj", MLP, H),
        ("transformer_blocks.1.ff_context.net.2", H, MLP),
        ("transformer_blocks.1.norm1.linear", 6 * H, H),
        ("transformer_blocks.0.norm1_context.linear", 6 * H, H),
        ("single_transformer_blocks.0.attn.to_q", H, H),
        ("single_transformer_blocks.1.attn.to_v", H, H),
        ("single_transformer_blocks.1.proj_mlp", MLP, H),
        ("single_transformer_blocks.0.proj_out", H, H + MLP),
        ("single_transformer_blocks.1.norm.linear", 3 * H, H),
        ("norm_out.linear", 2 * H, H),
        ("proj_out", 4 * dev["out_channels"], H),
        ("x_embedder", H, 4 * dev["in_channels"]),
        ("context_embedder", H, dev["context_in_dim"]),
        ("time_text_embed.timestep_embedder.linear_1", H, 256),
        ("time_text_embed.text_embedder.linear_2", H, H),
        ("time_text_embed.guidance_embedder.linear_2", H, H),
    ]
    for m, r, c in mods:
        up, down = factors(rng, r, c, torch.float16)
        sd[f"transformer.{m}.lora_B.weight"] = up
        sd[f"transformer.{m}.lora_A.weight"] = down
    return sd


def kohya_lora():
    rng = np.random.Generator(np.random.PCG64(303))
    sd = {}
    mods = [
        ("double_blocks.0.txt_attn.qkv", 3 * H, H, 4.0),
        ("double_blocks.1.img_mlp.2", H, MLP, 4.0),
        ("double_blocks.1.img_mod.lin", 6 * H, H, 2.0),
        ("single_blocks.0.modulation.lin", 3 * H, H, 4.0),
        ("single_blocks.1.linear1", 3 * H + MLP, H, 1.0),
        ("final_layer.adaLN_modulation.1", 2 * H, H, 4.0),
        ("time_in.out_layer", H, H, 4.0),
        ("vector_in.in_layer", H, dev["vec_in_dim"], 2.0),
        ("txt_in", H, dev["context_in_dim"], 4.0),
    ]
    for m, r, c, a in mods:
        up, down = factors(rng, r, c, torch.float32)
        k = "lora_unet_" + m.replace(".", "_")
        sd[f"{k}.lora_up.weight"] = up
        sd[f"{k}.lora_down.weight"] = down
        sd[f"{k}.alpha"] = torch.tensor(a, dtype=torch.float32)
    return sd


LORAS = {"flux_lora_bfl": bfl_lora(), "flux_lora_diffusers": diffusers_lora(), "flux_lora_kohya": kohya_lora()}
root = tempfile.mkdtemp(prefix="flux_lora_")
for sub in ("diffusion_models", "loras"):
    os.makedirs(os.path.join(root, sub))
for name, sd in LORAS.items():
    path = os.path.join(out, "loras", name + ".safetensors")
    stio.save(sd, path, {"note": "random factors from make_flux_lora.py; not a trained LoRA"})
    os.symlink(os.path.abspath(path), os.path.join(root, "loras", name + ".safetensors"))
for key in ("flux_dev", "flux_schnell"):
    m = fman["models"][key]
    os.symlink(os.path.abspath(os.path.join(fdir, m["file"])),
               os.path.join(root, "diffusion_models", os.path.basename(m["comfy_name"])))
exts = set(folder_paths.supported_pt_extensions)
folder_paths.folder_names_and_paths["diffusion_models"] = ([os.path.join(root, "diffusion_models")], exts)
folder_paths.folder_names_and_paths["loras"] = ([os.path.join(root, "loras")], exts)
for k in list(getattr(folder_paths, "filename_list_cache", {}).keys()):
    del folder_paths.filename_list_cache[k]

# ---- the cases -----------------------------------------------------------------------------------
CASES = [
    {"id": "lora_bfl", "model": "flux_dev", "loras": [["flux_lora_bfl", 1.0]], "seed": 11,
     "x": [1, 16, 10, 12], "sigma": 0.7, "ctx_tokens": 7, "guidance": 3.5},
    {"id": "lora_diffusers", "model": "flux_dev", "loras": [["flux_lora_diffusers", 0.75]], "seed": 12,
     "x": [1, 16, 9, 11], "sigma": 0.4, "ctx_tokens": 5, "guidance": 2.0},
    {"id": "lora_kohya_schnell", "model": "flux_schnell", "loras": [["flux_lora_kohya", -1.25]], "seed": 13,
     "x": [1, 16, 8, 8], "sigma": 0.9, "ctx_tokens": 6, "guidance": None},
    {"id": "lora_stack", "model": "flux_dev",
     "loras": [["flux_lora_bfl", 0.6], ["flux_lora_diffusers", -0.4], ["flux_lora_kohya", 1.0]], "seed": 14,
     "x": [1, 16, 6, 10], "sigma": 0.55, "ctx_tokens": 9, "guidance": 4.0},
]


def v1(cls, **kw):
    return tuple(getattr(cls(), cls.FUNCTION)(**kw))


def forward(patcher, inp):
    comfy.model_management.load_models_gpu([patcher])  # applies the patches (patch_model)
    dm = patcher.model.diffusion_model
    with torch.no_grad():
        o = dm(inp["x"], inp["sigma"], inp["context"], inp["y"], guidance=inp.get("guidance"))
    return o.clone(), {k: v.detach().clone().float() for k, v in dm.state_dict().items()}


manifest = {
    "description": "LoRA on Flux: tiny LoRA files (BFL/ComfyUI, diffusers and Kohya keys) applied by "
                   "ComfyUI's LoraLoaderModelOnly to the Flux set's tiny DiTs; patched weights and one "
                   "forward of the patched model.",
    "reference": {"comfyui_commit": fman["reference"]["comfyui_commit"],
                  "code": "comfy.lora.model_lora_keys_unet (Flux branch: comfy.utils.flux_to_diffusers), "
                          "comfy.lora.load_lora, comfy.lora.calculate_weight through "
                          "nodes.LoraLoaderModelOnly and ModelPatcher.patch_model; "
                          "comfy.ldm.flux.model.Flux.forward",
                  "generator": "gen/make_flux_lora.py", "harness": "../shared/tools/comfyref/flux/flux_env.py"},
    "flux_set": "../shared/testdata/flux (models by key: flux_dev, flux_schnell)",
    "loras": {n: {"file": f"loras/{n}.safetensors", "comfy_name": f"loras/{n}.safetensors"} for n in LORAS},
    "cases": [],
}
base_models = {}
for case in CASES:
    if case["model"] not in base_models:
        name = os.path.basename(fman["models"][case["model"]]["comfy_name"])
        base_models[case["model"]] = v1(nodes.UNETLoader, unet_name=name, weight_dtype="default")[0]
    base = base_models[case["model"]]
    g = torch.Generator().manual_seed(case["seed"])
    inp = {"x": torch.randn(case["x"], generator=g),
           "sigma": torch.tensor([case["sigma"]], dtype=torch.float32),
           "context": torch.randn([1, case["ctx_tokens"], dev["context_in_dim"]], generator=g),
           "y": torch.randn([1, dev["vec_in_dim"]], generator=g)}
    if case["guidance"] is not None:
        inp["guidance"] = torch.tensor([case["guidance"]], dtype=torch.float32)
    base_out, base_sd = forward(base, inp)
    m = base
    for lname, strength in case["loras"]:
        m = v1(nodes.LoraLoaderModelOnly, model=m, lora_name=lname + ".safetensors", strength_model=strength)[0]
    out_t, sd = forward(m, inp)
    comfy.model_management.unload_all_models()
    rec = {f"input.{k}": v.float() for k, v in inp.items()}
    rec["base_out"] = base_out.float()  # the model without the LoRAs
    rec["out"] = out_t.float()
    changed = []
    for k, v in sd.items():
        if not torch.equal(v, base_sd[k]):
            if len(case["loras"]) == 1:  # (a stack's weights: its output checks them, the data stays small)
                rec["weight." + k] = v
            changed.append(k)
    path = f"golden/{case['id']}.safetensors"
    stio.save({k: v.contiguous() for k, v in rec.items()}, os.path.join(out, path))
    tensors = {}
    for k, v in rec.items():
        role = "input" if k.startswith("input.") else "patched_weight" if k.startswith("weight.") else "output"
        tol = {"atol": 1e-6, "rtol": 1e-6} if role == "patched_weight" else TOL
        tensors[k] = {"role": role, "shape": list(v.shape), "dtype": "F32", "tolerance": tol}
    manifest["cases"].append({
        "id": case["id"], "component": "flux_lora", "file": path, "model": case["model"], "tensors": tensors,
        "loras": [{"lora": n, "strength": s} for n, s in case["loras"]],
        "node": "LoraLoaderModelOnly (one per LoRA, in order)",
        "inputs": {"x": case["x"], "sigma": case["sigma"], "ctx_tokens": case["ctx_tokens"],
                   "guidance": case["guidance"], "seed": case["seed"]},
        "patched_params": changed,
        "tolerance_note": "base_out / out: the Flux set's dit_flux_dev tolerance; weight.*: float32 "
                          "arithmetic of W + (strength*alpha/rank) * up@down (summation order may differ)",
    })
    print(case["id"], len(changed), "params patched, max |out-base| =", float((out_t - base_out).abs().max()))
json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)
open(os.path.join(out, "manifest.json"), "a").write("\n")
