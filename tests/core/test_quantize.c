/* core/quantize.c against ggml's reference quantizers: for every case of
 * tests/data/gguf/manifest.json ("quantize"), the manifest's input
 * quantized by sd_quant_quantize must equal, byte for byte, the blocks
 * ggml's quantize_row_<type>_ref made of it (gen/make_quantize.sh); the
 * first differing block is reported with its input. Also a round trip
 * through core/quant.c's dequantization: on Gaussian rows with offsets and
 * outliers the RMS error is within 1.5x of what rounding to each group's
 * own step gives (a uniform rounding error has RMS step / sqrt(12)), so the
 * layouts the quantizer writes are the ones quant.c (ComfyUI-GGUF) reads. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant.h"
#include "testutil.h"

static const char *data_dir(char *buf, size_t n) {
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    snprintf(buf, n, "%s/tests/data/gguf", src ? src : "..");
    return buf;
}

static void against_reference(void) {
    char dir[4096], path[4200];
    data_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = sd_test_read_file(path, NULL);
    CHECK_MSG(text != NULL, "cannot read %s", path);
    cJSON *m = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *q = cJSON_GetObjectItem(m, "quantize");
    const char *in = cJSON_GetStringValue(cJSON_GetObjectItem(q, "input"));
    const cJSON *cases = cJSON_GetObjectItem(q, "cases");
    CHECK_MSG(in && cJSON_GetArraySize(cases) > 0, "manifest.json has no quantize cases");
    if (!in || !cases) {
        cJSON_Delete(m);
        return;
    }
    size_t nbytes = 0;
    snprintf(path, sizeof path, "%s/%s", dir, in);
    float *x = (float *)sd_test_read_file(path, &nbytes);
    int64_t n = (int64_t)(nbytes / sizeof(float));
    CHECK_MSG(x && n == (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(q, "elements")), "input %s", path);
    const cJSON *c;
    int compared = 0;
    cJSON_ArrayForEach(c, cases) {
        const char *tn = cJSON_GetStringValue(cJSON_GetObjectItem(c, "type"));
        const char *bf = cJSON_GetStringValue(cJSON_GetObjectItem(c, "blocks"));
        sd_dtype dt;
        CHECK_MSG(tn && bf && sd_dtype_from_name(tn, &dt) == 0, "case %s", tn ? tn : "?");
        if (!x || !tn || !bf || sd_dtype_from_name(tn, &dt)) continue;
        size_t wn = 0;
        snprintf(path, sizeof path, "%s/%s", dir, bf);
        uint8_t *want = (uint8_t *)sd_test_read_file(path, &wn);
        size_t bs = sd_dtype_size(dt);
        int64_t blk = sd_dtype_block(dt);
        CHECK_MSG(want && wn == sd_dtype_nbytes(dt, n), "%s: %s has %zu bytes", tn, path, wn);
        uint8_t *got = malloc(sd_dtype_nbytes(dt, n));
        CHECK_MSG(sd_quant_quantize(dt, x, got, n), "%s: no quantizer", tn);
        if (want && wn == sd_dtype_nbytes(dt, n)) {
            int64_t bad = -1, nbad = 0;
            for (int64_t b = 0; b < n / blk; b++)
                if (memcmp(got + b * bs, want + b * bs, bs)) nbad++, bad = bad < 0 ? b : bad;
            CHECK_MSG(nbad == 0, "%s: %lld of %lld blocks differ from ggml's; first: block %lld (input [%lld] = %.9g ...)",
                      tn, (long long)nbad, (long long)(n / blk), (long long)bad, (long long)(bad * blk),
                      bad >= 0 ? x[bad * blk] : 0.0);
            compared++;
        }
        free(got);
        free(want);
    }
    CHECK(compared == cJSON_GetArraySize(cases));
    free(x);
    cJSON_Delete(m);
}

static unsigned seed = 12345;
static double gauss(void) {
    double u[2];
    for (int k = 0; k < 2; k++) {
        seed = seed * 1103515245u + 12345u;
        u[k] = ((seed >> 8) + 0.5) / 16777216.0;
    }
    return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

static void round_trip(void) {
    /* type, quantization levels (2^bits - 1), symmetric (scale from the largest magnitude) */
    static const struct { sd_dtype dt; int levels; int sym; } T[] = {
        {SD_Q8_0, 255, 1}, {SD_Q4_0, 15, 1}, {SD_Q5_0, 31, 1}, {SD_Q4_1, 15, 0},
        {SD_Q5_1, 31, 0},  {SD_Q4_K, 15, 0}, {SD_Q5_K, 31, 0}, {SD_Q6_K, 63, 1},
    };
    const int64_t n = 256 * 48;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(0.05 * gauss() + 0.01 * ((i / 512) % 5));
    for (int k = 0; k < 20; k++) x[(k * 7919) % n] *= 30.0f;
    for (size_t t = 0; t < sizeof T / sizeof T[0]; t++) {
        sd_dtype dt = T[t].dt;
        int blk = sd_dtype_block(dt);
        /* K-quants set the step per group of 16 or 32 */
        int grp = dt == SD_Q4_K || dt == SD_Q5_K ? 32 : dt == SD_Q6_K ? 16 : blk;
        CHECK(sd_quant_can_quantize(dt));
        void *q = malloc(sd_dtype_nbytes(dt, n));
        CHECK(sd_quant_quantize(dt, x, q, n));
        sd_quant_dequant(dt, SD_DQ_F32, q, y, n);
        double err = 0, ideal = 0;
        for (int64_t g = 0; g < n / grp; g++) {
            float lo = x[g * grp], hi = lo, am = 0;
            for (int i = 0; i < grp; i++) {
                float v = x[g * grp + i];
                lo = fminf(lo, v), hi = fmaxf(hi, v), am = fmaxf(am, fabsf(v));
                err += (double)(y[g * grp + i] - v) * (y[g * grp + i] - v);
            }
            double step = T[t].sym ? 2.0 * am / (T[t].levels - 1) : (hi - fminf(lo, 0)) / T[t].levels;
            ideal += grp * step * step / 12.0;
        }
        CHECK_MSG(err <= 1.5 * 1.5 * ideal, "%s: RMS error %.3g, rounding to the group steps gives %.3g",
                  sd_dtype_name(dt), sqrt(err / n), sqrt(ideal / n));
        /* zeros stay zeros */
        float z[256] = {0}, zy[256];
        memset(q, 0xAB, sd_dtype_size(dt));
        CHECK(sd_quant_quantize(dt, z, q, blk));
        sd_quant_dequant(dt, SD_DQ_F16, q, zy, blk);
        int zero = 1;
        for (int i = 0; i < blk; i++) zero &= zy[i] == 0.0f;
        CHECK_MSG(zero, "%s: a block of zeros does not widen to zeros", sd_dtype_name(dt));
        free(q);
    }
    CHECK(!sd_quant_can_quantize(SD_IQ4_XS) && !sd_quant_quantize(SD_Q2_K, x, y, 256));
    free(x);
    free(y);
}

int main(void) {
    against_reference();
    round_trip();
    return sd_test_finish();
}
