-- inpaint_composite_sd15.lua: the Lua twin of inpaint_composite_sd15.json.
-- Repaints the transparent part of input/example.png (LoadImage's MASK) with
-- an ordinary checkpoint (SetLatentNoiseMask, denoise < 1), then pastes the
-- result back onto the original through the mask, grown and feathered so the
-- seam fades: everything outside the mask keeps the original's pixels.
-- Run: sdflow run workflows/inpaint_composite_sd15.lua --input-dir DIR
-- Node ids and titles match the JSON, so --set 12.value=8 works on both.

local picture = LoadImage{_id = "1", _title = "Load Image", image = "example.png"}
local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "a red brick wall"}
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "text, watermark"}

-- the mask grown by a few pixels (PrimitiveInt feeds GrowMask's expand)
local grow_by = PrimitiveInt{_id = "12", _title = "Int", value = 4}
local grown = GrowMask{_id = "13", _title = "Grow Mask", mask = picture.MASK, expand = grow_by,
                       tapered_corners = true}
local soft = FeatherMask{_id = "14", _title = "FeatherMask", mask = grown, left = 6, top = 6, right = 6, bottom = 6}

local encoded = VAEEncode{_id = "10", _title = "VAE Encode", pixels = picture.IMAGE, vae = ckpt.VAE}
local masked = SetLatentNoiseMask{_id = "11", _title = "Set Latent Noise Mask", samples = encoded, mask = grown}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = positive, negative = negative, latent_image = masked,
    seed = 42, steps = 20, cfg = 7,
    sampler_name = "euler", scheduler = "normal", denoise = 0.85,
}
local repainted = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}

-- the repainted pixels only where the (feathered) mask is
local composite = ImageCompositeMasked{_id = "15", _title = "ImageCompositeMasked", destination = picture.IMAGE,
                                       source = repainted, x = 0, y = 0, resize_source = false, mask = soft}

local prefix = StringConcatenate{_id = "16", _title = "Concatenate", string_a = "inpaint", string_b = "composite",
                                 delimiter = "_"}
SaveImage{_id = "9", _title = "Save Image", images = composite, filename_prefix = prefix}
