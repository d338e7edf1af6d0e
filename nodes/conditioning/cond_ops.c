/* cond_ops.c - ConditioningCombine, ConditioningSetArea, ConditioningZeroOut,
 * and the family's registration. */
#include <string.h>

#include "conditioning.h"
#include "nodes/image/image.h"

sd_status sd_nodes_in_conditioning(sd_value *const *in, int i, const char *name,
                                   sd_value **out, sd_error *err) {
    sd_value *v = in[i];
    *out = NULL;
    const char *why = NULL;
    if (!v || sd_value_kind_of(v) != SD_VAL_LIST) why = "a list of conditionings";
    for (size_t k = 0; !why && k < sd_value_list_len(v); k++) {
        sd_value *e = sd_value_list_get(v, k);
        sd_tensor *c = sd_value_kind_of(e) == SD_VAL_DICT ? sd_value_dict_tensor(e, "cond") : NULL;
        if (!c || c->dtype != SD_F32 || c->ndim != 3) why = "entries with an F32 [1, L, D] 'cond'";
    }
    if (why) {
        sd_error_set(err, SD_ERR_INVALID, "input '%s' must be CONDITIONING (%s)", name, why);
        sd_error_at(err, NULL, NULL, name);
        return SD_ERR_INVALID;
    }
    *out = v;
    return SD_OK;
}

static const sd_output_def conditioning_out[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

/* ---- ConditioningCombine -------------------------------------------------------------- */

static sd_status combine_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                             sd_error *err) {
    (void)ctx;
    sd_value *a, *b;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning_1", &a, err);
    if (!rc) rc = sd_nodes_in_conditioning(in, 1, "conditioning_2", &b, err);
    if (rc) return rc;
    sd_value *list = sd_value_list();
    int bad = !list;
    for (size_t k = 0; !bad && k < sd_value_list_len(a); k++)
        bad = sd_value_list_append(list, sd_value_ref(sd_value_list_get(a, k))) != 0;
    for (size_t k = 0; !bad && k < sd_value_list_len(b); k++)
        bad = sd_value_list_append(list, sd_value_ref(sd_value_list_get(b, k))) != 0;
    if (bad) {
        sd_value_unref(list);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    out[0] = list;
    return SD_OK;
}

static const sd_input_def combine_inputs[] = {
    {.name = "conditioning_1", .type = "CONDITIONING"},
    {.name = "conditioning_2", .type = "CONDITIONING"},
    {0}};

const sd_node_def sd_node_ConditioningCombine = {
    .version = 1,
    .class_type = "ConditioningCombine",
    .python_module = "nodes",
    .display_name = "Conditioning (Combine)",
    .category = "conditioning",
    .help = "Concatenates two conditioning lists; the sampler denoises with each entry "
            "and averages the predictions (weighted by area and strength).",
    .inputs = combine_inputs,
    .outputs = conditioning_out,
    .run = combine_run,
};

/* ---- ConditioningSetArea ---------------------------------------------------------------- */

sd_status sd_nodes_conditioning_map(const sd_value *src, sd_cond_entry_fn fn, const void *arg,
                                    sd_value **out, sd_error *err) {
    sd_value *list = sd_value_list();
    int bad = !list;
    for (size_t k = 0; !bad && k < sd_value_list_len(src); k++) {
        sd_value *d = sd_value_shallow_copy(sd_value_list_get(src, k));
        bad = !d || fn(d, arg) != 0;
        if (bad) {
            sd_value_unref(d);
            break;
        }
        bad = sd_value_list_append(list, d) != 0;
    }
    if (bad) {
        sd_value_unref(list);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    *out = list;
    return SD_OK;
}

typedef struct area_args {
    int64_t h, w, y, x; /* latent units */
    double strength;
} area_args;

static int set_area(sd_value *d, const void *arg) {
    const area_args *a = arg;
    sd_value *area = sd_value_list();
    if (!area) return -1;
    int64_t v[4] = {a->h, a->w, a->y, a->x};
    for (int i = 0; i < 4; i++)
        if (sd_value_list_append(area, sd_value_int(v[i]))) {
            sd_value_unref(area);
            return -1;
        }
    if (sd_value_dict_set(d, "area", area)) return -1;
    if (sd_value_dict_set(d, "strength", sd_value_float(a->strength))) return -1;
    return sd_value_dict_set(d, "set_area_to_bounds", sd_value_bool(0));
}

static int64_t floordiv8(int64_t v) { return v >= 0 ? v / 8 : -((-v + 7) / 8); }

static sd_status set_area_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                              sd_error *err) {
    (void)ctx;
    sd_value *c;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning", &c, err);
    if (rc) return rc;
    area_args a = {.w = floordiv8(sd_value_as_int(in[1])),
                   .h = floordiv8(sd_value_as_int(in[2])),
                   .x = floordiv8(sd_value_as_int(in[3])),
                   .y = floordiv8(sd_value_as_int(in[4])),
                   .strength = sd_value_as_float(in[5])};
    return sd_nodes_conditioning_map(c, set_area, &a, &out[0], err);
}

static const sd_input_def set_area_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "width", .type = SD_T_INT, .def = 64, .min = 64, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "height", .type = SD_T_INT, .def = 64, .min = 64, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "x", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "y", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 10.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_ConditioningSetArea = {
    .version = 1,
    .class_type = "ConditioningSetArea",
    .python_module = "nodes",
    .display_name = "Conditioning (Set Area)",
    .category = "conditioning",
    .help = "Restricts conditioning to a rectangle (pixels, stored in latent units) "
            "with a strength; combine with others through ConditioningCombine.",
    .inputs = set_area_inputs,
    .outputs = conditioning_out,
    .run = set_area_run,
};

/* ---- ConditioningZeroOut ------------------------------------------------------------------ */

static int zero_key(sd_value *d, const char *key) {
    sd_tensor *t = sd_value_dict_tensor(d, key);
    if (!t) return 0;
    sd_tensor *z = sd_tensor_new(t->dtype, t->ndim, t->shape);
    if (!z) return -1;
    sd_value *zv = sd_value_tensor(z);
    sd_tensor_unref(z);
    return zv ? sd_value_dict_set(d, key, zv) : -1;
}

static int zero_entry(sd_value *d, const void *arg) {
    (void)arg;
    return zero_key(d, "cond") || zero_key(d, "pooled_output");
}

static sd_status zero_out_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                              sd_error *err) {
    (void)ctx;
    sd_value *c;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning", &c, err);
    if (rc) return rc;
    return sd_nodes_conditioning_map(c, zero_entry, NULL, &out[0], err);
}

static const sd_input_def zero_out_inputs[] = {{.name = "conditioning", .type = "CONDITIONING"},
                                               {0}};

const sd_node_def sd_node_ConditioningZeroOut = {
    .version = 1,
    .class_type = "ConditioningZeroOut",
    .python_module = "nodes",
    .display_name = "ConditioningZeroOut",
    .category = "advanced/conditioning",
    .help = "The same conditioning with cond and pooled_output set to zeros.",
    .inputs = zero_out_inputs,
    .outputs = conditioning_out,
    .run = zero_out_run,
};

/* ---- registration -------------------------------------------------------------------------- */

extern const sd_node_def sd_node_CLIPTextEncode, sd_node_CLIPSetLastLayer;
extern const sd_node_def sd_node_CLIPTextEncodeSDXL, sd_node_CLIPTextEncodeSDXLRefiner;
extern const sd_node_def sd_node_CLIPTextEncodeFlux; /* flux_encode.c */
extern const sd_node_def sd_node_CLIPTextEncodeSD3;  /* sd3_encode.c */
extern const sd_node_def sd_node_ConditioningSetAreaPercentage, sd_node_ConditioningSetAreaStrength,
    sd_node_ConditioningSetMask, sd_node_ConditioningSetTimestepRange; /* cond_set.c */
extern const sd_node_def sd_node_ConditioningConcat, sd_node_ConditioningAverage; /* cond_mix.c */

const sd_node_def *const sd_nodes_conditioning[] = {
    &sd_node_CLIPTextEncode,      &sd_node_CLIPSetLastLayer,   &sd_node_ConditioningCombine,
    &sd_node_ConditioningSetArea, &sd_node_ConditioningZeroOut, &sd_node_CLIPTextEncodeSDXL,
    &sd_node_CLIPTextEncodeSDXLRefiner, &sd_node_CLIPTextEncodeFlux,
    &sd_node_CLIPTextEncodeSD3, &sd_node_ConditioningSetAreaPercentage,
    &sd_node_ConditioningSetAreaStrength, &sd_node_ConditioningSetMask,
    &sd_node_ConditioningSetTimestepRange, &sd_node_ConditioningConcat,
    &sd_node_ConditioningAverage, NULL};

sd_status sd_nodes_conditioning_register(sd_error *err) {
    sd_status rc = sd_registry_add(sd_nodes_conditioning, err);
    if (!rc) rc = sd_registry_add(sd_nodes_flux_conditioning, err);
    if (!rc) rc = sd_registry_alias("CLIPEncode", "CLIPTextEncode", err);
    return rc;
}
