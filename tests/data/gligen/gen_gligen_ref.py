#!/usr/bin/python3
"""GLIGEN (comfy/gligen.py, nodes.GLIGENLoader / GLIGENTextBoxApply) on the tiny SD1 checkpoint of
the shared test data.

usage: /usr/bin/python3 gen_gligen_ref.py COMFY EINOPS CLIP TESTDATA [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts;
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors and its manifest).
Writes tiny_gligen_sd1.safetensors, gligen_ref.safetensors and manifest.json beside this script
(or in OUT_DIR).

The GLIGEN file: random weights in the layout of gligen_sd14_textbox_pruned (position_net.* at the
top level, one GatedSelfAttentionDense "fuser" per transformer block of the UNet under
<block>.<i>.1.transformer_blocks.0.fuser.*), with the tiny UNet's widths. comfy.gligen.load_gligen
infers the widths from the shapes but hard-codes SD1.4's choices around them: 8 heads when the
fuser's context width (linear.weight's columns) is 768, else 64-wide heads (query_dim // 64 heads:
none for the tiny UNet's 32-wide level), a 512-wide position MLP, 8 Fourier frequencies. So the tiny
file keeps context 768 (the position net's output, as SD1.4) and takes the tiny CLIP's 128-wide
pooled output as its input (SD1.4: 768 = 768). Weights are small multiples of a power of two (F16
exact, few distinct values: the file compresses in git).

One quirk of ComfyUI's at SD1.4 widths: Gligen.set_position pads the unused box slots with zero
embeddings of the fuser's context width (key_dim), which only fits when that equals the pooled
width. With this file it does not (768 vs 128), so ComfyUI can only run it unmodified with all 30
boxes. Cases:
  position_net: PositionNet.forward on given boxes, masks (some padding) and embeddings;
  unet_forward: the UNet (model.diffusion_model) with GLIGEN's middle_patch from
    Gligen.set_position with 30 boxes, unmodified;
  ksampler: CLIPTextEncode, GLIGENTextBoxApply (two boxes) and nodes.common_ksampler; for this one
    the loaded Gligen's key_dim is set to the pooled width (128), the one attribute set_position
    reads it for: it changes no computed value (padded rows are replaced by the null features under
    mask 0), it only lets torch.cat join the padding.
Runs on Debian's python3-torch 1.13, CPU, float32.
"""
import json
import math
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
import comfy.gligen  # noqa: E402
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
unet = model.model.diffusion_model

# ---- the GLIGEN file ---------------------------------------------------------------------------
KEY_DIM = 768  # the fuser context / position net output: SD1.4's, for load_gligen's 8-head rule
POOLED = cfg["clip_l"]["hidden_size"]
gen = torch.Generator().manual_seed(24)


def qrand(shape, fan_in, spread=3):
    """Random k * s, k in [-spread, spread], s = a power of two about 1 / (2 sqrt(fan_in))."""
    s = 2.0 ** -math.ceil(math.log2(2.0 * math.sqrt(fan_in)))
    return (torch.randint(-spread, spread + 1, shape, generator=gen).float() * s).half()


def fuser(q):
    inner = 4 * q
    return {"linear.weight": qrand((q, KEY_DIM), KEY_DIM), "linear.bias": qrand((q,), KEY_DIM),
            "attn.to_q.weight": qrand((q, q), q), "attn.to_k.weight": qrand((q, q), q),
            "attn.to_v.weight": qrand((q, q), q), "attn.to_out.0.weight": qrand((q, q), q),
            "attn.to_out.0.bias": qrand((q,), q),
            "ff.net.0.proj.weight": qrand((2 * inner, q), q), "ff.net.0.proj.bias": qrand((2 * inner,), q),
            "ff.net.2.weight": qrand((q, inner), inner), "ff.net.2.bias": qrand((q,), inner),
            "norm1.weight": (1.0 + qrand((q,), 16)).half(), "norm1.bias": qrand((q,), 16),
            "norm2.weight": (1.0 + qrand((q,), 16)).half(), "norm2.bias": qrand((q,), 16),
            # tanh(alpha) gates the fuser: a few clearly non-zero values
            "alpha_attn": torch.tensor(0.25 * float(torch.randint(1, 5, (1,), generator=gen))).half(),
            "alpha_dense": torch.tensor(-0.25 * float(torch.randint(1, 5, (1,), generator=gen))).half()}


sd = {}
# where the UNet has a SpatialTransformer, in the order load_gligen lists fusers
for name, blocks in (("input_blocks", unet.input_blocks), ("middle_block", [unet.middle_block]),
                     ("output_blocks", unet.output_blocks)):
    for b, blk in enumerate(blocks):
        for li, layer in enumerate(blk):
            if type(layer).__name__ == "SpatialTransformer":
                q = layer.transformer_blocks[0].attn1.to_q.weight.shape[1]
                where = "middle_block.%d" % li if name == "middle_block" else "%s.%d.%d" % (name, b, li)
                prefix = where + ".transformer_blocks.0.fuser."
                for k, v in fuser(q).items():
                    sd[prefix + k] = v
sd["position_net.null_positive_feature"] = qrand((POOLED,), 4)
sd["position_net.null_position_feature"] = qrand((64,), 4)
for i, (o, n) in enumerate(((512, POOLED + 64), (512, 512), (KEY_DIM, 512))):
    sd["position_net.linears.%d.weight" % (2 * i)] = qrand((o, n), n)
    sd["position_net.linears.%d.bias" % (2 * i)] = qrand((o,), n)
gligen_file = os.path.join(out_dir, "tiny_gligen_sd1.safetensors")
stio.save({k: v.contiguous() for k, v in sd.items()}, gligen_file)

# ComfyUI's own loader, unmodified
gl = comfy.sd.load_gligen(gligen_file)
g = gl.model
assert len(g.module_list) == 16, len(g.module_list)

tensors, cases = {}, []
tensors_file = "gligen_ref.safetensors"

# ---- position_net ------------------------------------------------------------------------------
B, N = 2, 30
boxes = torch.rand(B, N, 4, generator=gen)
masks = torch.zeros(B, N)
masks[0, :3] = 1.0
masks[1, :30] = 1.0
masks[1, 7] = 0.0
emb = torch.randn(B, N, POOLED, generator=gen)
with torch.no_grad():
    objs = g.position_net(boxes, masks, emb)
tensors.update({"position_net/boxes": boxes, "position_net/masks": masks, "position_net/embeddings": emb,
                "position_net/objs": objs})
cases.append({"id": "position_net", "component": "position_net",
              "reference": "comfy.gligen.PositionNet.forward(boxes, masks, positive_embeddings) of the loaded file",
              "inputs": {"boxes": "position_net/boxes", "masks": "position_net/masks",
                         "embeddings": "position_net/embeddings"},
              "outputs": [{"tensor": "position_net/objs", "atol": 1e-5, "rtol": 1e-4}]})

# ---- one UNet forward with 30 boxes --------------------------------------------------------------
LB, LH, LW = 2, 12, 16  # latent batch, height, width (latent pixels)
params, pooled_names, boxes_l = [], [], []
for i in range(30):
    p = torch.randn(1, POOLED, generator=gen)
    h = int(torch.randint(1, LH + 1, (1,), generator=gen))
    w = int(torch.randint(1, LW + 1, (1,), generator=gen))
    y = int(torch.randint(0, LH - h + 1, (1,), generator=gen))
    x = int(torch.randint(0, LW - w + 1, (1,), generator=gen))
    params.append((p, h, w, y, x))
    tensors["unet_forward/pooled.%d" % i] = p
    boxes_l.append([h, w, y, x])
x_in = torch.randn(LB, 4, LH, LW, generator=gen)
ts = torch.tensor([801.0, 233.5])
ctx = torch.randn(LB, 77, u["context_dim"], generator=gen)
with torch.no_grad():
    patch = g.set_position(x_in.shape, params, x_in.device)
    out = unet(x_in, ts, context=ctx, transformer_options={"patches": {"middle_patch": [patch]}})
    plain = unet(x_in, ts, context=ctx, transformer_options={})
tensors.update({"unet_forward/x": x_in, "unet_forward/timesteps": ts, "unet_forward/context": ctx,
                "unet_forward/out": out, "unet_forward/out_without": plain})
cases.append({"id": "unet_forward", "component": "unet_forward",
              "reference": "comfy.gligen.Gligen.set_position(x.shape, params, cpu) as the middle_patch of "
                           "UNetModel.forward(x, timesteps, context, transformer_options={'patches': "
                           "{'middle_patch': [patch]}}) (what calc_cond_batch passes for an entry's gligen)",
              "inputs": {"x": "unet_forward/x", "timesteps": "unet_forward/timesteps",
                         "context": "unet_forward/context",
                         "position": [{"pooled": "unet_forward/pooled.%d" % i, "height": b[0], "width": b[1],
                                       "y": b[2], "x": b[3]} for i, b in enumerate(boxes_l)]},
              "notes": "position entries are GLIGENTextBoxApply's (cond_pooled, height//8, width//8, y//8, x//8) "
                       "in latent pixels; out_without is the same forward without GLIGEN (a test that the "
                       "patch does something)",
              "outputs": [{"tensor": "unet_forward/out", "atol": 2e-4, "rtol": 1e-3}],
              "without": "unet_forward/out_without"})

# ---- KSampler through the nodes -----------------------------------------------------------------
recorded = []
_calc = comfy.samplers.calc_cond_batch


def recording_calc(m, conds, x_in, timestep, model_options):
    o = _calc(m, conds, x_in, timestep, model_options)
    recorded.append([t.clone() for t in o])
    return o


comfy.samplers.calc_cond_batch = recording_calc
SETTINGS = {"width": 128, "height": 96, "seed": 11, "steps": 3, "cfg": 5.0, "sampler_name": "euler",
            "scheduler": "normal"}
P, NEG = "a garden", "blurry"
BOXES = [{"text": "a red car", "width": 64, "height": 40, "x": 8, "y": 16},
         {"text": "a tall tree", "width": 32, "height": 96, "x": 88, "y": 0}]
gl_k = comfy.sd.load_gligen(gligen_file)
gl_k.model.key_dim = POOLED  # see the docstring: lets set_position pad; no value changes
pos = nodes.CLIPTextEncode().encode(clip, P)[0]
neg = nodes.CLIPTextEncode().encode(clip, NEG)[0]
for b in BOXES:
    pos = nodes.GLIGENTextBoxApply().append(pos, clip, gl_k, b["text"], b["width"], b["height"], b["x"], b["y"])[0]
latent = nodes.EmptyLatentImage().generate(SETTINGS["width"], SETTINGS["height"], 1)[0]
res = nodes.common_ksampler(model, SETTINGS["seed"], SETTINGS["steps"], SETTINGS["cfg"], SETTINGS["sampler_name"],
                            SETTINGS["scheduler"], pos, neg, latent)[0]["samples"]
tensors["ksampler/step0.cond"], tensors["ksampler/step0.uncond"] = recorded[0][0], recorded[0][1]
tensors["ksampler/latent"] = res.float()
recorded.clear()
plain_res = nodes.common_ksampler(model, SETTINGS["seed"], SETTINGS["steps"], SETTINGS["cfg"], SETTINGS["sampler_name"],
                                  SETTINGS["scheduler"], nodes.CLIPTextEncode().encode(clip, P)[0], neg,
                                  latent)[0]["samples"]
tensors["ksampler/latent_without"] = plain_res.float()
cases.append({"id": "ksampler", "component": "ksampler",
              "reference": "nodes.CLIPTextEncode, nodes.GLIGENTextBoxApply (each box in order on the positive), "
                           "nodes.EmptyLatentImage, nodes.common_ksampler; step0.* = the first "
                           "comfy.samplers.calc_cond_batch result [positive, negative] (the negative gets the "
                           "positive's gligen: process_conds' apply_empty_x_to_equal_area)",
              "settings": SETTINGS, "positive": P, "negative": NEG, "boxes": BOXES,
              "gligen_key_dim": POOLED,
              "outputs": [{"tensor": "ksampler/step0.cond", "what": "step0 cond", "atol": 0.002, "rtol": 0.002},
                          {"tensor": "ksampler/step0.uncond", "what": "step0 uncond", "atol": 0.002, "rtol": 0.002},
                          {"tensor": "ksampler/latent", "what": "latent", "atol": 0.04, "rtol": 0.002}],
              "without": "ksampler/latent_without"})

for c in cases:
    c["file"] = tensors_file
stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, tensors_file))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/gligen/gen_gligen_ref.py",
               "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors",
               "gligen": "tiny_gligen_sd1.safetensors",
               "gligen_layout": {"fusers": len(g.module_list), "key_dim": KEY_DIM, "pooled": POOLED,
                                 "heads": 8, "max_objs": g.max_objs},
               "tolerance_note": "position_net / unet_forward: float32 in another summation order (the UNet's "
                                 "tolerance: the shared unet_sd1 case's); ksampler: the shared e2e_sd1 case's "
                                 "step0.cond_denoised and latent_out tolerances (the same model and sampler)",
               "file": tensors_file, "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases", len(sd), "gligen keys")
