-- txt2img_flux_dev_fp8.lua: the Lua twin of txt2img_flux_dev_fp8.json
-- (ComfyUI's Flux checkpoint example: Comfy-Org's single-file
-- flux1-dev-fp8.safetensors in models/checkpoints/ holds the fp8 model, the
-- CLIP-L + T5-XXL text encoders and the VAE; the T5 tokenizer as
-- t5_tokenizer/tokenizer.json in --tokenizer-dir, docs/models.md).
-- Run: sdflow run workflows/txt2img_flux_dev_fp8.lua
-- Node ids and titles match the JSON, so --set 3.seed=1 works on both.

local ckpt = CheckpointLoaderSimple{_id = "30", _title = "Load Checkpoint", ckpt_name = "flux1-dev-fp8.safetensors"}

local prompt = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Positive Prompt)", clip = ckpt.CLIP,
                              text = "a red fox in a snowy forest at dawn, soft light, detailed fur"}
-- the distilled guidance of dev; KSampler's cfg stays 1 (never evaluates the negative)
local positive = FluxGuidance{_id = "35", _title = "FluxGuidance", conditioning = prompt, guidance = 3.5}
local negative = CLIPTextEncode{_id = "33", _title = "CLIP Text Encode (Negative Prompt)", clip = ckpt.CLIP,
                                text = ""}

local latent = EmptySD3LatentImage{_id = "27", _title = "EmptySD3LatentImage", width = 1024, height = 1024,
                                   batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = positive, negative = negative, latent_image = latent,
    seed = 972054013131368, steps = 20, cfg = 1,
    sampler_name = "euler", scheduler = "simple", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "flux_dev_fp8"}
