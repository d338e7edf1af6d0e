/* synth_gguf.c - the Flux DiT and the T5-XXL encoder of synth_flux.c as
 * GGUF files, laid out and quantized as the files people run Flux from on
 * small machines (synth.h "GGUF"): city96's DiT files (ComfyUI-GGUF's
 * convert.py, then llama-quantize with its image-model rules) and the
 * llama.cpp T5 encoders, quantized by core/quantize.c.
 *
 * Each tensor is made while the file is written (formats/gguf.h lazy
 * tensors), its rows generated and quantized by several threads in chunks:
 * memory holds the layer's stored bytes and a few chunks of floats. Values: norm scales 1; biases,
 * embeddings and the T5 position bias N(0, 0.02^2); other weights
 * N(0, 1/fan_in) (an Irwin-Hall sum of four uniforms: cheap, and close
 * enough to a Gaussian for random weights); each tensor seeded from the seed
 * and its name. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant.h"
#include "formats/gguf.h"
#include "kernels/cpus.h"
#include "models/synth/synth_internal.h"

/* llama.cpp's file type names and ids (general.file_type). */
static const struct { const char *name; sd_dtype dt; uint32_t ftype; } ftypes[] = {
    {"F16", SD_F16, 1},    {"BF16", SD_BF16, 32},   {"Q8_0", SD_Q8_0, 7},    {"Q4_0", SD_Q4_0, 2},
    {"Q5_0", SD_Q5_0, 8},  {"Q4_K_S", SD_Q4_K, 14}, {"Q5_K_S", SD_Q5_K, 16}, {"Q6_K", SD_Q6_K, 18},
};

int sd_synth_gguf_type(const char *name, sd_dtype *dt) {
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
        if (name && strcmp(name, ftypes[i].name) == 0) {
            if (dt) *dt = ftypes[i].dt;
            return 1;
        }
    return 0;
}

enum { INIT_WEIGHT, INIT_SMALL, INIT_ONE };

typedef struct spec {
    char name[160];
    int ndim, init;
    int64_t shape[2];
    sd_dtype dt;
    uint64_t seed;
    int threads; /* workers filling it */
} spec;

typedef struct specs {
    spec *v;
    size_t n, cap;
    sd_synth_flux_part part;
    sd_dtype q;
    uint64_t seed;
    int threads;
    int failed;
} specs;

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s, uint64_t seed) {
    uint64_t h = seed ^ 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* HF T5EncoderModel names -> llama.cpp's (the inverse of ComfyUI-GGUF's
 * T5_SD_MAP, models/checkpoint/gguf_model.h). 0 when not a T5 name. */
static int t5_name(const char *hf, char *out, size_t n) {
    static const char *const block[][2] = {
        {"layer.0.SelfAttention.q.weight", "attn_q.weight"},
        {"layer.0.SelfAttention.k.weight", "attn_k.weight"},
        {"layer.0.SelfAttention.v.weight", "attn_v.weight"},
        {"layer.0.SelfAttention.o.weight", "attn_o.weight"},
        {"layer.0.SelfAttention.relative_attention_bias.weight", "attn_rel_b.weight"},
        {"layer.0.layer_norm.weight", "attn_norm.weight"},
        {"layer.1.DenseReluDense.wi_0.weight", "ffn_gate.weight"},
        {"layer.1.DenseReluDense.wi_1.weight", "ffn_up.weight"},
        {"layer.1.DenseReluDense.wo.weight", "ffn_down.weight"},
        {"layer.1.layer_norm.weight", "ffn_norm.weight"},
    };
    if (strcmp(hf, "shared.weight") == 0) return snprintf(out, n, "token_embd.weight"), 1;
    if (strcmp(hf, "encoder.final_layer_norm.weight") == 0) return snprintf(out, n, "enc.output_norm.weight"), 1;
    int blk, used = 0;
    if (sscanf(hf, "encoder.block.%d.%n", &blk, &used) != 1 || !used) return 0;
    for (size_t i = 0; i < sizeof block / sizeof block[0]; i++)
        if (strcmp(hf + used, block[i][0]) == 0) return snprintf(out, n, "enc.blk.%d.%s", blk, block[i][1]), 1;
    return 0;
}

/* The stored type of a matrix: the file's type, or F16 where its rows are
 * not whole blocks of it (llama-quantize's fallback in ComfyUI-GGUF's patch). */
static sd_dtype matrix_type(sd_dtype want, int64_t row) { return row % sd_dtype_block(want) ? SD_F16 : want; }

static int has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static void collect(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    specs *S = user;
    if (S->failed) return;
    if (S->n == S->cap) {
        size_t nc = S->cap ? S->cap * 2 : 512;
        spec *v = realloc(S->v, nc * sizeof *v);
        if (!v) {
            S->failed = 1;
            return;
        }
        S->v = v;
        S->cap = nc;
    }
    spec *p = &S->v[S->n];
    memset(p, 0, sizeof *p);
    int t5 = S->part == SD_SYNTH_FLUX_T5;
    if (t5 ? !t5_name(name, p->name, sizeof p->name) : snprintf(p->name, sizeof p->name, "%s", name) < 0) return;
    p->ndim = ndim;
    p->shape[0] = shape[0];
    p->shape[1] = ndim == 2 ? shape[1] : 0;
    int64_t numel = ndim == 2 ? shape[0] * shape[1] : shape[0];
    int norm = has(name, "norm"), bias = sd_synth_ends_with(name, ".bias");
    p->init = norm ? INIT_ONE : bias || has(name, "shared") || has(name, "relative_attention_bias") ? INIT_SMALL
                                                                                                 : INIT_WEIGHT;
    if (ndim != 2) {
        p->dt = SD_F32; /* 1-D: F32 in both converters */
    } else if (t5) {
        p->dt = has(name, "relative_attention_bias") ? SD_F16 /* never quantized by llama-quantize */
                                                     : matrix_type(S->q, shape[1]);
    } else if (numel <= 1024) {
        p->dt = SD_F32; /* ComfyUI-GGUF's convert.py: small tensors of a BF16 model */
    } else if (has(name, "txt_in.") || has(name, "img_in.") || has(name, "time_in.") || has(name, "vector_in.") ||
               has(name, "guidance_in.") || has(name, "final_layer.")) {
        p->dt = dtype; /* not quantized for Flux (lcpp.patch): the converted file's BF16 */
    } else {
        p->dt = matrix_type(S->q, shape[1]);
    }
    p->seed = hash_name(p->name, S->seed);
    p->threads = S->threads;
    S->n++;
}

/* One tensor being filled: its rows are cut into contiguous ranges, one per
 * worker. Quantization and conversion are per block within a row, and each
 * value comes from a counter-based stream (value i uses the state advanced
 * 2i times, which is seed + 2i * the increment), so every split writes the
 * same bytes as one thread. */
typedef struct job {
    const spec *p;
    uint8_t *dst;
    int64_t rows, cols;
    size_t row_bytes;
} job;

typedef struct slice {
    const job *j;
    int64_t r0, r1;
    int nomem;
} slice;

enum { CHUNK_VALUES = 1 << 16 }; /* floats a worker holds at once: memory stays bounded */

static void fill_values(const spec *p, int64_t i0, float *v, int64_t n) {
    if (p->init == INIT_ONE) {
        for (int64_t i = 0; i < n; i++) v[i] = 1.0f;
        return;
    }
    double sd = p->init == INIT_WEIGHT ? 1.0 / sqrt((double)(p->ndim == 2 ? p->shape[1] : 1)) : 0.02;
    const double k = sd * sqrt(3.0) / 2147483648.0; /* four uniforms on [-2^31, 2^31): variance 2^62 * 4/3 */
    uint64_t s = p->seed + (uint64_t)i0 * 2u * 0x9e3779b97f4a7c15ull; /* mix() adds the increment per call */
    for (int64_t i = 0; i < n; i++) {
        uint64_t a = mix(&s), b = mix(&s);
        double u = (double)(int32_t)(a >> 32) + (double)(int32_t)a + (double)(int32_t)(b >> 32) + (double)(int32_t)b;
        v[i] = (float)(u * k);
    }
}

static void *fill_rows(void *arg) {
    slice *t = arg;
    const job *j = t->j;
    int64_t per = j->cols >= CHUNK_VALUES ? 1 : CHUNK_VALUES / j->cols;
    if (per > t->r1 - t->r0) per = t->r1 - t->r0;
    float *v = per > 0 ? malloc((size_t)(per * j->cols) * sizeof *v) : NULL;
    if (per > 0 && !v) {
        t->nomem = 1;
        return NULL;
    }
    for (int64_t r = t->r0; r < t->r1; r += per) {
        int64_t nr = t->r1 - r < per ? t->r1 - r : per, n = nr * j->cols;
        fill_values(j->p, r * j->cols, v, n);
        uint8_t *dst = j->dst + (size_t)r * j->row_bytes;
        if (sd_dtype_is_quantized(j->p->dt)) sd_quant_quantize(j->p->dt, v, dst, n);
        else sd_dtype_convert(dst, j->p->dt, v, SD_F32, (size_t)n);
    }
    free(v);
    return NULL;
}

enum { MAX_THREADS = 256 };

static sd_status fill(void *ctx, const char *name, void *dst, size_t nbytes, sd_error *err) {
    const spec *p = ctx;
    if (sd_dtype_is_quantized(p->dt) && !sd_quant_can_quantize(p->dt))
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "no quantizer for %s ('%s')", sd_dtype_name(p->dt), name);
    job j = {p, dst, p->ndim == 2 ? p->shape[0] : 1, p->ndim == 2 ? p->shape[1] : p->shape[0], 0};
    j.row_bytes = sd_dtype_nbytes(p->dt, j.cols);
    (void)nbytes;
    int nt = p->threads < 1 ? 1 : p->threads > MAX_THREADS ? MAX_THREADS : p->threads;
    if (nt > j.rows) nt = (int)j.rows;
    if (nt < 1) nt = 1;
    slice parts[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int i = 0; i < nt; i++) parts[i] = (slice){&j, j.rows * i / nt, j.rows * (i + 1) / nt, 0};
    /* workers 1..nt-1 on their own threads, worker 0 here; a worker whose
     * thread cannot start runs here too (same bytes, only slower) */
    for (int i = 1; i < nt; i++) started[i] = pthread_create(&tid[i], NULL, fill_rows, &parts[i]) == 0;
    fill_rows(&parts[0]);
    int nomem = parts[0].nomem;
    for (int i = 1; i < nt; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        else fill_rows(&parts[i]);
        nomem |= parts[i].nomem;
    }
    if (nomem) return sd_error_set(err, SD_ERR_NOMEM, "out of memory synthesizing '%s'", name);
    return SD_OK;
}

sd_status sd_synth_flux_gguf_write(const sd_synth_flux_config *cfg, sd_synth_flux_part part, const char *quant,
                                   uint64_t seed, int threads, const char *path, sd_error *err) {
    sd_dtype q;
    if (!sd_synth_gguf_type(quant, &q))
        return sd_error_set(err, SD_ERR_INVALID,
                            "unknown GGUF type '%s' (F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K_S, Q5_K_S, Q6_K)",
                            quant ? quant : "");
    if (part != SD_SYNTH_FLUX_DIT && part != SD_SYNTH_FLUX_T5)
        return sd_error_set(err, SD_ERR_INVALID, "only the diffusion model and the T5 are written as GGUF");
    if (threads <= 0) { /* the CPUs this process may use, as a backend counts them */
        int n = sd_backend_default_threads();
        threads = n < MAX_THREADS ? n : MAX_THREADS;
    }
    specs S = {NULL, 0, 0, part, q, seed ^ (part == SD_SYNTH_FLUX_T5 ? 0x7575757575ull : 0), threads, 0};
    sd_synth_flux_keys(cfg, part, collect, &S);
    uint32_t ftype = 0;
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
        if (strcmp(quant, ftypes[i].name) == 0) ftype = ftypes[i].ftype;
    char tag[160];
    snprintf(tag, sizeof tag, "%s-%s", cfg->name, quant);
    sd_gguf_writer *w = S.failed ? NULL : sd_gguf_writer_new();
    sd_status rc = w ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    const char *arch = part == SD_SYNTH_FLUX_T5 ? "t5encoder" : "flux";
    if (!rc) rc = sd_gguf_writer_kv_str(w, "general.architecture", arch, err);
    if (!rc) rc = sd_gguf_writer_kv_u32(w, "general.quantization_version", 2, err);
    if (!rc) rc = sd_gguf_writer_kv_u32(w, "general.file_type", ftype, err);
    if (!rc && part == SD_SYNTH_FLUX_T5) rc = sd_gguf_writer_kv_str(w, "tokenizer.ggml.model", "t5", err);
    if (!rc) rc = sd_gguf_writer_kv_str(w, "sdflow_random_weights", "true", err);
    if (!rc) rc = sd_gguf_writer_kv_str(w, "sdflow_preset", tag, err);
    for (size_t i = 0; i < S.n && !rc; i++)
        rc = sd_gguf_writer_add_lazy(w, S.v[i].name, S.v[i].dt, S.v[i].ndim, S.v[i].shape, fill, &S.v[i], err);
    if (!rc) rc = sd_gguf_writer_save(w, path, err);
    sd_gguf_writer_free(w);
    free(S.v);
    return rc;
}
