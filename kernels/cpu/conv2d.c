/* conv2d.c - 2-D convolution as im2col + GEMM, and the dispatch of large
 * 3x3 stride-1 convs to Winograd F(4x4, 3x3) (winograd.c, see
 * use_winograd for which).
 *
 * im2col has three shapes of work, all with bounded scratch memory:
 *  - 1x1 stride-1 convs are a plain GEMM on the image (no im2col), the
 *    weight transposed when both channel counts are small (T1X1_MAX);
 *  - small images (< MIN_COLS pixels per thread, im2col <= WHOLE_BUDGET
 *    floats) take one im2col per image and a GEMM split over the pool;
 *    images of fewer than BATCH_COLS pixels go several to one GEMM (their
 *    columns side by side), so the weights are streamed once per group of
 *    images instead of once per image;
 *  - larger images go in tiles of output rows, one tile per pool task with
 *    a per-thread im2col buffer of max(COL_BUDGET, C*kh*kw * MIN_COLS
 *    rounded up to whole rows) floats.
 */
#include "cpu.h"
#include "winograd.h"

#include <stdlib.h>
#include <string.h>

#define COL_BUDGET ((int64_t)1 << 20) /* floats (4 MiB) per thread: near L2 */
#define MIN_COLS 1024
#define WHOLE_BUDGET ((int64_t)8 << 20) /* floats: one whole-image im2col */
/* Images smaller than this many output pixels share a GEMM (up to this many
 * columns in all). At SD1.5's 8x8 level (64 pixels, K = 11520) a GEMM per
 * image reads the 59 MB f32 weight once per image for 128 flops per weight
 * read; two images per GEMM halve that traffic. At 16x16 (256 pixels) the
 * doubled im2col (24 MB) no longer fits the caches and one GEMM of both
 * images was slower (docs/performance.md), so 256 pixels stay alone. */
#define BATCH_COLS 256
#define T1X1_MAX 320 /* 1x1 convs with at most this many channels in and out: transposed A */
/* Winograd crossover (measured, see use_winograd and bench/notes/winograd.md) */
#ifndef WINO_MIN_CH /* -DWINO_MIN_CH=1000000 builds an A/B binary without Winograd */
#define WINO_MIN_CH 32
#endif
#define WINO_MIN_TILES 64 /* 4x4 output tiles over the batch */

typedef struct {
    const float *x, *w, *b;
    float *y;
    int64_t N, C, H, W, O, kh, kw, Ho, Wo;
    int stride, ph, pw;
    int64_t rows;        /* output rows per tile */
    int64_t tiles_per_n; /* tiles per image */
    float **col;         /* per-thread buffers */
    int64_t n0, gn;      /* small images: the group's first image and count */
    float *yg;           /* its GEMM result [O][gn * plane] (gn > 1) */
} conv_job;

/* col[(c*kh+ky)*kw+kx][(oy-r0)*Wo+ox] = x[c][oy*s-ph+ky][ox*s-pw+kx] (0 outside),
 * for channels [c0, c1); np is col's row stride (the tile's pixel count, or
 * more when several images' columns share the rows) */
static void im2col(const conv_job *j, const float *x, int64_t r0, int64_t r1, float *col,
                   int64_t np, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; c++) {
        const float *xc = x + c * j->H * j->W;
        for (int64_t ky = 0; ky < j->kh; ky++)
            for (int64_t kx = 0; kx < j->kw; kx++) {
                float *dst = col + ((c * j->kh + ky) * j->kw + kx) * np;
                for (int64_t oy = r0; oy < r1; oy++) {
                    float *d = dst + (oy - r0) * j->Wo;
                    int64_t iy = oy * j->stride - j->ph + ky;
                    if (iy < 0 || iy >= j->H) {
                        memset(d, 0, (size_t)j->Wo * sizeof *d);
                        continue;
                    }
                    const float *src = xc + iy * j->W;
                    if (j->stride == 1) {
                        /* ix = ox - pw + kx: valid for ox in [lo, hi) */
                        int64_t lo = j->pw - kx, hi = j->W + j->pw - kx;
                        if (lo < 0) lo = 0;
                        if (hi > j->Wo) hi = j->Wo;
                        if (hi < lo) hi = lo;
                        if (lo > 0) memset(d, 0, (size_t)lo * sizeof *d);
                        if (hi > lo) memcpy(d + lo, src + lo - j->pw + kx, (size_t)(hi - lo) * sizeof *d);
                        if (hi < j->Wo) memset(d + hi, 0, (size_t)(j->Wo - hi) * sizeof *d);
                    } else {
                        for (int64_t ox = 0; ox < j->Wo; ox++) {
                            int64_t ix = ox * j->stride - j->pw + kx;
                            d[ox] = ix >= 0 && ix < j->W ? src[ix] : 0.0f;
                        }
                    }
                }
            }
    }
}

static void conv_task(void *ctx, int64_t t, int thread) {
    const conv_job *j = ctx;
    int64_t n = t / j->tiles_per_n, tile = t % j->tiles_per_n;
    int64_t r0 = tile * j->rows, r1 = r0 + j->rows;
    if (r1 > j->Ho) r1 = j->Ho;
    int64_t np = (r1 - r0) * j->Wo, plane = j->Ho * j->Wo;
    int64_t ckk = j->C * j->kh * j->kw;
    float *y = j->y + n * j->O * plane + r0 * j->Wo;
    float beta = 0.0f;
    if (j->b) {
        for (int64_t o = 0; o < j->O; o++)
            for (int64_t p = 0; p < np; p++) y[o * plane + p] = j->b[o];
        beta = 1.0f;
    }
    const float *x = j->x + n * j->C * j->H * j->W;
    im2col(j, x, r0, r1, j->col[thread], np, 0, j->C);
    sd_cpu_gemm1(0, 0, j->O, np, ckk, 1.0f, j->w, ckk, j->col[thread], np, beta, y, plane);
}

/* Whole-image im2col of the group's images j->n0 .. j->n0+gn-1, image i's
 * columns at i*plane of each row, by chunks of 8 channels of one image. */
static void im2col_task(void *ctx, int64_t t, int thread) {
    const conv_job *j = ctx;
    int64_t chunks = (j->C + 7) / 8, i = t / chunks, plane = j->Ho * j->Wo;
    int64_t c0 = t % chunks * 8, c1 = c0 + 8 < j->C ? c0 + 8 : j->C;
    im2col(j, j->x + (j->n0 + i) * j->C * j->H * j->W, 0, j->Ho, j->col[0] + i * plane,
           j->gn * plane, c0, c1);
}

/* Group GEMM result [O][gn*plane] -> y[n0+i][o][:], 8 output channels per task. */
static void scatter_task(void *ctx, int64_t t, int thread) {
    const conv_job *j = ctx;
    int64_t plane = j->Ho * j->Wo, o1 = t * 8 + 8 < j->O ? t * 8 + 8 : j->O;
    for (int64_t o = t * 8; o < o1; o++)
        for (int64_t i = 0; i < j->gn; i++)
            memcpy(j->y + ((j->n0 + i) * j->O + o) * plane, j->yg + (o * j->gn + i) * plane,
                   (size_t)plane * sizeof(float));
}

sd_status sd_cpu_conv2d_im2col(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                               const sd_bt *b, int stride, int pad_h, int pad_w) {
    sd_pool *pool = sd_cpu_pool(be);
    conv_job j = {sd_cpu_f32(x), sd_cpu_f32(w), b ? sd_cpu_f32(b) : NULL, sd_cpu_f32(out),
                  x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0], w->shape[2],
                  w->shape[3], out->shape[2], out->shape[3], stride, pad_h, pad_w, 0, 0, NULL,
                  0, 1, NULL};
    int64_t plane = j.Ho * j.Wo, ckk = j.C * j.kh * j.kw;
    if (sd_bt_numel(out) == 0) return SD_OK;

    if (j.kh == 1 && j.kw == 1 && stride == 1 && pad_h == 0 && pad_w == 0) {
        /* Few channels both ways (SD1.5's 320->320 proj_in/proj_out at 64x64,
         * the VAE's 256->128 shortcut): oneDNN 2.6's sgemm runs the weight
         * as a transposed A 1.3-1.5x faster than as a plain one for these
         * (320 x 2048 x 320: 72-105 against 50 GFLOP per CPU s, one thread,
         * Cascade Lake; docs/performance.md), and slower past ~320 of
         * either. The transpose is at most 400 KiB, made per call. */
        float *wt = NULL;
        if (j.O <= T1X1_MAX && j.C <= T1X1_MAX && plane >= MIN_COLS) {
            wt = sd_cpu_transposed(j.w, j.O, j.C); /* [C][O] */
            if (!wt)
                return sd_backend_fail(be, SD_ERR_NOMEM, "conv2d: out of memory (%zu bytes)",
                                       (size_t)(j.O * j.C) * sizeof(float));
        }
        /* the bias per output channel is filled by the GEMM's tasks (gemm.c) */
        for (int64_t n = 0; n < j.N; n++)
            sd_cpu_gemm_bias(pool, wt != NULL, 0, j.O, plane, j.C, 1.0f, wt ? wt : j.w,
                             wt ? j.O : j.C, j.x + n * j.C * plane, plane, 0.0f,
                             j.y + n * j.O * plane, plane, NULL, j.b);
        free(wt);
        return SD_OK;
    }

    int nt = sd_pool_threads(pool);
    /* Small images (deep UNet levels: 8x8 to 32x32 with up to 1280
     * channels) take one im2col per image and a GEMM split over the pool by
     * output channels: row tiles would each re-pack the large weight matrix
     * for a handful of pixels. */
    if (nt > 1 && ckk * plane <= WHOLE_BUDGET && plane < (int64_t)MIN_COLS * nt) {
        /* images per GEMM: as many as fit BATCH_COLS columns and the budget */
        int64_t g = plane < BATCH_COLS ? BATCH_COLS / plane : 1;
        if (g > j.N) g = j.N;
        while (g > 1 && g * ckk * plane > WHOLE_BUDGET) g--;
        size_t cbytes = (size_t)(ckk * plane * g) * sizeof(float);
        size_t gbytes = g > 1 ? (size_t)(j.O * plane * g) * sizeof(float) : 0;
        float *col = sd_cpu_alloc(cbytes), *yg = g > 1 ? sd_cpu_alloc(gbytes) : NULL;
        if (!col || (g > 1 && !yg)) {
            free(col);
            free(yg);
            return sd_backend_fail(be, SD_ERR_NOMEM, "conv2d: out of memory for im2col (%zu bytes)",
                                   cbytes + gbytes);
        }
        j.col = &col;
        j.yg = yg;
        for (j.n0 = 0; j.n0 < j.N; j.n0 += j.gn) {
            j.gn = j.N - j.n0 < g ? j.N - j.n0 : g;
            int64_t cols = j.gn * plane;
            sd_pool_run(pool, j.gn * ((j.C + 7) / 8), im2col_task, &j);
            /* one image writes its own output; a group goes through yg */
            float *y = j.gn > 1 ? yg : j.y + j.n0 * j.O * plane;
            sd_cpu_gemm_bias(pool, 0, 0, j.O, cols, ckk, 1.0f, j.w, ckk, col, cols, 0.0f, y, cols,
                             NULL, j.b);
            if (j.gn > 1) sd_pool_run(pool, (j.O + 7) / 8, scatter_task, &j);
        }
        free(col);
        free(yg);
        return SD_OK;
    }
    /* At least MIN_COLS output pixels per GEMM even past the budget: each
     * tile re-packs the whole weight matrix, which costs ~1/(2 cols) of the
     * tile's flops in memory traffic. */
    int64_t rows = COL_BUDGET / (ckk * j.Wo > 0 ? ckk * j.Wo : 1);
    int64_t min_rows = (MIN_COLS + j.Wo - 1) / (j.Wo > 0 ? j.Wo : 1);
    if (rows < min_rows) rows = min_rows;
    if (rows < 1) rows = 1;
    if (rows > j.Ho) rows = j.Ho;
    /* enough tiles to keep every thread busy */
    if (nt > 1 && j.N * ((j.Ho + rows - 1) / rows) < nt * 2 && j.Ho > 1) {
        int64_t want = (j.Ho * j.N + 2 * nt - 1) / (2 * nt);
        if (want < 1) want = 1;
        if (want < rows) rows = want;
    }
    j.rows = rows;
    j.tiles_per_n = (j.Ho + rows - 1) / rows;

    size_t bytes = (size_t)(ckk * rows * j.Wo) * sizeof(float);
    float **bufs = calloc((size_t)nt, sizeof *bufs);
    int ok = bufs != NULL;
    for (int i = 0; ok && i < nt; i++) ok = (bufs[i] = sd_cpu_alloc(bytes)) != NULL;
    if (ok) {
        j.col = bufs;
        sd_pool_run(pool, j.N * j.tiles_per_n, conv_task, &j);
    }
    for (int i = 0; bufs && i < nt; i++) free(bufs[i]);
    free(bufs);
    if (!ok)
        return sd_backend_fail(be, SD_ERR_NOMEM, "conv2d: out of memory for im2col (%zu bytes)",
                               bytes);
    return SD_OK;
}

/* Which 3x3 stride-1 convs take Winograd F(4x4, 3x3) (winograd.c).
 * Measured per layer on the 2-core dev VM (CPU-seconds, im2col / Winograd,
 * 2026-11-21, bench/notes/winograd.md): the VAE decoder's convs 1.4-2.3x
 * at 64 px (256 tiles, 512 channels) and 2.4-3.9x at 128-512 px; UNet
 * batch 2 at 64x64 (512 tiles) 2.8-3.2x, 32x32 (128 tiles) 1.7-2.5x, batch
 * 1 at 32x32 (64 tiles) 1.4x; 36 tiles ~0.95x, 32 tiles 1.0-1.2x, 16 tiles
 * 0.65-0.7x, 8x8 batch 2 (8 tiles) 0.45-0.5x. Below ~64
 * tiles the per-call weight transform (36/9 x the weights, written and
 * read back) outweighs the 4x fewer multiplies, so 64 tiles is the
 * crossover. Few channels make the transforms a large share; 32 is a guess
 * on the safe side (SD's convs have >= 128 where Winograd applies). */
static int use_winograd(const sd_bt *x, const sd_bt *w, int stride, int pad_h, int pad_w) {
    int64_t C = x->shape[1], H = x->shape[2], W = x->shape[3], O = w->shape[0];
    if (w->shape[2] != 3 || w->shape[3] != 3 || stride != 1) return 0;
    if (pad_h < 0 || pad_h > 2 || pad_w < 0 || pad_w > 2) return 0;
    if (x->shape[0] * C * H * W >= ((int64_t)1 << 30)) return 0; /* gathers index x with int32 */
    int64_t tiles = x->shape[0] * ((H + 2 * pad_h - 2 + 3) / 4) * ((W + 2 * pad_w - 2 + 3) / 4);
    return C >= WINO_MIN_CH && O >= WINO_MIN_CH && tiles >= WINO_MIN_TILES;
}

sd_status sd_cpu_conv2d(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w, const sd_bt *b,
                        int stride, int pad_h, int pad_w) {
    if (sd_bt_numel(out) > 0 && use_winograd(x, w, stride, pad_h, pad_w)) {
        sd_wino_shape s = {x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0], pad_h,
                           pad_w};
        return sd_cpu_winograd_conv3x3(be, sd_cpu_f32(x), sd_cpu_f32(w), b ? sd_cpu_f32(b) : NULL,
                                       sd_cpu_f32(out), &s, sd_cpu_isa());
    }
    return sd_cpu_conv2d_im2col(be, out, x, w, b, stride, pad_h, pad_w);
}
