-- inpaint_sd15.lua: the Lua twin of inpaint_sd15.json. Repaints the
-- transparent part of input/example.png (LoadImage's MASK output).
-- Run: sdflow run workflows/inpaint_sd15.lua --input-dir DIR

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}
local picture = LoadImage{_id = "1", _title = "Load Image", image = "example.png"}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "a red brick wall"}
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "text, watermark"}

-- outputs by name: IMAGE and MASK of the same loader
local encoded = VAEEncodeForInpaint{_id = "10", _title = "VAE Encode (for Inpainting)",
                                    pixels = picture.IMAGE, mask = picture.MASK, vae = ckpt.VAE, grow_mask_by = 6}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = positive, negative = negative, latent_image = encoded,
    seed = 156680208700286, steps = 20, cfg = 8,
    sampler_name = "euler", scheduler = "normal", denoise = 1,
}

SaveImage{_id = "9", _title = "Save Image", filename_prefix = "inpaint",
          images = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}}
