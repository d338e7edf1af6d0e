/* gligen_nodes.c - GLIGENLoader and GLIGENTextBoxApply (nodes.py) and the
 * sampler-side reader of the "gligen" entries they attach. */
#include "gligen_nodes.h"

#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/model_paths.h"
#include "models/text/text_encode.h"
#include "nodes/conditioning/conditioning.h"
#include "nodes/conditioning/text_cond.h"
#include "nodes/image/image.h"
#include "nodes/loaders/loaders.h"

static void free_gligen(void *p) {
    sd_gligen_ref *r = p;
    if (!r) return;
    sd_gligen_free(r->g);
    free(r->name);
    free(r);
}

const sd_handle_type sd_handle_gligen = {"GLIGEN", free_gligen};

/* ---- GLIGENLoader -------------------------------------------------------------------- */

static sd_status list_gligen(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_GLIGEN, out, err);
}

static sd_status loader_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    const char *name = sd_value_as_string(in[0]);
    char *path = NULL;
    sd_gligen *g = NULL;
    sd_status rc = sd_model_paths_resolve(ctx->env, SD_FOLDER_GLIGEN, name ? name : "", &path, err);
    if (!rc && !ctx->env->backend) rc = sd_error_set(err, SD_ERR_INVALID, "no compute backend in the environment");
    if (!rc) rc = sd_gligen_load_file((sd_backend *)ctx->env->backend, path, &g, err);
    free(path);
    if (rc) {
        sd_error_at(err, NULL, NULL, "gligen_name");
        return rc;
    }
    sd_gligen_ref *r = calloc(1, sizeof *r);
    if (r) r->name = strdup(name);
    if (!r || !r->name) {
        free(r);
        sd_gligen_free(g);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    r->g = g;
    const sd_gligen_config *c = sd_gligen_get_config(g);
    sd_node_log(ctx, SD_LOG_INFO, "GLIGEN %s: %d fusers, %d-wide text embeddings to %d-wide objects", name,
                c->n_fusers, c->in_dim, c->key_dim);
    out[0] = sd_value_handle(&sd_handle_gligen, r);
    if (!out[0]) {
        free_gligen(r);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    return SD_OK;
}

static const sd_input_def loader_inputs[] = {
    {.name = "gligen_name", .type = SD_T_COMBO, .options_fn = list_gligen, .file_folder = SD_FOLDER_GLIGEN,
     .file_probe = sd_gligen_probe_file},
    {0}};
static const sd_output_def loader_outputs[] = {{"GLIGEN", "GLIGEN"}, {0}};

static const sd_node_def node_loader = {
    .version = 1,
    .class_type = "GLIGENLoader",
    .python_module = "nodes",
    .display_name = "GLIGENLoader",
    .category = "loaders",
    .help = "Loads a GLIGEN grounding model (gligen_sd14_textbox_pruned and its kin) from models/gligen.",
    .inputs = loader_inputs,
    .outputs = loader_outputs,
    .run = loader_run,
};

/* ---- GLIGENTextBoxApply ------------------------------------------------------------------ */

/* [pooled, h, w, y, x] (one reference) */
static sd_value *box_value(sd_tensor *pooled, int64_t h, int64_t w, int64_t y, int64_t x) {
    sd_value *l = sd_value_list();
    if (!l) return NULL;
    int bad = sd_value_list_append(l, sd_value_tensor(pooled));
    int64_t v[4] = {h, w, y, x};
    for (int i = 0; i < 4 && !bad; i++) bad = sd_value_list_append(l, sd_value_int(v[i]));
    if (bad) {
        sd_value_unref(l);
        return NULL;
    }
    return l;
}

static sd_status apply_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    sd_value *conds;
    sd_status rc = sd_nodes_in_conditioning(in, 0, "conditioning_to", &conds, err);
    if (rc) return rc;
    sd_clip_ref *clip;
    if ((rc = sd_nodes_in_clip(in, 1, "clip", &clip, err))) return rc;
    if (!sd_value_as_handle(in[2], &sd_handle_gligen)) {
        sd_error_set(err, SD_ERR_INVALID, "gligen_textbox_model must be a GLIGEN");
        sd_error_at(err, NULL, NULL, "gligen_textbox_model");
        return SD_ERR_INVALID;
    }
    const char *text = sd_value_as_string(in[3]);
    int64_t width = sd_value_as_int(in[4]), height = sd_value_as_int(in[5]);
    int64_t x = sd_value_as_int(in[6]), y = sd_value_as_int(in[7]);
    sd_text_encoder *te;
    if ((rc = sd_nodes_clip_encoder(clip, &te, err))) {
        sd_error_at(err, NULL, NULL, "clip");
        return rc;
    }
    /* encode_from_tokens(return_pooled="unprojected"): SD1's CLIP-L pooled
     * output is the unprojected one; other encoders project theirs */
    if (sd_text_encoder_kind(te) != SD_TE_SD1) {
        sd_error_set(err, SD_ERR_UNSUPPORTED,
                     "GLIGEN takes an SD1 CLIP's pooled output (the unprojected pooled output of other "
                     "text encoders is not computed by sdflow)");
        sd_error_at(err, NULL, NULL, "clip");
        return SD_ERR_UNSUPPORTED;
    }
    char *dirs[SD_NODES_MAX_EMBEDDING_DIRS];
    sd_text_encode_opts o;
    size_t nd = sd_nodes_text_opts(ctx, dirs, &o);
    sd_tensor *cond = NULL, *pooled = NULL;
    sd_precision prev;
    if (!(rc = sd_nodes_precision_begin(ctx, SD_NODE_TEXT_ENCODER, &prev, err))) {
        rc = sd_text_encode(te, text ? text : "", clip->clip_skip, &o, &cond, &pooled, err);
        sd_nodes_precision_end(ctx, prev);
    }
    sd_model_paths_free_list(dirs, nd);
    sd_tensor_unref(cond);
    if (!rc && !pooled) rc = sd_error_set(err, SD_ERR_INVALID, "the CLIP gives no pooled output");
    if (rc) {
        sd_tensor_unref(pooled);
        sd_error_at(err, NULL, NULL, "text");
        return rc;
    }
    sd_value *list = sd_value_list();
    for (size_t i = 0; list && i < sd_value_list_len(conds); i++) {
        const sd_value *e = sd_value_list_get(conds, i);
        sd_value *d = sd_value_shallow_copy(e), *tuple = sd_value_list(), *boxes = sd_value_list();
        const sd_value *prev_g = sd_value_dict_get(e, "gligen");
        int bad = !d || !tuple || !boxes;
        /* the previous tuple's boxes (ComfyUI keeps them, whatever its model) */
        if (!bad && prev_g && sd_value_kind_of(prev_g) == SD_VAL_LIST && sd_value_list_len(prev_g) == 3) {
            const sd_value *pb = sd_value_list_get(prev_g, 2);
            for (size_t k = 0; !bad && k < sd_value_list_len(pb); k++)
                bad = sd_value_list_append(boxes, sd_value_ref(sd_value_list_get(pb, k)));
        }
        if (!bad) bad = sd_value_list_append(boxes, box_value(pooled, height / 8, width / 8, y / 8, x / 8));
        if (!bad) bad = sd_value_list_append(tuple, sd_value_string("position"));
        if (!bad) bad = sd_value_list_append(tuple, sd_value_ref(in[2]));
        if (!bad) {
            bad = sd_value_list_append(tuple, boxes);
            boxes = NULL;
        }
        if (!bad) {
            bad = sd_value_dict_set(d, "gligen", tuple);
            tuple = NULL;
        }
        if (!bad) {
            bad = sd_value_list_append(list, d);
            d = NULL;
        }
        sd_value_unref(d);
        sd_value_unref(tuple);
        sd_value_unref(boxes);
        if (bad) {
            sd_value_unref(list);
            list = NULL;
        }
    }
    sd_tensor_unref(pooled);
    if (!list) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    out[0] = list;
    return SD_OK;
}

static const sd_input_def apply_inputs[] = {
    {.name = "conditioning_to", .type = "CONDITIONING"},
    {.name = "clip", .type = "CLIP"},
    {.name = "gligen_textbox_model", .type = "GLIGEN"},
    {.name = "text", .type = SD_T_STRING, .multiline = 1, .def_str = "", .no_default = 1, .dynamic_prompts = 1},
    {.name = "width", .type = SD_T_INT, .def = 64, .min = 8, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "height", .type = SD_T_INT, .def = 64, .min = 8, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "x", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {.name = "y", .type = SD_T_INT, .def = 0, .min = 0, .max = SD_MAX_RESOLUTION, .step = 8, .has_range = 1},
    {0}};
static const sd_output_def apply_outputs[] = {{"CONDITIONING", "CONDITIONING"}, {0}};

static const sd_node_def node_apply = {
    .version = 1,
    .class_type = "GLIGENTextBoxApply",
    .python_module = "nodes",
    .display_name = "GLIGENTextBoxApply",
    .category = "conditioning/gligen",
    .help = "Grounds a text in a box of the image: the text's pooled CLIP output and the box (pixels, "
            "floored to latent pixels) are added to each entry's GLIGEN boxes (at most 30), which the "
            "sampler feeds to the GLIGEN model's fusers in the UNet.",
    .inputs = apply_inputs,
    .outputs = apply_outputs,
    .flags = SD_NODE_TEXT_ENCODER,
    .run = apply_run,
};

const sd_node_def *const sd_nodes_gligen[] = {&node_loader, &node_apply, NULL};

/* ---- the sampler's reader ------------------------------------------------------------------ */

sd_status sd_nodes_gligen_of(const sd_value *entry, const sd_gligen_ref **ref, sd_gligen_box **boxes, int *n,
                             sd_error *err) {
    *ref = NULL;
    *boxes = NULL;
    *n = 0;
    const sd_value *t = sd_value_dict_get(entry, "gligen");
    if (!t || sd_value_kind_of(t) == SD_VAL_NONE) return SD_OK;
    const sd_value *kind = sd_value_kind_of(t) == SD_VAL_LIST && sd_value_list_len(t) >= 2
                               ? sd_value_list_get(t, 0) : NULL;
    const sd_gligen_ref *r = kind ? sd_value_as_handle(sd_value_list_get(t, 1), &sd_handle_gligen) : NULL;
    const char *ks = kind ? sd_value_as_string(kind) : NULL;
    if (!r || !ks) return sd_error_set(err, SD_ERR_INVALID, "conditioning 'gligen' is not (kind, GLIGEN, boxes)");
    if (strcmp(ks, "position")) { /* Gligen.set_empty */
        *ref = r;
        return SD_OK;
    }
    const sd_value *bl = sd_value_list_len(t) == 3 ? sd_value_list_get(t, 2) : NULL;
    if (!bl || sd_value_kind_of(bl) != SD_VAL_LIST)
        return sd_error_set(err, SD_ERR_INVALID, "conditioning 'gligen' has no box list");
    size_t nb = sd_value_list_len(bl);
    sd_gligen_box *b = calloc(nb ? nb : 1, sizeof *b);
    if (!b) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nb; i++) {
        const sd_value *e = sd_value_list_get(bl, i);
        const sd_tensor *p = sd_value_kind_of(e) == SD_VAL_LIST && sd_value_list_len(e) == 5
                                 ? sd_value_as_tensor(sd_value_list_get(e, 0)) : NULL;
        if (!p) {
            free(b);
            return sd_error_set(err, SD_ERR_INVALID, "conditioning 'gligen' box %zu is not [pooled, h, w, y, x]", i);
        }
        b[i].pooled = p;
        b[i].h = sd_value_as_int(sd_value_list_get(e, 1));
        b[i].w = sd_value_as_int(sd_value_list_get(e, 2));
        b[i].y = sd_value_as_int(sd_value_list_get(e, 3));
        b[i].x = sd_value_as_int(sd_value_list_get(e, 4));
    }
    *ref = r;
    *boxes = b;
    *n = (int)nb;
    return SD_OK;
}
