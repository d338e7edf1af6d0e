/* rope.c - rotary position embedding (sd_op_rope): each (a, b) pair of a
 * head becomes (a*cos - b*sin, a*sin + b*cos). Pairs are adjacent
 * (interleaved, Flux) or half a head apart (rotate_half, Llama/Qwen). The
 * products are rounded before the sum, as torch computes both forms. */
#include "cpu.h"

typedef struct {
    const float *x, *rot;
    float *y;
    int64_t N, L, HD, D, rot_batch; /* rot_batch: floats between batch items (0: shared) */
    int heads, interleaved;
} rope_job;

static void rope_task(void *ctx, int64_t t, int thread) {
    const rope_job *j = ctx;
    int64_t n = t / j->L, l = t % j->L, half = j->D / 2;
    const float *x = j->x + t * j->HD;
    float *y = j->y + t * j->HD;
    const float *cs = j->rot + n * j->rot_batch + l * j->D; /* [D/2][2] */
    int64_t step = j->interleaved ? 2 : 1, other = j->interleaved ? 1 : half;
    for (int h = 0; h < j->heads; h++) {
        const float *xh = x + h * j->D;
        float *yh = y + h * j->D;
        for (int64_t i = 0; i < half; i++) {
            int64_t ia = i * step, ib = ia + other;
            float c = cs[2 * i], s = cs[2 * i + 1], a = xh[ia], b = xh[ib];
            float ac = a * c, bs = b * s, as = a * s, bc = b * c;
            yh[ia] = ac - bs;
            yh[ib] = as + bc;
        }
    }
}

sd_status sd_cpu_rope(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *rot, int heads,
                      int interleaved) {
    rope_job j = {sd_cpu_f32(x), sd_cpu_f32(rot), sd_cpu_f32(out), x->shape[0], x->shape[1],
                  x->shape[2], x->shape[2] / heads, 0, heads, interleaved};
    if (rot->ndim == 4) j.rot_batch = j.L * j.D;
    if (j.N * j.L * j.HD == 0) return SD_OK;
    sd_pool_run(sd_cpu_pool(be), j.N * j.L, rope_task, &j);
    return SD_OK;
}
