/* test_golden_flux_vae_nodes.c - the Flux `ae` through the nodes a workflow
 * uses, against ComfyUI's VAELoader / VAEDecode / VAEEncode goldens (the
 * "vae" cases of the Flux reference set, sd_golden_family_dir("flux")).
 *
 * The manifest's VAELoader file (its models entry whose comfy_name is in
 * vae/) is linked into a models folder under its ComfyUI name, loaded with
 * VAELoader, and every group of a vae case runs through the node its input
 * names: "<g>.latent" (input) -> VAEDecode -> "<g>.image", "<g>.image"
 * (input) -> VAEEncode -> "<g>.latent", at the manifest's tolerances;
 * VAEDecodeTiled with tiles larger than the latent equals VAEDecode. */
#define _DEFAULT_SOURCE /* realpath */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "golden.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_env *g_env;

static sd_value *run1(const char *type, const char *const *names, sd_value **vals, int n, const int *owned) {
    sd_error err;
    sd_node_ctx ctx = {.env = g_env, .node_id = "1", .class_type = type};
    return nt_run1_named(&ctx, names, vals, n, owned, &err);
}

/* The models entry a workflow loads with VAELoader. */
static const cJSON *vae_model(const cJSON *m) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(m, "models")) {
        const char *cn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "comfy_name"));
        if (cn && strncmp(cn, "vae/", 4) == 0) return e;
    }
    return NULL;
}

static void run_case(const char *dir, cJSON *c, sd_value *vae) {
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file")));
    sd_error err;
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    if (!g) return;
    printf("case %s\n", id);
    int groups = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "role"));
        const char *dot = strrchr(t->string, '.');
        if (!role || strcmp(role, "input") != 0 || !dot) continue;
        char grp[64], out_name[128];
        snprintf(grp, sizeof grp, "%.*s", (int)(dot - t->string), t->string);
        int decode = strcmp(dot, ".latent") == 0;
        snprintf(out_name, sizeof out_name, "%s.%s", grp, decode ? "image" : "latent");
        if (!cJSON_GetObjectItemCaseSensitive(tensors, out_name)) continue;
        sd_tensor *in = sd_st_tensor_f32(g, t->string, &err);
        CHECK_MSG(in != NULL, "%s: input %s", id, t->string);
        if (!in) continue;
        groups++;
        sd_tensor *got = NULL;
        if (decode) {
            const char *n[] = {"samples", "vae"};
            sd_value *v[] = {nt_latent(sd_tensor_ref(in)), vae};
            const int own[] = {1, 0};
            sd_value *img = run1("VAEDecode", n, v, 2, own);
            got = img ? sd_tensor_ref(sd_value_as_tensor(img)) : NULL;
            /* one tile covering the latent: the same picture */
            const char *tn[] = {"samples", "vae", "tile_size", "overlap"};
            sd_value *tv[] = {nt_latent(sd_tensor_ref(in)), vae, sd_value_int(4096), sd_value_int(64)};
            const int town[] = {1, 0, 1, 1};
            sd_value *timg = run1("VAEDecodeTiled", tn, tv, 4, town);
            double worst = 0;
            CHECK_MSG(img && timg && sd_test_allclose(sd_value_as_tensor(timg), sd_value_as_tensor(img), 1e-6, 0, &worst, NULL),
                      "%s %s: VAEDecodeTiled with one tile differs (%g)", id, grp, worst);
            sd_value_unref(timg);
            sd_value_unref(img);
        } else {
            const char *n[] = {"pixels", "vae"};
            sd_value *v[] = {nt_tensor_value(sd_tensor_ref(in)), vae};
            const int own[] = {1, 0};
            sd_value *lat = run1("VAEEncode", n, v, 2, own);
            sd_tensor *s = lat ? sd_value_dict_tensor(lat, "samples") : NULL;
            got = s ? sd_tensor_ref(s) : NULL;
            sd_value_unref(lat);
        }
        sd_golden_compare(id, tensors, g, out_name, got);
        sd_tensor_unref(got);
        sd_tensor_unref(in);
    }
    CHECK_MSG(groups > 0, "%s: no decode/encode group", id);
    sd_st_close(g);
}

int main(void) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", sd_golden_family_dir("flux"));
    cJSON *m = sd_golden_manifest(dir);
    int n = sd_golden_require_cases(m, dir, "vae");
    const cJSON *mod = vae_model(m);
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mod, "file"));
    const char *cname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mod, "comfy_name"));
    CHECK_MSG(n > 0 && file && cname, "the manifest lists no vae case or no vae/ model");
    if (n <= 0 || !file || !cname) {
        cJSON_Delete(m);
        return sd_test_finish();
    }
    nt_tiny_sd1 t;
    nt_tiny_sd1_init(&t, "nodes_golden_flux_vae_nodes");
    g_env = &t.env;
    /* the file under its ComfyUI name, as a user places it */
    char rel[1400], src[4096], dst[4400], cmd[9000];
    snprintf(rel, sizeof rel, "%s/%s", dir, file);
    if (!realpath(rel, src)) snprintf(src, sizeof src, "%s", rel); /* the link must not be relative */
    snprintf(dst, sizeof dst, "%s/%s", t.models, cname);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/vae' && ln -sf '%s' '%s'", t.models, src, dst);
    CHECK(system(cmd) == 0);
    const char *nn[] = {"vae_name"};
    sd_value *nv[] = {sd_value_string(cname + 4)};
    const int nown[] = {1};
    sd_value *vae = run1("VAELoader", nn, nv, 1, nown);
    CHECK_MSG(vae != NULL, "VAELoader %s", cname + 4);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "cases")) {
        if (vae && sd_golden_case_is(c, "vae")) run_case(dir, (cJSON *)c, vae);
    }
    sd_value_unref(vae);
    nt_tiny_sd1_free(&t);
    cJSON_Delete(m);
    return sd_test_finish();
}
