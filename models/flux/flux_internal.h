/* flux_internal.h - the Flux DiT's module structs, shared by the flux_*.c
 * files. Not a public contract: use models/flux/flux.h. */
#ifndef SD_FLUX_INTERNAL_H
#define SD_FLUX_INTERNAL_H

#include "models/flux/flux.h"
#include "models/dit/dit_params.h"

/* A Linear layer: w [out, in], b [out] or NULL. */
typedef struct flux_lin {
    sd_bt *w, *b;
} flux_lin;

/* One stream (img or txt) of a double block. */
typedef struct flux_stream {
    flux_lin mod;           /* Modulation: hidden -> 6 * hidden */
    flux_lin qkv, proj;     /* SelfAttention */
    sd_bt *q_norm, *k_norm; /* QKNorm scales [head_dim] */
    flux_lin mlp0, mlp2;    /* Linear, GELU(tanh), Linear */
} flux_stream;

typedef struct flux_double {
    flux_stream img, txt;
} flux_double;

typedef struct flux_single {
    flux_lin mod;              /* hidden -> 3 * hidden */
    flux_lin linear1, linear2; /* qkv + mlp in; attn + mlp out */
    sd_bt *q_norm, *k_norm;
} flux_single;

/* MLPEmbedder: in_layer, SiLU, out_layer. */
typedef struct flux_embedder {
    flux_lin in, out;
} flux_embedder;

struct sd_flux {
    sd_backend *be;
    sd_flux_config cfg;
    flux_lin img_in, txt_in;
    flux_embedder time_in, vector_in, guidance_in; /* vector/guidance: w NULL when absent */
    flux_double *dbl;
    flux_single *sgl;
    flux_lin final_ada, final_linear; /* final_layer.adaLN_modulation.1, .linear */
    sd_dit_params params; /* every weight by its key (sd_*_param) */
    sd_bt *one; /* [1] = 1.0: the "1 +" of every modulation scale */
    sd_flux_tap_fn tap;
    void *tap_user;
};

#endif
