/* zimage_view.c - a second NextDiT over the same weights (sd_zimage_view),
 * the model a LoRA patches without touching the loaded one. */
#include "zimage_internal.h"

#include <stdlib.h>
#include <string.h>

static int refiners(const sd_zimage *m) { return m->cfg.n_refiner_layers ? m->cfg.n_refiner_layers : 1; }
static int layers(const sd_zimage *m) { return m->cfg.n_layers ? m->cfg.n_layers : 1; }

/* base's slot pointer moved into v: slots live in the model struct or in one
 * of its three block arrays (sized as zimage_load.c allocates them) */
static sd_bt **moved(const sd_zimage *base, sd_zimage *v, sd_bt **slot) {
    const char *p = (const char *)slot, *b = (const char *)base;
    if (p >= b && p < b + sizeof *base) return (sd_bt **)((char *)v + (p - b));
    const zi_block *arr[3] = {base->noise_refiner, base->context_refiner, base->layers};
    zi_block *varr[3] = {v->noise_refiner, v->context_refiner, v->layers};
    int n[3] = {refiners(base), refiners(base), layers(base)};
    for (int i = 0; i < 3; i++) {
        const char *a = (const char *)arr[i];
        if (p >= a && p < a + (size_t)n[i] * sizeof *arr[i]) return (sd_bt **)((char *)varr[i] + (p - a));
    }
    return NULL;
}

sd_status sd_zimage_view(const sd_zimage *base, sd_zimage **out, sd_error *err) {
    *out = NULL;
    size_t nr = (size_t)refiners(base), nl = (size_t)layers(base);
    sd_zimage *v = calloc(1, sizeof *v);
    if (v) {
        *v = *base;
        v->noise_refiner = malloc(nr * sizeof *v->noise_refiner);
        v->context_refiner = malloc(nr * sizeof *v->context_refiner);
        v->layers = malloc(nl * sizeof *v->layers);
        v->params = calloc((size_t)(base->n_params ? base->n_params : 1), sizeof *v->params);
        v->n_params = 0;
        v->cap_params = base->n_params;
        v->one = NULL;
        v->tap = NULL;
        v->tap_user = NULL;
    }
    if (!v || !v->noise_refiner || !v->context_refiner || !v->layers || !v->params) {
        if (v) {
            free(v->noise_refiner);
            free(v->context_refiner);
            free(v->layers);
            free(v->params);
        }
        free(v);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a Z-Image view");
    }
    memcpy(v->noise_refiner, base->noise_refiner, nr * sizeof *v->noise_refiner);
    memcpy(v->context_refiner, base->context_refiner, nr * sizeof *v->context_refiner);
    memcpy(v->layers, base->layers, nl * sizeof *v->layers);
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
        v->params[v->n_params++] = (zi_param){key, slot};
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
        sd_zimage_free(v);
        sd_status rc = sd_backend_take_error(base->be, err);
        return rc ? rc : sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a Z-Image view");
    }
    *out = v;
    return SD_OK;
}
