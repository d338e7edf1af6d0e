/* norm.cu - GroupNorm(+SiLU), LayerNorm and softmax.
 *
 * Statistics are accumulated in double, two-pass (mean, then squared
 * deviations), as the CPU backend does, so the large VAE groups (millions of
 * elements) lose nothing in any precision mode. GroupNorm spreads one group
 * over several blocks: each block computes (count, mean, M2) of its chunk,
 * a second kernel merges the chunks with Chan's formula, a third applies. */
#include "cuda_common.cuh"

#define GN_CHUNK 16384 /* elements per statistics block */
#define GN_MAX_SPLITS 1024

typedef struct {
    double n, mean, m2;
} gn_part;

static int64_t gn_splits(int64_t count) {
    int64_t sp = (count + GN_CHUNK - 1) / GN_CHUNK;
    if (sp < 1) sp = 1;
    if (sp > GN_MAX_SPLITS) sp = GN_MAX_SPLITS;
    return sp;
}

size_t sd_cuda_group_norm_scratch(int64_t N, int groups, int64_t count) {
    int64_t ng = N * groups;
    return (size_t)(ng * gn_splits(count)) * sizeof(gn_part) + (size_t)ng * 2 * sizeof(double);
}

/* grid (ng, splits): partial statistics of one chunk of one group. */
__global__ void gn_partial_k(const float *x, gn_part *part, int64_t count, int64_t chunk) {
    __shared__ double sh[32];
    int64_t t = blockIdx.x, sp = blockIdx.y;
    int64_t lo = sp * chunk, hi = lo + chunk < count ? lo + chunk : count;
    const float *g = x + t * count;
    double sum = 0.0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) sum += g[i];
    double n = hi > lo ? (double)(hi - lo) : 0.0;
    double mean = n > 0 ? sd_block_sum(sum, sh) / n : 0.0;
    double ss = 0.0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        double d = g[i] - mean;
        ss += d * d;
    }
    ss = sd_block_sum(ss, sh);
    if (threadIdx.x == 0) part[t * gridDim.y + sp] = gn_part{n, mean, ss};
}

/* One thread per group: merge the chunks, store mean and 1/std. */
__global__ void gn_merge_k(const gn_part *part, double *stats, int64_t ng, int64_t splits,
                           float eps) {
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= ng) return;
    const gn_part *p = part + t * splits;
    double n = 0.0, mean = 0.0, m2 = 0.0;
    for (int64_t i = 0; i < splits; i++) {
        if (p[i].n == 0.0) continue;
        double nb = p[i].n, tot = n + nb, d = p[i].mean - mean;
        mean += d * nb / tot;
        m2 += p[i].m2 + d * d * n * nb / tot;
        n = tot;
    }
    double var = n > 0 ? m2 / n : 0.0;
    stats[2 * t] = mean;
    stats[2 * t + 1] = 1.0 / sqrt(var + (double)eps);
}

__global__ void gn_apply_k(const float *x, const float *gamma, const float *beta,
                           const double *stats, float *y, int64_t total, int64_t C, int64_t S,
                           int64_t cpg, int groups, int silu) {
    SD_GRID_STRIDE(i, total) {
        int64_t nc = i / S, c = nc % C, n = nc / C;
        int64_t t = n * groups + c / cpg;
        double ga = gamma ? gamma[c] : 1.0;
        /* (x - mean) first, as on the CPU: folding mean into the shift
         * cancels badly when the variance is tiny */
        float scale = (float)(stats[2 * t + 1] * ga), shift = beta ? beta[c] : 0.0f;
        float v = (x[i] - (float)stats[2 * t]) * scale + shift;
        y[i] = silu ? sd_silu(v) : v;
    }
}

cudaError_t sd_cuda_group_norm(cudaStream_t s, const float *x, const float *gamma,
                               const float *beta, float *y, void *scratch, int64_t N, int64_t C,
                               int64_t S, int groups, float eps, int silu) {
    int64_t ng = N * groups, cpg = C / groups, count = cpg * S;
    if (ng == 0 || count == 0) return cudaSuccess;
    int64_t splits = gn_splits(count), chunk = (count + splits - 1) / splits;
    if (ng > 0x7fffffff) return cudaErrorInvalidValue;
    gn_part *part = (gn_part *)scratch;
    double *stats = (double *)(part + ng * splits);
    gn_partial_k<<<dim3((unsigned)ng, (unsigned)splits), SD_THREADS, 0, s>>>(x, part, count,
                                                                              chunk);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    gn_merge_k<<<(unsigned)((ng + 127) / 128), 128, 0, s>>>(part, stats, ng, splits, eps);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    int64_t total = N * C * S;
    gn_apply_k<<<sd_blocks(total), SD_THREADS, 0, s>>>(x, gamma, beta, stats, y, total, C, S, cpg,
                                                       groups, silu);
    return cudaGetLastError();
}

/* ---- LayerNorm: one block per row ---- */

__global__ void layer_norm_k(const float *x, const float *gamma, const float *beta, float *y,
                             int64_t C, float eps) {
    __shared__ double sh[32];
    const float *xr = x + (int64_t)blockIdx.x * C;
    float *yr = y + (int64_t)blockIdx.x * C;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) sum += xr[i];
    double mean = sd_block_sum(sum, sh) / (double)C;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
        double d = xr[i] - mean;
        ss += d * d;
    }
    double rstd = 1.0 / sqrt(sd_block_sum(ss, sh) / (double)C + (double)eps);
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
        float v = (float)((xr[i] - mean) * rstd);
        if (gamma) v *= gamma[i];
        if (beta) v += beta[i];
        yr[i] = v;
    }
}

cudaError_t sd_cuda_layer_norm(cudaStream_t s, const float *x, const float *gamma,
                               const float *beta, float *y, int64_t rows, int64_t C, float eps) {
    if (rows <= 0 || C <= 0) return cudaSuccess;
    if (rows > 0x7fffffff) return cudaErrorInvalidValue;
    layer_norm_k<<<(unsigned)rows, SD_THREADS, 0, s>>>(x, gamma, beta, y, C, eps);
    return cudaGetLastError();
}

/* ---- RMSNorm: one block per row (the CPU's rounding: r and each product
 * rounded to float, unfused) ---- */

__global__ void rms_norm_k(const float *x, const float *gamma, float *y, int64_t C, float eps) {
    __shared__ double sh[32];
    const float *xr = x + (int64_t)blockIdx.x * C;
    float *yr = y + (int64_t)blockIdx.x * C;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) ss += (double)xr[i] * xr[i];
    float ms = (float)(sd_block_sum(ss, sh) / (double)C);
    float r = (float)(1.0 / sqrt((double)__fadd_rn(ms, eps)));
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
        float v = __fmul_rn(xr[i], r);
        yr[i] = gamma ? __fmul_rn(v, gamma[i]) : v;
    }
}

cudaError_t sd_cuda_rms_norm(cudaStream_t s, const float *x, const float *gamma, float *y,
                             int64_t rows, int64_t C, float eps) {
    if (rows <= 0 || C <= 0) return cudaSuccess;
    if (rows > 0x7fffffff) return cudaErrorInvalidValue;
    rms_norm_k<<<(unsigned)rows, SD_THREADS, 0, s>>>(x, gamma, y, C, eps);
    return cudaGetLastError();
}

/* ---- softmax: one block per row ---- */

__global__ void softmax_k(const float *x, float *y, int64_t C) {
    __shared__ double sh[32];
    __shared__ float shf[32];
    const float *xr = x + (int64_t)blockIdx.x * C;
    float *yr = y + (int64_t)blockIdx.x * C;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = sd_block_maxf(m, shf);
    if (m == -INFINITY) { /* every entry masked: zeros, as on the CPU */
        for (int64_t i = threadIdx.x; i < C; i += blockDim.x) yr[i] = 0.0f;
        return;
    }
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
        float e = expf(xr[i] - m);
        yr[i] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sd_block_sum(sum, sh));
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) yr[i] *= inv;
}

cudaError_t sd_cuda_softmax(cudaStream_t s, const float *x, float *y, int64_t rows, int64_t C) {
    if (rows <= 0 || C <= 0) return cudaSuccess;
    if (rows > 0x7fffffff) return cudaErrorInvalidValue;
    softmax_k<<<(unsigned)rows, SD_THREADS, 0, s>>>(x, y, C);
    return cudaGetLastError();
}
