#include "testutil.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int sd_test_failures = 0;
int sd_test_checks = 0;

static const char *env_or(const char *name, const char *fallback_env, const char *last) {
    const char *v = getenv(name);
    if (v && *v) return v;
    v = getenv(fallback_env);
    if (v && *v) return v;
    return last;
}

const char *sd_test_testdata_dir(void) {
    return env_or("SDFLOW_TESTDATA", "SDFLOW_TESTDATA_DEFAULT", "../shared/testdata");
}

const char *sd_test_shared_dir(void) {
    return env_or("SDFLOW_SHARED", "SDFLOW_SHARED_DEFAULT", "../shared");
}

static void mkdir_p(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') { *p = 0; mkdir(tmp, 0777); *p = '/'; }
    }
    mkdir(tmp, 0777);
}

const char *sd_test_tmpdir(const char *name) {
    static char buf[4096];
    const char *base = getenv("SDFLOW_TEST_TMP");
    if (!base || !*base) base = "/tmp/sdflow-test";
    /* The .bf16 / .bf16_<path> / .avx2 / .cuda variants of a test run the same
     * program at the same time as it (ctest -j): each gets its own folder. */
    const char *prec = getenv("SDFLOW_TEST_PRECISION"), *backend = getenv("SDFLOW_TEST_BACKEND");
    const char *path = getenv("SDFLOW_CPU_BF16"), *isa = getenv("SDFLOW_MAX_CPU_ISA");
    snprintf(buf, sizeof buf, "%s/%s%s%s%s%s%s%s%s%s", base, name, prec && *prec ? "." : "", prec ? prec : "",
             path && *path ? "_" : "", path ? path : "", isa && *isa ? "_" : "", isa ? isa : "",
             backend && *backend ? "." : "", backend ? backend : "");
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", buf);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not clean %s\n", buf);
    mkdir_p(buf);
    return buf;
}

char *sd_test_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; if (size) *size = (size_t)n; }
    return buf;
}

/* A skip after a failed check would hide the failure (ctest counts 77 as
 * skipped, not failed): such a test exits 1. */
static _Noreturn void skip_exit(const char *kind, int data, const char *why, va_list ap) {
    const char *req = getenv("SDFLOW_REQUIRE_DATA");
    int required = data && req && strcmp(req, "1") == 0;
    if (sd_test_failures) fprintf(stderr, "FAILED (%d failed check(s) before this skip): ", sd_test_failures);
    else if (required) fprintf(stderr, "FAILED (SDFLOW_REQUIRE_DATA=1: the reference data must be present): ");
    else fprintf(stderr, "SKIPPED (%s): ", kind);
    vfprintf(stderr, why, ap);
    fputc('\n', stderr);
    exit(sd_test_failures || required ? 1 : 77);
}

void sd_test_skip(const char *why, ...) {
    va_list ap;
    va_start(ap, why);
    skip_exit("data absent", 1, why, ap);
    va_end(ap);
}

void sd_test_skip_unsupported(const char *why, ...) {
    va_list ap;
    va_start(ap, why);
    skip_exit("not supported here", 0, why, ap);
    va_end(ap);
}

int sd_test_finish(void) {
    printf("%d passed, %d failed\n", sd_test_checks - sd_test_failures, sd_test_failures);
    if (sd_test_checks == 0) {
        /* A test that checked nothing proves nothing; it cannot pass. */
        fprintf(stderr, "FAILED: the test ran no checks\n");
        return 1;
    }
    return sd_test_failures ? 1 : 0;
}

int sd_test_allclose(const sd_tensor *a, const sd_tensor *e, double atol, double rtol,
                     double *max_abs, long *worst) {
    if (max_abs) *max_abs = INFINITY;
    if (worst) *worst = -1;
    if (!a || !e || a->dtype != SD_F32 || e->dtype != SD_F32) return 0;
    if (a->ndim != e->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != e->shape[i]) return 0;
    const float *pa = a->data, *pe = e->data;
    double mx = 0;
    long wi = -1;
    int ok = 1;
    for (long i = 0; i < (long)sd_tensor_numel(a); i++) {
        double d = fabs((double)pa[i] - (double)pe[i]);
        if (isnan(pa[i]) != isnan(pe[i])) d = INFINITY;
        if (isnan(pa[i]) && isnan(pe[i])) d = 0;
        if (d > atol + rtol * fabs((double)pe[i]) || isnan(d)) ok = 0;
        if (d > mx || isnan(d)) { mx = d; wi = i; }
    }
    if (max_abs) *max_abs = mx;
    if (worst) *worst = wi;
    return ok;
}
