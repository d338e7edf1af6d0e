"""LoRA on the text encoders of the transformer families: tiny LoRA files with text-encoder keys in the
layouts ComfyUI's comfy.lora.model_lora_keys_clip maps, and the conditioning ComfyUI's own LoraLoader +
CLIPTextEncode make of them on the Flux set's tiny CLIP-L + T5-XXL (DualCLIPLoader type flux).

    /usr/bin/python3 make_te_lora.py COMFY EINOPS CLIP NODE_MODULES SHARED OUT_DIR

COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at the commit in
its COMFY_COMMIT); NODE_MODULES: the npm folder of ../shared/tools/comfyref/flux/package.json (the T5
tokenizer of flux_env); SHARED: ../shared (the Flux set); OUT_DIR: tests/data/te_lora. Writes
OUT_DIR/loras/*.safetensors, OUT_DIR/golden/*.safetensors and OUT_DIR/manifest.json.

The LoRA files come from numpy's PCG64 seeded per file (no model is trained; only the key layouts and the
arithmetic matter):
  flux_te_kohya  Kohya / OneTrainer names, lora_down/lora_up + alpha, F32: lora_te1_text_model_encoder_
                 layers_N_<module> (CLIP-L), lora_te3_<T5 key with _> and lora_te2_<T5 key with _> (both the
                 T5 on Flux), lora_te3_..._relative_attention_bias (the relative position table), and one lora_unet_ key of the DiT
  flux_te_peft   diffusers / PEFT names, lora_A/lora_B, F16, no alphas: text_encoders.clip_l.transformer.
                 <HF key>, text_encoder.text_model.encoder.layers.N.<module> (diffusers CLIP-L),
                 text_encoders.t5xxl.transformer.<HF key>; a .diff on the T5's final_layer_norm; a
                 text-encoder key of a layer the model lacks (not loaded)
ComfyUI runs through ../shared/tools/comfyref/flux/flux_env.py (the Flux set's harness: fp32 text
encoders, tiny T5 / CLIP-L configs as model_options). Per case: nodes.DualCLIPLoader(type flux) on the set's
clip_l and t5xxl_fp16, nodes.UNETLoader on flux_dev, nodes.LoraLoader once per LoRA of the case (in order,
with its strength_model and strength_clip), then nodes.CLIPTextEncode of the case's prompt on the CLIP
before (base.*) and after (cond, pooled) the LoRAs. Recorded: base.cond, base.pooled, cond, pooled, and (cases of
one LoRA) weight.<key> for every text-encoder parameter the LoRA changed (its patched value, float32); the
manifest lists the text-encoder parameters the LoRAs changed (the CLIP's state-dict keys) and the LoRA keys
comfy.lora.load_lora did not load ("lora key not loaded").
"""
import json
import logging
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

fdir = os.path.join(shared, "testdata", "flux")
fman = json.load(open(os.path.join(fdir, "manifest.json")))
dev = fman["models"]["flux_dev"]["config"]
head_dim = dev["hidden_size"] // dev["num_heads"]
t5c = fman["models"]["t5xxl"]["config"]
lc = fman["models"]["clip_l"]["config"]
flux_env.install_overrides({head_dim: dev["axes_dim"]}, fman["models"]["ae"]["config"],
                           {"t5xxl_model_config": t5c, "clip_l_model_config": lc})
# comfy.sd.load_text_encoder_state_dicts replaces a CLIP's <name>_model_config by
# long_clipl.model_options_long_clip's {max_position_embeddings: N}; the tiny config is kept under it (the
# same override the SD3 set's harness makes)
import comfy.text_encoders.long_clipl as long_clipl  # noqa: E402
_long = long_clipl.model_options_long_clip


def _long_keep_tiny(sd, tokenizer_data, model_options):
    td, mo = _long(sd, tokenizer_data, model_options)
    for k in ("clip_l_model_config", "clip_g_model_config"):
        if k in model_options and mo.get(k) is not model_options[k]:
            mo[k] = {**model_options[k], **mo.get(k, {})}
    return td, mo


long_clipl.model_options_long_clip = _long_keep_tiny
text_case = [c for c in fman["cases"] if c["id"] == "flux_text"][0]
TOL = text_case["tolerance"]
H = dev["hidden_size"]
D5, F5, L5 = t5c["d_model"], t5c["d_ff"], t5c["num_layers"]
INNER5 = t5c["num_heads"] * t5c["d_kv"]
DL, FL, LL = lc["hidden_size"], lc["intermediate_size"], lc["num_hidden_layers"]

os.makedirs(os.path.join(out, "loras"), exist_ok=True)
os.makedirs(os.path.join(out, "golden"), exist_ok=True)
RANK = 4


def factors(rng, rows, cols, dtype):
    """(up [rows, RANK], down [RANK, cols]) with entries ~ N(0, 0.2)"""
    up = torch.from_numpy(rng.normal(0, 0.2, (rows, RANK)).astype(np.float32)).to(dtype)
    down = torch.from_numpy(rng.normal(0, 0.2, (RANK, cols)).astype(np.float32)).to(dtype)
    return up, down


def flux_te_kohya():
    rng = np.random.Generator(np.random.PCG64(2101))
    sd = {}
    mods = [  # (name, rows, cols, alpha)
        ("lora_te1_text_model_encoder_layers_0_self_attn_q_proj", DL, DL, 2.0),
        ("lora_te1_text_model_encoder_layers_1_self_attn_out_proj", DL, DL, 4.0),
        (f"lora_te1_text_model_encoder_layers_{LL - 1}_mlp_fc1", FL, DL, 1.0),
        ("lora_te3_encoder_block_0_layer_0_SelfAttention_q", INNER5, D5, 2.0),
        ("lora_te3_encoder_block_0_layer_0_SelfAttention_v", INNER5, D5, 8.0),
        (f"lora_te3_encoder_block_{L5 - 1}_layer_1_DenseReluDense_wi_0", F5, D5, 4.0),
        (f"lora_te2_encoder_block_{L5 - 1}_layer_1_DenseReluDense_wo", D5, F5, 2.0),
        ("lora_te3_encoder_block_0_layer_0_SelfAttention_relative_attention_bias", t5c["relative_attention_num_buckets"],
         t5c["num_heads"], 4.0),
        ("lora_unet_double_blocks_0_img_attn_qkv", 3 * H, H, 2.0),
    ]
    for m, r, c, a in mods:
        up, down = factors(rng, r, c, torch.float32)
        sd[f"{m}.lora_up.weight"] = up
        sd[f"{m}.lora_down.weight"] = down
        sd[f"{m}.alpha"] = torch.tensor(a, dtype=torch.float32)
    return sd


def flux_te_peft():
    rng = np.random.Generator(np.random.PCG64(2102))
    sd = {}
    mods = [  # (name, rows, cols)
        ("text_encoders.clip_l.transformer.text_model.encoder.layers.1.self_attn.k_proj", DL, DL),
        ("text_encoders.clip_l.transformer.text_model.encoder.layers.0.mlp.fc2", DL, FL),
        ("text_encoder.text_model.encoder.layers.2.self_attn.v_proj", DL, DL),
        ("text_encoders.t5xxl.transformer.encoder.block.1.layer.0.SelfAttention.o", D5, INNER5),
        ("text_encoders.t5xxl.transformer.encoder.block.0.layer.1.DenseReluDense.wi_1", F5, D5),
        (f"text_encoders.t5xxl.transformer.encoder.block.{L5 + 2}.layer.0.SelfAttention.k", INNER5, D5),
    ]
    for m, r, c in mods:
        up, down = factors(rng, r, c, torch.float16)
        sd[f"{m}.lora_B.weight"] = up
        sd[f"{m}.lora_A.weight"] = down
    sd["text_encoders.t5xxl.transformer.encoder.final_layer_norm.diff"] = torch.from_numpy(
        rng.normal(0, 0.3, (D5,)).astype(np.float32)).to(torch.float16)
    return sd


LORAS = {"flux_te_kohya": flux_te_kohya(), "flux_te_peft": flux_te_peft()}
root = tempfile.mkdtemp(prefix="te_lora_")
for sub in ("diffusion_models", "loras", "text_encoders"):
    os.makedirs(os.path.join(root, sub))
for name, sd in LORAS.items():
    path = os.path.join(out, "loras", name + ".safetensors")
    stio.save(sd, path, {"note": "random factors from make_te_lora.py; not a trained LoRA"})
    os.symlink(os.path.abspath(path), os.path.join(root, "loras", name + ".safetensors"))
for key in ("flux_dev", "t5xxl", "clip_l"):
    m = fman["models"][key]
    os.symlink(os.path.abspath(os.path.join(fdir, m["file"])), os.path.join(root, m["comfy_name"]))
exts = set(folder_paths.supported_pt_extensions)
for sub in ("diffusion_models", "loras", "text_encoders"):
    folder_paths.folder_names_and_paths[sub] = ([os.path.join(root, sub)], exts)
for k in list(getattr(folder_paths, "filename_list_cache", {}).keys()):
    del folder_paths.filename_list_cache[k]

PROMPT = "a tiny red fox in the snow, watercolor"
CASES = [
    {"id": "flux_te_kohya", "loras": [["flux_te_kohya", 0.8, 0.7]], "prompt": PROMPT},
    {"id": "flux_te_peft", "loras": [["flux_te_peft", 1.0, -1.3]], "prompt": "an old stone bridge at dusk"},
    {"id": "flux_te_stack", "loras": [["flux_te_kohya", 1.0, 0.5], ["flux_te_peft", 0.0, 0.9]], "prompt": PROMPT},
]


def v1(cls, **kw):
    return tuple(getattr(cls(), cls.FUNCTION)(**kw))


def encode(clip, text):
    cond = v1(nodes.CLIPTextEncode, clip=clip, text=text)[0]
    sd = {k: v.detach().clone().float() for k, v in clip.cond_stage_model.state_dict().items()}
    return cond[0][0].float().clone(), cond[0][1]["pooled_output"].float().clone(), sd


clip_inputs = {"clip_name1": os.path.basename(fman["models"]["clip_l"]["comfy_name"]),
               "clip_name2": os.path.basename(fman["models"]["t5xxl"]["comfy_name"]), "type": "flux"}
manifest = {
    "description": "LoRA on the text encoders of Flux (CLIP-L + T5-XXL): tiny LoRA files with Kohya / OneTrainer "
                   "and diffusers / PEFT text-encoder keys applied by ComfyUI's LoraLoader (strength_clip) to a "
                   "DualCLIPLoader(type flux) CLIP of the Flux set; CLIPTextEncode conditioning before and after.",
    "reference": {"comfyui_commit": fman["reference"]["comfyui_commit"],
                  "code": "comfy.lora.model_lora_keys_clip, comfy.lora.load_lora, comfy.lora.calculate_weight "
                          "through nodes.LoraLoader (comfy.sd.load_lora_for_models) and the CLIP's "
                          "ModelPatcher; nodes.CLIPTextEncode (comfy.text_encoders.flux.FluxClipModel)",
                  "generator": "gen/make_te_lora.py", "harness": "../shared/tools/comfyref/flux/flux_env.py"},
    "sets": {"flux": "../shared/testdata/flux (models by key: flux_dev, clip_l, t5xxl)"},
    "loras": {n: {"file": f"loras/{n}.safetensors", "comfy_name": f"loras/{n}.safetensors"} for n in LORAS},
    "cases": [],
}
model = v1(nodes.UNETLoader, unet_name=os.path.basename(fman["models"]["flux_dev"]["comfy_name"]),
           weight_dtype="default")[0]
for case in CASES:
    clip0 = v1(nodes.DualCLIPLoader, **clip_inputs)[0]
    base_cond, base_pooled, base_sd = encode(clip0, case["prompt"])
    comfy.model_management.unload_all_models()
    not_loaded.keys = []
    m, clip = model, clip0
    for lname, sm, sc in case["loras"]:
        m, clip = v1(nodes.LoraLoader, model=m, clip=clip, lora_name=lname + ".safetensors", strength_model=sm,
                     strength_clip=sc)
    cond, pooled, sd = encode(clip, case["prompt"])
    comfy.model_management.unload_all_models()
    changed = [k for k, v in sd.items() if not torch.equal(v, base_sd[k])]
    rec = {"base.cond": base_cond, "base.pooled": base_pooled, "cond": cond, "pooled": pooled}
    if len(case["loras"]) == 1:  # (a stack's weights: its output checks them, the data stays small)
        for k in changed:
            rec["weight." + k] = sd[k]
    path = f"golden/{case['id']}.safetensors"
    stio.save({k: v.contiguous() for k, v in rec.items()}, os.path.join(out, path))
    manifest["cases"].append({
        "id": case["id"], "component": "te_lora", "family": "flux", "file": path,
        "clip_loader": {"class_type": "DualCLIPLoader", "inputs": clip_inputs,
                        "files": {"clip_name1": "clip_l", "clip_name2": "t5xxl"}},
        "model": "flux_dev", "unet_name": os.path.basename(fman["models"]["flux_dev"]["comfy_name"]),
        "text": case["prompt"],
        "loras": [{"lora": n, "strength_model": sm, "strength_clip": sc} for n, sm, sc in case["loras"]],
        "node": "LoraLoader (one per LoRA, in order), then CLIPTextEncode",
        "tensors": {k: {"role": "patched_weight" if k.startswith("weight.") else "expected", "shape": list(v.shape),
                        "dtype": "F32",
                        "tolerance": {"atol": 1e-6, "rtol": 1e-6} if k.startswith("weight.") else TOL}
                    for k, v in rec.items()},
        "patched_te_params": changed,
        "not_loaded": sorted(set(not_loaded.keys)),
        "tolerance_note": "cond / pooled: the Flux set's flux_text tolerance (CLIPTextEncode of the same "
                          "encoders); weight.<CLIP state-dict key>: float32 arithmetic of W + (strength*alpha/rank) "
                          "* up@down (summation order may differ)",
    })
    print(case["id"], len(changed), "text-encoder params patched, not loaded:", sorted(set(not_loaded.keys)),
          "max |cond-base| =", float((cond - base_cond).abs().max()),
          "max |pooled-base| =", float((pooled - base_pooled).abs().max()))
json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)
open(os.path.join(out, "manifest.json"), "a").write("\n")
