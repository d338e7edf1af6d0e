#!/usr/bin/env python3
"""torchsave.py - write PyTorch checkpoints (torch.save's zip format) without torch.

Only the standard library (pickle, zipfile, struct, json): the pickle stream is
made by Python's own pickler with stand-ins for the torch globals, so its
opcodes are the ones torch.save (protocol 2) writes:

    GLOBAL 'torch._utils _rebuild_tensor_v2'
      (BINPERSID ('storage', GLOBAL 'torch HalfStorage', '0', 'cpu', numel),
       storage_offset, size tuple, stride tuple, requires_grad, OrderedDict())
    REDUCE

inside a zip archive <archive>/data.pkl, <archive>/byteorder ("little"),
<archive>/data/<key> (raw little-endian elements, stored), <archive>/version.
make_fixtures.py checks the result against real torch when it is installed.

Command line (used by tests/cli/test_ckpt.sh):
    torchsave.py to-ckpt IN.safetensors OUT.ckpt [--lightning] [--legacy] [--strip PREFIX]
converts a safetensors file into a .ckpt with the same tensors (wrapped in
{'state_dict': ..., 'global_step': 0} with --lightning, as Lightning saves;
in the pre-1.6 stream format with --legacy; only the keys under PREFIX,
without it, with --strip, e.g. a standalone VAE from first_stage_model.).
"""
import collections
import json
import pickle
import struct
import sys
import types
import zipfile

# ---- stand-ins for the torch globals ------------------------------------------

def _module(name):
    m = sys.modules.get(name)
    if m is None:
        m = types.ModuleType(name)
        sys.modules[name] = m
    return m


def _fake_global(module, name, obj):
    obj.__module__ = module
    obj.__qualname__ = name
    obj.__name__ = name
    setattr(_module(module), name, obj)
    return obj


def _refuse(*a):
    raise RuntimeError("stand-in only")


# safetensors dtype -> (torch storage class name, element size, struct code)
DTYPES = {
    "F32": ("FloatStorage", 4, "f"), "F16": ("HalfStorage", 2, "e"),
    "BF16": ("BFloat16Storage", 2, None), "F64": ("DoubleStorage", 8, "d"),
    "I64": ("LongStorage", 8, "q"), "I32": ("IntStorage", 4, "i"),
    "I16": ("ShortStorage", 2, "h"), "I8": ("CharStorage", 1, "b"),
    "U8": ("ByteStorage", 1, "B"), "BOOL": ("BoolStorage", 1, "?"),
}
_G = {}


def _stand_ins():
    """Installs the fake torch modules on first use (never when real torch is
    loaded in this process: it would be shadowed)."""
    if not _G:
        if "torch" in sys.modules and hasattr(sys.modules["torch"], "__version__"):
            raise RuntimeError("torchsave: real torch is imported in this process; pickling with "
                               "stand-ins would shadow it")
        _G["v2"] = _fake_global("torch._utils", "_rebuild_tensor_v2", lambda *a: _refuse())
        _G["param"] = _fake_global("torch._utils", "_rebuild_parameter", lambda *a: _refuse())
        for dt, (name, _size, _code) in DTYPES.items():
            _G[dt] = _fake_global("torch", name, type(name, (), {}))
    return _G


class Storage:
    """One untyped storage: raw little-endian bytes of `dtype` elements."""

    def __init__(self, dtype, data):
        self.dtype, self.data = dtype, bytes(data)
        self.numel = len(self.data) // DTYPES[dtype][1]


class Tensor:
    """A view of a Storage, pickled the way torch.Tensor.__reduce_ex__ does."""

    def __init__(self, storage, shape, stride=None, offset=0, parameter=False):
        self.storage, self.shape, self.offset = storage, tuple(shape), offset
        if stride is None:
            stride, acc = [], 1
            for d in reversed(self.shape):
                stride.insert(0, acc)
                acc *= d
        self.stride, self.parameter = tuple(stride), parameter

    def __reduce__(self):
        g = _stand_ins()
        t = (g["v2"], (self.storage, self.offset, self.shape, self.stride, False,
                                 collections.OrderedDict()))
        if self.parameter:
            return (g["param"], (_Reduced(*t), False, collections.OrderedDict()))
        return t


class _Reduced:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def tensor(dtype, shape, data, **kw):
    return Tensor(Storage(dtype, data), shape, **kw)


# ---- writing ----------------------------------------------------------------------

class _Pickler(pickle.Pickler):
    def __init__(self, f, keys, protocol=2, legacy=False):
        super().__init__(f, protocol=protocol)
        self.keys = keys  # id(storage) -> (key, storage), in first-use order
        self.legacy = legacy

    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            key = self.keys.setdefault(id(obj), (str(len(self.keys)), obj))[0]
            pid = ("storage", _stand_ins()[obj.dtype], key, "cpu", obj.numel)
            return pid + (None,) if self.legacy else pid  # legacy: view_metadata
        return None


def dumps(obj, protocol=2):
    """The data.pkl bytes and the storages {key: Storage} it refers to
    (torch.save's pickle_protocol, 2 by default)."""
    import io
    _stand_ins()
    buf, keys = io.BytesIO(), {}
    _Pickler(buf, keys, protocol).dump(obj)
    return buf.getvalue(), {k: s for k, s in keys.values()}


def write_zip(path, pkl, storages, archive="archive", align=64):
    """torch's PyTorchStreamWriter layout: stored entries, data 64-byte aligned."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        def add(name, data):
            info = zipfile.ZipInfo(archive + "/" + name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            # pad the local header's extra field ("FB" id, as torch does) so the data is aligned
            off = z.fp.tell() + 30 + len(info.filename.encode())
            pad = (-(off + 4)) % align
            info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
            z.writestr(info, data)
        add("data.pkl", pkl)
        add("byteorder", b"little")
        for key in sorted(storages, key=int):
            add("data/" + key, storages[key].data)
        add("version", b"3\n")


def save_legacy(obj, path):
    """torch.save(..., _use_new_zipfile_serialization=False): magic number,
    protocol 1001, sys_info, the object, the storage keys, then per storage
    an int64 element count and its bytes."""
    import io
    _stand_ins()
    buf, keys = io.BytesIO(), {}
    for head in (0x1950a86a20f9469cfc6c, 1001,
                 {"protocol_version": 1001, "little_endian": True,
                  "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(head, buf, protocol=2)
    _Pickler(buf, keys, 2, legacy=True).dump(obj)
    order = sorted(keys.values(), key=lambda ks: ks[0])
    pickle.dump([k for k, _ in order], buf, protocol=2)
    first = buf.tell()
    for _, s in order:
        buf.write(struct.pack("<q", s.numel) + s.data)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return first  # offset of the first storage's element count


def save(obj, path, archive="archive", protocol=2):
    pkl, storages = dumps(obj, protocol)
    write_zip(path, pkl, storages, archive)


# ---- safetensors ---------------------------------------------------------------------

def read_safetensors(path):
    """{name: (dtype, shape, bytes)} in file order, and the metadata."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    items = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return {k: (v["dtype"], v["shape"], blob[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in items}, meta


def write_safetensors(path, tensors):
    """tensors: {name: (dtype, shape, bytes)}; data in name order."""
    header, data = {}, b""
    for k in sorted(tensors):
        dt, shape, raw = tensors[k]
        header[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def st_to_ckpt(src, dst, lightning=False, legacy=False, strip=None):
    tensors, _ = read_safetensors(src)
    if strip:  # only the keys under this prefix, without it (a standalone part)
        tensors = {k[len(strip):]: v for k, v in tensors.items() if k.startswith(strip)}
    sd = collections.OrderedDict((k, tensor(dt, shape, raw)) for k, (dt, shape, raw) in tensors.items())
    obj = {"state_dict": sd, "global_step": 0} if lightning else sd
    if legacy:
        save_legacy(obj, dst)
    else:
        save(obj, dst)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "to-ckpt":
        opts = sys.argv[4:]
        strip = opts[opts.index("--strip") + 1] if "--strip" in opts else None
        st_to_ckpt(sys.argv[2], sys.argv[3], "--lightning" in opts, "--legacy" in opts, strip)
    else:
        sys.exit("usage: torchsave.py to-ckpt IN.safetensors OUT.ckpt [--lightning] [--legacy]")
