/* samplers_torchmath.c - torch's float32 expm1 as an x86 AVX2 build computes
 * it for every element of a float tensor (one-element tensors included):
 * Sleef's 1-ulp expm1f (xexpm1f with expk2f, double-float arithmetic, FMA
 * where Sleef's AVX2 build has ENABLE_FMA_SP). models/sampling/rng.h has exp and log;
 * the samplers also need expm1 for h*phi_1(h) and friends. */
#include <math.h>
#include <string.h>
#include "models/sampling/sampler_internal.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

typedef struct smp_df {
    float x, y;
} smp_df;

/* x + y (double-float + float), any magnitudes */
static smp_df df_add2_f2f(smp_df x, float y)
{
    smp_df r;
    r.x = x.x + y;
    float v = r.x - x.x;
    float t = (x.x - (r.x - v)) + (y - v);
    r.y = t + x.y;
    return r;
}

/* x + y (double-float + double-float), any magnitudes */
static smp_df df_add2_f2f2(smp_df x, smp_df y)
{
    smp_df r;
    r.x = x.x + y.x;
    float v = r.x - x.x;
    float t = (x.x - (r.x - v)) + (y.x - v);
    r.y = t + (x.y + y.y);
    return r;
}

/* x + y, |x| >= |y| */
static smp_df df_add_ff2(float x, smp_df y)
{
    smp_df r;
    r.x = x + y.x;
    r.y = ((x - r.x) + y.x) + y.y;
    return r;
}

static smp_df df_mul_f2f(smp_df x, float y)
{
    smp_df r;
    r.x = x.x * y;
    r.y = fmaf(x.y, y, fmaf(x.x, y, -r.x));
    return r;
}

static smp_df df_mul_f2f2(smp_df x, smp_df y)
{
    smp_df r;
    r.x = x.x * y.x;
    r.y = fmaf(x.x, y.y, fmaf(x.y, y.x, fmaf(x.x, y.x, -r.x)));
    return r;
}

static smp_df df_sqr(smp_df x)
{
    smp_df r;
    r.x = x.x * x.x;
    r.y = fmaf(x.x + x.x, x.y, fmaf(x.x, x.x, -r.x));
    return r;
}

static float pow2i(int q)
{
    uint32_t u = (uint32_t)(q + 0x7f) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* vldexp2: d * 2^(e>>1) * 2^(e - (e>>1)) */
static float ldexp2(float d, int e)
{
    return (d * pow2i(e >> 1)) * pow2i(e - (e >> 1));
}

static smp_df expk2f(smp_df d)
{
    const float R_LN2f = 1.442695040888963407359924681001892137426645954152985934135449406931f;
    const float L2Uf = 0.693145751953125f, L2Lf = 1.428606765330187045e-06f;
    float u = (d.x + d.y) * R_LN2f;
    int q = (int)rintf(u);
    smp_df s = df_add2_f2f(d, (float)q * -L2Uf);
    s = df_add2_f2f(s, (float)q * -L2Lf);
    u = +0.1980960224e-3f;
    u = fmaf(u, s.x, +0.1394256484e-2f);
    u = fmaf(u, s.x, +0.8333456703e-2f);
    u = fmaf(u, s.x, +0.4166637361e-1f);
    smp_df t = df_add2_f2f(df_mul_f2f(s, u), +0.166666659414234244790680580464e+0f);
    t = df_add2_f2f(df_mul_f2f2(s, t), 0.5f);
    t = df_add2_f2f2(s, df_mul_f2f2(df_sqr(s), t));
    t = df_add_ff2(1.0f, t);
    t.x = ldexp2(t.x, q);
    t.y = ldexp2(t.y, q);
    if (d.x < -104.0f)
        t.x = t.y = 0.0f;
    return t;
}

float smp_expm1f(float a)
{
    if (a != a)
        return a;
    if (a > 88.72283172607421875f)
        return INFINITY;
    if (a < -16.635532333438687426013570f)
        return -1.0f;
    if (a == 0.0f)
        return a; /* keeps -0 */
    smp_df d = df_add2_f2f(expk2f((smp_df){a, 0.0f}), -1.0f);
    return d.x + d.y;
}
