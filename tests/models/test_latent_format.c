/* test_latent_format.c - the latent formats (sd1, sdxl, flux) against
 * ComfyUI's comfy.latent_formats and latent_preview.Latent2RGBPreviewer
 * (tests/data/latent_formats: the generator script, its manifest and the
 * safetensors it wrote): the constants the manifest records, process_in /
 * process_out bit for bit, the empty-latent rule, and the latent2rgb preview
 * (the float image within the manifest's atol, its 8-bit pixels as
 * sd_png_write would truncate them within one level). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/sampling/latent_format.h"
#include "testutil.h"

static sd_st_file *g;

static sd_tensor *get(const char *name, const char *what) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", name, what);
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(g, key, &err);
    CHECK_MSG(t != NULL, "reference tensor %s missing", key);
    return t;
}

int main(void) {
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    char dir[1200], path[1400];
    snprintf(dir, sizeof dir, "%s/tests/data/latent_formats", src ? src : ".");
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = sd_test_read_file(path, NULL);
    if (!text) sd_test_skip("no reference data (%s)", path);
    cJSON *m = cJSON_Parse(text);
    free(text);
    CHECK_MSG(m != NULL, "%s: not JSON", path);
    if (!m) return sd_test_finish();
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file")));
    sd_error err;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(m, "tolerance");
    double atol = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tol, "preview_rgb"), "atol"));
    double u8_diff = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tol, "preview_u8"), "max_diff"));
    CHECK(!isnan(atol) && !isnan(u8_diff));
    int formats = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(m, "formats")) {
        const char *name = e->string;
        const sd_latent_format *f = sd_latent_format_named(name);
        CHECK_MSG(f != NULL, "latent format %s unknown here", name);
        if (!f || !g) continue;
        formats++;
        CHECK_MSG(f->channels == (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "latent_channels")) &&
                      f->scale == (float)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "scale_factor")) &&
                      f->shift == (float)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "shift_factor")),
                  "%s: channels/scale/shift", name);
        const char *taesd = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "taesd_decoder_name"));
        CHECK_MSG(taesd && f->taesd_decoder && strcmp(taesd, f->taesd_decoder) == 0, "%s: taesd decoder name", name);
        sd_tensor *z = get(name, "z"), *pin = get(name, "process_in"), *pout = get(name, "process_out");
        sd_tensor *rgb = get(name, "preview_rgb"), *u8 = get(name, "preview_u8");
        if (!z || !pin || !pout || !rgb || !u8) continue;
        int64_t n = sd_tensor_numel(z);
        float *o = malloc((size_t)n * sizeof *o);
        sd_latent_process_in(f, z->data, o, (size_t)n);
        CHECK_MSG(memcmp(o, pin->data, (size_t)n * sizeof *o) == 0, "%s: process_in", name);
        sd_latent_process_out(f, z->data, o, (size_t)n);
        CHECK_MSG(memcmp(o, pout->data, (size_t)n * sizeof *o) == 0, "%s: process_out", name);
        /* the samplers' rule: a non-zero latent is shifted, an all-zero one is not */
        CHECK(sd_latent_process_in_nonempty(f, z->data, o, (size_t)n) == 1 &&
              memcmp(o, pin->data, (size_t)n * sizeof *o) == 0);
        int64_t per = n / z->shape[0]; /* the second image is zeros */
        CHECK(sd_latent_process_in_nonempty(f, (float *)z->data + per, o, (size_t)per) == 0);
        int zeros = 1;
        for (int64_t i = 0; i < per; i++) zeros &= o[i] == 0.0f;
        CHECK_MSG(zeros, "%s: an empty latent was shifted", name);
        free(o);

        sd_tensor *img = sd_latent_preview_rgb(f, z);
        double worst = 0;
        CHECK_MSG(img && sd_test_allclose(img, rgb, atol, 0, &worst, NULL), "%s: preview rgb |d| %g", name, worst);
        int max_d = 0;
        for (int64_t i = 0; img && i < sd_tensor_numel(img); i++) {
            float v = 255.0f * ((float *)img->data)[i]; /* sd_png_write: clamp, truncate */
            int q = v >= 255.0f ? 255 : v > 0.0f ? (int)v : 0;
            int d = abs(q - (int)((float *)u8->data)[i]);
            if (d > max_d) max_d = d;
        }
        CHECK_MSG(img && max_d <= (int)u8_diff, "%s: preview pixels differ by %d", name, max_d);
        printf("%-5s process_in/out exact, preview |d| %.3g, pixels within %d\n", name, worst, max_d);
        sd_tensor *bad = sd_tensor_new4(SD_F32, 4, 1, f->channels + 1, 2, 2);
        CHECK(sd_latent_preview_rgb(f, bad) == NULL); /* another channel count */
        sd_tensor_unref(bad);
        sd_tensor_unref(img);
        sd_tensor_unref(z), sd_tensor_unref(pin), sd_tensor_unref(pout), sd_tensor_unref(rgb), sd_tensor_unref(u8);
    }
    CHECK_MSG(formats == 3, "%d formats in the manifest", formats);
    CHECK(sd_latent_format_named("nope") == NULL && sd_latent_format_named(NULL) == NULL);
    sd_st_close(g);
    cJSON_Delete(m);
    return sd_test_finish();
}
