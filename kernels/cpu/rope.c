/* rope.c - rotary position embedding (sd_op_rope): each (a, b) pair of a
 * head becomes (a*cos - b*sin, a*sin + b*cos). Pairs are adjacent
 * (interleaved, Flux) or half a head apart (rotate_half, Llama/Qwen). The
 * products are rounded before the sum, as torch computes both forms: every
 * path is compiled without FMA contraction (gnu11's default would fuse one
 * product into the sum), so the AVX2 and AVX-512 paths give the scalar
 * path's bits.
 *
 * The AVX-512 path takes 8 pairs (16 floats) per step on GCC vectors
 * (AVX2 runs the scalar loops as the compiler vectorises them for it):
 * interleaved, x and the (cos,
 * sin) table have the same layout, so cos and sin are the table's even and
 * odd lanes duplicated and b the pair-swapped x; rotate_half reads 16 a and
 * 16 b and splits 32 table floats into cos and sin. */
#include "cpu.h"

#define NOFMA __attribute__((optimize("fp-contract=off")))
#define ALWAYS static inline __attribute__((always_inline))

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

/* Lane shuffles with constant indices: GCC's __builtin_shuffle takes a mask
 * vector, clang (the fuzz and sanitizer builds) only __builtin_shufflevector
 * with the indices as constants; the same shuffle either way. */
#ifdef __clang__
#define SHUF1(v, ...) __builtin_shufflevector((v), (v), __VA_ARGS__)
#define SHUF2(a, b, ...) __builtin_shufflevector((a), (b), __VA_ARGS__)
#else
#define SHUF1(v, ...) __builtin_shuffle((v), (v16i){__VA_ARGS__})
#define SHUF2(a, b, ...) __builtin_shuffle((a), (b), (v16i){__VA_ARGS__})
#endif

/* unaligned 16-float load / store (macros: a function returning a 64-byte
 * vector has an ISA-dependent ABI) */
#define ld(p) ({ v16 v_; __builtin_memcpy(&v_, (p), sizeof v_); v_; })
#define st(p, v) do { v16 v_ = (v); __builtin_memcpy((p), &v_, sizeof v_); } while (0)

/* One head: D floats of x at xh -> yh; cs [D/2][2]. */
ALWAYS void head_body(const float *xh, float *yh, const float *cs, int64_t D, int interleaved,
                      int vec) {
    int64_t half = D / 2, i = 0;
    if (interleaved) {
        if (vec) {
            const v16 sg = {-1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1};
            for (; 2 * i + 16 <= D; i += 8) {
                v16 x = ld(xh + 2 * i), t = ld(cs + 2 * i);
                v16 c = SHUF1(t, 0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14);
                v16 s = SHUF1(t, 1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13, 13, 15, 15);
                v16 p = x * c, q = SHUF1(x, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14) * s;
                st(yh + 2 * i, p + q * sg); /* q * +-1 is exact */
            }
        }
        /* ac + (-b)s, not ac - bs: the same bits (negation is exact), but a
         * (sub, add) pair across adjacent outputs is what GCC 12's -O3
         * vectoriser turns into vfmaddsub, fusing a product into the sum
         * in spite of fp-contract=off (kernels.transformer_ops, Release) */
        for (; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1], a = xh[2 * i], b = xh[2 * i + 1];
            float ac = a * c, nbs = -b * s, as = a * s, bc = b * c;
            yh[2 * i] = ac + nbs;
            yh[2 * i + 1] = as + bc;
        }
        return;
    }
    if (vec) {
        for (; i + 16 <= half; i += 16) {
            v16 t0 = ld(cs + 2 * i), t1 = ld(cs + 2 * i + 16);
            v16 c = SHUF2(t0, t1, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            v16 s = SHUF2(t0, t1, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
            v16 a = ld(xh + i), b = ld(xh + i + half);
            v16 ac = a * c, bs = b * s, as = a * s, bc = b * c;
            st(yh + i, ac - bs);
            st(yh + i + half, as + bc);
        }
    }
    for (; i < half; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1], a = xh[i], b = xh[i + half];
        float ac = a * c, bs = b * s, as = a * s, bc = b * c;
        yh[i] = ac - bs;
        yh[i + half] = as + bc;
    }
}

NOFMA static void heads_scalar(const float *x, float *y, const float *cs, int heads, int64_t D,
                               int inter) {
    for (int h = 0; h < heads; h++) head_body(x + h * D, y + h * D, cs, D, inter, 0);
}
#if defined(__x86_64__) && defined(__GNUC__)
/* AVX2: the scalar loops, vectorised by the compiler (16-lane shuffles on
 * 8-lane registers were 2-3x slower than these, measured in cache) */
NOFMA __attribute__((target("avx2,fma"))) static void heads_avx2(const float *x, float *y,
                                                                const float *cs, int heads,
                                                                int64_t D, int inter) {
    for (int h = 0; h < heads; h++) head_body(x + h * D, y + h * D, cs, D, inter, 0);
}
NOFMA __attribute__((target("avx512f"))) static void heads_avx512(const float *x, float *y,
                                                                 const float *cs, int heads,
                                                                 int64_t D, int inter) {
    for (int h = 0; h < heads; h++) head_body(x + h * D, y + h * D, cs, D, inter, 1);
}
#endif

void sd_cpu_rope_row_isa(const float *x, float *y, const float *cs, int heads, int64_t D,
                         int interleaved, int isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= SD_ISA_AVX512) { heads_avx512(x, y, cs, heads, D, interleaved); return; }
    if (isa >= SD_ISA_AVX2) { heads_avx2(x, y, cs, heads, D, interleaved); return; }
#endif
    (void)isa;
    heads_scalar(x, y, cs, heads, D, interleaved);
}

typedef struct {
    const float *x, *rot;
    float *y;
    int64_t N, L, HD, D, rot_batch; /* rot_batch: floats between batch items (0: shared) */
    int heads, interleaved, isa;
    int64_t rows; /* tokens per task */
} rope_job;

static void rope_task(void *ctx, int64_t t, int thread) {
    const rope_job *j = ctx;
    int64_t r1 = (t + 1) * j->rows < j->N * j->L ? (t + 1) * j->rows : j->N * j->L;
    for (int64_t r = t * j->rows; r < r1; r++) {
        int64_t n = r / j->L, l = r % j->L;
        const float *cs = j->rot + n * j->rot_batch + l * j->D; /* [D/2][2] */
        sd_cpu_rope_row_isa(j->x + r * j->HD, j->y + r * j->HD, cs, j->heads, j->D,
                            j->interleaved, j->isa);
    }
}

sd_status sd_cpu_rope(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *rot, int heads,
                      int interleaved) {
    rope_job j = {sd_cpu_f32(x), sd_cpu_f32(rot), sd_cpu_f32(out), x->shape[0], x->shape[1],
                  x->shape[2], x->shape[2] / heads, 0, heads, interleaved, sd_cpu_isa(), 1};
    if (rot->ndim == 4) j.rot_batch = j.L * j.D;
    if (j.N * j.L * j.HD == 0) return SD_OK;
    /* ~16k floats per task: a Flux token (3072) alone is microseconds */
    j.rows = 1 + 16384 / j.HD;
    sd_pool_run(sd_cpu_pool(be), sd_cpu_chunks(j.N * j.L, j.rows), rope_task, &j);
    return SD_OK;
}
