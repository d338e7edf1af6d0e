#!/usr/bin/env python3
"""zimage_models.py SET MODELS TOK: link the Z-Image reference set's tiny
files (SET = .../testdata/zimage) under the names ComfyUI's Z-Image
workflows use (each model's comfy_name in manifest.json) in the ComfyUI
folders of MODELS, and its Qwen2 tokenizer files as TOK/qwen25_tokenizer/,
for the CLI tests (cli.lua, cli.ui_workflows, cli.comfyui_zimage_examples).
Prints the tiny Qwen3's width (for --qwen3-4b-width)."""
import json
import os
import sys


def link(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.lexists(dst):
        os.unlink(dst)
    os.symlink(os.path.abspath(src), dst)


def main(set_dir, models, tok):
    m = json.load(open(os.path.join(set_dir, "manifest.json")))
    for mod in m["models"].values():
        link(os.path.join(set_dir, mod["file"]), os.path.join(models, mod["comfy_name"]))
    for f in m["tokenizer"]["files"]:
        link(os.path.join(set_dir, f), os.path.join(tok, "qwen25_tokenizer", os.path.basename(f)))
    print(m["models"]["qwen3_4b"]["config"]["hidden_size"])


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
