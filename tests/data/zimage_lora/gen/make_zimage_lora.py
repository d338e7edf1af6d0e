"""LoRA on Z-Image (Lumina 2 NextDiT): tiny LoRA files in the layouts people publish, and what
ComfyUI's own LoraLoaderModelOnly makes of them on the Z-Image set's tiny NextDiT.

    /usr/bin/python3 make_zimage_lora.py COMFY EINOPS CLIP SHARED OUT_DIR

COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at the commit
in its COMFY_COMMIT); SHARED: ../shared (the Z-Image set: testdata/zimage, models and manifest;
tools/comfyref); OUT_DIR: tests/data/zimage_lora. Writes OUT_DIR/loras/*.safetensors,
OUT_DIR/golden/*.safetensors and OUT_DIR/manifest.json.

ComfyUI's model detection knows Z-Image by its real width (dim 3840 -> heads, axes, ffn multiplier,
time scale, pad tokens); for the tiny dim this script fills those values from the Z-Image set's manifest
(the set's own override, as its README says) and registers a ZImage config class matching the tiny dim.
Nothing else is changed: the key map (comfy.lora.model_lora_keys_unet's Lumina2 branch,
comfy.utils.z_image_to_diffusers), load_lora and calculate_weight are ComfyUI's.

The LoRA files come from numpy's PCG64 seeded per file (no model is trained; only the key layouts and
the arithmetic matter):
  zimage_lora_comfy      ComfyUI keys: diffusion_model.<module>.lora_A/lora_B(.alpha), BF16, on
                         layers / noise_refiner / context_refiner attention.qkv, out, feed_forward,
                         adaLN_modulation, x_embedder, cap_embedder, t_embedder, final_layer; a .diff on
                         a q_norm scale, a .diff on x_pad_token (loaded, but never applied: ModelPatcher
                         patches no parameter held by a non-leaf module) and a .diff_b; plus a layer the model lacks
                         and a text-encoder key, which match nothing (reported)
  zimage_lora_diffusers  diffusers keys: transformer.<diffusers module>.lora_A/lora_B, F16, no alphas:
                         attention.to_q/k/v (dim-row slices of attention.qkv), to_out.0,
                         all_x_embedder.2-1, all_final_layer.2-1, the refiners; also
                         diffusion_model.<diffusers module> spellings
  zimage_lora_kohya      Kohya lora_unet_<module with _>.lora_down/lora_up + alpha (F32) and SimpleTuner
                         lycoris_<diffusers module with _>, two of them on one target
ComfyUI: nodes.UNETLoader (weight_dtype default) on the set's zimage model, then
nodes.LoraLoaderModelOnly once per LoRA of the case (in order), the model patched as ComfyUI patches it
before sampling (ModelPatcher.patch_model via comfy.model_management.load_models_gpu), then one forward
of the patched NextDiT (NextDiT.forward(x, timesteps, context, num_tokens)) on seeded inputs. Recorded:
the inputs, the base model's output, the patched output and a few of the parameters the LoRAs changed
(the case's "weights": patched value, float32); the manifest lists the changed parameters of every case
and the LoRA keys ComfyUI's load_lora did not load ("lora key not loaded").
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

if not hasattr(torch.nn.RMSNorm, "reset_parameters"):
    # the shims' torch.nn.RMSNorm (torch 1.13 has none) lacks what torch's own __init__ ends with:
    # self.reset_parameters(), where ComfyUI's ops.RMSNorm sets its bias to None
    _rms_init = torch.nn.RMSNorm.__init__

    def _rms_init_reset(self, *a, **kw):
        _rms_init(self, *a, **kw)
        if hasattr(self, "reset_parameters"):
            self.reset_parameters()

    torch.nn.RMSNorm.__init__ = _rms_init_reset
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

zdir = os.path.join(shared, "testdata", "zimage")
zman = json.load(open(os.path.join(zdir, "manifest.json")))
cfg = zman["models"]["zimage"]["config"]
D = cfg["dim"]
head_dim = D // cfg["n_heads"]
zfile = os.path.join(zdir, zman["models"]["zimage"]["file"])
_, zhead = stio.read_header(zfile)
FFN = zhead["layers.0.feed_forward.w1.weight"]["shape"][0]
ADA = zhead["layers.0.adaLN_modulation.0.weight"]["shape"][1]
T_IN = zhead["t_embedder.mlp.0.weight"]["shape"][1]
dit_case = [c for c in zman["cases"] if c["id"] == "dit_zimage"][0]
TOL = dit_case["tolerance"]
CAP = cfg["cap_feat_dim"]
C_IN, P = cfg["in_channels"], cfg["patch_size"]
NL = cfg["n_layers"]

# ---- ComfyUI's detection for the tiny width (the set's override) ----------------------------------
import comfy.model_detection  # noqa: E402
import comfy.supported_models  # noqa: E402

_detect = comfy.model_detection.detect_unet_config


def detect_tiny(state_dict, key_prefix, metadata=None):
    c = _detect(state_dict, key_prefix, metadata=metadata)
    if c is not None and c.get("image_model") == "lumina2" and c.get("dim") == D:
        c.update({"n_heads": cfg["n_heads"], "n_kv_heads": cfg["n_kv_heads"], "axes_dims": cfg["axes_dims"],
                  "axes_lens": cfg["axes_lens"], "rope_theta": cfg["rope_theta"],
                  "ffn_dim_multiplier": 8.0 / 3.0, "z_image_modulation": True, "time_scale": cfg["time_scale"],
                  "pad_tokens_multiple": cfg["pad_tokens_multiple"]})
    return c


comfy.model_detection.detect_unet_config = detect_tiny


class TinyZImage(comfy.supported_models.ZImage):
    unet_config = {"image_model": "lumina2", "dim": D}


comfy.supported_models.models.insert(0, TinyZImage)

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
    rng = np.random.Generator(np.random.PCG64(501))
    sd = {}
    mods = [  # (module, rows, cols, alpha)
        ("layers.0.attention.qkv", 3 * D, D, 2.0),
        ("layers.0.attention.out", D, D, None),
        ("layers.0.feed_forward.w2", D, FFN, 4.0),
        ("layers.0.adaLN_modulation.0", 4 * D, ADA, 8.0),
        ("noise_refiner.1.feed_forward.w1", FFN, D, 2.0),
        ("context_refiner.0.attention.qkv", 3 * D, D, 2.0),
        ("x_embedder", D, P * P * C_IN, 2.0),
        ("cap_embedder.1", D, CAP, 1.0),
        ("t_embedder.mlp.2", ADA, ADA, 4.0),
        ("final_layer.linear", P * P * C_IN, D, 4.0),
        (f"layers.{NL + 3}.attention.qkv", 3 * D, D, 2.0),  # no such layer: not loaded
    ]
    for m, r, c, a in mods:
        up, down = factors(rng, r, c, torch.bfloat16)
        sd[f"diffusion_model.{m}.lora_B.weight"] = up
        sd[f"diffusion_model.{m}.lora_A.weight"] = down
        if a is not None:
            sd[f"diffusion_model.{m}.alpha"] = torch.tensor(a, dtype=torch.bfloat16)
    sd["diffusion_model.noise_refiner.0.attention.q_norm.diff"] = torch.from_numpy(
        rng.normal(0, 0.2, (head_dim,)).astype(np.float32)).to(torch.bfloat16)
    sd["diffusion_model.x_pad_token.diff"] = torch.from_numpy(
        rng.normal(0, 0.2, (1, D)).astype(np.float32)).to(torch.bfloat16)
    sd["diffusion_model.final_layer.adaLN_modulation.1.diff_b"] = torch.from_numpy(
        rng.normal(0, 0.2, (D,)).astype(np.float32)).to(torch.bfloat16)
    sd["lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight"] = torch.zeros(4, RANK,
                                                                                           dtype=torch.bfloat16)
    return sd


def diffusers_lora():
    rng = np.random.Generator(np.random.PCG64(502))
    sd = {}
    mods = [  # (prefix, diffusers module, rows, cols)
        ("transformer", "layers.0.attention.to_q", D, D),
        ("transformer", "layers.0.attention.to_v", D, D),
        ("transformer", "noise_refiner.0.attention.to_k", D, D),
        ("transformer", "context_refiner.1.attention.to_v", D, D),
        ("transformer", "layers.0.attention.to_out.0", D, D),
        ("transformer", "context_refiner.1.feed_forward.w3", FFN, D),
        ("transformer", "noise_refiner.1.adaLN_modulation.0", 4 * D, ADA),
        ("transformer", "all_x_embedder.2-1", D, P * P * C_IN),
        ("transformer", "all_final_layer.2-1.adaLN_modulation.1", D, ADA),
        ("transformer", "t_embedder.mlp.0", ADA, T_IN),
        ("diffusion_model", "all_final_layer.2-1.linear", P * P * C_IN, D),
        ("diffusion_model", "noise_refiner.1.attention.to_q", D, D),
    ]
    for pre, m, r, c in mods:
        up, down = factors(rng, r, c, torch.float16)
        sd[f"{pre}.{m}.lora_B.weight"] = up
        sd[f"{pre}.{m}.lora_A.weight"] = down
    return sd


def kohya_lora():
    rng = np.random.Generator(np.random.PCG64(503))
    sd = {}
    mods = [  # (name, rows, cols, alpha)
        ("lora_unet_layers_0_feed_forward_w1", FFN, D, 4.0),
        ("lora_unet_context_refiner_1_attention_out", D, D, 2.0),
        ("lora_unet_cap_embedder_1", D, CAP, 4.0),
        ("lycoris_layers_0_attention_to_k", D, D, 2.0),
        ("lycoris_cap_embedder_1", D, CAP, 1.0),  # the same target as lora_unet_cap_embedder_1
        ("lycoris_noise_refiner_0_attention_to_out_0", D, D, 2.0),
    ]
    for m, r, c, a in mods:
        up, down = factors(rng, r, c, torch.float32)
        sd[f"{m}.lora_up.weight"] = up
        sd[f"{m}.lora_down.weight"] = down
        sd[f"{m}.alpha"] = torch.tensor(a, dtype=torch.float32)
    return sd


LORAS = {"zimage_lora_comfy": comfy_lora(), "zimage_lora_diffusers": diffusers_lora(),
         "zimage_lora_kohya": kohya_lora()}
root = tempfile.mkdtemp(prefix="zimage_lora_")
for sub in ("diffusion_models", "loras"):
    os.makedirs(os.path.join(root, sub))
for name, sd in LORAS.items():
    path = os.path.join(out, "loras", name + ".safetensors")
    stio.save(sd, path, {"note": "random factors from make_zimage_lora.py; not a trained LoRA"})
    os.symlink(os.path.abspath(path), os.path.join(root, "loras", name + ".safetensors"))
m = zman["models"]["zimage"]
os.symlink(os.path.abspath(zfile), os.path.join(root, "diffusion_models", os.path.basename(m["comfy_name"])))
exts = set(folder_paths.supported_pt_extensions)
folder_paths.folder_names_and_paths["diffusion_models"] = ([os.path.join(root, "diffusion_models")], exts)
folder_paths.folder_names_and_paths["loras"] = ([os.path.join(root, "loras")], exts)
for k in list(getattr(folder_paths, "filename_list_cache", {}).keys()):
    del folder_paths.filename_list_cache[k]

# "weights": the patched parameters recorded (the data stays small; every case's output checks the rest):
# slices, a .diff on a norm scale and on a pad token, a .diff_b, two patches on one parameter
CASES = [
    {"id": "lora_comfy", "loras": [["zimage_lora_comfy", 1.0]], "seed": 31, "x": [1, 16, 8, 10],
     "sigma": 0.6, "ctx_tokens": 7,
     "weights": ["noise_refiner.0.attention.q_norm.weight", "final_layer.adaLN_modulation.1.bias",
                 "x_embedder.weight"]},
    {"id": "lora_diffusers", "loras": [["zimage_lora_diffusers", 0.7]], "seed": 32, "x": [1, 16, 10, 6],
     "sigma": 0.35, "ctx_tokens": 5,
     "weights": ["layers.0.attention.qkv.weight", "final_layer.adaLN_modulation.1.weight",
                 "final_layer.linear.weight"]},
    {"id": "lora_kohya", "loras": [["zimage_lora_kohya", -1.25]], "seed": 33, "x": [1, 16, 6, 6],
     "sigma": 0.85, "ctx_tokens": 9, "weights": ["cap_embedder.1.weight"]},
    {"id": "lora_stack", "loras": [["zimage_lora_comfy", 0.5], ["zimage_lora_diffusers", -0.6],
                                   ["zimage_lora_kohya", 1.0]],
     "seed": 34, "x": [1, 16, 8, 8], "sigma": 0.5, "ctx_tokens": 6},
]


def v1(cls, **kw):
    return tuple(getattr(cls(), cls.FUNCTION)(**kw))


def forward(patcher, inp):
    comfy.model_management.load_models_gpu([patcher])  # applies the patches (patch_model)
    dm = patcher.model.diffusion_model
    o = dm(inp["x"], inp["timesteps"], inp["context"], inp["context"].shape[1])
    return o.clone(), {k: v.detach().clone() for k, v in dm.state_dict().items()}


manifest = {
    "description": "LoRA on Z-Image (NextDiT): tiny LoRA files (ComfyUI, diffusers, Kohya/SimpleTuner keys) "
                   "applied by ComfyUI's LoraLoaderModelOnly to the Z-Image set's tiny NextDiT; patched weights "
                   "and one forward of the patched model.",
    "reference": {"comfyui_commit": zman["reference"]["comfyui_commit"],
                  "code": "comfy.lora.model_lora_keys_unet (Lumina2 branch: comfy.utils.z_image_to_diffusers), "
                          "comfy.lora.load_lora, comfy.lora.calculate_weight through nodes.LoraLoaderModelOnly "
                          "and ModelPatcher.patch_model; comfy.ldm.lumina.model.NextDiT.forward",
                  "generator": "gen/make_zimage_lora.py", "harness": "../shared/tools/comfyref/comfy_env.py",
                  "override": "model_detection: the Z-Image branch's values for the tiny dim from the Z-Image "
                              "set's config + a ZImage config class matching the tiny dim (the set's own)"},
    "family": "zimage",
    "family_set": "../shared/testdata/zimage (model key zimage)",
    "loras": {n: {"file": f"loras/{n}.safetensors", "comfy_name": f"loras/{n}.safetensors"} for n in LORAS},
    "cases": [],
}
base = v1(nodes.UNETLoader, unet_name=os.path.basename(m["comfy_name"]), weight_dtype="default")[0]
for case in CASES:
    g = torch.Generator().manual_seed(case["seed"])
    inp = {"x": torch.randn(case["x"], generator=g),
           "timesteps": torch.tensor([case["sigma"]], dtype=torch.float32),
           "context": torch.randn([1, case["ctx_tokens"], CAP], generator=g)}
    base_out, base_sd = forward(base, inp)
    assert all(v.dtype == torch.float32 for v in base_sd.values()), "ComfyUI keeps this NextDiT in float32 here"
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
    assert all(k in changed for k in case.get("weights", [])), (case["id"], case.get("weights"), changed)
    path = f"golden/{case['id']}.safetensors"
    stio.save({k: v.contiguous() for k, v in rec.items()}, os.path.join(out, path))
    tensors = {}
    for k, v in rec.items():
        role = "input" if k.startswith("input.") else "patched_weight" if k.startswith("weight.") else "output"
        tol = {"atol": 1e-6, "rtol": 1e-6} if role == "patched_weight" else TOL
        tensors[k] = {"role": role, "shape": list(v.shape), "dtype": "F32", "tolerance": tol}
    manifest["cases"].append({
        "id": case["id"], "component": "zimage_lora", "file": path, "model": "zimage", "tensors": tensors,
        "loras": [{"lora": n, "strength": s} for n, s in case["loras"]],
        "node": "LoraLoaderModelOnly (one per LoRA, in order)",
        "inputs": {"x": case["x"], "sigma": case["sigma"], "timesteps": "sigma (multiplier 1)",
                   "ctx_tokens": case["ctx_tokens"], "num_tokens": "ctx_tokens", "seed": case["seed"]},
        "patched_params": changed,
        "recorded_weights": list(case.get("weights", [])),
        "not_loaded": unloaded,
        "tolerance_note": "base_out / out: the Z-Image set's dit_zimage tolerance; weight.*: float32 arithmetic "
                          "of W + (strength*alpha/rank) * up@down (summation order may differ)",
    })
    print(case["id"], len(changed), "params patched, not loaded:", unloaded,
          "max |out-base| =", float((out_t - base_out).abs().max()))
json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)
open(os.path.join(out, "manifest.json"), "a").write("\n")
