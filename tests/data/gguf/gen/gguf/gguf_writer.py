"""GGUFWriter subset: key/values and raw tensors written as gguf-py's writer lays them out (v3,
alignment 32, tensors in the order added, each padded to the alignment)."""
import struct

import numpy as np

from .constants import (GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION,
                        GGMLQuantizationType, GGUFValueType)

_PACK = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.UINT64: "<Q", GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d", GGUFValueType.BOOL: "<?",
}


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, value, item_type=None):
    if vtype == GGUFValueType.STRING:
        return _str(value)
    if vtype == GGUFValueType.ARRAY:
        out = struct.pack("<IQ", int(item_type), len(value))
        for v in value:
            out += _value(item_type, v)
        return out
    return struct.pack(_PACK[vtype], value)


class GGUFWriter:
    def __init__(self, path=None, arch=None):
        self.kv = []      # (key, encoded bytes)
        self.tensors = [] # (name, ne tuple (innermost first), qtype, raw bytes)
        if arch is not None:
            self.add_string("general.architecture", arch)

    def add_key_value(self, key, value, vtype, item_type=None):
        if any(k == key for k, _ in self.kv):
            raise KeyError(f"duplicate key {key}")
        self.kv.append((key, _str(key) + struct.pack("<I", int(vtype)) + _value(vtype, value, item_type)))

    def add_string(self, key, value):
        self.add_key_value(key, value, GGUFValueType.STRING)

    def add_uint32(self, key, value):
        self.add_key_value(key, value, GGUFValueType.UINT32)

    def add_float32(self, key, value):
        self.add_key_value(key, value, GGUFValueType.FLOAT32)

    def add_bool(self, key, value):
        self.add_key_value(key, value, GGUFValueType.BOOL)

    def add_array(self, key, values, item_type=GGUFValueType.INT32):
        self.add_key_value(key, list(values), GGUFValueType.ARRAY, item_type)

    def add_quantization_version(self, v):
        self.add_uint32("general.quantization_version", v)

    def add_file_type(self, ftype):
        self.add_uint32("general.file_type", int(ftype))

    def add_tensor(self, name, data, raw_dtype, shape):
        """data: the stored bytes (numpy uint8 or a typed array); shape: PyTorch order."""
        qt = GGMLQuantizationType(raw_dtype)
        block, tsize = GGML_QUANT_SIZES[qt]
        raw = np.ascontiguousarray(data).tobytes()
        n = int(np.prod(shape)) if len(shape) else 1
        if len(raw) != n // block * tsize or (len(shape) and shape[-1] % block):
            raise ValueError(f"{name}: {len(raw)} bytes do not hold {shape} as {qt.name}")
        self.tensors.append((name, tuple(reversed([int(s) for s in shape])), qt, raw))

    def write(self, path):
        out = bytearray(struct.pack("<IIQQ", GGUF_MAGIC, GGUF_VERSION, len(self.tensors), len(self.kv)))
        for _, b in self.kv:
            out += b
        off = 0
        offsets = []
        for name, ne, qt, raw in self.tensors:
            offsets.append(off)
            off += len(raw)
            off += (-off) % GGUF_DEFAULT_ALIGNMENT
        for (name, ne, qt, raw), o in zip(self.tensors, offsets):
            out += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
            out += struct.pack("<IQ", int(qt), o)
        out += b"\0" * ((-len(out)) % GGUF_DEFAULT_ALIGNMENT)
        for (name, ne, qt, raw), o in zip(self.tensors, offsets):
            out += raw
            out += b"\0" * ((-len(out)) % GGUF_DEFAULT_ALIGNMENT)
        with open(path, "wb") as f:
            f.write(bytes(out))
