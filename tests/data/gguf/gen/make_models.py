"""Tiny GGUF files of the Flux reference set's models, made the way their real counterparts are.

    /usr/bin/python3 make_models.py SHARED_DIR OUT_DIR

SHARED_DIR: ../shared (testdata/flux/models holds the tiny safetensors; tools/comfyref their reader);
OUT_DIR: tests/data/gguf. Writes OUT_DIR/models/*.gguf and the "models" part of OUT_DIR/manifest.json
(each file's source, sha256, and the type every tensor got and why).

Diffusion models follow city96's pipeline: ComfyUI-GGUF tools/convert.py (arch "flux", keys as in the
safetensors; BF16 source tensors stay BF16, 1-D tensors and tensors of <= 1024 elements become F32),
then llama-quantize with ComfyUI-GGUF's tools/lcpp.patch rules for image models: only 2-D "*weight"
tensors are quantized, never txt_in., img_in., time_in., vector_in., guidance_in. or final_layer.;
a K-type tensor whose rows are not a multiple of 256 falls back to F16 (the tiny models' 64-wide
rows mostly do: a Q4_K_S file then mixes Q4_K, F16, BF16 and F32, as real files mix types).
The T5 follows llama.cpp's convert_hf_to_gguf (arch "t5encoder", llama.cpp tensor names, F16
matrices, F32 norms) and llama-quantize's rules (relative attention bias never quantized).
Quantization itself is quantize.py's round-to-nearest (not llama.cpp's search): the bytes only have
to be valid; what they mean is ComfyUI-GGUF's dequantization.
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as Q, LlamaFileType as FT  # noqa: E402
import quantize  # noqa: E402

FLUX_KEEP = ("txt_in.", "img_in.", "time_in.", "vector_in.", "guidance_in.", "final_layer.")
K_TYPES = (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K)
# ftype -> default tensor type (llama-quantize)
FTYPES = {"Q8_0": (FT.MOSTLY_Q8_0, Q.Q8_0), "Q4_0": (FT.MOSTLY_Q4_0, Q.Q4_0),
          "Q4_K_S": (FT.MOSTLY_Q4_K_S, Q.Q4_K), "Q5_1": (FT.MOSTLY_Q5_1, Q.Q5_1)}

# (output, source model key of the flux set, ftype)
FLUX_FILES = [
    ("tiny-flux1-dev-Q8_0.gguf", "flux_dev", "Q8_0"),
    ("tiny-flux1-dev-Q4_0.gguf", "flux_dev", "Q4_0"),
    ("tiny-flux1-schnell-Q4_K_S.gguf", "flux_schnell", "Q4_K_S"),
]
T5_FILES = [("tiny-t5-v1_1-xxl-encoder-Q4_0.gguf", "t5xxl", "Q4_0")]

# HF T5 encoder names -> llama.cpp's (convert_hf_to_gguf's tensor map for T5ENCODER)
T5_TO_LLAMACPP = [
    ("shared.weight", "token_embd.weight"),
    ("encoder.final_layer_norm.weight", "enc.output_norm.weight"),
]
T5_BLOCK = [
    ("layer.0.SelfAttention.q.weight", "attn_q.weight"), ("layer.0.SelfAttention.k.weight", "attn_k.weight"),
    ("layer.0.SelfAttention.v.weight", "attn_v.weight"), ("layer.0.SelfAttention.o.weight", "attn_o.weight"),
    ("layer.0.SelfAttention.relative_attention_bias.weight", "attn_rel_b.weight"),
    ("layer.0.layer_norm.weight", "attn_norm.weight"),
    ("layer.1.DenseReluDense.wi_0.weight", "ffn_gate.weight"), ("layer.1.DenseReluDense.wi_1.weight", "ffn_up.weight"),
    ("layer.1.DenseReluDense.wo.weight", "ffn_down.weight"), ("layer.1.layer_norm.weight", "ffn_norm.weight"),
]


def t5_name(k):
    for a, b in T5_TO_LLAMACPP:
        if k == a:
            return b
    parts = k.split(".")
    assert parts[0] == "encoder" and parts[1] == "block", k
    rest = ".".join(parts[3:])
    for a, b in T5_BLOCK:
        if rest == a:
            return f"enc.blk.{parts[2]}.{b}"
    raise KeyError(k)


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def stage2(name, shape, cur, default):
    """llama-quantize with lcpp.patch's image-model rules: the type and why."""
    if not name.endswith("weight"):
        return cur, "not a weight: kept"
    nd = len(shape)
    while nd > 1 and shape[len(shape) - nd] == 1:  # ggml_n_dims: trailing ne of 1 do not count
        nd -= 1
    if nd != 2:
        return cur, "not 2-D: kept"
    if any(x in name for x in FLUX_KEEP):
        return cur, "flux input/output layer: kept"
    if default in K_TYPES and shape[-1] % 256 != 0:
        return Q.F16, "rows not a multiple of 256: F16 fallback"
    return default, "quantized"


def flux_gguf(sd, ftype, path):
    ft, default = FTYPES[ftype]
    w = gguf.GGUFWriter(arch="flux")
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_file_type(ft)
    types = {}
    for name in sd:  # the safetensors order (sorted names)
        t = sd[name]
        x = t.float().numpy()
        # convert.py
        cur = Q.BF16 if t.dtype == torch.bfloat16 else Q.F16
        if t.dtype in (torch.float32, torch.bfloat16) and (x.ndim == 1 or x.size <= 1024):
            cur = Q.F32
        qt, why = stage2(name, x.shape, cur, default)
        w.add_tensor(name, quantize.quantize(x, qt), qt, x.shape)
        types[name] = [qt.name, why]
    w.write(path)
    return types


def t5_gguf(sd, ftype, path):
    ft, default = FTYPES[ftype]
    w = gguf.GGUFWriter(arch="t5encoder")
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_file_type(ft)
    w.add_string("tokenizer.ggml.model", "t5")
    types = {}
    for key in sd:
        if key == "encoder.embed_tokens.weight":
            continue  # tied to shared.weight; convert_hf_to_gguf skips it
        name = t5_name(key)
        x = sd[key].float().numpy()
        if x.ndim == 1:
            qt, why = Q.F32, "1-D: F32 (convert_hf_to_gguf)"
        elif "attn_rel_b" in name:
            qt, why = Q.F16, "relative attention bias: never quantized (llama-quantize)"
        else:
            qt, why = default, "quantized"
        w.add_tensor(name, quantize.quantize(x, qt), qt, x.shape)
        types[name] = [qt.name, why]
    w.write(path)
    return types


def main(shared, out):
    sys.path.insert(0, os.path.join(shared, "tools", "comfyref"))
    sys.path.insert(0, os.path.join(shared, "tools", "comfyref", "flux"))
    import stio8
    fman = json.load(open(os.path.join(shared, "testdata", "flux", "manifest.json")))
    os.makedirs(os.path.join(out, "models"), exist_ok=True)
    models = {}
    for fname, src, ftype in FLUX_FILES + T5_FILES:
        m = fman["models"][src]
        sd = stio8.load(os.path.join(shared, "testdata", "flux", m["file"]))
        path = os.path.join(out, "models", fname)
        types = (t5_gguf if src == "t5xxl" else flux_gguf)(sd, ftype, path)
        kind = "text_encoder" if src == "t5xxl" else "diffusion_model"
        models[fname.replace(".gguf", "")] = {
            "file": "models/" + fname, "bytes": os.path.getsize(path), "sha256": sha(path),
            "source": {"set": "flux", "model": src, "file": m["file"], "sha256": m["sha256"]},
            "kind": kind, "ftype": ftype,
            "comfy_name": ("text_encoders/" if kind == "text_encoder" else "diffusion_models/") + fname.replace("tiny-", ""),
            "made_by": "make_models.py " + ("t5_gguf" if src == "t5xxl" else "flux_gguf"),
            "tensor_types": types,
        }
        print(fname, os.path.getsize(path), "bytes")
    return models


if __name__ == "__main__":
    shared, out = sys.argv[1:3]
    models = main(shared, out)
    mpath = os.path.join(out, "manifest.json")
    m = json.load(open(mpath)) if os.path.exists(mpath) else {}
    m["models"] = models
    json.dump(m, open(mpath, "w"), indent=1)
