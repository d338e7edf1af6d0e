/* LoRA on the SD3 / SD3.5 MMDiT against ComfyUI's LoraLoaderModelOnly
 * (tests/data/sd3_lora, gen/make_sd3_lora.py): ComfyUI, diffusers, Kohya,
 * OneTrainer and SimpleTuner key layouts on the SD3 set's tiny MMDiT-X.
 * What is checked: golden_dit_lora.h. */
#include "golden_dit_lora.h"

int main(void) {
    static const dit_lora_family sd3 = {"sd3_lora", "sd3_lora", "sd3", SD_DMODEL_MMDIT, "t5xxl", "sd3"};
    return dit_lora_main(&sd3);
}
