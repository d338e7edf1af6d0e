-- txt2img_sd35_medium_ckpt.lua: the Lua twin of txt2img_sd35_medium_ckpt.json
-- (Stable Diffusion 3.5 Medium from one file: the single-file checkpoint
-- with the MMDiT-X, CLIP-L, CLIP-G, an fp8 T5-XXL and the VAE,
-- sd3.5_medium_incl_clips_t5xxlfp8.safetensors in models/checkpoints/; the
-- T5 tokenizer as t5_tokenizer/tokenizer.json in --tokenizer-dir,
-- docs/models.md). Graph of ComfyUI's SD3.5 example (CheckpointLoaderSimple,
-- euler / sgm_uniform, 20 steps, 1024 x 1024, the model's own shift 3) at
-- cfg 4.5, Stability's for Medium.
-- Run: sdflow run workflows/txt2img_sd35_medium_ckpt.lua
-- Node ids and titles match the JSON, so --set 3.seed=1 works on both.

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "sd3.5_medium_incl_clips_t5xxlfp8.safetensors"}

local positive = CLIPTextEncode{_id = "16", _title = "Positive Prompt", clip = ckpt.CLIP,
                                text = "a bottle with a pink and red galaxy inside it on top of a wooden table in a modern kitchen"}
local negative = CLIPTextEncode{_id = "40", _title = "Negative Prompt", clip = ckpt.CLIP, text = ""}

local latent = EmptySD3LatentImage{_id = "53", _title = "EmptySD3LatentImage", width = 1024, height = 1024,
                                   batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = positive, negative = negative, latent_image = latent,
    seed = 585483408983215, steps = 20, cfg = 4.5,
    sampler_name = "euler", scheduler = "sgm_uniform", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "sd35_medium"}
