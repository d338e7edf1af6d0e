/* sd3_view.c - a second MMDiT over the same weights (sd_sd3_view), the
 * model a LoRA patches without touching the loaded one. */
#include "sd3_internal.h"

#include <stdlib.h>
#include <string.h>

/* base's slot pointer moved into v: slots live in the model struct or in its
 * blocks array */
static sd_bt **moved(const sd_sd3 *base, sd_sd3 *v, sd_bt **slot) {
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
        v->params = calloc((size_t)(base->n_params ? base->n_params : 1), sizeof *v->params);
        v->n_params = 0;
        v->cap_params = base->n_params;
        v->one = NULL;
        v->tap = NULL;
        v->tap_user = NULL;
    }
    if (!v || !v->blocks || !v->params) {
        if (v) {
            free(v->blocks);
            free(v->params);
        }
        free(v);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating an SD3 view");
    }
    memcpy(v->blocks, base->blocks, nk * sizeof *v->blocks);
    int failed = 0;
    /* every slot of v still points at base's tensor: each becomes a view
     * (owned by v) before anything can free it */
    for (int i = 0; i < base->n_params; i++) {
        sd_bt **slot = moved(base, v, base->params[i].slot);
        char *key = strdup(base->params[i].key);
        if (!slot || !key) {
            free(key);
            failed = 1;
            break;
        }
        sd_bt *t = *slot;
        *slot = sd_bt_view(t, t->ndim, t->shape);
        v->params[v->n_params++] = (sd3_param){key, slot};
        if (!*slot) {
            failed = 1;
            break;
        }
    }
    if (!failed) v->one = sd_bt_view(base->one, base->one->ndim, base->one->shape);
    if (failed || !v->one) {
        /* slots not yet viewed still borrow base's tensors: clear them */
        for (int i = v->n_params; i < base->n_params; i++) {
            sd_bt **slot = moved(base, v, base->params[i].slot);
            if (slot) *slot = NULL;
        }
        sd_sd3_free(v);
        sd_status rc = sd_backend_take_error(base->be, err);
        return rc ? rc : sd_error_set(err, SD_ERR_NOMEM, "out of memory creating an SD3 view");
    }
    *out = v;
    return SD_OK;
}
