/* test_golden_harness.c - the harness's own rules (testutil.h, golden.h),
 * which keep a broken build from looking green (issue 23, "Tests that cannot
 * hide a failure"); each case runs in a child process and its exit status is
 * what ctest would see:
 *   - a skip (data absent or unsupported) after a failed check exits 1, not
 *     77; a skip with nothing failed exits 77;
 *   - SDFLOW_REQUIRE_DATA=1 turns a data skip into exit 1 and leaves a skip
 *     for what the machine lacks at 77;
 *   - a test that ran no check fails; one passing check passes;
 *   - sd_test_allclose compares shapes, not element counts;
 *   - sd_golden_require_cases fails for every case whose file the manifest
 *     lists but the folder lacks (and passes when all are there).
 * No data needed: the manifest and files are made here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include "golden.h"
#include "testutil.h"

/* Runs fn in a child with fresh counters and returns its exit status
 * (-1 when it did not exit normally); what says what it does, in the log. fn ends the child itself (a skip) or
 * returns the code the child exits with. */
static int in_child(const char *what, int (*fn)(void *), void *arg) {
    fprintf(stderr, "-- child (its failures below are expected): %s\n", what);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        sd_test_failures = 0;
        sd_test_checks = 0;
        int code = fn(arg);
        fflush(stdout);
        fflush(stderr);
        _exit(code);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int fail_then_skip(void *arg) {
    (void)arg;
    CHECK_MSG(0, "(an expected failure inside the child)");
    sd_test_skip("data absent after a failed check");
}

static int fail_then_skip_unsupported(void *arg) {
    (void)arg;
    CHECK_MSG(0, "(an expected failure inside the child)");
    sd_test_skip_unsupported("no GPU after a failed check");
}

static int pass_then_skip(void *arg) {
    (void)arg;
    CHECK(1);
    sd_test_skip("data absent");
}

static int skip_unsupported(void *arg) {
    (void)arg;
    sd_test_skip_unsupported("no GPU");
}

static int no_checks(void *arg) {
    (void)arg;
    return sd_test_finish();
}

static int one_check(void *arg) {
    (void)arg;
    CHECK(1);
    return sd_test_finish();
}

static const char *g_dir;

static int require_cases(void *arg) {
    cJSON *m = arg;
    int n = sd_golden_require_cases(m, g_dir, "vae");
    CHECK_MSG(n == 2, "%d vae cases counted", n);
    return sd_test_finish();
}

static void test_exit_codes(void) {
    unsetenv("SDFLOW_REQUIRE_DATA");
    int rc = in_child("fail then skip", fail_then_skip, NULL);
    CHECK_MSG(rc == 1, "a data skip after a failed check exits %d, not 1", rc);
    rc = in_child("fail then skip unsupported", fail_then_skip_unsupported, NULL);
    CHECK_MSG(rc == 1, "an unsupported skip after a failed check exits %d, not 1", rc);
    rc = in_child("pass then skip", pass_then_skip, NULL);
    CHECK_MSG(rc == 77, "a data skip with nothing failed exits %d, not 77", rc);
    rc = in_child("skip unsupported", skip_unsupported, NULL);
    CHECK_MSG(rc == 77, "an unsupported skip exits %d, not 77", rc);
    setenv("SDFLOW_REQUIRE_DATA", "1", 1);
    rc = in_child("pass then skip", pass_then_skip, NULL);
    CHECK_MSG(rc == 1, "SDFLOW_REQUIRE_DATA=1: a data skip exits %d, not 1", rc);
    rc = in_child("skip unsupported", skip_unsupported, NULL);
    CHECK_MSG(rc == 77, "SDFLOW_REQUIRE_DATA=1: an unsupported skip exits %d, not 77", rc);
    unsetenv("SDFLOW_REQUIRE_DATA");
    rc = in_child("no checks", no_checks, NULL);
    CHECK_MSG(rc == 1, "a test that ran no check exits %d, not 1", rc);
    rc = in_child("one check", one_check, NULL);
    CHECK_MSG(rc == 0, "one passing check exits %d, not 0", rc);
}

static void test_allclose_shapes(void) {
    sd_tensor *a = sd_tensor_new4(SD_F32, 2, 2, 3, 0, 0), *b = sd_tensor_new4(SD_F32, 2, 3, 2, 0, 0);
    sd_tensor *c = sd_tensor_new4(SD_F32, 3, 2, 3, 1, 0), *d = sd_tensor_new4(SD_F32, 2, 2, 3, 0, 0);
    CHECK(a && b && c && d);
    if (a && b && c && d) {
        for (int i = 0; i < 6; i++)
            ((float *)a->data)[i] = ((float *)b->data)[i] = ((float *)c->data)[i] = ((float *)d->data)[i] = 0.5f * i;
        double mx = 0;
        long worst = 0;
        CHECK_MSG(!sd_test_allclose(a, b, 1, 1, &mx, &worst), "[2,3] vs [3,2] with equal values: not close");
        CHECK(worst == -1);
        CHECK_MSG(!sd_test_allclose(a, c, 1, 1, NULL, NULL), "[2,3] vs [2,3,1]: not close");
        CHECK_MSG(sd_test_allclose(a, d, 0, 0, &mx, &worst) && mx == 0, "[2,3] vs its equal: close");
        ((float *)d->data)[4] += 1;
        CHECK_MSG(!sd_test_allclose(a, d, 0.5, 0, &mx, &worst) && worst == 4, "one value off by 1: worst %ld", worst);
    }
    sd_tensor_unref(a);
    sd_tensor_unref(b);
    sd_tensor_unref(c);
    sd_tensor_unref(d);
}

static void touch(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) fclose(f);
}

static void test_require_cases(void) {
    g_dir = sd_test_tmpdir("golden_harness");
    cJSON *m = cJSON_Parse("{\"cases\": [{\"id\": \"a\", \"component\": \"vae\", \"file\": \"a.safetensors\"},"
                           " {\"id\": \"b\", \"component\": \"vae\", \"file\": \"b.safetensors\"},"
                           " {\"id\": \"c\", \"component\": \"clip\", \"file\": \"c.safetensors\"}]}");
    CHECK(m != NULL);
    if (!m) return;
    touch(g_dir, "a.safetensors");
    int rc = in_child("require cases", require_cases, m);
    CHECK_MSG(rc == 1, "a manifest case whose file is absent: the test exits %d, not 1", rc);
    touch(g_dir, "b.safetensors");
    rc = in_child("require cases", require_cases, m); /* c (another component) is not required */
    CHECK_MSG(rc == 0, "every vae case present: the test exits %d, not 0", rc);
    cJSON_Delete(m);
}

int main(void) {
    test_exit_codes();
    test_allclose_shapes();
    test_require_cases();
    return sd_test_finish();
}
