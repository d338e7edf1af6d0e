-- controlnet_canny_sd15.lua: the Lua twin of controlnet_canny_sd15.json.
-- Canny edges of input/example.png steer an SD1.5 canny ControlNet applied
-- to both prompts (ControlNetApplyAdvanced); the hint is resized to the
-- latent's size as ComfyUI does.
-- Run: sdflow run workflows/controlnet_canny_sd15.lua --input-dir DIR

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}

local positive = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "a cozy wooden cabin in a snowy forest, warm light in the windows"}
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "text, watermark"}

local picture = LoadImage{_id = "11", _title = "Load Image", image = "example.png"}
local edges = Canny{_id = "12", _title = "Canny", image = picture.IMAGE,
                    low_threshold = 0.4, high_threshold = 0.8}
local cnet = ControlNetLoader{_id = "13", _title = "Load ControlNet Model",
                              control_net_name = "control_v11p_sd15_canny.safetensors"}
local controlled = ControlNetApplyAdvanced{_id = "14", _title = "Apply ControlNet",
                                           positive = positive, negative = negative,
                                           control_net = cnet, image = edges,
                                           strength = 1, start_percent = 0, end_percent = 1}

local latent = EmptyLatentImage{_id = "5", _title = "Empty Latent Image", width = 512, height = 512, batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = controlled.positive, negative = controlled.negative,
    latent_image = latent,
    seed = 515940413226052, steps = 20, cfg = 8,
    sampler_name = "euler", scheduler = "normal", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "ComfyUI"}
