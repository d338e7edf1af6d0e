/* test_controlnet_nodes.c - ControlNetLoader / ControlNetApply /
 * ControlNetApplyAdvanced / Canny called directly, on a ControlNet built
 * from a generated tiny SD1 checkpoint (its UNet encoder renamed to
 * control_model.* plus random hint block and zero convs): what the nodes
 * attach to CONDITIONING (chains in order, apply_to_uncond, inputs left
 * alone, strength 0), the sampler-side evaluation (strength scaling, chain
 * sums, start/end window, misfit), loader errors and the Canny node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/image/canny.h"
#include "models/controlnet/controlnet.h"
#include "models/synth/synth.h"
#include "nodes/controlnet/controlnet_nodes.h"
#include "testutil.h"

static uint64_t rs = 99;
static float rnd(void) {
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(rs >> 40) / (double)(1ULL << 24) - 0.5) * 0.2f;
}

static void add_rand(sd_st_writer *w, const char *name, int nd, int64_t a, int64_t b, int64_t c, int64_t d) {
    sd_tensor *t = sd_tensor_new4(SD_F32, nd, a, b, c, d);
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) sd_tensor_f32(t)[i] = rnd();
    sd_error err;
    CHECK_OK(sd_st_writer_add(w, name, t, &err), &err);
    sd_tensor_unref(t);
}

/* control_model.* from the checkpoint's encoder half. */
static int make_controlnet(const char *ckpt, const char *out) {
    sd_error err;
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(ckpt, &f, &err), &err);
    if (!f) return 0;
    sd_st_writer *w = sd_st_writer_new();
    const char *pre = "model.diffusion_model.";
    size_t pl = strlen(pre);
    int64_t widths[64] = {0};
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const char *k = sd_st_at(f, i)->name;
        if (strncmp(k, pre, pl) != 0) continue;
        const char *r = k + pl;
        if (strncmp(r, "time_embed.", 11) && strncmp(r, "input_blocks.", 13) && strncmp(r, "middle_block.", 13))
            continue;
        sd_tensor *t = sd_st_tensor_f32(f, k, &err);
        char nk[512];
        snprintf(nk, sizeof nk, "control_model.%s", r);
        CHECK_OK(sd_st_writer_add(w, nk, t, &err), &err);
        int b;
        char rest[256];
        /* the width after input block b: its last conv/res output */
        if (sscanf(r, "input_blocks.%d.%255s", &b, rest) == 2 && b < 64 &&
            (strstr(rest, "out_layers.3.weight") || strcmp(rest, "0.weight") == 0 ||
             strcmp(rest, "0.op.weight") == 0))
            widths[b] = t->shape[0];
        sd_tensor_unref(t);
    }
    int64_t hint[8] = {16, 16, 32, 32, 96, 96, 256, widths[0]};
    int64_t cin = 3;
    char nm[128];
    for (int k = 0; k < 8; k++) {
        snprintf(nm, sizeof nm, "control_model.input_hint_block.%d.weight", 2 * k);
        add_rand(w, nm, 4, hint[k], cin, 3, 3);
        snprintf(nm, sizeof nm, "control_model.input_hint_block.%d.bias", 2 * k);
        add_rand(w, nm, 1, hint[k], 0, 0, 0);
        cin = hint[k];
    }
    int n = 0;
    while (n < 64 && widths[n]) n++;
    for (int i = 0; i < n; i++) {
        snprintf(nm, sizeof nm, "control_model.zero_convs.%d.0.weight", i);
        add_rand(w, nm, 4, widths[i], widths[i], 1, 1);
        snprintf(nm, sizeof nm, "control_model.zero_convs.%d.0.bias", i);
        add_rand(w, nm, 1, widths[i], 0, 0, 0);
    }
    add_rand(w, "control_model.middle_block_out.0.weight", 4, widths[n - 1], widths[n - 1], 1, 1);
    add_rand(w, "control_model.middle_block_out.0.bias", 1, widths[n - 1], 0, 0, 0);
    CHECK_OK(sd_st_writer_save(w, out, &err), &err);
    sd_st_writer_free(w);
    sd_st_close(f);
    return 1;
}

static sd_value *cond_list(int n) {
    sd_value *l = sd_value_list();
    for (int i = 0; i < n; i++) {
        sd_value *d = sd_value_dict();
        sd_tensor *c = sd_tensor_new4(SD_F32, 3, 1, 77, 128, 0);
        for (int64_t j = 0; j < sd_tensor_numel(c); j++) sd_tensor_f32(c)[j] = rnd();
        sd_value_dict_set(d, "cond", sd_value_tensor(c));
        sd_tensor_unref(c);
        sd_value_list_append(l, d);
    }
    return l;
}

static sd_tensor *rand_image(int64_t h, int64_t w) {
    sd_tensor *t = sd_tensor_new4(SD_F32, 4, 1, h, w, 3);
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) sd_tensor_f32(t)[i] = rnd() * 5 + 0.5f;
    return t;
}

/* sd_nodes_control_eval for a UNet of config u. */
static sd_status control_eval(const sd_value *entry, const sd_model_sampling *ms, const sd_unet_config *u,
                              float sigma, sd_bt *x, int batched, const float *ts, sd_bt *ctx, sd_bt *y,
                              sd_control_residuals *out, sd_error *err) {
    sd_control_call call = {.ms = ms, .unet = u, .sigma = sigma, .x_in = x, .batched = batched,
                            .timesteps = ts, .context = ctx, .y = y};
    return sd_nodes_control_eval(entry, &call, out, err);
}

static double max_diff(const sd_bt *a, const sd_bt *b, float sb) {
    sd_tensor *x = sd_bt_to_host(a), *y = sd_bt_to_host(b);
    double m = 0;
    for (int64_t i = 0; i < sd_tensor_numel(x); i++) {
        double d = fabs((double)sd_tensor_f32(x)[i] - (double)sb * sd_tensor_f32(y)[i]);
        if (d > m) m = d;
    }
    sd_tensor_unref(x);
    sd_tensor_unref(y);
    return m;
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_nodes_register_all(&err), &err);
    const char *root = sd_test_tmpdir("controlnet_nodes");
    char models[1024], cndir[1024], ckpt[1200], cnf[1200];
    snprintf(models, sizeof models, "%s/models", root);
    snprintf(cndir, sizeof cndir, "%s/controlnet", models);
    mkdir(models, 0777);
    mkdir(cndir, 0777);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt.safetensors", cndir); /* a checkpoint where a ControlNet should be */
    snprintf(cnf, sizeof cnf, "%s/cn.safetensors", cndir);
    CHECK_OK(sd_synth_sd1_write(sd_synth_preset("sd1-tiny"), 3, ckpt, &err), &err);
    if (!make_controlnet(ckpt, cnf)) return sd_test_finish();

    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    sd_env env;
    CHECK_OK(sd_env_init(&env, &err), &err);
    CHECK_OK(sd_env_set(&env, &env.models_dir, models, &err), &err);
    env.backend = be;
    sd_node_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.env = &env;
    ctx.node_id = "5";

    const sd_node_def *loader = sd_registry_find("ControlNetLoader");
    const sd_node_def *apply = sd_registry_find("ControlNetApply");
    const sd_node_def *adv = sd_registry_find("ControlNetApplyAdvanced");
    const sd_node_def *canny = sd_registry_find("Canny");
    CHECK(loader && apply && adv && canny && sd_registry_find("ControlNet") == adv);
    if (!loader || !apply || !adv || !canny) return sd_test_finish();

    /* ---- loader ---- */
    sd_value *name = sd_value_string("cn.safetensors"), *cnv = NULL;
    sd_value *in1[1] = {name};
    CHECK_OK(loader->run(&ctx, in1, &cnv, &err), &err);
    sd_value_unref(name);
    sd_controlnet *cn = sd_nodes_control_net_of(cnv);
    CHECK(cn && sd_controlnet_n_outputs(cn) == 12 && sd_controlnet_hint_channels(cn) == 3);
    sd_value *bad = sd_value_string("ckpt.safetensors"), *o = NULL;
    in1[0] = bad;
    sd_error_clear(&err);
    CHECK(loader->run(&ctx, in1, &o, &err) == SD_ERR_INVALID && o == NULL);
    CHECK_MSG(strstr(err.msg, "not a ControlNet") && strcmp(err.input, "control_net_name") == 0, "%s", err.msg);
    sd_value_unref(bad);
    bad = sd_value_string("missing.safetensors");
    in1[0] = bad;
    CHECK(loader->run(&ctx, in1, &o, &err) == SD_ERR_NOT_FOUND);
    sd_value_unref(bad);
    if (!cn) return sd_test_finish();

    /* ---- apply nodes ---- */
    sd_value *pos = cond_list(2), *neg = cond_list(1);
    sd_tensor *img = rand_image(64, 64), *img2 = rand_image(48, 40);
    sd_value *iv = sd_value_tensor(img), *iv2 = sd_value_tensor(img2);
    sd_value *s07 = sd_value_float(0.7), *s03 = sd_value_float(0.3), *s0 = sd_value_float(0.0);
    sd_value *p0 = sd_value_float(0.0), *p1 = sd_value_float(1.0), *p5 = sd_value_float(0.5);
    sd_value *outs[2] = {0}, *outs2[2] = {0};
    sd_value *ain[8] = {pos, neg, cnv, iv, s07, p0, p1, NULL};
    CHECK_OK(adv->run(&ctx, ain, outs, &err), &err);
    CHECK(sd_value_list_len(outs[0]) == 2 && sd_value_list_len(outs[1]) == 1);
    for (size_t i = 0; i < sd_value_list_len(pos); i++)
        CHECK_MSG(!sd_value_dict_get(sd_value_list_get(pos, i), "control"), "input conditioning modified");
    const sd_value *e0 = sd_value_list_get(outs[0], 0);
    CHECK(sd_value_list_len(sd_value_dict_get(e0, "control")) == 1);
    CHECK(sd_value_as_bool(sd_value_dict_get(e0, "control_apply_to_uncond")) == 0);
    CHECK(sd_value_dict_tensor(e0, "cond") == sd_value_dict_tensor(sd_value_list_get(pos, 0), "cond"));
    /* chain a second one (another image, strength 0.3, window from 50%) */
    sd_value *ain2[8] = {outs[0], outs[1], cnv, iv2, s03, p5, p1, NULL};
    CHECK_OK(adv->run(&ctx, ain2, outs2, &err), &err);
    const sd_value *e1 = sd_value_list_get(outs2[1], 0);
    const sd_value *chain = sd_value_dict_get(e1, "control");
    CHECK(sd_value_list_len(chain) == 2);
    CHECK(sd_value_dict_tensor(sd_value_list_get(chain, 0), "image") == img &&
          sd_value_dict_tensor(sd_value_list_get(chain, 1), "image") == img2);
    CHECK(sd_value_list_len(sd_value_dict_get(sd_value_list_get(outs[1], 0), "control")) == 1);
    /* entries that extended the same chain share the new one (ComfyUI's one
     * ControlNet object per previous one), so the sampler batches cond and
     * uncond together; both stages, both lists */
    CHECK(sd_value_dict_get(e0, "control") ==
          sd_value_dict_get(sd_value_list_get(outs[1], 0), "control"));
    CHECK(sd_value_dict_get(sd_value_list_get(outs2[0], 0), "control") == chain);
    /* strength 0: the conditioning comes back as it was */
    sd_value *outs0[2] = {0};
    sd_value *ain0[8] = {pos, neg, cnv, iv, s0, p0, p1, NULL};
    CHECK_OK(adv->run(&ctx, ain0, outs0, &err), &err);
    CHECK(outs0[0] == pos && outs0[1] == neg);
    sd_value_unref(outs0[0]);
    sd_value_unref(outs0[1]);
    /* start after end, wrong image channels */
    sd_value *ainb[8] = {pos, neg, cnv, iv, s07, p1, p5, NULL};
    CHECK(adv->run(&ctx, ainb, outs0, &err) == SD_ERR_INVALID && strcmp(err.input, "start_percent") == 0);
    sd_tensor *gray = sd_tensor_new4(SD_F32, 4, 1, 64, 64, 1);
    sd_value *gv = sd_value_tensor(gray);
    sd_value *aing[8] = {pos, neg, cnv, gv, s07, p0, p1, NULL};
    CHECK(adv->run(&ctx, aing, outs0, &err) == SD_ERR_INVALID && strcmp(err.input, "image") == 0);
    /* deprecated ControlNetApply: applies to uncond */
    sd_value *ap = NULL;
    sd_value *apin[4] = {pos, cnv, iv, s07};
    CHECK_OK(apply->run(&ctx, apin, &ap, &err), &err);
    CHECK(ap && sd_value_as_bool(sd_value_dict_get(sd_value_list_get(ap, 1), "control_apply_to_uncond")) == 1);

    /* ---- sampler side ---- */
    sd_model_sampling ms;
    sd_model_sampling_init(&ms, SD_PRED_EPS);
    sd_tensor *x = sd_tensor_new4(SD_F32, 4, 1, 4, 8, 8), *ctxt = sd_tensor_new4(SD_F32, 3, 1, 77, 128, 0);
    for (int64_t i = 0; i < sd_tensor_numel(x); i++) sd_tensor_f32(x)[i] = rnd() * 5;
    for (int64_t i = 0; i < sd_tensor_numel(ctxt); i++) sd_tensor_f32(ctxt)[i] = rnd() * 5;
    sd_bt *bx = sd_bt_from_host(be, x, SD_F32), *bc = sd_bt_from_host(be, ctxt, SD_F32);
    float sigma_hi = 10.0f, sigma_lo = 0.5f;
    float t_hi = sd_ms_timestep(&ms, sigma_hi), t_lo = sd_ms_timestep(&ms, sigma_lo);
    sd_unet_config ucfg = *sd_controlnet_config(cn);
    /* raw output for each image at both sigmas */
    sd_tensor *h1 = NULL, *h2 = NULL;
    CHECK_OK(sd_controlnet_hint(img, 64, 64, &h1, &err), &err);
    CHECK_OK(sd_controlnet_hint(img2, 64, 64, &h2, &err), &err);
    sd_bt *bh1 = sd_bt_from_host(be, h1, SD_F32), *bh2 = sd_bt_from_host(be, h2, SD_F32);
    sd_controlnet_result r1h, r1l, r2l;
    CHECK_OK(sd_controlnet_forward(cn, bx, &t_hi, bh1, bc, NULL, &r1h, &err), &err);
    CHECK_OK(sd_controlnet_forward(cn, bx, &t_lo, bh1, bc, NULL, &r1l, &err), &err);
    CHECK_OK(sd_controlnet_forward(cn, bx, &t_lo, bh2, bc, NULL, &r2l, &err), &err);
    sd_control_residuals res;
    /* high sigma: only the first link (the second starts at 50%) */
    CHECK_OK(control_eval(e1, &ms, &ucfg, sigma_hi, bx, 1, &t_hi, bc, NULL, &res, &err), &err);
    CHECK(res.active == 1 && res.control.n_skip == 12);
    if (res.active == 1 && r1h.middle) {
        CHECK_MSG(max_diff(res.control.middle, r1h.middle, 0.7f) < 1e-6, "middle * strength");
        CHECK_MSG(max_diff(res.control.skip[5], r1h.output[5], 0.7f) < 1e-6, "skip 5 * strength");
    }
    sd_control_residuals_free(&res);
    /* low sigma: both, summed */
    CHECK_OK(control_eval(e1, &ms, &ucfg, sigma_lo, bx, 1, &t_lo, bc, NULL, &res, &err), &err);
    CHECK(res.active == 2);
    if (res.active == 2 && r1l.middle && r2l.middle) {
        sd_bt *a = sd_op_scale(r1l.output[3], 0.7f), *b = sd_op_scale(r2l.output[3], 0.3f);
        sd_bt *s = sd_op_add(a, b);
        CHECK_MSG(max_diff(res.control.skip[3], s, 1.0f) < 1e-6, "chain sum");
        sd_bt_free(a);
        sd_bt_free(b);
        sd_bt_free(s);
    }
    sd_control_residuals_free(&res);
    /* an entry without control: nothing */
    CHECK_OK(control_eval(sd_value_list_get(pos, 0), &ms, &ucfg, sigma_lo, bx, 1, &t_lo, bc, NULL, &res, &err),
             &err);
    CHECK(res.active == 0 && res.control.middle == NULL && res.control.n_skip == 0);
    /* a model it does not fit */
    sd_unet_config other = ucfg;
    other.context_dim = 2048;
    sd_error_clear(&err);
    CHECK(control_eval(e1, &ms, &other, sigma_lo, bx, 1, &t_lo, bc, NULL, &res, &err) == SD_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "does not fit") && strstr(err.msg, "2048"), "%s", err.msg);
    /* a batch of 2 repeats the hint */
    {
        sd_tensor *x2 = sd_tensor_new4(SD_F32, 4, 2, 4, 8, 8), *c2 = sd_tensor_new4(SD_F32, 3, 2, 77, 128, 0);
        memcpy(x2->data, x->data, x->nbytes);
        memcpy((char *)x2->data + x->nbytes, x->data, x->nbytes);
        memcpy(c2->data, ctxt->data, ctxt->nbytes);
        memcpy((char *)c2->data + ctxt->nbytes, ctxt->data, ctxt->nbytes);
        sd_bt *bx2 = sd_bt_from_host(be, x2, SD_F32), *bc2 = sd_bt_from_host(be, c2, SD_F32);
        float ts2[2] = {t_hi, t_hi};
        CHECK_OK(control_eval(e0, &ms, &ucfg, sigma_hi, bx2, 1, ts2, bc2, NULL, &res, &err), &err);
        if (res.active == 1 && r1h.middle) {
            sd_bt *second = sd_op_slice(res.control.middle, 0, 1, 2);
            CHECK_MSG(max_diff(second, r1h.middle, 0.7f) < 1e-5, "batch item 2");
            sd_bt_free(second);
        }
        sd_control_residuals_free(&res);
        /* a hint batch of 2 (img, img3) on a model call of 2 latents is
         * used as it is, whether they are cond + uncond of one latent each
         * or one chunk of 2 (get_control calls broadcast_image_to only when
         * the batches differ): item 2 takes img3. A hint batch of 3 (img,
         * img3, img) is cut: to the first hint per chunk for cond + uncond
         * (batched_number 2), to img, img3 for one chunk. */
        sd_tensor *img3 = rand_image(64, 64), *h3 = NULL;
        sd_tensor *pair = sd_tensor_new4(SD_F32, 4, 2, img->shape[1], img->shape[2], img->shape[3]);
        sd_tensor *triple = sd_tensor_new4(SD_F32, 4, 3, img->shape[1], img->shape[2], img->shape[3]);
        memcpy(pair->data, img->data, img->nbytes);
        memcpy((char *)pair->data + img->nbytes, img3->data, img3->nbytes);
        memcpy(triple->data, pair->data, pair->nbytes);
        memcpy((char *)triple->data + pair->nbytes, img->data, img->nbytes);
        sd_control_link pl = {.cn = cn, .image = pair, .strength = 1.0, .start_percent = 0.0,
                              .end_percent = 1.0};
        CHECK_OK(sd_controlnet_hint(img3, 64, 64, &h3, &err), &err);
        sd_bt *bh3 = sd_bt_from_host(be, h3, SD_F32);
        sd_controlnet_result r2h;
        CHECK_OK(sd_controlnet_forward(cn, bx, &t_hi, bh3, bc, NULL, &r2h, &err), &err);
        for (int nb = 2; nb <= 3; nb++)
            for (int batched = 1; batched <= 2; batched++) {
                pl.image = nb == 2 ? pair : triple;
                CHECK_OK(sd_control_chain_eval_batched(&pl, 1, &ms, &ucfg, sigma_hi, bx2, batched, ts2,
                                                       bc2, NULL, &res, &err),
                         &err);
                if (res.active == 1 && r1h.middle && r2h.middle) {
                    sd_bt *second = sd_op_slice(res.control.middle, 0, 1, 2);
                    int first = nb == 3 && batched == 2;
                    CHECK_MSG(max_diff(second, first ? r1h.middle : r2h.middle, 1.0f) < 1e-5,
                              "hint batch %d, %d chunk(s): item 2", nb, batched);
                    sd_bt_free(second);
                } else {
                    CHECK(!"hint batch: no residuals");
                }
                sd_control_residuals_free(&res);
            }
        sd_controlnet_result_free(&r2h);
        sd_bt_free(bh3);
        sd_tensor_unref(h3);
        sd_tensor_unref(img3);
        sd_tensor_unref(pair);
        sd_tensor_unref(triple);
        sd_bt_free(bx2);
        sd_bt_free(bc2);
        sd_tensor_unref(x2);
        sd_tensor_unref(c2);
    }

    /* ---- Canny node ---- */
    sd_value *lo = sd_value_float(0.1), *hi = sd_value_float(0.3), *cout = NULL;
    sd_value *cin[3] = {iv, lo, hi};
    CHECK_OK(canny->run(&ctx, cin, &cout, &err), &err);
    sd_tensor *ce = sd_value_as_tensor(cout), *direct = NULL;
    CHECK_OK(sd_canny(img, 0.1, 0.3, &direct, NULL, &err), &err);
    CHECK(ce && direct && ce->nbytes == direct->nbytes && memcmp(ce->data, direct->data, ce->nbytes) == 0);
    sd_value *cbad[3] = {iv, hi, lo};
    sd_value *cout2 = NULL;
    CHECK(canny->run(&ctx, cbad, &cout2, &err) == SD_ERR_INVALID);

    sd_tensor_unref(direct);
    sd_value_unref(cout);
    sd_value_unref(lo);
    sd_value_unref(hi);
    sd_controlnet_result_free(&r1h);
    sd_controlnet_result_free(&r1l);
    sd_controlnet_result_free(&r2l);
    sd_bt_free(bh1);
    sd_bt_free(bh2);
    sd_tensor_unref(h1);
    sd_tensor_unref(h2);
    sd_bt_free(bx);
    sd_bt_free(bc);
    sd_tensor_unref(x);
    sd_tensor_unref(ctxt);
    sd_value_unref(ap);
    sd_value_unref(gv);
    sd_tensor_unref(gray);
    for (int i = 0; i < 2; i++) {
        sd_value_unref(outs[i]);
        sd_value_unref(outs2[i]);
    }
    sd_value *vals[] = {pos, neg, iv, iv2, s07, s03, s0, p0, p1, p5, cnv};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) sd_value_unref(vals[i]);
    sd_tensor_unref(img);
    sd_tensor_unref(img2);
    sd_env_cleanup(&env);
    sd_backend_free(be);
    sd_registry_reset();
    return sd_test_finish();
}
