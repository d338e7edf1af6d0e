/* unet.h - the Stable Diffusion UNet (SD1.x, SD2.x and SDXL), as ComfyUI's
 * openaimodel.UNetModel computes it.
 *
 * The architecture is not given by the caller: sd_unet_detect() reads it from
 * key names and tensor shapes the way ComfyUI's model detection does
 * (model_channels from input_blocks.0.0.weight, channel_mult from res-block
 * widths, transformer depths by counting transformer_blocks.K, context_dim
 * from attn2.to_k, linear vs conv proj_in, adm_in_channels from
 * label_emb.0.0.weight). Three layouts are accepted (ComfyUI's SD15, SD20
 * and SDXL model configs):
 *   SD1  - conv proj_in, no label_emb: a FIXED 8 heads at every level;
 *   SD2  - linear proj_in, no label_emb: 64-channel heads (heads = ch / 64);
 *   SDXL - linear proj_in + label_emb:  64-channel heads (heads = ch / 64).
 * SD2.1 unCLIP's UNet (linear proj_in + a label_emb fed with the noise-
 * augmented image embedding) has the SDXL layout and detects as SD_UNET_SDXL;
 * the checkpoint tells it apart (models/checkpoint/checkpoint.h).
 * Anything else (video UNets, ...) is SD_ERR_UNSUPPORTED with
 * a message saying what was found. Missing or wrongly shaped tensors are
 * reported by full key name (see models/checkpoint/weights.h).
 *
 * Compute goes through kernels/backend.h only, so the model runs on any
 * backend. Ownership: sd_unet_load() returns a model owning its weights
 * (free with sd_unet_free); the safetensors file may be closed afterwards.
 * sd_unet_forward() never takes ownership of its inputs and returns a new
 * tensor owned by the caller.
 */
#ifndef SD_UNET_H
#define SD_UNET_H

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/dmodel/dmodel.h"

#define SD_UNET_MAX_LEVELS 8
#define SD_UNET_MAX_BLOCKS 40 /* input (or output) blocks */

typedef enum sd_unet_kind { SD_UNET_SD1 = 1, SD_UNET_SDXL = 2, SD_UNET_SD2 = 3 } sd_unet_kind;

/* The detected architecture, in ComfyUI's unet_config terms. */
typedef struct sd_unet_config {
    sd_unet_kind kind;
    int in_channels;    /* 4; 9 inpaint; 8 pix2pix */
    int out_channels;
    int model_channels;
    int time_embed_dim; /* 4 * model_channels */
    int num_levels;
    int channel_mult[SD_UNET_MAX_LEVELS];
    int num_res_blocks[SD_UNET_MAX_LEVELS];
    /* Transformer depth after each input res block, in block order (ComfyUI's
     * transformer_depth), and after each output res block in ComfyUI's
     * transformer_depth_output order, which it pops from the end: entry i
     * belongs to output block n_output_blocks - 1 - i. */
    int n_input_res;
    int transformer_depth[SD_UNET_MAX_BLOCKS];
    int n_output_blocks;
    int transformer_depth_output[SD_UNET_MAX_BLOCKS];
    int transformer_depth_middle; /* -1: the middle block is one ResBlock */
    int context_dim;              /* 0 when there is no attention at all */
    int adm_in_channels;          /* 0 when there is no label_emb */
    int use_linear_in_transformer;
    int num_heads;         /* fixed head count, or -1 */
    int num_head_channels; /* fixed head width, or -1 */
} sd_unet_config;

typedef struct sd_unet sd_unet;

/* Key prefix of the UNet inside a single-file checkpoint. */
#define SD_UNET_PREFIX "model.diffusion_model."

/* Detect the architecture from the tensors under `prefix` in f.
 * SD_ERR_NOT_FOUND when there is no UNet under the prefix,
 * SD_ERR_UNSUPPORTED for layouts we do not run, SD_ERR_FORMAT for
 * inconsistent shapes. */
sd_status sd_unet_detect(sd_st_file *f, const char *prefix, sd_unet_config *cfg,
                         sd_error *err);

/* Detect and load. prefix NULL tries SD_UNET_PREFIX, then "" (a bare UNet
 * file). weight_dtype is the dtype weights are kept in on the backend:
 * SD_F32 (what the CPU backend's ops take today), or SD_F16/SD_BF16 to halve
 * memory on a backend whose ops read half-precision weights. */
sd_status sd_unet_load(sd_backend *be, sd_st_file *f, const char *prefix,
                       sd_dtype weight_dtype, sd_unet **out, sd_error *err);
void sd_unet_free(sd_unet *u); /* NULL-safe */
const sd_unet_config *sd_unet_get_config(const sd_unet *u);

/* ControlNet / T2I-Adapter residuals, as ComfyUI's apply_control adds them.
 * Every pointer may be NULL (nothing added there); shapes must match the
 * tensors they are added to. Not owned by the UNet.
 *   input[i]  added to the output of input block i (T2I-Adapter style);
 *   middle    added to the middle-block output;
 *   skip[i]   added to the skip connection saved after input block i, when
 *             the output blocks pop it (ControlNet: zero_convs[i] output).
 * Scaling by strength is the caller's job. */
struct sd_unet_patches;
struct sd_rng;
typedef struct sd_unet_control {
    int n_input;
    sd_bt *const *input;
    sd_bt *middle;
    int n_skip;
    sd_bt *const *skip;
    /* the MODEL's patches (below) for this call; NULL = none */
    const struct sd_unet_patches *patches;
    /* the call's sigma (transformer_options["sigmas"][0]), for the patches
     * that act in a sigma window (PatchModelAddDownscale) */
    float sigma;
    /* the sampling run's stand-in for torch's default generator (the
     * state prepare_noise left it in), which HyperTile draws from; NULL:
     * none (a HyperTile that has to draw is then an error) */
    struct sd_rng *rng;
    /* where an SD_UNET_PATCH_ATTN1_RECORD patch leaves what it records in
     * this call; NULL = record nothing (the patch then only computes the
     * attention) */
    struct sd_unet_attn_record *record;
    /* the conditioning entry's own patches (ComfyUI's cond "patches",
     * merged after the model's): its middle_patch, NULL = none */
    const struct sd_unet_middle_patch *middle_patch;
} sd_unet_control;

/* A middle_patch (GLIGEN's, comfy/gligen.py): called in every transformer
 * block between the self-attention's residual add and norm2, as
 * BasicTransformerBlock does, with x [N, L, C] (borrowed) and
 * transformer_index, ComfyUI's count of the SpatialTransformers this
 * forward ran before the current one (input blocks, middle, output blocks;
 * every block of one SpatialTransformer sees the same index). *out: a new
 * tensor replacing x. An error fills err (the forward stops with it). */
typedef struct sd_unet_middle_patch {
    sd_status (*fn)(void *ud, int transformer_index, sd_bt *x, sd_bt **out, sd_error *err);
    void *ud;
} sd_unet_middle_patch;

/* The channel width of each SpatialTransformer in forward order (the
 * order of transformer_index): input blocks, middle block, output blocks.
 * Fills up to max widths; returns how many the UNet has. */
int sd_unet_transformer_widths(const sd_unet *u, int *widths, int max);

/* ---- model patches (ComfyUI's transformer_options "patches" / "patches_replace") ----
 * What a MODEL patch node (FreeU, ...) puts on a MODEL for the UNet: plain
 * data, a kind and its parameters, so that a MODEL clone copies them, a
 * later node stacks another on top (the list is applied in order, as
 * ComfyUI's per-point lists are) and two MODELs with the same patches
 * compute the same. The forward calls each patch's function
 * (models/unet/unet_patch.c) at the point ComfyUI's openaimodel calls its
 * list, over backend tensors:
 *   SD_UNET_AT_OUTPUT_BLOCK  output_block_patch: (h, hsp) before output
 *                            block i concatenates them (hsp: the popped skip,
 *                            ControlNet residual added);
 *   SD_UNET_AT_ATTN1_REPLACE patches_replace["attn1"][(block, id)] or
 *                            [(block, id, index)]: the self-attention of the
 *                            transformer blocks there computed by the patch
 *                            (from the to_q/to_k/to_v projections; to_out
 *                            applied after it). The first matching patch
 *                            wins, as ComfyUI's dict holds one per key;
 *   SD_UNET_AT_INPUT_BLOCK   input_block_patch: h after input block i (and
 *                            its ControlNet residual), before it is saved
 *                            as the skip;
 *   SD_UNET_AT_INPUT_BLOCK_AFTER_SKIP  input_block_patch_after_skip: h after
 *                            it was saved, so only the next blocks see it;
 *   SD_UNET_AT_ATTN1_PATCH   attn1_patch + attn1_output_patch: every
 *                            transformer block's self-attention input
 *                            (before the projections) and output;
 *   SD_UNET_AT_ATTN_KV       attn1_patch + attn2_patch that change only
 *                            the key and value inputs (before to_k/to_v) of
 *                            every transformer block's self- and
 *                            cross-attention, in list order (the queries
 *                            stay as they are, so they commute with
 *                            HyperTile's query tiling). */
typedef enum sd_unet_patch_at {
    SD_UNET_AT_OUTPUT_BLOCK = 1,
    SD_UNET_AT_ATTN1_REPLACE = 2,
    SD_UNET_AT_INPUT_BLOCK = 3,
    SD_UNET_AT_INPUT_BLOCK_AFTER_SKIP = 4,
    SD_UNET_AT_ATTN1_PATCH = 5,
    SD_UNET_AT_ATTN_KV = 6
} sd_unet_patch_at;

/* transformer_options["block"][0] */
typedef enum sd_unet_block_kind {
    SD_UNET_BLOCK_INPUT = 0,
    SD_UNET_BLOCK_MIDDLE = 1,
    SD_UNET_BLOCK_OUTPUT = 2
} sd_unet_block_kind;

typedef enum sd_unet_patch_kind {
    /* FreeU (comfy_extras/nodes_freelunch.py), p = {b1, b2, s1, s2}: where h
     * has model_channels * 4 (b1, s1) or * 2 (b2, s2) channels, the first
     * half of h's channels times b, and hsp through Fourier_filter(hsp, 1, s):
     * its 2x2 lowest frequencies (fftshift's centre rows/cols H//2-1, H//2)
     * times s, computed on the host in double */
    SD_UNET_PATCH_FREEU = 1,
    /* FreeU_V2: the same, the first half scaled by (b - 1) * m + 1 with m
     * the channel mean of h min-max normalised over each item's pixels */
    SD_UNET_PATCH_FREEU_V2 = 2,
    /* attn1 replace (PerturbedAttentionGuidance's perturbed_attention,
     * comfy_extras/nodes_pag.py): the attention's output is v */
    SD_UNET_PATCH_ATTN1_IDENTITY = 3,
    /* PatchModelAddDownscale (comfy_extras/nodes_model_downscale.py)'s
     * input block patch, p = {downscale_factor, sigma_start, sigma_end,
     * method (sd_upscale_method)}, block_id = block_number: after input
     * block block_id, where sigma_end <= sigma <= sigma_start, h resized by
     * common_upscale to (round(W / factor), round(H / factor)) (Python
     * round of W * (1.0 / factor)). Applied before the skip is saved, or
     * after it for the _AFTER_SKIP kind. */
    SD_UNET_PATCH_DOWNSCALE = 20,
    SD_UNET_PATCH_DOWNSCALE_AFTER_SKIP = 21,
    /* Its output block patch, p = {method}: where h's height differs from
     * the skip's, h resized to the skip's (width, height). */
    SD_UNET_PATCH_UPSCALE_TO_SKIP = 22,
    /* HyperTile (comfy_extras/nodes_hypertile.py), p = {latent_tile_size
     * (max(32, tile_size) // 8), swap_size, max_depth, scale_depth}: where
     * a self-attention's token count is (H/2^i)(W/2^i) for an i <= max_depth
     * (H, W: the UNet input's), its queries are split into nh x nw tiles
     * (random_divisor's choice, drawn from sd_unet_control.rng as torch's
     * randint) attending to as many equal runs of the keys, and put back. */
    SD_UNET_PATCH_HYPERTILE = 23,
    /* TomePatchModel (comfy_extras/nodes_tomesd.py), p = {ratio}: where a
     * self-attention's input has the UNet input's H * W tokens, int(N *
     * ratio) of them merged into their most similar destination (one per
     * 2x2 cell, drawn from sd_unet_control.rng as torch's randint) before
     * the queries, and the output spread back after to_out
     * (models/unet/unet_tome.c) */
    SD_UNET_PATCH_TOME = 24,
    /* attn1 replace (SelfAttentionGuidance's attn_and_record,
     * comfy_extras/nodes_sag.py): the attention as usual; when the call's
     * control has a record, also the attention probabilities of its batch
     * rows [item0, item0 + n_items) (softmax(q k^T / sqrt(d)) per head),
     * reduced to what SAG reads of them (sd_unet_attn_record) */
    SD_UNET_PATCH_ATTN1_RECORD = 4,
    /* HypernetworkLoader (comfy_extras/nodes_hypernetwork.py), p = {strength},
     * hn = the hypernetwork (models/unet/hypernet.h): in attn1 and attn2 of
     * every transformer block, k = k + mlp0(k) * strength and v = v +
     * mlp1(v) * strength where the hypernetwork has the inputs' width */
    SD_UNET_PATCH_HYPERNET = 5
} sd_unet_patch_kind;

struct sd_hypernet;
typedef struct sd_unet_patch {
    sd_unet_patch_kind kind;
    double p[4];
    /* SD_UNET_PATCH_HYPERNET: borrowed; whoever holds the patch list holds
     * a reference (a MODEL value: nodes/loaders/handles.c) */
    struct sd_hypernet *hn;
    /* replace patches: where (block kind, block id, transformer index
     * within the block's SpatialTransformer; -1 = every index) */
    sd_unet_block_kind block;
    int block_id, index;
} sd_unet_patch;

#define SD_UNET_MAX_PATCHES 16
typedef struct sd_unet_patches {
    int n;
    sd_unet_patch list[SD_UNET_MAX_PATCHES];
} sd_unet_patches;

/* What an SD_UNET_PATCH_ATTN1_RECORD patch records: for each recorded
 * batch row b and key token j, mass[b, j] = the mean over heads of the sum
 * over queries i of the attention probability p[b, h, i, j] (ComfyUI's
 * attn.mean(1).sum(1) over the recorded scores; summed in double). The
 * caller sets item0 / n_items before the forward; the UNet replaces mass
 * ([n_items, L] F32, owned by the record: sd_unet_attn_record_clear) at
 * each recording and sets failed when a host allocation failed. */
typedef struct sd_unet_attn_record {
    int64_t item0, n_items;
    sd_tensor *mass;
    int failed;
} sd_unet_attn_record;
void sd_unet_attn_record_clear(sd_unet_attn_record *r); /* frees mass; NULL-safe */

/* Where the patch of `kind` is applied. */
sd_unet_patch_at sd_unet_patch_point(sd_unet_patch_kind kind);
/* Appends p to ps: SD_ERR_INVALID when the list is full. */
sd_status sd_unet_patches_add(sd_unet_patches *ps, const sd_unet_patch *p, sd_error *err);

/* Observation hook: called with every named activation during forward
 * ("t_emb", "time_embed", "label_emb", "input_blocks.3", "input_blocks.1.1",
 * "middle_block", "output_blocks.5", "output_blocks.last", "out"). The
 * tensor is borrowed for the duration of the call. For debugging and golden
 * tests; NULL disables it. */
typedef void (*sd_unet_tap_fn)(void *user, const char *name, const sd_bt *t);
void sd_unet_set_tap(sd_unet *u, sd_unet_tap_fn fn, void *user);

/* One UNet evaluation (raw model output: eps for SD1/SDXL).
 *   x          [N, in_channels, H, W]
 *   timesteps  N floats on the host (ComfyUI passes fractional values through)
 *   context    [N, L, context_dim], any L (77 * k tokens)
 *   y          [N, adm_in_channels] for SDXL, NULL for SD1
 *   control    NULL or residuals (see above)
 * *out = [N, out_channels, H, W]. Errors: SD_ERR_INVALID for shapes that do
 * not fit the model, or the backend's error. */
sd_status sd_unet_forward(sd_unet *u, sd_bt *x, const float *timesteps, sd_bt *context,
                          sd_bt *y, const sd_unet_control *control, sd_bt **out,
                          sd_error *err);

/* The UNet behind the diffusion model interface (models/dmodel/dmodel.h):
 * *out borrows u; the input's extra is a const sd_unet_control * or NULL,
 * guidance is ignored. */
void sd_unet_as_dmodel(sd_unet *u, sd_dmodel *out);

/* ---- the diffusers layout (models/unet/unet_diffusers.c) ---------------------
 * comfy.utils.unet_to_diffusers: the one table of diffusers <-> ldm module
 * names (down_blocks.X.resnets.I <-> input_blocks.N.0, ...), used by the
 * LoRA key map, diffusers-layout ControlNets and diffusers UNet files. */

/* fn(ud, diffusers module, ldm module) for every module of a UNet of config
 * c (names without .weight/.bias), in unet_to_diffusers' order; label_emb
 * comes twice (class_embedding and add_embedding). Only the structural
 * fields are read: num_levels, num_res_blocks, n_input_res,
 * transformer_depth, transformer_depth_middle, n_output_blocks,
 * transformer_depth_output (n_output_blocks 0: no up blocks, a ControlNet). */
typedef void (*sd_unet_name_fn)(void *ud, const char *diffusers, const char *ldm);
void sd_unet_diffusers_names(const sd_unet_config *c, sd_unet_name_fn fn, void *ud);
/* The same table as an array, in the same order (label_emb twice): *n
 * pairs, owned by the caller (free()); NULL when out of memory. */
typedef struct sd_unet_name_pair {
    char d[200], l[200]; /* diffusers module, ldm module */
} sd_unet_name_pair;
sd_unet_name_pair *sd_unet_diffusers_table(const sd_unet_config *c, size_t *n);
/* 1 when f holds prefix + conv_in.weight and down_blocks.0.resnets.0.conv1.weight. */
int sd_unet_is_diffusers(sd_st_file *f, const char *prefix);
/* Those structural fields counted from a diffusers-layout file's keys under
 * prefix (up blocks may be absent). SD_ERR_FORMAT naming the file when the
 * blocks do not fit together. */
sd_status sd_unet_diffusers_layout(sd_st_file *f, const char *prefix, sd_unet_config *c, sd_error *err);
/* For keys outside the table: writes the new name of `key` (prefix
 * stripped) into buf and returns 1, or returns 0 to leave the key out. */
typedef int (*sd_unet_rename_fn)(void *ud, const char *key, char *buf, size_t n);
/* Adds every tensor of f under prefix to w, renamed to out_prefix + its ldm
 * name (table hits), else by extra (may be NULL); others are left out, as
 * ComfyUI leaves them. Tensors are copied as stored. */
sd_status sd_unet_diffusers_rename(sd_st_file *f, const char *prefix, const sd_unet_config *c,
                                   const char *out_prefix, sd_unet_rename_fn extra, void *ud,
                                   sd_st_writer *w, sd_error *err);
/* The same renaming as a file view (no copy made now): *out lists f's UNet
 * tensors under prefix by their bare ldm names and reads each from f when
 * it is asked for. Takes f (the view closes it), also on failure. */
sd_status sd_unet_diffusers_view(sd_st_file *f, const char *prefix, const sd_unet_config *c,
                                 sd_st_file **out, sd_error *err);

/* ---- host-side helpers (scalars, not activations) ---------------------------- */

/* ComfyUI timestep_embedding (max_period 10000, cos half first then sin),
 * computed in float32 as PyTorch does: out[i*dim + j] for n values. */
void sd_unet_timestep_embedding(const float *t, int n, int dim, float *out);

/* comfy_extras/nodes_freelunch.Fourier_filter(x, threshold=1, scale), FreeU's
 * skip filter, in place on x [shape[0], shape[1], shape[2], shape[3]] F32
 * (see SD_UNET_PATCH_FREEU). SD_ERR_NOMEM only. */
sd_status sd_unet_fourier_filter(float *x, const int64_t shape[4], double scale, sd_error *err);

/* SDXL size conditioning (ComfyUI SDXL.encode_adm). */
typedef struct sd_sdxl_size {
    float width, height;
    float crop_w, crop_h;
    float target_width, target_height;
} sd_sdxl_size;

/* y = [pooled, emb(height), emb(width), emb(crop_h), emb(crop_w),
 *      emb(target_height), emb(target_width)] with 256-dim embeddings
 * (height before width). pooled: [N, P] F32 -> new [N, P + 1536] tensor. */
sd_status sd_unet_sdxl_adm(const sd_tensor *pooled, const sd_sdxl_size *size,
                           sd_tensor **out, sd_error *err);

/* ---- unCLIP's ADM (models/unet/unet_unclip.c) -------------------------------------
 * comfy.model_base.unclip_adm over its CLIPEmbeddingNoiseAugmentation
 * (comfy/ldm/modules/encoders/noise_aug_modules.py): ComfyUI builds the
 * augmentor with a squaredcos_cap_v2 schedule of 1000 steps, max_noise_level
 * 1000 and no stats file, so its data_mean / data_std are 0 / 1 (scale and
 * unscale change nothing; the buffers are not persistent, no checkpoint
 * sets them). For one image embedding x [dim] at noise level
 * L = round(999 * noise_augmentation) (Python's half-to-even):
 *   c   = sqrt(alphas_cumprod[L]) x + sqrt(1 - alphas_cumprod[L]) n,
 *         n = torch.randn(dim) after torch.manual_seed(seed)
 *         (the schedule in double, its square roots rounded to float32,
 *         the products and sum in float32);
 *   adm = [c, timestep_embedding(L, dim)] * strength (float32).
 * One item: that adm. More (every image of every entry counts, in order):
 * their sum (float32, in order) s, then once more with
 * merge_augmentation: [augment(s[:dim]), timestep_embedding(L_merge, dim)]
 * with noise drawn from the same generator, not reseeded (ComfyUI passes no
 * seed there: torch's default generator continues after the last item's
 * draw). SD21UNCLIP calls it with seed = the sampling seed - 10 (a
 * two's-complement uint64 here, as torch.manual_seed takes a negative one)
 * and merge_augmentation 0.05. */
typedef struct sd_unclip_item {
    const float *embed; /* [dim]: one image's image_embeds */
    double strength;
    double noise_augmentation; /* 0..1 */
} sd_unclip_item;

/* out [2 * dim]. rng: the stand-in for torch's default generator, reseeded
 * and drawn from as ComfyUI does (so the caller sees the state it leaves).
 * SD_ERR_INVALID: no item, dim < 1, a noise level outside 0..999. */
struct sd_rng;
sd_status sd_unet_unclip_adm(const sd_unclip_item *items, int n, int dim, double merge_augmentation,
                             uint64_t seed, struct sd_rng *rng, float *out, sd_error *err);

/* ---- parameters by key, views (models/unet/unet_params.c; used by LoRA) ---------- */

/* The slot holding the parameter named by its checkpoint key relative to the
 * UNet prefix ("input_blocks.1.1.proj_in.weight"), or NULL when the model
 * has no such parameter. The slot belongs to u: a caller replacing the
 * tensor in it frees the old one (only ever done on a view). */
sd_bt **sd_unet_param(sd_unet *u, const char *key);

/* Calls fn(ud, key, slot) for every parameter u holds, keyed as
 * sd_unet_param reaches it (the checkpoint key relative to the UNet prefix;
 * `key` is valid during the call only). Model merging walks one UNet's
 * parameters and finds each in the other by key. */
typedef void (*sd_unet_param_fn)(void *ud, const char *key, sd_bt **slot);
void sd_unet_param_each(sd_unet *u, sd_unet_param_fn fn, void *ud);

/* A new UNet sharing every weight of `base` (each tensor a backend view, no
 * data copied; the tap is not inherited). Free with sd_unet_free, which
 * releases only the views. `base` must outlive the view (the CPU backend's
 * views keep the storage alive anyway). */
sd_status sd_unet_view(const sd_unet *base, sd_unet **out, sd_error *err);

#endif
