/* test_checkpoint_scaled_fp8.c - a file in ComfyUI's scaled-fp8 format
 * (per-tensor scales beside fp8 weights: "scaled_fp8", "<key>.scale_weight",
 * "<key>.scale_input") is refused by name when it is probed or opened, as a
 * diffusion model, a single-file checkpoint or a text encoder, rather than
 * loaded without its scales; a key that only looks alike
 * ("blocks.0.not_scaled_fp8x", "rescale_weight") is not taken for one. */
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "testutil.h"

static void put(sd_st_writer *w, const char *name) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 1, 2, 0, 0, 0);
    sd_tensor_f32(t)[0] = 1.0f, sd_tensor_f32(t)[1] = 2.0f;
    sd_error err;
    CHECK_OK(sd_st_writer_add(w, name, t, &err), &err);
    sd_tensor_unref(t);
}

/* Writes a file of the given keys; its path into path. */
static void write_file(const char *dir, const char *name, const char *const *keys, char *path, size_t n) {
    snprintf(path, n, "%s/%s.safetensors", dir, name);
    sd_st_writer *w = sd_st_writer_new();
    for (int i = 0; keys[i]; i++) put(w, keys[i]);
    sd_error err;
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
}

int main(void) {
    const char *dir = sd_test_tmpdir("checkpoint_scaled_fp8");
    struct {
        const char *name, *keys[4], *key;
    } refused[] = {
        {"flux_scaled", {"double_blocks.0.img_attn.qkv.weight", "double_blocks.0.img_attn.qkv.scale_weight", "scaled_fp8", NULL},
         "double_blocks.0.img_attn.qkv.scale_weight"},
        {"ckpt_scaled", {"model.diffusion_model.scaled_fp8", "model.diffusion_model.x.weight", NULL, NULL},
         "model.diffusion_model.scaled_fp8"},
        {"t5_scaled", {"encoder.block.0.layer.0.SelfAttention.q.weight", "encoder.block.0.layer.0.SelfAttention.q.scale_input", NULL, NULL},
         "encoder.block.0.layer.0.SelfAttention.q.scale_input"},
    };
    sd_backend *be = NULL;
    sd_error berr;
    CHECK_OK(sd_backend_new("cpu", 1, &be, &berr), &berr);
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char path[1024];
        write_file(dir, refused[i].name, refused[i].keys, path, sizeof path);
        sd_ckpt_info info;
        sd_error err;
        sd_error_clear(&err);
        sd_status rc = sd_checkpoint_probe(path, &info, &err);
        CHECK_MSG(rc == SD_ERR_UNSUPPORTED && strstr(err.msg, refused[i].key) && strstr(err.msg, "scaled-fp8") &&
                      strstr(err.msg, path),
                  "%s: probe gave %d: %s", refused[i].name, rc, err.msg);
        sd_checkpoint *c = NULL;
        sd_error_clear(&err);
        rc = sd_checkpoint_open(be, path, NULL, &c, &err);
        CHECK_MSG(rc == SD_ERR_UNSUPPORTED && c == NULL && strstr(err.msg, refused[i].key), "%s: open gave %d: %s",
                  refused[i].name, rc, err.msg);
        sd_checkpoint_unref(c);
    }
    /* look-alike keys: whatever else is said about the file, not this */
    const char *alike[] = {"blocks.0.not_scaled_fp8x", "blocks.0.rescale_weight", "blocks.0.myscaled_fp8", NULL};
    char path[1024];
    write_file(dir, "alike", alike, path, sizeof path);
    sd_ckpt_info info;
    sd_error err;
    sd_error_clear(&err);
    sd_checkpoint_probe(path, &info, &err);
    CHECK_MSG(!strstr(err.msg, "scaled-fp8"), "look-alike keys taken for a scaled-fp8 file: %s", err.msg);
    sd_backend_free(be);
    return sd_test_finish();
}
