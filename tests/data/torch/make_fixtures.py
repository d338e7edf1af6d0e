#!/usr/bin/env python3
"""make_fixtures.py - writes the small torch checkpoints under tests/data/torch/.

    python3 tests/data/torch/make_fixtures.py [--check-torch]

Good files come in pairs: NAME.ckpt/.pt and NAME.safetensors with the tensors
the checkpoint must give (materialised contiguous, same names, dtypes, bytes);
tests/formats/test_torch_ckpt.c compares them. bad-*.pt are files the reader must
refuse, each with the words its error must contain in bad-*.expect.
Written with the standard library only (torchsave.py); with --check-torch the
good files are also loaded with torch.load(weights_only=True) and compared
(python3-torch), the evil ones must be refused by it too, and a file saved by
real torch.save is written as real-torch.pt (+ .safetensors) for the C test.
"""
import collections
import os
import pickle
import struct
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchsave as ts  # noqa: E402

OUT = os.path.dirname(os.path.abspath(__file__))


def raw(dtype, values):
    code = ts.DTYPES[dtype][2]
    if dtype == "BF16":  # top half of the float32 pattern
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return struct.pack("<%d%s" % (len(values), code), *values)


def contiguous_bytes(t):
    """The row-major bytes of a strided Tensor view."""
    es = ts.DTYPES[t.storage.dtype][1]
    out, idx = bytearray(), [0] * len(t.shape)
    n = 1
    for d in t.shape:
        n *= d
    for _ in range(n):
        off = t.offset + sum(i * s for i, s in zip(idx, t.stride))
        out += t.storage.data[off * es:(off + 1) * es]
        for k in reversed(range(len(idx))):
            idx[k] += 1
            if idx[k] < t.shape[k]:
                break
            idx[k] = 0
    return bytes(out)


def expect_st(path, flat):
    ts.write_safetensors(path, {k: (t.storage.dtype, t.shape, contiguous_bytes(t)) for k, t in flat.items()})


def good():
    shared = ts.Storage("F32", raw("F32", [float(i) / 4 for i in range(12)]))
    sd = collections.OrderedDict()
    sd["model.f32"] = ts.tensor("F32", [2, 3], raw("F32", [1.5, -2, 3, 0.25, 1e-3, -7]))
    sd["model.f16"] = ts.tensor("F16", [4], raw("F16", [1, 0.5, -65504, 2e-5]))
    sd["model.bf16"] = ts.tensor("BF16", [2, 2], raw("BF16", [1, -3.5, 256, 1e-8]))
    sd["model.f64"] = ts.tensor("F64", [2], raw("F64", [3.25, -1e300]))
    sd["model.i64"] = ts.tensor("I64", [3], raw("I64", [0, -1, 2**40]))
    sd["model.i32"] = ts.tensor("I32", [1, 2], raw("I32", [7, -9]))
    sd["model.u8"] = ts.tensor("U8", [3], raw("U8", [0, 128, 255]))
    sd["model.bool"] = ts.tensor("BOOL", [2], raw("BOOL", [True, False]))
    sd["scalar"] = ts.tensor("F32", [], raw("F32", [0.18215]))
    sd["empty"] = ts.tensor("F16", [0, 4], b"")
    # views of one storage: a contiguous slice at an offset, a transpose,
    # a strided column, and a broadcast (stride 0)
    sd["view.slice"] = ts.Tensor(shared, [2, 2], offset=4)
    sd["view.transposed"] = ts.Tensor(shared, [4, 3], stride=[1, 4])
    sd["view.column"] = ts.Tensor(shared, [3], stride=[4], offset=1)
    sd["view.expand"] = ts.Tensor(shared, [2, 3], stride=[0, 1], offset=9)
    sd["param.weight"] = ts.Tensor(ts.Storage("F16", raw("F16", [1, 2, 3, 4, 5, 6])), [3, 2], parameter=True)
    ts.save({"state_dict": sd, "global_step": 123, "epoch": 4, "note": "lightning-like"},
            os.path.join(OUT, "mixed.ckpt"), archive="mixed")
    expect_st(os.path.join(OUT, "mixed.safetensors"), sd)
    # the same with torch.save(..., pickle_protocol=4 / 5): FRAME, MEMOIZE,
    # STACK_GLOBAL, SHORT_BINUNICODE
    for proto in (4, 5):
        ts.save(sd, os.path.join(OUT, "mixed-p%d.pt" % proto), protocol=proto)
    # the legacy (pre-1.6) stream format
    global LEGACY_FIRST
    LEGACY_FIRST = ts.save_legacy({"state_dict": sd, "global_step": 123}, os.path.join(OUT, "mixed-legacy.pt"))

    # A1111 textual inversion: nested dicts, tensors under string_to_param
    emb = ts.Tensor(ts.Storage("F32", raw("F32", [float(i) / 16 for i in range(2 * 8)])), [2, 8], parameter=True)
    ti = {"string_to_token": {"*": 265}, "string_to_param": {"*": emb}, "name": "tiny-ti", "step": 100,
          "sd_checkpoint": None, "sd_checkpoint_name": None}
    ts.save(ti, os.path.join(OUT, "embedding.pt"))
    expect_st(os.path.join(OUT, "embedding.safetensors"), {"string_to_param.*": emb})

    # no tensors at all
    ts.save({"step": 1, "name": "nothing"}, os.path.join(OUT, "empty.pt"))
    expect_st(os.path.join(OUT, "empty.safetensors"), {})
    return sd, ti


def bad_zip(name, pkl, storages=None, expect="", archive="archive"):
    ts.write_zip(os.path.join(OUT, name), pkl, storages or {}, archive)
    with open(os.path.join(OUT, name[:-3] + ".expect"), "w") as f:
        f.write(expect + "\n")


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned-by-pickle",))


class EvalGlobal:
    def __reduce__(self):
        return (eval, ("1+1",))


def bad():
    t = ts.tensor("F32", [2], raw("F32", [1, 2]))
    pkl, st = ts.dumps({"w": t, "x": Evil()})
    bad_zip("bad-reduce.pt", pkl, st, "posix.system")
    pkl, st = ts.dumps({"w": t, "x": EvalGlobal()})
    bad_zip("bad-global.pt", pkl, st, "__builtin__.eval")
    # NEWOBJ on an allowed class
    bad_zip("bad-newobj.pt", b"\x80\x02ccollections\nOrderedDict\n)\x81.", None, "NEWOBJ")
    # a storage declaring 2^60 elements over an 8-byte entry
    pkl, st = ts.dumps({"w": t})
    pkl = pkl.replace(b"K\x02t", b"\x8a\x08" + struct.pack("<q", 1 << 60) + b"t", 1)
    bad_zip("bad-huge-storage.pt", pkl, st, "declares 1152921504606846976")
    # a tensor whose size runs past its storage
    bad_zip("bad-shape.pt", ts.dumps({"w": ts.Tensor(t.storage, [3])})[0], st, "reaches past its storage")
    # the storage entry missing
    bad_zip("bad-missing-storage.pt", pkl, {}, "missing from the archive")
    # BINGET of a memo slot never stored
    bad_zip("bad-memo.pt", b"\x80\x02}q\x00h\xc8.", None, "memo index 200")
    # dicts nested 64 deep (the walker stops at 16)
    n = 64
    deep = b"\x80\x02" + b"}\x8c\x01a" * (n - 1) + b"}" + b"s" * (n - 1) + b"."
    bad_zip("bad-deep.pt", deep, None, "nested deeper than 16")
    # one dict shared 32 times per level, 12 levels (pickle's memo keeps the
    # file at 5 KB): 32^12 paths, so the walk's total work is bounded too
    level = {"w": 1}
    for _ in range(12):
        level = {str(k): level for k in range(32)}
    bad_zip("bad-shared.pt", pickle.dumps(level, protocol=2), None, "dict entries to walk")
    # 30000 nested lists: fine for the machine, refused as not a dict
    n = 30000
    bad_zip("bad-lists.pt", b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b".", None, "holds a list")
    # truncated archive: the first half of mixed.ckpt
    with open(os.path.join(OUT, "mixed.ckpt"), "rb") as f:
        blob = f.read()
    with open(os.path.join(OUT, "bad-truncated.pt"), "wb") as f:
        f.write(blob[:len(blob) // 2])
    with open(os.path.join(OUT, "bad-truncated.expect"), "w") as f:
        f.write("zip archive\n")
    # truncated pickle inside a valid archive
    bad_zip("bad-short-pickle.pt", ts.dumps({"w": t})[0][:40], st, "truncated")
    # legacy (pre-1.6) format: cut after the protocol version, and cut inside
    # the last storage's bytes
    with open(os.path.join(OUT, "bad-legacy.pt"), "wb") as f:
        f.write(pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2) + pickle.dumps(1001, protocol=2))
    with open(os.path.join(OUT, "bad-legacy.expect"), "w") as f:
        f.write("legacy sys_info pickle: truncated\n")
    with open(os.path.join(OUT, "mixed-legacy.pt"), "rb") as f:
        blob = f.read()
    with open(os.path.join(OUT, "bad-legacy-cut.pt"), "wb") as f:
        f.write(blob[:-3])
    with open(os.path.join(OUT, "bad-legacy-cut.expect"), "w") as f:
        f.write("legacy format: truncated at storage\n")
    # the first storage's element count one more than declared
    count = struct.unpack_from("<q", blob, LEGACY_FIRST)[0]
    with open(os.path.join(OUT, "bad-legacy-count.pt"), "wb") as f:
        f.write(blob[:LEGACY_FIRST] + struct.pack("<q", count + 1) + blob[LEGACY_FIRST + 8:])
    with open(os.path.join(OUT, "bad-legacy-count.expect"), "w") as f:
        f.write("%d elements in the file, %d declared\n" % (count + 1, count))
    # a bare pickle that is no torch file
    with open(os.path.join(OUT, "bad-bare.pt"), "wb") as f:
        f.write(pickle.dumps({"w": 1}, protocol=2))
    with open(os.path.join(OUT, "bad-bare.expect"), "w") as f:
        f.write("without PyTorch's magic number\n")
    # a zip without data.pkl
    with zipfile.ZipFile(os.path.join(OUT, "bad-nopkl.pt"), "w") as z:
        z.writestr(zipfile.ZipInfo("archive/other.txt", date_time=(1980, 1, 1, 0, 0, 0)), "x")
    with open(os.path.join(OUT, "bad-nopkl.expect"), "w") as f:
        f.write("without <archive>/data.pkl\n")


def check_torch():
    import torch  # python3-torch
    print("torch", torch.__version__)
    for name in ["mixed.ckpt", "mixed-p4.pt", "mixed-p5.pt", "mixed-legacy.pt", "embedding.pt"]:
        # torch 1.13's weights-only unpickler has no FRAME (protocol 4+): our
        # own files are loaded with the full unpickler there
        obj = torch.load(os.path.join(OUT, name), weights_only="-p" not in name)
        if "legacy" in name:
            assert torch.serialization._is_zipfile(open(os.path.join(OUT, name), "rb")) is False
        stem = name.rsplit(".", 1)[0].replace("-legacy", "").split("-p")[0]
        exp, _ = ts.read_safetensors(os.path.join(OUT, stem + ".safetensors"))
        sd = obj.get("state_dict", obj)
        flat = {}

        def walk(d, p):
            for k, v in d.items():
                if isinstance(v, torch.Tensor):
                    flat[p + k] = v
                elif isinstance(v, dict):
                    walk(v, p + k + ".")
        walk(sd, "")
        assert sorted(flat) == sorted(exp), (name, sorted(flat), sorted(exp))
        for k, (dt, shape, data) in exp.items():
            v = flat[k].contiguous()
            assert list(v.shape) == list(shape), (k, v.shape, shape)
            got = v.view(torch.uint8).numpy().tobytes() if v.numel() and v.dim() else \
                v.reshape(-1).view(torch.uint8).numpy().tobytes()
            assert got == data, k
        print("torch.load agrees:", name)
    for name in ["bad-reduce.pt", "bad-global.pt"]:
        try:
            torch.load(os.path.join(OUT, name), weights_only=True)
            raise SystemExit("torch accepted " + name)
        except pickle.UnpicklingError:
            print("torch refuses:", name)
    # a file written by real torch.save, and what it must read as
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    real = collections.OrderedDict([
        ("w.f32", torch.randn(3, 4, generator=g)),
        ("w.f16", torch.randn(5, generator=g).half()),
        ("w.bf16", torch.randn(2, 3, generator=g).bfloat16()),
        ("w.i64", torch.arange(4)),
        ("w.t", base.t()),
        ("w.slice", base[1:3]),
        ("p", torch.nn.Parameter(torch.randn(2, 2, generator=g))),
    ])
    torch.save({"state_dict": real, "global_step": 5}, os.path.join(OUT, "real-torch.pt"))
    torch.save({"state_dict": real, "global_step": 5}, os.path.join(OUT, "real-legacy.pt"),
               _use_new_zipfile_serialization=False)
    ts.write_safetensors(os.path.join(OUT, "real-torch.safetensors"),
                         {k: ({torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                               torch.int64: "I64"}[v.dtype], list(v.shape),
                              v.detach().contiguous().view(torch.uint8).numpy().tobytes())
                          for k, v in real.items()})
    print("wrote real-torch.pt")


if __name__ == "__main__" and "--torch-only" in sys.argv:
    check_torch()
elif __name__ == "__main__":
    good()
    bad()
    if "--check-torch" in sys.argv:
        # a fresh process: the stand-ins above would shadow the real torch
        import subprocess
        subprocess.check_call([sys.executable, os.path.abspath(__file__), "--torch-only"])


def main_torch():
    check_torch()
