/* bench_phases.c - the measured work of each phase, run inside one process.
 *
 * Every phase opens the checkpoint itself and loads only the models it
 * needs, so that (run in a forked child) its load time and peak RSS are its
 * own. Inputs are random but seeded: the work does not depend on values.
 * The txt2img phase is the KSampler path without the executor around it:
 * two CLIP encodes (positive, negative), euler / normal at cfg 8 through the
 * same guider and sampler code the KSampler node uses (batch 2 per step, as
 * ComfyUI's calc_cond_batch runs it), then the VAE decode.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "formats/safetensors.h"
#include "models/sampling/guider.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/rng.h"
#include "models/sampling/sampler.h"
#include "models/sampling/schedules.h"
#include "models/text/text_encode.h"

#define CTX_LEN 77
#define VAE_PREFIX "first_stage_model."

/* Seeded standard-normal fill (xorshift64* + Box-Muller). */
static void fill_normal(float *v, int64_t n, uint64_t seed, float scale)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i += 2) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
            u[k] = ((s * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
        }
        double r = sqrt(-2.0 * log(u[0] + 1e-300)), a = 6.283185307179586 * u[1];
        v[i] = (float)(r * cos(a)) * scale;
        if (i + 1 < n) v[i + 1] = (float)(r * sin(a)) * scale;
    }
}

static sd_tensor *rand_tensor(int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                              uint64_t seed, float scale)
{
    sd_tensor *t = sd_tensor_new4(SD_F32, ndim, d0, d1, d2, d3);
    if (t) fill_normal(t->data, sd_tensor_numel(t), seed, scale);
    return t;
}

static void fail(sd_bench_result *r, const char *what, const sd_error *err)
{
    char buf[SD_ERR_MSG_MAX + 256];
    r->ok = 0;
    snprintf(r->msg, sizeof r->msg, "%s: %s", what,
             err ? sd_error_format(err, buf, sizeof buf) : "failed");
}

/* A prompt as CLIP ids: start, `words` ordinary tokens, end, end-padding.
 * Tokenization itself is microseconds and not what is measured. */
static void prompt_ids(int32_t *ids, int words, int32_t first)
{
    ids[0] = SD_CLIP_BOS;
    for (int i = 1; i < CTX_LEN; i++) ids[i] = SD_CLIP_EOS;
    for (int i = 0; i < words && i + 2 < CTX_LEN; i++) ids[1 + i] = first + 37 * i;
}

/* ---- does the backend really compute in bf16? ------------------------------
 * The precision setting is only a request: a backend without a bf16 path
 * computes in f32 regardless. A bf16 GEMM rounds its operands, so a small
 * linear layer comes out different; identical bits mean no bf16 path. */
static int backend_has_bf16(sd_backend *be, char *why, size_t n)
{
    int have = 0;
    if (!sd_backend_supports_precision(be, SD_PREC_BF16)) {
        snprintf(why, n, "the %s backend has no bf16 compute path in this build%s",
                 sd_backend_name(be),
                 strcmp(sd_backend_name(be), "cpu") ? "" : " (built without oneDNN: SDFLOW_DNNL)");
        return 0;
    }
    sd_tensor *x = rand_tensor(2, 16, 320, 0, 0, 11, 1.0f);
    sd_tensor *w = rand_tensor(2, 320, 320, 0, 0, 12, 0.05f);
    sd_bt *bx = x ? sd_bt_from_host(be, x, SD_F32) : NULL;
    sd_bt *bw = w ? sd_bt_from_host(be, w, SD_F32) : NULL;
    sd_backend_set_precision(be, SD_PREC_F32);
    sd_bt *y32 = bx && bw ? sd_op_linear(bx, bw, NULL) : NULL;
    sd_backend_set_precision(be, SD_PREC_BF16);
    sd_bt *y16 = NULL;
    if (sd_backend_precision(be) != SD_PREC_BF16) {
        snprintf(why, n, "the %s backend does not accept bf16 precision", sd_backend_name(be));
    } else if (!y32 || !(y16 = sd_op_linear(bx, bw, NULL))) {
        snprintf(why, n, "linear under bf16 precision failed: %s",
                 sd_backend_error(be) ? sd_backend_error(be)->msg : "?");
    } else {
        sd_tensor *a = sd_bt_to_host(y32), *b = sd_bt_to_host(y16);
        if (a && b && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0)
            snprintf(why, n, "the %s backend has no bf16 compute path (bf16 results are "
                     "bit-identical to f32)", sd_backend_name(be));
        else
            have = a && b;
        sd_tensor_unref(a);
        sd_tensor_unref(b);
    }
    sd_backend_clear_error(be);
    sd_backend_set_precision(be, SD_PREC_F32);
    sd_bt_free(y16);
    sd_bt_free(y32);
    sd_bt_free(bx);
    sd_bt_free(bw);
    sd_tensor_unref(x);
    sd_tensor_unref(w);
    return have;
}

/* ---- phases ------------------------------------------------------------------ */

/* The loader may keep half-precision weights as stored even when asked for
 * F32 (when the backend computes with them): report what it did. */
static int unet_weight_dtype(sd_unet *u)
{
    sd_bt **p = sd_unet_param(u, "input_blocks.1.0.in_layers.2.weight");
    return p && *p ? (int)(*p)->dtype : -1;
}

/* The models own their (converted) weights once loaded: unmapping the file
 * keeps its pages out of the resident set the phase reports. */
static void close_file(sd_st_file **f)
{
    sd_st_close(*f);
    *f = NULL;
}

static void phase_unet(const sd_bench_job *job, sd_backend *be, sd_st_file **f,
                       sd_bench_result *r)
{
    sd_error err;
    sd_error_clear(&err);
    if (job->bf16) {
        if (!backend_has_bf16(be, r->msg, sizeof r->msg)) {
            r->na = 1;
            return;
        }
    }
    sd_unet *u = NULL;
    double t0 = sd_bench_now();
    if (sd_unet_load(be, *f, NULL, job->weights, &u, &err)) return fail(r, "unet load", &err);
    r->load_s = sd_bench_now() - t0;
    close_file(f);
    r->unet_wdtype = unet_weight_dtype(u);
    const sd_unet_config *cfg = sd_unet_get_config(u);
    int B = job->batch, lat = job->size / 8;
    r->flops = sd_bench_unet_flops(cfg, B, lat, lat, CTX_LEN);
    if (job->bf16) sd_backend_set_precision(be, SD_PREC_BF16);

    sd_tensor *x = rand_tensor(4, B, cfg->in_channels, lat, lat, 1, 1.0f);
    sd_tensor *ctx = rand_tensor(3, B, CTX_LEN, cfg->context_dim, 0, 2, 1.0f);
    sd_bt *bx = x ? sd_bt_from_host(be, x, SD_F32) : NULL;
    sd_bt *bc = ctx ? sd_bt_from_host(be, ctx, SD_F32) : NULL;
    /* SDXL: y = [pooled, size embeddings] as ComfyUI builds it for a
     * job->size square image; the pooled half is random. */
    sd_tensor *y = NULL;
    sd_bt *by = NULL;
    int y_bad = 0;
    if (cfg->adm_in_channels > 0) {
        int pooled_dim = cfg->adm_in_channels - 6 * 256;
        sd_tensor *pooled = pooled_dim > 0 ? rand_tensor(2, B, pooled_dim, 0, 0, 4, 1.0f) : NULL;
        float px = (float)job->size;
        sd_sdxl_size sz = {px, px, 0, 0, px, px};
        if (!pooled || sd_unet_sdxl_adm(pooled, &sz, &y, &err)) y_bad = 1;
        else by = sd_bt_from_host(be, y, SD_F32);
        y_bad |= !by;
        sd_tensor_unref(pooled);
    }
    float ts[64];
    for (int i = 0; i < B && i < 64; i++) ts[i] = 500.0f;
    if (y_bad) {
        if (!err.code) sd_error_set(&err, SD_ERR_NOMEM, "adm input y");
        fail(r, "unet y", &err);
    } else if (!bx || !bc || B > 64) {
        sd_error_set(&err, SD_ERR_NOMEM, "inputs");
        fail(r, "unet", &err);
    } else {
        for (int i = 0; i < job->repeat; i++) {
            sd_bt *out = NULL;
            t0 = sd_bench_now();
            if (sd_unet_forward(u, bx, ts, bc, by, NULL, &out, &err)) {
                fail(r, "unet forward", &err);
                break;
            }
            /* a GPU backend's ops are asynchronous: downloading the result
             * waits for them (on the CPU they are done already) */
            if (strcmp(sd_backend_name(be), "cpu") != 0) {
                sd_tensor *h = sd_bt_to_host(out);
                if (!h) {
                    sd_bt_free(out);
                    sd_backend_take_error(be, &err);
                    fail(r, "unet forward (synchronise)", &err);
                    break;
                }
                sd_tensor_unref(h);
            }
            r->secs[r->n++] = sd_bench_now() - t0;
            sd_bt_free(out);
        }
        r->ok = r->n == job->repeat;
    }
    sd_bt_free(bx);
    sd_bt_free(bc);
    sd_bt_free(by);
    sd_tensor_unref(x);
    sd_tensor_unref(ctx);
    sd_tensor_unref(y);
    sd_unet_free(u);
}

static void phase_vae(const sd_bench_job *job, sd_backend *be, sd_st_file **f, sd_bench_result *r)
{
    sd_error err;
    sd_error_clear(&err);
    if (job->bf16 && !backend_has_bf16(be, r->msg, sizeof r->msg)) {
        r->na = 1;
        return;
    }
    sd_vae *v = NULL;
    double t0 = sd_bench_now();
    if (sd_vae_load(be, *f, VAE_PREFIX, &v, &err)) return fail(r, "vae load", &err);
    r->load_s = sd_bench_now() - t0;
    close_file(f);
    if (job->bf16) sd_backend_set_precision(be, SD_PREC_BF16);
    const sd_vae_config *cfg = sd_vae_get_config(v);
    int lat = job->size / 8;
    r->flops = sd_bench_vae_decode_flops(cfg, 1, lat, lat);
    sd_tensor *z = rand_tensor(4, 1, cfg->embed_dim, lat, lat, 3, 1.0f / 0.18215f);
    for (int i = 0; z && i < job->repeat; i++) {
        sd_tensor *img = NULL;
        t0 = sd_bench_now();
        if (sd_vae_decode(v, z, &img, &err)) {
            fail(r, "vae decode", &err);
            break;
        }
        r->secs[r->n++] = sd_bench_now() - t0;
        sd_tensor_unref(img);
    }
    r->ok = z && r->n == job->repeat;
    sd_tensor_unref(z);
    sd_vae_free(v);
}

static sd_status load_clip(sd_backend *be, sd_st_file *f, sd_dtype weights, sd_clip **c,
                           sd_error *err)
{
    sd_clip_opts o;
    sd_clip_opts_default(&o);
    o.weight_dtype = weights;
    return sd_clip_load(be, f, SD_TE_PREFIX_SD1, &o, c, err);
}

/* cond [1, 77, D] for a prompt; ComfyUI's SD1 default layer ("last", final LN). */
static sd_status encode(sd_clip *c, int words, int32_t first, sd_tensor **cond, sd_error *err)
{
    int32_t ids[CTX_LEN];
    prompt_ids(ids, words, first);
    sd_clip_tokens in = {.n = 1, .len = CTX_LEN, .ids = ids, .vectors = NULL};
    sd_clip_output o = {0};
    sd_status rc = sd_clip_forward(c, &in, (sd_clip_layer){-1, 1}, &o, err);
    if (rc) return rc;
    *cond = sd_bt_to_host(o.hidden);
    sd_clip_output_free(&o);
    return *cond ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static void phase_clip(const sd_bench_job *job, sd_backend *be, sd_st_file **f,
                       sd_bench_result *r)
{
    sd_error err;
    sd_error_clear(&err);
    sd_clip *c = NULL;
    double t0 = sd_bench_now();
    if (load_clip(be, *f, job->weights, &c, &err)) return fail(r, "clip load", &err);
    r->load_s = sd_bench_now() - t0;
    close_file(f);
    r->flops = sd_bench_clip_flops(sd_clip_get_config(c), 1, CTX_LEN);
    for (int i = 0; i < job->repeat; i++) {
        sd_tensor *cond = NULL;
        t0 = sd_bench_now();
        if (encode(c, 12, 1000, &cond, &err)) {
            fail(r, "clip encode", &err);
            break;
        }
        r->secs[r->n++] = sd_bench_now() - t0;
        sd_tensor_unref(cond);
    }
    r->ok = r->n == job->repeat;
    sd_clip_free(c);
}

/* The guider's model call: every requested conditioning in one UNet batch. */
typedef struct t2i_model {
    sd_backend *be;
    sd_unet *unet;
    const sd_model_sampling *ms;
    const sd_tensor *cond[2]; /* positive, negative: [1, 77, D] */
} t2i_model;

static sd_status t2i_eval(void *ud, const sd_tensor *x, float sigma, const int *conds,
                          int n_conds, sd_tensor **outs, sd_error *err)
{
    t2i_model *m = ud;
    int64_t per = sd_tensor_numel(x), cn = sd_tensor_numel(m->cond[0]);
    sd_tensor *bx = sd_tensor_new4(SD_F32, 4, n_conds, x->shape[1], x->shape[2], x->shape[3]);
    sd_tensor *bc = sd_tensor_new4(SD_F32, 3, n_conds, m->cond[0]->shape[1],
                                   m->cond[0]->shape[2], 0);
    float ts[2];
    sd_status rc = SD_OK;
    if (!bx || !bc || n_conds > 2 || x->shape[0] != 1) {
        rc = sd_error_set(err, SD_ERR_INVALID, "txt2img bench: batch 1 latents, <= 2 conds");
        goto done;
    }
    for (int j = 0; j < n_conds; j++) {
        sd_ms_calculate_input(m->ms, sigma, x->data, (float *)bx->data + j * per, (size_t)per);
        memcpy((float *)bc->data + j * cn, m->cond[conds[j]]->data, (size_t)cn * sizeof(float));
        ts[j] = sd_ms_timestep(m->ms, sigma);
    }
    sd_bt *dx = sd_bt_from_host(m->be, bx, SD_F32), *dc = sd_bt_from_host(m->be, bc, SD_F32);
    sd_bt *dout = NULL;
    if (!dx || !dc) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    else rc = sd_unet_forward(m->unet, dx, ts, dc, NULL, NULL, &dout, err);
    sd_tensor *eps = rc ? NULL : sd_bt_to_host(dout);
    if (!rc && !eps) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (int j = 0; !rc && j < n_conds; j++)
        sd_ms_calculate_denoised(m->ms, sigma, (float *)eps->data + j * per, x->data,
                                 outs[j]->data, (size_t)per);
    sd_tensor_unref(eps);
    sd_bt_free(dout);
    sd_bt_free(dx);
    sd_bt_free(dc);
done:
    sd_tensor_unref(bx);
    sd_tensor_unref(bc);
    return rc;
}

/* One txt2img as a one-shot `sdflow run` does it: each model is loaded
 * when first needed and freed after its last use (the text encoder before
 * the UNet loads, the UNet before the VAE), so the phase's peak RSS is the
 * CLI's. Load times are inside the repetition; *load_s gets their sum. */
static sd_status txt2img_once(const sd_bench_job *job, sd_backend *be, const sd_model_sampling *ms,
                              double *sampling_s, double *load_s, int *unet_wdtype, sd_error *err)
{
    sd_tensor *pos = NULL, *neg = NULL, *noise = NULL, *lat = NULL, *img = NULL;
    sd_st_file *f = NULL;
    sd_clip *clip = NULL;
    sd_unet *unet = NULL;
    sd_vae *vae = NULL;
    float *sig = NULL;
    int nsig = 0;
    sd_guider g;
    int have_g = 0;
    *load_s = 0;
    double t0 = sd_bench_now();
    sd_status rc = sd_st_open(job->ckpt, &f, err);
    if (!rc) rc = load_clip(be, f, job->weights, &clip, err);
    *load_s += sd_bench_now() - t0;
    if (!rc) rc = encode(clip, 14, 2000, &pos, err);
    if (!rc) rc = encode(clip, 3, 3000, &neg, err);
    sd_clip_free(clip);
    clip = NULL;
    if (!rc) rc = sd_ksampler_sigmas(ms, "normal", "euler", 20, 1.0, &sig, &nsig, err);
    if (rc) goto done;
    t0 = sd_bench_now();
    rc = sd_unet_load(be, f, NULL, job->weights, &unet, err);
    *load_s += sd_bench_now() - t0;
    if (rc) goto done;
    *unet_wdtype = unet_weight_dtype(unet);
    int n_run = job->steps + 1 < nsig ? job->steps + 1 : nsig; /* a prefix of the schedule */
    int64_t shape[4] = {1, 4, job->size / 8, job->size / 8};
    if (!(noise = sd_noise_prepare(156680208700286ull, 4, shape, NULL, 0))) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "noise");
        goto done;
    }
    t2i_model m = {.be = be, .unet = unet, .ms = ms, .cond = {pos, neg}};
    sd_guider_init(&g, t2i_eval, &m, 8.0);
    have_g = 1;
    sd_sampler_params p;
    sd_sampler_params_init(&p);
    p.seed = 156680208700286ull;
    t0 = sd_bench_now();
    rc = sd_guider_sample(&g, ms, sd_sampler_find("euler"), sig, n_run, noise, NULL, NULL, &p,
                          &lat, err);
    *sampling_s = sd_bench_now() - t0;
    sd_guider_release(&g);
    have_g = 0;
    sd_unet_free(unet);
    unet = NULL;
    if (rc) goto done;
    t0 = sd_bench_now();
    rc = sd_vae_load(be, f, VAE_PREFIX, &vae, err);
    *load_s += sd_bench_now() - t0;
    close_file(&f);
    if (rc) goto done;
    float *lv = lat->data;
    for (int64_t i = 0; i < sd_tensor_numel(lat); i++) lv[i] /= SD_LATENT_SCALE_SD1;
    rc = sd_vae_decode(vae, lat, &img, err);
done:
    if (have_g) sd_guider_release(&g);
    sd_clip_free(clip);
    sd_unet_free(unet);
    sd_vae_free(vae);
    if (f) close_file(&f);
    free(sig);
    sd_tensor_unref(pos);
    sd_tensor_unref(neg);
    sd_tensor_unref(noise);
    sd_tensor_unref(lat);
    sd_tensor_unref(img);
    return rc;
}

static void phase_txt2img(const sd_bench_job *job, sd_backend *be, sd_st_file **f,
                          sd_bench_result *r)
{
    sd_error err;
    sd_error_clear(&err);
    close_file(f); /* each repetition opens the file, as one `sdflow run` does */
    sd_model_sampling *ms = malloc(sizeof *ms);
    if (!ms) return fail(r, "txt2img", NULL);
    sd_model_sampling_init(ms, SD_PRED_EPS);
    r->steps_run = job->steps;
    double samp[SD_BENCH_MAX_REPEAT], loads[SD_BENCH_MAX_REPEAT];
    for (int i = 0; i < job->repeat; i++) {
        double t0 = sd_bench_now();
        if (txt2img_once(job, be, ms, &samp[i], &loads[i], &r->unet_wdtype, &err)) {
            fail(r, "txt2img", &err);
            break;
        }
        r->secs[r->n++] = sd_bench_now() - t0;
    }
    r->ok = r->n == job->repeat;
    if (r->ok) {
        r->extra_s = sd_bench_median(samp, r->n);
        r->load_s = sd_bench_median(loads, r->n);
    }
    free(ms);
}

void sd_bench_run_phase(const sd_bench_job *job, sd_bench_result *r)
{
    memset(r, 0, sizeof *r);
    r->unet_wdtype = -1;
    sd_error err;
    sd_error_clear(&err);
    sd_backend *be = NULL;
    sd_st_file *f = NULL;
    if (sd_backend_new(job->device ? job->device : "cpu", job->threads, &be, &err)) {
        fail(r, "backend", &err);
    } else if (!sd_backend_accepts_dtype(be, job->weights)) {
        snprintf(r->msg, sizeof r->msg, "the %s backend does not take %s weights",
                 sd_backend_name(be), sd_dtype_name(job->weights));
    } else if (sd_st_open(job->ckpt, &f, &err)) {
        fail(r, "checkpoint", &err);
    } else {
        switch (job->kind) {
        case SD_BENCH_UNET: phase_unet(job, be, &f, r); break;
        case SD_BENCH_VAE: phase_vae(job, be, &f, r); break;
        case SD_BENCH_CLIP: phase_clip(job, be, &f, r); break;
        case SD_BENCH_TXT2IMG: phase_txt2img(job, be, &f, r); break;
        case SD_BENCH_FLUX:
            if (job->bf16 && !backend_has_bf16(be, r->msg, sizeof r->msg)) r->na = 1;
            else sd_bench_flux_phase(job, be, &f, r);
            break;
        }
    }
    if (f) sd_st_close(f);
    sd_backend_free(be);
    r->peak_kb = sd_bench_peak_kb();
}
