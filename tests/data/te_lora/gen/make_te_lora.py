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
  zimage_te_peft the only names ComfyUI maps for a Qwen3 (text_encoders.qwen3_4b.transformer.<HF key>),
                 lora_A/lora_B(.alpha), BF16, on layers 0-2 (the last one is past the layer CLIPTextEncode
                 reads); a .diff on an input_layernorm; a Kohya lora_te_ name (not loaded on a Qwen3) and one
                 diffusion_model. key of the NextDiT
ComfyUI runs through ../shared/tools/comfyref/flux/flux_env.py (the Flux set's harness: fp32 text
encoders, tiny T5 / CLIP-L configs as model_options). Per case: nodes.DualCLIPLoader(type flux) on the set's
clip_l and t5xxl_fp16, nodes.UNETLoader on flux_dev, nodes.LoraLoader once per LoRA of the case (in order,
with its strength_model and strength_clip), then nodes.CLIPTextEncode of the case's prompt on the CLIP
before (base.*) and after (cond, pooled) the LoRAs. Z-Image (when ../shared/testdata/zimage is there): nodes.CLIPLoader
(type lumina2) on the set's qwen_3_4b, UNETLoader on its NextDiT, LoraLoader, then CLIPTextEncode's
computation on the token ids the Z-Image set records for the prompt (its zimage_text case: ComfyUI's
ZImageTokenizer needs transformers' Qwen2Tokenizer, which the harness lacks; the Qwen2Tokenizer the
tokenizer object is built with is a stand-in that is never asked to tokenize), with the set's overrides
(detect_te_model takes the tiny width for Qwen3-4B; the tiny config as model_options qwen3_4b_model_config).
Recorded: base.cond, cond (no pooled output). Recorded: base.cond, base.pooled, cond, pooled, and (cases of
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

# ---- Z-Image: CLIPLoader(type lumina2) on the tiny Qwen3 ----------------------------------------------
zdir = os.path.join(shared, "testdata", "zimage")
if os.path.exists(os.path.join(zdir, "manifest.json")):
    zman = json.load(open(os.path.join(zdir, "manifest.json")))
    qc = zman["models"]["qwen3_4b"]["config"]
    QH, QF, QL = qc["hidden_size"], qc["intermediate_size"], qc["num_hidden_layers"]
    QHD = qc["head_dim"]
    QQ, QKV = qc["num_attention_heads"] * QHD, qc["num_key_value_heads"] * QHD
    zcfg = zman["models"]["zimage"]["config"]
    ZD = zcfg["dim"]
    import comfy.sd  # noqa: E402
    import comfy.text_encoders.z_image as z_image  # noqa: E402
    _detect_te = comfy.sd.detect_te_model

    def detect_te_tiny(sd):
        w = sd.get("model.layers.0.post_attention_layernorm.weight")
        if w is not None and "model.layers.0.self_attn.q_norm.weight" in sd and w.shape[0] == QH:
            return comfy.sd.TEModel.QWEN3_4B
        return _detect_te(sd)
    comfy.sd.detect_te_model = detect_te_tiny

    class Qwen2TokenizerStandIn:
        """the tokenizer object ZImageTokenizer builds; never asked to tokenize here (ids are given)"""

        @classmethod
        def from_pretrained(cls, *a, **k):
            return cls()

        def __call__(self, text, **kw):
            return {"input_ids": []}

        def get_vocab(self):
            return {}
    z_image.Qwen2Tokenizer = Qwen2TokenizerStandIn
    flux_env.STATE["te_options"]["qwen3_4b_model_config"] = {k: v for k, v in qc.items() if k != "head_dim"}

    # the NextDiT (its detection override, as make_zimage_lora.py does)
    import comfy.model_detection  # noqa: E402
    import comfy.supported_models  # noqa: E402
    _detect = comfy.model_detection.detect_unet_config

    def detect_tiny(state_dict, key_prefix, metadata=None):
        c = _detect(state_dict, key_prefix, metadata=metadata)
        if c is not None and c.get("image_model") == "lumina2" and c.get("dim") == ZD:
            c.update({"n_heads": zcfg["n_heads"], "n_kv_heads": zcfg["n_kv_heads"], "axes_dims": zcfg["axes_dims"],
                      "axes_lens": zcfg["axes_lens"], "rope_theta": zcfg["rope_theta"],
                      "ffn_dim_multiplier": 8.0 / 3.0, "z_image_modulation": True, "time_scale": zcfg["time_scale"],
                      "pad_tokens_multiple": zcfg["pad_tokens_multiple"]})
        return c
    comfy.model_detection.detect_unet_config = detect_tiny

    class TinyZImage(comfy.supported_models.ZImage):
        unet_config = {"image_model": "lumina2", "dim": ZD}
    comfy.supported_models.models.insert(0, TinyZImage)

    def zimage_te_peft():
        rng = np.random.Generator(np.random.PCG64(2103))
        sd = {}
        mods = [  # (name, rows, cols, alpha)
            ("text_encoders.qwen3_4b.transformer.model.layers.0.self_attn.q_proj", QQ, QH, 2.0),
            ("text_encoders.qwen3_4b.transformer.model.layers.0.self_attn.v_proj", QKV, QH, None),
            ("text_encoders.qwen3_4b.transformer.model.layers.1.self_attn.o_proj", QH, QQ, 4.0),
            ("text_encoders.qwen3_4b.transformer.model.layers.1.mlp.down_proj", QH, QF, 2.0),
            (f"text_encoders.qwen3_4b.transformer.model.layers.{QL - 1}.mlp.gate_proj", QF, QH, 2.0),
            ("lora_te_text_model_encoder_layers_0_self_attn_q_proj", QH, QH, None),
            ("diffusion_model.layers.0.attention.out", ZD, ZD, 2.0),
        ]
        for m, r, c, a in mods:
            up, down = factors(rng, r, c, torch.bfloat16)
            sd[f"{m}.lora_B.weight"] = up
            sd[f"{m}.lora_A.weight"] = down
            if a is not None:
                sd[f"{m}.alpha"] = torch.tensor(a, dtype=torch.bfloat16)
        sd["text_encoders.qwen3_4b.transformer.model.layers.0.input_layernorm.diff"] = torch.from_numpy(
            rng.normal(0, 0.3, (QH,)).astype(np.float32)).to(torch.bfloat16)
        return sd

    ZLORAS = {"zimage_te_peft": zimage_te_peft()}
    for name, sd in ZLORAS.items():
        path = os.path.join(out, "loras", name + ".safetensors")
        stio.save(sd, path, {"note": "random factors from make_te_lora.py; not a trained LoRA"})
        os.symlink(os.path.abspath(path), os.path.join(root, "loras", name + ".safetensors"))
        manifest["loras"][name] = {"file": f"loras/{name}.safetensors", "comfy_name": f"loras/{name}.safetensors"}
    for key in ("zimage", "qwen3_4b"):
        m = zman["models"][key]
        os.symlink(os.path.abspath(os.path.join(zdir, m["file"])), os.path.join(root, m["comfy_name"]))
    for k in list(getattr(folder_paths, "filename_list_cache", {}).keys()):
        del folder_paths.filename_list_cache[k]
    manifest["sets"]["zimage"] = "../shared/testdata/zimage (models by key: zimage, qwen3_4b; prompt ids of zimage_text)"
    ztext = [c for c in zman["cases"] if c["id"] == "zimage_text"][0]
    ZTOL = ztext["tolerance"]
    zprompt = ztext["settings"]["text_prompts"]["0"]
    zg = stio.load(os.path.join(zdir, ztext["file"]))
    zids = [int(i) for i in zg["p0.ids"].reshape(-1).tolist()]

    def zencode(clip):
        tokens = {"qwen3_4b": [[(i, 1.0) for i in zids]]}
        cond = clip.encode_from_tokens_scheduled(tokens)
        sd = {k: v.detach().clone().float() for k, v in clip.cond_stage_model.state_dict().items()}
        return cond[0][0].float().clone(), sd

    zclip_inputs = {"clip_name": os.path.basename(zman["models"]["qwen3_4b"]["comfy_name"]), "type": "lumina2"}
    zmodel = v1(nodes.UNETLoader, unet_name=os.path.basename(zman["models"]["zimage"]["comfy_name"]),
                weight_dtype="default")[0]
    ZCASES = [{"id": "zimage_te_peft", "loras": [["zimage_te_peft", 1.0, 0.8]]},
              {"id": "zimage_te_neg", "loras": [["zimage_te_peft", 0.0, -1.5]]}]
    for case in ZCASES:
        clip0 = v1(nodes.CLIPLoader, **zclip_inputs)[0]
        base_cond, base_sd = zencode(clip0)
        comfy.model_management.unload_all_models()
        not_loaded.keys = []
        m, clip = zmodel, clip0
        for lname, sm, sc in case["loras"]:
            m, clip = v1(nodes.LoraLoader, model=m, clip=clip, lora_name=lname + ".safetensors", strength_model=sm,
                         strength_clip=sc)
        cond, sd = zencode(clip)
        comfy.model_management.unload_all_models()
        changed = [k for k, v in sd.items() if not torch.equal(v, base_sd[k])]
        rec = {"base.cond": base_cond, "cond": cond}
        if case is ZCASES[0]:  # (the same LoRA's weights again at another strength: its cond checks them)
            for k in changed:
                rec["weight." + k] = sd[k]
        path = f"golden/{case['id']}.safetensors"
        stio.save({k: v.contiguous() for k, v in rec.items()}, os.path.join(out, path))
        manifest["cases"].append({
            "id": case["id"], "component": "te_lora", "family": "zimage", "file": path,
            "clip_loader": {"class_type": "CLIPLoader", "inputs": zclip_inputs, "files": {"clip_name": "qwen3_4b"}},
            "model": "zimage", "unet_name": os.path.basename(zman["models"]["zimage"]["comfy_name"]),
            "text": zprompt, "token_ids": "the Z-Image set's zimage_text p0.ids (ComfyUI's ZImageTokenizer of the text)",
            "loras": [{"lora": n, "strength_model": sm, "strength_clip": sc} for n, sm, sc in case["loras"]],
            "node": "LoraLoader, then CLIPTextEncode (CLIP.encode_from_tokens_scheduled on the recorded ids)",
            "tensors": {k: {"role": "patched_weight" if k.startswith("weight.") else "expected",
                            "shape": list(v.shape), "dtype": "F32",
                            "tolerance": {"atol": 1e-6, "rtol": 1e-6} if k.startswith("weight.") else ZTOL}
                        for k, v in rec.items()},
            "patched_te_params": changed,
            "not_loaded": sorted(set(not_loaded.keys)),
            "tolerance_note": "cond: the Z-Image set's zimage_text tolerance; weight.<key>: the patched weight as "
                              "ComfyUI holds it (BF16: dtype_llama), as float32",
        })
        print(case["id"], len(changed), "text-encoder params patched, not loaded:", sorted(set(not_loaded.keys)),
              "max |cond-base| =", float((cond - base_cond).abs().max()))

json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)
open(os.path.join(out, "manifest.json"), "a").write("\n")
