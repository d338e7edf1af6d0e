/* fresca.c - FreSca's Fourier filter (fresca.h). */
#include "models/sampling/fresca.h"

#include <math.h>
#include <stdlib.h>

/* The low-block projection along one dimension of n points as a circulant:
 * P[a][b] = (1/n) sum over the low frequencies k of e^{2 pi i k (a - b) / n}
 * = re[(a - b) mod n] + i im[(a - b) mod n]. The low frequencies are the
 * shifted positions [n/2 - f, n/2 + f), i.e. k = -f .. f - 1 (mod n). */
static void low_circulant(int64_t n, int64_t cutoff, double *re, double *im) {
    const int64_t cc = n / 2, f = cutoff < cc ? cutoff : cc;
    const double two_pi = 6.283185307179586476925286766559;
    for (int64_t d = 0; d < n; d++) {
        double sr = 0.0, si = 0.0;
        for (int64_t k = -f; k < f; k++) {
            int64_t e = ((k * d) % n + n) % n; /* the angle's exact residue */
            double t = two_pi * (double)e / (double)n;
            sr += cos(t);
            si += sin(t);
        }
        re[d] = sr / (double)n;
        im[d] = si / (double)n;
    }
}

sd_status sd_fresca_filter(float *x, const int64_t shape[4], double scale_low, double scale_high,
                           int64_t freq_cutoff, sd_error *err) {
    const int64_t planes = shape[0] * shape[1], H = shape[2], W = shape[3];
    if (planes <= 0 || H <= 0 || W <= 0) return SD_OK;
    double *buf = malloc((size_t)(2 * H + 2 * W + 2 * H * W) * sizeof(double));
    if (!buf) return sd_error_set(err, SD_ERR_NOMEM, "out of memory (FreSca)");
    double *hr = buf, *hi = hr + H, *wr = hi + H, *wi = wr + W, *a = wi + W, *b = a + H * W;
    low_circulant(H, freq_cutoff, hr, hi);
    low_circulant(W, freq_cutoff, wr, wi);
    const double dl = scale_low - scale_high;
    for (int64_t p = 0; p < planes; p++) {
        float *xp = x + p * H * W;
        /* along W: a = X Re(P_W)^T, b = X Im(P_W)^T */
        for (int64_t h = 0; h < H; h++)
            for (int64_t w = 0; w < W; w++) {
                double sr = 0.0, si = 0.0;
                for (int64_t v = 0; v < W; v++) {
                    int64_t d = ((w - v) % W + W) % W;
                    sr += (double)xp[h * W + v] * wr[d];
                    si += (double)xp[h * W + v] * wi[d];
                }
                a[h * W + w] = sr;
                b[h * W + w] = si;
            }
        /* along H: Re(P_H X P_W^T) = Re(P_H) a - Im(P_H) b */
        for (int64_t r = 0; r < H; r++)
            for (int64_t w = 0; w < W; w++) {
                double s = 0.0;
                for (int64_t h = 0; h < H; h++) {
                    int64_t d = ((r - h) % H + H) % H;
                    s += hr[d] * a[h * W + w] - hi[d] * b[h * W + w];
                }
                xp[r * W + w] = (float)(scale_high * (double)xp[r * W + w] + dl * s);
            }
    }
    free(buf);
    return SD_OK;
}
