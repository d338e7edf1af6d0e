/* controlnet_diff.c - diff ControlNets merged with their UNet (contract in
 * controlnet.h), as ComfyUI's load_controlnet_state_dict(model=...) does. */
#include "models/controlnet/controlnet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sd_controlnet_is_diff(const sd_st_file *f) {
    return f && sd_st_find(f, "difference") && sd_st_find(f, SD_CONTROLNET_PREFIX "zero_convs.0.0.weight");
}

/* The merged tensors, served to the file view by index (entry offset). */
typedef struct merged {
    sd_tensor **t;
    size_t n;
} merged;

static sd_status merged_read(void *ctx, const sd_st_entry *e, void *dst, sd_error *err) {
    merged *m = ctx;
    if (e->offset >= m->n || m->t[e->offset]->nbytes != e->nbytes)
        return sd_error_set(err, SD_ERR_FORMAT, "diff ControlNet: bad entry %s", e->name);
    memcpy(dst, m->t[e->offset]->data, e->nbytes);
    return SD_OK;
}

static void merged_free(void *ctx) {
    merged *m = ctx;
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) sd_tensor_unref(m->t[i]);
    free(m->t);
    free(m);
}

/* stored + round(unet) in F32, rounded to stored's dtype. New tensor. */
static sd_tensor *add_rounded(const sd_tensor *stored, const sd_bt *w, const char *key, sd_error *err) {
    sd_tensor *a = sd_tensor_to_dtype(stored, SD_F32), *b = sd_bt_to_host(w), *br = NULL, *bf = NULL, *out = NULL;
    if (!a || !b) goto nomem;
    if (sd_tensor_numel(a) != sd_tensor_numel(b) || a->ndim != b->ndim ||
        memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) != 0) {
        char s1[96], s2[96];
        sd_error_set(err, SD_ERR_FORMAT, "diff ControlNet: %s%s is %s, the model's %s", SD_CONTROLNET_PREFIX, key,
                     sd_tensor_shape_str(stored, s1, sizeof s1), sd_tensor_shape_str(b, s2, sizeof s2));
        goto done;
    }
    /* .type(cd.dtype): the model weight rounded to the stored dtype */
    br = sd_tensor_to_dtype(b, stored->dtype);
    bf = br ? sd_tensor_to_dtype(br, SD_F32) : NULL;
    if (!bf) goto nomem;
    float *x = sd_tensor_f32(a);
    const float *y = sd_tensor_f32(bf);
    for (int64_t i = 0; i < sd_tensor_numel(a); i++) x[i] += y[i];
    out = sd_tensor_to_dtype(a, stored->dtype);
    if (!out) goto nomem;
    goto done;
nomem:
    sd_error_set(err, SD_ERR_NOMEM, "out of memory merging the diff ControlNet");
done:
    sd_tensor_unref(a), sd_tensor_unref(b), sd_tensor_unref(br), sd_tensor_unref(bf);
    return out;
}

sd_status sd_controlnet_diff_merge(sd_st_file *f, sd_unet *base, sd_st_file **out, sd_error *err) {
    *out = NULL;
    size_t n = sd_st_count(f);
    merged *m = calloc(1, sizeof *m);
    sd_st_entry *ents = calloc(n ? n : 1, sizeof *ents);
    if (m) m->t = calloc(n ? n : 1, sizeof *m->t);
    if (!m || !ents || !m->t) {
        if (m) free(m->t);
        free(m), free(ents);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory merging the diff ControlNet");
    }
    sd_status rc = SD_OK;
    size_t plen = strlen(SD_CONTROLNET_PREFIX);
    for (size_t i = 0; i < n && !rc; i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        sd_tensor *t = sd_st_tensor(f, e->name, err);
        if (!t) {
            rc = err->code ? err->code : SD_ERR_FORMAT;
            break;
        }
        sd_bt **w = strncmp(e->name, SD_CONTROLNET_PREFIX, plen) == 0 && sd_dtype_is_float(t->dtype)
                        ? sd_unet_param(base, e->name + plen)
                        : NULL;
        if (w && *w) {
            sd_tensor *s = add_rounded(t, *w, e->name + plen, err);
            sd_tensor_unref(t);
            if (!s) {
                rc = err->code ? err->code : SD_ERR_NOMEM;
                break;
            }
            t = s;
        }
        m->t[m->n++] = t;
        ents[i] = *e;
        ents[i].name = strdup(e->name);
        ents[i].offset = i;
        ents[i].nbytes = t->nbytes;
        if (!ents[i].name) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    if (rc) {
        for (size_t i = 0; i < n; i++) free((char *)ents[i].name);
        free(ents);
        merged_free(m);
        return rc;
    }
    static const sd_st_source_i src = {merged_read, merged_free};
    return sd_st_open_source(sd_st_path(f), ents, n, &src, m, out, err);
}
