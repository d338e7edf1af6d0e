/* lora_internal.h - shared by the lora_*.c files. Not a public contract. */
#ifndef SD_LORA_INTERNAL_H
#define SD_LORA_INTERNAL_H

#include "models/lora/lora.h"

/* One entry of the LoRA-name -> model-parameter map (ComfyUI key_map). */
typedef struct lora_key {
    char *name;         /* LoRA module name, without adapter suffix */
    sd_lora_part part;
    char *target;       /* parameter key relative to the part ("...weight") */
} lora_key;

/* Builds the map for the given parts (either may be NULL), duplicates
 * resolved as a Python dict would (the later insertion wins). */
sd_status sd_lora_keymap_build(sd_unet *unet, const sd_text_encoder *te, lora_key **out,
                               size_t *n, sd_error *err);
void sd_lora_keymap_free(lora_key *k, size_t n);

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
    lora_kind kind;
    const char *t[LORA_MAX_T]; /* per kind, see lora_apply.c; NULL = absent */
    int has_alpha;
    double alpha;
    const char *src; /* module name, for messages */
} lora_patch;

struct sd_lora_plan {
    int refcount;
    sd_lora *lora;
    lora_patch *p;
    size_t n;
    size_t count[3];
    const char **unmatched;
    size_t n_unmatched;
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
