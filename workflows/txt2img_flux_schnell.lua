-- txt2img_flux_schnell.lua: the Lua twin of txt2img_flux_schnell.json
-- (FLUX.1-schnell from the split files through the custom-sampling nodes,
-- as on ComfyUI's Flux examples page: flux1-schnell.safetensors in
-- models/diffusion_models/ (or unet/), t5xxl_fp16.safetensors and
-- clip_l.safetensors in models/text_encoders/ (or clip/), ae.safetensors in
-- models/vae/; the T5 tokenizer as t5_tokenizer/tokenizer.json in
-- --tokenizer-dir, docs/models.md). schnell is distilled to 4 steps and
-- takes no guidance: BasicGuider runs the prompt alone.
-- Run: sdflow run workflows/txt2img_flux_schnell.lua
-- Node ids and titles match the JSON, so --set 25.noise_seed=1 works on both.

local model = UNETLoader{_id = "12", _title = "Load Diffusion Model", unet_name = "flux1-schnell.safetensors",
                         weight_dtype = "default"}
local clip = DualCLIPLoader{_id = "11", _title = "DualCLIPLoader", clip_name1 = "t5xxl_fp16.safetensors",
                            clip_name2 = "clip_l.safetensors", type = "flux", device = "default"}
local vae = VAELoader{_id = "10", _title = "Load VAE", vae_name = "ae.safetensors"}

local prompt = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = clip,
                              text = "a red fox in a snowy forest at dawn, soft light, detailed fur"}

local latent = EmptySD3LatentImage{_id = "27", _title = "EmptySD3LatentImage", width = 1024, height = 1024,
                                   batch_size = 1}

local noise = RandomNoise{_id = "25", _title = "RandomNoise", noise_seed = 112298569477003}
local guider = BasicGuider{_id = "22", _title = "BasicGuider", model = model, conditioning = prompt}
local sampler = KSamplerSelect{_id = "16", _title = "KSamplerSelect", sampler_name = "euler"}
local sigmas = BasicScheduler{_id = "17", _title = "BasicScheduler", model = model, scheduler = "simple",
                              steps = 4, denoise = 1}

local sampled = SamplerCustomAdvanced{
    _id = "3", _title = "SamplerCustomAdvanced",
    noise = noise, guider = guider, sampler = sampler, sigmas = sigmas, latent_image = latent,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled.output, vae = vae}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "flux_schnell"}
