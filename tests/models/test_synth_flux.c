/* The synthesized Flux files (models/synth/synth_flux.c):
 *   - each file's layout, made with the shapes of the Flux reference set's
 *     tiny models (read from its manifest), is key for key, shape for shape
 *     and dtype for dtype that of the reference file of the same layout
 *     (which mirror the published files): the BF16 DiT, t5xxl_fp16,
 *     clip_l, ae and the fp8 single-file checkpoint;
 *   - the full-size presets have FLUX.1's parameter counts (without writing
 *     anything): DiT dev 11.90 G, schnell 11.89 G (no guidance_in), T5-XXL
 *     encoder 4.76 G, CLIP-L 123 M, ae 83.8 M; the fp8 checkpoint's data is
 *     about the 17.2 GB of Comfy-Org's flux1-dev-fp8;
 *   - the tiny presets written to disk open as what they are: a Flux
 *     checkpoint (dev with guidance, schnell without) whose DiT loads, a
 *     T5 and a CLIP-L text-encoder file, a 16-channel VAE, and the fp8 file
 *     with all four parts, marked random; norms are 1 and weights spread as
 *     N(0, 1/fan_in) (the sample variance within 10%); two writes with one
 *     seed are the same bytes, another seed other bytes;
 *   - the GGUF files (DiT and T5, every type synth writes) are the same
 *     bytes whether 1, 2 or 3 threads made and quantized them (each thread
 *     writes whole rows of blocks: the same computation, split). */
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

typedef struct {
    const sd_st_file *ref;
    const char *what;
    int n, bad;
} cmp_ctx;

static void check_key(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    cmp_ctx *c = user;
    c->n++;
    const sd_st_entry *e = sd_st_find(c->ref, name);
    if (!e) {
        if (c->bad++ < 5) CHECK_MSG(0, "%s: synthesized key %s not in the reference", c->what, name);
        return;
    }
    int same = e->ndim == ndim && e->dtype == dtype;
    for (int i = 0; same && i < ndim; i++) same = e->shape[i] == shape[i];
    if (!same && c->bad++ < 5) CHECK_MSG(0, "%s: key %s: shape or dtype differs from the reference", c->what, name);
}

static int cfg_int(const cJSON *m, const char *model, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "models"),
                                                                                  model), "config"), key);
    CHECK_MSG(cJSON_IsNumber(v) || cJSON_IsBool(v), "manifest: models.%s.config.%s", model, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : v ? v->valueint : 0;
}

/* A config with the reference set's tiny shapes. */
static sd_synth_flux_config from_manifest(const cJSON *m, int guidance) {
    sd_synth_flux_config c = {.name = "from-manifest"};
    c.hidden = cfg_int(m, "flux_dev", "hidden_size");
    c.heads = cfg_int(m, "flux_dev", "num_heads");
    c.depth = cfg_int(m, "flux_dev", "depth");
    c.depth_single = cfg_int(m, "flux_dev", "depth_single_blocks");
    const cJSON *r = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "models"), "flux_dev"), "config"), "mlp_ratio");
    c.mlp_ratio = r ? (int)r->valuedouble : 0;
    c.in_channels = cfg_int(m, "flux_dev", "in_channels");
    c.vec_in = cfg_int(m, "flux_dev", "vec_in_dim");
    c.context_in = cfg_int(m, "flux_dev", "context_in_dim");
    c.guidance_embed = guidance;
    c.t5_d_model = cfg_int(m, "t5xxl", "d_model");
    c.t5_d_kv = cfg_int(m, "t5xxl", "d_kv");
    c.t5_heads = cfg_int(m, "t5xxl", "num_heads");
    c.t5_d_ff = cfg_int(m, "t5xxl", "d_ff");
    c.t5_layers = cfg_int(m, "t5xxl", "num_layers");
    c.t5_vocab = cfg_int(m, "t5xxl", "vocab_size");
    c.t5_buckets = cfg_int(m, "t5xxl", "relative_attention_num_buckets");
    c.clip_hidden = cfg_int(m, "clip_l", "hidden_size");
    c.clip_layers = cfg_int(m, "clip_l", "num_hidden_layers");
    c.clip_mlp = cfg_int(m, "clip_l", "intermediate_size");
    c.clip_vocab = 49408;
    c.clip_positions = 77;
    c.vae_ch = cfg_int(m, "ae", "ch");
    const cJSON *mult = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "models"), "ae"), "config"), "ch_mult");
    c.vae_levels = cJSON_GetArraySize(mult);
    for (int i = 0; i < c.vae_levels && i < 4; i++) c.vae_ch_mult[i] = cJSON_GetArrayItem(mult, i)->valueint;
    c.vae_res_blocks = cfg_int(m, "ae", "num_res_blocks");
    c.vae_z = cfg_int(m, "ae", "z_channels");
    return c;
}

/* Last: the only part that needs the reference set (absent: a skip after
 * the checks above). */
static void check_layouts(void) {
    char dir[4200], mpath[4300];
    snprintf(dir, sizeof dir, "%s/flux", sd_test_testdata_dir());
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    char *text = sd_test_read_file(mpath, NULL);
    if (!text) sd_test_skip("the Flux reference set is absent (%s)", mpath);
    cJSON *m = cJSON_Parse(text);
    free(text);
    CHECK_MSG(m != NULL, "%s is not JSON", mpath);
    if (!m) return;
    struct {
        const char *model;
        sd_synth_flux_part part;
        int guidance;
    } files[] = {{"flux_dev", SD_SYNTH_FLUX_DIT, 1},       {"flux_schnell", SD_SYNTH_FLUX_DIT, 0},
                 {"t5xxl", SD_SYNTH_FLUX_T5, 1},           {"clip_l", SD_SYNTH_FLUX_CLIP_L, 1},
                 {"ae", SD_SYNTH_FLUX_AE, 1},              {"flux_dev_fp8_ckpt", SD_SYNTH_FLUX_CKPT_FP8, 1}};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        const cJSON *fm = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "models"), files[i].model);
        const cJSON *fn = cJSON_GetObjectItem(fm, "file");
        CHECK_MSG(cJSON_IsString(fn), "manifest: models.%s.file", files[i].model);
        if (!cJSON_IsString(fn)) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, fn->valuestring);
        sd_error err = {0};
        sd_st_file *ref = NULL;
        CHECK_OK(sd_st_open(path, &ref, &err), &err);
        if (!ref) continue;
        sd_synth_flux_config c = from_manifest(m, files[i].guidance);
        cmp_ctx x = {ref, files[i].model, 0, 0};
        sd_synth_flux_keys(&c, files[i].part, check_key, &x);
        CHECK_MSG((size_t)x.n == sd_st_count(ref), "%s: %d keys synthesized, the reference has %zu",
                  files[i].model, x.n, sd_st_count(ref));
        sd_st_close(ref);
    }
    cJSON_Delete(m);
}

typedef struct {
    double params, bytes;
} count_ctx;

static void count_key(void *user, const char *name, sd_dtype dtype, int ndim, const int64_t *shape) {
    (void)name;
    count_ctx *c = user;
    double n = 1;
    for (int i = 0; i < ndim; i++) n *= (double)shape[i];
    c->params += n;
    c->bytes += n * (double)sd_dtype_size(dtype);
}

static count_ctx count(const char *preset, sd_synth_flux_part part) {
    count_ctx c = {0, 0};
    sd_synth_flux_keys(sd_synth_flux_preset(preset), part, count_key, &c);
    return c;
}

static void check_full_size(void) {
    /* FLUX.1 dev: 11,901,408,320 parameters; schnell lacks guidance_in's
     * 256*3072 + 3072 + 3072*3072 + 3072 */
    count_ctx dev = count("flux-dev", SD_SYNTH_FLUX_DIT), sch = count("flux-schnell", SD_SYNTH_FLUX_DIT);
    CHECK_MSG(dev.params == 11901408320.0, "flux-dev DiT: %.0f parameters", dev.params);
    CHECK_MSG(dev.params - sch.params == 256.0 * 3072 + 3072 + 3072.0 * 3072 + 3072, "schnell: no guidance_in");
    count_ctx t5 = count("flux-dev", SD_SYNTH_FLUX_T5), cl = count("flux-dev", SD_SYNTH_FLUX_CLIP_L),
              ae = count("flux-dev", SD_SYNTH_FLUX_AE), ck = count("flux-dev", SD_SYNTH_FLUX_CKPT_FP8);
    CHECK_MSG(t5.params == 4762310656.0, "T5-XXL encoder: %.0f parameters", t5.params);
    CHECK_MSG(cl.params > 123.0e6 && cl.params < 124.0e6, "CLIP-L: %.0f parameters", cl.params);
    CHECK_MSG(ae.params > 83.6e6 && ae.params < 83.9e6, "ae: %.0f parameters", ae.params);
    CHECK_MSG(ck.params == dev.params + t5.params + cl.params + ae.params, "the fp8 file holds the four parts");
    CHECK_MSG(ck.bytes > 17.0e9 && ck.bytes < 17.4e9, "fp8 checkpoint data: %.3g bytes", ck.bytes);
    printf("flux-dev: DiT %.4g, T5 %.4g, CLIP-L %.4g, ae %.4g parameters; fp8 file %.4g bytes\n", dev.params,
           t5.params, cl.params, ae.params, ck.bytes);
}

/* Mean and variance of a tensor read back as f32. */
static void stats(sd_st_file *f, const char *key, double *mean, double *var, int64_t *fan_in) {
    sd_error err = {0};
    sd_tensor *t = sd_st_tensor_f32(f, key, &err);
    CHECK_MSG(t != NULL, "%s: %s", key, err.msg);
    *mean = *var = 0;
    *fan_in = 1;
    if (!t) return;
    for (int i = 1; i < t->ndim; i++) *fan_in *= t->shape[i];
    int64_t n = sd_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) *mean += sd_tensor_f32(t)[i];
    *mean /= (double)n;
    for (int64_t i = 0; i < n; i++) *var += pow(sd_tensor_f32(t)[i] - *mean, 2);
    *var /= (double)n;
    sd_tensor_unref(t);
}

static void check_written(void) {
    const char *tmp = sd_test_tmpdir("synth_flux");
    sd_error err = {0};
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 1, &be, &err), &err);
    if (!be) return;
    const char *presets[2] = {"flux-dev-tiny", "flux-schnell-tiny"};
    for (int p = 0; p < 2; p++) {
        const sd_synth_flux_config *cfg = sd_synth_flux_preset(presets[p]);
        CHECK(cfg != NULL);
        if (!cfg) continue;
        char dit[4200], fp8[4200];
        snprintf(dit, sizeof dit, "%s/%s.safetensors", tmp, cfg->name);
        snprintf(fp8, sizeof fp8, "%s/%s-fp8.safetensors", tmp, cfg->name);
        CHECK_OK(sd_synth_flux_write(cfg, SD_SYNTH_FLUX_DIT, 1, dit, &err), &err);
        CHECK_OK(sd_synth_flux_write(cfg, SD_SYNTH_FLUX_CKPT_FP8, 1, fp8, &err), &err);
        const char *files[2] = {dit, fp8};
        for (int k = 0; k < 2; k++) {
            sd_checkpoint_opts o;
            sd_checkpoint_opts_default(&o);
            sd_checkpoint *ck = NULL;
            CHECK_OK(sd_checkpoint_open(be, files[k], &o, &ck, &err), &err);
            if (!ck) continue;
            const sd_ckpt_info *in = sd_checkpoint_info(ck);
            CHECK_MSG(in->family == SD_CKPT_FLUX && in->random_weights, "%s: a random Flux file", files[k]);
            CHECK(in->flux.hidden_size == cfg->hidden && in->flux.num_heads == cfg->heads);
            CHECK(in->flux.depth == cfg->depth && in->flux.depth_single_blocks == cfg->depth_single);
            CHECK(in->flux.guidance_embed == cfg->guidance_embed);
            CHECK_MSG(k == 0 || (in->has_text_encoder && in->te_kind == SD_TE_FLUX && in->has_vae),
                      "the fp8 file has a Flux text encoder and a VAE");
            sd_dmodel dm;
            CHECK_OK(sd_checkpoint_dmodel(ck, &dm, &err), &err);
            sd_checkpoint_unref(ck);
        }
    }
    /* the standalone files detect as what they are */
    const sd_synth_flux_config *cfg = sd_synth_flux_preset("flux-dev-tiny");
    struct {
        sd_synth_flux_part part;
        sd_te_kind te;
    } parts[] = {{SD_SYNTH_FLUX_T5, SD_TE_T5}, {SD_SYNTH_FLUX_CLIP_L, SD_TE_SD1}, {SD_SYNTH_FLUX_AE, 0}};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/part%zu.safetensors", tmp, i);
        CHECK_OK(sd_synth_flux_write(cfg, parts[i].part, 1, path, &err), &err);
        sd_ckpt_info info;
        CHECK_OK(sd_checkpoint_probe(path, &info, &err), &err);
        CHECK_MSG(info.te_kind == parts[i].te && info.has_vae == (parts[i].part == SD_SYNTH_FLUX_AE),
                  "%s detects as its part", sd_synth_flux_part_name(parts[i].part));
        if (parts[i].part == SD_SYNTH_FLUX_AE) {
            sd_st_file *f = NULL;
            CHECK_OK(sd_st_open(path, &f, &err), &err);
            double mean, var;
            int64_t fan;
            if (f) {
                stats(f, "decoder.mid.block_1.norm1.weight", &mean, &var, &fan);
                CHECK_MSG(mean == 1.0 && var == 0.0, "norm weights are 1");
                stats(f, "decoder.up.1.block.0.conv1.weight", &mean, &var, &fan);
                CHECK_MSG(fabs(var * (double)fan - 1.0) < 0.1 && fabs(mean) < 0.1 / sqrt((double)fan),
                          "weights ~ N(0, 1/fan_in): mean %g, var * fan_in %g", mean, var * (double)fan);
                sd_st_close(f);
            }
        }
    }
    /* one seed, one file; another seed, another */
    char a[4200], b[4200], c[4200];
    snprintf(a, sizeof a, "%s/seed_a.safetensors", tmp);
    snprintf(b, sizeof b, "%s/seed_b.safetensors", tmp);
    snprintf(c, sizeof c, "%s/seed_c.safetensors", tmp);
    CHECK_OK(sd_synth_flux_write(cfg, SD_SYNTH_FLUX_DIT, 7, a, &err), &err);
    CHECK_OK(sd_synth_flux_write(cfg, SD_SYNTH_FLUX_DIT, 7, b, &err), &err);
    CHECK_OK(sd_synth_flux_write(cfg, SD_SYNTH_FLUX_DIT, 8, c, &err), &err);
    size_t na = 0, nb = 0, nc = 0;
    char *da = sd_test_read_file(a, &na), *db = sd_test_read_file(b, &nb), *dc = sd_test_read_file(c, &nc);
    CHECK_MSG(da && db && na == nb && memcmp(da, db, na) == 0, "the same seed writes the same bytes");
    CHECK_MSG(da && dc && na == nc && memcmp(da, dc, na) != 0, "another seed writes other bytes");
    free(da);
    free(db);
    free(dc);
    sd_backend_free(be);
}

static void check_gguf_threads(void) {
    const char *tmp = sd_test_tmpdir("synth_flux_gguf");
    const sd_synth_flux_config *cfg = sd_synth_flux_preset("flux-schnell-tiny");
    CHECK(cfg != NULL);
    if (!cfg) return;
    static const char *const types[] = {"F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "Q4_K_S", "Q5_K_S", "Q6_K"};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (int part = 0; part < 2; part++) {
            /* the T5 (its 32128-row embedding) in two types: the DiT covers them all */
            if (part == 1 && strcmp(types[t], "Q8_0") != 0 && strcmp(types[t], "Q4_K_S") != 0) continue;
            sd_synth_flux_part fp = part ? SD_SYNTH_FLUX_T5 : SD_SYNTH_FLUX_DIT;
            char *one = NULL;
            size_t n_one = 0;
            for (int threads = 1; threads <= 3; threads++) {
                char path[4200];
                snprintf(path, sizeof path, "%s/%s-%d-%d.gguf", tmp, types[t], part, threads);
                sd_error err = {0};
                CHECK_OK(sd_synth_flux_gguf_write(cfg, fp, types[t], 3, threads, path, &err), &err);
                size_t n = 0;
                char *d = sd_test_read_file(path, &n);
                CHECK_MSG(d != NULL, "%s written", path);
                if (threads == 1) {
                    one = d;
                    n_one = n;
                    continue;
                }
                CHECK_MSG(one && d && n == n_one && memcmp(one, d, n) == 0,
                          "%s %s: %d threads write the bytes of 1", sd_synth_flux_part_name(fp), types[t], threads);
                free(d);
                remove(path);
            }
            free(one);
        }
}

int main(void) {
    check_full_size();
    check_gguf_threads();
    check_written();
    CHECK(sd_synth_flux_preset("nope") == NULL);
    check_layouts();
    return sd_test_finish();
}
