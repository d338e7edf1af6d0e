/* text_cond.c - shared by the text-encode nodes; see text_cond.h. */
#include "text_cond.h"

#include "models/checkpoint/model_paths.h"

static void warn_to_log(void *ud, const char *msg) {
    sd_node_log((const sd_node_ctx *)ud, SD_LOG_WARN, "%s", msg);
}

size_t sd_nodes_text_opts(sd_node_ctx *ctx, char *dirs[SD_NODES_MAX_EMBEDDING_DIRS],
                          sd_text_encode_opts *o) {
    size_t nd = sd_model_paths_embedding_dirs(ctx->env, dirs, SD_NODES_MAX_EMBEDDING_DIRS);
    *o = (sd_text_encode_opts){.embedding_dirs = (const char *const *)dirs,
                               .n_embedding_dirs = nd,
                               .warn = warn_to_log,
                               .warn_ud = ctx,
                               .interrupt = ctx->interrupt};
    return nd;
}

sd_status sd_nodes_text_cond(sd_tensor *cond, sd_tensor *pooled, sd_nodes_cond_extra *ex, int n,
                             sd_value **out, sd_error *err) {
    sd_value *list = sd_value_list(), *d = sd_value_dict();
    sd_value *cv = sd_value_tensor(cond), *pv = pooled ? sd_value_tensor(pooled) : NULL;
    sd_tensor_unref(cond);
    sd_tensor_unref(pooled);
    int bad = !list || !d || !cv || (pooled && !pv);
    if (!bad) {
        bad |= sd_value_dict_set(d, "cond", cv) != 0;
        if (pv) bad |= sd_value_dict_set(d, "pooled_output", pv) != 0;
        cv = pv = NULL;
    }
    for (int i = 0; i < n; i++) {
        /* sd_value_dict_set takes the value even when it fails */
        if (!bad && ex[i].v) bad |= sd_value_dict_set(d, ex[i].key, ex[i].v) != 0;
        else {
            bad |= !ex[i].v;
            sd_value_unref(ex[i].v);
        }
        ex[i].v = NULL;
    }
    if (!bad) {
        bad |= sd_value_list_append(list, d) != 0;
        d = NULL;
    }
    sd_value_unref(cv);
    sd_value_unref(pv);
    sd_value_unref(d);
    if (bad) {
        sd_value_unref(list);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    *out = list;
    return SD_OK;
}
