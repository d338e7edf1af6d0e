/* unet_tome.c - token merging on the self-attention's queries
 * (comfy_extras/nodes_tomesd.py, TomePatchModel: tomesd's
 * bipartite_soft_matching_random2d as an attn1_patch / attn1_output_patch
 * pair).
 *
 * Where a transformer block's input has the UNet input's H * W tokens
 * (get_functions' downsample 1), r = int(N * ratio) of them are merged
 * before the queries are projected (the keys and values keep every token),
 * and the attention's output (after to_out) is spread back:
 *   - the tokens form a grid of h x w (the UNet input's); in each 2x2 cell
 *     (the top-left hsy x wsx cells) one token, picked by
 *     torch.randint(4, (hsy, wsx, 1)) on torch's default generator (one
 *     u32 % 4 per cell, row-major), is a destination, the rest sources;
 *   - cosine similarity of each source to each destination; a source's best
 *     destination is the first with the highest score; the r sources with
 *     the highest best scores (a stable descending order) are merged into
 *     theirs by scatter_reduce mean (the destination plus its sources in
 *     that order, summed in float32, divided by the count), the others kept;
 *   - merged = [kept sources, destinations]; after the attention each token
 *     reads back its row (a merged source its destination's).
 * torch orders the destinations and sources by an unstable argsort of the
 * -1 / 0 mask and sorts the best scores unstably; the result does not depend
 * on those orders (each query's attention row is computed on its own and
 * every token is put back by index) except through exact ties of scores,
 * where sdflow takes the lowest token index. The scores are computed in
 * double here and in float32 BLAS in torch: sources whose best scores lie
 * within rounding of each other at the r-th place, or destinations tied for
 * a source, could be chosen differently (the golden generator records the
 * smallest such margin of its cases).
 *
 * The merge and unmerge run on the host (n downloaded, the merged queries
 * uploaded in n's dtype; the output likewise), as FreeU's filter does. */
#include "models/unet/unet_internal.h"
#include "models/sampling/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

void sd_unet_tome_release(unet_tome *t) {
    if (!t) return;
    free(t->a_idx);
    free(t->b_idx);
    free(t->unm_idx);
    free(t->src_idx);
    free(t->dst_idx);
    memset(t, 0, sizeof *t);
}

/* ratio's merge count at this block: 0 when get_functions / the matching
 * do nothing (no draw), else r; sets the grid. */
static int64_t tome_count(const unet_block_at *at, double ratio, int64_t N, int64_t *h, int64_t *w) {
    int64_t orig = at->orig_h * at->orig_w;
    if (N <= 0 || orig <= 0) return 0;
    double ds = ceil(sqrt((double)(orig / N))); /* int(math.ceil(math.sqrt(orig // N))) */
    if (ds > 1.0 || ds < 1.0) return 0;         /* ds 0 (more tokens than pixels) cannot occur */
    *h = at->orig_h;
    *w = at->orig_w;
    int64_t r = (int64_t)((double)N * ratio); /* int(x.shape[1] * ratio) */
    if (r <= 0 || *w == 1 || *h == 1) return 0;
    return r;
}

typedef struct score_ix {
    double v;
    int64_t i;
} score_ix;

/* descending by score, ties by index (a stable order) */
static int by_score_desc(const void *pa, const void *pb) {
    const score_ix *a = pa, *b = pb;
    if (a->v > b->v) return -1;
    if (a->v < b->v) return 1;
    return (a->i > b->i) - (a->i < b->i);
}

sd_status sd_unet_tome_merge(const unet_block_at *at, double ratio, sd_bt *n, unet_tome *t, sd_bt **merged) {
    memset(t, 0, sizeof *t);
    *merged = NULL;
    const int64_t B = n->shape[0], N = n->shape[1], C = n->shape[2];
    int64_t h = 0, w = 0;
    int64_t r = tome_count(at, ratio, N, &h, &w);
    if (!r) return SD_OK;
    if (h * w != N)
        return sd_error_set(at->err, SD_ERR_INVALID, "ToMe: %lld tokens are not the %lldx%lld grid", (long long)N,
                            (long long)h, (long long)w);
    if (!at->rng)
        return sd_error_set(at->err, SD_ERR_UNSUPPORTED,
                            "ToMe draws its destinations from the sampler's generator; this model call has none");
    const int64_t hsy = h / 2, wsx = w / 2, nd = hsy * wsx, na = N - nd;
    if (r > na) r = na;
    char *is_dst = calloc((size_t)N, 1);
    t->a_idx = malloc((size_t)na * sizeof *t->a_idx);
    t->b_idx = malloc((size_t)(nd ? nd : 1) * sizeof *t->b_idx);
    t->unm_idx = malloc((size_t)B * (size_t)(na - r ? na - r : 1) * sizeof *t->unm_idx);
    t->src_idx = malloc((size_t)B * (size_t)r * sizeof *t->src_idx);
    t->dst_idx = malloc((size_t)B * (size_t)r * sizeof *t->dst_idx);
    score_ix *best = malloc((size_t)na * sizeof *best);
    int64_t *best_ix = malloc((size_t)na * sizeof *best_ix);
    float *mnorm = malloc((size_t)N * (size_t)C * sizeof *mnorm);
    sd_tensor *hx = sd_bt_to_host(n), *hm = NULL;
    sd_status rc = SD_OK;
    if (!is_dst || !t->a_idx || !t->b_idx || !t->unm_idx || !t->src_idx || !t->dst_idx || !best || !best_ix ||
        !mnorm || !hx) {
        rc = sd_error_set(at->err, SD_ERR_NOMEM, "out of memory (ToMe)");
        goto done;
    }
    /* rand_idx = torch.randint(sy * sx, size=(hsy, wsx, 1)): cell (i, j)'s
     * destination sits at (2i + k / 2, 2j + k % 2) */
    for (int64_t i = 0; i < hsy; i++)
        for (int64_t j = 0; j < wsx; j++) {
            uint32_t k = sd_rng_next_u32(at->rng) % 4u;
            is_dst[(2 * i + k / 2) * w + 2 * j + k % 2] = 1;
        }
    for (int64_t p = 0, ia = 0, ib = 0; p < N; p++) {
        if (is_dst[p]) t->b_idx[ib++] = p;
        else t->a_idx[ia++] = p;
    }
    t->B = B, t->N = N, t->C = C, t->r = r, t->na = na, t->nd = nd;
    const int64_t M = N - r, unm = na - r;
    int64_t mshape[3] = {B, M, C};
    if (!(hm = sd_tensor_new(SD_F32, 3, mshape))) {
        rc = sd_error_set(at->err, SD_ERR_NOMEM, "out of memory (ToMe)");
        goto done;
    }
    for (int64_t b = 0; b < B; b++) {
        const float *x = (const float *)hx->data + b * N * C;
        /* metric / metric.norm(dim=-1, keepdim=True) */
        for (int64_t p = 0; p < N; p++) {
            double s = 0.0;
            for (int64_t c = 0; c < C; c++) s += (double)x[p * C + c] * (double)x[p * C + c];
            float nrm = (float)sqrt(s);
            for (int64_t c = 0; c < C; c++) mnorm[p * C + c] = x[p * C + c] / nrm;
        }
        /* scores.max(dim=-1): each source's first best destination */
        for (int64_t i = 0; i < na; i++) {
            const float *ma = mnorm + t->a_idx[i] * C;
            double bv = -INFINITY;
            int64_t bj = 0;
            for (int64_t j = 0; j < nd; j++) {
                const float *mb = mnorm + t->b_idx[j] * C;
                double s = 0.0;
                for (int64_t c = 0; c < C; c++) s += (double)ma[c] * (double)mb[c];
                if (s > bv || j == 0) bv = s, bj = j;
            }
            best[i] = (score_ix){bv, i};
            best_ix[i] = bj;
        }
        qsort(best, (size_t)na, sizeof *best, by_score_desc);
        int64_t *ui = t->unm_idx + b * unm, *si = t->src_idx + b * r, *di = t->dst_idx + b * r;
        for (int64_t k = 0; k < r; k++) si[k] = best[k].i, di[k] = best_ix[best[k].i];
        for (int64_t k = 0; k < unm; k++) ui[k] = best[r + k].i;
        /* merge: [kept sources, destinations with their sources' mean] */
        float *o = (float *)hm->data + b * M * C;
        for (int64_t k = 0; k < unm; k++) memcpy(o + k * C, x + t->a_idx[ui[k]] * C, (size_t)C * sizeof *o);
        float *dst = o + unm * C;
        for (int64_t j = 0; j < nd; j++) memcpy(dst + j * C, x + t->b_idx[j] * C, (size_t)C * sizeof *o);
        float *cnt = (float *)mnorm; /* the metric is no longer needed: nd counts */
        for (int64_t j = 0; j < nd; j++) cnt[j] = 1.0f;
        for (int64_t k = 0; k < r; k++) {
            const float *s = x + t->a_idx[si[k]] * C;
            float *d = dst + di[k] * C;
            for (int64_t c = 0; c < C; c++) d[c] = d[c] + s[c];
            cnt[di[k]] += 1.0f;
        }
        for (int64_t j = 0; j < nd; j++)
            for (int64_t c = 0; c < C; c++) dst[j * C + c] = dst[j * C + c] / cnt[j];
    }
    *merged = sd_bt_from_host(n->be, hm, n->dtype);
    if (!*merged) {
        rc = sd_backend_take_error(n->be, at->err);
        if (!rc) rc = sd_error_set(at->err, SD_ERR_NOMEM, "out of memory (ToMe)");
    }
    t->active = *merged != NULL;
done:
    free(is_dst);
    free(best);
    free(best_ix);
    free(mnorm);
    sd_tensor_unref(hx);
    sd_tensor_unref(hm);
    if (rc) sd_unet_tome_release(t);
    return rc;
}

sd_bt *sd_unet_tome_unmerge(const unet_tome *t, sd_bt *o, sd_error *err) {
    const int64_t B = t->B, N = t->N, C = t->C, r = t->r, unm = t->na - t->r, M = N - r;
    if (o->ndim != 3 || o->shape[0] != B || o->shape[1] != M || o->shape[2] != C) {
        sd_error_set(err, SD_ERR_INVALID, "ToMe: the attention's output is not [%lld, %lld, %lld]", (long long)B,
                     (long long)M, (long long)C);
        return NULL;
    }
    int64_t shape[3] = {B, N, C};
    sd_tensor *ho = sd_bt_to_host(o), *hu = sd_tensor_new(SD_F32, 3, shape);
    sd_bt *out = NULL;
    if (!ho || !hu) {
        sd_error_set(err, SD_ERR_NOMEM, "out of memory (ToMe)");
        goto done;
    }
    for (int64_t b = 0; b < B; b++) {
        const float *x = (const float *)ho->data + b * M * C;
        float *y = (float *)hu->data + b * N * C;
        const int64_t *ui = t->unm_idx + b * unm, *si = t->src_idx + b * r, *di = t->dst_idx + b * r;
        for (int64_t j = 0; j < t->nd; j++) memcpy(y + t->b_idx[j] * C, x + (unm + j) * C, (size_t)C * sizeof *y);
        for (int64_t k = 0; k < unm; k++) memcpy(y + t->a_idx[ui[k]] * C, x + k * C, (size_t)C * sizeof *y);
        for (int64_t k = 0; k < r; k++)
            memcpy(y + t->a_idx[si[k]] * C, x + (unm + di[k]) * C, (size_t)C * sizeof *y);
    }
    out = sd_bt_from_host(o->be, hu, o->dtype);
    if (!out && !sd_backend_take_error(o->be, err)) sd_error_set(err, SD_ERR_NOMEM, "out of memory (ToMe)");
done:
    sd_tensor_unref(ho);
    sd_tensor_unref(hu);
    return out;
}
