/* nodes_ctx.h - a hand-built sd_node_ctx over temp dirs, for the tests that
 * call nodes directly (test_image_nodes.c, test_latent_nodes.c). Linked into
 * the nodes-layer tests (see tests/CMakeLists.txt). Failures are recorded
 * with the testutil.h CHECK macros. */
#ifndef SD_TEST_NODES_CTX_H
#define SD_TEST_NODES_CTX_H

#include "core/env.h"
#include "core/node.h"
#include "core/tensor.h"
#include "core/value.h"
#include "models/synth/synth.h"

/* An env whose input/output/temp dirs are under a fresh scratch dir. */
typedef struct nt_env {
    sd_env env;
    char input[4096], output[4096], temp[4096];
} nt_env;

/* Fills e with dirs under sd_test_tmpdir(name) (input and output created). */
void nt_env_init(nt_env *e, const char *name);

/* A context for node id "7" of class_type over e (borrowed). */
sd_node_ctx nt_ctx(const nt_env *e, const char *class_type);

/* Runs def with inputs in (borrowed) into out[], err cleared first. */
sd_status nt_run(const sd_node_def *def, sd_node_ctx *ctx, sd_value **in, sd_value **out, sd_error *err);

/* Runs the registered node type ctx->class_type with its inputs given by
 * name (vals[i] for names[i], borrowed; inputs not named stay NULL) into
 * out[] (cleared first); ctx->ui is released afterwards. An unknown type
 * or input name is an error. */
sd_status nt_run_named(sd_node_ctx *ctx, const char *const *names, sd_value *const *vals, int n,
                       sd_value **out, sd_error *err);

/* A models folder under sd_test_tmpdir(name) holding a random-weight tiny
 * SD1 checkpoint (checkpoints/tiny.safetensors, `sd1-tiny` with a 1000-word
 * vocabulary, seed 1) and an env on it: CPU backend, a model store, every
 * node registered. nt_tiny_sd1_free releases all of it and resets the
 * registry. */
struct sd_backend;
struct sd_model_store;
typedef struct nt_tiny_sd1 {
    sd_env env;
    char models[4096];
    sd_synth_config cfg;
    struct sd_backend *backend;
    struct sd_model_store *store;
} nt_tiny_sd1;
void nt_tiny_sd1_init(nt_tiny_sd1 *t, const char *name);
void nt_tiny_sd1_free(nt_tiny_sd1 *t);

/* nt_run_named for a node with up to 8 outputs where the test wants the
 * first: vals[i] is released where owned[i], a failure is a failed check
 * (err names it), outputs after the first are released, and output 0 is
 * returned (NULL on failure). */
sd_value *nt_run1_named(sd_node_ctx *ctx, const char *const *names, sd_value **vals, int n, const int *owned,
                        sd_error *err);

/* Unrefs v[0 .. n) and sets them to NULL. */
void nt_free_values(sd_value **v, int n);

/* A tensor value that takes over the caller's reference to t. */
sd_value *nt_tensor_value(sd_tensor *t);

/* A LATENT dict {"samples": samples}, taking over the reference. */
sd_value *nt_latent(sd_tensor *samples);

/* 1 when path is a regular file. */
int nt_file_exists(const char *path);

/* Fills an F32 tensor with a deterministic ramp in [0, 1). */
void nt_fill(sd_tensor *t, unsigned seed);

/* The registered node name; a failed check and exit(1) when it is missing,
 * since the test cannot go on without it. */
const sd_node_def *def_of(const char *name);

#endif
