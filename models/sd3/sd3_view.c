/* sd3_view.c - a second MMDiT over the same weights (sd_sd3_view), the
 * model a LoRA patches without touching the loaded one. */
#include "sd3_internal.h"

#include <stdlib.h>
#include <string.h>

/* base's slot pointer moved into v: slots live in the model struct or in its
 * blocks array */
static sd_bt **moved(const void *basep, void *vp, sd_bt **slot) {
    const sd_sd3 *base = basep;
    sd_sd3 *v = vp;
    const char *p = (const char *)slot, *b = (const char *)base, *k = (const char *)base->blocks;
    size_t nk = (size_t)(base->cfg.depth ? base->cfg.depth : 1) * sizeof *base->blocks;
    if (p >= b && p < b + sizeof *base) return (sd_bt **)((char *)v + (p - b));
    if (p >= k && p < k + nk) return (sd_bt **)((char *)v->blocks + (p - k));
    return NULL;
}

sd_status sd_sd3_view(const sd_sd3 *base, sd_sd3 **out, sd_error *err) {
    *out = NULL;
    size_t nk = (size_t)(base->cfg.depth ? base->cfg.depth : 1);
    sd_sd3 *v = calloc(1, sizeof *v);
    if (v) {
        *v = *base;
        v->blocks = malloc(nk * sizeof *v->blocks);
        v->params = (sd_dit_params){0};
        v->one = NULL;
        v->tap = NULL;
        v->tap_user = NULL;
    }
    if (!v || !v->blocks) {
        if (v) free(v->blocks);
        free(v);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating an SD3 view");
    }
    memcpy(v->blocks, base->blocks, nk * sizeof *v->blocks);
    sd_status rc = sd_dit_params_rebind(&base->params, &v->params, base, v, moved, base->one, &v->one, base->be,
                                        "an SD3 view", err);
    if (rc) {
        sd_sd3_free(v);
        return rc;
    }
    *out = v;
    return SD_OK;
}
