-- txt2img_flux_schnell_gguf.lua: the Lua twin of txt2img_flux_schnell_gguf.json
-- (Flux schnell from city96's GGUF files through ComfyUI-GGUF's loader nodes:
-- flux1-schnell-Q4_K_S.gguf in models/diffusion_models/ (or unet/), the
-- T5-XXL encoder t5-v1_1-xxl-encoder-Q8_0.gguf and clip_l.safetensors in
-- models/text_encoders/, Flux's ae.safetensors in models/vae/).
-- Run: sdflow run workflows/txt2img_flux_schnell_gguf.lua
-- Node ids and titles match the JSON, so --set 3.seed=1 works on both.

local model = UnetLoaderGGUF{_id = "10", _title = "Unet Loader (GGUF)", unet_name = "flux1-schnell-Q4_K_S.gguf"}
local clip = DualCLIPLoaderGGUF{_id = "11", _title = "DualCLIPLoader (GGUF)", clip_name1 = "clip_l.safetensors",
                                clip_name2 = "t5-v1_1-xxl-encoder-Q8_0.gguf", type = "flux"}
local vae = VAELoader{_id = "12", _title = "Load VAE", vae_name = "ae.safetensors"}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Positive Prompt)", clip = clip,
                                text = "a red fox in a snowy forest at dawn, soft light, detailed fur"}
-- schnell samples at cfg 1: the negative is never evaluated, but KSampler takes one
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Negative Prompt)", clip = clip, text = ""}

local latent = EmptySD3LatentImage{_id = "5", _title = "EmptySD3LatentImage", width = 1024, height = 1024, batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = model, positive = positive, negative = negative, latent_image = latent,
    seed = 156680208700286, steps = 4, cfg = 1,
    sampler_name = "euler", scheduler = "simple", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = vae}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "flux_gguf"}
