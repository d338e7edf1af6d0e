#!/usr/bin/python3
"""unCLIP (unCLIPCheckpointLoader, unCLIPConditioning, SD21UNCLIP's noise-augmented ADM) made with
ComfyUI's own code on a tiny random-weight unCLIP checkpoint in the real key layout.

usage: /usr/bin/python3 gen_unclip_ref.py COMFY EINOPS CLIP SD2_TINY [OUT_DIR]
  COMFY EINOPS CLIP: the trees ../shared/tools/comfyref/extract_refs.sh extracts.
  SD2_TINY: the checkpoint `sdflow synth --preset sd2-tiny --seed 1` writes (the one
  tests/data/sd2 was made from; its sha256 goes into the manifest).
Writes unclip_ref.safetensors and manifest.json beside this script (or in OUT_DIR).

The checkpoint: SD2_TINY plus what an SD2.1 unCLIP-H file has beyond an SD2 one, stored in the
reference under "ckpt/" (the test adds them to the synthesized SD2_TINY the same way):
  model.diffusion_model.label_emb.0.{0,2}.{weight,bias}  the UNet's ADM input (adm_in_channels =
      2 * PROJ: the noise-augmented image embedding and the noise level's timestep embedding)
  embedder.model.visual.*  an OpenCLIP ViT-H/14 vision tower (32 layers, the real geometry: 224
      pixels, 14-pixel patches; what comfy.clip_vision.load_clipvision_from_sd picks the "h" config
      by), of width WIDTH, MLP MLP, projection PROJ, stored F16.
ComfyUI's model detection accepts it through a subclass of its own supported_models.SD21UnclipH whose
unet_config has the tiny widths and whose noise_aug_config has timestep_dim PROJ (everything else:
SD21UnclipH's, so comfy.model_base.SD21UNCLIP with CLIPEmbeddingNoiseAugmentation, the
squaredcos_cap_v2 schedule, clip_vision_prefix "embedder.model.visual."); the vision tower loads
through ComfyUI's own load_clipvision_from_sd with the tiny widths put into the config it picks
(as tests/data/clip_vision does).

Cases:
  encode   nodes.CLIPVisionEncode on the unCLIPCheckpointLoader's CLIP_VISION (image_embeds).
  adm      SD21UNCLIP.encode_adm(unclip_conditioning=..., seed=SEED) for lists of unCLIPConditioning
           entries built from stored image embeddings (one image, or a batch of two: each image
           counts as an entry), and the first values torch.randn draws from the default generator
           afterwards (encode_adm reseeds it with torch.manual_seed(seed - 10)).
  forward  the UNet (model.model.diffusion_model) on x, a timestep, a context and one adm case's y.
  ksampler comfy.sample.sample as nodes.common_ksampler calls it (prepare_noise(seed), seed passed on)
           on unCLIPConditioning(CLIPVisionEncode(image)) over a stored text conditioning.
Runs on Debian's python3-torch, CPU, float32.
"""
import hashlib
import json
import os
import sys
import tempfile

comfy_root, einops_root, clip_root, sd2_tiny = sys.argv[1:5]
out_dir = sys.argv[5] if len(sys.argv) > 5 else os.path.dirname(os.path.abspath(__file__))
here = os.path.dirname(os.path.abspath(__file__))
COMFYREF = os.environ.get("COMFYREF", "/work/shared/tools/comfyref")
sys.path.insert(0, COMFYREF)
import comfy_env  # noqa: E402

comfy_env.setup(comfy_root, einops_root, clip_root)
import torch  # noqa: E402
import stio  # noqa: E402
import comfy.clip_vision  # noqa: E402
import comfy.model_base  # noqa: E402
import comfy.sample  # noqa: E402
import comfy.sd  # noqa: E402
import comfy.supported_models as sm  # noqa: E402
import nodes  # noqa: E402

WIDTH, MLP, PROJ = 32, 64, 24
LAYERS = 32  # ViT-H/14: ComfyUI picks clip_vision_config_h.json when layer 30 exists
PATCH, SIZE = 14, 224
CLIP_H = {"hidden_size": 128, "intermediate_size": 512, "num_attention_heads": 2,
          "num_hidden_layers": 4, "projection_dim": 128}  # tests/data/sd2's tiny text encoder
CONTEXT, MODEL_CH = 128, 64                                # sd2-tiny's UNet
TIME_EMBED = 4 * MODEL_CH
ADM = 2 * PROJ


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


# ---- tiny configs under ComfyUI's own detection -------------------------------------------------
picked = []
_RealCV = comfy.clip_vision.ClipVisionModel
tmpdir = tempfile.mkdtemp()


class TinyClipVisionModel(_RealCV):
    def __init__(self, json_config):
        picked.append(os.path.basename(json_config))
        cfg = json.load(open(json_config))
        cfg.update(hidden_size=WIDTH, intermediate_size=MLP, projection_dim=PROJ)
        path = os.path.join(tmpdir, "tiny_" + os.path.basename(json_config))
        json.dump(cfg, open(path, "w"))
        super().__init__(path)


comfy.clip_vision.ClipVisionModel = TinyClipVisionModel


class TinySD21UnclipH(sm.SD21UnclipH):
    unet_config = {"context_dim": CONTEXT, "model_channels": MODEL_CH, "use_linear_in_transformer": True,
                   "adm_in_channels": ADM, "use_temporal_attention": False}
    noise_aug_config = {"noise_schedule_config": {"timesteps": 1000, "beta_schedule": "squaredcos_cap_v2"},
                        "timestep_dim": PROJ}


sm.models.insert(0, TinySD21UnclipH)

# ---- the extra tensors ----------------------------------------------------------------------------
g = torch.Generator().manual_seed(500)


def rn(*shape, std=1.0, dtype=torch.float32):
    return (torch.randn(*shape, generator=g) * std).to(dtype)


extra = {}
U = "model.diffusion_model."
extra[U + "label_emb.0.0.weight"] = rn(TIME_EMBED, ADM, std=ADM ** -0.5)
extra[U + "label_emb.0.0.bias"] = rn(TIME_EMBED, std=0.05)
extra[U + "label_emb.0.2.weight"] = rn(TIME_EMBED, TIME_EMBED, std=TIME_EMBED ** -0.5)
extra[U + "label_emb.0.2.bias"] = rn(TIME_EMBED, std=0.05)
V = "embedder.model.visual."
F16 = torch.float16
npos = (SIZE // PATCH) ** 2 + 1
extra[V + "class_embedding"] = rn(WIDTH, std=0.5, dtype=F16)
extra[V + "conv1.weight"] = rn(WIDTH, 3, PATCH, PATCH, std=(3 * PATCH * PATCH) ** -0.5, dtype=F16)
extra[V + "positional_embedding"] = rn(npos, WIDTH, std=0.2, dtype=F16)
for ln in ("ln_pre", "ln_post"):
    extra[V + ln + ".weight"] = (1 + rn(WIDTH, std=0.1)).to(F16)
    extra[V + ln + ".bias"] = rn(WIDTH, std=0.1, dtype=F16)
extra[V + "proj"] = rn(WIDTH, PROJ, std=WIDTH ** -0.5, dtype=F16)  # x @ proj
for i in range(LAYERS):
    p = V + "transformer.resblocks.%d." % i
    for ln in ("ln_1", "ln_2"):
        extra[p + ln + ".weight"] = (1 + rn(WIDTH, std=0.1)).to(F16)
        extra[p + ln + ".bias"] = rn(WIDTH, std=0.1, dtype=F16)
    extra[p + "attn.in_proj_weight"] = rn(3 * WIDTH, WIDTH, std=WIDTH ** -0.5, dtype=F16)
    extra[p + "attn.in_proj_bias"] = rn(3 * WIDTH, std=0.05, dtype=F16)
    extra[p + "attn.out_proj.weight"] = rn(WIDTH, WIDTH, std=WIDTH ** -0.5, dtype=F16)
    extra[p + "attn.out_proj.bias"] = rn(WIDTH, std=0.05, dtype=F16)
    extra[p + "mlp.c_fc.weight"] = rn(MLP, WIDTH, std=WIDTH ** -0.5, dtype=F16)
    extra[p + "mlp.c_fc.bias"] = rn(MLP, std=0.05, dtype=F16)
    extra[p + "mlp.c_proj.weight"] = rn(WIDTH, MLP, std=MLP ** -0.5 * 0.5, dtype=F16)
    extra[p + "mlp.c_proj.bias"] = rn(WIDTH, std=0.05, dtype=F16)

base = stio.load(sd2_tiny)
for k in extra:
    assert k not in base, k
ckpt = dict(base)
ckpt.update(extra)
ckpt_path = os.path.join(tmpdir, "tiny-sd21-unclip-h.safetensors")
stio.save(ckpt, ckpt_path)

# ---- unCLIPCheckpointLoader ----------------------------------------------------------------------
del picked[:]
# (output_vae False: the tiny VAE's widths are not ComfyUI's default VAE config, and no case decodes)
model, clip, vae, clip_vision = comfy.sd.load_checkpoint_guess_config(
    ckpt_path, output_vae=False, output_clip=True, output_clipvision=True,
    te_model_options={"clip_h_model_config": CLIP_H})
assert isinstance(model.model.model_config, TinySD21UnclipH), type(model.model.model_config)
assert isinstance(model.model, comfy.model_base.SD21UNCLIP), type(model.model)
assert clip_vision is not None and picked == ["clip_vision_config_h.json"], picked
model_type = model.model.model_type.name
aug = model.model.noise_augmentor
assert aug.time_embed.dim == PROJ and aug.max_noise_level == 1000

ref = {"ckpt/" + k: v.contiguous() for k, v in extra.items()}


def image_u8(seed, n, h, w, c):
    """A smooth picture plus noise, as 8-bit values (tests/data/clip_vision's)."""
    gi = torch.Generator().manual_seed(seed)
    yy = torch.linspace(0, 1, h).view(1, h, 1, 1)
    xx = torch.linspace(0, 1, w).view(1, 1, w, 1)
    ph = torch.rand(n, 1, 1, c, generator=gi) * 6.28
    v = 0.5 + 0.3 * torch.sin(6 * xx + 4 * yy + ph) + 0.2 * torch.rand(n, h, w, c, generator=gi)
    return torch.clamp(v * 255, 0, 255).round().to(torch.uint8)


# The image has the tower's size, so that clip_preprocess's resize is the identity and its 8-bit
# rounding exact (tests/data/clip_vision checks the resize itself).
img = image_u8(7, 2, SIZE, SIZE, 3)
ref["image"] = img
cvo = nodes.CLIPVisionEncode().encode(clip_vision, img.float() / 255.0, "center")[0]
ref["encode/image_embeds"] = cvo["image_embeds"].float().contiguous()
manifest_cases = [{
    "id": "encode", "component": "encode", "image": "image", "crop": "center",
    "image_embeds": "encode/image_embeds", "tolerance": {"atol": 2e-4, "rtol": 1e-3},
    "reference": "nodes.CLIPVisionEncode().encode(clip_vision of load_checkpoint_guess_config("
                 "output_clipvision=True), image u8/255, 'center')",
}]

# ---- the ADM ---------------------------------------------------------------------------------------
# Embeddings given to the ADM cases (ComfyUI's own CLIPVisionEncode outputs, so each case checks the
# ADM alone): "one" = image 0, "two" = both images (a batch of 2: two entries of unclip_adm).
embeds = {"one": cvo["image_embeds"][0:1].float().contiguous(),
          "two": cvo["image_embeds"].float().contiguous()}
for k, v in embeds.items():
    ref["embeds/" + k] = v


class CVO(comfy.clip_vision.Output):
    pass


def cv_output(name):
    o = CVO()
    o["image_embeds"] = embeds[name]
    return o


RNG_AFTER = 20  # values of torch.randn(RNG_AFTER) drawn from the default generator after encode_adm
ADM_CASES = [  # id, seed, [(embeds, strength, noise_augmentation), ...] applied in order
    ("one_plain_seed0", 0, [("one", 1.0, 0.0)]),
    ("one_aug_seed42", 42, [("one", 0.7, 0.3)]),
    ("one_negative_strength", 7, [("one", -0.5, 0.25)]),
    ("one_full_aug_maxseed", 0xffffffffffffffff, [("one", 1.3, 1.0)]),
    ("one_half_aug", 5, [("one", 1.0, 0.5)]),
    ("two_nodes_merge", 123, [("one", 1.0, 0.1), ("one", 0.5, 0.0)]),
    ("batch_of_two", 9, [("two", 1.2, 0.5)]),
    ("three_entries", 1000, [("two", 0.8, 0.2), ("one", 0.4, 0.75)]),
]
TOL_ADM = {"atol": 1e-5, "rtol": 1e-5}
for cid, seed, entries in ADM_CASES:
    cond = [[torch.zeros(1, 1, CONTEXT), {}]]
    for name, strength, aug_s in entries:
        cond = nodes.unCLIPConditioning().apply_adm(cond, cv_output(name), strength, aug_s)[0]
    uc = cond[0][1]["unclip_conditioning"]
    assert len(uc) == len(entries)
    with torch.no_grad():
        adm = model.model.encode_adm(unclip_conditioning=uc, device="cpu", seed=seed)
        after = torch.randn(RNG_AFTER)
    ref["adm/%s/y" % cid] = adm.float().contiguous()
    ref["adm/%s/rng_after" % cid] = after.contiguous()
    manifest_cases.append({
        "id": cid, "component": "adm", "seed": seed, "seed_text": str(seed),
        "unclip": [{"embeds": "embeds/" + n, "strength": s, "noise_augmentation": a} for n, s, a in entries],
        "y": "adm/%s/y" % cid, "rng_after": "adm/%s/rng_after" % cid, "rng_after_count": RNG_AFTER,
        "tolerance": TOL_ADM,
        "reference": "nodes.unCLIPConditioning().apply_adm per entry (in order) on one conditioning entry, then "
                     "model.model.encode_adm(unclip_conditioning=..., device='cpu', seed=seed) "
                     "(SD21UNCLIP: unclip_adm with unclip_noise_augment_merge 0.05 and seed - 10); "
                     "rng_after: torch.randn(rng_after_count) right after it",
    })

# SDXL's use of unclip_conditioning ("revision"): model_base.sdxl_pooled with the augmentor SDXL and
# SDXLRefiner build (timestep_dim 1280), on stored width-1280 embeddings (ViT-bigG's width; no tiny
# SDXL can take them: its pooled width is not 1280).
from comfy.ldm.modules.encoders.noise_aug_modules import CLIPEmbeddingNoiseAugmentation  # noqa: E402
sdxl_aug = CLIPEmbeddingNoiseAugmentation(**{"noise_schedule_config": {"timesteps": 1000,
                                                                         "beta_schedule": "squaredcos_cap_v2"},
                                             "timestep_dim": 1280})
gx = torch.Generator().manual_seed(700)
embeds["g_two"] = torch.randn(2, 1280, generator=gx) * 0.5
embeds["g_one"] = embeds["g_two"][0:1].contiguous()
ref["embeds/g_two"], ref["embeds/g_one"] = embeds["g_two"], embeds["g_one"]
SDXL_CASES = [
    ("sdxl_one", 77, [("g_one", 1.0, 0.2)]),
    ("sdxl_merge", 4, [("g_two", 0.9, 0.0), ("g_one", 0.3, 0.6)]),
]
for cid, seed, entries in SDXL_CASES:
    cond = [[torch.zeros(1, 1, CONTEXT), {}]]
    for name, strength, aug_s in entries:
        cond = nodes.unCLIPConditioning().apply_adm(cond, cv_output(name), strength, aug_s)[0]
    with torch.no_grad():
        pooled = comfy.model_base.sdxl_pooled({"unclip_conditioning": cond[0][1]["unclip_conditioning"],
                                               "device": "cpu", "seed": seed}, sdxl_aug)
        after = torch.randn(RNG_AFTER)
    ref["sdxl/%s/pooled" % cid] = pooled.float().contiguous()
    ref["sdxl/%s/rng_after" % cid] = after.contiguous()
    manifest_cases.append({
        "id": cid, "component": "sdxl_pooled", "seed": seed, "seed_text": str(seed),
        "unclip": [{"embeds": "embeds/" + n, "strength": s, "noise_augmentation": a} for n, s, a in entries],
        "pooled": "sdxl/%s/pooled" % cid, "rng_after": "sdxl/%s/rng_after" % cid, "rng_after_count": RNG_AFTER,
        "tolerance": TOL_ADM,
        "reference": "comfy.model_base.sdxl_pooled({'unclip_conditioning': ..., 'device': 'cpu', 'seed': seed}, "
                     "CLIPEmbeddingNoiseAugmentation(squaredcos_cap_v2, timestep_dim 1280)) as SDXL.encode_adm "
                     "calls it; rng_after: torch.randn(rng_after_count) right after it",
    })

# A conditioning entry without unclip_conditioning (the negative prompt): zeros [1, ADM].
with torch.no_grad():
    z = model.model.encode_adm(device="cpu", seed=3)
assert z.shape == (1, ADM) and float(z.abs().max()) == 0.0

# ---- the UNet forward with y ---------------------------------------------------------------------
gf = torch.Generator().manual_seed(600)
ref["forward/x"] = torch.randn(1, 4, 8, 8, generator=gf)
ref["forward/context"] = torch.randn(1, 77, CONTEXT, generator=gf)
FWD_T = 617.25
with torch.no_grad():
    out = model.model.diffusion_model(ref["forward/x"], torch.tensor([FWD_T]), context=ref["forward/context"],
                                      y=ref["adm/one_aug_seed42/y"])
ref["forward/out"] = out.float().contiguous()
manifest_cases.append({
    "id": "forward", "component": "forward", "x": "forward/x", "timestep": FWD_T, "context": "forward/context",
    "y": "adm/one_aug_seed42/y", "out": "forward/out", "tolerance": {"atol": 1e-4, "rtol": 1e-4},
    "reference": "model.model.diffusion_model(x, tensor([timestep]), context=context, y=y)",
})

# ---- KSampler end to end ---------------------------------------------------------------------------
ref["text/positive"] = torch.randn(1, 77, CONTEXT, generator=gf)
ref["text/negative"] = torch.randn(1, 77, CONTEXT, generator=gf)
KS_CASES = [  # id, sampler settings, positive's unCLIPConditioning entries (image index or "both")
    ("ks_one", {"seed": 42, "steps": 3, "cfg": 4.0, "sampler_name": "euler", "scheduler": "normal",
                "denoise": 1.0, "width": 64, "height": 64}, [("first", 1.0, 0.1)]),
    ("ks_two_ancestral", {"seed": 3, "steps": 3, "cfg": 6.0, "sampler_name": "euler_ancestral",
                          "scheduler": "karras", "denoise": 1.0, "width": 64, "height": 64},
     [("both", 0.8, 0.0), ("first", 0.6, 0.4)]),
]
for cid, k, entries in KS_CASES:
    pos = [[ref["text/positive"], {}]]
    for which, strength, aug_s in entries:
        im = img[0:1] if which == "first" else img
        o = nodes.CLIPVisionEncode().encode(clip_vision, im.float() / 255.0, "center")[0]
        pos = nodes.unCLIPConditioning().apply_adm(pos, o, strength, aug_s)[0]
    neg = [[ref["text/negative"], {}]]
    latent = torch.zeros([1, 4, k["height"] // 8, k["width"] // 8])
    latent = comfy.sample.fix_empty_latent_channels(model, latent)
    noise = comfy.sample.prepare_noise(latent, k["seed"], None)
    with torch.no_grad():
        samples = comfy.sample.sample(model, noise, k["steps"], k["cfg"], k["sampler_name"], k["scheduler"],
                                      pos, neg, latent, denoise=k["denoise"], disable_noise=False,
                                      start_step=None, last_step=None, force_full_denoise=False,
                                      noise_mask=None, callback=None, disable_pbar=True, seed=k["seed"])
    ref["ksampler/%s/samples" % cid] = samples.float().contiguous()
    manifest_cases.append({
        "id": cid, "component": "ksampler", "ksampler": k, "image": "image", "crop": "center",
        "positive": "text/positive", "negative": "text/negative",
        "unclip": [{"image": w, "strength": s, "noise_augmentation": a} for w, s, a in entries],
        "samples": "ksampler/%s/samples" % cid, "tolerance": {"atol": 1e-4, "rtol": 1e-4},
        "reference": "positive = [[text/positive, {}]] through nodes.unCLIPConditioning().apply_adm(pos, "
                     "CLIPVisionEncode(clip_vision, image[0:1] ('first') or image ('both'), 'center'), strength, "
                     "noise_augmentation) per entry; negative [[text/negative, {}]]; comfy.sample.sample as "
                     "nodes.common_ksampler calls it on an empty latent of width x height",
    })

stio.save(ref, os.path.join(out_dir, "unclip_ref.safetensors"))
manifest = {
    "generator": "tests/data/unclip/gen_unclip_ref.py",
    "comfyui_commit": open(os.path.join(COMFYREF, "COMFY_COMMIT")).read().strip(),
    "torch": "Debian python3-torch %s, CPU, float32" % torch.__version__,
    "file": "unclip_ref.safetensors",
    "checkpoint": {
        "base": "sd2-tiny", "made_by": "sdflow synth --preset sd2-tiny --seed 1", "sha256": sha256(sd2_tiny),
        "added_prefix": "ckpt/",
        "added": "every reference tensor named ckpt/<key> is added to the base as <key>",
        "comfyui_model_config": "subclass of comfy.supported_models.SD21UnclipH with unet_config context_dim %d, "
                                "model_channels %d, adm_in_channels %d and noise_aug_config timestep_dim %d"
                                % (CONTEXT, MODEL_CH, ADM, PROJ),
        "comfyui_model_type": model_type,
        "adm_in_channels": ADM, "noise_aug_timestep_dim": PROJ,
        "vision": {"prefix": "embedder.model.visual.", "comfyui_config": "clip_vision_config_h.json",
                   "layers": LAYERS, "width": WIDTH, "mlp": MLP, "projection_dim": PROJ, "dtype": "float16"},
        "te_model_options": {"clip_h_model_config": CLIP_H},
    },
    "cases": manifest_cases,
}
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
    f.write("\n")
print("wrote", out_dir, model_type)
