/* dtype.h - element types of tensors and conversions between float types.
 *
 * Names follow safetensors ("F32", "F16", "BF16", "I64", ...). Conversions to
 * the 16-bit float types round to nearest, ties to even, and keep NaN/Inf.
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
    SD_DTYPE_COUNT
} sd_dtype;

/* Size of one element in bytes. */
size_t sd_dtype_size(sd_dtype t);
/* safetensors name of the dtype ("F32"). */
const char *sd_dtype_name(sd_dtype t);
/* Parse a safetensors dtype name; returns 0 and sets *out, or -1 if unknown. */
int sd_dtype_from_name(const char *name, sd_dtype *out);
/* 1 for F32/F16/BF16/F64. */
int sd_dtype_is_float(sd_dtype t);

float sd_f16_to_f32(uint16_t h);
uint16_t sd_f32_to_f16(float f);
float sd_bf16_to_f32(uint16_t b);
uint16_t sd_f32_to_bf16(float f);

/* Convert n elements between any two dtypes (float<->float, int<->float, ...).
 * Integer targets truncate toward zero as C casts do. */
void sd_dtype_convert(void *dst, sd_dtype dst_t, const void *src, sd_dtype src_t,
                      size_t n);

#endif
