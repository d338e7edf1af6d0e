/* brownian.c - torchsde BrownianInterval (halfway tree) + numpy SeedSequence.
 * See brownian.h for what is reproduced and why. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpus.h"
#include "models/sampling/brownian.h"
#include "models/sampling/rng.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* ---- numpy.random.SeedSequence ------------------------------------------ */

#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_MULT_L 0xca01f9ddu
#define SS_MIX_MULT_R 0x4973f715u
#define SS_XSHIFT 16
#define SS_MAX_POOL 64
#define SS_MAX_WORDS 96

static uint32_t ss_hashmix(uint32_t value, uint32_t *hash_const)
{
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    value ^= value >> SS_XSHIFT;
    return value;
}

static uint32_t ss_mix(uint32_t x, uint32_t y)
{
    uint32_t r = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
    r ^= r >> SS_XSHIFT;
    return r;
}

/* numpy's _int_to_uint32_array: 32-bit words, least significant first; 0 is [0]. */
static int ss_int_words(uint64_t v, uint32_t *out)
{
    if (v == 0) {
        out[0] = 0;
        return 1;
    }
    int k = 0;
    while (v) {
        out[k++] = (uint32_t)(v & 0xffffffffu);
        v >>= 32;
    }
    return k;
}

void sd_seed_sequence_state(uint64_t entropy, const uint64_t *spawn_key, int n_spawn,
                            int pool_size, uint32_t *out, int n_words)
{
    uint32_t ent[SS_MAX_WORDS];
    int n_ent = ss_int_words(entropy, ent);
    if (pool_size > SS_MAX_POOL)
        pool_size = SS_MAX_POOL;
    if (n_spawn > 0) {
        /* numpy >= 1.19 pads the run entropy to the pool size when spawned */
        while (n_ent < pool_size)
            ent[n_ent++] = 0;
        for (int i = 0; i < n_spawn && n_ent + 2 <= SS_MAX_WORDS; i++)
            n_ent += ss_int_words(spawn_key[i], ent + n_ent);
    }
    uint32_t pool[SS_MAX_POOL];
    uint32_t hc = SS_INIT_A;
    for (int i = 0; i < pool_size; i++)
        pool[i] = ss_hashmix(i < n_ent ? ent[i] : 0u, &hc);
    for (int s = 0; s < pool_size; s++)
        for (int d = 0; d < pool_size; d++)
            if (s != d)
                pool[d] = ss_mix(pool[d], ss_hashmix(pool[s], &hc));
    for (int s = pool_size; s < n_ent; s++)
        for (int d = 0; d < pool_size; d++)
            pool[d] = ss_mix(pool[d], ss_hashmix(ent[s], &hc));
    uint32_t hb = SS_INIT_B;
    for (int i = 0; i < n_words; i++) {
        uint32_t v = pool[i % pool_size];
        v ^= hb;
        hb *= SS_MULT_B;
        v *= hb;
        v ^= v >> SS_XSHIFT;
        out[i] = v;
    }
}

/* ---- the tree -------------------------------------------------------------- */

#define BT_POOL 24
#define BT_MAX_DEPTH 200
#define BT_CACHE 64                       /* cached child pairs (LRU) */
#define BT_CACHE_BYTES (64u << 20)        /* ... within this much memory */

/* Cached increments of the two children of node (depth, key): [left, right].
 * Like torchsde's LRU cache it only saves work: values are deterministic. */
typedef struct bt_slot {
    int depth;
    uint64_t key;
    uint64_t stamp; /* 0 = empty */
    float *lr;      /* 2n floats */
} bt_slot;

/* A node whose split noise a query needs, drawn ahead of the (sequential)
 * bridge arithmetic so that the draws can run on several threads. */
typedef struct bt_job {
    int depth;
    uint64_t key;
    uint64_t entropy;
    int64_t n;
    float *noise; /* n floats */
} bt_job;

#define BT_MAX_JOBS 256
#define BT_PREFETCH_BYTES (128u << 20) /* noise buffers drawn ahead at most */
#define BT_PAR_MIN_N 4096              /* below this, threads cost more */

struct sd_brownian {
    uint64_t entropy;
    double start, end; /* rounded interval */
    int64_t n;
    float *w_root;
    float *noise; /* scratch for one randn draw */
    bt_slot cache[BT_CACHE];
    int cache_cap;
    uint64_t clock;
    int threads;        /* worker count for the prefetch, >= 1 */
    bt_job jobs[BT_MAX_JOBS];
    int njobs;
    float *job_mem;     /* noise storage of the jobs */
    int job_cap;        /* how many job buffers job_mem holds */
};

/* Python round(x, 6): correctly rounded, ties to even on the exact binary
 * value -- what glibc's printf does too. */
static double round6(double x)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.6f", x);
    return strtod(buf, NULL);
}

/* torch.randn(shape, generator=Generator().manual_seed(seed)) */
static sd_status bt_randn(sd_brownian *b, uint32_t seed, float *out, sd_error *err)
{
    sd_rng *r = sd_rng_new(seed);
    if (!r)
        return sd_error_set(err, SD_ERR_NOMEM, "brownian tree: out of memory");
    sd_rng_randn(r, out, b->n);
    sd_rng_free(r);
    return SD_OK;
}

sd_status sd_brownian_new(uint64_t seed, float sigma_min, float sigma_max, int ndim,
                          const int64_t *shape, sd_brownian **out, sd_error *err)
{
    *out = NULL;
    /* t0 == t1 is legal (a one-step schedule): every increment is then 0 */
    if (!(sigma_min > 0.0f) || !(sigma_max >= sigma_min) || isinf(sigma_max))
        return sd_error_set(err, SD_ERR_INVALID, "brownian tree: bad interval [%g, %g]",
                            (double)sigma_min, (double)sigma_max);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return sd_error_set(err, SD_ERR_INVALID, "brownian tree: bad shape");
        n *= shape[i];
    }
    /* the count the compute backends default to (SDFLOW_THREADS, else the
     * CPUs this process may use), so that the draws between steps keep to
     * the same CPUs as the steps */
    int ncpu;
    sd_status rc = sd_cpus_threads_default(&ncpu, err);
    if (rc != SD_OK) {
        sd_error_prefix(err, "brownian tree");
        return rc;
    }
    sd_brownian *b = calloc(1, sizeof *b);
    if (!b)
        return sd_error_set(err, SD_ERR_NOMEM, "brownian tree: out of memory");
    b->entropy = seed;
    b->n = n;
    b->threads = ncpu > 16 ? 16 : ncpu;
    size_t pair = (size_t)n * 2 * sizeof(float);
    b->cache_cap = (int)(BT_CACHE_BYTES / pair);
    if (b->cache_cap > BT_CACHE)
        b->cache_cap = BT_CACHE;
    double t0 = sigma_min, t1 = sigma_max;
    b->start = round6(t0);
    b->end = round6(t1);
    b->w_root = malloc((size_t)n * sizeof(float));
    b->noise = malloc((size_t)n * sizeof(float));
    if (!b->w_root || !b->noise) {
        sd_brownian_free(b);
        return sd_error_set(err, SD_ERR_NOMEM, "brownian tree: out of memory");
    }
    uint32_t st[3];
    sd_seed_sequence_state(seed, NULL, 0, BT_POOL, st, 3);
    sd_status s = bt_randn(b, st[0], b->w_root, err);
    if (s != SD_OK) {
        sd_brownian_free(b);
        return s;
    }
    float scale = (float)sqrt(t1 - t0); /* unrounded t0, t1 */
    for (int64_t k = 0; k < n; k++)
        b->w_root[k] = b->w_root[k] * scale;
    *out = b;
    return SD_OK;
}

void sd_brownian_free(sd_brownian *b)
{
    if (!b)
        return;
    for (int i = 0; i < BT_CACHE; i++)
        free(b->cache[i].lr);
    free(b->job_mem);
    free(b->w_root);
    free(b->noise);
    free(b);
}

/* Increments of the node (depth, key) = [s, e] with increment w, restricted
 * to [ta, tb], accumulated into acc left to right (*first: acc not yet set). */
static sd_status bt_collect(sd_brownian *b, int depth, uint64_t key, double s, double e,
                            const float *w, double ta, double tb, float *acc, int *first,
                            sd_error *err)
{
    if (ta == s && tb == e) {
        if (*first) {
            memcpy(acc, w, (size_t)b->n * sizeof(float));
            *first = 0;
        } else {
            for (int64_t k = 0; k < b->n; k++)
                acc[k] = acc[k] + w[k];
        }
        return SD_OK;
    }
    if (depth >= BT_MAX_DEPTH)
        return sd_error_set(err, SD_ERR_INTERNAL, "brownian tree: query [%.9g, %.9g] too deep",
                            ta, tb);
    double m = round6(0.5 * (e + s));
    if (!(m > s && m < e)) /* cannot split further: interval below the 1e-6 grid */
        return sd_error_set(err, SD_ERR_INTERNAL, "brownian tree: cannot split [%.9g, %.9g]",
                            s, e);
    float *lw = malloc((size_t)b->n * 2 * sizeof(float));
    if (!lw)
        return sd_error_set(err, SD_ERR_NOMEM, "brownian tree: out of memory");
    float *rw = lw + b->n;
    sd_status st = SD_OK;
    bt_slot *hit = NULL, *lru = NULL;
    for (int i = 0; i < b->cache_cap; i++) {
        bt_slot *c = &b->cache[i];
        if (c->stamp && c->depth == depth && c->key == key) {
            hit = c;
            break;
        }
        if (!lru || c->stamp < lru->stamp)
            lru = c;
    }
    if (hit) {
        hit->stamp = ++b->clock;
        memcpy(lw, hit->lr, (size_t)b->n * 2 * sizeof(float));
    } else {
        const float *noise = NULL;
        for (int j = 0; j < b->njobs; j++)
            if (b->jobs[j].depth == depth && b->jobs[j].key == key && b->jobs[j].noise) {
                noise = b->jobs[j].noise;
                break;
            }
        if (!noise) {
            /* This node's seeds: SeedSequence(entropy, spawn_key=(key, depth)). */
            uint64_t sk[2] = {key, (uint64_t)depth};
            uint32_t seeds[4];
            sd_seed_sequence_state(b->entropy, sk, 2, BT_POOL, seeds, 4);
            st = bt_randn(b, seeds[0], b->noise, err);
            if (st != SD_OK) {
                free(lw);
                return st;
            }
            noise = b->noise;
        }
        double h_rec = 1.0 / (e - s);
        double left_diff = m - s, right_diff = e - m;
        float f_left = (float)left_diff, f_hrec = (float)h_rec;
        float f_std = (float)sqrt(left_diff * right_diff * h_rec);
        for (int64_t k = 0; k < b->n; k++) {
            float mean = f_left * w[k];
            mean = mean * f_hrec;
            float t = f_std * noise[k];
            lw[k] = mean + t;
            rw[k] = w[k] - lw[k];
        }
        if (lru) {
            if (!lru->lr)
                lru->lr = malloc((size_t)b->n * 2 * sizeof(float));
            if (lru->lr) { /* no memory for the cache only costs speed */
                memcpy(lru->lr, lw, (size_t)b->n * 2 * sizeof(float));
                lru->depth = depth;
                lru->key = key;
                lru->stamp = ++b->clock;
            }
        }
    }
    if (tb <= m)
        st = bt_collect(b, depth + 1, 2 * key, s, m, lw, ta, tb, acc, first, err);
    else if (ta >= m)
        st = bt_collect(b, depth + 1, 2 * key + 1, m, e, rw, ta, tb, acc, first, err);
    else {
        st = bt_collect(b, depth + 1, 2 * key, s, m, lw, ta, m, acc, first, err);
        if (st == SD_OK)
            st = bt_collect(b, depth + 1, 2 * key + 1, m, e, rw, m, tb, acc, first, err);
    }
    free(lw);
    return st;
}

static int bt_cached(const sd_brownian *b, int depth, uint64_t key)
{
    for (int i = 0; i < b->cache_cap; i++)
        if (b->cache[i].stamp && b->cache[i].depth == depth && b->cache[i].key == key)
            return 1;
    return 0;
}

/* The nodes bt_collect will split for [ta, tb] and does not have cached. */
static void bt_plan(sd_brownian *b, int depth, uint64_t key, double s, double e, double ta,
                    double tb)
{
    if ((ta == s && tb == e) || depth >= BT_MAX_DEPTH)
        return;
    double m = round6(0.5 * (e + s));
    if (!(m > s && m < e))
        return;
    if (!bt_cached(b, depth, key) && b->njobs < BT_MAX_JOBS) {
        bt_job *j = &b->jobs[b->njobs++];
        j->depth = depth;
        j->key = key;
        j->entropy = b->entropy;
        j->n = b->n;
        j->noise = NULL;
    }
    if (tb <= m)
        bt_plan(b, depth + 1, 2 * key, s, m, ta, tb);
    else if (ta >= m)
        bt_plan(b, depth + 1, 2 * key + 1, m, e, ta, tb);
    else {
        bt_plan(b, depth + 1, 2 * key, s, m, ta, m);
        bt_plan(b, depth + 1, 2 * key + 1, m, e, m, tb);
    }
}

typedef struct bt_worker {
    bt_job *jobs;
    int first, count, stride;
    int failed;
} bt_worker;

static void *bt_work(void *arg)
{
    bt_worker *w = arg;
    for (int i = w->first; i < w->count; i += w->stride) {
        bt_job *j = &w->jobs[i];
        uint64_t sk[2] = {j->key, (uint64_t)j->depth};
        uint32_t seeds[4];
        sd_seed_sequence_state(j->entropy, sk, 2, BT_POOL, seeds, 4);
        sd_rng *r = sd_rng_new(seeds[0]);
        if (!r) {
            w->failed = 1;
            continue;
        }
        sd_rng_randn(r, j->noise, j->n);
        sd_rng_free(r);
    }
    return NULL;
}

/* Draws the planned nodes' noise on up to b->threads threads. Anything that
 * cannot be prefetched (memory, thread creation) is left for bt_collect to
 * draw itself, so failures here only cost speed. */
static void bt_prefetch(sd_brownian *b)
{
    int nj = b->njobs;
    if (nj < 2 || b->threads < 2 || b->n < BT_PAR_MIN_N)
        return;
    int cap = (int)(BT_PREFETCH_BYTES / ((size_t)b->n * sizeof(float)));
    if (cap < 2)
        return;
    if (nj > cap)
        nj = cap;
    if (b->job_cap < nj) {
        float *mem = realloc(b->job_mem, (size_t)nj * (size_t)b->n * sizeof(float));
        if (!mem)
            return;
        b->job_mem = mem;
        b->job_cap = nj;
    }
    for (int i = 0; i < nj; i++)
        b->jobs[i].noise = b->job_mem + (size_t)i * (size_t)b->n;
    int nt = b->threads < nj ? b->threads : nj;
    bt_worker w[16];
    pthread_t tid[16];
    int started[16] = {0};
    for (int t = 0; t < nt; t++)
        w[t] = (bt_worker){b->jobs, t, nj, nt, 0};
    for (int t = 1; t < nt; t++)
        started[t] = pthread_create(&tid[t], NULL, bt_work, &w[t]) == 0;
    bt_work(&w[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            bt_work(&w[t]); /* no thread: do its share here */
    }
    for (int t = 0; t < nt; t++)
        if (w[t].failed) /* an allocation failed: draw all of them again inline */
            for (int i = 0; i < nj; i++)
                b->jobs[i].noise = NULL;
    for (int i = nj; i < b->njobs; i++)
        b->jobs[i].noise = NULL;
}

void sd_brownian_set_threads(sd_brownian *b, int threads)
{
    if (b)
        b->threads = threads < 1 ? 1 : threads > 16 ? 16 : threads;
}

sd_status sd_brownian_increment(sd_brownian *b, double ta, double tb, float *out, int64_t n,
                                sd_error *err)
{
    if (n != b->n)
        return sd_error_set(err, SD_ERR_INVALID, "brownian tree: %lld values asked, tree has %lld",
                            (long long)n, (long long)b->n);
    /* torchsde clamps (with a warning) into [start, end] */
    if (ta < b->start)
        ta = b->start;
    if (tb < b->start)
        tb = b->start;
    if (ta > b->end)
        ta = b->end;
    if (tb > b->end)
        tb = b->end;
    if (ta > tb)
        return sd_error_set(err, SD_ERR_INVALID, "brownian tree: query times %g > %g", ta, tb);
    if (ta == tb) {
        memset(out, 0, (size_t)n * sizeof(float));
        return SD_OK;
    }
    ta = round6(ta);
    tb = round6(tb);
    if (ta == tb) {
        memset(out, 0, (size_t)n * sizeof(float));
        return SD_OK;
    }
    b->njobs = 0;
    bt_plan(b, 0, 0, b->start, b->end, ta, tb);
    bt_prefetch(b);
    int first = 1;
    sd_status st = bt_collect(b, 0, 0, b->start, b->end, b->w_root, ta, tb, out, &first, err);
    b->njobs = 0;
    return st;
}

sd_status sd_brownian_noise(sd_brownian *b, float sigma, float sigma_next, float *out,
                            int64_t n, sd_error *err)
{
    float lo = sigma, hi = sigma_next;
    int sign = 1;
    if (!(lo < hi)) {
        lo = sigma_next;
        hi = sigma;
        sign = -1;
    }
    sd_status st = sd_brownian_increment(b, lo, hi, out, n, err);
    if (st != SD_OK)
        return st;
    float diff = sigma_next - sigma;
    float den = sqrtf(fabsf(diff));
    for (int64_t k = 0; k < n; k++) {
        float v = sign < 0 ? -out[k] : out[k];
        out[k] = v / den;
    }
    return SD_OK;
}
