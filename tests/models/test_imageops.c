/* test_imageops.c - common_upscale methods against small hand-computed cases
 * (PyTorch index math for nearest-exact/bilinear/bicubic/area, Pillow
 * Lanczos properties, bislerp on unit vectors, center crop rounding). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/image/imageops.h"
#include "testutil.h"

static sd_tensor *make(int64_t n, int64_t c, int64_t h, int64_t w, const float *vals) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 4, n, c, h, w);
    if (vals) memcpy(sd_tensor_f32(t), vals, sizeof(float) * (size_t)(n * c * h * w));
    return t;
}

static sd_tensor *run(const sd_tensor *x, int64_t w, int64_t h, const char *method,
                      const char *crop) {
    sd_upscale_method m;
    sd_crop_mode cm;
    CHECK(sd_upscale_method_parse(method, &m) == 0);
    CHECK(sd_crop_mode_parse(crop, &cm) == 0);
    sd_error err = {0};
    sd_tensor *o = NULL;
    CHECK_OK(sd_imageops_upscale(x, w, h, m, cm, &o, &err), &err);
    return o;
}

static void expect_vals(const char *what, const sd_tensor *t, const float *e, size_t n, float tol) {
    CHECK_MSG(t && (size_t)sd_tensor_numel(t) == n, "%s: size", what);
    if (!t || (size_t)sd_tensor_numel(t) != n) return;
    const float *d = sd_tensor_f32(t);
    for (size_t i = 0; i < n; i++)
        CHECK_MSG(fabsf(d[i] - e[i]) <= tol, "%s[%zu]: got %.9g want %.9g", what, i, d[i], e[i]);
}

static void test_nearest_exact(void) {
    float in[3] = {10, 20, 30};
    sd_tensor *x = make(1, 1, 1, 3, in);
    sd_tensor *o = run(x, 5, 1, "nearest-exact", "disabled");
    /* floor((d + .5) * 0.6): 0, 0, 1, 2, 2 */
    float e[5] = {10, 10, 20, 30, 30};
    expect_vals("nearest 3->5", o, e, 5, 0);
    sd_tensor_unref(o);
    float in5[5] = {0, 1, 2, 3, 4};
    sd_tensor *y = make(1, 1, 5, 1, in5);
    o = run(y, 1, 2, "nearest-exact", "disabled");
    float e2[2] = {1, 3}; /* floor(1.25), floor(3.75) */
    expect_vals("nearest 5->2 (rows)", o, e2, 2, 0);
    sd_tensor_unref(o);
    sd_tensor_unref(y);
    sd_tensor_unref(x);
}

static void test_bilinear(void) {
    float in[4] = {0, 1, 2, 3};
    sd_tensor *x = make(1, 1, 2, 2, in);
    sd_tensor *o = run(x, 4, 4, "bilinear", "disabled");
    static const float f[4] = {0, 0.25f, 0.75f, 1};
    float e[16];
    for (int y = 0; y < 4; y++)
        for (int xx = 0; xx < 4; xx++) e[y * 4 + xx] = 2 * f[y] + f[xx];
    expect_vals("bilinear 2x2->4x4", o, e, 16, 1e-6f);
    sd_tensor_unref(o);
    /* downscale 4 -> 2: src = 2*(d+.5)-.5 = .5, 2.5 -> means of neighbours */
    float in4[4] = {0, 4, 8, 16};
    sd_tensor *z = make(1, 1, 1, 4, in4);
    o = run(z, 2, 1, "bilinear", "disabled");
    float e2[2] = {2, 12};
    expect_vals("bilinear 4->2", o, e2, 2, 1e-6f);
    sd_tensor_unref(o);
    sd_tensor_unref(z);

    /* NHWC entry point: same numbers up to float rounding, NHWC layout. */
    float rgb[2 * 2 * 3];
    for (int i = 0; i < 12; i++) rgb[i] = (float)i / 11.0f;
    sd_tensor *img = sd_tensor_new4(SD_F32, 4, 1, 2, 2, 3);
    memcpy(sd_tensor_f32(img), rgb, sizeof rgb);
    sd_error err = {0};
    sd_tensor *on = NULL;
    CHECK_OK(sd_imageops_upscale_nhwc(img, 3, 5, SD_UPSCALE_BILINEAR, SD_CROP_DISABLED, &on, &err), &err);
    sd_tensor *nchw = sd_imageops_nhwc_to_nchw(img);
    sd_tensor *oc = run(nchw, 3, 5, "bilinear", "disabled");
    sd_tensor *back = sd_imageops_nchw_to_nhwc(oc);
    CHECK(on && on->shape[0] == 1 && on->shape[1] == 5 && on->shape[2] == 3 && on->shape[3] == 3);
    double max_abs = 0;
    long worst = 0;
    CHECK(on && back && sd_test_allclose(on, back, 1e-6, 0, &max_abs, &worst));
    sd_tensor_unref(on); sd_tensor_unref(nchw); sd_tensor_unref(oc); sd_tensor_unref(back);
    sd_tensor_unref(img);
    sd_tensor_unref(x);
}

static void test_bicubic(void) {
    float in[2] = {0, 1};
    sd_tensor *x = make(1, 1, 1, 2, in);
    sd_tensor *o = run(x, 4, 1, "bicubic", "disabled");
    /* Keys A=-0.75, clamped borders; worked out by hand (dyadic, exact). */
    float e[4] = {-0.10546875f, 0.2265625f, 0.7734375f, 1.10546875f};
    expect_vals("bicubic 2->4", o, e, 4, 0);
    sd_tensor_unref(o);
    /* same size is the identity */
    float in3[6] = {1, -2, 3, 5, 7, 11};
    sd_tensor *y = make(1, 1, 2, 3, in3);
    o = run(y, 3, 2, "bicubic", "disabled");
    expect_vals("bicubic identity", o, in3, 6, 0);
    sd_tensor_unref(o);
    sd_tensor_unref(y);
    sd_tensor_unref(x);
}

static void test_area(void) {
    float in[3] = {1, 2, 6};
    sd_tensor *x = make(1, 1, 1, 3, in);
    sd_tensor *o = run(x, 2, 1, "area", "disabled");
    float e[2] = {1.5f, 4}; /* windows [0,2) and [1,3) */
    expect_vals("area 3->2", o, e, 2, 1e-6f);
    sd_tensor_unref(o);
    float in2[2] = {2, 4};
    sd_tensor *y = make(1, 1, 2, 1, in2);
    o = run(y, 1, 3, "area", "disabled");
    float e2[3] = {2, 3, 4}; /* windows [0,1) [0,2) [1,2) */
    expect_vals("area 2->3", o, e2, 3, 1e-6f);
    sd_tensor_unref(o);
    float in4[16];
    for (int i = 0; i < 16; i++) in4[i] = (float)i;
    sd_tensor *z = make(1, 1, 4, 4, in4);
    o = run(z, 2, 2, "area", "disabled");
    float e3[4] = {2.5f, 4.5f, 10.5f, 12.5f};
    expect_vals("area 4x4->2x2", o, e3, 4, 1e-6f);
    sd_tensor_unref(o);
    sd_tensor_unref(z);
    sd_tensor_unref(y);
    sd_tensor_unref(x);
}

/* Independent double-precision Lanczos-3 with Pillow's support widening. */
static void lanczos_ref_1d(const double *in, int n, double *out, int m) {
    double scale = (double)n / m, fs = scale < 1 ? 1 : scale, support = 3 * fs;
    for (int o = 0; o < m; o++) {
        double c = (o + 0.5) * scale, acc = 0, ws = 0;
        for (int i = 0; i < n; i++) {
            double t = (i + 0.5 - c) / fs;
            if (fabs(i + 0.5 - c) > support + 0.5) continue;
            double w;
            if (t == 0) w = 1;
            else if (t <= -3 || t >= 3) w = 0;
            else w = sin(M_PI * t) / (M_PI * t) * sin(M_PI * t / 3) / (M_PI * t / 3);
            acc += w * in[i];
            ws += w;
        }
        out[o] = acc / ws;
    }
}

static void test_lanczos(void) {
    /* constant image stays exactly constant (after 8-bit quantisation) */
    float cst[5 * 7];
    for (int i = 0; i < 35; i++) cst[i] = 0.5f; /* -> 127/255 */
    sd_tensor *x = make(1, 1, 5, 7, cst);
    sd_tensor *o = run(x, 11, 3, "lanczos", "disabled");
    float e[33];
    for (int i = 0; i < 33; i++) e[i] = 127.0f / 255.0f;
    expect_vals("lanczos constant", o, e, 33, 0);
    sd_tensor_unref(o);
    sd_tensor_unref(x);

    /* 1-D ramp against a double reference: within one 8-bit level. */
    float ramp[9];
    double rin[9];
    for (int i = 0; i < 9; i++) {
        ramp[i] = (float)(i * 28) / 255.0f;
        unsigned q = (unsigned)(255.0f * ramp[i]);
        rin[i] = q / 255.0;
    }
    for (int target = 2; target <= 20; target += 3) {
        x = make(1, 1, 1, 9, ramp);
        o = run(x, target, 1, "lanczos", "disabled");
        double ref[20];
        lanczos_ref_1d(rin, 9, ref, target);
        const float *d = o ? sd_tensor_f32(o) : NULL;
        for (int i = 0; d && i < target; i++) {
            double r = ref[i] < 0 ? 0 : ref[i] > 1 ? 1 : ref[i];
            CHECK_MSG(fabs(d[i] - r) <= 1.0 / 255 + 1e-6, "lanczos 9->%d [%d]: %g vs %g", target,
                      i, d[i], r);
            CHECK(fabsf(d[i] * 255.0f - nearbyintf(d[i] * 255.0f)) < 1e-3f); /* 8-bit levels */
        }
        sd_tensor_unref(o);
        sd_tensor_unref(x);
    }
    /* values are clipped to [0, 1] like the uint8 round trip */
    float over[4] = {-1, 2, 0.25f, 1};
    x = make(1, 1, 2, 2, over);
    o = run(x, 2, 2, "lanczos", "disabled");
    float e2[4] = {0, 1, 63.0f / 255.0f, 1};
    expect_vals("lanczos clip+quantise", o, e2, 4, 0);
    sd_tensor_unref(o);
    sd_tensor_unref(x);
}

static void test_bislerp(void) {
    /* N=1, C=2, H=1, W=2: pixels (1,0) and (0,1) -> four points on the arc. */
    float in[4] = {1, 0, /* channel 0 */ 0, 1 /* channel 1 */};
    sd_tensor *x = make(1, 2, 1, 2, in);
    sd_tensor *o = run(x, 4, 1, "bislerp", "disabled");
    float c = cosf((float)M_PI / 8), s = sinf((float)M_PI / 8);
    float e[8] = {1, c, s, 0, /* channel 0 */ 0, s, c, 1};
    expect_vals("bislerp arc", o, e, 8, 2e-6f);
    sd_tensor_unref(o);
    sd_tensor_unref(x);
    /* magnitudes interpolate linearly: (2,0) and (0,4), r = .25 -> 2.5 */
    float in2[4] = {2, 0, 0, 4};
    x = make(1, 2, 1, 2, in2);
    o = run(x, 4, 1, "bislerp", "disabled");
    float e2[8] = {2, 2.5f * c, 3.5f * s, 0, 0, 2.5f * s, 3.5f * c, 4};
    expect_vals("bislerp norms", o, e2, 8, 4e-6f);
    sd_tensor_unref(o);
    sd_tensor_unref(x);
    /* opposite vectors fall back to a plain lerp */
    float in3[4] = {1, -1, 0, 0};
    x = make(1, 2, 1, 2, in3);
    o = run(x, 4, 1, "bislerp", "disabled");
    float e3[8] = {1, 0.5f, -0.5f, -1, 0, 0, 0, 0};
    expect_vals("bislerp opposite", o, e3, 8, 1e-6f);
    sd_tensor_unref(o);
    sd_tensor_unref(x);
    /* same direction keeps the first sample (ComfyUI's dot > 1 - 1e-5 case),
     * applied along H as well */
    float in4[2] = {1, 3};
    x = make(1, 1, 2, 1, in4);
    o = run(x, 1, 4, "bislerp", "disabled");
    float e4[4] = {1, 1, 1, 3};
    expect_vals("bislerp same direction (H)", o, e4, 4, 0);
    sd_tensor_unref(o);
    sd_tensor_unref(x);
}

static void test_center_crop(void) {
    /* 7x2 to a square: x = round((7 - 2) / 2) = round(2.5) = 2 (half to even),
     * crop keeps columns 2..4, nearest-exact 3 -> 2 picks columns 2 and 4. */
    float in[14];
    for (int y = 0; y < 2; y++)
        for (int xx = 0; xx < 7; xx++) in[y * 7 + xx] = (float)(xx + 10 * y);
    sd_tensor *x = make(1, 1, 2, 7, in);
    sd_tensor *o = run(x, 2, 2, "nearest-exact", "center");
    float e[4] = {2, 4, 12, 14};
    expect_vals("center crop", o, e, 4, 0);
    sd_tensor_unref(o);
    /* tall image: rows cropped */
    float in2[6] = {0, 1, 2, 3, 4, 5};
    sd_tensor *y = make(1, 1, 6, 1, in2);
    o = run(y, 1, 2, "nearest-exact", "center");
    /* old aspect 1/6 < 1/2: y = round((6 - 6 * (1/6)/(1/2)) / 2) = 2 -> rows 2..3 */
    float e2[2] = {2, 3};
    expect_vals("center crop rows", o, e2, 2, 0);
    sd_tensor_unref(o);
    sd_tensor_unref(y);
    sd_tensor_unref(x);
}

static void test_errors(void) {
    sd_error err = {0};
    sd_tensor *o = NULL;
    sd_tensor *x = make(1, 1, 2, 2, NULL);
    CHECK(sd_imageops_upscale(x, 0, 2, SD_UPSCALE_BILINEAR, SD_CROP_DISABLED, &o, &err) == SD_ERR_INVALID);
    sd_tensor *bad = sd_tensor_new4(SD_F32, 3, 1, 2, 2, 0);
    CHECK(sd_imageops_upscale(bad, 2, 2, SD_UPSCALE_BILINEAR, SD_CROP_DISABLED, &o, &err) == SD_ERR_INVALID);
    sd_upscale_method m;
    CHECK(sd_upscale_method_parse("nearest", &m) == -1);
    CHECK(sd_upscale_method_parse("bislerp", &m) == 0 && m == SD_UPSCALE_BISLERP);
    CHECK(strcmp(sd_upscale_method_name(SD_UPSCALE_AREA), "area") == 0);
    sd_tensor_unref(bad);
    sd_tensor_unref(x);
}

int main(void) {
    test_nearest_exact();
    test_bilinear();
    test_bicubic();
    test_area();
    test_lanczos();
    test_bislerp();
    test_center_crop();
    test_errors();
    return sd_test_finish();
}
