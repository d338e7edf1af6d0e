"""Dequantization goldens: one small GGUF file per type and what ComfyUI-GGUF's dequant.py makes of it.

    /usr/bin/python3 make_dequant.py COMFYUI_GGUF_DIR SHARED_TOOLS_DIR OUT_DIR

COMFYUI_GGUF_DIR: a checkout of city96/ComfyUI-GGUF (commit recorded in the manifest);
SHARED_TOOLS_DIR: ../shared/tools/comfyref (its stio.py writes the goldens); OUT_DIR: tests/data/gguf.
Writes OUT_DIR/dequant/<TYPE>.gguf, OUT_DIR/golden/dequant_<TYPE>.safetensors and the "dequant"
part of OUT_DIR/manifest.json.

Each file holds three tensors:
  smooth  N(0, 0.05) rows with per-row offsets and a few large values, quantized by quantize.py;
  raw     random block bytes whose f16 scale fields are drawn from a pool of awkward values
          (zero, subnormal, tiny, large enough that float16 products overflow to inf, negative),
          so every bit of every field is exercised;
  shaped  a quantized tensor stored as rows of one block, with comfy.gguf.orig_shape giving its
          real shape (what ComfyUI-GGUF's convert.py writes for reshaped tensors).
Goldens: dequant.dequantize_tensor(t, dtype=torch.float32, dequant_dtype=D) for D in None (float16
arithmetic, the default), torch.float32 ("float32", and "target" for a float32 model) and
torch.bfloat16, each stored as F32 "<tensor>.<f16|f32|bf16>".
"""
import importlib.util
import json
import os
import sys
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf  # noqa: E402  (the stand-in next to this script)
from gguf import GGMLQuantizationType as Q, GGML_QUANT_SIZES  # noqa: E402
import quantize  # noqa: E402

TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q5_1, Q.Q5_0, Q.Q4_1, Q.Q4_0, Q.Q6_K, Q.Q5_K, Q.Q4_K,
         Q.Q3_K, Q.Q2_K, Q.IQ4_NL, Q.IQ4_XS]
SEED = 2601
# byte offsets of the f16 scale fields of each block type
SCALE_FIELDS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0], Q.Q2_K: [80, 82],
                Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.IQ4_NL: [0], Q.IQ4_XS: [0]}
SCALE_POOL = [0.0, -0.0, 2.0 ** -24, -3 * 2.0 ** -24, 6.1e-05, 1e-3, -0.0123, 0.05, 0.5, -1.0, 3.25,
              17.0, -250.0, 1000.0, 4097.0, -65504.0]
MODES = {"f16": None, "f32": torch.float32, "bf16": torch.bfloat16}


def load_dequant(cgguf):
    if "tqdm" not in sys.modules:  # dequant.py imports tqdm.tqdm for its numpy fallback only
        tq = types.ModuleType("tqdm")
        tq.tqdm = type("tqdm", (), {"write": staticmethod(print)})
        sys.modules["tqdm"] = tq
    spec = importlib.util.spec_from_file_location("comfyui_gguf_dequant", os.path.join(cgguf, "dequant.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def smooth(rng, rows, cols):
    x = rng.normal(0, 0.05, (rows, cols)).astype(np.float32)
    x += rng.normal(0, 0.02, (rows, 1)).astype(np.float32)
    x.flat[rng.integers(0, x.size, 5)] *= 40
    return x


def raw_bytes(rng, qt, rows, cols):
    block, size = GGML_QUANT_SIZES[qt]
    if qt in (Q.F32, Q.F16, Q.BF16):
        vals = rng.normal(0, 1, (rows, cols)) * np.exp2(rng.integers(-30, 12, (rows, cols)))
        if qt == Q.F16:
            vals = np.clip(vals, -65504, 65504)
        return quantize.quantize(vals.astype(np.float32), qt)
    b = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
    for off in SCALE_FIELDS[qt]:
        pick = np.asarray(SCALE_POOL, np.float16)[rng.integers(0, len(SCALE_POOL), b.shape[0])]
        b[:, off:off + 2] = pick.view(np.uint8).reshape(-1, 2)
    return b.reshape(rows, cols // block * size)


def main(cgguf, tools, out):
    sys.path.insert(0, tools)
    import stio
    dq = load_dequant(cgguf)
    rng = np.random.default_rng(SEED)
    os.makedirs(os.path.join(out, "dequant"), exist_ok=True)
    os.makedirs(os.path.join(out, "golden"), exist_ok=True)
    cases = []
    for qt in TYPES:
        block = GGML_QUANT_SIZES[qt][0]
        row = max(block, 256) * 2
        tensors = {
            "smooth": ((3, row), quantize.quantize(smooth(rng, 3, row), qt), None),
            "raw": ((4, row), raw_bytes(rng, qt, 4, row), None),
        }
        shaped, rows = ((4, 2, 4, 2 * block // 8), (8, block)) if block > 1 else ((2, 3, 5), (6, 5))
        tensors["shaped"] = (rows, quantize.quantize(smooth(rng, *rows), qt), shaped)
        w = gguf.GGUFWriter(arch=None)
        w.add_string("general.name", f"sdflow dequantization test data, {qt.name}")
        w.add_uint32("general.quantization_version", gguf.GGML_QUANT_VERSION)
        for name, (shape, data, orig) in tensors.items():
            if orig is not None:
                w.add_array(f"comfy.gguf.orig_shape.{name}", orig, gguf.GGUFValueType.INT32)
            w.add_tensor(name, data, qt, shape)
        path = os.path.join(out, "dequant", f"{qt.name}.gguf")
        w.write(path)

        # read back as ComfyUI-GGUF's loader builds its tensors, and dequantize
        r = gguf.GGUFReader(path)
        golden, tinfo = {}, []
        for t in r.tensors:
            f = r.get_field(f"comfy.gguf.orig_shape.{t.name}")
            shape = (torch.Size(int(f.parts[i][0]) for i in f.data) if f is not None
                     else torch.Size(int(v) for v in reversed(t.shape)))
            data = torch.from_numpy(np.array(t.data))
            if t.tensor_type in (Q.F32, Q.F16):
                data = data.view(*shape)
            data.tensor_type = t.tensor_type
            data.tensor_shape = shape
            for mode, dd in MODES.items():
                v = dq.dequantize_tensor(data, dtype=torch.float32, dequant_dtype=dd)
                assert v.dtype == torch.float32 and tuple(v.shape) == tuple(shape)
                golden[f"{t.name}.{mode}"] = v.contiguous()
            tinfo.append({"name": t.name, "shape": list(shape),
                          "made_by": {"smooth": "quantize.py on N(0,0.05) rows + N(0,0.02) row offsets, 5 values x40",
                                      "raw": "random block bytes, f16 scale fields from SCALE_POOL",
                                      "shaped": "quantize.py on rows of one block; comfy.gguf.orig_shape"}[t.name]})
        gpath = os.path.join(out, "golden", f"dequant_{qt.name}.safetensors")
        stio.save(golden, gpath, {"source": "ComfyUI-GGUF dequant.dequantize_tensor"})
        cases.append({
            "id": f"dequant_{qt.name}", "type": qt.name,
            "file": f"dequant/{qt.name}.gguf", "golden": f"golden/dequant_{qt.name}.safetensors",
            "tensors": tinfo,
            "modes": {"f16": "dequant_dtype=None (default: float16 arithmetic)",
                      "f32": "dequant_dtype=torch.float32 (also 'target' for a float32 model)",
                      "bf16": "dequant_dtype=torch.bfloat16"},
            "function": "dequant.dequantize_tensor(tensor, dtype=torch.float32, dequant_dtype=MODE)",
            "tolerance": {"atol": 0, "rtol": 0, "note": "bit-exact; NaN equals NaN"},
        })
    return cases


if __name__ == "__main__":
    cgguf, tools, out = sys.argv[1:4]
    cases = main(cgguf, tools, out)
    mpath = os.path.join(out, "manifest.json")
    m = json.load(open(mpath)) if os.path.exists(mpath) else {}
    m["dequant"] = cases
    m.setdefault("reference", {})
    m["reference"]["comfyui_gguf"] = {"repo": "city96/ComfyUI-GGUF",
                                      "commit": open(os.path.join(cgguf, ".commit")).read().strip()
                                      if os.path.exists(os.path.join(cgguf, ".commit")) else "unknown",
                                      "files": ["dequant.py"]}
    m["reference"]["torch"] = torch.__version__ + " (Debian python3-torch, CPU)"
    m["reference"]["dequant_seed"] = SEED
    json.dump(m, open(mpath, "w"), indent=1)
    print(f"wrote {len(cases)} dequant cases")
