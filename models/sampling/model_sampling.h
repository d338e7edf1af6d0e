/* model_sampling.h - ComfyUI's model sampling objects (comfy/model_sampling.py)
 * in C: the sigma table a model is sampled on and how its output is read.
 *
 * Three schedules ("sampling bases"), told apart by sd_ms_kind:
 *
 * ModelSamplingDiscrete (SD1.x / SD2.x / SDXL): the discrete 1000-step DDPM
 * schedule seen as a Karras-style sigma parameterization, with ComfyUI's
 * exact float64/float32 choices:
 *   betas          = linspace(sqrt(0.00085), sqrt(0.012), 1000, float64)^2
 *                    (ComfyUI calls it "linear", diffusers "scaled_linear")
 *   alphas_cumprod = cumprod(1 - betas)                    (float64)
 *   sigmas         = float32(sqrt((1 - ac) / ac))
 *   log_sigmas     = float32(log(float64 sigmas))          (not log of float32)
 *   sigma_min = sigmas[0], sigma_max = sigmas[999].
 *
 * ModelSamplingDiscreteFlow (SD3, Flux schnell, AuraFlow): a rectified-flow
 * table of `timesteps` (1000) float32 sigmas, t_i = float32((i + 1) / 1000)
 * * multiplier, sigma(t) = time_snr_shift(shift, t / multiplier) where
 * time_snr_shift(a, t) = t for a == 1, else a*t / (1 + (a - 1)*t) (float32
 * tensor ops, the Python scalars rounded to float); timestep(sigma) =
 * sigma * multiplier. Flux schnell: shift 1, multiplier 1; SD3: shift 3,
 * multiplier 1000.
 *
 * ModelSamplingFlux (Flux dev): 10000 float32 sigmas flux_time_shift(mu, 1,
 * t) = e^mu / (e^mu + (1/t - 1)) at t_i = float32((i + 1) / 10000), torch's
 * op order (1/t - 1, then e^mu added as a float32 scalar, then the reciprocal
 * times e^mu); timestep(sigma) = sigma. mu ("shift") is 1.15 by default, or
 * what the ModelSamplingFlux node derives from the resolution
 * (sd_ms_flux_shift).
 *
 * The continuous schedules (ModelSamplingContinuousEDM / ContinuousV /
 * CosmosRFlow, set only by the ModelSamplingContinuousEDM / V nodes): 1000
 * float32 sigmas exp(linspace(log sigma_min, log sigma_max, 1000)) (torch's
 * float32 linspace, then its exp; log_sigmas = float32 log of those);
 * timestep(sigma) = 0.25 log sigma (EDM), atan(sigma) / pi * 2 (V),
 * sigma / (sigma + 1) (Cosmos); sigma(t) the inverses (Cosmos: sigma_max
 * from t >= sigma_max / (sigma_max + 1) on); percent_to_sigma log-linear
 * between sigma_min and sigma_max in double.
 *
 * Plus the prediction-type specific parts ComfyUI's EPS / V_PREDICTION /
 * CONST classes add: calculate_input, calculate_denoised, noise_scaling and
 * inverse_noise_scaling, all in float32 with torch's operation order (each
 * torch op rounds; nothing fused). The flow schedules always come with CONST.
 *
 * The struct is plain data (about 100 KiB: keep it off small stacks);
 * initialise it in place, no free.
 */
#ifndef SD_MODEL_SAMPLING_H
#define SD_MODEL_SAMPLING_H

#include <stddef.h>
#include <stdint.h>

#define SD_MS_TIMESTEPS 1000
/* The longest sigma table (ModelSamplingFlux's 10000). */
#define SD_MS_MAX_SIGMAS 10000

/* Latent scale factors (comfy.latent_formats): the sampler works on
 * vae_latent * scale; the KSampler output LATENT is sample / scale. */
#define SD_LATENT_SCALE_SD1 0.18215f
#define SD_LATENT_SCALE_SDXL 0.13025f

typedef enum sd_prediction {
    SD_PRED_EPS = 0, /* model predicts the noise (SD1.x, SDXL) */
    SD_PRED_V = 1,   /* v-prediction (SD2.x 768-v) */
    /* The other ModelSamplingDiscrete "sampling" kinds (comfy_extras
     * nodes_model_advanced.py), only ever set by that node: */
    SD_PRED_LCM = 2,       /* LCM boundary-condition scalings on a 50-step
                            * distilled schedule (ModelSamplingDiscreteDistilled) */
    SD_PRED_X0 = 3,        /* the model output is the denoised latent */
    SD_PRED_IMG_TO_IMG = 4, /* X0 whose input is not scaled (calculate_input = identity) */
    /* Flow matching (comfy.model_sampling.CONST): the model predicts the
     * velocity noise - x0; set by the flow schedules' init functions. */
    SD_PRED_CONST = 5,
    /* ModelSamplingContinuousEDM's "edm" (comfy.model_sampling.EDM): v's
     * denoised with the model term added, not subtracted. */
    SD_PRED_EDM = 6,
    /* Its "cosmos_rflow" (COSMOS_RFLOW): with s = sigma / (sigma + 1), input
     * x * (1 - s), denoised x * (1 - s) - out * s, noise_scaling
     * noise * sigma + latent (no max_denoise factor). */
    SD_PRED_COSMOS_RFLOW = 7
} sd_prediction;

/* Which ComfyUI ModelSampling class the table is. */
typedef enum sd_ms_kind {
    SD_MS_DISCRETE = 0, /* ModelSamplingDiscrete (+ Distilled for LCM) */
    SD_MS_FLOW = 1,     /* ModelSamplingDiscreteFlow */
    SD_MS_FLUX = 2,     /* ModelSamplingFlux */
    SD_MS_CONT_EDM = 3, /* ModelSamplingContinuousEDM */
    SD_MS_CONT_V = 4,   /* ModelSamplingContinuousV */
    SD_MS_COSMOS = 5    /* ModelSamplingCosmosRFlow */
} sd_ms_kind;

typedef struct sd_model_sampling {
    sd_ms_kind kind;
    sd_prediction prediction;
    int zsnr;                            /* sigmas rescaled to zero terminal SNR */
    float sigma_data;                    /* 1.0 for the discrete models */
    double shift;                        /* flow kinds: time_snr_shift's alpha / Flux's mu */
    double multiplier;                   /* SD_MS_FLOW: timestep = sigma * multiplier */
    /* SD_MS_DISCRETE only (zero for the flow kinds): */
    double betas[SD_MS_TIMESTEPS];       /* float64, as ComfyUI builds them */
    double alphas_cumprod[SD_MS_TIMESTEPS]; /* of the betas (zsnr leaves them) */
    /* n sigmas: SD_MS_TIMESTEPS, or 50 on the distilled (LCM) schedule,
     * where sigmas[i] is the full schedule's sigmas[999 - (49 - i) * 20] and
     * a sigma's timestep is index * skip + skip - 1 (skip = 1000 / 50);
     * the flow kinds: their `timesteps` (1000 / 10000), skip 1. */
    int n, skip;
    float sigmas[SD_MS_MAX_SIGMAS];      /* ascending: sigmas[0] is the smallest */
    float log_sigmas[SD_MS_MAX_SIGMAS];  /* SD_MS_DISCRETE only (ComfyUI's flow
                                          * classes keep none; zero there) */
    float sigma_min, sigma_max;          /* sigmas[0], sigmas[n - 1] */
} sd_model_sampling;

/* SD1.x / SDXL defaults: betas 0.00085 -> 0.012 ("linear" in ComfyUI). */
void sd_model_sampling_init(sd_model_sampling *ms, sd_prediction prediction);
/* Same with other linear_start / linear_end (sqrt-spaced betas). */
void sd_model_sampling_init_linear(sd_model_sampling *ms, sd_prediction prediction,
                                   double linear_start, double linear_end);
/* ModelSamplingDiscrete's patch: the default betas, `prediction` (SD_PRED_LCM
 * takes the distilled 50-sigma schedule), and with zsnr the float64 sigmas
 * rescaled as comfy.model_sampling.rescale_zero_terminal_snr_sigmas does
 * (alphas_cumprod recomputed as 1 / (sigma^2 + 1), sqrt shifted to end at 0
 * and scaled back to its first value, the last alpha set to
 * 4.8973451890853435e-08) before they are rounded to float32. */
void sd_model_sampling_init_ex(sd_model_sampling *ms, sd_prediction prediction, int zsnr);

/* A continuous schedule (kind SD_MS_CONT_EDM, SD_MS_CONT_V or SD_MS_COSMOS)
 * with its prediction type, as ComfyUI's ModelSamplingAdvanced of the
 * ModelSamplingContinuousEDM / V nodes after set_parameters(sigma_min,
 * sigma_max, sigma_data). */
void sd_model_sampling_init_continuous(sd_model_sampling *ms, sd_ms_kind kind, sd_prediction prediction,
                                       double sigma_min, double sigma_max, double sigma_data);

/* ModelSamplingDiscreteFlow + CONST with `shift` and `multiplier` (a
 * 1000-entry table): Flux schnell is (1, 1), SD3 (3, 1000), AuraFlow (1.73, 1). */
void sd_model_sampling_init_flow(sd_model_sampling *ms, double shift, double multiplier);
/* ModelSamplingFlux + CONST with mu = `shift` (a 10000-entry table): Flux dev
 * without the ModelSamplingFlux node is shift 1.15, whatever the resolution
 * (its sampling_settings are empty, so ComfyUI's default applies). */
void sd_model_sampling_init_flux(sd_model_sampling *ms, double shift);
/* The family defaults of a Flux MODEL without a ModelSamplingFlux node
 * (comfy/supported_models.py): Flux dev (guidance_embed) is ModelSamplingFlux
 * at ComfyUI's default shift 1.15 at every resolution; Flux schnell is
 * ModelSamplingDiscreteFlow with shift 1, multiplier 1. */
#define SD_MS_FLUX_DEFAULT_SHIFT 1.15
void sd_model_sampling_init_flux_dev(sd_model_sampling *ms);
void sd_model_sampling_init_flux_schnell(sd_model_sampling *ms);
/* A Z-Image MODEL without a model-sampling node (supported_models.ZImage's
 * sampling_settings): ModelSamplingDiscreteFlow, shift 3, multiplier 1. */
#define SD_MS_ZIMAGE_DEFAULT_SHIFT 3.0
void sd_model_sampling_init_zimage(sd_model_sampling *ms);
/* The family default of an SD3 / SD3.5 MODEL without a ModelSamplingSD3
 * node (comfy/supported_models.py SD3 sampling_settings): ModelSamplingDiscreteFlow
 * with shift 3, multiplier 1000. */
#define SD_MS_SD3_DEFAULT_SHIFT 3.0
void sd_model_sampling_init_sd3(sd_model_sampling *ms);
/* The ModelSamplingFlux node's shift for a picture of width x height pixels:
 * a line through (256, base_shift) and (4096, max_shift) evaluated at
 * width * height / 256 (the number of 2x2 latent patches), in double as
 * Python computes it: mm = (max - base) / 3840, b = base - mm * 256,
 * shift = (width * height / 256) * mm + b. */
double sd_ms_flux_shift(double max_shift, double base_shift, int width, int height);

/* "eps", "v_prediction", "lcm", "x0", "img_to_img" (ModelSamplingDiscrete's
 * sampling names) <-> sd_prediction; SD_PRED_CONST, SD_PRED_EDM and
 * SD_PRED_COSMOS_RFLOW are named "const", "edm" and "cosmos_rflow" but not
 * parsed (ModelSamplingDiscrete has no such choice). Parse returns -1 for an
 * unknown name. */
const char *sd_prediction_name(sd_prediction p);
int sd_prediction_parse(const char *name);

/* ComfyUI timestep(sigma), the model's time input (BaseModel.apply_model
 * feeds t.float()). Discrete: index of the nearest log_sigma to log(sigma)
 * (float32 math with torch's log, first index on ties -- and exact float
 * ties are common at half-integer timesteps, so the log must be torch's); on
 * the distilled schedule index * skip + skip - 1. Flow: sigma * multiplier
 * (float32). Flux: sigma itself. sd_ms_timestep_index is the plain index
 * into sigmas[] of the discrete match (for the flow kinds, which have no
 * index, the first table entry nearest to sigma). */
float sd_ms_timestep(const sd_model_sampling *ms, float sigma);
int sd_ms_timestep_index(const sd_model_sampling *ms, float sigma);

/* ComfyUI sigma(t). Discrete: t clamped to [0, n - 1] (distilled: (t -
 * (skip - 1)) / skip first), log-linear interpolation between
 * log_sigmas[floor t] and log_sigmas[ceil t], exp, float32. Flow:
 * time_snr_shift(shift, t / multiplier); Flux: flux_time_shift(shift, 1, t);
 * both float32 as the table is built (no clamp, as in ComfyUI). */
float sd_ms_sigma(const sd_model_sampling *ms, float t);

/* ComfyUI percent_to_sigma. Discrete: p <= 0 -> 999999999.9, p >= 1 -> 0,
 * else sigma((1 - p) * 999) (the product in double, then float32 as
 * torch.tensor). Flow and Flux: p <= 0 -> 1, p >= 1 -> 0, else the shift
 * function at t = 1 - p in double (Python floats, no table). */
double sd_ms_percent_to_sigma(const sd_model_sampling *ms, double percent);

/* KSAMPLER.max_denoise: whether the first sigma is (close to) sigma_max, in
 * which case the start latent is noise * sqrt(1 + sigma^2) (txt2img). */
int sd_ms_is_max_denoise(const sd_model_sampling *ms, float sigma0);

/* out[i] = x[i] / sqrt(sigma^2 + sigma_data^2)  (the UNet input; img_to_img
 * and const: x unchanged). out may be x. */
void sd_ms_calculate_input(const sd_model_sampling *ms, float sigma,
                           const float *x, float *out, size_t n);

/* Denoised estimate from the model output at `sigma`:
 *   eps, const: x - out * sigma
 *   v:   x * sd^2 / (sigma^2 + sd^2) - out * sigma * sd / sqrt(sigma^2 + sd^2)
 *   edm: the same with + before the model term
 *   cosmos_rflow: x * (1 - s) - out * s, s = sigma / (sigma + 1)
 *   lcm: c_out * (x - out * sigma) + c_skip * x with T = timestep(sigma) * 10,
 *        c_skip = 0.25 / (T^2 + 0.25), c_out = T / sqrt(T^2 + 0.25)
 *   x0, img_to_img: out
 * `denoised` may alias x or model_out. */
void sd_ms_calculate_denoised(const sd_model_sampling *ms, float sigma,
                              const float *model_out, const float *x,
                              float *denoised, size_t n);

/* Start latent: noise * (max_denoise ? sqrt(1 + sigma^2) : sigma) + latent;
 * const: sigma * noise + (1 - sigma) * latent (max_denoise ignored).
 * latent may be NULL (all zeros). out may alias noise or latent. */
void sd_ms_noise_scaling(const sd_model_sampling *ms, float sigma, const float *noise,
                         const float *latent, int max_denoise, float *out, size_t n);

/* The final latent from the sampler's last x at the last sigma: identity
 * for the discrete kinds; const: x / (1 - sigma). out may be x. */
void sd_ms_inverse_noise_scaling(const sd_model_sampling *ms, float sigma,
                                 const float *x, float *out, size_t n);

#endif
