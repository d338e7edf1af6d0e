/* threadpool.h - the one pthread pool the CPU kernels share (internal).
 *
 * A pool of n-1 worker threads plus the calling thread. sd_pool_run() hands
 * out task indices 0..n_tasks-1 dynamically (an atomic counter) and returns
 * when all tasks are done, so kernels write "for each task" bodies and never
 * manage threads. Concurrent sd_pool_run() calls from different threads are
 * serialised; a task must not call sd_pool_run() itself (it would deadlock).
 */
#ifndef SD_CPU_THREADPOOL_H
#define SD_CPU_THREADPOOL_H

#include <stdint.h>

typedef struct sd_pool sd_pool;

/* fn(ctx, task, thread): thread is 0..n_threads-1, stable within one task,
 * so a kernel can index per-thread scratch buffers with it. */
typedef void (*sd_pool_fn)(void *ctx, int64_t task, int thread);

/* n_threads >= 1. Returns NULL when threads cannot be created. */
sd_pool *sd_pool_new(int n_threads);
void sd_pool_free(sd_pool *p); /* NULL-safe; joins the workers */
int sd_pool_threads(const sd_pool *p);
/* Runs fn for every task in [0, n_tasks); serial when the pool has one
 * thread or there is a single task. */
void sd_pool_run(sd_pool *p, int64_t n_tasks, sd_pool_fn fn, void *ctx);

#endif
