-- inpaint_model_conditioning_sd15.lua: the Lua twin of
-- inpaint_model_conditioning_sd15.json. Repaints the transparent part of
-- input/example.png with an inpainting checkpoint (9 input channels):
-- InpaintModelConditioning gives the model the masked picture's latent and
-- the mask, and the sampler a latent that keeps the rest (noise_mask).
-- Run: sdflow run workflows/inpaint_model_conditioning_sd15.lua --input-dir DIR

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "sd-v1-5-inpainting.safetensors"}
local picture = LoadImage{_id = "1", _title = "Load Image", image = "example.png"}

local cond = InpaintModelConditioning{
    _id = "10", _title = "InpaintModelConditioning",
    positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                              text = "a red brick wall"},
    negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                              text = "text, watermark"},
    vae = ckpt.VAE, pixels = picture.IMAGE, mask = picture.MASK, noise_mask = true,
}

-- its three outputs by name: the conditionings and the latent
local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = cond.positive, negative = cond.negative, latent_image = cond.latent,
    seed = 156680208700286, steps = 20, cfg = 8,
    sampler_name = "euler", scheduler = "normal", denoise = 1,
}

SaveImage{_id = "9", _title = "Save Image", filename_prefix = "inpaint_model_conditioning",
          images = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}}
