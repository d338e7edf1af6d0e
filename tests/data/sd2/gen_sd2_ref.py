#!/usr/bin/python3
"""Reference tensors for SD2.x from ComfyUI's own code (tests/models/test_golden_sd2.c).

Runs ComfyUI (commit in /work/shared/tools/comfyref/COMFY_COMMIT, imported through
shared/tools/comfyref, Debian python3-torch, CPU, float32) on the two tiny random SD2
checkpoints that `sdflow synth --preset sd2-tiny --seed 1` and `--preset sd2-tiny-eps --seed 1`
write, and saves what it computed into sd2_ref.safetensors beside this script:

  tokens      CLIPTextEncode's token ids of PROMPT (SD2Tokenizer, 'h', pad 0)        input
  cond        CLIPTextEncode: clip.encode_from_tokens(tokens, return_pooled=True)[0]  expected
  pooled      ... [1] (the projected pooled output)                                     expected
  x           a latent in the sampler's space, torch.manual_seed(0) randn [1,4,8,8]     input
  sigma       the sigmas of the two model evaluations below                             input
  den_v       model.model.apply_model(x, sigma_i, c_crossattn=cond) on sd2-tiny
              (detected V_PREDICTION), stacked over the sigmas                          expected
  den_eps     the same on sd2-tiny-eps (detected EPS)                                   expected
  ksampler_v  KSampler (settings KSAMPLER) on sd2-tiny: CLIPTextEncode(PROMPT / NEGATIVE),
              empty latent, nodes.common_ksampler's noise and comfy.sample.sample        expected

usage: gen_sd2_ref.py REFDIR SD2_TINY SD2_TINY_EPS
  REFDIR holds ComfyUI/, einops/, CLIP/ as extract_refs.sh writes them.
The manifest (manifest.json) records the settings and the checkpoints' sha256; tests check it.
"""
import hashlib
import json
import os
import sys

COMFYREF = os.environ.get("COMFYREF", "/work/shared/tools/comfyref")
sys.path.insert(0, COMFYREF)

PROMPT = "a photograph of an astronaut riding a horse"
NEGATIVE = "blurry, low quality"
KSAMPLER = {"seed": 42, "steps": 4, "cfg": 5.0, "sampler_name": "euler", "scheduler": "normal",
            "denoise": 1.0, "width": 64, "height": 64}
SIGMAS = [14.614641189575195, 1.0, 0.1]
CLIP_H = {"hidden_size": 128, "intermediate_size": 512, "num_attention_heads": 2,
          "num_hidden_layers": 4, "projection_dim": 128}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def _regex_shim():
    """OpenAI CLIP's simple_tokenizer imports `regex` for \\p{L} / \\p{N}; without Debian's
    python3-regex, `re` with those classes spelled for re serves (exact for ASCII prompts)."""
    try:
        import regex  # noqa: F401
        return
    except ImportError:
        pass
    import re
    import types
    m = types.ModuleType("regex")
    m.IGNORECASE = re.IGNORECASE
    m.compile = lambda pat, flags=0: re.compile(
        pat.replace(r"[^\s\p{L}\p{N}]+", r"(?:[^\s\w]|_)+")
           .replace(r"[\p{L}]+", r"[^\W\d_]+").replace(r"[\p{N}]", r"\d"), flags)
    m.sub = re.sub
    m.findall = re.findall
    sys.modules["regex"] = m


def _pil_shim():
    """ComfyUI imports PIL in many modules (images are never touched here): without Debian's
    python3-pil, a stand-in whose every name is an inert class (usable in `except`)."""
    try:
        import PIL  # noqa: F401
        return
    except ImportError:
        pass
    import types

    class _Meta(type):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Meta(name, (Exception,), {})

    def module(name):
        m = types.ModuleType(name)
        m.__getattr__ = lambda attr: (_ for _ in ()).throw(AttributeError(attr)) \
            if attr.startswith("__") else _Meta(attr, (Exception,), {})
        return m
    pil = module("PIL")
    sys.modules["PIL"] = pil
    for sub in ("Image", "ImageDraw", "ImageFont", "ImageOps", "ImageSequence", "PngImagePlugin",
                "ImageFile", "ImageFilter", "ImageEnhance"):
        m = module("PIL." + sub)
        setattr(pil, sub, m)
        sys.modules["PIL." + sub] = m


def _scipy_shim():
    """ComfyUI imports scipy.integrate for the LMS sampler and scipy.stats for the beta
    scheduler only (euler / normal here): without Debian's python3-scipy, stand-ins that fail
    if they are ever called."""
    try:
        import scipy  # noqa: F401
        return
    except ImportError:
        pass
    import types
    sp, integ = types.ModuleType("scipy"), types.ModuleType("scipy.integrate")

    def quad(*a, **k):
        raise RuntimeError("scipy.integrate.quad is not available (LMS needs python3-scipy)")
    integ.quad = quad
    stats = types.ModuleType("scipy.stats")

    class _Beta:
        def __getattr__(self, name):
            raise RuntimeError("scipy.stats.beta is not available (the beta scheduler needs python3-scipy)")
    stats.beta = _Beta()
    sp.__path__ = []
    sp.integrate, sp.stats = integ, stats
    sys.modules.update({"scipy": sp, "scipy.integrate": integ, "scipy.stats": stats})


def main():
    refdir, v_path, eps_path = sys.argv[1:4]
    assert all(ord(c) < 128 for c in PROMPT)
    _regex_shim()
    _pil_shim()
    _scipy_shim()
    import comfy_env
    comfy_env.setup(os.path.join(refdir, "ComfyUI"), os.path.join(refdir, "einops"),
                    os.path.join(refdir, "CLIP"))
    import torch
    import comfy.sd
    import comfy.supported_models as sm
    import comfy.model_base
    import stio

    class TinySD20(sm.SD20):  # ComfyUI's SD20 with the tiny widths; everything else its own
        unet_config = {"context_dim": 128, "model_channels": 64, "use_linear_in_transformer": True,
                       "adm_in_channels": None, "use_temporal_attention": False}
    sm.models.insert(0, TinySD20)

    out, types = {}, {}
    x = torch.randn([1, 4, 8, 8], generator=torch.Generator().manual_seed(0))
    sig = torch.tensor(SIGMAS, dtype=torch.float32)
    for key, path in (("v", v_path), ("eps", eps_path)):
        model, clip, _vae, _ = comfy.sd.load_checkpoint_guess_config(
            path, output_vae=False, output_clip=True, te_model_options={"clip_h_model_config": CLIP_H})
        assert isinstance(model.model.model_config, TinySD20), type(model.model.model_config)
        types[key] = model.model.model_type.name
        if key == "v":
            tokens = clip.tokenize(PROMPT)
            cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
            out["tokens"] = torch.tensor([[t[0] for t in tokens["h"][0]]], dtype=torch.int64)
            out["cond"] = cond.float().contiguous()
            out["pooled"] = pooled.float().contiguous()
        if key == "v":
            # KSampler on CLIPTextEncode / EmptyLatentImage, as nodes.common_ksampler does it
            import comfy.sample
            k = KSAMPLER
            pos = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
            neg = clip.encode_from_tokens_scheduled(clip.tokenize(NEGATIVE))
            latent = torch.zeros([1, 4, k["height"] // 8, k["width"] // 8])
            latent = comfy.sample.fix_empty_latent_channels(model, latent)
            noise = comfy.sample.prepare_noise(latent, k["seed"], None)
            with torch.no_grad():
                samples = comfy.sample.sample(model, noise, k["steps"], k["cfg"], k["sampler_name"],
                                              k["scheduler"], pos, neg, latent, denoise=k["denoise"],
                                              disable_noise=False, start_step=None, last_step=None,
                                              force_full_denoise=False, noise_mask=None, callback=None,
                                              disable_pbar=True, seed=k["seed"])
            out["ksampler_v"] = samples.float().contiguous()
        dens = []
        with torch.no_grad():
            for s in sig:
                dens.append(model.model.apply_model(x, s.reshape(1), c_crossattn=out["cond"]).float())
        out["den_" + key] = torch.cat(dens, 0).contiguous()
    out["x"] = x.contiguous()
    out["sigma"] = sig.contiguous()
    here = os.path.dirname(os.path.abspath(__file__))
    stio.save(out, os.path.join(here, "sd2_ref.safetensors"))
    manifest = {
        "generator": "tests/data/sd2/gen_sd2_ref.py",
        "comfyui_commit": open(os.path.join(COMFYREF, "COMFY_COMMIT")).read().strip(),
        "torch": torch.__version__,
        "device": "cpu", "dtype": "float32",
        "attention": "comfy.ldm.modules.attention.attention_basic (comfyref shims)",
        "checkpoints": {
            "sd2-tiny": {"made_by": "sdflow synth --preset sd2-tiny --seed 1", "sha256": sha256(v_path),
                         "comfyui_model_type": types["v"]},
            "sd2-tiny-eps": {"made_by": "sdflow synth --preset sd2-tiny-eps --seed 1",
                             "sha256": sha256(eps_path), "comfyui_model_type": types["eps"]},
        },
        "model_config": "subclass of comfy.supported_models.SD20 with unet_config context_dim 128, "
                        "model_channels 64 (model_type, CLIP target, key conversion are SD20's)",
        "te_model_options": {"clip_h_model_config": CLIP_H},
        "prompt": PROMPT,
        "negative": NEGATIVE,
        "ksampler": KSAMPLER,
        "tensors": {
            "tokens": "clip.tokenize(prompt)['h'][0] ids (SD2Tokenizer with the CLIP BPE vocabulary)",
            "cond": "clip.encode_from_tokens(tokens, return_pooled=True)[0] on sd2-tiny",
            "pooled": "clip.encode_from_tokens(tokens, return_pooled=True)[1] on sd2-tiny",
            "x": "torch.randn([1,4,8,8], generator=manual_seed(0)), sampler-space latent",
            "sigma": "sigmas of the apply_model calls",
            "den_v": "model.model.apply_model(x, sigma[i], c_crossattn=cond) on sd2-tiny, over i",
            "den_eps": "the same on sd2-tiny-eps",
            "ksampler_v": "LATENT samples of nodes.common_ksampler's steps (comfy.sample.prepare_noise, "
                          "comfy.sample.sample) on sd2-tiny with CLIPTextEncode(prompt) / "
                          "CLIPTextEncode(negative) and an empty latent of width x height, settings in "
                          "'ksampler'",
        },
        "tolerance": {"cond": {"atol": 1e-4, "rtol": 1e-4}, "pooled": {"atol": 1e-4, "rtol": 1e-4},
                      "den": {"atol": 1e-4, "rtol": 1e-4}, "ksampler": {"atol": 1e-4, "rtol": 1e-4}},
    }
    with open(os.path.join(here, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(types)


if __name__ == "__main__":
    main()
