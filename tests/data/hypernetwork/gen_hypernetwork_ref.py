#!/usr/bin/python3
"""HypernetworkLoader (comfy_extras/nodes_hypernetwork.py) on the tiny SD1 checkpoint of the shared
test data.

usage: /usr/bin/python3 gen_hypernetwork_ref.py COMFY EINOPS CLIP TESTDATA [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts;
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors and its manifest).
Writes, beside this script (or in OUT_DIR):
  *.pt          tiny random-weight hypernetworks in A1111's layout, written by torch.save as
                A1111's Hypernetwork.save writes them ({width: (state_dict, state_dict), metadata});
                the tiny model's attention widths are 32, 64, 128 (its blocks) and 128 (its context);
                one in torch's legacy format, one in NovelAI's older layout (no metadata), one
                .safetensors variant, and files ComfyUI cannot use (error cases);
  hypernetwork_ref.safetensors, manifest.json.

Case kinds:
  "unet": the tiny UNet's forward (model.diffusion_model with the MODEL's transformer_options) on
    stored x, timesteps and context, the MODEL patched by HypernetworkLoader.execute with the case's
    files and strengths in order; a case without files is the unpatched forward.
  "ksampler": nodes.common_ksampler as in tests/data/model_patch, on the patched MODEL.
  "error": a file the loader refuses (sdflow) where ComfyUI logs an error and ignores the file
    ("unknown activation") or fails later (the shapes; a width that is no pair).
Runs on Debian's python3-torch 1.13, CPU, float32.
"""
import collections
import json
import os
import sys

comfy_root, einops_root, clip_root, testdata = sys.argv[1:5]
here = os.path.dirname(os.path.abspath(__file__))
out_dir = sys.argv[5] if len(sys.argv) > 5 else here
sys.path.insert(0, os.path.join(here, "../../../../shared/tools/comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(comfy_root, einops_root, clip_root)
import torch  # noqa: E402
import stio  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.supported_models as sm  # noqa: E402
import comfy_extras.nodes_hypernetwork as nodes_hn  # noqa: E402
import comfy_extras.nodes_pag as nodes_pag  # noqa: E402
import folder_paths  # noqa: E402
import nodes  # noqa: E402

# Debian's torch 1.13 has no BINFLOAT (the floats of A1111's layer_structure) in its weights_only
# unpickler, which torch 2 has: ComfyUI's load_torch_file(safe_load=True) would fail on every A1111
# file here. These files are our own, so weights_only loads go through the full unpickler, which
# builds the same objects (a loader shim; no numerics change).
_torch_load = torch.load


def _load(*a, **kw):
    kw.pop("weights_only", None)
    return _torch_load(*a, **kw)


torch.load = _load

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
folder_paths.folder_names_and_paths["hypernetworks"] = ([out_dir], folder_paths.supported_pt_extensions)

ACT = {"relu": torch.nn.ReLU, "leakyrelu": torch.nn.LeakyReLU, "elu": torch.nn.ELU, "swish": torch.nn.Hardswish,
       "tanh": torch.nn.Tanh, "sigmoid": torch.nn.Sigmoid, "softsign": torch.nn.Softsign, "mish": torch.nn.Mish}


def a1111_state_dict(dim, ls, act, ln, activate_output, dropout, gen):
    """One HypernetworkModule's state_dict, as A1111's constructor lays it out (self.linear: Linear,
    activation except after the last unless activate_output, LayerNorm, Dropout); random weights."""
    layers = []
    for i in range(len(ls) - 1):
        layers.append(torch.nn.Linear(int(dim * ls[i]), int(dim * ls[i + 1])))
        if not (act == "linear" or (i >= len(ls) - 2 and not activate_output)):
            layers.append(ACT[act]())
        if ln:
            layers.append(torch.nn.LayerNorm(int(dim * ls[i + 1])))
        if dropout and dropout[i + 1] > 0:
            layers.append(torch.nn.Dropout(p=dropout[i + 1]))
    mod = torch.nn.Module()
    mod.linear = torch.nn.Sequential(*layers)
    with torch.no_grad():
        for name, p in mod.named_parameters():
            bound = 1.0 / max(1, p.shape[-1]) ** 0.5
            if p.dim() == 2:
                p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) * bound * 1.5)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            else:  # LayerNorm weight
                p.copy_(1.0 + torch.randn(p.shape, generator=gen) * 0.2)
    return mod.state_dict()


def write_a1111(fname, widths, ls, act, ln=False, activate_output=False, use_dropout=False, last_layer_dropout=False,
                dropout=None, legacy=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    sd = {}
    for d in widths:
        sd[d] = (a1111_state_dict(d, ls, act, ln, activate_output, dropout, gen),
                 a1111_state_dict(d, ls, act, ln, activate_output, dropout, gen))
    sd["step"] = 0
    sd["name"] = fname.rsplit(".", 1)[0]
    sd["layer_structure"] = [float(x) for x in ls]
    sd["activation_func"] = act
    sd["is_layer_norm"] = ln
    sd["weight_initialization"] = "Normal"
    sd["sd_checkpoint"] = "0123abcd"
    sd["sd_checkpoint_name"] = "tiny-sd1"
    sd["activate_output"] = activate_output
    sd["use_dropout"] = use_dropout
    sd["dropout_structure"] = [float(x) for x in dropout] if dropout else [0.0] * len(ls)
    sd["last_layer_dropout"] = last_layer_dropout
    sd["optional_info"] = None
    path = os.path.join(out_dir, fname)
    if legacy:
        torch.save(sd, path, _use_new_zipfile_serialization=False)
    else:
        torch.save(sd, path)
    return sd


files = []  # (name, what it is)


def a1111(fname, *args, **kw):
    sd = write_a1111(fname, *args, **kw)
    files.append({"file": fname, "widths": [k for k in sd if isinstance(k, int)], "activation_func": sd["activation_func"],
                  "is_layer_norm": sd["is_layer_norm"], "activate_output": sd["activate_output"],
                  "use_dropout": sd["use_dropout"], "layer_structure": sd["layer_structure"],
                  "format": "torch legacy" if kw.get("legacy") else "torch zip"})
    return sd


# ---- the hypernetworks ----------------------------------------------------------------------------
# (small: 128 is the only width of attn2, so only a few files have it, with a narrow middle layer)
a1111("relu_ln.pt", [32, 64, 128], [1, 0.5, 1], "relu", ln=True, seed=1)
a1111("mish_out.pt", [32, 128], [1, 0.5, 1], "mish", activate_output=True, seed=2)
a1111("swish_deep_ln.pt", [64], [1, 1.5, 0.5, 1], "swish", ln=True, seed=3)
a1111("elu.pt", [32, 64], [1, 1, 1], "elu", seed=4)
a1111("leakyrelu.pt", [64], [1, 1, 1], "leakyrelu", activate_output=True, seed=5)
a1111("sigmoid.pt", [32], [1, 2, 1], "sigmoid", seed=6)
a1111("softsign_ln.pt", [32, 64], [1, 1, 1], "softsign", ln=True, seed=7)
a1111("linear_ln.pt", [32], [1, 2, 1], "linear", ln=True, seed=8)
a1111("tanh_legacy.pt", [32, 64], [1, 1, 1], "tanh", legacy=True, seed=9)
# Dropout after the first Linear (ComfyUI adds none after the penultimate unless last_layer_dropout)
a1111("dropout.pt", [32], [1, 2, 2, 1], "relu", use_dropout=True, dropout=[0, 0.3, 0.3, 0], seed=10)

# small files (fuzz seeds of the torch reader, under its 16 KiB seed size; widths the model lacks)
a1111("seed_small.pt", [4, 8], [1, 2, 1], "relu", ln=True, seed=30)
a1111("seed_small_legacy.pt", [4], [1, 2, 1], "mish", legacy=True, seed=31)

# NovelAI's layout: {width: (sd, sd)} of two Linears named linear1 / linear2, no metadata
gen = torch.Generator().manual_seed(11)
nai = {}
for d in (32, 64):
    pair = []
    for _ in range(2):
        sdict = collections.OrderedDict()
        sdict["linear1.weight"] = (torch.rand(d * 2, d, generator=gen) * 2 - 1) / d ** 0.5
        sdict["linear1.bias"] = torch.randn(d * 2, generator=gen) * 0.1
        sdict["linear2.weight"] = (torch.rand(d, d * 2, generator=gen) * 2 - 1) / (2 * d) ** 0.5
        sdict["linear2.bias"] = torch.randn(d, generator=gen) * 0.1
        pair.append(sdict)
    nai[d] = tuple(pair)
torch.save(nai, os.path.join(out_dir, "nai.pt"))
files.append({"file": "nai.pt", "widths": [32, 64], "activation_func": None, "format": "torch zip, NovelAI layout"})

# .safetensors: ComfyUI reads a dict of tensors by string keys ("32.0.linear.0.weight"), whose keys
# int() refuses: a patch with no widths
sig = torch.load(os.path.join(out_dir, "sigmoid.pt"))
flat = {}
for d in (32,):
    for i in (0, 1):
        for k, v in sig[d][i].items():
            flat["%d.%d.%s" % (d, i, k)] = v.contiguous()
stio.save(flat, os.path.join(out_dir, "sigmoid.safetensors"))
files.append({"file": "sigmoid.safetensors", "widths": [], "format": "safetensors (no integer keys)"})

# ---- files ComfyUI cannot use ---------------------------------------------------------------------
errors = []
write_a1111("bad_activation.pt", [32], [1, 1, 1], "relu", seed=20)
sd = torch.load(os.path.join(out_dir, "bad_activation.pt"))
sd["activation_func"] = "gelu"
torch.save(sd, os.path.join(out_dir, "bad_activation.pt"))
errors.append({"id": "bad_activation", "file": "bad_activation.pt", "code": "UNSUPPORTED", "message_has": ["gelu"],
               "comfyui": "logs 'Unsupported Hypernetwork format' and returns the model without the patch"})
sd = write_a1111("bad_width.pt", [32], [1, 1, 1], "relu", seed=21)
sd[32][0]["linear.0.weight"] = torch.zeros(32, 48)  # takes 48 features, not 32
torch.save(sd, os.path.join(out_dir, "bad_width.pt"))
errors.append({"id": "bad_width", "file": "bad_width.pt", "code": "FORMAT", "message_has": ["linear.0.weight", "32"],
               "comfyui": "fails in the first attention of width 32 (mat1 and mat2 shapes cannot be multiplied)"})
sd = write_a1111("bad_pair.pt", [32], [1, 1, 1], "relu", seed=22)
sd[32] = sd[32][0]
torch.save(sd, os.path.join(out_dir, "bad_pair.pt"))
errors.append({"id": "bad_pair", "file": "bad_pair.pt", "code": "FORMAT", "message_has": ["width 32"],
               "comfyui": "fails at load: sd[dim][index] of a dict (KeyError 0)"})
sd = write_a1111("bad_layer_norm.pt", [32], [1, 2, 1], "relu", seed=23)  # noqa: E501 (64 wide: a misfit)
sd["is_layer_norm"] = True  # but the state dicts hold no LayerNorm
torch.save(sd, os.path.join(out_dir, "bad_layer_norm.pt"))
errors.append({"id": "bad_layer_norm", "file": "bad_layer_norm.pt", "code": "FORMAT", "message_has": ["linear.2.weight"],
               "comfyui": "loads the second Linear's weight as a LayerNorm's (size mismatch in load_state_dict)"})
for e in errors:  # ComfyUI's own loader on each
    try:
        p = nodes_hn.load_hypernetwork_patch(os.path.join(out_dir, e["file"]), 1.0)
        e["comfyui_load"] = "returned None" if p is None else "returned a patch"
    except Exception as ex:  # noqa: BLE001
        e["comfyui_load"] = "%s: %s" % (type(ex).__name__, str(ex)[:120])

# ---- UNet forward cases ---------------------------------------------------------------------------
tensors = {}
gen = torch.Generator().manual_seed(100)
x = torch.randn(1, 4, 16, 16, generator=gen)
ctx = torch.randn(1, 77, u["context_dim"], generator=gen)
ts = torch.tensor([500.0])
tensors["x"], tensors["context"], tensors["timesteps"] = x, ctx, ts


def patched(chain, eval_dropout=False):
    m = model
    for f, s in chain:
        if f == "PerturbedAttentionGuidance":  # another patch in the chain: (node, scale)
            m = nodes_pag.PerturbedAttentionGuidance.execute(m, s).result[0]
        else:
            m = nodes_hn.HypernetworkLoader.execute(m, f, s).result[0]
    if eval_dropout:  # ComfyUI leaves the Dropout modules in training mode (random): see the manifest
        for p in m.model_options["transformer_options"]["patches"]["attn1_patch"]:
            for d in p.hypernet:
                p.hypernet[d].eval()
    return m


def unet_forward(m):
    to = dict(m.model_options["transformer_options"])
    with torch.no_grad():
        return m.model.diffusion_model(x, timesteps=ts, context=ctx, transformer_options=to).float()


def training_mode_is_random():
    m = patched([("dropout.pt", 1.0)])
    a, b = unet_forward(m), unet_forward(m)
    return not torch.equal(a, b)


cases = []
UNET_TOL = {"atol": 2e-4, "rtol": 1e-3,
            "tolerance_note": "the shared unet_sd1 case's tolerance (same tiny UNet, float32 sums in another order)"}
for cid, chain, *opt in (("unet_plain", []),
                         ("unet_relu_ln", [("relu_ln.pt", 1.0)]),
                         ("unet_relu_ln_neg", [("relu_ln.pt", -0.6)]),
                         ("unet_mish_out", [("mish_out.pt", 0.8)]),
                         ("unet_swish_deep_ln", [("swish_deep_ln.pt", 1.0)]),
                         ("unet_elu", [("elu.pt", 1.2)]),
                         ("unet_leakyrelu", [("leakyrelu.pt", 1.0)]),
                         ("unet_sigmoid", [("sigmoid.pt", 1.0)]),
                         ("unet_softsign_ln", [("softsign_ln.pt", 1.0)]),
                         ("unet_linear_ln", [("linear_ln.pt", 0.5)]),
                         ("unet_tanh_legacy", [("tanh_legacy.pt", 1.0)]),
                         ("unet_nai", [("nai.pt", 1.0)]),
                         ("unet_stacked", [("relu_ln.pt", 0.7), ("mish_out.pt", 0.9)]),
                         ("unet_dropout_eval", [("dropout.pt", 1.0)], "eval"),
                         ("unet_safetensors", [("sigmoid.safetensors", 1.0)])):
    m = patched(chain, eval_dropout=bool(opt))
    tensors[cid + "/out"] = unet_forward(m)
    c = {"id": cid, "kind": "unet", "patches": [{"file": f, "strength": s} for f, s in chain],
         "x": "x", "timesteps": "timesteps", "context": "context", "out": cid + "/out", **UNET_TOL}
    if opt:
        c["comfyui_modified"] = ("the patch's Sequential modules put in eval mode after ComfyUI's loader: ComfyUI "
                                 "leaves its torch.nn.Dropout layers in training mode, so its own output is random "
                                 "(two forwards differ: %s); sdflow applies no dropout, as A1111 at inference"
                                 % training_mode_is_random())
    if chain and chain[0][0].endswith(".safetensors"):
        c["noop"] = True  # ComfyUI's patch has no width: the output is the unpatched one
    cases.append(c)

# ---- KSampler ----------------------------------------------------------------------------------------
latent = nodes.EmptyLatentImage().generate(128, 128, 1)[0]
settings = {"width": 128, "height": 128, "seed": 7, "steps": 3, "cfg": 6.0, "sampler_name": "euler",
            "scheduler": "normal", "positive": "a red brick wall", "negative": "blurry"}
pos = nodes.CLIPTextEncode().encode(clip, settings["positive"])[0]
neg = nodes.CLIPTextEncode().encode(clip, settings["negative"])[0]
for cid, chain in (("ksampler_plain", []),
                   ("ksampler_relu_ln", [("relu_ln.pt", 0.8)]),
                   ("ksampler_stacked", [("swish_deep_ln.pt", 1.0), ("mish_out.pt", 0.5)]),
                   # PAG's replaced self-attention reads the hypernetwork's patched value input
                   ("ksampler_relu_ln_pag", [("relu_ln.pt", 0.8), ("PerturbedAttentionGuidance", 3.0)])):
    m = patched(chain)
    res = nodes.common_ksampler(m, settings["seed"], settings["steps"], settings["cfg"], settings["sampler_name"],
                                settings["scheduler"], pos, neg, latent)[0]["samples"]
    tensors[cid + "/latent"] = res.float()
    cases.append({"id": cid, "kind": "ksampler",
                  "patches": [{"node": "PerturbedAttentionGuidance", "scale": s} if f == "PerturbedAttentionGuidance"
                              else {"file": f, "strength": s} for f, s in chain],
                  "settings": settings, "latent": cid + "/latent", "atol": 0.04, "rtol": 0.002,
                  "tolerance_note": "tests/data/model_patch's KSampler tolerance (same model, sampler and steps): "
                                    "the UNet's float32 sums in another order"})

for e in errors:
    cases.append(dict(e, kind="error"))

stio.save({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "hypernetwork_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump({"generator": "tests/data/hypernetwork/gen_hypernetwork_ref.py",
               "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
               "comfyui_function": "comfy_extras.nodes_hypernetwork.HypernetworkLoader.execute "
                                   "(load_hypernetwork_patch, set as attn1_patch and attn2_patch)",
               "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
               "model": "shared/testdata/models/tiny-sd1.safetensors",
               "file": "hypernetwork_ref.safetensors", "hypernetworks": files, "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
