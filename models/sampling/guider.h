/* guider.h - classifier-free guidance as ComfyUI's CFGGuider computes it.
 *
 * The guider turns a per-conditioning model call -- BaseModel.apply_model:
 * (x, sigma, conditioning) -> x0 prediction, with calculate_input /
 * calculate_denoised inside -- into the sd_denoiser a sampler drives
 * (models/sampling/sampler.h), following comfy.samplers.sampling_function:
 *   - conds are [positive, negative] (index 0 and 1);
 *   - cfg == 1.0 (math.isclose) evaluates only the positive cond and returns
 *     it unchanged, unless the sampler needs the unconditional prediction
 *     (CFG++: disable_cfg1_optimization);
 *   - otherwise out = uncond + (cond - uncond) * (float)cfg in float32,
 *     three separately rounded operations, never fused.
 * A KSampler node plugs the UNet in as the model call; tests plug in an
 * analytic function.
 *
 * Ownership: the guider borrows the model callback and its user data; it
 * owns nothing, so it can live on the caller's stack for one sampling run.
 */
#ifndef SD_GUIDER_H
#define SD_GUIDER_H

#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"
#include "models/image/latentops.h"
#include "models/sampling/sampler.h"

/* SD_COND_EMPTY: a third conditioning list (DualCFGGuider's middle, the
 * Perp-Neg empty prompt) */
enum { SD_COND_POSITIVE = 0, SD_COND_NEGATIVE = 1, SD_COND_EMPTY = 2 };

/* Evaluates the model on x at `sigma` for each of the n_conds conditionings
 * conds[j] (SD_COND_*), writing the x0 prediction for conds[j] into outs[j]
 * (preallocated, x's shape). Getting several conds in one call lets a UNet
 * batch them as ComfyUI's calc_cond_batch does. */
typedef sd_status (*sd_guider_model_fn)(void *ud, const sd_tensor *x, float sigma,
                                        const int *conds, int n_conds, sd_tensor **outs,
                                        sd_error *err);

/* ComfyUI's model_options["sampler_cfg_function"] as the one MODEL patch
 * that sets it here does: RescaleCFG (comfy_extras/nodes_model_advanced.py);
 * and its "sampler_pre_cfg_function" list as LatentApplyOperationCFG
 * (comfy_extras/nodes_latent.py) appends to it: before the CFG formula (and
 * before RescaleCFG), each operation in turn replaces the cond prediction by
 * op(cond - uncond) + uncond (uncond = zeros when the cfg1 optimisation
 * skipped it). Zeroed = none, the plain CFG formula. */
#define SD_CFG_MAX_PRE 8
#define SD_CFG_MAX_POST 4
#define SD_CFG_MAX_SKIP 16
/* One post-CFG function (comfy.samplers.cfg_function's
 * sampler_post_cfg_function list) of the kinds that add a guidance term
 * from one more positive prediction p made with the model changed:
 * out = out + (cond - p) * scale (float32, torch's op order), p from the
 * guider's skip_model.
 *   SD_CFG_POST_SLG: SkipLayerGuidanceDiT / SkipLayerGuidanceSD3
 *     (comfy_extras/nodes_slg.py): where sigma_end <= sigma <= sigma_start
 *     (sigma as a double, the sigmas from the MODEL's sampling at the node)
 *     and scale > 0, p with the joint blocks `skip` left out;
 *   SD_CFG_POST_PAG: PerturbedAttentionGuidance (comfy_extras/nodes_pag.py):
 *     where scale != 0, p with the UNet's middle-block self-attention
 *     replaced by its value projection (the model's other patches kept).
 * And the kinds that only recombine the predictions (float32, torch's op
 * order; sums over an item or over channels accumulated in double), with
 * c, u the cond / uncond predictions (u zeros under the cfg 1 shortcut),
 * s the cfg scale, x the sampler's x, out the CFG result so far:
 *   SD_CFG_POST_ZERO_STAR: CFGZeroStar (nodes_cfg.py): per batch item
 *     alpha = sum((x - c)(x - u)) / (sum((x - u)^2) + 1e-8);
 *     out = out + u * (alpha - 1) + s * u * (1 - alpha);
 *   SD_CFG_POST_NORM: CFGNorm, strength = scale: per pixel
 *     r = clamp(|c| / (|out| + 1e-8), 0, 1) over the channels;
 *     out = out * r * strength;
 *   SD_CFG_POST_EPS: Epsilon Scaling (nodes_eps.py), factor = scale:
 *     out = x - (x - out) / factor;
 *   SD_CFG_POST_MAHIRO: Mahiro (nodes_mahiro.py): leap = c * s,
 *     m = (leap + out) / 2, sim = the mean over items and pixels of the
 *     channel cosine similarity of sqrt|u s| sign(u s) and sqrt|m| sign(m),
 *     k = 2 (sim + 1); out = (k out + (4 - k) leap) / 4.
 * And SD_CFG_POST_SAG: SelfAttentionGuidance (comfy_extras/nodes_sag.py),
 *   scale and blur_sigma: where the latent is larger than 4 x 4,
 *   out = out + (degraded - p) * scale, degraded - p what the guider's
 *   skip_model returns for it (nodes: the uncond prediction blurred where
 *   the recorded middle-block attention of the uncond pass is strong,
 *   sd_sag_degrade, minus the uncond prediction at degraded + x - uncond).
 *   It needs the uncond prediction at cfg 1 too (ComfyUI's
 *   disable_cfg1_optimization: sd_cfg_hook_needs_uncond). */
enum {
    SD_CFG_POST_SLG = 0,
    SD_CFG_POST_PAG = 1,
    SD_CFG_POST_ZERO_STAR = 2,
    SD_CFG_POST_NORM = 3,
    SD_CFG_POST_EPS = 4,
    SD_CFG_POST_MAHIRO = 5,
    SD_CFG_POST_SAG = 6
};
typedef struct sd_cfg_slg {
    int kind; /* SD_CFG_POST_* */
    double scale, sigma_start, sigma_end;
    double blur_sigma; /* SD_CFG_POST_SAG */
    int n_skip;
    int skip[SD_CFG_MAX_SKIP];
} sd_cfg_slg;

/* Kinds of pre-CFG function (sd_cfg_hook.pre_kind[i]):
 *   SD_CFG_PRE_OP: the latent operation pre[i] (above);
 *   SD_CFG_PRE_APG: APG (comfy_extras/nodes_apg.py), pre_param[i] = {eta,
 *     norm_threshold, momentum}: per batch item, g = cond - uncond (with
 *     momentum != 0 the running average momentum * avg + g, reset when an
 *     evaluation's sigma is above the previous one's; kept in state[i], which
 *     lives as long as the patched MODEL: see sd_cfg_state), scaled by
 *     min(1, threshold / |g|) when threshold > 0, split into its part along
 *     cond and the rest; cond = (uncond + rest + eta * part) +
 *     (cond - uncond) / cfg;
 *   SD_CFG_PRE_TCFG: TCFG (nodes_tcfg.py), only with an uncond prediction
 *     (not under the cfg 1 shortcut nor in BasicGuider): per item, with
 *     c = x - cond, u = x - uncond flattened, v1 the top right singular
 *     vector of the 2 x N matrix [u; c], uncond = x - (u . v1) v1 (in
 *     double: the 2 x 2 Gram matrix's top eigenvector). */
enum { SD_CFG_PRE_OP = 0, SD_CFG_PRE_APG = 1, SD_CFG_PRE_TCFG = 2, SD_CFG_PRE_FRESCA = 3 };
/*   SD_CFG_PRE_FRESCA: FreSca (nodes_fresca.py), pre_param[i] = {scale_low,
 *     scale_high, freq_cutoff}, only with an uncond prediction: cond =
 *     sd_fresca_filter(cond - uncond) + uncond (models/sampling/fresca.h). */

/* The MODEL's sampler_cfg_function other than RescaleCFG (sd_cfg_hook.fn;
 * one per MODEL, the last one set wins, RescaleCFG's included), with c, u
 * the cond / uncond predictions (u zeros under the cfg 1 shortcut), s the
 * cfg scale, x the sampler's x (float32, torch's op order; norms and dot
 * products accumulated in double):
 *   SD_CFG_FN_RENORM: RenormCFG (comfy_extras/nodes_lumina2.py), fn_param
 *     = {cfg_trunc, renorm_cfg}: where sigma < cfg_trunc, r = u + s (c - u),
 *     and with renorm_cfg > 0 scaled by max / |r| when |r| >= max =
 *     |c| renorm_cfg (norms over the item; a batch of one: ComfyUI's
 *     tensor truth test fails on more); elsewhere r = c;
 *   SD_CFG_FN_PERP_NEG: PerpNeg (nodes_perpneg.py), fn_param = {neg_scale}:
 *     with e the prediction of the empty conditioning (SD_COND_EMPTY, one
 *     more model call), p = c - e, n = u - e over the whole batch,
 *     r = e + s (p - (n - (n . p / |p|^2) p) neg_scale) (sd_cfg_perp_neg);
 * then out = x - (x - r). */
enum { SD_CFG_FN_NONE = 0, SD_CFG_FN_RENORM = 1, SD_CFG_FN_PERP_NEG = 2 };

typedef struct sd_cfg_hook {
    int rescale;       /* RescaleCFG applied */
    double multiplier; /* its multiplier */
    int fn;            /* SD_CFG_FN_* (not with rescale) */
    double fn_param[2];
    int n_pre;                        /* pre-CFG operations, applied in order */
    sd_latent_op pre[SD_CFG_MAX_PRE];
    int pre_kind[SD_CFG_MAX_PRE];     /* SD_CFG_PRE_* (0: the latent op) */
    double pre_param[SD_CFG_MAX_PRE][3];
    /* what pre-CFG function i keeps between evaluations (APG's running
     * average; NULL for the stateless kinds). Borrowed: whoever owns the
     * hook's source holds a reference (a MODEL value, nodes/loaders) and
     * copies of the hook share the state, as ComfyUI's clones share the
     * function's closure. */
    struct sd_cfg_state *state[SD_CFG_MAX_PRE];
    int n_post;                       /* post-CFG functions, applied in order */
    sd_cfg_slg post[SD_CFG_MAX_POST];
} sd_cfg_hook;

/* The model call a post-CFG function makes: the positive prediction at x,
 * sigma with the model changed as `post` says (its kind: the joint blocks
 * post->skip[0..n_skip) left out, or the perturbed attention), into out
 * (x's shape); for SD_CFG_POST_SAG the term degraded - p (above), made
 * from the uncond prediction `uncond` (x's shape). */
typedef sd_status (*sd_guider_skip_fn)(void *ud, const sd_tensor *x, float sigma, const sd_cfg_slg *post,
                                       const float *uncond, sd_tensor *out, sd_error *err);

/* The hook's post-CFG functions on one evaluation (comfy.samplers.cfg_function's
 * sampler_post_cfg_function list), in order: cond, uncond are the positive
 * and negative predictions after the pre-CFG operations (uncond zeros
 * under the cfg 1 shortcut), cfg the scale, out the CFG result, replaced in
 * place; x the sampler's x [B, C, ...]. scratch: a tensor of x's shape for
 * an extra prediction. SD_OK at once when no function applies at sigma. */
sd_status sd_cfg_post(const sd_cfg_hook *hook, sd_guider_skip_fn skip_model, void *skip_ud,
                      const sd_tensor *x, float sigma, const float *cond, const float *uncond, double cfg,
                      sd_tensor *out, sd_tensor *scratch, sd_error *err);
/* 1 when a post-CFG function of hook applies at sigma. */
int sd_cfg_post_active(const sd_cfg_hook *hook, float sigma);
/* 1 when a function of hook needs the uncond prediction at cfg 1 as well
 * (ComfyUI's disable_cfg1_optimization: SelfAttentionGuidance). */
int sd_cfg_hook_needs_uncond(const sd_cfg_hook *hook);

/* The hook's pre-CFG operations on one evaluation: cond, uncond are the x0
 * predictions, [B, C, H, W]; cond is replaced in place. SD_OK at once
 * without operations; an operation's error otherwise (the latent too small
 * for a sharpen radius, out of memory). Latent operations only: another
 * kind is SD_ERR_INVALID here (sd_cfg_pre_ex runs them). */
sd_status sd_cfg_pre(const sd_cfg_hook *hook, sd_tensor *cond, const sd_tensor *uncond, sd_error *err);

/* What one pre-CFG function keeps between its evaluations: APG's running
 * average and the sigma of its last evaluation (nodes_apg.py's closure
 * variables running_avg and prev_sigma). ComfyUI keeps them in the closure
 * of the function the APG node sets on its MODEL clone; every later clone
 * shares that function, so the state outlives a sampling run: it carries
 * into the next run of the same MODEL (a second KSamplerAdvanced continuing
 * the schedule, a later prompt reusing the cached MODEL) and resets only
 * when an evaluation's sigma is above the previous one's (a new schedule
 * from the top). Here it is a reference-counted object held by every MODEL
 * value made from the patched one; a mutex makes concurrent updates safe
 * (their order, as in ComfyUI, is then the order the runs reach it). */
typedef struct sd_cfg_state sd_cfg_state;
/* A fresh state (no running average, no previous sigma), one reference for
 * the caller; NULL when out of memory. */
sd_cfg_state *sd_cfg_state_new(void);
/* Another reference (st may be NULL); returns st. */
sd_cfg_state *sd_cfg_state_ref(sd_cfg_state *st);
/* Drops a reference; the last one frees the state. NULL is a no-op. */
void sd_cfg_state_unref(sd_cfg_state *st);

/* Every kind of pre-CFG function in order (sampling_function's
 * sampler_pre_cfg_function list): x the sampler's x, cfg the scale,
 * have_uncond 0 when the uncond prediction is the zeros of the cfg 1
 * shortcut or of BasicGuider (ComfyUI's None conds entry); cond and uncond
 * may be replaced in place. APG with momentum != 0 reads and updates
 * hook->state[i] (SD_ERR_INVALID when it is NULL). */
sd_status sd_cfg_pre_ex(const sd_cfg_hook *hook, const sd_tensor *x, float sigma, double cfg,
                        int have_uncond, sd_tensor *cond, sd_tensor *uncond, sd_error *err);

/* comfy.samplers.cfg_function for one batch: cond, uncond are x0
 * predictions, x the sampler's x (the model input before calculate_input),
 * all [batch, per] floats. Without a hook: sd_cfg_combine. With RescaleCFG,
 * in float32 with torch's op order, s = sigma, r = sqrt(s*s + 1):
 *   xs = x / (s*s + 1); c = (xs - (x - (x - cond))) * r / s, u likewise
 *   x_cfg = u + scale * (c - u)
 *   x_final = m * x_cfg * (std(c) / std(x_cfg)) + (1 - m) * x_cfg
 *             (std unbiased over each batch item, accumulated in double)
 *   out = x - (x - (xs - x_final * s / r))
 * out may alias cond or uncond. */
void sd_cfg_function(const sd_cfg_hook *hook, const float *cond, const float *uncond, double scale,
                     const float *x, float sigma, int64_t batch, int64_t per, float *out);

typedef struct sd_guider {
    sd_guider_model_fn model;
    void *model_ud;
    double cfg;
    /* the MODEL's cfg function patch; set after sd_guider_init. With one,
     * cfg 1 still calls it with a zero uncond prediction, as ComfyUI's
     * cfg1 optimisation only drops the uncond model call. */
    sd_cfg_hook hook;
    /* the post-CFG functions' model call (hook.n_post > 0); set after
     * sd_guider_init */
    sd_guider_skip_fn skip_model;
    void *skip_ud;
    /* Counters for observability and tests: sampler calls (guider
     * evaluations) and model evaluations (one per conditioning). */
    int64_t guider_calls;
    int64_t model_calls;
    /* scratch for the cond/uncond predictions, allocated on first use */
    sd_tensor *cond_buf, *uncond_buf, *post_buf, *empty_buf;
} sd_guider;

/* Initialises g (counters zero, no scratch yet). */
void sd_guider_init(sd_guider *g, sd_guider_model_fn model, void *model_ud, double cfg);
/* Frees the scratch tensors (the guider itself belongs to the caller). */
void sd_guider_release(sd_guider *g);

/* The sd_denoiser view of g (valid while g is). */
sd_denoiser sd_guider_denoiser(sd_guider *g);

/* The hook's cfg function (RescaleCFG, sd_cfg_function; or hook->fn) for
 * one evaluation: cond, uncond, x as for sd_cfg_function, empty the
 * SD_COND_EMPTY prediction (SD_CFG_FN_PERP_NEG only, else NULL), out may
 * alias cond. SD_ERR_UNSUPPORTED for RenormCFG on a batch of more than one
 * item whose norm test ComfyUI cannot take. */
sd_status sd_cfg_apply(const sd_cfg_hook *hook, const float *cond, const float *uncond, const float *empty,
                       double scale, const float *x, float sigma, int64_t batch, int64_t per, float *out,
                       sd_error *err);

/* perp_neg(x, pos, neg, empty, neg_scale, cfg) of nodes_perpneg.py on n
 * floats (the whole batch): out = e + s (p - perp * neg_scale) (above);
 * out may alias any input. */
void sd_cfg_perp_neg(const float *cond, const float *uncond, const float *empty, double neg_scale, double scale,
                     int64_t n, float *out);

/* math.isclose(cfg, 1.0): relative tolerance 1e-9. */
int sd_cfg_is_one(double cfg);

/* out[i] = uncond[i] + (cond[i] - uncond[i]) * (float)scale, float32 with
 * each operation rounded (comfy.samplers.cfg_function). out may alias. */
void sd_cfg_combine(const float *cond, const float *uncond, double scale, float *out,
                    int64_t n);

/* ---- inpainting (comfy.samplers.KSamplerX0Inpaint) ------------------------
 * Wraps a denoiser for a LATENT with a noise_mask: before each evaluation the
 * kept region (mask 0) of x is replaced by the re-noised latent,
 *   x' = x * m + (noise * sigma + latent) * (1 - m)   (flow: the re-noised
 *   latent is sigma * noise + (1 - sigma) * latent),
 * and after it the prediction is pinned to the latent there,
 *   out = out * m + latent * (1 - m)       (float32, torch's op order).
 * The uncond prediction CFG++ samplers get is not blended, as in ComfyUI.
 * latent: the latent image in model space (after process_latent_in);
 * noise: the start noise (prepare_noise(seed)); for the "ddim" sampler
 * ComfyUI uses fresh noise instead: sd_noise_prepare(seed + 1, shape);
 * mask: the denoise mask already resized and broadcast to x's shape
 * (1 = regenerate). All three are borrowed and must hold n floats. */
typedef struct sd_inpaint {
    sd_denoiser inner;
    const float *latent, *noise, *mask;
    int64_t n;
    /* a flow (CONST) model's scale_latent_inpaint: the kept region is
     * re-noised as sigma * noise + (1 - sigma) * latent. 0 after
     * sd_inpaint_init; the caller sets it. */
    int flow;
    /* DifferentialDiffusion's denoise_mask_function (0 after
     * sd_inpaint_init): at each evaluation the mask m becomes
     * b = (m >= (t(sigma) - dd_ts_to) / (dd_ts_from - dd_ts_to)), t the
     * model sampling's timestep, and with 0 < dd_strength < 1
     * strength * b + (1 - strength) * m (float32); the caller sets dd_ms,
     * dd_ts_from = t(sigmas[0]), dd_ts_to = t(max(sigma_min, sigmas[-1])). */
    int diff_diff;
    double dd_strength;
    const struct sd_model_sampling *dd_ms;
    float dd_ts_from, dd_ts_to;
    sd_tensor *xbuf; /* scratch for x', allocated on first use */
    sd_tensor *mbuf; /* the mask of this evaluation (diff_diff) */
} sd_inpaint;

void sd_inpaint_init(sd_inpaint *ip, sd_denoiser inner, const float *latent, const float *noise,
                     const float *mask, int64_t n);
void sd_inpaint_release(sd_inpaint *ip); /* frees the scratch */
/* The wrapped denoiser (valid while ip is). SD_ERR_INVALID when x does not
 * have n elements. */
sd_denoiser sd_inpaint_denoiser(sd_inpaint *ip);

/* ---- one KSampler run (CFGGuider.sample + KSAMPLER.sample) ----------------
 * Builds the start latent and runs sampler s on the guided model:
 *   x = noise_scaling(sigmas[0], noise, latent, max_denoise(sigmas[0]))
 *   with a mask, the guider is wrapped in sd_inpaint (re-noising with
 *   `noise`, or for "ddim" with sd_noise_prepare(seed + 1, shape));
 *   x = sampler(x); out = inverse_noise_scaling(sd_sampler_final_sigma, x);
 *   a CONST model runs the samplers' flow branches (params->flow is set).
 * noise: prepare_noise(seed) output, x's shape. latent: the latent image in
 * model space (already multiplied by the latent scale when not all zeros,
 * i.e. process_latent_in), or NULL for zeros. mask: NULL or a denoise mask of
 * x's shape (1 = regenerate). params->percent_to_sigma defaults to ms's.
 * n_sigmas == 0 returns a copy of the latent (zeros when NULL), as ComfyUI.
 * *out receives a new tensor in model space (divide by the latent scale for
 * the LATENT output); the caller unrefs it. */
struct sd_model_sampling;
sd_status sd_guider_sample(sd_guider *g, const struct sd_model_sampling *ms, const sd_sampler *s,
                           const float *sigmas, int n_sigmas, const sd_tensor *noise,
                           const sd_tensor *latent, const sd_tensor *mask,
                           const sd_sampler_params *params, sd_tensor **out, sd_error *err);

#endif
