/* dnnl_pack.c - the cache of packed bf16 weights (dnnl_pack.h): a hash
 * table from the weight's sd_bt to its packed copy, under one mutex. */
#include "dnnl_pack.h"

#ifdef SDFLOW_HAVE_DNNL

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct entry {
    const sd_bt *w;
    dnnl_memory_desc_t md;
    void *data;
    size_t bytes;
    struct entry *next;
} entry;

struct sd_dnnl_pack {
    pthread_mutex_t mu;
    entry **slot;
    size_t n_slots, count, bytes, budget;
    int live; /* count != 0, read without the lock by forget's fast path */
};

sd_dnnl_pack *sd_dnnl_pack_new(size_t budget) {
    sd_dnnl_pack *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_slots = 256;
    p->slot = calloc(p->n_slots, sizeof *p->slot);
    if (!p->slot) {
        free(p);
        return NULL;
    }
    p->budget = budget;
    pthread_mutex_init(&p->mu, NULL);
    return p;
}

void sd_dnnl_pack_free(sd_dnnl_pack *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_slots; i++)
        for (entry *e = p->slot[i], *nx; e; e = nx) {
            nx = e->next;
            free(e->data);
            free(e);
        }
    free(p->slot);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static size_t slot_of(const sd_dnnl_pack *p, const sd_bt *w) {
    uint64_t h = (uint64_t)(uintptr_t)w * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (p->n_slots - 1);
}

static entry **find_locked(sd_dnnl_pack *p, const sd_bt *w) {
    entry **e = &p->slot[slot_of(p, w)];
    while (*e && (*e)->w != w) e = &(*e)->next;
    return e;
}

void *sd_dnnl_pack_find(sd_dnnl_pack *p, const sd_bt *w, const dnnl_memory_desc_t *md) {
    if (!__atomic_load_n(&p->live, __ATOMIC_ACQUIRE)) return NULL;
    pthread_mutex_lock(&p->mu);
    entry *e = *find_locked(p, w);
    void *data = e && dnnl_memory_desc_equal(&e->md, md) ? e->data : NULL;
    pthread_mutex_unlock(&p->mu);
    return data;
}

int sd_dnnl_pack_room(sd_dnnl_pack *p, const sd_bt *w, size_t bytes) {
    /* no larger than stored, but for the blocked formats' padding of odd
     * sizes: fp8 (twice the bytes as bf16) is never kept */
    if (bytes > w->nbytes + w->nbytes / 4) return 0;
    pthread_mutex_lock(&p->mu);
    entry *e = *find_locked(p, w);
    size_t held = p->bytes - (e ? e->bytes : 0);
    int ok = held <= p->budget && bytes <= p->budget - held;
    pthread_mutex_unlock(&p->mu);
    return ok;
}

/* The stored weight's whole pages go back to the kernel: a hint, never a
 * loss (MADV_PAGEOUT keeps the contents: clean file pages are re-read,
 * anonymous ones swapped or kept). Partial pages at the ends may hold a
 * neighbour's bytes and stay. Linux 5.4+; elsewhere nothing happens. */
static void page_out(const sd_bt *w) {
#ifdef MADV_PAGEOUT
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)w->data + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)w->data + w->nbytes) & ~(page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_PAGEOUT);
#else
    (void)w;
#endif
}

static void grow_locked(sd_dnnl_pack *p) {
    size_t n = p->n_slots * 2;
    entry **slot = calloc(n, sizeof *slot);
    if (!slot) return; /* longer chains, still correct */
    entry **old = p->slot;
    size_t n_old = p->n_slots;
    p->slot = slot;
    p->n_slots = n;
    for (size_t i = 0; i < n_old; i++)
        for (entry *e = old[i], *nx; e; e = nx) {
            nx = e->next;
            entry **s = &p->slot[slot_of(p, e->w)];
            e->next = *s;
            *s = e;
        }
    free(old);
}

int sd_dnnl_pack_put(sd_dnnl_pack *p, const sd_bt *w, const dnnl_memory_desc_t *md, void *data,
                     size_t bytes) {
    pthread_mutex_lock(&p->mu);
    entry **s = find_locked(p, w), *e = *s;
    if (!e) {
        if (!(e = calloc(1, sizeof *e))) {
            pthread_mutex_unlock(&p->mu);
            free(data);
            return 0;
        }
        e->w = w;
        e->next = *s;
        *s = e;
        p->count++;
    } else {
        free(e->data);
        p->bytes -= e->bytes;
    }
    e->md = *md;
    e->data = data;
    e->bytes = bytes;
    p->bytes += bytes;
    __atomic_store_n(&p->live, 1, __ATOMIC_RELEASE);
    if (p->count > p->n_slots) grow_locked(p);
    pthread_mutex_unlock(&p->mu);
    page_out(w);
    return 1;
}

void sd_dnnl_pack_forget(sd_dnnl_pack *p, const sd_bt *w) {
    if (!__atomic_load_n(&p->live, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&p->mu);
    entry **s = find_locked(p, w), *e = *s;
    if (e) {
        *s = e->next;
        p->bytes -= e->bytes;
        p->count--;
        free(e->data);
        free(e);
        if (p->count == 0) __atomic_store_n(&p->live, 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->mu);
}

size_t sd_dnnl_pack_held(sd_dnnl_pack *p, size_t *count) {
    pthread_mutex_lock(&p->mu);
    size_t b = p->bytes;
    if (count) *count = p->count;
    pthread_mutex_unlock(&p->mu);
    return b;
}

void sd_dnnl_pack_set_budget(sd_dnnl_pack *p, size_t budget) {
    pthread_mutex_lock(&p->mu);
    p->budget = budget;
    pthread_mutex_unlock(&p->mu);
}

#endif
