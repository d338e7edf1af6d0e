"""LoRA on the SD3 / SD3.5 MMDiT: tiny LoRA files in the layouts people publish, and what ComfyUI's
own LoraLoaderModelOnly makes of them on the SD3 set's tiny MMDiT-X.

    /usr/bin/python3 make_sd3_lora.py COMFY EINOPS CLIP SHARED OUT_DIR

COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at the commit
in its COMFY_COMMIT); SHARED: ../shared (the SD3 set: testdata/sd3, models and manifest; tools/comfyref);
OUT_DIR: tests/data/sd3_lora. Writes OUT_DIR/loras/*.safetensors, OUT_DIR/golden/*.safetensors and
OUT_DIR/manifest.json.

The LoRA files come from numpy's PCG64 seeded per file (no model is trained; only the key layouts and
the arithmetic matter):
  sd3_lora_comfy      ComfyUI's own keys: diffusion_model.<module>.lora_A/lora_B(.alpha), BF16, on
                      x_block / context_block qkv, attn2 (MMDiT-X), adaLN, mlp, the last (pre-only)
                      context block, x_embedder.proj (a conv: 4-D down), final_layer; a full .diff on a
                      qk-norm scale and a .diff_b on a bias; plus a block the model lacks
                      (joint_blocks.7...) and a text-encoder key, which match nothing (reported)
  sd3_lora_diffusers  diffusers / PEFT keys: transformer.<diffusers module>.lora_A/lora_B, F16, no
                      alphas: attn.to_q/k/v, attn.add_*_proj, attn2.to_* (row slices of the fused qkv),
                      to_out / to_add_out, ff / ff_context, norm1(_context).linear (the last block's
                      norm1_context and norm_out.linear with ComfyUI's swap_scale_shift),
                      pos_embed.proj (conv), the embedders, proj_out
  sd3_lora_kohya      Kohya lora_unet_<module with _>.lora_down/lora_up + alpha (F32), OneTrainer
                      lora_transformer_<diffusers with _>, SimpleTuner lycoris_<diffusers with _> and
                      base_model.model.<diffusers> spellings
ComfyUI: nodes.UNETLoader (weight_dtype default) on the SD3 set's mmdit, then nodes.LoraLoaderModelOnly
once per LoRA of the case (in order), the model patched as ComfyUI patches it before sampling
(ModelPatcher.patch_model via comfy.model_management.load_models_gpu: every touched weight =
comfy.lora.calculate_weight on the float32 weight), then one forward of the patched MMDiT
(OpenAISignatureMMDITWrapper.forward(x, timesteps, context, y)) on seeded inputs. Recorded: the inputs,
the base model's output, the patched output, and a few of the parameters the LoRAs changed (the case's
"weights": patched value, float32); the manifest lists the changed parameters of every case and the LoRA keys
ComfyUI's load_lora did not load ("lora key not loaded").
"""
import json
import logging
import os
import sys
import tempfile
import types

import numpy as np

comfy_root, einops_root, clip_root, shared, out = sys.argv[1:6]
sys.path.insert(0, os.path.join(shared, "tools", "comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(comfy_root, einops_root, clip_root)
server = types.ModuleType("server")
server.PromptServer = types.SimpleNamespace(instance=None)
sys.modules.setdefault("server", server)

import torch  # noqa: E402
import stio  # noqa: E402
import folder_paths  # noqa: E402
import nodes  # noqa: E402
import comfy.model_management  # noqa: E402

torch.set_grad_enabled(False)


class NotLoaded(logging.Handler):
    """collects comfy.lora.load_lora's "lora key not loaded: X" warnings"""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.keys = []

    def emit(self, rec):
        msg = rec.getMessage()
        if msg.startswith("lora key not loaded: "):
            self.keys.append(msg[len("lora key not loaded: "):])


not_loaded = NotLoaded()
logging.getLogger().addHandler(not_loaded)
logging.getLogger().setLevel(logging.WARNING)

sdir = os.path.join(shared, "testdata", "sd3")
sman = json.load(open(os.path.join(sdir, "manifest.json")))
cfg = sman["models"]["mmdit"]["config"]
H = cfg["hidden_size"]
MLP = 4 * H
P = cfg["patch_size"]
NB = cfg["depth"]  # joint blocks
head_dim = H // cfg["num_heads"]
dit_case = [c for c in sman["cases"] if c["id"] == "dit_sd3"][0]
TOL = dit_case["tolerance"]
CTX = cfg["context_in"]
ADM = cfg["adm_in_channels"]
C_IN, C_OUT = cfg["in_channels"], cfg["out_channels"]
last = NB - 1

os.makedirs(os.path.join(out, "loras"), exist_ok=True)
os.makedirs(os.path.join(out, "golden"), exist_ok=True)

RANK = 4


def factors(rng, rows, cols, dtype, conv=None):
    """(up [rows, RANK], down [RANK, cols]) with entries ~ N(0, 0.1); conv=(c, k): down [RANK, c, k, k],
    up [rows, RANK, 1, 1] as conv LoRAs are stored"""
    up = torch.from_numpy(rng.normal(0, 0.1, (rows, RANK)).astype(np.float32)).to(dtype)
    if conv:
        c, k = conv
        down = torch.from_numpy(rng.normal(0, 0.1, (RANK, c, k, k)).astype(np.float32)).to(dtype)
        return up.reshape(rows, RANK, 1, 1), down
    down = torch.from_numpy(rng.normal(0, 0.1, (RANK, cols)).astype(np.float32)).to(dtype)
    return up, down


def comfy_lora():
    rng = np.random.Generator(np.random.PCG64(401))
    sd = {}
    mods = [  # (module, rows, cols, alpha, conv)
        ("joint_blocks.0.x_block.attn.qkv", 3 * H, H, 2.0, None),
        ("joint_blocks.0.x_block.attn2.qkv", 3 * H, H, 4.0, None),
        ("joint_blocks.0.context_block.adaLN_modulation.1", 6 * H, H, 8.0, None),
        ("joint_blocks.0.x_block.mlp.fc2", H, MLP, None, None),
        (f"joint_blocks.{last}.context_block.attn.qkv", 3 * H, H, 2.0, None),
        (f"joint_blocks.{last}.context_block.adaLN_modulation.1", 2 * H, H, 2.0, None),
        (f"joint_blocks.{last}.x_block.attn.proj", H, H, 1.0, None),
        ("x_embedder.proj", H, None, 2.0, (C_IN, P)),
        ("final_layer.linear", P * P * C_OUT, H, 4.0, None),
        ("context_embedder", H, CTX, 2.0, None),
        ("joint_blocks.7.x_block.attn.qkv", 3 * H, H, 2.0, None),  # no such block: not loaded
    ]
    for m, r, c, a, conv in mods:
        up, down = factors(rng, r, c, torch.bfloat16, conv)
        sd[f"diffusion_model.{m}.lora_B.weight"] = up
        sd[f"diffusion_model.{m}.lora_A.weight"] = down
        if a is not None:
            sd[f"diffusion_model.{m}.alpha"] = torch.tensor(a, dtype=torch.bfloat16)
    sd[f"diffusion_model.joint_blocks.{last}.x_block.attn.ln_k.diff"] = torch.from_numpy(
        rng.normal(0, 0.2, (head_dim,)).astype(np.float32)).to(torch.bfloat16)
    sd["diffusion_model.t_embedder.mlp.2.diff_b"] = torch.from_numpy(
        rng.normal(0, 0.2, (H,)).astype(np.float32)).to(torch.bfloat16)
    sd["lora_te1_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight"] = torch.zeros(4, RANK,
                                                                                            dtype=torch.bfloat16)
    return sd


def diffusers_lora():
    rng = np.random.Generator(np.random.PCG64(402))
    sd = {}
    mods = [  # (diffusers module, rows, cols, conv)
        ("transformer_blocks.0.attn.to_q", H, H, None),
        ("transformer_blocks.1.attn.to_k", H, H, None),
        ("transformer_blocks.0.attn.to_v", H, H, None),
        ("transformer_blocks.0.attn.add_q_proj", H, H, None),
        ("transformer_blocks.1.attn.add_v_proj", H, H, None),
        ("transformer_blocks.0.attn2.to_k", H, H, None),
        ("transformer_blocks.0.attn.to_out.0", H, H, None),
        ("transformer_blocks.0.attn.to_add_out", H, H, None),
        ("transformer_blocks.0.attn2.to_out.0", H, H, None),
        ("transformer_blocks.1.ff.net.0.proj", MLP, H, None),
        ("transformer_blocks.0.ff_context.net.2", H, MLP, None),
        ("transformer_blocks.1.norm1.linear", 6 * H, H, None),
        ("transformer_blocks.0.norm1_context.linear", 6 * H, H, None),
        (f"transformer_blocks.{last}.norm1_context.linear", 2 * H, H, None),
        ("norm_out.linear", 2 * H, H, None),
        ("proj_out", P * P * C_OUT, H, None),
        ("pos_embed.proj", H, None, (C_IN, P)),
        ("context_embedder", H, CTX, None),
        ("time_text_embed.timestep_embedder.linear_1", H, 256, None),
        ("time_text_embed.text_embedder.linear_2", H, H, None),
    ]
    for m, r, c, conv in mods:
        up, down = factors(rng, r, c, torch.float16, conv)
        sd[f"transformer.{m}.lora_B.weight"] = up
        sd[f"transformer.{m}.lora_A.weight"] = down
    return sd


def kohya_lora():
    rng = np.random.Generator(np.random.PCG64(403))
    sd = {}
    mods = [  # (name, rows, cols, alpha)
        ("lora_unet_joint_blocks_1_x_block_attn_qkv", 3 * H, H, 4.0),
        ("lora_unet_joint_blocks_0_context_block_mlp_fc1", MLP, H, 2.0),
        ("lora_unet_y_embedder_mlp_0", H, ADM, 4.0),
        ("lora_transformer_transformer_blocks_1_attn_to_q", H, H, 2.0),
        ("lora_transformer_transformer_blocks_0_ff_net_2", H, MLP, 4.0),
        ("lycoris_transformer_blocks_1_attn_add_k_proj", H, H, 1.0),
        ("lycoris_time_text_embed_timestep_embedder_linear_2", H, H, 2.0),
    ]
    for m, r, c, a in mods:
        up, down = factors(rng, r, c, torch.float32)
        sd[f"{m}.lora_up.weight"] = up
        sd[f"{m}.lora_down.weight"] = down
        sd[f"{m}.alpha"] = torch.tensor(a, dtype=torch.float32)
    for m, r, c in [("base_model.model.transformer_blocks.0.attn2.to_q", H, H),
                    ("base_model.model.transformer_blocks.0.ff_context.net.0.proj", MLP, H)]:
        up, down = factors(rng, r, c, torch.float32)
        sd[f"{m}.lora_B.weight"] = up
        sd[f"{m}.lora_A.weight"] = down
    return sd


LORAS = {"sd3_lora_comfy": comfy_lora(), "sd3_lora_diffusers": diffusers_lora(), "sd3_lora_kohya": kohya_lora()}
root = tempfile.mkdtemp(prefix="sd3_lora_")
for sub in ("diffusion_models", "loras"):
    os.makedirs(os.path.join(root, sub))
for name, sd in LORAS.items():
    path = os.path.join(out, "loras", name + ".safetensors")
    stio.save(sd, path, {"note": "random factors from make_sd3_lora.py; not a trained LoRA"})
    os.symlink(os.path.abspath(path), os.path.join(root, "loras", name + ".safetensors"))
m = sman["models"]["mmdit"]
os.symlink(os.path.abspath(os.path.join(sdir, m["file"])),
           os.path.join(root, "diffusion_models", os.path.basename(m["comfy_name"])))
exts = set(folder_paths.supported_pt_extensions)
folder_paths.folder_names_and_paths["diffusion_models"] = ([os.path.join(root, "diffusion_models")], exts)
folder_paths.folder_names_and_paths["loras"] = ([os.path.join(root, "loras")], exts)
for k in list(getattr(folder_paths, "filename_list_cache", {}).keys()):
    del folder_paths.filename_list_cache[k]

# "weights": the patched parameters recorded (the data stays small; every case's output checks the rest):
# a conv, a slice, the swapped modulations, a .diff and a .diff_b, two patches on one parameter
CASES = [
    {"id": "lora_comfy", "loras": [["sd3_lora_comfy", 1.0]], "seed": 21, "x": [1, 16, 12, 10],
     "sigma": 0.7, "ctx_tokens": 9,
     "weights": ["x_embedder.proj.weight", f"joint_blocks.{last}.x_block.attn.ln_k.weight",
                 "t_embedder.mlp.2.bias", f"joint_blocks.{last}.context_block.adaLN_modulation.1.weight"]},
    {"id": "lora_diffusers", "loras": [["sd3_lora_diffusers", 0.8]], "seed": 22, "x": [1, 16, 8, 14],
     "sigma": 0.45, "ctx_tokens": 7,
     "weights": ["joint_blocks.0.x_block.attn.qkv.weight", "joint_blocks.0.x_block.attn2.qkv.weight",
                 f"joint_blocks.{last}.context_block.adaLN_modulation.1.weight",
                 "final_layer.adaLN_modulation.1.weight", "x_embedder.proj.weight"]},
    {"id": "lora_kohya", "loras": [["sd3_lora_kohya", -1.5]], "seed": 23, "x": [1, 16, 10, 10],
     "sigma": 0.9, "ctx_tokens": 5, "weights": [f"joint_blocks.{last}.x_block.attn.qkv.weight"]},
    {"id": "lora_stack", "loras": [["sd3_lora_comfy", 0.5], ["sd3_lora_diffusers", -0.6], ["sd3_lora_kohya", 1.0]],
     "seed": 24, "x": [1, 16, 6, 8], "sigma": 0.3, "ctx_tokens": 11},
]


def v1(cls, **kw):
    return tuple(getattr(cls(), cls.FUNCTION)(**kw))


def forward(patcher, inp):
    comfy.model_management.load_models_gpu([patcher])  # applies the patches (patch_model)
    dm = patcher.model.diffusion_model
    o = dm(inp["x"], inp["timesteps"], context=inp["context"], y=inp["y"])
    return o.clone(), {k: v.detach().clone() for k, v in dm.state_dict().items()}


manifest = {
    "description": "LoRA on SD3 / SD3.5 (MMDiT): tiny LoRA files (ComfyUI, diffusers, Kohya/OneTrainer/SimpleTuner "
                   "keys) applied by ComfyUI's LoraLoaderModelOnly to the SD3 set's tiny MMDiT-X; patched weights "
                   "and one forward of the patched model.",
    "reference": {"comfyui_commit": sman["reference"]["comfyui_commit"],
                  "code": "comfy.lora.model_lora_keys_unet (SD3 branch: comfy.utils.mmdit_to_diffusers), "
                          "comfy.lora.load_lora, comfy.lora.calculate_weight through nodes.LoraLoaderModelOnly "
                          "and ModelPatcher.patch_model; comfy.ldm.modules.diffusionmodules.mmdit."
                          "OpenAISignatureMMDITWrapper.forward",
                  "generator": "gen/make_sd3_lora.py", "harness": "../shared/tools/comfyref/comfy_env.py"},
    "family": "sd3",
    "family_set": "../shared/testdata/sd3 (model key mmdit)",
    "loras": {n: {"file": f"loras/{n}.safetensors", "comfy_name": f"loras/{n}.safetensors"} for n in LORAS},
    "cases": [],
}
name = os.path.basename(m["comfy_name"])
base = v1(nodes.UNETLoader, unet_name=name, weight_dtype="default")[0]
for case in CASES:
    g = torch.Generator().manual_seed(case["seed"])
    inp = {"x": torch.randn(case["x"], generator=g),
           "timesteps": torch.tensor([case["sigma"] * 1000.0], dtype=torch.float32),
           "context": torch.randn([1, case["ctx_tokens"], CTX], generator=g),
           "y": torch.randn([1, ADM], generator=g)}
    base_out, base_sd = forward(base, inp)
    assert all(v.dtype == torch.float32 for v in base_sd.values()), "ComfyUI keeps this MMDiT in float32 here"
    mdl = base
    not_loaded.keys = []
    for lname, strength in case["loras"]:
        mdl = v1(nodes.LoraLoaderModelOnly, model=mdl, lora_name=lname + ".safetensors", strength_model=strength)[0]
    unloaded = sorted(set(not_loaded.keys))
    out_t, sd = forward(mdl, inp)
    comfy.model_management.unload_all_models()
    rec = {f"input.{k}": v.float() for k, v in inp.items()}
    rec["base_out"] = base_out.float()
    rec["out"] = out_t.float()
    changed = []
    for k, v in sd.items():
        if not torch.equal(v, base_sd[k]):
            if k in case.get("weights", []):
                rec["weight." + k] = v.float()
            changed.append(k)
    path = f"golden/{case['id']}.safetensors"
    stio.save({k: v.contiguous() for k, v in rec.items()}, os.path.join(out, path))
    tensors = {}
    for k, v in rec.items():
        role = "input" if k.startswith("input.") else "patched_weight" if k.startswith("weight.") else "output"
        tol = {"atol": 1e-6, "rtol": 1e-6} if role == "patched_weight" else TOL
        tensors[k] = {"role": role, "shape": list(v.shape), "dtype": "F32", "tolerance": tol}
    manifest["cases"].append({
        "id": case["id"], "component": "sd3_lora", "file": path, "model": "mmdit", "tensors": tensors,
        "loras": [{"lora": n, "strength": s} for n, s in case["loras"]],
        "node": "LoraLoaderModelOnly (one per LoRA, in order)",
        "inputs": {"x": case["x"], "sigma": case["sigma"], "timesteps": "sigma * 1000",
                   "ctx_tokens": case["ctx_tokens"], "seed": case["seed"]},
        "patched_params": changed,
        "recorded_weights": [k for k in case.get("weights", [])],
        "not_loaded": unloaded,
        "tolerance_note": "base_out / out: the SD3 set's dit_sd3 tolerance; weight.*: float32 arithmetic of "
                          "W + (strength*alpha/rank) * up@down (summation order may differ)",
    })
    print(case["id"], len(changed), "params patched, not loaded:", unloaded,
          "max |out-base| =", float((out_t - base_out).abs().max()))
json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)
open(os.path.join(out, "manifest.json"), "a").write("\n")
