-- image_invert.lua: the Lua twin of image_invert.json.
-- Loads input/example.png, scales it to 64x64, inverts it and saves it.
-- Run: sdflow run workflows/image_invert.lua --input-dir DIR

local load = LoadImage{_id = "1", _title = "Load Image", image = "example.png"}

local scaled = ImageScale{
    _id = "2", _title = "Upscale Image",
    image = load.IMAGE,          -- an output by name
    upscale_method = "bilinear",
    width = 64, height = 64,
    crop = "center",
}

local inverted = ImageInvert{_id = "3", _title = "Invert Image", image = scaled}  -- one output: the node itself

SaveImage{_id = "4", _title = "Save Image", images = inverted, filename_prefix = "sdflow_demo"}
