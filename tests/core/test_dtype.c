/* test_dtype.c - float dtype conversions round to nearest, ties to even, as
 * torch's .to(torch.float16 / torch.bfloat16) does: exact ties in both
 * directions, overflow to infinity, subnormals, signed zero, NaN kept NaN
 * (never turned into an infinity by the rounding carry), every F16/BF16 value
 * round-trips through F32 exactly, and tensors convert element-wise with
 * reference counting intact. */
#include <math.h>
#include <stdint.h>
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

int main(void) {
    test_bf16();
    test_f16();
    test_tensor_convert();
    return sd_test_finish();
}
