-- lora_sd15.lua: the Lua twin of lora_sd15.json. LoraLoader patches the
-- UNet and the text encoder of the checkpoint; both encoders and the
-- sampler take the patched MODEL/CLIP.
-- Run: sdflow run workflows/lora_sd15.lua
-- Node ids and titles match the JSON, so --set 10.strength_model=0.5 works on both.

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}

local lora = LoraLoader{_id = "10", _title = "Load LoRA", model = ckpt.MODEL, clip = ckpt.CLIP,
                        lora_name = "epiNoiseoffset_v2.safetensors",
                        strength_model = 1, strength_clip = 1}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = lora.CLIP,
                                text = "masterpiece best quality girl standing in victorian clothing"}
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = lora.CLIP,
                                text = "bad hands"}

local latent = EmptyLatentImage{_id = "5", _title = "Empty Latent Image", width = 512, height = 512, batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = lora.MODEL, positive = positive, negative = negative, latent_image = latent,
    seed = 851616030078638, steps = 20, cfg = 8,
    sampler_name = "euler", scheduler = "normal", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "ComfyUI"}
