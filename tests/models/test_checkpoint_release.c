/* test_checkpoint_release.c - part holds: with the store's free_unused set,
 * a checkpoint part is freed when its last hold goes and loads again when
 * asked for (the file mapped again if it had been dropped); without it, or
 * while another hold remains, nothing is freed. The same for the checkpoint
 * as a torch .ckpt (converted by tests/data/torch/torchsave.py), which must
 * be opened again through the torch reader. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/checkpoint/checkpoint.h"
#include "models/synth/synth.h"
#include "testutil.h"

static void loaded(sd_checkpoint *c, int *u, int *t, int *v) { sd_checkpoint_loaded(c, u, t, v); }

static void load_all(sd_checkpoint *c) {
    sd_error err;
    sd_error_clear(&err);
    sd_unet *u = NULL;
    sd_text_encoder *te = NULL;
    sd_vae *vae = NULL;
    CHECK_OK(sd_checkpoint_unet(c, &u, &err), &err);
    CHECK_OK(sd_checkpoint_text_encoder(c, &te, &err), &err);
    CHECK_OK(sd_checkpoint_vae(c, &vae, &err), &err);
    CHECK(u && te && vae);
}

static void test_free_unused(sd_backend *be, const char *path) {
    sd_error err;
    sd_error_clear(&err);
    sd_model_store *store = sd_model_store_new();
    sd_model_store_free_unused(store, 1);
    sd_checkpoint *c = NULL;
    CHECK_OK(sd_model_store_open(store, be, path, NULL, &c, &err), &err);
    if (!c) return;
    unsigned all = SD_CKPT_PART_UNET | SD_CKPT_PART_TEXT | SD_CKPT_PART_VAE;
    sd_checkpoint_hold(c, all);
    sd_checkpoint_hold(c, SD_CKPT_PART_UNET); /* a second MODEL handle */
    load_all(c); /* every part loaded: the mapping is dropped */
    int u, t, v;
    sd_checkpoint_release(c, SD_CKPT_PART_TEXT);
    loaded(c, &u, &t, &v);
    CHECK(u == 1 && t == 0 && v == 1);
    sd_checkpoint_release(c, SD_CKPT_PART_UNET);
    loaded(c, &u, &t, &v);
    CHECK(u == 1); /* one hold left */
    sd_checkpoint_release(c, SD_CKPT_PART_UNET);
    loaded(c, &u, &t, &v);
    CHECK(u == 0 && t == 0 && v == 1);
    /* Asked for again: loaded from the file, mapped afresh. */
    sd_checkpoint_hold(c, SD_CKPT_PART_UNET | SD_CKPT_PART_TEXT);
    load_all(c);
    loaded(c, &u, &t, &v);
    CHECK(u == 1 && t == 1 && v == 1);
    sd_checkpoint_release(c, all);
    loaded(c, &u, &t, &v);
    CHECK(u == 0 && t == 0 && v == 0);
    sd_checkpoint_unref(c);
    sd_model_store_free(store);
}

static void test_kept(sd_backend *be, const char *path) {
    sd_error err;
    sd_error_clear(&err);
    sd_model_store *store = sd_model_store_new(); /* free_unused off: a REPL */
    sd_checkpoint *c = NULL;
    CHECK_OK(sd_model_store_open(store, be, path, NULL, &c, &err), &err);
    if (!c) return;
    unsigned all = SD_CKPT_PART_UNET | SD_CKPT_PART_TEXT | SD_CKPT_PART_VAE;
    sd_checkpoint_hold(c, all);
    load_all(c);
    sd_checkpoint_release(c, all);
    int u, t, v;
    loaded(c, &u, &t, &v);
    CHECK(u == 1 && t == 1 && v == 1);
    sd_checkpoint_unref(c);
    /* The same store with free_unused on now: the next release frees. */
    sd_model_store_free_unused(store, 1);
    CHECK_OK(sd_model_store_open(store, be, path, NULL, &c, &err), &err);
    if (!c) return;
    sd_checkpoint_hold(c, SD_CKPT_PART_VAE);
    sd_checkpoint_release(c, SD_CKPT_PART_VAE);
    loaded(c, &u, &t, &v);
    CHECK(u == 1 && t == 1 && v == 0);
    /* A part used without a hold (the benchmark, tests) is never freed early. */
    sd_vae *vae = NULL;
    CHECK_OK(sd_checkpoint_vae(c, &vae, &err), &err);
    sd_checkpoint_release(c, SD_CKPT_PART_VAE);
    loaded(c, &u, &t, &v);
    CHECK(v == 1);
    sd_checkpoint_unref(c);
    sd_model_store_free(store);
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    const char *dir = sd_test_tmpdir("ckpt_release");
    char path[4096];
    snprintf(path, sizeof path, "%s/tiny.safetensors", dir);
    sd_synth_config cfg = *sd_synth_preset("sd1-tiny");
    CHECK_OK(sd_synth_sd1_write(&cfg, 1, path, &err), &err);
    CHECK_OK(sd_synth_vocab_write(dir, &err), &err); /* the text encoder's tokenizer, beside it */
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    char ckpt[4200], cmd[12800];
    snprintf(ckpt, sizeof ckpt, "%s/tiny.ckpt", dir);
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, "python3 '%s/tests/data/torch/torchsave.py' to-ckpt '%s' '%s' --lightning",
             src ? src : "..", path, ckpt);
    int conv = system(cmd);
    CHECK_MSG(conv == 0, "%s failed (%d)", cmd, conv);
    if (be) {
        test_free_unused(be, path);
        test_kept(be, path);
        if (conv == 0) test_free_unused(be, ckpt);
    }
    sd_backend_free(be);
    remove(path);
    remove(ckpt);
    return sd_test_finish();
}
