/* libFuzzer target: Flux diffusion-model files (models/flux). The input is
 * a safetensors file; the Flux DiT is detected under both prefixes a file
 * may use ("" and "model.diffusion_model."), and when detection accepts one
 * of a small size it is loaded (every tensor's shape checked against the
 * config, NaN/Inf refused, fp8 kept as stored) and run once on a tiny odd
 * latent (padding, patches, RoPE, both block kinds, unpatchify). Errors are
 * fine; a crash, an ASan report, UB or a leak is a finding. The seeds
 * (fuzz_seeds.c) are tiny valid models: BF16 dev, F32 schnell, an fp8
 * single-file layout and a scaled-fp8 one (models/checkpoint/fp8_scaled.h:
 * legacy scale_weight layers and a comfy_quant one; the file-wide check of
 * those configs runs on every input too). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/checkpoint/fp8_scaled.h"
#include "models/flux/flux.h"

static sd_backend *be;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    sd_error err;
    if (sd_backend_new("cpu", 1, &be, &err)) abort();
    return 0;
}

/* Small enough to load and run in a fuzzing iteration. */
static int small(const sd_flux_config *c) {
    return c->hidden_size <= 256 && c->mlp_hidden <= 1024 && c->depth + c->depth_single_blocks <= 6 &&
           c->in_channels <= 64 && c->context_in_dim <= 256 && c->vec_in_dim <= 256;
}

static void run(sd_flux *m) {
    const sd_flux_config *c = sd_flux_get_config(m);
    sd_bt *x = sd_bt_new4(be, SD_F32, 4, 1, c->in_channels, 3, 5);
    sd_bt *ctx = sd_bt_new4(be, SD_F32, 3, 1, 2, c->context_in_dim, 0);
    sd_bt *y = c->vec_in_dim ? sd_bt_new4(be, SD_F32, 2, 1, c->vec_in_dim, 0, 0) : NULL;
    float t = 0.5f, g = 3.5f;
    sd_bt *out = NULL;
    sd_error err;
    if (x && ctx && sd_flux_forward(m, x, &t, ctx, y, &g, &out, &err) == SD_OK) {
        if (!out || out->shape[2] != 3 || out->shape[3] != 5) abort();
    }
    sd_backend_clear_error(be);
    sd_bt_free(out);
    sd_bt_free(x);
    sd_bt_free(ctx);
    sd_bt_free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_st_file *f = NULL;
    sd_error err;
    if (sd_st_open_memory(data, size, "fuzz.safetensors", &f, &err) != SD_OK) return 0;
    sd_fp8_scaled_check(f, &err); /* either verdict is fine; a crash is not */
    static const char *const prefixes[2] = {"", "model.diffusion_model."};
    for (int p = 0; p < 2; p++) {
        sd_flux_config cfg;
        if (sd_flux_detect(f, prefixes[p], &cfg, &err) != SD_OK) continue;
        if (cfg.num_heads * cfg.head_dim != cfg.hidden_size || cfg.axes_dim[0] + cfg.axes_dim[1] +
                                                                      cfg.axes_dim[2] != cfg.head_dim)
            abort(); /* detection's own invariants */
        if (!small(&cfg)) continue;
        sd_flux *m = NULL;
        if (sd_flux_load(be, f, prefixes[p], SD_F32, &m, &err) == SD_OK) run(m);
        sd_backend_clear_error(be);
        sd_flux_free(m);
    }
    sd_st_close(f);
    return 0;
}
