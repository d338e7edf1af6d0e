-- freeu_sag_sd15.lua: the Lua twin of freeu_sag_sd15.json. SD1.5 with two
-- guidance patches on the MODEL: FreeU (the output blocks' backbone features
-- boosted, their skip connections' lowest frequencies damped; b1 1.5, b2 1.6,
-- s1 0.9, s2 0.2 as the FreeU authors suggest for SD1.5) and then
-- Self-Attention Guidance (one more UNet pass per step on the negative
-- prediction blurred where the middle block's self-attention is strong).
-- SAG needs a latent of at least 128 x 128 pixels' worth: its middle-block
-- map must have 4 tokens or more.
-- Run: sdflow run workflows/freeu_sag_sd15.lua
-- Node ids and titles match the JSON, so --set 11.scale=0.8 works on both.

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}

local freeu = FreeU{_id = "10", _title = "FreeU", model = ckpt.MODEL, b1 = 1.5, b2 = 1.6, s1 = 0.9, s2 = 0.2}
local model = SelfAttentionGuidance{_id = "11", _title = "Self-Attention Guidance", model = freeu,
                                    scale = 0.5, blur_sigma = 2.0}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "a cozy reading nook by a rainy window, warm lamp light, detailed"}
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "blurry, low quality, deformed"}

local latent = EmptyLatentImage{_id = "5", _title = "Empty Latent Image", width = 512, height = 512, batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = model, positive = positive, negative = negative, latent_image = latent,
    seed = 42, steps = 20, cfg = 7,
    sampler_name = "euler", scheduler = "normal", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "freeu_sag"}
