#!/usr/bin/python3
"""SDXL ControlNet Union (xinsir controlnet-union-sdxl-1.0 / ProMax layout) and
SetUnionControlNetType, computed by ComfyUI's own code on the shared tiny SDXL.

usage: /usr/bin/python3 make_union_controlnet.py COMFY EINOPS CLIP SHARED [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts
  SHARED:            ../shared (testdata/models/tiny-sdxl.safetensors, its manifest, data/clip)
  OUT_DIR:           tests/data/union_controlnet (models/, golden/, manifest.json)

The ControlNet file is the diffusers layout xinsir publishes (what ComfyUI's load_controlnet_state_dict
reads in its "diffusers format" branch): conv_in, time_embedding, add_embedding, down_blocks.*, mid_block.*,
controlnet_cond_embedding.{conv_in,blocks.N,conv_out}, controlnet_down_blocks.N, controlnet_mid_block, and the
Union parts control_add_embedding.linear_{1,2}, task_embedding, transformer_layes.0.{attn.in_proj_weight,
attn.in_proj_bias, attn.out_proj, ln_1, ln_2, mlp.c_fc, mlp.c_proj}, spatial_ch_projs.
Its encoder is the tiny SDXL UNet's own encoder (time_embed, label_emb, input_blocks, middle_block, as a
ControlNet is initialised from its UNet), renamed by the inverse of comfy.utils.unet_to_diffusers; the rest
(hint encoder, zero convs, Union parts) is random: N(0, 0.05) per parameter from torch.Generator seeded
2024 + its index in sorted order, F16. Only that rest is stored (models/union_parts.safetensors); the manifest's
"encoder_keys" says which checkpoint tensor each encoder name takes, so a test writes the same file.

Two shims, both in this script, none in ComfyUI's files:
  * ComfyUI's diffusers-layout detection (model_detection.unet_config_from_diffusers_unet) matches a fixed
    list of real configs; the tiny SDXL's config (the shared manifest's) is accepted as well.
  * cldm.ControlNet builds its Union transformer 320 wide (num_trans_channel, num_proj_channel): the width of
    the real SDXL model_channels it is added to. Here it is built at the tiny model_channels (32), with
    ComfyUI's own ResBlockUnionControlnet (8 heads) and Linear; the forward code is ComfyUI's, unchanged.

Golden (golden/union_controlnet.safetensors), per manifest case:
  fwd_<type>.*  comfy.cldm.cldm.ControlNet.forward(x, hint, timesteps, context, y, control_type=...) with the
                control_type SetUnionControlNetType sets ([] for "auto", [n] otherwise): output.N, middle.
  unet.*        the tiny SDXL UNet (UNetModel.forward) with fwd_<type>'s residuals times strength as control
                (out_control), and without (out_base).
  ks_<n>.*      nodes.common_ksampler on ControlNetApplyAdvanced(CLIPTextEncode(positive/negative),
                SetUnionControlNetType(control_net, type), image, strength, start, end): the latent.
"""
import json
import os
import sys
import types

comfy_root, einops_root, clip_root, shared = sys.argv[1:5]
out_dir = sys.argv[5] if len(sys.argv) > 5 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(shared, "tools", "comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(comfy_root, einops_root, clip_root)
server = types.ModuleType("server")
server.PromptServer = types.SimpleNamespace(instance=None)
sys.modules.setdefault("server", server)

import torch  # noqa: E402

torch.set_grad_enabled(False)
import stio  # noqa: E402
import comfy.cldm.cldm as cldm  # noqa: E402
import comfy.controlnet  # noqa: E402
import comfy.model_detection as md  # noqa: E402
import comfy.model_management  # noqa: E402
import comfy.utils  # noqa: E402
import nodes  # noqa: E402
from comfy.cldm.control_types import UNION_CONTROLNET_TYPES  # noqa: E402
from comfy_extras import nodes_controlnet  # noqa: E402

testdata = os.path.join(shared, "testdata")
tman = json.load(open(os.path.join(testdata, "manifest.json")))
setcfg = {k: v["config"] for k, v in tman["models"].items() if k in ("sd1", "sdxl")}
XL = dict(setcfg["sdxl"]["unet_config"])
import comfy.supported_models as sm  # noqa: E402


class TinySDXL(sm.SDXL):
    # the tiny UNet's widths, so that ComfyUI's detection accepts it (as make_diff_controlnet.py)
    unet_config = {k: XL[k] for k in ("model_channels", "use_linear_in_transformer", "transformer_depth",
                                      "context_dim", "adm_in_channels", "use_temporal_attention")}


sm.models.insert(0, TinySDXL)
CKPT = "testdata/" + tman["models"]["sdxl"]["file"]
ckpt_path = os.path.join(shared, CKPT)
NUM_TYPES = 8  # ProMax: every UNION_CONTROLNET_TYPES entry

# ---- shims ----------------------------------------------------------------------------------------
_orig_detect = md.unet_config_from_diffusers_unet


def detect_with_tiny(state_dict, dtype=None):
    r = _orig_detect(state_dict, dtype)
    if r is None and "conv_in.weight" in state_dict and "add_embedding.linear_1.weight" in state_dict \
            and state_dict["conv_in.weight"].shape[0] == XL["model_channels"] \
            and state_dict["add_embedding.linear_1.weight"].shape[1] == XL["adm_in_channels"]:
        r = md.convert_config(dict(XL, dtype=dtype))
    return r


md.unet_config_from_diffusers_unet = detect_with_tiny
_CN = cldm.ControlNet


class TinyUnionControlNet(_CN):
    def __init__(self, *args, union_controlnet_num_control_type=None, **kw):
        super().__init__(*args, union_controlnet_num_control_type=union_controlnet_num_control_type, **kw)
        if union_controlnet_num_control_type is not None:
            w, ops, dev = self.model_channels, kw["operations"], kw.get("device")
            self.task_embedding = torch.nn.Parameter(torch.empty(self.num_control_type, w, dtype=self.dtype,
                                                                 device=dev))
            self.transformer_layes = torch.nn.Sequential(
                cldm.ResBlockUnionControlnet(w, 8, dtype=self.dtype, device=dev, operations=ops))
            self.spatial_ch_projs = ops.Linear(w, w, dtype=self.dtype, device=dev)


cldm.ControlNet = TinyUnionControlNet

# ---- the ControlNet in ComfyUI's (ldm) layout -------------------------------------------------------
base = comfy.utils.load_torch_file(ckpt_path)
cfg = md.convert_config(dict(XL))
cfg.pop("out_channels")
net = TinyUnionControlNet(hint_channels=3, union_controlnet_num_control_type=NUM_TYPES,
                          operations=comfy.ops.disable_weight_init, dtype=torch.float32, device="cpu", **cfg)
ldm_sd, from_ckpt = {}, {}
names = sorted(net.state_dict().keys())
for i, k in enumerate(names):
    shape = net.state_dict()[k].shape
    ck = "model.diffusion_model." + k
    if ck in base:
        assert base[ck].shape == shape, k
        ldm_sd[k] = base[ck]
        from_ckpt[k] = ck
    else:
        g = torch.Generator().manual_seed(2024 + i)
        ldm_sd[k] = (0.05 * torch.randn(shape, generator=g)).to(torch.float16)

# ---- its diffusers names ----------------------------------------------------------------------------
to_diff = {}
for dk, lk in comfy.utils.unet_to_diffusers(cfg).items():
    if lk in ldm_sd and not dk.startswith("class_embedding."):
        to_diff[lk] = dk
to_diff["middle_block_out.0.weight"] = "controlnet_mid_block.weight"
to_diff["middle_block_out.0.bias"] = "controlnet_mid_block.bias"
for k in ldm_sd:
    p = k.split(".")
    if p[0] == "zero_convs":
        to_diff[k] = "controlnet_down_blocks.%s.%s" % (p[1], p[3])
    elif p[0] == "input_hint_block":
        n = int(p[1]) // 2
        blk = "conv_in" if n == 0 else "conv_out" if n == 7 else "blocks.%d" % (n - 1)
        to_diff[k] = "controlnet_cond_embedding.%s.%s" % (blk, p[2])
    elif k not in to_diff:  # the Union parts: as stored by xinsir (nn.MultiheadAttention's in_proj_*)
        assert p[0] in ("task_embedding", "transformer_layes", "spatial_ch_projs", "control_add_embedding"), k
        to_diff[k] = k.replace(".attn.in_proj.", ".attn.in_proj_")
assert set(to_diff) == set(ldm_sd), set(ldm_sd) ^ set(to_diff)
diff_sd = {to_diff[k]: v for k, v in ldm_sd.items()}
parts = {to_diff[k]: v for k, v in ldm_sd.items() if k not in from_ckpt}
encoder_keys = {to_diff[k]: from_ckpt[k] for k in sorted(from_ckpt)}

os.makedirs(os.path.join(out_dir, "models"), exist_ok=True)
os.makedirs(os.path.join(out_dir, "golden"), exist_ok=True)
PARTS = "models/union_parts.safetensors"
stio.save(parts, os.path.join(out_dir, PARTS), metadata={"generator": "make_union_controlnet.py"})
tmp = os.path.join(out_dir, "golden", ".tmp-union.safetensors")
stio.save(diff_sd, tmp)

# ---- ComfyUI loads it --------------------------------------------------------------------------------
control = comfy.controlnet.load_controlnet(tmp)
os.remove(tmp)
cm = control.control_model
assert isinstance(cm, _CN) and cm.num_control_type == NUM_TYPES
loaded = cm.state_dict()
assert set(loaded) == set(ldm_sd), set(loaded) ^ set(ldm_sd)
for k, v in ldm_sd.items():
    assert torch.equal(loaded[k].float(), v.float()), k
cm = cm.float()

out = {}
g = torch.Generator().manual_seed(77)
N, H, W, L = 2, 8, 12, 7
x = torch.randn(N, 4, H, W, generator=g)
ts = torch.tensor([870.0, 315.5])
ctx = torch.randn(N, L, XL["context_dim"], generator=g)
y = torch.randn(N, XL["adm_in_channels"], generator=g)
hint = torch.rand(N, 3, 8 * H, 8 * W, generator=g)
out.update({"fwd.x": x, "fwd.timesteps": ts, "fwd.context": ctx, "fwd.y": y, "fwd.hint": hint})
TYPES = ["auto", "depth", "repaint"]
res = {}
for t in TYPES:
    n = UNION_CONTROLNET_TYPES.get(t, -1)
    r = cm(x=x, hint=hint, timesteps=ts, context=ctx, y=y, control_type=[n] if n >= 0 else [])
    res[t] = r
    for i, o in enumerate(r["output"]):
        out["fwd_%s.output.%d" % (t, i)] = o.float().contiguous()
    out["fwd_%s.middle" % t] = r["middle"][0].float().contiguous()
# how much the type changes the residuals (printed: the cases must tell them apart)
for t in TYPES[1:]:
    d = (res[t]["output"][0] - res["auto"]["output"][0]).abs().max().item()
    print("type %s vs auto: max |d output.0| %.4g (|output.0| max %.4g)" % (
        t, d, res["auto"]["output"][0].abs().max().item()))

model, clip, vae = comfy_env.load_checkpoint(ckpt_path, "sdxl", setcfg)
dm = model.model.diffusion_model.float()
STRENGTH_FWD, UNET_TYPE = 0.8, "depth"
ctl = {"output": [o * STRENGTH_FWD for o in res[UNET_TYPE]["output"]],
       "middle": [res[UNET_TYPE]["middle"][0] * STRENGTH_FWD]}
out["unet.out_control"] = dm(x, ts, context=ctx, y=y, control=ctl).float()
out["unet.out_base"] = dm(x, ts, context=ctx, y=y).float()

# ---- KSampler with ControlNetApplyAdvanced -------------------------------------------------------------
POS, NEG = "a photo of a cat, sharp", "blurry"
(pos,) = nodes.CLIPTextEncode().encode(clip, POS)
(neg,) = nodes.CLIPTextEncode().encode(clip, NEG)
CASES = [
    dict(id="ks_canny", type="canny/lineart/anime_lineart/mlsd", image=[1, 80, 112], width=96, height=64,
         strength=0.9, start_percent=0.0, end_percent=1.0, seed=11, steps=3, cfg=5.0, sampler="euler",
         scheduler="normal"),
    dict(id="ks_auto", type="auto", image=[1, 64, 64], width=64, height=64, strength=1.3, start_percent=0.1,
         end_percent=0.8, seed=5, steps=3, cfg=4.0, sampler="dpmpp_2m", scheduler="karras"),
]
for c in CASES:
    gi = torch.Generator().manual_seed(c["seed"] + 100)
    img = torch.rand(c["image"][0], c["image"][1], c["image"][2], 3, generator=gi)
    out[c["id"] + ".image"] = img
    r = nodes_controlnet.SetUnionControlNetType.execute(control, c["type"])
    typed = (r if isinstance(r, tuple) else r.result)[0]
    p, n_ = nodes.ControlNetApplyAdvanced().apply_controlnet(pos, neg, typed, img, c["strength"],
                                                            c["start_percent"], c["end_percent"])
    latent = {"samples": torch.zeros([1, 4, c["height"] // 8, c["width"] // 8])}
    (lat,) = nodes.common_ksampler(model, c["seed"], c["steps"], c["cfg"], c["sampler"], c["scheduler"], p, n_,
                                   latent, denoise=1.0)
    out[c["id"] + ".latent_out"] = lat["samples"].float()
    (lat0,) = nodes.common_ksampler(model, c["seed"], c["steps"], c["cfg"], c["sampler"], c["scheduler"], pos, neg,
                                    latent, denoise=1.0)
    out[c["id"] + ".latent_nocontrol"] = lat0["samples"].float()
    print("%s: max |control - nocontrol| %.4g" % (c["id"], (lat["samples"] - lat0["samples"]).abs().max().item()))
    comfy.model_management.unload_all_models()

stio.save({k: v.contiguous() for k, v in out.items()}, os.path.join(out_dir, "golden", "union_controlnet.safetensors"),
          metadata={"generator": "make_union_controlnet.py"})
manifest = {
    "generator": "gen/make_union_controlnet.py",
    "command": "/usr/bin/python3 gen/make_union_controlnet.py COMFY EINOPS CLIP SHARED OUT_DIR",
    "reference": {
        "comfyui_commit": tman["reference"]["comfyui_commit"],
        "functions": [
            "comfy.controlnet.load_controlnet -> load_controlnet_state_dict (diffusers branch, Union: "
            "union_controlnet_num_control_type = task_embedding.shape[0], '.attn.in_proj_' -> '.attn.in_proj.')",
            "comfy.cldm.cldm.ControlNet.forward with control_type (fwd_*)",
            "comfy.ldm.modules.diffusionmodules.openaimodel.UNetModel.forward with control (unet.*)",
            "comfy_extras.nodes_controlnet.SetUnionControlNetType.execute, nodes.ControlNetApplyAdvanced, "
            "nodes.CLIPTextEncode, nodes.common_ksampler (ks_*)"],
        "shims": ["the tiny SDXL config accepted by model_detection.unet_config_from_diffusers_unet",
                  "the Union transformer (task_embedding, transformer_layes, spatial_ch_projs) built at "
                  "model_channels wide, not ComfyUI's hard-coded 320 (the real model_channels)"],
        "torch": "Debian python3-torch 1.13.1, CPU, float32",
    },
    "checkpoint": CKPT,
    "controlnet": {
        "parts": PARTS,
        "layout": "diffusers ControlNetModel + xinsir Union parts (ProMax: %d control types), F16" % NUM_TYPES,
        "encoder_keys": encoder_keys,
        "num_control_types": NUM_TYPES,
    },
    "forward": {"batch": N, "height": H, "width": W, "context_tokens": L, "timesteps": ts.tolist(),
                "types": TYPES, "outputs": len(res["auto"]["output"]),
                "unet": {"type": UNET_TYPE, "strength": STRENGTH_FWD}},
    "prompts": {"positive": POS, "negative": NEG},
    "tolerance": {"fwd": {"atol": 2e-4, "rtol": 2e-4}, "unet": {"atol": 2e-4, "rtol": 2e-4},
                  "ks": {"atol": 2e-3, "rtol": 2e-3}},
    "cases": CASES,
}
json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
print("wrote", len(out), "tensors;", len(parts), "parts,", len(encoder_keys), "encoder keys")
