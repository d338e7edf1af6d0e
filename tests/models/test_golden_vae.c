/* test_golden_vae.c - the SD KL VAE against ComfyUI goldens.
 *
 * Walks manifest.json ($SDFLOW_TESTDATA, default sd_test_testdata_dir()):
 *  - every case with component "vae": tensors are grouped by the prefix
 *    before the first '.'; a group whose input is "<g>.latent" is decoded
 *    (outputs raw, image, latent_model_space, act.<module> taps), one whose
 *    input is "<g>.image" is encoded (mean, logvar, latent,
 *    latent_model_space); every expected/intermediate tensor is compared at
 *    its own tolerance and its worst error printed;
 *  - every "e2e" case: its documented image = VAEDecode(latent_out); on the
 *    first one per model also tiled decode/encode sanity, the diffusers
 *    key layout (an in-memory renamed copy) giving identical results, and
 *    the VAE keys alone opened as a checkpoint (the loaders' path: detected
 *    with the same prefix, decoding identically).
 * The model of a case is the manifest "models" entry whose key is one of
 * the '_'-separated words of the case id and whose file holds a VAE (under
 * first_stage_model., vae. or no prefix), else the VAELoader's file (the
 * entry whose comfy_name is in vae/), else the only model whose file holds
 * a VAE. Every file the manifest lists must be
 * present (an absent one fails); without the manifest, or with no VAE case
 * in it, the test exits 77.
 *
 * argv[1] names a family's reference set (sd_golden_family_dir) instead of
 * the top one: ctest runs it as models.golden_vae_flux with "flux" and
 * models.golden_vae_sd3 with "sd3".
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/checkpoint/checkpoint.h"
#include "models/vae/vae.h"
#include "testutil.h"
#include "golden.h"

typedef struct {
    const char *key;
    sd_st_file *file;
    const char *prefix; /* of the VAE keys in file; NULL = no VAE there */
    sd_vae *vae;
    int tiled_checked, config_checked;
} model_slot;

typedef struct {
    sd_st_file *golden;
    cJSON *tensors, *case_tol;
    const char *group;
    int compared;
} tap_ctx;

static const char *dir;
static sd_backend *be;
static model_slot models[8];
static int n_models;

static void tol_of(cJSON *tensor, cJSON *case_tol, double *atol, double *rtol) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(tensor, "tolerance");
    if (!t) t = case_tol;
    cJSON *a = cJSON_GetObjectItemCaseSensitive(t, "atol"), *r = cJSON_GetObjectItemCaseSensitive(t, "rtol");
    *atol = cJSON_IsNumber(a) ? a->valuedouble : 0;
    *rtol = cJSON_IsNumber(r) ? r->valuedouble : 0;
}

static void compare(const char *name, const sd_tensor *got, sd_st_file *g, cJSON *tensor,
                    cJSON *case_tol) {
    sd_error err;
    sd_tensor *want = sd_st_tensor_f32(g, name, &err);
    CHECK_MSG(want != NULL, "golden tensor %s missing from %s", name, sd_st_path(g));
    if (!want) return;
    double atol, rtol, worst = 0;
    long wi = -1;
    tol_of(tensor, case_tol, &atol, &rtol);
    int same = got && got->ndim == want->ndim;
    for (int i = 0; same && i < got->ndim; i++) same = got->shape[i] == want->shape[i];
    char b1[96], b2[96];
    CHECK_MSG(same, "%s: got %s, want %s", name, got ? sd_tensor_shape_str(got, b1, sizeof b1) : "NULL",
              sd_tensor_shape_str(want, b2, sizeof b2));
    if (same) {
        /* bf16 slack (golden.h) for what the networks compute; the decoder's
         * input latents and the encoder's input images are inputs */
        size_t n = strlen(name);
        int input = strncmp(name, "dec.latent", 10) == 0 ||
                    (strncmp(name, "enc", 3) == 0 && n >= 6 && strcmp(name + n - 6, ".image") == 0);
        sd_golden_set_depth(input ? 0 : SD_GOLDEN_DEPTH_VAE);
        int ok = sd_golden_allclose(got, want, atol, rtol, &worst, &wi);
        printf("    %-32s worst |d| %.3g (atol %.3g rtol %.3g slack %.3g*rms; %.2f of bound)%s\n",
               name, worst, atol, rtol, sd_golden_slack(), sd_golden_used(), ok ? "" : "  FAIL");
        CHECK_MSG(ok, "%s: worst |d| %.3g at %ld exceeds atol %g rtol %g", name, worst, wi, atol, rtol);
    }
    sd_tensor_unref(want);
}

static void on_tap(void *user, const char *name, const sd_bt *t) {
    tap_ctx *c = user;
    const char *rest = strchr(name, '.'); /* "dec.act.decoder.conv_in" -> ".act.decoder.conv_in" */
    char full[256];
    snprintf(full, sizeof full, "%s%s", c->group, rest ? rest : "");
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(c->tensors, full);
    if (!spec) return;
    sd_tensor *got = sd_bt_to_host(t);
    compare(full, got, c->golden, spec, c->case_tol);
    sd_tensor_unref(got);
    c->compared++;
}

/* The VAE prefix of an open file: "first_stage_model." (SD checkpoints),
 * "vae." (the Comfy-Org single-file Flux checkpoints) or "" (a standalone
 * VAE file); NULL when the file has no VAE. */
static const char *vae_prefix_of(sd_st_file *f) {
    static const char *const prefixes[] = {"first_stage_model.", "vae.", ""};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        char key[96];
        snprintf(key, sizeof key, "%sdecoder.conv_in.weight", prefixes[i]);
        if (sd_st_find(f, key)) return prefixes[i];
    }
    return NULL;
}

/* Opens (once) the model entry m of the manifest into a slot; the slot's
 * vae stays NULL when the file has no VAE. */
static model_slot *slot_for(cJSON *m) {
    for (int i = 0; i < n_models; i++)
        if (strcmp(models[i].key, m->string) == 0) return &models[i];
    if (n_models == (int)(sizeof models / sizeof models[0])) return NULL;
    model_slot *s = &models[n_models++];
    s->key = m->string;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "file")));
    sd_error err;
    CHECK_OK(sd_st_open(path, &s->file, &err), &err);
    s->prefix = s->file ? vae_prefix_of(s->file) : NULL;
    if (s->prefix) CHECK_OK(sd_vae_load(be, s->file, s->prefix, &s->vae, &err), &err);
    return s;
}

/* The detected configuration = the one the manifest states (the model's
 * config "vae" object or the config itself, else the case's settings.vae). */
static void check_config(const sd_vae *vae, cJSON *cfg, cJSON *c) {
    cJSON *vc = cJSON_GetObjectItemCaseSensitive(cfg, "vae");
    if (!vc && cJSON_GetObjectItemCaseSensitive(cfg, "z_channels")) vc = cfg;
    if (!vc) vc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "settings"), "vae");
    if (!vc) {
        printf("    (the manifest states no VAE configuration for this model: not compared)\n");
        return;
    }
    const sd_vae_config *k = sd_vae_get_config(vae);
    cJSON *z = cJSON_GetObjectItemCaseSensitive(vc, "z_channels");
    cJSON *nr = cJSON_GetObjectItemCaseSensitive(vc, "num_res_blocks");
    cJSON *ch = cJSON_GetObjectItemCaseSensitive(vc, "ch");
    cJSON *mult = cJSON_GetObjectItemCaseSensitive(vc, "ch_mult");
    CHECK(cJSON_IsNumber(z) && k->z_channels == z->valueint);
    CHECK(cJSON_IsNumber(nr) && k->num_res_blocks == nr->valueint);
    CHECK(cJSON_IsNumber(ch) && k->ch == ch->valueint);
    CHECK(cJSON_GetArraySize(mult) == k->n_levels);
    for (int i = 0; i < k->n_levels && i < cJSON_GetArraySize(mult); i++)
        CHECK(k->block_out[i] == k->ch * cJSON_GetArrayItem(mult, i)->valueint);
}

/* The model slot for a case: the manifest "models" entry whose key is one
 * of the '_'-separated words of the case id and whose file has a VAE, else
 * the entry a workflow loads with VAELoader (comfy_name "vae/..."). */
static model_slot *model_for(cJSON *manifest, cJSON *c, const char *id, float *scale) {
    cJSON *ms = cJSON_GetObjectItemCaseSensitive(manifest, "models"), *m;
    model_slot *s = NULL;
    cJSON *cfg = NULL;
    cJSON_ArrayForEach(m, ms) {
        char words[128];
        snprintf(words, sizeof words, "_%s_", id);
        char key[64];
        snprintf(key, sizeof key, "_%s_", m->string);
        if (!strstr(words, key)) continue;
        model_slot *cand = slot_for(m);
        if (cand && cand->vae) {
            s = cand;
            cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
            break;
        }
    }
    if (!s)
        cJSON_ArrayForEach(m, ms) {
            const char *cn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "comfy_name"));
            if (!cn || strncmp(cn, "vae/", 4) != 0) continue;
            s = slot_for(m);
            cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
            break;
        }
    if (!s) { /* else the one model whose file holds a VAE (the SD3 set's checkpoint) */
        int n_vae = 0;
        cJSON_ArrayForEach(m, ms) {
            model_slot *cand = slot_for(m);
            if (cand && cand->vae && n_vae++ == 0) {
                s = cand;
                cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
            }
        }
        if (n_vae > 1) s = NULL;
    }
    if (!s || !s->vae) {
        CHECK_MSG(0, "case %s: no model with a VAE in the manifest matches", id);
        return NULL;
    }
    cJSON *sf = cJSON_GetObjectItemCaseSensitive(cfg, "latent_scale_factor");
    *scale = cJSON_IsNumber(sf) ? (float)sf->valuedouble : 1.0f;
    printf("  model %s (VAE keys under '%s')\n", s->key, s->prefix);
    if (!s->config_checked) {
        s->config_checked = 1;
        check_config(s->vae, cfg, c);
    }
    return s;
}

static sd_tensor *scaled(const sd_tensor *t, float s) {
    sd_tensor *o = sd_tensor_clone(t);
    float *p = o->data;
    for (int64_t i = 0; i < sd_tensor_numel(o); i++) p[i] *= s;
    return o;
}

/* Produced output for suffix, or NULL. */
typedef struct {
    const char *suffix;
    sd_tensor *t;
} output;

static void run_group(sd_vae *vae, sd_st_file *g, cJSON *tensors, cJSON *case_tol, const char *group,
                      float scale) {
    char name[256];
    output outs[6] = {{0}};
    int n_out = 0;
    sd_error err;
    tap_ctx tc = {g, tensors, case_tol, group, 0};
    snprintf(name, sizeof name, "%s.latent", group);
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(tensors, name);
    const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "role"));
    if (spec && role && strcmp(role, "input") == 0) { /* decode */
        sd_tensor *z = sd_st_tensor_f32(g, name, &err), *raw = NULL, *img = NULL;
        CHECK(z != NULL);
        if (!z) return;
        sd_vae_set_tap(vae, on_tap, &tc);
        CHECK_OK(sd_vae_decode_raw(vae, z, &raw, &err), &err);
        sd_vae_set_tap(vae, NULL, NULL);
        CHECK_OK(sd_vae_decode(vae, z, &img, &err), &err);
        outs[n_out++] = (output){"raw", raw};
        outs[n_out++] = (output){"image", img};
        outs[n_out++] = (output){"latent_model_space", scaled(z, scale)};
        sd_tensor_unref(z);
    } else {
        snprintf(name, sizeof name, "%s.image", group);
        spec = cJSON_GetObjectItemCaseSensitive(tensors, name);
        role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(spec, "role"));
        if (!spec || !role || strcmp(role, "input") != 0) {
            printf("    group %s: no latent/image input, not run\n", group);
            return;
        }
        sd_tensor *x = sd_st_tensor_f32(g, name, &err), *mean = NULL, *logvar = NULL;
        CHECK(x != NULL);
        if (!x) return;
        sd_vae_set_tap(vae, on_tap, &tc);
        CHECK_OK(sd_vae_encode_posterior(vae, x, &mean, &logvar, &err), &err);
        sd_vae_set_tap(vae, NULL, NULL);
        sd_tensor *lat = NULL;
        CHECK_OK(sd_vae_encode(vae, x, &lat, &err), &err);
        outs[n_out++] = (output){"mean", mean};
        outs[n_out++] = (output){"logvar", logvar};
        outs[n_out++] = (output){"latent", lat};
        outs[n_out++] = (output){"latent_model_space", mean ? scaled(mean, scale) : NULL};
        sd_tensor_unref(x);
    }
    size_t glen = strlen(group);
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        if (strncmp(t->string, group, glen) != 0 || t->string[glen] != '.') continue;
        const char *r = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "role"));
        if (!r || strcmp(r, "input") == 0) continue;
        const char *suffix = t->string + glen + 1;
        if (strncmp(suffix, "act.", 4) == 0) continue; /* compared by the tap */
        const sd_tensor *got = NULL;
        int known = 0;
        for (int i = 0; i < n_out; i++)
            if (strcmp(outs[i].suffix, suffix) == 0) { got = outs[i].t; known = 1; }
        if (known) compare(t->string, got, g, t, case_tol);
        else if (strcmp(r, "expected") == 0) CHECK_MSG(0, "%s: expected tensor not produced", t->string);
        else printf("    %-32s (intermediate not produced, not compared)\n", t->string);
    }
    for (int i = 0; i < n_out; i++) sd_tensor_unref(outs[i].t);
}

/* Tiling (once per model, on an e2e latent and its decoded image): one
 * tile covering everything is the plain result up to the rounding of
 * ComfyUI's 3-pass average; small tiles keep shape and range. */
static void check_tiled(sd_vae *vae, const sd_tensor *z, const sd_tensor *img) {
    sd_error err;
    sd_tensor *tiled = NULL, *lat = NULL, *lat_tiled = NULL;
    double worst = 0;
    CHECK_OK(sd_vae_decode_tiled(vae, z, 4096, 64, &tiled, &err), &err);
    if (tiled) CHECK_MSG(sd_test_allclose(tiled, img, 1e-6, 0, &worst, NULL), "one-tile decode |d| %g", worst);
    sd_tensor_unref(tiled);
    tiled = NULL;
    CHECK_OK(sd_vae_decode_tiled(vae, z, 64, 16, &tiled, &err), &err);
    if (tiled) {
        int ok = tiled->ndim == 4;
        for (int i = 0; ok && i < 4; i++) ok = tiled->shape[i] == img->shape[i];
        CHECK(ok);
        double sum = 0;
        int in_range = 1;
        const float *p = tiled->data, *q = img->data;
        for (int64_t i = 0; ok && i < sd_tensor_numel(tiled); i++) {
            in_range &= p[i] >= 0 && p[i] <= 1;
            sum += fabs(p[i] - q[i]);
        }
        CHECK(in_range);
        printf("    tiled decode (64 px tiles, overlap 16): mean |d| vs untiled %.4f\n",
               sum / (double)sd_tensor_numel(tiled));
    }
    /* encode: same two checks on the decoded image */
    CHECK_OK(sd_vae_encode(vae, img, &lat, &err), &err);
    CHECK_OK(sd_vae_encode_tiled(vae, img, 4096, 64, &lat_tiled, &err), &err);
    if (lat && lat_tiled)
        CHECK_MSG(sd_test_allclose(lat_tiled, lat, 1e-5, 1e-6, &worst, NULL), "one-tile encode |d| %g", worst);
    sd_tensor_unref(lat_tiled);
    lat_tiled = NULL;
    CHECK_OK(sd_vae_encode_tiled(vae, img, 64, 16, &lat_tiled, &err), &err);
    if (lat && lat_tiled) {
        int ok = lat_tiled->ndim == 4;
        for (int i = 0; ok && i < 4; i++) ok = lat_tiled->shape[i] == lat->shape[i];
        CHECK(ok);
        int finite = 1;
        for (int64_t i = 0; ok && i < sd_tensor_numel(lat_tiled); i++) finite &= isfinite(((float *)lat_tiled->data)[i]);
        CHECK(finite);
    }
    sd_tensor_unref(tiled);
    sd_tensor_unref(lat);
    sd_tensor_unref(lat_tiled);
}

/* Replace the first `from` in s (at or after `start`) by `to`. */
static int replace(char *s, size_t n, size_t start, const char *from, const char *to) {
    char *p = strstr(s + start, from);
    if (!p) return 0;
    char tail[256];
    snprintf(tail, sizeof tail, "%s", p + strlen(from));
    snprintf(p, n - (size_t)(p - s), "%s%s", to, tail);
    return 1;
}

/* The VAE of `f` (under prefix) renamed to the diffusers AutoencoderKL
 * layout (ComfyUI's diffusers_convert table read backwards), attention
 * projections as [C, C] linears, as an in-memory file. */
static sd_st_file *to_diffusers(sd_st_file *f, const char *prefix, const sd_vae_config *c, void **mem) {
    sd_error err;
    sd_st_writer *w = sd_st_writer_new();
    size_t plen = strlen(prefix);
    int ok = 1, n = c->n_levels;
    for (size_t i = 0; ok && i < sd_st_count(f); i++) {
        const char *name = sd_st_at(f, i)->name;
        if (strncmp(name, prefix, plen) != 0) continue;
        char k[256], a[96], b[96];
        snprintf(k, sizeof k, "%s", name + plen);
        replace(k, sizeof k, 0, "nin_shortcut", "conv_shortcut");
        replace(k, sizeof k, 0, "norm_out", "conv_norm_out");
        replace(k, sizeof k, 0, "mid.attn_1.", "mid_block.attentions.0.");
        for (int l = 0; l < n; l++) {
            for (int j = 0; j <= c->num_res_blocks; j++) {
                snprintf(a, sizeof a, "encoder.down.%d.block.%d.", l, j);
                snprintf(b, sizeof b, "encoder.down_blocks.%d.resnets.%d.", l, j);
                replace(k, sizeof k, 0, a, b);
                snprintf(a, sizeof a, "decoder.up.%d.block.%d.", n - 1 - l, j);
                snprintf(b, sizeof b, "decoder.up_blocks.%d.resnets.%d.", l, j);
                replace(k, sizeof k, 0, a, b);
            }
            snprintf(a, sizeof a, "down.%d.downsample.", l);
            snprintf(b, sizeof b, "down_blocks.%d.downsamplers.0.", l);
            replace(k, sizeof k, 0, a, b);
            snprintf(a, sizeof a, "up.%d.upsample.", n - 1 - l);
            snprintf(b, sizeof b, "up_blocks.%d.upsamplers.0.", l);
            replace(k, sizeof k, 0, a, b);
        }
        replace(k, sizeof k, 0, "mid.block_1.", "mid_block.resnets.0.");
        replace(k, sizeof k, 0, "mid.block_2.", "mid_block.resnets.1.");
        char *att = strstr(k, "attentions.0.");
        int proj = 0;
        if (att) {
            size_t at = (size_t)(att - k) + strlen("attentions.0.");
            static const char *from[5] = {"norm.", "q.", "k.", "v.", "proj_out."};
            static const char *to[5] = {"group_norm.", "to_q.", "to_k.", "to_v.", "to_out.0."};
            for (int m = 0; m < 5; m++)
                if (strncmp(k + at, from[m], strlen(from[m])) == 0) {
                    replace(k, sizeof k, at, from[m], to[m]);
                    proj = m > 0 && strstr(k, ".weight") != NULL;
                    break;
                }
        }
        sd_tensor *t = sd_st_tensor(f, name, &err);
        if (t && proj) { /* [C, C, 1, 1] conv -> [C, C] linear */
            sd_tensor *r = sd_tensor_reshape(t, 2, t->shape);
            sd_tensor_unref(t);
            t = r;
        }
        ok = t && sd_st_writer_add(w, k, t, &err) == SD_OK;
        CHECK_MSG(ok, "relayout %s -> %s", name, k);
        sd_tensor_unref(t);
    }
    size_t size = 0;
    sd_st_file *out = NULL;
    if (ok) CHECK_OK(sd_st_writer_to_memory(w, mem, &size, &err), &err);
    if (ok && *mem) CHECK_OK(sd_st_open_memory(*mem, size, "diffusers-vae", &out, &err), &err);
    sd_st_writer_free(w);
    return out;
}

/* The diffusers key layout decodes and encodes exactly like the ldm one. */
static void check_diffusers_layout(model_slot *s, const sd_tensor *z, const sd_tensor *img) {
    void *mem = NULL;
    sd_st_file *f = to_diffusers(s->file, s->prefix, sd_vae_get_config(s->vae), &mem);
    sd_vae *v = NULL;
    sd_error err;
    if (f) CHECK_OK(sd_vae_load(be, f, "", &v, &err), &err);
    if (v) {
        sd_tensor *a = NULL, *b = NULL, *l1 = NULL, *l2 = NULL;
        double worst = 0;
        CHECK_OK(sd_vae_decode(v, z, &a, &err), &err);
        if (a) CHECK_MSG(sd_test_allclose(a, img, 0, 0, &worst, NULL), "diffusers-layout decode |d| %g", worst);
        CHECK_OK(sd_vae_encode(v, img, &l1, &err), &err);
        CHECK_OK(sd_vae_encode(s->vae, img, &l2, &err), &err);
        if (l1 && l2) CHECK_MSG(sd_test_allclose(l1, l2, 0, 0, &worst, NULL), "diffusers-layout encode |d| %g", worst);
        printf("    diffusers key layout: decode and encode identical\n");
        sd_tensor_unref(a);
        sd_tensor_unref(b);
        sd_tensor_unref(l1);
        sd_tensor_unref(l2);
    }
    sd_vae_free(v);
    sd_st_close(f);
    free(mem);
}

/* The checkpoint path a VAELoader / CheckpointLoaderSimple takes: the file's
 * VAE keys alone (under the slot's prefix) written to a file of their own,
 * opened as a checkpoint, must be found there (has_vae, the same prefix, no
 * other part) and decode exactly as the VAE loaded directly. */
static void check_checkpoint_path(model_slot *s, const sd_tensor *z, const sd_tensor *img) {
    sd_error err;
    char path[1400];
    snprintf(path, sizeof path, "%s/%s-vae.safetensors", sd_test_tmpdir("golden_vae_ckpt"), s->key);
    sd_st_writer *w = sd_st_writer_new();
    size_t plen = strlen(s->prefix);
    int ok = w != NULL;
    for (size_t i = 0; ok && i < sd_st_count(s->file); i++) {
        const char *name = sd_st_at(s->file, i)->name;
        if (strncmp(name, s->prefix, plen) != 0 ||
            (plen == 0 && strncmp(name, "encoder.", 8) != 0 && strncmp(name, "decoder.", 8) != 0))
            continue;
        sd_tensor *t = sd_st_tensor(s->file, name, &err);
        ok = t && sd_st_writer_add(w, name, t, &err) == SD_OK;
        sd_tensor_unref(t);
    }
    if (ok) CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    sd_checkpoint *c = NULL;
    CHECK_OK(sd_checkpoint_open(be, path, NULL, &c, &err), &err);
    if (!c) return;
    const sd_ckpt_info *info = sd_checkpoint_info(c);
    CHECK_MSG(info->has_vae && !info->has_unet && !info->has_text_encoder && info->family == SD_CKPT_NONE,
              "%s: checkpoint parts", path);
    CHECK_MSG(info->vae_prefix && strcmp(info->vae_prefix, s->prefix) == 0, "%s: VAE prefix '%s', want '%s'", path,
              info->vae_prefix ? info->vae_prefix : "(none)", s->prefix);
    sd_vae *v = NULL;
    sd_tensor *a = NULL;
    double worst = 0;
    CHECK_OK(sd_checkpoint_vae(c, &v, &err), &err);
    if (v) CHECK_OK(sd_vae_decode(v, z, &a, &err), &err);
    if (a) CHECK_MSG(sd_test_allclose(a, img, 0, 0, &worst, NULL), "checkpoint-path decode |d| %g", worst);
    printf("    as a checkpoint (VAE keys under '%s'): found, decode identical\n", s->prefix);
    sd_tensor_unref(a);
    sd_checkpoint_unref(c);
}

/* Runs one manifest case; returns 1 when its golden file was present. */
static int run_case(cJSON *manifest, cJSON *c) {
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
    const char *comp = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "component"));
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    cJSON *case_tol = cJSON_GetObjectItemCaseSensitive(c, "tolerance");
    if (!id || !comp || !file || !tensors) return 0;
    int is_vae = strcmp(comp, "vae") == 0;
    int is_e2e = strcmp(comp, "e2e") == 0 && cJSON_GetObjectItemCaseSensitive(tensors, "latent_out") &&
                 cJSON_GetObjectItemCaseSensitive(tensors, "image");
    if (!is_vae && !is_e2e) return 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    sd_st_file *g = NULL;
    sd_error err;
    if (sd_st_open(path, &g, &err) != SD_OK) {
        CHECK_MSG(0, "case %s: the manifest lists golden file %s: %s", id, path, err.msg);
        return 0;
    }
    printf("case %s:\n", id);
    float scale = 1.0f;
    model_slot *slot = model_for(manifest, c, id, &scale);
    sd_vae *vae = slot ? slot->vae : NULL;
    CHECK_MSG(slot != NULL, "case %s: no manifest model matches the case id", id);
    if (vae && is_vae) {
        /* groups: distinct prefixes of the tensor names */
        char seen[16][64];
        int n_seen = 0;
        cJSON *t;
        cJSON_ArrayForEach(t, tensors) {
            const char *dot = strchr(t->string, '.');
            if (!dot || dot - t->string >= 64) continue;
            char grp[64];
            memcpy(grp, t->string, (size_t)(dot - t->string));
            grp[dot - t->string] = 0;
            int dup = 0;
            for (int i = 0; i < n_seen; i++) dup |= strcmp(seen[i], grp) == 0;
            if (dup || n_seen == 16) continue;
            strcpy(seen[n_seen++], grp);
            run_group(vae, g, tensors, case_tol, grp, scale);
        }
    } else if (vae) { /* e2e: image = VAEDecode(latent_out) */
        sd_tensor *z = sd_st_tensor_f32(g, "latent_out", &err), *img = NULL;
        CHECK(z != NULL);
        if (z) CHECK_OK(sd_vae_decode(vae, z, &img, &err), &err);
        if (img) compare("image", img, g, cJSON_GetObjectItemCaseSensitive(tensors, "image"), case_tol);
        if (z && img && !slot->tiled_checked) {
            slot->tiled_checked = 1;
            check_tiled(vae, z, img);
            check_diffusers_layout(slot, z, img);
            check_checkpoint_path(slot, z, img);
        }
        sd_tensor_unref(z);
        sd_tensor_unref(img);
    }
    sd_st_close(g);
    return 1;
}

int main(int argc, char **argv) {
    /* argv[1]: a family's reference set ("flux": sd_golden_family_dir) */
    static char sub[1200];
    dir = sd_golden_dir();
    if (argc > 1) {
        snprintf(sub, sizeof sub, "%s", sd_golden_family_dir(argv[1]));
        dir = sub;
    }
    cJSON *manifest = sd_golden_manifest(dir);
    sd_error err;
    be = sd_golden_backend();
    if (!be) {
        cJSON_Delete(manifest);
        return sd_test_finish();
    }
    /* what the manifest lists must be there (the e2e files hold the
     * latents this test decodes) */
    int listed = sd_golden_require_cases(manifest, dir, "vae") + sd_golden_require_cases(manifest, dir, "e2e");
    int ran = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) ran += run_case(manifest, c);
    /* a wrong prefix is an error naming the missing key */
    if (n_models > 0 && models[0].file && models[0].vae) {
        sd_vae *none = NULL;
        CHECK(sd_vae_load(be, models[0].file, "nope.", &none, &err) == SD_ERR_NOT_FOUND && !none);
        CHECK_MSG(strstr(err.msg, "nope.decoder.conv_in.weight") != NULL, "message: %s", err.msg);
        sd_tensor *bad = sd_tensor_new4(SD_F32, 4, 1, 3, 8, 8), *out = NULL; /* 3 != latent channels */
        if (models[0].vae) CHECK(sd_vae_decode(models[0].vae, bad, &out, &err) == SD_ERR_INVALID && !out);
        sd_tensor_unref(bad);
    }
    for (int i = 0; i < n_models; i++) {
        sd_vae_free(models[i].vae);
        sd_st_close(models[i].file);
    }
    sd_backend_free(be);
    cJSON_Delete(manifest);
    if (!listed) sd_test_skip("the manifest under %s lists no VAE case", dir);
    CHECK_MSG(ran > 0, "no VAE case ran");
    return sd_test_finish();
}
