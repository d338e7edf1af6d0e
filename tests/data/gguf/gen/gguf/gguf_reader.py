"""GGUFReader: the shapes of gguf-py's reader (fields as parts/data/types, tensors as numpy views of
the memory-mapped file), little-endian files only."""
from collections import OrderedDict
from typing import Any, List, NamedTuple

import numpy as np

from .constants import (GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType,
                        GGUFValueType)
from .quants import quant_shape_to_byte_shape

_SCALAR = {
    GGUFValueType.UINT8: np.uint8, GGUFValueType.INT8: np.int8, GGUFValueType.UINT16: np.uint16,
    GGUFValueType.INT16: np.int16, GGUFValueType.UINT32: np.uint32, GGUFValueType.INT32: np.int32,
    GGUFValueType.FLOAT32: np.float32, GGUFValueType.UINT64: np.uint64, GGUFValueType.INT64: np.int64,
    GGUFValueType.FLOAT64: np.float64, GGUFValueType.BOOL: np.bool_,
}

_PLAIN = {
    GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16,
    GGMLQuantizationType.F64: np.float64, GGMLQuantizationType.I8: np.int8,
    GGMLQuantizationType.I16: np.int16, GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


class ReaderField(NamedTuple):
    offset: int
    name: str
    parts: List[Any] = []
    data: List[int] = [-1]
    types: List[GGUFValueType] = []


class ReaderTensor(NamedTuple):
    name: str
    tensor_type: GGMLQuantizationType
    shape: Any
    n_elements: int
    n_bytes: int
    data_offset: int
    data: Any
    field: ReaderField


class GGUFReader:
    def __init__(self, path, mode="r"):
        self.data = np.memmap(path, mode=mode)
        self.alignment = GGUF_DEFAULT_ALIGNMENT
        offs = 0
        if self._get(offs, np.uint32)[0] != GGUF_MAGIC:
            raise ValueError("GGUF magic invalid")
        offs += 4
        version = self._get(offs, np.uint32)
        if version[0] not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version[0]}")
        self.fields = OrderedDict()
        self.tensors = []
        offs += self._push(ReaderField(offs, "GGUF.version", [version], [0], [GGUFValueType.UINT32]))
        counts = self._get(offs, np.uint64, 2)
        offs += self._push(ReaderField(offs, "GGUF.tensor_count", [counts[:1]], [0], [GGUFValueType.UINT64]))
        offs += self._push(ReaderField(offs, "GGUF.kv_count", [counts[1:]], [0], [GGUFValueType.UINT64]))
        n_tensors, n_kv = int(counts[0]), int(counts[1])
        for _ in range(n_kv):
            start = offs
            klen, kdata = self._get_str(offs)
            offs += int(klen.nbytes + kdata.nbytes)
            vtype = self._get(offs, np.uint32)
            offs += int(vtype.nbytes)
            parts = [klen, kdata, vtype]
            size, vparts, idxs, types = self._field_parts(offs, int(vtype[0]))
            base = len(parts)
            self._push(ReaderField(start, str(bytes(kdata), encoding="utf-8"), parts + vparts,
                                   [i + base for i in idxs], types), skip_sum=True)
            offs += size
        infos = []
        for _ in range(n_tensors):
            start = offs
            nlen, ndata = self._get_str(offs)
            offs += int(nlen.nbytes + ndata.nbytes)
            ndims = self._get(offs, np.uint32)
            offs += int(ndims.nbytes)
            dims = self._get(offs, np.uint64, int(ndims[0]))
            offs += int(dims.nbytes)
            ttype = self._get(offs, np.uint32)
            offs += int(ttype.nbytes)
            toff = self._get(offs, np.uint64)
            offs += int(toff.nbytes)
            infos.append(ReaderField(start, str(bytes(ndata), encoding="utf-8"),
                                     [nlen, ndata, ndims, dims, ttype, toff], [1, 3, 4, 5]))
        align = self.fields.get("general.alignment")
        if align is not None:
            if align.types != [GGUFValueType.UINT32]:
                raise ValueError("Bad type for general.alignment field")
            self.alignment = int(align.parts[-1][0])
        if offs % self.alignment:
            offs += self.alignment - offs % self.alignment
        self.data_offset = offs
        names = set()
        for f in infos:
            _, ndata, _, dims, ttype, toff = f.parts
            name = str(bytes(ndata), encoding="utf-8")
            if name in names:
                raise ValueError(f"Found duplicated tensor with name {name}")
            names.add(name)
            qt = GGMLQuantizationType(int(ttype[0]))
            n_elems = int(np.prod(dims)) if len(dims) else 1
            np_dims = tuple(reversed(dims.tolist()))
            block, tsize = GGML_QUANT_SIZES[qt]
            n_bytes = n_elems * tsize // block
            at = offs + int(toff[0])
            if qt in _PLAIN:
                item_type, count = _PLAIN[qt], n_elems
            else:
                item_type, count = np.uint8, n_bytes
                np_dims = quant_shape_to_byte_shape(np_dims, qt)
            self.tensors.append(ReaderTensor(name, qt, dims, n_elems, n_bytes, at,
                                             self._get(at, item_type, count).reshape(np_dims), f))

    def get_field(self, key):
        return self.fields.get(key, None)

    def get_tensor(self, idx):
        return self.tensors[idx]

    def _get(self, offset, dtype, count=1):
        count = int(count)
        size = np.dtype(dtype).itemsize
        end = offset + size * count
        if end > len(self.data):
            raise ValueError("read past the end of the file")
        return self.data[offset:end].view(dtype=dtype)[:count]

    def _push(self, field, skip_sum=False):
        if field.name in self.fields:
            raise KeyError(f"Duplicate {field.name} already in list at offset {field.offset}")
        self.fields[field.name] = field
        return 0 if skip_sum else sum(int(p.nbytes) for p in field.parts)

    def _get_str(self, offset):
        n = self._get(offset, np.uint64)
        return n, self._get(offset + 8, np.uint8, n[0])

    def _field_parts(self, start, raw_type):
        offs = start
        t = GGUFValueType(raw_type)
        types = [t]
        if t == GGUFValueType.STRING:
            parts = list(self._get_str(offs))
            return sum(int(p.nbytes) for p in parts), parts, [1], types
        if t in _SCALAR:
            v = self._get(offs, _SCALAR[t])
            return int(v.nbytes), [v], [0], types
        if t == GGUFValueType.ARRAY:
            itype = self._get(offs, np.uint32)
            offs += int(itype.nbytes)
            alen = self._get(offs, np.uint64)
            offs += int(alen.nbytes)
            parts = [itype, alen]
            idxs = []
            for i in range(int(alen[0])):
                size, cparts, cidxs, ctypes = self._field_parts(offs, int(itype[0]))
                if i == 0:
                    types += ctypes
                base = len(parts)
                parts += cparts
                idxs += [j + base for j in cidxs]
                offs += size
            return offs - start, parts, idxs, types
        raise ValueError(f"Unknown/unhandled field type {t}")
