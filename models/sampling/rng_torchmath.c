/* rng_torchmath.c - torch's float32 exp/log/tan on x86 AVX2 CPUs, per element.
 *
 * torch applies these through Vectorized<float> (vec::map), so every element
 * of a float tensor -- a one-element tensor included -- goes through Sleef's
 * 1-ulp functions (expf8_u10, logf8_u10, tanf8_u10), not libm. They differ
 * from glibc on a few percent of inputs by 1 ulp, enough to change
 * schedule values and, at exact half-way timesteps, timestep(sigma).
 *
 * The algorithms below are Sleef's (Cody-Waite reduction, minimax
 * polynomials, double-float arithmetic), evaluated one lane at a time with
 * fmaf() wherever Sleef's AVX2 build uses an FMA (ENABLE_FMA_SP) and with
 * contraction off elsewhere, as Sleef itself is compiled.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "models/sampling/rng.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- double-float helpers (a value as an unevaluated sum hi + lo) --------- */

typedef struct df {
    float x, y;
} df;

/* x + y, exact error term, any magnitudes. */
static df df_add2_ff(float x, float y)
{
    df r;
    r.x = x + y;
    float v = r.x - x;
    r.y = (x - (r.x - v)) + (y - v);
    return r;
}

/* x + y assuming |x| >= |y|. */
static df df_add_ff(float x, float y)
{
    df r;
    r.x = x + y;
    r.y = (x - r.x) + y;
    return r;
}

static df df_add_ff2(float x, df y)
{
    df r;
    r.x = x + y.x;
    r.y = ((x - r.x) + y.x) + y.y;
    return r;
}

static df df_add_f2f(df x, float y)
{
    df r;
    r.x = x.x + y;
    r.y = ((x.x - r.x) + y) + x.y;
    return r;
}

static df df_add_f2f2(df x, df y)
{
    df r;
    r.x = x.x + y.x;
    r.y = (((x.x - r.x) + y.x) + x.y) + y.y;
    return r;
}

static df df_normalize(df t)
{
    df s;
    s.x = t.x + t.y;
    s.y = (t.x - s.x) + t.y;
    return s;
}

static df df_sqr(df x)
{
    df r;
    r.x = x.x * x.x;
    r.y = fmaf(x.x + x.x, x.y, fmaf(x.x, x.x, -r.x));
    return r;
}

static df df_mul_f2f2(df x, df y)
{
    df r;
    r.x = x.x * y.x;
    r.y = fmaf(x.x, y.y, fmaf(x.y, y.x, fmaf(x.x, y.x, -r.x)));
    return r;
}

static df df_mul_f2f(df x, float y)
{
    df r;
    r.x = x.x * y;
    r.y = fmaf(x.y, y, fmaf(x.x, y, -r.x));
    return r;
}

static df df_div(df n, df d)
{
    df q;
    float t = 1.0f / d.x;
    q.x = n.x * t;
    float u = fmaf(t, n.x, -q.x);
    q.y = fmaf(-d.y, t, fmaf(-d.x, t, 1.0f));
    q.y = fmaf(q.x, q.y, fmaf(n.y, t, u));
    return q;
}

static df df_rec(df d)
{
    df q;
    q.x = 1.0f / d.x;
    q.y = q.x * fmaf(-d.y, q.x, fmaf(-d.x, q.x, 1.0f));
    return q;
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- exp --------------------------------------------------------------------- */

float sd_torch_expf(float d)
{
    if (d != d)
        return d;
    if (d < -104.0f)
        return 0.0f;
    if (d > 100.0f)
        return INFINITY;
    /* d = q*ln2 + s, ln2 split in two (Cody-Waite); degree-6 polynomial. */
    float qf = rintf(d * 1.442695040888963407359924681001892137426645954152985934135449406931f);
    int q = (int)qf;
    float s = fmaf(qf, -0.693145751953125f, d);
    s = fmaf(qf, -1.428606765330187045e-06f, s);
    float u = 0.000198527617612853646278381f;
    u = fmaf(u, s, 0.00139304355252534151077271f);
    u = fmaf(u, s, 0.00833336077630519866943359f);
    u = fmaf(u, s, 0.0416664853692054748535156f);
    u = fmaf(u, s, 0.166666671633720397949219f);
    u = fmaf(u, s, 0.5f);
    u = 1.0f + fmaf(s * s, u, s);
    return ldexpf(u, q); /* exact scaling (Sleef splits it in two steps) */
}

/* ---- log --------------------------------------------------------------------- */

float sd_torch_logf(float d)
{
    if (d != d || d < 0.0f)
        return NAN;
    if (d == 0.0f)
        return -INFINITY;
    if (isinf(d))
        return INFINITY;
    int sub = d < FLT_MIN;
    if (sub)
        d = d * (float)(UINT64_C(1) << 32) * (float)(UINT64_C(1) << 32);
    /* d = m * 2^e with m in [0.75, 1.5). */
    int e = (int)((f2u(d * (1.0f / 0.75f)) >> 23) & 0xff) - 0x7f;
    float m = u2f(f2u(d) + (uint32_t)((uint32_t)(-e) << 23));
    if (sub)
        e -= 64;
    float ef = (float)e;
    df s = df_mul_f2f((df){0.69314718246459960938f, -1.904654323148236017e-09f}, ef);
    /* log m = 2 atanh(x), x = (m - 1) / (m + 1), in double-float. */
    df x = df_div(df_add2_ff(-1.0f, m), df_add2_ff(1.0f, m));
    float x2 = x.x * x.x;
    float t = 0.3027294874f;
    t = fmaf(t, x2, 0.3996108174f);
    t = fmaf(t, x2, 0.6666694880f);
    s = df_add_f2f2(s, (df){x.x * 2.0f, x.y * 2.0f});
    s = df_add_f2f(s, (x2 * x.x) * t);
    return s.x + s.y;
}

/* ---- tan --------------------------------------------------------------------- */

float sd_torch_tanf(float d)
{
    if (d != d || isinf(d))
        return NAN;
    if (fabsf(d) >= 125.0f) /* Sleef's large-argument reduction is not ported */
        return (float)tan((double)d);
    /* Reduce by multiples of pi/2 (pi split in three). */
    float u = rintf(d * (float)(2 * 0.318309886183790671537767526745028724));
    int q = (int)u;
    float v = fmaf(u, -3.1414794921875f * 0.5f, d);
    df s = df_add2_ff(v, u * (-0.00011315941810607910156f * 0.5f));
    s = df_add_f2f(s, u * (-1.9841872589410058936e-09f * 0.5f));
    if (q & 1) {
        s.x = -s.x;
        s.y = -s.y;
    }
    df t = s;
    s = df_normalize(df_sqr(s));
    u = 0.00446636462584137916564941f;
    u = fmaf(u, s.x, -8.3920182078145444393158e-05f);
    u = fmaf(u, s.x, 0.0109639242291450500488281f);
    u = fmaf(u, s.x, 0.0212360303848981857299805f);
    u = fmaf(u, s.x, 0.0540687143802642822265625f);
    df x = df_add_ff(0.133325666189193725585938f, u * s.x);
    x = df_add_ff2(1.0f, df_mul_f2f2(df_add_ff2(0.33333361148834228515625f, df_mul_f2f2(s, x)), s));
    x = df_mul_f2f2(t, x);
    if (q & 1)
        x = df_rec(x); /* tan(y + pi/2) = -1/tan(y); the sign went in above */
    float r = x.x + x.y;
    if (d == 0.0f)
        r = d; /* keeps -0 */
    return r;
}
