/* unet_unclip.c - SD2.1 unCLIP's ADM vector: comfy.model_base.unclip_adm
 * and CLIPEmbeddingNoiseAugmentation, on the host in PyTorch's float32
 * operation order (see unet.h). */
#include "models/unet/unet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/sampling/rng.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define UNCLIP_STEPS 1000      /* noise_schedule_config timesteps */
#define UNCLIP_MAX_LEVEL 1000  /* ImageConcatWithNoiseAugmentation max_noise_level */

/* alphas_cumprod[level] of make_beta_schedule("squaredcos_cap_v2", 1000):
 * betas_for_alpha_bar with alpha_bar(t) = cos((t + 0.008) / 1.008 * pi / 2) ** 2
 * (Python floats: pow for **), betas capped at 0.999, np.cumprod of 1 - beta. */
static double alphas_cumprod(int level) {
    double ac = 1.0;
    for (int i = 0; i <= level; i++) {
        double t1 = (double)i / UNCLIP_STEPS, t2 = (double)(i + 1) / UNCLIP_STEPS;
        double a1 = pow(cos((t1 + 0.008) / 1.008 * M_PI / 2), 2.0);
        double a2 = pow(cos((t2 + 0.008) / 1.008 * M_PI / 2), 2.0);
        double beta = 1 - a2 / a1;
        if (beta > 0.999) beta = 0.999;
        ac = i == 0 ? 1.0 - beta : ac * (1.0 - beta);
    }
    return ac;
}

/* round((max_noise_level - 1) * noise_augment) with Python's rounding. */
static sd_status noise_level(double aug, int *level, sd_error *err) {
    double v = nearbyint((double)(UNCLIP_MAX_LEVEL - 1) * aug);
    if (!(v >= 0 && v <= UNCLIP_MAX_LEVEL - 1))
        return sd_error_set(err, SD_ERR_INVALID,
                            "unCLIP noise_augmentation %g is outside 0..1 (noise level %g of 0..%d)", aug, v,
                            UNCLIP_MAX_LEVEL - 1);
    *level = (int)v;
    return SD_OK;
}

/* CLIPEmbeddingNoiseAugmentation.forward(x, noise_level): out[0..dim) the
 * augmented embedding (q_sample with noise n), out[dim..2dim) the level's
 * timestep embedding. */
static void augment(const float *x, const float *n, int level, int dim, float *out) {
    const double ac = alphas_cumprod(level);
    const float a = (float)sqrt(ac), b = (float)sqrt(1.0 - ac);
    for (int i = 0; i < dim; i++) out[i] = a * x[i] + b * n[i];
    const float t = (float)level;
    sd_unet_timestep_embedding(&t, 1, dim, out + dim);
}

sd_status sd_unet_unclip_adm(const sd_unclip_item *items, int n, int dim, double merge_augmentation,
                             uint64_t seed, struct sd_rng *rng, float *out, sd_error *err) {
    if (n < 1 || dim < 1 || !items || !rng || !out)
        return sd_error_set(err, SD_ERR_INVALID, "unCLIP adm: no image embedding given");
    const size_t w = 2 * (size_t)dim;
    float *noise = malloc((size_t)dim * sizeof(float)), *one = malloc(w * sizeof(float));
    float *sum = n > 1 ? calloc(w, sizeof(float)) : NULL;
    sd_status rc = SD_OK;
    if (!noise || !one || (n > 1 && !sum)) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int k = 0; k < n; k++) {
        int level = 0;
        if ((rc = noise_level(items[k].noise_augmentation, &level, err))) goto done;
        /* q_sample(..., seed): torch.randn(size, generator=torch.manual_seed(seed)) */
        sd_rng_seed(rng, seed);
        sd_rng_randn(rng, noise, dim);
        augment(items[k].embed, noise, level, dim, one);
        const float s = (float)items[k].strength;
        for (size_t i = 0; i < w; i++) one[i] = one[i] * s;
        if (n == 1) memcpy(out, one, w * sizeof(float));
        else /* torch.stack(adm_inputs).sum(0), row after row */
            for (size_t i = 0; i < w; i++) sum[i] = sum[i] + one[i];
    }
    if (n > 1) {
        int level = 0;
        if ((rc = noise_level(merge_augmentation, &level, err))) goto done;
        sd_rng_randn(rng, noise, dim); /* randn_like: the default generator, not reseeded */
        augment(sum, noise, level, dim, out);
    }
done:
    free(noise);
    free(one);
    free(sum);
    return rc;
}
