/* test_canny.c - sd_canny on synthetic images: step edges in both
 * directions (position and magnitude against an independent computation),
 * flat images, thresholds and hysteresis, batches, 1-channel input and the
 * input errors. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/image/canny.h"

/* Image [B, H, W, 3] from f(b, y, x). */
static sd_tensor *image(int64_t B, int64_t H, int64_t W, float (*f)(int64_t, int64_t, int64_t)) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 4, B, H, W, 3);
    float *d = sd_tensor_f32(t);
    for (int64_t b = 0; b < B; b++)
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++)
                for (int c = 0; c < 3; c++) d[((b * H + y) * W + x) * 3 + c] = f(b, y, x);
    return t;
}

static float edge(const sd_tensor *e, int64_t b, int64_t y, int64_t x) {
    return sd_tensor_f32(e)[((b * e->shape[1] + y) * e->shape[2] + x) * 3];
}

/* Vertical step at column 8 with a half-grey column (a unique maximum). */
static float vstep(int64_t b, int64_t y, int64_t x) {
    (void)b, (void)y;
    return x < 8 ? 0.0f : x == 8 ? 0.5f : 1.0f;
}
static float hstep(int64_t b, int64_t y, int64_t x) {
    (void)b, (void)x;
    return y < 6 ? 0.2f : y == 6 ? 0.5f : 0.8f;
}
static float flat(int64_t b, int64_t y, int64_t x) {
    (void)b, (void)y, (void)x;
    return 0.6f;
}
/* A vertical edge whose contrast fades down the image: strong at the top,
 * weak below, one connected chain. */
static float fading(int64_t b, int64_t y, int64_t x) {
    (void)b;
    return (1.0f - 0.06f * (float)y) * vstep(0, 0, x);
}
static float batch2(int64_t b, int64_t y, int64_t x) { return b == 0 ? vstep(b, y, x) : hstep(b, y, x); }

/* Expected gradient magnitude at the centre column of vstep, computed
 * directly in double: blur rows with the normalised 5-tap Gaussian, then
 * 4 * (b[c+1] - b[c-1]) (Sobel rows weigh 1+2+1). */
static double expected_center_mag(void) {
    double k[5], s = 0;
    for (int i = 0; i < 5; i++) s += (k[i] = exp(-(double)((i - 2) * (i - 2)) / 2.0));
    double b[3];
    for (int c = 7; c <= 9; c++) {
        double v = 0;
        for (int j = 0; j < 5; j++) v += k[j] / s * vstep(0, 0, c + j - 2);
        b[c - 7] = v;
    }
    double gx = 4 * (b[2] - b[0]);
    return sqrt(gx * gx + 1e-6);
}

static void test_vertical_step(void) {
    sd_error err;
    sd_tensor *img = image(1, 12, 16, vstep), *e = NULL, *m = NULL;
    CHECK_OK(sd_canny(img, 0.4, 0.8, &e, &m, &err), &err);
    if (e && m) {
        CHECK(e->ndim == 4 && e->shape[0] == 1 && e->shape[1] == 12 && e->shape[2] == 16 && e->shape[3] == 3);
        for (int64_t y = 0; y < 12; y++)
            for (int64_t x = 0; x < 16; x++) {
                float v = edge(e, 0, y, x);
                CHECK_MSG(v == (x == 8 ? 1.0f : 0.0f), "vertical step: edge(%lld, %lld) = %g", (long long)y,
                          (long long)x, v);
                float *px = sd_tensor_f32(e) + (y * 16 + x) * 3;
                CHECK(px[0] == px[1] && px[1] == px[2]);
            }
        double want = expected_center_mag();
        double got = sd_tensor_f32(m)[5 * 16 + 8];
        CHECK_MSG(fabs(got - want) < 1e-5, "centre magnitude %g, expected %g", got, want);
        /* suppressed beside the edge */
        CHECK(sd_tensor_f32(m)[5 * 16 + 7] == 0.0f && sd_tensor_f32(m)[5 * 16 + 9] == 0.0f);
    }
    sd_tensor_unref(img);
    sd_tensor_unref(e);
    sd_tensor_unref(m);
}

static void test_horizontal_step_and_flat(void) {
    sd_error err;
    sd_tensor *img = image(1, 13, 10, hstep), *e = NULL;
    /* contrast 0.6: centre magnitude 0.6 * the unit-step value */
    double mag = 0.6 * expected_center_mag();
    CHECK_OK(sd_canny(img, 0.5 * mag, 0.9 * mag, &e, NULL, &err), &err);
    for (int64_t y = 0; e && y < 13; y++)
        for (int64_t x = 0; x < 10; x++)
            CHECK_MSG(edge(e, 0, y, x) == (y == 6 ? 1.0f : 0.0f), "horizontal step: edge(%lld, %lld)",
                      (long long)y, (long long)x);
    sd_tensor_unref(e);
    /* above the magnitude: nothing */
    CHECK_OK(sd_canny(img, 1.1 * mag, 1.2 * mag, &e, NULL, &err), &err);
    int any = 0;
    for (int64_t i = 0; e && i < sd_tensor_numel(e); i++) any |= sd_tensor_f32(e)[i] != 0.0f;
    CHECK_MSG(!any, "edges above the threshold");
    sd_tensor_unref(e);
    sd_tensor_unref(img);

    img = image(1, 9, 9, flat);
    CHECK_OK(sd_canny(img, 0.01, 0.02, &e, NULL, &err), &err);
    any = 0;
    for (int64_t i = 0; e && i < sd_tensor_numel(e); i++) any |= sd_tensor_f32(e)[i] != 0.0f;
    CHECK_MSG(!any, "a flat image has edges");
    sd_tensor_unref(e);
    sd_tensor_unref(img);
}

static void test_hysteresis(void) {
    sd_error err;
    sd_tensor *img = image(1, 12, 16, fading), *e = NULL, *m = NULL;
    CHECK_OK(sd_canny(img, 0.01, 100.0, &e, &m, &err), &err);
    if (!m) return;
    const float *mg = sd_tensor_f32(m);
    for (int64_t y = 1; y < 12; y++)
        CHECK_MSG(mg[y * 16 + 8] < mg[(y - 1) * 16 + 8] && mg[y * 16 + 8] > 0, "fading edge magnitude row %lld",
                  (long long)y);
    sd_tensor_unref(e);
    /* rows 0-4 strong, 5-11 weak but connected: all kept */
    double high = mg[5 * 16 + 8], low = 0.5 * mg[11 * 16 + 8];
    CHECK_OK(sd_canny(img, low, high, &e, NULL, &err), &err);
    for (int64_t y = 0; e && y < 12; y++)
        for (int64_t x = 0; x < 16; x++)
            CHECK_MSG(edge(e, 0, y, x) == (x == 8 ? 1.0f : 0.0f), "hysteresis: edge(%lld, %lld)", (long long)y,
                      (long long)x);
    sd_tensor_unref(e);
    /* low at row 8's magnitude: rows 8-11 are not even weak */
    CHECK_OK(sd_canny(img, mg[8 * 16 + 8], high, &e, NULL, &err), &err);
    for (int64_t y = 0; e && y < 12; y++)
        CHECK_MSG(edge(e, 0, y, 8) == (y < 8 ? 1.0f : 0.0f), "row %lld with low = row 8's magnitude",
                  (long long)y);
    sd_tensor_unref(e);
    /* nothing strong: hysteresis drops every weak pixel */
    CHECK_OK(sd_canny(img, low, mg[8] * 1.01, &e, NULL, &err), &err);
    int any = 0;
    for (int64_t i = 0; e && i < sd_tensor_numel(e); i++) any |= sd_tensor_f32(e)[i] != 0.0f;
    CHECK_MSG(!any, "weak edges without a strong one survived");
    sd_tensor_unref(e);
    sd_tensor_unref(m);
    sd_tensor_unref(img);
}

static void test_batch_gray_errors(void) {
    sd_error err;
    sd_tensor *img = image(2, 13, 16, batch2), *e = NULL;
    double mag = 0.6 * expected_center_mag();
    CHECK_OK(sd_canny(img, 0.5 * mag, 0.9 * mag, &e, NULL, &err), &err);
    if (e) {
        CHECK(e->shape[0] == 2);
        CHECK(edge(e, 0, 3, 8) == 1.0f && edge(e, 0, 3, 3) == 0.0f); /* item 0: vertical */
        CHECK(edge(e, 1, 6, 3) == 1.0f && edge(e, 1, 3, 3) == 0.0f); /* item 1: horizontal */
    }
    sd_tensor_unref(e);
    sd_tensor_unref(img);

    /* one channel = the gray image itself */
    sd_tensor *g = sd_tensor_new4(SD_F32, 4, 1, 12, 16, 1);
    for (int64_t y = 0; y < 12; y++)
        for (int64_t x = 0; x < 16; x++) sd_tensor_f32(g)[y * 16 + x] = vstep(0, y, x);
    CHECK_OK(sd_canny(g, 0.4, 0.8, &e, NULL, &err), &err);
    CHECK(e && e->shape[3] == 3 && edge(e, 0, 4, 8) == 1.0f && edge(e, 0, 4, 7) == 0.0f);
    sd_tensor_unref(e);
    sd_tensor_unref(g);

    sd_tensor *tiny = sd_tensor_new4(SD_F32, 4, 1, 2, 2, 3);
    CHECK(sd_canny(tiny, 0.1, 0.2, &e, NULL, &err) == SD_ERR_INVALID && e == NULL);
    sd_tensor_unref(tiny);
    sd_tensor *rgba = sd_tensor_new4(SD_F32, 4, 1, 8, 8, 4);
    CHECK(sd_canny(rgba, 0.1, 0.2, &e, NULL, &err) == SD_ERR_INVALID);
    sd_tensor_unref(rgba);
    img = image(1, 8, 8, flat);
    CHECK(sd_canny(img, 0.5, 0.2, &e, NULL, &err) == SD_ERR_INVALID && strstr(err.msg, "low_threshold"));
    sd_tensor_unref(img);
}

int main(void) {
    test_vertical_step();
    test_horizontal_step_and_flat();
    test_hysteresis();
    test_batch_gray_errors();
    return sd_test_finish();
}
