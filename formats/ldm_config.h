/* ldm_config.h - the parts of a Stable Diffusion (LDM) .yaml model config
 * that ComfyUI's deprecated CheckpointLoader still reads
 * (comfy.sd.load_checkpoint with config_path): everything else in the file
 * (unet_config, first_stage_config, scheduler_config, ...) is ignored today,
 * since ComfyUI detects the model from the checkpoint's weights.
 *
 *   model.params.parameterization: "v"  -> v-prediction sampling (the
 *                                         model's discrete schedule)
 *   model.params.cond_stage_config.params.layer_idx: N -> clip.clip_layer(N)
 *
 * model.params and model.params.cond_stage_config must exist (ComfyUI's
 * KeyError); the rest is optional. The file is parsed as YAML 1.1 by libyaml
 * (Debian libyaml-dev; ComfyUI uses PyYAML's safe_load, built on the same
 * grammar): mappings, flow or block, quoted or plain scalars, anchors and
 * aliases. Untrusted bytes: a malformed file is SD_ERR_FORMAT naming the file
 * and libyaml's line; fuzz target tests/fuzz/fuzz_ldm_config.c. */
#ifndef SD_LDM_CONFIG_H
#define SD_LDM_CONFIG_H

#include <stddef.h>
#include "core/error.h"

typedef struct sd_ldm_config {
    int v_prediction;  /* parameterization is the string "v" */
    int has_layer_idx; /* cond_stage_config.params.layer_idx given (not null) */
    int layer_idx;     /* its value (an integer) */
} sd_ldm_config;

/* Parse `size` bytes; `name` names the file in errors. */
sd_status sd_ldm_config_parse(const void *data, size_t size, const char *name, sd_ldm_config *out,
                              sd_error *err);
/* Read and parse a file (at most 16 MiB). */
sd_status sd_ldm_config_read(const char *path, sd_ldm_config *out, sd_error *err);

#endif
