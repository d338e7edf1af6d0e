-- gligen_textbox_sd15.lua: the Lua twin of gligen_textbox_sd15.json. SD1.5
-- with GLIGEN grounding: two texts, each placed in a box of the image
-- (pixels; GLIGENTextBoxApply floors them to latent pixels), added to the
-- positive prompt's conditioning. The sampler runs the GLIGEN model's
-- fusers in every transformer block of the UNet for the positive and, as
-- ComfyUI does, for the negative too.
-- Needs models/gligen/gligen_sd14_textbox_pruned.safetensors.
-- Run: sdflow run workflows/gligen_textbox_sd15.lua
-- Node ids and titles match the JSON, so --set 11.x=64 works on both.

local ckpt = CheckpointLoaderSimple{_id = "4", _title = "Load Checkpoint",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}
local gligen = GLIGENLoader{_id = "10", _title = "GLIGENLoader",
                            gligen_name = "gligen_sd14_textbox_pruned.safetensors"}

local prompt = CLIPTextEncode{_id = "6", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                              text = "a quiet street in a small town, sunny afternoon, photograph"}
local car = GLIGENTextBoxApply{_id = "11", _title = "GLIGENTextBoxApply", conditioning_to = prompt,
                               clip = ckpt.CLIP, gligen_textbox_model = gligen, text = "a red car",
                               width = 256, height = 192, x = 32, y = 288}
local positive = GLIGENTextBoxApply{_id = "12", _title = "GLIGENTextBoxApply", conditioning_to = car,
                                    clip = ckpt.CLIP, gligen_textbox_model = gligen, text = "a tall green tree",
                                    width = 160, height = 384, x = 320, y = 64}
local negative = CLIPTextEncode{_id = "7", _title = "CLIP Text Encode (Prompt)", clip = ckpt.CLIP,
                                text = "blurry, low quality, deformed"}

local latent = EmptyLatentImage{_id = "5", _title = "Empty Latent Image", width = 512, height = 512, batch_size = 1}

local sampled = KSampler{
    _id = "3", _title = "KSampler",
    model = ckpt.MODEL, positive = positive, negative = negative, latent_image = latent,
    seed = 42, steps = 20, cfg = 7,
    sampler_name = "euler", scheduler = "normal", denoise = 1,
}

local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled, vae = ckpt.VAE}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "gligen_textbox"}
