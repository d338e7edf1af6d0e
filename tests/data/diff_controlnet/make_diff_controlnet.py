#!/usr/bin/python3
"""What ComfyUI's DiffControlNetLoader (nodes.py -> comfy.controlnet.load_controlnet(path, model))
makes of a diff ControlNet: the tiny SD1 ControlNet of the shared test data turned into a diff
file against the tiny SD1 checkpoint's UNet, then loaded with that MODEL.

The diff file is not stored (it is as large as the ControlNet): the manifest says how it is made
from the two shared files, and the test makes the same bytes:
  for every control_model.K whose model.diffusion_model.K the checkpoint has (same shape):
      diff[K] = (controlnet[K].float() - unet[K].float()).to(controlnet[K].dtype)
  every other tensor as stored, plus "difference" = torch.tensor([1.0]) (F32, the marker).
Recorded per control_model tensor: ComfyUI's loaded ControlNet weight (control_model.state_dict()
after load_controlnet, in the dtype it holds, F32 on the CPU) as the SHA-256 of its float32 bytes,
plus the count of merged keys. No tensor values are stored.

usage: /usr/bin/python3 make_diff_controlnet.py COMFY EINOPS CLIP SHARED [OUT_DIR]
"""
import hashlib
import json
import os
import sys
import tempfile
import types

comfy, einops, clip, shared = sys.argv[1:5]
out_dir = sys.argv[5] if len(sys.argv) > 5 else os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(shared, "tools", "comfyref"))
import comfy_env  # noqa: E402

comfy_env.setup(comfy, einops, clip)
server = types.ModuleType("server")
server.PromptServer = types.SimpleNamespace(instance=None)
sys.modules.setdefault("server", server)

import torch  # noqa: E402
import comfy.controlnet  # noqa: E402
import comfy.utils  # noqa: E402
import stio  # noqa: E402

testdata = os.path.join(shared, "testdata")
setcfg = {k: v["config"] for k, v in json.load(open(os.path.join(testdata, "manifest.json")))["models"].items()
          if k in ("sd1", "sdxl")}
import comfy.sd  # noqa: E402
import comfy.supported_models as sm  # noqa: E402


class TinySD15(sm.SD15):
    # the tiny UNet's widths, so that ComfyUI's detection accepts it (as make_model_save.py)
    unet_config = {k: setcfg["sd1"]["unet_config"][k] for k in
                   ("context_dim", "model_channels", "use_linear_in_transformer", "adm_in_channels",
                    "use_temporal_attention", "transformer_depth")}


sm.models.insert(0, TinySD15)

ckpt = "testdata/models/tiny-sd1.safetensors"
cnet = "testdata/models/tiny-controlnet-sd1.safetensors"
model, _, _, _ = comfy.sd.load_checkpoint_guess_config(os.path.join(shared, ckpt), output_vae=False,
                                                       output_clip=False)

base = comfy.utils.load_torch_file(os.path.join(shared, ckpt))
cn = comfy.utils.load_torch_file(os.path.join(shared, cnet))
diff = {}
merged_keys = 0
for k, v in cn.items():
    uk = "model.diffusion_model." + k[len("control_model."):] if k.startswith("control_model.") else None
    if uk in base and base[uk].shape == v.shape:
        diff[k] = (v.float() - base[uk].float()).to(v.dtype)
        merged_keys += 1
    else:
        diff[k] = v
diff["difference"] = torch.tensor([1.0])
tmp = tempfile.mkdtemp(prefix="diff_cn_")
path = os.path.join(tmp, "tiny-diff-controlnet-sd1.safetensors")
comfy.utils.save_torch_file(diff, path)

control = comfy.controlnet.load_controlnet(path, model)
sd = control.control_model.state_dict()
weights = {}
for k in sorted(sd):
    t = sd[k].float().contiguous()
    weights["control_model." + k] = {"shape": list(t.shape),
                                     "sha256_f32": hashlib.sha256(t.numpy().tobytes()).hexdigest()}
manifest = {
    "description": "ComfyUI's DiffControlNetLoader on a diff ControlNet made from the tiny SD1 ControlNet "
                   "against the tiny SD1 checkpoint's UNet: the loaded weights' SHA-256 (float32 bytes).",
    "generator": "make_diff_controlnet.py",
    "code": "nodes.DiffControlNetLoader -> comfy.controlnet.load_controlnet(path, model) -> "
            "load_controlnet_state_dict (the 'difference' branch: cd += model_sd[k].type(cd.dtype))",
    "checkpoint": ckpt,
    "controlnet": cnet,
    "diff_rule": "control_model.K with model.diffusion_model.K of the same shape in the checkpoint: "
                 "(controlnet.float() - unet.float()).to(controlnet dtype); others as stored; "
                 "'difference' = F32 [1] tensor holding 1.0",
    "merged_keys": merged_keys,
    "weights": weights,
}
json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
print("merged", merged_keys, "of", len(cn), "weights", len(weights))
