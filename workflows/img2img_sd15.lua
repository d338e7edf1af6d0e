-- img2img_sd15.lua: the Lua twin of img2img_sd15.json. Encodes
-- input/example.png, samples from it at denoise 0.6 and saves the result.
-- Run: sdflow run workflows/img2img_sd15.lua --input-dir DIR

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}
local picture = LoadImage{_id = "1", _title = "Load Image", image = "example.png"}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "a watercolor painting of a lighthouse at dawn"}
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "text, watermark"}

local encoded = VAEEncode{_id = "10", _title = "VAE Encode", pixels = picture.IMAGE, vae = ckpt.VAE}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = positive, negative = negative, latent_image = encoded,
    seed = 156680208700286, steps = 20, cfg = 8,
    sampler_name = "euler", scheduler = "normal", denoise = 0.6,
}

SaveImage{_id = "9", _title = "Save Image", filename_prefix = "img2img",
          images = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}}
