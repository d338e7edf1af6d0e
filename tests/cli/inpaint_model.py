"""inpaint_model.py - an inpainting checkpoint (9 input channels) for the
example workflows' tests: the tiny SD1 checkpoint with its input
convolution replaced by the one tests/data/inpaint_cond stores (the key and
tensor its manifest names), as nodes.golden_inpaint_cond derives it.

usage: inpaint_model.py TINY_SD1.safetensors INPAINT_COND_DIR OUT.safetensors
"""
import json
import struct
import sys


def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    return header, data[8 + n:]


def main():
    src, cond_dir, out = sys.argv[1:4]
    manifest = json.load(open(cond_dir + "/manifest.json"))
    key, with_name = manifest["replaced_key"], manifest["input_conv"]
    header, body = read(src)
    ref_header, ref_body = read(cond_dir + "/" + manifest["file"])
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if name == key:
            info = ref_header[with_name]
            b, e = info["data_offsets"]
            tensors.append((name, info["dtype"], info["shape"], ref_body[b:e]))
        else:
            b, e = info["data_offsets"]
            tensors.append((name, info["dtype"], info["shape"], body[b:e]))
    if key not in header:
        sys.exit(f"{src} has no {key}")
    new_header, blobs, off = {}, [], 0
    if "__metadata__" in header:
        new_header["__metadata__"] = header["__metadata__"]
    for name, dtype, shape, blob in tensors:
        new_header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    text = json.dumps(new_header).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


main()
