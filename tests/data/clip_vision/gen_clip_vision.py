#!/usr/bin/python3
"""CLIP vision towers (CLIPVisionLoader / CLIPVisionEncode) and the image preprocessing, made with
ComfyUI's own code on tiny random-weight towers in the real file layouts.

usage: /usr/bin/python3 gen_clip_vision.py COMFY EINOPS CLIP [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts.
Writes the model files, clip_vision_ref.safetensors and manifest.json beside this script (or in
OUT_DIR).

Models: one per ComfyUI config (comfy/clip_vision_config_vitl.json, _h.json, _g.json), each with
the real layer count (24, 32, 48: what comfy.clip_vision.load_clipvision_from_sd detects them by),
the real geometry (224 pixels, 14-pixel patches, 257 positions), 16 heads and activation, but a
width of WIDTH, an MLP of MLP and a projection of PROJ. Keys as HF's CLIPVisionModelWithProjection
files (clip_vision_g.safetensors, CLIP-ViT-H-14 ...): vision_model.* and visual_projection.weight.
ViT-L is stored F32, ViT-H and bigG F16 as the real files are. Each file is loaded back by
comfy.clip_vision.load (ComfyUI's detection on the file; only the widths of the config it picks
are replaced by the tiny ones) and run by nodes.CLIPVisionEncode.

Images: U8 tensors (a loaded picture's values), given to ComfyUI as u8 / 255 in float32. The encode
cases' images have the model's size on their short side, so that clip_preprocess's resize is the
identity (scale 1: weights 1 and 0) and its centre crop and 8-bit quantization are exact: the
antialiased resize is checked by the preprocess cases, where sdflow's float arithmetic for the
resize weights may differ from torch's in the last bits, which can move an 8-bit value sitting on
a rounding edge by one level (the test checks that each such value is on an edge).
Stored per encode case: image_embeds, last_hidden_state, penultimate_hidden_states.
Preprocess cases: comfy.clip_model.clip_preprocess at a small size (the same code at another size;
its output is exact up to float rounding before the 8-bit quantization step).
Runs on Debian's python3-torch 1.13, CPU, float32 (shims set --fp32-text-enc).
"""
import json
import os
import sys
import tempfile

comfy_root, einops_root, clip_root = sys.argv[1:4]
out_dir = sys.argv[4] if len(sys.argv) > 4 else os.path.dirname(os.path.abspath(__file__))
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "../../../../shared/tools/comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(comfy_root, einops_root, clip_root)
import torch  # noqa: E402
import stio  # noqa: E402
import comfy.clip_vision  # noqa: E402
import comfy.clip_model  # noqa: E402
import nodes  # noqa: E402

WIDTH, MLP, PROJ = 32, 64, 16
COMMIT = open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip() \
    if os.path.exists(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")) else ""

# ---- tiny configs under ComfyUI's own detection -------------------------------------------------
picked = []
_Real = comfy.clip_vision.ClipVisionModel
tmpdir = tempfile.mkdtemp()


class TinyClipVisionModel(_Real):
    """ComfyUI's ClipVisionModel on the config file ComfyUI picked, widths made tiny."""

    def __init__(self, json_config):
        picked.append(os.path.basename(json_config))
        cfg = json.load(open(json_config))
        cfg.update(hidden_size=WIDTH, intermediate_size=MLP, projection_dim=PROJ)
        path = os.path.join(tmpdir, "tiny_" + os.path.basename(json_config))
        json.dump(cfg, open(path, "w"))
        super().__init__(path)


comfy.clip_vision.ClipVisionModel = TinyClipVisionModel

KINDS = [  # name, ComfyUI config, stored dtype
    ("vit_l", "clip_vision_config_vitl.json", torch.float32),
    ("vit_h", "clip_vision_config_h.json", torch.float16),
    ("vit_g", "clip_vision_config_g.json", torch.float16),
]


def make_model(name, cfg_name, dtype, seed):
    cfg = json.load(open(os.path.join(comfy_root, "comfy", cfg_name)))
    layers, patch, size = cfg["num_hidden_layers"], cfg["patch_size"], cfg["image_size"]
    npos = (size // patch) ** 2 + 1
    g = torch.Generator().manual_seed(seed)

    def rn(*shape, std=1.0):
        return (torch.randn(*shape, generator=g) * std).to(dtype)

    W, F = WIDTH, MLP
    sd = {
        "vision_model.embeddings.class_embedding": rn(W, std=0.5),
        "vision_model.embeddings.patch_embedding.weight": rn(W, 3, patch, patch, std=(3 * patch * patch) ** -0.5),
        "vision_model.embeddings.position_embedding.weight": rn(npos, W, std=0.2),
        "vision_model.embeddings.position_ids": torch.arange(npos).unsqueeze(0),
        "vision_model.pre_layrnorm.weight": (1 + rn(W, std=0.1).float()).to(dtype),
        "vision_model.pre_layrnorm.bias": rn(W, std=0.1),
        "vision_model.post_layernorm.weight": (1 + rn(W, std=0.1).float()).to(dtype),
        "vision_model.post_layernorm.bias": rn(W, std=0.1),
        "visual_projection.weight": rn(PROJ, W, std=W ** -0.5),
    }
    for i in range(layers):
        p = "vision_model.encoder.layers.%d." % i
        for ln in ("layer_norm1", "layer_norm2"):
            sd[p + ln + ".weight"] = (1 + rn(W, std=0.1).float()).to(dtype)
            sd[p + ln + ".bias"] = rn(W, std=0.1)
        for pr in ("q_proj", "k_proj", "v_proj", "out_proj"):
            sd[p + "self_attn." + pr + ".weight"] = rn(W, W, std=W ** -0.5)
            sd[p + "self_attn." + pr + ".bias"] = rn(W, std=0.05)
        sd[p + "mlp.fc1.weight"] = rn(F, W, std=W ** -0.5)
        sd[p + "mlp.fc1.bias"] = rn(F, std=0.05)
        sd[p + "mlp.fc2.weight"] = rn(W, F, std=F ** -0.5 * 0.5)
        sd[p + "mlp.fc2.bias"] = rn(W, std=0.05)
    fname = "tiny_clip_vision_%s.safetensors" % name
    stio.save(sd, os.path.join(out_dir, fname))
    return fname, layers


def image_u8(seed, n, h, w, c):
    """A smooth picture plus noise, as 8-bit values."""
    g = torch.Generator().manual_seed(seed)
    yy = torch.linspace(0, 1, h).view(1, h, 1, 1)
    xx = torch.linspace(0, 1, w).view(1, 1, w, 1)
    ph = torch.rand(n, 1, 1, c, generator=g) * 6.28
    v = 0.5 + 0.3 * torch.sin(6 * xx + 4 * yy + ph) + 0.2 * torch.rand(n, h, w, c, generator=g)
    return torch.clamp(v * 255, 0, 255).round().to(torch.uint8)


def as_image(u8):
    return u8.float() / 255.0


ref = {}
manifest = {
    "generator": "tests/data/clip_vision/gen_clip_vision.py",
    "comfyui_commit": COMMIT,
    "torch": "Debian python3-torch %s, CPU, float32 (--fp32-text-enc)" % torch.__version__,
    "file": "clip_vision_ref.safetensors",
    "models": {},
    "cases": [],
}

models = {}
for k, (name, cfg_name, dtype) in enumerate(KINDS):
    fname, layers = make_model(name, cfg_name, dtype, 100 + k)
    del picked[:]
    cv = comfy.clip_vision.load(os.path.join(out_dir, fname))
    assert cv is not None and picked == [cfg_name], (name, picked)
    models[name] = cv
    cfg = json.load(open(os.path.join(comfy_root, "comfy", cfg_name)))
    manifest["models"][name] = {
        "file": fname, "comfyui_config": cfg_name, "dtype": str(dtype).replace("torch.", ""),
        "layers": layers, "width": WIDTH, "mlp": MLP, "projection_dim": PROJ,
        "heads": cfg["num_attention_heads"], "hidden_act": cfg["hidden_act"],
        "image_size": cfg["image_size"], "patch_size": cfg["patch_size"],
    }

# Tolerances: float32 through 24..48 pre-LN layers of width 32; the 8-bit quantization of the
# preprocessed image is exact in both (same float ops) except where a value lies within float
# rounding of a half step, which the test reports separately.
ENC_TOL = {"atol": 2e-4, "rtol": 1e-3}
ENCODE_CASES = [  # id, model, image (seed, n, h, w, c), crop
    ("l_center_wide", "vit_l", (1, 2, 224, 300, 3), "center"),
    ("l_none_exact_rgba", "vit_l", (5, 1, 224, 224, 4), "none"),
    ("h_center_tall", "vit_h", (2, 1, 262, 224, 3), "center"),
    ("g_none_exact", "vit_g", (3, 1, 224, 224, 3), "none"),
    ("g_center_wide", "vit_g", (4, 1, 224, 251, 3), "center"),
]
for cid, mname, (seed, n, h, w, c), crop in ENCODE_CASES:
    u8 = image_u8(seed, n, h, w, c)
    ref[cid + "/image"] = u8
    out = nodes.CLIPVisionEncode().encode(models[mname], as_image(u8), crop)[0]
    outs = []
    for key in ("image_embeds", "last_hidden_state", "penultimate_hidden_states"):
        t = out[key].float().contiguous()
        ref[cid + "/" + key] = t
        outs.append(dict(ENC_TOL, tensor=cid + "/" + key, output=key))
    assert out["mm_projected"] is None
    manifest["cases"].append({
        "id": cid, "component": "encode", "model": mname, "crop": crop,
        "image": cid + "/image", "outputs": outs,
        "reference": "comfy.clip_vision.load(model file) -> nodes.CLIPVisionEncode().encode(clip_vision, "
                     "image u8/255, crop)",
    })

PRE_CASES = [  # id, image (seed, n, h, w, c), size, crop
    ("pre_down_center", (10, 1, 90, 70, 3), 32, True),
    ("pre_down_none", (10, 1, 90, 70, 3), 32, False),
    ("pre_up_center", (11, 2, 20, 27, 3), 32, True),
    ("pre_up_none", (11, 2, 20, 27, 3), 32, False),
    ("pre_exact_rgba", (12, 1, 24, 24, 4), 24, True),
    ("pre_mixed", (13, 1, 17, 120, 3), 40, True),
    ("pre_mixed_none", (13, 1, 17, 120, 3), 40, False),
]
for cid, (seed, n, h, w, c), size, crop in PRE_CASES:
    u8 = image_u8(seed, n, h, w, c)
    ref[cid + "/image"] = u8
    pv = comfy.clip_model.clip_preprocess(as_image(u8), size=size, crop=crop)
    ref[cid + "/pixel_values"] = pv.contiguous()
    manifest["cases"].append({
        "id": cid, "component": "preprocess", "size": size, "crop": crop,
        "mean": [0.48145466, 0.4578275, 0.40821073], "std": [0.26862954, 0.26130258, 0.27577711],
        "image": cid + "/image", "pixel_values": cid + "/pixel_values",
        "reference": "comfy.clip_model.clip_preprocess(image u8/255, size, crop) (ComfyUI's default mean/std)",
    })

# ---- style models (StyleModelLoader / StyleModelApply) ------------------------------------------
# ComfyUI builds StyleAdapter(width=1024, context_dim=768, num_head=8, n_layes=3, num_token=8) for any
# file with style_embedding; the tiny one keeps the heads, layers and tokens, with the width of the
# tiny ViT-L tower (its last_hidden_state is the input) and a context of STYLE_CTX.
import comfy.sd  # noqa: E402
import comfy.t2i_adapter.adapter as t2i  # noqa: E402

STYLE_CTX = 24
style_args = []
_RealStyle = t2i.StyleAdapter


class TinyStyleAdapter(_RealStyle):
    def __init__(self, width=1024, context_dim=768, num_head=8, n_layes=3, num_token=4):
        style_args.append(dict(width=width, context_dim=context_dim, num_head=num_head, n_layes=n_layes,
                               num_token=num_token))
        super().__init__(width=WIDTH, context_dim=STYLE_CTX, num_head=num_head, n_layes=n_layes,
                         num_token=num_token)


t2i.StyleAdapter = TinyStyleAdapter
torch.manual_seed(200)
sm = TinyStyleAdapter(width=1024, context_dim=768, num_head=8, n_layes=3, num_token=8)
style_sd = {}
for k, v in sm.state_dict().items():
    g = torch.Generator().manual_seed(300 + len(style_sd))
    if k.endswith("ln_1.weight") or k.endswith("ln_2.weight") or k in ("ln_pre.weight", "ln_post.weight"):
        style_sd[k] = 1 + 0.1 * torch.randn(v.shape, generator=g)
    elif k.endswith("bias"):
        style_sd[k] = 0.05 * torch.randn(v.shape, generator=g)
    else:
        style_sd[k] = torch.randn(v.shape, generator=g) * (v.shape[-1] ** -0.5 if v.dim() == 2 else WIDTH ** -0.5)
style_sd = {k: v.to(torch.float16) for k, v in style_sd.items()}  # stored F16 as the real file
STYLE_FILE = "tiny_t2i_style.safetensors"
stio.save(style_sd, os.path.join(out_dir, STYLE_FILE))
del style_args[:]
style = comfy.sd.load_style_model(os.path.join(out_dir, STYLE_FILE))
assert style_args == [dict(width=1024, context_dim=768, num_head=8, n_layes=3, num_token=8)], style_args
manifest["style_model"] = {"file": STYLE_FILE, "width": WIDTH, "context": STYLE_CTX, "heads": 8, "layers": 3,
                           "tokens": 8, "dtype": "float16",
                           "comfyui": "comfy.sd.load_style_model: StyleAdapter(width=1024, context_dim=768, "
                                      "num_head=8, n_layes=3, num_token=8) with width and context_dim made tiny"}

# The CLIP vision output of encode case l_center_wide (two images) feeds every style case.
cvo = nodes.CLIPVisionEncode().encode(models["vit_l"], as_image(ref["l_center_wide/image"]), "center")[0]
get_cond = style.get_cond(cvo).float()
ref["style/get_cond"] = get_cond.contiguous()
STYLE_TOL = {"atol": 1e-4, "rtol": 1e-4}
manifest["cases"].append({
    "id": "style_get_cond", "component": "style", "clip_vision_output": "l_center_wide",
    "outputs": [dict(STYLE_TOL, tensor="style/get_cond", output="cond")],
    "reference": "comfy.sd.load_style_model(file).get_cond(CLIPVisionEncode output of l_center_wide)",
})

g = torch.Generator().manual_seed(400)
txt_a = torch.randn(1, 5, STYLE_CTX, generator=g)
txt_b = torch.randn(1, 7, STYLE_CTX, generator=g)
pooled = torch.randn(1, 12, generator=g)
old_mask = (torch.randn(1, 7 + 6, 7 + 6, generator=g) * 2).to(torch.float16)
ref["style/txt_a"], ref["style/txt_b"], ref["style/pooled"] = txt_a, txt_b, pooled
ref["style/old_mask"] = old_mask
APPLY_CASES = [  # id, strength, strength_type, entries with an existing mask
    ("style_multiply", 0.7, "multiply", False),
    ("style_attn_bias", 0.5, "attn_bias", False),
    ("style_attn_bias_one", 1.0, "attn_bias", False),
    ("style_attn_bias_zero", 0.0, "attn_bias", False),
    ("style_mask_multiply", 1.25, "multiply", True),
    ("style_mask_attn_bias", 2.0, "attn_bias", True),
]
for cid, strength, stype, with_mask in APPLY_CASES:
    cond_in = [[txt_a, {"pooled_output": pooled}]]
    entry_b = {"pooled_output": pooled}
    if with_mask:
        entry_b.update(attention_mask=old_mask, attention_mask_img_shape=(2, 3))
    cond_in.append([txt_b, entry_b])
    out = nodes.StyleModelApply().apply_stylemodel(cond_in, style, cvo, strength, stype)[0]
    entries = []
    for k, (t, keys) in enumerate(out):
        e = {"cond": "%s/%d/cond" % (cid, k)}
        ref[e["cond"]] = t.contiguous()
        if "attention_mask" in keys:
            e["attention_mask"] = "%s/%d/attention_mask" % (cid, k)
            e["attention_mask_dtype"] = str(keys["attention_mask"].dtype).replace("torch.", "")
            ref[e["attention_mask"]] = keys["attention_mask"].contiguous()
            e["attention_mask_img_shape"] = list(keys["attention_mask_img_shape"])
        entries.append(e)
    manifest["cases"].append({
        "id": cid, "component": "style_apply", "clip_vision_output": "l_center_wide",
        "strength": strength, "strength_type": stype,
        "conditioning": [{"cond": "style/txt_a", "pooled_output": "style/pooled"},
                         dict({"cond": "style/txt_b", "pooled_output": "style/pooled"},
                              **({"attention_mask": "style/old_mask", "attention_mask_img_shape": [2, 3]}
                                 if with_mask else {}))],
        "entries": entries, "tolerance": STYLE_TOL,
        "reference": "nodes.StyleModelApply().apply_stylemodel(conditioning, style model, CLIPVisionEncode "
                     "output of l_center_wide, strength, strength_type)",
    })

stio.save(ref, os.path.join(out_dir, manifest["file"]))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1, sort_keys=False)
    f.write("\n")
print("wrote", out_dir)
