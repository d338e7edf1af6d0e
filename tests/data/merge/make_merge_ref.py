#!/usr/bin/python3
"""Merged weights computed by ComfyUI's own model merging (ModelMergeSimple,
ModelMergeSubtract, ModelMergeAdd, CLIPMergeSimple and a LoRA on top of a
merge) on the tiny SD1 checkpoint of the shared test data (model1) and the
checkpoint `sdflow synth --preset sd1-tiny --seed 7` writes (model2).

usage: /usr/bin/python3 make_merge_ref.py COMFY EINOPS CLIP TESTDATA MODEL2 [OUT_DIR]
  COMFY EINOPS CLIP: the trees shared/tools/comfyref/extract_refs.sh extracts
  TESTDATA: shared/testdata (models/tiny-sd1.safetensors, tiny-lora-sd1)
  MODEL2:   the seed-7 synth checkpoint
Writes merge_ref.safetensors (a few weights per case, float32) beside this
script. UNet weights are read from the patched models after ComfyUI's
ModelPatcher.patch_model(force_patch_weights=True); CLIP weights are
comfy.lora.calculate_weight over the merged CLIP patcher's patch list (what
patch_weight_to_device runs; see clip_weights).
"""
import os
import sys

comfy, einops, clip, testdata, model2 = sys.argv[1:6]
out_dir = sys.argv[6] if len(sys.argv) > 6 else os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, "/work/shared/tools/comfyref")
import comfy_env  # noqa: E402

comfy_env.setup(comfy, einops, clip)
import json  # noqa: E402
import torch  # noqa: E402
import stio  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.utils  # noqa: E402
import comfy.supported_models as sm  # noqa: E402
import comfy_extras.nodes_model_merging as mm  # noqa: E402
import nodes  # noqa: E402

cfg = json.load(open(os.path.join(testdata, "manifest.json")))["models"]["sd1"]["config"]
u = cfg["unet_config"]


class TinySD15(sm.SD15):
    unet_config = {"context_dim": u["context_dim"], "model_channels": u["model_channels"],
                   "use_linear_in_transformer": False, "adm_in_channels": None,
                   "use_temporal_attention": False, "transformer_depth": u["transformer_depth"]}


sm.models.insert(0, TinySD15)
te = {"clip_l_model_config": dict(cfg["clip_l"])}


def load(path):
    m, c, _, _ = comfy.sd.load_checkpoint_guess_config(path, output_vae=False, output_clip=True,
                                                      te_model_options=te)
    return m, c


m1, c1 = load(os.path.join(testdata, "models/tiny-sd1.safetensors"))
m2, c2 = load(model2)
lora = comfy.utils.load_torch_file(os.path.join(testdata, "models/tiny-lora-sd1.safetensors"))

UNET_KEYS = ["time_embed.0.weight", "input_blocks.1.1.proj_in.weight",
             "middle_block.1.transformer_blocks.0.attn2.to_k.weight", "output_blocks.5.0.in_layers.2.bias",
             "out.2.weight"]
CLIP_KEYS = ["text_model.embeddings.position_embedding.weight", "text_model.encoder.layers.0.mlp.fc1.bias",
             "text_model.encoder.layers.3.self_attn.q_proj.bias", "text_model.final_layer_norm.weight"]


def unet_weights(patcher, tag, out):
    patcher.patch_model(force_patch_weights=True)
    sd = patcher.model.diffusion_model.state_dict()
    for k in UNET_KEYS:
        out["%s.%s" % (tag, k)] = sd[k].float().clone()
    patcher.unpatch_model()


def clip_weights(c, tag, out):
    # Read back after c.patcher.patch_model(), the first CLIP merge showed the
    # original weights (the cause was not pinned down), so the patched weight
    # is computed the way patch_weight_to_device computes it: ComfyUI's
    # comfy.lora.calculate_weight over the patcher's patch list, on the
    # float32 original weight.
    import comfy.lora
    sd1 = comfy.utils.load_torch_file(os.path.join(testdata, "models/tiny-sd1.safetensors"))
    for k in CLIP_KEYS:
        key = "clip_l.transformer." + k
        w = sd1["cond_stage_model.transformer." + k].float().clone()
        out["%s.%s" % (tag, k)] = comfy.lora.calculate_weight(c.patcher.patches[key], w, key).float()


out = {}
unet_weights(mm.ModelMergeSimple().merge(m1, m2, 0.5)[0], "simple_0.5", out)
unet_weights(mm.ModelMergeSimple().merge(m1, m2, 0.25)[0], "simple_0.25", out)
unet_weights(mm.ModelSubtract().merge(m1, m2, 0.7)[0], "subtract_0.7", out)
unet_weights(mm.ModelAdd().merge(m1, m2)[0], "add", out)
# LoraLoaderModelOnly(strength 0.8) on the 0.25 merge, and a merge whose
# model2 carries that LoRA
merged = mm.ModelMergeSimple().merge(m1, m2, 0.25)[0]
lm, _ = comfy.sd.load_lora_for_models(merged, None, lora, 0.8, 0)
unet_weights(lm, "simple_0.25_lora_0.8", out)
l2, _ = comfy.sd.load_lora_for_models(m2, None, lora, 0.8, 0)
unet_weights(mm.ModelMergeSimple().merge(m1, l2, 0.25)[0], "simple_0.25_over_lora2", out)
clip_weights(mm.CLIPMergeSimple().merge(c1, c2, 0.3)[0], "clip_simple_0.3", out)
clip_weights(mm.CLIPSubtract().merge(c1, c2, 1.5)[0], "clip_subtract_1.5", out)

stio.save({k: v.contiguous() for k, v in out.items()}, os.path.join(out_dir, "merge_ref.safetensors"),
          metadata={"generator": "make_merge_ref.py"})
print("wrote", len(out), "tensors")
