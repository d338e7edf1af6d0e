/* guide.c - the BasicGuider and DualCFGGuider denoisers
 * (comfy_extras/nodes_custom_sampler.py Guider_Basic, Guider_DualCFG),
 * float32 with one rounding per torch op, in torch's order. CFGGuider
 * itself is models/sampling/guider.h. */
#include <string.h>

#include "sampling.h"
#include "models/sampling/guider.h"
#include "nodes/loaders/loaders.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

void sd_guide_state_init(sd_guide_state *s, const sd_guide *g, sd_cond_model *cm) {
    memset(s, 0, sizeof *s);
    s->g = g;
    s->cm = cm;
}

/* the MODEL's cfg function (RescaleCFG), or NULL */
static const sd_cfg_hook *hook_of(const sd_guide *g) {
    return g->patches && g->patches->cfg.rescale ? &g->patches->cfg : NULL;
}

static int64_t batch_of(const sd_tensor *x) {
    return x->ndim > 0 && x->shape[0] > 0 ? x->shape[0] : 1;
}

void sd_guide_state_release(sd_guide_state *s) {
    for (int i = 0; i < 4; i++) {
        sd_tensor_unref(s->buf[i]);
        s->buf[i] = NULL;
    }
}

static sd_tensor *scratch(sd_tensor **slot, const sd_tensor *x) {
    if (*slot && sd_tensor_same_shape(*slot, x)) return *slot;
    sd_tensor_unref(*slot);
    *slot = sd_tensor_new(SD_F32, x->ndim, x->shape);
    return *slot;
}

/* Guider_Basic: sampling_function with no negative. calc_cond_batch gives
 * zeros for the missing uncond, so the result is cfg_function(cond, 0, 1)
 * and CFG++ samplers see a zero uncond. */
static sd_status basic_eval(sd_guide_state *s, const sd_tensor *x, float sigma,
                            sd_tensor *denoised, sd_tensor *uncond_denoised, sd_error *err) {
    int c = SD_COND_POSITIVE;
    sd_status rc = sd_cond_model_eval(s->cm, x, sigma, &c, 1, &denoised, err);
    if (rc) return rc;
    int64_t n = sd_tensor_numel(x);
    sd_tensor *zeros = uncond_denoised ? uncond_denoised : scratch(&s->buf[0], x);
    if (!zeros) return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
    memset(zeros->data, 0, zeros->nbytes);
    /* sampling_function runs the MODEL's pre-CFG functions here too */
    if (s->g->patches &&
        (rc = sd_cfg_pre_ex(&s->g->patches->cfg, x, sigma, 1.0, 0, denoised, zeros, err)))
        return rc;
    const sd_cfg_hook *all = s->g->patches ? &s->g->patches->cfg : NULL;
    int post = sd_cfg_post_active(all, sigma);
    sd_tensor *cc = post ? scratch(&s->buf[1], x) : NULL, *pb = post ? scratch(&s->buf[2], x) : NULL;
    if (post && (!cc || !pb)) return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
    if (post) memcpy(cc->data, denoised->data, (size_t)n * sizeof(float));
    float *dv = denoised->data;
    int64_t b = batch_of(x);
    if (all && all->fn != SD_CFG_FN_NONE) { /* RenormCFG, PerpNeg (its empty prediction first) */
        sd_tensor *eb = NULL;
        if (all->fn == SD_CFG_FN_PERP_NEG) {
            int e = SD_COND_EMPTY;
            if (!(eb = scratch(&s->buf[3], x))) return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
            if ((rc = sd_cond_model_eval(s->cm, x, sigma, &e, 1, &eb, err))) return rc;
        }
        if ((rc = sd_cfg_apply(all, dv, zeros->data, eb ? eb->data : NULL, 1.0, x->data, sigma, b, n / b, dv, err)))
            return rc;
    } else {
        sd_cfg_function(hook_of(s->g), dv, zeros->data, 1.0, x->data, sigma, b, n / b, dv);
    }
    if (post)
        return sd_cfg_post(all, sd_cond_model_eval_skip, s->cm, x, sigma, cc->data, zeros->data, 1.0, denoised, pb,
                           err);
    return SD_OK;
}

/* Guider_DualCFG.predict_noise. calc_cond_batch order: negative, middle,
 * positive; out = cfg_function(middle, negative, cfg2) + (pos - middle) * cfg1
 * (regular), or neg + cfg2 * (cfg_function(pos, middle, cfg1) - neg) (nested).
 * The regular style skips the negative when cfg2 is 1 and then the middle
 * too when cfg1 is 1 (zeros instead), unless the sampler needs the uncond. */
static sd_status dual_eval(sd_guide_state *s, const sd_tensor *x, float sigma,
                           sd_tensor *denoised, sd_tensor *uncond_denoised, sd_error *err) {
    const sd_guide *g = s->g;
    if (g->patches && g->patches->cfg.n_post > 0) /* ComfyUI runs them on (middle, negative) here */
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "post-CFG functions (SkipLayerGuidanceSD3, PerturbedAttentionGuidance, "
                            "SelfAttentionGuidance) with DualCFGGuider are not supported");
    if (g->patches && g->patches->cfg.fn != SD_CFG_FN_NONE)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "RenormCFG / PerpNeg with DualCFGGuider are not supported");
    int64_t n = sd_tensor_numel(x);
    sd_tensor *neg = scratch(&s->buf[0], x), *mid = scratch(&s->buf[1], x), *pos = denoised;
    if (!neg || !mid) return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
    int use_neg = 1, use_mid = 1;
    if (!g->nested && !uncond_denoised && sd_cfg_is_one(g->cfg2)) {
        use_neg = 0;
        use_mid = !sd_cfg_is_one(g->cfg);
    }
    int conds[3], nc = 0;
    sd_tensor *outs[3];
    if (use_neg) conds[nc] = SD_COND_NEGATIVE, outs[nc++] = neg;
    else memset(neg->data, 0, neg->nbytes);
    if (use_mid) conds[nc] = SD_COND_MIDDLE, outs[nc++] = mid;
    else memset(mid->data, 0, mid->nbytes);
    conds[nc] = SD_COND_POSITIVE, outs[nc++] = pos;
    sd_status rc = sd_cond_model_eval(s->cm, x, sigma, conds, nc, outs, err);
    if (rc) return rc;
    const float *nv = neg->data, *mv = mid->data;
    float *dv = denoised->data; /* holds the positive prediction */
    const float c1 = (float)g->cfg, c2 = (float)g->cfg2;
    const sd_cfg_hook *hook = hook_of(g);
    if (hook) {
        /* the same formulas with cfg_function running the MODEL's hook */
        sd_tensor *tb = scratch(&s->buf[2], x);
        if (!tb) return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
        float *t = tb->data;
        int64_t b = batch_of(x);
        if (g->nested) {
            sd_cfg_function(hook, dv, mv, g->cfg, x->data, sigma, b, n / b, t);
            for (int64_t i = 0; i < n; i++) {
                float u = t[i] - nv[i];
                u = c2 * u;
                dv[i] = nv[i] + u;
            }
            if (uncond_denoised) memcpy(uncond_denoised->data, mv, (size_t)n * sizeof(float));
        } else {
            sd_cfg_function(hook, mv, nv, g->cfg2, x->data, sigma, b, n / b, t);
            for (int64_t i = 0; i < n; i++) {
                float u = dv[i] - mv[i];
                u = u * c1;
                dv[i] = t[i] + u;
            }
            if (uncond_denoised) memcpy(uncond_denoised->data, nv, (size_t)n * sizeof(float));
        }
        return SD_OK;
    }
    if (g->nested) {
        for (int64_t i = 0; i < n; i++) {
            float t = dv[i] - mv[i];
            t = t * c1;
            float text = mv[i] + t; /* cfg_function(pos, middle, cfg1) */
            float u = text - nv[i];
            u = c2 * u;
            dv[i] = nv[i] + u;
        }
        if (uncond_denoised) memcpy(uncond_denoised->data, mv, (size_t)n * sizeof(float));
    } else {
        for (int64_t i = 0; i < n; i++) {
            float t = mv[i] - nv[i];
            t = t * c2;
            float r = nv[i] + t; /* cfg_function(middle, negative, cfg2) */
            float u = dv[i] - mv[i];
            u = u * c1;
            dv[i] = r + u;
        }
        if (uncond_denoised) memcpy(uncond_denoised->data, nv, (size_t)n * sizeof(float));
    }
    return SD_OK;
}

/* Guider_PerpNeg.predict_noise: calc_cond_batch([positive, negative,
 * empty]) (negative left out when neg_scale is 0, and then empty too at cfg
 * 1, unless cfg 1 optimisation is off), the MODEL's pre-CFG functions,
 * perp_neg, then the post-CFG functions with the negative as uncond. The
 * MODEL's cfg function is not called (predict_noise skips cfg_function). */
static sd_status perp_neg_eval(sd_guide_state *s, const sd_tensor *x, float sigma, sd_tensor *denoised,
                               sd_tensor *uncond_denoised, sd_error *err) {
    const sd_guide *g = s->g;
    const sd_cfg_hook *all = g->patches ? &g->patches->cfg : NULL;
    const int64_t n = sd_tensor_numel(x);
    sd_tensor *neg = uncond_denoised ? uncond_denoised : scratch(&s->buf[0], x), *emp = scratch(&s->buf[1], x);
    if (!neg || !emp) return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
    int use_neg = 1, use_emp = 1;
    /* disable_cfg1_optimization: set by SelfAttentionGuidance and by the
     * samplers that read the uncond prediction */
    if (!uncond_denoised && !sd_cfg_hook_needs_uncond(all) && g->cfg2 == 0.0) { /* math.isclose(x, 0.0) */
        use_neg = 0;
        use_emp = !sd_cfg_is_one(g->cfg);
    }
    int conds[3] = {SD_COND_POSITIVE}, nc = 1;
    sd_tensor *outs[3] = {denoised};
    if (use_neg) conds[nc] = SD_COND_NEGATIVE, outs[nc++] = neg;
    else memset(neg->data, 0, neg->nbytes);
    if (use_emp) conds[nc] = SD_COND_EMPTY, outs[nc++] = emp;
    else memset(emp->data, 0, emp->nbytes);
    sd_status rc = sd_cond_model_eval(s->cm, x, sigma, conds, nc, outs, err);
    if (!rc && all) rc = sd_cfg_pre_ex(all, x, sigma, g->cfg, use_neg, denoised, neg, err);
    if (rc) return rc;
    const int post = sd_cfg_post_active(all, sigma);
    sd_tensor *cc = post ? scratch(&s->buf[2], x) : NULL, *pb = post ? scratch(&s->buf[3], x) : NULL;
    if (post && (!cc || !pb)) return sd_error_set(err, SD_ERR_NOMEM, "guider: out of memory");
    if (post) memcpy(cc->data, denoised->data, (size_t)n * sizeof(float));
    float *dv = denoised->data;
    sd_cfg_perp_neg(dv, neg->data, emp->data, g->cfg2, g->cfg, n, dv);
    if (post)
        return sd_cfg_post(all, sd_cond_model_eval_skip, s->cm, x, sigma, cc->data, neg->data, g->cfg, denoised, pb,
                           err);
    return SD_OK;
}

static sd_status guide_eval(void *ud, const sd_tensor *x, float sigma, sd_tensor *denoised,
                            sd_tensor *uncond_denoised, sd_error *err) {
    sd_guide_state *s = ud;
    if (s->g->kind == SD_GUIDE_PERP_NEG) return perp_neg_eval(s, x, sigma, denoised, uncond_denoised, err);
    if (s->g->kind == SD_GUIDE_BASIC) return basic_eval(s, x, sigma, denoised, uncond_denoised, err);
    if (s->g->kind == SD_GUIDE_DUAL_CFG) return dual_eval(s, x, sigma, denoised, uncond_denoised, err);
    return sd_error_set(err, SD_ERR_INVALID, "guider: CFG guiders use models/sampling/guider.h");
}

sd_denoiser sd_guide_state_denoiser(sd_guide_state *s) {
    sd_denoiser d = {guide_eval, s};
    return d;
}
