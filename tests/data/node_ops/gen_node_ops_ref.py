#!/usr/bin/python3
"""Reference results of ComfyUI's own mask, image, latent, primitive and string nodes.

usage: /usr/bin/python3 gen_node_ops_ref.py COMFY EINOPS CLIP KORNIA PILLOW [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts (ComfyUI at
                     the commit in COMFY_COMMIT there);
  KORNIA:            a kornia source tree (github kornia/kornia at tag v0.7.1, the oldest ComfyUI
                     accepts) for Morphology;
  PILLOW:            a Pillow source tree (github python-pillow/Pillow at tag 11.0.0) built in
                     place (`python3 setup.py build_ext --inplace` with the optional codecs
                     disabled), whose src/ is put first on the path: ComfyUI installs a current
                     Pillow, and ImageQuantize's palette differs from Debian's 9.4 (which pads
                     every palette to 256 entries with black); "-": the system's Pillow;
  OUT_DIR:           default: this script's folder.
Writes manifest.json and node_ops_ref.safetensors beside this script.

Every case calls one ComfyUI node class the way its executor would (V3: cls.execute(**inputs),
V1: getattr(cls(), cls.FUNCTION)(**inputs)) on small inputs made here from fixed seeds; inputs
and outputs are stored in node_ops_ref.safetensors under "<case>/in/<input>" and
"<case>/out<k>[/<key>]". The manifest lists each case's node, its inputs (a tensor name, a
LATENT's parts, a literal, or another node's output) and its outputs (a tensor with the
tolerance it is compared under, a LATENT's parts, a literal value, or the error ComfyUI
raised). tests/nodes/test_golden_node_ops.c runs the same node in sdflow on the same inputs.

Tolerances: 0 (bit for bit) unless the case says why not; the few non-zero ones are derived
from the computation in the case's "tolerance_note", never from a comparison.
Runs on Debian's python3-torch 1.13, CPU, float32.
"""
import json
import os
import sys
import types

comfy_root, einops_root, clip_root, kornia_root, pillow_root = sys.argv[1:6]
out_dir = sys.argv[6] if len(sys.argv) > 6 else os.path.dirname(os.path.abspath(__file__))
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "../../../../shared/tools/comfyref"))
import comfy_env  # noqa: E402

# before the shims, which stub kornia when it cannot be imported
sys.path.insert(0, kornia_root)
if pillow_root != "-":
    sys.path.insert(0, os.path.join(pillow_root, "src"))
comfy_env.setup(comfy_root, einops_root, clip_root)
# nodes_images imports the server (for GetImageSize's progress text): a stand-in
server = types.ModuleType("server")
server.PromptServer = types.SimpleNamespace(instance=None)
sys.modules["server"] = server

import torch  # noqa: E402
import stio  # noqa: E402
import nodes  # noqa: E402
import comfy_extras.nodes_mask as nodes_mask  # noqa: E402
import comfy_extras.nodes_compositing as nodes_compositing  # noqa: E402
import comfy_extras.nodes_images as nodes_images  # noqa: E402
import comfy_extras.nodes_post_processing as nodes_post_processing  # noqa: E402
import comfy_extras.nodes_morphology as nodes_morphology  # noqa: E402
import comfy_extras.nodes_latent as nodes_latent  # noqa: E402
import comfy_extras.nodes_primitive as nodes_primitive  # noqa: E402
import comfy_extras.nodes_string as nodes_string  # noqa: E402
import comfy_extras.nodes_preview_any as nodes_preview_any  # noqa: E402
import comfy_extras.nodes_rebatch as nodes_rebatch  # noqa: E402

MODULES = [nodes_mask, nodes_compositing, nodes_images, nodes_post_processing, nodes_morphology, nodes_latent,
           nodes_primitive, nodes_string, nodes_preview_any, nodes_rebatch]

tensors = {}
cases = []
stored = {}  # (shape, bytes) -> name: an input used by several cases is stored once


def put_input(name, t):
    t = t.contiguous()
    k = (tuple(t.shape), str(t.dtype), t.numpy().tobytes())
    if k not in stored:
        stored[k] = name
        tensors[name] = t
    return stored[k]


def node_class(name):
    for m in MODULES:
        for v in vars(m).values():
            if isinstance(v, type) and hasattr(v, "define_schema"):
                try:
                    if v.define_schema().node_id == name:
                        return v
                except Exception:
                    pass
        cls = getattr(m, "NODE_CLASS_MAPPINGS", {}).get(name)
        if cls:
            return cls
    raise KeyError(name)


def call(name, kwargs):
    cls = node_class(name)
    if hasattr(cls, "define_schema"):
        cls.hidden = types.SimpleNamespace(unique_id=None, prompt=None, extra_pnginfo=None)
        return tuple(cls.execute(**kwargs).result)
    r = getattr(cls(), cls.FUNCTION)(**kwargs)
    if isinstance(r, dict) and "result" not in r:  # an output node: its ui result
        return (UI(r["ui"]),)
    return tuple(r["result"]) if isinstance(r, dict) else tuple(r)


class UI:
    def __init__(self, ui):
        self.ui = ui


# ---- inputs ---------------------------------------------------------------------------------

def rand(seed, *shape, lo=0.0, hi=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) * (hi - lo) + lo


def blobs(seed, b, h, w):
    """A mask with islands of 1s, some fractional values and zeros."""
    m = rand(seed, b, h, w)
    return torch.where(m > 0.7, torch.ones_like(m), torch.where(m < 0.4, torch.zeros_like(m), m))


class T:
    """An input tensor, stored under <case>/in/<name>; u8: a picture of k / 255
    values, stored as its uint8 k (the test divides by 255 in float32, as
    torch.tensor(u8).float() / 255 does)."""

    def __init__(self, t, u8=False):
        self.t = t.contiguous().float()
        self.u8 = u8


class Latent:
    def __init__(self, samples, noise_mask=None, batch_index=None):
        self.samples, self.noise_mask, self.batch_index = samples, noise_mask, batch_index


class Node:
    """Another node's output as an input."""

    def __init__(self, name, inputs, output=0):
        self.name, self.inputs, self.output = name, inputs, output


def store_input(case_id, name, v):
    """(manifest entry, python value) of one input."""
    if isinstance(v, T) and v.u8:
        k = torch.round(v.t * 255).to(torch.uint8)
        assert torch.equal(k.float() / 255, v.t), name
        return {"tensor": put_input("%s/in/%s" % (case_id, name), k), "u8": True}, v.t.clone()
    if isinstance(v, T):
        return {"tensor": put_input("%s/in/%s" % (case_id, name), v.t.float())}, v.t.clone()
    if isinstance(v, Latent):
        e, d = {"latent": {}}, {}
        for part in ("samples", "noise_mask"):
            t = getattr(v, part)
            if t is not None:
                e["latent"][part] = put_input("%s/in/%s/%s" % (case_id, name, part), t.float())
                d[part] = t.clone()
        if v.batch_index is not None:
            e["latent"]["batch_index"] = list(v.batch_index)
            d["batch_index"] = list(v.batch_index)
        return e, d
    if isinstance(v, Node):
        e, kw = {}, {}
        for k, x in v.inputs.items():
            e[k], kw[k] = store_input(case_id, name + "." + k, x)
        return {"node": v.name, "inputs": e, "output": v.output}, call(v.name, kw)[v.output]
    if isinstance(v, list):
        pairs = [store_input(case_id, "%s.%d" % (name, i), x) for i, x in enumerate(v)]
        return {"list": [p[0] for p in pairs]}, [p[1] for p in pairs]
    return literal(v), v


def literal(v):
    # a NUL would end the C string the test reads: no case may produce one
    assert not (isinstance(v, str) and "\0" in v), v
    # integers beyond a double's 53 bits (seeds) are written as decimal text
    if kind(v) == "INT" and abs(v) >= 2 ** 53:
        return {"value": str(v), "kind": "INT"}
    if isinstance(v, (list, dict)):  # with every item's type, which JSON numbers lose
        return {"value": v, "kind": kind(v), "typed": typed(v)}
    return {"value": v, "kind": kind(v)}


def typed(v):
    if isinstance(v, list):
        return {"t": "list", "v": [typed(x) for x in v]}
    if isinstance(v, dict):
        return {"t": "dict", "v": {k: typed(x) for k, x in v.items()}}
    return {"t": kind(v), "v": v}


def kind(v):
    return ("NONE" if v is None else "BOOLEAN" if isinstance(v, bool) else "INT" if isinstance(v, int)
            else "FLOAT" if isinstance(v, float) else "STRING" if isinstance(v, str) else type(v).__name__)


def store_output(case_id, k, v, tol, u8=False):
    if isinstance(v, UI):
        return {"ui_text": list(v.ui["text"])}
    if isinstance(v, torch.Tensor) and u8:
        q = torch.round(v * 255).to(torch.uint8)
        assert torch.equal(q.float() / 255, v)
        key = "%s/out%d" % (case_id, k)
        tensors[key] = q
        return {"tensor": key, "u8": True, "atol": tol[0], "rtol": tol[1]}
    if isinstance(v, torch.Tensor):
        key = "%s/out%d" % (case_id, k)
        tensors[key] = v.contiguous().float()
        return {"tensor": key, "atol": tol[0], "rtol": tol[1]}
    if isinstance(v, dict):
        e = {"latent": {}, "keys": sorted(v.keys())}
        for part in ("samples", "noise_mask"):
            if part in v:
                key = "%s/out%d/%s" % (case_id, k, part)
                tensors[key] = v[part].contiguous().float()
                e["latent"][part] = key
        if "batch_index" in v:
            e["latent"]["batch_index"] = list(v["batch_index"])
        e["atol"], e["rtol"] = tol
        return e
    if isinstance(v, list):
        return {"list": [store_output("%s/%d" % (case_id, i), k, x, tol) for i, x in enumerate(v)]}
    return literal(v)


def case(case_id, node, inputs, tol=(0.0, 0.0), note=None, u8=False):
    assert all(c["id"] != case_id for c in cases), case_id
    entry = {"id": case_id, "node": node, "inputs": {}}
    kw = {}
    for name, v in inputs.items():
        entry["inputs"][name], kw[name] = store_input(case_id, name, v)
    try:
        result = call(node, kw)
        entry["outputs"] = [store_output(case_id, k, v, tol, u8) for k, v in enumerate(result)]
    except Exception as ex:  # ComfyUI refuses these inputs: so must sdflow
        entry["error"] = "%s: %s" % (type(ex).__name__, ex)
    if note:
        entry["tolerance_note"] = note
    cases.append(entry)


# ---- tolerances where resampling is involved ---------------------------------------------------
# PyTorch's CPU interpolate kernels are chosen per CPU (default, AVX2, AVX512 builds, with or
# without FMA contraction), so resampled values are not reproducible bit for bit even across
# machines running ComfyUI. u = 2^-24 (float32 unit roundoff), S = the largest |value| resampled.
U = 2.0 ** -24
# bilinear: 4 weights (each rounded once), 4 products, 3 sums: at most 9 roundings of terms
# <= S in either implementation, so two implementations differ by <= 18uS; 20uS.
BILINEAR = 20
# a mask resampled bilinearly then used to blend: the mask's error (20u) times |src - dst|
# (<= 2S), plus the blend's own 4 roundings on each side: 40u + 8u; 50uS.
BLEND_RESAMPLED_MASK = 50
# bicubic: each axis's 4 coefficients are cubic polynomials in float32 (3 roundings of terms up
# to 6, with or without FMA): |dc| <= 2*3*6u = 36u per coefficient; 16 products c_y*c_x*v with
# sum|c| <= 1.25 per axis: 2*1.25*4*36u*S + 2*16*2u*1.5625*S < 460uS between two implementations.
BICUBIC = 460


def resampled(k, scale=1.0):
    return (k * U * scale, 0.0)


# ---- masks (comfy_extras/nodes_mask.py, nodes_compositing.py) ---------------------------------

def mask_cases():
    m = blobs(1, 2, 13, 17)
    case("invert", "InvertMask", {"mask": T(m)})
    case("invert_2d", "InvertMask", {"mask": T(rand(2, 9, 7))})
    case("solid", "SolidMask", {"value": 0.3, "width": 7, "height": 5})
    case("threshold", "ThresholdMask", {"mask": T(rand(3, 2, 8, 9)), "value": 0.3})
    case("threshold_4d", "ThresholdMask", {"mask": T(rand(3, 1, 1, 8, 9)), "value": 0.55})
    case("crop", "CropMask", {"mask": T(m), "x": 3, "y": 2, "width": 9, "height": 20})
    case("crop_outside", "CropMask", {"mask": T(m), "x": 40, "y": 2, "width": 5, "height": 5})
    img = rand(4, 2, 6, 5, 4)
    for ch in ("red", "green", "blue", "alpha"):
        case("image_to_mask_" + ch, "ImageToMask", {"image": T(img), "channel": ch})
    case("image_to_mask_no_alpha", "ImageToMask", {"image": T(rand(4, 1, 6, 5, 3)), "channel": "alpha"})
    case("mask_to_image", "MaskToImage", {"mask": T(m)})
    q = torch.round(rand(5, 2, 7, 6, 3) * 4) / 4  # few colours, so some pixels match
    q[0, 1, 2] = torch.tensor([1.0, 0.5, 0.25])
    case("color_to_mask", "ImageColorToMask", {"image": T(q), "color": 0xFF8040})
    case("color_to_mask_black", "ImageColorToMask", {"image": T(q), "color": 0})
    for expand in (3, -2, 40):
        for tapered in (True, False):
            case("grow_%d_%s" % (expand, "cross" if tapered else "square"), "GrowMask",
                 {"mask": T(m), "expand": expand, "tapered_corners": tapered})
    case("feather", "FeatherMask", {"mask": T(m), "left": 3, "top": 2, "right": 4, "bottom": 5})
    case("feather_wide", "FeatherMask", {"mask": T(rand(6, 1, 5, 6)), "left": 9, "top": 0, "right": 9,
                                          "bottom": 1})
    src = blobs(7, 1, 6, 8)
    for op in ("multiply", "add", "subtract", "and", "or", "xor"):
        case("mask_composite_" + op, "MaskComposite",
             {"destination": T(m), "source": T(src), "x": 12, "y": 4, "operation": op})
    case("mask_composite_inside", "MaskComposite",
         {"destination": T(m), "source": T(blobs(8, 2, 5, 5)), "x": 1, "y": 1, "operation": "add"})
    case("mask_composite_batch", "MaskComposite",
         {"destination": T(m), "source": T(blobs(9, 3, 5, 5)), "x": 1, "y": 1, "operation": "add"})
    # compositing
    rgb = rand(10, 2, 9, 11, 3)
    case("join_alpha", "JoinImageWithAlpha", {"image": T(rgb), "alpha": T(rand(11, 3, 9, 11))})
    case("join_alpha_resized", "JoinImageWithAlpha", {"image": T(rgb), "alpha": T(rand(12, 1, 5, 7))},
         tol=resampled(BILINEAR), note="alpha = 1 - the bilinearly resampled mask: BILINEAR")
    case("split_alpha", "SplitImageWithAlpha", {"image": T(rand(13, 2, 4, 5, 4))})
    case("split_alpha_rgb", "SplitImageWithAlpha", {"image": T(rand(13, 2, 4, 5, 3))})
    src_img, dst_img = rand(14, 2, 9, 11, 3), rand(15, 2, 9, 11, 3)
    sa, da = rand(16, 2, 9, 11), rand(17, 2, 9, 11)
    sa[0, :3] = 1.0  # fully transparent rows: out alpha 0 in some modes
    da[0, :3] = 1.0
    for mode in ("ADD", "CLEAR", "DARKEN", "DST", "DST_ATOP", "DST_IN", "DST_OUT", "DST_OVER", "LIGHTEN",
                 "MULTIPLY", "OVERLAY", "SCREEN", "SRC", "SRC_ATOP", "SRC_IN", "SRC_OUT", "SRC_OVER", "XOR"):
        case("porter_duff_" + mode.lower(), "PorterDuffImageComposite",
             {"source": T(src_img), "source_alpha": T(sa), "destination": T(dst_img),
              "destination_alpha": T(da), "mode": mode})
    # masks in [0, 0.5]: alphas >= 0.5, so SRC_OVER's out alpha >= 0.5 and the final division by it
    # at most doubles an error in the colour and adds |colour| * |d alpha| / alpha^2 <= 4 d
    case("porter_duff_resized", "PorterDuffImageComposite",
         {"source": T(rand(18, 1, 6, 8, 3)), "source_alpha": T(rand(19, 1, 5, 5, hi=0.5)),
          "destination": T(dst_img), "destination_alpha": T(rand(20, 2, 7, 13, hi=0.5)), "mode": "SRC_OVER"},
         tol=resampled(6 * BICUBIC),
         note="source and alphas resampled bicubically (BICUBIC), then composited and divided by an "
              "out alpha >= 0.5: at most 6 times BICUBIC")
    # ImageCompositeMasked / LatentCompositeMasked
    d, s = rand(21, 2, 12, 14, 3), rand(22, 1, 5, 6, 3)
    case("image_composite", "ImageCompositeMasked",
         {"destination": T(d), "source": T(s), "x": 3, "y": 4, "resize_source": False})
    case("image_composite_mask", "ImageCompositeMasked",
         {"destination": T(d), "source": T(s), "x": 10, "y": 9, "resize_source": False,
          "mask": T(rand(23, 1, 3, 4))}, tol=resampled(BLEND_RESAMPLED_MASK),
         note="the mask is resampled bilinearly to the source's size: BLEND_RESAMPLED_MASK")
    case("image_composite_resize", "ImageCompositeMasked",
         {"destination": T(d), "source": T(s), "x": 0, "y": 0, "resize_source": True,
          "mask": T(rand(24, 2, 12, 14))}, tol=resampled(BILINEAR),
         note="the source is resampled bilinearly (the mask keeps its size): BILINEAR")
    case("image_composite_rgba_source", "ImageCompositeMasked",
         {"destination": T(d), "source": T(rand(25, 2, 5, 6, 4)), "x": 2, "y": 2, "resize_source": False})
    case("image_composite_outside", "ImageCompositeMasked",
         {"destination": T(d), "source": T(s), "x": 40, "y": 2, "resize_source": False})
    ld, ls = rand(26, 2, 4, 6, 7, lo=-2, hi=2), rand(27, 1, 4, 3, 4, lo=-2, hi=2)
    case("latent_composite", "LatentCompositeMasked",
         {"destination": Latent(ld, batch_index=[3, 4]), "source": Latent(ls), "x": 16, "y": 8,
          "resize_source": False, "mask": T(rand(28, 1, 24, 32))}, tol=resampled(BLEND_RESAMPLED_MASK, 2.0),
         note="the mask is resampled bilinearly; latents within [-2, 2]: BLEND_RESAMPLED_MASK * 2")
    case("latent_composite_resize", "LatentCompositeMasked",
         {"destination": Latent(ld), "source": Latent(ls), "x": 0, "y": 0, "resize_source": True},
         tol=resampled(BILINEAR, 2.0), note="the source is resampled bilinearly, values within [-2, 2]")
    case("latent_composite_floor", "LatentCompositeMasked",
         {"destination": Latent(ld), "source": Latent(ls), "x": 37, "y": 15, "resize_source": False})


# ---- images (nodes_images.py, nodes_post_processing.py, nodes_morphology.py) -------------------

# ImageBlur: torch's float32 convolution sums k*k products (k = 2r + 1) with at most (k^2 + 1)
# roundings of terms <= S (sum|w| = 1); the kernels' normalising sums (k^2 positive float32
# terms, summed in another order here) differ by <= 2(k^2 - 1)u relatively: (3k^2 + 4)uS.
def blur_tol(r):
    k = 2 * r + 1
    return (3 * k * k + 4) * U


# ImageSharpen: weights w = -10 alpha g except the centre (w_c - sum w + 1), sum|w| <= 1 + 20 alpha;
# the gaussian's normalisation differs by 2(k^2 - 1)u, the float32 sum of w by k^2 u 10 alpha, the
# convolution by (k^2 + 1)u sum|w|: ((k^2 + 1)(1 + 20 alpha) + (3k^2 + 1) 10 alpha + 2)uS.
def sharpen_tol(r, alpha):
    k = 2 * r + 1
    return ((k * k + 1) * (1 + 20 * alpha) + (3 * k * k + 1) * 10 * alpha + 2) * U


def image_cases():
    img = rand(30, 2, 9, 12, 3)
    case("get_size", "GetImageSize", {"image": T(img)})
    case("repeat_batch", "RepeatImageBatch", {"image": T(img), "amount": 3})
    case("from_batch", "ImageFromBatch", {"image": T(rand(31, 4, 3, 5, 3)), "batch_index": 1, "length": 2})
    case("from_batch_clamped", "ImageFromBatch", {"image": T(rand(31, 4, 3, 5, 3)), "batch_index": 9, "length": 5})
    case("add_noise", "ImageAddNoise", {"image": T(img), "seed": 42, "strength": 0.3})
    case("add_noise_big_seed", "ImageAddNoise", {"image": T(rand(32, 1, 3, 2, 3)), "seed": 2 ** 63 + 12345,
                                                 "strength": 1.0})
    case("image_crop", "ImageCrop", {"image": T(img), "width": 5, "height": 20, "x": 3, "y": 2})
    case("image_crop_outside", "ImageCrop", {"image": T(img), "width": 4, "height": 4, "x": 40, "y": 40})
    for f in ("x-axis: vertically", "y-axis: horizontally"):
        case("flip_" + f[0], "ImageFlip", {"image": T(img), "flip_method": f})
    for r in ("none", "90 degrees", "180 degrees", "270 degrees"):
        case("rotate_" + r.split()[0], "ImageRotate", {"image": T(img), "rotation": r})
    a, b = rand(33, 2, 6, 8, 3), rand(34, 1, 9, 5, 3)
    for d in ("right", "down", "left", "up"):
        case("stitch_" + d, "ImageStitch", {"image1": T(a), "direction": d, "match_image_size": True,
                                            "spacing_width": 2, "spacing_color": "red", "image2": T(b)})
        case("stitch_pad_" + d, "ImageStitch", {"image1": T(a), "direction": d, "match_image_size": False,
                                                "spacing_width": 3, "spacing_color": "white", "image2": T(b)})
    case("stitch_rgba", "ImageStitch", {"image1": T(rand(35, 1, 6, 8, 4)), "direction": "right",
                                        "match_image_size": False, "spacing_width": 2, "spacing_color": "blue",
                                        "image2": T(b)})
    case("stitch_none", "ImageStitch", {"image1": T(a), "direction": "right", "match_image_size": True,
                                        "spacing_width": 0, "spacing_color": "white"})
    big = rand(36, 1, 20, 30, 3)
    for m in ("nearest-exact", "area", "lanczos"):
        case("total_pixels_" + m, "ImageScaleToTotalPixels", {"image": T(big), "upscale_method": m,
                                                              "megapixels": 0.0004, "resolution_steps": 1})
    case("total_pixels_bilinear", "ImageScaleToTotalPixels",
         {"image": T(big), "upscale_method": "bilinear", "megapixels": 0.001, "resolution_steps": 4},
         tol=resampled(BILINEAR), note="bilinear resampling: BILINEAR")
    case("total_pixels_bicubic", "ImageScaleToTotalPixels",
         {"image": T(big), "upscale_method": "bicubic", "megapixels": 0.0003, "resolution_steps": 1},
         tol=resampled(BICUBIC), note="bicubic resampling: BICUBIC")
    case("max_dimension", "ImageScaleToMaxDimension", {"image": T(big), "upscale_method": "area", "largest_size": 17})
    case("max_dimension_tall", "ImageScaleToMaxDimension",
         {"image": T(rand(37, 1, 25, 9, 3)), "upscale_method": "nearest-exact", "largest_size": 40})
    for m in ("area", "nearest-exact", "lanczos"):
        case("resize_pad_" + m, "ResizeAndPadImage", {"image": T(big), "target_width": 14, "target_height": 16,
                                                      "padding_color": "black", "interpolation": m})
    case("resize_pad_bilinear", "ResizeAndPadImage",
         {"image": T(rand(37, 1, 25, 9, 3)), "target_width": 20, "target_height": 11, "padding_color": "white",
          "interpolation": "bilinear"}, tol=resampled(BILINEAR), note="bilinear resampling: BILINEAR")
    i1, i2 = rand(38, 2, 7, 9, 3), rand(39, 2, 7, 9, 3)
    for mode in ("normal", "multiply", "screen", "overlay", "soft_light", "difference"):
        case("blend_" + mode, "ImageBlend", {"image1": T(i1), "image2": T(i2), "blend_factor": 0.35,
                                             "blend_mode": mode})
    # image2 resized (bicubic, centre crop) first; the modes then change an error d in image2 by at
    # most 2d (overlay: 2a, soft light: <= 1), the blend factor keeps it below that
    case("blend_resized", "ImageBlend", {"image1": T(i1), "image2": T(rand(40, 1, 5, 11, 4)), "blend_factor": 0.8,
                                         "blend_mode": "overlay"},
         tol=resampled(2 * BICUBIC + 8), note="image2 resampled bicubically: 2 BICUBIC + 8")
    case("blend_rgb_onto_rgba", "ImageBlend", {"image1": T(rand(41, 1, 7, 9, 4)), "image2": T(i2),
                                               "blend_factor": 0.5, "blend_mode": "normal"})
    for r, sigma in ((1, 1.0), (3, 0.5)):
        case("blur_%d" % r, "ImageBlur", {"image": T(img), "blur_radius": r, "sigma": sigma},
             tol=(blur_tol(r), 0.0), note="float32 convolution of (2r+1)^2 terms: (3k^2 + 4)uS")
    case("blur_too_wide", "ImageBlur", {"image": T(img), "blur_radius": 9, "sigma": 1.0})
    for r, sigma, alpha in ((1, 1.0, 1.0), (2, 0.7, 0.3)):
        case("sharpen_%d" % r, "ImageSharpen", {"image": T(img), "sharpen_radius": r, "sigma": sigma, "alpha": alpha},
             tol=(sharpen_tol(r, alpha), 0.0), note="float32 convolution with the sharpen kernel: see sharpen_tol")
    m = blobs(42, 1, 11, 13)
    mimg = torch.stack([m[0], rand(43, 11, 13), 1 - m[0]], dim=-1).unsqueeze(0)
    for op in ("erode", "dilate", "open", "close", "gradient", "bottom_hat", "top_hat"):
        for k in (3, 4):
            case("morphology_%s_%d" % (op, k), "Morphology", {"image": T(mimg), "operation": op,
                                                             "kernel_size": k})
    case("morphology_dilate_wide", "Morphology", {"image": T(mimg), "operation": "dilate", "kernel_size": 30})


# ---- latents (nodes_latent.py) ----------------------------------------------------------------

def latent_cases():
    a = rand(50, 1, 4, 6, 7, lo=-2, hi=2)
    b = rand(51, 1, 4, 6, 7, lo=-2, hi=2)
    b3 = rand(52, 3, 4, 6, 7, lo=-2, hi=2)
    case("latent_add", "LatentAdd", {"samples1": Latent(a, batch_index=[5]), "samples2": Latent(b)})
    case("latent_add_repeat", "LatentAdd", {"samples1": Latent(b3), "samples2": Latent(a)})
    case("latent_add_resized", "LatentAdd",
         {"samples1": Latent(a), "samples2": Latent(rand(53, 2, 4, 4, 9, lo=-2, hi=2))},
         tol=resampled(BILINEAR, 2.0), note="samples2 resampled bilinearly (values within 2): BILINEAR * 2")
    case("latent_subtract", "LatentSubtract", {"samples1": Latent(b3), "samples2": Latent(a)})
    case("latent_multiply", "LatentMultiply", {"samples": Latent(b3, noise_mask=rand(54, 3, 1, 48, 56)),
                                               "multiplier": -1.7})
    z = a.clone()
    z[0, :, 2, 3] = 0.0  # a zero vector: 0/0 -> nan_to_num -> 0
    case("latent_interpolate", "LatentInterpolate", {"samples1": Latent(z), "samples2": Latent(b), "ratio": 0.3})
    case("latent_interpolate_b4", "LatentInterpolate",
         {"samples1": Latent(rand(55, 4, 4, 5, 6, lo=-2, hi=2)), "samples2": Latent(rand(56, 4, 4, 5, 6, lo=-2, hi=2)),
          "ratio": 0.6})
    case("latent_interpolate_b2", "LatentInterpolate",
         {"samples1": Latent(rand(57, 2, 4, 5, 6)), "samples2": Latent(rand(58, 2, 4, 5, 6)), "ratio": 0.5})
    case("latent_batch", "LatentBatch", {"samples1": Latent(b3, batch_index=[7, 8, 9]), "samples2": Latent(a)})
    case("latent_batch_resized", "LatentBatch",
         {"samples1": Latent(a), "samples2": Latent(rand(59, 2, 4, 8, 8, lo=-2, hi=2))},
         tol=resampled(BILINEAR, 2.0), note="samples2 resampled bilinearly (values within 2): BILINEAR * 2")
    case("seed_fixed", "LatentBatchSeedBehavior", {"samples": Latent(b3, batch_index=[4, 5, 6]), "seed_behavior": "fixed"})
    case("seed_fixed_plain", "LatentBatchSeedBehavior", {"samples": Latent(b3), "seed_behavior": "fixed"})
    case("seed_random", "LatentBatchSeedBehavior", {"samples": Latent(b3, batch_index=[4, 5, 6]),
                                                    "seed_behavior": "random"})
    big = rand(60, 2, 4, 9, 11, lo=-2, hi=2)
    norm_max = float(torch.linalg.vector_norm(big, dim=1).max())
    for r, sigma, alpha in ((2, 1.0, 0.1), (4, 0.5, 1.0)):
        # the sharpen filter works on latent / |latent| (values within 1), its result scaled by the norm
        case("latent_sharpen_%d" % r, "LatentApplyOperation",
             {"samples": Latent(big), "operation": Node("LatentOperationSharpen",
                                                        {"sharpen_radius": r, "sigma": sigma, "alpha": alpha})},
             tol=(sharpen_tol(r, alpha) * (norm_max + 1) + 4 * U * norm_max, 0.0),
             note="ImageSharpen's bound on the normalised latent, times the largest norm, plus its products")
    for mult in (1.0, 0.4):
        # top = (5 std + mean) * multiplier: torch sums the mean in float32 over n = H*W values (error <= n u
        # relatively), std in double; the result moves by at most |d top| (d new/d top = s^2/(s+1)^2 <= 1)
        hw = big.shape[2] * big.shape[3]
        m = torch.linalg.vector_norm(big, dim=1) + 1e-10
        top = float(((m.flatten(1).std(1) * 5 + m.flatten(1).mean(1)) * mult).max())
        case("latent_tonemap_%g" % mult, "LatentApplyOperation",
             {"samples": Latent(big), "operation": Node("LatentOperationTonemapReinhard", {"multiplier": mult})},
             tol=((hw + 16) * U * top, 0.0), note="the mean's float32 sum: (n + 16)u * top")
    case("latent_sharpen_small", "LatentApplyOperation",
         {"samples": Latent(a), "operation": Node("LatentOperationSharpen", {"sharpen_radius": 9, "sigma": 1.0,
                                                                             "alpha": 0.1})})


# ---- primitives, strings, regex, PreviewAny (nodes_primitive.py, nodes_string.py, nodes_preview_any.py) ---

TEXT = "  Hello wörld — ﬁne straße ǆemal ΣΑΣ σΣ o'neil 3rd İstanbul 😀\u3000\n"


def text_cases():
    case("primitive_int", "PrimitiveInt", {"value": 9223372036854775807})
    case("primitive_int_neg", "PrimitiveInt", {"value": -42})
    case("primitive_float", "PrimitiveFloat", {"value": 0.1})
    case("primitive_string", "PrimitiveString", {"value": "a b"})
    case("primitive_multiline", "PrimitiveStringMultiline", {"value": "a\nb"})
    case("primitive_bool", "PrimitiveBoolean", {"value": True})
    case("concat", "StringConcatenate", {"string_a": "ab", "string_b": "cé", "delimiter": ", "})
    for i, (a, b) in enumerate(((0, 5), (-3, 100), (4, 2), (-100, -10), (7, -1))):
        case("substring_%d" % i, "StringSubstring", {"string": TEXT, "start": a, "end": b})
    case("length", "StringLength", {"string": TEXT})
    for m in ("Both", "Left", "Right"):
        case("trim_" + m.lower(), "StringTrim", {"string": TEXT, "mode": m})
    case("replace", "StringReplace", {"string": TEXT, "find": "ß", "replace": "ss"})
    case("replace_empty", "StringReplace", {"string": "aé😀", "find": "", "replace": "-"})
    for m in ("UPPERCASE", "lowercase", "Capitalize", "Title Case"):
        case("case_" + m.split()[0].lower(), "CaseConverter", {"string": TEXT, "mode": m})
    case("contains", "StringContains", {"string": TEXT, "substring": "WÖRLD", "case_sensitive": False})
    case("contains_sensitive", "StringContains", {"string": TEXT, "substring": "WÖRLD", "case_sensitive": True})
    case("contains_dotted_i", "StringContains", {"string": "İSTANBUL", "substring": "i̇stanbul",
                                                 "case_sensitive": False})
    for m in ("Starts With", "Ends With", "Equal"):
        case("compare_" + m.split()[0].lower(), "StringCompare",
             {"string_a": "Straße", "string_b": "STRASSE" if m == "Equal" else "str", "mode": m,
              "case_sensitive": False})
    case("compare_sensitive", "StringCompare", {"string_a": "Straße", "string_b": "Str", "mode": "Starts With",
                                                "case_sensitive": True})
    mail = "Write to ann@example.org or BOB@test.io.\nsecond line: café 42 and 7\nlast"
    for pat, ci, ml, da in (("\\d+", True, False, False), ("^s\\w+", False, True, False),
                            ("line.*last", False, False, True), ("CAFÉ", True, False, False),
                            ("(unclosed", True, False, False), ("last\\Z", False, False, False)):
        case("regex_match_%d" % len(cases), "RegexMatch", {"string": mail, "regex_pattern": pat, "case_insensitive": ci,
                                                          "multiline": ml, "dotall": da})
    groups = "(\\w+)@(\\w+)(\\.io)?"
    for mode in ("First Match", "All Matches", "First Group", "All Groups"):
        for gi in (0, 1, 2):
            case("regex_extract_%s_%d" % (mode.replace(" ", "_").lower(), gi), "RegexExtract",
                 {"string": mail, "regex_pattern": groups, "mode": mode, "case_insensitive": True, "multiline": False,
                  "dotall": False, "group_index": gi})
    case("regex_extract_unmatched_group", "RegexExtract",
         {"string": mail, "regex_pattern": groups, "mode": "First Group", "case_insensitive": True, "multiline": False,
          "dotall": False, "group_index": 3})
    case("regex_extract_all_groups_none", "RegexExtract",
         {"string": mail, "regex_pattern": groups, "mode": "All Groups", "case_insensitive": True, "multiline": False,
          "dotall": False, "group_index": 3})
    case("regex_extract_no_groups", "RegexExtract",
         {"string": mail, "regex_pattern": "\\d", "mode": "All Matches", "case_insensitive": True,
          "multiline": False, "dotall": False, "group_index": 1})
    case("regex_extract_bad", "RegexExtract",
         {"string": mail, "regex_pattern": "a{2", "mode": "All Matches", "case_insensitive": True, "multiline": False,
          "dotall": False, "group_index": 1})
    case("regex_extract_bad2", "RegexExtract",
         {"string": mail, "regex_pattern": "(?P<x>a", "mode": "First Match", "case_insensitive": True,
          "multiline": False, "dotall": False, "group_index": 1})
    case("regex_extract_quantifier", "RegexExtract",
         {"string": "aaaa b", "regex_pattern": "a{,3}", "mode": "All Matches", "case_insensitive": False,
          "multiline": False, "dotall": False, "group_index": 0})
    case("regex_extract_unicode_escape", "RegexExtract",
         {"string": mail, "regex_pattern": "caf\\u00e9 (\\d+)", "mode": "First Group", "case_insensitive": False,
          "multiline": False, "dotall": False, "group_index": 1})
    for i, (pat, rep, cnt, ci) in enumerate((("x*", "-", 0, False), ("(\\w+)@(?P<dom>\\w+)", "\\2 at \\g<dom>/\\g<1>", 0, True),
                                          ("\\d", "<\\g<0>>", 2, True), ("(a)|b", "[\\1]", 0, False),
                                          ("o", "\\n\\t\\101\\060x\\.", 0, False), ("^", "> ", 0, False),
                                          ("é", "E", 0, True))):
        case("regex_replace_%d" % i, "RegexReplace", {"string": mail if i != 0 else "abxd", "regex_pattern": pat,
                                                      "replace": rep, "case_insensitive": ci, "multiline": i == 5,
                                                      "dotall": False, "count": cnt})
    case("regex_replace_defaults", "RegexReplace", {"string": "ABC abc", "regex_pattern": "b", "replace": "_"})
    case("regex_replace_bad_pattern", "RegexReplace", {"string": "abc", "regex_pattern": "(", "replace": "x"})
    case("regex_replace_bad_escape", "RegexReplace", {"string": "abc", "regex_pattern": "b", "replace": "\\q"})
    case("regex_replace_bad_group", "RegexReplace", {"string": "abc", "regex_pattern": "(b)", "replace": "\\2"})
    for i, v in enumerate(("text é", 42, 0.1, 1e-05, 1e16, 3.0, -2.5e-300, True, None, [1, "a\u00e9", {"b": 2.5, "c": None}],
                           {}, [])):
        case("preview_any_%d" % i, "PreviewAny", {"source": v})



# ---- ImageQuantize (nodes_post_processing.py): Pillow's median cut and palette mapping --------

def u8_picture(seed, b, h, w, levels=256):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, levels, (b, h, w, 3), generator=g).float() * (255 // (levels - 1)) / 255


def quantize_cases():
    small = u8_picture(90, 2, 12, 10)
    grad = torch.stack(torch.meshgrid(torch.arange(24.0), torch.arange(20.0), indexing="ij") +
                       (torch.full((24, 20), 7.0),), dim=-1).unsqueeze(0) * 10 / 255
    few = u8_picture(91, 1, 9, 13, levels=4)
    for dither in ("none", "floyd-steinberg", "bayer-2", "bayer-4", "bayer-8", "bayer-16"):
        for colors in (8, 256):
            case("quantize_%s_%d" % (dither, colors), "ImageQuantize",
                 {"image": T(small, u8=True), "colors": colors, "dither": dither}, u8=True)
        case("quantize_grad_%s" % dither, "ImageQuantize", {"image": T(grad, u8=True), "colors": 5, "dither": dither},
             u8=True)
    case("quantize_few_colors", "ImageQuantize", {"image": T(few, u8=True), "colors": 40, "dither": "none"}, u8=True)
    case("quantize_one", "ImageQuantize", {"image": T(few, u8=True), "colors": 1, "dither": "floyd-steinberg"},
         u8=True)
    # more than 65536 distinct colours: Pillow's table drops a bit of each channel (scale 1)
    big = torch.stack(torch.meshgrid(torch.arange(257.0), torch.arange(256.0), indexing="ij") +
                      (torch.full((257, 256), 0.0),), dim=-1) % 256
    big[..., 2] = (big[..., 0] * 7 + big[..., 1] * 13) % 256
    big[:, :, 0] = (torch.arange(257.0).unsqueeze(1) * 3 + torch.arange(256.0).unsqueeze(0)) % 256
    case("quantize_many_colors", "ImageQuantize", {"image": T(big.unsqueeze(0) / 255, u8=True), "colors": 64,
                                                   "dither": "none"}, u8=True)


# ---- RebatchImages / RebatchLatents (nodes_rebatch.py): INPUT_IS_LIST, a list out --------------

def rebatch_cases():
    imgs = [T(rand(70, 3, 8, 8, 3)), T(rand(71, 2, 8, 8, 3)), T(rand(72, 1, 8, 8, 3))]
    case("rebatch_images", "RebatchImages", {"images": imgs, "batch_size": [4]})
    case("rebatch_images_one", "RebatchImages", {"images": imgs[:1], "batch_size": [2]})
    case("rebatch_images_sizes", "RebatchImages", {"images": [T(rand(73, 2, 6, 6, 3)), T(rand(74, 1, 5, 6, 3))],
                                                   "batch_size": [3]})
    lat = [Latent(rand(75, 3, 4, 4, 5)), Latent(rand(76, 2, 4, 4, 5), noise_mask=rand(77, 1, 1, 32, 40)),
           Latent(rand(78, 1, 4, 4, 5), batch_index=[9])]
    case("rebatch_latents", "RebatchLatents", {"latents": lat, "batch_size": [2]})
    case("rebatch_latents_big", "RebatchLatents", {"latents": lat, "batch_size": [8]})
    case("rebatch_latents_sizes", "RebatchLatents",
         {"latents": [Latent(rand(79, 2, 4, 4, 4)), Latent(rand(80, 3, 4, 5, 5)), Latent(rand(81, 1, 4, 5, 5))],
          "batch_size": [4]})
    case("rebatch_latents_mask_sizes", "RebatchLatents",
         {"latents": [Latent(rand(82, 1, 4, 4, 4)), Latent(rand(83, 1, 4, 4, 4), noise_mask=rand(84, 1, 1, 4, 4))],
          "batch_size": [4]})


mask_cases()
image_cases()
latent_cases()
text_cases()
rebatch_cases()
quantize_cases()

manifest = {
    "generator": "tests/data/node_ops/gen_node_ops_ref.py",
    "command": "/usr/bin/python3 gen_node_ops_ref.py COMFY EINOPS CLIP KORNIA PILLOW (trees from "
               "../shared/tools/comfyref/extract_refs.sh, kornia v0.7.1, Pillow 11.0.0 built in place)",
    "comfyui_commit": open(os.path.join(here, "../../../../shared/tools/comfyref/COMFY_COMMIT")).read().strip(),
    "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
    "kornia": "kornia/kornia v0.7.1 (ComfyUI requires >= 0.7.1), for Morphology",
    "pillow": "Pillow %s (%s)" % (__import__("PIL").__version__, "python-pillow/Pillow tag, built in place"
                                  if pillow_root != "-" else "the system's"),
    "file": "node_ops_ref.safetensors",
    "cases": cases,
}
stio.save(tensors, os.path.join(out_dir, "node_ops_ref.safetensors"))
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
    f.write("\n")
print("%d cases, %d tensors" % (len(cases), len(tensors)))
