/* lora_te.c - the text-encoder networks a LoRA patches (CLIP-L, the OpenCLIP
 * tower, T5, Qwen3) behind one lookup / walk, so that key matching
 * (lora_plan.c) and patching (lora_apply.c) treat every text encoder the
 * same way. */
#include "models/lora/lora_internal.h"

#include <string.h>

void *sd_lora_te_net(const sd_text_encoder *te, sd_lora_part part) {
    if (!te) return NULL;
    switch (part) {
    case SD_LORA_CLIP_L: return (void *)sd_text_encoder_clip_l(te);
    case SD_LORA_CLIP_G: return (void *)sd_text_encoder_clip_g(te);
    case SD_LORA_T5: return (void *)sd_text_encoder_t5(te);
    case SD_LORA_QWEN3: return (void *)sd_text_encoder_qwen3(te);
    default: return NULL;
    }
}

sd_bt **sd_lora_te_param(sd_lora_part part, void *net, const char *key, int64_t *row0, int64_t *rows) {
    if (row0) *row0 = 0;
    if (rows) *rows = 0;
    if (!net) return NULL;
    switch (part) {
    case SD_LORA_CLIP_L:
    case SD_LORA_CLIP_G: return sd_clip_param(net, key, row0, rows);
    case SD_LORA_T5: return sd_t5_param(net, key);
    case SD_LORA_QWEN3: return sd_qwen3_param(net, key);
    default: return NULL;
    }
}

void sd_lora_te_param_each(sd_lora_part part, void *net, void (*fn)(void *ud, const char *key, sd_bt **slot),
                           void *ud) {
    if (!net) return;
    switch (part) {
    case SD_LORA_CLIP_L:
    case SD_LORA_CLIP_G: sd_clip_param_each(net, fn, ud); break;
    case SD_LORA_T5: sd_t5_param_each(net, fn, ud); break;
    case SD_LORA_QWEN3: sd_qwen3_param_each(net, fn, ud); break;
    default: break;
    }
}

const char *sd_lora_part_name(sd_lora_part part) {
    switch (part) {
    case SD_LORA_UNET: return "UNet";
    case SD_LORA_CLIP_L: return "CLIP-L";
    case SD_LORA_CLIP_G: return "CLIP-G";
    case SD_LORA_T5: return "T5";
    case SD_LORA_QWEN3: return "Qwen3";
    }
    return "?";
}

int sd_lora_has_text_encoder_keys(const sd_lora *l) {
    /* every name model_lora_keys_clip makes starts with one of these */
    static const char *const pre[] = {"lora_te", "lora_prior_te", "text_encoder"};
    for (size_t i = 0; l && i < sd_st_count(l->f); i++) {
        const char *name = sd_st_at(l->f, i)->name;
        for (size_t j = 0; j < sizeof pre / sizeof *pre; j++)
            if (strncmp(name, pre[j], strlen(pre[j])) == 0) return 1;
    }
    return 0;
}
