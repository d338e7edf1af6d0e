/* zimage_view.c - a second NextDiT over the same weights (sd_zimage_view),
 * the model a LoRA patches without touching the loaded one. */
#include "zimage_internal.h"

#include <stdlib.h>
#include <string.h>

static int refiners(const sd_zimage *m) { return m->cfg.n_refiner_layers ? m->cfg.n_refiner_layers : 1; }
static int layers(const sd_zimage *m) { return m->cfg.n_layers ? m->cfg.n_layers : 1; }

/* base's slot pointer moved into v: slots live in the model struct or in one
 * of its three block arrays (sized as zimage_load.c allocates them) */
static sd_bt **moved(const void *basep, void *vp, sd_bt **slot) {
    const sd_zimage *base = basep;
    sd_zimage *v = vp;
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
        v->params = (sd_dit_params){0};
        v->one = NULL;
        v->tap = NULL;
        v->tap_user = NULL;
    }
    if (!v || !v->noise_refiner || !v->context_refiner || !v->layers) {
        if (v) {
            free(v->noise_refiner);
            free(v->context_refiner);
            free(v->layers);
        }
        free(v);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a Z-Image view");
    }
    memcpy(v->noise_refiner, base->noise_refiner, nr * sizeof *v->noise_refiner);
    memcpy(v->context_refiner, base->context_refiner, nr * sizeof *v->context_refiner);
    memcpy(v->layers, base->layers, nl * sizeof *v->layers);
    sd_status rc = sd_dit_params_rebind(&base->params, &v->params, base, v, moved, base->one, &v->one, base->be,
                                        "a Z-Image view", err);
    if (rc) {
        sd_zimage_free(v);
        return rc;
    }
    *out = v;
    return SD_OK;
}
