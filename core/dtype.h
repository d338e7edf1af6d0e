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
    SD_DTYPE_COUNT
} sd_dtype;

/* Size of one element in bytes. */
size_t sd_dtype_size(sd_dtype t);
/* safetensors name of the dtype ("F32"). */
const char *sd_dtype_name(sd_dtype t);
/* Parse a safetensors dtype name; returns 0 and sets *out, or -1 if unknown. */
int sd_dtype_from_name(const char *name, sd_dtype *out);
/* 1 for F32/F16/BF16/F64/F8_E4M3/F8_E5M2. */
int sd_dtype_is_float(sd_dtype t);
/* 1 for the float types weights may be kept in besides F32 and that the
 * backends widen per op (F16, BF16, F8_E4M3, F8_E5M2). */
int sd_dtype_is_narrow_float(sd_dtype t);

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
 * Integer targets truncate toward zero as C casts do. */
void sd_dtype_convert(void *dst, sd_dtype dst_t, const void *src, sd_dtype src_t,
                      size_t n);

#endif
