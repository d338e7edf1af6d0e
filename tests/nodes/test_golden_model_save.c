/* ModelSave, CheckpointSave, CLIPSave and VAESave
 * (nodes/model/model_save_nodes.c) against what ComfyUI's own nodes write
 * for the same checkpoint (tests/data/model_save, make_model_save.py: file
 * names, keys with dtype and shape, metadata). For every case of the
 * manifest:
 *   - CheckpointLoaderSimple on the case's tiny checkpoint (its VAE from the
 *     same file), then the case's node with its filename_prefix and the
 *     manifest's prompt and extra_pnginfo;
 *   - exactly the files ComfyUI wrote, where it put them (prefix folder,
 *     names, counter 00001); in each, ComfyUI's keys with ComfyUI's shapes,
 *     integer dtypes equal and float tensors float (ComfyUI saves the dtype
 *     it computes in, F32 on the CPU; sdflow the dtype it holds), and
 *     ComfyUI's metadata key for key, nothing more;
 *   - the saved file loads back (CheckpointLoaderSimple, UNETLoader,
 *     CLIPLoader, VAELoader as the file kind wants) with every weight
 *     bit-equal to the saved MODEL's / CLIP's / VAE's: the UNet's and VAE's
 *     parameters one by one, a CLIP's as both export in the HF layout
 *     (sd_clip_export: a tower read from OpenCLIP keys compares with its
 *     reload from HF keys). Same stored values read back, so equality is
 *     bitwise: a reload that runs must rerun bit-identically;
 *   - a second save takes the next counter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cJSON.h"
#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/synth/synth.h"
#include "models/text/clip.h"
#include "models/text/text_encode.h"
#include "models/vae/vae.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const sd_env *g_env;
static char *g_prompt, *g_extra;

static sd_value *run_node(const char *type, const char *const *names, sd_value *const *vals, int n,
                          sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "9", .class_type = type, .prompt_json = g_prompt,
                       .extra_pnginfo_json = g_extra};
    sd_value *out[4] = {NULL, NULL, NULL, NULL};
    sd_error_clear(err);
    sd_status rc = nt_run_named(&ctx, names, vals, n, out, err);
    if (rc) {
        for (int i = 0; i < 4; i++) sd_value_unref(out[i]);
        return NULL;
    }
    if (!out[0]) out[0] = sd_value_none();
    if (!out[1] && !out[2]) return out[0];
    /* a loader's outputs as a list (MODEL, CLIP, VAE) */
    sd_value *l = sd_value_list();
    for (int i = 0; i < 3; i++) sd_value_list_append(l, out[i] ? out[i] : sd_value_none());
    sd_value_unref(out[3]);
    return l;
}

/* ---- bitwise weight comparisons --------------------------------------------------- */

typedef struct weights {
    int n, cap;
    char **keys;
    sd_tensor **t;
} weights;

static void weights_add(weights *w, const char *key, sd_tensor *t) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 256;
        w->keys = realloc(w->keys, (size_t)w->cap * sizeof *w->keys);
        w->t = realloc(w->t, (size_t)w->cap * sizeof *w->t);
        if (!w->keys || !w->t) abort();
    }
    w->keys[w->n] = strdup(key);
    w->t[w->n++] = t;
}

static void weights_free(weights *w) {
    for (int i = 0; i < w->n; i++) free(w->keys[i]), sd_tensor_unref(w->t[i]);
    free(w->keys), free(w->t);
    memset(w, 0, sizeof *w);
}

/* 0 when both lists hold the same keys with the same bytes, in order. */
static int weights_differ(const char *what, const weights *a, const weights *b) {
    int bad = a->n == 0 || a->n != b->n;
    CHECK_MSG(a->n > 0 && a->n == b->n, "%s: %d weights, reloaded %d", what, a->n, b->n);
    for (int i = 0; i < a->n && i < b->n; i++) {
        const sd_tensor *x = a->t[i], *y = b->t[i];
        int same = strcmp(a->keys[i], b->keys[i]) == 0 && x->dtype == y->dtype && x->nbytes == y->nbytes &&
                   memcmp(x->data, y->data, x->nbytes) == 0;
        if (!same && bad++ < 3) CHECK_MSG(0, "%s: %s differs from its reload (%s)", what, a->keys[i], b->keys[i]);
    }
    return bad;
}

static void unet_collect(void *ud, const char *key, sd_bt **slot) {
    if (slot && *slot) weights_add(ud, key, sd_bt_to_host(*slot));
}

static void vae_collect(void *ud, const char *key, const sd_bt *t, int ndim, const int64_t *shape) {
    (void)ndim, (void)shape;
    weights_add(ud, key, sd_bt_to_host(t));
}

static sd_status clip_collect(void *ud, const char *key, sd_tensor *t, sd_error *err) {
    (void)err;
    weights_add(ud, key, sd_tensor_ref(t));
    return SD_OK;
}

static void model_weights(sd_value *m, weights *w) {
    sd_error err;
    sd_model_ref *r = sd_value_as_handle(m, &sd_handle_model);
    sd_unet *u = NULL;
    if (r) CHECK_OK(sd_nodes_model_unet(r, &u, &err), &err);
    if (u) sd_unet_param_each(u, unet_collect, w);
}

static void vae_weights(sd_value *v, weights *w) {
    sd_error err;
    sd_vae_ref *r = sd_value_as_handle(v, &sd_handle_vae);
    sd_vae *vae = NULL;
    if (r) CHECK_OK(sd_checkpoint_vae(r->ckpt, &vae, &err), &err);
    if (vae) sd_vae_param_each(vae, vae_collect, w);
}

/* One tower of a CLIP ('l', 'g', or '?' = the only one) in the HF layout. */
static void clip_weights(sd_value *c, char which, weights *w) {
    sd_error err;
    sd_clip_ref *r = sd_value_as_handle(c, &sd_handle_clip);
    sd_text_encoder *te = NULL;
    if (r) CHECK_OK(sd_nodes_clip_encoder(r, &te, &err), &err);
    if (!te) return;
    const sd_clip *l = sd_text_encoder_clip_l(te), *g = sd_text_encoder_clip_g(te);
    const sd_clip *t = which == 'l' ? l : which == 'g' ? g : (l && !g) ? l : (g && !l) ? g : NULL;
    CHECK_MSG(t != NULL, "no CLIP tower '%c'", which);
    if (t) CHECK_OK(sd_clip_export((sd_clip *)t, SD_CLIP_LAYOUT_HF, clip_collect, w, &err), &err);
}

/* ---- the files --------------------------------------------------------------------- */

static int is_float_name(const char *dt) {
    sd_dtype d;
    return sd_dtype_from_name(dt, &d) == 0 && sd_dtype_is_float(d);
}

static void check_file(const char *id, const char *path, cJSON *want) {
    sd_error err;
    sd_st_file *f = NULL;
    CHECK_MSG(sd_st_open(path, &f, &err) == SD_OK, "%s: %s: %s", id, path, err.msg);
    if (!f) return;
    cJSON *tensors = cJSON_GetObjectItem(want, "tensors");
    CHECK_MSG((int)sd_st_count(f) == cJSON_GetArraySize(tensors), "%s: %zu tensors, ComfyUI wrote %d", id,
              sd_st_count(f), cJSON_GetArraySize(tensors));
    int bad = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const sd_st_entry *st = sd_st_find(f, t->string);
        const char *dt = cJSON_GetStringValue(cJSON_GetArrayItem(t, 0));
        cJSON *shape = cJSON_GetArrayItem(t, 1);
        int ok = st && dt && st->ndim == cJSON_GetArraySize(shape);
        for (int d = 0; ok && d < st->ndim; d++)
            ok = st->shape[d] == (int64_t)cJSON_GetNumberValue(cJSON_GetArrayItem(shape, d));
        if (ok && is_float_name(dt)) ok = sd_dtype_is_float(st->dtype);
        else if (ok) ok = strcmp(sd_dtype_name(st->dtype), dt) == 0;
        if (!ok && bad++ < 3)
            CHECK_MSG(0, "%s: key %s missing or of another shape or dtype (ComfyUI: %s)", id, t->string, dt ? dt : "?");
    }
    CHECK_MSG(bad == 0, "%s: %d keys differ from ComfyUI's", id, bad);
    cJSON *meta = cJSON_GetObjectItem(want, "metadata"), *m;
    int nmeta = 0;
    cJSON_ArrayForEach(m, meta) {
        const char *v = sd_st_metadata(f, m->string);
        CHECK_MSG(v && strcmp(v, cJSON_GetStringValue(m)) == 0, "%s: metadata %s = %s, ComfyUI: %s", id, m->string,
                  v ? v : "(none)", cJSON_GetStringValue(m));
        nmeta++;
    }
    CHECK_MSG(nmeta > 0, "%s: the manifest lists no metadata", id);
    CHECK_MSG((int)sd_st_metadata_count(f) == nmeta, "%s: %zu metadata entries, ComfyUI wrote %d", id,
              sd_st_metadata_count(f), nmeta);
    sd_st_close(f);
}

static int count_files(const char *dir) {
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "find '%s' -type f | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

static char g_models[4200];

/* Links `saved` into models/<folder>/<name> and returns the name's value. */
static sd_value *link_model(const char *folder, const char *name, const char *saved) {
    char dir[4400], link[4600];
    snprintf(dir, sizeof dir, "%s/%s", g_models, folder);
    snprintf(link, sizeof link, "mkdir -p '%s'", dir);
    CHECK(system(link) == 0);
    snprintf(link, sizeof link, "%s/%s", dir, name);
    unlink(link);
    CHECK(symlink(saved, link) == 0);
    return sd_value_string(name);
}

/* The saved file loaded back and compared with what was saved. */
static void check_reload(const char *id, const char *node, const char *fam, const char *saved, sd_value *model,
                         sd_value *clip, sd_value *vae) {
    sd_error err;
    char name[128];
    snprintf(name, sizeof name, "saved_%s_%s_%d.safetensors", fam, node, (int)(strlen(saved) % 1000));
    weights a = {0}, b = {0};
    if (strcmp(node, "ModelSave") == 0) {
        sd_value *uv[] = {link_model("diffusion_models", name, saved), sd_value_string("default")};
        sd_value *m2 = run_node("UNETLoader", (const char *[]){"unet_name", "weight_dtype"}, uv, 2, &err);
        nt_free_values(uv, 2);
        CHECK_MSG(m2 != NULL, "%s: the saved file does not load: %s", id, err.msg);
        if (m2) model_weights(model, &a), model_weights(m2, &b), weights_differ(id, &a, &b);
        sd_value_unref(m2);
    } else if (strcmp(node, "CheckpointSave") == 0) {
        sd_value *nm = link_model("checkpoints", name, saved);
        sd_value *l = run_node("CheckpointLoaderSimple", (const char *[]){"ckpt_name"}, &nm, 1, &err);
        sd_value_unref(nm);
        CHECK_MSG(l != NULL, "%s: the saved checkpoint does not load: %s", id, err.msg);
        if (l) {
            char what[160];
            snprintf(what, sizeof what, "%s MODEL", id);
            model_weights(model, &a), model_weights(sd_value_list_get(l, 0), &b), weights_differ(what, &a, &b);
            weights_free(&a), weights_free(&b);
            snprintf(what, sizeof what, "%s VAE", id);
            vae_weights(vae, &a), vae_weights(sd_value_list_get(l, 2), &b), weights_differ(what, &a, &b);
            for (const char *t = "lg"; *t; t++) {
                sd_clip_ref *r = sd_value_as_handle(clip, &sd_handle_clip);
                sd_text_encoder *te = NULL;
                if (!r || sd_nodes_clip_encoder(r, &te, &err) != SD_OK) continue;
                if (!(*t == 'l' ? sd_text_encoder_clip_l(te) : sd_text_encoder_clip_g(te))) continue;
                weights_free(&a), weights_free(&b);
                snprintf(what, sizeof what, "%s CLIP %c", id, *t);
                clip_weights(clip, *t, &a), clip_weights(sd_value_list_get(l, 1), *t, &b);
                weights_differ(what, &a, &b);
            }
        }
        sd_value_unref(l);
    } else if (strcmp(node, "CLIPSave") == 0) {
        /* each tower's file alone; the tower is the one its name says */
        char which = strstr(saved, "_clip_g_") ? 'g' : 'l';
        sd_value *cv[] = {link_model("text_encoders", name, saved), sd_value_string("stable_diffusion")};
        sd_value *c2 = run_node("CLIPLoader", (const char *[]){"clip_name", "type"}, cv, 2, &err);
        nt_free_values(cv, 2);
        CHECK_MSG(c2 != NULL, "%s: the saved file does not load: %s", id, err.msg);
        if (c2) clip_weights(clip, which, &a), clip_weights(c2, '?', &b), weights_differ(id, &a, &b);
        sd_value_unref(c2);
    } else if (strcmp(node, "VAESave") == 0) {
        sd_value *nm = link_model("vae", name, saved);
        sd_value *v2 = run_node("VAELoader", (const char *[]){"vae_name"}, &nm, 1, &err);
        sd_value_unref(nm);
        CHECK_MSG(v2 != NULL, "%s: the saved file does not load: %s", id, err.msg);
        if (v2) vae_weights(vae, &a), vae_weights(v2, &b), weights_differ(id, &a, &b);
        sd_value_unref(v2);
    }
    weights_free(&a), weights_free(&b);
}

int main(void) {
    const char *dir = sd_golden_topic_dir("model_save");
    cJSON *man = sd_golden_manifest(dir);
    const char *td = sd_test_testdata_dir();
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/models/tiny-sd1.safetensors", td);
    if (access(probe, R_OK)) sd_test_skip("no %s", probe);
    g_prompt = cJSON_PrintUnformatted(cJSON_GetObjectItem(man, "prompt"));
    g_extra = cJSON_PrintUnformatted(cJSON_GetObjectItem(man, "extra_pnginfo"));

    const char *tmp = sd_test_tmpdir("nodes_golden_model_save");
    char output[4200], tok[4200], cmd[9000];
    snprintf(g_models, sizeof g_models, "%s/models", tmp);
    snprintf(output, sizeof output, "%s/output", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' && mkdir -p '%s/checkpoints' '%s'", output, g_models, g_models,
             output);
    CHECK(system(cmd) == 0);
    sd_error err;
    sd_error_clear(&err);
    snprintf(tok, sizeof tok, "%s/tokenizer", tmp);
    CHECK_OK(sd_synth_vocab_write(tok, &err), &err);
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, g_models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tok, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.output_dir, output, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    g_env = &env;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    int ran = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(man, "cases")) {
        const char *node = cJSON_GetStringValue(cJSON_GetObjectItem(c, "node"));
        const char *fam = cJSON_GetStringValue(cJSON_GetObjectItem(c, "family"));
        const char *ck = cJSON_GetStringValue(cJSON_GetObjectItem(c, "checkpoint"));
        const char *prefix = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "inputs"), "filename_prefix"));
        cJSON *files = cJSON_GetObjectItem(c, "files");
        CHECK_MSG(node && fam && ck && prefix && cJSON_GetArraySize(files) > 0, "manifest case");
        if (!node || !fam || !ck || !prefix || cJSON_GetArraySize(files) < 1) continue;
        char id[128];
        snprintf(id, sizeof id, "%s %s", fam, node);
        char cpath[4400], link[4600], name[256];
        snprintf(cpath, sizeof cpath, "%s/%s", td, strncmp(ck, "testdata/", 9) == 0 ? ck + 9 : ck);
        snprintf(name, sizeof name, "%s.safetensors", fam);
        snprintf(link, sizeof link, "%s/checkpoints/%s", g_models, name);
        unlink(link);
        CHECK(symlink(cpath, link) == 0);
        sd_value *nm = sd_value_string(name);
        sd_value *loaded = run_node("CheckpointLoaderSimple", (const char *[]){"ckpt_name"}, &nm, 1, &err);
        sd_value_unref(nm);
        CHECK_MSG(loaded != NULL, "%s: load: %s", id, err.msg);
        if (!loaded) continue;
        sd_value *model = sd_value_list_get(loaded, 0), *clip = sd_value_list_get(loaded, 1),
                 *vae = sd_value_list_get(loaded, 2);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'/*", output);
        CHECK(system(cmd) == 0);
        const char *names[4];
        sd_value *v[4];
        int n = 0;
        if (strcmp(node, "ModelSave") == 0 || strcmp(node, "CheckpointSave") == 0) names[n] = "model", v[n++] = model;
        if (strcmp(node, "CLIPSave") == 0 || strcmp(node, "CheckpointSave") == 0) names[n] = "clip", v[n++] = clip;
        if (strcmp(node, "VAESave") == 0 || strcmp(node, "CheckpointSave") == 0) names[n] = "vae", v[n++] = vae;
        CHECK_MSG(n > 0, "%s: unknown node in the manifest", id);
        names[n] = "filename_prefix", v[n] = sd_value_string(prefix);
        sd_value *r = run_node(node, names, v, n + 1, &err);
        CHECK_MSG(r != NULL, "%s: %s", id, err.msg);
        sd_value_unref(r);
        CHECK_MSG(count_files(output) == cJSON_GetArraySize(files), "%s: %d files written, ComfyUI wrote %d", id,
                  count_files(output), cJSON_GetArraySize(files));
        cJSON *want;
        cJSON_ArrayForEach(want, files) {
            const char *rel = cJSON_GetStringValue(cJSON_GetObjectItem(want, "file"));
            char saved[4400];
            snprintf(saved, sizeof saved, "%s/%s", output, rel ? rel : "");
            CHECK_MSG(nt_file_exists(saved), "%s wrote no %s", id, saved);
            if (!nt_file_exists(saved)) continue;
            char fid[300];
            snprintf(fid, sizeof fid, "%s %s", id, rel);
            check_file(fid, saved, want);
            check_reload(fid, node, fam, saved, model, clip, vae);
        }
        /* the next save takes the next counter, for every file */
        r = run_node(node, names, v, n + 1, &err);
        CHECK_MSG(r != NULL, "%s: second save: %s", id, err.msg);
        sd_value_unref(r);
        cJSON_ArrayForEach(want, files) {
            const char *rel = cJSON_GetStringValue(cJSON_GetObjectItem(want, "file"));
            char next[4400];
            snprintf(next, sizeof next, "%s/%s", output, rel ? rel : "");
            char *p = strstr(next, "_00001_.safetensors");
            if (p) memcpy(p, "_00002_", 7);
            CHECK_MSG(p && nt_file_exists(next), "%s: a second save did not write %s", id, next);
        }
        sd_value_unref(v[n]);
        sd_value_unref(loaded);
        ran++;
    }
    CHECK_MSG(ran == cJSON_GetArraySize(cJSON_GetObjectItem(man, "cases")), "%d of %d cases ran", ran,
              cJSON_GetArraySize(cJSON_GetObjectItem(man, "cases")));
    cJSON_Delete(man);
    free(g_prompt), free(g_extra);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
