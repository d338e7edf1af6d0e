/* SD2.x against ComfyUI's own code (tests/data/sd2: sd2_ref.safetensors,
 * manifest.json, gen_sd2_ref.py, which records the ComfyUI functions and
 * settings). The checkpoints are the tiny random ones `sdflow synth` writes
 * with seed 1 (sd2-tiny: v-prediction, sd2-tiny-eps); the manifest holds the
 * sha256 of the files the reference was made from, so a change of the synth
 * fill is reported here instead of as a numeric mismatch.
 *   - ComfyUI's model_type of each file (V_PREDICTION / EPS) = our detection;
 *   - CLIPTextEncode of the manifest's prompt: token ids exactly, cond and
 *     pooled within the manifest's tolerance (needs the real CLIP vocabulary,
 *     shared/data/clip; skipped without it);
 *   - model.apply_model(x, sigma, c_crossattn=cond), i.e. calculate_input,
 *     the UNet at timestep(sigma) and calculate_denoised (v or eps), at three
 *     sigmas, on each file, fed the reference cond. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/synth/synth.h"
#include "models/text/prompt.h"
#include "golden.h"
#include "testutil.h"

static sd_st_file *ref;
static cJSON *manifest;

static sd_tensor *ref_tensor(const char *name) {
    sd_error err = {0};
    sd_tensor *t = sd_st_tensor(ref, name, &err);
    CHECK_MSG(t != NULL, "reference tensor %s: %s", name, err.msg);
    return t;
}

static double tol(const char *group, const char *which) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(manifest, "tolerance"), group);
    cJSON *v = cJSON_GetObjectItemCaseSensitive(t, which);
    CHECK_MSG(cJSON_IsNumber(v), "manifest tolerance %s.%s missing", group, which);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static void compare(const char *what, const char *group, const sd_tensor *a, const sd_tensor *e) {
    CHECK_MSG(a && e && sd_tensor_numel(a) == sd_tensor_numel(e), "%s: size differs", what);
    if (!a || !e || sd_tensor_numel(a) != sd_tensor_numel(e)) return;
    double max_abs = 0;
    long worst = 0;
    int ok = sd_test_allclose(a, e, tol(group, "atol"), tol(group, "rtol"), &max_abs, &worst);
    CHECK_MSG(ok, "%s: max abs error %g at %ld", what, max_abs, worst);
    printf("  %s: max abs error %.3g\n", what, max_abs);
}

/* The checkpoint the reference was made from: synthesized again, sha256 checked. */
static void synth(const char *preset, char *path, size_t n) {
    snprintf(path, n, "%s/%s.safetensors", sd_test_tmpdir("golden_sd2"), preset);
    sd_error err = {0};
    CHECK_OK(sd_synth_sd2_write(sd_synth_sd2_preset(preset), 1, path, &err), &err);
    cJSON *c = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(manifest, "checkpoints"), preset);
    const char *want = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "sha256"));
    uint8_t d[32];
    char hex[65] = "";
    CHECK_OK(sd_sha256_file(path, d, &err), &err);
    sd_sha256_hex(d, hex);
    CHECK_MSG(want && strcmp(hex, want) == 0,
              "%s: sdflow synth --seed 1 writes sha256 %s, the reference was made from %s: "
              "the synth fill changed; regenerate tests/data/sd2 with gen_sd2_ref.py",
              preset, hex, want ? want : "(none)");
}

static sd_prediction comfy_type(const char *preset) {
    cJSON *c = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(manifest, "checkpoints"), preset);
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "comfyui_model_type"));
    CHECK(t != NULL);
    return t && strcmp(t, "V_PREDICTION") == 0 ? SD_PRED_V : SD_PRED_EPS;
}

static void check_text(sd_checkpoint *c) {
    sd_error err = {0};
    sd_text_encoder *te = NULL;
    CHECK_OK(sd_checkpoint_text_encoder(c, &te, &err), &err);
    if (!te) return;
    const char *prompt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(manifest, "prompt"));
    CHECK(prompt != NULL);
    if (!prompt) return;
    sd_tensor *want_ids = ref_tensor("tokens");
    sd_prompt_opts po;
    sd_prompt_opts_clip_h(&po);
    sd_prompt_tokens *t = NULL;
    CHECK_OK(sd_prompt_tokenize(sd_text_encoder_tokenizer(te), prompt, &po, &t, &err), &err);
    if (t && want_ids) {
        const int64_t *w = want_ids->data;
        int same = t->n_chunks == 1 && sd_tensor_numel(want_ids) == t->chunk_len;
        for (int j = 0; same && j < t->chunk_len; j++) same = t->tokens[j].id == w[j];
        CHECK_MSG(same, "token ids differ from ComfyUI's SD2Tokenizer");
    }
    sd_prompt_tokens_free(t);
    sd_tensor_unref(want_ids);

    sd_tensor *cond = NULL, *pooled = NULL;
    CHECK_OK(sd_text_encode(te, prompt, 0, NULL, &cond, &pooled, &err), &err);
    sd_tensor *ec = ref_tensor("cond"), *ep = ref_tensor("pooled");
    compare("cond (CLIPTextEncode)", "cond", cond, ec);
    compare("pooled", "pooled", pooled, ep);
    sd_tensor_unref(cond);
    sd_tensor_unref(pooled);
    sd_tensor_unref(ec);
    sd_tensor_unref(ep);
}

/* ComfyUI's BaseModel.apply_model at each reference sigma. */
static void check_denoise(sd_backend *be, sd_checkpoint *c, const char *expected_name) {
    sd_error err = {0};
    sd_unet *u = NULL;
    CHECK_OK(sd_checkpoint_unet(c, &u, &err), &err);
    sd_tensor *x = ref_tensor("x"), *sig = ref_tensor("sigma"), *cond = ref_tensor("cond"),
              *want = ref_tensor(expected_name);
    if (u && x && sig && cond && want) {
        static sd_model_sampling ms;
        sd_model_sampling_init(&ms, sd_checkpoint_info(c)->prediction);
        size_t n = (size_t)sd_tensor_numel(x);
        int64_t ns = sd_tensor_numel(sig);
        sd_tensor *got = sd_tensor_new(SD_F32, want->ndim, want->shape);
        sd_tensor *xin = sd_tensor_new(SD_F32, x->ndim, x->shape);
        sd_bt *ctx = sd_bt_from_host(be, cond, SD_F32);
        for (int64_t i = 0; got && xin && ctx && i < ns; i++) {
            float s = ((const float *)sig->data)[i];
            sd_ms_calculate_input(&ms, s, x->data, xin->data, n);
            float ts = sd_ms_timestep(&ms, s);
            sd_bt *bx = sd_bt_from_host(be, xin, SD_F32), *out = NULL;
            CHECK_OK(sd_unet_forward(u, bx, &ts, ctx, NULL, NULL, &out, &err), &err);
            sd_tensor *ho = out ? sd_bt_to_host(out) : NULL;
            if (ho)
                sd_ms_calculate_denoised(&ms, s, ho->data, x->data, (float *)got->data + i * n, n);
            sd_tensor_unref(ho);
            sd_bt_free(out);
            sd_bt_free(bx);
        }
        compare(expected_name, "den", got, want);
        sd_bt_free(ctx);
        sd_tensor_unref(got);
        sd_tensor_unref(xin);
    }
    sd_tensor_unref(x);
    sd_tensor_unref(sig);
    sd_tensor_unref(cond);
    sd_tensor_unref(want);
}

int main(void) {
    char p[4200];
    const char *dir = sd_golden_topic_dir("sd2");
    manifest = sd_golden_manifest(dir);
    sd_error err = {0};
    snprintf(p, sizeof p, "%s/sd2_ref.safetensors", dir);
    CHECK_OK(sd_st_open(p, &ref, &err), &err);
    char tok[4200];
    snprintf(tok, sizeof tok, "%s/data/clip", sd_test_shared_dir());
    snprintf(p, sizeof p, "%s/vocab.json", tok);
    char *vocab = sd_test_read_file(p, NULL);
    if (!vocab) sd_test_skip("the CLIP vocabulary is absent (%s)", p);
    free(vocab);
    if (!manifest || !ref) return sd_test_finish();

    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 2, &be, &err), &err);
    static const char *const presets[] = {"sd2-tiny", "sd2-tiny-eps"};
    static const char *const dens[] = {"den_v", "den_eps"};
    for (int k = 0; be && k < 2; k++) {
        char path[4200];
        synth(presets[k], path, sizeof path);
        sd_checkpoint_opts o;
        sd_checkpoint_opts_default(&o);
        o.tokenizer_dir = tok;
        sd_checkpoint *c = NULL;
        CHECK_OK(sd_checkpoint_open(be, path, &o, &c, &err), &err);
        if (!c) continue;
        CHECK_MSG(sd_checkpoint_info(c)->prediction == comfy_type(presets[k]),
                  "%s: detected prediction %d differs from ComfyUI's model_type", presets[k],
                  (int)sd_checkpoint_info(c)->prediction);
        if (k == 0) check_text(c);
        check_denoise(be, c, dens[k]);
        sd_checkpoint_unref(c);
    }
    sd_backend_free(be);
    sd_st_close(ref);
    cJSON_Delete(manifest);
    return sd_test_finish();
}
