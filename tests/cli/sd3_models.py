#!/usr/bin/env python3
"""sd3_models.py SET MODELS TOK CLIP_TOK: put the SD3 reference set's tiny
files (SET = .../testdata/sd3) under the names ComfyUI's SD3.5 workflows use,
in the ComfyUI folders of MODELS, and the tokenizers in TOK (the CLIP
vocabulary CLIP_TOK/{vocab.json,merges.txt} and T5's t5_tokenizer/), for
the CLI tests (cli.lua, cli.ui_workflows, cli.comfyui_sd3_examples,
cli.generate_sd3).

Links for the set's files; two files the set has no copy of are written from
its single-file checkpoint, their tensors' bytes as they are:
  - vae/sd3_vae.safetensors: its first_stage_model.* without the prefix (the
    layout of the SD3 VAE people download);
  - checkpoints/sd3.5_medium.safetensors (and sd3.5_large.safetensors):
    the checkpoint without text_encoders.*, i.e. MMDiT + VAE, what Stability
    publishes as sd3.5_medium.safetensors / sd3.5_large.safetensors.
  - checkpoints/sd3_medium_incl_clips_t5xxlfp8.safetensors and
    sd3_medium.safetensors (without text encoders): the single file as SD3
    Medium (2024) was, without MMDiT-X's second attention and q/k norms, for
    ComfyUI's SD3 examples.
The tiny SD3 ControlNet of tests/data/sd3_controlnet (beside this script's
folder) is placed under its comfy_name and as
controlnet/sd3_controlnet_canny.safetensors (ComfyUI's SD3 ControlNet example),
the canny one of tests/data/sd35_controlnet as
controlnet/sd3.5_large_controlnet_canny.safetensors (its SD3.5 Large one).
The set's comfy_name of each model (manifest.json) gives the names; the
single file is also placed as sd3.5_large_fp8_scaled.safetensors (the name
ComfyUI's SD3.5 example loads; the tiny file is not fp8-scaled)."""
import json
import os
import struct
import sys


def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def write(dst, head, body, keep, rows=None):
    """the tensors keep(name) maps to a new name (None = dropped); rows(name)
    (when given) may cut a tensor to its first rows (None = all)"""
    out, parts, pos = {}, [], 0
    for k, v in head.items():
        if k == "__metadata__":
            out[k] = v
            continue
        nk = keep(k)
        if nk is None:
            continue
        a, b = v["data_offsets"]
        shape = list(v["shape"])
        r = rows(k) if rows else None
        if r is not None:
            b = a + (b - a) // shape[0] * r
            shape[0] = r
        parts.append(body[a:b])
        out[nk] = dict(v, shape=shape, data_offsets=[pos, pos + b - a])
        pos += b - a
    h = json.dumps(out).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(parts))
    return len(out) - (1 if "__metadata__" in out else 0)


def link(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.lexists(dst):
        os.unlink(dst)
    os.symlink(os.path.abspath(src), dst)


def main(set_dir, models, tok, clip_tok):
    m = json.load(open(os.path.join(set_dir, "manifest.json")))
    for key, mod in m["models"].items():
        link(os.path.join(set_dir, mod["file"]), os.path.join(models, mod["comfy_name"]))
    ckpt = os.path.join(set_dir, m["models"]["sd35_ckpt"]["file"])
    link(ckpt, os.path.join(models, "checkpoints", "sd3.5_large_fp8_scaled.safetensors"))
    head, body = read(ckpt)
    os.makedirs(os.path.join(models, "vae"), exist_ok=True)
    pre = "first_stage_model."
    n = write(os.path.join(models, "vae", "sd3_vae.safetensors"), head, body,
              lambda k: k[len(pre):] if k.startswith(pre) else None)
    assert n > 0, "no first_stage_model.* in %s" % ckpt
    for name in ("sd3.5_medium.safetensors", "sd3.5_large.safetensors"):
        write(os.path.join(models, "checkpoints", name), head, body,
              lambda k: None if k.startswith("text_encoders.") else k)
    # SD3 Medium (2024) for the old examples: the joint blocks without
    # MMDiT-X's second attention (attn2, and the last 3 of its 9 adaLN
    # chunks: shift, scale, gate of attn2) and without q/k norms (head width
    # 64, ComfyUI's rule without ln_q)
    hidden = m["models"]["mmdit"]["config"]["hidden_size"]
    old_sd3 = lambda k: None if (".x_block.attn2." in k or ".attn.ln_q." in k or ".attn.ln_k." in k) else k
    mods = lambda k: 6 * hidden if ".x_block.adaLN_modulation.1." in k and head[k]["shape"][0] == 9 * hidden else None
    write(os.path.join(models, "checkpoints", "sd3_medium_incl_clips_t5xxlfp8.safetensors"), head, body, old_sd3, mods)
    write(os.path.join(models, "checkpoints", "sd3_medium.safetensors"), head, body,
          lambda k: None if k.startswith("text_encoders.") else old_sd3(k), mods)
    # the tiny SD3 ControlNet of the source tree's tests/data/sd3_controlnet,
    # also under the name ComfyUI's SD3 ControlNet example loads
    cdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "sd3_controlnet")
    if os.path.exists(os.path.join(cdir, "manifest.json")):
        cn = json.load(open(os.path.join(cdir, "manifest.json")))["models"]["controlnet"]
        for name in (cn["comfy_name"], "controlnet/sd3_controlnet_canny.safetensors"):
            link(os.path.join(cdir, cn["file"]), os.path.join(models, name))
    # the tiny canny SD3.5 ControlNet (Stability's layout) of
    # tests/data/sd35_controlnet under the name ComfyUI's SD3.5 Large canny
    # example loads
    sdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "sd35_controlnet")
    if os.path.exists(os.path.join(sdir, "manifest.json")):
        for c in json.load(open(os.path.join(sdir, "manifest.json")))["controlnets"].values():
            if c["control_type"] == 1:
                link(os.path.join(sdir, c["file"]),
                     os.path.join(models, "controlnet", "sd3.5_large_controlnet_canny.safetensors"))
    for f in ("vocab.json", "merges.txt"):
        link(os.path.join(clip_tok, f), os.path.join(tok, f))
    t5 = os.path.join(set_dir, "..", "flux", "tokenizer", "tokenizer.json")
    link(t5, os.path.join(tok, "t5_tokenizer", "tokenizer.json"))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
