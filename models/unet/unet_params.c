/* unet_params.c - reaching UNet parameters by their checkpoint key, and
 * cheap "views" of a loaded UNet (LoRA patching, models/lora/lora.h).
 *
 * Additive to unet_load.c: the key grammar mirrors the names build() binds,
 * so a key reaches exactly the tensor loaded from it. */
#include "models/unet/unet_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "name" == want, with `rest` pointing after it; dotted prefix match. */
static const char *eat(const char *s, const char *want) {
    size_t n = strlen(want);
    if (strncmp(s, want, n) != 0) return NULL;
    if (s[n] == '.') return s + n + 1;
    if (s[n] == '\0') return s + n;
    return NULL;
}

/* Parses a non-negative decimal index followed by '.', advancing *s. */
static int eat_index(const char **s) {
    const char *p = *s;
    if (*p < '0' || *p > '9') return -1;
    long v = 0;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (*p - '0');
        if (v > 100000) return -1;
        p++;
    }
    if (*p != '.') return -1;
    *s = p + 1;
    return (int)v;
}

static sd_bt **wb(sd_bt **w, sd_bt **b, const char *rest) {
    if (strcmp(rest, "weight") == 0) return w;
    if (strcmp(rest, "bias") == 0) return b;
    return NULL;
}

static sd_bt **res_param(unet_res *r, const char *k) {
    const char *s;
    if ((s = eat(k, "in_layers.0"))) return wb(&r->in_norm_w, &r->in_norm_b, s);
    if ((s = eat(k, "in_layers.2"))) return wb(&r->in_conv_w, &r->in_conv_b, s);
    if ((s = eat(k, "emb_layers.1"))) return wb(&r->emb_w, &r->emb_b, s);
    if ((s = eat(k, "out_layers.0"))) return wb(&r->out_norm_w, &r->out_norm_b, s);
    if ((s = eat(k, "out_layers.3"))) return wb(&r->out_conv_w, &r->out_conv_b, s);
    if ((s = eat(k, "skip_connection")) && r->skip_w) return wb(&r->skip_w, &r->skip_b, s);
    return NULL;
}

static sd_bt **attn_param(unet_attn *a, const char *k) {
    const char *s;
    if (strcmp(k, "to_q.weight") == 0) return &a->q;
    if (strcmp(k, "to_k.weight") == 0) return &a->k;
    if (strcmp(k, "to_v.weight") == 0) return &a->v;
    if ((s = eat(k, "to_out.0"))) return wb(&a->out_w, &a->out_b, s);
    return NULL;
}

static sd_bt **st_param(unet_st *st, const char *k) {
    const char *s;
    if ((s = eat(k, "norm"))) return wb(&st->norm_w, &st->norm_b, s);
    if ((s = eat(k, "proj_in"))) return wb(&st->proj_in_w, &st->proj_in_b, s);
    if ((s = eat(k, "proj_out"))) return wb(&st->proj_out_w, &st->proj_out_b, s);
    if (!(s = eat(k, "transformer_blocks"))) return NULL;
    int i = eat_index(&s);
    if (i < 0 || i >= st->depth) return NULL;
    unet_tblock *b = &st->blocks[i];
    const char *t;
    if ((t = eat(s, "norm1"))) return wb(&b->norm1_w, &b->norm1_b, t);
    if ((t = eat(s, "norm2"))) return wb(&b->norm2_w, &b->norm2_b, t);
    if ((t = eat(s, "norm3"))) return wb(&b->norm3_w, &b->norm3_b, t);
    if ((t = eat(s, "attn1"))) return attn_param(&b->attn1, t);
    if ((t = eat(s, "attn2"))) return attn_param(&b->attn2, t);
    if ((t = eat(s, "ff.net.0.proj"))) return wb(&b->ff_in_w, &b->ff_in_b, t);
    if ((t = eat(s, "ff.net.2"))) return wb(&b->ff_out_w, &b->ff_out_b, t);
    return NULL;
}

/* "L.<rest>" inside one TimestepEmbedSequential. */
static sd_bt **block_param(unet_block *b, const char *k) {
    int li = eat_index(&k);
    if (li < 0 || li >= b->n) {
        /* input_blocks.0.0.weight has no further dot after the layer index */
        return NULL;
    }
    unet_layer *l = &b->layers[li];
    switch (l->kind) {
    case UL_RES: return res_param(l->res, k);
    case UL_ST: return st_param(l->st, k);
    case UL_CONV: return wb(&l->conv_w, &l->conv_b, k);
    case UL_DOWN: {
        const char *s = eat(k, "op");
        return s ? wb(&l->conv_w, &l->conv_b, s) : NULL;
    }
    case UL_UP: {
        const char *s = eat(k, "conv");
        return s ? wb(&l->conv_w, &l->conv_b, s) : NULL;
    }
    }
    return NULL;
}

sd_bt **sd_unet_param(sd_unet *u, const char *key) {
    if (!u || !key) return NULL;
    const char *s;
    if ((s = eat(key, "time_embed.0"))) return wb(&u->time_w0, &u->time_b0, s);
    if ((s = eat(key, "time_embed.2"))) return wb(&u->time_w2, &u->time_b2, s);
    if (u->label_w0 && (s = eat(key, "label_emb.0.0"))) return wb(&u->label_w0, &u->label_b0, s);
    if (u->label_w0 && (s = eat(key, "label_emb.0.2"))) return wb(&u->label_w2, &u->label_b2, s);
    if ((s = eat(key, "out.0"))) return wb(&u->out_norm_w, &u->out_norm_b, s);
    if ((s = eat(key, "out.2"))) return wb(&u->out_conv_w, &u->out_conv_b, s);
    if ((s = eat(key, "middle_block"))) return block_param(&u->middle, s);
    if ((s = eat(key, "input_blocks"))) {
        int i = eat_index(&s);
        return i >= 0 && i < u->n_in ? block_param(&u->in[i], s) : NULL;
    }
    if ((s = eat(key, "output_blocks"))) {
        int i = eat_index(&s);
        return i >= 0 && i < u->n_out ? block_param(&u->out[i], s) : NULL;
    }
    return NULL;
}

/* ---- views ------------------------------------------------------------------ */

/* Replace *slot (a borrowed base tensor) by a view of it; counts failures. */
static void view_slot(sd_bt **slot, int *failed) {
    if (!*slot) return;
    sd_bt *v = sd_bt_view(*slot, (*slot)->ndim, (*slot)->shape);
    if (!v) (*failed)++;
    *slot = v;
}

static void view_attn(unet_attn *a, int *f) {
    view_slot(&a->q, f);
    view_slot(&a->k, f);
    view_slot(&a->v, f);
    view_slot(&a->out_w, f);
    view_slot(&a->out_b, f);
}

static unet_res *view_res(const unet_res *r, int *f) {
    unet_res *c = malloc(sizeof *c);
    if (!c) {
        (*f)++;
        return NULL;
    }
    *c = *r;
    sd_bt **all[] = {&c->in_norm_w, &c->in_norm_b, &c->in_conv_w, &c->in_conv_b, &c->emb_w,
                     &c->emb_b, &c->out_norm_w, &c->out_norm_b, &c->out_conv_w, &c->out_conv_b,
                     &c->skip_w, &c->skip_b};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) view_slot(all[i], f);
    return c;
}

static unet_st *view_st(const unet_st *s, int *f) {
    unet_st *c = malloc(sizeof *c);
    if (!c) {
        (*f)++;
        return NULL;
    }
    *c = *s;
    sd_bt **all[] = {&c->norm_w, &c->norm_b, &c->proj_in_w, &c->proj_in_b, &c->proj_out_w,
                     &c->proj_out_b};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) view_slot(all[i], f);
    c->blocks = calloc((size_t)(s->depth > 0 ? s->depth : 1), sizeof *c->blocks);
    if (!c->blocks) {
        (*f)++;
        c->depth = 0;
        return c;
    }
    for (int k = 0; k < s->depth; k++) {
        unet_tblock *b = &c->blocks[k];
        *b = s->blocks[k];
        sd_bt **bl[] = {&b->norm1_w, &b->norm1_b, &b->norm2_w, &b->norm2_b, &b->norm3_w,
                        &b->norm3_b, &b->ff_in_w, &b->ff_in_b, &b->ff_out_w, &b->ff_out_b};
        for (size_t i = 0; i < sizeof bl / sizeof *bl; i++) view_slot(bl[i], f);
        view_attn(&b->attn1, f);
        view_attn(&b->attn2, f);
    }
    return c;
}

static void view_block(unet_block *b, int *f) {
    for (int i = 0; i < b->n; i++) {
        unet_layer *l = &b->layers[i];
        if (l->res) l->res = view_res(l->res, f);
        if (l->st) l->st = view_st(l->st, f);
        view_slot(&l->conv_w, f);
        view_slot(&l->conv_b, f);
    }
}

sd_status sd_unet_view(const sd_unet *base, sd_unet **out, sd_error *err) {
    *out = NULL;
    sd_unet *u = malloc(sizeof *u);
    if (!u) return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a UNet view");
    *u = *base;
    int failed = 0;
    sd_bt **all[] = {&u->time_w0, &u->time_b0, &u->time_w2, &u->time_b2, &u->label_w0,
                     &u->label_b0, &u->label_w2, &u->label_b2, &u->out_norm_w, &u->out_norm_b,
                     &u->out_conv_w, &u->out_conv_b};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) view_slot(all[i], &failed);
    for (int i = 0; i < u->n_in; i++) view_block(&u->in[i], &failed);
    view_block(&u->middle, &failed);
    for (int i = 0; i < u->n_out; i++) view_block(&u->out[i], &failed);
    u->tap = NULL;
    u->tap_user = NULL;
    if (failed) {
        sd_unet_free(u);
        sd_status rc = sd_backend_take_error(base->be, err);
        return rc ? rc : sd_error_set(err, SD_ERR_NOMEM, "out of memory creating a UNet view");
    }
    *out = u;
    return SD_OK;
}

/* ---- enumeration ---------------------------------------------------------------- */

typedef struct walker {
    sd_unet_param_fn fn;
    void *ud;
    char key[256];
} walker;

/* Visit slot under "<prefix>.<name>" when it holds a tensor. */
static void visit(walker *w, const char *prefix, const char *name, sd_bt **slot) {
    if (!*slot) return;
    snprintf(w->key, sizeof w->key, "%s.%s", prefix, name);
    w->fn(w->ud, w->key, slot);
}

static void visit_wb(walker *w, const char *prefix, const char *mod, sd_bt **wt, sd_bt **b) {
    char p[200];
    snprintf(p, sizeof p, "%s.%s", prefix, mod);
    visit(w, p, "weight", wt);
    visit(w, p, "bias", b);
}

static void walk_st(walker *w, const char *p, unet_st *st) {
    visit_wb(w, p, "norm", &st->norm_w, &st->norm_b);
    visit_wb(w, p, "proj_in", &st->proj_in_w, &st->proj_in_b);
    visit_wb(w, p, "proj_out", &st->proj_out_w, &st->proj_out_b);
    for (int i = 0; i < st->depth; i++) {
        unet_tblock *b = &st->blocks[i];
        char q[200];
        snprintf(q, sizeof q, "%s.transformer_blocks.%d", p, i);
        visit_wb(w, q, "norm1", &b->norm1_w, &b->norm1_b);
        visit_wb(w, q, "norm2", &b->norm2_w, &b->norm2_b);
        visit_wb(w, q, "norm3", &b->norm3_w, &b->norm3_b);
        unet_attn *a[2] = {&b->attn1, &b->attn2};
        for (int k = 0; k < 2; k++) {
            char r[220];
            snprintf(r, sizeof r, "%s.attn%d", q, k + 1);
            visit(w, r, "to_q.weight", &a[k]->q);
            visit(w, r, "to_k.weight", &a[k]->k);
            visit(w, r, "to_v.weight", &a[k]->v);
            visit_wb(w, r, "to_out.0", &a[k]->out_w, &a[k]->out_b);
        }
        visit_wb(w, q, "ff.net.0.proj", &b->ff_in_w, &b->ff_in_b);
        visit_wb(w, q, "ff.net.2", &b->ff_out_w, &b->ff_out_b);
    }
}

static void walk_block(walker *w, const char *name, unet_block *b) {
    for (int i = 0; i < b->n; i++) {
        unet_layer *l = &b->layers[i];
        char p[160];
        snprintf(p, sizeof p, "%s.%d", name, i);
        switch (l->kind) {
        case UL_RES: {
            unet_res *r = l->res;
            visit_wb(w, p, "in_layers.0", &r->in_norm_w, &r->in_norm_b);
            visit_wb(w, p, "in_layers.2", &r->in_conv_w, &r->in_conv_b);
            visit_wb(w, p, "emb_layers.1", &r->emb_w, &r->emb_b);
            visit_wb(w, p, "out_layers.0", &r->out_norm_w, &r->out_norm_b);
            visit_wb(w, p, "out_layers.3", &r->out_conv_w, &r->out_conv_b);
            visit_wb(w, p, "skip_connection", &r->skip_w, &r->skip_b);
            break;
        }
        case UL_ST: walk_st(w, p, l->st); break;
        case UL_CONV:
            visit(w, p, "weight", &l->conv_w);
            visit(w, p, "bias", &l->conv_b);
            break;
        case UL_DOWN: visit_wb(w, p, "op", &l->conv_w, &l->conv_b); break;
        case UL_UP: visit_wb(w, p, "conv", &l->conv_w, &l->conv_b); break;
        }
    }
}

void sd_unet_param_each(sd_unet *u, sd_unet_param_fn fn, void *ud) {
    if (!u || !fn) return;
    walker w = {fn, ud, {0}};
    visit_wb(&w, "time_embed", "0", &u->time_w0, &u->time_b0);
    visit_wb(&w, "time_embed", "2", &u->time_w2, &u->time_b2);
    visit_wb(&w, "label_emb.0", "0", &u->label_w0, &u->label_b0);
    visit_wb(&w, "label_emb.0", "2", &u->label_w2, &u->label_b2);
    for (int i = 0; i < u->n_in; i++) {
        char n[64];
        snprintf(n, sizeof n, "input_blocks.%d", i);
        walk_block(&w, n, &u->in[i]);
    }
    walk_block(&w, "middle_block", &u->middle);
    for (int i = 0; i < u->n_out; i++) {
        char n[64];
        snprintf(n, sizeof n, "output_blocks.%d", i);
        walk_block(&w, n, &u->out[i]);
    }
    visit_wb(&w, "out", "0", &u->out_norm_w, &u->out_norm_b);
    visit_wb(&w, "out", "2", &u->out_conv_w, &u->out_conv_b);
}
