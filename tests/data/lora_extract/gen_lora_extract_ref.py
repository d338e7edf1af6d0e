#!/usr/bin/python3
"""What ComfyUI's own LoraSave ("Extract and Save Lora", comfy_extras/nodes_lora_extract.py)
writes for the difference of two tiny SD1 checkpoints: model1 = the shared test data's
tiny-sd1, model2 = `sdflow synth --preset sd1-tiny --seed 7` (the test synthesizes the same
bytes with sd_synth_sd1_write), model_diff = ModelSubtract().merge(model1, model2, multiplier).

usage: /usr/bin/python3 gen_lora_extract_ref.py COMFY EINOPS CLIP TESTDATA MODEL2 [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts
  TESTDATA: ../shared/testdata (models/tiny-sd1.safetensors)
  MODEL2:   the seed-7 synth checkpoint
Writes lora_extract_ref.safetensors and manifest.json beside this script (or in OUT_DIR).

For every case (LoraSave's inputs): the saved file's name under the output folder and every
key with its dtype and shape (all of them, in the manifest), and for the manifest's few
"checked" modules the saved tensors themselves ("<case>/<saved key>", float32 copies of the
float16 values) plus, once, the weight difference LoraSave decomposed
("diff/<module>.weight", model_diff.model_state_dict after load_models_gpu with
force_patch_weights, as calc_lora_model reads it) and its singular values
("svd/<module>", torch.linalg.svd(diff.float()) as extract_lora calls it, flattened as it
flattens conv kernels). Runs on Debian's python3-torch 1.13, CPU, float32.
"""
import json
import os
import sys
import tempfile
import types

comfy_root, einops_root, clip_root, testdata, model2 = sys.argv[1:6]
out_dir = sys.argv[6] if len(sys.argv) > 6 else os.path.dirname(os.path.abspath(__file__))
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "../../../../shared/tools/comfyref"))
sys.path.insert(0, "/work/shared/tools/comfyref")
import comfy_env  # noqa: E402

comfy_env.setup(comfy_root, einops_root, clip_root)
server = types.ModuleType("server")
server.PromptServer = types.SimpleNamespace(instance=None)
sys.modules.setdefault("server", server)
import torch  # noqa: E402
import stio  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.model_management  # noqa: E402
import comfy.supported_models as sm  # noqa: E402
import folder_paths  # noqa: E402
import comfy_extras.nodes_model_merging as mm  # noqa: E402
import comfy_extras.nodes_lora_extract as le  # noqa: E402

cfg = json.load(open(os.path.join(testdata, "manifest.json")))["models"]["sd1"]["config"]
u = cfg["unet_config"]


class TinySD15(sm.SD15):
    unet_config = {"context_dim": u["context_dim"], "model_channels": u["model_channels"],
                   "use_linear_in_transformer": False, "adm_in_channels": None,
                   "use_temporal_attention": False, "transformer_depth": u["transformer_depth"]}


sm.models.insert(0, TinySD15)
te = {"clip_l_model_config": dict(cfg["clip_l"])}


def load(path):
    m, _, _, _ = comfy.sd.load_checkpoint_guess_config(path, output_vae=False, output_clip=False,
                                                      te_model_options=te)
    return m


m1 = load(os.path.join(testdata, "models/tiny-sd1.safetensors"))
m2 = load(model2)
MULT = 1.0
diff_model = mm.ModelSubtract().merge(m1, m2, MULT)[0]

# modules whose saved tensors are kept: a 3x3 conv with 4 input channels (rank cut to 4), a 3x3
# conv, a 1x1 conv, linears wider / taller than square, the output conv (4 out channels), and a
# norm whose weight and bias are 1-D (".diff" / ".diff_b" with bias_diff)
CHECKED = ["input_blocks.0.0", "input_blocks.1.0.in_layers.2", "input_blocks.1.1.proj_in",
           "input_blocks.1.1.transformer_blocks.0.attn2.to_k",
           "input_blocks.1.1.transformer_blocks.0.ff.net.0.proj", "time_embed.0", "out.2",
           "input_blocks.1.0.in_layers.0"]
CASES = [
    {"id": "standard_r8", "filename_prefix": "loras/ComfyUI_extracted_lora", "rank": 8,
     "lora_type": "standard", "bias_diff": True},
    {"id": "standard_full", "filename_prefix": "loras/extract_full", "rank": 4096,
     "lora_type": "standard", "bias_diff": False},
    {"id": "full_diff", "filename_prefix": "loras/diff", "rank": 8, "lora_type": "full_diff",
     "bias_diff": True},
]

tensors = {}
manifest = {
    "description": "ComfyUI's LoraSave on ModelSubtract(tiny-sd1, synth sd1-tiny seed 7): saved files "
                   "(keys, dtypes, shapes), a few modules' saved tensors, their weight differences and "
                   "singular values.",
    "generator": "gen_lora_extract_ref.py",
    "command": "/usr/bin/python3 gen_lora_extract_ref.py COMFY EINOPS CLIP SHARED/testdata MODEL2 "
               "(trees from shared/tools/comfyref/extract_refs.sh)",
    "comfyui_commit": open(os.path.join(comfy_root, "..", "COMFY_COMMIT")).read().strip()
    if os.path.exists(os.path.join(comfy_root, "..", "COMFY_COMMIT")) else "3cd7b32f1b7e7e90395cefe7d9f9b1f89276d8ce",
    "torch": "Debian python3-torch %s, CPU, float32, LAPACK from OpenBLAS" % torch.__version__,
    "code": "comfy_extras.nodes_lora_extract.LoraSave.execute (calc_lora_model, extract_lora); "
            "comfy_extras.nodes_model_merging.ModelSubtract().merge",
    "file": "lora_extract_ref.safetensors",
    "model1": "testdata/models/tiny-sd1.safetensors",
    "model2": {"synth": "sd1-tiny", "seed": 7},
    "multiplier": MULT,
    "checked": CHECKED,
    "tensors": {"<case>/<saved key>": "the saved tensor (float16 values as float32)",
                "diff/<module>.weight, diff/<module>.bias": "the weight difference calc_lora_model reads",
                "svd/<module>": "torch.linalg.svd(diff.float()).S (conv kernels flattened to [out, in*kh*kw])"},
    "cases": [],
}
for case in CASES:
    outd = tempfile.mkdtemp(prefix="lora_extract_")
    folder_paths.set_output_directory(outd)
    le.LoraSave.execute(filename_prefix=case["filename_prefix"], rank=case["rank"], lora_type=case["lora_type"],
                        bias_diff=case["bias_diff"], model_diff=diff_model)
    files = []
    for root, _, names in os.walk(outd):
        files += [os.path.join(root, n) for n in names]
    assert len(files) == 1, files
    path = files[0]
    hdr = dict(stio.read_header(path)[1])
    hdr.pop("__metadata__", None)
    saved = stio.load(path)
    keys = {k: [v["dtype"], v["shape"]] for k, v in sorted(hdr.items())}
    for k, t in saved.items():
        mod = k[len("diffusion_model."):].rsplit(".lora_", 1)[0]
        for suf in (".diff_b", ".diff"):
            if mod.endswith(suf):
                mod = mod[:-len(suf)]
        if mod in CHECKED:
            tensors["%s/%s" % (case["id"], k)] = t.float().contiguous()
    manifest["cases"].append(dict(case, file=os.path.relpath(path, outd), keys=keys))
    print(case["id"], os.path.relpath(path, outd), len(keys))

sd = diff_model.model_state_dict(filter_prefix="diffusion_model.")
for mod in CHECKED:
    for part in ("weight", "bias"):
        k = "diffusion_model.%s.%s" % (mod, part)
        if k in sd:
            tensors["diff/%s.%s" % (mod, part)] = sd[k].float().contiguous().clone()
    w = sd["diffusion_model.%s.weight" % mod].float()
    if w.ndim >= 2:
        flat = w.flatten(start_dim=1) if w.ndim == 4 else w
        tensors["svd/%s" % mod] = torch.linalg.svd(flat)[1].contiguous()

stio.save(tensors, os.path.join(out_dir, "lora_extract_ref.safetensors"))
json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=1)
print(len(tensors), "tensors")
