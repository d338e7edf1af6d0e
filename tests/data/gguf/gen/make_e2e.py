"""End-to-end goldens: the tiny GGUF Flux files through ComfyUI-GGUF's own loader nodes.

    /usr/bin/python3 make_e2e.py COMFY EINOPS CLIP NODE_MODULES COMFYUI_GGUF SHARED OUT_DIR

COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at the commit
in its COMFY_COMMIT); NODE_MODULES: the npm folder with HF tokenizers for the T5 tokenizer
(../shared/tools/comfyref/flux/package.json); COMFYUI_GGUF: a city96/ComfyUI-GGUF tree (its commit in
a .commit file); SHARED: ../shared; OUT_DIR: tests/data/gguf (models/ made by make_models.py).
Writes OUT_DIR/golden/e2e_*.safetensors and the "e2e" part of OUT_DIR/manifest.json.

ComfyUI runs through ../shared/tools/comfyref/flux/flux_env.py (the Flux set's harness: tiny-model
detection overrides, the T5 tokenizer, fp32 on the CPU) with ComfyUI-GGUF imported as the custom
node pack it is (its `gguf` import served by gen/gguf). Node classes are called as ComfyUI's
executor calls them (V1: getattr(cls(), FUNCTION)(**inputs), V3: cls.execute(**inputs)). The one
addition: ComfyUI-GGUF's CLIP loaders call comfy.sd.load_text_encoder_state_dicts directly, so the
tiny T5/CLIP-L configs flux_env gives load_clip are given to that function too (model_options
t5xxl_model_config / clip_l_model_config, ComfyUI's own override mechanism). Per sampling step the
DiT's input, timestep and output are recorded through a unet function wrapper, as in the Flux set.
"""
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import types

comfy_root, einops_root, clip_root, node_modules, cgguf, shared, out = sys.argv[1:8]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # gguf stand-in
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
import comfy.sd  # noqa: E402
import comfy_extras.nodes_custom_sampler as ncs  # noqa: E402
import comfy_extras.nodes_sd3 as nsd3  # noqa: E402
import comfy_extras.nodes_flux as nflux  # noqa: E402

fdir = os.path.join(shared, "testdata", "flux")
fman = json.load(open(os.path.join(fdir, "manifest.json")))
gman = json.load(open(os.path.join(out, "manifest.json")))

# ---- the tiny models' configs, as the Flux set's reference gave them -------------------------
dev = fman["models"]["flux_dev"]["config"]
head_dim = dev["hidden_size"] // dev["num_heads"]
t5c = dict(fman["models"]["t5xxl"]["config"])
clc = dict(fman["models"]["clip_l"]["config"])
clip_sd = stio.load(os.path.join(fdir, fman["models"]["clip_l"]["file"]))
clc["projection_dim"] = int(clip_sd["text_projection.weight"].shape[0])
# ComfyUI's long-CLIP check (text_encoders/long_clipl.py) replaces clip_l_model_config by
# model_options["model_config"] plus the position count it reads from the file: so the CLIP-L
# config goes in both keys
te_options = {"t5xxl_model_config": t5c, "clip_l_model_config": clc, "model_config": clc}
aec = fman["models"]["ae"]["config"]
flux_env.install_overrides({head_dim: dev["axes_dim"]}, aec, te_options)

_orig_ltes = comfy.sd.load_text_encoder_state_dicts


def load_text_encoder_state_dicts(state_dicts=[], embedding_directory=None, clip_type=comfy.sd.CLIPType.STABLE_DIFFUSION,
                                  model_options={}):
    return _orig_ltes(state_dicts, embedding_directory=embedding_directory, clip_type=clip_type,
                      model_options={**te_options, **model_options})


comfy.sd.load_text_encoder_state_dicts = load_text_encoder_state_dicts

# ---- folders: the files under the names a workflow uses --------------------------------------
root = tempfile.mkdtemp(prefix="gguf_e2e_")
for sub in ("diffusion_models", "text_encoders", "vae"):
    os.makedirs(os.path.join(root, sub))
links = {}
for key, m in gman["models"].items():
    links[m["comfy_name"]] = os.path.join(out, m["file"])
links["text_encoders/clip_l.safetensors"] = os.path.join(fdir, fman["models"]["clip_l"]["file"])
links["text_encoders/t5xxl_fp16.safetensors"] = os.path.join(fdir, fman["models"]["t5xxl"]["file"])
links["diffusion_models/flux1-schnell.safetensors"] = os.path.join(fdir, fman["models"]["flux_schnell"]["file"])
for name, target in links.items():
    os.symlink(os.path.abspath(target), os.path.join(root, name))
exts = set(folder_paths.supported_pt_extensions)
folder_paths.folder_names_and_paths["diffusion_models"] = ([os.path.join(root, "diffusion_models")], exts)
folder_paths.folder_names_and_paths["text_encoders"] = ([os.path.join(root, "text_encoders")], exts)
folder_paths.folder_names_and_paths["vae"] = ([os.path.join(root, "vae")], exts)
for k in list(getattr(folder_paths, "filename_list_cache", {}).keys()):
    del folder_paths.filename_list_cache[k]

# ComfyUI-GGUF as a custom node pack
spec = importlib.util.spec_from_file_location("ComfyUI_GGUF", os.path.join(cgguf, "__init__.py"),
                                              submodule_search_locations=[cgguf])
pack = importlib.util.module_from_spec(spec)
sys.modules["ComfyUI_GGUF"] = pack
spec.loader.exec_module(pack)
GG = pack.NODE_CLASS_MAPPINGS


def v1(cls, **kw):
    return tuple(getattr(cls(), cls.FUNCTION)(**kw))


def v3(cls, **kw):
    cls.hidden = types.SimpleNamespace(unique_id=None, prompt=None, extra_pnginfo=None)
    return tuple(cls.execute(**kw).result)


def record_steps(model, rec):
    m = model.clone()
    step = [0]

    def wrapper(apply_model, args):
        o = apply_model(args["input"], args["timestep"], **args["c"])
        i = step[0]
        rec[f"step{i}.x"] = args["input"].clone()
        rec[f"step{i}.timestep"] = args["timestep"].clone().float()
        rec[f"step{i}.model_out"] = o.clone()
        step[0] += 1
        return o
    m.set_model_unet_function_wrapper(wrapper)
    return m


CASES = [
    {"id": "e2e_gguf_schnell_q4_k_s", "graph": "custom",
     "unet": ("UnetLoaderGGUF", {"unet_name": "flux1-schnell-Q4_K_S.gguf"}),
     "t5": "t5-v1_1-xxl-encoder-Q4_0.gguf",
     "settings": {"width": 128, "height": 96, "batch_size": 1, "seed": 7, "steps": 4, "denoise": 1.0,
                  "sampler": "euler", "scheduler": "simple",
                  "positive": "a cozy cabin in the snowy woods, golden hour"}},
    {"id": "e2e_gguf_dev_q8_0", "graph": "ksampler",
     "unet": ("UnetLoaderGGUF", {"unet_name": "flux1-dev-Q8_0.gguf"}),
     "t5": "t5-v1_1-xxl-encoder-Q4_0.gguf",
     "settings": {"width": 128, "height": 128, "batch_size": 1, "seed": 42, "steps": 4, "cfg": 1.0,
                  "sampler": "euler", "scheduler": "simple", "guidance": 3.5,
                  "positive": "a photograph of an astronaut riding a horse", "negative": ""}},
]
for dd in ("float32", "bfloat16"):
    CASES.append({"id": f"e2e_gguf_dev_q4_0_dequant_{dd}", "graph": "ksampler",
                  "unet": ("UnetLoaderGGUFAdvanced", {"unet_name": "flux1-dev-Q4_0.gguf", "dequant_dtype": dd,
                                                      "patch_dtype": "default", "patch_on_device": False}),
                  "t5": "t5-v1_1-xxl-encoder-Q4_0.gguf",
                  "settings": {"width": 96, "height": 64, "batch_size": 1, "seed": 5, "steps": 3, "cfg": 1.0,
                               "sampler": "euler", "scheduler": "simple", "guidance": 2.5,
                               "positive": "a red fox in tall grass", "negative": ""}})
# the harness itself, checked against the Flux set: its schnell case through plain loaders
CHECK = {"id": "harness_check", "graph": "custom",
         "unet": ("UNETLoader", {"unet_name": "flux1-schnell.safetensors", "weight_dtype": "default"}),
         "t5": "t5xxl_fp16.safetensors", "plain": True,
         "settings": [c for c in fman["cases"] if c["id"] == "e2e_flux_schnell"][0]["settings"]}


def run(case):
    s = case["settings"]
    rec = {}
    # ComfyUI-GGUF keeps dequant_dtype / patch_dtype as attributes of its GGMLOps.Linear class,
    # read when a layer runs: the last Unet loader to run sets them for every GGUF model of the
    # process, text encoders included. The goldens give each model its own loader's setting (what
    # sdflow does): the text is encoded with the defaults, before the Unet loader sets its own.
    GGMLOps = sys.modules["ComfyUI_GGUF.ops"].GGMLOps
    GGMLOps.Linear.dequant_dtype = None
    GGMLOps.Linear.patch_dtype = None
    cl = nodes.NODE_CLASS_MAPPINGS["DualCLIPLoader"] if case.get("plain") else GG["DualCLIPLoaderGGUF"]
    clip = v1(cl, clip_name1="clip_l.safetensors", clip_name2=case["t5"], type="flux")[0]
    pos = v1(nodes.CLIPTextEncode, text=s["positive"], clip=clip)[0]
    rec["positive.cond"] = pos[0][0].clone()
    rec["positive.pooled"] = pos[0][1]["pooled_output"].clone()
    neg = v1(nodes.CLIPTextEncode, text=s["negative"], clip=clip)[0] if "negative" in s else None
    node, kw = case["unet"]
    model = v1(nodes.NODE_CLASS_MAPPINGS[node] if case.get("plain") else GG[node], **kw)[0]
    latent = v3(nsd3.EmptySD3LatentImage, width=s["width"], height=s["height"], batch_size=s["batch_size"])[0]
    m = record_steps(model, rec)
    if case["graph"] == "custom":
        noise = v3(ncs.RandomNoise, noise_seed=s["seed"])[0]
        rec["noise"] = noise.generate_noise(latent).clone()
        guider = v3(ncs.BasicGuider, model=m, conditioning=pos)[0]
        sampler = v3(ncs.KSamplerSelect, sampler_name=s["sampler"])[0]
        sigmas = v3(ncs.BasicScheduler, model=m, scheduler=s["scheduler"], steps=s["steps"], denoise=s["denoise"])[0]
        rec["sigmas"] = sigmas.clone().float()
        o, den = v3(ncs.SamplerCustomAdvanced, noise=noise, guider=guider, sampler=sampler, sigmas=sigmas,
                    latent_image=latent)
        rec["latent_out"] = o["samples"].clone()
        rec["denoised_out"] = den["samples"].clone()
    else:
        pos = v3(nflux.FluxGuidance, conditioning=pos, guidance=s["guidance"])[0]
        rec["positive.guidance"] = torch.tensor([float(pos[0][1]["guidance"])])
        o = v1(nodes.KSampler, model=m, seed=s["seed"], steps=s["steps"], cfg=s["cfg"], sampler_name=s["sampler"],
               scheduler=s["scheduler"], positive=pos, negative=neg, latent_image=latent, denoise=1.0)[0]
        rec["latent_out"] = o["samples"].clone()
    return {k: v.contiguous().float() for k, v in rec.items()}


TOL_TEXT = [c for c in fman["cases"] if c["id"] == "flux_text"][0]["tolerance"]
TOL_E2E = [c for c in fman["cases"] if c["id"] == "e2e_flux_schnell"][0]["tolerance"]


def main():
    # 1. the harness reproduces the Flux set's own golden
    ref = stio.load(os.path.join(fdir, "golden", "e2e_flux_schnell.safetensors"))
    got = run(CHECK)
    for k in ("positive.cond", "positive.pooled", "step0.model_out", "step3.model_out", "denoised_out"):
        rk = {"denoised_out": "denoised_output"}.get(k, k)
        if rk in ref:
            d = (got[k] - ref[rk]).abs().max().item()
            print(f"harness check {k}: max |diff| {d:.3g}")
            assert d < 1e-5, k
    cases = []
    os.makedirs(os.path.join(out, "golden"), exist_ok=True)
    for case in CASES:
        rec = run(case)
        path = os.path.join(out, "golden", case["id"] + ".safetensors")
        stio.save(rec, path, {"source": "ComfyUI + ComfyUI-GGUF loaders"})
        node, kw = case["unet"]
        cases.append({
            "id": case["id"], "file": "golden/" + case["id"] + ".safetensors",
            "graph": {"custom": "RandomNoise, BasicGuider, KSamplerSelect, BasicScheduler, SamplerCustomAdvanced "
                                "on EmptySD3LatentImage; CLIPTextEncode(positive)",
                      "ksampler": "CLIPTextEncode + FluxGuidance(positive), CLIPTextEncode(negative), "
                                  "EmptySD3LatentImage, KSampler"}[case["graph"]],
            "graph_kind": case["graph"],
            "unet_loader": {"node": node, "inputs": kw},
            "clip_loader": {"node": "DualCLIPLoaderGGUF",
                            "inputs": {"clip_name1": "clip_l.safetensors", "clip_name2": case["t5"], "type": "flux"}},
            "settings": case["settings"],
            "notes": ["text encoded with ComfyUI-GGUF's default dequant_dtype/patch_dtype before the Unet "
                      "loader runs: ComfyUI-GGUF stores its Advanced loader's settings on a class shared by "
                      "every GGUF model of the process; each model here has its own loader's settings"],
            "tensors": {k: {"shape": list(v.shape), "role": "expected" if k == "latent_out" else "intermediate",
                            "tolerance": dict(TOL_TEXT if k.startswith("positive.") else TOL_E2E)}
                        for k, v in rec.items()},
            "tolerance": dict(TOL_E2E),
            "tolerance_note": "the Flux set's own: its flux_text case's for the text encoder outputs, its "
                              "e2e cases' for the rest (copied from ../shared/testdata/flux/manifest.json)",
        })
        print(case["id"], "latent", tuple(rec["latent_out"].shape))
    gman["e2e"] = cases
    gman["reference"]["comfyui"] = {"commit": open(os.path.join(shared, "tools", "comfyref", "COMFY_COMMIT")).read().strip(),
                                    "harness": "../shared/tools/comfyref/flux/flux_env.py, make_e2e.py"}
    gman["reference"]["clip_l"] = {"file": "flux set " + fman["models"]["clip_l"]["file"],
                                   "comfy_name": "text_encoders/clip_l.safetensors"}
    json.dump(gman, open(os.path.join(out, "manifest.json"), "w"), indent=1)
    shutil.rmtree(root)


main()
