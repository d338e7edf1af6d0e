/* unet_diffusers.c - the diffusers names of the UNet's modules
 * (comfy.utils.unet_to_diffusers), the one table every diffusers-layout
 * reader and writer of UNet names uses: LoRA key mapping, diffusers-layout
 * ControlNets, diffusers UNet files (UNETLoader, DiffusersLoader). */
#include "models/unet/unet_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ResBlock member: ldm name, diffusers name (UNET_MAP_RESNET) */
static const char *const res_map[][2] = {
    {"in_layers.0", "norm1"},  {"in_layers.2", "conv1"},  {"emb_layers.1", "time_emb_proj"},
    {"out_layers.0", "norm2"}, {"out_layers.3", "conv2"}, {"skip_connection", "conv_shortcut"},
};
/* UNET_MAP_ATTENTIONS and TRANSFORMER_BLOCKS: the same names on both sides */
static const char *const attn_params[] = {"proj_in", "proj_out", "norm"};
static const char *const tblock_weights[] = {
    "norm1",      "norm2",      "norm3",      "attn1.to_q",     "attn1.to_k",    "attn1.to_v", "attn1.to_out.0",
    "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0", "ff.net.0.proj", "ff.net.2",
};
/* UNET_MAP_BASIC: ldm, diffusers */
static const char *const basic_map[][2] = {
    {"label_emb.0.0", "class_embedding.linear_1"}, {"label_emb.0.2", "class_embedding.linear_2"},
    {"label_emb.0.0", "add_embedding.linear_1"},   {"label_emb.0.2", "add_embedding.linear_2"},
    {"input_blocks.0.0", "conv_in"},               {"out.0", "conv_norm_out"},
    {"out.2", "conv_out"},                         {"time_embed.0", "time_embedding.linear_1"},
    {"time_embed.2", "time_embedding.linear_2"},
};

static void add_resnet(sd_unet_name_fn fn, void *ud, const char *d, const char *l) {
    char a[200], b[200];
    for (size_t i = 0; i < sizeof res_map / sizeof *res_map; i++) {
        snprintf(a, sizeof a, "%s.%s", d, res_map[i][1]);
        snprintf(b, sizeof b, "%s.%s", l, res_map[i][0]);
        fn(ud, a, b);
    }
}

static void add_transformer(sd_unet_name_fn fn, void *ud, const char *d, const char *l, int depth) {
    char a[200], b[200];
    for (size_t i = 0; i < sizeof attn_params / sizeof *attn_params; i++) {
        snprintf(a, sizeof a, "%s.%s", d, attn_params[i]);
        snprintf(b, sizeof b, "%s.%s", l, attn_params[i]);
        fn(ud, a, b);
    }
    for (int t = 0; t < depth; t++)
        for (size_t i = 0; i < sizeof tblock_weights / sizeof *tblock_weights; i++) {
            snprintf(a, sizeof a, "%s.transformer_blocks.%d.%s", d, t, tblock_weights[i]);
            snprintf(b, sizeof b, "%s.transformer_blocks.%d.%s", l, t, tblock_weights[i]);
            fn(ud, a, b);
        }
}

void sd_unet_diffusers_names(const sd_unet_config *c, sd_unet_name_fn fn, void *ud) {
    char d[200], l[200];
    int td = 0;
    for (int x = 0; x < c->num_levels; x++) {
        int n = 1 + (c->num_res_blocks[x] + 1) * x;
        for (int i = 0; i < c->num_res_blocks[x]; i++) {
            snprintf(d, sizeof d, "down_blocks.%d.resnets.%d", x, i);
            snprintf(l, sizeof l, "input_blocks.%d.0", n);
            add_resnet(fn, ud, d, l);
            int depth = td < c->n_input_res ? c->transformer_depth[td] : 0;
            td++;
            if (depth > 0) {
                snprintf(d, sizeof d, "down_blocks.%d.attentions.%d", x, i);
                snprintf(l, sizeof l, "input_blocks.%d.1", n);
                add_transformer(fn, ud, d, l, depth);
            }
            n++;
        }
        snprintf(d, sizeof d, "down_blocks.%d.downsamplers.0.conv", x);
        snprintf(l, sizeof l, "input_blocks.%d.0.op", n);
        fn(ud, d, l);
    }
    if (c->transformer_depth_middle >= 0)
        add_transformer(fn, ud, "mid_block.attentions.0", "middle_block.1", c->transformer_depth_middle);
    add_resnet(fn, ud, "mid_block.resnets.0", "middle_block.0");
    add_resnet(fn, ud, "mid_block.resnets.1", "middle_block.2");

    /* transformer_depth_output is popped from its end */
    int pop = c->n_output_blocks;
    for (int x = 0; x < c->num_levels; x++) {
        int nrb = c->num_res_blocks[c->num_levels - 1 - x];
        int n = (nrb + 1) * x, len = nrb + 1;
        for (int i = 0; i < len; i++) {
            int cc = 0;
            snprintf(d, sizeof d, "up_blocks.%d.resnets.%d", x, i);
            snprintf(l, sizeof l, "output_blocks.%d.0", n);
            add_resnet(fn, ud, d, l);
            cc++;
            int depth = pop > 0 ? c->transformer_depth_output[--pop] : 0;
            if (depth > 0) {
                cc++;
                snprintf(d, sizeof d, "up_blocks.%d.attentions.%d", x, i);
                snprintf(l, sizeof l, "output_blocks.%d.1", n);
                add_transformer(fn, ud, d, l, depth);
            }
            if (i == len - 1) {
                snprintf(d, sizeof d, "up_blocks.%d.upsamplers.0.conv", x);
                snprintf(l, sizeof l, "output_blocks.%d.%d.conv", n, cc);
                fn(ud, d, l);
            }
            n++;
        }
    }
    for (size_t i = 0; i < sizeof basic_map / sizeof *basic_map; i++) fn(ud, basic_map[i][1], basic_map[i][0]);
}

/* ---- the layout of a diffusers-layout file ------------------------------------------ */

/* How many n make prefix + before + n + after a key of f. */
static int count(sd_st_file *f, const char *prefix, const char *before, const char *after) {
    char name[400];
    int n = 0;
    for (; n < 1000; n++) {
        snprintf(name, sizeof name, "%s%s%d%s", prefix, before, n, after);
        if (!sd_st_find(f, name)) break;
    }
    return n;
}

int sd_unet_is_diffusers(sd_st_file *f, const char *prefix) {
    return sd_unet_find(f, prefix, "conv_in.weight") && sd_unet_find(f, prefix, "down_blocks.0.resnets.0.conv1.weight");
}

sd_status sd_unet_diffusers_layout(sd_st_file *f, const char *prefix, sd_unet_config *c, sd_error *err) {
    memset(c, 0, sizeof *c);
    const char *path = sd_st_path(f);
    char b[200];
    int levels = count(f, prefix, "down_blocks.", ".resnets.0.conv1.weight");
    if (levels == 0 || levels > SD_UNET_MAX_LEVELS)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: diffusers-layout UNet with %d down blocks", path, levels);
    c->num_levels = levels;
    for (int x = 0; x < levels; x++) {
        snprintf(b, sizeof b, "down_blocks.%d.resnets.", x);
        int nrb = count(f, prefix, b, ".conv1.weight");
        c->num_res_blocks[x] = nrb;
        for (int i = 0; i < nrb; i++) {
            if (c->n_input_res >= SD_UNET_MAX_BLOCKS)
                return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: too many res blocks", path);
            snprintf(b, sizeof b, "down_blocks.%d.attentions.%d.transformer_blocks.", x, i);
            c->transformer_depth[c->n_input_res++] = count(f, prefix, b, ".norm1.weight");
        }
    }
    c->transformer_depth_middle =
        sd_unet_find(f, prefix, "mid_block.attentions.0.proj_in.weight")
            ? count(f, prefix, "mid_block.attentions.0.transformer_blocks.", ".norm1.weight")
            : -1;
    /* output blocks, in ComfyUI's popped-from-the-end order */
    int k = 0, depth[SD_UNET_MAX_BLOCKS];
    for (int x = 0; x < levels; x++) {
        snprintf(b, sizeof b, "up_blocks.%d.resnets.", x);
        int len = count(f, prefix, b, ".conv1.weight");
        if (len == 0) break; /* a ControlNet has none */
        if (len != c->num_res_blocks[levels - 1 - x] + 1)
            return sd_error_set(err, SD_ERR_FORMAT, "%s: up_blocks.%d has %d resnets, expected %d", path, x, len,
                                c->num_res_blocks[levels - 1 - x] + 1);
        for (int i = 0; i < len; i++) {
            if (k >= SD_UNET_MAX_BLOCKS) return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: too many up blocks", path);
            snprintf(b, sizeof b, "up_blocks.%d.attentions.%d.transformer_blocks.", x, i);
            depth[k++] = count(f, prefix, b, ".norm1.weight");
        }
    }
    c->n_output_blocks = k;
    for (int i = 0; i < k; i++) c->transformer_depth_output[i] = depth[k - 1 - i];
    return SD_OK;
}

/* ---- renaming a file ---------------------------------------------------------------- */

typedef struct plist {
    sd_unet_name_pair *p;
    size_t n, cap;
    int oom;
} plist;

static void collect(void *ud, const char *d, const char *l) {
    plist *L = ud;
    if (L->oom) return;
    if (L->n == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 1024;
        sd_unet_name_pair *p = realloc(L->p, cap * sizeof *p);
        if (!p) {
            L->oom = 1;
            return;
        }
        L->p = p;
        L->cap = cap;
    }
    snprintf(L->p[L->n].d, sizeof L->p[L->n].d, "%s", d);
    snprintf(L->p[L->n].l, sizeof L->p[L->n].l, "%s", l);
    L->n++;
}

sd_unet_name_pair *sd_unet_diffusers_table(const sd_unet_config *c, size_t *n) {
    plist L = {0};
    sd_unet_diffusers_names(c, collect, &L);
    if (!L.oom && !L.p) L.p = malloc(sizeof *L.p); /* an empty table is not a failure */
    if (L.oom || !L.p) {
        free(L.p);
        *n = 0;
        return NULL;
    }
    *n = L.n;
    return L.p;
}

static int by_d(const void *a, const void *b) {
    return strcmp(((const sd_unet_name_pair *)a)->d, ((const sd_unet_name_pair *)b)->d);
}

/* Visits every key of f under prefix with its new name (table hit, else
 * extra); keys with none are skipped. Returns the first non-zero of fn. */
typedef sd_status (*visit_fn)(void *ud, const sd_st_entry *e, const char *name, sd_error *err);
static sd_status each_renamed(sd_st_file *f, const char *prefix, const sd_unet_config *c, const char *out_prefix,
                              sd_unet_rename_fn extra, void *extra_ud, visit_fn fn, void *ud, sd_error *err) {
    size_t nt;
    sd_unet_name_pair *t = sd_unet_diffusers_table(c, &nt);
    if (!t) return sd_error_set(err, SD_ERR_NOMEM, "out of memory renaming %s", sd_st_path(f));
    qsort(t, nt, sizeof *t, by_d);
    size_t plen = strlen(prefix);
    sd_status rc = SD_OK;
    char name[512];
    for (size_t i = 0; !rc && i < sd_st_count(f); i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        const char *k = e->name;
        if (strncmp(k, prefix, plen) != 0) continue;
        k += plen;
        const char *dot = strrchr(k, '.');
        int found = 0;
        sd_unet_name_pair key;
        if (dot && (size_t)(dot - k) < sizeof key.d) {
            snprintf(key.d, sizeof key.d, "%.*s", (int)(dot - k), k);
            const sd_unet_name_pair *hit = bsearch(&key, t, nt, sizeof *t, by_d);
            if (hit) {
                snprintf(name, sizeof name, "%s%s%s", out_prefix, hit->l, dot);
                found = 1;
            }
        }
        if (!found && extra) found = extra(extra_ud, k, name, sizeof name);
        if (found) rc = fn(ud, e, name, err); /* else not part of the network: left out, as ComfyUI does */
    }
    free(t);
    return rc;
}

typedef struct write_ctx {
    sd_st_file *f;
    sd_st_writer *w;
} write_ctx;

static sd_status write_one(void *ud, const sd_st_entry *e, const char *name, sd_error *err) {
    write_ctx *x = ud;
    sd_tensor *t = sd_st_tensor(x->f, e->name, err);
    if (!t) return err && err->code ? err->code : SD_ERR_FORMAT;
    sd_status rc = sd_st_writer_add(x->w, name, t, err);
    sd_tensor_unref(t);
    if (rc) sd_error_prefix(err, "%s: '%s' -> '%s'", sd_st_path(x->f), e->name, name);
    return rc;
}

sd_status sd_unet_diffusers_rename(sd_st_file *f, const char *prefix, const sd_unet_config *c,
                                   const char *out_prefix, sd_unet_rename_fn extra, void *ud,
                                   sd_st_writer *w, sd_error *err) {
    write_ctx x = {f, w};
    return each_renamed(f, prefix, c, out_prefix, extra, ud, write_one, &x, err);
}

/* ---- a renamed view ------------------------------------------------------------------ */

/* The view's source: entry i (offset i) is the original's names[i]. */
typedef struct view_src {
    sd_st_file *f; /* owned */
    char **names;
    size_t n;
    sd_st_entry *entries; /* being built */
    size_t cap;
} view_src;

static void view_free(void *p) {
    view_src *v = p;
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) free(v->names[i]);
    free(v->names);
    sd_st_close(v->f);
    free(v);
}

static sd_status view_read(void *p, const sd_st_entry *e, void *dst, sd_error *err) {
    view_src *v = p;
    if (e->offset >= v->n) return sd_error_set(err, SD_ERR_INTERNAL, "renamed view: bad entry %s", e->name);
    sd_tensor *t = sd_st_tensor(v->f, v->names[e->offset], err);
    if (!t) return err && err->code ? err->code : SD_ERR_FORMAT;
    sd_status rc = t->nbytes == e->nbytes ? SD_OK
                                          : sd_error_set(err, SD_ERR_INTERNAL, "renamed view: %s changed size",
                                                         e->name);
    if (!rc) memcpy(dst, t->data, (size_t)e->nbytes);
    sd_tensor_unref(t);
    return rc;
}

static const sd_st_source_i view_source = {view_read, view_free};

static sd_status add_entry(void *ud, const sd_st_entry *e, const char *name, sd_error *err) {
    view_src *v = ud;
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 1024;
        sd_st_entry *ne = realloc(v->entries, cap * sizeof *ne);
        char **nn = ne ? realloc(v->names, cap * sizeof *nn) : NULL;
        if (ne) v->entries = ne;
        if (nn) v->names = nn;
        if (!ne || !nn) return sd_error_set(err, SD_ERR_NOMEM, "out of memory renaming %s", sd_st_path(v->f));
        v->cap = cap;
    }
    sd_st_entry *o = &v->entries[v->n];
    *o = *e;
    o->name = strdup(name);
    v->names[v->n] = strdup(e->name);
    if (!o->name || !v->names[v->n]) {
        free((char *)o->name);
        free(v->names[v->n]);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory renaming %s", sd_st_path(v->f));
    }
    o->offset = v->n++;
    return SD_OK;
}

sd_status sd_unet_diffusers_view(sd_st_file *f, const char *prefix, const sd_unet_config *c,
                                 sd_st_file **out, sd_error *err) {
    *out = NULL;
    view_src *v = calloc(1, sizeof *v);
    if (!v) {
        sd_st_close(f);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory renaming a UNet");
    }
    v->f = f;
    sd_status rc = each_renamed(f, prefix, c, "", NULL, NULL, add_entry, v, err);
    if (rc) {
        for (size_t i = 0; i < v->n; i++) free((char *)v->entries[i].name);
        free(v->entries);
        view_free(v);
        return rc;
    }
    sd_st_entry *entries = v->entries;
    size_t n = v->n;
    v->entries = NULL;
    /* the view takes the entries and v (also on failure) */
    return sd_st_open_source(sd_st_path(f), entries, n, &view_source, v, out, err);
}
