/* ldm_config.c - the two keys ComfyUI's CheckpointLoader reads from an LDM
 * .yaml config (contract in ldm_config.h), over libyaml's document API. */
#include "formats/ldm_config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_CONFIG_BYTES (16u << 20)

/* The value of `key` in mapping node m (NULL when m is not a mapping or
 * lacks it; the last one when repeated, as PyYAML keeps). */
static yaml_node_t *get(yaml_document_t *d, yaml_node_t *m, const char *key) {
    if (!m || m->type != YAML_MAPPING_NODE) return NULL;
    yaml_node_t *found = NULL;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(d, p->key);
        if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == strlen(key) &&
            memcmp(k->data.scalar.value, key, k->data.scalar.length) == 0)
            found = yaml_document_get_node(d, p->value);
    }
    return found;
}

static int scalar_is(const yaml_node_t *n, const char *s) {
    return n && n->type == YAML_SCALAR_NODE && n->data.scalar.length == strlen(s) &&
           memcmp(n->data.scalar.value, s, n->data.scalar.length) == 0;
}

/* A plain scalar PyYAML resolves to null. */
static int is_null(const yaml_node_t *n) {
    if (!n || n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    return n->data.scalar.length == 0 || scalar_is(n, "~") || scalar_is(n, "null") || scalar_is(n, "Null") ||
           scalar_is(n, "NULL");
}

/* A plain decimal integer scalar ("-2", "+3"). */
static int as_int(const yaml_node_t *n, int *out) {
    if (!n || n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
        n->data.scalar.length == 0 || n->data.scalar.length > 20)
        return 0;
    char buf[32];
    memcpy(buf, n->data.scalar.value, n->data.scalar.length);
    buf[n->data.scalar.length] = '\0';
    char *end = NULL;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno || *end || end == buf || v < INT_MIN || v > INT_MAX) return 0;
    *out = (int)v;
    return 1;
}

sd_status sd_ldm_config_parse(const void *data, size_t size, const char *name, sd_ldm_config *out,
                              sd_error *err) {
    memset(out, 0, sizeof *out);
    yaml_parser_t p;
    yaml_document_t d;
    if (!yaml_parser_initialize(&p)) return sd_error_set(err, SD_ERR_NOMEM, "out of memory reading %s", name);
    yaml_parser_set_input_string(&p, data, size);
    if (!yaml_parser_load(&p, &d)) {
        sd_status rc = p.error == YAML_MEMORY_ERROR
                           ? sd_error_set(err, SD_ERR_NOMEM, "out of memory reading %s", name)
                           : sd_error_set(err, SD_ERR_FORMAT, "%s: not a YAML config: %s at line %zu", name,
                                          p.problem ? p.problem : "syntax error", (size_t)p.problem_mark.line + 1);
        yaml_parser_delete(&p);
        return rc;
    }
    sd_status rc = SD_OK;
    yaml_node_t *params = get(&d, get(&d, yaml_document_get_root_node(&d), "model"), "params");
    yaml_node_t *cond = get(&d, params, "cond_stage_config");
    if (!params || params->type != YAML_MAPPING_NODE) {
        rc = sd_error_set(err, SD_ERR_FORMAT, "%s: no model.params mapping (not an LDM model config)", name);
    } else if (!cond) {
        rc = sd_error_set(err, SD_ERR_FORMAT, "%s: no model.params.cond_stage_config", name);
    } else {
        out->v_prediction = scalar_is(get(&d, params, "parameterization"), "v");
        yaml_node_t *li = get(&d, get(&d, cond, "params"), "layer_idx");
        if (li && !is_null(li)) {
            if (!as_int(li, &out->layer_idx))
                rc = sd_error_set(err, SD_ERR_FORMAT,
                                  "%s: cond_stage_config.params.layer_idx is not an integer", name);
            else
                out->has_layer_idx = 1;
        }
    }
    yaml_document_delete(&d);
    yaml_parser_delete(&p);
    return rc;
}

sd_status sd_ldm_config_read(const char *path, sd_ldm_config *out, sd_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return sd_error_set(err, SD_ERR_NOT_FOUND, "%s: cannot open: %s", path, strerror(errno));
    char *buf = malloc(MAX_CONFIG_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_CONFIG_BYTES + 1, f) : 0;
    int bad = buf && ferror(f);
    fclose(f);
    sd_status rc;
    if (!buf) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory reading %s", path);
    else if (bad) rc = sd_error_set(err, SD_ERR_IO, "%s: read error", path);
    else if (n > MAX_CONFIG_BYTES) rc = sd_error_set(err, SD_ERR_FORMAT, "%s: larger than 16 MiB, not a model config", path);
    else rc = sd_ldm_config_parse(buf, n, path, out, err);
    free(buf);
    return rc;
}
