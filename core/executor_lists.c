/* executor_lists.c - ComfyUI's list semantics for one node call
 * (executor.h, "Lists"; sd_exec_map_node in executor_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "executor_internal.h"
#include "formats/safetensors.h"

/* Runs def once on in[], checking that every output came back. */
static sd_status call_once(const sd_node_def *def, sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                           int n_out, sd_error *err) {
    for (int k = 0; k < n_out; k++) out[k] = NULL;
    sd_status rc = def->run(ctx, in, out, err);
    /* a model file truncated or rewritten while the node read it (formats/mapguard.h:
     * zeros instead of SIGBUS) makes its outputs garbage: fail the node */
    if (rc == SD_OK) rc = sd_st_check_all(err);
    for (int k = 0; rc == SD_OK && k < n_out; k++) {
        if (!out[k])
            rc = sd_error_set(err, SD_ERR_INTERNAL, "node returned no value for output %d (%s)", k,
                              def->outputs[k].name);
        else if (def->outputs[k].is_list && sd_value_kind_of(out[k]) != SD_VAL_LIST)
            rc = sd_error_set(err, SD_ERR_INTERNAL, "node returned no list for list output %d (%s)", k,
                              def->outputs[k].name);
    }
    if (rc)
        for (int k = 0; k < n_out; k++) { sd_value_unref(out[k]); out[k] = NULL; }
    return rc;
}

/* ComfyUI's merge of the per-call ui dicts: every key of the first, its list
 * values concatenated (a non-list value: the first call's). */
static int merge_ui(sd_value **acc, sd_value *ui) {
    if (!ui) return 0;
    if (!*acc) { *acc = sd_value_ref(ui); return 0; }
    sd_value *m = sd_value_dict();
    if (!m) return -1;
    for (size_t i = 0; i < sd_value_dict_len(*acc); i++) {
        const char *key = sd_value_dict_key(*acc, i);
        sd_value *a = sd_value_dict_at(*acc, i), *b = sd_value_dict_get(ui, key);
        sd_value *v;
        if (sd_value_kind_of(a) == SD_VAL_LIST && sd_value_kind_of(b) == SD_VAL_LIST) {
            v = sd_value_list();
            for (size_t j = 0; v && j < sd_value_list_len(a); j++)
                if (sd_value_list_append(v, sd_value_ref(sd_value_list_get(a, j)))) { sd_value_unref(v); v = NULL; }
            for (size_t j = 0; v && j < sd_value_list_len(b); j++)
                if (sd_value_list_append(v, sd_value_ref(sd_value_list_get(b, j)))) { sd_value_unref(v); v = NULL; }
        } else {
            v = sd_value_ref(a);
        }
        if (!v || sd_value_dict_set(m, key, v)) { sd_value_unref(m); return -1; }
    }
    sd_value_unref(*acc);
    *acc = m;
    return 0;
}

sd_status sd_exec_map_node(const sd_node_def *def, sd_node_ctx *ctx, sd_value *const *in,
                           const int *in_is_list, sd_value **out, int *out_is_list, sd_value **ui,
                           sd_error *err) {
    int n_in = sd_node_input_count(def), n_out = sd_node_output_count(def);
    *ui = NULL;
    int any_list = 0;
    int64_t n = 1;
    for (int k = 0; k < n_in; k++)
        if (in[k] && in_is_list[k]) {
            int64_t len = (int64_t)sd_value_list_len(in[k]);
            if (!any_list || len > n) n = len;
            any_list = 1;
        }
    sd_value *small[32], **args = n_in <= 32 ? small : calloc((size_t)n_in, sizeof *args);
    if (!args) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_status rc = SD_OK;

    if (def->flags & SD_NODE_INPUT_IS_LIST) {
        /* once, every input a list */
        for (int k = 0; k < n_in; k++) {
            args[k] = NULL;
            if (!in[k]) continue;
            if (in_is_list[k]) { args[k] = sd_value_ref(in[k]); continue; }
            args[k] = sd_value_list();
            if (!args[k] || sd_value_list_append(args[k], sd_value_ref(in[k]))) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        }
        if (!rc) rc = call_once(def, ctx, args, out, n_out, err);
        for (int k = 0; k < n_in; k++) sd_value_unref(args[k]);
        for (int k = 0; k < n_out; k++) out_is_list[k] = def->outputs[k].is_list != 0;
        *ui = ctx->ui;
        ctx->ui = NULL;
        if (args != small) free(args);
        return rc;
    }
    if (!any_list) {
        rc = call_once(def, ctx, in, out, n_out, err);
        for (int k = 0; k < n_out; k++) out_is_list[k] = def->outputs[k].is_list != 0;
        *ui = ctx->ui;
        ctx->ui = NULL;
        if (args != small) free(args);
        return rc;
    }
    /* once per item: every output becomes a list */
    sd_value *osmall[16], **one = n_out <= 16 ? osmall : calloc((size_t)n_out, sizeof *one);
    if (!one) { if (args != small) free(args); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    for (int k = 0; k < n_out; k++) {
        out[k] = sd_value_list();
        out_is_list[k] = 1;
        if (!out[k]) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n && !rc; i++) {
        for (int k = 0; k < n_in; k++) {
            if (!in[k] || !in_is_list[k]) { args[k] = in[k]; continue; }
            size_t len = sd_value_list_len(in[k]);
            args[k] = len ? sd_value_list_get(in[k], (size_t)i < len ? (size_t)i : len - 1) : NULL;
        }
        rc = call_once(def, ctx, args, one, n_out, err);
        for (int k = 0; !rc && k < n_out; k++) {
            if (def->outputs[k].is_list) {
                for (size_t j = 0; !rc && j < sd_value_list_len(one[k]); j++)
                    if (sd_value_list_append(out[k], sd_value_ref(sd_value_list_get(one[k], j))))
                        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            } else if (sd_value_list_append(out[k], sd_value_ref(one[k]))) {
                rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
            }
        }
        for (int k = 0; k < n_out; k++) { sd_value_unref(one[k]); one[k] = NULL; }
        if (!rc && merge_ui(ui, ctx->ui)) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        sd_value_unref(ctx->ui);
        ctx->ui = NULL;
    }
    if (rc) {
        for (int k = 0; k < n_out; k++) { sd_value_unref(out[k]); out[k] = NULL; }
        sd_value_unref(*ui);
        *ui = NULL;
    }
    if (one != osmall) free(one);
    if (args != small) free(args);
    return rc;
}
