/* cuda_alloc.c - caching device allocator by size class.
 *
 * cudaMalloc/cudaFree synchronise the device and cost tens of microseconds,
 * and a diffusion step allocates the same activation sizes again and
 * again. Sizes round up to classes of m * 2^e bytes, m in {4..7} (at most
 * 25% slack); freed blocks wait on a per-class list and are reused. Live
 * blocks are found by address in a hash table that also counts references
 * (views share their source's block). Not thread-safe: one backend is used
 * by one thread at a time, like the CPU backend. */
#include "kernels/cuda/cuda_impl.h"

#include <stdint.h>
#include <stdlib.h>

#define N_CLASSES 256
#define MIN_BLOCK 512

typedef struct blk {
    void *ptr;
    size_t size; /* class size */
    int cls, refs;
    struct blk *next; /* free list or hash chain */
} blk;

struct sd_cuda_alloc {
    blk *free_list[N_CLASSES];
    blk **table; /* live blocks by address, chained */
    size_t n_buckets, n_live;
    size_t live_bytes, cached_bytes;
    size_t limit; /* cap on live + cached bytes (--gpu-memory); 0 = none */
};

/* Smallest class size >= n and its index. */
static size_t class_of(size_t n, int *cls) {
    if (n < MIN_BLOCK) n = MIN_BLOCK;
    int e = 63 - __builtin_clzll((unsigned long long)n) - 2; /* n / 2^e in [4, 8) */
    size_t m = (n + ((size_t)1 << e) - 1) >> e;
    if (m > 7) {
        e++;
        m = 4;
    }
    *cls = e * 4 + (int)(m - 4);
    return m << e;
}

static size_t hash_ptr(const void *p, size_t n) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)(h & (n - 1));
}

static int table_grow(sd_cuda_alloc *a) {
    size_t nb = a->n_buckets ? a->n_buckets * 2 : 1024;
    blk **t = calloc(nb, sizeof *t);
    if (!t) return 0;
    for (size_t i = 0; i < a->n_buckets; i++)
        for (blk *b = a->table[i], *next; b; b = next) {
            next = b->next;
            size_t h = hash_ptr(b->ptr, nb);
            b->next = t[h];
            t[h] = b;
        }
    free(a->table);
    a->table = t;
    a->n_buckets = nb;
    return 1;
}

static blk *table_find(const sd_cuda_alloc *a, const void *p, blk ***link) {
    if (!a->n_buckets) return NULL;
    blk **l = &a->table[hash_ptr(p, a->n_buckets)];
    for (; *l; l = &(*l)->next)
        if ((*l)->ptr == p) {
            if (link) *link = l;
            return *l;
        }
    return NULL;
}

sd_cuda_alloc *sd_cuda_alloc_new(void) {
    sd_cuda_alloc *a = calloc(1, sizeof *a);
    if (a && !table_grow(a)) {
        free(a);
        return NULL;
    }
    return a;
}

void sd_cuda_alloc_trim(sd_cuda_alloc *a) {
    for (int c = 0; c < N_CLASSES; c++) {
        for (blk *b = a->free_list[c], *next; b; b = next) {
            next = b->next;
            cudaFree(b->ptr);
            free(b);
        }
        a->free_list[c] = NULL;
    }
    a->cached_bytes = 0;
}

void sd_cuda_alloc_free(sd_cuda_alloc *a) {
    if (!a) return;
    sd_cuda_alloc_trim(a);
    for (size_t i = 0; i < a->n_buckets; i++)
        for (blk *b = a->table[i], *next; b; b = next) {
            next = b->next;
            cudaFree(b->ptr);
            free(b);
        }
    free(a->table);
    free(a);
}

void *sd_cuda_alloc_get(sd_cuda_alloc *a, size_t n, cudaError_t *cerr) {
    *cerr = cudaSuccess;
    int cls;
    size_t size = class_of(n, &cls);
    if (cls < 0 || cls >= N_CLASSES) {
        *cerr = cudaErrorMemoryAllocation;
        return NULL;
    }
    if (a->n_live + 1 > a->n_buckets && !table_grow(a)) {
        *cerr = cudaErrorMemoryAllocation;
        return NULL;
    }
    blk *b = a->free_list[cls];
    if (b) {
        a->free_list[cls] = b->next;
        a->cached_bytes -= b->size;
    } else {
        /* The cap counts what this allocator holds from the device: past
         * it, the cache goes first, then the allocation fails as an
         * out-of-memory (the message names the cap, cuda_backend.c). */
        if (a->limit && a->live_bytes + a->cached_bytes + size > a->limit) {
            sd_cuda_alloc_trim(a);
            if (a->live_bytes + size > a->limit) {
                *cerr = cudaErrorMemoryAllocation;
                return NULL;
            }
        }
        b = calloc(1, sizeof *b);
        if (!b) {
            *cerr = cudaErrorMemoryAllocation;
            return NULL;
        }
        cudaError_t e = cudaMalloc(&b->ptr, size);
        if (e == cudaErrorMemoryAllocation && a->cached_bytes) {
            cudaGetLastError(); /* clear it; retry with the cache released */
            sd_cuda_alloc_trim(a);
            e = cudaMalloc(&b->ptr, size);
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            free(b);
            *cerr = e;
            return NULL;
        }
        b->size = size;
        b->cls = cls;
    }
    b->refs = 1;
    size_t h = hash_ptr(b->ptr, a->n_buckets);
    b->next = a->table[h];
    a->table[h] = b;
    a->n_live++;
    a->live_bytes += b->size;
    return b->ptr;
}

void sd_cuda_alloc_ref(sd_cuda_alloc *a, void *p) {
    blk *b = table_find(a, p, NULL);
    if (b) b->refs++;
}

void sd_cuda_alloc_put(sd_cuda_alloc *a, void *p) {
    if (!p) return;
    blk **link = NULL;
    blk *b = table_find(a, p, &link);
    if (!b || --b->refs > 0) return;
    *link = b->next;
    a->n_live--;
    a->live_bytes -= b->size;
    b->next = a->free_list[b->cls];
    a->free_list[b->cls] = b;
    a->cached_bytes += b->size;
}

void sd_cuda_alloc_set_limit(sd_cuda_alloc *a, size_t bytes) { a->limit = bytes; }
size_t sd_cuda_alloc_limit(const sd_cuda_alloc *a) { return a->limit; }

void sd_cuda_alloc_stats(const sd_cuda_alloc *a, size_t *live, size_t *cached) {
    if (live) *live = a->live_bytes;
    if (cached) *cached = a->cached_bytes;
}
