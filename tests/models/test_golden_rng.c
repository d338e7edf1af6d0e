/* test_golden_rng.c - torch.randn / prepare_noise against torch 1.13 goldens.
 *
 * Iterates over every case of manifest_math.json "rng": the randn cases
 * (single draws, draw sequences that exercise the scalar cache, the raw
 * MT19937/uniform debug draws), the prepare_noise cases and the
 * default-capability (libm) cases. Expected: bit-exact float32; the manifest
 * allows 2 ulp (abs 2.5e-7) when FMAs differ, so that is the failure bound,
 * and the number of values that are not bit-exact is printed per family.
 *
 * rng_torch_randn.safetensors holds a U32 tensor, a dtype the core reader
 * does not know, so this test reads the (simple) safetensors layout itself.
 */
#include "golden.h"
#include "testutil.h"
#include "models/sampling/rng.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- minimal safetensors reading (header JSON + raw little-endian data) -- */

typedef struct stfile {
    char *buf;
    size_t size;
    cJSON *hdr;
    size_t data_off;
} stfile;

static int st_load(stfile *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->buf = sd_test_read_file(path, &f->size);
    if (!f->buf || f->size < 8)
        return -1;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | (unsigned char)f->buf[i];
    if (n > f->size - 8)
        return -1;
    f->hdr = cJSON_ParseWithLength(f->buf + 8, (size_t)n);
    f->data_off = 8 + (size_t)n;
    return f->hdr ? 0 : -1;
}

static void st_free(stfile *f)
{
    cJSON_Delete(f->hdr);
    free(f->buf);
}

/* Pointer to the tensor's bytes and its element count; NULL if absent or
 * not of dtype `dtype`. */
static const void *st_get(const stfile *f, const char *name, const char *dtype,
                          size_t elsize, int64_t *numel)
{
    cJSON *e = cJSON_GetObjectItemCaseSensitive(f->hdr, name);
    if (!e)
        return NULL;
    cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || strcmp(dt->valuestring, dtype) != 0 || !sh || !off)
        return NULL;
    int64_t n = 1;
    cJSON *d;
    cJSON_ArrayForEach(d, sh) n *= (int64_t)d->valuedouble;
    size_t b = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
    size_t en = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
    if (en - b != (size_t)n * elsize || f->data_off + en > f->size)
        return NULL;
    *numel = n;
    return f->buf + f->data_off + b;
}

/* Stored doubles need not be 8-byte aligned in the file. */
static double rd_f64(const void *p, int64_t i)
{
    double v;
    memcpy(&v, (const char *)p + i * 8, 8);
    return v;
}

/* ---- comparisons ----------------------------------------------------------- */

typedef struct family {
    const char *name;
    long values, not_exact;
    double max_abs;
    int64_t max_ulp;
} family;

static int64_t ulp_dist(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return llabs((int64_t)ia - (int64_t)ib);
}

/* Compares n floats; expected bit-exact, fails beyond 2 ulp / 2.5e-7. */
static void cmp_f32(family *fam, const char *what, const float *got,
                    const float *exp, int64_t n)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        fam->values++;
        if (memcmp(&got[i], &exp[i], 4) == 0)
            continue;
        fam->not_exact++;
        double d = fabs((double)got[i] - (double)exp[i]);
        int64_t u = ulp_dist(got[i], exp[i]);
        if (d > fam->max_abs) fam->max_abs = d;
        if (u > fam->max_ulp) fam->max_ulp = u;
        if ((u > 2 && d > 2.5e-7) || isnan(got[i]) != isnan(exp[i])) {
            if (bad++ < 3)
                fprintf(stderr, "%s[%" PRId64 "]: got %.9g expected %.9g\n", what, i,
                        got[i], exp[i]);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d values beyond 2 ulp", what, bad);
}

static void family_print(const family *f)
{
    printf("%-22s %7ld values, %ld not bit-exact, max abs err %.3g, max %" PRId64 " ulp\n",
           f->name, f->values, f->not_exact, f->max_abs, f->max_ulp);
}

/* The exact 64-bit seed of a case. JSON numbers are doubles in cJSON, so
 * seeds beyond 2^53 are lost there; the case id spells the seed exactly
 * ("seed18446744073709551615/7", "seedm1/7" for -1). Cross-checked with the
 * numeric field and seed_low32 so a mismatch between the two is caught. */
static int case_seed(const cJSON *c, uint64_t *seed)
{
    const cJSON *sj = cJSON_GetObjectItemCaseSensitive(c, "seed");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    if (!cJSON_IsNumber(sj))
        return -1;
    double sd = sj->valuedouble;
    if (fabs(sd) < 9007199254740992.0) {
        *seed = sd < 0 ? (uint64_t)(int64_t)sd : (uint64_t)sd;
        return 0;
    }
    if (!cJSON_IsString(id) || strncmp(id->valuestring, "seed", 4) != 0)
        return -1;
    const char *p = id->valuestring + 4;
    int neg = (*p == 'm');
    if (neg) p++;
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p)
        return -1;
    *seed = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    double back = neg ? -(double)v : (double)v;
    if (fabs(back - sd) > 1e-12 * fabs(sd))
        return -1;
    return 0;
}

static int64_t shape_numel(const cJSON *shape)
{
    int64_t n = 1;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) n *= (int64_t)d->valuedouble;
    return n;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* ---- the three families ------------------------------------------------------ */

static void run_randn_case(const cJSON *c, const stfile *st, family *fam,
                           family *dbg)
{
    const char *id = cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring;
    uint64_t seed;
    if (case_seed(c, &seed) != 0) {
        CHECK_MSG(0, "%s: cannot read the seed", id);
        return;
    }
    const cJSON *low = cJSON_GetObjectItemCaseSensitive(c, "seed_low32");
    if (cJSON_IsNumber(low))
        CHECK_MSG((double)(uint32_t)seed == low->valuedouble,
                  "%s: seed_low32 disagrees with the seed", id);
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(c, "tensor_keys");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(c, "shape");
    const cJSON *shapes = cJSON_GetObjectItemCaseSensitive(c, "shapes");
    sd_rng *r = sd_rng_new(seed);

    if (shape) {
        /* One torch.randn(shape); keys are the full tensor or first/last/sum. */
        int64_t n = shape_numel(shape);
        float *got = malloc((size_t)n * sizeof *got);
        sd_rng_randn(r, got, n);
        long exact_before = fam->not_exact;
        const cJSON *k;
        cJSON_ArrayForEach(k, keys) {
            const char *key = k->valuestring;
            int64_t m = 0;
            if (ends_with(key, "/sum_f64")) {
                const void *e = st_get(st, key, "F64", 8, &m);
                CHECK_MSG(e && m == 1, "%s missing", key);
                if (!e) continue;
                double s = 0;
                for (int64_t i = 0; i < n; i++) s += got[i];
                /* Manifest: rtol 1e-9 when the stored values matched
                 * bit-exactly, else abs 1e-3. */
                double ev = rd_f64(e, 0);
                double tol = fam->not_exact == exact_before ? 1e-9 * fabs(ev) : 1e-3;
                CHECK_MSG(fabs(s - ev) <= tol, "%s: %.17g vs %.17g", key, s, ev);
                continue;
            }
            const float *e = st_get(st, key, "F32", 4, &m);
            CHECK_MSG(e != NULL, "%s missing", key);
            if (!e) continue;
            const float *g = got;
            if (ends_with(key, "/last4096"))
                g = got + n - m;
            else if (!ends_with(key, "/first4096"))
                CHECK_MSG(m == n, "%s: %" PRId64 " values stored, %" PRId64 " drawn", key, m, n);
            if (m <= n)
                cmp_f32(fam, key, g, e, m);
        }
        free(got);
    } else if (shapes) {
        /* A sequence of torch.randn calls on one generator. */
        int i = 0;
        const cJSON *s;
        cJSON_ArrayForEach(s, shapes) {
            const cJSON *k = cJSON_GetArrayItem(keys, i++);
            int64_t n = shape_numel(s), m = 0;
            float *got = malloc((size_t)n * sizeof *got);
            sd_rng_randn(r, got, n);
            const float *e = k ? st_get(st, k->valuestring, "F32", 4, &m) : NULL;
            CHECK_MSG(e && m == n, "%s: draw %d missing", id, i - 1);
            if (e && m == n)
                cmp_f32(fam, k->valuestring, got, e, n);
            free(got);
        }
    } else {
        /* Debug draws: each key from a freshly seeded generator. */
        const cJSON *k;
        cJSON_ArrayForEach(k, keys) {
            const char *key = k->valuestring;
            int64_t m = 0;
            sd_rng_seed(r, seed);
            if (ends_with(key, "mt19937_first16_u32")) {
                const uint32_t *e = st_get(st, key, "U32", 4, &m);
                CHECK_MSG(e != NULL, "%s missing", key);
                for (int64_t i = 0; e && i < m; i++) {
                    uint32_t g = sd_rng_next_u32(r);
                    dbg->values++;
                    if (g != e[i]) dbg->not_exact++;
                    CHECK_MSG(g == e[i], "%s[%" PRId64 "]", key, i);
                }
            } else if (ends_with(key, "uniform_float_16")) {
                const float *e = st_get(st, key, "F32", 4, &m);
                CHECK_MSG(e != NULL, "%s missing", key);
                for (int64_t i = 0; e && i < m; i++) {
                    float g = sd_rng_uniform_float(r);
                    dbg->values++;
                    if (g != e[i]) dbg->not_exact++;
                    CHECK_MSG(g == e[i], "%s[%" PRId64 "]", key, i);
                }
            } else if (ends_with(key, "uniform_double_8")) {
                const void *e = st_get(st, key, "F64", 8, &m);
                CHECK_MSG(e != NULL, "%s missing", key);
                for (int64_t i = 0; e && i < m; i++) {
                    double g = sd_rng_uniform_double(r);
                    dbg->values++;
                    if (g != rd_f64(e, i)) dbg->not_exact++;
                    CHECK_MSG(g == rd_f64(e, i), "%s[%" PRId64 "]", key, i);
                }
            } else {
                CHECK_MSG(0, "%s: unknown debug tensor", key);
            }
        }
    }
    sd_rng_free(r);
}

static void run_prepare_case(const cJSON *c, const stfile *st, family *fam)
{
    const char *id = cJSON_GetObjectItemCaseSensitive(c, "id")->valuestring;
    uint64_t seed;
    CHECK_MSG(case_seed(c, &seed) == 0, "%s: seed", id);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(c, "shape");
    const cJSON *bi = cJSON_GetObjectItemCaseSensitive(c, "batch_index");
    int64_t dims[SD_MAX_DIMS];
    int nd = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) if (nd < SD_MAX_DIMS) dims[nd++] = (int64_t)d->valuedouble;
    int64_t idx[64];
    size_t nidx = 0;
    if (cJSON_IsArray(bi))
        cJSON_ArrayForEach(d, bi) if (nidx < 64) idx[nidx++] = (int64_t)d->valuedouble;
    sd_tensor *t = sd_noise_prepare(seed, nd, dims, nidx ? idx : NULL, nidx);
    CHECK_MSG(t != NULL, "%s: prepare_noise failed", id);
    int64_t m = 0;
    const float *e = st_get(st, id, "F32", 4, &m);
    CHECK_MSG(e != NULL, "%s missing", id);
    if (t && e) {
        CHECK_MSG(m == sd_tensor_numel(t), "%s: size", id);
        if (m == sd_tensor_numel(t))
            cmp_f32(fam, id, sd_tensor_f32(t), e, m);
    }
    sd_tensor_unref(t);
}

static const cJSON *find_case(const cJSON *cases, const char *id)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const cJSON *cid = cJSON_GetObjectItemCaseSensitive(c, "id");
        if (cJSON_IsString(cid) && strcmp(cid->valuestring, id) == 0)
            return c;
    }
    return NULL;
}

/* The seed an id such as "seed42/16" or "seedm3/7" names (m: negative). */
static int id_seed(const char *id, uint64_t *seed)
{
    if (strncmp(id, "seed", 4) != 0)
        return -1;
    const char *p = id + 4;
    int neg = (*p == 'm');
    if (neg) p++;
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || (*end != '/' && *end != 0))
        return -1;
    *seed = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    return 0;
}

/* A default-path case: its seed and shape from the randn case of the same id
 * when there is one (rc), else from the id and the stored tensor itself (the
 * values torch.randn draws depend only on the seed and the element count). */
static void run_default_case(const char *id, const cJSON *rc, const stfile *st, family *fam)
{
    uint64_t seed;
    int64_t m = 0;
    const float *e = st_get(st, id, "F32", 4, &m);
    CHECK_MSG(e != NULL, "%s missing in the default-path file", id);
    if (!e)
        return;
    int64_t n = m;
    if (rc) {
        CHECK_MSG(case_seed(rc, &seed) == 0, "%s: seed", id);
        n = shape_numel(cJSON_GetObjectItemCaseSensitive(rc, "shape"));
        CHECK_MSG(m == n, "%s: %lld values stored, the case's shape has %lld", id, (long long)m,
                  (long long)n);
        if (m != n)
            return;
    } else {
        CHECK_MSG(id_seed(id, &seed) == 0, "%s: no randn case and no seed in the id", id);
        if (id_seed(id, &seed) != 0)
            return;
    }
    sd_rng *r = sd_rng_new(seed);
    sd_rng_set_path(r, SD_RNG_PATH_DEFAULT);
    float *got = malloc((size_t)n * sizeof *got);
    sd_rng_randn(r, got, n);
    cmp_f32(fam, id, got, e, n);
    free(got);
    sd_rng_free(r);
}

int main(void)
{
    char path[4096];
    const char *dir = sd_golden_dir();
    snprintf(path, sizeof path, "%s/golden/manifest_math.json", dir);
    cJSON *man = sd_golden_json(path);
    const cJSON *rng = cJSON_GetObjectItemCaseSensitive(man, "rng");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(rng, "cases");
    const cJSON *pcases = cJSON_GetObjectItemCaseSensitive(rng, "prepare_noise_cases");
    const cJSON *dcases = cJSON_GetObjectItemCaseSensitive(rng, "default_path_cases");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(rng, "files");
    CHECK(cJSON_IsArray(cases) && cJSON_IsArray(files));

    /* The files the manifest lists, matched to a family by their role. */
    stfile st_randn = {0}, st_prep = {0}, st_def = {0};
    int have_randn = 0, have_prep = 0, have_def = 0, listed = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        const char *name = f->valuestring;
        snprintf(path, sizeof path, "%s/golden/%s", dir, name);
        stfile *dst = strstr(name, "prepare_noise") ? &st_prep
                      : strstr(name, "default_path") ? &st_def : &st_randn;
        int *have = dst == &st_prep ? &have_prep : dst == &st_def ? &have_def : &have_randn;
        listed++;
        if (st_load(dst, path) == 0)
            *have = 1;
        else
            CHECK_MSG(0, "manifest_math.json lists %s: missing or unreadable", path);
    }
    if (!listed) {
        cJSON_Delete(man);
        sd_test_skip("manifest_math.json under %s/golden lists no rng file", dir);
    }
    /* what the manifest lists must be there: a listed family without its
     * file has failed above */
    CHECK_MSG(have_randn && (!pcases || have_prep) && (!dcases || have_def),
              "rng: a case family has no file among those listed");
    if (!have_randn || (pcases && !have_prep) || (dcases && !have_def)) {
        cJSON_Delete(man);
        return sd_test_finish();
    }

    family randn = {"randn (AVX2 path)"}, dbg = {"mt19937/uniform draws"};
    family prep = {"prepare_noise"}, def = {"randn (default path)"};
    const cJSON *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cases) {
        run_randn_case(c, &st_randn, &randn, &dbg);
        n_cases++;
    }
    cJSON_ArrayForEach(c, pcases) run_prepare_case(c, &st_prep, &prep);
    cJSON_ArrayForEach(c, dcases) {
        CHECK_MSG(cJSON_IsString(c), "rng.default_path_cases: not a string");
        if (cJSON_IsString(c))
            run_default_case(c->valuestring, find_case(cases, c->valuestring), &st_def, &def);
    }
    printf("%d randn cases, %d prepare_noise cases, %d default-path cases\n", n_cases,
           cJSON_GetArraySize(pcases), cJSON_GetArraySize(dcases));
    family_print(&randn);
    family_print(&dbg);
    family_print(&prep);
    family_print(&def);
    CHECK(randn.values > 0 && prep.values > 0 && def.values > 0 && dbg.values > 0);

    st_free(&st_randn);
    st_free(&st_prep);
    st_free(&st_def);
    cJSON_Delete(man);
    return sd_test_finish();
}
