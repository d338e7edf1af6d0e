/* registry.c - the node registry: filled once at start, then read-only.
 * A sorted array with binary search is enough for a few hundred node types
 * and keeps iteration order stable for `sdflow nodes`. */
#include "node.h"
#include "formats/safetensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *name; const sd_node_def *def; int is_alias; } entry;

static entry *entries;
static size_t n_entries, cap_entries;

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

static const entry *lookup(const char *name) {
    entry key = {name, NULL, 0};
    return n_entries ? bsearch(&key, entries, n_entries, sizeof *entries, cmp_entry) : NULL;
}

static sd_status insert(const char *name, const sd_node_def *def, int is_alias, sd_error *err) {
    if (lookup(name)) return sd_error_set(err, SD_ERR_INVALID, "node type '%s' registered twice", name);
    if (n_entries == cap_entries) {
        size_t cap = cap_entries ? cap_entries * 2 : 64;
        entry *e = realloc(entries, cap * sizeof *e);
        if (!e) return sd_error_set(err, SD_ERR_NOMEM, "out of memory in node registry");
        entries = e;
        cap_entries = cap;
    }
    entries[n_entries++] = (entry){name, def, is_alias};
    qsort(entries, n_entries, sizeof *entries, cmp_entry);
    return SD_OK;
}

sd_status sd_registry_add(const sd_node_def *const *table, sd_error *err) {
    for (size_t i = 0; table[i]; i++) {
        sd_status rc = insert(table[i]->class_type, table[i], 0, err);
        if (rc) return rc;
    }
    return SD_OK;
}

sd_status sd_registry_alias(const char *alias, const char *class_type, sd_error *err) {
    const entry *e = lookup(class_type);
    if (!e) return sd_error_set(err, SD_ERR_NOT_FOUND, "alias '%s' for unknown node type '%s'", alias, class_type);
    return insert(alias, e->def, 1, err);
}

const sd_node_def *sd_registry_find(const char *class_type) {
    const entry *e = class_type ? lookup(class_type) : NULL;
    return e ? e->def : NULL;
}

size_t sd_registry_count(void) {
    size_t n = 0;
    for (size_t i = 0; i < n_entries; i++) n += !entries[i].is_alias;
    return n;
}

const sd_node_def *sd_registry_at(size_t i) {
    for (size_t k = 0; k < n_entries; k++) {
        if (entries[k].is_alias) continue;
        if (i-- == 0) return entries[k].def;
    }
    return NULL;
}

size_t sd_registry_alias_count(void) { return n_entries - sd_registry_count(); }

void sd_registry_alias_at(size_t i, const char **alias, const char **class_type) {
    for (size_t k = 0; k < n_entries; k++) {
        if (!entries[k].is_alias) continue;
        if (i-- == 0) { *alias = entries[k].name; *class_type = entries[k].def->class_type; return; }
    }
    *alias = *class_type = NULL;
}

void sd_registry_reset(void) {
    free(entries);
    entries = NULL;
    n_entries = cap_entries = 0;
}

int sd_node_input_index(const sd_node_def *def, const char *name) {
    for (int i = 0; def->inputs && def->inputs[i].name; i++)
        if (strcmp(def->inputs[i].name, name) == 0) return i;
    return -1;
}

int sd_node_output_index(const sd_node_def *def, const char *name) {
    for (int i = 0; def->outputs && def->outputs[i].name; i++)
        if (strcmp(def->outputs[i].name, name) == 0) return i;
    return -1;
}

int sd_node_input_count(const sd_node_def *def) {
    int n = 0;
    while (def->inputs && def->inputs[n].name) n++;
    return n;
}

int sd_node_output_count(const sd_node_def *def) {
    int n = 0;
    while (def->outputs && def->outputs[n].name) n++;
    return n;
}

int sd_type_is_literal(const char *type) {
    return strcmp(type, SD_T_INT) == 0 || strcmp(type, SD_T_FLOAT) == 0 ||
           strcmp(type, SD_T_STRING) == 0 || strcmp(type, SD_T_BOOLEAN) == 0 ||
           strcmp(type, SD_T_COMBO) == 0;
}

int sd_input_has_control_after_generate(const sd_input_def *d) {
    return !strcmp(d->type, SD_T_INT) &&
           (d->control_after_generate || !strcmp(d->name, "seed") || !strcmp(d->name, "noise_seed"));
}

sd_status sd_node_progress(sd_node_ctx *ctx, int64_t value, int64_t max, sd_error *err) {
    if (ctx->progress) ctx->progress(ctx->progress_user, ctx->node_id, value, max);
    if (ctx->interrupt && *ctx->interrupt)
        return sd_error_set(err, SD_ERR_CANCELLED, "interrupted at %lld/%lld", (long long)value, (long long)max);
    /* a model file changed under the run: stop at this step, not at the end */
    return sd_st_check_all(err);
}

void sd_node_preview(sd_node_ctx *ctx, int64_t step, int64_t steps, const struct sd_tensor *latent,
                     const char *latent_format) {
    if (ctx->preview) ctx->preview(ctx->preview_user, ctx->node_id, step, steps, latent, latent_format);
}

void sd_node_image(sd_node_ctx *ctx, int64_t index, int64_t count, const struct sd_tensor *image) {
    if (ctx->preview) ctx->preview(ctx->preview_user, ctx->node_id, index, count, image, "image");
}

void sd_node_log(const sd_node_ctx *ctx, int level, const char *fmt, ...) {
    if (!ctx || ((!ctx->env || !ctx->env->log) && !(ctx->on_warning && level <= SD_LOG_WARN))) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (ctx->on_warning && level <= SD_LOG_WARN) ctx->on_warning(ctx->warning_user, buf);
    if (ctx->env && ctx->env->log) ctx->env->log(ctx->env->log_user, level, buf);
}
