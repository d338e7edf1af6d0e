#!/usr/bin/env python3
"""gguf_models.py FAMILY SET MODELS: GGUF files of a reference set's tiny
models (FAMILY sd3: SET = .../testdata/sd3; zimage: .../testdata/zimage),
written under the names the GGUF example workflows use, in the ComfyUI
folders of MODELS, for the CLI tests (cli.lua, cli.ui_workflows):
  - the diffusion model as city96's ComfyUI-GGUF tools/convert.py writes it
    (general.architecture "sd3" / "lumina2", the keys as in the safetensors
    file, BF16 tensors BF16, F16 ones F16, and F32/BF16 tensors that are 1-D
    or of at most 1024 elements F32): diffusion_models/sd3.5_medium-Q8_0.gguf,
    diffusion_models/z_image_turbo-Q8_0.gguf;
  - the text encoder as llama.cpp's convert_hf_to_gguf lays it out
    (llama.cpp tensor names, 1-D tensors F32, matrices as stored): the SD3
    set's T5-XXL as arch t5encoder (text_encoders/
    t5-v1_1-xxl-encoder-Q8_0.gguf), the Z-Image set's Qwen3-4B as arch qwen3
    (text_encoders/Qwen3-4B-Q8_0.gguf).
The files hold the tiny models unquantized (the real ones of these names
are Q8_0): the examples only have to run, and the quantized paths have
their own goldens (nodes.golden_gguf_dit_nodes, nodes.golden_gguf_te_nodes).
Standard library only, like sd3_models.py."""
import json
import os
import struct
import sys

GGML = {"F32": 0, "F16": 1, "BF16": 30}
SIZE = {"F32": 4, "F16": 2, "BF16": 2}
ALIGN = 32


def read_st(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[base + b:base + e])
    return out


def to_f32(dtype, raw):
    """F16 / BF16 / F32 bytes as F32 bytes (exact)."""
    if dtype == "F32":
        return raw
    n = len(raw) // 2
    if dtype == "BF16":
        return b"".join(struct.pack("<I", v << 16) for v in struct.unpack("<%dH" % n, raw))
    return struct.pack("<%df" % n, *struct.unpack("<%de" % n, raw))


def gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, arch, tensors):
    """tensors: list of (name, ggml type name, PyTorch shape, bytes)."""
    kv = [("general.architecture", 8, gstr(arch)), ("general.quantization_version", 4, struct.pack("<I", 2))]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for k, ty, v in kv:
        head += gstr(k) + struct.pack("<I", ty) + v
    off, blobs = 0, []
    for name, ty, shape, raw in tensors:
        dims = list(reversed(shape)) or [1]
        head += gstr(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
        head += struct.pack("<IQ", GGML[ty], off)
        pad = (-len(raw)) % ALIGN
        blobs.append(raw + b"\0" * pad)
        off += len(raw) + pad
    head += b"\0" * ((-len(head)) % ALIGN)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)


def convert_py(st):
    """ComfyUI-GGUF tools/convert.py's types."""
    out = []
    for name in sorted(st):
        dtype, shape, raw = st[name]
        n = 1
        for d in shape:
            n *= d
        ty = "BF16" if dtype == "BF16" else "F16" if dtype == "F16" else "F32"
        if dtype in ("F32", "BF16") and (len(shape) <= 1 or n <= 1024):
            ty = "F32"
        if ty == "F32":
            raw = to_f32(dtype, raw)
        elif dtype == "F32":  # an F32 matrix: convert.py stores it F16
            raw = struct.pack("<%de" % n, *struct.unpack("<%df" % n, raw))
        out.append((name, ty, shape, raw))
    return out


T5_BLOCK = {
    "layer.0.SelfAttention.q.weight": "attn_q.weight", "layer.0.SelfAttention.k.weight": "attn_k.weight",
    "layer.0.SelfAttention.v.weight": "attn_v.weight", "layer.0.SelfAttention.o.weight": "attn_o.weight",
    "layer.0.SelfAttention.relative_attention_bias.weight": "attn_rel_b.weight",
    "layer.0.layer_norm.weight": "attn_norm.weight", "layer.1.DenseReluDense.wi_0.weight": "ffn_gate.weight",
    "layer.1.DenseReluDense.wi_1.weight": "ffn_up.weight", "layer.1.DenseReluDense.wo.weight": "ffn_down.weight",
    "layer.1.layer_norm.weight": "ffn_norm.weight",
}
QWEN_BLOCK = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}


def llama_cpp(st, t5):
    """llama.cpp's names; 1-D tensors F32, matrices as stored."""
    top = {"shared.weight": "token_embd.weight", "encoder.final_layer_norm.weight": "enc.output_norm.weight"} if t5 \
        else {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    pre, blk = ("encoder.block.", T5_BLOCK) if t5 else ("model.layers.", QWEN_BLOCK)
    out = []
    for name in sorted(st):
        dtype, shape, raw = st[name]
        if name in top:
            new = top[name]
        elif name.startswith(pre):
            i, rest = name[len(pre):].split(".", 1)
            if rest not in blk:
                sys.exit("gguf_models.py: no llama.cpp name for %s" % name)
            new = ("enc.blk.%s.%s" if t5 else "blk.%s.%s") % (i, blk[rest])
        else:
            continue  # lm_head and the like: not part of the encoder
        ty = dtype
        if len(shape) <= 1:
            ty, raw = "F32", to_f32(dtype, raw)
        out.append((new, ty, shape, raw))
    return out


def main():
    family, sset, models = sys.argv[1:4]
    man = json.load(open(os.path.join(sset, "manifest.json")))["models"]

    def src(kind):
        for m in man.values():
            if os.path.basename(m.get("comfy_name", "")).startswith(kind):
                return os.path.join(sset, m["file"])
        sys.exit("gguf_models.py: the set has no %s model" % kind)
    if family == "sd3":
        write_gguf(os.path.join(models, "diffusion_models", "sd3.5_medium-Q8_0.gguf"), "sd3",
                   convert_py(read_st(src("sd3.5_medium.safetensors"))))
        write_gguf(os.path.join(models, "text_encoders", "t5-v1_1-xxl-encoder-Q8_0.gguf"), "t5encoder",
                   llama_cpp(read_st(src("t5xxl")), True))
    elif family == "zimage":
        write_gguf(os.path.join(models, "diffusion_models", "z_image_turbo-Q8_0.gguf"), "lumina2",
                   convert_py(read_st(src("z_image_turbo"))))
        write_gguf(os.path.join(models, "text_encoders", "Qwen3-4B-Q8_0.gguf"), "qwen3",
                   llama_cpp(read_st(src("qwen_3_4b")), False))
    else:
        sys.exit("gguf_models.py: family sd3 or zimage")


main()
