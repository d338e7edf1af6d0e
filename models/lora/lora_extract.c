/* lora_extract.c - ComfyUI's extract_lora (comfy_extras/nodes_lora_extract.py):
 * a weight difference cut to a rank-r LoRA by a singular value decomposition,
 * its factors clamped at the 0.99 quantile of their values.
 *
 * The decomposition is LAPACK's sgesdd, the routine torch.linalg.svd calls on
 * the CPU (ComfyUI's reference runs), taken from the OpenBLAS sdflow already
 * links for its CPU gemm (Debian's libopenblas exports LAPACK). It runs on
 * the host: extraction is a one-off at save time, as the LoRA patcher's own
 * arithmetic (lora_apply.c) is, and needs no backend op.
 *
 * Sign freedom: each singular pair (u_i, v_i) may come back as (-u_i, -v_i).
 * torch and this file give the matrix to the same routine in the same
 * (column-major, rows = out channels) layout, so they pick the same signs;
 * the clamp threshold is a quantile of the signed values, so another LAPACK
 * could give another threshold (as ComfyUI on CUDA does). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/lora/lora.h"

/* LAPACK's Fortran entry (no C header ships with Debian's OpenBLAS dev
 * package; LAPACKE would be another library). The trailing size_t is the
 * hidden length of the CHARACTER argument gfortran passes. */
extern void sgesdd_(const char *jobz, const int *m, const int *n, float *a, const int *lda, float *s,
                    float *u, const int *ldu, float *vt, const int *ldvt, float *work,
                    const int *lwork, int *iwork, int *info, size_t jobz_len);

#define CLAMP_QUANTILE 0.99f

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* torch.quantile(x, q), linear interpolation, float32 throughout as torch
 * computes it: rank = q * (n - 1), lerp of the neighbours by rank's
 * fraction (torch's lerp: from the nearer end). NaN when x holds one (the
 * caller refuses it). Sorts x. */
static float quantile(float *x, size_t n, float q) {
    for (size_t i = 0; i < n; i++)
        if (isnan(x[i])) return NAN;
    qsort(x, n, sizeof *x, cmp_float);
    float rank = q * (float)(n - 1);
    size_t below = (size_t)rank;
    size_t above = (size_t)ceilf(rank);
    if (above >= n) above = n - 1;
    float w = rank - (float)below;
    float a = x[below], b = x[above];
    return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

sd_status sd_lora_svd(const float *a, int m, int n, float *s, float *u, float *vt, sd_error *err) {
    int k = m < n ? m : n;
    size_t mn = (size_t)m * (size_t)n;
    float *col = malloc(mn * sizeof *col);
    float *uc = malloc((size_t)m * (size_t)k * sizeof *uc);
    float *vc = malloc((size_t)k * (size_t)n * sizeof *vc);
    int *iwork = malloc((size_t)8 * (size_t)k * sizeof *iwork);
    float *work = NULL;
    sd_status rc = SD_OK;
    if (!col || !uc || !vc || !iwork) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory for a %dx%d SVD", m, n);
        goto done;
    }
    /* torch hands LAPACK the matrix itself, column-major */
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) col[(size_t)j * m + i] = a[(size_t)i * n + j];
    int lwork = -1, info = 0;
    float wq = 0;
    sgesdd_("S", &m, &n, col, &m, s, uc, &m, vc, &k, &wq, &lwork, iwork, &info, 1);
    if (info != 0) {
        rc = sd_error_set(err, SD_ERR_INVALID, "LAPACK sgesdd workspace query failed (info %d)", info);
        goto done;
    }
    lwork = (int)wq + 1;
    work = malloc((size_t)lwork * sizeof *work);
    if (!work) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory for a %dx%d SVD", m, n);
        goto done;
    }
    sgesdd_("S", &m, &n, col, &m, s, uc, &m, vc, &k, work, &lwork, iwork, &info, 1);
    if (info != 0) {
        rc = sd_error_set(err, SD_ERR_INVALID, "the SVD of a %dx%d matrix did not converge (sgesdd info %d)",
                          m, n, info);
        goto done;
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < k; j++) u[(size_t)i * k + j] = uc[(size_t)j * m + i];
    for (int i = 0; i < k; i++)
        for (int j = 0; j < n; j++) vt[(size_t)i * n + j] = vc[(size_t)j * k + i];
done:
    free(col);
    free(uc);
    free(vc);
    free(iwork);
    free(work);
    return rc;
}

sd_status sd_lora_extract(const sd_tensor *diff, int rank, sd_tensor **up_out, sd_tensor **down_out,
                          float *sv, sd_error *err) {
    *up_out = *down_out = NULL;
    if (diff->dtype != SD_F32 || (diff->ndim != 2 && diff->ndim != 4))
        return sd_error_set(err, SD_ERR_INVALID, "a %d-D weight difference is not a matrix or a conv kernel",
                            diff->ndim);
    int conv = diff->ndim == 4;
    int64_t out = diff->shape[0], in = diff->shape[1];
    int64_t kh = conv ? diff->shape[2] : 1, kw = conv ? diff->shape[3] : 1;
    /* a 1x1 kernel is squeeze()d: with one in or out channel that leaves a
     * vector, which torch.linalg.svd refuses (ComfyUI then skips the key) */
    if (conv && kh == 1 && kw == 1 && (out == 1 || in == 1))
        return sd_error_set(err, SD_ERR_INVALID, "a [%lld, %lld, 1, 1] kernel squeezes to a vector",
                            (long long)out, (long long)in);
    int64_t cols = in * kh * kw;
    if (out > 65535 || cols > 1 << 30 || out * cols > ((int64_t)1 << 31) - 1)
        return sd_error_set(err, SD_ERR_INVALID, "a [%lld, %lld] difference is too large for one SVD",
                            (long long)out, (long long)cols);
    int64_t r = rank;
    if (r > in) r = in;
    if (r > out) r = out;
    int m = (int)out, n = (int)cols, k = m < n ? m : n;
    if (r > k) r = k;
    float *s = malloc((size_t)k * sizeof *s);
    float *u = malloc((size_t)m * (size_t)k * sizeof *u);
    float *vt = malloc((size_t)k * (size_t)n * sizeof *vt);
    size_t nd = (size_t)(m + n) * (size_t)r;
    float *dist = malloc(nd * sizeof *dist);
    sd_status rc = SD_OK;
    if (!s || !u || !vt || !dist) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory extracting a LoRA");
        goto done;
    }
    if ((rc = sd_lora_svd(sd_tensor_f32(diff), m, n, s, u, vt, err))) goto done;
    int64_t ushape[4] = {out, r, 1, 1}, dshape[4] = {r, in, kh, kw};
    sd_tensor *up = sd_tensor_new(SD_F32, conv ? 4 : 2, ushape);
    sd_tensor *down = sd_tensor_new(SD_F32, conv ? 4 : 2, dshape);
    if (!up || !down) {
        sd_tensor_unref(up);
        sd_tensor_unref(down);
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory extracting a LoRA");
        goto done;
    }
    /* U[:, :r] @ diag(S[:r]) and Vh[:r, :] */
    float *U = sd_tensor_f32(up), *D = sd_tensor_f32(down);
    for (int i = 0; i < m; i++)
        for (int64_t j = 0; j < r; j++) U[(size_t)i * r + j] = u[(size_t)i * k + j] * s[j];
    memcpy(D, vt, (size_t)r * (size_t)n * sizeof *D);
    memcpy(dist, U, (size_t)m * (size_t)r * sizeof *dist);
    memcpy(dist + (size_t)m * r, D, (size_t)r * (size_t)n * sizeof *dist);
    float hi = quantile(dist, nd, CLAMP_QUANTILE);
    if (isnan(hi)) {
        sd_tensor_unref(up);
        sd_tensor_unref(down);
        rc = sd_error_set(err, SD_ERR_INVALID, "the weight difference holds NaN");
        goto done;
    }
    float lo = -hi;
    /* torch.clamp(x, lo, hi) = min(max(x, lo), hi) */
    for (size_t i = 0; i < (size_t)m * r; i++) U[i] = fminf(fmaxf(U[i], lo), hi);
    for (size_t i = 0; i < (size_t)r * n; i++) D[i] = fminf(fmaxf(D[i], lo), hi);
    if (sv) memcpy(sv, s, (size_t)r * sizeof *sv);
    *up_out = up;
    *down_out = down;
done:
    free(s);
    free(u);
    free(vt);
    free(dist);
    return rc;
}
