/* test_release_run.c - a one-shot txt2img through the executor with the
 * real nodes, as `sdflow run` sets it up (release_consumed, and a model
 * store that frees unused parts): the text encoder is gone when KSampler
 * starts, the UNet when VAEDecode starts, the VAE when SaveImage starts;
 * the image is byte-identical to a run that keeps everything, and that run
 * still has every part loaded at the end. Random-weight checkpoint
 * synthesized in the real layout (models/synth/synth.h): no shared data needed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/executor.h"
#include "models/checkpoint/checkpoint.h"
#include "models/synth/synth.h"
#include "testutil.h"

typedef struct watch {
    sd_checkpoint *ckpt;
    int release;      /* the mode under test */
    int checked;      /* node starts checked */
} watch;

/* At each node's start: which parts may still be loaded. */
static void on_node(void *user, const sd_exec_record *rec, int finished) {
    watch *w = user;
    if (finished) return;
    int u, t, v;
    sd_checkpoint_loaded(w->ckpt, &u, &t, &v);
    const char *ct = rec->class_type;
    if (!strcmp(ct, "KSampler")) {
        CHECK_MSG(t == !w->release, "KSampler starts with the text encoder %s",
                  t ? "loaded" : "freed");
        w->checked++;
    } else if (!strcmp(ct, "VAEDecode")) {
        CHECK_MSG(u == !w->release && t == !w->release, "VAEDecode starts with unet %d, text %d", u, t);
        w->checked++;
    } else if (!strcmp(ct, "SaveImage")) {
        CHECK_MSG(u == !w->release && t == !w->release && v == !w->release,
                  "SaveImage starts with unet %d, text %d, vae %d", u, t, v);
        w->checked++;
    }
}

static const char *WORKFLOW =
    "{\"4\": {\"class_type\": \"CheckpointLoaderSimple\", \"inputs\": {\"ckpt_name\": \"tiny.safetensors\"}},"
    " \"5\": {\"class_type\": \"EmptyLatentImage\", \"inputs\": {\"width\": 64, \"height\": 64, \"batch_size\": 1}},"
    " \"6\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"a red house\", \"clip\": [\"4\", 1]}},"
    " \"7\": {\"class_type\": \"CLIPTextEncode\", \"inputs\": {\"text\": \"blurry\", \"clip\": [\"4\", 1]}},"
    " \"3\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 42, \"steps\": 2, \"cfg\": 7.5,"
    "   \"sampler_name\": \"euler\", \"scheduler\": \"normal\", \"denoise\": 1.0, \"model\": [\"4\", 0],"
    "   \"positive\": [\"6\", 0], \"negative\": [\"7\", 0], \"latent_image\": [\"5\", 0]}},"
    " \"8\": {\"class_type\": \"VAEDecode\", \"inputs\": {\"samples\": [\"3\", 0], \"vae\": [\"4\", 2]}},"
    " \"9\": {\"class_type\": \"SaveImage\", \"inputs\": {\"filename_prefix\": \"img\", \"images\": [\"8\", 0]}}}";

/* Runs the workflow in one mode on a fresh store and executor; returns the
 * saved PNG's bytes (malloc'd) or NULL. */
static char *run_mode(sd_env *env, sd_backend *be, const char *ckpt_path, int release, size_t *size) {
    sd_error err;
    sd_error_clear(&err);
    sd_model_store *store = sd_model_store_new();
    sd_model_store_free_unused(store, release);
    env->models = store;
    /* The loader node opens the same store entry (same path, backend,
     * dtype and tokenizer dir), so this is the checkpoint the run uses. */
    sd_checkpoint_opts o;
    sd_checkpoint_opts_default(&o);
    o.tokenizer_dir = env->tokenizer_dir;
    watch w = {.release = release};
    CHECK_OK(sd_model_store_open(store, be, ckpt_path, &o, &w.ckpt, &err), &err);
    char *png = NULL;
    sd_graph *g = NULL;
    CHECK_OK(sd_graph_from_json(WORKFLOW, "release.json", &g, &err), &err);
    sd_exec *ex = sd_exec_new();
    sd_exec_opts xo = {.env = env, .on_node = on_node, .on_node_user = &w, .release_consumed = release};
    sd_exec_report rep = {0};
    if (g && w.ckpt) {
        CHECK_OK(sd_exec_run(ex, g, &xo, &rep, NULL, &err), &err);
        CHECK_MSG(w.checked == 3, "%d node starts checked", w.checked);
        for (size_t i = 0; i < rep.n; i++) {
            const sd_value *files = sd_value_dict_get(rep.items[i].ui, "files");
            if (sd_value_list_len(files) == 1)
                png = sd_test_read_file(sd_value_as_string(sd_value_list_get(files, 0)), size);
        }
        int u, t, v;
        sd_checkpoint_loaded(w.ckpt, &u, &t, &v);
        CHECK_MSG(u + t + v == (release ? 0 : 3), "after the run: unet %d, text %d, vae %d", u, t, v);
    }
    sd_exec_report_free(&rep);
    sd_exec_free(ex);
    sd_graph_free(g);
    sd_checkpoint_unref(w.ckpt);
    sd_model_store_free(store);
    env->models = NULL;
    return png;
}

int main(void) {
    const char *dir = sd_test_tmpdir("release_run");
    char models[4096], path[4096], out[4096], cmd[8400];
    snprintf(models, sizeof models, "%s/models", dir);
    snprintf(out, sizeof out, "%s/output", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/checkpoints' '%s'", models, out);
    CHECK(system(cmd) == 0);
    sd_error err;
    sd_error_clear(&err);
    snprintf(path, sizeof path, "%s/checkpoints/tiny.safetensors", models);
    sd_synth_config cfg = *sd_synth_preset("sd1-tiny");
    CHECK_OK(sd_synth_sd1_write(&cfg, 7, path, &err), &err);
    CHECK_OK(sd_synth_vocab_write(dir, &err), &err);

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.output_dir, out, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, dir, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    env.backend = be;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    size_t n_kept = 0, n_released = 0;
    char *kept = run_mode(&env, be, path, 0, &n_kept);
    char *released = run_mode(&env, be, path, 1, &n_released);
    /* Same pixels and the same prompt chunk (only the file name's counter differs). */
    CHECK_MSG(kept && released && n_kept == n_released && !memcmp(kept, released, n_kept),
              "PNG %zu vs %zu bytes", n_kept, n_released);
    free(kept);
    free(released);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
