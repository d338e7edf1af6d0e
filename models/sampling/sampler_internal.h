/* sampler_internal.h - run state and helpers shared by the samplers_*.c files.
 * Not a public contract: only models/samplers_*.c and sampler_registry.c
 * include it.
 *
 * Conventions inside the samplers:
 *  - `float` scalars mirror torch 0-d float32 tensors (sigmas[i], t_fn(...)),
 *    `double` mirrors Python floats; every tensor op is one loop with one
 *    float32 rounding per torch op, in torch's order.
 *  - Temporaries come from smp_tmp() and are freed by sd_sampler_run.
 */
#ifndef SD_SAMPLER_INTERNAL_H
#define SD_SAMPLER_INTERNAL_H

#include <math.h>
#include "models/sampling/sampler.h"
#include "models/sampling/rng.h" /* sd_torch_expf / sd_torch_logf */

/* torch semantics need float ops exactly as written: no FMA contraction. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define SMP_MAX_TMP 48

typedef struct sd_sampler_run_ctx {
    const sd_sampler *s;
    const sd_denoiser *model;
    const sd_sampler_params *p;
    sd_noise_source noise;       /* resolved noise source */
    int has_noise;
    struct sd_rng *global_rng;   /* torch's global generator stand-in (s_churn) */
    int64_t n;                   /* numel of x */
    int ndim;
    int64_t shape[SD_MAX_DIMS];
    sd_tensor *tmp[SMP_MAX_TMP];
    int ntmp;
    void *mem[8]; /* smp_alloc blocks */
    int nmem;
    int total_steps;             /* len(sigmas) - 1, for progress */
    sd_tensor *uncond;           /* last uncond prediction (CFG++), else NULL */
    sd_tensor *result;           /* a resizing sampler's result when its shape
                                  * differs from x's (owned; handed to the
                                  * caller by sd_sampler_run_resizing) */
} smp_ctx;

/* New zeroed temporary of x's shape owned by the context; NULL on OOM
 * (err filled). */
sd_tensor *smp_tmp(smp_ctx *c, sd_error *err);
static inline float *smp_f(const sd_tensor *t) { return (float *)t->data; }
/* Zeroed scratch memory owned by the context (freed by sd_sampler_run);
 * NULL on OOM with err filled. */
void *smp_alloc(smp_ctx *c, size_t bytes, sd_error *err);

/* One model evaluation: polls cancel, evaluates, and for CFG++ samplers also
 * refreshes c->uncond. */
sd_status smp_denoise(smp_ctx *c, const sd_tensor *x, float sigma,
                      sd_tensor *denoised, sd_error *err);
/* Progress callback (ComfyUI's `callback`). */
void smp_progress(smp_ctx *c, int i, const sd_tensor *x, const sd_tensor *den);
/* Step noise for sigma -> sigma_next into out (n floats). */
sd_status smp_noise(smp_ctx *c, float sigma, float sigma_next, float *out,
                    sd_error *err);
/* torch.randn_like(x) on the global generator (s_churn noise). */
sd_status smp_global_randn(smp_ctx *c, float *out, sd_error *err);
/* torch.randn_like of an n-element tensor on the global generator; serial:
 * the tensor is not contiguous (torch's element-by-element path, values in
 * its memory order). */
sd_status smp_global_randn_n(smp_ctx *c, float *out, int64_t n, int serial, sd_error *err);

/* Option with a per-sampler default. */
static inline double smp_opt(double v, double dflt) { return isnan(v) ? dflt : v; }

void smp_copy(smp_ctx *c, float *dst, const float *src);

/* k_diffusion.sampling.get_ancestral_step in float32 (0-d tensors). eta == 0
 * returns (sigma_to, 0). */
void smp_ancestral_step(float sigma_from, float sigma_to, double eta,
                        float *sigma_down, float *sigma_up);

/* torch.lerp(a, b, w) for float32 scalars (w given as float). */
static inline float smp_lerpf(float a, float b, float w)
{
    return fabsf(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

/* torch's float32 expm1 on x86 (Sleef expm1f_u10), bit for bit. */
float smp_expm1f(float a);

/* ModelSamplingDiscrete.percent_to_sigma for the SD1/SDXL schedule. */
double smp_default_percent_to_sigma(double percent);

/* k_diffusion's sigma_to_half_log_snr / half_log_snr_to_sigma for the run's
 * model (c->p->flow): VP -log(sigma) / exp(-lambda) (torch's vectorised
 * log/exp); CONST -logit(sigma) = -log(sigma / (1 - sigma)), -inf at 1, and
 * sigmoid(-lambda) = 1 / (1 + exp(lambda)) (torch's scalar logit / sigmoid
 * paths on 0-d tensors: libm logf / expf). */
float smp_half_log_snr(const smp_ctx *c, float sigma);
float smp_sigma_of_half_log_snr(const smp_ctx *c, float lambda);
/* offset_first_sigma_for_snr: for a flow model, a first sigma >= 1 (infinite
 * half-logSNR) is replaced by (float)percent_to_sigma(1e-4) in a copy
 * (smp_alloc); otherwise sigmas itself. NULL on OOM (err filled). */
const float *smp_snr_sigmas(smp_ctx *c, const float *sigmas, int n_sigmas, sd_error *err);

/* ---- the sampler functions (one per ComfyUI sample_* function) ---------- */
#define SMP_DECL(fn) sd_status fn(smp_ctx *c, sd_tensor *x, const float *sigmas, \
                                  int n_sigmas, sd_error *err)
SMP_DECL(smp_euler);
SMP_DECL(smp_euler_ancestral);
SMP_DECL(smp_euler_cfg_pp);
SMP_DECL(smp_euler_pp);
SMP_DECL(smp_euler_ancestral_cfg_pp);
SMP_DECL(smp_heun);
SMP_DECL(smp_heunpp2);
SMP_DECL(smp_dpm_2);
SMP_DECL(smp_dpm_2_ancestral);
SMP_DECL(smp_lms);
SMP_DECL(smp_dpm_fast);
SMP_DECL(smp_dpm_adaptive);
SMP_DECL(smp_dpmpp_2s_ancestral);
SMP_DECL(smp_dpmpp_2s_ancestral_cfg_pp);
SMP_DECL(smp_dpmpp_sde);
SMP_DECL(smp_dpmpp_2m);
SMP_DECL(smp_dpmpp_2m_cfg_pp);
SMP_DECL(smp_dpmpp_2m_sde);
SMP_DECL(smp_dpmpp_2m_sde_heun);
SMP_DECL(smp_dpmpp_3m_sde);
SMP_DECL(smp_ddpm);
SMP_DECL(smp_lcm);
SMP_DECL(smp_lcm_upscale);
SMP_DECL(smp_ipndm);
SMP_DECL(smp_ipndm_v);
SMP_DECL(smp_deis);
SMP_DECL(smp_res_multistep);
SMP_DECL(smp_res_multistep_cfg_pp);
SMP_DECL(smp_res_multistep_ancestral);
SMP_DECL(smp_res_multistep_ancestral_cfg_pp);
SMP_DECL(smp_gradient_estimation);
SMP_DECL(smp_gradient_estimation_cfg_pp);
SMP_DECL(smp_er_sde);
SMP_DECL(smp_seeds_2);
SMP_DECL(smp_seeds_3);
SMP_DECL(smp_exp_heun_2_x0);
SMP_DECL(smp_exp_heun_2_x0_sde);
SMP_DECL(smp_sa_solver);
SMP_DECL(smp_sa_solver_pece);
SMP_DECL(smp_uni_pc);
SMP_DECL(smp_uni_pc_bh2);
/* The flow-matching (_RF) forms ComfyUI switches to for a CONST model
 * (samplers_rf.c): sample_euler_ancestral_RF, sample_dpm_2_ancestral_RF,
 * sample_dpmpp_2s_ancestral_RF. */
SMP_DECL(smp_euler_ancestral_rf);
SMP_DECL(smp_dpm_2_ancestral_rf);
SMP_DECL(smp_dpmpp_2s_ancestral_rf);

#endif
