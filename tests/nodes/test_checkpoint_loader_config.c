/* CheckpointLoader (deprecated; nodes/loaders/loader_nodes.c) and its
 * config reader (formats/ldm_config.h), as ComfyUI's comfy.sd.load_checkpoint
 * applies a .yaml config: the checkpoint loads as with
 * CheckpointLoaderSimple, parameterization "v" makes the MODEL v-prediction
 * on the discrete schedule, cond_stage_config.params.layer_idx sets the
 * CLIP's last layer (clip.clip_layer); the rest is ignored. Configs are
 * written here in the shape of ComfyUI's models/configs files
 * (v1-inference_clip_skip_2.yaml, v2-inference-v.yaml). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/ldm_config.h"
#include "nodes/loaders/loaders.h"
#include "nodes_ctx.h"
#include "testutil.h"

static const char *V1_SKIP2 =
    "model:\n  base_learning_rate: 1.0e-04\n  target: ldm.models.diffusion.ddpm.LatentDiffusion\n  params:\n"
    "    linear_start: 0.00085\n    linear_end: 0.0120\n    scale_factor: 0.18215\n    use_ema: False\n"
    "    scheduler_config: # 10000 warmup steps\n      target: ldm.lr_scheduler.LambdaLinearScheduler\n"
    "      params:\n        warm_up_steps: [ 10000 ]\n    unet_config:\n"
    "      target: ldm.modules.diffusionmodules.openaimodel.UNetModel\n      params:\n"
    "        attention_resolutions: [ 4, 2, 1 ]\n        channel_mult: [ 1, 2, 4, 4 ]\n"
    "    first_stage_config:\n      params:\n        ddconfig:\n          ch_mult:\n          - 1\n          - 2\n"
    "    cond_stage_config:\n      target: ldm.modules.encoders.modules.FrozenCLIPEmbedder\n      params:\n"
    "        layer: \"hidden\"\n        layer_idx: -2\n";
static const char *V2_V =
    "model:\n  base_learning_rate: 1.0e-4\n  target: ldm.models.diffusion.ddpm.LatentDiffusion\n  params:\n"
    "    parameterization: \"v\"\n    linear_start: 0.00085\n    cond_stage_config:\n"
    "      target: ldm.modules.encoders.modules.FrozenOpenCLIPEmbedder\n      params:\n        freeze: True\n"
    "        layer: \"penultimate\"\n";
static const char *V1_PLAIN =
    "model:\n  params:\n    cond_stage_config:\n      target: ldm.modules.encoders.modules.FrozenCLIPEmbedder\n";

static const sd_env *g_env;

static sd_status load(const char *type, const char *const *names, sd_value *const *vals, int n, sd_value **out,
                      sd_error *err) {
    sd_node_ctx ctx = {.env = g_env, .node_id = "4", .class_type = type};
    memset(out, 0, 4 * sizeof *out);
    sd_error_clear(err);
    return nt_run_named(&ctx, names, vals, n, out, err);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void parse_cases(void) {
    static const struct {
        const char *yaml;
        sd_status rc;
        int v, has, idx;
    } cases[] = {
        {"{model: {params: {parameterization: v, cond_stage_config: {params: {layer_idx: 3}}}}}", SD_OK, 1, 1, 3},
        {"base: &p {layer_idx: -1}\nmodel:\n  params:\n    cond_stage_config:\n      params: *p\n", SD_OK, 0, 1, -1},
        {"model:\n  params:\n    cond_stage_config:\n      params:\n        layer_idx: ~\n", SD_OK, 0, 0, 0},
        {"model:\n  params:\n    parameterization: 'v'\n    cond_stage_config: {}\n", SD_OK, 1, 0, 0},
        {"model:\n  params:\n    parameterization: eps\n    cond_stage_config: {}\n", SD_OK, 0, 0, 0},
        {"model:\n  params:\n    cond_stage_config:\n      params:\n        layer_idx: '-2'\n", SD_ERR_FORMAT, 0, 0, 0},
        {"model:\n  params:\n    parameterization: v\n", SD_ERR_FORMAT, 0, 0, 0},
        {"model: 3\n", SD_ERR_FORMAT, 0, 0, 0},
        {"model: {params: [1, 2\n", SD_ERR_FORMAT, 0, 0, 0},
        {"", SD_ERR_FORMAT, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sd_ldm_config c;
        sd_error err;
        sd_error_clear(&err);
        sd_status rc = sd_ldm_config_parse(cases[i].yaml, strlen(cases[i].yaml), "t.yaml", &c, &err);
        CHECK_MSG(rc == cases[i].rc, "case %zu: status %d (%s), want %d", i, rc, err.msg, cases[i].rc);
        if (rc == SD_OK && cases[i].rc == SD_OK)
            CHECK_MSG(c.v_prediction == cases[i].v && c.has_layer_idx == cases[i].has && c.layer_idx == cases[i].idx,
                      "case %zu: v %d has %d idx %d", i, c.v_prediction, c.has_layer_idx, c.layer_idx);
        if (rc) CHECK_MSG(strstr(err.msg, "t.yaml") != NULL, "case %zu: error does not name the file: %s", i, err.msg);
    }
}

int main(void) {
    parse_cases();
    const char *td = sd_test_testdata_dir();
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/models/tiny-sd1.safetensors", td);
    if (access(ckpt, R_OK)) sd_test_skip("no %s", ckpt);
    const char *tmp = sd_test_tmpdir("nodes_checkpoint_loader_config");
    char models[4200], cmd[9000], p[4400];
    snprintf(models, sizeof models, "%s/models", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/checkpoints' '%s/configs'", models, models, models);
    CHECK(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/checkpoints/tiny.safetensors", models);
    CHECK(symlink(ckpt, p) == 0);
    snprintf(p, sizeof p, "%s/configs/v1-inference_clip_skip_2.yaml", models), write_text(p, V1_SKIP2);
    snprintf(p, sizeof p, "%s/configs/v2-inference-v.yaml", models), write_text(p, V2_V);
    snprintf(p, sizeof p, "%s/configs/v1-inference.yaml", models), write_text(p, V1_PLAIN);
    snprintf(p, sizeof p, "%s/configs/broken.yaml", models), write_text(p, "model: {params: {}}\n");

    sd_error err;
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    g_env = &env;
    CHECK_OK(sd_nodes_register_all(&err), &err);

    const char *names[] = {"config_name", "ckpt_name"};
    static const struct {
        const char *config;
        int v, clip_skip;
    } cases[] = {{"v1-inference_clip_skip_2.yaml", 0, -2}, {"v2-inference-v.yaml", 1, 0}, {"v1-inference.yaml", 0, 0}};
    sd_value *simple[4];
    sd_value *nm = sd_value_string("tiny.safetensors");
    CHECK_OK(load("CheckpointLoaderSimple", &names[1], &nm, 1, simple, &err), &err);
    sd_model_ref *sm = simple[0] ? sd_value_as_handle(simple[0], &sd_handle_model) : NULL;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sd_value *in[] = {sd_value_string(cases[i].config), nm}, *out[4];
        sd_status rc = load("CheckpointLoader", names, in, 2, out, &err);
        CHECK_MSG(rc == SD_OK, "%s: %s", cases[i].config, err.msg);
        sd_model_ref *m = out[0] ? sd_value_as_handle(out[0], &sd_handle_model) : NULL;
        sd_clip_ref *c = out[1] ? sd_value_as_handle(out[1], &sd_handle_clip) : NULL;
        sd_vae_ref *v = out[2] ? sd_value_as_handle(out[2], &sd_handle_vae) : NULL;
        CHECK_MSG(m && c && v, "%s: three outputs", cases[i].config);
        if (m && c && v && sm) {
            /* the same checkpoint CheckpointLoaderSimple gives */
            CHECK(m->ckpt == sm->ckpt && c->ckpt == sm->ckpt && v->ckpt == sm->ckpt);
            CHECK_MSG(m->patches.sampling_set == cases[i].v, "%s: sampling patch %d", cases[i].config,
                      m->patches.sampling_set);
            if (cases[i].v)
                CHECK_MSG(m->patches.sampling_base == SD_MS_DISCRETE && m->patches.sampling == SD_PRED_V &&
                              !m->patches.zsnr,
                          "%s: not discrete v-prediction", cases[i].config);
            CHECK_MSG(c->clip_skip == cases[i].clip_skip, "%s: clip_skip %d", cases[i].config, c->clip_skip);
        }
        for (int k = 0; k < 4; k++) sd_value_unref(out[k]);
        sd_value_unref(in[0]);
    }
    /* refusals name the config */
    static const char *bad[] = {"broken.yaml", "absent.yaml"};
    for (size_t i = 0; i < 2; i++) {
        sd_value *in[] = {sd_value_string(bad[i]), nm}, *out[4];
        sd_status rc = load("CheckpointLoader", names, in, 2, out, &err);
        CHECK_MSG(rc != SD_OK && strcmp(err.input, "config_name") == 0, "%s: rc %d input '%s'", bad[i], rc,
                  err.input);
        for (int k = 0; k < 4; k++) sd_value_unref(out[k]);
        sd_value_unref(in[0]);
    }
    sd_value_unref(nm);
    for (int k = 0; k < 4; k++) sd_value_unref(simple[k]);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    return sd_test_finish();
}
