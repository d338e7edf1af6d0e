/* lora_plan.c - opening LoRA files and matching their tensors against a
 * model (comfy.lora.load_lora over the key map of lora_keys.c). */
#include "models/lora/lora_internal.h"
#include "formats/torch_ckpt.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sd_lora ---------------------------------------------------------------- */

sd_status sd_lora_from_file(sd_st_file *f, sd_lora **out, sd_error *err) {
    *out = NULL;
    if (sd_st_count(f) == 0)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: LoRA file holds no tensor", sd_st_path(f));
    sd_lora *l = calloc(1, sizeof *l);
    if (!l) return sd_error_set(err, SD_ERR_NOMEM, "out of memory opening a LoRA");
    l->refcount = 1;
    l->f = f;
    *out = l;
    return SD_OK;
}

sd_status sd_lora_open(const char *path, sd_lora **out, sd_error *err) {
    *out = NULL;
    sd_st_file *f = NULL;
    sd_status rc = sd_torch_open_any(path, &f, err); /* .safetensors or a torch .pt */
    if (rc) return rc;
    rc = sd_lora_from_file(f, out, err);
    if (rc) {
        sd_st_close(f);
        return rc;
    }
    (*out)->owns_file = 1;
    return SD_OK;
}

/* Reference counts are atomic: plans and files are shared by the MODEL and
 * CLIP values of a graph, which the executor may release from any thread. */
sd_lora *sd_lora_ref(sd_lora *l) {
    if (l) __atomic_add_fetch(&l->refcount, 1, __ATOMIC_ACQ_REL);
    return l;
}

void sd_lora_unref(sd_lora *l) {
    if (!l || __atomic_sub_fetch(&l->refcount, 1, __ATOMIC_ACQ_REL) > 0) return;
    if (l->owns_file) sd_st_close(l->f);
    free(l);
}

const char *sd_lora_path(const sd_lora *l) { return sd_st_path(l->f); }

/* ---- matching ------------------------------------------------------------------ */

/* Index of name in the (name-sorted) file, or -1. */
static long find_index(sd_st_file *f, const char *name) {
    long lo = 0, hi = (long)sd_st_count(f) - 1;
    while (lo <= hi) {
        long mid = lo + (hi - lo) / 2;
        int c = strcmp(sd_st_at(f, (size_t)mid)->name, name);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

typedef struct probe {
    sd_st_file *f;
    char *used;
    const char *x;
} probe;

/* The file's name for x + suffix (marked used), or NULL. */
static const char *take(probe *pr, const char *suffix) {
    char name[512];
    snprintf(name, sizeof name, "%s%s", pr->x, suffix);
    long i = find_index(pr->f, name);
    if (i < 0) return NULL;
    pr->used[i] = 1;
    return sd_st_at(pr->f, (size_t)i)->name;
}

static int present(probe *pr, const char *suffix) {
    char name[512];
    snprintf(name, sizeof name, "%s%s", pr->x, suffix);
    return find_index(pr->f, name) >= 0;
}

static const char *const lora_suffixes[][2] = {
    {".lora_up.weight", ".lora_down.weight"},
    {"_lora.up.weight", "_lora.down.weight"},
    {".lora_B.weight", ".lora_A.weight"},
    {".lora.up.weight", ".lora.down.weight"},
    {".lora_B", ".lora_A"},
    {".lora_linear_layer.up.weight", ".lora_linear_layer.down.weight"},
    {".lora_B.default.weight", ".lora_A.default.weight"},
};

typedef struct pbuf {
    lora_patch *p;
    size_t n, cap;
    char **skip; /* why each patch that did not fit was left out (owned) */
    size_t nskip, capskip;
} pbuf;

/* Records a patch left out (ComfyUI skips it with a logged warning: "lora
 * key not loaded", "WEIGHT NOT MERGED"). Only running out of memory fails. */
static sd_status skip_patch(pbuf *b, sd_error *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static sd_status skip_patch(pbuf *b, sd_error *err, const char *fmt, ...) {
    if (b->nskip == b->capskip) {
        size_t cap = b->capskip ? 2 * b->capskip : 16;
        char **s = realloc(b->skip, cap * sizeof *s);
        if (!s) return sd_error_set(err, SD_ERR_NOMEM, "out of memory matching a LoRA");
        b->skip = s;
        b->capskip = cap;
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!(b->skip[b->nskip] = strdup(msg))) return sd_error_set(err, SD_ERR_NOMEM, "out of memory matching a LoRA");
    b->nskip++;
    return SD_OK;
}

static void free_skipped(char **s, size_t n) {
    for (size_t i = 0; s && i < n; i++) free(s[i]);
    free(s);
}

static lora_patch *push(pbuf *b) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        lora_patch *p = realloc(b->p, cap * sizeof *p);
        if (!p) return NULL;
        b->p = p;
        b->cap = cap;
    }
    lora_patch *p = &b->p[b->n++];
    memset(p, 0, sizeof *p);
    return p;
}

static void free_patches(lora_patch *p, size_t n) {
    for (size_t i = 0; p && i < n; i++) free(p[i].target);
    free(p);
}

/* The numel and shape (for messages) of the target slot of a patch. */
static int target_numel(const lora_model *m, sd_lora_part part, const char *key, int64_t krows,
                        int64_t *numel, int *ndim, int64_t *dims, char *shape, size_t n) {
    sd_bt **slot = NULL;
    int64_t row0 = 0, rows = 0;
    const sd_text_encoder *te = m->te;
    if (part == SD_LORA_UNET && (m->flux || m->sd3 || m->zimage)) {
        slot = sd_lora_dit_param(m, key);
        rows = krows; /* the key's row slice (the map checked it fits) */
    } else if (part == SD_LORA_UNET) {
        slot = m->unet ? sd_unet_param(m->unet, key) : NULL;
    } else {
        slot = sd_lora_te_param(part, sd_lora_te_net(te, part), key, &row0, &rows);
    }
    if (!slot || !*slot) return 0;
    const sd_bt *t = *slot;
    int64_t ne = sd_bt_numel(t);
    int64_t d0 = t->shape[0];
    if (rows > 0) {
        ne = ne / t->shape[0] * rows;
        d0 = rows;
    }
    *numel = ne;
    *ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) dims[i] = i ? t->shape[i] : d0;
    size_t o = (size_t)snprintf(shape, n, "[%lld", (long long)d0);
    for (int i = 1; i < t->ndim && o < n; i++)
        o += (size_t)snprintf(shape + o, n - o, ", %lld", (long long)t->shape[i]);
    if (o < n) snprintf(shape + o, n - o, "]");
    return 1;
}

/* 1 when every stored value of tensor `name` is finite (on the stored bits,
 * no conversion; a borrowed view of the mapping), 0 when not, -1 with err
 * set when it cannot be read. */
static int stored_finite(sd_lora *l, const char *name, sd_error *err) {
    sd_tensor *t = sd_st_tensor(l->f, name, err);
    if (!t) return -1;
    /* float types only: an integer tensor where a LoRA factor belongs is
     * reported by the shape/dtype checks, not here */
    int ok = !sd_dtype_is_float(t->dtype) ||
             sd_dtype_all_finite(t->dtype, t->data, (size_t)sd_tensor_numel(t));
    sd_tensor_unref(t);
    return ok;
}


/* Adds one patch for map entry k (tensor names under pr->x), checking the
 * adapter's size against the target. *added = 1 when a patch was made. */
static sd_status add_patch(sd_lora *l, pbuf *b, const lora_key *k, const char *target,
                           lora_kind kind, const char *const *t, int has_alpha, double alpha,
                           const lora_model *m, sd_error *err) {
    int64_t want = 0, dims[SD_MAX_DIMS];
    int ndim = 0;
    char shape[128];
    /* (a bias diff of a key is never sliced: match_one skips those) */
    int64_t rows = target == k->target ? k->rows : 0;
    if (!target_numel(m, k->part, target, rows, &want, &ndim, dims, shape, sizeof shape))
        return skip_patch(b, err, "'%s' targets %s '%s', which this model lacks", k->name,
                          sd_lora_part_name(k->part), target);
    lora_patch *p = push(b);
    char *tg = strdup(target);
    if (!p || !tg) {
        free(tg);
        if (p) b->n--;
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory matching a LoRA");
    }
    p->part = k->part;
    p->target = tg;
    p->row0 = rows ? k->row0 : 0;
    p->rows = rows;
    p->swap = target == k->target ? k->swap : 0;
    p->kind = kind;
    for (int i = 0; i < LORA_MAX_T; i++) p->t[i] = t[i];
    p->has_alpha = has_alpha;
    p->alpha = alpha;
    p->src = k->name;
    p->order = k->order;
    p->seq = b->n - 1;
    int64_t got = sd_lora_patch_check(l, p, NULL, err);
    if (got < 0) {
        p->src = NULL;
        return err ? err->code : SD_ERR_FORMAT;
    }
    /* A full difference is added element by element, so its shape must be
     * the target's (ComfyUI skips a mismatching one with a warning); the
     * factored kinds are reshaped to the target, so their size must match. */
    int same = 1;
    if (kind == LK_DIFF) {
        const sd_st_entry *e = sd_st_find(l->f, t[0]);
        same = e && e->ndim == ndim;
        for (int i = 0; same && i < ndim; i++) same = e->shape[i] == dims[i];
    }
    /* NaN/Inf refused here, by LoraLoader, rather than when a sampler
     * first builds the patched view (lora_apply.c checks again) */
    for (int i = 0; got == want && same && i < LORA_MAX_T; i++) {
        int fin = p->t[i] ? stored_finite(l, p->t[i], err) : 1;
        if (fin < 0) return err ? err->code : SD_ERR_FORMAT;
        if (!fin)
            return sd_error_set(err, SD_ERR_FORMAT, "%s: LoRA tensor '%s' contains NaN or Inf (corrupted LoRA)",
                                sd_lora_path(l), p->t[i]);
    }
    if (got != want || !same) {
        /* left out, as ComfyUI leaves it (the caller decides whether to refuse) */
        free(p->target);
        b->n--;
        return skip_patch(b, err, "'%s' does not fit: its patch has %lld values, %s '%s' is %s",
                          k->name, (long long)got, sd_lora_part_name(k->part), target, shape);
    }
    return SD_OK;
}

static sd_status match_one(sd_lora *l, probe *pr, const lora_key *k, pbuf *b, const lora_model *m,
                           sd_error *err) {
    sd_st_file *f = l->f;
    int has_alpha = 0;
    double alpha = 0;
    const char *an = take(pr, ".alpha");
    if (an) {
        sd_tensor *a = sd_st_tensor_f32(f, an, err);
        if (!a) return err ? err->code : SD_ERR_FORMAT;
        if (sd_tensor_numel(a) != 1 || !isfinite(sd_tensor_f32(a)[0])) {
            int scalar = sd_tensor_numel(a) == 1;
            sd_tensor_unref(a);
            return sd_error_set(err, SD_ERR_FORMAT, "%s: LoRA tensor '%s' %s", sd_st_path(f), an,
                                scalar ? "contains NaN or Inf (corrupted LoRA)" : "is not a scalar");
        }
        alpha = sd_tensor_f32(a)[0];
        has_alpha = 1;
        sd_tensor_unref(a);
    }
    static const char *const unsupported[] = {".dora_scale", ".set_weight", ".oft_blocks",
                                              ".oft_diag", ".a1.weight", ".oft_R.weight"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (present(pr, unsupported[i]))
            return sd_error_set(err, SD_ERR_UNSUPPORTED,
                                "%s: LoRA key '%s%s' (DoRA/OFT/GLoRA/set) is not supported",
                                sd_st_path(f), pr->x, unsupported[i]);
    const char *t[LORA_MAX_T];
    sd_status rc;
    for (size_t s = 0; s < sizeof lora_suffixes / sizeof *lora_suffixes; s++) {
        if (!present(pr, lora_suffixes[s][0]) || !present(pr, lora_suffixes[s][1])) continue;
        memset(t, 0, sizeof t);
        t[0] = take(pr, lora_suffixes[s][0]);
        t[1] = take(pr, lora_suffixes[s][1]);
        if (s == 0) t[2] = take(pr, ".lora_mid.weight");
        if ((rc = add_patch(l, b, k, k->target, LK_LORA, t, has_alpha, alpha, m, err)))
            return rc;
        break;
    }
    if (present(pr, ".hada_w1_a")) {
        static const char *const sx[] = {".hada_w1_a", ".hada_w1_b", ".hada_w2_a", ".hada_w2_b",
                                         ".hada_t1", ".hada_t2"};
        memset(t, 0, sizeof t);
        for (int i = 0; i < 6; i++) t[i] = take(pr, sx[i]);
        if (!t[1] || !t[2] || !t[3])
            return sd_error_set(err, SD_ERR_FORMAT, "%s: LoHa '%s' lacks hada_w1_b/w2_a/w2_b",
                                sd_st_path(f), pr->x);
        if ((rc = add_patch(l, b, k, k->target, LK_LOHA, t, has_alpha, alpha, m, err)))
            return rc;
    }
    {
        static const char *const sx[] = {".lokr_w1", ".lokr_w2", ".lokr_w1_a", ".lokr_w1_b",
                                         ".lokr_w2_a", ".lokr_w2_b", ".lokr_t2"};
        int any = 0;
        for (int i = 0; i < 7; i++) any |= present(pr, sx[i]);
        if (any) {
            memset(t, 0, sizeof t);
            for (int i = 0; i < 7; i++) t[i] = take(pr, sx[i]);
            if ((!t[0] && (!t[2] || !t[3])) || (!t[1] && (!t[4] || !t[5])))
                return sd_error_set(err, SD_ERR_FORMAT, "%s: LoKr '%s' lacks w1 or w2 factors",
                                    sd_st_path(f), pr->x);
            if ((rc = add_patch(l, b, k, k->target, LK_LOKR, t, has_alpha, alpha, m, err)))
                return rc;
        }
    }
    /* full differences: weight (.diff, .w_norm) and bias (.diff_b, .b_norm) */
    char bias[300];
    size_t tl = strlen(k->target);
    snprintf(bias, sizeof bias, "%.*sbias", (int)(tl > 6 ? tl - 6 : 0), k->target);
    static const char *const dx[][2] = {{".w_norm", "w"}, {".b_norm", "b"}, {".diff", "w"}, {".diff_b", "b"}};
    for (size_t i = 0; i < 4; i++) {
        /* a bias patch of a sliced or swapped key (a tuple target in
         * ComfyUI) goes nowhere there (it names no parameter): left
         * unmatched, so it is reported */
        if (dx[i][1][0] == 'b' && (k->rows > 0 || k->swap)) continue;
        if (!present(pr, dx[i][0])) continue;
        memset(t, 0, sizeof t);
        t[0] = take(pr, dx[i][0]);
        if ((rc = add_patch(l, b, k, dx[i][1][0] == 'w' ? k->target : bias, LK_DIFF, t, 0, 0, m,
                            err)))
            return rc;
    }
    return SD_OK;
}

/* Patches by target (part, key, rows, swap), then by when ComfyUI's
 * load_lora assigns them (key order, then place). */
static int by_target_then_order(const void *a, const void *b) {
    const lora_patch *x = a, *y = b;
    if (x->part != y->part) return x->part < y->part ? -1 : 1;
    int c = strcmp(x->target, y->target);
    if (c) return c;
    if (x->row0 != y->row0) return x->row0 < y->row0 ? -1 : 1;
    if (x->rows != y->rows) return x->rows < y->rows ? -1 : 1;
    if (x->swap != y->swap) return x->swap < y->swap ? -1 : 1;
    if (x->order != y->order) return x->order < y->order ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int by_seq(const void *a, const void *b) {
    const lora_patch *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* ComfyUI's load_lora keys its patches by target: of one file's patches
 * on the same target (two spellings of one module, a LoRA and a .diff), the
 * last assigned is the one applied; the others' tensors count as loaded.
 * Keeps those and restores the plan's order. */
static void one_patch_per_target(pbuf *b) {
    if (b->n < 2) return;
    qsort(b->p, b->n, sizeof *b->p, by_target_then_order);
    size_t kept = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (i + 1 < b->n && by_target_then_order(&b->p[i], &b->p[i + 1]) != 0) {
            const lora_patch *x = &b->p[i], *y = &b->p[i + 1];
            if (x->part == y->part && !strcmp(x->target, y->target) && x->row0 == y->row0 &&
                x->rows == y->rows && x->swap == y->swap) {
                free(b->p[i].target);
                continue;
            }
        }
        b->p[kept++] = b->p[i];
    }
    b->n = kept;
    qsort(b->p, b->n, sizeof *b->p, by_seq);
}

static sd_status plan_new(sd_lora *lora, const lora_model *m, sd_lora_plan **out, sd_error *err) {
    *out = NULL;
    lora_key *map = NULL;
    size_t nmap = 0;
    sd_status rc = sd_lora_keymap_build(m, &map, &nmap, err);
    if (rc) return rc;
    size_t nf = sd_st_count(lora->f);
    sd_lora_plan *p = calloc(1, sizeof *p);
    char *used = calloc(nf ? nf : 1, 1);
    pbuf b = {0};
    if (!p || !used) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory matching a LoRA");
        goto fail;
    }
    for (size_t i = 0; i < nmap; i++) {
        probe pr = {lora->f, used, map[i].name};
        rc = match_one(lora, &pr, &map[i], &b, m, err);
        if (rc) goto fail;
    }
    /* A parameter held by the root module (Z-Image's x_pad_token, SD3's
     * pos_embed: no '.' in its key) is in ComfyUI's key map, but
     * ModelPatcher's load patches leaf modules' parameters only: the LoRA's
     * tensors count as loaded and change nothing. */
    size_t kept = 0;
    for (size_t i = 0; i < b.n; i++) {
        if (!strchr(b.p[i].target, '.')) {
            free(b.p[i].target);
            continue;
        }
        b.p[kept++] = b.p[i];
    }
    b.n = kept;
    one_patch_per_target(&b);
    for (size_t i = 0; i < b.n; i++) {
        b.p[i].src = NULL; /* the map's names die with it */
        p->count[b.p[i].part]++;
    }
    size_t nu = 0;
    for (size_t i = 0; i < nf; i++) nu += !used[i];
    p->unmatched = malloc((nu ? nu : 1) * sizeof *p->unmatched);
    if (!p->unmatched) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory matching a LoRA");
        goto fail;
    }
    for (size_t i = 0; i < nf; i++)
        if (!used[i]) p->unmatched[p->n_unmatched++] = sd_st_at(lora->f, i)->name;
    p->refcount = 1;
    p->lora = sd_lora_ref(lora);
    p->p = b.p;
    p->n = b.n;
    p->skipped = b.skip;
    p->n_skipped = b.nskip;
    free(used);
    sd_lora_keymap_free(map, nmap);
    *out = p;
    return SD_OK;
fail:
    free_patches(b.p, b.n);
    free_skipped(b.skip, b.nskip);
    free(used);
    if (p) free(p->unmatched);
    free(p);
    sd_lora_keymap_free(map, nmap);
    return rc;
}

sd_status sd_lora_plan_new(sd_lora *lora, sd_unet *unet, const sd_text_encoder *te,
                           sd_lora_plan **out, sd_error *err) {
    lora_model m = {.unet = unet, .te = te};
    return plan_new(lora, &m, out, err);
}

sd_bt **sd_lora_dit_param(const lora_model *m, const char *key) {
    if (m->flux) return sd_flux_param(m->flux, key);
    if (m->sd3) return sd_sd3_param(m->sd3, key);
    if (m->zimage) return sd_zimage_param(m->zimage, key);
    return NULL;
}

static sd_status plan_new_dit(sd_lora *lora, const lora_model *m, sd_lora_plan **out, sd_error *err) {
    /* GGUF-quantized targets are patched on their widened values
     * (lora_apply.c, as ComfyUI-GGUF does) */
    return plan_new(lora, m, out, err);
}

sd_status sd_lora_plan_new_flux(sd_lora *lora, sd_flux *flux, sd_lora_plan **out, sd_error *err) {
    lora_model m = {.flux = flux};
    return plan_new_dit(lora, &m, out, err);
}

sd_status sd_lora_plan_new_dit(sd_lora *lora, const sd_dmodel *dm, sd_lora_plan **out, sd_error *err) {
    return sd_lora_plan_new_dit_te(lora, dm, NULL, out, err);
}

sd_status sd_lora_plan_new_dit_te(sd_lora *lora, const sd_dmodel *dm, const sd_text_encoder *te,
                                  sd_lora_plan **out, sd_error *err) {
    *out = NULL;
    lora_model m = {.te = te};
    switch (dm->info.kind) {
    case SD_DMODEL_FLUX: m.flux = dm->net; break;
    case SD_DMODEL_MMDIT: m.sd3 = dm->net; break;
    case SD_DMODEL_ZIMAGE: m.zimage = dm->net; break;
    default:
        return sd_error_set(err, SD_ERR_INVALID, "%s: a %s model is no DiT", sd_lora_path(lora),
                            sd_dmodel_kind_name(dm->info.kind));
    }
    return plan_new_dit(lora, &m, out, err);
}

sd_lora_plan *sd_lora_plan_ref(sd_lora_plan *p) {
    if (p) __atomic_add_fetch(&p->refcount, 1, __ATOMIC_ACQ_REL);
    return p;
}

void sd_lora_plan_unref(sd_lora_plan *p) {
    if (!p || __atomic_sub_fetch(&p->refcount, 1, __ATOMIC_ACQ_REL) > 0) return;
    free_patches(p->p, p->n);
    free(p->unmatched);
    free_skipped(p->skipped, p->n_skipped);
    sd_lora_unref(p->lora);
    free(p);
}

size_t sd_lora_plan_count(const sd_lora_plan *p, sd_lora_part part) {
    return p && part >= 0 && part < SD_LORA_PARTS ? p->count[part] : 0;
}

const char *sd_lora_plan_target(const sd_lora_plan *p, sd_lora_part part, size_t i) {
    for (size_t j = 0; p && j < p->n; j++)
        if (p->p[j].part == part && i-- == 0) return p->p[j].target;
    return NULL;
}

size_t sd_lora_plan_unmatched_count(const sd_lora_plan *p) { return p ? p->n_unmatched : 0; }

const char *sd_lora_plan_unmatched(const sd_lora_plan *p, size_t i) {
    return p && i < p->n_unmatched ? p->unmatched[i] : NULL;
}

const char *sd_lora_plan_unmatched_summary(const sd_lora_plan *p, int show, char *buf, size_t n) {
    if (!n) return buf;
    buf[0] = '\0';
    if (!p || !p->n_unmatched) return buf;
    size_t o = (size_t)snprintf(buf, n, "%zu LoRA key%s matched nothing: ", p->n_unmatched,
                                p->n_unmatched == 1 ? "" : "s");
    for (size_t i = 0; i < p->n_unmatched && (int)i < show && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", p->unmatched[i]);
    if ((int)p->n_unmatched > show && o < n) snprintf(buf + o, n - o, ", ...");
    return buf;
}

size_t sd_lora_plan_skipped_count(const sd_lora_plan *p) { return p ? p->n_skipped : 0; }

const char *sd_lora_plan_skipped(const sd_lora_plan *p, size_t i) {
    return p && i < p->n_skipped ? p->skipped[i] : NULL;
}

const char *sd_lora_plan_skipped_summary(const sd_lora_plan *p, int show, char *buf, size_t n) {
    if (!n) return buf;
    buf[0] = '\0';
    if (!p || !p->n_skipped) return buf;
    size_t o = (size_t)snprintf(buf, n, "%zu LoRA patch%s did not fit the model and %s left out: ", p->n_skipped,
                                p->n_skipped == 1 ? "" : "es", p->n_skipped == 1 ? "was" : "were");
    for (size_t i = 0; i < p->n_skipped && (int)i < show && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? "; " : "", p->skipped[i]);
    if ((int)p->n_skipped > show && o < n) snprintf(buf + o, n - o, "; ...");
    return buf;
}
