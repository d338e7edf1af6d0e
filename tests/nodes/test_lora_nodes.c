/* test_lora_nodes.c - the node side of LoRA (nodes/lora/lora_nodes.h) on a
 * generated tiny SD1 checkpoint: LoraLoader's work (file lookup, matching,
 * warnings naming unmatched keys, errors naming lora_name), stacks that
 * share the base weights, cache their view and stack further without
 * changing earlier ones, and the text encoder view encoding differently
 * from the base. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/env.h"
#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/synth/synth.h"
#include "nodes/lora/lora_nodes.h"
#include "testutil.h"

static uint64_t rs = 5;
static float rnd(void) {
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(rs >> 40) / (double)(1ULL << 24) - 0.5);
}

static void add_rand(sd_st_writer *w, const char *name, int64_t a, int64_t b) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 2, a, b, 0, 0);
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) sd_tensor_f32(t)[i] = rnd();
    sd_error err;
    CHECK_OK(sd_st_writer_add(w, name, t, &err), &err);
    sd_tensor_unref(t);
}

static char logbuf[8192];
static void on_log(void *user, int level, const char *msg) {
    (void)user;
    if (level <= SD_LOG_WARN) {
        strncat(logbuf, msg, sizeof logbuf - strlen(logbuf) - 2);
        strcat(logbuf, "\n");
    }
}

#define Q "input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight"
#define QL "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"
#define TL "lora_te_text_model_encoder_layers_1_mlp_fc1"

static sd_tensor *param(sd_unet *u) {
    sd_bt **s = sd_unet_param(u, Q);
    return s && *s ? sd_bt_to_host(*s) : NULL;
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    const char *root = sd_test_tmpdir("lora_nodes");
    char models[1024], dir[1100], path[1200];
    snprintf(models, sizeof models, "%s/models", root);
    mkdir(models, 0777);
    snprintf(dir, sizeof dir, "%s/checkpoints", models);
    mkdir(dir, 0777);
    snprintf(dir, sizeof dir, "%s/loras", models);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/checkpoints/tiny.safetensors", models);
    CHECK_OK(sd_synth_sd1_write(sd_synth_preset("sd1-tiny"), 11, path, &err), &err);

    sd_st_writer *w = sd_st_writer_new();
    add_rand(w, QL ".lora_up.weight", 32, 4);
    add_rand(w, QL ".lora_down.weight", 4, 32);
    add_rand(w, TL ".lora_up.weight", 512, 4);
    add_rand(w, TL ".lora_down.weight", 4, 128);
    snprintf(path, sizeof path, "%s/loras/style.safetensors", models);
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
    w = sd_st_writer_new();
    add_rand(w, "lora_unet_nothing_here.lora_up.weight", 8, 4);
    add_rand(w, "lora_unet_nothing_here.lora_down.weight", 4, 8);
    snprintf(path, sizeof path, "%s/loras/other.safetensors", models);
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);

    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    env.backend = be;
    env.log = on_log;
    char tok[1100];
    snprintf(tok, sizeof tok, "%s/data/clip", sd_test_shared_dir());
    FILE *fp = fopen((snprintf(path, sizeof path, "%s/vocab.json", tok), path), "r");
    int have_tok = fp != NULL;
    if (fp) fclose(fp);
    sd_node_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.env = &env;
    ctx.node_id = "3";
    ctx.class_type = "LoraLoader";

    sd_checkpoint_opts o;
    sd_checkpoint_opts_default(&o);
    o.tokenizer_dir = have_tok ? tok : NULL;
    sd_checkpoint *c = NULL;
    snprintf(path, sizeof path, "%s/checkpoints/tiny.safetensors", models);
    CHECK_OK(sd_checkpoint_open(be, path, &o, &c, &err), &err);
    if (!c) return sd_test_finish();
    sd_unet *base = NULL;
    CHECK_OK(sd_checkpoint_unet(c, &base, &err), &err);
    sd_tensor *q0 = base ? param(base) : NULL;

    /* model only: the text-encoder keys are reported, not dropped */
    sd_lora_stack *m1 = NULL, *cl1 = NULL;
    logbuf[0] = '\0';
    CHECK_OK(sd_nodes_lora_load(&ctx, c, "style.safetensors", NULL, NULL, 0.8, 0.6, 0, &m1, &cl1, &err), &err);
    CHECK(m1 && !cl1 && sd_lora_stack_count(m1) == 1);
    CHECK_MSG(strstr(logbuf, "2 LoRA keys matched nothing") && strstr(logbuf, TL), "log: %s", logbuf);
    sd_unet *v1 = NULL, *v1b = NULL, *vb = NULL;
    CHECK_OK(sd_lora_stack_unet(m1, c, &v1, &err), &err);
    CHECK_OK(sd_lora_stack_unet(m1, c, &v1b, &err), &err);
    CHECK_OK(sd_lora_stack_unet(NULL, c, &vb, &err), &err);
    CHECK(v1 && v1 == v1b && v1 != base && vb == base);
    sd_tensor *q1 = v1 ? param(v1) : NULL;
    CHECK(q0 && q1 && memcmp(q0->data, q1->data, q0->nbytes) != 0);

    /* stacking the same LoRA again at 0.2: 0.8 + 0.2 = the same LoRA at 1.0 */
    sd_lora_stack *m2 = NULL, *m10 = NULL;
    CHECK_OK(sd_nodes_lora_load(&ctx, c, "style.safetensors", m1, NULL, 0.2, 0.0, 0, &m2, NULL, &err), &err);
    CHECK_OK(sd_nodes_lora_load(&ctx, c, "style.safetensors", NULL, NULL, 1.0, 0.0, 0, &m10, NULL, &err), &err);
    CHECK(sd_lora_stack_count(m2) == 2 && sd_lora_stack_count(m1) == 1);
    sd_unet *v2 = NULL, *v10 = NULL;
    CHECK_OK(sd_lora_stack_unet(m2, c, &v2, &err), &err);
    CHECK_OK(sd_lora_stack_unet(m10, c, &v10, &err), &err);
    sd_tensor *q2 = v2 ? param(v2) : NULL, *q10 = v10 ? param(v10) : NULL;
    if (q2 && q10 && q0) {
        double worst = 0;
        for (int64_t i = 0; i < sd_tensor_numel(q2); i++)
            worst = fmax(worst, fabs(sd_tensor_f32(q2)[i] - sd_tensor_f32(q10)[i]));
        CHECK_MSG(worst < 1e-5, "0.8 + 0.2 vs 1.0: %g", worst);
    }
    /* earlier stacks and the base are unchanged */
    sd_tensor *q1again = v1 ? param(v1) : NULL, *q0again = param(base);
    CHECK(q1 && q1again && memcmp(q1->data, q1again->data, q1->nbytes) == 0);
    CHECK(q0 && q0again && memcmp(q0->data, q0again->data, q0->nbytes) == 0);

    /* errors name lora_name */
    sd_lora_stack *mx = NULL;
    sd_error_clear(&err);
    CHECK(sd_nodes_lora_load(&ctx, c, "other.safetensors", NULL, NULL, 1, 1, 0, &mx, NULL, &err) == SD_ERR_INVALID);
    CHECK_MSG(mx == NULL && strstr(err.msg, "another architecture") && strcmp(err.input, "lora_name") == 0, "%s",
              err.msg);
    sd_error_clear(&err);
    CHECK(sd_nodes_lora_load(&ctx, c, "absent.safetensors", NULL, NULL, 1, 1, 0, &mx, NULL, &err) ==
          SD_ERR_NOT_FOUND);
    CHECK(strcmp(err.input, "lora_name") == 0);

    /* with the text encoder: its view encodes differently */
    if (have_tok) {
        sd_lora_stack *m3 = NULL, *cl3 = NULL;
        logbuf[0] = '\0';
        CHECK_OK(sd_nodes_lora_load(&ctx, c, "style.safetensors", NULL, NULL, 0.8, 0.6, 1, &m3, &cl3, &err), &err);
        CHECK_MSG(logbuf[0] == '\0', "unexpected warning: %s", logbuf);
        sd_text_encoder *tb = NULL, *tv = NULL;
        CHECK_OK(sd_lora_stack_text_encoder(NULL, c, &tb, &err), &err);
        CHECK_OK(sd_lora_stack_text_encoder(cl3, c, &tv, &err), &err);
        if (tb && tv) {
            CHECK(tb != tv);
            sd_tensor *cb = NULL, *pb = NULL, *cv = NULL, *pv = NULL;
            CHECK_OK(sd_text_encode(tb, "a red cube", 0, NULL, &cb, &pb, &err), &err);
            CHECK_OK(sd_text_encode(tv, "a red cube", 0, NULL, &cv, &pv, &err), &err);
            CHECK(cb && cv && cb->nbytes == cv->nbytes && memcmp(cb->data, cv->data, cb->nbytes) != 0);
            sd_tensor_unref(cb);
            sd_tensor_unref(pb);
            sd_tensor_unref(cv);
            sd_tensor_unref(pv);
        }
        sd_lora_stack_unref(m3);
        sd_lora_stack_unref(cl3);
    } else {
        printf("  (no CLIP vocabulary under %s: text-encoder view not checked)\n", tok);
    }

    /* MODEL and CLIP from different checkpoints (an SDXL MODEL, the SD1
     * CLIP): each side's keys are matched against its own network, so the
     * SD1 text-encoder keys patch the SD1 encoder and the UNet key is
     * reported as unmatched (the SDXL UNet has no such block) */
    if (have_tok) {
        char xl[1200];
        snprintf(xl, sizeof xl, "%s/checkpoints/xl.safetensors", models);
        CHECK_OK(sd_synth_sdxl_write(sd_synth_sdxl_preset("sdxl-tiny"), 3, xl, &err), &err);
        sd_checkpoint *cx = NULL;
        CHECK_OK(sd_checkpoint_open(be, xl, &o, &cx, &err), &err);
        if (cx) {
            sd_lora_stack *mp = NULL, *cp = NULL;
            logbuf[0] = '\0';
            CHECK_OK(sd_nodes_lora_load_pair(&ctx, cx, c, "style.safetensors", NULL, NULL, 1.0, 1.0,
                                             1, &mp, &cp, &err),
                     &err);
            CHECK_MSG(strstr(logbuf, "2 LoRA keys matched nothing"), "log: %s", logbuf);
            CHECK_MSG(strstr(logbuf, QL) && !strstr(logbuf, TL), "log: %s", logbuf);
            sd_text_encoder *tb = NULL, *tv = NULL;
            CHECK_OK(sd_lora_stack_text_encoder(NULL, c, &tb, &err), &err);
            CHECK_OK(sd_lora_stack_text_encoder(cp, c, &tv, &err), &err);
            CHECK(tb && tv && tb != tv);
            sd_lora_stack_unref(mp);
            sd_lora_stack_unref(cp);
            sd_checkpoint_unref(cx);
        }
    }

    sd_tensor *ts[] = {q0, q1, q2, q10, q1again, q0again};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) sd_tensor_unref(ts[i]);
    sd_lora_stack_unref(m1);
    sd_lora_stack_unref(m2);
    sd_lora_stack_unref(m10);
    sd_checkpoint_unref(c);
    sd_env_cleanup(&env);
    sd_backend_free(be);
    return sd_test_finish();
}
