-- txt2img_zimage_turbo_gguf.lua: the Lua twin of txt2img_zimage_turbo_gguf.json
-- (Z-Image-Turbo from GGUF files through ComfyUI-GGUF's loader nodes:
-- z_image_turbo-Q8_0.gguf in models/diffusion_models/ (or unet/), the Qwen3-4B
-- as Qwen3-4B-Q8_0.gguf in models/text_encoders/ (or clip/), Flux's
-- ae.safetensors in models/vae/; the Qwen2 tokenizer as qwen25_tokenizer/ in
-- --tokenizer-dir or from --comfyui-dir, docs/models.md). The graph and
-- settings of txt2img_zimage_turbo (ModelSamplingAuraFlow shift 3,
-- res_multistep / simple, 8 steps, cfg 1).
-- Run: sdflow run workflows/txt2img_zimage_turbo_gguf.lua
-- Node ids and titles match the JSON, so --set 3.seed=1 works on both.

local unet = UnetLoaderGGUF{_id = "16", _title = "Unet Loader (GGUF)", unet_name = "z_image_turbo-Q8_0.gguf"}
local clip = CLIPLoaderGGUF{_id = "18", _title = "CLIPLoader (GGUF)", clip_name = "Qwen3-4B-Q8_0.gguf", type = "lumina2"}
local vae = VAELoader{_id = "17", _title = "Load VAE", vae_name = "ae.safetensors"}
local model = ModelSamplingAuraFlow{_id = "11", _title = "ModelSamplingAuraFlow", model = unet, shift = 3}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Positive Prompt)", clip = clip,
                                text = "a red fox in a snowy forest at dawn, soft light, detailed fur"}
local negative = ConditioningZeroOut{_id = "7", _title = "ConditioningZeroOut", conditioning = positive}

local latent = EmptySD3LatentImage{_id = "13", _title = "EmptySD3LatentImage", width = 1024, height = 1024,
                                   batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = model, positive = positive, negative = negative, latent_image = latent,
    seed = 47447417949230, steps = 8, cfg = 1,
    sampler_name = "res_multistep", scheduler = "simple", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = vae}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "z_image_turbo_gguf"}
