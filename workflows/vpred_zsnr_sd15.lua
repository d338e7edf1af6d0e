-- vpred_zsnr_sd15.lua: the Lua twin of vpred_zsnr_sd15.json. An SD1.5
-- fine-tune trained for v-prediction with zero terminal SNR (a file that
-- does not say so itself): ModelSamplingDiscrete reads its output as v and
-- rescales the noise schedule (the first sigma becomes ~4518), and
-- RescaleCFG keeps the guided prediction from over-saturating, as such
-- models' authors recommend.
-- Run: sdflow run workflows/vpred_zsnr_sd15.lua
-- Node ids and titles match the JSON, so --set 11.multiplier=0.5 works on both.

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "sd15_vpred_zsnr.safetensors"}

local vpred = ModelSamplingDiscrete{_id = "10", _title = "ModelSamplingDiscrete", model = ckpt.MODEL,
                                    sampling = "v_prediction", zsnr = true}
local model = RescaleCFG{_id = "11", _title = "RescaleCFG", model = vpred, multiplier = 0.7}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "a black cat in a dark alley at night, neon light"}
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "washed out, grey"}

local latent = EmptyLatentImage{_id = "5", _title = "Empty Latent Image", width = 512, height = 512, batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = model, positive = positive, negative = negative, latent_image = latent,
    seed = 42, steps = 25, cfg = 7,
    sampler_name = "euler_ancestral", scheduler = "normal", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "vpred"}
