/* quant.h - GGML's block-quantized types (the quantized sd_dtypes of GGUF
 * weights), widened to F32 exactly as city96's ComfyUI-GGUF computes them.
 *
 * Layouts (ggml-common.h; f16 = IEEE half, little-endian; each block holds
 * sd_dtype_block() elements in sd_dtype_size() bytes):
 *   Q4_0   d f16, qs[16]                      y = d * (nibble - 8)
 *   Q4_1   d, m f16, qs[16]                   y = d * nibble + m
 *   Q5_0   d, qh u32, qs[16]                  y = d * ((nibble | bit << 4) - 16)
 *   Q5_1   d, m, qh u32, qs[16]               y = d * (nibble | bit << 4) + m
 *   Q8_0   d, qs i8[32]                       y = d * q
 *   (block of 32: element i < 16 is the low nibble of qs[i], i >= 16 the
 *   high nibble of qs[i - 16]; its fifth bit is bit i of qh)
 *   Q2_K   scales[16], qs[64], d, dmin        16 groups of 16, 2-bit q
 *   Q3_K   hmask[32], qs[64], scales[12], d   16 groups of 16, 3-bit q
 *   Q4_K   d, dmin, scales[12], qs[128]       8 groups of 32, 6-bit scales
 *   Q5_K   d, dmin, scales[12], qh[32], qs[128]
 *   Q6_K   ql[128], qh[64], scales i8[16], d  16 groups of 16
 *   IQ4_NL d, qs[16]                          y = d * kvalues[nibble]
 *   IQ4_XS d, scales_h u16, scales_l[4], qs[128]  8 groups of 32
 * (the K-quant bit layouts are spelled out in quant.c).
 *
 * Rounding: ComfyUI-GGUF's dequantize_blocks_* compute in a torch dtype,
 * one rounded operation at a time: the block scales (f16) are cast to it,
 * the small integers are exact in it, and every product and sum is rounded
 * to it. By default (dequant_dtype None) that dtype stays float16: the
 * widened weights are float16 values, products that pass 65504 become inf.
 * sd_dequant_math names the three dtypes it can be. The results here are
 * bit-identical to ComfyUI-GGUF's in each (tests/data/gguf holds its
 * goldens).
 */
#ifndef SD_QUANT_H
#define SD_QUANT_H

#include <stdint.h>

#include "dtype.h"

/* The dtype ComfyUI-GGUF's block arithmetic runs in (its dequant_dtype). */
typedef enum sd_dequant_math {
    SD_DQ_F16 = 0, /* float16: the default ("default", None) and "float16" */
    SD_DQ_F32,     /* float32: "float32", and "target" for an F32 model */
    SD_DQ_BF16     /* bfloat16: "bfloat16" */
} sd_dequant_math;

/* Widens n elements (a multiple of the block size) of quantized dtype dt at
 * src to F32 at dst. Non-quantized dtypes convert exactly as
 * sd_dtype_convert does (math is then irrelevant). */
void sd_quant_dequant(sd_dtype dt, sd_dequant_math math, const void *src, float *dst, int64_t n);

/* 1 when every block scale (the f16 d, dmin, m fields) of the n elements
 * at src is finite (the quantized values themselves are integers), 0 when
 * one is Inf or NaN: a corrupted tensor. Non-quantized dtypes: 1. */
int sd_quant_scales_finite(sd_dtype dt, const void *src, int64_t n);

/* Quantizes n float32 values (a multiple of the block size) into blocks of
 * dt at dst, the layouts above, byte for byte as ggml's reference
 * quantizers (quantize_row_*_ref: llama-quantize without an importance
 * matrix) compute them in ISO C float32 (core/quantize.c says where a
 * build that fuses multiply-adds may differ). 1 on success, 0 when sdflow
 * has no quantizer for dt (it has Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K
 * and Q6_K). */
int sd_quant_quantize(sd_dtype dt, const float *src, void *dst, int64_t n);
int sd_quant_can_quantize(sd_dtype dt);

/* The 16 values of the IQ4_NL / IQ4_XS code book (ggml's kvalues_iq4nl). */
extern const int8_t sd_quant_iq4nl_values[16];

#endif
