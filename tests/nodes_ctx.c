/* nodes_ctx.c - a hand-built sd_node_ctx for node tests; see nodes_ctx.h. */
#include "nodes_ctx.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "testutil.h"

void nt_env_init(nt_env *e, const char *name) {
    sd_error err = {0};
    CHECK_OK(sd_env_init(&e->env, &err), &err);
    const char *root = sd_test_tmpdir(name);
    snprintf(e->input, sizeof e->input, "%s/input", root);
    snprintf(e->output, sizeof e->output, "%s/output", root);
    snprintf(e->temp, sizeof e->temp, "%s/temp", root);
    mkdir(e->input, 0777);
    mkdir(e->output, 0777);
    CHECK_OK(sd_env_set(&e->env, &e->env.input_dir, e->input, &err), &err);
    CHECK_OK(sd_env_set(&e->env, &e->env.output_dir, e->output, &err), &err);
    CHECK_OK(sd_env_set(&e->env, &e->env.temp_dir, e->temp, &err), &err);
}

sd_node_ctx nt_ctx(const nt_env *e, const char *class_type) {
    sd_node_ctx c;
    memset(&c, 0, sizeof c);
    c.env = &e->env;
    c.node_id = "7";
    c.class_type = class_type;
    return c;
}

sd_status nt_run(const sd_node_def *def, sd_node_ctx *ctx, sd_value **in, sd_value **out, sd_error *err) {
    sd_error_clear(err);
    return def->run(ctx, in, out, err);
}

sd_status nt_run_named(sd_node_ctx *ctx, const char *const *names, sd_value *const *vals, int n,
                       sd_value **out, sd_error *err) {
    const char *type = ctx->class_type;
    const sd_node_def *def = sd_registry_find(type);
    if (!def) return sd_error_set(err, SD_ERR_NOT_FOUND, "node %s not registered", type);
    /* ModelMergeFlux1 has 65 inputs */
    sd_value **in = calloc((size_t)sd_node_input_count(def) + 1, sizeof *in);
    if (!in) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        int k = sd_node_input_index(def, names[i]);
        if (k < 0) {
            free(in);
            return sd_error_set(err, SD_ERR_INVALID, "%s has no input %s", type, names[i]);
        }
        in[k] = vals[i];
    }
    for (int i = 0; i < sd_node_output_count(def); i++) out[i] = NULL;
    sd_error_clear(err);
    sd_status rc = def->run(ctx, in, out, err);
    free(in);
    sd_value_unref(ctx->ui);
    ctx->ui = NULL;
    return rc;
}

sd_value *nt_run1_named(sd_node_ctx *ctx, const char *const *names, sd_value **vals, int n, const int *owned,
                        sd_error *err) {
    sd_value *out[8] = {0};
    sd_status rc = nt_run_named(ctx, names, vals, n, out, err);
    for (int i = 0; i < n; i++)
        if (owned[i]) sd_value_unref(vals[i]);
    CHECK_OK(rc, err);
    for (int i = 1; i < 8; i++) sd_value_unref(out[i]);
    return out[0];
}

void nt_free_values(sd_value **v, int n) {
    for (int i = 0; i < n; i++) {
        sd_value_unref(v[i]);
        v[i] = NULL;
    }
}

sd_value *nt_tensor_value(sd_tensor *t) {
    sd_value *v = sd_value_tensor(t);
    sd_tensor_unref(t);
    return v;
}

sd_value *nt_latent(sd_tensor *samples) {
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "samples", nt_tensor_value(samples));
    return d;
}

int nt_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

void nt_fill(sd_tensor *t, unsigned seed) {
    float *d = sd_tensor_f32(t);
    for (int64_t i = 0, n = sd_tensor_numel(t); i < n; i++)
        d[i] = (float)(((uint64_t)(i + 1) * 2654435761u + seed) % 1000) / 1000.0f;
}

const sd_node_def *def_of(const char *name) {
    const sd_node_def *d = sd_registry_find(name);
    CHECK_MSG(d != NULL, "%s not registered", name);
    if (!d) {
        fprintf(stderr, "cannot continue without %s\n", name);
        exit(1);
    }
    return d;
}

void nt_tiny_sd1_init(nt_tiny_sd1 *t, const char *name) {
    memset(t, 0, sizeof *t);
    char path[4200], cmd[8300];
    snprintf(t->models, sizeof t->models, "%s/models", sd_test_tmpdir(name));
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/checkpoints'", t->models);
    CHECK(system(cmd) == 0);
    sd_error err;
    sd_error_clear(&err);
    t->cfg = *sd_synth_preset("sd1-tiny");
    t->cfg.clip_vocab = 1000;
    snprintf(path, sizeof path, "%s/checkpoints/tiny.safetensors", t->models);
    CHECK_OK(sd_synth_sd1_write(&t->cfg, 1, path, &err), &err);
    CHECK_OK(sd_env_init(&t->env, &err), &err);
    CHECK_OK(sd_env_set(&t->env, &t->env.models_dir, t->models, &err), &err);
    CHECK_OK(sd_backend_new("cpu", 0, &t->backend, &err), &err);
    t->store = sd_model_store_new();
    t->env.backend = t->backend;
    t->env.models = t->store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
}

void nt_tiny_sd1_free(nt_tiny_sd1 *t) {
    sd_model_store_free(t->store);
    sd_backend_free(t->backend);
    sd_env_cleanup(&t->env);
    sd_registry_reset();
    memset(t, 0, sizeof *t);
}
