-- merge_sd15.lua: the Lua twin of merge_sd15.json. Two SD1.5 checkpoints
-- merged weight by weight (60 % of the first, 40 % of the second) for both
-- the UNet (ModelMergeSimple) and the text encoder (CLIPMergeSimple); the
-- VAE is the first checkpoint's. Nothing is copied at the merge nodes: the
-- merged weights are computed once, when the sampler first needs them.
-- Run: sdflow run workflows/merge_sd15.lua
-- Node ids and titles match the JSON, so --set 12.ratio=0.3 works on both.

local base = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}
local other = CheckpointLoaderSimple{_id = "11", _title = "Load Checkpoint",
                                     ckpt_name = "dreamshaper_8.safetensors"}

local model = ModelMergeSimple{_id = "12", _title = "ModelMergeSimple",
                               model1 = base.MODEL, model2 = other.MODEL, ratio = 0.6}
local clip = CLIPMergeSimple{_id = "13", _title = "CLIPMergeSimple",
                             clip1 = base.CLIP, clip2 = other.CLIP, ratio = 0.6}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = clip,
                                text = "a lighthouse on a rocky coast at dawn, oil painting"}
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = clip,
                                text = "blurry, low quality"}

local latent = EmptyLatentImage{_id = "5", _title = "Empty Latent Image", width = 512, height = 512, batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = model, positive = positive, negative = negative, latent_image = latent,
    seed = 156680208700286, steps = 20, cfg = 7,
    sampler_name = "dpmpp_2m", scheduler = "karras", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = base.VAE}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "merge"}
