/* add_noise.c - ComfyUI's AddNoise (comfy_extras/nodes_custom_sampler.py):
 * the NOISE scaled to the SIGMAS' span and added to a LATENT, without
 * sampling. In ComfyUI's order, float32:
 *   scale = |sigmas[0] - sigmas[-1]| (one sigma: sigmas[0]);
 *   latent = process_latent_in(samples) unless every sample is 0;
 *   x = noise_scaling(scale, noise, latent) (max_denoise off: noise * scale
 *   + latent); out = nan_to_num(process_latent_out(x), 0, 0, 0).
 * Empty sigmas return the latent as it is. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "custom.h"
#include "models/checkpoint/checkpoint.h"
#include "models/sampling/rng.h"
#include "nodes/image/image.h"
#include "nodes/loaders/loaders.h"

/* NOISE.generate_noise(latent): prepare_noise(seed, batch_index) or zeros. */
static sd_status make_noise(sd_value *nv, const sd_value *latent, const int64_t *shape,
                            sd_tensor **out, sd_error *err) {
    sd_value *tv = nv && sd_value_kind_of(nv) == SD_VAL_DICT ? sd_value_dict_get(nv, "noise_type") : NULL;
    const char *t = tv ? sd_value_as_string(tv) : NULL;
    sd_value *seed = t ? sd_value_dict_get(nv, "seed") : NULL;
    if (!t || !seed || (strcmp(t, "random") && strcmp(t, "empty")))
        return sd_nodes_bad_input(err, "noise", "noise must be a NOISE (from RandomNoise or DisableNoise)");
    if (strcmp(t, "empty") == 0) {
        *out = sd_tensor_new(SD_F32, 4, shape);
        return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    sd_value *bi = sd_value_dict_get(latent, "batch_index");
    size_t nbi = bi && sd_value_kind_of(bi) == SD_VAL_LIST ? sd_value_list_len(bi) : 0;
    int64_t *bidx = nbi ? malloc(nbi * sizeof *bidx) : NULL;
    if (nbi && !bidx) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nbi; i++) bidx[i] = sd_value_as_int(sd_value_list_get(bi, i));
    sd_status rc = sd_noise_prepare_ex((uint64_t)sd_value_as_int(seed), SD_RNG_PATH_AVX2, 4, shape,
                                       bidx, nbi, out, err);
    free(bidx);
    if (rc) sd_error_at(err, NULL, NULL, "latent_image");
    return rc;
}

static sd_status add_noise_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out,
                               sd_error *err) {
    (void)ctx;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    const float *s;
    int ns;
    if ((rc = sd_nodes_in_sigmas(in, 2, "sigmas", &s, &ns, err))) return rc;
    const sd_value *latent = in[3];
    sd_tensor *samples = latent ? sd_value_dict_tensor(latent, "samples") : NULL;
    if (!samples || samples->dtype != SD_F32 || samples->ndim != 4)
        return sd_nodes_bad_input(err, "latent_image", "latent_image must be a LATENT with F32 samples [B, C, H, W]");
    if (ns == 0) {
        *out = sd_value_ref(in[3]);
        return SD_OK;
    }
    sd_tensor *noise = NULL;
    if ((rc = make_noise(in[1], latent, samples->shape, &noise, err))) return rc;
    sd_model_sampling *ms = malloc(sizeof *ms);
    sd_value *d = sd_value_shallow_copy(latent);
    sd_value *tv = NULL;
    if (!ms || !d) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    sd_nodes_model_sampling_init(m, ms);
    const sd_latent_format *lf = sd_checkpoint_info(m->ckpt)->latent_format;
    const float scale = ns > 1 ? fabsf(s[0] - s[ns - 1]) : s[0];
    const size_t n = (size_t)sd_tensor_numel(samples);
    float *x = noise->data;
    float *lat = malloc((n ? n : 1) * sizeof *lat);
    if (!lat) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* an all-zero latent (an empty one) is not shifted: ComfyUI's rule */
    sd_latent_process_in_nonempty(lf, samples->data, lat, n);
    sd_ms_noise_scaling(ms, scale, x, lat, 0, x, n);
    free(lat);
    sd_latent_process_out(lf, x, x, n);
    for (size_t i = 0; i < n; i++) x[i] = isfinite(x[i]) ? x[i] : 0.0f;
    tv = sd_value_tensor(noise);
    /* dict_set takes tv, also when it fails */
    if (!tv || sd_value_dict_set(d, "samples", tv)) {
        tv = NULL;
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    tv = NULL;
    *out = d;
    d = NULL;
done:
    sd_value_unref(tv);
    sd_value_unref(d);
    sd_tensor_unref(noise);
    free(ms);
    return rc;
}

static const sd_input_def add_noise_inputs[] = {
    {.name = "model", .type = "MODEL"}, {.name = "noise", .type = "NOISE"},
    {.name = "sigmas", .type = "SIGMAS"}, {.name = "latent_image", .type = "LATENT"}, {0}};
static const sd_output_def latent_out[] = {{"LATENT", "LATENT"}, {0}};
const sd_node_def sd_node_AddNoise = {
    .version = 1, .class_type = "AddNoise", .python_module = "comfy_extras.nodes_custom_sampler",
    .category = "_for_testing/custom_sampling/noise",
    .help = "Adds the NOISE times |sigmas[0] - sigmas[-1]| to the latent (in model space), "
            "without sampling.",
    .inputs = add_noise_inputs, .outputs = latent_out, .flags = SD_NODE_EXPERIMENTAL | SD_NODE_V3,
    .run = add_noise_run};
