/* cond_mix.c - ConditioningConcat and ConditioningAverage (nodes.py): the
 * first entry of conditioning_from mixed into every entry of
 * conditioning_to, in float32 with torch's operation order. */
#include <string.h>

#include "conditioning.h"
#include "nodes/image/image.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static const sd_output_def conditioning_out[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

/* conditioning_to, and the first entry of conditioning_from (ComfyUI warns
 * that the others are not used). */
static sd_status mix_inputs(sd_node_ctx *ctx, sd_value *const *in, const char *node, sd_value **to,
                            const sd_value **from, sd_error *err) {
    sd_value *f;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning_to", to, err);
    if (!rc) rc = sd_nodes_in_conditioning(in, 1, "conditioning_from", &f, err);
    if (rc) return rc;
    if (sd_value_list_len(f) == 0)
        return sd_nodes_bad_input(err, "conditioning_from", "input 'conditioning_from' is empty");
    if (sd_value_list_len(f) > 1)
        sd_node_log(ctx, SD_LOG_WARN,
                    "Warning: %s conditioning_from contains more than 1 cond, only the first one will "
                    "actually be applied to conditioning_to.", node);
    *from = sd_value_list_get(f, 0);
    return SD_OK;
}

/* The entry e with "cond" replaced by t (taken) and, when p is not NULL,
 * "pooled_output" by p (taken), appended to list. */
static int append_entry(sd_value *list, const sd_value *e, sd_tensor *t, sd_tensor *p) {
    sd_value *d = sd_value_shallow_copy(e);
    sd_value *tv = t ? sd_value_tensor(t) : NULL, *pv = p ? sd_value_tensor(p) : NULL;
    sd_tensor_unref(t);
    sd_tensor_unref(p);
    int bad = !d || !tv || (p && !pv);
    if (!bad) {
        bad = sd_value_dict_set(d, "cond", tv) != 0;
        tv = NULL;
    }
    if (!bad && pv) {
        bad = sd_value_dict_set(d, "pooled_output", pv) != 0;
        pv = NULL;
    }
    sd_value_unref(tv);
    sd_value_unref(pv);
    if (!bad) return sd_value_list_append(list, d);
    sd_value_unref(d);
    return -1;
}

/* ---- ConditioningConcat -------------------------------------------------------------------- */

static sd_status concat_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_value *to;
    const sd_value *from;
    sd_status rc = mix_inputs(ctx, in, "ConditioningConcat", &to, &from, err);
    if (rc) return rc;
    const sd_tensor *cf = sd_value_dict_tensor(from, "cond");
    sd_value *list = sd_value_list();
    if (!list) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < sd_value_list_len(to); i++) {
        const sd_value *e = sd_value_list_get(to, i);
        const sd_tensor *t1 = sd_value_dict_tensor(e, "cond");
        if (t1->shape[0] != cf->shape[0] || t1->shape[2] != cf->shape[2]) {
            sd_value_unref(list);
            return sd_nodes_bad_input(err, "conditioning_from",
                                      "cannot concatenate a cond [%lld, %lld, %lld] to entry %zu's [%lld, %lld, %lld] "
                                      "(the width and batch must match: the same text encoder)",
                                      (long long)cf->shape[0], (long long)cf->shape[1], (long long)cf->shape[2], i,
                                      (long long)t1->shape[0], (long long)t1->shape[1], (long long)t1->shape[2]);
        }
        const int64_t B = t1->shape[0], L1 = t1->shape[1], L0 = cf->shape[1], D = t1->shape[2];
        sd_tensor *tw = sd_tensor_new4(SD_F32, 3, B, L1 + L0, D, 0);
        if (tw)
            for (int64_t b = 0; b < B; b++) {
                float *dst = (float *)tw->data + b * (L1 + L0) * D;
                memcpy(dst, (const float *)t1->data + b * L1 * D, (size_t)(L1 * D) * sizeof(float));
                memcpy(dst + L1 * D, (const float *)cf->data + b * L0 * D, (size_t)(L0 * D) * sizeof(float));
            }
        if (!tw || append_entry(list, e, tw, NULL)) {
            sd_value_unref(list);
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
    }
    out[0] = list;
    return SD_OK;
}

static const sd_input_def mix_inputs_def[] = {
    {.name = "conditioning_to", .type = "CONDITIONING"},
    {.name = "conditioning_from", .type = "CONDITIONING"},
    {0}};

const sd_node_def sd_node_ConditioningConcat = {
    .version = 1,
    .class_type = "ConditioningConcat",
    .python_module = "nodes",
    .display_name = "Conditioning (Concat)",
    .category = "conditioning",
    .help = "Appends the tokens of conditioning_from's first entry to every entry of "
            "conditioning_to (one longer prompt, attended as a whole).",
    .inputs = mix_inputs_def,
    .outputs = conditioning_out,
    .run = concat_run,
};

/* ---- ConditioningAverage ------------------------------------------------------------------- */

/* a * s + b * (1 - s), torch's float32 ops with the Python scalars rounded
 * to float; b may be shorter (zeros past its end: the token padding). */
static void weighted(const float *a, const float *b, int64_t nb, int64_t n, double s, float *out) {
    const float fs = (float)s, ft = (float)(1.0 - s);
    for (int64_t i = 0; i < n; i++) {
        float x = a[i] * fs, y = (i < nb ? b[i] : 0.0f) * ft;
        out[i] = x + y;
    }
}

static sd_status average_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_value *to;
    const sd_value *from;
    sd_status rc = mix_inputs(ctx, in, "ConditioningAverage", &to, &from, err);
    if (rc) return rc;
    const double s = sd_value_as_float(in[2]);
    const sd_tensor *cf = sd_value_dict_tensor(from, "cond");
    const sd_tensor *pf = sd_value_dict_tensor(from, "pooled_output");
    sd_value *list = sd_value_list();
    if (!list) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < sd_value_list_len(to); i++) {
        const sd_value *e = sd_value_list_get(to, i);
        const sd_tensor *t1 = sd_value_dict_tensor(e, "cond");
        const sd_tensor *pt = sd_value_dict_tensor(e, "pooled_output");
        if (!pt) pt = pf; /* .get("pooled_output", pooled_output_from) */
        const char *bad = NULL;
        if (cf->shape[0] != 1 || t1->shape[0] != 1 || cf->shape[2] != t1->shape[2])
            bad = "the conds' widths differ or are batched (the same text encoder's [1, L, D] is needed)";
        else if (pf && pt && (pf->dtype != SD_F32 || pt->dtype != SD_F32 || sd_tensor_numel(pf) != sd_tensor_numel(pt)))
            bad = "the pooled outputs differ in shape";
        if (bad) {
            sd_value_unref(list);
            return sd_nodes_bad_input(err, "conditioning_from", "entry %zu: %s", i, bad);
        }
        /* t0 = cond_from[:, :L] padded with zeros to L */
        const int64_t L = t1->shape[1], D = t1->shape[2], L0 = cf->shape[1] < L ? cf->shape[1] : L;
        sd_tensor *tw = sd_tensor_new4(SD_F32, 3, 1, L, D, 0), *pw = NULL;
        if (tw) weighted(t1->data, cf->data, L0 * D, L * D, s, tw->data);
        if (pf && pt) {
            if ((pw = sd_tensor_new(SD_F32, pt->ndim, pt->shape)))
                weighted(pt->data, pf->data, sd_tensor_numel(pf), sd_tensor_numel(pt), s, pw->data);
        } else if (pf) {
            pw = sd_tensor_ref((sd_tensor *)pf);
        }
        if (!tw || (pf && !pw)) {
            sd_tensor_unref(tw);
            sd_tensor_unref(pw);
            sd_value_unref(list);
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
        if (append_entry(list, e, tw, pw)) {
            sd_value_unref(list);
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
    }
    out[0] = list;
    return SD_OK;
}

static const sd_input_def average_inputs[] = {
    {.name = "conditioning_to", .type = "CONDITIONING"},
    {.name = "conditioning_from", .type = "CONDITIONING"},
    {.name = "conditioning_to_strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 1.0, .step = 0.01,
     .has_range = 1},
    {0}};

const sd_node_def sd_node_ConditioningAverage = {
    .version = 1,
    .class_type = "ConditioningAverage",
    .python_module = "nodes",
    /* ComfyUI's display-name table spells the key "ConditioningAverage " (with
     * a space), so its editor shows the class name */
    .display_name = "ConditioningAverage",
    .category = "conditioning",
    .help = "Blends every entry of conditioning_to with conditioning_from's first entry: "
            "to * strength + from * (1 - strength), tokens and pooled output.",
    .inputs = average_inputs,
    .outputs = conditioning_out,
    .run = average_run,
};
