/* The synthesized SDXL layout must be key-for-key and shape-for-shape the
 * layout of the reference tiny SDXL checkpoint (which mirrors real SDXL base
 * files); a written one must read back with those keys, load as SDXL with
 * the preset's UNet configuration, and the full-size preset must have the
 * shapes of sd_xl_base_1.0. */
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/synth/synth.h"
#include "testutil.h"

typedef struct {
    const sd_st_file *ref;
    int n;
} cmp_ctx;

static void check_key(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    cmp_ctx *c = user;
    c->n++;
    const sd_st_entry *e = sd_st_find(c->ref, name);
    if (!e) {
        CHECK_MSG(0, "synthesized key %s not in reference", name);
        return;
    }
    int same = e->ndim == ndim && e->dtype == dtype;
    for (int i = 0; same && i < ndim; i++) same = e->shape[i] == shape[i];
    CHECK_MSG(same, "key %s: shape/dtype differs from reference", name);
}

typedef struct {
    int64_t params;
    int n;
    int64_t label_in, attn2_k_in, bigG_proj;
} count_ctx;

static void count_key(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    count_ctx *c = user;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    c->params += n;
    c->n++;
    if (strcmp(name, "model.diffusion_model.label_emb.0.0.weight") == 0) c->label_in = shape[1];
    if (strcmp(name, "model.diffusion_model.middle_block.1.transformer_blocks.9.attn2.to_k.weight") == 0)
        c->attn2_k_in = shape[1];
    if (strcmp(name, "conditioner.embedders.1.model.text_projection") == 0) c->bigG_proj = shape[0];
}

int main(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/models/tiny-sdxl.safetensors", sd_test_testdata_dir());
    sd_error err = {0};
    sd_st_file *ref = NULL;
    if (sd_st_open(path, &ref, &err) != SD_OK) sd_test_skip("reference model absent: %s", err.msg);

    const sd_synth_sdxl_config *cfg = sd_synth_sdxl_preset("sdxl-tiny");
    CHECK(cfg != NULL);
    if (!cfg) return sd_test_finish();
    cmp_ctx c = {ref, 0};
    sd_synth_sdxl_keys(cfg, check_key, &c);
    CHECK_MSG((size_t)c.n == sd_st_count(ref), "synthesized %d keys, reference has %zu", c.n,
              sd_st_count(ref));

    /* Write it, read it back, load it as a checkpoint. */
    char out[4096];
    snprintf(out, sizeof out, "%s/tiny-sdxl.safetensors", sd_test_tmpdir("synth_sdxl"));
    CHECK_OK(sd_synth_sdxl_write(cfg, 1, out, &err), &err);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(out, &f, &err), &err);
    if (f) {
        CHECK(sd_st_count(f) == sd_st_count(ref));
        const char *m = sd_st_metadata(f, "sdflow_random_weights");
        CHECK(m && strcmp(m, "true") == 0);
        sd_tensor *w = sd_st_tensor_f32(f, "conditioner.embedders.1.model.ln_final.weight", &err);
        CHECK(w && sd_tensor_f32(w)[0] == 1.0f);
        sd_tensor_unref(w);
        sd_st_close(f);
    }
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 1, &be, &err), &err);
    sd_checkpoint *ck = NULL;
    sd_checkpoint_opts o;
    sd_checkpoint_opts_default(&o);
    if (be) CHECK_OK(sd_checkpoint_open(be, out, &o, &ck, &err), &err);
    if (ck) {
        const sd_ckpt_info *info = sd_checkpoint_info(ck);
        CHECK(info->family == SD_CKPT_SDXL);
        CHECK(info->random_weights);
        CHECK(info->unet.model_channels == cfg->model_channels);
        CHECK(info->unet.adm_in_channels == cfg->adm_in_channels);
        CHECK(info->unet.context_dim == cfg->context_dim);
        sd_checkpoint_unref(ck);
    }
    sd_backend_free(be);

    /* Full size: sd_xl_base_1.0's shapes (2.57 G UNet parameters, 2048-d
     * context, 2816-d adm, bigG 1280) without writing anything. */
    const sd_synth_sdxl_config *xl = sd_synth_sdxl_preset("sdxl");
    CHECK(xl != NULL);
    if (xl) {
        count_ctx n = {0};
        sd_synth_sdxl_keys(xl, count_key, &n);
        CHECK_MSG(n.label_in == 2816, "label_emb input %lld", (long long)n.label_in);
        CHECK_MSG(n.attn2_k_in == 2048, "middle attn2 context %lld", (long long)n.attn2_k_in);
        CHECK(n.bigG_proj == 1280);
        /* UNet 2.567 G + VAE 83.7 M + CLIP-L 123 M + bigG 695 M parameters */
        CHECK_MSG(n.params > 3400000000LL && n.params < 3600000000LL, "%lld parameters",
                  (long long)n.params);
        printf("sdxl preset: %d tensors, %lld parameters\n", n.n, (long long)n.params);
    }
    CHECK(sd_synth_sdxl_preset("nope") == NULL);
    sd_st_close(ref);
    return sd_test_finish();
}
