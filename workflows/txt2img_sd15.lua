-- txt2img_sd15.lua: the Lua twin of txt2img_sd15.json (ComfyUI's default
-- text-to-image graph). Run: sdflow run workflows/txt2img_sd15.lua
-- Node ids and titles match the JSON, so --set 3.seed=1 works on both.

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "beautiful scenery nature glass bottle landscape, , purple galaxy bottle,"}
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "text, watermark"}

local latent = EmptyLatentImage{_id = "5", _title = "Empty Latent Image", width = 512, height = 512, batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = positive, negative = negative, latent_image = latent,
    seed = 156680208700286, steps = 20, cfg = 8,
    sampler_name = "euler", scheduler = "normal", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "ComfyUI"}
