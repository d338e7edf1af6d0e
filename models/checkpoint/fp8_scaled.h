/* fp8_scaled.h - ComfyUI's scaled fp8 weights: which layer of a file is
 * one, in which fp8 type, with which per-tensor scale.
 *
 * Comfy-Org's *_fp8_scaled files (t5xxl_fp8_e4m3fn_scaled,
 * sd3.5_large_fp8_scaled, flux1-dev-kontext_fp8_scaled, ...) store a weight
 * W as fp8 q with a per-tensor factor s, W = float(q) * s. ComfyUI at the
 * pinned commit reads three spellings of that, all turned into its
 * "comfy_quant" layer configs (comfy/utils.py convert_old_quants, ops.py
 * mixed_precision_ops):
 *   - legacy: a marker "<P>scaled_fp8" and "<layer>.scale_weight" beside
 *     "<layer>.weight" for the layers under P (also "<layer>.scale_input",
 *     an activation scale). Every such layer is float8_e4m3fn. P is the
 *     model's prefix: "" for a bare file, "model.diffusion_model." or a text
 *     encoder's "text_encoders.t5xxl.transformer." (or a shorter dotted
 *     prefix of it) in a single file. Without a marker a scale_weight is
 *     ignored, as ComfyUI ignores it.
 *   - "<layer>.comfy_quant": U8 bytes of a JSON object {"format": ...}, with
 *     "<layer>.weight_scale" (and maybe "<layer>.input_scale").
 *   - the file metadata "_quantization_metadata": JSON {"layers": {layer:
 *     {"format": ...}}} naming the layers by their full key; when present
 *     the legacy marker is not looked at.
 * Formats read: float8_e4m3fn and float8_e5m2 (the weight is converted to
 * that type at load when stored otherwise, as ComfyUI's .to(storage_t)).
 * nvfp4 and unknown formats are refused. Widening (kernels) computes
 * float(q) * s in F32, as comfy_kitchen's dequantize_per_tensor_fp8 does at
 * F32 compute; input scales are not used (ComfyUI uses them only for fp8
 * matrix multiplication on GPUs that have it, not when it dequantizes).
 */
#ifndef SD_FP8_SCALED_H
#define SD_FP8_SCALED_H

#include "formats/safetensors.h"

typedef struct sd_fp8_layer {
    int scaled;     /* 1: the weight is a scaled fp8 one */
    sd_dtype dtype; /* SD_F8_E4M3 or SD_F8_E5M2 */
    float scale;    /* finite, not 0 */
} sd_fp8_layer;

/* For the tensor `key` (its full name in f) of a model viewed under
 * `prefix` (the sd_weights prefix, which decides which legacy markers
 * apply): out->scaled 0 when key is not a scaled layer's ".weight"; else its
 * format and scale. Errors (SD_ERR_FORMAT / SD_ERR_UNSUPPORTED naming the
 * file and key): malformed or unsupported config, a missing scale, a scale
 * that is not one finite non-zero value. */
sd_status sd_fp8_layer_of(sd_st_file *f, const char *prefix, const char *key, sd_fp8_layer *out,
                          sd_error *err);

/* Whole-file check at detection, before anything loads: every
 * "*.comfy_quant" config and the "_quantization_metadata" one parse and
 * name a format sdflow reads. Errors name the file and the layer. */
sd_status sd_fp8_scaled_check(sd_st_file *f, sd_error *err);

#endif
