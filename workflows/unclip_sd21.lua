-- unclip_sd21.lua: the Lua twin of unclip_sd21.json. SD2.1 unCLIP: the
-- checkpoint's own CLIP vision tower encodes input/example.png, and
-- unCLIPConditioning hands that image embedding (noised a little:
-- noise_augmentation 0.1) to the UNet beside the prompt, so the picture
-- made is a variation of the input.
-- Run: sdflow run workflows/unclip_sd21.lua --input-dir DIR

local ckpt = unCLIPCheckpointLoader{_id = "4", _title = "unCLIPCheckpointLoader", ckpt_name = "sd21-unclip-h.ckpt"}
local picture = LoadImage{_id = "1", _title = "Load Image", image = "example.png"}

local seen = CLIPVisionEncode{_id = "10", _title = "CLIP Vision Encode", clip_vision = ckpt.CLIP_VISION,
                              image = picture.IMAGE, crop = "center"}
local text = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                            text = "a painting in the style of the picture, bright colors"}
local positive = unCLIPConditioning{_id = "11", _title = "unCLIPConditioning", conditioning = text,
                                    clip_vision_output = seen, strength = 1, noise_augmentation = 0.1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = positive,
    negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                              text = "text, watermark"},
    latent_image = EmptyLatentImage{_id = "5", _title = "Empty Latent Image", width = 768, height = 768,
                                    batch_size = 1},
    seed = 361244186407582, steps = 20, cfg = 8,
    sampler_name = "euler", scheduler = "normal", denoise = 1,
}

SaveImage{_id = "9", _title = "Save Image", filename_prefix = "unclip",
          images = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}}
