/* testutil.h - the tiny harness every C test uses.
 *
 * Each test is one executable. CHECK* record a failure and go on; the
 * process exits 1 when anything failed, 77 (ctest "skipped") when the test
 * called sd_test_skip(), else 0. A final "N passed, N failed" line is printed.
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
/* Print a reason and exit 77 (skipped). */
void sd_test_skip(const char *why, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* Print the summary and return the exit code for main(). */
int sd_test_finish(void);

/* Elementwise |a - e| <= atol + rtol*|e| over F32 tensors of equal shape.
 * Returns 1 when all pass; fills max abs error and the worst index. */
int sd_test_allclose(const sd_tensor *actual, const sd_tensor *expected, double atol,
                     double rtol, double *max_abs, long *worst);

#endif
