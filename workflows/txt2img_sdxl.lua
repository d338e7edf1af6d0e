-- txt2img_sdxl.lua: the Lua twin of txt2img_sdxl.json (SDXL base at
-- 1024x1024 with CLIPTextEncodeSDXL's size conditioning).
-- Run: sdflow run workflows/txt2img_sdxl.lua
-- Node ids and titles match the JSON, so --set 3.seed=1 works on both.

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "sd_xl_base_1.0.safetensors"}

-- original size, crop and target size the UNet is conditioned on
local size = {width = 1024, height = 1024, crop_w = 0, crop_h = 0,
              target_width = 1024, target_height = 1024}

local function encode(id, text)
    return CLIPTextEncodeSDXL{_id = id, _title = "CLIPTextEncodeSDXL", clip = ckpt.CLIP,
                              width = size.width, height = size.height,
                              crop_w = size.crop_w, crop_h = size.crop_h,
                              target_width = size.target_width, target_height = size.target_height,
                              text_g = text, text_l = text}
end

local positive = encode("6", "evening sunset scenery blue sky nature, glass bottle with a galaxy in it")
local negative = encode("7", "text, watermark")

local latent = EmptyLatentImage{_id = "5", _title = "Empty Latent Image", width = 1024, height = 1024, batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = positive, negative = negative, latent_image = latent,
    seed = 721897303308196, steps = 25, cfg = 7,
    sampler_name = "euler", scheduler = "normal", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "ComfyUI"}
