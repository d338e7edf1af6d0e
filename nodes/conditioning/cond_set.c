/* cond_set.c - the nodes that set keys on every conditioning entry, read by
 * the sampler (nodes/sampling/cond_model.c): ConditioningSetAreaPercentage,
 * ConditioningSetAreaStrength, ConditioningSetMask,
 * ConditioningSetTimestepRange (nodes.py, node_helpers.conditioning_set_values). */
#include <string.h>

#include "conditioning.h"
#include "nodes/image/image.h"

static const sd_output_def conditioning_out[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

/* One key/value pair set on each entry (the value is shared by reference). */
typedef struct kv {
    const char *key;
    sd_value *val;
} kv;

static int set_kvs(sd_value *d, const void *arg) {
    for (const kv *p = arg; p->key; p++)
        if (sd_value_dict_set(d, p->key, sd_value_ref(p->val))) return -1;
    return 0;
}

/* The conditioning input 0 with the pairs set; the pairs' values are released. */
static sd_status set_values(sd_value *const *in, kv *pairs, sd_value **out, sd_error *err) {
    sd_value *c;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning", &c, err);
    int bad = 0;
    for (kv *p = pairs; p->key; p++) bad |= !p->val;
    if (!rc && bad) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (!rc) rc = sd_nodes_conditioning_map(c, set_kvs, pairs, out, err);
    for (kv *p = pairs; p->key; p++) sd_value_unref(p->val);
    return rc;
}

/* ---- ConditioningSetAreaPercentage ------------------------------------------------------- */

/* "area" = ["percentage", height, width, y, x] (fractions of the latent),
 * resolved to latent units when sampling starts (sd_cond_resolve). */
static sd_status area_pct_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_value *area = sd_value_list();
    int bad = !area || sd_value_list_append(area, sd_value_string("percentage"));
    static const int order[4] = {2, 1, 4, 3}; /* height, width, y, x from the inputs */
    for (int i = 0; !bad && i < 4; i++)
        bad = sd_value_list_append(area, sd_value_float(sd_value_as_float(in[order[i]]))) != 0;
    if (bad) {
        sd_value_unref(area);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    kv pairs[] = {{"area", area},
                  {"strength", sd_value_float(sd_value_as_float(in[5]))},
                  {"set_area_to_bounds", sd_value_bool(0)},
                  {0}};
    return set_values(in, pairs, &out[0], err);
}

static const sd_input_def area_pct_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "width", .type = SD_T_FLOAT, .def = 1.0, .min = 0, .max = 1.0, .step = 0.01, .has_range = 1},
    {.name = "height", .type = SD_T_FLOAT, .def = 1.0, .min = 0, .max = 1.0, .step = 0.01, .has_range = 1},
    {.name = "x", .type = SD_T_FLOAT, .def = 0, .min = 0, .max = 1.0, .step = 0.01, .has_range = 1},
    {.name = "y", .type = SD_T_FLOAT, .def = 0, .min = 0, .max = 1.0, .step = 0.01, .has_range = 1},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 10.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_ConditioningSetAreaPercentage = {
    .version = 1,
    .class_type = "ConditioningSetAreaPercentage",
    .python_module = "nodes",
    .display_name = "Conditioning (Set Area with Percentage)",
    .category = "conditioning",
    .help = "Restricts conditioning to a rectangle given as fractions of the latent "
            "(rounded to latent pixels when sampling starts) with a strength.",
    .inputs = area_pct_inputs,
    .outputs = conditioning_out,
    .run = area_pct_run,
};

/* ---- ConditioningSetAreaStrength ----------------------------------------------------------- */

static sd_status strength_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    kv pairs[] = {{"strength", sd_value_float(sd_value_as_float(in[1]))}, {0}};
    return set_values(in, pairs, &out[0], err);
}

static const sd_input_def strength_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 10.0, .step = 0.01, .has_range = 1},
    {0}};

const sd_node_def sd_node_ConditioningSetAreaStrength = {
    .version = 1,
    .class_type = "ConditioningSetAreaStrength",
    .python_module = "nodes",
    .display_name = "ConditioningSetAreaStrength",
    .category = "conditioning",
    .help = "Sets the weight of every entry's prediction where entries overlap.",
    .inputs = strength_inputs,
    .outputs = conditioning_out,
    .run = strength_run,
};

/* ---- ConditioningSetMask --------------------------------------------------------------------- */

static sd_status set_mask_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    sd_tensor *m = sd_value_kind_of(in[1]) == SD_VAL_TENSOR ? sd_value_as_tensor(in[1]) : NULL;
    /* ComfyUI keeps a 3-dim mask as it is and lifts a 2-dim one; others it
     * cannot apply in the sampler */
    if (!m || m->dtype != SD_F32 || m->ndim < 2 || m->ndim > 3)
        return sd_nodes_bad_input(err, "mask", "input 'mask' must be a MASK [H, W] or [B, H, W]");
    sd_tensor *m3 = m->ndim == 3 ? sd_tensor_ref(m) : sd_tensor_reshape(m, 3, (int64_t[]){1, m->shape[0], m->shape[1]});
    sd_value *mv = m3 ? sd_value_tensor(m3) : NULL;
    sd_tensor_unref(m3);
    const char *area = sd_value_as_string(in[3]);
    kv pairs[] = {{"mask", mv},
                  {"set_area_to_bounds", sd_value_bool(area && strcmp(area, "default") != 0)},
                  {"mask_strength", sd_value_float(sd_value_as_float(in[2]))},
                  {0}};
    return set_values(in, pairs, &out[0], err);
}

static const char *const cond_area_modes[] = {"default", "mask bounds", NULL};

static const sd_input_def set_mask_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "mask", .type = "MASK"},
    {.name = "strength", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 10.0, .step = 0.01, .has_range = 1},
    {.name = "set_cond_area", .type = SD_T_COMBO, .options = cond_area_modes, .def_str = "default", .no_default = 1},
    {0}};

const sd_node_def sd_node_ConditioningSetMask = {
    .version = 1,
    .class_type = "ConditioningSetMask",
    .python_module = "nodes",
    .display_name = "Conditioning (Set Mask)",
    .category = "conditioning",
    .help = "Restricts conditioning to a mask (resized to the latent when sampling starts) "
            "with a strength; 'mask bounds' runs the model only on the mask's bounding box.",
    .inputs = set_mask_inputs,
    .outputs = conditioning_out,
    .run = set_mask_run,
};

/* ---- ConditioningSetTimestepRange -------------------------------------------------------------- */

static sd_status range_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    kv pairs[] = {{"start_percent", sd_value_float(sd_value_as_float(in[1]))},
                  {"end_percent", sd_value_float(sd_value_as_float(in[2]))},
                  {0}};
    return set_values(in, pairs, &out[0], err);
}

static const sd_input_def range_inputs[] = {
    {.name = "conditioning", .type = "CONDITIONING"},
    {.name = "start", .type = SD_T_FLOAT, .def = 0.0, .min = 0.0, .max = 1.0, .step = 0.001, .has_range = 1},
    {.name = "end", .type = SD_T_FLOAT, .def = 1.0, .min = 0.0, .max = 1.0, .step = 0.001, .has_range = 1},
    {0}};

const sd_node_def sd_node_ConditioningSetTimestepRange = {
    .version = 1,
    .class_type = "ConditioningSetTimestepRange",
    .python_module = "nodes",
    .display_name = "ConditioningSetTimestepRange",
    .category = "advanced/conditioning",
    .help = "Uses the conditioning only between start and end (fractions of the "
            "sampling schedule, 0 = the first step).",
    .inputs = range_inputs,
    .outputs = conditioning_out,
    .run = range_run,
};
