-- area_composition_sd15.lua: the Lua twin of area_composition_sd15.json.
-- One prompt for the whole picture, one for the left half
-- (ConditioningSetArea) and one for a masked square (a SolidMask placed
-- with MaskComposite, ConditioningSetMask), combined for the sampler.
-- Run: sdflow run workflows/area_composition_sd15.lua

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}

local whole = CLIPTextEncode{_id = "6", _title = "Whole picture", clip = ckpt.CLIP,
                             text = "a sunny meadow under a blue sky, wide landscape, soft light"}
local negative = CLIPTextEncode{_id = "7", _title = "Negative", clip = ckpt.CLIP,
                                text = "text, watermark, blurry"}

-- the left half: an area in pixels (ComfyUI divides it by 8 for the latent)
local barn = ConditioningSetArea{
    _id = "11", _title = "Left half area",
    conditioning = CLIPTextEncode{_id = "10", _title = "Left half", clip = ckpt.CLIP, text = "a red wooden barn"},
    width = 256, height = 512, x = 0, y = 0, strength = 1,
}

-- a 256x256 square at (256, 128) of an empty 512x512 mask
local square = MaskComposite{
    _id = "15", _title = "Place the square",
    destination = SolidMask{_id = "14", _title = "Empty mask", value = 0, width = 512, height = 512},
    source = SolidMask{_id = "13", _title = "Square", value = 1, width = 256, height = 256},
    x = 256, y = 128, operation = "add",
}
local tree = ConditioningSetMask{
    _id = "16", _title = "Masked square area",
    conditioning = CLIPTextEncode{_id = "12", _title = "Masked square", clip = ckpt.CLIP,
                                  text = "a tall oak tree with green leaves"},
    mask = square, strength = 1, set_cond_area = "default",
}

local positive = ConditioningCombine{
    _id = "18", _title = "Combine",
    conditioning_1 = ConditioningCombine{_id = "17", _title = "Combine", conditioning_1 = whole, conditioning_2 = barn},
    conditioning_2 = tree,
}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = positive, negative = negative,
    latent_image = EmptyLatentImage{_id = "5", _title = "Empty Latent Image", width = 512, height = 512, batch_size = 1},
    seed = 482119, steps = 20, cfg = 7, sampler_name = "euler", scheduler = "normal", denoise = 1,
}

SaveImage{_id = "9", _title = "Save Image", filename_prefix = "area_composition",
          images = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}}
