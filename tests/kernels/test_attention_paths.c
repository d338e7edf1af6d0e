/* test_attention_paths.c - the CPU attention kernel on every instruction-set
 * path this CPU runs (sd_cpu_attention_isa: the fused kernel of
 * attn_fused.c on AVX-512 and AVX2, the GEMM kernel on the scalar path),
 * against a double-precision reference, at the head widths the model
 * families use (SD 40/80/160, CLIP 64, Flux 128) and odd ones, sequence
 * lengths around the kernel's query/key blocks and row groups, one token,
 * batches, causal, additive bias with -inf entries, grouped-query heads,
 * the fused kernel's pack groups (one or several (batch, k/v head) pairs,
 * more or fewer than the threads); on 1 and 2 threads. Tolerance as test_ops' attention: atol 2e-6 sqrt(D) +
 * 2e-6, rtol 1e-5. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/backend_impl.h"
#include "kernels/cpu/cpu.h"
#include "testutil.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* xorshift64*, uniform in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / (double)(1ull << 52) - 1.0;
}

static sd_bt *rnd(sd_backend *be, int ndim, const int64_t *shape, float **host, double amp) {
    sd_tensor *t = sd_tensor_new(SD_F32, ndim, shape);
    float *p = t->data;
    int64_t n = sd_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(urand() * amp);
    *host = malloc((size_t)(n ? n : 1) * sizeof(float));
    memcpy(*host, p, (size_t)n * sizeof(float));
    sd_bt *b = sd_bt_from_host(be, t, SD_F32);
    sd_tensor_unref(t);
    return b;
}

typedef struct {
    int N, Lq, Lk, H, Hkv, D, causal;
    int bias; /* 0 none; 1 a [N, H, Lq, Lk] bias with every 5th key and query row 2 -inf */
} acase;

static void one(sd_backend *be, const acase *c, int isa) {
    int64_t HD = (int64_t)c->H * c->D, KD = (int64_t)c->Hkv * c->D;
    int64_t qs[3] = {c->N, c->Lq, HD}, ks[3] = {c->N, c->Lk, KD};
    int64_t bs[4] = {c->N, c->H, c->Lq, c->Lk};
    float *q, *k, *v, *b = NULL;
    sd_bt *Q = rnd(be, 3, qs, &q, 2.0), *K = rnd(be, 3, ks, &k, 2.0), *V = rnd(be, 3, ks, &v, 1);
    sd_bt *B = NULL;
    if (c->bias) {
        sd_tensor *t = sd_tensor_new(SD_F32, 4, bs);
        float *p = t->data;
        int64_t n = sd_tensor_numel(t);
        b = malloc((size_t)n * sizeof *b);
        for (int64_t i = 0; i < n; i++) {
            int64_t j = i % c->Lk, row = (i / c->Lk) % c->Lq;
            p[i] = b[i] = j % 5 == 3 || row == 2 ? -INFINITY : (float)(urand() * 2.0);
        }
        B = sd_bt_from_host(be, t, SD_F32);
        sd_tensor_unref(t);
    }
    sd_bt *O = sd_bt_new(be, SD_F32, 3, qs);
    double scale = 1.0 / sqrt((double)c->D);
    sd_attn_args a = {c->H, c->Hkv, c->causal, (float)scale, B, {0, 0, 0}};
    if (B) {
        a.bias_stride[2] = c->Lk;
        a.bias_stride[1] = (int64_t)c->Lq * c->Lk;
        a.bias_stride[0] = (int64_t)c->H * c->Lq * c->Lk;
    }
    CHECK(Q && K && V && O && (!c->bias || B));
    sd_status st = O ? sd_cpu_attention_isa(be, O, Q, K, V, &a, isa) : SD_ERR_NOMEM;
    CHECK_MSG(st == SD_OK, "attention isa %d: status %d", isa, (int)st);

    int64_t nout = (int64_t)c->N * c->Lq * HD;
    double *ref = calloc((size_t)nout, sizeof *ref), *s = calloc((size_t)c->Lk, sizeof *s);
    int group = c->H / c->Hkv;
    for (int n = 0; n < c->N; n++)
        for (int h = 0; h < c->H; h++)
            for (int i = 0; i < c->Lq; i++) {
                int kh = h / group, lim = c->causal ? (i + 1 < c->Lk ? i + 1 : c->Lk) : c->Lk;
                double mx = -INFINITY, se = 0;
                for (int j = 0; j < lim; j++) {
                    double d = 0;
                    for (int e = 0; e < c->D; e++)
                        d += (double)q[((int64_t)n * c->Lq + i) * HD + h * c->D + e] *
                             k[((int64_t)n * c->Lk + j) * KD + kh * c->D + e];
                    s[j] = d * scale;
                    if (b) s[j] += b[(((int64_t)n * c->H + h) * c->Lq + i) * c->Lk + j];
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j < lim; j++) se += (s[j] = mx == -INFINITY ? 0 : exp(s[j] - mx));
                for (int e = 0; e < c->D; e++) {
                    double o = 0;
                    for (int j = 0; j < lim && se > 0; j++)
                        o += s[j] / se * v[((int64_t)n * c->Lk + j) * KD + kh * c->D + e];
                    ref[((int64_t)n * c->Lq + i) * HD + h * c->D + e] = o;
                }
            }
    if (st == SD_OK) {
        sd_tensor *h = sd_bt_to_host(O);
        const float *p = h->data;
        double atol = 2e-6 * sqrt((double)c->D) + 2e-6, worst = 0;
        int64_t bad = 0, wi = 0;
        for (int64_t i = 0; i < nout; i++) {
            double d = fabs(p[i] - ref[i]);
            if (!(d <= atol + 1e-5 * fabs(ref[i]))) bad++;
            if (!(d <= worst)) worst = d, wi = i;
        }
        CHECK_MSG(bad == 0,
                  "attention isa %d N%d Lq%d Lk%d H%d/%d D%d causal%d bias%d: %lld of %lld off, "
                  "worst %.3g at %lld (got %.8g want %.8g)",
                  isa, c->N, c->Lq, c->Lk, c->H, c->Hkv, c->D, c->causal, c->bias,
                  (long long)bad, (long long)nout, worst, (long long)wi, p[wi], ref[wi]);
        sd_tensor_unref(h);
    }
    sd_bt_free(O), sd_bt_free(Q), sd_bt_free(K), sd_bt_free(V), sd_bt_free(B);
    free(q), free(k), free(v), free(b), free(ref), free(s);
}

int main(void) {
    static const acase cases[] = {
        /* SD1.5 head widths: self-attention across key blocks, cross-attention on 77 */
        {2, 300, 300, 2, 2, 40, 0, 0},
        {1, 37, 77, 3, 3, 40, 0, 0},
        {1, 130, 600, 1, 1, 80, 0, 0},
        {1, 29, 77, 1, 1, 160, 0, 0},
        /* CLIP (causal, 64), Flux (128) */
        {2, 77, 77, 2, 2, 64, 1, 0},
        {1, 70, 530, 1, 1, 128, 0, 0},
        /* odd widths and lengths, one token, one key */
        {1, 45, 301, 2, 2, 24, 0, 0},
        {1, 263, 263, 1, 1, 72, 1, 0},
        {2, 1, 1, 2, 2, 40, 0, 0},
        {1, 1, 50, 1, 1, 1, 0, 0},
        {1, 13, 1, 1, 1, 17, 0, 0},
        /* bias with masked keys and a fully masked row; with causal; grouped-query heads */
        {2, 25, 280, 2, 2, 40, 0, 1},
        {1, 30, 30, 2, 2, 64, 1, 1},
        {1, 40, 40, 8, 2, 32, 1, 0},
        {2, 17, 300, 6, 3, 72, 0, 1},
        /* the fused kernel's pack groups (pairs of batch and k/v head packed
         * together: at least 4 query tasks per thread, evened out). 12 pairs
         * of one task: 3 groups of 4 on one thread (crossing the batch), 2
         * of 6 on two */
        {2, 20, 50, 6, 6, 40, 0, 0},
        /* 9 grouped-query pairs of 2 tasks: 2+2+2+2+1 on one thread (groups
         * crossing batches), 3 x 3 on two; with bias, with causal */
        {3, 17, 40, 6, 3, 24, 0, 1},
        {3, 19, 19, 6, 3, 40, 1, 0},
        /* 5 tasks a pair (1030 rows): one pair a group on one thread, 2 + 2
         * on two */
        {2, 1030, 90, 2, 2, 40, 0, 0},
        /* a single pair of 10 tasks (GQA), fewer pairs than threads */
        {1, 1100, 70, 2, 1, 64, 1, 0},
    };
    for (int threads = 1; threads <= 2; threads++) {
        sd_backend *be = NULL;
        sd_error err;
        CHECK_OK(sd_backend_new("cpu", threads, &be, &err), &err);
        if (!be) break;
        for (int isa = SD_ISA_SCALAR; isa <= sd_cpu_isa(); isa++)
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) one(be, &cases[i], isa);
        CHECK(sd_backend_error(be) == NULL);
        sd_backend_free(be);
    }
    return sd_test_finish();
}
