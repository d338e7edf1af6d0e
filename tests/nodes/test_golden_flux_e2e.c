/* test_golden_flux_e2e.c - the Flux set's end-to-end cases (flux/
 * manifest.json, component "e2e") as ComfyUI workflows through the
 * executor, with the tiny files linked under their real names (each model's
 * comfy_name) in a models folder, the way the Flux examples of ComfyUI load
 * them:
 *
 *   split files (dev: a case with a guidance setting):
 *     UNETLoader + DualCLIPLoader(flux) + VAELoader; CLIPTextEncode(positive)
 *     -> FluxGuidance(guidance); CLIPTextEncode(negative);
 *     EmptySD3LatentImage; KSampler(seed, steps, cfg, sampler, scheduler);
 *     VAEDecode; SaveImage
 *   split files without guidance (schnell): RandomNoise, BasicGuider,
 *     KSamplerSelect, BasicScheduler(steps, denoise), EmptySD3LatentImage,
 *     SamplerCustomAdvanced, VAEDecode, SaveImage
 *   a case made through CheckpointLoaderSimple (its description says so):
 *     the dev graph on the checkpoints/ file's MODEL, CLIP and VAE;
 *   every KSampler graph again with KSamplerAdvanced over the whole
 *     schedule (add_noise, steps 0..10000, no leftover noise): the same
 *     latent_out.
 * Every workflow is built from the case's settings (sizes, seed, steps,
 * cfg, sampler, scheduler, guidance, prompts); the run's --dump of each
 * node gives positive.cond / positive.pooled (the text encode), sigmas
 * (BasicScheduler), latent_out and denoised_out (the sampler's LATENTs) and
 * image (VAEDecode), compared at the manifest's tolerances. The tiny CLIP-L's
 * head count (the clip_l model's config num_attention_heads, not width/64)
 * reaches the loaders as the reference's ComfyUI run got it, through the
 * env (sd_env.clip_l_heads). The recorded
 * per-step DiT inputs and outputs are nodes.golden_flux_model's; noise and
 * guidance have no node output of their own. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/env.h"
#include "core/executor.h"
#include "core/graph.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "testutil.h"

static const char *case_id;

static void abs_path(const char *p, char *out, size_t n) {
    char cwd[2048];
    if (p[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(out, n, "%s", p);
    else snprintf(out, n, "%s/%s", cwd, p);
}

static void link_as(const char *target, const char *root, const char *rel) {
    char src[4200], dst[4200], cmd[8600];
    abs_path(target, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", dst);
    CHECK(system(cmd) == 0);
    unlink(dst);
    CHECK_MSG(symlink(src, dst) == 0, "symlink %s", dst);
}

/* The file name (after the folder) of the first manifest model whose
 * comfy_name is in `folder` and, with guidance >= 0, whose config's
 * guidance_embed is that; NULL when none. */
static const char *name_in(cJSON *manifest, const char *folder, int guidance) {
    cJSON *m;
    size_t fl = strlen(folder);
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *cn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "comfy_name"));
        if (!cn || strncmp(cn, folder, fl) != 0 || cn[fl] != '/') continue;
        cJSON *ge = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "config"),
                                                     "guidance_embed");
        if (guidance >= 0 && (!ge || cJSON_IsTrue(ge) != guidance)) continue;
        return cn + fl + 1;
    }
    return NULL;
}

/* A text encoder of the manifest whose config is a T5 (d_ff) or not. */
static const char *text_encoder(cJSON *manifest, int t5) {
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *cn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "comfy_name"));
        if (!cn || strncmp(cn, "text_encoders/", 14) != 0) continue;
        int is_t5 = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "config"), "d_ff") != NULL;
        if (is_t5 == t5) return cn + 14;
    }
    return NULL;
}

/* ---- workflows from settings ---------------------------------------------------- */

static cJSON *node(cJSON *g, const char *id, const char *cls) {
    cJSON *n = cJSON_AddObjectToObject(g, id);
    cJSON_AddStringToObject(n, "class_type", cls);
    return cJSON_AddObjectToObject(n, "inputs");
}

static void link_to(cJSON *in, const char *name, const char *id, int slot) {
    cJSON *a = cJSON_AddArrayToObject(in, name);
    cJSON_AddItemToArray(a, cJSON_CreateString(id));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(slot));
}

static double num(cJSON *s, const char *k, double dflt) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(s, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str(cJSON *s, const char *k, const char *dflt) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, k));
    return v ? v : dflt;
}

/* Node ids the comparison reads. */
typedef struct ids {
    const char *pos, *sampler, *sigmas, *decode;
} ids;

/* advanced: the KSampler graph with KSamplerAdvanced over the whole
 * schedule (add_noise enable, steps 0..10000, no leftover noise), which
 * ComfyUI computes identically. */
static cJSON *workflow(cJSON *manifest, cJSON *c, int advanced, ids *out) {
    cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "settings");
    const char *desc = str(c, "description", "");
    int ckpt = strstr(desc, "CheckpointLoaderSimple") != NULL;
    int guidance = cJSON_GetObjectItemCaseSensitive(s, "guidance") != NULL;
    cJSON *g = cJSON_CreateObject(), *in;
    const char *model = "1", *clip = "2", *vae = "3";
    int clip_slot = 0, vae_slot = 0;
    if (ckpt) {
        in = node(g, "1", "CheckpointLoaderSimple");
        cJSON_AddStringToObject(in, "ckpt_name", name_in(manifest, "checkpoints", -1));
        clip = vae = "1";
        clip_slot = 1, vae_slot = 2;
    } else {
        in = node(g, "1", "UNETLoader");
        cJSON_AddStringToObject(in, "unet_name", name_in(manifest, "diffusion_models", guidance));
        cJSON_AddStringToObject(in, "weight_dtype", "default");
        in = node(g, "2", "DualCLIPLoader"); /* ComfyUI's example order: T5 first */
        cJSON_AddStringToObject(in, "clip_name1", text_encoder(manifest, 1));
        cJSON_AddStringToObject(in, "clip_name2", text_encoder(manifest, 0));
        cJSON_AddStringToObject(in, "type", "flux");
        in = node(g, "3", "VAELoader");
        cJSON_AddStringToObject(in, "vae_name", name_in(manifest, "vae", -1));
    }
    in = node(g, "4", "CLIPTextEncode");
    cJSON_AddStringToObject(in, "text", str(s, "positive", ""));
    link_to(in, "clip", clip, clip_slot);
    in = node(g, "7", "EmptySD3LatentImage");
    cJSON_AddNumberToObject(in, "width", num(s, "width", 1024));
    cJSON_AddNumberToObject(in, "height", num(s, "height", 1024));
    cJSON_AddNumberToObject(in, "batch_size", num(s, "batch_size", 1));
    out->pos = "4";
    out->sigmas = NULL;
    if (guidance) { /* KSampler with FluxGuidance */
        in = node(g, "5", "FluxGuidance");
        link_to(in, "conditioning", "4", 0);
        cJSON_AddNumberToObject(in, "guidance", num(s, "guidance", 3.5));
        in = node(g, "6", "CLIPTextEncode");
        cJSON_AddStringToObject(in, "text", str(s, "negative", ""));
        link_to(in, "clip", clip, clip_slot);
        in = node(g, "8", advanced ? "KSamplerAdvanced" : "KSampler");
        link_to(in, "model", model, 0);
        if (advanced) {
            cJSON_AddStringToObject(in, "add_noise", "enable");
            cJSON_AddNumberToObject(in, "noise_seed", num(s, "seed", 0));
            cJSON_AddNumberToObject(in, "start_at_step", 0);
            cJSON_AddNumberToObject(in, "end_at_step", 10000);
            cJSON_AddStringToObject(in, "return_with_leftover_noise", "disable");
        } else {
            cJSON_AddNumberToObject(in, "seed", num(s, "seed", 0));
        }
        cJSON_AddNumberToObject(in, "steps", num(s, "steps", 20));
        cJSON_AddNumberToObject(in, "cfg", num(s, "cfg", 1.0));
        cJSON_AddStringToObject(in, "sampler_name", str(s, "sampler", "euler"));
        cJSON_AddStringToObject(in, "scheduler", str(s, "scheduler", "simple"));
        link_to(in, "positive", "5", 0);
        link_to(in, "negative", "6", 0);
        link_to(in, "latent_image", "7", 0);
        if (!advanced) cJSON_AddNumberToObject(in, "denoise", num(s, "denoise", 1.0));
    } else { /* SamplerCustomAdvanced with a BasicGuider */
        in = node(g, "5", "RandomNoise");
        cJSON_AddNumberToObject(in, "noise_seed", num(s, "seed", 0));
        in = node(g, "6", "BasicGuider");
        link_to(in, "model", model, 0);
        link_to(in, "conditioning", "4", 0);
        in = node(g, "9", "KSamplerSelect");
        cJSON_AddStringToObject(in, "sampler_name", str(s, "sampler", "euler"));
        in = node(g, "10", "BasicScheduler");
        link_to(in, "model", model, 0);
        cJSON_AddStringToObject(in, "scheduler", str(s, "scheduler", "simple"));
        cJSON_AddNumberToObject(in, "steps", num(s, "steps", 4));
        cJSON_AddNumberToObject(in, "denoise", num(s, "denoise", 1.0));
        in = node(g, "8", "SamplerCustomAdvanced");
        link_to(in, "noise", "5", 0);
        link_to(in, "guider", "6", 0);
        link_to(in, "sampler", "9", 0);
        link_to(in, "sigmas", "10", 0);
        link_to(in, "latent_image", "7", 0);
        out->sigmas = "10";
    }
    out->sampler = "8";
    in = node(g, "11", "VAEDecode");
    link_to(in, "samples", "8", 0);
    link_to(in, "vae", vae, vae_slot);
    out->decode = "11";
    in = node(g, "12", "SaveImage");
    link_to(in, "images", "11", 0);
    cJSON_AddStringToObject(in, "filename_prefix", "flux_e2e");
    return g;
}

/* ---- comparing the dumps ------------------------------------------------------- */

/* Tensor `key` of node id's output k in the dump (F32; caller unrefs). */
static sd_tensor *dumped(const char *dump, const char *id, int k, const char *key) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s_%d.safetensors", dump, id, k);
    sd_st_file *f = NULL;
    sd_error err;
    sd_error_clear(&err);
    if (sd_st_open(path, &f, &err)) {
        CHECK_MSG(0, "%s: no dump of node %s output %d: %s", case_id, id, k, err.msg);
        return NULL;
    }
    sd_tensor *t = sd_st_tensor_f32(f, key, &err);
    CHECK_MSG(t != NULL, "%s: node %s output %d has no '%s'", case_id, id, k, key);
    sd_st_close(f);
    return t;
}

static void compare(cJSON *tensors, sd_st_file *g, int *used, const char *name, const char *dump,
                    const char *id, int k, const char *key) {
    if (!sd_golden_mark(tensors, used, name)) return;
    sd_tensor *t = dumped(dump, id, k, key);
    sd_golden_compare(case_id, tensors, g, name, t);
    sd_tensor_unref(t);
}

static void run_case(sd_env *env, const char *dir, cJSON *manifest, cJSON *c, int advanced) {
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    char path[1200], dump[4300];
    snprintf(path, sizeof path, "%s/%s", dir, str(c, "file", ""));
    snprintf(dump, sizeof dump, "%s/%s%s", sd_test_tmpdir("flux_e2e_dump"), case_id, advanced ? "-adv" : "");
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *g = NULL;
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    if (!g || !tensors) return;
    ids id;
    cJSON *wf = workflow(manifest, c, advanced, &id);
    char *json = cJSON_PrintUnformatted(wf);
    cJSON_Delete(wf);
    printf("  workflow: %s\n", json);
    sd_graph *graph = NULL;
    CHECK_OK(sd_graph_from_json(json, "flux_e2e.json", &graph, &err), &err);
    free(json);
    sd_exec *ex = sd_exec_new();
    sd_exec_opts xo = {.env = env, .dump_dir = dump};
    sd_exec_report rep = {0};
    sd_graph_problems probs = {0};
    if (graph) {
        sd_status rc = sd_exec_run(ex, graph, &xo, &rep, &probs, &err);
        char msg[4096];
        CHECK_MSG(rc == SD_OK, "%s: the workflow failed: %s", case_id, sd_error_format(&err, msg, sizeof msg));
        for (size_t i = 0; i < probs.n; i++) printf("  problem: %s\n", probs.items[i].message);
    }
    int n_t = cJSON_GetArraySize(tensors);
    int *used = calloc((size_t)n_t, sizeof *used);
    if (advanced) { /* the same sample through KSamplerAdvanced */
        compare(tensors, g, used, "latent_out", dump, id.sampler, 0, "samples");
        free(used);
        goto out;
    }
    compare(tensors, g, used, "positive.cond", dump, id.pos, 0, "0.cond");
    compare(tensors, g, used, "positive.pooled", dump, id.pos, 0, "0.pooled_output");
    if (id.sigmas) compare(tensors, g, used, "sigmas", dump, id.sigmas, 0, "SIGMAS");
    compare(tensors, g, used, "latent_out", dump, id.sampler, 0, "samples");
    compare(tensors, g, used, "denoised_out", dump, id.sampler, 1, "samples");
    compare(tensors, g, used, "image", dump, id.decode, 0, "IMAGE");
    /* every expected tensor of the case is a workflow output here */
    int i = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *role = str(t, "role", "");
        if (strcmp(role, "expected") == 0)
            CHECK_MSG(used[i], "%s: expected tensor %s is not checked by this test", case_id, t->string);
        i++;
    }
    free(used);
out:
    sd_graph_problems_free(&probs);
    sd_exec_report_free(&rep);
    sd_exec_free(ex);
    sd_graph_free(graph);
    sd_st_close(g);
}

int main(void) {
    const char *dir = sd_golden_family_dir("flux");
    cJSON *manifest = sd_golden_manifest(dir);
    int n = sd_golden_require_cases(manifest, dir, "e2e");
    CHECK_MSG(n > 0, "manifest lists no e2e case");
    if (!sd_golden_e2e_comparable()) sd_test_skip_unsupported("end-to-end cases are compared in f32 only (golden.h)");
    sd_backend *be = sd_golden_backend();
    if (!be) return sd_test_finish();

    /* every model under its real name; the tokenizers as --tokenizer-dir */
    const char *tmp = sd_test_tmpdir("flux_e2e");
    char models[4200], tok[4200], out[4200], src[4200], rel[1200];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(tok, sizeof tok, "%s/tokenizer", tmp);
    snprintf(out, sizeof out, "%s/output", tmp);
    mkdir(models, 0777), mkdir(tok, 0777), mkdir(out, 0777);
    cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *file = str(m, "file", NULL), *cn = str(m, "comfy_name", NULL);
        if (!file || !cn) continue;
        snprintf(src, sizeof src, "%s/%s", dir, file);
        link_as(src, models, cn);
    }
    static const char *const clip_files[] = {"vocab.json", "merges.txt", NULL};
    for (int i = 0; clip_files[i]; i++) {
        snprintf(src, sizeof src, "%s/data/clip/%s", sd_test_shared_dir(), clip_files[i]);
        link_as(src, tok, clip_files[i]);
    }
    snprintf(src, sizeof src, "%s/%s", dir, str(cJSON_GetObjectItemCaseSensitive(manifest, "tokenizer"), "file", ""));
    snprintf(rel, sizeof rel, "t5_tokenizer/tokenizer.json");
    link_as(src, tok, rel);

    sd_env env;
    sd_error err;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.tokenizer_dir, tok, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.output_dir, out, &err), &err);
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(manifest, "models")) {
        const char *cn = str(m, "comfy_name", "");
        cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config");
        if (strncmp(cn, "text_encoders/", 14) == 0 && cJSON_GetObjectItemCaseSensitive(cfg, "num_attention_heads") &&
            !cJSON_GetObjectItemCaseSensitive(cfg, "d_ff"))
            env.clip_l_heads = (int)num(cfg, "num_attention_heads", 0);
    }
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) {
        if (!sd_golden_case_is(c, "e2e")) continue;
        case_id = str(c, "id", "?");
        printf("case %s\n", case_id);
        run_case(&env, dir, manifest, c, 0);
        if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "settings"), "cfg")) {
            printf("case %s through KSamplerAdvanced\n", case_id);
            run_case(&env, dir, manifest, c, 1);
        }
    }
    sd_model_store_free(store);
    sd_backend_free(be);
    env.backend = NULL;
    env.models = NULL;
    sd_env_cleanup(&env);
    sd_registry_reset();
    cJSON_Delete(manifest);
    return sd_test_finish();
}
