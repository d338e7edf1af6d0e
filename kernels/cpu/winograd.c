/* winograd.c - 3x3 stride-1 convolution by Winograd F(4x4, 3x3); see
 * winograd.h for the contract.
 *
 * Transforms (Lavin & Gray 2015, interpolation points 0, 1, -1, 2, -2, inf):
 *   U = G g G^T (weights, 3x3 -> 6x6), V = B^T d B (6x6 input tile),
 *   y = A^T (U . V) A (4x4 output tile), the product summed over channels,
 * which is 36 GEMMs M[xi] [O x T] = U[xi] [O x C] x V[xi] [C x T] for a
 * block of T tiles.
 *
 * Layout: every transform works on 16 lanes at once (wv, a GCC vector of
 * 16 floats): 16 tiles for the input and output transforms, 16 input
 * channels for the weight transform. The arithmetic is written once on wv
 * and compiled per instruction set (default, AVX2, AVX-512) by inlining it
 * into target-specific wrappers; only the AVX-512 loads (gathers) and
 * stores (interleaving permutes) use intrinsics. Lane data lives in
 * V [36][C][tp] and M [36][O][tp], tp = lanes rounded up to 16, so the
 * tile index is the GEMM's contiguous N dimension.
 */
#include "winograd.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

#define ALWAYS static inline __attribute__((always_inline))
#define LANES 16
typedef float wv __attribute__((vector_size(64)));

/* Scratch budget for V and M of one block, in floats: 36*(C+O) floats per
 * tile. The block is shared by the pool (the three phases each split it),
 * so U, the largest operand, is streamed once per block rather than once
 * per thread's block. 8M floats (32 MiB) give 448 tiles at C = O = 256 and
 * 224 at 512 (bench/notes/winograd.md has the block-size measurements). */
#define BLOCK_BUDGET ((int64_t)8 << 20)
#define MAX_TILES 1024 /* per block: bounds the per-block lane tables */
/* The transformed weights of one pass over the image, in floats: wider
 * layers go in slices of output channels, each re-transforming the input
 * (256 MiB of U would be 1280x1280 channels). */
#define U_BUDGET ((int64_t)16 << 20)
/* When the whole batch is one block (small images: SD1.5's 32x32 level),
 * the input is transformed once and the output channels go in slices whose
 * U fits this many floats (16 MiB, half this Xeon's L3), each slice's weight
 * transform, 36 GEMMs and output transform in turn: U is read back from the
 * caches instead of memory and its scratch is 16 MiB instead of 59 MB
 * (640 channels). Measured (2 threads, CPU time, loaded VM; docs/
 * performance.md): 1.05-1.15x at 32x32 with 320-640 input channels, even at
 * 1280-1920. Slices narrower than U_SLICE_MIN_OC channels made the GEMMs
 * (M = the slice) slower than what the traffic saved (2560 channels). */
#define U_SLICE_CACHED ((int64_t)4 << 20)
#define U_SLICE_MIN_OC 64

/* ---- the transforms on 16 lanes, written once for every ISA --------------------- */

/* B^T d over p[0], p[s], ..., p[5s], in place. */
ALWAYS void in_1d(wv *p, int s) {
    wv d0 = p[0], d1 = p[s], d2 = p[2 * s], d3 = p[3 * s], d4 = p[4 * s], d5 = p[5 * s];
    wv a = d4 - 4.0f * d2, b = d3 - 4.0f * d1, c = d4 - d2, e = 2.0f * (d3 - d1);
    p[0] = 4.0f * d0 - 5.0f * d2 + d4;
    p[s] = a + b;
    p[2 * s] = a - b;
    p[3 * s] = c + e;
    p[4 * s] = c - e;
    p[5 * s] = 4.0f * d1 - 5.0f * d3 + d5;
}

/* d[r*6+k] (input row r, column k) -> V = B^T d B, same indexing. */
ALWAYS void in_2d(wv d[36]) {
    for (int r = 0; r < 6; r++) in_1d(d + 6 * r, 1);
    for (int k = 0; k < 6; k++) in_1d(d + k, 6);
}

/* G g: 3 values at g[0], g[gs], g[2gs] -> 6 at u[0], u[us], ... */
ALWAYS void w_1d(const wv *g, int gs, wv *u, int us) {
    wv g0 = g[0], g1 = g[gs], g2 = g[2 * gs];
    wv s = g0 + g2, t = g0 * (1.0f / 24) + g2 * (1.0f / 6);
    u[0] = g0 * 0.25f;
    u[us] = (s + g1) * (-1.0f / 6);
    u[2 * us] = (s - g1) * (-1.0f / 6);
    u[3 * us] = t + g1 * (1.0f / 12);
    u[4 * us] = t - g1 * (1.0f / 12);
    u[5 * us] = g2;
}

/* g[ky*3+kx] -> u[r*6+k] = (G g G^T)[r][k]. */
ALWAYS void w_2d(const wv g[9], wv u[36]) {
    wv t[18]; /* G g: 6 rows x 3 columns */
    for (int k = 0; k < 3; k++) w_1d(g + k, 3, t + k, 3);
    for (int r = 0; r < 6; r++) w_1d(t + 3 * r, 1, u + 6 * r, 1);
}

/* A^T m: 6 values at m[0], m[ms], ... -> 4 at o[0], o[os], ... */
ALWAYS void out_1d(const wv *m, int ms, wv *o, int os) {
    wv s12 = m[ms] + m[2 * ms], d12 = m[ms] - m[2 * ms];
    wv s34 = m[3 * ms] + m[4 * ms], d34 = m[3 * ms] - m[4 * ms];
    o[0] = m[0] + s12 + s34;
    o[os] = d12 + 2.0f * d34;
    o[2 * os] = s12 + 4.0f * s34;
    o[3 * os] = d12 + 8.0f * d34 + m[5 * ms];
}

/* m[r*6+k] -> q[i*4+j] = (A^T m A)[i][j] + bias. */
ALWAYS void out_2d(const wv m[36], wv q[16], float bias) {
    wv t[24]; /* A^T m: 4 rows x 6 columns */
    for (int k = 0; k < 6; k++) out_1d(m + k, 6, t + k, 6);
    for (int i = 0; i < 4; i++) out_1d(t + 6 * i, 1, q + 4 * i, 1);
    for (int i = 0; i < 16; i++) q[i] += bias;
}

/* ---- job ------------------------------------------------------------------------------ */

#define MAX_GROUPS (MAX_TILES / LANES)

/* Lane tables of the current block, filled once per block (lanes_fill):
 * where each lane's tile sits, and the masks the AVX-512 loads and stores
 * use. Lanes past the block's last tile are invalid: iy0 = INT32_MIN/2
 * fails every row test, n = -1. */
typedef struct {
    int32_t n[MAX_TILES], ty[MAX_TILES], tx[MAX_TILES];
    int32_t iy0[MAX_TILES], ix0[MAX_TILES]; /* input origin of the tile (may be < 0) */
    int32_t idx[MAX_TILES];                 /* (n*C*H + iy0)*W + ix0: gather base, valid lanes */
    uint16_t rm[MAX_GROUPS][6], cm[MAX_GROUPS][6]; /* lanes whose row iy0+r / column ix0+k is inside */
    uint8_t row_ok[MAX_GROUPS]; /* the valid lanes are consecutive tiles of one tile row */
    uint16_t sm[MAX_GROUPS][4]; /* then: store masks of the group's 64 output columns */
    uint16_t lm[MAX_GROUPS][5]; /* and load masks of its 80 input columns ix0 .. ix0+79 */
} lanes_t;

typedef struct {
    const float *x, *w, *b;
    float *y;
    int64_t N, C, H, W, O, Ho, Wo;
    int ph, pw, isa;
    int64_t tw, tiles;   /* tiles per output row, per image */
    int64_t bt;          /* tiles per block (a multiple of 16, <= MAX_TILES) */
    int64_t o0, oc;      /* output channels of this pass */
    int64_t t0, T, tp;   /* this block: global tiles t0 .. t0+T-1 (over the batch), lanes tp */
    int64_t cchunk, ochunk; /* channels per task of the input / output phase */
    float *U;            /* [36][oc][C] for channels o0 .. o0+oc-1 */
    float *V, *M;        /* V [36][C][tp], M [36][oc][tp] (row stride tp) */
    lanes_t *ln;
} wjob;

static void lanes_fill(const wjob *j, lanes_t *ln) {
    int64_t T = j->T;
    for (int64_t l = 0; l < j->tp; l++) {
        if (l < T) {
            int64_t t = j->t0 + l, n = t / j->tiles, ti = t % j->tiles;
            int64_t ty = ti / j->tw, tx = ti % j->tw;
            ln->n[l] = (int32_t)n;
            ln->ty[l] = (int32_t)ty;
            ln->tx[l] = (int32_t)tx;
            ln->iy0[l] = (int32_t)(4 * ty - j->ph);
            ln->ix0[l] = (int32_t)(4 * tx - j->pw);
            ln->idx[l] = (int32_t)((n * j->C * j->H + 4 * ty - j->ph) * j->W + 4 * tx - j->pw);
        } else {
            ln->n[l] = ln->ty[l] = ln->tx[l] = -1;
            ln->iy0[l] = INT32_MIN / 2;
            ln->ix0[l] = 0;
            ln->idx[l] = 0;
        }
    }
    for (int64_t g = 0; g < j->tp / LANES; g++) {
        int64_t g0 = g * LANES;
        for (int r = 0; r < 6; r++) ln->rm[g][r] = ln->cm[g][r] = 0;
        for (int l = 0; l < LANES; l++)
            for (int r = 0; r < 6; r++) {
                int64_t iy = (int64_t)ln->iy0[g0 + l] + r, ix = (int64_t)ln->ix0[g0 + l] + r;
                if (iy >= 0 && iy < j->H) ln->rm[g][r] |= (uint16_t)(1u << l);
                if (ix >= 0 && ix < j->W) ln->cm[g][r] |= (uint16_t)(1u << l);
            }
        int64_t nv = T - g0 < LANES ? T - g0 : LANES;
        ln->row_ok[g] = nv > 0 && ln->n[g0 + nv - 1] == ln->n[g0] && ln->ty[g0 + nv - 1] == ln->ty[g0];
        if (!ln->row_ok[g]) continue;
        /* columns 4*tx0 + p, p < 64, valid below both the lane count and Wo */
        int64_t lim = 4 * nv, room = j->Wo - 4 * (int64_t)ln->tx[g0];
        if (room < lim) lim = room;
        for (int v = 0; v < 4; v++) {
            int64_t k = lim - 16 * v;
            ln->sm[g][v] = k >= 16 ? 0xffff : k <= 0 ? 0 : (uint16_t)((1u << k) - 1);
        }
        for (int v = 0; v < 5; v++) {
            ln->lm[g][v] = 0;
            for (int e = 0; e < 16; e++) {
                int64_t ix = (int64_t)ln->ix0[g0] + 16 * v + e;
                if (ix >= 0 && ix < j->W) ln->lm[g][v] |= (uint16_t)(1u << e);
            }
        }
    }
}

/* ---- weight transform: U[xi][o - o0][c], 16 input channels per step -------------- */

ALWAYS void weights_body(const wjob *j, int64_t o) {
    int64_t C = j->C;
    for (int64_t c0 = 0; c0 < C; c0 += LANES) {
        int n = C - c0 < LANES ? (int)(C - c0) : LANES;
        wv g[9], u[36];
        for (int k = 0; k < 9; k++) g[k] = (wv){0};
        const float *src = j->w + (o * C + c0) * 9;
        for (int l = 0; l < n; l++)
            for (int k = 0; k < 9; k++) g[k][l] = src[l * 9 + k];
        w_2d(g, u);
        float *dst = j->U + (o - j->o0) * C + c0;
        /* A full group's copy has a constant size, which the compiler turns
         * into one vector store: with n variable each of the 36 was a call
         * to memmove, 4% of a batch-1 f32 step's samples (perf, Cascade
         * Lake; docs/performance.md). */
        if (n == LANES)
            for (int xi = 0; xi < 36; xi++) memcpy(dst + xi * j->oc * C, &u[xi], sizeof(wv));
        else
            for (int xi = 0; xi < 36; xi++) memcpy(dst + xi * j->oc * C, &u[xi], (size_t)n * sizeof(float));
    }
}

static void weights_gen(const wjob *j, int64_t o) { weights_body(j, o); }
#ifdef HAVE_X86
__attribute__((target("avx2,fma"))) static void weights_avx2(const wjob *j, int64_t o) {
    weights_body(j, o);
}
__attribute__((target("avx512f"))) static void weights_avx512(const wjob *j, int64_t o) {
    weights_body(j, o);
}
#endif

static void weights_task(void *ctx, int64_t t, int thread) {
    const wjob *j = ctx;
    int64_t o1 = j->o0 + (t + 1) * 8 < j->o0 + j->oc ? j->o0 + (t + 1) * 8 : j->o0 + j->oc;
    for (int64_t o = j->o0 + t * 8; o < o1; o++) {
#ifdef HAVE_X86
        if (j->isa == SD_ISA_AVX512) { weights_avx512(j, o); continue; }
        if (j->isa == SD_ISA_AVX2) { weights_avx2(j, o); continue; }
#endif
        weights_gen(j, o);
    }
}

/* ---- input transform of the block: V[xi][c][lane], channels [c0, c1) --------------- */

/* Portable loads: one lane at a time, zero outside the image. */
ALWAYS void input_body(const wjob *j, int64_t c0, int64_t c1) {
    const lanes_t *ln = j->ln;
    int64_t H = j->H, W = j->W, tp = j->tp;
    for (int64_t c = c0; c < c1; c++) {
        for (int64_t g0 = 0; g0 < tp; g0 += LANES) {
            wv d[36];
            for (int i = 0; i < 36; i++) d[i] = (wv){0};
            for (int l = 0; l < LANES; l++) {
                if (ln->n[g0 + l] < 0) continue;
                const float *xc = j->x + (ln->n[g0 + l] * j->C + c) * H * W;
                int64_t iy0 = ln->iy0[g0 + l], ix0 = ln->ix0[g0 + l];
                for (int r = 0; r < 6; r++) {
                    int64_t iy = iy0 + r;
                    if (iy < 0 || iy >= H) continue;
                    for (int k = 0; k < 6; k++) {
                        int64_t ix = ix0 + k;
                        if (ix >= 0 && ix < W) d[r * 6 + k][l] = xc[iy * W + ix];
                    }
                }
            }
            in_2d(d);
            for (int xi = 0; xi < 36; xi++) *(wv *)(j->V + (xi * j->C + c) * tp + g0) = d[xi];
        }
    }
}

static void input_gen(const wjob *j, int64_t c0, int64_t c1) { input_body(j, c0, c1); }

#ifdef HAVE_X86
__attribute__((target("avx2,fma"))) static void input_avx2(const wjob *j, int64_t c0, int64_t c1) {
    input_body(j, c0, c1);
}

/* AVX-512. A group whose tiles are consecutive in one tile row reads each
 * of its 6 input rows as 80 consecutive floats (masked loads: zero padding
 * outside the image) and splits them into the 6 columns of the 16 tiles
 * (column k of tile l is float 4l+k) with 10 permutes; that is ~3x cheaper
 * than 36 gathers. Other groups gather lane by lane with masks. */
__attribute__((target("avx512f"))) static void input_avx512(const wjob *j, int64_t c0, int64_t c1) {
    const lanes_t *ln = j->ln;
    int64_t H = j->H, W = j->W, tp = j->tp, ng = tp / LANES;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i sh4 = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
    const __m512i sh5 = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17);
    for (int64_t c = c0; c < c1; c++) {
        const float *xc = j->x + c * H * W; /* lanes add their image's offset */
        for (int64_t g = 0; g < ng; g++) {
            wv d[36];
            if (ln->row_ok[g]) {
                int64_t g0 = g * LANES;
                /* may point before x by up to pad_w floats: those are masked */
                const float *src = xc + (int64_t)ln->idx[g0];
                for (int r = 0; r < 6; r++) {
                    if (!(ln->rm[g][r] & 1)) {
                        for (int k = 0; k < 6; k++) d[r * 6 + k] = (wv){0};
                        continue;
                    }
                    const float *p = src + r * W;
                    __m512 v0 = _mm512_maskz_loadu_ps(ln->lm[g][0], p);
                    __m512 v1 = _mm512_maskz_loadu_ps(ln->lm[g][1], p + 16);
                    __m512 v2 = _mm512_maskz_loadu_ps(ln->lm[g][2], p + 32);
                    __m512 v3 = _mm512_maskz_loadu_ps(ln->lm[g][3], p + 48);
                    __m512 v4 = _mm512_maskz_loadu_ps(ln->lm[g][4], p + 64);
                    __m512 a0 = _mm512_permutex2var_ps(v0, ev, v1), a1 = _mm512_permutex2var_ps(v0, od, v1);
                    __m512 b0 = _mm512_permutex2var_ps(v2, ev, v3), b1 = _mm512_permutex2var_ps(v2, od, v3);
                    __m512 k0 = _mm512_permutex2var_ps(a0, ev, b0), k1 = _mm512_permutex2var_ps(a1, ev, b1);
                    d[r * 6 + 0] = (wv)k0;
                    d[r * 6 + 1] = (wv)k1;
                    d[r * 6 + 2] = (wv)_mm512_permutex2var_ps(a0, od, b0);
                    d[r * 6 + 3] = (wv)_mm512_permutex2var_ps(a1, od, b1);
                    d[r * 6 + 4] = (wv)_mm512_permutex2var_ps(k0, sh4, v4);
                    d[r * 6 + 5] = (wv)_mm512_permutex2var_ps(k1, sh5, v4);
                }
            } else {
                __m512i base = _mm512_loadu_si512(ln->idx + g * LANES);
                for (int r = 0; r < 6; r++) {
                    __m512i ir = _mm512_add_epi32(base, _mm512_set1_epi32((int32_t)(r * W)));
                    for (int k = 0; k < 6; k++) {
                        __m512i ik = _mm512_add_epi32(ir, _mm512_set1_epi32(k));
                        d[r * 6 + k] = (wv)_mm512_mask_i32gather_ps(
                            _mm512_setzero_ps(), (__mmask16)(ln->rm[g][r] & ln->cm[g][k]), ik, xc, 4);
                    }
                }
            }
            in_2d(d);
            for (int xi = 0; xi < 36; xi++)
                _mm512_store_ps(j->V + (xi * j->C + c) * tp + g * LANES, (__m512)d[xi]);
        }
    }
}
#endif

static void input_task(void *ctx, int64_t t, int thread) {
    const wjob *j = ctx;
    int64_t c0 = t * j->cchunk, c1 = c0 + j->cchunk < j->C ? c0 + j->cchunk : j->C;
#ifdef HAVE_X86
    if (j->isa == SD_ISA_AVX512) { input_avx512(j, c0, c1); return; }
    if (j->isa == SD_ISA_AVX2) { input_avx2(j, c0, c1); return; }
#endif
    input_gen(j, c0, c1);
}

/* ---- the 36 GEMMs: M[xi] = U[xi] V[xi] ----------------------------------------------- */

static void gemm_task(void *ctx, int64_t xi, int thread) {
    const wjob *j = ctx;
    float *M = j->M + xi * j->oc * j->tp;
    sd_cpu_gemm1(0, 0, j->oc, j->T, j->C, 1.0f, j->U + xi * j->oc * j->C, j->C,
                 j->V + xi * j->C * j->tp, j->tp, 0.0f, M, j->tp);
    /* lanes past the last tile are transformed (and dropped): keep them defined */
    if (j->T < j->tp)
        for (int64_t o = 0; o < j->oc; o++) memset(M + o * j->tp + j->T, 0, (size_t)(j->tp - j->T) * sizeof(float));
}

/* ---- output transform of the block: y from M, output channels [o0, o1) of the pass -- */

/* One lane's 4x4 tile into y, clipped at the image's edges. */
ALWAYS void store_lane(const wjob *j, int64_t lane, const wv q[16], int l, int64_t o) {
    const lanes_t *ln = j->ln;
    float *yo = j->y + (ln->n[lane] * j->O + j->o0 + o) * j->Ho * j->Wo;
    int64_t oy0 = 4 * (int64_t)ln->ty[lane], ox0 = 4 * (int64_t)ln->tx[lane];
    for (int i = 0; i < 4 && oy0 + i < j->Ho; i++)
        for (int k = 0; k < 4 && ox0 + k < j->Wo; k++) yo[(oy0 + i) * j->Wo + ox0 + k] = q[i * 4 + k][l];
}

ALWAYS void output_body(const wjob *j, int64_t o0, int64_t o1) {
    int64_t tp = j->tp, T = j->T;
    for (int64_t o = o0; o < o1; o++) {
        float bias = j->b ? j->b[j->o0 + o] : 0.0f;
        for (int64_t g0 = 0; g0 < T; g0 += LANES) {
            wv m[36], q[16];
            for (int xi = 0; xi < 36; xi++) m[xi] = *(const wv *)(j->M + (xi * j->oc + o) * tp + g0);
            out_2d(m, q, bias);
            for (int l = 0; l < LANES && g0 + l < T; l++) store_lane(j, g0 + l, q, l, o);
        }
    }
}

static void output_gen(const wjob *j, int64_t o0, int64_t o1) { output_body(j, o0, o1); }

#ifdef HAVE_X86
__attribute__((target("avx2,fma"))) static void output_avx2(const wjob *j, int64_t o0, int64_t o1) {
    output_body(j, o0, o1);
}

/* AVX-512: when a group's valid lanes are consecutive tiles of one tile row
 * (always so when the row has a multiple of 16 tiles), each output row of
 * the 16 tiles is 64 consecutive floats: interleave the four column vectors
 * with permutes and store with a mask for the image's right edge. Other
 * groups store lane by lane. */
__attribute__((target("avx512f"))) static void output_avx512(const wjob *j, int64_t o0, int64_t o1) {
    const lanes_t *ln = j->ln;
    int64_t tp = j->tp, T = j->T, plane = j->Ho * j->Wo, ng = (T + LANES - 1) / LANES;
    const __m512i lo01 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi01 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30,
                                           15, 31);
    const __m512i q0 = _mm512_setr_epi32(0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
    const __m512i q1 = _mm512_setr_epi32(8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30,
                                         31);
    for (int64_t o = o0; o < o1; o++) {
        float bias = j->b ? j->b[j->o0 + o] : 0.0f;
        for (int64_t g = 0; g < ng; g++) {
            int64_t g0 = g * LANES;
            wv m[36], q[16];
            for (int xi = 0; xi < 36; xi++) m[xi] = *(const wv *)(j->M + (xi * j->oc + o) * tp + g0);
            out_2d(m, q, bias);
            if (!ln->row_ok[g]) {
                for (int l = 0; l < LANES && g0 + l < T; l++) store_lane(j, g0 + l, q, l, o);
                continue;
            }
            int64_t oy0 = 4 * (int64_t)ln->ty[g0];
            float *dst = j->y + (ln->n[g0] * j->O + j->o0 + o) * plane + 4 * (int64_t)ln->tx[g0];
            for (int i = 0; i < 4 && oy0 + i < j->Ho; i++) {
                __m512 k0 = (__m512)q[4 * i], k1 = (__m512)q[4 * i + 1];
                __m512 k2 = (__m512)q[4 * i + 2], k3 = (__m512)q[4 * i + 3];
                __m512 plo = _mm512_permutex2var_ps(k0, lo01, k1), phi = _mm512_permutex2var_ps(k0, hi01, k1);
                __m512 qlo = _mm512_permutex2var_ps(k2, lo01, k3), qhi = _mm512_permutex2var_ps(k2, hi01, k3);
                float *row = dst + (oy0 + i) * j->Wo;
                _mm512_mask_storeu_ps(row, ln->sm[g][0], _mm512_permutex2var_ps(plo, q0, qlo));
                _mm512_mask_storeu_ps(row + 16, ln->sm[g][1], _mm512_permutex2var_ps(plo, q1, qlo));
                _mm512_mask_storeu_ps(row + 32, ln->sm[g][2], _mm512_permutex2var_ps(phi, q0, qhi));
                _mm512_mask_storeu_ps(row + 48, ln->sm[g][3], _mm512_permutex2var_ps(phi, q1, qhi));
            }
        }
    }
}
#endif

static void output_task(void *ctx, int64_t t, int thread) {
    const wjob *j = ctx;
    int64_t o0 = t * j->ochunk, o1 = o0 + j->ochunk < j->oc ? o0 + j->ochunk : j->oc;
#ifdef HAVE_X86
    if (j->isa == SD_ISA_AVX512) { output_avx512(j, o0, o1); return; }
    if (j->isa == SD_ISA_AVX2) { output_avx2(j, o0, o1); return; }
#endif
    output_gen(j, o0, o1);
}

/* ---- entry ---------------------------------------------------------------------------- */

/* Channels per task: about 4 tasks per thread, at least 1. */
static int64_t chunk_of(int64_t n, int nt) {
    int64_t c = (n + 4 * nt - 1) / (4 * nt);
    return c < 1 ? 1 : c;
}

sd_status sd_cpu_winograd_conv3x3(sd_backend *be, const float *x, const float *w, const float *b,
                                  float *y, const sd_wino_shape *s, int isa) {
    sd_pool *pool = sd_cpu_pool(be);
    int nt = sd_pool_threads(pool);
    wjob j = {.x = x, .w = w, .b = b, .y = y, .N = s->N, .C = s->C, .H = s->H, .W = s->W,
              .O = s->O, .ph = s->pad_h, .pw = s->pad_w, .isa = isa};
    j.Ho = j.H + 2 * j.ph - 2;
    j.Wo = j.W + 2 * j.pw - 2;
    if (j.N <= 0 || j.O <= 0 || j.Ho <= 0 || j.Wo <= 0) return SD_OK;
    j.tw = (j.Wo + 3) / 4;
    j.tiles = (j.Ho + 3) / 4 * j.tw;
    int64_t C1 = j.C > 0 ? j.C : 1;

    /* output-channel slices bounded by U_BUDGET, of equal size */
    int64_t slices = (j.O * 36 * C1 + U_BUDGET - 1) / U_BUDGET;
    if (slices < 1) slices = 1;
    if (slices > j.O) slices = j.O;
    int64_t oc_max = (j.O + slices - 1) / slices;

    /* tiles per block (over the whole batch): the scratch budget */
    int64_t total = j.N * j.tiles;
    int64_t bt = BLOCK_BUDGET / (36 * (C1 + oc_max));
    if (bt > MAX_TILES) bt = MAX_TILES;
    /* one block: cache-sized slices of output channels (U_SLICE_CACHED),
     * multiples of 16, which only shrinks M and so keeps one block */
    int one_block = total <= bt;
    if (one_block) {
        int64_t oc = U_SLICE_CACHED / (36 * C1) / 16 * 16;
        if (oc < U_SLICE_MIN_OC) oc = U_SLICE_MIN_OC;
        if (oc < oc_max) oc_max = oc;
    }
    if (bt > total) bt = total;
    /* equal blocks rather than a full ones and a small rest */
    int64_t nblocks = (total + bt - 1) / bt;
    bt = (total + nblocks - 1) / nblocks;
    bt = (bt + LANES - 1) / LANES * LANES;
    if (bt > MAX_TILES) bt = MAX_TILES;
    j.bt = bt;
    j.cchunk = chunk_of(j.C, nt);

    size_t vbytes = (size_t)(36 * C1 * bt) * sizeof(float);
    size_t mbytes = (size_t)(36 * oc_max * bt) * sizeof(float);
    size_t ubytes = (size_t)(36 * oc_max * C1) * sizeof(float);
    float *U = sd_cpu_alloc(ubytes), *V = sd_cpu_alloc(vbytes), *M = sd_cpu_alloc(mbytes);
    lanes_t *ln = malloc(sizeof *ln);
    int ok = U && V && M && ln;
    if (ok) {
        j.U = U;
        j.V = V;
        j.M = M;
        j.ln = ln;
        if (one_block) { /* the input transform, once for every slice */
            j.t0 = 0;
            j.T = total;
            j.tp = (j.T + LANES - 1) / LANES * LANES;
            lanes_fill(&j, ln);
            sd_pool_run(pool, (j.C + j.cchunk - 1) / j.cchunk, input_task, &j);
        }
        for (j.o0 = 0; j.o0 < j.O; j.o0 += oc_max) {
            j.oc = j.O - j.o0 < oc_max ? j.O - j.o0 : oc_max;
            j.ochunk = chunk_of(j.oc, nt);
            sd_pool_run(pool, (j.oc + 7) / 8, weights_task, &j);
            for (j.t0 = 0; j.t0 < total; j.t0 += bt) {
                j.T = total - j.t0 < bt ? total - j.t0 : bt;
                j.tp = (j.T + LANES - 1) / LANES * LANES;
                if (!one_block) {
                    lanes_fill(&j, ln);
                    sd_pool_run(pool, (j.C + j.cchunk - 1) / j.cchunk, input_task, &j);
                }
                sd_pool_run(pool, 36, gemm_task, &j);
                sd_pool_run(pool, (j.oc + j.ochunk - 1) / j.ochunk, output_task, &j);
            }
        }
    }
    free(U);
    free(V);
    free(M);
    free(ln);
    if (!ok)
        return sd_backend_fail(be, SD_ERR_NOMEM,
                               "conv2d (winograd): out of memory for %zu bytes of scratch",
                               ubytes + vbytes + mbytes + sizeof *ln);
    return SD_OK;
}
