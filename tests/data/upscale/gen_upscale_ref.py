#!/usr/bin/python3
"""Reference outputs of ComfyUI's upscale-model path on tiny random-weight models.

usage: gen_upscale_ref.py COMFY_ROOT SPANDREL_ROOT COMFYREF_TOOLS OUT_DIR [EINOPS_ROOT]

COMFY_ROOT: a ComfyUI tree at the commit in COMFYREF_TOOLS/COMFY_COMMIT;
SPANDREL_ROOT: spandrel's libs/spandrel folder (github chaiNNer-org/spandrel);
COMFYREF_TOOLS: /work/shared/tools/comfyref (stio.py, shims.py);
EINOPS_ROOT: an einops tree (github arogozhnikov/einops, the commit in the manifest) when
the system has none (spandrel's registry imports it).
OUT_DIR must hold manifest.json (the cases); the models and references are written beside it.
Commits used: manifest.json (comfyui_commit, spandrel_commit, einops_commit).
Runs on Debian's python3-torch 1.13, CPU, float32.

Each case: build the architecture's own module (spandrel's RRDBNet / SRVGGNetCompact)
with torch.manual_seed(seed) default init, write its state dict in the layout the case
names (old ESRGAN keys, new Real-ESRGAN keys, Compact keys) as the case's model file
(.pth through torch.save, else .safetensors), load that file back the way UpscaleModelLoader does
(comfy.utils.load_torch_file(safe_load=True) + spandrel ModelLoader().load_from_state_dict),
and run ImageUpscaleWithModel's body: comfy.utils.tiled_scale(in_img, lambda a:
upscale_model(a), tile, tile, overlap, upscale_amount=scale) then clamp(0, 1).
PIL and packaging are only imported (not used) by comfy.utils on this path; when
missing they are replaced by empty placeholder modules. No numerics are changed.
"""
import json
import os
import sys
import types

comfy_root, spandrel_root, tools, out_dir = sys.argv[1:5]
sys.path.insert(0, tools)
sys.path.insert(0, spandrel_root)
sys.path.insert(0, comfy_root)
if len(sys.argv) > 5:
    sys.path.insert(0, sys.argv[5])
for name in ("PIL", "PIL.Image", "packaging", "packaging.version"):
    try:
        __import__(name)
    except ImportError:
        m = types.ModuleType(name)
        m.__path__ = []
        m.rearrange = m.repeat = m.Image = m.version = None
        sys.modules[name] = m
import shims  # noqa: E402

shims._patch_torch()
shims._install_safetensors()
shims._install_misc()
# spandrel's registry imports every architecture; the others' optional packages
# (torchvision for LaMa, ...) become inert placeholders, as shims does for ComfyUI.
_missing = []
for name in ("torchvision", "timm"):
    try:
        __import__(name)
    except ImportError:
        _missing.append(name)
sys.meta_path.append(shims._StubFinder(_missing))

import torch  # noqa: E402
import comfy.options  # noqa: E402

comfy.options.enable_args_parsing(False)
import comfy.utils  # noqa: E402
import stio  # noqa: E402
from spandrel import ModelLoader  # noqa: E402
from spandrel.architectures.ESRGAN import ESRGAN  # noqa: E402
from spandrel.architectures.Compact import Compact  # noqa: E402

torch.set_grad_enabled(False)
os.makedirs(out_dir, exist_ok=True)


def new_layout(sd, nb):
    """spandrel's (old ESRGAN) keys -> Real-ESRGAN's RRDBNet keys."""
    out = {}
    seq = sorted({int(k.split(".")[1]) for k in sd if k.startswith("model.")})
    last = seq[-1]
    ups = [i for i in seq if 1 < i < last - 2]
    for k, v in sd.items():
        p = k.split(".")
        i = int(p[1])
        kind = p[-1]
        if i == 0:
            nk = "conv_first." + kind
        elif i == 1 and p[3] == str(nb):
            nk = "conv_body." + kind
        elif i == 1:  # model.1.sub.N.RDBr.convc.0.kind
            nk = "body.%s.rdb%s.conv%s.%s" % (p[3], p[4][3:], p[5][4:], kind)
        elif i == last:
            nk = "conv_last." + kind
        elif i == last - 2:
            nk = "conv_hr." + kind
        else:
            nk = "conv_up%d.%s" % (ups.index(i) + 1, kind)
        out[nk] = v
    return out


def build(case):
    torch.manual_seed(case["seed"])
    a = case["arch"]
    if a["type"] == "esrgan":
        in_nc = 3 * a.get("shuffle", 1) ** 2
        m = ESRGAN(in_nc=in_nc, out_nc=3, num_filters=a["num_feat"], num_blocks=a["num_block"],
                   scale=a["internal_scale"])
        sd = {k: v.contiguous() for k, v in m.state_dict().items()}
        # Default init drives most outputs outside [0, 1] (clamped, so untested):
        # scale the last conv by the case's gain and centre it on 0.5.
        last = max(int(k.split(".")[1]) for k in sd)
        sd["model.%d.weight" % last] = sd["model.%d.weight" % last] * a["last_gain"]
        sd["model.%d.bias" % last] = sd["model.%d.bias" % last] * a["last_gain"] + 0.5
        if a["layout"] == "new":
            sd = new_layout(sd, a["num_block"])
    else:
        m = Compact(num_in_ch=3, num_out_ch=3, num_feat=a["num_feat"], num_conv=a["num_conv"],
                    upscale=a["scale"])
        sd = {k: v.contiguous() for k, v in m.state_dict().items()}
        # PReLU's default init is one value for every channel; vary it so that the
        # per-channel slope is exercised.
        for k in sd:
            if k.endswith(".weight") and sd[k].dim() == 1:
                sd[k] = torch.rand(sd[k].shape) * 0.5
    if a.get("dtype") == "f16":  # halves the committed file; ComfyUI widens on load
        sd = {k: v.half() for k, v in sd.items()}
    return sd


def main():
    man_path = os.path.join(out_dir, "manifest.json")
    with open(man_path) as f:
        man = json.load(f)
    for case in man["cases"]:
        sd = build(case)
        st = os.path.join(out_dir, case["model"])
        if st.endswith(".pth"):
            torch.save(sd, st)
        else:
            stio.save(sd, st)
        torch.manual_seed(case["seed"] + 1000)
        h, w = case["image"]
        image = torch.rand(1, h, w, 3)
        loaded = comfy.utils.load_torch_file(st, safe_load=True)
        model = ModelLoader().load_from_state_dict(loaded).eval()
        assert model.architecture.id == case["spandrel_arch"], model.architecture.id
        assert model.scale == case["scale"], (model.scale, case["scale"])
        in_img = image.movedim(-1, -3)
        s = comfy.utils.tiled_scale(in_img, lambda a: model(a), tile_x=case["tile"],
                                    tile_y=case["tile"], overlap=case["overlap"],
                                    upscale_amount=model.scale)
        s = torch.clamp(s.movedim(-3, -1), min=0, max=1.0)
        stio.save({"image": image.contiguous(), "output": s.contiguous()},
                  os.path.join(out_dir, case["ref"]))
        print(case["id"], model.architecture.id, "scale", model.scale, tuple(s.shape),
              "in range %.3f" % float(((s > 0) & (s < 1)).float().mean()))


main()
