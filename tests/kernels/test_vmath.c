/* test_vmath.c - every instruction-set path of the CPU softmax / SiLU /
 * GELU (erf and tanh) rows and the GroupNorm statistics that this CPU can run, against
 * double references (long double for the statistics: rtol 1e-13).
 * Tolerances: softmax atol 1e-7 + rtol 1e-5, activations 2e-6 abs + rel. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu.h"
#include "testutil.h"

static int close_rows(const char *what, int isa, const float *got, const double *ref, int64_t n,
                      double atol, double rtol) {
    double worst = 0;
    int64_t wi = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref[i]);
        if (!(d <= atol + rtol * fabs(ref[i]))) bad++;
        if (!(d <= worst)) { worst = d; wi = i; }
    }
    CHECK_MSG(bad == 0, "%s isa %d n %lld: %lld off, worst %.3g at %lld (got %.8g want %.8g)", what,
              isa, (long long)n, (long long)bad, worst, (long long)wi, got[wi], ref[wi]);
    return bad == 0;
}

/* Mean and variance of n floats with a large offset (catches a one-pass
 * E[x^2] - E[x]^2), every length class around the 8/16/32-lane loops. */
static void test_group_stats(int best) {
    static const int64_t sizes[] = {0, 1, 7, 15, 16, 31, 32, 33, 63, 100, 4099, 262147};
    unsigned seed = 777;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int64_t n = sizes[si];
        float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            x[i] = 1000.0f + ((float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f) * 3.0f;
        }
        long double s = 0, q = 0;
        for (int64_t i = 0; i < n; i++) s += x[i];
        long double m = n ? s / n : 0;
        for (int64_t i = 0; i < n; i++) q += (x[i] - m) * (x[i] - m);
        long double v = n ? q / n : 0;
        for (int isa = SD_ISA_SCALAR; isa <= best; isa++) {
            double gm = -1, gv = -1;
            sd_cpu_group_stats_isa(x, n, &gm, &gv, isa);
            CHECK_MSG(fabsl(gm - m) <= 1e-13L * fabsl(m) && fabsl(gv - v) <= 1e-13L * v + 1e-300L,
                      "group stats isa %d n %lld: mean %.17g var %.17g, want %.17Lg %.17Lg", isa,
                      (long long)n, gm, gv, m, v);
        }
        free(x);
    }
}

int main(void) {
    int best = sd_cpu_isa();
    test_group_stats(best);
    printf("best isa: %d\n", best);
    static const int64_t sizes[] = {1, 7, 8, 15, 16, 17, 33, 100, 4099};
    unsigned seed = 12345;
    for (int isa = SD_ISA_SCALAR; isa <= best; isa++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            int64_t n = sizes[si];
            float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
            double *ref = malloc((size_t)n * sizeof *ref);
            for (int64_t i = 0; i < n; i++) {
                seed = seed * 1664525u + 1013904223u;
                x[i] = ((float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f) * 12.0f;
            }
            if (n > 3) x[1] = -1e4f, x[2] = 1e4f, x[3] = 0.0f; /* extremes */
            /* SiLU and quick_gelu */
            for (int b = 0; b < 2; b++) {
                double beta = b ? 1.702 : 1.0;
                for (int64_t i = 0; i < n; i++) ref[i] = x[i] / (1.0 + exp(-beta * x[i]));
                sd_cpu_silu_isa(x, y, n, (float)beta, isa);
                close_rows(b ? "quick_gelu" : "silu", isa, y, ref, n, 2e-6, 2e-6);
            }
            for (int64_t i = 0; i < n; i++) ref[i] = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
            sd_cpu_gelu_isa(x, y, n, isa);
            close_rows("gelu", isa, y, ref, n, 2e-6, 2e-6);
            for (int64_t i = 0; i < n; i++) {
                double v = x[i];
                ref[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
            }
            sd_cpu_gelu_tanh_isa(x, y, n, isa);
            close_rows("gelu_tanh", isa, y, ref, n, 2e-6, 2e-6);
            /* softmax on moderate scores, with every 5th masked */
            double mx = -INFINITY, se = 0;
            for (int64_t i = 0; i < n; i++) {
                y[i] = i % 5 == 4 ? -INFINITY : x[i] * 0.5f;
                if (y[i] > mx) mx = y[i];
            }
            for (int64_t i = 0; i < n; i++) se += i % 5 == 4 ? 0 : exp(y[i] - mx);
            for (int64_t i = 0; i < n; i++) ref[i] = i % 5 == 4 ? 0 : exp(y[i] - mx) / se;
            sd_cpu_softmax_row_isa(y, n, isa);
            close_rows("softmax", isa, y, ref, n, 1e-7, 1e-5);
            int zeros = 1;
            for (int64_t i = 4; i < n; i += 5) zeros &= y[i] == 0.0f;
            CHECK_MSG(zeros, "softmax isa %d: masked entries not exactly 0", isa);
            /* unnormalised (attention): exp(s - max) and the sum */
            for (int64_t i = 0; i < n; i++) y[i] = i % 5 == 4 ? -INFINITY : x[i] * 0.5f;
            float emx = -INFINITY;
            double sum = sd_cpu_exp_row_isa(y, n, &emx, isa);
            CHECK_MSG(fabs(sum - se) <= 1e-5 * se, "exp_row isa %d n %lld: sum %.9g want %.9g", isa,
                      (long long)n, sum, se);
            CHECK_MSG(emx == (float)mx, "exp_row isa %d: max %g want %g", isa, emx, mx);
            for (int64_t i = 0; i < n; i++) ref[i] = i % 5 == 4 ? 0 : exp((double)(x[i] * 0.5f) - mx);
            close_rows("exp_row", isa, y, ref, n, 1e-7, 1e-5);
            /* a running max above the row's (online softmax): exp relative to it */
            for (int64_t i = 0; i < n; i++) y[i] = i % 5 == 4 ? -INFINITY : x[i] * 0.5f;
            emx = (float)mx + 1.0f;
            sum = sd_cpu_exp_row_isa(y, n, &emx, isa);
            double se1 = 0;
            for (int64_t i = 0; i < n; i++) {
                ref[i] = i % 5 == 4 ? 0 : exp((double)(x[i] * 0.5f) - ((float)mx + 1.0f));
                se1 += ref[i];
            }
            CHECK_MSG(emx == (float)mx + 1.0f && fabs(sum - se1) <= 1e-5 * se1,
                      "exp_row floor isa %d: max %g sum %.9g want %.9g", isa, emx, sum, se1);
            close_rows("exp_row floor", isa, y, ref, n, 1e-7, 1e-5);
            /* fully masked row */
            for (int64_t i = 0; i < n; i++) y[i] = -INFINITY;
            sd_cpu_softmax_row_isa(y, n, isa);
            int all0 = 1;
            for (int64_t i = 0; i < n; i++) all0 &= y[i] == 0.0f;
            CHECK(all0);
            for (int64_t i = 0; i < n; i++) y[i] = -INFINITY;
            emx = -INFINITY;
            CHECK(sd_cpu_exp_row_isa(y, n, &emx, isa) == 0.0);
            all0 = 1;
            for (int64_t i = 0; i < n; i++) all0 &= y[i] == 0.0f;
            CHECK(all0);
            free(x);
            free(y);
            free(ref);
        }
    return sd_test_finish();
}
