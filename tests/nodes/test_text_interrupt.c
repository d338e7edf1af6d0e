/* test_text_interrupt.c - an interrupt reaches CLIPTextEncode's tokenizer
 * (issue 23: a 2 MB one-word prompt kept the server busy ~28 s past
 * /interrupt): the node hands its interrupt flag to the text encoder, so
 * with the flag set a 256 KiB word ends in SD_ERR_CANCELLED instead of
 * being tokenized and encoded in full (with the flag dropped the node
 * finishes and returns a CONDITIONING); with the flag clear the same node
 * encodes a short prompt. The tokenizer's own stop inside one word is
 * models.tokenizer_hostile's; this is the plumbing from the node down.
 * No data needed: a random-weight sd1-tiny and the synthetic vocabulary. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "nodes_ctx.h"
#include "testutil.h"

static volatile sig_atomic_t stop;

static sd_status encode(const sd_env *env, sd_value *clip, const char *text, sd_value **cond, sd_error *err) {
    sd_node_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.env = env;
    ctx.node_id = "6";
    ctx.class_type = "CLIPTextEncode";
    ctx.interrupt = &stop;
    const char *names[2] = {"text", "clip"};
    sd_value *vals[2] = {sd_value_string(text), clip}, *out[4] = {0};
    sd_status rc = nt_run_named(&ctx, names, vals, 2, out, err);
    sd_value_unref(vals[0]);
    *cond = out[0];
    for (int i = 1; i < 4; i++) sd_value_unref(out[i]);
    return rc;
}

int main(void) {
    const char *dir = sd_test_tmpdir("nodes_text_interrupt");
    char models[4096], path[4300], cmd[8400];
    snprintf(models, sizeof models, "%s/models", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/checkpoints'", models);
    CHECK(system(cmd) == 0);
    sd_error err;
    sd_error_clear(&err);
    sd_synth_config cfg = *sd_synth_preset("sd1-tiny");
    snprintf(path, sizeof path, "%s/checkpoints/tiny.safetensors", models);
    CHECK_OK(sd_synth_sd1_write(&cfg, 3, path, &err), &err);
    CHECK_OK(sd_synth_vocab_write(dir, &err), &err);

    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, dir, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    sd_node_ctx lctx;
    memset(&lctx, 0, sizeof lctx);
    lctx.env = &env;
    lctx.node_id = "4";
    lctx.class_type = "CheckpointLoaderSimple";
    lctx.interrupt = &stop;
    const char *lnames[1] = {"ckpt_name"};
    sd_value *lvals[1] = {sd_value_string("tiny.safetensors")}, *loaded[3] = {0};
    CHECK_OK(nt_run_named(&lctx, lnames, lvals, 1, loaded, &err), &err);
    sd_value_unref(lvals[0]);
    sd_value *clip = loaded[1];
    if (clip) {
        sd_value *cond = NULL;
        stop = 0;
        CHECK_OK(encode(&env, clip, "a photo of a cat", &cond, &err), &err);
        CHECK_MSG(cond != NULL, "a short prompt with the flag clear gives a CONDITIONING");
        sd_value_unref(cond);
        cond = NULL;

        /* one 256 KiB word of pseudo-random letters, the flag already set */
        size_t n = (size_t)1 << 18;
        char *word = malloc(n + 1);
        CHECK(word != NULL);
        if (word) {
            uint32_t x = 12345;
            for (size_t i = 0; i < n; i++) {
                x = x * 1664525u + 1013904223u;
                word[i] = (char)('a' + (x >> 16) % 26);
            }
            word[n] = 0;
            stop = 1;
            sd_status rc = encode(&env, clip, word, &cond, &err);
            stop = 0;
            CHECK_MSG(rc == SD_ERR_CANCELLED && cond == NULL,
                      "CLIPTextEncode of a 256 KiB word with the interrupt set: rc %d (%s), not cancelled", rc,
                      err.msg);
            sd_value_unref(cond);
            free(word);
        }
    }
    for (int i = 0; i < 3; i++) sd_value_unref(loaded[i]);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
