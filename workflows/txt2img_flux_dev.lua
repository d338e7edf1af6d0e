-- txt2img_flux_dev.lua: the Lua twin of txt2img_flux_dev.json
-- (FLUX.1-dev from the split files, as on ComfyUI's Flux examples page:
-- flux1-dev.safetensors in models/diffusion_models/ (or unet/),
-- t5xxl_fp16.safetensors and clip_l.safetensors in models/text_encoders/
-- (or clip/), Flux's ae.safetensors in models/vae/; the T5 tokenizer as
-- t5_tokenizer/tokenizer.json in --tokenizer-dir, docs/models.md).
-- Run: sdflow run workflows/txt2img_flux_dev.lua
-- Node ids and titles match the JSON, so --set 3.seed=1 works on both.

local model = UNETLoader{_id = "12", _title = "Load Diffusion Model", unet_name = "flux1-dev.safetensors",
                         weight_dtype = "default"}
local clip = DualCLIPLoader{_id = "11", _title = "DualCLIPLoader", clip_name1 = "t5xxl_fp16.safetensors",
                            clip_name2 = "clip_l.safetensors", type = "flux", device = "default"}
local vae = VAELoader{_id = "10", _title = "Load VAE", vae_name = "ae.safetensors"}

local prompt = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Positive Prompt)", clip = clip,
                              text = "a red fox in a snowy forest at dawn, soft light, detailed fur"}
-- dev is guidance-distilled: the guidance goes into the model as an input,
-- and KSampler runs at cfg 1, so the negative is never evaluated
local positive = FluxGuidance{_id = "35", _title = "FluxGuidance", conditioning = prompt, guidance = 3.5}
local negative = CLIPTextEncode{_id = "33", _title = "CLIP Text Encode (Negative Prompt)", clip = clip, text = ""}

local latent = EmptySD3LatentImage{_id = "27", _title = "EmptySD3LatentImage", width = 1024, height = 1024,
                                   batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = model, positive = positive, negative = negative, latent_image = latent,
    seed = 972054013131368, steps = 20, cfg = 1,
    sampler_name = "euler", scheduler = "simple", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = vae}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "flux_dev"}
