-- txt2img_sd35_medium_gguf.lua: the Lua twin of txt2img_sd35_medium_gguf.json
-- (Stable Diffusion 3.5 Medium from city96's GGUF files through ComfyUI-GGUF's
-- loader nodes: sd3.5_medium-Q8_0.gguf in models/diffusion_models/ (or unet/),
-- clip_l.safetensors, clip_g.safetensors and the T5-XXL encoder
-- t5-v1_1-xxl-encoder-Q8_0.gguf in models/text_encoders/ (or clip/), the SD3
-- VAE as sd3_vae.safetensors in models/vae/; the T5 tokenizer as
-- t5_tokenizer/tokenizer.json in --tokenizer-dir, docs/models.md). The graph
-- and settings of txt2img_sd35_medium (euler / sgm_uniform, 20 steps, cfg 4.5).
-- Run: sdflow run workflows/txt2img_sd35_medium_gguf.lua
-- Node ids and titles match the JSON, so --set 3.seed=1 works on both.

local model = UnetLoaderGGUF{_id = "12", _title = "Unet Loader (GGUF)", unet_name = "sd3.5_medium-Q8_0.gguf"}
local clip = TripleCLIPLoaderGGUF{_id = "43", _title = "TripleCLIPLoader (GGUF)", clip_name1 = "clip_l.safetensors",
                                  clip_name2 = "clip_g.safetensors", clip_name3 = "t5-v1_1-xxl-encoder-Q8_0.gguf"}
local vae = VAELoader{_id = "10", _title = "Load VAE", vae_name = "sd3_vae.safetensors"}

local positive = CLIPTextEncode{_id = "16", _title = "Positive Prompt", clip = clip,
                                text = "a bottle with a pink and red galaxy inside it on top of a wooden table in a modern kitchen"}
local negative = CLIPTextEncode{_id = "40", _title = "Negative Prompt", clip = clip, text = ""}

local latent = EmptySD3LatentImage{_id = "53", _title = "EmptySD3LatentImage", width = 1024, height = 1024,
                                   batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = model, positive = positive, negative = negative, latent_image = latent,
    seed = 585483408983215, steps = 20, cfg = 4.5,
    sampler_name = "euler", scheduler = "sgm_uniform", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = vae}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "sd35_medium_gguf"}
