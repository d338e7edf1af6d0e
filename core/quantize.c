/* quantize.c - float32 -> GGML blocks (the inverse of quant.c), for writing
 * GGUF files (sdflow synth). Each type rounds as ggml's reference quantizers
 * (quantize_row_*_ref in ggml-quants.c: what llama-quantize writes when it
 * has no importance matrix) compute in plain float32 without fused
 * multiply-adds (this file is built with -ffp-contract=off): the same scale
 * search for the K-quants, the same truncations and ties. A llama-quantize
 * built to fuse multiply-adds (and gguf-py, which imitates that for Q4_0 and
 * Q5_0) can pick another value where a product lands within a rounding of a
 * tie. tests/core/test_quantize.c compares every block with the reference's
 * own output (tests/data/gguf/quantize). */
#include "quant.h"

#include <math.h>
#include <string.h>

/* The reference's "all zero" threshold for a K-quant group. */
#define GROUP_EPS 1e-15f

static void put_f16(uint8_t *p, float v) {
    uint16_t h = sd_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* v rounded to f16 and back (the value the stored scale will have). */
static float f16r(float v) { return sd_f16_to_f32(sd_f32_to_f16(v)); }

/* Round to nearest, ties to even, as the reference's nearest_int: adding
 * 1.5 * 2^23 leaves the rounded integer in the low mantissa bits (|v| <
 * 2^22, which every caller's ratio of a value to its group's step is). A
 * float add instead of a libm call: the K-quant searches round ~40 times an
 * element. */
static int near(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static int mini(int a, int b) { return a < b ? a : b; }
static int maxi(int a, int b) { return a > b ? a : b; }

/* The element of largest magnitude with its sign (the first on ties). */
static float signed_absmax(const float *x, int n) {
    float m = 0.0f, a = 0.0f;
    for (int i = 0; i < n; i++)
        if (a < fabsf(x[i])) a = fabsf(x[i]), m = x[i];
    return m;
}

/* Element i of a block of 32 is the low nibble of qs[i % 16] (i < 16) or
 * its high nibble; the fifth bit, where there is one, bit i of qh. */
static void pack32(uint8_t *qs, uint8_t *qh, const uint8_t *q) {
    uint32_t h = 0;
    for (int i = 0; i < 16; i++) qs[i] = (uint8_t)((q[i] & 15) | (q[i + 16] & 15) << 4);
    for (int i = 0; i < 32; i++) h |= (uint32_t)((q[i] >> 4) & 1) << i;
    if (qh)
        for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

static void q8_0(const float *x, uint8_t *b) {
    float a = 0.0f;
    for (int i = 0; i < 32; i++) a = fmaxf(a, fabsf(x[i]));
    float d = a / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int i = 0; i < 32; i++) b[2 + i] = (uint8_t)(int8_t)roundf(x[i] * id);
}

/* Q4_0 / Q5_0: d = the signed absmax / -(levels/2), q = trunc(x/d + half + 0.5). */
static void sym_0(const float *x, uint8_t *b, int bits) {
    float half = (float)(1 << (bits - 1));
    float d = signed_absmax(x, 32) / -half, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[32];
    put_f16(b, d);
    for (int i = 0; i < 32; i++) {
        float v = x[i] * id;
        q[i] = (uint8_t)mini((1 << bits) - 1, (int8_t)(v + (half + 0.5f)));
    }
    if (bits == 4) pack32(b + 2, NULL, q);
    else pack32(b + 6, b + 2, q);
}
static void q4_0(const float *x, uint8_t *b) { sym_0(x, b, 4); }
static void q5_0(const float *x, uint8_t *b) { sym_0(x, b, 5); }

/* Q4_1 / Q5_1: d = (max - min) / levels, m = min, q = trunc((x - min)/d + 0.5). */
static void asym_1(const float *x, uint8_t *b, int bits) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < 32; i++) lo = x[i] < lo ? x[i] : lo, hi = x[i] > hi ? x[i] : hi;
    int levels = (1 << bits) - 1;
    float d = (hi - lo) / (float)levels, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[32];
    put_f16(b, d);
    put_f16(b + 2, lo);
    for (int i = 0; i < 32; i++) {
        float v = (x[i] - lo) * id;
        int l = (int)(uint8_t)(v + 0.5f);
        q[i] = (uint8_t)(bits == 4 ? mini(15, l) : l); /* the reference clamps only Q4_1 */
    }
    if (bits == 4) pack32(b + 4, NULL, q);
    else pack32(b + 8, b + 4, q);
}
static void q4_1(const float *x, uint8_t *b) { asym_1(x, b, 4); }
static void q5_1(const float *x, uint8_t *b) { asym_1(x, b, 5); }

/* A group's scale and min for levels 0..nmax by the reference's weighted
 * least-squares search (make_qkx2_quants): start from the range, try nstep
 * + 1 stretched grids, keep the one with the least weighted squared error.
 * L receives the levels, *neg_min the min as a positive offset. */
static float group_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, float rmin,
                             float rdelta, int nstep) {
    float lo = x[0], hi = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *neg_min = -lo;
        return 0.0f;
    }
    float iscale = (float)nmax / (hi - lo), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)maxi(0, mini(nmax, near(iscale * (x[i] - lo))));
        float diff = scale * L[i] + lo - x[i];
        best += w[i] * (diff * diff);
    }
    uint8_t aux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = maxi(0, mini(nmax, near(iscale * (x[i] - lo))));
            aux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0) continue;
        float s = (sum_w * sum_xl - sum_x * sum_l) / D, m = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (m > 0) m = 0, s = sum_xl / sum_l2;
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = s * aux[i] + m - x[i];
            err += w[i] * (diff * diff);
        }
        if (err < best) {
            memcpy(L, aux, (size_t)n);
            best = err, scale = s, lo = m;
        }
    }
    *neg_min = -lo;
    return scale;
}

/* Q4_K / Q5_K: 8 groups of 32, each a six-bit scale and min of the
 * super-block's f16 d and dmin; L receives the 256 levels. */
static void k_scale_min(const float *x, int nmax, float rmin, int nstep, uint8_t *b, uint8_t *L) {
    float sc[8], mn[8], w[32], max_sc = 0, max_mn = 0;
    for (int j = 0; j < 8; j++) {
        const float *g = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += g[l] * g[l];
        float av = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av + fabsf(g[l]);
        sc[j] = group_scale_min(32, nmax, g, w, L + 32 * j, &mn[j], rmin, 0.1f, nstep);
        if (sc[j] > max_sc) max_sc = sc[j];
        if (mn[j] > max_mn) max_mn = mn[j];
    }
    float inv_sc = max_sc > 0 ? 63.f / max_sc : 0.f, inv_mn = max_mn > 0 ? 63.f / max_mn : 0.f;
    uint8_t *s = b + 4, ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)mini(63, (uint8_t)near(inv_sc * sc[j]));
        lm[j] = (uint8_t)mini(63, (uint8_t)near(inv_mn * mn[j]));
    }
    for (int j = 0; j < 4; j++) { /* quant.c's K-scale layout */
        s[j] = (uint8_t)(ls[j] | (ls[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(lm[j] | (lm[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((ls[j + 4] & 15) | (lm[j + 4] & 15) << 4);
    }
    put_f16(b, max_sc / 63.f);
    put_f16(b + 2, max_mn / 63.f);
    float d = f16r(max_sc / 63.f), dmin = f16r(max_mn / 63.f);
    /* the levels again against the scales as stored (a zero scale keeps the search's) */
    for (int j = 0; j < 8; j++) {
        float dj = d * (float)ls[j];
        if (dj == 0.0f) continue;
        float mj = dmin * (float)lm[j];
        for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)maxi(0, mini(nmax, near((x[32 * j + l] + mj) / dj)));
    }
}

static void q4_k(const float *x, uint8_t *b) {
    uint8_t L[256];
    k_scale_min(x, 15, -1.0f, 20, b, L);
    for (int g = 0; g < 4; g++) /* 64 elements per 32 bytes: low nibbles, then high */
        for (int l = 0; l < 32; l++) b[16 + g * 32 + l] = (uint8_t)(L[64 * g + l] | L[64 * g + 32 + l] << 4);
}

static void q5_k(const float *x, uint8_t *b) {
    uint8_t L[256];
    k_scale_min(x, 31, -0.5f, 15, b, L);
    uint8_t *qh = b + 16, *qs = b + 48;
    memset(qh, 0, 32);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            int a = L[64 * g + l], c = L[64 * g + 32 + l];
            qh[l] |= (uint8_t)((a >> 4) << (2 * g) | (c >> 4) << (2 * g + 1));
            qs[g * 32 + l] = (uint8_t)((a & 15) | (c & 15) << 4);
        }
}

/* Q6_K's group scale: the reference's make_qx_quants with weights x^2 over
 * 19 trial scales around the absmax one; L receives levels + 32. */
static float q6_group(const float *x, int8_t *L) {
    const int nmax = 32;
    float mx = 0, amax = 0;
    for (int i = 0; i < 16; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), mx = x[i];
    if (amax < GROUP_EPS) {
        memset(L, 0, 16);
        return 0.f;
    }
    float iscale = (float)-nmax / mx, sumlx = 0, suml2 = 0;
    for (int i = 0; i < 16; i++) {
        int l = maxi(-nmax, mini(nmax - 1, near(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / mx;
        sumlx = suml2 = 0;
        for (int i = 0; i < 16; i++) {
            int l = maxi(-nmax, mini(nmax - 1, near(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < 16; i++) L[i] = (int8_t)(nmax + maxi(-nmax, mini(nmax - 1, near(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void q6_k(const float *x, uint8_t *b) {
    int8_t L[256];
    float sc[16], max_sc = 0, max_abs = 0;
    for (int g = 0; g < 16; g++) {
        sc[g] = q6_group(x + 16 * g, L + 16 * g);
        if (fabsf(sc[g]) > max_abs) max_abs = fabsf(sc[g]), max_sc = sc[g];
    }
    memset(b, 0, 210);
    if (max_abs < GROUP_EPS) return; /* all zero: d = 0 */
    float iscale = -128.f / max_sc;
    put_f16(b + 208, 1 / iscale);
    float d = f16r(1 / iscale);
    for (int g = 0; g < 16; g++) {
        int ls = mini(127, near(iscale * sc[g]));
        b[192 + g] = (uint8_t)(int8_t)ls;
        float dg = d * (float)(int8_t)ls;
        if (dg == 0.0f) continue;
        for (int l = 0; l < 16; l++) L[16 * g + l] = (int8_t)(maxi(-32, mini(31, near(x[16 * g + l] / dg))) + 32);
    }
    /* 128-element halves: ql 64 bytes (elements l, l+32 low; l+64, l+96 high nibbles), qh 32 */
    for (int h = 0; h < 2; h++) {
        const int8_t *q = L + 128 * h;
        uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((q[l] & 15) | (q[l + 64] & 15) << 4);
            ql[l + 32] = (uint8_t)((q[l + 32] & 15) | (q[l + 96] & 15) << 4);
            qh[l] = (uint8_t)((q[l] >> 4) | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
        }
    }
}

typedef void (*qfn)(const float *x, uint8_t *b);

static qfn quantizer(sd_dtype dt) {
    switch (dt) {
    case SD_Q8_0: return q8_0;
    case SD_Q4_0: return q4_0;
    case SD_Q4_1: return q4_1;
    case SD_Q5_0: return q5_0;
    case SD_Q5_1: return q5_1;
    case SD_Q4_K: return q4_k;
    case SD_Q5_K: return q5_k;
    case SD_Q6_K: return q6_k;
    default: return NULL;
    }
}

int sd_quant_can_quantize(sd_dtype dt) { return quantizer(dt) != NULL; }

int sd_quant_quantize(sd_dtype dt, const float *src, void *dst, int64_t n) {
    qfn fn = quantizer(dt);
    if (!fn) return 0;
    int64_t blk = sd_dtype_block(dt), bs = (int64_t)sd_dtype_size(dt);
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / blk; i++) fn(src + i * blk, b + i * bs);
    return 1;
}
