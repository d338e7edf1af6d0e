/* rebatch.c - RebatchLatents (comfy_extras/nodes_rebatch.py): a list of
 * latent batches regrouped into batches of batch_size, with their noise
 * masks (all ones where a latent has none, dropped again from a batch whose
 * mask is all ones) and batch indices; the output is a list
 * (core/executor.h, "Lists"). ComfyUI's bookkeeping is kept as it is: a
 * latent of another size ends the batch being built (only its first
 * batch_size items go out), and masks and indices are sliced by the same
 * ranges as the samples, each by its own length. */
#include <string.h>

#include "latent.h"
#include "models/image/maskops.h"
#include "nodes/image/image.h"

/* (samples, masks, indices), any part absent as NULL: get_batch's tuple */
typedef struct part {
    sd_tensor *s, *m;
    sd_value *idx;
} part;

static void part_free(part *p) {
    sd_tensor_unref(p->s);
    sd_tensor_unref(p->m);
    sd_value_unref(p->idx);
    memset(p, 0, sizeof *p);
}

/* t[a:b] along dim 0 (Python's clamping); NULL only when out of memory */
static sd_tensor *rows(const sd_tensor *t, int64_t a, int64_t b) {
    int64_t n = t->shape[0];
    if (a > n) a = n;
    if (b > n) b = n;
    if (b < a) b = a;
    int64_t shape[SD_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
    shape[0] = b - a;
    sd_tensor *o = sd_tensor_new(t->dtype, t->ndim, shape);
    size_t item = n ? t->nbytes / (size_t)n : 0;
    if (o && b > a) memcpy(o->data, (const char *)t->data + (size_t)a * item, (size_t)(b - a) * item);
    return o;
}

static sd_value *list_rows(const sd_value *l, int64_t a, int64_t b) {
    int64_t n = (int64_t)sd_value_list_len(l);
    if (a > n) a = n;
    if (b > n) b = n;
    sd_value *o = sd_value_list();
    for (int64_t i = a; o && i < b; i++)
        if (sd_value_list_append(o, sd_value_ref(sd_value_list_get(l, (size_t)i)))) { sd_value_unref(o); o = NULL; }
    return o;
}

static sd_tensor *cat(const sd_tensor *a, const sd_tensor *b) {
    int64_t shape[SD_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) shape[i] = a->shape[i];
    shape[0] += b->shape[0];
    sd_tensor *o = sd_tensor_new(a->dtype, a->ndim, shape);
    if (o) {
        memcpy(o->data, a->data, a->nbytes);
        memcpy((char *)o->data + a->nbytes, b->data, b->nbytes);
    }
    return o;
}

static int same_rest(const sd_tensor *a, const sd_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 1; i < a->ndim; i++) if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

/* get_batch(latents, i, offset) */
static sd_status get_batch(const sd_value *latent, int64_t offset, part *p, sd_error *err) {
    memset(p, 0, sizeof *p);
    sd_tensor *s = sd_value_dict_tensor(latent, "samples"), *m = sd_value_dict_tensor(latent, "noise_mask");
    if (!s || s->dtype != SD_F32 || s->ndim != 4)
        return sd_nodes_bad_input(err, "latents", "input 'latents': a LATENT without F32 samples [B, C, H, W]");
    int64_t B = s->shape[0];
    if (m && (m->dtype != SD_F32 || m->ndim != 4 || m->shape[0] < 1))
        return sd_nodes_bad_input(err, "latents", "input 'latents': a noise_mask that is not [B, 1, H, W]");
    p->s = sd_tensor_ref(s);
    if (!m) {
        /* torch.ones((B, 1, H * 8, W * 8)) */
        p->m = sd_tensor_new4(SD_F32, 4, B, 1, s->shape[2] * 8, s->shape[3] * 8);
        if (p->m) for (int64_t i = 0, n = sd_tensor_numel(p->m); i < n; i++) sd_tensor_f32(p->m)[i] = 1.0f;
    } else if (m->shape[0] < B) {
        /* mask.repeat((B - 1) // mb + 1, 1, 1, 1)[:B] */
        p->m = sd_repeat_to_batch(m, B);
    } else {
        p->m = sd_tensor_ref(m);
    }
    const sd_value *bi = sd_value_dict_get(latent, "batch_index");
    if (bi && sd_value_kind_of(bi) == SD_VAL_LIST) {
        p->idx = sd_value_ref((sd_value *)bi);
    } else {
        p->idx = sd_value_list();
        for (int64_t i = 0; p->idx && i < B; i++)
            if (sd_value_list_append(p->idx, sd_value_int(i + offset))) { sd_value_unref(p->idx); p->idx = NULL; }
    }
    if (!p->m || !p->idx) { part_free(p); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    return SD_OK;
}

/* One output batch from slice [a, b) of cur: {samples, noise_mask?, batch_index}. */
static sd_status emit(const part *cur, int64_t a, int64_t b, sd_value *list, sd_error *err) {
    sd_tensor *s = cur->s ? rows(cur->s, a, b) : NULL, *m = cur->m ? rows(cur->m, a, b) : NULL;
    sd_value *idx = cur->idx ? list_rows(cur->idx, a, b) : NULL, *d = sd_value_dict();
    int bad = !s || !m || !idx || !d;
    if (!bad) {
        bad = sd_value_dict_set(d, "samples", sd_value_tensor(s));
        /* a mask of all ones is dropped (its mean is 1.0) */
        double sum = 0.0;
        int64_t n = sd_tensor_numel(m);
        for (int64_t i = 0; i < n; i++) sum += sd_tensor_f32(m)[i];
        if (!bad && !(n > 0 && sum / (double)n == 1.0)) bad = sd_value_dict_set(d, "noise_mask", sd_value_tensor(m));
        if (!bad) { bad = sd_value_dict_set(d, "batch_index", idx); idx = NULL; }
    }
    sd_tensor_unref(s);
    sd_tensor_unref(m);
    sd_value_unref(idx);
    if (bad || sd_value_list_append(list, d)) {
        if (bad) sd_value_unref(d);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    return SD_OK;
}

/* cur = cur ++ next (cat_batch); next's parts are consumed */
static sd_status join(part *cur, part *next, sd_error *err) {
    if (!cur->m || !same_rest(cur->m, next->m))
        return sd_nodes_bad_input(err, "latents", "noise masks of different sizes cannot share a batch (torch.cat "
                                  "refuses them)");
    sd_tensor *s = cat(cur->s, next->s), *m = cat(cur->m, next->m);
    sd_value *idx = cur->idx ? list_rows(cur->idx, 0, (int64_t)sd_value_list_len(cur->idx)) : sd_value_list();
    for (size_t i = 0; idx && i < sd_value_list_len(next->idx); i++)
        if (sd_value_list_append(idx, sd_value_ref(sd_value_list_get(next->idx, i)))) { sd_value_unref(idx); idx = NULL; }
    part_free(cur);
    part_free(next);
    cur->s = s, cur->m = m, cur->idx = idx;
    return s && m && idx ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status rebatch_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const sd_value *latents = in[0];
    int64_t bs = sd_value_as_int(sd_value_list_get(in[1], 0));
    if (bs < 1) return sd_nodes_bad_input(err, "batch_size", "batch_size %lld is below 1", (long long)bs);
    sd_value *list = sd_value_list();
    if (!list) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    part cur = {0}, next = {0};
    int64_t processed = 0;
    sd_status rc = SD_OK;
    for (size_t i = 0; i < sd_value_list_len(latents) && !rc; i++) {
        if ((rc = get_batch(sd_value_list_get(latents, i), processed, &next, err))) break;
        processed += (int64_t)sd_value_list_len(next.idx);
        if (!cur.s) {
            part_free(&cur);
            cur = next;
            memset(&next, 0, sizeof next);
        } else if (next.s->shape[2] != cur.s->shape[2] || next.s->shape[3] != cur.s->shape[3]) {
            rc = emit(&cur, 0, bs, list, err);
            part_free(&cur);
            cur = next;
            memset(&next, 0, sizeof next);
        } else {
            if (cur.s->shape[1] != next.s->shape[1])
                rc = sd_nodes_bad_input(err, "latents", "latents of %lld and %lld channels cannot share a batch",
                                        (long long)cur.s->shape[1], (long long)next.s->shape[1]);
            else
                rc = join(&cur, &next, err);
        }
        if (!rc && cur.s && cur.s->shape[0] > bs) {
            int64_t num = cur.s->shape[0] / bs;
            for (int64_t k = 0; k < num && !rc; k++) rc = emit(&cur, k * bs, (k + 1) * bs, list, err);
            /* the remainder, each part by its own length (None where nothing is left) */
            int64_t from = num * bs;
            part rem = {0};
            if (!rc) {
                if (cur.s->shape[0] > from) rem.s = rows(cur.s, from, cur.s->shape[0]);
                if (cur.m->shape[0] > from) rem.m = rows(cur.m, from, cur.m->shape[0]);
                if ((int64_t)sd_value_list_len(cur.idx) > from)
                    rem.idx = list_rows(cur.idx, from, (int64_t)sd_value_list_len(cur.idx));
            }
            part_free(&cur);
            cur = rem;
        }
    }
    if (!rc && cur.s) rc = emit(&cur, 0, bs, list, err);
    part_free(&cur);
    part_free(&next);
    if (rc) { sd_value_unref(list); return rc; }
    out[0] = list;
    return SD_OK;
}

static const sd_input_def rebatch_inputs[] = {
    {.name = "latents", .type = "LATENT"},
    {.name = "batch_size", .type = SD_T_INT, .def = 1, .min = 1, .max = 4096, .has_range = 1},
    {0}};
static const sd_output_def rebatch_out[] = {{"LATENT", "LATENT", .is_list = 1}, {0}};

const sd_node_def sd_node_RebatchLatents = {
    .version = 1, .class_type = "RebatchLatents", .python_module = "comfy_extras.nodes_rebatch",
    .display_name = "Rebatch Latents", .category = "latent/batch",
    .help = "The latents of all incoming batches regrouped into batches of batch_size (a list: the "
            "nodes after it run once per batch).",
    .inputs = rebatch_inputs, .outputs = rebatch_out, .flags = SD_NODE_INPUT_IS_LIST | SD_NODE_V3, .run = rebatch_run};
