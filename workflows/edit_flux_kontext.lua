-- edit_flux_kontext.lua: the Lua twin of edit_flux_kontext.json
-- (FLUX.1 Kontext dev image editing, ComfyUI's Kontext example from the Flux
-- page of ComfyUI_examples: flux1-kontext-dev.safetensors in
-- models/diffusion_models/ (or unet/), t5xxl_fp16.safetensors and
-- clip_l.safetensors in models/text_encoders/ (or clip/), Flux's
-- ae.safetensors in models/vae/, the picture to edit as input/example.png;
-- the T5 tokenizer as t5_tokenizer/tokenizer.json in --tokenizer-dir,
-- docs/models.md).
-- Run: sdflow run workflows/edit_flux_kontext.lua
-- Node ids and titles match the JSON, so --set 25.noise_seed=1 works on both.

local vae = VAELoader{_id = "10", _title = "Load VAE", vae_name = "ae.safetensors"}
local clip = DualCLIPLoader{_id = "11", _title = "DualCLIPLoader", clip_name1 = "t5xxl_fp16.safetensors",
                            clip_name2 = "clip_l.safetensors", type = "flux", device = "default"}
local prompt = CLIPTextEncode{
    _id = "6", _title = "CLIP Text Encode (Positive Prompt)", clip = clip,
    text = "the anime girl with massive fennec ears is wearing cargo pants while sitting on a log in the woods biting into a sandwitch beside a beautiful alpine lake",
}
-- a Kontext model is a Flux dev file: the same loader
local unet = UNETLoader{_id = "12", _title = "Load Diffusion Model", unet_name = "flux1-kontext-dev.safetensors",
                        weight_dtype = "default"}
local sampler = KSamplerSelect{_id = "16", _title = "KSamplerSelect", sampler_name = "euler"}
local noise = RandomNoise{_id = "25", _title = "RandomNoise", noise_seed = 679064953796969}
local guided = FluxGuidance{_id = "26", _title = "FluxGuidance", conditioning = prompt, guidance = 2.5}
local latent = EmptySD3LatentImage{_id = "27", _title = "EmptySD3LatentImage", width = 1024, height = 1024,
                                   batch_size = 1}
local model = ModelSamplingFlux{_id = "30", _title = "ModelSamplingFlux", model = unet, max_shift = 1.15,
                                base_shift = 0.5, width = 1024, height = 1024}
local sigmas = BasicScheduler{_id = "17", _title = "BasicScheduler", model = model, scheduler = "simple",
                              steps = 20, denoise = 1}

-- the picture to edit, at the Kontext size nearest its aspect ratio, as a
-- reference latent on the prompt (chain more ReferenceLatent nodes for more
-- pictures)
local picture = LoadImage{_id = "41", _title = "Load Image", image = "example.png"}
local scaled = FluxKontextImageScale{_id = "40", _title = "FluxKontextImageScale", image = picture.IMAGE}
local encoded = VAEEncode{_id = "39", _title = "VAE Encode", pixels = scaled, vae = vae}
local conditioning = ReferenceLatent{_id = "42", _title = "ReferenceLatent", conditioning = guided,
                                     latent = encoded}

local guider = BasicGuider{_id = "22", _title = "BasicGuider", model = model, conditioning = conditioning}
local sampled = SamplerCustomAdvanced{_id = "13", _title = "SamplerCustomAdvanced", noise = noise, guider = guider,
                                      sampler = sampler, sigmas = sigmas, latent_image = latent}
local image = VAEDecode{_id = "8", _title = "VAE Decode", samples = sampled.output, vae = vae}
SaveImage{_id = "9", _title = "Save Image", images = image, filename_prefix = "flux_kontext"}
