/* quantize_ref.c - ggml's own reference quantizers (quantize_row_*_ref in
 * ggml-quants.c, what llama-quantize writes without an importance matrix)
 * on one test input, for tests/core/test_quantize.c. Built and run by
 * make_quantize.sh against a ggml source tree; this file only makes the
 * input and writes what ggml makes of it.
 *
 * usage: quantize_ref OUTDIR  ->  OUTDIR/input.f32 and OUTDIR/<TYPE>.bin */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-common.h"
#include "ggml-quants.h"

/* ggml-quants.c's non-reference paths name these; the reference ones do not
 * reach them */
void ggml_abort(const char *file, int line, const char *fmt, ...) {
    fprintf(stderr, "ggml_abort %s:%d %s\n", file, line, fmt);
    abort();
}
size_t ggml_row_size(enum ggml_type t, int64_t ne) { (void)t, (void)ne; abort(); }
const char *ggml_type_name(enum ggml_type t) { (void)t; return "?"; }
size_t ggml_type_size(enum ggml_type t) { (void)t; abort(); }

enum { NBLK = 48, N = NBLK * 256 };

static unsigned long long st = 0x243F6A8885A308D3ull;
static double unif(void) { /* (0, 1) */
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return ((st >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif()); }

/* One super-block (256 values) per regime, cycling: Gaussian weights at
 * several scales, offset (one-signed) blocks, outliers, zero groups and
 * blocks, constants, values below the K-quants' epsilon, and small integers
 * and halves (the ties of Q4_0 / Q8_0 rounding). */
static void make_input(float *x) {
    for (int b = 0; b < NBLK; b++) {
        float *v = x + 256 * b;
        double s = pow(10.0, -3.0 + 4.0 * unif());
        int kind = b % 12;
        for (int i = 0; i < 256; i++) {
            double g = gauss() * s;
            switch (kind) {
            case 0: case 1: case 2: v[i] = (float)g; break;
            case 3: v[i] = (float)(fabs(g) + 0.3 * s); break;          /* all positive */
            case 4: v[i] = (float)(-fabs(g) - 0.1 * s); break;         /* all negative */
            case 5: v[i] = (float)(i % 37 == 5 ? 40 * g : g); break;   /* outliers */
            case 6: v[i] = (i / 32) % 3 == 1 ? 0.0f : (float)g; break; /* zero groups */
            case 7: v[i] = b == 7 ? 0.0f : (float)(s * 0.75); break;   /* zeros / a constant */
            case 8: v[i] = (float)(g * 1e-17); break;                  /* below GROUP_MAX_EPS */
            case 9: v[i] = (float)((int)(unif() * 16) - 8); break;     /* integers -8..7 */
            case 10: v[i] = (float)(((int)(unif() * 64) - 32) * 0.5); break;
            default: v[i] = (float)(g + (i < 128 ? 2 * s : -s)); break; /* offset halves */
            }
        }
    }
}

static int put(const char *dir, const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: quantize_ref OUTDIR\n"), 2;
    static float x[N];
    static unsigned char out[N * 2];
    make_input(x);
    int rc = put(argv[1], "input.f32", x, sizeof x);
#define Q(T, blk, fn)                                          \
    memset(out, 0, sizeof out);                                \
    fn(x, (blk *)out, N);                                      \
    rc |= put(argv[1], T ".bin", out, (size_t)N / QK_SIZE_##blk * sizeof(blk));
#define QK_SIZE_block_q8_0 QK8_0
#define QK_SIZE_block_q4_0 QK4_0
#define QK_SIZE_block_q4_1 QK4_1
#define QK_SIZE_block_q5_0 QK5_0
#define QK_SIZE_block_q5_1 QK5_1
#define QK_SIZE_block_q4_K QK_K
#define QK_SIZE_block_q5_K QK_K
#define QK_SIZE_block_q6_K QK_K
    Q("Q8_0", block_q8_0, quantize_row_q8_0_ref)
    Q("Q4_0", block_q4_0, quantize_row_q4_0_ref)
    Q("Q4_1", block_q4_1, quantize_row_q4_1_ref)
    Q("Q5_0", block_q5_0, quantize_row_q5_0_ref)
    Q("Q5_1", block_q5_1, quantize_row_q5_1_ref)
    Q("Q4_K", block_q4_K, quantize_row_q4_K_ref)
    Q("Q5_K", block_q5_K, quantize_row_q5_K_ref)
    Q("Q6_K", block_q6_K, quantize_row_q6_K_ref)
    return rc;
}
