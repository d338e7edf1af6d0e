/* bench_flux.c - the `flux` phase: a real-width Flux.1 block stack.
 *
 * Issue 28's transformer benchmark: hidden 3072, 24 heads of 128, MLP
 * 12288, 2 double-stream + 2 single-stream blocks (the dev layout: guidance
 * and vector embedders, qkv bias), 1024 image tokens (a 64x64 latent, 512x512
 * pixels) and 512 text tokens, one sd_flux_forward. The checkpoint is
 * synthesized once (about 1.0 G parameters): matrices stored F8_E4M3 as in
 * ComfyUI's fp8 Flux checkpoints, 1-D tensors BF16; values N(0, 1/fan_in)
 * so activations keep their scale through the blocks. The weights are random:
 * the figures are about shapes. torch_ref.py's `flux` phase runs the same
 * file with the weights decoded to f32 or bf16.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "formats/safetensors.h"
#include "models/flux/flux.h"

#define HID 3072
#define HEADS 24
#define HEAD_DIM 128
#define MLP 12288
#define DEPTH 2
#define SINGLE 2
#define IN_CH 16
#define VEC_IN 768
#define CTX_IN 4096
#define LATENT 64 /* 1024 image tokens after 2x2 patches */
#define TXT_TOKENS 512

typedef struct {
    sd_st_writer *w;
    uint64_t s;
    sd_error *err;
    int failed;
} synth;

static double gauss(uint64_t *s) {
    double u[2];
    for (int k = 0; k < 2; k++) {
        *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
        u[k] = ((*s * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
    }
    return sqrt(-2.0 * log(u[0] + 1e-300)) * cos(6.283185307179586 * u[1]);
}

/* One tensor of N(mean, sd) values stored as dt. */
static void add(synth *S, sd_dtype dt, int ndim, int64_t d0, int64_t d1, double mean, double sd,
                const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static void add(synth *S, sd_dtype dt, int ndim, int64_t d0, int64_t d1, double mean, double sd,
                const char *fmt, ...) {
    if (S->failed) return;
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[2] = {d0, d1};
    sd_tensor *t = sd_tensor_new(dt, ndim, shape);
    float *v = t ? malloc((size_t)sd_tensor_numel(t) * sizeof *v) : NULL;
    if (!v) {
        sd_tensor_unref(t);
        sd_error_set(S->err, SD_ERR_NOMEM, "out of memory synthesizing %s", name);
        S->failed = 1;
        return;
    }
    int64_t n = sd_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(mean + sd * gauss(&S->s));
    sd_dtype_convert(t->data, dt, v, SD_F32, (size_t)n);
    free(v);
    if (sd_st_writer_add(S->w, name, t, S->err)) S->failed = 1;
    sd_tensor_unref(t);
}

/* A linear layer: weight [out, in] fp8, bias [out] bf16. */
static void lin(synth *S, int64_t out, int64_t in, const char *base) {
    add(S, SD_F8_E4M3, 2, out, in, 0.0, 1.0 / sqrt((double)in), "%s.weight", base);
    add(S, SD_BF16, 1, out, 0, 0.0, 0.02, "%s.bias", base);
}

static void embedder(synth *S, int64_t in, const char *base) {
    char b[128];
    snprintf(b, sizeof b, "%s.in_layer", base);
    lin(S, HID, in, b);
    snprintf(b, sizeof b, "%s.out_layer", base);
    lin(S, HID, HID, b);
}

static void qk_norm(synth *S, const char *base) {
    add(S, SD_BF16, 1, HEAD_DIM, 0, 1.0, 0.05, "%s.norm.query_norm.scale", base);
    add(S, SD_BF16, 1, HEAD_DIM, 0, 1.0, 0.05, "%s.norm.key_norm.scale", base);
}

sd_status sd_bench_flux_write(const char *path, sd_error *err) {
    synth S = {sd_st_writer_new(), 0x5eed0f1e0c0ffeeull, err, 0};
    if (!S.w) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    char b[128];
    lin(&S, HID, IN_CH * 4, "img_in");
    embedder(&S, 256, "time_in");
    embedder(&S, VEC_IN, "vector_in");
    embedder(&S, 256, "guidance_in");
    lin(&S, HID, CTX_IN, "txt_in");
    for (int i = 0; i < DEPTH; i++)
        for (int k = 0; k < 2; k++) {
            const char *s = k ? "txt" : "img";
            snprintf(b, sizeof b, "double_blocks.%d.%s_mod.lin", i, s);
            lin(&S, 6 * HID, HID, b);
            snprintf(b, sizeof b, "double_blocks.%d.%s_attn.qkv", i, s);
            lin(&S, 3 * HID, HID, b);
            snprintf(b, sizeof b, "double_blocks.%d.%s_attn", i, s);
            qk_norm(&S, b);
            snprintf(b, sizeof b, "double_blocks.%d.%s_attn.proj", i, s);
            lin(&S, HID, HID, b);
            snprintf(b, sizeof b, "double_blocks.%d.%s_mlp.0", i, s);
            lin(&S, MLP, HID, b);
            snprintf(b, sizeof b, "double_blocks.%d.%s_mlp.2", i, s);
            lin(&S, HID, MLP, b);
        }
    for (int i = 0; i < SINGLE; i++) {
        snprintf(b, sizeof b, "single_blocks.%d.modulation.lin", i);
        lin(&S, 3 * HID, HID, b);
        snprintf(b, sizeof b, "single_blocks.%d.linear1", i);
        lin(&S, 3 * HID + MLP, HID, b);
        snprintf(b, sizeof b, "single_blocks.%d.linear2", i);
        lin(&S, HID, HID + MLP, b);
        snprintf(b, sizeof b, "single_blocks.%d", i);
        qk_norm(&S, b);
    }
    lin(&S, 2 * HID, HID, "final_layer.adaLN_modulation.1");
    lin(&S, IN_CH * 4, HID, "final_layer.linear");
    sd_status rc = S.failed ? err->code : sd_st_writer_save(S.w, path, err);
    sd_st_writer_free(S.w);
    return rc;
}

/* Linear layers' and attention products' FLOPs of one forward (2 per
 * multiply-accumulate; the modulation linears run on one vector per image). */
double sd_bench_flux_flops(const sd_flux_config *c, int batch, int img, int txt) {
    double h = c->hidden_size, m = c->mlp_hidden, L = img + txt, N = batch;
    double f = 2.0 * img * c->in_channels * 4 * h + 2.0 * txt * c->context_in_dim * h;
    f += 2.0 * (256 * h + h * h) * (1 + c->guidance_embed) + 2.0 * (c->vec_in_dim * h + h * h);
    /* double blocks: per stream qkv 3h^2, proj h^2, MLP 2hm per token; mod 6h^2 */
    f += c->depth * (2.0 * L * (4 * h * h + 2 * h * m) + 2 * 2.0 * 6 * h * h + 4.0 * L * L * h);
    /* single blocks: linear1 h(3h+m), linear2 (h+m)h per token; mod 3h^2 */
    f += c->depth_single_blocks *
         (2.0 * L * (h * (3 * h + m) + (h + m) * h) + 2.0 * 3 * h * h + 4.0 * L * L * h);
    f += 2.0 * 2 * h * h + 2.0 * img * h * c->out_channels * 4;
    return f * N;
}

static void fill(sd_tensor *t, uint64_t seed) {
    float *p = t->data;
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) p[i] = (float)gauss(&seed);
}

void sd_bench_flux_phase(const sd_bench_job *job, sd_backend *be, sd_st_file **f,
                         sd_bench_result *r) {
    sd_error err;
    sd_error_clear(&err);
    sd_flux *m = NULL;
    double t0 = sd_bench_now();
    if (sd_flux_load(be, *f, "", SD_F32, &m, &err)) {
        snprintf(r->msg, sizeof r->msg, "flux load: %s", err.msg);
        return;
    }
    r->load_s = sd_bench_now() - t0;
    sd_st_close(*f); /* the model's weights keep the mapping */
    *f = NULL;
    if (job->bf16) sd_backend_set_precision(be, SD_PREC_BF16);
    const sd_flux_config *c = sd_flux_get_config(m);
    r->flops = sd_bench_flux_flops(c, 1, (LATENT / 2) * (LATENT / 2), TXT_TOKENS);
    sd_tensor *x = sd_tensor_new4(SD_F32, 4, 1, c->in_channels, LATENT, LATENT);
    sd_tensor *ctx = sd_tensor_new4(SD_F32, 3, 1, TXT_TOKENS, c->context_in_dim, 0);
    sd_tensor *y = sd_tensor_new4(SD_F32, 2, 1, c->vec_in_dim, 0, 0);
    sd_bt *bx = NULL, *bc = NULL, *by = NULL;
    if (x && ctx && y) {
        fill(x, 1), fill(ctx, 2), fill(y, 3);
        bx = sd_bt_from_host(be, x, SD_F32);
        bc = sd_bt_from_host(be, ctx, SD_F32);
        by = sd_bt_from_host(be, y, SD_F32);
    }
    float sigma = 1.0f, guidance = 3.5f;
    if (!bx || !bc || !by) {
        snprintf(r->msg, sizeof r->msg, "flux: out of memory for the inputs");
    } else {
        for (int i = 0; i < job->repeat; i++) {
            sd_bt *out = NULL;
            t0 = sd_bench_now();
            double c0 = sd_bench_cpu_now();
            if (sd_flux_forward(m, bx, &sigma, bc, by, &guidance, &out, &err)) {
                snprintf(r->msg, sizeof r->msg, "flux forward: %s", err.msg);
                break;
            }
            if (strcmp(sd_backend_name(be), "cpu") != 0) { /* wait for a GPU */
                sd_tensor *h = sd_bt_to_host(out);
                sd_tensor_unref(h);
            }
            r->secs[r->n++] = sd_bench_now() - t0;
            r->cpu[r->ncpu++] = sd_bench_cpu_now() - c0;
            sd_bt_free(out);
        }
        r->ok = r->n == job->repeat;
    }
    sd_bt_free(bx), sd_bt_free(bc), sd_bt_free(by);
    sd_tensor_unref(x), sd_tensor_unref(ctx), sd_tensor_unref(y);
    sd_flux_free(m);
}
