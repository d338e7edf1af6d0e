/* test_dtype.c - float dtype conversions round to nearest, ties to even, as
 * torch's .to(torch.float16 / torch.bfloat16) does: exact ties in both
 * directions, overflow to infinity, subnormals, signed zero, NaN kept NaN
 * (never turned into an infinity by the rounding carry), every F16/BF16 value
 * round-trips through F32 exactly, and tensors convert element-wise with
 * reference counting intact; the finite check on stored bits finds one NaN
 * or Inf anywhere. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/dtype.h"
#include "core/tensor.h"
#include "testutil.h"

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_bf16(void) {
    static const struct { uint32_t in; uint16_t out; } cases[] = {
        {0x3F800000u, 0x3F80}, /* 1.0 */
        {0x3F808000u, 0x3F80}, /* tie between 0x3F80 and 0x3F81: even, down */
        {0x3F818000u, 0x3F82}, /* tie between 0x3F81 and 0x3F82: even, up */
        {0x3F808001u, 0x3F81}, /* just above the tie */
        {0x3F807FFFu, 0x3F80}, /* just below the tie */
        {0xBF818000u, 0xBF82}, /* negative ties the same way */
        {0x7F7FFFFFu, 0x7F80}, /* FLT_MAX rounds to +inf */
        {0x7F800000u, 0x7F80}, /* +inf */
        {0xFF800000u, 0xFF80}, /* -inf */
        {0x80000000u, 0x8000}, /* -0.0 keeps its sign */
        {0x00000001u, 0x0000}, /* smallest subnormal rounds to zero */
        {0x00018000u, 0x0002}, /* subnormal tie, to even */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t got = sd_f32_to_bf16(bits_f32(cases[i].in));
        CHECK_MSG(got == cases[i].out, "bf16(0x%08x) = 0x%04x, expected 0x%04x", cases[i].in, got,
                  cases[i].out);
    }
    /* NaNs stay NaN, also one whose payload sits only in the dropped bits */
    uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu};
    for (size_t i = 0; i < sizeof nans / sizeof *nans; i++)
        CHECK_MSG(isnan(sd_bf16_to_f32(sd_f32_to_bf16(bits_f32(nans[i])))), "bf16 of NaN 0x%08x is not NaN",
                  nans[i]);
    /* every bf16 value round-trips exactly through f32 */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = sd_bf16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        if (u != h << 16 || sd_f32_to_bf16(f) != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d bf16 values do not round-trip", bad);
}

static void test_f16(void) {
    static const struct { float in; uint16_t out; } cases[] = {
        {1.0f, 0x3C00},
        {-2.0f, 0xC000},
        {65504.0f, 0x7BFF},                 /* largest finite */
        {65519.0f, 0x7BFF},                 /* below the tie: stays finite */
        {65520.0f, 0x7C00},                 /* tie between 65504 and 65536: even = overflow = inf */
        {1e9f, 0x7C00},
        {-1e9f, 0xFC00},
        {1.0f + 1.0f / 2048, 0x3C00},       /* tie between 0x3C00 and 0x3C01: even, down */
        {1.0f + 3.0f / 2048, 0x3C02},       /* tie between 0x3C01 and 0x3C02: even, up */
        {1.0f + 1.0f / 2048 + 1.0f / 65536, 0x3C01}, /* above the tie */
        {0x1p-24f, 0x0001},                 /* smallest subnormal */
        {0x1p-25f, 0x0000},                 /* tie between 0 and 2^-24: even = 0 */
        {0x1.8p-25f, 0x0001},               /* 0.75 of the smallest subnormal: up */
        {0x1.8p-24f, 0x0002},               /* tie between 1 and 2 subnormal units: even, up */
        {0x1p-14f, 0x0400},                 /* smallest normal */
        {0x1.ff8p-15f, 0x03FF},             /* largest subnormal */
        {0x1.ffcp-15f, 0x0400},             /* it + half a unit: tie, even carries into the normal */
        {-0.0f, 0x8000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t got = sd_f32_to_f16(cases[i].in);
        CHECK_MSG(got == cases[i].out, "f16(%a) = 0x%04x, expected 0x%04x", (double)cases[i].in, got,
                  cases[i].out);
    }
    CHECK(isinf(sd_f16_to_f32(0x7C00)) && sd_f16_to_f32(0xFC00) < 0);
    CHECK(isnan(sd_f16_to_f32(sd_f32_to_f16(NAN))));
    CHECK(isnan(sd_f16_to_f32(sd_f32_to_f16(bits_f32(0x7F800001u))))); /* payload only in dropped bits */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = sd_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        if (sd_f32_to_f16(f) != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d f16 values do not round-trip", bad);
}

/* ---- fp8 --------------------------------------------------------------------
 * Decodes from the formats' definitions (sign, exponent, mantissa, bias)
 * computed here in double; encodes against the nearest representable value
 * found by search over that table (ties to the even code), with torch's
 * overflow rule: a value that rounds past the largest finite one becomes
 * NaN (e4m3fn) or inf (e5m2), never the largest finite one. */

static double f8_def(int code, int e4m3) {
    int mb = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, emax = e4m3 ? 15 : 31;
    double s = code & 0x80 ? -1.0 : 1.0;
    int e = (code & 0x7f) >> mb, m = code & ((1 << mb) - 1);
    if (e4m3 && e == emax && m == (1 << mb) - 1) return NAN;
    if (!e4m3 && e == emax) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexp((double)m / (1 << mb), 1 - bias);
    return s * ldexp(1.0 + (double)m / (1 << mb), e - bias);
}

/* Reference encoder: nearest of the finite positive codes, ties to even. */
static int f8_ref(float f, int e4m3) {
    int sign = signbit(f) ? 0x80 : 0;
    double a = fabs((double)f);
    int top = e4m3 ? 0x7e : 0x7b; /* largest finite code */
    if (isnan(f)) return 0x7f | sign;
    int best = 0;
    for (int c = 0; c <= top; c++) {
        double d = fabs(f8_def(c, e4m3) - a), db = fabs(f8_def(best, e4m3) - a);
        if (d < db || (d == db && (c & 1) == 0)) best = c;
    }
    /* past the largest finite: rounds "up" to the next code when nearer to
     * (or tied with, as that code is even) the value one step above */
    double maxv = f8_def(top, e4m3), step = maxv - f8_def(top - 1, e4m3);
    if (isinf(a) || a > maxv + step / 2 || (a == maxv + step / 2 && ((top + 1) & 1) == 0))
        best = e4m3 ? 0x7f : 0x7c;
    return best | sign;
}

static void test_f8(int e4m3) {
    const char *nm = e4m3 ? "e4m3fn" : "e5m2";
    const float *tab = e4m3 ? sd_f8_e4m3_table() : sd_f8_e5m2_table();
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        double want = f8_def(c, e4m3);
        float got = e4m3 ? sd_f8_e4m3_to_f32((uint8_t)c) : sd_f8_e5m2_to_f32((uint8_t)c);
        int same = isnan(want) ? isnan(got) && isnan(tab[c]) : (double)got == want && tab[c] == got &&
                                                                   !signbit(got) == !signbit(want);
        if (!same && bad++ < 5) CHECK_MSG(0, "%s decode 0x%02x: %g, want %g", nm, c, got, want);
        /* every non-NaN code round-trips */
        if (!isnan(want)) {
            uint8_t back = e4m3 ? sd_f32_to_f8_e4m3(got) : sd_f32_to_f8_e5m2(got);
            if (back != c && bad++ < 5) CHECK_MSG(0, "%s 0x%02x -> %g -> 0x%02x", nm, c, got, back);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d decode/round-trip failures", nm, bad);
    /* midpoints between neighbours and the floats just around them, both signs */
    bad = 0;
    int top = e4m3 ? 0x7e : 0x7b;
    for (int c = 0; c <= top; c++) {
        double lo = f8_def(c, e4m3);
        double hi = c < top ? f8_def(c + 1, e4m3) : lo + (lo - f8_def(c - 1, e4m3));
        float mid = (float)((lo + hi) / 2); /* exact in f32 */
        float probes[3] = {nextafterf(mid, 0.0f), mid, nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++)
            for (int sg = 0; sg < 2; sg++) {
                float f = sg ? -probes[k] : probes[k];
                int got = e4m3 ? sd_f32_to_f8_e4m3(f) : sd_f32_to_f8_e5m2(f);
                int want = f8_ref(f, e4m3);
                if (got != want && bad++ < 8)
                    CHECK_MSG(0, "%s encode %a: 0x%02x, want 0x%02x", nm, (double)f, got, want);
            }
    }
    /* a spread of ordinary values */
    uint32_t state = 12345;
    for (int i = 0; i < 20000; i++) {
        state = state * 1664525u + 1013904223u;
        float f = ldexpf((float)(state >> 8) / (float)(1 << 24), (int)(state % 40) - (e4m3 ? 12 : 20));
        if (state & 1) f = -f;
        int got = e4m3 ? sd_f32_to_f8_e4m3(f) : sd_f32_to_f8_e5m2(f);
        if (got != f8_ref(f, e4m3) && bad++ < 8)
            CHECK_MSG(0, "%s encode %a: 0x%02x, want 0x%02x", nm, (double)f, got, f8_ref(f, e4m3));
    }
    CHECK_MSG(bad == 0, "%s: %d encode failures", nm, bad);
}

static void test_f8_edges(void) {
    static const struct { float in; uint8_t e4m3, e5m2; } cases[] = {
        {448.0f, 0x7e, 0x5f},       /* e4m3fn max; e5m2 448 exact */
        {464.0f, 0x7e, 0x5f},       /* e4m3 tie 448|480(NaN): even = 448 */
        {464.5f, 0x7f, 0x5f},       /* e4m3: rounds past the max: NaN, not 448 (torch) */
        {1e6f, 0x7f, 0x7c},         /* e4m3: NaN; e5m2: inf */
        {-1e6f, 0xff, 0xfc},
        {57344.0f, 0x7f, 0x7b},     /* e5m2 max */
        {61439.0f, 0x7f, 0x7b},
        {61440.0f, 0x7f, 0x7c},     /* e5m2 tie max|inf: even = inf */
        {0x1p-9f, 0x01, 0x18},      /* e4m3 smallest subnormal */
        {0x1p-10f, 0x00, 0x14},     /* e4m3: tie 0|2^-9: even = 0 */
        {0x1.8p-10f, 0x01, 0x16},
        {0x1p-16f, 0x00, 0x01},     /* e5m2 smallest subnormal */
        {-0.0f, 0x80, 0x80},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t a = sd_f32_to_f8_e4m3(cases[i].in), b = sd_f32_to_f8_e5m2(cases[i].in);
        CHECK_MSG(a == cases[i].e4m3 && b == cases[i].e5m2, "fp8(%a) = 0x%02x/0x%02x, expected 0x%02x/0x%02x",
                  (double)cases[i].in, a, b, cases[i].e4m3, cases[i].e5m2);
    }
    CHECK(sd_f32_to_f8_e4m3(INFINITY) == 0x7f && sd_f32_to_f8_e4m3(-INFINITY) == 0xff);
    CHECK(sd_f32_to_f8_e4m3(NAN) == 0x7f && sd_f32_to_f8_e5m2(NAN) == 0x7f);
    CHECK(sd_f32_to_f8_e5m2(INFINITY) == 0x7c);
    CHECK(isnan(sd_f8_e4m3_to_f32(0x7f)) && isnan(sd_f8_e4m3_to_f32(0xff)));
    CHECK(sd_f8_e4m3_to_f32(0x7e) == 448.0f && sd_f8_e4m3_to_f32(0x01) == 0x1p-9f);
    /* names as safetensors writes them; size 1; floats */
    sd_dtype d;
    CHECK(sd_dtype_from_name("F8_E4M3", &d) == 0 && d == SD_F8_E4M3 && sd_dtype_size(d) == 1);
    CHECK(sd_dtype_from_name("F8_E5M2", &d) == 0 && d == SD_F8_E5M2 && sd_dtype_size(d) == 1);
    CHECK(sd_dtype_is_float(SD_F8_E4M3) && sd_dtype_is_narrow_float(SD_F8_E5M2) &&
          !sd_dtype_is_narrow_float(SD_F32));
    /* bulk conversion through F32 both ways, BF16 -> F8 rounding once */
    uint16_t bf[4] = {sd_f32_to_bf16(0.3f), sd_f32_to_bf16(-500.0f), sd_f32_to_bf16(1e-4f), 0};
    uint8_t q[4];
    float back[4];
    sd_dtype_convert(q, SD_F8_E4M3, bf, SD_BF16, 4);
    sd_dtype_convert(back, SD_F32, q, SD_F8_E4M3, 4);
    for (int i = 0; i < 4; i++) {
        uint8_t w = sd_f32_to_f8_e4m3(sd_bf16_to_f32(bf[i]));
        CHECK_MSG(q[i] == w, "bf16 -> e4m3 element %d: 0x%02x, want 0x%02x", i, q[i], w);
        float v = sd_f8_e4m3_to_f32(w);
        CHECK(isnan(v) ? isnan(back[i]) : back[i] == v);
    }
}

static void test_tensor_convert(void) {
    int64_t shape[2] = {2, 3};
    sd_tensor *t = sd_tensor_new(SD_F32, 2, shape);
    CHECK(t != NULL);
    if (!t) return;
    const float vals[6] = {1.0f, 1.0f + 3.0f / 2048, 65520.0f, -0.0f, 0x1p-25f, 0.333333f};
    memcpy(sd_tensor_f32(t), vals, sizeof vals);
    sd_tensor *h = sd_tensor_to_dtype(t, SD_F16);
    CHECK(h && h->dtype == SD_F16 && h->ndim == 2 && h->shape[0] == 2 && h->shape[1] == 3 && h->nbytes == 12);
    if (h) {
        const uint16_t *d = h->data;
        for (int i = 0; i < 6; i++) CHECK_MSG(d[i] == sd_f32_to_f16(vals[i]), "element %d", i);
        sd_tensor *back = sd_tensor_to_dtype(h, SD_F32);
        CHECK(back && back->dtype == SD_F32);
        if (back)
            for (int i = 0; i < 6; i++)
                CHECK_MSG(sd_tensor_f32(back)[i] == sd_f16_to_f32(sd_f32_to_f16(vals[i])), "back %d", i);
        sd_tensor_unref(back);
    }
    sd_tensor *b = sd_tensor_to_dtype(t, SD_BF16);
    CHECK(b && b->dtype == SD_BF16 && b->nbytes == 12);
    if (b)
        for (int i = 0; i < 6; i++) CHECK(((const uint16_t *)b->data)[i] == sd_f32_to_bf16(vals[i]));
    /* the same dtype is a copy, not a view */
    sd_tensor *c = sd_tensor_to_dtype(t, SD_F32);
    CHECK(c && c != t && c->data != t->data && memcmp(c->data, t->data, t->nbytes) == 0);
    sd_tensor_unref(c);
    sd_tensor_unref(b);
    sd_tensor_unref(h);
    sd_tensor_unref(t);
}

/* sd_dtype_all_finite on the stored bits: a single NaN or Inf anywhere (the
 * first element, inside a later scan block, a block's last element, the tail
 * after the last whole block) is found; the largest finite value of each type
 * is not taken for one. */
static void test_all_finite(void) {
    const size_t n = 3 * 4096 + 7;
    struct { sd_dtype t; size_t size; uint64_t big, inf, nan; } types[] = {
        {SD_F32, 4, 0x7f7fffffu, 0x7f800000u, 0x7fc00001u},
        {SD_F64, 8, 0x7fefffffffffffffull, 0xfff0000000000000ull, 0x7ff8000000000000ull},
        {SD_F16, 2, 0x7bff, 0xfc00, 0x7e01},
        {SD_BF16, 2, 0x7f7f, 0x7f80, 0xffc1},
        {SD_F8_E4M3, 1, 0x7e, 0x7f, 0xff}, /* e4m3fn has no inf: both codes are NaN */
        {SD_F8_E5M2, 1, 0x7b, 0x7c, 0xfe},
    };
    const size_t at[] = {0, 1, 4095, 4096, 2 * 4096 + 17, 3 * 4096 - 1, 3 * 4096, n - 1};
    unsigned char *buf = malloc(n * 8);
    CHECK(buf != NULL);
    if (!buf) return;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        size_t sz = types[k].size;
        for (size_t i = 0; i < n; i++) /* little-endian stores of the largest finite value */
            memcpy(buf + i * sz, &types[k].big, sz);
        CHECK_MSG(sd_dtype_all_finite(types[k].t, buf, n) == 1, "%s all finite",
                  sd_dtype_name(types[k].t));
        for (size_t a = 0; a < sizeof at / sizeof at[0]; a++)
            for (int which = 0; which < 2; which++) {
                uint64_t bad = which ? types[k].nan : types[k].inf;
                memcpy(buf + at[a] * sz, &bad, sz);
                CHECK_MSG(sd_dtype_all_finite(types[k].t, buf, n) == 0, "%s %s at %zu",
                          sd_dtype_name(types[k].t), which ? "NaN" : "Inf", at[a]);
                CHECK_MSG(sd_dtype_all_finite(types[k].t, buf, at[a]) == 1, "%s prefix before %zu",
                          sd_dtype_name(types[k].t), at[a]);
                memcpy(buf + at[a] * sz, &types[k].big, sz);
            }
    }
    CHECK(sd_dtype_all_finite(SD_I64, buf, n) == 1);
    free(buf);
}

int main(void) {
    test_bf16();
    test_f16();
    test_tensor_convert();
    test_f8(1);
    test_f8(0);
    test_f8_edges();
    test_all_finite();
    return sd_test_finish();
}
