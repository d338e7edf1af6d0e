/* test_rng.c - properties of the torch generator port that need no goldens:
 * state carried across calls (the scalar cache), the 16-block tail rule,
 * seed reduction (> 2^32, negative), the standard MT19937 check value,
 * prepare_noise batch_index rules and argument errors.
 */
#include "testutil.h"
#include "models/sampling/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int same_bits(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Draw n normals from a fresh generator. */
static void fresh(uint64_t seed, float *out, int64_t n)
{
    sd_rng *r = sd_rng_new(seed);
    sd_rng_randn(r, out, n);
    sd_rng_free(r);
}

static void test_mt19937_standard(void)
{
    /* C++ [rand.predef]: the 10000th output of a default-constructed
     * std::mt19937 (seed 5489) is 4123659995. */
    sd_rng *r = sd_rng_new(5489);
    uint32_t v = 0;
    for (int i = 0; i < 10000; i++)
        v = sd_rng_next_u32(r);
    CHECK(v == 4123659995u);
    sd_rng_free(r);
}

static void test_scalar_cache(void)
{
    float a[7], b[7], whole[8];
    /* Two randn(7) calls == one randn(8) from the start: the 8th normal (the
     * sine of the 4th pair) waits in the cache for the next scalar call. */
    sd_rng *r = sd_rng_new(42);
    sd_rng_randn(r, a, 7);
    sd_rng_randn(r, b, 7);
    fresh(42, whole, 8);
    CHECK(same_bits(a, whole, 7));
    CHECK(same_bits(&b[0], &whole[7], 1));

    /* A vectorized call in between neither uses nor clears the cache. */
    float v[16], one;
    sd_rng_seed(r, 42);
    sd_rng_randn(r, a, 7);
    sd_rng_randn(r, v, 16);
    sd_rng_randn(r, &one, 1);
    CHECK(same_bits(&one, &whole[7], 1));

    /* manual_seed clears it. */
    sd_rng_seed(r, 42);
    sd_rng_randn(r, a, 7);
    sd_rng_seed(r, 42);
    sd_rng_randn(r, b, 7);
    CHECK(same_bits(a, b, 7));
    sd_rng_free(r);
}

static void test_vector_tail(void)
{
    /* randn(17): element 0 comes from the first block of uniforms 0..15;
     * elements 1..16 are regenerated from uniforms 17..32. */
    float x17[17], x16[16], tail[16];
    fresh(7, x17, 17);
    fresh(7, x16, 16);
    CHECK(same_bits(x17, x16, 1));
    sd_rng *r = sd_rng_new(7);
    for (int i = 0; i < 17; i++)
        (void)sd_rng_next_u32(r);
    sd_rng_randn(r, tail, 16);
    CHECK(same_bits(x17 + 1, tail, 16));
    /* Pairing is (j, j+8): same radius, so x[j]^2 + x[j+8]^2 is shared with
     * the scalar reconstruction -2 log(1-u). */
    sd_rng_seed(r, 7);
    float u[16];
    for (int i = 0; i < 16; i++)
        u[i] = sd_rng_uniform_float(r);
    for (int j = 0; j < 8; j++) {
        double r2 = (double)x16[j] * x16[j] + (double)x16[j + 8] * x16[j + 8];
        CHECK_MSG(fabs(r2 - (-2.0 * log(1.0 - (double)u[j]))) < 1e-4 * (1 + r2), "pair %d", j);
    }
    sd_rng_free(r);
}

static void test_seeds(void)
{
    float a[40], b[40], c[40], d[40];
    fresh(12345, a, 40);
    fresh(12345 + (UINT64_C(1) << 32), b, 40);
    fresh(12345 + (UINT64_C(7) << 40), c, 40);
    CHECK(same_bits(a, b, 40));
    CHECK(same_bits(a, c, 40));
    /* Negative python seeds wrap to uint64: -1 == 2^64-1 == 2^32-1. */
    fresh((uint64_t)(int64_t)-1, a, 40);
    fresh(UINT64_MAX, b, 40);
    fresh(UINT32_MAX, c, 40);
    fresh(0, d, 40);
    CHECK(same_bits(a, b, 40));
    CHECK(same_bits(a, c, 40));
    CHECK(!same_bits(a, d, 40));
    /* Scalar path too. */
    fresh((uint64_t)(int64_t)-5, a, 5);
    fresh(UINT32_MAX - 4, b, 5);
    CHECK(same_bits(a, b, 5));
}

static void test_uniforms_and_stats(void)
{
    sd_rng *r = sd_rng_new(3);
    for (int i = 0; i < 10000; i++) {
        float f = sd_rng_uniform_float(r);
        double g = sd_rng_uniform_double(r);
        CHECK(f >= 0.0f && f < 1.0f);
        CHECK(g >= 0.0 && g < 1.0);
    }
    enum { N = 1 << 16 };
    float *x = malloc(N * sizeof *x);
    sd_rng_randn(r, x, N);
    double m = 0, v = 0;
    for (int i = 0; i < N; i++) m += x[i];
    m /= N;
    for (int i = 0; i < N; i++) v += (x[i] - m) * (x[i] - m);
    v /= N;
    CHECK_MSG(fabs(m) < 0.02 && fabs(v - 1.0) < 0.03, "mean %g var %g", m, v);
    /* n <= 0 draws nothing. */
    uint32_t before, after;
    sd_rng_seed(r, 9);
    before = sd_rng_next_u32(r);
    sd_rng_seed(r, 9);
    sd_rng_randn(r, x, 0);
    sd_rng_randn(r, x, -3);
    after = sd_rng_next_u32(r);
    CHECK(before == after);
    free(x);
    sd_rng_free(r);
}

static void test_default_path(void)
{
    /* Same uniforms and pairing; only the float32 log/sin/cos differ. */
    float a[256], b[256];
    sd_rng *r = sd_rng_new(42);
    CHECK(sd_rng_get_path(r) == SD_RNG_PATH_AVX2);
    sd_rng_randn(r, a, 256);
    sd_rng_seed(r, 42);
    sd_rng_set_path(r, SD_RNG_PATH_DEFAULT);
    CHECK(sd_rng_get_path(r) == SD_RNG_PATH_DEFAULT);
    sd_rng_randn(r, b, 256);
    double worst = 0;
    for (int i = 0; i < 256; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]) / (1.0 + fabs((double)a[i])));
    CHECK_MSG(worst < 1e-6, "paths differ by %g", worst);
    sd_rng_free(r);
}

static void test_prepare_noise(void)
{
    /* C*H*W % 16 == 0: batch_index [0..B-1] equals one draw over the batch. */
    int64_t s1[4] = {2, 4, 8, 8};
    int64_t bi01[2] = {0, 1};
    sd_tensor *a = sd_noise_prepare(42, 4, s1, NULL, 0);
    sd_tensor *b = sd_noise_prepare(42, 4, s1, bi01, 2);
    CHECK(a && b);
    if (a && b)
        CHECK(same_bits(sd_tensor_f32(a), sd_tensor_f32(b), sd_tensor_numel(a)));
    sd_tensor_unref(a);
    sd_tensor_unref(b);

    /* Odd item size: per-item calls each regenerate their own tail, and
     * item k is draw number batch_index[k]. */
    int64_t s2[4] = {2, 4, 9, 9}, item = 4 * 9 * 9;
    int64_t bi20[2] = {2, 0}, bi11[2] = {1, 1};
    float *draws = malloc((size_t)(3 * item) * sizeof *draws);
    sd_rng *r = sd_rng_new(7);
    for (int i = 0; i < 3; i++)
        sd_rng_randn(r, draws + i * item, item);
    sd_rng_free(r);
    sd_tensor *c = sd_noise_prepare(7, 4, s2, bi20, 2);
    sd_tensor *d = sd_noise_prepare(7, 4, s2, bi11, 2);
    sd_tensor *e = sd_noise_prepare(7, 4, s2, NULL, 0);
    CHECK(c && d && e);
    if (c && d && e) {
        CHECK(same_bits(sd_tensor_f32(c), draws + 2 * item, item));
        CHECK(same_bits(sd_tensor_f32(c) + item, draws, item));
        CHECK(same_bits(sd_tensor_f32(d), draws + item, item));
        CHECK(same_bits(sd_tensor_f32(d) + item, draws + item, item));
        CHECK(same_bits(sd_tensor_f32(e), draws, 1)); /* same first block */
        CHECK(!same_bits(sd_tensor_f32(e) + item, draws + item, item));
    }
    sd_tensor_unref(c);
    sd_tensor_unref(d);
    sd_tensor_unref(e);
    free(draws);

    /* Argument errors. */
    int64_t neg[2] = {0, -1}, three[3] = {0, 1, 2};
    sd_error err;
    sd_tensor *t = (sd_tensor *)1;
    CHECK(sd_noise_prepare(1, 4, s2, neg, 2) == NULL);
    CHECK(sd_noise_prepare_ex(1, SD_RNG_PATH_AVX2, 4, s2, three, 3, &t, &err) == SD_ERR_INVALID);
    CHECK(t == NULL);
    CHECK(strstr(err.msg, "batch_index") != NULL);
    CHECK(sd_noise_prepare(1, 0, s2, NULL, 0) == NULL);
    int64_t bad[2] = {1, -4};
    CHECK(sd_noise_prepare(1, 2, bad, NULL, 0) == NULL);
}

/* The Sleef reproductions must stay within 1 ulp of the exact function
 * (Sleef's bound); bit-exactness itself is checked by the schedule goldens. */
static void test_torch_math(void)
{
    long n = 0, bad = 0;
    for (float x = -20.0f; x < 20.0f; x += 0.000731f, n++) {
        float e = sd_torch_expf(x), ee = (float)exp((double)x);
        float l = sd_torch_logf(fabsf(x) + 1e-6f), le = (float)log((double)(fabsf(x) + 1e-6f));
        bad += fabsf(e - ee) > fabsf(nextafterf(ee, INFINITY) - ee) * 1.01f;
        bad += fabsf(l - le) > fabsf(nextafterf(le, INFINITY) - le) * 1.01f;
        if (fabsf(x) < 1.5f) {
            float t = sd_torch_tanf(x), te = (float)tan((double)x);
            bad += fabsf(t - te) > fabsf(nextafterf(te, INFINITY) - te) * 1.01f;
        }
    }
    CHECK_MSG(bad == 0, "%ld of %ld values beyond 1 ulp", bad, n);
    CHECK(sd_torch_expf(0.0f) == 1.0f && sd_torch_logf(1.0f) == 0.0f && sd_torch_tanf(0.0f) == 0.0f);
    CHECK(sd_torch_expf(-200.0f) == 0.0f && isinf(sd_torch_expf(200.0f)));
    CHECK(isinf(sd_torch_logf(0.0f)) && sd_torch_logf(0.0f) < 0 && isnan(sd_torch_logf(-1.0f)));
    CHECK(fabsf(sd_torch_logf(1e-40f) - (float)log(1e-40)) < 1e-5f); /* subnormal input */
    CHECK(isnan(sd_torch_tanf(NAN)) && isnan(sd_torch_expf(NAN)));
}

int main(void)
{
    test_torch_math();
    test_mt19937_standard();
    test_scalar_cache();
    test_vector_tail();
    test_seeds();
    test_uniforms_and_stats();
    test_default_path();
    test_prepare_noise();
    return sd_test_finish();
}
