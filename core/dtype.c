#include "dtype.h"
#include "quant.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

static const struct { const char *name; size_t size; int block; } info[SD_DTYPE_COUNT] = {
    [SD_F32] = {"F32", 4, 1}, [SD_F16] = {"F16", 2, 1}, [SD_BF16] = {"BF16", 2, 1},
    [SD_F64] = {"F64", 8, 1}, [SD_I64] = {"I64", 8, 1}, [SD_I32] = {"I32", 4, 1},
    [SD_I16] = {"I16", 2, 1}, [SD_I8] = {"I8", 1, 1},   [SD_U8] = {"U8", 1, 1},
    [SD_BOOL] = {"BOOL", 1, 1}, [SD_F8_E4M3] = {"F8_E4M3", 1, 1}, [SD_F8_E5M2] = {"F8_E5M2", 1, 1},
    /* GGML's block sizes (ggml-common.h); layouts in core/quant.c */
    [SD_Q4_0] = {"Q4_0", 18, 32},    [SD_Q4_1] = {"Q4_1", 20, 32},
    [SD_Q5_0] = {"Q5_0", 22, 32},    [SD_Q5_1] = {"Q5_1", 24, 32},
    [SD_Q8_0] = {"Q8_0", 34, 32},    [SD_Q2_K] = {"Q2_K", 84, 256},
    [SD_Q3_K] = {"Q3_K", 110, 256},  [SD_Q4_K] = {"Q4_K", 144, 256},
    [SD_Q5_K] = {"Q5_K", 176, 256},  [SD_Q6_K] = {"Q6_K", 210, 256},
    [SD_IQ4_NL] = {"IQ4_NL", 18, 32}, [SD_IQ4_XS] = {"IQ4_XS", 136, 256},
};

size_t sd_dtype_size(sd_dtype t) { return (unsigned)t < SD_DTYPE_COUNT ? info[t].size : 0; }
int sd_dtype_block(sd_dtype t) { return (unsigned)t < SD_DTYPE_COUNT ? info[t].block : 1; }
int sd_dtype_is_quantized(sd_dtype t) { return (unsigned)t < SD_DTYPE_COUNT && info[t].block > 1; }

size_t sd_dtype_nbytes(sd_dtype t, int64_t numel) {
    if ((unsigned)t >= SD_DTYPE_COUNT || numel < 0) return 0;
    return (size_t)numel / (size_t)info[t].block * info[t].size;
}
const char *sd_dtype_name(sd_dtype t) { return (unsigned)t < SD_DTYPE_COUNT ? info[t].name : "?"; }

int sd_dtype_from_name(const char *name, sd_dtype *out) {
    for (int i = 0; i < SD_DTYPE_COUNT; i++) {
        if (strcmp(name, info[i].name) == 0) { *out = (sd_dtype)i; return 0; }
    }
    return -1;
}

int sd_dtype_is_float(sd_dtype t) {
    return t == SD_F32 || t == SD_F64 || sd_dtype_is_narrow_float(t);
}

int sd_dtype_is_narrow_float(sd_dtype t) {
    return t == SD_F16 || t == SD_BF16 || t == SD_F8_E4M3 || t == SD_F8_E5M2;
}

/* A stored value is NaN or Inf when all its exponent bits are set (for
 * e4m3fn: the 0x7F code). The scan tests fixed-size blocks without an early
 * exit inside a block, so that the compiler vectorizes it at -O2: loaders
 * check every weight of a multi-GB checkpoint, and a per-element early-exit
 * loop made this check most of an SD1.5 UNet's load time. */
#define FINITE_BLOCK 4096
#define DEFINE_FINITE_SCAN(name, T, M)                                    \
    static int name(const T *p, size_t n) {                               \
        size_t i = 0;                                                     \
        for (; i + FINITE_BLOCK <= n; i += FINITE_BLOCK) {                \
            unsigned bad = 0;                                             \
            for (size_t k = 0; k < FINITE_BLOCK; k++)                     \
                bad |= (p[i + k] & (T)(M)) == (T)(M);                     \
            if (bad) return 0;                                            \
        }                                                                 \
        for (; i < n; i++)                                                \
            if ((p[i] & (T)(M)) == (T)(M)) return 0;                      \
        return 1;                                                         \
    }
DEFINE_FINITE_SCAN(finite_e4m3, uint8_t, 0x7f)
DEFINE_FINITE_SCAN(finite_e5m2, uint8_t, 0x7c)
DEFINE_FINITE_SCAN(finite_f16, uint16_t, 0x7c00)
DEFINE_FINITE_SCAN(finite_bf16, uint16_t, 0x7f80)
DEFINE_FINITE_SCAN(finite_f32, uint32_t, 0x7f800000u)
DEFINE_FINITE_SCAN(finite_f64, uint64_t, 0x7ff0000000000000ull)

int sd_dtype_all_finite(sd_dtype t, const void *data, size_t n) {
    switch (t) {
    case SD_F32: return finite_f32(data, n);
    case SD_F64: return finite_f64(data, n);
    case SD_F16: return finite_f16(data, n);
    case SD_BF16: return finite_bf16(data, n);
    case SD_F8_E4M3: return finite_e4m3(data, n);
    case SD_F8_E5M2: return finite_e5m2(data, n);
    default:
        if (sd_dtype_is_quantized(t)) return sd_quant_scales_finite(t, data, (int64_t)n);
        return 1; /* integers and bools have no NaN */
    }
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float sd_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return u2f(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return u2f(sign | 0x7f800000u | (man << 13));
    return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t sd_f32_to_f16(float f) {
    uint32_t u = f2u(f);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t exp = (u >> 23) & 0xff, man = u & 0x7fffff;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000;
        int shift = 14 - e;
        uint32_t half = 1u << (shift - 1);
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t r = man >> shift;
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++; /* may carry into exp: fine */
    return (uint16_t)(sign | r);
}

float sd_bf16_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

uint16_t sd_f32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* ---- 8-bit floats ---------------------------------------------------------- */

float sd_f8_e4m3_to_f32(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80) << 24;
    uint32_t exp = (b >> 3) & 0xf, man = b & 7;
    if (exp == 15 && man == 7) return u2f(sign | 0x7fc00000u);
    if (exp == 0) {
        float v = (float)man * 0.001953125f; /* m/8 * 2^-6 = m * 2^-9 */
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 120) << 23) | (man << 20));
}

/* e5m2 is the top byte of an IEEE half: the half decoder does the rest. */
float sd_f8_e5m2_to_f32(uint8_t b) { return sd_f16_to_f32((uint16_t)((uint16_t)b << 8)); }

static float e4m3_tab[256], e5m2_tab[256];
static void fill_tables(void) {
    for (int i = 0; i < 256; i++) {
        e4m3_tab[i] = sd_f8_e4m3_to_f32((uint8_t)i);
        e5m2_tab[i] = sd_f8_e5m2_to_f32((uint8_t)i);
    }
}
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

const float *sd_f8_e4m3_table(void) {
    pthread_once(&tables_once, fill_tables);
    return e4m3_tab;
}
const float *sd_f8_e5m2_table(void) {
    pthread_once(&tables_once, fill_tables);
    return e5m2_tab;
}

/* Both encoders use torch's bit recipe, so that the results are torch's:
 * below the smallest normal, adding a power of two whose f32 ulp equals the
 * fp8 subnormal step lets the FPU's own round-to-nearest-even round the
 * value into the low bits; above it, the exponent is rebiased and the
 * mantissa rounded by adding half an ulp minus one plus the kept
 * mantissa's low bit (ties to even), the carry running into the exponent
 * when the mantissa overflows. */
uint8_t sd_f32_to_f8_e4m3(float f) {
    uint32_t u = f2u(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    u &= 0x7fffffffu;
    uint8_t r;
    if (u >= 0x43f00000u) {          /* |f| >= 480, inf, NaN */
        r = 0x7f;
    } else if (u < 0x3c800000u) {    /* |f| < 2^-6: subnormal (or zero) result */
        const uint32_t magic = 141u << 23; /* 2^14: one e4m3 subnormal step = 2^-9 = its ulp */
        r = (uint8_t)(f2u(u2f(u) + u2f(magic)) - magic);
    } else {
        uint32_t odd = (u >> 20) & 1;
        u += ((uint32_t)(7 - 127) << 23) + 0x7ffffu + odd;
        r = (uint8_t)(u >> 20); /* 0x7f when it rounded up past 448: NaN, as torch */
    }
    return (uint8_t)(r | sign);
}

uint8_t sd_f32_to_f8_e5m2(float f) {
    uint32_t u = f2u(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    u &= 0x7fffffffu;
    uint8_t r;
    if (u >= 0x47800000u) {          /* |f| >= 65536, inf, NaN */
        r = u > 0x7f800000u ? 0x7f : 0x7c;
    } else if (u < 0x38800000u) {    /* |f| < 2^-14 */
        const uint32_t magic = 134u << 23; /* 2^7: ulp 2^-16 */
        r = (uint8_t)(f2u(u2f(u) + u2f(magic)) - magic);
    } else {
        uint32_t odd = (u >> 21) & 1;
        u += ((uint32_t)(15 - 127) << 23) + 0xfffffu + odd;
        r = (uint8_t)(u >> 21); /* rounding up from 57344 reaches 0x7c: inf */
    }
    return (uint8_t)(r | sign);
}

static double load(const void *p, sd_dtype t, size_t i) {
    switch (t) {
    case SD_F32: return ((const float *)p)[i];
    case SD_F16: return sd_f16_to_f32(((const uint16_t *)p)[i]);
    case SD_BF16: return sd_bf16_to_f32(((const uint16_t *)p)[i]);
    case SD_F64: return ((const double *)p)[i];
    case SD_I64: return (double)((const int64_t *)p)[i];
    case SD_I32: return ((const int32_t *)p)[i];
    case SD_I16: return ((const int16_t *)p)[i];
    case SD_I8: return ((const int8_t *)p)[i];
    case SD_U8: return ((const uint8_t *)p)[i];
    case SD_BOOL: return ((const uint8_t *)p)[i] != 0;
    case SD_F8_E4M3: return sd_f8_e4m3_to_f32(((const uint8_t *)p)[i]);
    case SD_F8_E5M2: return sd_f8_e5m2_to_f32(((const uint8_t *)p)[i]);
    default: return 0;
    }
}

static void store(void *p, sd_dtype t, size_t i, double v) {
    switch (t) {
    case SD_F32: ((float *)p)[i] = (float)v; break;
    case SD_F16: ((uint16_t *)p)[i] = sd_f32_to_f16((float)v); break;
    case SD_BF16: ((uint16_t *)p)[i] = sd_f32_to_bf16((float)v); break;
    case SD_F64: ((double *)p)[i] = v; break;
    case SD_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case SD_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case SD_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case SD_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case SD_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case SD_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case SD_F8_E4M3: ((uint8_t *)p)[i] = sd_f32_to_f8_e4m3((float)v); break;
    case SD_F8_E5M2: ((uint8_t *)p)[i] = sd_f32_to_f8_e5m2((float)v); break;
    default: break;
    }
}

void sd_dtype_convert(void *dst, sd_dtype dt, const void *src, sd_dtype st, size_t n) {
    if (dt == st) { memcpy(dst, src, sd_dtype_nbytes(dt, (int64_t)n)); return; }
    if (sd_dtype_is_quantized(dt)) return;
    if (sd_dtype_is_quantized(st)) {
        /* a block at a time through F32 (exact in every target float type
         * that holds it: the widened values are what ComfyUI-GGUF makes) */
        if (dt == SD_F32) {
            sd_quant_dequant(st, SD_DQ_F16, src, dst, (int64_t)n);
            return;
        }
        float tmp[256];
        size_t blk = (size_t)sd_dtype_block(st), bs = sd_dtype_size(st);
        for (size_t b = 0; b < n / blk; b++) {
            sd_quant_dequant(st, SD_DQ_F16, (const uint8_t *)src + b * bs, tmp, (int64_t)blk);
            for (size_t i = 0; i < blk; i++) store(dst, dt, b * blk + i, tmp[i]);
        }
        return;
    }
    /* Hot paths for weight loading: half types to F32 without going through
     * double (and without double rounding on the way back). */
    if (dt == SD_F32 && st == SD_F16) {
        const uint16_t *s = src; float *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = sd_f16_to_f32(s[i]);
        return;
    }
    if (dt == SD_F32 && st == SD_BF16) {
        const uint16_t *s = src; float *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = sd_bf16_to_f32(s[i]);
        return;
    }
    if (dt == SD_F16 && st == SD_F32) {
        const float *s = src; uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = sd_f32_to_f16(s[i]);
        return;
    }
    if (dt == SD_BF16 && st == SD_F32) {
        const float *s = src; uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = sd_f32_to_bf16(s[i]);
        return;
    }
    if (dt == SD_F32 && (st == SD_F8_E4M3 || st == SD_F8_E5M2)) {
        const uint8_t *s = src;
        const float *tab = st == SD_F8_E4M3 ? sd_f8_e4m3_table() : sd_f8_e5m2_table();
        float *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = tab[s[i]];
        return;
    }
    if (st == SD_I64 && (dt == SD_I32 || dt == SD_I64)) {
        const int64_t *s = src;
        for (size_t i = 0; i < n; i++) {
            if (dt == SD_I32) ((int32_t *)dst)[i] = (int32_t)s[i];
        }
        return;
    }
    for (size_t i = 0; i < n; i++) store(dst, dt, i, load(src, st, i));
}
