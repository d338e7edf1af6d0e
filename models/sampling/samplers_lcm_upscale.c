/* samplers_lcm_upscale.c - ComfyUI's sample_lcm_upscale
 * (comfy_extras/nodes_advanced_samplers.py, SamplerLCMUpscale's KSAMPLER):
 * LCM steps whose x0 prediction is resized with common_upscale on the
 * first upscale_steps steps, so x grows from the latent's size to
 * total_upscale times it.
 *
 *   upscale_steps = max(len(sigmas) // 2 + 1, 2)      (the node's -1: None)
 *                 = min(scale_steps + 1, len(sigmas) + 1) otherwise
 *   upscales = np.linspace(1.0, total_upscale, upscale_steps)[1:]
 *   step i: x = model(x, sigma_i); if i < len(upscales): x resized to
 *           (round(W0 * upscales[i]), round(H0 * upscales[i]));
 *           if sigma_{i+1} > 0: x += sigma_{i+1} * torch.randn_like(x)
 *
 * randn_like draws on torch's default generator (the run's global_rng).
 * For a batch of more than one latent, common_upscale's bislerp hands back
 * a channels-last tensor, and randn_like keeps that layout: torch then
 * fills it element by element in memory order (sd_rng_randn_serial), not
 * in 16-value blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "models/sampling/sampler_internal.h"
#include "models/image/imageops.h"

/* numpy.linspace(1.0, total, num)[k] for 0 < k < num, in double as numpy:
 * k * step + start, the last value exactly `total` (endpoint). */
static double linspace_at(double total, int64_t num, int64_t k)
{
    if (k == num - 1)
        return total;
    double step = (total - 1.0) / (double)(num - 1);
    if (step == 0.0)
        return 1.0;
    double y = (double)k * step;
    return y + 1.0;
}

/* NHWC-ordered draws v -> NCHW x += sigma * noise (torch's order: the
 * product first, then the in-place add). */
static void add_noise(float *x, const float *v, const int64_t *shape, float sigma, int channels_last)
{
    const int64_t B = shape[0], C = shape[1], H = shape[2], W = shape[3];
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t y = 0; y < H; y++)
                for (int64_t xx = 0; xx < W; xx++) {
                    int64_t k = ((b * C + c) * H + y) * W + xx;
                    int64_t j = channels_last ? ((b * H + y) * W + xx) * C + c : k;
                    float e = sigma * v[j];
                    x[k] = x[k] + e;
                }
}

sd_status smp_lcm_upscale(smp_ctx *c, sd_tensor *x_in, const float *sigmas, int n_sigmas, sd_error *err)
{
    const sd_sampler_params *p = c->p;
    if (x_in->ndim != 4)
        return sd_error_set(err, SD_ERR_INVALID, "sampler %s: the latent must be [B, C, H, W]", c->s->name);
    if (p->lcm_upscale_method < 0 || p->lcm_upscale_method >= SD_UPSCALE_COUNT ||
        !(p->lcm_total_upscale > 0.0) || isinf(p->lcm_total_upscale))
        return sd_error_set(err, SD_ERR_INVALID, "sampler %s: bad upscale settings", c->s->name);
    const sd_upscale_method method = (sd_upscale_method)p->lcm_upscale_method;
    const int64_t len = n_sigmas;
    int64_t num;
    if (p->lcm_upscale_steps < 0) {
        num = len / 2 + 1;
        if (num < 2)
            num = 2;
    } else {
        num = (int64_t)p->lcm_upscale_steps + 1;
        if (num > len + 1)
            num = len + 1;
    }
    const int64_t n_up = num - 1, w0 = x_in->shape[3], h0 = x_in->shape[2];

    sd_tensor *x = sd_tensor_ref(x_in), *den = NULL;
    float *noise = NULL;
    size_t noise_cap = 0;
    sd_status st = SD_OK;
    for (int i = 0; i < n_sigmas - 1 && st == SD_OK; i++) {
        if (!(den = sd_tensor_new(SD_F32, 4, x->shape))) {
            st = sd_error_set(err, SD_ERR_NOMEM, "sampler %s: out of memory", c->s->name);
            break;
        }
        if ((st = smp_denoise(c, x, sigmas[i], den, err)) != SD_OK)
            break;
        smp_progress(c, i, x, den);
        sd_tensor_unref(x);
        x = den;
        den = NULL;
        int channels_last = 0;
        if (i < n_up) {
            double u = linspace_at(p->lcm_total_upscale, num, i + 1);
            double wf = nearbyint((double)w0 * u), hf = nearbyint((double)h0 * u);
            if (!(wf >= 1.0 && hf >= 1.0 && wf < 1e9 && hf < 1e9)) {
                st = sd_error_set(err, SD_ERR_INVALID, "sampler %s: step %d resizes the latent to %gx%g",
                                  c->s->name, i, wf, hf);
                break;
            }
            sd_tensor *up = NULL;
            if ((st = sd_imageops_upscale(x, (int64_t)wf, (int64_t)hf, method, SD_CROP_DISABLED, &up, err)) != SD_OK) {
                sd_error_prefix(err, "sampler %s", c->s->name);
                break;
            }
            sd_tensor_unref(x);
            x = up;
            /* bislerp's last slerp runs on [B*H*W, C] rows: a view of the
             * channel-major gather when B == 1 (so the result is NCHW
             * again), a copy in row order when B > 1 (channels-last) */
            channels_last = method == SD_UPSCALE_BISLERP && x->shape[0] > 1;
        }
        float sn = sigmas[i + 1];
        if (sn > 0.0f) {
            int64_t n = sd_tensor_numel(x);
            if ((size_t)n > noise_cap) {
                float *nb = realloc(noise, (size_t)n * sizeof *nb);
                if (!nb) {
                    st = sd_error_set(err, SD_ERR_NOMEM, "sampler %s: out of memory", c->s->name);
                    break;
                }
                noise = nb;
                noise_cap = (size_t)n;
            }
            if ((st = smp_global_randn_n(c, noise, n, channels_last, err)) != SD_OK)
                break;
            add_noise(x->data, noise, x->shape, sn, channels_last);
        }
    }
    free(noise);
    sd_tensor_unref(den);
    if (st == SD_OK && x != x_in) {
        if (sd_tensor_same_shape(x, x_in)) {
            memcpy(x_in->data, x->data, x->nbytes);
        } else {
            c->result = x; /* handed to the caller */
            x = NULL;
        }
    }
    sd_tensor_unref(x);
    return st;
}
