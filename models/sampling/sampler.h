/* sampler.h - every ComfyUI KSampler sampler, driven by a denoiser callback.
 *
 * A sampler integrates the probability-flow ODE / reverse SDE of a
 * k-diffusion style model from sigmas[0] down to sigmas[n-1]. It knows
 * nothing about UNets or prompts: it calls an sd_denoiser that maps
 * (x, sigma) to the CFG-combined x0 prediction ("denoised"), exactly what
 * ComfyUI's KSamplerX0Inpaint(CFGGuider) hands to the k-diffusion functions.
 * models/sampling/guider.h builds such a denoiser from a per-conditioning model call.
 *
 * Numerics follow ComfyUI on CPU torch: tensor arithmetic is float32, one
 * rounding per torch op and in torch's evaluation order (no FMA contraction),
 * scalar sigma math is float32 where torch does it on 0-d float32 tensors and
 * double where ComfyUI uses Python floats (lms, deis, sa_solver and uni_pc
 * coefficients). VP models (EPS / V-prediction; SD1.x, SD2.x, SDXL) and
 * flow-matching ones (CONST: Flux, SD3; params->flow) both: for the latter,
 * as ComfyUI does, the ancestral samplers take their _RF forms, the
 * half-logSNR samplers use lambda = log((1 - sigma) / sigma) and move a
 * first sigma >= 1 to percent_to_sigma(1e-4), and lcm renoises with the
 * flow noise_scaling.
 *
 * Noise: ComfyUI's default noise sampler is a fresh CPU torch generator seeded
 * with seed+1 that draws torch.randn(x.shape) per call; the SDE samplers
 * (dpmpp_sde*, dpmpp_2m_sde*, dpmpp_3m_sde*) use torchsde's Brownian tree
 * seeded with `seed` (models/sampling/brownian.h). Both are created by
 * sd_sampler_run from params->seed unless params->noise overrides them.
 *
 * Ownership: the caller owns x (modified in place) and everything in the
 * params; sd_sampler_run allocates only temporaries it frees before return.
 */
#ifndef SD_SAMPLER_H
#define SD_SAMPLER_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"

struct sd_rng;

/* ---- what a sampler calls ------------------------------------------------ */

/* Evaluates the guided model at noise level `sigma` on x (F32 [B, ...]).
 * Writes the CFG-combined x0 prediction into `denoised` (preallocated, same
 * shape as x). When `uncond_denoised` is not NULL it must also receive the
 * unconditional x0 prediction, and the cfg == 1 shortcut must not be taken:
 * the CFG++ samplers pass it (ComfyUI's sampler_post_cfg_function with
 * disable_cfg1_optimization). Returns SD_OK or an error filled into err. */
typedef struct sd_denoiser {
    sd_status (*eval)(void *ud, const sd_tensor *x, float sigma,
                      sd_tensor *denoised, sd_tensor *uncond_denoised,
                      sd_error *err);
    void *ud;
} sd_denoiser;

/* A noise source: fills out[0..n) with the step noise for sigma -> sigma_next
 * (unit variance per element). Used to override the sampler's default. */
typedef struct sd_noise_source {
    sd_status (*sample)(void *ud, float sigma, float sigma_next, float *out,
                        int64_t n, sd_error *err);
    void *ud;
} sd_noise_source;

/* Called where ComfyUI calls the sampler callback: step i of total_steps,
 * x = the state the step starts from (ipndm, ipndm_v, deis: the x the
 * sampler started from, every step, as ComfyUI's callback gets it),
 * denoised = that step's first model prediction. The tensors are only valid
 * during the call. */
typedef void (*sd_sampler_progress_fn)(void *ud, int step, int total_steps,
                                       const sd_tensor *x,
                                       const sd_tensor *denoised);
/* Polled before every model evaluation; nonzero stops the run with
 * SD_ERR_CANCELLED. */
typedef int (*sd_sampler_cancel_fn)(void *ud);

/* Unset (NAN) double options mean "this sampler's ComfyUI default". */
#define SD_SAMPLER_DEFAULT (__builtin_nan(""))

typedef enum sd_sde_solver {
    SD_SDE_SOLVER_DEFAULT = 0, /* the sampler's own (midpoint for dpmpp_2m_sde) */
    SD_SDE_SOLVER_MIDPOINT,
    SD_SDE_SOLVER_HEUN
} sd_sde_solver;

typedef struct sd_sampler_params {
    uint64_t seed; /* the KSampler seed (extra_args["seed"]) */

    /* Options of ComfyUI's sampler functions / SamplerXxx nodes. */
    double eta;      /* ancestral / SDE strength (default per sampler; the
                      * samplers ComfyUI runs with a fixed eta -- euler_cfg_pp,
                      * res_multistep(_cfg_pp), exp_heun_2_x0, dpm_fast --
                      * ignore it; dpm_adaptive's default is 0) */
    double s_noise;  /* noise multiplier (default 1) */
    double s_churn;  /* euler/heun/dpm_2/heunpp2 churn (default 0) */
    double s_tmin;   /* default 0 */
    double s_tmax;   /* default +inf */
    double r;        /* dpmpp_sde / seeds_2 midpoint ratio (default 0.5) */
    double ge_gamma; /* gradient_estimation gamma (default 2) */
    int lms_order;   /* default 4 (0 = default) */
    sd_sde_solver sde_solver; /* dpmpp_2m_sde* solver_type */
    int seeds_phi_2; /* seeds_2: SamplerSEEDS2's solver_type phi_2 (0 = phi_1) */
    /* er_sde (SamplerER_SDE): max_stage 1..3 (0 = 3) and the noise scaler:
     * ER-SDE's own unless er_reverse_time, then x^(er_eta + 1) (its
     * "Reverse-time SDE" and "ODE" solver types). */
    int er_max_stage;
    int er_reverse_time;
    double er_eta;
    /* sa_solver / sa_solver_pece (SamplerSASolver, sa_set): predictor order
     * 1..6, corrector order 0..6, PECE, the paper's simple order-2
     * coefficients, and the stochastic window: tau = sa_eta while
     * sa_tau_start_sigma >= sigma >= sa_tau_end_sigma (the node resolves
     * its percents with its MODEL). Without sa_set: orders 3 and 4, tau 1
     * over the sampled model's percent_to_sigma(0.2) .. (0.8). */
    int sa_set;
    int sa_predictor_order, sa_corrector_order, sa_use_pece, sa_simple_order_2;
    double sa_eta, sa_tau_start_sigma, sa_tau_end_sigma;
    /* dpm_adaptive (SamplerDPMAdaptative, dpm_set): order 2 or 3 and the PID
     * step controller's settings; eta and s_noise above (eta > 0 makes the
     * steps ancestral). Without dpm_set: sample_dpm_adaptive's defaults. */
    int dpm_set;
    int dpm_order;
    double dpm_rtol, dpm_atol, dpm_h_init, dpm_pcoeff, dpm_icoeff, dpm_dcoeff, dpm_accept_safety;

    /* lcm_upscale (SamplerLCMUpscale, comfy_extras/nodes_advanced_samplers.py
     * sample_lcm_upscale): the final scale (total_upscale), the number of
     * steps that upscale (-1: ComfyUI's None, len(sigmas) // 2) and the
     * common_upscale method (an sd_upscale_method, models/image/imageops.h). */
    double lcm_total_upscale;
    int lcm_upscale_steps;
    int lcm_upscale_method;

    /* Overrides the sampler's noise (default generator / Brownian tree);
     * NULL = ComfyUI's. Lets tests force zero noise. */
    const sd_noise_source *noise;

    /* The stand-in for torch's process-wide default generator in the state
     * the run found it (ComfyUI's prepare_noise seeds it and draws the
     * initial noise from it), which torch.randn_like draws in a sampler
     * continue (s_churn, lcm_upscale); shared with the model's own draws
     * (HyperTile, ToMe) and advanced by the run. Not owned. NULL: a
     * generator seeded with `seed` after one draw of x's size. */
    struct sd_rng *global_rng;

    /* The model is a flow-matching one (its model sampling is CONST): the
     * sampler takes ComfyUI's CONST branches (see above). 0 = VP. */
    int flow;

    /* ModelSampling.percent_to_sigma of the model (sa_solver's stochastic
     * interval 0.2..0.8; with flow, the first sigma's offset). NULL means the
     * SD1/SDXL discrete schedule (scaled_linear 0.00085..0.012, 1000 steps)
     * computed here. */
    double (*percent_to_sigma)(void *ud, double percent);
    void *percent_to_sigma_ud;

    sd_sampler_progress_fn progress;
    void *progress_ud;
    sd_sampler_cancel_fn cancel;
    void *cancel_ud;
} sd_sampler_params;

/* Fills p with ComfyUI's defaults (seed 0, all options "default"). */
void sd_sampler_params_init(sd_sampler_params *p);

/* ---- the registry --------------------------------------------------------- */

/* KSampler computes steps+1 sigmas and drops the penultimate one
 * (dpm_2, dpm_2_ancestral, uni_pc, uni_pc_bh2). */
#define SD_SAMPLER_DISCARD_PENULTIMATE_SIGMA 0x1u
/* Needs the unconditional prediction each call (CFG++ samplers): the guider
 * must not skip the uncond pass at cfg == 1 (disable_cfg1_optimization). */
#define SD_SAMPLER_NEEDS_UNCOND 0x2u
/* In comfy.samplers.KSAMPLER_NAMES (k-diffusion functions); ddim, uni_pc and
 * uni_pc_bh2 are only in SAMPLER_NAMES. */
#define SD_SAMPLER_KDIFFUSION 0x4u
/* Changes x's height and width during the run (lcm_upscale): run it with
 * sd_sampler_run_resizing. */
#define SD_SAMPLER_RESIZES 0x8u

typedef enum sd_sampler_noise_kind {
    SD_SAMPLER_NOISE_NONE = 0,  /* deterministic */
    SD_SAMPLER_NOISE_DEFAULT,   /* torch generator seeded seed+1 */
    SD_SAMPLER_NOISE_BROWNIAN   /* torchsde Brownian tree seeded seed */
} sd_sampler_noise_kind;

struct sd_sampler_run_ctx; /* private, see models/sampling/sampler_internal.h */

typedef struct sd_sampler {
    const char *name;  /* exact ComfyUI sampler_name */
    unsigned flags;    /* SD_SAMPLER_* */
    sd_sampler_noise_kind noise;
    /* Integrates x in place over sigmas[0..n_sigmas). */
    sd_status (*run)(struct sd_sampler_run_ctx *c, sd_tensor *x,
                     const float *sigmas, int n_sigmas, sd_error *err);
} sd_sampler;

/* Lookup by exact ComfyUI name, or a node-only sampler's name ("euler_pp":
 * SamplerEulerCFGpp's alternative, "lcm_upscale": SamplerLCMUpscale's);
 * NULL when unknown. */
const sd_sampler *sd_sampler_find(const char *name);
/* NULL-terminated list of all names in comfy.samplers.SAMPLER_NAMES order;
 * *count (may be NULL) receives the number of names. */
const char *const *sd_sampler_names(size_t *count);

static inline int sd_sampler_discards_penultimate_sigma(const sd_sampler *s)
{
    return (s->flags & SD_SAMPLER_DISCARD_PENULTIMATE_SIGMA) != 0;
}
static inline int sd_sampler_needs_uncond(const sd_sampler *s)
{
    return (s->flags & SD_SAMPLER_NEEDS_UNCOND) != 0;
}
static inline int sd_sampler_resizes(const sd_sampler *s)
{
    return (s->flags & SD_SAMPLER_RESIZES) != 0;
}

/* The sigma KSAMPLER.sample then hands to inverse_noise_scaling: the last
 * of sigmas[0..n), except that uni_pc and uni_pc_bh2 write 0.001 over a final
 * 0 in ComfyUI's sigma tensor (their last step's target), and it is that
 * tensor which KSAMPLER reads (a flow model's result is then x / 0.999). */
float sd_sampler_final_sigma(const sd_sampler *s, const float *sigmas, int n_sigmas);

/* Runs sampler s: x (F32, contiguous, [B, ...]) holds the start latent
 * already scaled by noise_scaling (KSAMPLER.sample) and receives the result
 * (model space, before inverse_noise_scaling: sd_ms_inverse_noise_scaling
 * at sd_sampler_final_sigma, the identity for VP models).
 * sigmas: n_sigmas >= 1 float32 values, descending, usually ending in 0;
 * with n_sigmas == 1 x is returned unchanged, as in ComfyUI.
 * Errors: SD_ERR_INVALID (bad arguments, with the sampler name),
 * SD_ERR_CANCELLED, SD_ERR_NOMEM, or whatever the denoiser / noise source
 * returned (its message kept, prefixed with the sampler name). After an error
 * other than SD_ERR_INVALID, x holds the partly integrated state. */
sd_status sd_sampler_run(const sd_sampler *s, const sd_denoiser *model,
                         const float *sigmas, int n_sigmas, sd_tensor *x,
                         const sd_sampler_params *params, sd_error *err);

/* The same for every sampler, including those that change x's size
 * (SD_SAMPLER_RESIZES; sd_sampler_run refuses them): *x (F32 [B, C, H, W]
 * for those) is integrated in place or, when the result has another shape,
 * replaced by a new tensor (the caller's reference to the old one
 * released; *x is the caller's either way). The denoiser then sees x at
 * each step's size. */
sd_status sd_sampler_run_resizing(const sd_sampler *s, const sd_denoiser *model,
                                  const float *sigmas, int n_sigmas, sd_tensor **x,
                                  const sd_sampler_params *params, sd_error *err);

#endif
