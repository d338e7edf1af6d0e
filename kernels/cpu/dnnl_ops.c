/* dnnl_ops.c - bf16 linear, batched matmul and conv2d through oneDNN
 * (dnnl_bf16.h has the contract: rounding, memory, threads).
 *
 * Each op rounds its activation to bf16 into the backend's reused buffers,
 * describes the problem to oneDNN (whose primitive cache makes a repeated
 * shape cheap), and runs it on the calling thread. Weights of linear and
 * conv let oneDNN pick their layout ("any": the blocked formats its AMX and
 * AVX512_BF16 kernels read) and are packed into it once (dnnl_pack.h);
 * convolutions let it pick the activations' layouts too and reorder into
 * and out of them (a reorder also does the f32 -> bf16 rounding of the
 * activation in the same pass). matmul's second operand is an activation
 * (attention) and is used as it is.
 */
#include "dnnl_bf16.h"
#include "dnnl_pack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SDFLOW_HAVE_DNNL

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

enum { BUF_SRC0, BUF_SRC, BUF_WEI0, BUF_WEI, BUF_DST, BUF_BIAS, N_BUF };

struct sd_dnnl {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    void *buf[N_BUF];
    size_t cap[N_BUF];
    sd_dnnl_pack *pack; /* packed weights (dnnl_pack.h) */
};

int sd_dnnl_compiled(void) { return 1; }

int sd_dnnl_native_bf16(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

/* oneDNN 2.6's bf16 convolution and matmul need AVX-512 (they emulate the
 * bf16 dot products without AVX512_BF16); below it they do not exist. */
int sd_dnnl_has_bf16(void) {
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & (unsigned)dnnl_cpu_isa_avx512_core) == (unsigned)dnnl_cpu_isa_avx512_core;
}

const char *sd_dnnl_isa_name(void) {
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "all";
    }
}

void sd_dnnl_free(struct sd_dnnl *d) {
    if (!d) return;
    sd_dnnl_pack_free(d->pack);
    if (d->stream) dnnl_stream_destroy(d->stream);
    if (d->eng) dnnl_engine_destroy(d->eng);
    for (int i = 0; i < N_BUF; i++) free(d->buf[i]);
    free(d);
}

/* The backend's oneDNN state, made on first use. NULL with the error set. */
static struct sd_dnnl *state(sd_backend *be, const char *op) {
    sd_cpu *c = be->impl;
    if (c->dnnl) return c->dnnl;
    struct sd_dnnl *d = calloc(1, sizeof *d);
    if (!d) {
        sd_backend_fail(be, SD_ERR_NOMEM, "%s (bf16): out of memory for the oneDNN state", op);
        return NULL;
    }
    /* packed weights may take half the physical memory (their stored
     * copies are paged out as they are packed, dnnl_pack.h) */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t budget = pages > 0 && page > 0 ? (size_t)pages * (size_t)page / 2 : (size_t)1 << 30;
    if (!(d->pack = sd_dnnl_pack_new(budget))) {
        free(d);
        sd_backend_fail(be, SD_ERR_NOMEM, "%s (bf16): out of memory for the oneDNN state", op);
        return NULL;
    }
    dnnl_status_t s = dnnl_engine_create(&d->eng, dnnl_cpu, 0);
    if (s == dnnl_success) s = dnnl_stream_create(&d->stream, d->eng, dnnl_stream_default_flags);
    if (s != dnnl_success) {
        sd_backend_fail(be, SD_ERR_INTERNAL, "%s (bf16): cannot create the oneDNN CPU engine: %s",
                        op, dnnl_status2str(s));
        sd_dnnl_free(d);
        return NULL;
    }
    c->dnnl = d;
    return d;
}

/* Buffer i with at least n bytes (contents undefined); NULL when out of memory. */
static void *buf(struct sd_dnnl *d, int i, size_t n) {
    if (d->cap[i] < n) {
        free(d->buf[i]);
        d->buf[i] = sd_cpu_alloc(n);
        d->cap[i] = d->buf[i] ? n : 0;
    }
    return d->buf[i];
}

/* Everything one op creates, destroyed together by op_end(). */
typedef struct {
    sd_backend *be;
    struct sd_dnnl *d;
    const char *op;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd[8]; /* conv: itself and up to three reorders */
    dnnl_primitive_t prim[8];
    dnnl_memory_t mem[16];
    int n_pd, n_prim, n_mem;
    int parallel; /* an OpenMP region with more than one thread ran */
    sd_status rc;
} op_ctx;

static int op_begin(op_ctx *o, sd_backend *be, const char *op) {
    memset(o, 0, sizeof *o);
    o->be = be;
    o->op = op;
    o->d = state(be, op);
    return o->d != NULL;
}

/* Small work runs on one OpenMP thread: a parallel region wakes the other
 * thread, which costs microseconds on an idle machine but a scheduler time
 * slice when another process holds that core (measured on the shared 2-core
 * VM: ~5 ms for a 8k-element reorder; the bf16 VAE golden test, 15k
 * primitive runs of mostly tiny tiles, took 86 s CPU). Below these sizes one
 * thread takes well under a millisecond anyway. */
#define SMALL_FLOPS 2e7                 /* matmul / conv */
#define SMALL_BYTES ((size_t)1 << 18)   /* reorder */

static int threads_for(const op_ctx *o, int small) { return small ? 1 : o->be->n_threads; }

/* libgomp's workers spin after each parallel region (GOMP_SPINCOUNT,
 * ~300k pause loops: milliseconds on this CPU) before they sleep, while our
 * pool already runs the next op on the same cores: perf showed 70 % of the
 * bf16 VAE golden test's CPU time in libgomp spin loops. OMP_WAIT_POLICY=
 * passive would stop it but is read when libgomp loads, before our code
 * runs; pausing the runtime after each op ends its threads instead (the
 * next op's region starts them again: tens of microseconds, against ops of
 * milliseconds). */
static void release_omp_threads(op_ctx *o) {
    if (o->parallel) omp_pause_resource_all(omp_pause_soft);
}

static sd_status op_end(op_ctx *o) {
    release_omp_threads(o);
    for (int i = 0; i < o->n_mem; i++) dnnl_memory_destroy(o->mem[i]);
    for (int i = 0; i < o->n_prim; i++) dnnl_primitive_destroy(o->prim[i]);
    for (int i = 0; i < o->n_pd; i++) dnnl_primitive_desc_destroy(o->pd[i]);
    if (o->attr) dnnl_primitive_attr_destroy(o->attr);
    return o->rc;
}

/* Records a failure; returns 0 so callers can `return fail(...)`-chain. */
static int dfail(op_ctx *o, const char *what, dnnl_status_t s) {
    o->rc = s == dnnl_out_of_memory ? SD_ERR_NOMEM : SD_ERR_INTERNAL;
    sd_backend_fail(o->be, o->rc, "%s (bf16): oneDNN %s failed: %s", o->op, what,
                    dnnl_status2str(s));
    return 0;
}

static int nomem(op_ctx *o, const char *what, size_t bytes) {
    o->rc = SD_ERR_NOMEM;
    sd_backend_fail(o->be, o->rc, "%s (bf16): out of memory for the %s (%zu bytes)", o->op, what,
                    bytes);
    return 0;
}

static dnnl_memory_t mem(op_ctx *o, const dnnl_memory_desc_t *md, void *p) {
    dnnl_memory_t m = NULL;
    dnnl_status_t s = dnnl_memory_create(&m, md, o->d->eng, p);
    if (s != dnnl_success) {
        dfail(o, "memory creation", s);
        return NULL;
    }
    o->mem[o->n_mem++] = m;
    return m;
}

/* Creates and runs the primitive of pd (owned by o) with the given args on
 * `threads` OpenMP threads (set before creation too: oneDNN's kernels size
 * their work split when a primitive is created). */
static int run(op_ctx *o, dnnl_primitive_desc_t pd, int nargs, const dnnl_exec_arg_t *args,
               const char *what, int threads) {
    omp_set_num_threads(threads);
    o->parallel |= threads > 1;
    dnnl_primitive_t p = NULL;
    dnnl_status_t s = dnnl_primitive_create(&p, pd);
    if (s != dnnl_success) return dfail(o, what, s);
    o->prim[o->n_prim++] = p;
    s = dnnl_primitive_execute(p, o->d->stream, nargs, args);
    if (s == dnnl_success) s = dnnl_stream_wait(o->d->stream);
    if (s != dnnl_success) return dfail(o, what, s);
    return 1;
}

/* dst (layout dmd) = src (layout smd), converting the data type. */
static int reorder(op_ctx *o, const dnnl_memory_desc_t *smd, void *src,
                   const dnnl_memory_desc_t *dmd, void *dst) {
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, smd, o->d->eng, dmd, o->d->eng, NULL);
    if (s != dnnl_success) return dfail(o, "reorder descriptor", s);
    o->pd[o->n_pd++] = pd;
    dnnl_memory_t ms = mem(o, smd, src), md = ms ? mem(o, dmd, dst) : NULL;
    if (!md) return 0;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
    return run(o, pd, 2, args, "reorder",
               threads_for(o, dnnl_memory_desc_get_size(dmd) < SMALL_BYTES));
}

/* t rounded to bf16: t's own data when it is BF16, else buffer i. */
static void *as_bf16(op_ctx *o, const sd_bt *t, int i, const char *what) {
    if (t->dtype == SD_BF16) return t->data;
    int64_t n = sd_bt_numel(t);
    uint16_t *p = buf(o->d, i, (size_t)n * 2);
    if (!p) {
        nomem(o, what, (size_t)n * 2);
        return NULL;
    }
    sd_bf16_round(sd_cpu_pool(o->be), t->dtype, t->data, p, n);
    return p;
}

/* The bias as F32 (biases are added in f32, as oneDNN allows for bf16). */
static float *bias_f32(op_ctx *o, const sd_bt *b) {
    if (b->dtype == SD_F32) return b->data;
    int64_t n = sd_bt_numel(b);
    float *p = buf(o->d, BUF_BIAS, (size_t)n * 4);
    if (!p) {
        nomem(o, "bias", (size_t)n * 4);
        return NULL;
    }
    sd_cpu_widen(b->dtype, b->data, p, n, sd_cpu_isa());
    return p;
}

void sd_dnnl_forget(struct sd_dnnl *d, const sd_bt *w) {
    if (d) sd_dnnl_pack_forget(d->pack, w);
}

size_t sd_dnnl_packed_bytes(struct sd_dnnl *d, size_t *count) {
    if (count) *count = 0;
    return d ? sd_dnnl_pack_held(d->pack, count) : 0;
}

void sd_dnnl_set_pack_budget(sd_backend *be, size_t bytes) {
    struct sd_dnnl *d = state(be, "pack budget");
    if (d) sd_dnnl_pack_set_budget(d->pack, bytes);
}

/* The weight w in the primitive's layout wp, where its plain layout is wu
 * (w's values as F32, which the reorder rounds, or as BF16, which we round
 * to first when w is stored otherwise). From
 * the pack cache, else rounded and reordered now: into memory the cache
 * then keeps (dnnl_pack.h says when), or into the reused buffer BUF_WEI
 * for this op only. NULL with the error recorded. */
static void *packed_weight(op_ctx *o, const sd_bt *w, const dnnl_memory_desc_t *wu,
                           const dnnl_memory_desc_t *wp) {
    void *pw = w->data;
    /* wu says bf16 for a weight stored otherwise: we round it first */
    int own_round = w->dtype != SD_BF16 && wu->data_type == dnnl_bf16;
    if (dnnl_memory_desc_equal(wp, wu) && w->dtype == SD_BF16) return pw; /* used as stored */
    void *hit = sd_dnnl_pack_find(o->d->pack, w, wp);
    if (hit) return hit;
    size_t n = dnnl_memory_desc_get_size(wp);
    int keep = sd_dnnl_pack_room(o->d->pack, w, n);
    /* a kept copy is exactly its size (sd_cpu_alloc would round one of
     * 2 MiB and more up to whole huge pages: ~1 MiB lost per weight) */
    void *dst = keep ? aligned_alloc(64, (n + 63) & ~(size_t)63) : buf(o->d, BUF_WEI, n);
    if (!dst) return nomem(o, "packed bf16 weight", n), NULL;
    if (dnnl_memory_desc_equal(wp, wu)) { /* plain layout: the rounding is the packing */
        sd_bf16_round(sd_cpu_pool(o->be), w->dtype, w->data, dst, sd_bt_numel(w));
    } else {
        if (own_round && !(pw = as_bf16(o, w, BUF_WEI0, "bf16 weight"))) {
            if (keep) free(dst);
            return NULL;
        }
        if (!reorder(o, wu, pw, wp, dst)) {
            if (keep) free(dst);
            return NULL;
        }
    }
    if (keep && !sd_dnnl_pack_put(o->d->pack, w, wp, dst, n))
        return nomem(o, "packed bf16 weight", n), NULL;
    return dst;
}

/* out [B, M, N] = alpha * A [B, M, K] @ W, W [Bw, K, N] (Bw 1 or B) stored
 * as [Bw, K, N] or, when w_nk, [Bw, N, K]; + bias [N] when given. A
 * weight (pack) is packed into the primitive's layout once (dnnl_pack.h);
 * otherwise W is an activation, rounded per op and used in its layout. */
static sd_status mm(sd_backend *be, const char *op, int64_t B, int64_t Bw, int64_t M, int64_t K,
                    int64_t N, const sd_bt *a, const sd_bt *w, int w_nk, const sd_bt *bias,
                    float alpha, float *out, int pack) {
    op_ctx o;
    if (!op_begin(&o, be, op)) return be->err.code;
    void *pa = as_bf16(&o, a, BUF_SRC, "bf16 input");
    void *pw = pa && !pack ? as_bf16(&o, w, BUF_WEI, "bf16 weight") : NULL;
    float *pb = pa && bias ? bias_f32(&o, bias) : NULL;
    if (!pa || (!pack && !pw) || (bias && !pb)) return op_end(&o);

    dnnl_memory_desc_t amd, wmd, wany, bmd, dmd;
    dnnl_dims_t ad = {B, M, K}, wd = {Bw, K, N}, bd = {1, 1, N}, dd = {B, M, N};
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(&amd, 3, ad, dnnl_bf16, dnnl_abc);
    if (s == dnnl_success)
        s = dnnl_memory_desc_init_by_tag(&wmd, 3, wd, dnnl_bf16, w_nk ? dnnl_acb : dnnl_abc);
    if (s == dnnl_success)
        s = dnnl_memory_desc_init_by_tag(&wany, 3, wd, dnnl_bf16, dnnl_format_tag_any);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&bmd, 3, bd, dnnl_f32, dnnl_abc);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&dmd, 3, dd, dnnl_f32, dnnl_abc);
    dnnl_matmul_desc_t desc;
    if (s == dnnl_success)
        s = dnnl_matmul_desc_init(&desc, &amd, pack ? &wany : &wmd, bias ? &bmd : NULL, &dmd);
    if (s != dnnl_success) return dfail(&o, "matmul description", s), op_end(&o);
    if (alpha != 1.0f) {
        s = dnnl_primitive_attr_create(&o.attr);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_output_scales(o.attr, 1, 0, &alpha);
        if (s != dnnl_success) return dfail(&o, "output scale attribute", s), op_end(&o);
    }
    int threads = threads_for(&o, 2.0 * B * M * N * K < SMALL_FLOPS);
    omp_set_num_threads(threads);
    dnnl_primitive_desc_t pd = NULL;
    s = dnnl_primitive_desc_create(&pd, &desc, o.attr, o.d->eng, NULL);
    if (s != dnnl_success) return dfail(&o, "matmul primitive descriptor", s), op_end(&o);
    o.pd[o.n_pd++] = pd;
    const dnnl_memory_desc_t *wp = pack ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0)
                                        : &wmd;
    if (pack && !(pw = packed_weight(&o, w, &wmd, wp))) return op_end(&o);
    dnnl_memory_t ma = mem(&o, &amd, pa), mw = ma ? mem(&o, wp, pw) : NULL;
    dnnl_memory_t md = mw ? mem(&o, &dmd, out) : NULL;
    dnnl_memory_t mb = md && bias ? mem(&o, &bmd, pb) : NULL;
    if (!md || (bias && !mb)) return op_end(&o);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md},
                               {DNNL_ARG_BIAS, mb}};
    run(&o, pd, bias ? 4 : 3, args, "matmul", threads);
    return op_end(&o);
}

sd_status sd_dnnl_linear(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                         const sd_bt *b) {
    int64_t K = w->shape[1], N = w->shape[0], M = K ? sd_bt_numel(x) / K : 0;
    if (M == 0 || N == 0) return SD_OK;
    if (K == 0) { /* an empty sum: y = b */
        float *y = out->data;
        for (int64_t i = 0; i < M; i++) {
            if (b) sd_cpu_widen(b->dtype, b->data, y + i * N, N, SD_ISA_SCALAR);
            else memset(y + i * N, 0, (size_t)N * sizeof *y);
        }
        return SD_OK;
    }
    return mm(be, "linear", 1, 1, M, K, N, x, w, 1, b, 1.0f, out->data, 1);
}

sd_status sd_dnnl_matmul(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int trans_b,
                         float alpha) {
    int64_t B = a->ndim == 3 ? a->shape[0] : 1, Bw = b->ndim == 3 ? b->shape[0] : 1;
    int64_t M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1];
    int64_t N = trans_b ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    if (B == 0 || M == 0 || N == 0) return SD_OK;
    if (K == 0) {
        memset(out->data, 0, out->nbytes);
        return SD_OK;
    }
    return mm(be, "matmul", B, Bw, M, K, N, a, b, trans_b, NULL, alpha, out->data, 0);
}

/* ---- attention -------------------------------------------------------------------- */

#define ATTN_SCORES ((size_t)64 << 20) /* at most, bytes of f32 scores per query block */

typedef struct {
    float *S;          /* [N, H, rows, Lk] scores, then probabilities */
    uint16_t *P;       /* the same rounded to bf16 */
    const float *bias; /* at query row q0 */
    int64_t H, rows, Lk, q0, bst[3];
    int causal;
} softmax_job;

/* Rows of (n, h): bias, causal mask, softmax in f32, then bf16. */
static void softmax_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const softmax_job *j = ctx;
    int64_t n = t / j->H, h = t % j->H;
    for (int64_t i = 0; i < j->rows; i++) {
        float *row = j->S + (t * j->rows + i) * j->Lk;
        if (j->bias) {
            const float *br = j->bias + n * j->bst[0] + h * j->bst[1] + i * j->bst[2];
            for (int64_t c = 0; c < j->Lk; c++) row[c] += br[c];
        }
        if (j->causal)
            for (int64_t c = j->q0 + i + 1; c < j->Lk; c++) row[c] = -INFINITY;
        sd_cpu_softmax_row(row, j->Lk); /* an all -inf row becomes zeros */
        sd_bf16_round_row(row, j->P + (t * j->rows + i) * j->Lk, j->Lk);
    }
}

/* A 4-D [N, H, r, c] descriptor over strided memory. */
static int md4(op_ctx *o, dnnl_memory_desc_t *md, dnnl_data_type_t dt, int64_t N, int64_t H,
               int64_t r, int64_t c, int64_t sN, int64_t sH, int64_t sr, int64_t sc) {
    dnnl_dims_t d = {N, H, r, c}, st = {sN, sH, sr, sc};
    dnnl_status_t s = dnnl_memory_desc_init_by_strides(md, 4, d, dt, st);
    return s == dnnl_success ? 1 : dfail(o, "attention memory description", s);
}

/* dst = scale * src @ wei as a 4-D batched matmul on `threads` threads. */
static int bmm(op_ctx *o, const dnnl_memory_desc_t *src, void *ps, const dnnl_memory_desc_t *wei,
               void *pw, const dnnl_memory_desc_t *dst, void *pd_, float scale, int threads) {
    dnnl_matmul_desc_t desc;
    dnnl_status_t s = dnnl_matmul_desc_init(&desc, src, wei, NULL, dst);
    if (s != dnnl_success) return dfail(o, "attention matmul description", s);
    dnnl_primitive_attr_t attr = NULL;
    if (scale != 1.0f) {
        s = dnnl_primitive_attr_create(&attr);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale);
        if (s != dnnl_success) {
            if (attr) dnnl_primitive_attr_destroy(attr);
            return dfail(o, "attention scale attribute", s);
        }
    }
    omp_set_num_threads(threads);
    dnnl_primitive_desc_t pd = NULL;
    s = dnnl_primitive_desc_create(&pd, &desc, attr, o->d->eng, NULL);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success) return dfail(o, "attention matmul primitive descriptor", s);
    o->pd[o->n_pd++] = pd;
    dnnl_memory_t ms = mem(o, src, ps), mw = ms ? mem(o, wei, pw) : NULL;
    dnnl_memory_t md = mw ? mem(o, dst, pd_) : NULL;
    if (!md) return 0;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}};
    return run(o, pd, 3, args, "attention matmul", threads);
}

/* Releases what one query block's primitives made (op_ctx holds at most
 * 8 descriptors and 16 memories). */
static void block_end(op_ctx *o) {
    for (int i = 0; i < o->n_mem; i++) dnnl_memory_destroy(o->mem[i]);
    for (int i = 0; i < o->n_prim; i++) dnnl_primitive_destroy(o->prim[i]);
    for (int i = 0; i < o->n_pd; i++) dnnl_primitive_desc_destroy(o->pd[i]);
    o->n_mem = o->n_prim = o->n_pd = 0;
}

sd_status sd_dnnl_attention(sd_backend *be, sd_bt *out, const sd_bt *q, const sd_bt *k,
                            const sd_bt *v, const sd_attn_args *a) {
    int64_t N = q->shape[0], Lq = q->shape[1], Lk = k->shape[1], HD = q->shape[2];
    int64_t H = a->heads, D = HD / H, KD = k->shape[2];
    if (N == 0 || Lq == 0 || D == 0) return SD_OK;
    if (Lk == 0) { /* no keys: zeros */
        memset(out->data, 0, out->nbytes);
        return SD_OK;
    }
    op_ctx o;
    if (!op_begin(&o, be, "attention")) return be->err.code;
    sd_pool *pool = sd_cpu_pool(be);
    uint16_t *qb = as_bf16(&o, q, BUF_SRC0, "bf16 queries");
    uint16_t *kb = qb ? as_bf16(&o, k, BUF_SRC, "bf16 keys") : NULL;
    uint16_t *vb = kb ? as_bf16(&o, v, BUF_WEI0, "bf16 values") : NULL;
    if (!vb) return op_end(&o);
    /* query rows per block: the [N, H, rows, Lk] scores within ATTN_SCORES */
    int64_t per_row = N * H * Lk * (int64_t)sizeof(float);
    int64_t bq = (int64_t)ATTN_SCORES / per_row;
    if (bq > 256) bq = 256; /* rows per matmul: plenty for the kernels' blocking */
    if (bq < 1) bq = 1;
    if (bq > Lq) bq = Lq;
    float *S = buf(o.d, BUF_DST, (size_t)(per_row * bq));
    uint16_t *P = S ? buf(o.d, BUF_WEI, (size_t)(per_row / 2 * bq)) : NULL;
    if (!P) return nomem(&o, "attention scores", (size_t)(per_row * bq)), op_end(&o);
    const float *bias = a->bias ? a->bias->data : NULL;
    for (int64_t q0 = 0; q0 < Lq; q0 += bq) {
        int64_t rows = Lq - q0 < bq ? Lq - q0 : bq;
        int threads = threads_for(&o, 4.0 * N * H * rows * Lk * D < SMALL_FLOPS);
        dnnl_memory_desc_t mq, mk, ms, mp, mv, mo;
        int ok = md4(&o, &mq, dnnl_bf16, N, H, rows, D, Lq * HD, D, HD, 1) &&
                 md4(&o, &mk, dnnl_bf16, N, H, D, Lk, Lk * KD, D, 1, KD) &&
                 md4(&o, &ms, dnnl_f32, N, H, rows, Lk, H * rows * Lk, rows * Lk, Lk, 1) &&
                 md4(&o, &mp, dnnl_bf16, N, H, rows, Lk, H * rows * Lk, rows * Lk, Lk, 1) &&
                 md4(&o, &mv, dnnl_bf16, N, H, Lk, D, Lk * KD, D, KD, 1) &&
                 md4(&o, &mo, dnnl_f32, N, H, rows, D, Lq * HD, D, HD, 1);
        /* S = scale Q K^T */
        ok = ok && bmm(&o, &mq, qb + q0 * HD, &mk, kb, &ms, S, a->scale, threads);
        if (ok) {
            softmax_job j = {S, P, bias ? bias + q0 * a->bias_stride[2] : NULL, H, rows, Lk, q0,
                             {a->bias_stride[0], a->bias_stride[1], a->bias_stride[2]},
                             a->causal};
            sd_pool_run(pool, N * H, softmax_task, &j);
        }
        /* O = P V, straight into out's rows */
        ok = ok && bmm(&o, &mp, P, &mv, vb, &mo, (float *)out->data + q0 * HD, 1.0f, threads);
        block_end(&o);
        if (!ok) break;
    }
    return op_end(&o);
}

sd_status sd_dnnl_conv2d(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                         const sd_bt *b, int stride, int pad_h, int pad_w) {
    if (sd_bt_numel(out) == 0) return SD_OK;
    op_ctx o;
    if (!op_begin(&o, be, "conv2d")) return be->err.code;
    /* Our own rounding only where oneDNN's reorder cannot read the stored
     * dtype (F16, fp8); F32 and BF16 are rounded by the reorder itself. The
     * weight's rounding is part of its packing (packed_weight). */
    void *px = x->data;
    dnnl_data_type_t xt = x->dtype == SD_F32 ? dnnl_f32 : dnnl_bf16;
    dnnl_data_type_t wt = w->dtype == SD_F32 ? dnnl_f32 : dnnl_bf16;
    int xown = x->dtype != SD_F32 && x->dtype != SD_BF16;
    if (xown && !(px = as_bf16(&o, x, BUF_SRC0, "bf16 input"))) return op_end(&o);
    float *pb = b ? bias_f32(&o, b) : NULL;
    if (b && !pb) return op_end(&o);

    dnnl_dims_t xd = {x->shape[0], x->shape[1], x->shape[2], x->shape[3]};
    dnnl_dims_t wd = {w->shape[0], w->shape[1], w->shape[2], w->shape[3]};
    dnnl_dims_t od = {out->shape[0], out->shape[1], out->shape[2], out->shape[3]};
    dnnl_dims_t bd = {w->shape[0]}, st = {stride, stride}, pad = {pad_h, pad_w};
    /* Right/bottom padding oneDNN needs so that the output size matches
     * ours (floor division may leave input rows unread). */
    dnnl_dims_t padr = {(od[2] - 1) * stride + wd[2] - xd[2] - pad_h,
                        (od[3] - 1) * stride + wd[3] - xd[3] - pad_w};
    dnnl_memory_desc_t xu, wu, ou, bmd, xa, wa, oa;
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(&xu, 4, xd, xt, dnnl_nchw);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&wu, 4, wd, wt, dnnl_oihw);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&ou, 4, od, dnnl_f32, dnnl_nchw);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&xa, 4, xd, dnnl_bf16, dnnl_format_tag_any);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&wa, 4, wd, dnnl_bf16, dnnl_format_tag_any);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&oa, 4, od, dnnl_f32, dnnl_format_tag_any);
    dnnl_convolution_desc_t desc;
    if (s == dnnl_success)
        s = dnnl_convolution_forward_desc_init(&desc, dnnl_forward_inference,
                                               dnnl_convolution_direct, &xa, &wa,
                                               b ? &bmd : NULL, &oa, st, pad, padr);
    if (s != dnnl_success) return dfail(&o, "convolution description", s), op_end(&o);
    double flops = 2.0 * (double)sd_bt_numel(out) * (double)(wd[1] * wd[2] * wd[3]);
    int threads = threads_for(&o, flops < SMALL_FLOPS);
    omp_set_num_threads(threads);
    dnnl_primitive_desc_t pd = NULL;
    s = dnnl_primitive_desc_create(&pd, &desc, NULL, o.d->eng, NULL);
    if (s != dnnl_success) return dfail(&o, "convolution primitive descriptor", s), op_end(&o);
    o.pd[o.n_pd++] = pd;
    const dnnl_memory_desc_t *xp = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *wp = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *op = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);

    /* Source and weights into the primitive's layouts (rounding to bf16). */
    void *xk = px, *wk, *ok = out->data;
    if (!dnnl_memory_desc_equal(xp, &xu)) {
        size_t n = dnnl_memory_desc_get_size(xp);
        if (!(xk = buf(o.d, BUF_SRC, n))) return nomem(&o, "bf16 input", n), op_end(&o);
        if (!reorder(&o, &xu, px, xp, xk)) return op_end(&o);
    }
    if (!(wk = packed_weight(&o, w, &wu, wp))) return op_end(&o);
    int dst_direct = dnnl_memory_desc_equal(op, &ou);
    if (!dst_direct) {
        size_t n = dnnl_memory_desc_get_size(op);
        if (!(ok = buf(o.d, BUF_DST, n))) return nomem(&o, "output", n), op_end(&o);
    }
    dnnl_memory_t mx = mem(&o, xp, xk), mw = mx ? mem(&o, wp, wk) : NULL;
    dnnl_memory_t mo = mw ? mem(&o, op, ok) : NULL;
    dnnl_memory_t mb = mo && b ? mem(&o, &bmd, pb) : NULL;
    if (!mo || (b && !mb)) return op_end(&o);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, mo},
                               {DNNL_ARG_BIAS, mb}};
    if (!run(&o, pd, b ? 4 : 3, args, "convolution", threads)) return op_end(&o);
    if (!dst_direct) reorder(&o, op, ok, &ou, out->data);
    return op_end(&o);
}

#else /* no oneDNN in this build */

int sd_dnnl_compiled(void) { return 0; }
int sd_dnnl_native_bf16(void) { return 0; }
void sd_dnnl_forget(struct sd_dnnl *d, const sd_bt *w) { (void)d, (void)w; }
size_t sd_dnnl_packed_bytes(struct sd_dnnl *d, size_t *count) {
    (void)d;
    if (count) *count = 0;
    return 0;
}
void sd_dnnl_set_pack_budget(sd_backend *be, size_t bytes) { (void)be, (void)bytes; }
int sd_dnnl_has_bf16(void) { return 0; }
const char *sd_dnnl_isa_name(void) { return "none"; }
void sd_dnnl_free(struct sd_dnnl *d) { (void)d; }

static sd_status no_path(sd_backend *be, const char *op) {
    return sd_backend_fail(be, SD_ERR_UNSUPPORTED,
                           "%s: this build has no bf16 CPU path (built without oneDNN); install "
                           "libdnnl-dev and reconfigure with -DSDFLOW_DNNL=ON, or use "
                           "--precision f32",
                           op);
}

sd_status sd_dnnl_linear(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                         const sd_bt *b) {
    return no_path(be, "linear");
}

sd_status sd_dnnl_matmul(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b, int trans_b,
                         float alpha) {
    return no_path(be, "matmul");
}

sd_status sd_dnnl_conv2d(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                         const sd_bt *b, int stride, int pad_h, int pad_w) {
    return no_path(be, "conv2d");
}

sd_status sd_dnnl_attention(sd_backend *be, sd_bt *out, const sd_bt *q, const sd_bt *k,
                            const sd_bt *v, const sd_attn_args *a) {
    return no_path(be, "attention");
}

#endif
