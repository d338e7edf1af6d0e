/* testutil.h - the tiny harness every C test uses.
 *
 * Each test is one executable. CHECK* record a failure and go on; the
 * process exits 1 when anything failed, 77 (ctest "skipped") when the test
 * called sd_test_skip() or sd_test_skip_unsupported() before any check
 * failed, else 0. A final "N passed, N failed" line is printed.
 *
 * Rules that keep a broken build from looking green:
 * - a skip after a failed check exits 1 (the failure is not hidden);
 * - a test that ran no check at all fails (sd_test_finish);
 * - with SDFLOW_REQUIRE_DATA=1 (set by .ci/run: CI always has ../shared) a
 *   skip for absent data (sd_test_skip) is a failure; only a skip for what
 *   the machine or build lacks (sd_test_skip_unsupported: no GPU, no bf16
 *   path) stays a skip.
 */
#ifndef SD_TESTUTIL_H
#define SD_TESTUTIL_H

#include <stdio.h>
#include "core/error.h"
#include "core/tensor.h"

extern int sd_test_failures;
extern int sd_test_checks;

#define CHECK(cond) do { sd_test_checks++; if (!(cond)) { sd_test_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { sd_test_checks++; if (!(cond)) { sd_test_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_OK(expr, errp) do { sd_status _rc = (expr); sd_test_checks++; if (_rc != SD_OK) { \
    sd_test_failures++; char _b[4096]; fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, \
    #expr, sd_error_format((errp), _b, sizeof _b)); } } while (0)

/* Directory of the reference data (SDFLOW_TESTDATA, default ../shared/testdata)
 * and of the shared folder (SDFLOW_SHARED, default ../shared). */
const char *sd_test_testdata_dir(void);
const char *sd_test_shared_dir(void);
/* A fresh empty scratch directory for this test (under the build tree). */
const char *sd_test_tmpdir(const char *name);
/* Reads a whole file (NUL-terminated); NULL if missing. Caller frees. */
char *sd_test_read_file(const char *path, size_t *size);
/* The test's data is absent: print the reason and exit 77 (skipped); exit 1
 * instead after a failed check or when SDFLOW_REQUIRE_DATA=1. */
void sd_test_skip(const char *why, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* The machine or build cannot run the test (no GPU, no bf16 compute path,
 * a comparison not made in this precision): exit 77, or 1 after a failed
 * check. Never for absent data. */
void sd_test_skip_unsupported(const char *why, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* Print the summary and return the exit code for main(): 1 when a check
 * failed or when no check ran. */
int sd_test_finish(void);

/* Elementwise |a - e| <= atol + rtol*|e| over F32 tensors of the same shape
 * (ndim and every dimension; a different shape, even with as many elements,
 * is a mismatch: returns 0 with max abs error INFINITY and worst index -1).
 * Returns 1 when all pass; fills max abs error and the worst index. */
int sd_test_allclose(const sd_tensor *actual, const sd_tensor *expected, double atol,
                     double rtol, double *max_abs, long *worst);

#endif
