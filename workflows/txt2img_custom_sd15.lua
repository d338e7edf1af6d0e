-- txt2img_custom_sd15.lua: the Lua twin of txt2img_custom_sd15.json, ComfyUI's
-- default text-to-image graph with KSampler split into the custom-sampling
-- nodes (noise, guider, sampler, sigmas). With these settings it gives the
-- same latent as txt2img_sd15's KSampler, bit for bit.
-- Run: sdflow run workflows/txt2img_custom_sd15.lua

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "beautiful scenery nature glass bottle landscape, , purple galaxy bottle,"}
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "text, watermark"}

local latent = EmptyLatentImage{_id = "5", _title = "Empty Latent Image", width = 512, height = 512, batch_size = 1}

local noise = RandomNoise{_id = "10", _title = "RandomNoise", noise_seed = 156680208700286}
local guider = CFGGuider{_id = "11", _title = "CFGGuider", model = ckpt.MODEL,
                         positive = positive, negative = negative, cfg = 8}
local sampler = KSamplerSelect{_id = "12", _title = "KSamplerSelect", sampler_name = "euler"}
local sigmas = BasicScheduler{_id = "13", _title = "BasicScheduler", model = ckpt.MODEL,
                              scheduler = "normal", steps = 20, denoise = 1}

local sampled = SamplerCustomAdvanced{
    _id = "3", _title = "SamplerCustomAdvanced",
    noise = noise, guider = guider, sampler = sampler, sigmas = sigmas, latent_image = latent,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled.output, vae = ckpt.VAE}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "ComfyUI"}
