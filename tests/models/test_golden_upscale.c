/* test_golden_upscale.c - upscale models against ComfyUI's own path.
 *
 * tests/data/upscale/manifest.json lists the cases gen_upscale_ref.py made:
 * a tiny random-weight model file per case (old / new ESRGAN keys, 4x, 2x,
 * pixel-unshuffle 2x and 1x, Compact 4x and 2x; .safetensors and .pth), the
 * input IMAGE and ImageUpscaleWithModel's output computed through spandrel
 * and comfy.utils.tiled_scale with the case's tile and overlap. Each case is
 * loaded from its file, its detected scale and sizes are checked against the
 * case's settings, and sd_upscale_image's output is compared with the
 * manifest's tolerance. Skipped (77) when the data folder is missing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "golden.h"
#include "models/upscale/upscale.h"
#include "testutil.h"

static int jint(const cJSON *o, const char *k, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : def;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void run_case(sd_backend *be, const char *dir, const cJSON *c, double max_abs) {
    const char *id = jstr(c, "id"), *model = jstr(c, "model"), *ref = jstr(c, "ref");
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(c, "arch");
    CHECK_MSG(id && model && ref && arch, "case without id/model/ref/arch");
    if (!id || !model || !ref || !arch) return;
    printf("case %s (%s)\n", id, model);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, model);
    sd_error err;
    sd_upscale *m = NULL;
    CHECK_OK(sd_upscale_load_file(be, path, &m, &err), &err);
    if (!m) return;
    const sd_upscale_config *cfg = sd_upscale_get_config(m);
    const char *type = jstr(arch, "type");
    int esrgan = type && strcmp(type, "esrgan") == 0;
    CHECK_MSG(cfg->arch == (esrgan ? SD_UPSCALE_ESRGAN : SD_UPSCALE_COMPACT), "%s: arch", id);
    CHECK_MSG(cfg->scale == jint(c, "scale", -1), "%s: scale %d, want %d", id, cfg->scale,
              jint(c, "scale", -1));
    CHECK_MSG(cfg->num_feat == jint(arch, "num_feat", -1), "%s: num_feat %d", id, cfg->num_feat);
    CHECK_MSG(cfg->in_ch == 3 && cfg->out_ch == 3, "%s: channels %d -> %d", id, cfg->in_ch,
              cfg->out_ch);
    if (esrgan) {
        CHECK_MSG(cfg->num_block == jint(arch, "num_block", -1), "%s: num_block %d", id,
                  cfg->num_block);
        CHECK_MSG(cfg->num_grow_ch == 32, "%s: growth channels %d (spandrel's RRDBNet: 32)", id,
                  cfg->num_grow_ch);
        CHECK_MSG(cfg->shuffle == jint(arch, "shuffle", 1), "%s: shuffle %d", id, cfg->shuffle);
        CHECK_MSG((1 << cfg->n_up) == jint(arch, "internal_scale", -1), "%s: %d x2 stages", id,
                  cfg->n_up);
        const char *layout = jstr(arch, "layout");
        CHECK_MSG(layout && strstr(cfg->layout, strcmp(layout, "old") == 0 ? "old" : "Real-ESRGAN"),
                  "%s: layout %s", id, cfg->layout);
    } else {
        CHECK_MSG(cfg->num_block == jint(arch, "num_conv", -1), "%s: num_conv %d", id,
                  cfg->num_block);
    }
    snprintf(path, sizeof path, "%s/%s", dir, ref);
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    sd_tensor *image = g ? sd_st_tensor_f32(g, "image", &err) : NULL;
    sd_tensor *want = g ? sd_st_tensor_f32(g, "output", &err) : NULL;
    CHECK_MSG(image && want, "%s: reference tensors missing", id);
    const cJSON *hw = cJSON_GetObjectItemCaseSensitive(c, "image");
    if (image && cJSON_GetArraySize(hw) == 2)
        CHECK_MSG(image->shape[1] == cJSON_GetArrayItem(hw, 0)->valueint &&
                      image->shape[2] == cJSON_GetArrayItem(hw, 1)->valueint,
                  "%s: image size differs from the manifest", id);
    if (image && want) {
        int tile = jint(c, "tile", 512), overlap = jint(c, "overlap", 32), used = 0;
        sd_tensor *got = NULL;
        /* min_tile = tile: the reference ran at this tile, no back-off */
        CHECK_OK(sd_upscale_image(m, image, tile, overlap, tile, NULL, NULL, &got, &used, &err),
                 &err);
        if (got) {
            double worst = 0;
            long at = -1;
            int ok = sd_golden_allclose(got, want, max_abs, 0, &worst, &at);
            CHECK_MSG(ok, "%s: max |diff| %.3g at %ld (tolerance %.3g)", id, worst, at, max_abs);
            printf("  %s: tiles %lld of %d px, max |diff| %.3g\n", id,
                   (long long)sd_upscale_tile_count(image->shape[2], image->shape[1], tile, overlap),
                   used, worst);
        }
        sd_tensor_unref(got);
    }
    sd_tensor_unref(image);
    sd_tensor_unref(want);
    sd_st_close(g);
    sd_upscale_free(m);
}

int main(void) {
    const char *dir = sd_golden_topic_dir("upscale");
    cJSON *man = sd_golden_manifest(dir);
    sd_backend *be = sd_golden_backend();
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(man, "tolerance");
    const cJSON *ma = cJSON_GetObjectItemCaseSensitive(tol, "max_abs");
    CHECK_MSG(cJSON_IsNumber(ma), "manifest has no tolerance.max_abs");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(man, "cases"), *c;
    int count = 0;
    if (be && cJSON_IsNumber(ma))
        cJSON_ArrayForEach(c, cases) {
            run_case(be, dir, c, ma->valuedouble);
            count++;
        }
    CHECK_MSG(count >= 7, "only %d cases in the manifest", count);
    cJSON_Delete(man);
    sd_backend_free(be);
    return sd_test_finish();
}
