/* The synthesized SD1 layout must be key-for-key and shape-for-shape the
 * layout of the reference tiny checkpoint (which mirrors real SD1.5 files),
 * and a written checkpoint must read back with those keys. */
#include <stdlib.h>
#include <string.h>

#include "models/synth/synth.h"
#include "testutil.h"

typedef struct { const sd_st_file *ref; int n, missing; } cmp_ctx;

static void check_key(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    cmp_ctx *c = user;
    c->n++;
    const sd_st_entry *e = sd_st_find(c->ref, name);
    if (!e) { c->missing++; CHECK_MSG(0, "synthesized key %s not in reference", name); return; }
    int same = e->ndim == ndim && e->dtype == dtype;
    for (int i = 0; same && i < ndim; i++) same = e->shape[i] == shape[i];
    CHECK_MSG(same, "key %s: shape/dtype differs from reference", name);
}

int main(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/models/tiny-sd1.safetensors", sd_test_testdata_dir());
    sd_error err = {0};
    sd_st_file *ref = NULL;
    if (sd_st_open(path, &ref, &err) != SD_OK) sd_test_skip("reference model absent: %s", err.msg);

    const sd_synth_config *cfg = sd_synth_preset("sd1-tiny");
    CHECK(cfg != NULL);
    cmp_ctx c = {ref, 0, 0};
    sd_synth_sd1_keys(cfg, check_key, &c);
    CHECK_MSG((size_t)c.n == sd_st_count(ref), "synthesized %d keys, reference has %zu", c.n, sd_st_count(ref));

    /* Write it, read it back: same key set again, metadata says random. */
    char out[4096];
    snprintf(out, sizeof out, "%s/tiny.safetensors", sd_test_tmpdir("synth"));
    CHECK_OK(sd_synth_sd1_write(cfg, 1, out, &err), &err);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(out, &f, &err), &err);
    if (f) {
        CHECK(sd_st_count(f) == sd_st_count(ref));
        const char *m = sd_st_metadata(f, "sdflow_random_weights");
        CHECK(m && strcmp(m, "true") == 0);
        sd_tensor *w = sd_st_tensor_f32(f, "model.diffusion_model.out.0.weight", &err);
        CHECK(w && sd_tensor_f32(w)[0] == 1.0f);
        sd_tensor_unref(w);
        sd_st_close(f);
    }
    CHECK(sd_synth_preset("nope") == NULL);
    sd_st_close(ref);
    return sd_test_finish();
}
