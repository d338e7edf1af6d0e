"""unclip_model.py - an SD2.1 unCLIP checkpoint for the example workflows'
tests: the tiny SD2 checkpoint (`sdflow synth --preset sd2-tiny --seed 1`)
plus every tensor tests/data/unclip stores under its manifest's
added_prefix (the UNet's label_emb and a tiny OpenCLIP vision tower under
embedder.model.visual.), as nodes.golden_unclip derives it.

usage: unclip_model.py SD2_TINY.safetensors UNCLIP_DIR OUT.safetensors
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
    src, ref_dir, out = sys.argv[1:4]
    manifest = json.load(open(ref_dir + "/manifest.json"))
    prefix = manifest["checkpoint"]["added_prefix"]
    header, body = read(src)
    ref_header, ref_body = read(ref_dir + "/" + manifest["file"])
    tensors = []
    for hdr, blob in ((header, body), (ref_header, ref_body)):
        for name, info in hdr.items():
            if name == "__metadata__":
                continue
            if hdr is ref_header:
                if not name.startswith(prefix):
                    continue
                name = name[len(prefix):]
                if name in header:
                    sys.exit(f"{src} already has {name}")
            b, e = info["data_offsets"]
            tensors.append((name, info["dtype"], info["shape"], blob[b:e]))
    new_header, blobs, off = {}, [], 0
    if "__metadata__" in header:
        new_header["__metadata__"] = header["__metadata__"]
    for name, dtype, shape, blob in sorted(tensors):
        new_header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    text = json.dumps(new_header).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


main()
