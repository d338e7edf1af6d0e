-- txt2img_sd35_medium.lua: the Lua twin of txt2img_sd35_medium.json
-- (Stable Diffusion 3.5 Medium from split files: Stability's
-- sd3.5_medium.safetensors in models/diffusion_models/ (or unet/; the file
-- Stability publishes also holds the VAE, which UNETLoader leaves aside),
-- clip_l.safetensors, clip_g.safetensors and t5xxl_fp16.safetensors in
-- models/text_encoders/ (or clip/), the SD3 VAE as sd3_vae.safetensors in
-- models/vae/; the T5 tokenizer as t5_tokenizer/tokenizer.json in
-- --tokenizer-dir, docs/models.md). Settings of ComfyUI's SD3.5 example
-- (euler / sgm_uniform, 20 steps, 1024 x 1024, the model's own shift 3)
-- at cfg 4.5, Stability's for Medium.
-- Run: sdflow run workflows/txt2img_sd35_medium.lua
-- Node ids and titles match the JSON, so --set 3.seed=1 works on both.

local model = UNETLoader{_id = "12", _title = "Load Diffusion Model", unet_name = "sd3.5_medium.safetensors",
                         weight_dtype = "default"}
local clip = TripleCLIPLoader{_id = "43", _title = "TripleCLIPLoader", clip_name1 = "clip_l.safetensors",
                              clip_name2 = "clip_g.safetensors", clip_name3 = "t5xxl_fp16.safetensors"}
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
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "sd35_medium"}
