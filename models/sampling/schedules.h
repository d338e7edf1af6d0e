/* schedules.h - ComfyUI's sigma schedulers and KSampler's step/denoise rules.
 *
 * Every scheduler of comfy.samplers.SCHEDULER_HANDLERS, by its exact name:
 *   simple, sgm_uniform, karras, exponential, ddim_uniform, beta, normal,
 *   linear_quadratic, kl_optimal
 * computed with ComfyUI's float32/float64 choices (see docs/sampling.md,
 * "Schedules"). All schedules are descending and end with 0.0.
 *
 * Lengths: usually steps + 1, but not always -- ddim_uniform can return more
 * (steps=30 gives 32 values), beta fewer (duplicate timesteps are dropped).
 * Callers size the output with sd_schedule_capacity(steps) and read the true
 * length from *n_out.
 */
#ifndef SD_SCHEDULES_H
#define SD_SCHEDULES_H

#include "core/error.h"
#include "models/sampling/model_sampling.h"

/* NULL-terminated list of scheduler names, in ComfyUI's widget order. */
const char *const *sd_schedule_names(void);
/* 1 when `name` is one of sd_schedule_names(). */
int sd_schedule_known(const char *name);

/* Number of floats sd_schedule_sigmas may write for `steps` (>= steps + 1). */
int sd_schedule_capacity(int steps);

/* comfy.samplers.calculate_sigmas(model_sampling, scheduler, steps).
 * Writes *n_out values to out (capacity sd_schedule_capacity(steps)).
 * Errors: unknown scheduler or steps < 1 -> SD_ERR_INVALID (message names the
 * scheduler and lists the valid ones). kl_optimal with steps == 1 gives
 * [NaN, 0] exactly as ComfyUI does (it divides by steps - 1). */
sd_status sd_schedule_sigmas(const sd_model_sampling *ms, const char *scheduler,
                             int steps, float *out, int *n_out, sd_error *err);

/* 1 for the samplers ComfyUI builds steps+1 sigmas for and then drops the
 * penultimate one (KSampler.DISCARD_PENULTIMATE_SIGMA_SAMPLERS: dpm_2,
 * dpm_2_ancestral, uni_pc, uni_pc_bh2). */
int sd_sampler_discards_penultimate(const char *sampler);

/* KSampler node sigmas (KSampler.set_steps + calculate_sigmas):
 *   denoise > 0.9999 -> the full schedule for `steps`;
 *   denoise <= 0     -> empty (*n_out = 0; KSampler returns the latent as is);
 *   else             -> schedule for int(steps / denoise) steps, last steps+1.
 * The discard-penultimate rule for `sampler` is applied before the slice.
 * `sampler` may be NULL (no discard). *out is malloc'd (caller frees; NULL
 * when *n_out == 0). */
sd_status sd_ksampler_sigmas(const sd_model_sampling *ms, const char *scheduler,
                             const char *sampler, int steps, double denoise,
                             float **out, int *n_out, sd_error *err);

/* BasicScheduler node (comfy_extras): like sd_ksampler_sigmas without the
 * sampler rule, with its own threshold: denoise < 1.0 -> int(steps/denoise)
 * steps, keep the last steps+1; denoise <= 0 -> empty. *out malloc'd. */
sd_status sd_basic_scheduler_sigmas(const sd_model_sampling *ms, const char *scheduler,
                                    int steps, double denoise, float **out,
                                    int *n_out, sd_error *err);

/* KSampler.sample's start/last step rules (KSamplerAdvanced: start_at_step,
 * end_at_step, force_full_denoise = return_with_leftover_noise == "disable"),
 * applied to sigmas[0..n) in place. A negative step means "not given".
 *   1. last_step given and < n-1: keep sigmas[0..last_step]; when
 *      force_full_denoise the new last sigma becomes 0.
 *   2. start_step given: if < (length now) - 1, drop the first start_step;
 *      otherwise nothing is sampled and ComfyUI returns the input latent
 *      unchanged (zeros when there is none): *skip = 1.
 * On return the schedule to use is sigmas[*first .. *first + *n_out). */
void sd_sigmas_step_range(float *sigmas, int n, int start_step, int last_step,
                          int force_full_denoise, int *first, int *n_out, int *skip);

/* scipy.stats.beta.ppf(p, a, b): inverse of the regularized incomplete beta
 * function, in double (exposed for the beta scheduler and its tests). */
double sd_beta_ppf(double p, double a, double b);
/* Regularized incomplete beta I_x(a, b). */
double sd_beta_cdf(double x, double a, double b);

/* ---- the schedules of ComfyUI's custom-sampling nodes ----------------------------
 * Each writes into out (room for n + 1 / steps + 1 floats) and returns the
 * number of values, descending and ending with 0. */

/* k_diffusion get_sigmas_karras(n, sigma_min, sigma_max, rho) (KarrasScheduler):
 * float32 ramp = linspace(0, 1, n), roots in double used as float32 scalars,
 * (max^(1/rho) + ramp*(min^(1/rho) - max^(1/rho)))^rho; n + 1 values. */
int sd_sigmas_karras(int n, double sigma_min, double sigma_max, double rho, float *out);
/* get_sigmas_exponential: exp(float32 linspace(log max, log min, n)); n + 1 values. */
int sd_sigmas_exponential(int n, double sigma_min, double sigma_max, float *out);
/* get_sigmas_polyexponential: exp(linspace(1, 0, n)^rho * (log max - log min)
 * + log min) in float32; n + 1 values. */
int sd_sigmas_polyexponential(int n, double sigma_min, double sigma_max, double rho,
                              float *out);
/* get_sigmas_laplace (LaplaceScheduler): x = linspace(0, 1, n),
 * clamp(exp(mu - beta * sign(0.5 - x) * log(1 - 2|0.5 - x| + 1e-5)),
 * sigma_min, sigma_max) in float32; n values, NO trailing 0 (as ComfyUI). */
int sd_sigmas_laplace(int n, double sigma_min, double sigma_max, double mu, double beta,
                      float *out);
/* get_sigmas_vp (VPScheduler): t = linspace(1, eps_s, n),
 * sqrt(expm1(beta_d * t^2 / 2 + beta_min * t)) in float32, then 0; n + 1
 * values. expm1 is libm's (correctly rounded via double), torch's is Sleef's:
 * a value may differ by 1 ulp. */
int sd_sigmas_vp(int n, double beta_d, double beta_min, double eps_s, float *out);
/* torch.linspace(start, end, n) in float32 as an AVX2 CPU build computes it. */
void sd_linspace_f32(float start, float end, int n, float *out);
/* comfy.samplers.beta_scheduler(ms, steps, alpha, beta) (the "beta" scheduler
 * is alpha = beta = 0.6). At most steps + 1 values (duplicate timesteps are
 * dropped); -1 when the beta quantile is undefined (alpha or beta <= 0). */
int sd_sigmas_beta(const sd_model_sampling *ms, int steps, double alpha, double beta,
                   float *out);
/* SDTurboScheduler: sigma(t) for t = 999, 899, ..., 99 starting at index
 * 10 - int(10 * denoise), at most `steps` of them, then 0 (at most 11 values). */
int sd_sigmas_sd_turbo(const sd_model_sampling *ms, int steps, double denoise, float *out);
/* AlignYourStepsScheduler: the model type's 11-value table ("SD1", "SDXL",
 * "SVD"; NULL otherwise), log-linearly interpolated (numpy.interp in double)
 * to steps + 1 values when steps != 10; denoise < 1 keeps the last
 * round(steps * denoise) + 1; the last value becomes 0; float32.
 * Returns the count (0 for denoise <= 0), -1 for an unknown type or steps < 1,
 * -2 when out of memory. */
const double *sd_ays_table(const char *model_type);
int sd_sigmas_ays(const char *model_type, int steps, double denoise, float *out);
/* GITSScheduler: the table set of round(coeff, 2) (0.80 ... 1.50 by 0.05;
 * sd_gits_coeff_known says whether there is one); steps <= 20 take that
 * step count's row as it is, more steps the 20-step row log-linearly
 * interpolated to steps + 1 values; then as AYS (denoise tail, last 0,
 * float32). At most steps + 1 values; 0 for denoise <= 0, -1 for no table or
 * steps < 2, -2 when out of memory. */
int sd_gits_coeff_known(double coeff);
int sd_sigmas_gits(double coeff, int steps, double denoise, float *out);
/* OptimalStepsScheduler: the model type's table ("FLUX" 11 values, "Wan" 21,
 * "Chroma" 41), interpolated as AYS unless steps + 1 is its length; then as
 * AYS. Returns as sd_sigmas_gits (-1: unknown type or steps < 1). */
int sd_optimal_steps_known(const char *model_type);
int sd_sigmas_optimal_steps(const char *model_type, int steps, double denoise, float *out);

#endif
