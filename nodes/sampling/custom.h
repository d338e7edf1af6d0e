/* custom.h - the custom-sampling family's values (inside nodes/sampling/).
 *
 * The four graph types ComfyUI's custom sampling adds, as sdflow values:
 *   SIGMAS   SD_VAL_TENSOR, 1-D F32 (may be empty).
 *   SAMPLER  SD_VAL_DICT {"sampler_name": STRING, and the options a
 *            SamplerXxx node sets: "eta", "s_noise", "r" (FLOAT), "order",
 *            "max_stage" (INT), "solver_type", "noise_scaler" (STRING); see
 *            sampler_options.c}; plain data, so cacheable.
 *   NOISE    SD_VAL_DICT {"noise_type": "random" | "empty", "seed": INT}
 *            (DisableNoise's seed is 0, as ComfyUI's Noise_EmptyNoise).
 *   GUIDER   SD_VAL_DICT {"guider": "cfg" | "basic" | "dual_cfg",
 *            "model": MODEL handle, "positive", "negative", "middle":
 *            CONDITIONING, "cfg", "cfg2": FLOAT, "style": STRING}; it holds
 *            the MODEL, so like a MODEL it lives for the run only.
 */
#ifndef SD_NODES_SAMPLING_CUSTOM_H
#define SD_NODES_SAMPLING_CUSTOM_H

#include "sampling.h"

/* A new SIGMAS value holding a copy of v[0..n). */
sd_status sd_nodes_sigmas_value(const float *v, int n, sd_value **out, sd_error *err);
/* Checked SIGMAS input i: borrowed floats (valid while the input lives). */
sd_status sd_nodes_in_sigmas(sd_value *const *in, int i, const char *name, const float **v,
                             int *n, sd_error *err);
/* Checked INT input v: a step count 1..max (the executor validates the
 * node's range; direct callers may not); errors name input `name`. */
sd_status sd_nodes_in_steps(sd_value *v, const char *name, int max, int *steps, sd_error *err);

/* COMBO lists of KSampler's sampler_name and scheduler. */
sd_status sd_nodes_sampler_names(const sd_env *env, sd_value **out, sd_error *err);
sd_status sd_nodes_scheduler_names(const sd_env *env, sd_value **out, sd_error *err);

/* SAMPLER value -> the sampler's name (borrowed from v) and its options set
 * in p (which the caller initialised); errors name `input`. */
sd_status sd_nodes_sampler_options(const sd_value *v, const char *input, const char **name,
                                   sd_sampler_params *p, sd_error *err);

struct sd_model_ref;
/* The ModelSamplingDiscrete a MODEL samples with (its checkpoint's
 * prediction type and the default SD1/SDXL betas). */
void sd_nodes_model_sampling_init(const struct sd_model_ref *m, sd_model_sampling *ms);

#endif
