"""Scaled-fp8 reference data: tiny Comfy-Org style *_fp8_scaled files of the Flux set's DiT and T5,
and what ComfyUI's own loaders and forwards make of them.

    /usr/bin/python3 make_fp8_scaled.py COMFY EINOPS CLIP NODE_MODULES SHARED OUT_DIR

COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at the commit in
its COMFY_COMMIT); NODE_MODULES: npm folder with HF tokenizers (../shared/tools/comfyref/flux/package.json,
only needed by the harness's setup); SHARED: ../shared; OUT_DIR: tests/data/fp8_scaled.

Models (OUT_DIR/models), made from the Flux set's tiny files in the two layouts ComfyUI reads:
  * tiny-flux1-dev_fp8_scaled.safetensors: the legacy layout (Comfy-Org's flux1-dev-kontext_fp8_scaled,
    sd3.5_large_fp8_scaled): a "scaled_fp8" marker (F8_E4M3, no elements), every Linear weight as F8_E4M3
    codes of W / s with s = amax|W| / 448 and "<layer>.scale_weight" = s (F32, shape []), and
    "<layer>.scale_input" (1.0, one layer 0.5). img_in stays BF16 (a layer left unquantized) and
    final_layer.linear is plain F8_E4M3 without a scale (an unscaled fp8 layer in a scaled file); biases
    and norms stay BF16.
  * tiny-t5xxl_fp8_scaled.part.safetensors: the per-layer "comfy_quant" layout: every Linear weight
    (SelfAttention q/k/v/o, DenseReluDense wi_0/wi_1/wo) as F8_E4M3 with "<layer>.weight_scale" (F32 [])
    and "<layer>.comfy_quant" (U8 bytes of the JSON {"format": "float8_e4m3fn"}), one layer also with an
    "input_scale"; the norms and the relative attention bias widened exactly to F32. The part holds
    every tensor but "shared.weight" (the 32128 x d_model embedding, 4 MB), which the model takes
    unchanged from the Flux set's tiny-t5xxl_fp16.safetensors: the model file is the union (the test
    builds it the same way, from the manifest's "plus").
The fp8 codes are round-to-nearest-even of W / s (stio8.encode_e4m3fn); the goldens are whatever
ComfyUI computes from the files, so the quantizer itself is not part of what is checked.

Goldens (OUT_DIR/golden), ComfyUI through the Flux set's harness (../shared/tools/comfyref/flux/flux_env.py):
  * dit_flux_dev_fp8_scaled: comfy.sd.load_diffusion_model (UNETLoader, weight_dtype default) on the
    scaled DiT, then comfy.ldm.flux.model.Flux.forward and apply_model on the inputs of the Flux set's
    dit_flux_dev case.
  * t5_fp8_scaled: comfy.sd.load_clip (DualCLIPLoader, type flux, with the Flux set's clip_l: the tiny T5
    alone is detected as T5_BASE) on the union T5 file, then the T5 (comfy.text_encoders.t5.T5) on fixed
    ids: embeddings, every block's output, the last hidden state.
At the pinned commit ComfyUI turns both layouts into "comfy_quant" layer configs (comfy.utils.
convert_old_quants, run here unmodified) and loads such layers with ops.mixed_precision_ops, whose Linear
on a CPU (no fp8 matmul: the format is in `disabled`, so full_precision_mm) dequantizes the weight per
forward through comfy_kitchen: TensorCoreFP8Layout.dequantize = dequantize_per_tensor_fp8(q, scale,
orig_dtype) = q.to(dtype) * scale.to(dtype) (comfy_kitchen 0.2.3, backends/eager/quantization.py), in
the F32 the forward computes in (cast_bias_weight: dtype = input.dtype). Debian's torch 1.13 has neither
a float8 dtype nor the torch.library custom ops comfy_kitchen registers, so that one step runs here at
the state dict instead: convert_old_quants is wrapped so that every layer it returns with a comfy_quant
config gets weight = q.float() * weight_scale.float() (the same F32 product), its comfy_quant /
weight_scale / input_scale keys consumed as MixedPrecisionOps._load_from_state_dict consumes them
(input_scale is registered there but unused when the weight is dequantized). Everything else (which
keys are scaled layers, the marker's prefix, scale_input == 1 dropped, the model and its forward) is
ComfyUI's own code. The manifest lists, per model, the layers ComfyUI treated as scaled.
"""
import json
import os
import sys

comfy_root, einops_root, clip_root, node_modules, shared, out = sys.argv[1:7]
sys.path.insert(0, os.path.join(shared, "tools", "comfyref"))
sys.path.insert(0, os.path.join(shared, "tools", "comfyref", "flux"))
import flux_env  # noqa: E402

flux_env.setup(comfy_root, einops_root, clip_root, node_modules)

import torch  # noqa: E402
import stio  # noqa: E402
import stio8  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.utils  # noqa: E402

torch.manual_seed(0)
fdir = os.path.join(shared, "testdata", "flux")
fman = json.load(open(os.path.join(fdir, "manifest.json")))
dev = fman["models"]["flux_dev"]["config"]
head_dim = dev["hidden_size"] // dev["num_heads"]
t5c = dict(fman["models"]["t5xxl"]["config"])
clc = dict(fman["models"]["clip_l"]["config"])
clip_l_path = os.path.join(fdir, fman["models"]["clip_l"]["file"])
clc["projection_dim"] = int(stio.load(clip_l_path)["text_projection.weight"].shape[0])
# as gen/make_e2e.py of tests/data/gguf: the CLIP-L config goes in both keys (long_clipl.py)
flux_env.install_overrides({head_dim: dev["axes_dim"]}, fman["models"]["ae"]["config"],
                           {"t5xxl_model_config": t5c, "clip_l_model_config": clc, "model_config": clc})
os.makedirs(os.path.join(out, "models"), exist_ok=True)
os.makedirs(os.path.join(out, "golden"), exist_ok=True)


def quantize(w):
    """Per-tensor scale s = amax|W| / 448 (comfy_kitchen's "recalculate") and e4m3fn codes of W / s."""
    w = w.float()
    s = (w.abs().max() / 448.0).to(torch.float32)
    return stio8.encode_e4m3fn(w / s), s


# ---- the scaled DiT (legacy layout) ---------------------------------------------------------------
dit_src = stio.load(os.path.join(fdir, fman["models"]["flux_dev"]["file"]))
dit = {"scaled_fp8": stio8.Fp8(torch.zeros(0, dtype=torch.uint8))}
dit_layout = {"bf16": [], "plain_fp8": [], "scaled": []}
for k in sorted(dit_src):
    w = dit_src[k]
    if not (k.endswith(".weight") and w.ndim == 2):
        dit[k] = w
        continue
    layer = k[:-len(".weight")]
    if layer == "img_in":
        dit[k] = w
        dit_layout["bf16"].append(k)
    elif layer == "final_layer.linear":
        dit[k] = stio8.Fp8(stio8.encode_e4m3fn(w.float()))
        dit_layout["plain_fp8"].append(k)
    else:
        codes, s = quantize(w)
        dit[k] = stio8.Fp8(codes)
        dit[layer + ".scale_weight"] = s.reshape(())
        dit[layer + ".scale_input"] = torch.tensor(0.5 if layer == "double_blocks.0.img_mlp.0" else 1.0)
        dit_layout["scaled"].append(k)
dit_file = "models/tiny-flux1-dev_fp8_scaled.safetensors"
stio8.save(dit, os.path.join(out, dit_file))

# ---- the scaled T5 (comfy_quant layout) -----------------------------------------------------------
t5_src = stio.load(os.path.join(fdir, fman["models"]["t5xxl"]["file"]))
LINEAR = (".SelfAttention.q.weight", ".SelfAttention.k.weight", ".SelfAttention.v.weight",
          ".SelfAttention.o.weight", ".DenseReluDense.wi_0.weight", ".DenseReluDense.wi_1.weight",
          ".DenseReluDense.wo.weight")
conf = torch.tensor(list(json.dumps({"format": "float8_e4m3fn"}).encode("utf-8")), dtype=torch.uint8)
t5 = {}
t5_scaled = []
input_scaled = "encoder.block.0.layer.1.DenseReluDense.wi_0"
for k in sorted(t5_src):
    if k == "shared.weight":
        continue
    w = t5_src[k]
    if k.endswith(LINEAR):
        layer = k[:-len(".weight")]
        codes, s = quantize(w)
        t5[k] = stio8.Fp8(codes)
        t5[layer + ".weight_scale"] = s.reshape(())
        t5[layer + ".comfy_quant"] = conf.clone()
        if layer == input_scaled:
            t5[layer + ".input_scale"] = torch.tensor(2.0)
        t5_scaled.append(k)
    else:
        t5[k] = w.float()
t5_part = "models/tiny-t5xxl_fp8_scaled.part.safetensors"
stio8.save(t5, os.path.join(out, t5_part))
t5_plus = "shared/testdata/flux/" + fman["models"]["t5xxl"]["file"]
union = dict(t5)
union["shared.weight"] = t5_src["shared.weight"]
t5_full = os.path.join(out, "golden", ".t5_union.safetensors")  # scratch, deleted below
stio8.save(union, t5_full)

# ---- ComfyUI's conversion, with the dequantization at the state dict (see the docstring) ---------
seen = {}
_orig_convert = comfy.utils.convert_old_quants


def convert_old_quants(state_dict, model_prefix="", metadata={}):
    sd, md = _orig_convert(state_dict, model_prefix=model_prefix, metadata=metadata)
    for k in sorted(k for k in sd if k.endswith(".comfy_quant")):
        layer = k[:-len(".comfy_quant")]
        c = json.loads(sd.pop(k).numpy().tobytes())
        assert c["format"] == "float8_e4m3fn", c
        scale = sd.pop(layer + ".weight_scale").to(torch.float32)
        q = sd[layer + ".weight"]  # stio8: the exact fp8 values in float32
        sd[layer + ".weight"] = q.to(torch.float32) * scale.to(torch.float32)
        iscale = sd.pop(layer + ".input_scale", None)
        seen[layer] = {"scale": float(scale), "input_scale": None if iscale is None else float(iscale)}
    return sd, md


comfy.utils.convert_old_quants = convert_old_quants

tensors_meta = {}


def put(rec, name, t, role, desc):
    rec[name] = t.detach().contiguous()
    tensors_meta[name] = {"role": role, "shape": list(t.shape), "dtype": stio.dtype_name(rec[name]), "desc": desc}


# ---- DiT forward ---------------------------------------------------------------------------------
seen.clear()
patcher = comfy.sd.load_diffusion_model(os.path.join(out, dit_file), model_options={})
dit_seen = dict(seen)
assert sorted(l + ".weight" for l in dit_seen) == sorted(dit_layout["scaled"]), "ComfyUI scaled other layers"
model = patcher.model
dm = model.diffusion_model
assert all(p.dtype == torch.float32 for p in dm.parameters()), "the oracle runs in float32"
src = stio.load(os.path.join(fdir, "golden", "dit_flux_dev.safetensors"))
rec = {}
tensors_meta = {}
groups = sorted({k.split(".")[0] for k in src if k.endswith(".x")})
inputs = []
for g in groups:
    x, sig, ctx, y = (src[f"{g}.{n}"] for n in ("x", "sigma", "context", "y"))
    gd = src[f"{g}.guidance"]
    with torch.no_grad():
        o = dm(x, sig, ctx, y=y, guidance=gd)
        den = model.apply_model(x, sig, c_crossattn=ctx, y=y, guidance=gd)
    put(rec, f"{g}.x", x, "input", "latent (model space)")
    put(rec, f"{g}.sigma", sig, "input", "sigma = timestep")
    put(rec, f"{g}.context", ctx, "input", "T5 context")
    put(rec, f"{g}.y", y, "input", "pooled CLIP-L vector")
    put(rec, f"{g}.guidance", gd, "input", "guidance")
    put(rec, f"{g}.out", o, "expected", "Flux.forward output (velocity)")
    put(rec, f"{g}.denoised", den, "expected", "apply_model: x - out * sigma")
    inputs.append({"x": list(x.shape), "sigma": sig.tolist(), "ctx_tokens": ctx.shape[1], "guidance": gd.tolist()})
dit_case_file = "golden/dit_flux_dev_fp8_scaled.safetensors"
stio.save(rec, os.path.join(out, dit_case_file))
tol = {"atol": 2e-4, "rtol": 1e-3}
dit_case = {
    "id": "dit_flux_dev_fp8_scaled", "file": dit_case_file, "component": "dit",
    "description": "the tiny Flux.1-dev DiT as a legacy scaled-fp8 file (UNETLoader), forward and apply_model.",
    "reference": ["nodes.UNETLoader -> comfy.sd.load_diffusion_model -> comfy.utils.convert_old_quants "
                  "(scaled_fp8 marker, .scale_weight -> comfy_quant float8_e4m3fn + weight_scale)",
                  "ops.mixed_precision_ops Linear on the CPU: comfy_kitchen dequantize_per_tensor_fp8 "
                  "(q.to(float32) * scale), applied at the state dict (see gen/make_fp8_scaled.py)",
                  "comfy.ldm.flux.model.Flux.forward, comfy.model_base.Flux.apply_model"],
    "settings": {"dit": {k: dev[k] for k in ("hidden_size", "num_heads", "axes_dim", "depth",
                                             "depth_single_blocks", "mlp_ratio", "in_channels",
                                             "patch_size", "theta", "qkv_bias")},
                 "vec_in_dim": dev["vec_in_dim"], "context_in_dim": dev["context_in_dim"],
                 "inputs": inputs},
    "tolerance": tol,
    "notes": ["inputs are the Flux set's dit_flux_dev case inputs; outputs differ from that case's by the fp8 "
              "rounding of the weights",
              "scaled layers (ComfyUI's view): " + ", ".join(sorted(dit_seen)),
              "input scales kept by convert_old_quants (scale_input != 1) and unused on the CPU: " +
              ", ".join(sorted(l for l, v in dit_seen.items() if v["input_scale"] is not None))],
    "tensors": {k: dict(v, tolerance=tol) for k, v in tensors_meta.items()},
}

# ---- T5 forward ----------------------------------------------------------------------------------
seen.clear()
clip = comfy.sd.load_clip([clip_l_path, t5_full], clip_type=comfy.sd.CLIPType.FLUX)
t5_seen = dict(seen)
assert sorted(l + ".weight" for l in t5_seen) == sorted(t5_scaled), "ComfyUI scaled other layers"
tm = clip.cond_stage_model.t5xxl.transformer
assert all(p.dtype == torch.float32 for p in tm.parameters()), "the oracle runs in float32"
ids = torch.tensor([[3, 9, 4940, 13, 46, 1197, 1, 0, 0, 0, 0, 0],
                    [32099, 5, 17, 128, 1000, 31999, 2, 8, 21, 250, 1, 0]], dtype=torch.int64)
rec = {}
tensors_meta = {}
acts = {}
hooks = [tm.encoder.block[i].register_forward_hook(
    lambda mod, inp, outp, i=i: acts.__setitem__(i, outp[0].detach().clone())) for i in range(len(tm.encoder.block))]
with torch.no_grad():
    emb = tm.shared(ids, out_dtype=torch.float32)
    last, _ = tm(ids, None, dtype=torch.float32)
for h in hooks:
    h.remove()
put(rec, "raw.ids", ids, "input", "T5 token ids [n, L]")
put(rec, "raw.embeddings", emb, "expected", "shared(ids)")
for i in sorted(acts):
    put(rec, f"raw.block.{i}", acts[i], "intermediate", f"output of encoder block {i}")
put(rec, "raw.last_hidden", last, "expected", "encoder output after final_layer_norm")
t5_case_file = "golden/t5_fp8_scaled.safetensors"
stio.save(rec, os.path.join(out, t5_case_file))
ttol = {"atol": 2e-4, "rtol": 1e-4}
t5_case = {
    "id": "t5_fp8_scaled", "file": t5_case_file, "component": "t5",
    "description": "the tiny T5-XXL as a comfy_quant scaled-fp8 file (DualCLIPLoader flux), raw forward on fixed ids.",
    "reference": ["nodes.DualCLIPLoader(type=flux) -> comfy.sd.load_clip -> comfy.utils.convert_old_quants (comfy_quant "
                  "layers kept) -> flux.FluxClipModel's T5XXLModel with mixed_precision_ops(full_precision_mm=True)",
                  "comfy_kitchen dequantize_per_tensor_fp8 (q.to(float32) * scale), applied at the state dict",
                  "comfy.text_encoders.t5.T5 forward (dtype float32, no attention mask)"],
    "settings": {"t5": t5c},
    "tolerance": ttol,
    "notes": ["ids include </s> (1) and <pad> (0) tokens; no attention mask, as Flux and SD3 encode",
              "scaled layers (ComfyUI's view): " + ", ".join(sorted(t5_seen)),
              "input_scale (unused on the CPU) on: " +
              ", ".join(sorted(l for l, v in t5_seen.items() if v["input_scale"] is not None))],
    "tensors": {k: dict(v, tolerance=ttol) for k, v in tensors_meta.items()},
}
os.remove(t5_full)

manifest = {
    "set": "fp8_scaled",
    "family": "flux1",
    "models": {
        "flux_dev_fp8_scaled": {
            "file": dit_file,
            "layout": "BFL flux1-dev (no prefix), legacy scaled fp8: scaled_fp8 marker, .scale_weight, .scale_input",
            "comfy_name": "diffusion_models/flux1-dev_fp8_scaled.safetensors",
            "from": "shared/testdata/flux/" + fman["models"]["flux_dev"]["file"],
            "tensors": dit_layout,
            "config": dict(dev),
        },
        "t5xxl_fp8_scaled": {
            "file": t5_part,
            "plus": t5_plus,
            "plus_keys": ["shared.weight"],
            "layout": "HF T5EncoderModel, comfy_quant scaled fp8 (float8_e4m3fn + weight_scale); norms and "
                      "relative attention bias F32; shared.weight (F16) from 'plus'",
            "comfy_name": "text_encoders/t5xxl_fp8_e4m3fn_scaled.safetensors",
            "scaled": t5_scaled,
            "config": t5c,
        },
    },
    "reference": {"comfyui": open(os.path.join(shared, "tools", "comfyref", "COMFY_COMMIT")).read().strip(),
                  "comfy_kitchen": "0.2.3 (dequantize_per_tensor_fp8, eager backend)",
                  "generator": "tests/data/fp8_scaled/gen/make_fp8_scaled.py"},
    "conventions": fman["conventions"],
    "cases": [dit_case, t5_case],
}
with open(os.path.join(out, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
    f.write("\n")
print("scaled DiT layers:", len(dit_seen), "scaled T5 layers:", len(t5_seen))
