/* LoRA on Z-Image's NextDiT against ComfyUI's LoraLoaderModelOnly
 * (tests/data/zimage_lora, gen/make_zimage_lora.py): ComfyUI, diffusers,
 * Kohya and SimpleTuner key layouts on the Z-Image set's tiny NextDiT.
 * What is checked: golden_dit_lora.h. */
#include "golden_dit_lora.h"

int main(void) {
    static const dit_lora_family zimage = {"zimage_lora", "zimage_lora", "zimage", SD_DMODEL_ZIMAGE, "qwen3_4b",
                                           "lumina2"};
    return dit_lora_main(&zimage);
}
