#!/usr/bin/python3
"""What ComfyUI's own CheckpointSave, ModelSave, CLIPSave and VAESave
(comfy_extras/nodes_model_merging.py) write for the tiny SD1 and SDXL
checkpoints of the shared test data: for every file a node writes, its name
under the output folder (filename_prefix counters), every tensor's key, dtype
and shape, and the safetensors metadata (with the prompt and extra_pnginfo the
generator passes). No tensor values are kept: the files are only listed.

usage: /usr/bin/python3 make_model_save.py COMFY EINOPS CLIP SHARED [OUT_DIR]
  COMFY EINOPS CLIP: the trees shared/tools/comfyref/extract_refs.sh extracts
  SHARED: ../shared (testdata/models/tiny-sd1, tiny-sdxl)
Writes OUT_DIR/manifest.json (default: beside this script).
"""
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

import comfy.sd  # noqa: E402
import comfy.supported_models as sm  # noqa: E402
import comfy.utils  # noqa: E402
import folder_paths  # noqa: E402
import stio  # noqa: E402
import comfy_extras.nodes_model_merging as mm  # noqa: E402

testdata = os.path.join(shared, "testdata")
setcfg = {k: v["config"] for k, v in json.load(open(os.path.join(testdata, "manifest.json")))["models"].items()
          if k in ("sd1", "sdxl")}


def tiny_unet_config(u):
    keys = ("context_dim", "model_channels", "use_linear_in_transformer", "adm_in_channels",
            "use_temporal_attention", "transformer_depth")
    return {k: u[k] for k in keys}


class TinySD15(sm.SD15):
    unet_config = tiny_unet_config(setcfg["sd1"]["unet_config"])


class TinySDXL(sm.SDXL):
    unet_config = tiny_unet_config(setcfg["sdxl"]["unet_config"])


sm.models.insert(0, TinySDXL)
sm.models.insert(0, TinySD15)
TE = {"sd1": {"clip_l_model_config": dict(setcfg["sd1"]["clip_l"])},
      "sdxl": {"clip_l_model_config": dict(setcfg["sdxl"]["clip_l"]),
               "clip_g_model_config": dict(setcfg["sdxl"]["clip_g"],
                                           projection_dim=setcfg["sdxl"]["clip_g"]["hidden_size"])}}


def vae_of(path, kind):
    sd = comfy.utils.load_torch_file(path)
    vae_sd = comfy.utils.state_dict_prefix_replace(sd, {"first_stage_model.": ""}, filter_keys=True)
    c = setcfg[kind]["vae"]
    dd = {"double_z": True, "z_channels": c["z_channels"], "resolution": 256, "in_channels": 3, "out_ch": 3,
          "ch": c["ch"], "ch_mult": list(c["ch_mult"]), "num_res_blocks": c["num_res_blocks"],
          "attn_resolutions": [], "dropout": 0.0}
    return comfy.sd.VAE(sd=vae_sd, config={"params": {"ddconfig": dd, "embed_dim": c["embed_dim"]}})


PROMPT = {"1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tiny.safetensors"}}}
EXTRA = {"workflow": {"nodes": [], "links": []}}

manifest = {
    "description": "The files ComfyUI's CheckpointSave, ModelSave, CLIPSave and VAESave write for the tiny "
                   "SD1 / SDXL checkpoints: names, keys with dtype and shape, metadata (no values).",
    "generator": "make_model_save.py",
    "code": "comfy_extras.nodes_model_merging (save_checkpoint -> comfy.sd.save_checkpoint -> "
            "model_base.state_dict_for_saving; CLIPSave; VAESave), folder_paths.get_save_image_path; "
            "safetensors written by the comfyref shim stio.py (metadata as given)",
    "prompt": PROMPT,
    "extra_pnginfo": EXTRA,
    "cases": [],
}
for kind, fname in (("sd1", "tiny-sd1.safetensors"), ("sdxl", "tiny-sdxl.safetensors")):
    path = os.path.join(testdata, "models", fname)
    model, clipm, _, _ = comfy.sd.load_checkpoint_guess_config(path, output_vae=False, output_clip=True,
                                                              te_model_options=TE[kind])
    vae = vae_of(path, kind)
    for node, args in (("CheckpointSave", {"model": model, "clip": clipm, "vae": vae,
                                           "filename_prefix": "checkpoints/ComfyUI"}),
                       ("ModelSave", {"model": model, "filename_prefix": "diffusion_models/ComfyUI"}),
                       ("CLIPSave", {"clip": clipm, "filename_prefix": "clip/ComfyUI"}),
                       ("VAESave", {"vae": vae, "filename_prefix": "vae/ComfyUI_vae"})):
        outd = tempfile.mkdtemp(prefix="model_save_")
        folder_paths.set_output_directory(outd)
        cls = getattr(mm, node)
        inst = cls()
        inst.output_dir = outd
        getattr(inst, cls.FUNCTION)(**args, prompt=PROMPT, extra_pnginfo=EXTRA)
        files = []
        for root, _, names in os.walk(outd):
            for n in sorted(names):
                p = os.path.join(root, n)
                hdr = dict(stio.read_header(p)[1])
                meta = hdr.pop("__metadata__", {})
                files.append({"file": os.path.relpath(p, outd),
                              "tensors": {k: [v["dtype"], v["shape"]] for k, v in sorted(hdr.items())},
                              "metadata": meta})
        manifest["cases"].append({"family": kind, "checkpoint": "testdata/models/" + fname, "node": node,
                                  "inputs": {"filename_prefix": args["filename_prefix"]},
                                  "files": sorted(files, key=lambda f: f["file"])})
        print(kind, node, [f["file"] for f in files], sum(len(f["tensors"]) for f in files))

json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
