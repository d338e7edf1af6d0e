/* dtype.h - element types of tensors and conversions between float types.
 *
 * Names follow safetensors ("F32", "F16", "BF16", "I64", "F8_E4M3", ...).
 * Conversions to the 16-bit float types round to nearest, ties to even, and
 * keep NaN/Inf. The two 8-bit float types are torch's float8_e4m3fn and
 * float8_e5m2 (weights of fp8 checkpoints; never activations); conversions
 * to them are torch's (c10/util/Float8_*.h), described at sd_f32_to_f8_e4m3.
 */
#ifndef SD_DTYPE_H
#define SD_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum sd_dtype {
    SD_F32 = 0,
    SD_F16,
    SD_BF16,
    SD_F64,
    SD_I64,
    SD_I32,
    SD_I16,
    SD_I8,
    SD_U8,
    SD_BOOL,
    SD_F8_E4M3, /* float8_e4m3fn: bias 7, no inf, S.1111.111 = NaN, max 448 */
    SD_F8_E5M2, /* float8_e5m2: the top byte of an IEEE half (inf and NaN) */
    /* GGML's block-quantized types (GGUF weights, formats/gguf.h): a block
     * of sd_dtype_block() elements takes sd_dtype_size() bytes; core/quant.h
     * says what the bytes mean and widens them to F32 as ComfyUI-GGUF does.
     * Weights only, read as stored and widened per op (never activations);
     * a tensor of one has a multiple of the block size elements. */
    SD_Q4_0,
    SD_Q4_1,
    SD_Q5_0,
    SD_Q5_1,
    SD_Q8_0,
    SD_Q2_K,
    SD_Q3_K,
    SD_Q4_K,
    SD_Q5_K,
    SD_Q6_K,
    SD_IQ4_NL,
    SD_IQ4_XS,
    SD_DTYPE_COUNT
} sd_dtype;

/* Size of one element in bytes; of one block for the quantized types. */
size_t sd_dtype_size(sd_dtype t);
/* Elements per block: 32 or 256 for the quantized types, 1 for the rest. */
int sd_dtype_block(sd_dtype t);
/* 1 for the block-quantized types (SD_Q4_0 ... SD_IQ4_XS). */
int sd_dtype_is_quantized(sd_dtype t);
/* Bytes of numel elements (numel a multiple of the block size). */
size_t sd_dtype_nbytes(sd_dtype t, int64_t numel);
/* safetensors name of the dtype ("F32"); GGML's for the quantized ones
 * ("Q4_K"). */
const char *sd_dtype_name(sd_dtype t);
/* Parse a dtype name; returns 0 and sets *out, or -1 if unknown. */
int sd_dtype_from_name(const char *name, sd_dtype *out);
/* 1 for F32/F16/BF16/F64/F8_E4M3/F8_E5M2. */
int sd_dtype_is_float(sd_dtype t);
/* 1 for the float types weights may be kept in besides F32 and that the
 * backends widen per op (F16, BF16, F8_E4M3, F8_E5M2). */
int sd_dtype_is_narrow_float(sd_dtype t);

/* 1 when none of the n stored values at data is NaN or Inf, judged on the
 * stored bits with no conversion (for the block-quantized types: their f16
 * scales, core/quant.h); integer types are always finite. n counts elements
 * (a multiple of the block size for the quantized types). */
int sd_dtype_all_finite(sd_dtype t, const void *data, size_t n);

float sd_f16_to_f32(uint16_t h);
uint16_t sd_f32_to_f16(float f);
float sd_bf16_to_f32(uint16_t b);
uint16_t sd_f32_to_bf16(float f);

/* Exact decodes (every fp8 value is an f32). e4m3fn codes 0x7F/0xFF are NaN;
 * its subnormals are m/8 * 2^-6. */
float sd_f8_e4m3_to_f32(uint8_t b);
float sd_f8_e5m2_to_f32(uint8_t b);
/* All 256 decoded values of a code (a table, for widening loops). */
const float *sd_f8_e4m3_table(void);
const float *sd_f8_e5m2_table(void);
/* Round to nearest, ties to even, as torch's .to(float8_*) (a parameter's
 * copy_ in ComfyUI's UNETLoader weight_dtype casts) does: NO saturation.
 * e4m3fn: |x| in [448, 464] gives 448 (464 is the tie, kept even), |x| >
 * 464, inf and NaN give NaN (0x7F with x's sign). e5m2: |x| >= 61440 gives
 * inf (57344 is its largest finite value and 61440 the tie, which goes to
 * the even code, inf), NaN stays NaN. Subnormal results
 * round to nearest even too; tiny values go to a signed zero. */
uint8_t sd_f32_to_f8_e4m3(float f);
uint8_t sd_f32_to_f8_e5m2(float f);

/* Convert n elements between any two dtypes (float<->float, int<->float, ...).
 * Integer targets truncate toward zero as C casts do. A quantized source is
 * widened as ComfyUI-GGUF does by default (core/quant.h, SD_DQ_F16); a
 * quantized target is not supported (dst untouched). */
void sd_dtype_convert(void *dst, sd_dtype dst_t, const void *src, sd_dtype src_t,
                      size_t n);

#endif
