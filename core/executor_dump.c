/* executor_dump.c - `--dump DIR`: every tensor of a node's outputs as
 * safetensors, for comparing against reference runs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "executor_internal.h"
#include "formats/safetensors.h"

static sd_status mkdir_p(const char *path, sd_error *err) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
            return sd_error_set(err, SD_ERR_IO, "cannot create directory '%s': %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
        return sd_error_set(err, SD_ERR_IO, "cannot create directory '%s': %s", tmp, strerror(errno));
    return SD_OK;
}

/* Adds every tensor under v, named by its path. Returns the number added or
 * -1 with err set. */
static int add_tensors(sd_st_writer *w, const char *path, const sd_value *v, sd_error *err) {
    char sub[1024];
    int added = 0;
    switch (sd_value_kind_of(v)) {
    case SD_VAL_TENSOR:
        if (sd_st_writer_add(w, path, sd_value_as_tensor(v), err)) return -1;
        return 1;
    case SD_VAL_LIST:
        for (size_t i = 0; i < sd_value_list_len(v); i++) {
            snprintf(sub, sizeof sub, "%s%s%zu", path, *path ? "." : "", i);
            int k = add_tensors(w, sub, sd_value_list_get(v, i), err);
            if (k < 0) return -1;
            added += k;
        }
        return added;
    case SD_VAL_DICT:
        for (size_t i = 0; i < sd_value_dict_len(v); i++) {
            snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", sd_value_dict_key(v, i));
            int k = add_tensors(w, sub, sd_value_dict_at(v, i), err);
            if (k < 0) return -1;
            added += k;
        }
        return added;
    default:
        return 0;
    }
}

sd_status sd_exec_dump_node(const char *dir, const char *node_id, const sd_node_def *def,
                            const sd_value *entry, sd_error *err) {
    const sd_value *outs = sd_value_dict_get(entry, "outputs");
    sd_status rc = mkdir_p(dir, err);
    if (rc) return rc;
    /* Node ids may contain '/' (never in ComfyUI, but keep the file inside DIR). */
    char safe_id[256];
    snprintf(safe_id, sizeof safe_id, "%s", node_id);
    for (char *p = safe_id; *p; p++)
        if (*p == '/') *p = '_';
    for (size_t k = 0; k < sd_value_list_len(outs); k++) {
        const sd_value *v = sd_value_list_get(outs, k);
        sd_st_writer *w = sd_st_writer_new();
        if (!w) return sd_error_set(err, SD_ERR_NOMEM, "out of memory dumping node %s", node_id);
        const char *root = sd_value_kind_of(v) == SD_VAL_TENSOR ? def->outputs[k].name : "";
        int n = add_tensors(w, root, v, err);
        if (n > 0) {
            char path[4600];
            snprintf(path, sizeof path, "%s/%s_%zu.safetensors", dir, safe_id, k);
            sd_st_writer_meta(w, "class_type", def->class_type, NULL);
            sd_st_writer_meta(w, "output", def->outputs[k].name, NULL);
            if (sd_st_writer_save(w, path, err)) n = -1;
        }
        sd_st_writer_free(w);
        if (n < 0) {
            sd_error_prefix(err, "--dump of node %s output %zu", node_id, k);
            return err ? err->code : SD_ERR_IO;
        }
    }
    return SD_OK;
}
