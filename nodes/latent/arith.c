/* arith.c - LatentAdd, LatentSubtract, LatentMultiply, LatentInterpolate,
 * LatentBatch, LatentBatchSeedBehavior (comfy_extras/nodes_latent.py). */
#include <string.h>

#include "latent.h"
#include "models/image/latentops.h"
#include "models/image/maskops.h"
#include "nodes/image/image.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static const sd_output_def latent_out[] = {{"LATENT", "LATENT"}, {0}};
static const sd_input_def two_latents[] = {{.name = "samples1", .type = "LATENT"}, {.name = "samples2", .type = "LATENT"}, {0}};

/* reshape_latent_to(target.shape, t, repeat_batch): t resized (bilinear,
 * centre crop) when its [C, H, W] differ from target's, then repeated or cut
 * to target's batch when repeat_batch. A new reference. */
static sd_status reshape_to(sd_node_ctx *ctx, const sd_tensor *target, sd_tensor *t, int repeat_batch,
                            sd_tensor **out, sd_error *err) {
    *out = NULL;
    sd_tensor *r = sd_tensor_ref(t);
    if (t->shape[1] != target->shape[1] || t->shape[2] != target->shape[2] || t->shape[3] != target->shape[3]) {
        sd_tensor_unref(r);
        r = NULL;
        sd_status rc = sd_nodes_upscale_batched(ctx, t, 0, target->shape[3], target->shape[2], SD_UPSCALE_BILINEAR,
                                                SD_CROP_CENTER, "samples2", &r, err);
        if (rc) return rc;
    }
    if (r->shape[1] != target->shape[1]) {
        sd_tensor_unref(r);
        return sd_nodes_bad_input(err, "samples2", "the latents have %lld and %lld channels",
                                  (long long)target->shape[1], (long long)t->shape[1]);
    }
    if (repeat_batch && r->shape[0] != target->shape[0]) {
        sd_tensor *b = sd_repeat_to_batch(r, target->shape[0]);
        sd_tensor_unref(r);
        if (!b) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        r = b;
    }
    *out = r;
    return SD_OK;
}

/* ---- LatentAdd / LatentSubtract -------------------------------------------------------- */

static sd_status add_sub(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, int sub, sd_error *err) {
    sd_tensor *a, *b, *b2 = NULL;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples1", &a, err);
    if (!rc) rc = sd_nodes_in_latent(in, 1, "samples2", &b, err);
    if (!rc) rc = reshape_to(ctx, a, b, 1, &b2, err);
    if (rc) return rc;
    sd_tensor *o = sd_tensor_new(SD_F32, 4, a->shape);
    if (!o) { sd_tensor_unref(b2); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    const float *av = sd_tensor_f32(a), *bv = sd_tensor_f32(b2);
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0, n = sd_tensor_numel(o); i < n; i++) d[i] = sub ? av[i] - bv[i] : av[i] + bv[i];
    sd_tensor_unref(b2);
    return sd_nodes_latent_with(in[0], "samples", o, &out[0], err);
}

static sd_status add_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return add_sub(ctx, in, out, 0, err);
}

static sd_status sub_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return add_sub(ctx, in, out, 1, err);
}

const sd_node_def sd_node_LatentAdd = {
    .version = 1, .class_type = "LatentAdd", .python_module = "comfy_extras.nodes_latent", .flags = SD_NODE_V3,
    .category = "latent/advanced",
    .help = "samples1 + samples2 (samples2 resized and repeated to samples1).", .inputs = two_latents,
    .outputs = latent_out, .run = add_run};

const sd_node_def sd_node_LatentSubtract = {
    .version = 1, .class_type = "LatentSubtract", .python_module = "comfy_extras.nodes_latent", .flags = SD_NODE_V3,
    .category = "latent/advanced",
    .help = "samples1 - samples2 (samples2 resized and repeated to samples1).", .inputs = two_latents,
    .outputs = latent_out, .run = sub_run};

/* ---- LatentMultiply -------------------------------------------------------------------- */

static sd_status multiply_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *a;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &a, err);
    if (rc) return rc;
    float m = (float)sd_value_as_float(in[1]);
    sd_tensor *o = sd_tensor_new(SD_F32, 4, a->shape);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const float *av = sd_tensor_f32(a);
    float *d = sd_tensor_f32(o);
    for (int64_t i = 0, n = sd_tensor_numel(o); i < n; i++) d[i] = av[i] * m;
    return sd_nodes_latent_with(in[0], "samples", o, &out[0], err);
}

static const sd_input_def multiply_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "multiplier", .type = SD_T_FLOAT, .def = 1.0, .min = -10.0, .max = 10.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_LatentMultiply = {
    .version = 1, .class_type = "LatentMultiply", .python_module = "comfy_extras.nodes_latent", .flags = SD_NODE_V3,
    .category = "latent/advanced",
    .help = "samples * multiplier.", .inputs = multiply_inputs, .outputs = latent_out, .run = multiply_run};

/* ---- LatentInterpolate ------------------------------------------------------------------- */

static sd_status interpolate_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *a, *b, *b2 = NULL, *o = NULL;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples1", &a, err);
    if (!rc) rc = sd_nodes_in_latent(in, 1, "samples2", &b, err);
    if (!rc) rc = reshape_to(ctx, a, b, 1, &b2, err);
    if (rc) return rc;
    rc = sd_latent_interpolate(a, b2, sd_value_as_float(in[2]), &o, err);
    sd_tensor_unref(b2);
    if (rc) {
        if (!err->input[0]) sd_error_at(err, NULL, NULL, "samples1");
        return rc;
    }
    return sd_nodes_latent_with(in[0], "samples", o, &out[0], err);
}

static const sd_input_def interpolate_inputs[] = {
    {.name = "samples1", .type = "LATENT"},
    {.name = "samples2", .type = "LATENT"},
    {.name = "ratio", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 1.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_LatentInterpolate = {
    .version = 1, .class_type = "LatentInterpolate", .python_module = "comfy_extras.nodes_latent", .flags = SD_NODE_V3,
    .category = "latent/advanced",
    .help = "Interpolates directions and magnitudes (per pixel, across channels) separately: ratio 1 "
            "gives samples1.",
    .inputs = interpolate_inputs, .outputs = latent_out, .run = interpolate_run};

/* ---- LatentBatch -------------------------------------------------------------------------- */

/* Appends a LATENT's batch_index, or 0 .. n-1 without one, to list. */
static int append_indices(sd_value *list, const sd_value *latent, int64_t n) {
    const sd_value *bi = sd_value_dict_get(latent, "batch_index");
    if (bi && sd_value_kind_of(bi) == SD_VAL_LIST) {
        for (size_t i = 0; i < sd_value_list_len(bi); i++)
            if (sd_value_list_append(list, sd_value_ref(sd_value_list_get(bi, i)))) return -1;
        return 0;
    }
    for (int64_t i = 0; i < n; i++)
        if (sd_value_list_append(list, sd_value_int(i))) return -1;
    return 0;
}

static sd_status batch_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_tensor *a, *b, *b2 = NULL;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples1", &a, err);
    if (!rc) rc = sd_nodes_in_latent(in, 1, "samples2", &b, err);
    if (!rc) rc = reshape_to(ctx, a, b, 0, &b2, err);
    if (rc) return rc;
    int64_t shape[4] = {a->shape[0] + b2->shape[0], a->shape[1], a->shape[2], a->shape[3]};
    sd_tensor *o = sd_tensor_new(SD_F32, 4, shape);
    sd_value *bi = sd_value_list();
    if (!o || !bi || append_indices(bi, in[0], a->shape[0]) || append_indices(bi, in[1], b2->shape[0])) {
        sd_tensor_unref(o), sd_tensor_unref(b2), sd_value_unref(bi);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    memcpy(o->data, a->data, a->nbytes);
    memcpy((char *)o->data + a->nbytes, b2->data, b2->nbytes);
    sd_tensor_unref(b2);
    if ((rc = sd_nodes_latent_with(in[0], "samples", o, &out[0], err))) { sd_value_unref(bi); return rc; }
    if (sd_value_dict_set(out[0], "batch_index", bi)) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return SD_OK;
}

const sd_node_def sd_node_LatentBatch = {
    .version = 1, .class_type = "LatentBatch", .python_module = "comfy_extras.nodes_latent", .category = "latent/batch",
    .help = "samples1 and samples2 (resized to samples1) in one batch, with their batch indices.",
    .inputs = two_latents, .outputs = latent_out, .flags = SD_NODE_DEPRECATED | SD_NODE_V3, .run = batch_run};

/* ---- LatentBatchSeedBehavior ---------------------------------------------------------------- */

static const char *const behaviors[] = {"random", "fixed", NULL};

static sd_status seed_behavior_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *s;
    sd_status rc = sd_nodes_in_latent(in, 0, "samples", &s, err);
    if (rc) return rc;
    const char *b = sd_value_as_string(in[1]);
    if (!b || (strcmp(b, "random") && strcmp(b, "fixed")))
        return sd_nodes_bad_input(err, "seed_behavior", "unknown seed_behavior '%s'", b ? b : "");
    sd_value *d = sd_value_dict();
    if (!d) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    /* samples.copy(), without batch_index for "random" */
    for (size_t i = 0; i < sd_value_dict_len(in[0]); i++) {
        const char *k = sd_value_dict_key(in[0], i);
        if (!strcmp(k, "batch_index")) continue;
        if (sd_value_dict_set(d, k, sd_value_ref(sd_value_dict_at(in[0], i)))) goto nomem;
    }
    if (!strcmp(b, "fixed")) {
        const sd_value *bi = sd_value_dict_get(in[0], "batch_index");
        int64_t first = bi && sd_value_list_len(bi) > 0 ? sd_value_as_int(sd_value_list_get(bi, 0)) : 0;
        sd_value *l = sd_value_list();
        if (!l) goto nomem;
        for (int64_t i = 0; i < s->shape[0]; i++)
            if (sd_value_list_append(l, sd_value_int(first))) { sd_value_unref(l); goto nomem; }
        if (sd_value_dict_set(d, "batch_index", l)) goto nomem;
    }
    out[0] = d;
    return SD_OK;
nomem:
    sd_value_unref(d);
    return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def seed_behavior_inputs[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "seed_behavior", .type = SD_T_COMBO, .options = behaviors, .def_str = "fixed"}, {0}};

const sd_node_def sd_node_LatentBatchSeedBehavior = {
    .version = 1, .class_type = "LatentBatchSeedBehavior", .python_module = "comfy_extras.nodes_latent",
    .flags = SD_NODE_V3,
    .category = "latent/advanced",
    .help = "fixed: every latent of the batch gets the first one's noise (batch_index all the "
            "first index); random: batch_index removed, each latent its own noise.",
    .inputs = seed_behavior_inputs, .outputs = latent_out, .run = seed_behavior_run};
