/* unet_blocks.c - forward of the UNet's ResBlock and SpatialTransformer,
 * in the operation order of ComfyUI's openaimodel / attention modules.
 *
 * Every function borrows its inputs and returns a new tensor, or NULL once
 * an op failed (the backend's sticky error says why). Intermediates are
 * freed as soon as they are dead. */
#include "models/unet/unet_internal.h"
#include "models/sampling/rng.h" /* HyperTile's draws */
#include "models/unet/hypernet.h"

#include <math.h>
#include <string.h>

#include <math.h>

/* Replace *h by next (freeing the old value); 0 when next is NULL. */
static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

/* An owned copy of x with another shape (x is not freed). */
static sd_bt *reshaped(sd_bt *x, int ndim, const int64_t *shape) {
    sd_bt *v = sd_bt_view(x, ndim, shape);
    if (!v) return NULL;
    sd_bt *c = sd_op_copy(v);
    sd_bt_free(v);
    return c;
}

/* x: [N, Cin, H, W], emb_silu: [N, E] (SiLU already applied: emb_layers[0])
 * -> [N, Cout, H, W] = skip(x) + out_layers(in_layers(x) + emb_layers(emb)). */
sd_bt *sd_unet_res_forward(const unet_res *r, sd_bt *x, sd_bt *emb_silu) {
    sd_bt *h = NULL, *e = NULL, *s = NULL, *out = NULL;
    h = sd_op_group_norm(x, 32, r->in_norm_w, r->in_norm_b, 1e-5f, 1);
    if (!h || !step(&h, sd_op_conv2d(h, r->in_conv_w, r->in_conv_b, 1, 1, 1))) goto done;
    if (!(e = sd_op_linear(emb_silu, r->emb_w, r->emb_b))) goto done; /* [N, Cout] */
    if (!step(&h, sd_op_add_channel(h, e))) goto done;
    sd_bt_free(e);
    e = NULL;
    /* out_layers: GroupNorm, SiLU, Dropout (identity at inference), conv */
    if (!step(&h, sd_op_group_norm(h, 32, r->out_norm_w, r->out_norm_b, 1e-5f, 1))) goto done;
    if (!step(&h, sd_op_conv2d(h, r->out_conv_w, r->out_conv_b, 1, 1, 1))) goto done;
    if (r->skip_w) {
        if (!(s = sd_op_conv2d(x, r->skip_w, r->skip_b, 1, 0, 0))) goto done;
        out = sd_op_add(s, h);
    } else {
        out = sd_op_add(x, h);
    }
done:
    sd_bt_free(h);
    sd_bt_free(e);
    sd_bt_free(s);
    return out;
}

/* x: [N, L, C] normalized input; kin, vin: [N, Lk, Ckv] the inputs of
 * to_k and to_v (the same tensor unless a k/v patch changed them)
 * -> [N, L, C] (to_out applied). */
static sd_bt *attention(const unet_attn *a, sd_bt *x, sd_bt *kin, sd_bt *vin, int heads) {
    sd_bt *q = sd_op_linear(x, a->q, NULL);
    sd_bt *k = q ? sd_op_linear(kin, a->k, NULL) : NULL;
    sd_bt *v = k ? sd_op_linear(vin, a->v, NULL) : NULL;
    sd_bt *o = v ? sd_op_attention(q, k, v, heads, 0) : NULL;
    sd_bt_free(q);
    sd_bt_free(k);
    sd_bt_free(v);
    if (o) step(&o, sd_op_linear(o, a->out_w, a->out_b));
    return o;
}

/* An owned [N*heads, L, D] copy of rows [r0, r0 + n) of x: [N, L, heads*D]. */
static sd_bt *heads_first(sd_bt *x, int64_t r0, int64_t n, int heads) {
    const int64_t L = x->shape[1], D = x->shape[2] / heads;
    const int64_t split[4] = {n, L, heads, D}, flat[3] = {n * heads, L, D};
    const int perm[4] = {0, 2, 1, 3};
    sd_bt *s = sd_op_slice(x, 0, r0, r0 + n), *v = s ? sd_bt_view(s, 4, split) : NULL;
    sd_bt *p = v ? sd_op_permute(v, perm) : NULL;
    sd_bt_free(v);
    sd_bt_free(s);
    if (p) step(&p, reshaped(p, 3, flat));
    return p;
}

/* SAG's record (SD_UNET_PATCH_ATTN1_RECORD): the probabilities
 * softmax(q k^T * D^-0.5) of the recorded rows, reduced on the host to
 * rec->mass. 0 when an op failed (the backend's sticky error says why). */
static int record_mass(sd_bt *q, sd_bt *k, int heads, sd_unet_attn_record *rec) {
    const int64_t n = rec->n_items, L = q->shape[1], D = q->shape[2] / heads;
    if (rec->item0 < 0 || rec->item0 + n > q->shape[0]) {
        rec->failed = 1;
        return 1;
    }
    sd_bt *qh = heads_first(q, rec->item0, n, heads), *kh = qh ? heads_first(k, rec->item0, n, heads) : NULL;
    sd_bt *p = kh ? sd_op_matmul(qh, kh, 1, (float)pow((double)D, -0.5)) : NULL;
    sd_bt_free(qh);
    sd_bt_free(kh);
    if (p) step(&p, sd_op_softmax(p)); /* [n * heads, L(query), L(key)] */
    if (!p) return 0;
    sd_tensor *h = sd_bt_to_host(p), *mass = sd_tensor_new4(SD_F32, 2, n, L, 0, 0);
    sd_bt_free(p);
    if (!h || !mass) {
        sd_tensor_unref(h);
        sd_tensor_unref(mass);
        rec->failed = 1;
        return 1;
    }
    const float *pv = h->data;
    float *mv = mass->data;
    for (int64_t b = 0; b < n; b++)
        for (int64_t j = 0; j < L; j++) {
            double s = 0.0;
            for (int64_t hd = 0; hd < heads; hd++)
                for (int64_t i = 0; i < L; i++) s += pv[((b * heads + hd) * L + i) * L + j];
            mv[b * L + j] = (float)(s / (double)heads);
        }
    sd_tensor_unref(h);
    sd_tensor_unref(rec->mass);
    rec->mass = mass;
    return 1;
}

/* attn1 under a replace patch: the patch computes the attention from the
 * projections (of x, kin, vin: see attention), to_out follows.
 * ATTN1_IDENTITY returns v (to_q / to_k are computed by ComfyUI and unused:
 * left out); ATTN1_RECORD is the usual attention, recording into rec when
 * there is one. */
static sd_bt *attention_replaced(const unet_attn *a, const sd_unet_patch *pt, sd_bt *x, sd_bt *kin, sd_bt *vin,
                                 int heads, sd_unet_attn_record *rec) {
    if (pt->kind == SD_UNET_PATCH_ATTN1_RECORD) {
        if (!rec || rec->n_items <= 0) return attention(a, x, kin, vin, heads);
        sd_bt *q = sd_op_linear(x, a->q, NULL);
        sd_bt *k = q ? sd_op_linear(kin, a->k, NULL) : NULL;
        sd_bt *v = k ? sd_op_linear(vin, a->v, NULL) : NULL;
        sd_bt *o = v && record_mass(q, k, heads, rec) ? sd_op_attention(q, k, v, heads, 0) : NULL;
        sd_bt_free(q);
        sd_bt_free(k);
        sd_bt_free(v);
        if (o) step(&o, sd_op_linear(o, a->out_w, a->out_b));
        return o;
    }
    sd_bt *o = sd_op_linear(vin, a->v, NULL);
    if (o) step(&o, sd_op_linear(o, a->out_w, a->out_b));
    return o;
}

/* ---- HyperTile (comfy_extras/nodes_hypertile.py) ---------------------------------- */

/* One HyperTile's split of the queries: nh x nw tiles of a sequence read as
 * an h x w grid (h rows of w tokens). */
typedef struct ht_split {
    int64_t nh, nw, h, w;
} ht_split;

/* random_divisor(value, min_value, max_options): value // d for the first
 * max_options divisors d >= min(min_value, value), one picked by
 * torch.randint(0, count - 1) (u32 % (count - 1): the last is never
 * picked) when there are at least two, with no draw otherwise. 0 when a
 * draw is needed and there is no generator. */
static int64_t random_divisor(struct sd_rng *rng, int64_t value, int64_t min_value, int64_t max_options) {
    if (min_value > value) min_value = value;
    int64_t count = 0;
    for (int64_t i = min_value; i <= value && count < max_options; i++)
        if (value % i == 0) count++;
    int64_t idx = 0;
    if (count - 1 > 0) {
        if (!rng) return 0;
        idx = (int64_t)(sd_rng_next_u32(rng) % (uint32_t)(count - 1));
    }
    for (int64_t i = min_value, k = 0; i <= value; i++)
        if (value % i == 0 && k++ == idx) return value / i;
    return 1;
}

/* hypertile_in on a self-attention input of `tokens` tokens: the split it
 * chooses (nh * nw > 1) or none (*split zeroed). Draws as ComfyUI's does
 * whenever the token count is one of the listed levels. */
static sd_status hypertile_choose(const sd_unet_patch *pt, const unet_block_at *at, int64_t tokens, ht_split *split) {
    memset(split, 0, sizeof *split);
    const int64_t lts = (int64_t)pt->p[0], swap = (int64_t)pt->p[1];
    const int max_depth = (int)pt->p[2], scale_depth = pt->p[3] != 0.0;
    /* apply_to: (H / 2^i) * (W / 2^i) in Python floats; the first match */
    int depth = -1;
    for (int i = 0; i <= max_depth && depth < 0; i++) {
        double d = ldexp(1.0, i);
        if (((double)at->orig_h / d) * ((double)at->orig_w / d) == (double)tokens) depth = i;
    }
    if (depth < 0) return SD_OK;
    /* aspect_ratio = W / H; h, w = round(sqrt(hw * ar)), round(sqrt(hw / ar)) */
    double ar = (double)at->orig_w / (double)at->orig_h;
    int64_t h = (int64_t)nearbyint(sqrt((double)tokens * ar)), w = (int64_t)nearbyint(sqrt((double)tokens / ar));
    int64_t factor = scale_depth ? (int64_t)1 << depth : 1;
    if (h < 1 || w < 1)
        return sd_error_set(at->err, SD_ERR_INVALID, "HyperTile: a %lld-token attention makes a %lldx%lld grid",
                            (long long)tokens, (long long)h, (long long)w);
    int64_t nh = random_divisor(at->rng, h, lts * factor, swap);
    int64_t nw = nh ? random_divisor(at->rng, w, lts * factor, swap) : 0;
    if (!nh || !nw)
        return sd_error_set(at->err, SD_ERR_UNSUPPORTED,
                            "HyperTile draws its tiles from the sampler's generator; this model call has none");
    if (nh * nw <= 1) return SD_OK;
    /* einops' rearrange "b (nh h nw w) c" needs the grid to hold the tokens */
    if (h * w != tokens)
        return sd_error_set(at->err, SD_ERR_INVALID,
                            "HyperTile: %lld tokens do not fill a %lldx%lld grid (ComfyUI's rearrange fails too)",
                            (long long)tokens, (long long)h, (long long)w);
    *split = (ht_split){nh, nw, h, w};
    return SD_OK;
}

/* [B, nh*h'*nw*w', C] -> [B*nh*nw, h'*w', C] ("b (nh h nw w) c -> (b nh nw)
 * (h w) c") when forward, the inverse when not. */
static sd_bt *hypertile_rearrange(sd_bt *x, const ht_split *s, int forward) {
    const int64_t hh = s->h / s->nh, ww = s->w / s->nw, C = x->shape[2];
    const int64_t B = forward ? x->shape[0] : x->shape[0] / (s->nh * s->nw);
    const int perm[4] = {0, 2, 1, 3};
    int64_t a[4] = {B * s->nh, hh, s->nw, ww * C}, b[4] = {B * s->nh, s->nw, hh, ww * C};
    int64_t out[3] = {forward ? B * s->nh * s->nw : B, forward ? hh * ww : s->h * s->w, C};
    sd_bt *v = sd_bt_view(x, 4, forward ? a : b);
    if (!v) return NULL;
    sd_bt *p = sd_op_permute(v, perm);
    sd_bt_free(v);
    if (!p) return NULL;
    sd_bt *r = reshaped(p, 3, out);
    sd_bt_free(p);
    return r;
}

/* attn1 with the HyperTile patches of the block on n [B, L, C] (borrowed):
 * *done = 0 when none of them split the queries (the caller computes the
 * plain attention or the replace patch). Otherwise the queries go to tiles,
 * the keys and values of the untiled input are read with the tiled batch
 * (the attention's view by q's batch: tile t of an item meets the t-th run
 * of L / T consecutive tokens, as in ComfyUI) and the output is put back
 * before to_out (a per-token linear: the same as after it). */
static sd_bt *attention_hypertile(const unet_attn *a, sd_bt *n, sd_bt *kin, sd_bt *vin, int heads,
                                  const sd_unet_patch *rep, const unet_block_at *at, int *done) {
    *done = 0;
    ht_split split = {0, 0, 0, 0};
    int n_split = 0;
    for (int i = 0; i < at->ps->n; i++) {
        const sd_unet_patch *pt = &at->ps->list[i];
        if (pt->kind != SD_UNET_PATCH_HYPERTILE) continue;
        ht_split s;
        /* a later HyperTile sees the queries as the earlier one left them */
        int64_t tokens = n_split ? (split.h / split.nh) * (split.w / split.nw) : n->shape[1];
        if (hypertile_choose(pt, at, tokens, &s)) {
            *done = 1;
            return NULL;
        }
        if (s.nh) {
            split = s;
            n_split++;
        }
    }
    if (!n_split) return NULL;
    *done = 1;
    if (n_split > 1) {
        sd_error_set(at->err, SD_ERR_UNSUPPORTED,
                     "two HyperTile patches split the same attention (ComfyUI's output rearrange fails there)");
        return NULL;
    }
    if (rep) {
        sd_error_set(at->err, SD_ERR_UNSUPPORTED,
                     "HyperTile and PerturbedAttentionGuidance on the same self-attention are not supported");
        return NULL;
    }
    const int64_t T = split.nh * split.nw;
    sd_bt *q = sd_op_linear(n, a->q, NULL), *k = NULL, *v = NULL, *o = NULL;
    if (q) step(&q, hypertile_rearrange(q, &split, 1));
    if (q) k = sd_op_linear(kin, a->k, NULL);
    if (k) v = sd_op_linear(vin, a->v, NULL);
    if (v) {
        int64_t kv[3] = {q->shape[0], k->shape[1] / T, k->shape[2]};
        sd_bt *kt = sd_bt_view(k, 3, kv), *vt = sd_bt_view(v, 3, kv);
        if (kt && vt) o = sd_op_attention(q, kt, vt, heads, 0);
        sd_bt_free(kt);
        sd_bt_free(vt);
    }
    sd_bt_free(q);
    sd_bt_free(k);
    sd_bt_free(v);
    if (o) step(&o, hypertile_rearrange(o, &split, 0));
    if (o) step(&o, sd_op_linear(o, a->out_w, a->out_b));
    return o;
}

/* The k/v patches (SD_UNET_AT_ATTN_KV: hypernetworks) in list order on an
 * attention's key and value inputs, both x (borrowed) to begin with:
 * *k / *v are new tensors where a patch changed them, else NULL (the
 * caller reads x). 0 when an op failed (the backend's error says why). */
static int kv_patch(const unet_block_at *at, sd_bt *x, sd_bt **k, sd_bt **v) {
    *k = *v = NULL;
    for (int i = 0; at && at->ps && i < at->ps->n; i++) {
        const sd_unet_patch *pt = &at->ps->list[i];
        if (pt->kind != SD_UNET_PATCH_HYPERNET) continue;
        sd_bt *nk, *nv;
        if (!sd_hypernet_apply(pt->hn, 0, *k ? *k : x, pt->p[0], &nk)) return 0;
        if (!sd_hypernet_apply(pt->hn, 1, *v ? *v : x, pt->p[0], &nv)) {
            sd_bt_free(nk);
            return 0;
        }
        if (nk) step(k, nk);
        if (nv) step(v, nv);
    }
    return 1;
}

static int has_attn1_patch(const unet_block_at *at) {
    for (int i = 0; at && at->ps && i < at->ps->n; i++)
        if (sd_unet_patch_point(at->ps->list[i].kind) == SD_UNET_AT_ATTN1_PATCH) return 1;
    return 0;
}

/* The block's patch of `kind` (the first), or NULL; *count: how many. */
static const sd_unet_patch *find_patch(const unet_block_at *at, sd_unet_patch_kind kind, int *count) {
    const sd_unet_patch *first = NULL;
    *count = 0;
    for (int i = 0; at && at->ps && i < at->ps->n; i++)
        if (at->ps->list[i].kind == kind) {
            if (!first) first = &at->ps->list[i];
            ++*count;
        }
    return first;
}

/* attn1 under ToMe (SD_UNET_PATCH_TOME) on n [B, L, C] (borrowed; kin, vin:
 * the key and value inputs, a hypernetwork's or n): *done = 0 when it
 * merges nothing here (the caller computes attn1 as usual). Otherwise the
 * merged queries attend to every token's keys and values and the output
 * (to_out applied) is spread back. ToMe only reads and merges the queries'
 * input, so it commutes with the hypernetwork's key/value patch. */
static sd_bt *attention_tome(const unet_attn *a, sd_bt *n, sd_bt *kin, sd_bt *vin, int heads,
                             const sd_unet_patch *rep, const unet_block_at *at, int *done) {
    int n_tome = 0, n_ht = 0;
    const sd_unet_patch *pt = find_patch(at, SD_UNET_PATCH_TOME, &n_tome);
    *done = 0;
    if (!pt) return NULL;
    (void)find_patch(at, SD_UNET_PATCH_HYPERTILE, &n_ht);
    unet_tome tm;
    sd_bt *q = NULL, *o = NULL;
    if (sd_unet_tome_merge(at, pt->p[0], n, &tm, &q)) {
        *done = 1;
        return NULL;
    }
    if (!tm.active) return NULL;
    *done = 1;
    /* ComfyUI chains attn1 patches (each sees the queries the last left)
     * and unmerges in the same order: not followed here */
    if (n_tome > 1 || n_ht || rep)
        sd_error_set(at->err, SD_ERR_UNSUPPORTED, "ToMe with %s on the same self-attention is not supported",
                     n_tome > 1 ? "another ToMe" : n_ht ? "HyperTile" : "an attn1 replace patch (PAG, SAG)");
    else if ((o = attention(a, q, kin, vin, heads)))
        step(&o, sd_unet_tome_unmerge(&tm, o, at->err));
    sd_bt_free(q);
    sd_unet_tome_release(&tm);
    return o;
}

/* BasicTransformerBlock on h: [N, L, C] (borrowed) -> new [N, L, C]:
 * h += attn1(norm1 h); h += attn2(norm2 h, context); h += ff(norm3 h).
 * rep: attn1's replace patch or NULL; at: where the block sits (its attn1
 * patches), NULL = none. */
static sd_bt *tblock_forward(const unet_tblock *b, sd_bt *h_in, sd_bt *context, int heads,
                             const sd_unet_patch *rep, const unet_block_at *at) {
    sd_bt *h = NULL, *n = NULL, *a = NULL, *k = NULL, *v = NULL;
    int done = 0;
    if (!(n = sd_op_layer_norm(h_in, b->norm1_w, b->norm1_b, 1e-5f))) goto fail;
    if (!kv_patch(at, n, &k, &v)) goto fail;
    if (has_attn1_patch(at)) a = attention_tome(&b->attn1, n, k ? k : n, v ? v : n, heads, rep, at, &done);
    if (!done && has_attn1_patch(at))
        a = attention_hypertile(&b->attn1, n, k ? k : n, v ? v : n, heads, rep, at, &done);
    if (done && !a) goto fail;
    if (!done && !(a = rep ? attention_replaced(&b->attn1, rep, n, k ? k : n, v ? v : n, heads, at ? at->rec : NULL)
                           : attention(&b->attn1, n, k ? k : n, v ? v : n, heads)))
        goto fail;
    step(&k, NULL), step(&v, NULL);
    if (!(h = sd_op_add(a, h_in))) goto fail;
    if (at && at->mid) { /* middle_patch (GLIGEN) */
        sd_bt *p = NULL;
        if (at->mid->fn(at->mid->ud, at->tindex ? *at->tindex : 0, h, &p, at->err)) goto fail;
        step(&h, p);
        if (!h) goto fail;
    }
    if (!step(&n, sd_op_layer_norm(h, b->norm2_w, b->norm2_b, 1e-5f))) goto fail;
    if (!kv_patch(at, context, &k, &v)) goto fail;
    if (!step(&a, attention(&b->attn2, n, k ? k : context, v ? v : context, heads))) goto fail;
    step(&k, NULL), step(&v, NULL);
    if (!step(&h, sd_op_add(a, h))) goto fail;
    /* FeedForward: GEGLU (Linear to 2F, a * gelu(gate)), Linear back to C */
    if (!step(&n, sd_op_layer_norm(h, b->norm3_w, b->norm3_b, 1e-5f))) goto fail;
    if (!step(&a, sd_op_linear(n, b->ff_in_w, b->ff_in_b))) goto fail;
    if (!step(&a, sd_op_geglu(a))) goto fail;
    if (!step(&a, sd_op_linear(a, b->ff_out_w, b->ff_out_b))) goto fail;
    if (!step(&h, sd_op_add(a, h))) goto fail;
    sd_bt_free(n);
    sd_bt_free(a);
    return h;
fail:
    sd_bt_free(n);
    sd_bt_free(a);
    sd_bt_free(h);
    sd_bt_free(k);
    sd_bt_free(v);
    return NULL;
}

/* x: [N, C, H, W], context: [N, L, D] -> [N, C, H, W]. */
sd_bt *sd_unet_st_forward(const unet_st *s, sd_bt *x, sd_bt *context, const unet_block_at *at) {
    int64_t n = x->shape[0], c = x->shape[1], hh = x->shape[2], ww = x->shape[3];
    int64_t seq[3] = {n, hh * ww, c}, img[4] = {n, hh, ww, c};
    const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
    sd_bt *h = sd_op_group_norm(x, 32, s->norm_w, s->norm_b, 1e-6f, 0), *p = NULL, *out = NULL;
    if (!h) return NULL;
    if (!s->linear && !step(&h, sd_op_conv2d(h, s->proj_in_w, s->proj_in_b, 1, 0, 0))) goto done;
    /* [N, C, H, W] -> [N, H*W, C] */
    if (!step(&h, sd_op_permute(h, to_nhwc))) goto done;
    if (!step(&h, reshaped(h, 3, seq))) goto done;
    if (s->linear && !step(&h, sd_op_linear(h, s->proj_in_w, s->proj_in_b))) goto done;
    for (int k = 0; k < s->depth; k++)
        if (!step(&h, tblock_forward(&s->blocks[k], h, context, s->heads,
                                     at ? sd_unet_patch_attn1(at->ps, at->kind, at->id, k) : NULL, at)))
            goto done;
    if (s->linear && !step(&h, sd_op_linear(h, s->proj_out_w, s->proj_out_b))) goto done;
    /* [N, H*W, C] -> [N, C, H, W] */
    if (!(p = sd_bt_view(h, 4, img))) goto done;
    if (!step(&p, sd_op_permute(p, to_nchw))) goto done;
    if (!step(&h, p)) { p = NULL; goto done; }
    p = NULL;
    if (!s->linear && !step(&h, sd_op_conv2d(h, s->proj_out_w, s->proj_out_b, 1, 0, 0))) goto done;
    out = sd_op_add(h, x);
done:
    sd_bt_free(p);
    sd_bt_free(h);
    return out;
}
