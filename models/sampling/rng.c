/* rng.c - torch CPU generator (MT19937) and torch.randn float32, bit-exact.
 *
 * Every float operation below is written in the order and with the rounding
 * torch 1.13 uses on x86-64 Linux; where GCC fused a multiply-add inside
 * torch (avx_mathfun.h compiled with -mfma) we call fmaf() explicitly, and
 * everywhere else contraction is switched off so this compiler does not fuse
 * on its own (a single fused op changes the last bit of ~1% of the values).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "models/sampling/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MT_N 624
#define MT_M 397

struct sd_rng {
    uint32_t mt[MT_N];
    int mti;
    int have_cached; /* scalar (double) path's second Box-Muller value */
    double cached;
    sd_rng_path path;
};

/* ---- MT19937 ------------------------------------------------------------- */

void sd_rng_seed(sd_rng *r, uint64_t seed)
{
    /* torch keeps only the low 32 bits of the 64-bit seed. */
    r->mt[0] = (uint32_t)(seed & 0xffffffffu);
    for (int i = 1; i < MT_N; i++)
        r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->mti = MT_N;
    r->have_cached = 0;
    r->cached = 0.0;
}

static void mt_twist(sd_rng *r)
{
    uint32_t *mt = r->mt;
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (mt[i] & 0x80000000u) | (mt[(i + 1) % MT_N] & 0x7fffffffu);
        uint32_t v = mt[(i + MT_M) % MT_N] ^ (y >> 1);
        if (y & 1u)
            v ^= 0x9908b0dfu;
        mt[i] = v;
    }
    r->mti = 0;
}

uint32_t sd_rng_next_u32(sd_rng *r)
{
    if (r->mti >= MT_N)
        mt_twist(r);
    uint32_t y = r->mt[r->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

float sd_rng_uniform_float(sd_rng *r)
{
    uint32_t x = sd_rng_next_u32(r) & 0xffffffu;
    return (float)x * 0x1p-24f; /* exact: 24-bit integer times a power of two */
}

double sd_rng_uniform_double(sd_rng *r)
{
    uint64_t hi = sd_rng_next_u32(r);
    uint64_t lo = sd_rng_next_u32(r);
    uint64_t x = ((hi << 32) | lo) & ((UINT64_C(1) << 53) - 1);
    return (double)x * 0x1p-53;
}

sd_rng *sd_rng_new(uint64_t seed)
{
    sd_rng *r = malloc(sizeof *r);
    if (!r)
        return NULL;
    r->path = SD_RNG_PATH_AVX2;
    sd_rng_seed(r, seed);
    return r;
}

void sd_rng_free(sd_rng *r) { free(r); }

void sd_rng_set_path(sd_rng *r, sd_rng_path path) { r->path = path; }

sd_rng_path sd_rng_get_path(const sd_rng *r) { return r->path; }

/* ---- avx_mathfun float32 log / sincos, one lane at a time ------------------ */

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Cephes logf as in avx_mathfun.h log256_ps, with torch's FMA contractions. */
static float mathfun_logf(float x)
{
    uint32_t invalid = (x <= 0.0f) ? 0xffffffffu : 0u;
    if (x < 0x1p-126f || x != x)
        x = (x != x) ? x : 0x1p-126f; /* max(x, FLT_MIN), as _mm256_max_ps */
    uint32_t bits = f2u(x);
    int32_t imm0 = (int32_t)(bits >> 23);
    float m = u2f((bits & ~0x7f800000u) | f2u(0.5f));
    imm0 -= 0x7f;
    float e = (float)imm0;
    e = e + 1.0f;
    float xr;
    if (m < 0.707106781186547524f) {
        e = e - 1.0f;
        xr = (m - 1.0f) + m;
    } else {
        xr = m - 1.0f;
    }
    float z = xr * xr;
    float y = 7.0376836292E-2f;
    y = fmaf(y, xr, -1.1514610310E-1f);
    y = fmaf(y, xr, 1.1676998740E-1f);
    y = fmaf(y, xr, -1.2420140846E-1f);
    y = fmaf(y, xr, 1.4249322787E-1f);
    y = fmaf(y, xr, -1.6668057665E-1f);
    y = fmaf(y, xr, 2.0000714765E-1f);
    y = fmaf(y, xr, -2.4999993993E-1f);
    y = fmaf(y, xr, 3.3333331174E-1f);
    y = y * xr;
    y = fmaf(y, z, e * -2.12194440e-4f);
    y = y - z * 0.5f;
    float res = fmaf(e, 0.693359375f, xr + y);
    return u2f(f2u(res) | invalid);
}

/* Cephes sincosf as in avx_mathfun.h sincos256_ps, with torch's FMAs. */
static void mathfun_sincosf(float xin, float *s, float *c)
{
    uint32_t sign_sin = f2u(xin) & 0x80000000u;
    float x = u2f(f2u(xin) & 0x7fffffffu);
    float yf = x * 1.27323954473516f;
    int32_t j = (int32_t)yf; /* truncation, as _mm256_cvttps_epi32 */
    j = (j + 1) & ~1;
    yf = (float)j;
    uint32_t swap_sign_sin = ((uint32_t)j & 4u) << 29;
    uint32_t poly_mask = ((j & 2) == 0) ? 0xffffffffu : 0u;
    x = fmaf(yf, -0.78515625f, x);
    x = fmaf(yf, -2.4187564849853515625e-4f, x);
    x = fmaf(yf, -3.77489497744594108e-8f, x);
    uint32_t sign_cos = ((~(uint32_t)(j - 2)) & 4u) << 29;
    sign_sin ^= swap_sign_sin;

    float z = x * x;
    float yc = 2.443315711809948E-5f;
    yc = fmaf(yc, z, -1.388731625493765E-3f);
    yc = fmaf(yc, z, 4.166664568298827E-2f);
    yc = yc * z;
    yc = fmaf(yc, z, -(z * 0.5f));
    yc = yc + 1.0f;

    float ys = -1.9515295891E-4f;
    ys = fmaf(ys, z, 8.3321608736E-3f);
    ys = fmaf(ys, z, -1.6666654611E-1f);
    ys = ys * z;
    ys = fmaf(ys, x, x);

    /* Select with masks and adds exactly as the SIMD code does (it matters
     * only for the sign of zero). */
    float ysin2 = u2f(poly_mask & f2u(ys));
    float ysin1 = u2f(~poly_mask & f2u(yc));
    float y2 = ys - ysin2;
    float y1 = yc - ysin1;
    float xsin = ysin1 + ysin2;
    float xcos = y1 + y2;
    *s = u2f(f2u(xsin) ^ sign_sin);
    *c = u2f(f2u(xcos) ^ sign_cos);
}

/* ---- torch.randn ----------------------------------------------------------- */

/* normal_fill_16: u[0..15] uniforms in, normals out (in place). */
static void fill16(float *d, sd_rng_path path)
{
    const float two_pi = (float)(2.0 * 3.14159265358979323846);
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - d[j];
        float u2 = d[j + 8];
        float radius, s, c;
        if (path == SD_RNG_PATH_AVX2) {
            radius = sqrtf(-2.0f * mathfun_logf(u1));
            mathfun_sincosf(two_pi * u2, &s, &c);
        } else {
            radius = sqrtf(-2.0f * logf(u1));
            float theta = (float)(2.0 * 3.14159265358979323846 * (double)u2);
            c = cosf(theta);
            s = sinf(theta);
        }
        d[j] = radius * c;
        d[j + 8] = radius * s;
    }
}

static void randn_vectorized(sd_rng *r, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = sd_rng_uniform_float(r);
    for (int64_t i = 0; i + 16 <= n; i += 16)
        fill16(out + i, r->path);
    if (n % 16 != 0) {
        /* torch regenerates the last 16 outputs from fresh uniforms. */
        float *tail = out + n - 16;
        for (int i = 0; i < 16; i++)
            tail[i] = sd_rng_uniform_float(r);
        fill16(tail, r->path);
    }
}

/* at::normal_distribution<double> with the generator's cached second value. */
static double normal_double(sd_rng *r)
{
    if (r->have_cached) {
        r->have_cached = 0;
        return r->cached;
    }
    double u1 = sd_rng_uniform_double(r);
    double u2 = sd_rng_uniform_double(r);
    /* torch 1.13 writes log(1 - u2); newer torch log1p(-u2) (same floats in practice). */
    double radius = sqrt(-2.0 * log(1.0 - u2));
    double theta = 2.0 * 3.14159265358979323846 * u1;
    r->cached = radius * sin(theta);
    r->have_cached = 1;
    return radius * cos(theta);
}

void sd_rng_randn(sd_rng *r, float *out, int64_t n)
{
    if (n <= 0)
        return;
    if (n >= 16) {
        randn_vectorized(r, out, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)normal_double(r);
}

void sd_rng_randn_serial(sd_rng *r, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)normal_double(r);
}

/* ---- comfy.sample.prepare_noise ------------------------------------------- */

sd_status sd_noise_prepare_ex(uint64_t seed, sd_rng_path path, int ndim,
                              const int64_t *shape, const int64_t *batch_index,
                              size_t n_batch_index, sd_tensor **out,
                              sd_error *err)
{
    return sd_noise_prepare_rng(seed, path, ndim, shape, batch_index, n_batch_index, out, NULL, err);
}

sd_status sd_noise_prepare_rng(uint64_t seed, sd_rng_path path, int ndim,
                               const int64_t *shape, const int64_t *batch_index,
                               size_t n_batch_index, sd_tensor **out,
                               sd_rng **rng_after, sd_error *err)
{
    *out = NULL;
    if (rng_after)
        *rng_after = NULL;
    if (ndim < 1 || ndim > SD_MAX_DIMS || !shape)
        return sd_error_set(err, SD_ERR_INVALID,
                            "prepare_noise: bad latent rank %d", ndim);
    int64_t item = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return sd_error_set(err, SD_ERR_INVALID,
                                "prepare_noise: negative dimension %d", i);
        if (i > 0)
            item *= shape[i];
    }
    if (batch_index && n_batch_index > 0 && (int64_t)n_batch_index != shape[0])
        return sd_error_set(err, SD_ERR_INVALID,
                            "prepare_noise: batch_index has %zu entries for a "
                            "batch of %lld", n_batch_index, (long long)shape[0]);
    int64_t max_index = -1;
    if (batch_index && n_batch_index > 0) {
        for (size_t k = 0; k < n_batch_index; k++) {
            if (batch_index[k] < 0)
                return sd_error_set(err, SD_ERR_INVALID,
                                    "prepare_noise: batch_index[%zu] = %lld is "
                                    "negative", k, (long long)batch_index[k]);
            if (batch_index[k] > max_index)
                max_index = batch_index[k];
        }
    }

    sd_tensor *t = sd_tensor_new(SD_F32, ndim, shape);
    sd_rng *r = sd_rng_new(seed);
    float *draw = NULL;
    if (max_index >= 0 && t && r)
        draw = malloc((size_t)(item > 0 ? item : 1) * sizeof *draw);
    if (!t || !r || (max_index >= 0 && !draw)) {
        sd_tensor_unref(t);
        sd_rng_free(r);
        free(draw);
        return sd_error_set(err, SD_ERR_NOMEM, "prepare_noise: out of memory");
    }
    sd_rng_set_path(r, path);
    float *dst = sd_tensor_f32(t);
    if (max_index < 0) {
        sd_rng_randn(r, dst, sd_tensor_numel(t));
    } else {
        /* One randn([1, ...]) per index up to the largest; an index can be
         * used by several output items, so copy each draw to every taker. */
        for (int64_t i = 0; i <= max_index; i++) {
            sd_rng_randn(r, draw, item);
            for (size_t k = 0; k < n_batch_index; k++)
                if (batch_index[k] == i)
                    memcpy(dst + (int64_t)k * item, draw, (size_t)item * sizeof *draw);
        }
    }
    free(draw);
    if (rng_after)
        *rng_after = r;
    else
        sd_rng_free(r);
    *out = t;
    return SD_OK;
}

sd_tensor *sd_noise_prepare(uint64_t seed, int ndim, const int64_t *shape,
                            const int64_t *batch_index, size_t n_batch_index)
{
    sd_tensor *t = NULL;
    if (sd_noise_prepare_ex(seed, SD_RNG_PATH_AVX2, ndim, shape, batch_index,
                            n_batch_index, &t, NULL) != SD_OK)
        return NULL;
    return t;
}
