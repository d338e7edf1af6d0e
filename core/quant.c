/* quant.c - GGML block formats widened as ComfyUI-GGUF's dequant.py does.
 *
 * Each dequantize_blocks_<type> of dequant.py is one function here, doing
 * the same operations in the same order. Every arithmetic result is passed
 * through R(), the rounding to the math dtype (quant.h): float16 and
 * bfloat16 results are computed exactly in float (the operands are 11- or
 * 8-bit values, so products are exact and a sum of two, rounded once to
 * float, then to the narrow type, is still rounded correctly: float has
 * more than 2p + 2 bits), then rounded; float32 results are the float
 * operations themselves, never fused (the pragma below; CMake also passes
 * -ffp-contract=off for GCC, which ignores the pragma).
 *
 * Speed: within a group sharing a scale only a few q values exist (16 for
 * a nibble), so where that is fewer than the group's elements their
 * results are tabulated once and looked up; elsewhere each element is one
 * product and one rounding.
 */
#include "quant.h"

#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

const int8_t sd_quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,   38,  53,  69,  89,  113};

/* ---- rounding ----------------------------------------------------------- */

static inline uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* x rounded to float16 (nearest, ties to even), as a float. The common
 * case, a normal half result, is a bit operation; the rest (subnormal,
 * overflow to inf, NaN) goes through the full converter. */
static inline float r16(float x) {
    uint32_t u = f2u(x), a = u & 0x7fffffffu;
    if (a >= 0x38800000u && a < 0x477ff000u) /* 2^-14 <= |x| < 65520 */
        return u2f((u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu);
    return sd_f16_to_f32(sd_f32_to_f16(x));
}

/* x rounded to bfloat16 (nearest, ties to even; overflow carries into inf). */
static inline float rbf(float x) { return sd_bf16_to_f32(sd_f32_to_bf16(x)); }

static inline float R(float x, sd_dequant_math m) {
    return m == SD_DQ_F16 ? r16(x) : m == SD_DQ_BF16 ? rbf(x) : x;
}

/* An f16 field of a block, cast to the math dtype. */
static inline float scale(const uint8_t *p, sd_dequant_math m) {
    return R(sd_f16_to_f32((uint16_t)(p[0] | p[1] << 8)), m);
}

/* Nibble i of a 32-element group packed in 16 bytes: low nibbles first. */
static inline int nib32(const uint8_t *qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; }

/* ---- legacy quants (blocks of 32) ----------------------------------------- */

static void q4_0(const uint8_t *b, float *y, sd_dequant_math m) {
    float d = scale(b, m), t[16];
    for (int k = 0; k < 16; k++) t[k] = R(d * (float)(k - 8), m);
    for (int i = 0; i < 32; i++) y[i] = t[nib32(b + 2, i)];
}

static void q4_1(const uint8_t *b, float *y, sd_dequant_math m) {
    float d = scale(b, m), mn = scale(b + 2, m), t[16];
    for (int k = 0; k < 16; k++) t[k] = R(R(d * (float)k, m) + mn, m);
    for (int i = 0; i < 32; i++) y[i] = t[nib32(b + 4, i)];
}

static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void q5_0(const uint8_t *b, float *y, sd_dequant_math m) {
    float d = scale(b, m);
    uint32_t qh = le32(b + 2);
    for (int i = 0; i < 32; i++) {
        int q = (nib32(b + 6, i) | (int)((qh >> i) & 1u) << 4) - 16;
        y[i] = R(d * (float)q, m);
    }
}

static void q5_1(const uint8_t *b, float *y, sd_dequant_math m) {
    float d = scale(b, m), mn = scale(b + 2, m);
    uint32_t qh = le32(b + 4);
    for (int i = 0; i < 32; i++) {
        int q = nib32(b + 8, i) | (int)((qh >> i) & 1u) << 4;
        y[i] = R(R(d * (float)q, m) + mn, m);
    }
}

static void q8_0(const uint8_t *b, float *y, sd_dequant_math m) {
    float d = scale(b, m);
    for (int i = 0; i < 32; i++) y[i] = R(d * (float)(int8_t)b[2 + i], m);
}

static void iq4_nl(const uint8_t *b, float *y, sd_dequant_math m) {
    float d = scale(b, m), t[16];
    for (int k = 0; k < 16; k++) t[k] = R(d * (float)sd_quant_iq4nl_values[k], m);
    for (int i = 0; i < 32; i++) y[i] = t[nib32(b + 2, i)];
}

/* ---- K-quants (blocks of 256) ------------------------------------------------ */

/* Q2_K: scales[16] (low nibble: scale, high: min of group e/16), qs[64],
 * d, dmin. q of element e = qs[(e/128)*32 + e%32] >> 2*((e/32)%4) & 3. */
static void q2_k(const uint8_t *b, float *y, sd_dequant_math m) {
    const uint8_t *sc = b, *qs = b + 16;
    float d = scale(b + 80, m), dmin = scale(b + 82, m);
    for (int g = 0; g < 16; g++) {
        float dl = R(d * (float)(sc[g] & 15), m), ml = R(dmin * (float)(sc[g] >> 4), m), t[4];
        for (int k = 0; k < 4; k++) t[k] = R(R(dl * (float)k, m) - ml, m);
        for (int e = g * 16; e < g * 16 + 16; e++)
            y[e] = t[(qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3];
    }
}

/* Q3_K: hmask[32], qs[64], scales[12], d. Group k (of 16) scale: low four
 * bits from scales[k % 8] (k < 8: low nibble, else high), high two from
 * scales[8 + k % 4] >> 2*(k/4); minus 32. q of element e: qs[(e/128)*32 +
 * e%32] >> 2*((e/32)%4) & 3, minus 4 when bit e/32 of hmask[e%32] is 0. */
static void q3_k(const uint8_t *b, float *y, sd_dequant_math m) {
    const uint8_t *hm = b, *qs = b + 32, *s = b + 96;
    float d = scale(b + 108, m);
    for (int g = 0; g < 16; g++) {
        int lo = g < 8 ? s[g] & 15 : s[g - 8] >> 4, hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
        float dl = R(d * (float)((lo | hi << 4) - 32), m), t[8];
        for (int k = 0; k < 8; k++) t[k] = R(dl * (float)(k - 4), m); /* q + 4 indexes t */
        for (int e = g * 16; e < g * 16 + 16; e++) {
            int ql = (qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
            int h = (hm[e % 32] >> (e / 32)) & 1; /* set: no -4 */
            y[e] = t[ql + 4 * h];
        }
    }
}

/* The six-bit scale and min of group j (0..7) of a Q4_K/Q5_K block
 * (ggml's get_scale_min_k4; dequant.py's get_scale_min). */
static inline void scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q4_K: d, dmin, scales[12], qs[128]. Group j (of 32): element l is
 * qs[(j/2)*32 + l] >> 4*(j%2) & 15; y = (d*sc)*q - dmin*mn. */
static void q4_k(const uint8_t *b, float *y, sd_dequant_math m) {
    const uint8_t *qs = b + 16;
    float d = scale(b, m), dmin = scale(b + 2, m);
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        scale_min(b + 4, j, &sc, &mn);
        float dl = R(d * (float)sc, m), ml = R(dmin * (float)mn, m), t[16];
        for (int k = 0; k < 16; k++) t[k] = R(R(dl * (float)k, m) - ml, m);
        const uint8_t *q = qs + (j / 2) * 32;
        int sh = 4 * (j % 2);
        for (int l = 0; l < 32; l++) y[j * 32 + l] = t[(q[l] >> sh) & 15];
    }
}

/* Q5_K: as Q4_K with qh[32] before qs: bit j of qh[l] is the fifth bit. */
static void q5_k(const uint8_t *b, float *y, sd_dequant_math m) {
    const uint8_t *qh = b + 16, *qs = b + 48;
    float d = scale(b, m), dmin = scale(b + 2, m);
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        scale_min(b + 4, j, &sc, &mn);
        float dl = R(d * (float)sc, m), ml = R(dmin * (float)mn, m);
        const uint8_t *q = qs + (j / 2) * 32;
        int sh = 4 * (j % 2);
        for (int l = 0; l < 32; l++) {
            int v = ((q[l] >> sh) & 15) | ((qh[l] >> j) & 1) << 4;
            y[j * 32 + l] = R(R(dl * (float)v, m) - ml, m);
        }
    }
}

/* Q6_K: ql[128], qh[64], scales i8[16], d. Element e: low four bits
 * ql[(e/128)*64 + e%64] >> 4*((e/64)%2), high two qh[(e/128)*32 + e%32] >>
 * 2*((e/32)%4), minus 32; group e/16 scale. */
static void q6_k(const uint8_t *b, float *y, sd_dequant_math m) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = scale(b + 208, m);
    for (int g = 0; g < 16; g++) {
        float ds = R(d * (float)sc[g], m);
        for (int e = g * 16; e < g * 16 + 16; e++) {
            int lo = (ql[(e / 128) * 64 + e % 64] >> (4 * ((e / 64) % 2))) & 15;
            int hi = (qh[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
            y[e] = R(ds * (float)((lo | hi << 4) - 32), m);
        }
    }
}

/* IQ4_XS: d, scales_h u16, scales_l[4], qs[128]. Group j (of 32) scale:
 * (scales_l[j/2] >> 4*(j%2) & 15) | (scales_h >> 2j & 3) << 4, minus 32;
 * its elements are the nibbles of qs[16j .. 16j+15], low ones first, looked
 * up in the code book. */
static void iq4_xs(const uint8_t *b, float *y, sd_dequant_math m) {
    float d = scale(b, m);
    unsigned sh = (unsigned)(b[2] | b[3] << 8);
    for (int j = 0; j < 8; j++) {
        int s = (((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (int)((sh >> (2 * j)) & 3u) << 4) - 32;
        float dl = R(d * (float)s, m), t[16];
        for (int k = 0; k < 16; k++) t[k] = R(dl * (float)sd_quant_iq4nl_values[k], m);
        for (int l = 0; l < 32; l++) y[j * 32 + l] = t[nib32(b + 8 + 16 * j, l)];
    }
}

/* ---- entry points ------------------------------------------------------------ */

typedef void (*block_fn)(const uint8_t *b, float *y, sd_dequant_math m);

static block_fn block_of(sd_dtype dt) {
    switch (dt) {
    case SD_Q4_0: return q4_0;
    case SD_Q4_1: return q4_1;
    case SD_Q5_0: return q5_0;
    case SD_Q5_1: return q5_1;
    case SD_Q8_0: return q8_0;
    case SD_Q2_K: return q2_k;
    case SD_Q3_K: return q3_k;
    case SD_Q4_K: return q4_k;
    case SD_Q5_K: return q5_k;
    case SD_Q6_K: return q6_k;
    case SD_IQ4_NL: return iq4_nl;
    case SD_IQ4_XS: return iq4_xs;
    default: return NULL;
    }
}

void sd_quant_dequant(sd_dtype dt, sd_dequant_math math, const void *src, float *dst, int64_t n) {
    block_fn fn = block_of(dt);
    if (!fn) {
        sd_dtype_convert(dst, SD_F32, src, dt, (size_t)n);
        return;
    }
    int64_t blk = sd_dtype_block(dt), bs = (int64_t)sd_dtype_size(dt);
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / blk; i++) fn(b + i * bs, dst + i * blk, math);
}

int sd_quant_scales_finite(sd_dtype dt, const void *src, int64_t n) {
    /* byte offsets of the f16 fields of a block; -1 ends */
    static const struct { sd_dtype dt; int off[3]; } fields[] = {
        {SD_Q4_0, {0, -1}},      {SD_Q4_1, {0, 2, -1}}, {SD_Q5_0, {0, -1}},
        {SD_Q5_1, {0, 2, -1}},   {SD_Q8_0, {0, -1}},    {SD_Q2_K, {80, 82, -1}},
        {SD_Q3_K, {108, -1}},    {SD_Q4_K, {0, 2, -1}}, {SD_Q5_K, {0, 2, -1}},
        {SD_Q6_K, {208, -1}},    {SD_IQ4_NL, {0, -1}},  {SD_IQ4_XS, {0, -1}},
    };
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
        if (fields[f].dt != dt) continue;
        int64_t blk = sd_dtype_block(dt), bs = (int64_t)sd_dtype_size(dt);
        const uint8_t *b = src;
        for (int64_t i = 0; i < n / blk; i++)
            for (int k = 0; fields[f].off[k] >= 0; k++)
                if ((b[i * bs + fields[f].off[k] + 1] & 0x7c) == 0x7c) return 0;
        return 1;
    }
    return 1;
}
