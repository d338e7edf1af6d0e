/* lora_internal.h - shared by the lora_*.c files. Not a public contract. */
#ifndef SD_LORA_INTERNAL_H
#define SD_LORA_INTERNAL_H

#include "models/lora/lora.h"
#include "models/flux/flux.h"
#include "models/sd3/sd3.h"
#include "models/zimage/zimage.h"

/* One entry of the LoRA-name -> model-parameter map (ComfyUI key_map). */
typedef struct lora_key {
    char *name;         /* LoRA module name, without adapter suffix */
    sd_lora_part part;
    char *target;       /* parameter key relative to the part ("...weight") */
    int64_t row0, rows; /* rows > 0: the patch covers rows [row0, row0 + rows)
                         * of the target (ComfyUI's (key, (0, offset, size))
                         * targets: q, k, v of a fused qkv) */
    int swap;           /* the patch's two halves swapped along dim 0 before it
                         * is added (ComfyUI's swap_scale_shift) */
    size_t order;       /* where ComfyUI's key_map dict holds the name (its
                         * first insertion): of two names patching the same
                         * target, the later one's patch is kept */
} lora_key;

/* The networks a plan is matched against (any may be NULL; unet, flux, sd3
 * and zimage are the diffusion model, part SD_LORA_UNET, one at most). */
typedef struct lora_model {
    sd_unet *unet;
    sd_flux *flux;
    const sd_text_encoder *te;
    sd_sd3 *sd3;
    sd_zimage *zimage;
} lora_model;

/* The DiT parameter slot of key (flux, sd3 or zimage), or NULL. */
sd_bt **sd_lora_dit_param(const lora_model *m, const char *key);

/* Builds the map for the given parts, duplicates resolved as a Python dict
 * would (the later insertion wins). */
sd_status sd_lora_keymap_build(const lora_model *m, lora_key **out, size_t *n, sd_error *err);
/* The Flux DiT's names (lora_keys_flux.c): ComfyUI's model_lora_keys_unet
 * for a Flux model (its state-dict keys, comfy.utils.flux_to_diffusers'
 * diffusers names, linear1_qkv). add(ud, name, target, row0, rows, swap). */
typedef void (*lora_key_add_fn)(void *ud, const char *name, const char *target, int64_t row0,
                                int64_t rows, int swap);
void sd_lora_flux_keys(sd_flux *f, lora_key_add_fn add, void *ud);
/* The SD3 MMDiT's and Z-Image NextDiT's names (lora_keys_dit.c). */
void sd_lora_sd3_keys(sd_sd3 *m, lora_key_add_fn add, void *ud);
void sd_lora_zimage_keys(sd_zimage *m, lora_key_add_fn add, void *ud);
void sd_lora_keymap_free(lora_key *k, size_t n);

/* ---- text-encoder parts (lora_te.c): one mechanism for CLIP, T5 and Qwen3 ---- */

/* The network of `part` in te (an sd_clip, sd_t5 or sd_qwen3), NULL when
 * te lacks it (or part is SD_LORA_UNET). */
void *sd_lora_te_net(const sd_text_encoder *te, sd_lora_part part);
/* The slot of parameter key in net (a part's network): for a CLIP its HF
 * name with *row0 / *rows the rows of a fused OpenCLIP projection (0, 0 =
 * the whole tensor; both may be NULL), for a T5 / Qwen3 its HF name. */
sd_bt **sd_lora_te_param(sd_lora_part part, void *net, const char *key, int64_t *row0, int64_t *rows);
/* Every parameter of net, as sd_clip_param_each / sd_t5_param_each /
 * sd_qwen3_param_each walk them. */
void sd_lora_te_param_each(sd_lora_part part, void *net, void (*fn)(void *ud, const char *key, sd_bt **slot),
                           void *ud);
/* "CLIP-L", "CLIP-G", "T5", "Qwen3", "UNet" (messages) */
const char *sd_lora_part_name(sd_lora_part part);

struct sd_lora {
    int refcount;
    sd_st_file *f;
    int owns_file;
};

typedef enum lora_kind {
    LK_LORA = 1, /* up, down [, mid] */
    LK_LOHA,     /* w1a, w1b, w2a, w2b [, t1, t2] */
    LK_LOKR,     /* w1 | w1a,w1b ; w2 | w2a,w2b [, t2] */
    LK_DIFF      /* full difference */
} lora_kind;

#define LORA_MAX_T 7

/* One adapter on one target. Tensor names are borrowed from the LoRA file. */
typedef struct lora_patch {
    sd_lora_part part;
    char *target;
    int64_t row0, rows; /* as lora_key */
    int swap;
    lora_kind kind;
    const char *t[LORA_MAX_T]; /* per kind, see lora_apply.c; NULL = absent */
    int has_alpha;
    double alpha;
    const char *src; /* module name, for messages */
    size_t order;    /* the key's order (lora_key), then */
    size_t seq;      /* the patch's place in the plan */
} lora_patch;

struct sd_lora_plan {
    int refcount;
    sd_lora *lora;
    lora_patch *p;
    size_t n;
    size_t count[SD_LORA_PARTS];
    const char **unmatched;
    size_t n_unmatched;
    char **skipped; /* "'KEY' ...: why" per patch that did not fit, owned */
    size_t n_skipped;
};

/* Adds the adapter's delta, times scale, into w (n floats, the target's
 * numel). SD_ERR_INVALID when the adapter's size differs from n. */
sd_status sd_lora_patch_add(sd_lora *l, const lora_patch *p, float *w, int64_t n,
                            double strength, sd_error *err);
/* Validates every tensor of the adapter against the shapes the patch
 * arithmetic uses (ranks > 0, inner dimensions, Tucker cores, Kronecker
 * factors) and returns the number of values it produces, or -1 with err set
 * (SD_ERR_FORMAT naming the file and the tensor). *rank (may be NULL) gets
 * the divisor of alpha, 0 when alpha applies as is. */
int64_t sd_lora_patch_check(sd_lora *l, const lora_patch *p, int64_t *rank, sd_error *err);

#endif
