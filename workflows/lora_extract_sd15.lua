-- lora_extract_sd15.lua: the Lua twin of lora_extract_sd15.json. A LoRA
-- extracted from the difference between a fine-tuned checkpoint and its base:
-- ModelMergeSubtract gives (fine-tuned - base) weight by weight, and LoraSave
-- ("Extract and Save Lora") cuts each weight's difference to a rank-32 LoRA
-- (SVD) and writes it to output/loras/ComfyUI_extracted_lora_00001_.safetensors,
-- ready for LoraLoader on the base (copy it into models/loras).
-- Run: sdflow run workflows/lora_extract_sd15.lua
-- Node ids and titles match the JSON, so --set 4.rank=64 works on both.

local tuned = CheckpointLoaderSimple{_id = "1", _title = "Load Checkpoint (fine-tuned)",
                                     ckpt_name = "dreamshaper_8.safetensors"}
local base = CheckpointLoaderSimple{_id = "2", _title = "Load Checkpoint (base)",
                                    ckpt_name = "v1-5-pruned-emaonly.safetensors"}

local diff = ModelMergeSubtract{_id = "3", _title = "ModelMergeSubtract",
                                model1 = tuned.MODEL, model2 = base.MODEL, multiplier = 1}

LoraSave{_id = "4", _title = "Extract and Save Lora", model_diff = diff,
         filename_prefix = "loras/ComfyUI_extracted_lora", rank = 32, lora_type = "standard",
         bias_diff = true}
