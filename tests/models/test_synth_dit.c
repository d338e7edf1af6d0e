/* The synthesized SD3.5 and Z-Image files (models/synth/synth_sd3.c,
 * synth_zimage.c):
 *   - each file's layout, made with the shapes of the SD3 and Z-Image
 *     reference sets' tiny models (read from their manifests), is key for
 *     key and shape for shape that of the reference file of the same layout
 *     (which mirror the published files): the MMDiT-X (the set's bare file
 *     against the checkpoint's model.diffusion_model.*), the checkpoint's
 *     VAE, clip_g; the Z-Image DiT, Qwen3 and ae also dtype for dtype (the
 *     SD3 set stores F16 where Stability's SD3.5 checkpoints are BF16);
 *   - the full-size presets have the real files' parameter counts (without
 *     writing anything): SD3.5 Medium's MMDiT 2.47 G and its file 5.11 GB
 *     with the VAE, CLIP-G 695 M, Z-Image-Turbo's DiT 6.15 G (12.3 GB),
 *     Qwen3-4B 4.02 G (8.04 GB), and the shared files are Flux's (the same
 *     keys, shapes and dtypes as flux-dev's T5, CLIP-L and ae);
 *   - the tiny presets written to disk open as what they are: an SD3
 *     checkpoint with the preset's MMDiT-X config and a VAE, whose MMDiT
 *     binds; a CLIP-G, CLIP-L and T5 text-encoder file each and the VAE
 *     alone; a Z-Image DiT whose config is the preset's and binds, a Qwen3
 *     text encoder of the preset's width, all marked random; RMSNorm
 *     scales whose names say no "norm" (ln_q, cap_embedder.0) are 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/synth/synth.h"
#include "models/text/text_encode.h"
#include "testutil.h"

/* ---- layouts against the reference sets ---------------------------------------------------- */

typedef struct {
    const sd_st_file *ref;
    const char *what;
    const char *under; /* synthesized names: only those under this prefix */
    int cut;           /* 1: looked up without it */
    int dtypes;        /* 1: the dtype must match too */
    int n, bad;
} cmp_ctx;

static void check_key(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    cmp_ctx *c = user;
    if (c->under) {
        size_t n = strlen(c->under);
        if (strncmp(name, c->under, n) != 0) return;
        if (c->cut) name += n;
    }
    c->n++;
    const sd_st_entry *e = sd_st_find(c->ref, name);
    if (!e) {
        if (c->bad++ < 5) CHECK_MSG(0, "%s: synthesized key %s not in the reference", c->what, name);
        return;
    }
    int same = e->ndim == ndim && (!c->dtypes || e->dtype == dtype);
    for (int i = 0; same && i < ndim; i++) same = e->shape[i] == shape[i];
    if (!same && c->bad++ < 5) CHECK_MSG(0, "%s: key %s: shape or dtype differs from the reference", c->what, name);
}

static const cJSON *model_cfg(const cJSON *m, const char *model) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "models"), model), "config");
}

static int cfg_int(const cJSON *m, const char *model, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(model_cfg(m, model), key);
    CHECK_MSG(cJSON_IsNumber(v), "manifest: models.%s.config.%s", model, key);
    return cJSON_IsNumber(v) ? v->valueint : 0;
}

/* The manifest (NULL: absent, and the set's directory in dir). */
static cJSON *manifest(const char *set, char *dir, size_t n) {
    char mpath[4300];
    snprintf(dir, n, "%s/%s", sd_test_testdata_dir(), set);
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    char *text = sd_test_read_file(mpath, NULL);
    if (!text) return NULL;
    cJSON *m = cJSON_Parse(text);
    free(text);
    CHECK_MSG(m != NULL, "%s is not JSON", mpath);
    return m;
}

/* Compares the keys layout(cfg, part) enumerates (those under `under`,
 * when given; cut: looked up without it) with the reference file of model
 * (all its keys under ref_prefix). */
typedef void (*keys_fn)(const void *cfg, int part, sd_synth_key_fn fn, void *user);

static void compare(const cJSON *m, const char *dir, const char *model, keys_fn keys, const void *cfg, int part,
                    const char *under, int cut, const char *ref_prefix, int dtypes) {
    const cJSON *fn = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "models"), model), "file");
    CHECK_MSG(cJSON_IsString(fn), "manifest: models.%s.file", model);
    if (!cJSON_IsString(fn)) return;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, fn->valuestring);
    sd_error err = {0};
    sd_st_file *ref = NULL;
    CHECK_OK(sd_st_open(path, &ref, &err), &err);
    if (!ref) return;
    size_t want = 0;
    for (size_t i = 0; i < sd_st_count(ref); i++)
        want += strncmp(sd_st_at(ref, i)->name, ref_prefix, strlen(ref_prefix)) == 0;
    cmp_ctx x = {ref, model, under, cut, dtypes, 0, 0};
    keys(cfg, part, check_key, &x);
    CHECK_MSG((size_t)x.n == want, "%s: %d keys synthesized, the reference has %zu", model, x.n, want);
    sd_st_close(ref);
}

static void sd3_keys(const void *cfg, int part, sd_synth_key_fn fn, void *user) {
    sd_synth_sd3_keys(cfg, (sd_synth_sd3_part)part, fn, user);
}
static void zimage_keys(const void *cfg, int part, sd_synth_key_fn fn, void *user) {
    sd_synth_zimage_keys(cfg, (sd_synth_zimage_part)part, fn, user);
}

/* Returns 1 when the set was there. */
static int check_sd3_layouts(void) {
    char dir[4200];
    cJSON *m = manifest("sd3", dir, sizeof dir);
    if (!m) return 0;
    sd_synth_sd3_config c = *sd_synth_sd3_preset("sd35-medium-tiny");
    c.name = "from-manifest";
    c.hidden = cfg_int(m, "mmdit", "hidden_size");
    int heads = cfg_int(m, "mmdit", "num_heads");
    c.head_dim = heads ? c.hidden / heads : 0;
    c.depth = cfg_int(m, "mmdit", "depth");
    c.in_channels = cfg_int(m, "mmdit", "in_channels");
    c.patch = cfg_int(m, "mmdit", "patch_size");
    c.pos_embed_max = cfg_int(m, "mmdit", "pos_embed_max_size");
    c.adm_in = cfg_int(m, "mmdit", "adm_in_channels");
    c.context_in = cfg_int(m, "mmdit", "context_in");
    /* MMDiT-X blocks: the writer makes blocks 0 .. n-1 of them */
    const cJSON *sa = cJSON_GetObjectItem(model_cfg(m, "mmdit"), "x_block_self_attn_layers");
    c.self_attn_blocks = cJSON_GetArraySize(sa);
    for (int i = 0; i < c.self_attn_blocks; i++)
        CHECK_MSG(cJSON_GetArrayItem(sa, i)->valueint == i, "the set's MMDiT-X blocks are 0..n-1");
    c.clip_g_hidden = cfg_int(m, "clip_g", "hidden_size");
    c.clip_g_layers = cfg_int(m, "clip_g", "num_hidden_layers");
    c.clip_g_mlp = cfg_int(m, "clip_g", "intermediate_size");
    const cJSON *vae = cJSON_GetObjectItem(model_cfg(m, "sd35_ckpt"), "vae");
    const cJSON *mult = cJSON_GetObjectItem(vae, "ch_mult");
    c.vae_ch = cJSON_GetObjectItem(vae, "ch") ? cJSON_GetObjectItem(vae, "ch")->valueint : 0;
    c.vae_levels = cJSON_GetArraySize(mult);
    for (int i = 0; i < c.vae_levels && i < 4; i++) c.vae_ch_mult[i] = cJSON_GetArrayItem(mult, i)->valueint;
    c.vae_res_blocks = cJSON_GetObjectItem(vae, "num_res_blocks") ? cJSON_GetObjectItem(vae, "num_res_blocks")->valueint : 0;
    c.vae_z = cJSON_GetObjectItem(vae, "z_channels") ? cJSON_GetObjectItem(vae, "z_channels")->valueint : 0;
    compare(m, dir, "mmdit", sd3_keys, &c, SD_SYNTH_SD3_CKPT, "model.diffusion_model.", 1, "", 0);
    compare(m, dir, "sd35_ckpt", sd3_keys, &c, SD_SYNTH_SD3_CKPT, "first_stage_model.", 0, "first_stage_model.", 0);
    compare(m, dir, "clip_g", sd3_keys, &c, SD_SYNTH_SD3_CLIP_G, NULL, 0, "", 1);
    cJSON_Delete(m);
    return 1;
}

static int check_zimage_layouts(void) {
    char dir[4200];
    cJSON *m = manifest("zimage", dir, sizeof dir);
    if (!m) return 0;
    sd_synth_zimage_config c = *sd_synth_zimage_preset("zimage-turbo-tiny");
    c.name = "from-manifest";
    c.dim = cfg_int(m, "zimage", "dim");
    c.heads = cfg_int(m, "zimage", "n_heads");
    c.head_dim = c.heads ? c.dim / c.heads : 0;
    c.kv_heads = cfg_int(m, "zimage", "n_kv_heads");
    c.layers = cfg_int(m, "zimage", "n_layers");
    c.refiner_layers = cfg_int(m, "zimage", "n_refiner_layers");
    c.cap_feat = cfg_int(m, "zimage", "cap_feat_dim");
    c.in_channels = cfg_int(m, "zimage", "in_channels");
    /* ComfyUI's FeedForward: int(8/3 * dim) rounded up to multiple_of; the
     * timestep MLP min(dim, 1024) wide, the adaLN input min(dim, 256) */
    int mo = cfg_int(m, "zimage", "multiple_of");
    c.ffn = mo ? ((int)(8.0 / 3.0 * c.dim) + mo - 1) / mo * mo : 0;
    c.t_dim = c.dim < 1024 ? c.dim : 1024;
    c.adaln_dim = c.dim < 256 ? c.dim : 256;
    c.q_vocab = cfg_int(m, "qwen3_4b", "vocab_size");
    c.q_hidden = cfg_int(m, "qwen3_4b", "hidden_size");
    c.q_layers = cfg_int(m, "qwen3_4b", "num_hidden_layers");
    c.q_heads = cfg_int(m, "qwen3_4b", "num_attention_heads");
    c.q_kv_heads = cfg_int(m, "qwen3_4b", "num_key_value_heads");
    c.q_head_dim = cfg_int(m, "qwen3_4b", "head_dim");
    c.q_inter = cfg_int(m, "qwen3_4b", "intermediate_size");
    c.vae_ch = cfg_int(m, "ae", "ch");
    const cJSON *mult = cJSON_GetObjectItem(model_cfg(m, "ae"), "ch_mult");
    c.vae_levels = cJSON_GetArraySize(mult);
    for (int i = 0; i < c.vae_levels && i < 4; i++) c.vae_ch_mult[i] = cJSON_GetArrayItem(mult, i)->valueint;
    c.vae_res_blocks = cfg_int(m, "ae", "num_res_blocks");
    c.vae_z = cfg_int(m, "ae", "z_channels");
    compare(m, dir, "zimage", zimage_keys, &c, SD_SYNTH_ZIMAGE_DIT, NULL, 0, "", 1);
    compare(m, dir, "qwen3_4b", zimage_keys, &c, SD_SYNTH_ZIMAGE_QWEN3, NULL, 0, "", 1);
    compare(m, dir, "ae", zimage_keys, &c, SD_SYNTH_ZIMAGE_AE, NULL, 0, "", 1);
    cJSON_Delete(m);
    return 1;
}

/* ---- full-size counts ----------------------------------------------------------------------- */

typedef struct {
    double params, bytes;
    const char *under; /* count only names under it (NULL: all) */
} count_ctx;

static void count_key(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    count_ctx *c = user;
    if (c->under && strncmp(name, c->under, strlen(c->under)) != 0) return;
    double n = 1;
    for (int i = 0; i < ndim; i++) n *= (double)shape[i];
    c->params += n;
    c->bytes += n * (double)sd_dtype_size(dtype);
}

/* The keys, shapes and dtypes of two enumerations are the same, in order. */
typedef struct {
    char name[512];
    sd_dtype dtype;
    int ndim;
    int64_t shape[4];
} key_rec;
typedef struct {
    key_rec *k;
    size_t n, cap;
} key_list;

static void record(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    key_list *l = user;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->k = realloc(l->k, l->cap * sizeof *l->k);
        if (!l->k) abort();
    }
    key_rec *r = &l->k[l->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->dtype = dtype;
    r->ndim = ndim;
    for (int i = 0; i < ndim; i++) r->shape[i] = shape[i];
}

static int same_lists(const key_list *a, const key_list *b) {
    if (a->n != b->n || a->n == 0) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (memcmp(&a->k[i], &b->k[i], sizeof a->k[i]) != 0) return 0;
    return 1;
}

static void check_shared(const char *flux_preset, sd_synth_flux_part fp, keys_fn keys, const void *cfg, int part,
                         const char *what) {
    key_list a = {0}, b = {0};
    sd_synth_flux_keys(sd_synth_flux_preset(flux_preset), fp, record, &a);
    keys(cfg, part, record, &b);
    CHECK_MSG(same_lists(&a, &b), "%s: the file is %s's (keys, shapes, dtypes)", what, flux_preset);
    free(a.k);
    free(b.k);
}

static void check_full_size(void) {
    const sd_synth_sd3_config *sd3 = sd_synth_sd3_preset("sd35-medium");
    const sd_synth_zimage_config *zi = sd_synth_zimage_preset("zimage-turbo");
    CHECK(sd3 && zi);
    if (!sd3 || !zi) return;
    count_ctx mm = {0, 0, "model.diffusion_model."}, ck = {0, 0, NULL}, g = {0, 0, NULL}, vae = {0, 0, NULL};
    sd_synth_sd3_keys(sd3, SD_SYNTH_SD3_CKPT, count_key, &mm);
    sd_synth_sd3_keys(sd3, SD_SYNTH_SD3_CKPT, count_key, &ck);
    sd_synth_sd3_keys(sd3, SD_SYNTH_SD3_CLIP_G, count_key, &g);
    sd_synth_sd3_keys(sd3, SD_SYNTH_SD3_VAE, count_key, &vae);
    /* SD3.5 Medium: "2.5 billion parameters"; sd3.5_medium.safetensors is
     * 5.11 GB (MMDiT + VAE at 2 bytes); bigG's text tower 694.7 M */
    CHECK_MSG(mm.params > 2.46e9 && mm.params < 2.48e9, "SD3.5 Medium MMDiT: %.0f parameters", mm.params);
    CHECK_MSG(ck.bytes > 5.09e9 && ck.bytes < 5.13e9, "sd3.5_medium.safetensors: %.4g bytes", ck.bytes);
    CHECK_MSG(ck.params == mm.params + vae.params, "the checkpoint is the MMDiT and the VAE");
    CHECK_MSG(g.params > 694.0e6 && g.params < 695.5e6, "CLIP-G: %.0f parameters", g.params);
    count_ctx dit = {0, 0, NULL}, q = {0, 0, NULL};
    sd_synth_zimage_keys(zi, SD_SYNTH_ZIMAGE_DIT, count_key, &dit);
    sd_synth_zimage_keys(zi, SD_SYNTH_ZIMAGE_QWEN3, count_key, &q);
    /* z_image_turbo_bf16.safetensors 12.3 GB (6.15 G); qwen_3_4b.safetensors
     * 8.04 GB (Qwen3-4B: 4.02 G with the tied embedding once) */
    CHECK_MSG(dit.params > 6.14e9 && dit.params < 6.16e9, "Z-Image DiT: %.0f parameters", dit.params);
    CHECK_MSG(q.params > 4.01e9 && q.params < 4.03e9, "Qwen3-4B: %.0f parameters", q.params);
    printf("sd35-medium: MMDiT %.4g, checkpoint %.4g bytes, CLIP-G %.4g; zimage-turbo: DiT %.4g (%.4g bytes), "
           "Qwen3 %.4g (%.4g bytes)\n",
           mm.params, ck.bytes, g.params, dit.params, dit.bytes, q.params, q.bytes);
    /* the shared files: one copy serves both families */
    const char *sizes[2][3] = {{"flux-dev", "sd35-medium", "zimage-turbo"},
                               {"flux-dev-tiny", "sd35-medium-tiny", "zimage-turbo-tiny"}};
    for (int s = 0; s < 2; s++) {
        const sd_synth_sd3_config *c3 = sd_synth_sd3_preset(sizes[s][1]);
        const sd_synth_zimage_config *cz = sd_synth_zimage_preset(sizes[s][2]);
        check_shared(sizes[s][0], SD_SYNTH_FLUX_T5, sd3_keys, c3, SD_SYNTH_SD3_T5, "t5xxl_fp16");
        check_shared(sizes[s][0], SD_SYNTH_FLUX_CLIP_L, sd3_keys, c3, SD_SYNTH_SD3_CLIP_L, "clip_l");
        check_shared(sizes[s][0], SD_SYNTH_FLUX_AE, zimage_keys, cz, SD_SYNTH_ZIMAGE_AE, "ae");
    }
}

/* ---- the tiny files written ------------------------------------------------------------------ */

static double first_value(sd_st_file *f, const char *key) {
    sd_error err = {0};
    sd_tensor *t = sd_st_tensor_f32(f, key, &err);
    CHECK_MSG(t != NULL, "%s: %s", key, err.msg);
    if (!t) return NAN;
    double v = sd_tensor_f32(t)[0];
    sd_tensor_unref(t);
    return v;
}

static void check_written(void) {
    const char *tmp = sd_test_tmpdir("synth_dit");
    sd_error err = {0};
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 1, &be, &err), &err);
    if (!be) return;
    const sd_synth_sd3_config *c3 = sd_synth_sd3_preset("sd35-medium-tiny");
    const sd_synth_zimage_config *cz = sd_synth_zimage_preset("zimage-turbo-tiny");
    CHECK(c3 && cz);
    if (!c3 || !cz) {
        sd_backend_free(be);
        return;
    }
    char ckpt[4200], dit[4200];
    snprintf(ckpt, sizeof ckpt, "%s/sd35.safetensors", tmp);
    snprintf(dit, sizeof dit, "%s/zimage.safetensors", tmp);
    CHECK_OK(sd_synth_sd3_write(c3, SD_SYNTH_SD3_CKPT, 1, ckpt, &err), &err);
    CHECK_OK(sd_synth_zimage_write(cz, SD_SYNTH_ZIMAGE_DIT, 1, dit, &err), &err);
    const char *files[2] = {ckpt, dit};
    for (int k = 0; k < 2; k++) {
        sd_checkpoint_opts o;
        sd_checkpoint_opts_default(&o);
        sd_checkpoint *ck = NULL;
        CHECK_OK(sd_checkpoint_open(be, files[k], &o, &ck, &err), &err);
        if (!ck) continue;
        const sd_ckpt_info *in = sd_checkpoint_info(ck);
        CHECK_MSG(in->random_weights, "%s: marked random", files[k]);
        if (k == 0) {
            CHECK_MSG(in->family == SD_CKPT_SD3 && in->has_vae && !in->has_text_encoder,
                      "the SD3.5 checkpoint: MMDiT + VAE, no text encoder");
            CHECK(in->sd3.hidden_size == c3->hidden && in->sd3.head_dim == c3->head_dim);
            CHECK(in->sd3.depth == c3->depth && in->sd3.n_self_attn == c3->self_attn_blocks);
            CHECK(in->sd3.self_attn == ((uint64_t)1 << c3->self_attn_blocks) - 1);
            CHECK(in->sd3.pos_embed_max_size == c3->pos_embed_max && in->sd3.qk_norm && in->sd3.qkv_bias);
            CHECK(in->sd3.adm_in_channels == c3->adm_in && in->sd3.context_in_dim == c3->context_in);
        } else {
            CHECK_MSG(in->family == SD_CKPT_ZIMAGE, "the Z-Image DiT");
            CHECK(in->zimage.dim == cz->dim && in->zimage.n_heads == cz->heads && in->zimage.n_kv_heads == cz->kv_heads);
            CHECK(in->zimage.n_layers == cz->layers && in->zimage.n_refiner_layers == cz->refiner_layers);
            CHECK(in->zimage.ffn_hidden == cz->ffn && in->zimage.cap_feat_dim == cz->cap_feat);
            CHECK(in->zimage.t_dim == cz->t_dim && in->zimage.adaln_dim == cz->adaln_dim);
            CHECK(in->zimage.pad_tokens_multiple == 32);
        }
        sd_dmodel dm;
        CHECK_OK(sd_checkpoint_dmodel(ck, &dm, &err), &err);
        sd_checkpoint_unref(ck);
    }
    /* RMSNorm scales named without "norm" start at 1 */
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(ckpt, &f, &err), &err);
    if (f) {
        CHECK(first_value(f, "model.diffusion_model.joint_blocks.0.x_block.attn2.ln_q.weight") == 1.0);
        sd_st_close(f);
    }
    CHECK_OK(sd_st_open(dit, &f, &err), &err);
    if (f) {
        CHECK(first_value(f, "cap_embedder.0.weight") == 1.0);
        sd_st_close(f);
    }
    /* the standalone files detect as what they are */
    struct {
        int zimage, part;
        sd_te_kind te;
        int vae;
    } parts[] = {{0, SD_SYNTH_SD3_CLIP_G, SD_TE_SDXL_REFINER, 0}, /* bigG alone, as ComfyUI detects it */
                 {0, SD_SYNTH_SD3_CLIP_L, SD_TE_SD1, 0},
                 {0, SD_SYNTH_SD3_T5, SD_TE_T5, 0},
                 {0, SD_SYNTH_SD3_VAE, 0, 1},
                 {1, SD_SYNTH_ZIMAGE_QWEN3, SD_TE_ZIMAGE, 0},
                 {1, SD_SYNTH_ZIMAGE_AE, 0, 1}};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/part%zu.safetensors", tmp, i);
        CHECK_OK(parts[i].zimage ? sd_synth_zimage_write(cz, parts[i].part, 1, path, &err)
                                 : sd_synth_sd3_write(c3, parts[i].part, 1, path, &err),
                 &err);
        sd_ckpt_info info;
        CHECK_OK(sd_checkpoint_probe(path, &info, &err), &err);
        const char *what = parts[i].zimage ? sd_synth_zimage_part_name(parts[i].part)
                                           : sd_synth_sd3_part_name(parts[i].part);
        CHECK_MSG(info.te_kind == parts[i].te && info.has_vae == parts[i].vae && !info.has_unet,
                  "%s detects as its part (text encoder kind %d, VAE %d)", what, info.te_kind, info.has_vae);
    }
    sd_backend_free(be);
}

int main(void) {
    check_full_size();
    check_written();
    CHECK(sd_synth_sd3_preset("nope") == NULL && sd_synth_zimage_preset("nope") == NULL);
    int sd3 = check_sd3_layouts(), zi = check_zimage_layouts();
    if (!sd3 || !zi) sd_test_skip("the %s reference set is absent", !sd3 ? "SD3" : "Z-Image");
    return sd_test_finish();
}
