/* golden.c - helpers shared by the golden tests; see golden.h. */
#include "golden.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/text/clip.h"
#include "models/text/tokenizer.h"
#include "models/sampling/guider.h"
#include "models/sampling/model_sampling.h"
#include "models/sampling/sampler.h"
#include "models/sampling/schedules.h"
#include "testutil.h"

/* ---- backend and precision -------------------------------------------------- */

static int g_depth;     /* L of the tensors compared next (golden.h) */
static double g_used = NAN; /* sd_golden_used() */

sd_precision sd_golden_precision(void) {
    const char *p = getenv("SDFLOW_TEST_PRECISION");
    if (!p || !*p || strcmp(p, "f32") == 0) return SD_PREC_F32;
    if (strcmp(p, "bf16") == 0) return SD_PREC_BF16;
    if (strcmp(p, "f16") == 0) return SD_PREC_F16;
    fprintf(stderr, "SDFLOW_TEST_PRECISION must be f32, bf16 or f16, not '%s'\n", p);
    exit(1);
}

const char *sd_golden_backend_name(void) {
    const char *b = getenv("SDFLOW_TEST_BACKEND");
    return b && *b ? b : "cpu";
}

sd_backend *sd_golden_backend(void) {
    const char *name = sd_golden_backend_name();
    sd_precision p = sd_golden_precision();
    const char *pname = sd_precision_name(p);
    sd_backend *be = NULL;
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_backend_new(name, 0, &be, &err);
    /* a GPU backend missing from the build or the machine is a skip; the
     * default CPU one must always work */
    if (rc != SD_OK && strcmp(name, "cpu") != 0) sd_test_skip_unsupported("backend %s: %s", name, err.msg);
    CHECK_OK(rc, &err);
    if (rc != SD_OK) return NULL;
    if (!sd_backend_supports_precision(be, p)) {
        sd_backend_free(be);
        sd_test_skip_unsupported("backend %s has no %s compute path in this build", name, pname);
    }
    sd_backend_set_precision(be, p);
    g_depth = 0;
    printf("golden: backend %s, precision %s\n", name, pname);
    return be;
}

sd_backend *sd_golden_sampling_backend(void) {
    sd_backend *be = sd_golden_backend();
    if (!be) return NULL;
    if (!sd_golden_e2e_comparable()) {
        sd_backend_free(be);
        sd_test_skip_unsupported("sampling cases are compared in f32 only (golden.h)");
    }
    return be;
}

void sd_golden_set_depth(int L) { g_depth = L > 0 ? L : 0; }

double sd_golden_slack(void) {
    if (sd_golden_precision() == SD_PREC_F32 || g_depth == 0) return 0;
    /* twice the format's unit roundoff: bf16 2^-9 -> 2^-8, f16 2^-11 -> 2^-10 */
    int e = sd_golden_precision() == SD_PREC_F16 ? -10 : -8;
    return 6.0 * ldexp(1.0, e) * sqrt((double)g_depth);
}

int sd_golden_e2e_comparable(void) { return sd_golden_precision() == SD_PREC_F32; }

int sd_golden_allclose(const sd_tensor *a, const sd_tensor *e, double atol, double rtol,
                       double *max_abs, long *worst) {
    double slack = sd_golden_slack();
    if (slack > 0 && (atol != 0 || rtol != 0) && e && e->dtype == SD_F32) {
        const float *pe = e->data;
        double ss = 0;
        int64_t n = sd_tensor_numel(e);
        for (int64_t i = 0; i < n; i++)
            if (isfinite(pe[i])) ss += (double)pe[i] * pe[i];
        atol += slack * (n ? sqrt(ss / (double)n) : 0);
    }
    g_used = NAN;
    int ok = sd_test_allclose(a, e, atol, rtol, max_abs, worst);
    if (a && e && a->dtype == SD_F32 && e->dtype == SD_F32 &&
        sd_tensor_numel(a) == sd_tensor_numel(e)) {
        const float *pa = a->data, *pe = e->data;
        double used = 0;
        for (int64_t i = 0; i < sd_tensor_numel(e); i++) {
            double lim = atol + rtol * fabs((double)pe[i]), d = fabs((double)pa[i] - pe[i]);
            double r = d == 0 ? 0 : lim > 0 ? d / lim : INFINITY;
            if (!(r <= used)) used = r; /* NaN propagates */
        }
        g_used = used;
    }
    return ok;
}

double sd_golden_used(void) { return g_used; }

/* ---- manifest and cases --------------------------------------------------- */

const char *sd_golden_dir(void) {
    const char *dir = getenv("SDFLOW_TESTDATA");
    return dir && *dir ? dir : sd_test_testdata_dir();
}

const char *sd_golden_family_dir(const char *family) {
    static char buf[2048];
    char var[64] = "SDFLOW_TESTDATA_";
    size_t n = strlen(var);
    for (size_t i = 0; family[i] && n + 1 < sizeof var; i++)
        var[n++] = (char)(family[i] >= 'a' && family[i] <= 'z' ? family[i] - 32 : family[i]);
    var[n] = 0;
    const char *dir = getenv(var);
    if (dir && *dir) snprintf(buf, sizeof buf, "%s", dir);
    else snprintf(buf, sizeof buf, "%s/%s", sd_golden_dir(), family);
    return buf;
}

int sd_golden_resolve_path(const char *dir, const char *ref, char *out, size_t n) {
    if (n) out[0] = 0;
    if (!ref || !*ref) return 0;
    char word[1024];
    size_t k = 0;
    while (ref[k] && ref[k] != ' ' && k + 1 < sizeof word) word[k] = ref[k], k++;
    word[k] = 0;
    if (strncmp(word, "shared/testdata/", 16) == 0) snprintf(out, n, "%s/%s", sd_golden_dir(), word + 16);
    else if (strncmp(word, "shared/", 7) == 0) snprintf(out, n, "%s/%s", sd_test_shared_dir(), word + 7);
    else if (word[0] == '/') snprintf(out, n, "%s", word);
    else snprintf(out, n, "%s/%s", dir, word);
    FILE *f = fopen(out, "rb");
    if (f) fclose(f);
    return f != NULL;
}

const char *sd_golden_topic_dir(const char *topic) {
    static char buf[2048];
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/tests/data/%s", src && *src ? src : SD_TEST_SOURCE_DIR, topic);
    return buf;
}

cJSON *sd_golden_manifest(const char *dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    return sd_golden_json(path);
}

cJSON *sd_golden_json(const char *path) {
    char *text = sd_test_read_file(path, NULL);
    if (!text) sd_test_skip("no reference data (%s)", path);
    cJSON *manifest = cJSON_Parse(text);
    free(text);
    CHECK_MSG(manifest != NULL, "%s: not valid JSON", path);
    if (!manifest) exit(sd_test_finish());
    return manifest;
}

sd_st_file *sd_golden_open_ref(const char *dir, const cJSON *manifest, const char *key) {
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(manifest, key));
    CHECK_MSG(file != NULL, "%s/manifest.json names no \"%s\" file", dir, key);
    if (!file) exit(sd_test_finish());
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(path, &f, &err), &err);
    if (!f) exit(sd_test_finish());
    return f;
}

const char *sd_golden_tokenizer_dir(void) {
    static char buf[4096];
    const char *tk = getenv("SDFLOW_TOKENIZER_DIR");
    if (tk && *tk) snprintf(buf, sizeof buf, "%s", tk);
    else snprintf(buf, sizeof buf, "%s/data/clip", sd_test_shared_dir());
    return buf;
}

const char *sd_golden_tiny_sd1(const char *what) {
    static char ckpt[4300];
    snprintf(ckpt, sizeof ckpt, "%s/models/tiny-sd1.safetensors", sd_golden_dir());
    const char *tokdir = sd_golden_tokenizer_dir();
    struct stat st;
    if (stat(tokdir, &st) != 0 || !S_ISDIR(st.st_mode) || stat(ckpt, &st) != 0)
        sd_test_skip("no tokenizer (%s) or no %s%s%s", tokdir, ckpt, what ? ": " : "", what ? what : "");
    return ckpt;
}

int sd_golden_case_is(const cJSON *c, const char *comp) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "component"));
    return s && strcmp(s, comp) == 0;
}

static FILE *open_case_file(const char *dir, const cJSON *c, char *path, size_t size) {
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file"));
    snprintf(path, size, "%s/%s", dir, file ? file : "");
    return fopen(path, "rb");
}

int sd_golden_case_present(const char *dir, const cJSON *c) {
    char path[1200];
    FILE *fp = open_case_file(dir, c, path, sizeof path);
    if (!fp) return 0;
    fclose(fp);
    return 1;
}

int sd_golden_require_cases(cJSON *manifest, const char *dir, const char *comp) {
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) {
        if (!sd_golden_case_is(c, comp)) continue;
        char path[1200];
        FILE *fp = open_case_file(dir, c, path, sizeof path);
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
        CHECK_MSG(fp != NULL, "the manifest lists %s case %s, but its file %s is absent", comp,
                  id ? id : "?", path);
        if (fp) fclose(fp);
        n++;
    }
    return n;
}

int sd_golden_require_cases_or_skip(cJSON *manifest, const char *dir, const char *comp) {
    int n = sd_golden_require_cases(manifest, dir, comp);
    if (!n) {
        cJSON_Delete(manifest);
        sd_test_skip("the manifest under %s lists no %s case", dir, comp);
    }
    return n;
}

const char *sd_golden_clip_vocab(cJSON *manifest) {
    static char dir[2400];
    snprintf(dir, sizeof dir, "%s/data/clip", sd_test_shared_dir());
    if (!sd_tokenizer_dir_has_files(dir)) {
        cJSON_Delete(manifest);
        sd_test_skip("no CLIP vocabulary in %s", dir);
    }
    return dir;
}

void sd_golden_run_cases(sd_backend *be, const char *dir, cJSON *manifest, const char *comp,
                         sd_golden_case_fn fn, const char *e2e_key, sd_golden_case_fn e2e_fn,
                         const char **case_id) {
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) {
        if (!sd_golden_case_is(c, comp)) continue;
        *case_id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
        printf("case %s\n", *case_id);
        fn(be, dir, manifest, c);
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(manifest, "cases")) {
        if (!e2e_fn) break;
        cJSON *st = cJSON_GetObjectItemCaseSensitive(c, "settings");
        if (!sd_golden_case_is(c, "e2e") || !cJSON_GetObjectItemCaseSensitive(st, e2e_key)) continue;
        *case_id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
        CHECK_MSG(sd_golden_case_present(dir, c), "the manifest lists e2e case %s, but its file is absent",
                  *case_id ? *case_id : "?");
        if (!sd_golden_case_present(dir, c)) continue;
        if (!sd_golden_e2e_comparable()) {
            printf("case %s: end-to-end sampling is not compared in bf16 (golden.h)\n", *case_id);
            continue;
        }
        printf("case %s\n", *case_id);
        e2e_fn(be, dir, manifest, c);
    }
}

void sd_golden_compare(const char *case_id, cJSON *tensors, sd_st_file *g, const char *name,
                       sd_tensor *actual) {
    sd_error err;
    sd_error_clear(&err);
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(tensors, name);
    cJSON *tol = cJSON_GetObjectItemCaseSensitive(meta, "tolerance");
    double atol = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(tol, "atol"));
    double rtol = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(tol, "rtol"));
    CHECK_MSG(!isnan(atol) && !isnan(rtol), "%s %s: no tolerance in the manifest", case_id, name);
    sd_tensor *exp = sd_st_tensor_f32(g, name, &err);
    CHECK_MSG(exp != NULL, "%s: golden tensor %s missing: %s", case_id, name, err.msg);
    CHECK_MSG(actual != NULL, "%s %s: not produced", case_id, name);
    if (exp && actual) {
        int same = actual->ndim == exp->ndim;
        for (int i = 0; same && i < exp->ndim; i++) same = actual->shape[i] == exp->shape[i];
        char b1[96], b2[96];
        CHECK_MSG(same, "%s %s: shape %s, expected %s", case_id, name,
                  sd_tensor_shape_str(actual, b1, sizeof b1), sd_tensor_shape_str(exp, b2, sizeof b2));
        if (same) {
            double max_abs = 0;
            long worst = -1;
            int ok = sd_golden_allclose(actual, exp, atol, rtol, &max_abs, &worst);
            printf("  %-18s %-40s max|err| %.3g (atol %.3g rtol %.3g slack %.3g*rms; %.2f of bound) %s\n",
                   case_id, name, max_abs, atol, rtol, sd_golden_slack(), sd_golden_used(),
                   ok ? "ok" : "FAIL");
            CHECK_MSG(ok, "%s %s: max abs error %g at %ld (atol %g, rtol %g)", case_id, name, max_abs,
                      worst, atol, rtol);
        }
    }
    sd_tensor_unref(exp);
}

int sd_golden_mark(cJSON *tensors, int *used, const char *name) {
    int i = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        if (strcmp(t->string, name) == 0) {
            used[i] = 1;
            return 1;
        }
        i++;
    }
    return 0;
}

/* the tap name of a manifest key (prefix removed): "act.x" -> "x" */
static const char *tap_name(const char *key) {
    return strncmp(key, "act.", 4) == 0 ? key + 4 : key;
}

void sd_golden_taps_collect(sd_golden_taps *ts, cJSON *tensors, const char *pre,
                            const char *const *plain, const char *case_id) {
    memset(ts, 0, sizeof *ts);
    size_t plen = strlen(pre);
    cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const char *key = t->string;
        if (strncmp(key, pre, plen) != 0) continue;
        key += plen;
        int want = strncmp(key, "act.", 4) == 0;
        for (int i = 0; !want && plain && plain[i]; i++) want = strcmp(key, plain[i]) == 0;
        if (!want) continue;
        CHECK_MSG(ts->n < SD_GOLDEN_MAX_TAPS && strlen(key) < sizeof ts->keys[0],
                  "%s: activation %s: more than %d, or its name too long", case_id, key,
                  SD_GOLDEN_MAX_TAPS);
        if (ts->n < SD_GOLDEN_MAX_TAPS && strlen(key) < sizeof ts->keys[0])
            snprintf(ts->keys[ts->n++], sizeof ts->keys[0], "%s", key);
    }
}

void sd_golden_tap(void *user, const char *name, const sd_bt *t) {
    sd_golden_taps *ts = user;
    for (int i = 0; i < ts->n; i++)
        if (!ts->got[i] && strcmp(tap_name(ts->keys[i]), name) == 0) ts->got[i] = sd_bt_to_host(t);
}

void sd_golden_taps_check(sd_golden_taps *ts, const char *case_id, cJSON *tensors, sd_st_file *g,
                          const char *pre, int *used) {
    for (int i = 0; i < ts->n; i++) {
        char full[256];
        snprintf(full, sizeof full, "%s%s", pre, ts->keys[i]);
        sd_golden_compare(case_id, tensors, g, full, ts->got[i]);
        sd_golden_mark(tensors, used, full);
        sd_tensor_unref(ts->got[i]);
        ts->got[i] = NULL;
    }
}

/* ---- end-to-end cases --------------------------------------------------- */

typedef struct e2e_model {
    sd_backend *be;
    sd_unet *unet;
    const sd_model_sampling *ms;
    sd_tensor *cond[2];
    const sd_control_link *link; /* NULL: no control */
    int calls;
    sd_tensor *step_cond[16], *step_uncond[16];
} e2e_model;

static sd_status e2e_eval(void *ud, const sd_tensor *x, float sigma, const int *conds, int n_conds,
                          sd_tensor **outs, sd_error *err) {
    e2e_model *m = ud;
    sd_status rc = SD_OK;
    for (int j = 0; j < n_conds && !rc; j++) {
        sd_tensor *xin = sd_tensor_clone(x);
        sd_ms_calculate_input(m->ms, sigma, sd_tensor_f32(x), sd_tensor_f32(xin), (size_t)sd_tensor_numel(x));
        int64_t n = x->shape[0];
        float ts[8];
        for (int64_t i = 0; i < n && i < 8; i++) ts[i] = sd_ms_timestep(m->ms, sigma);
        sd_bt *bx = sd_bt_from_host(m->be, xin, SD_F32), *bc = sd_bt_from_host(m->be, m->cond[conds[j]], SD_F32);
        sd_bt *o = NULL;
        sd_control_residuals res = {0};
        if (m->link)
            rc = sd_control_chain_eval(m->link, 1, m->ms, sd_unet_get_config(m->unet), sigma, bx, ts, bc, NULL,
                                       &res, err);
        if (!rc) rc = sd_unet_forward(m->unet, bx, ts, bc, NULL, m->link ? &res.control : NULL, &o, err);
        if (!rc) {
            sd_tensor *eps = sd_bt_to_host(o);
            sd_ms_calculate_denoised(m->ms, sigma, sd_tensor_f32(eps), sd_tensor_f32(x), sd_tensor_f32(outs[j]),
                                     (size_t)sd_tensor_numel(x));
            sd_tensor_unref(eps);
            int step = m->calls;
            if (step < 16) {
                sd_tensor **slot = conds[j] == 0 ? &m->step_cond[step] : &m->step_uncond[step];
                sd_tensor_unref(*slot);
                *slot = sd_tensor_clone(outs[j]);
            }
        }
        sd_control_residuals_free(&res);
        sd_bt_free(bx);
        sd_bt_free(bc);
        sd_bt_free(o);
        sd_tensor_unref(xin);
    }
    m->calls++;
    return rc;
}

typedef struct e2e_steps {
    sd_tensor *x[16], *denoised[16];
} e2e_steps;

static void e2e_progress(void *ud, int step, int total, const sd_tensor *x, const sd_tensor *den) {
    (void)total;
    e2e_steps *s = ud;
    if (step < 0 || step >= 16) return;
    s->x[step] = sd_tensor_clone(x);
    s->denoised[step] = sd_tensor_clone(den);
}

/* CLIPTextEncode on SD1 from stored ids: last layer with final LN. */
static sd_tensor *e2e_encode(const sd_text_encoder *te, sd_tensor *ids) {
    sd_error err;
    sd_error_clear(&err);
    int64_t n = sd_tensor_numel(ids);
    int32_t *i32 = malloc((size_t)n * sizeof *i32);
    for (int64_t i = 0; i < n; i++) i32[i] = (int32_t)((const int64_t *)ids->data)[i];
    sd_clip_tokens tk = {.n = (int)ids->shape[0], .len = (int)ids->shape[1], .ids = i32};
    sd_clip_output o = {0};
    CHECK_OK(sd_clip_forward((sd_clip *)sd_text_encoder_clip_l(te), &tk, (sd_clip_layer){-1, 1}, &o, &err), &err);
    sd_tensor *h = o.hidden ? sd_bt_to_host(o.hidden) : NULL;
    sd_clip_output_free(&o);
    free(i32);
    return h;
}

/* Runs the case; compare(name, tensor) checks and marks one tensor. */
/* Runs the case; cmp(name, tensor) checks and marks one tensor. */
void sd_golden_e2e_run(sd_backend *be, cJSON *c, sd_unet *unet, const sd_text_encoder *te, sd_vae *vae,
                       float latent_scale, const sd_control_link *link, sd_golden_cmp_fn cmp,
                       sd_golden_in_fn in) {
    sd_error err;
    sd_error_clear(&err);
    cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    int steps = cJSON_GetObjectItemCaseSensitive(settings, "steps")->valueint;
    double cfg = cJSON_GetObjectItemCaseSensitive(settings, "cfg")->valuedouble;
    const char *sampler = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(settings, "sampler"));
    const char *scheduler = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(settings, "scheduler"));
    cJSON *seed = cJSON_GetObjectItemCaseSensitive(settings, "seed");
    sd_model_sampling ms;
    sd_model_sampling_init(&ms, SD_PRED_EPS);
    e2e_model m = {.be = be, .unet = unet, .ms = &ms, .link = link};
    sd_tensor *pid = in("pos.l.ids"), *nid = in("neg.l.ids"), *noise = in("noise");
    if (!pid || !nid || !noise || steps > 14) {
        CHECK_MSG(0, "e2e case lacks ids/noise or has too many steps");
        goto out;
    }
    m.cond[0] = e2e_encode(te, pid);
    m.cond[1] = e2e_encode(te, nid);
    cmp("pos.cond", m.cond[0]);
    cmp("neg.cond", m.cond[1]);
    float *sig = malloc((size_t)sd_schedule_capacity(steps) * sizeof *sig);
    int ns = 0;
    CHECK_OK(sd_schedule_sigmas(&ms, scheduler, steps, sig, &ns, &err), &err);
    sd_tensor *st = sd_tensor_new4(SD_F32, 1, ns, 0, 0, 0);
    memcpy(st->data, sig, (size_t)ns * sizeof *sig);
    cmp("sigmas", st);
    sd_tensor_unref(st);
    sd_tensor *xi = sd_tensor_clone(noise);
    sd_ms_noise_scaling(&ms, sig[0], sd_tensor_f32(noise), NULL, sd_ms_is_max_denoise(&ms, sig[0]),
                        sd_tensor_f32(xi), (size_t)sd_tensor_numel(xi));
    cmp("x_init", xi);
    sd_tensor_unref(xi);

    sd_guider gd;
    sd_guider_init(&gd, e2e_eval, &m, cfg);
    sd_sampler_params p;
    sd_sampler_params_init(&p);
    p.seed = (uint64_t)(seed ? seed->valuedouble : 0);
    e2e_steps es = {0};
    p.progress = e2e_progress;
    p.progress_ud = &es;
    const sd_sampler *s = sd_sampler_find(sampler);
    CHECK_MSG(s != NULL, "unknown sampler %s", sampler);
    sd_tensor *xo = NULL;
    if (s) CHECK_OK(sd_guider_sample(&gd, &ms, s, sig, ns, noise, NULL, NULL, &p, &xo, &err), &err);
    sd_guider_release(&gd);
    char nm[64];
    for (int i = 0; i < steps; i++) {
        snprintf(nm, sizeof nm, "step%d.x", i);
        cmp(nm, es.x[i]);
        snprintf(nm, sizeof nm, "step%d.denoised", i);
        cmp(nm, es.denoised[i]);
        snprintf(nm, sizeof nm, "step%d.cond_denoised", i);
        cmp(nm, m.step_cond[i]);
        snprintf(nm, sizeof nm, "step%d.uncond_denoised", i);
        cmp(nm, m.step_uncond[i]);
    }
    if (xo) {
        for (int64_t i = 0; i < sd_tensor_numel(xo); i++) sd_tensor_f32(xo)[i] /= latent_scale;
        cmp("latent_out", xo);
        sd_tensor *img = NULL;
        CHECK_OK(sd_vae_decode(vae, xo, &img, &err), &err);
        cmp("image", img);
        sd_tensor_unref(img);
    }
    sd_tensor_unref(xo);
    for (int i = 0; i < 16; i++) {
        sd_tensor_unref(es.x[i]);
        sd_tensor_unref(es.denoised[i]);
        sd_tensor_unref(m.step_cond[i]);
        sd_tensor_unref(m.step_uncond[i]);
    }
    free(sig);
out:
    sd_tensor_unref(m.cond[0]);
    sd_tensor_unref(m.cond[1]);
    sd_tensor_unref(pid);
    sd_tensor_unref(nid);
    sd_tensor_unref(noise);
}
