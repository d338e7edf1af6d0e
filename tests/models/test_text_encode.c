/* test_text_encode.c - CLIP loading and ComfyUI text-encoding semantics on
 * small random checkpoints built here (no reference data needed):
 *   - layout detection (HF with/without "text_model.", OpenCLIP), config
 *     from shapes, activation choice, load errors naming the key (missing,
 *     wrong shape, NaN), family detection (SD2's OpenCLIP-H included);
 *   - embeddings = token row + position row for positions 0..n-1 whatever
 *     position_ids say; pooled at the first end token (else the last slot);
 *     text_projection orientation in both layouts;
 *   - CLIPSetLastLayer: defaults per family, -1, -2, deeper than the model;
 *   - prompt weights: (z - z_empty) * w + z_empty, untouched where w == 1;
 *   - chunks: concatenated on the token axis, pooled from the first;
 *   - SDXL: channel concat (l first), bigG pooled projected, chunk counts cut
 *     to the shorter encoder, CLIPTextEncodeSDXL padding with empty chunks;
 *   - textual inversion: a vector equal to a token row encodes as that
 *     token, a vector of the wrong width is dropped and the chunk padded;
 *   - with the CLIP vocabulary ($SDFLOW_SHARED/data/clip) the text entry
 *     points, including "embedding:NAME" from a directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/text/text_encode.h"
#include "testutil.h"

#define VOCAB 49408
#define POS 77

static sd_backend *be;
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float frand(void) { /* uniform [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

/* ---- building checkpoints ------------------------------------------------------ */

/* corrupt: key whose element 3 becomes NaN; reshape: key stored one row short */
typedef struct {
    sd_st_writer *w;
    void *buf;
    const char *corrupt, *reshape;
} ckpt;

static sd_tensor *rand_tensor(int ndim, int64_t d0, int64_t d1, float scale, float offset) {
    sd_tensor *t = sd_tensor_new4(SD_F32, ndim, d0, d1, 0, 0);
    float *p = t->data;
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) p[i] = offset + scale * frand();
    return t;
}

static void add(ckpt *c, const char *prefix, const char *name, sd_tensor *t) {
    char key[256];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    if (c->corrupt && strcmp(key, c->corrupt) == 0) ((float *)t->data)[3] = NAN;
    if (c->reshape && strcmp(key, c->reshape) == 0) {
        sd_tensor_unref(t);
        t = rand_tensor(1, 7, 0, 1, 0);
    }
    sd_error err;
    CHECK_OK(sd_st_writer_add(c->w, key, t, &err), &err);
    sd_tensor_unref(t);
}

static void addr(ckpt *c, const char *prefix, const char *name, int ndim, int64_t d0, int64_t d1) {
    float scale = ndim == 2 ? 1.0f / sqrtf((float)d1) : 0.1f;
    add(c, prefix, name, rand_tensor(ndim, d0, d1, scale, 0.0f));
}

static void addln(ckpt *c, const char *prefix, const char *base, int64_t w) {
    char n[200];
    snprintf(n, sizeof n, "%s.weight", base);
    add(c, prefix, n, rand_tensor(1, w, 0, 0.1f, 1.0f));
    snprintf(n, sizeof n, "%s.bias", base);
    add(c, prefix, n, rand_tensor(1, w, 0, 0.1f, 0.0f));
}

/* HF CLIPTextModel under prefix (tm = "text_model." or ""); proj > 0 adds
 * text_projection.weight [proj, W]. Token rows get a larger scale so a
 * mix-up between rows would show. */
static void add_hf(ckpt *c, const char *prefix, const char *tm, int vocab, int W, int layers,
                   int F, int proj) {
    char p[200], n[200];
    snprintf(p, sizeof p, "%s%s", prefix, tm);
    add(c, p, "embeddings.token_embedding.weight", rand_tensor(2, vocab, W, 0.5f, 0.0f));
    add(c, p, "embeddings.position_embedding.weight", rand_tensor(2, POS, W, 0.2f, 0.0f));
    sd_tensor *ids = sd_tensor_new4(SD_I64, 2, 1, POS, 0, 0);
    for (int i = 0; i < POS; i++) ((int64_t *)ids->data)[i] = POS - 1 - i; /* must be ignored */
    add(c, p, "embeddings.position_ids", ids);
    for (int l = 0; l < layers; l++) {
        const char *lin[][2] = {{"self_attn.q_proj", "q"}, {"self_attn.k_proj", "k"},
                                {"self_attn.v_proj", "v"}, {"self_attn.out_proj", "o"}};
        for (int i = 0; i < 4; i++) {
            snprintf(n, sizeof n, "encoder.layers.%d.%s.weight", l, lin[i][0]);
            addr(c, p, n, 2, W, W);
            snprintf(n, sizeof n, "encoder.layers.%d.%s.bias", l, lin[i][0]);
            addr(c, p, n, 1, W, 0);
        }
        snprintf(n, sizeof n, "encoder.layers.%d.layer_norm1", l);
        addln(c, p, n, W);
        snprintf(n, sizeof n, "encoder.layers.%d.layer_norm2", l);
        addln(c, p, n, W);
        snprintf(n, sizeof n, "encoder.layers.%d.mlp.fc1.weight", l);
        addr(c, p, n, 2, F, W);
        snprintf(n, sizeof n, "encoder.layers.%d.mlp.fc1.bias", l);
        addr(c, p, n, 1, F, 0);
        snprintf(n, sizeof n, "encoder.layers.%d.mlp.fc2.weight", l);
        addr(c, p, n, 2, W, F);
        snprintf(n, sizeof n, "encoder.layers.%d.mlp.fc2.bias", l);
        addr(c, p, n, 1, W, 0);
    }
    addln(c, p, "final_layer_norm", W);
    if (proj) addr(c, prefix, "text_projection.weight", 2, proj, W);
}

/* OpenCLIP text tower under prefix, text_projection [W, proj]. */
static void add_openclip(ckpt *c, const char *p, int W, int layers, int F, int proj) {
    char n[200];
    add(c, p, "token_embedding.weight", rand_tensor(2, VOCAB, W, 0.5f, 0.0f));
    add(c, p, "positional_embedding", rand_tensor(2, POS, W, 0.2f, 0.0f));
    for (int l = 0; l < layers; l++) {
        snprintf(n, sizeof n, "transformer.resblocks.%d.attn.in_proj_weight", l);
        addr(c, p, n, 2, 3 * W, W);
        snprintf(n, sizeof n, "transformer.resblocks.%d.attn.in_proj_bias", l);
        addr(c, p, n, 1, 3 * W, 0);
        snprintf(n, sizeof n, "transformer.resblocks.%d.attn.out_proj.weight", l);
        addr(c, p, n, 2, W, W);
        snprintf(n, sizeof n, "transformer.resblocks.%d.attn.out_proj.bias", l);
        addr(c, p, n, 1, W, 0);
        snprintf(n, sizeof n, "transformer.resblocks.%d.ln_1", l);
        addln(c, p, n, W);
        snprintf(n, sizeof n, "transformer.resblocks.%d.ln_2", l);
        addln(c, p, n, W);
        snprintf(n, sizeof n, "transformer.resblocks.%d.mlp.c_fc.weight", l);
        addr(c, p, n, 2, F, W);
        snprintf(n, sizeof n, "transformer.resblocks.%d.mlp.c_fc.bias", l);
        addr(c, p, n, 1, F, 0);
        snprintf(n, sizeof n, "transformer.resblocks.%d.mlp.c_proj.weight", l);
        addr(c, p, n, 2, W, F);
        snprintf(n, sizeof n, "transformer.resblocks.%d.mlp.c_proj.bias", l);
        addr(c, p, n, 1, W, 0);
    }
    addln(c, p, "ln_final", W);
    addr(c, p, "text_projection", 2, W, proj);
    add(c, p, "logit_scale", sd_tensor_new(SD_F32, 0, NULL));
}

static ckpt ckpt_new(void) { return (ckpt){sd_st_writer_new(), NULL, NULL, NULL}; }

static sd_st_file *finish(ckpt *c, const char *name) {
    size_t size = 0;
    sd_error err;
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_writer_to_memory(c->w, &c->buf, &size, &err), &err);
    sd_st_writer_free(c->w);
    c->w = NULL;
    if (c->buf) CHECK_OK(sd_st_open_memory(c->buf, size, name, &f, &err), &err);
    return f;
}

static void ckpt_close(ckpt *c, sd_st_file *f) {
    sd_st_close(f);
    free(c->buf);
    c->buf = NULL;
}

/* ---- helpers -------------------------------------------------------------------- */

/* Tokens of one chunk: BOS, ids..., EOS, pad. */
static void fill_chunk(sd_prompt_token *t, const int32_t *ids, int n, int32_t pad) {
    for (int j = 0; j < POS; j++) {
        int32_t id = j == 0 ? SD_CLIP_BOS : j <= n ? ids[j - 1] : j == n + 1 ? SD_CLIP_EOS : pad;
        t[j] = (sd_prompt_token){id, -1, 0, j >= 1 && j <= n ? j : 0, 1.0};
    }
}

static sd_prompt_tokens *make_tokens(int chunks) {
    sd_prompt_tokens *t = calloc(1, sizeof *t);
    t->n_chunks = chunks;
    t->chunk_len = POS;
    t->tokens = calloc((size_t)chunks * POS, sizeof *t->tokens);
    return t;
}

static sd_prompt_tokens *tokens_of(const int32_t *ids, int n, int32_t pad) {
    sd_prompt_tokens *t = make_tokens(1);
    fill_chunk(t->tokens, ids, n, pad);
    return t;
}

/* max |a - b| over equal shapes, or INFINITY. */
static double maxdiff(const sd_tensor *a, const sd_tensor *b) {
    if (!a || !b || !sd_tensor_same_shape(a, b)) return INFINITY;
    double m = 0;
    const float *x = a->data, *y = b->data;
    for (int64_t i = 0; i < sd_tensor_numel(a); i++) {
        double d = fabs((double)x[i] - (double)y[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* Rows [r0, r1) of the token axis of [1, L, C] (or channels [c0, c1)). */
static sd_tensor *sub(const sd_tensor *t, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    int64_t C = t->shape[2];
    sd_tensor *o = sd_tensor_new4(SD_F32, 3, 1, r1 - r0, c1 - c0, 0);
    for (int64_t r = r0; r < r1; r++)
        memcpy((float *)o->data + (r - r0) * (c1 - c0), (const float *)t->data + r * C + c0,
               (size_t)(c1 - c0) * sizeof(float));
    return o;
}

static sd_tensor *enc(const sd_text_encoder *te, const sd_prompt_tokens *l,
                      const sd_prompt_tokens *g, int skip, sd_tensor **pooled) {
    sd_tensor *c = NULL, *p = NULL;
    sd_error err;
    CHECK_OK(sd_text_encode_tokens(te, l, g, skip, NULL, &c, &p, &err), &err);
    if (pooled) *pooled = p;
    else sd_tensor_unref(p);
    return c;
}

/* Raw forward of one sequence; returns host copies. */
static void fwd(const sd_clip *clip, const int32_t *ids, const float *const *vecs,
                sd_clip_layer layer, sd_tensor **hidden, sd_tensor **pooled, sd_tensor **proj) {
    sd_clip_tokens in = {1, POS, ids, vecs};
    sd_clip_output o;
    sd_error err;
    CHECK_OK(sd_clip_forward((sd_clip *)clip, &in, layer, &o, &err), &err);
    *hidden = o.hidden ? sd_bt_to_host(o.hidden) : NULL;
    if (pooled) *pooled = o.pooled ? sd_bt_to_host(o.pooled) : NULL;
    if (proj) *proj = o.projected ? sd_bt_to_host(o.projected) : NULL;
    sd_clip_output_free(&o);
}

static void chunk_ids(int32_t *out, const int32_t *ids, int n, int32_t pad) {
    for (int j = 0; j < POS; j++)
        out[j] = j == 0 ? SD_CLIP_BOS : j <= n ? ids[j - 1] : j == n + 1 ? SD_CLIP_EOS : pad;
}

static const int32_t words[] = {320, 1125, 539, 550, 18376, 6765, 320, 4558}; /* any ids */
#define NW ((int)(sizeof words / sizeof words[0]))

/* ---- tests -------------------------------------------------------------------------- */

static void count_warn(void *ud, const char *msg) {
    (void)msg;
    ++*(int *)ud;
}

typedef struct {
    sd_tensor *emb;
} emb_tap;

static void on_tap(void *user, const char *name, const sd_bt *t) {
    emb_tap *e = user;
    if (strcmp(name, "embeddings") == 0 && !e->emb) e->emb = sd_bt_to_host(t);
}

static void free_all(sd_tensor **ts, size_t n) {
    for (size_t i = 0; i < n; i++) sd_tensor_unref(ts[i]);
}

static void test_detection_and_errors(void) {
    sd_error err;
    sd_clip *c = NULL;
    sd_text_encoder *te = NULL;
    /* HF without "text_model.", a 1024-wide model (GELU by default), HF projection */
    ckpt k = ckpt_new();
    add_hf(&k, "te.", "", VOCAB, 64, 2, 96, 0);
    add_hf(&k, "big.", "text_model.", 300, 1024, 1, 64, 32);
    sd_st_file *f = finish(&k, "hf.safetensors");
    CHECK_OK(sd_clip_load(be, f, "te.", NULL, &c, &err), &err);
    if (c) {
        const sd_clip_config *cfg = sd_clip_get_config(c);
        CHECK(cfg->layout == SD_CLIP_LAYOUT_HF && cfg->hidden == 64 && cfg->heads == 1 &&
              cfg->layers == 2 && cfg->mlp == 96 && cfg->vocab == VOCAB && cfg->positions == POS &&
              cfg->act == SD_CLIP_ACT_QUICK_GELU && cfg->proj_dim == 0);
    }
    sd_clip_free(c);
    c = NULL;
    CHECK_OK(sd_clip_load(be, f, "big.", NULL, &c, &err), &err);
    if (c) {
        const sd_clip_config *cfg = sd_clip_get_config(c);
        CHECK(cfg->heads == 16 && cfg->act == SD_CLIP_ACT_GELU && cfg->proj_dim == 32);
        /* HF text_projection.weight is a Linear [P, W]: projected = pooled @ W^T */
        int32_t ids[POS];
        for (int j = 0; j < POS; j++) ids[j] = j < 5 ? 10 + j : 299;
        sd_tensor *h = NULL, *p = NULL, *pr = NULL;
        sd_clip_tokens in = {1, POS, ids, NULL};
        sd_clip_output o;
        CHECK_OK(sd_clip_forward(c, &in, (sd_clip_layer){-1, 1}, &o, &err), &err);
        h = o.hidden ? sd_bt_to_host(o.hidden) : NULL;
        p = o.pooled ? sd_bt_to_host(o.pooled) : NULL;
        pr = o.projected ? sd_bt_to_host(o.projected) : NULL;
        sd_clip_output_free(&o);
        sd_tensor *wp = sd_st_tensor_f32(f, "big.text_projection.weight", &err);
        double worst = INFINITY;
        if (p && pr && wp && pr->shape[1] == 32) {
            worst = 0;
            for (int q = 0; q < 32; q++) {
                double acc = 0;
                for (int i = 0; i < 1024; i++)
                    acc += (double)((float *)p->data)[i] * ((float *)wp->data)[q * 1024 + i];
                double d = fabs(acc - ((float *)pr->data)[q]);
                if (d > worst) worst = d;
            }
        }
        CHECK_MSG(worst < 1e-4, "HF projection: %g", worst);
        sd_tensor *fr[] = {h, p, pr, wp};
        free_all(fr, 4);
    }
    sd_clip_free(c);
    c = NULL;
    sd_clip_opts o;
    sd_clip_opts_default(&o);
    o.act = SD_CLIP_ACT_GELU;
    CHECK_OK(sd_clip_load(be, f, "te.", &o, &c, &err), &err);
    CHECK(c && sd_clip_get_config(c)->act == SD_CLIP_ACT_GELU);
    sd_clip_free(c);
    c = NULL;
    CHECK(sd_clip_load(be, f, "nothing.", NULL, &c, &err) == SD_ERR_NOT_FOUND && !c);
    CHECK(strstr(err.msg, "hf.safetensors") != NULL);
    CHECK(sd_text_encoder_load(be, f, NULL, &te, &err) == SD_ERR_NOT_FOUND && !te);
    ckpt_close(&k, f);

    /* a NaN and a wrong shape are named by key */
    k = ckpt_new();
    k.corrupt = "x.text_model.encoder.layers.0.mlp.fc2.weight";
    k.reshape = "s.text_model.encoder.layers.0.mlp.fc1.bias";
    add_hf(&k, "x.", "text_model.", 500, 64, 1, 96, 0);
    add_hf(&k, "s.", "text_model.", 500, 64, 1, 96, 0);
    f = finish(&k, "bad.safetensors");
    CHECK(sd_clip_load(be, f, "x.", NULL, &c, &err) == SD_ERR_FORMAT && !c);
    CHECK_MSG(strstr(err.msg, k.corrupt) && strstr(err.msg, "NaN"), "NaN error: %s", err.msg);
    CHECK(sd_clip_load(be, f, "s.", NULL, &c, &err) == SD_ERR_FORMAT && !c);
    CHECK_MSG(strstr(err.msg, k.reshape) != NULL, "shape error: %s", err.msg);
    ckpt_close(&k, f);

    /* SD2's OpenCLIP tower alone is an SD2 encoder; a refiner's bigG alone is found */
    k = ckpt_new();
    add_openclip(&k, "cond_stage_model.model.", 64, 1, 96, 64);
    f = finish(&k, "sd2.safetensors");
    CHECK_OK(sd_text_encoder_load(be, f, NULL, &te, &err), &err);
    CHECK(te && sd_text_encoder_kind(te) == SD_TE_SD2 && !sd_text_encoder_clip_l(te) &&
          sd_text_encoder_cond_dim(te) == 64 && sd_text_encoder_pooled_dim(te) == 64);
    sd_text_encoder_free(te);
    te = NULL;
    ckpt_close(&k, f);
    k = ckpt_new();
    add_openclip(&k, SD_TE_PREFIX_REFINER_G, 128, 2, 160, 48);
    f = finish(&k, "refiner.safetensors");
    CHECK_OK(sd_text_encoder_load(be, f, NULL, &te, &err), &err);
    CHECK(te && sd_text_encoder_kind(te) == SD_TE_SDXL_REFINER && !sd_text_encoder_clip_l(te) &&
          sd_text_encoder_cond_dim(te) == 128 && sd_text_encoder_pooled_dim(te) == 48);
    if (te) {
        const sd_clip_config *cfg = sd_clip_get_config(sd_text_encoder_clip_g(te));
        CHECK(cfg->layout == SD_CLIP_LAYOUT_OPENCLIP && cfg->heads == 2 && cfg->layers == 2 &&
              cfg->mlp == 160 && cfg->act == SD_CLIP_ACT_GELU && cfg->proj_dim == 48);
        sd_prompt_tokens *t = tokens_of(words, NW, 0);
        sd_tensor *cond = NULL, *pooled = NULL;
        CHECK_OK(sd_text_encode_tokens(te, NULL, t, 0, NULL, &cond, &pooled, &err), &err);
        CHECK(cond && cond->shape[1] == POS && cond->shape[2] == 128 && pooled &&
              pooled->shape[1] == 48);
        sd_tensor_unref(cond);
        sd_tensor_unref(pooled);
        sd_prompt_tokens_free(t);
    }
    sd_text_encoder_free(te);
    te = NULL;
    ckpt_close(&k, f);

    /* wrong parts for a family (and ownership taken on failure) */
    CHECK(sd_text_encoder_new(SD_TE_SDXL, NULL, NULL, NULL, &te, &err) == SD_ERR_INVALID && !te);
}

/* SD1-style model: embeddings, pooled slot, clip skip, weights, chunks, TI. */
static void test_sd1(void) {
    ckpt k = ckpt_new();
    add_hf(&k, SD_TE_PREFIX_SD1, "text_model.", VOCAB, 64, 3, 128, 0);
    sd_st_file *f = finish(&k, "sd1.safetensors");
    sd_error err;
    sd_text_encoder *te = NULL;
    CHECK_OK(sd_text_encoder_load(be, f, NULL, &te, &err), &err);
    if (!te) {
        ckpt_close(&k, f);
        return;
    }
    CHECK(sd_text_encoder_kind(te) == SD_TE_SD1 && !sd_text_encoder_clip_g(te));
    sd_clip *clip = (sd_clip *)sd_text_encoder_clip_l(te);
    sd_tensor *tok_emb = sd_st_tensor_f32(f, SD_TE_PREFIX_SD1 "text_model.embeddings.token_embedding.weight", &err);
    sd_tensor *pos_emb = sd_st_tensor_f32(f, SD_TE_PREFIX_SD1 "text_model.embeddings.position_embedding.weight", &err);
    const int W = 64;

    /* embeddings = token row + position row j, whatever position_ids say */
    int32_t ids[POS];
    chunk_ids(ids, words, NW, SD_CLIP_EOS);
    emb_tap et = {NULL};
    sd_clip_set_tap(clip, on_tap, &et);
    sd_tensor *pooled = NULL, *last = NULL;
    fwd(clip, ids, NULL, (sd_clip_layer){-1, 1}, &last, &pooled, NULL);
    sd_clip_set_tap(clip, NULL, NULL);
    int emb_ok = et.emb != NULL;
    for (int j = 0; emb_ok && j < POS; j++)
        for (int ch = 0; ch < W; ch++)
            emb_ok &= ((float *)et.emb->data)[j * W + ch] ==
                      ((float *)tok_emb->data)[(size_t)ids[j] * W + ch] +
                          ((float *)pos_emb->data)[j * W + ch];
    CHECK_MSG(emb_ok, "embeddings are not token row + position row");
    sd_tensor_unref(et.emb);
    /* pooled = final-LN last layer at the first EOS (slot NW + 1) */
    sd_tensor *row = last ? sub(last, NW + 1, NW + 2, 0, W) : NULL;
    CHECK(row && pooled && memcmp(row->data, pooled->data, (size_t)W * 4) == 0);
    sd_tensor_unref(row);
    /* no end token at all: the last slot */
    int32_t noeos[POS];
    for (int j = 0; j < POS; j++) noeos[j] = words[j % NW];
    sd_tensor *l2 = NULL, *p2 = NULL;
    fwd(clip, noeos, NULL, (sd_clip_layer){-1, 1}, &l2, &p2, NULL);
    row = l2 ? sub(l2, POS - 1, POS, 0, W) : NULL;
    CHECK(row && p2 && memcmp(row->data, p2->data, (size_t)W * 4) == 0);
    sd_tensor *fr0[] = {row, l2, p2};
    free_all(fr0, 3);

    /* clip skip: SD1 default = last with LN = -1 = deeper than the model */
    sd_prompt_tokens *t = tokens_of(words, NW, SD_CLIP_EOS);
    sd_tensor *p_def = NULL, *p_skip = NULL;
    sd_tensor *c_def = enc(te, t, NULL, 0, &p_def);
    sd_tensor *c_m1 = enc(te, t, NULL, -1, NULL);
    sd_tensor *c_m24 = enc(te, t, NULL, -24, NULL);
    sd_tensor *c_m2 = enc(te, t, NULL, -2, &p_skip);
    sd_tensor *c_m3 = enc(te, t, NULL, -3, NULL);
    CHECK(maxdiff(c_def, last) == 0 && maxdiff(c_m1, c_def) == 0 && maxdiff(c_m24, c_def) == 0);
    CHECK(maxdiff(p_def, pooled) == 0 && maxdiff(p_skip, pooled) == 0); /* pooled ignores skip */
    sd_tensor *pen_ln = NULL, *pen = NULL, *first_ln = NULL;
    fwd(clip, ids, NULL, (sd_clip_layer){-2, 1}, &pen_ln, NULL, NULL);
    fwd(clip, ids, NULL, (sd_clip_layer){-2, 0}, &pen, NULL, NULL);
    fwd(clip, ids, NULL, (sd_clip_layer){-3, 1}, &first_ln, NULL, NULL);
    CHECK(maxdiff(c_m2, pen_ln) == 0 && maxdiff(c_m3, first_ln) == 0);
    CHECK(maxdiff(pen, pen_ln) > 1e-3); /* the LN really is applied */
    CHECK(maxdiff(c_m2, c_def) > 1e-3);
    sd_tensor *cx = NULL, *px = NULL;
    CHECK(sd_text_encode_tokens(te, t, NULL, 1, NULL, &cx, &px, &err) == SD_ERR_INVALID && !cx);
    CHECK(sd_text_encode_tokens(te, t, t, 0, NULL, &cx, &px, &err) == SD_ERR_INVALID && !cx);
    sd_clip_output o;
    sd_clip_tokens bad_in = {1, POS, ids, NULL};
    CHECK(sd_clip_forward(clip, &bad_in, (sd_clip_layer){-4, 1}, &o, &err) == SD_ERR_INVALID);
    int32_t oov[POS];
    memcpy(oov, ids, sizeof oov);
    oov[3] = VOCAB;
    bad_in.ids = oov;
    CHECK(sd_clip_forward(clip, &bad_in, (sd_clip_layer){-1, 1}, &o, &err) == SD_ERR_INVALID);
    CHECK(strstr(err.msg, "49408") != NULL);
    bad_in.ids = ids;
    bad_in.len = POS + 1;
    CHECK(sd_clip_forward(clip, &bad_in, (sd_clip_layer){-1, 1}, &o, &err) == SD_ERR_INVALID);

    /* prompt weights: tokens with w != 1 interpolate against the empty prompt */
    sd_prompt_tokens *tw = tokens_of(words, NW, SD_CLIP_EOS);
    tw->tokens[2].weight = 1.2100000000000002;
    tw->tokens[5].weight = 0.5;
    sd_tensor *p_w = NULL;
    sd_tensor *c_w = enc(te, tw, NULL, 0, &p_w);
    int32_t empty_ids[POS];
    chunk_ids(empty_ids, NULL, 0, SD_CLIP_EOS);
    sd_tensor *c_empty = NULL;
    fwd(clip, empty_ids, NULL, (sd_clip_layer){-1, 1}, &c_empty, NULL, NULL);
    double worst_same = INFINITY, worst_w = INFINITY, moved = 0;
    if (c_w && c_def && c_empty) {
        const float *z = c_def->data, *e = c_empty->data, *y = c_w->data;
        worst_same = worst_w = 0;
        for (int j = 0; j < POS; j++) {
            double w = tw->tokens[j].weight;
            for (int ch = 0; ch < W; ch++) {
                int i = j * W + ch;
                float want = w == 1.0 ? z[i] : (z[i] - e[i]) * (float)w + e[i];
                double d = fabs((double)y[i] - want);
                if (w == 1.0 && d > worst_same) worst_same = d;
                if (w != 1.0 && d > worst_w) worst_w = d;
                if (w != 1.0 && fabs((double)y[i] - z[i]) > moved) moved = fabs((double)y[i] - z[i]);
            }
        }
    }
    CHECK_MSG(worst_same <= 1e-5 && worst_w <= 1e-5 && moved > 1e-3, "weights: %g %g %g",
              worst_same, worst_w, moved);
    CHECK(maxdiff(p_w, pooled) <= 1e-5); /* pooled is not weighted */

    /* two chunks: concatenated, pooled from the first */
    sd_prompt_tokens *t2 = make_tokens(2);
    fill_chunk(t2->tokens, words, NW, SD_CLIP_EOS);
    fill_chunk(t2->tokens + POS, words + 2, 3, SD_CLIP_EOS);
    sd_tensor *p_two = NULL;
    sd_tensor *c_two = enc(te, t2, NULL, 0, &p_two);
    CHECK(c_two && c_two->ndim == 3 && c_two->shape[0] == 1 && c_two->shape[1] == 2 * POS &&
          c_two->shape[2] == W);
    int32_t ids2[POS];
    chunk_ids(ids2, words + 2, 3, SD_CLIP_EOS);
    sd_tensor *second = NULL;
    fwd(clip, ids2, NULL, (sd_clip_layer){-1, 1}, &second, NULL, NULL);
    sd_tensor *a = c_two ? sub(c_two, 0, POS, 0, W) : NULL;
    sd_tensor *b = c_two ? sub(c_two, POS, 2 * POS, 0, W) : NULL;
    CHECK(maxdiff(a, c_def) <= 1e-5 && maxdiff(b, second) <= 1e-5 && maxdiff(p_two, pooled) <= 1e-5);

    /* textual inversion: rows equal to token rows encode as those tokens */
    sd_prompt_tokens *tt = tokens_of(words, NW, SD_CLIP_EOS);
    tt->n_embeds = 1;
    tt->embeds = calloc(1, sizeof *tt->embeds);
    sd_tensor *vec = sd_tensor_new4(SD_F32, 2, 2, W, 0, 0);
    for (int r = 0; r < 2; r++)
        memcpy((float *)vec->data + r * W, (const float *)tok_emb->data + (size_t)words[3 + r] * W,
               (size_t)W * sizeof(float));
    tt->embeds[0] = (sd_prompt_embedding){strdup("same"), strdup("same.safetensors"), vec};
    for (int r = 0; r < 2; r++) tt->tokens[4 + r] = (sd_prompt_token){-1, 0, r, 4, 1.0};
    sd_tensor *p_ti = NULL;
    sd_tensor *c_ti = enc(te, tt, NULL, 0, &p_ti);
    CHECK_MSG(maxdiff(c_ti, c_def) == 0 && maxdiff(p_ti, pooled) == 0,
              "embedding vectors equal to token rows: %g", maxdiff(c_ti, c_def));
    /* a 768-wide vector on a 64-wide model is dropped; the chunk shifts left */
    int warned = 0;
    sd_text_encode_opts eo = {NULL, 0, count_warn, &warned};
    sd_prompt_tokens *td = tokens_of(words, NW, SD_CLIP_EOS);
    td->n_embeds = 1;
    td->embeds = calloc(1, sizeof *td->embeds);
    td->embeds[0] = (sd_prompt_embedding){strdup("wide"), strdup("wide.safetensors"),
                                          rand_tensor(2, 1, 768, 1, 0)};
    td->tokens[3] = (sd_prompt_token){-1, 0, 0, 3, 1.0};
    sd_tensor *c_drop = NULL, *p_drop = NULL;
    CHECK_OK(sd_text_encode_tokens(te, td, NULL, 0, &eo, &c_drop, &p_drop, &err), &err);
    int32_t without[NW - 1];
    for (int i = 0, m = 0; i < NW; i++)
        if (i != 2) without[m++] = words[i]; /* slot 3 holds word 2 */
    sd_prompt_tokens *tn = tokens_of(without, NW - 1, SD_CLIP_EOS);
    sd_tensor *p_without = NULL;
    sd_tensor *c_without = enc(te, tn, NULL, 0, &p_without);
    CHECK(warned == 1);
    CHECK_MSG(maxdiff(c_drop, c_without) == 0 && maxdiff(p_drop, p_without) == 0,
              "dropped embedding: %g", maxdiff(c_drop, c_without));

    sd_tensor *fr[] = {tok_emb, pos_emb, pooled, last, p_def, p_skip, c_def, c_m1, c_m24,
                       c_m2, c_m3, pen_ln, pen, first_ln, p_w, c_w, c_empty, p_two, c_two,
                       second, a, b, p_ti, c_ti, c_drop, p_drop, c_without, p_without};
    free_all(fr, sizeof fr / sizeof fr[0]);
    sd_prompt_tokens *tf[] = {t, tw, t2, tt, td, tn};
    for (size_t i = 0; i < sizeof tf / sizeof tf[0]; i++) sd_prompt_tokens_free(tf[i]);
    sd_text_encoder_free(te);
    ckpt_close(&k, f);
}

static sd_st_file *build_sdxl(ckpt *k) {
    *k = ckpt_new();
    add_hf(k, SD_TE_PREFIX_SDXL_L, "text_model.", VOCAB, 64, 3, 128, 0);
    add_openclip(k, SD_TE_PREFIX_SDXL_G, 128, 3, 192, 96);
    return finish(k, "sdxl.safetensors");
}

/* pooled [1, W] @ T [W, P] on the host vs projected [1, P]. */
static double proj_err(const sd_tensor *pooled, const sd_tensor *T, const sd_tensor *projected) {
    if (!pooled || !T || !projected) return INFINITY;
    int64_t W = T->shape[0], P = T->shape[1];
    if (projected->shape[1] != P || pooled->shape[1] != W) return INFINITY;
    double worst = 0;
    for (int64_t q = 0; q < P; q++) {
        double acc = 0;
        for (int64_t i = 0; i < W; i++)
            acc += (double)((const float *)pooled->data)[i] * ((const float *)T->data)[i * P + q];
        double d = fabs(acc - ((const float *)projected->data)[q]);
        if (d > worst) worst = d;
    }
    return worst;
}

static void test_sdxl(void) {
    ckpt k;
    sd_st_file *f = build_sdxl(&k);
    sd_error err;
    sd_text_encoder *te = NULL;
    CHECK_OK(sd_text_encoder_load(be, f, NULL, &te, &err), &err);
    if (!te) {
        ckpt_close(&k, f);
        return;
    }
    CHECK(sd_text_encoder_kind(te) == SD_TE_SDXL && sd_text_encoder_cond_dim(te) == 192 &&
          sd_text_encoder_pooled_dim(te) == 96);
    const sd_clip *cl = sd_text_encoder_clip_l(te), *cg = sd_text_encoder_clip_g(te);
    CHECK(sd_clip_get_config(cg)->layout == SD_CLIP_LAYOUT_OPENCLIP &&
          sd_clip_get_config(cg)->heads == 2 && sd_clip_get_config(cg)->proj_dim == 96);
    int32_t idl[POS], idg[POS];
    chunk_ids(idl, words, NW, SD_CLIP_EOS);
    chunk_ids(idg, words, NW, 0);
    sd_prompt_tokens *l = tokens_of(words, NW, SD_CLIP_EOS), *g = tokens_of(words, NW, 0);

    /* default: both layer -2 without LN, l channels first; pooled = g projected */
    sd_tensor *p_def = NULL;
    sd_tensor *c_def = enc(te, l, g, 0, &p_def);
    sd_tensor *c_m2 = enc(te, l, g, -2, NULL);
    CHECK(c_def && c_def->shape[1] == POS && c_def->shape[2] == 192 && p_def &&
          p_def->shape[1] == 96);
    sd_tensor *hl = NULL, *hg = NULL, *gp = NULL, *gproj = NULL;
    fwd(cl, idl, NULL, (sd_clip_layer){-2, 0}, &hl, NULL, NULL);
    fwd(cg, idg, NULL, (sd_clip_layer){-2, 0}, &hg, &gp, &gproj);
    sd_tensor *cl_part = c_def ? sub(c_def, 0, POS, 0, 64) : NULL;
    sd_tensor *cg_part = c_def ? sub(c_def, 0, POS, 64, 192) : NULL;
    CHECK(maxdiff(cl_part, hl) <= 1e-6 && maxdiff(cg_part, hg) <= 1e-6);
    CHECK(maxdiff(c_m2, c_def) == 0 && maxdiff(p_def, gproj) <= 1e-6);
    sd_tensor *T = sd_st_tensor_f32(f, SD_TE_PREFIX_SDXL_G "text_projection", &err);
    CHECK_MSG(proj_err(gp, T, gproj) < 1e-4, "OpenCLIP projection: %g", proj_err(gp, T, gproj));

    /* -1: last layer, still without LN; deeper than the model: final-LN last */
    sd_tensor *c_m1 = enc(te, l, g, -1, NULL), *c_m24 = enc(te, l, g, -24, NULL);
    sd_tensor *l_noln = NULL, *g_noln = NULL, *l_ln = NULL, *g_ln = NULL;
    fwd(cl, idl, NULL, (sd_clip_layer){-1, 0}, &l_noln, NULL, NULL);
    fwd(cg, idg, NULL, (sd_clip_layer){-1, 0}, &g_noln, NULL, NULL);
    fwd(cl, idl, NULL, (sd_clip_layer){-1, 1}, &l_ln, NULL, NULL);
    fwd(cg, idg, NULL, (sd_clip_layer){-1, 1}, &g_ln, NULL, NULL);
    sd_tensor *a1 = c_m1 ? sub(c_m1, 0, POS, 0, 64) : NULL, *b1 = c_m1 ? sub(c_m1, 0, POS, 64, 192) : NULL;
    sd_tensor *a2 = c_m24 ? sub(c_m24, 0, POS, 0, 64) : NULL, *b2 = c_m24 ? sub(c_m24, 0, POS, 64, 192) : NULL;
    CHECK(maxdiff(a1, l_noln) <= 1e-6 && maxdiff(b1, g_noln) <= 1e-6);
    CHECK(maxdiff(a2, l_ln) <= 1e-6 && maxdiff(b2, g_ln) <= 1e-6);
    CHECK(maxdiff(l_noln, l_ln) > 1e-3);

    /* more l chunks than g: cut to the shorter; weights on l leave g alone */
    sd_prompt_tokens *l2 = make_tokens(2);
    fill_chunk(l2->tokens, words, NW, SD_CLIP_EOS);
    fill_chunk(l2->tokens + POS, words, 2, SD_CLIP_EOS);
    l2->tokens[3].weight = 1.5;
    sd_tensor *p_cut = NULL;
    sd_tensor *c_cut = enc(te, l2, g, 0, &p_cut);
    sd_tensor *g_cut = c_cut ? sub(c_cut, 0, POS, 64, 192) : NULL;
    CHECK(c_cut && c_cut->shape[1] == POS && maxdiff(g_cut, hg) <= 1e-6 &&
          maxdiff(p_cut, gproj) <= 1e-6);
    sd_tensor *l_cut = c_cut ? sub(c_cut, 0, POS, 0, 64) : NULL;
    CHECK(maxdiff(l_cut, hl) > 1e-4); /* the weight changed l's token 3 */

    /* text entry points without a tokenizer */
    sd_tensor *cx = NULL, *px = NULL;
    CHECK(sd_text_encode(te, "a cat", 0, NULL, &cx, &px, &err) == SD_ERR_INVALID && !cx);
    CHECK(sd_text_encode_sdxl(te, "a", "b", 0, NULL, &cx, &px, &err) == SD_ERR_INVALID && !cx);

    sd_tensor *fr[] = {p_def, c_def, c_m2, hl, hg, gp, gproj, cl_part, cg_part, T, c_m1, c_m24,
                       l_noln, g_noln, l_ln, g_ln, a1, b1, a2, b2, p_cut, c_cut, g_cut, l_cut};
    free_all(fr, sizeof fr / sizeof fr[0]);
    sd_prompt_tokens_free(l);
    sd_prompt_tokens_free(g);
    sd_prompt_tokens_free(l2);
    sd_text_encoder_free(te);
    ckpt_close(&k, f);
}

/* ---- from text (needs the CLIP vocabulary) ---------------------------------------- */

static sd_tensor *text_cond(const sd_text_encoder *te, const char *text,
                            const sd_text_encode_opts *o, sd_tensor **pooled) {
    sd_tensor *c = NULL, *p = NULL;
    sd_error err;
    CHECK_OK(sd_text_encode(te, text, 0, o, &c, &p, &err), &err);
    if (pooled) *pooled = p;
    else sd_tensor_unref(p);
    return c;
}

/* Writes dir/NAME.safetensors with clip_l / clip_g rows copied from the
 * token tables of the two encoders (either may be NULL). */
static void write_embedding(const char *path, sd_st_file *f, const char *l_key, int wl,
                            const char *g_key, int wg, int32_t id) {
    sd_st_writer *w = sd_st_writer_new();
    sd_error err;
    const char *keys[2] = {l_key, g_key};
    const char *names[2] = {"clip_l", "clip_g"};
    int widths[2] = {wl, wg};
    for (int i = 0; i < 2; i++) {
        if (!keys[i]) continue;
        sd_tensor *tab = sd_st_tensor_f32(f, keys[i], &err);
        sd_tensor *row = sd_tensor_new4(SD_F32, 2, 1, widths[i], 0, 0);
        if (tab) memcpy(row->data, (float *)tab->data + (size_t)id * widths[i], (size_t)widths[i] * 4);
        CHECK_OK(sd_st_writer_add(w, names[i], row, &err), &err);
        sd_tensor_unref(row);
        sd_tensor_unref(tab);
    }
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
}

static void test_text(const sd_tokenizer *tok) {
    sd_error err;
    int32_t photo = sd_tokenizer_token_id(tok, "photo</w>");
    CHECK(photo > 0);
    const char *dir = sd_test_tmpdir("text_encode");
    char path[4200];
    const char *dirs[1] = {dir};
    int warned = 0;
    sd_text_encode_opts eo = {dirs, 1, count_warn, &warned};

    /* SD1 */
    ckpt k = ckpt_new();
    add_hf(&k, SD_TE_PREFIX_SD1, "text_model.", VOCAB, 64, 2, 96, 0);
    sd_st_file *f = finish(&k, "sd1.safetensors");
    sd_text_encoder *te = NULL;
    CHECK_OK(sd_text_encoder_load(be, f, tok, &te, &err), &err);
    if (te) {
        sd_tensor *p_plain = NULL, *p_one = NULL, *p_emb = NULL;
        sd_tensor *plain = text_cond(te, "a photo cat", NULL, &p_plain);
        sd_tensor *one = text_cond(te, "a (photo:1.0) cat", NULL, &p_one);
        sd_tensor *up = text_cond(te, "a (photo:1.3) cat", NULL, NULL);
        CHECK(maxdiff(plain, one) == 0 && maxdiff(p_plain, p_one) == 0);
        /* only the weighted token moves */
        sd_tensor *r_other = up ? sub(up, 0, 2, 0, 64) : NULL, *r_plain = plain ? sub(plain, 0, 2, 0, 64) : NULL;
        sd_tensor *w_up = up ? sub(up, 2, 3, 0, 64) : NULL, *w_plain = plain ? sub(plain, 2, 3, 0, 64) : NULL;
        CHECK(maxdiff(r_other, r_plain) <= 1e-5 && maxdiff(w_up, w_plain) > 1e-3);
        snprintf(path, sizeof path, "%s/myemb.safetensors", dir);
        write_embedding(path, f, SD_TE_PREFIX_SD1 "text_model.embeddings.token_embedding.weight", 64,
                        NULL, 0, photo);
        sd_tensor *emb = text_cond(te, "a embedding:myemb cat", &eo, &p_emb);
        CHECK_MSG(maxdiff(emb, plain) == 0 && maxdiff(p_emb, p_plain) == 0 && warned == 0,
                  "embedding:myemb vs photo: %g (%d warnings)", maxdiff(emb, plain), warned);
        /* without embedding directories the text is literal: different tokens */
        sd_tensor *lit = text_cond(te, "a embedding:myemb cat", NULL, NULL);
        CHECK(maxdiff(lit, plain) > 1e-3);
        sd_tensor *cx = NULL, *px = NULL;
        CHECK(sd_text_encode_sdxl(te, "a", "b", 0, NULL, &cx, &px, &err) == SD_ERR_INVALID);
        sd_tensor *fr[] = {p_plain, p_one, p_emb, plain, one, up, r_other, r_plain, w_up,
                           w_plain, emb, lit};
        free_all(fr, sizeof fr / sizeof fr[0]);
    }
    sd_text_encoder_free(te);
    te = NULL;
    ckpt_close(&k, f);

    /* SDXL */
    f = build_sdxl(&k);
    CHECK_OK(sd_text_encoder_load(be, f, NULL, &te, &err), &err);
    if (te) {
        sd_text_encoder_set_tokenizer(te, tok);
        CHECK(sd_text_encoder_tokenizer(te) == tok);
        snprintf(path, sizeof path, "%s/xlemb.safetensors", dir);
        write_embedding(path, f, SD_TE_PREFIX_SDXL_L "text_model.embeddings.token_embedding.weight",
                        64, SD_TE_PREFIX_SDXL_G "token_embedding.weight", 128, photo);
        sd_tensor *p_plain = NULL, *p_emb = NULL;
        sd_tensor *plain = text_cond(te, "a photo cat", NULL, &p_plain);
        sd_tensor *emb = text_cond(te, "a embedding:xlemb cat", &eo, &p_emb);
        CHECK_MSG(maxdiff(emb, plain) == 0 && maxdiff(p_emb, p_plain) == 0,
                  "SDXL embedding:xlemb vs photo: %g", maxdiff(emb, plain));
        /* CLIPTextEncodeSDXL: text_g two chunks, text_l one -> l padded with an empty chunk */
        char longp[1200] = "";
        for (int i = 0; i < 100; i++) strcat(longp, "cat ");
        sd_tensor *c = NULL, *p = NULL;
        CHECK_OK(sd_text_encode_sdxl(te, longp, "a photo cat", 0, NULL, &c, &p, &err), &err);
        CHECK(c && c->shape[1] == 2 * POS && c->shape[2] == 192);
        int32_t empty_ids[POS];
        chunk_ids(empty_ids, NULL, 0, SD_CLIP_EOS);
        sd_tensor *le = NULL;
        fwd(sd_text_encoder_clip_l(te), empty_ids, NULL, (sd_clip_layer){-2, 0}, &le, NULL, NULL);
        sd_tensor *second_l = c ? sub(c, POS, 2 * POS, 0, 64) : NULL;
        sd_tensor *first_l = c ? sub(c, 0, POS, 0, 64) : NULL;
        sd_tensor *plain_l = plain ? sub(plain, 0, POS, 0, 64) : NULL;
        CHECK(maxdiff(second_l, le) <= 1e-5 && maxdiff(first_l, plain_l) <= 1e-5);
        sd_tensor *c2 = NULL, *p2 = NULL;
        CHECK_OK(sd_text_encode_sdxl(te, "a photo cat", longp, 0, NULL, &c2, &p2, &err), &err);
        CHECK(c2 && c2->shape[1] == 2 * POS && maxdiff(p2, p_plain) <= 1e-5);
        /* plain CLIPTextEncode with the same long text: both encoders chunk alike */
        sd_tensor *c3 = text_cond(te, longp, NULL, NULL);
        CHECK(c3 && c3->shape[1] == 2 * POS);
        sd_tensor *fr[] = {p_plain, p_emb, plain, emb, c, p, le, second_l, first_l, plain_l, c2,
                           p2, c3};
        free_all(fr, sizeof fr / sizeof fr[0]);
    }
    sd_text_encoder_free(te);
    ckpt_close(&k, f);
}

int main(void) {
    sd_error err;
    CHECK_OK(sd_backend_new("cpu", 2, &be, &err), &err);
    if (!be) return sd_test_finish();
    test_detection_and_errors();
    test_sd1();
    test_sdxl();
    const char *shared = getenv("SDFLOW_SHARED");
    if (!shared || !*shared) shared = sd_test_shared_dir();
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/data/clip", shared);
    sd_tokenizer *tok = NULL;
    if (sd_tokenizer_load_dir(dir, &tok, &err) == SD_OK) test_text(tok);
    else printf("no CLIP vocabulary in %s: text entry points not tested\n", dir);
    sd_tokenizer_free(tok);
    sd_backend_free(be);
    return sd_test_finish();
}
