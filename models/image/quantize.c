/* quantize.c - Pillow's median-cut palette and palette mapping, as
 * ImageQuantize runs them (quantize.h). Each piece follows the Pillow 9.4
 * function named in its comment step by step, including the order in which
 * its hash table and heap hand things out, since that order decides ties. */
#include "models/image/quantize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

typedef union qpix {
    struct {
        uint8_t r, g, b, a;
    } c;
    uint8_t v[4];
} qpix;

/* ---- QuantHash.c: chained buckets kept sorted, prime-ish sizes ---------------------------- */

typedef struct hnode {
    struct hnode *next;
    qpix key;
    uint32_t value;
} hnode;

typedef struct htable {
    hnode **table;
    uint32_t length, count;
    uint32_t scale; /* PixelHashData.scale */
    int failed;
} htable;

#define MIN_LENGTH 11
#define RESIZE_FACTOR 3

/* PIXEL_HASH of the pixel shifted right by the table's scale */
static uint32_t pixel_hash(const htable *h, qpix p) {
    uint32_t r = (uint32_t)(p.c.r >> h->scale), g = (uint32_t)(p.c.g >> h->scale), b = (uint32_t)(p.c.b >> h->scale);
    return (r * 463u) ^ ((g << 8) * 10069u) ^ ((b << 16) * 64997u);
}

/* pixel_cmp: keys compare by their hash values */
static int pixel_cmp(const htable *h, qpix a, qpix b) {
    uint32_t x = pixel_hash(h, a), y = pixel_hash(h, b);
    return x == y ? 0 : x < y ? -1 : 1;
}

/* _findPrime: its primality loop never rejects (`!start % t`), so this is the
 * first value from start, stepping dir, whose low four bits are 1, 3, 7, 9,
 * 11 or 13 */
static uint32_t find_prime(uint32_t start, int dir) {
    static const int unit[] = {0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0};
    while (start > 1 && !unit[start & 0x0f]) start += (uint32_t)dir;
    return start;
}

static int ht_init(htable *h) {
    memset(h, 0, sizeof *h);
    h->length = MIN_LENGTH;
    h->table = calloc(h->length, sizeof *h->table);
    return h->table ? 0 : -1;
}

static void ht_free(htable *h) {
    for (uint32_t i = 0; h->table && i < h->length; i++)
        for (hnode *n = h->table[i], *nn; n; n = nn) { nn = n->next; free(n); }
    free(h->table);
    h->table = NULL;
}

/* _hashtable_insert_node with resize = 0, update = 0; collide: rehash_collide */
static void insert_node(htable *h, hnode *node, int collide) {
    hnode **n = &h->table[pixel_hash(h, node->key) % h->length];
    for (; *n; n = &(*n)->next) {
        int i = pixel_cmp(h, (*n)->key, node->key);
        if (!i) {
            (*n)->key = node->key;
            if (collide) (*n)->value += node->value;
            else (*n)->value = node->value;
            free(node);
            return;
        }
        if (i > 0) break;
    }
    node->next = *n;
    *n = node;
    h->count++;
}

static void rehash(htable *h, int collide, uint32_t size) {
    hnode **old = h->table;
    uint32_t old_len = h->length;
    hnode **t = calloc(size, sizeof *t);
    if (!t) { h->failed = 1; return; }
    h->table = t;
    h->length = size;
    h->count = 0;
    for (uint32_t i = 0; i < old_len; i++)
        for (hnode *n = old[i], *nn; n; n = nn) { nn = n->next; insert_node(h, n, collide); }
    free(old);
}

static void resize(htable *h) {
    uint32_t size = h->length;
    if (h->count * RESIZE_FACTOR < h->length) size = find_prime(h->length / 2 - 1, -1);
    else if (h->length * RESIZE_FACTOR < h->count) size = find_prime(h->length * 2 + 1, +1);
    if (size < MIN_LENGTH) size = h->length;
    if (size != h->length) rehash(h, 0, size);
}

/* hashtable_insert_or_update_computed with new_count_func / exists_count_func */
static void count_pixel(htable *h, qpix key) {
    hnode **n = &h->table[pixel_hash(h, key) % h->length];
    for (; *n; n = &(*n)->next) {
        int i = pixel_cmp(h, (*n)->key, key);
        if (!i) { (*n)->value += 1; return; }
        if (i > 0) break;
    }
    hnode *t = malloc(sizeof *t);
    if (!t) { h->failed = 1; return; }
    t->key = key;
    t->value = 1;
    t->next = *n;
    *n = t;
    h->count++;
    resize(h);
}

/* hashtable_insert: an existing key keeps its key, takes the value */
static void ht_insert(htable *h, qpix key, uint32_t value) {
    hnode **n = &h->table[pixel_hash(h, key) % h->length];
    for (; *n; n = &(*n)->next) {
        int i = pixel_cmp(h, (*n)->key, key);
        if (!i) { (*n)->value = value; return; }
        if (i > 0) break;
    }
    hnode *t = malloc(sizeof *t);
    if (!t) { h->failed = 1; return; }
    t->key = key;
    t->value = value;
    t->next = *n;
    *n = t;
    h->count++;
    resize(h);
}

static int ht_lookup(const htable *h, qpix key, uint32_t *value) {
    for (hnode *n = h->table[pixel_hash(h, key) % h->length]; n; n = n->next) {
        int i = pixel_cmp(h, n->key, key);
        if (!i) { *value = n->value; return 1; }
        if (i > 0) break;
    }
    return 0;
}

/* ---- Quant.c: pixel lists and the median cut ---------------------------------------------- */

typedef struct plist {
    struct plist *next[3], *prev[3];
    qpix p;
    unsigned flag;
    int count;
} plist;

typedef struct box {
    struct box *l, *r;
    plist *head[3], *tail[3];
    int axis, volume;
    uint32_t pixel_count;
} box;

static int box_volume(box *b) {
    if (b->volume >= 0) return b->volume;
    if (!b->head[0]) return b->volume = 0;
    int rh = b->head[0]->p.c.r, rl = b->tail[0]->p.c.r, gh = b->head[1]->p.c.g, gl = b->tail[1]->p.c.g;
    int bh = b->head[2]->p.c.b, bl = b->tail[2]->p.c.b;
    return b->volume = (rh - rl + 1) * (gh - gl + 1) * (bh - bl + 1);
}

/* mergesort_pixels: descending along channel i; on equal values the second
 * half's element comes first */
static plist *merge_sort(plist *head, int i) {
    plist *c, *t, *a, *b, *p;
    if (!head || !head->next[i]) {
        if (head) head->next[i] = head->prev[i] = NULL;
        return head;
    }
    for (c = t = head; c && t; c = c->next[i], t = t->next[i] ? t->next[i]->next[i] : NULL)
        ;
    if (c) {
        if (c->prev[i]) c->prev[i]->next[i] = NULL;
        c->prev[i] = NULL;
    }
    a = merge_sort(head, i);
    b = merge_sort(c, i);
    head = NULL;
    p = NULL;
    while (a && b) {
        if (a->p.v[i] > b->p.v[i]) c = a, a = a->next[i];
        else c = b, b = b->next[i];
        c->prev[i] = p;
        c->next[i] = NULL;
        if (p) p->next[i] = c;
        p = c;
        if (!head) head = c;
    }
    if (a) c->next[i] = a, a->prev[i] = c;
    else if (b) c->next[i] = b, b->prev[i] = c;
    return head;
}

/* splitlists */
static void split_lists(plist *h[3], plist *t[3], plist *nh[2][3], plist *nt[2][3], uint32_t n_count[2], int axis,
                        uint32_t pixel_count) {
    plist *c, *l, *r, *n;
    uint32_t left = 0;
    int n_right = 0;
    n_count[0] = n_count[1] = 0;
    for (c = h[axis]; c;) {
        left += (uint32_t)c->count;
        n_count[0] += (uint32_t)c->count;
        c->flag = 0;
        c = c->next[axis];
        if (left * 2 > pixel_count) break;
    }
    if (c) {
        int split = c->prev[axis]->p.v[axis];
        for (; c; c = c->next[axis]) {
            if (split != c->p.v[axis]) break;
            c->flag = 0;
            n_count[0] += (uint32_t)c->count;
        }
    }
    for (; c; c = c->next[axis]) {
        c->flag = 1;
        n_right++;
        n_count[1] += (uint32_t)c->count;
    }
    if (!n_right) {
        int split = t[axis]->p.v[axis];
        for (c = t[axis]; c; c = c->prev[axis]) {
            if (split != c->p.v[axis]) break;
            c->flag = 1;
            n_count[0] -= (uint32_t)c->count;
            n_count[1] += (uint32_t)c->count;
        }
    }
    for (int i = 0; i < 3; i++) {
        l = r = NULL;
        nh[0][i] = nt[0][i] = nh[1][i] = nt[1][i] = NULL;
        for (c = h[i]; c; c = n) {
            n = c->next[i];
            if (c->flag) {
                if (r) r->next[i] = c;
                else nh[1][i] = c;
                c->prev[i] = r;
                r = c;
            } else {
                if (l) l->next[i] = c;
                else nh[0][i] = c;
                c->prev[i] = l;
                l = c;
            }
        }
        if (l) l->next[i] = NULL;
        if (r) r->next[i] = NULL;
        nt[0][i] = l;
        nt[1][i] = r;
    }
}

/* split: along the channel whose range, weighted 77 / 150 / 29, is widest */
static int split_box(box *node) {
    int f[3] = {(node->head[0]->p.c.r - node->tail[0]->p.c.r) * 77,
                (node->head[1]->p.c.g - node->tail[1]->p.c.g) * 150,
                (node->head[2]->p.c.b - node->tail[2]->p.c.b) * 29};
    int best = f[0], axis = 0;
    for (int i = 1; i < 3; i++)
        if (best < f[i]) best = f[i], axis = i;
    node->axis = axis;
    plist *heads[2][3], *tails[2][3];
    uint32_t counts[2];
    split_lists(node->head, node->tail, heads, tails, counts, axis, node->pixel_count);
    box *left = malloc(sizeof *left), *right = malloc(sizeof *right);
    if (!left || !right) { free(left); free(right); return -1; }
    for (int i = 0; i < 3; i++) {
        left->head[i] = heads[0][i], left->tail[i] = tails[0][i];
        right->head[i] = heads[1][i], right->tail[i] = tails[1][i];
        node->head[i] = node->tail[i] = NULL;
    }
    left->l = left->r = right->l = right->r = NULL;
    left->axis = right->axis = -1;
    left->volume = right->volume = -1;
    left->pixel_count = counts[0];
    right->pixel_count = counts[1];
    node->l = left;
    node->r = right;
    return 0;
}

/* QuantHeap.c: a 1-based binary max-heap on pixel counts */
typedef struct heap {
    box **v;
    unsigned size, count;
} heap;

static int heap_cmp(const box *a, const box *b) { return (int)a->pixel_count - (int)b->pixel_count; }

static int heap_add(heap *h, box *val) {
    if (h->count == h->size - 1) {
        box **v = calloc((size_t)h->size * 2, sizeof *v);
        if (!v) return -1;
        memcpy(v, h->v, sizeof *v * h->size);
        free(h->v);
        h->v = v;
        h->size *= 2;
    }
    unsigned k = ++h->count;
    while (k != 1) {
        if (heap_cmp(val, h->v[k / 2]) <= 0) break;
        h->v[k] = h->v[k / 2];
        k >>= 1;
    }
    h->v[k] = val;
    return 0;
}

static int heap_remove(heap *h, box **r) {
    if (!h->count) return 0;
    *r = h->v[1];
    box *v = h->v[h->count--];
    unsigned k, l;
    for (k = 1; k * 2 <= h->count; k = l) {
        l = k * 2;
        if (l < h->count && heap_cmp(h->v[l], h->v[l + 1]) < 0) l++;
        if (heap_cmp(v, h->v[l]) > 0) break;
        h->v[k] = h->v[l];
    }
    h->v[k] = v;
    return 1;
}

/* median_cut: the root box split (colors - 1) times, most pixels first */
static int median_cut(box *root, int colors) {
    heap hp = {calloc(256, sizeof(box *)), 256, 0};
    if (!hp.v || heap_add(&hp, root)) { free(hp.v); return -1; }
    int rc = 0;
    while (--colors && !rc) {
        box *b;
        int got;
        do got = heap_remove(&hp, &b);
        while (got && box_volume(b) == 1);
        if (!got) break;
        if (split_box(b) || heap_add(&hp, b->l) || heap_add(&hp, b->r)) rc = -1;
    }
    free(hp.v);
    return rc;
}

static void free_boxes(box *b) {
    if (!b) return;
    free_boxes(b->l);
    free_boxes(b->r);
    free(b);
}

/* annotate_hash_table: leaves in order, the colours of each mapped to its number */
static void annotate(box *b, htable *h, uint32_t *n) {
    if (b->l && b->r) {
        annotate(b->l, h, n);
        annotate(b->r, h, n);
        return;
    }
    for (plist *p = b->head[0]; p; p = p->next[0]) {
        qpix q = p->p;
        q.c.r = (uint8_t)(q.c.r << h->scale), q.c.g = (uint8_t)(q.c.g << h->scale), q.c.b = (uint8_t)(q.c.b << h->scale);
        ht_insert(h, q, *n);
    }
    if (b->head[0]) (*n)++;
}

int sd_quantize_palette(const uint8_t *rgb, size_t n, int colors, uint8_t palette[256 * 3], int *n_entries) {
    *n_entries = 0;
    if (colors < 1 || colors > 256 || n == 0) return -1;
    htable h;
    if (ht_init(&h)) return -1;
    /* create_pixel_hash */
    for (size_t i = 0; i < n && !h.failed; i++) {
        qpix p = {.c = {rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2], 255}};
        count_pixel(&h, p);
        while (!h.failed && h.count > 65536) {
            h.scale++;
            rehash(&h, 1, h.length);
        }
    }
    plist *nodes = h.failed ? NULL : calloc(h.count ? h.count : 1, sizeof *nodes);
    box *root = nodes ? calloc(1, sizeof *root) : NULL;
    uint32_t *sum = NULL;
    int rc = -1;
    if (!root) goto done;
    /* hash_to_list: bucket order, each pixel put in front */
    plist *hl[3] = {NULL, NULL, NULL};
    size_t k = 0;
    for (uint32_t b = 0; b < h.length; b++)
        for (hnode *e = h.table[b]; e; e = e->next) {
            plist *p = &nodes[k++];
            p->p = e->key;
            p->p.c.r = (uint8_t)(p->p.c.r >> h.scale), p->p.c.g = (uint8_t)(p->p.c.g >> h.scale);
            p->p.c.b = (uint8_t)(p->p.c.b >> h.scale);
            p->count = (int)e->value;
            for (int i = 0; i < 3; i++) {
                p->next[i] = hl[i];
                p->prev[i] = NULL;
                if (hl[i]) hl[i]->prev[i] = p;
                hl[i] = p;
            }
        }
    for (int i = 0; i < 3; i++) hl[i] = merge_sort(hl[i], i);
    for (int i = 0; i < 3; i++) {
        plist *t = hl[i];
        while (t && t->next[i]) t = t->next[i];
        root->head[i] = hl[i];
        root->tail[i] = t;
    }
    root->axis = root->volume = -1;
    root->pixel_count = (uint32_t)n;
    if (median_cut(root, colors)) goto done;
    uint32_t n_pal = 0;
    annotate(root, &h, &n_pal);
    if (h.failed || n_pal > 256) goto done;
    /* compute_palette_from_median_cut: each box's mean of the original pixels */
    sum = calloc((size_t)n_pal * 4, sizeof *sum);
    if (!sum) goto done;
    for (size_t i = 0; i < n; i++) {
        qpix p = {.c = {rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2], 255}};
        uint32_t e;
        if (!ht_lookup(&h, p, &e) || e >= n_pal) goto done;
        sum[e * 4] += p.c.r, sum[e * 4 + 1] += p.c.g, sum[e * 4 + 2] += p.c.b, sum[e * 4 + 3]++;
    }
    for (uint32_t e = 0; e < n_pal; e++)
        for (int c = 0; c < 3; c++)
            palette[e * 3 + c] = (uint8_t)(int)(.5 + (double)sum[e * 4 + c] / (double)sum[e * 4 + 3]);
    *n_entries = (int)n_pal;
    rc = 0;
done:
    free(sum);
    free_boxes(root);
    free(nodes);
    ht_free(&h);
    return rc;
}

/* ---- Palette.c / Convert.c: mapping to the palette ---------------------------------------- */

/* The palette entry ImagingPaletteCacheUpdate finds for (r, g, b): the
 * nearest to the corner of its 4x4x4 cache cell, lowest index on a tie. */
static int nearest(const uint8_t *pal, int n, int r, int g, int b) {
    int rq = r & ~3, gq = g & ~3, bq = b & ~3, best = 0;
    unsigned bd = ~0u;
    for (int i = 0; i < n; i++) {
        int dr = rq - pal[i * 3], dg = gq - pal[i * 3 + 1], db = bq - pal[i * 3 + 2];
        unsigned d = (unsigned)(dr * dr + dg * dg + db * db);
        if (d < bd) bd = d, best = i;
    }
    return best;
}

static int clip8(int v) { return v <= 0 ? 0 : v < 256 ? v : 255; }

/* normalized_bayer_matrix(n) in float32 as numpy computes it: m = q M, the
 * four blocks m - 1.5, m + 0.5, m + 1.5, m - 0.5, divided by q = 4^n */
static void bayer_matrix(int n, float *out) {
    out[0] = 0.0f;
    for (int k = 1, size = 1; k <= n; k++, size *= 2) {
        float q = (float)(1 << (2 * k));
        int s2 = size * 2;
        float *t = malloc(sizeof(float) * (size_t)(s2 * s2));
        if (!t) return;
        for (int y = 0; y < size; y++)
            for (int x = 0; x < size; x++) {
                float m = q * out[y * size + x];
                t[y * s2 + x] = (m - 1.5f) / q;
                t[y * s2 + x + size] = (m + 0.5f) / q;
                t[(y + size) * s2 + x] = (m + 1.5f) / q;
                t[(y + size) * s2 + x + size] = (m - 0.5f) / q;
            }
        memcpy(out, t, sizeof(float) * (size_t)(s2 * s2));
        free(t);
    }
}

int sd_quantize_map(const uint8_t *rgb, int64_t w, int64_t h, const uint8_t *palette, int n_entries,
                    sd_dither dither, int bayer_order, uint8_t *out) {
    if (n_entries < 1) return -1;
    if (dither == SD_DITHER_FLOYD_STEINBERG) {
        /* topalette's Floyd-Steinberg loop */
        int *errors = calloc((size_t)(w + 1) * 3, sizeof(int));
        if (!errors) return -1;
        for (int64_t y = 0; y < h; y++) {
            int r = 0, r0 = 0, r1 = 0, r2, g = 0, g0 = 0, g1 = 0, g2, b = 0, b0 = 0, b1 = 0, b2 = 0, d2;
            int *e = errors;
            for (int64_t x = 0; x < w; x++) {
                const uint8_t *in = rgb + (y * w + x) * 3;
                r = clip8(in[0] + (r + e[3 + 0]) / 16);
                g = clip8(in[1] + (g + e[3 + 1]) / 16);
                b = clip8(in[2] + (b + e[3 + 2]) / 16);
                int idx = nearest(palette, n_entries, r, g, b);
                uint8_t *o = out + (y * w + x) * 3;
                r -= palette[idx * 3], g -= palette[idx * 3 + 1], b -= palette[idx * 3 + 2];
                o[0] = palette[idx * 3], o[1] = palette[idx * 3 + 1], o[2] = palette[idx * 3 + 2];
                r2 = r; d2 = r + r; r += d2; e[0] = r + r0; r += d2; r0 = r + r1; r1 = r2; r += d2;
                g2 = g; d2 = g + g; g += d2; e[1] = g + g0; g += d2; g0 = g + g1; g1 = g2; g += d2;
                b2 = b; d2 = b + b; b += d2; e[2] = b + b0; b += d2; b0 = b + b1; b1 = b2; b += d2;
                e += 3;
            }
            /* as Pillow: the blue channel's carries for all three */
            e[0] = b0;
            e[1] = b1;
            e[2] = b2;
        }
        free(errors);
        return 0;
    }
    float *m = NULL;
    int size = 1;
    if (dither == SD_DITHER_BAYER) {
        int bn = 0;
        while ((1 << (bn + 1)) <= bayer_order) bn++; /* int(math.log2(order)) */
        size = 1 << bn;
        m = malloc(sizeof(float) * (size_t)(size * size));
        if (!m) return -1;
        bayer_matrix(bn, m);
        /* spread * matrix + 0.5 in float32, spread = 2 * 256 / colours */
        float spread = (float)(2.0 * 256 / n_entries);
        for (int i = 0; i < size * size; i++) {
            float t = spread * m[i];
            m[i] = t + 0.5f;
        }
    }
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            const uint8_t *in = rgb + (y * w + x) * 3;
            int c[3] = {in[0], in[1], in[2]};
            if (m) {
                float add = m[(y % size) * size + x % size];
                for (int k = 0; k < 3; k++) {
                    float v = (float)c[k] + add;
                    v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
                    c[k] = (int)v; /* .to(torch.uint8) truncates */
                }
            }
            int idx = nearest(palette, n_entries, c[0], c[1], c[2]);
            uint8_t *o = out + (y * w + x) * 3;
            o[0] = palette[idx * 3], o[1] = palette[idx * 3 + 1], o[2] = palette[idx * 3 + 2];
        }
    free(m);
    return 0;
}
