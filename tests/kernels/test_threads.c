/* test_threads.c - the CPU backend computes on at most n_threads threads.
 *
 * Three libraries could run threads for one op: our pool (threadpool.h),
 * OpenBLAS's own pool (Debian's pthread build starts one thread per core at
 * load) and oneDNN's OpenMP team (bf16 primitives). cpu.h and dnnl_bf16.h
 * say only one runs at a time, n_threads wide. This test checks that from
 * the kernel's per-thread accounting, never from timing, so a loaded machine
 * cannot make it pass or fail:
 *
 * - every thread the process creates goes through our pthread_create (the
 *   executable's definition interposes libc's for OpenBLAS and libgomp too),
 *   which records its kernel thread id and the phase it was created in;
 * - before an op, we wait until every thread but this one sleeps (OpenBLAS's
 *   threads spin for a while after they start), then read each thread's run
 *   time and context switches from /proc/self/task; after the op, a thread
 *   "ran" if any of them moved (a thread cannot run without that);
 * - f32 ops (linear, 3x3 conv, attention): the threads that ran are this one
 *   and the pool's n_threads - 1 workers, nothing else (no OpenBLAS thread),
 *   and no thread is created;
 * - a bf16 linear, conv and attention on oneDNN's primitives (when the build and CPU
 *   have them): besides this thread and the pool's workers (which round the
 *   input before the primitive runs), at most n_threads - 1 OpenMP workers
 *   are created, none at n_threads = 1, and every one of them is gone after
 *   the op (released, not spinning beside the next op's pool: dnnl_ops.c).
 *   The only bound on time is a 60 s cap on that last wait, for a condition
 *   that takes microseconds when the code is right and never happens when it
 *   is wrong.
 * n_threads = 1 must run on this thread alone, pool and OpenBLAS included.
 * The OpenBLAS linked here is Debian's default pthread build; to check the
 * OpenMP one (blas_threads.h), unpack libopenblas0-openmp's .deb
 * (apt-get download; dpkg-deb -x) and run this test with LD_LIBRARY_PATH
 * set to its usr/lib/x86_64-linux-gnu/openblas-openmp.
 * And the default thread count (n_threads 0) follows the process's CPU set
 * and its cgroup's CPU quota (read from made-up files), or SDFLOW_THREADS;
 * ctest runs it again with OMP_PROC_BIND=true, where libgomp binds this
 * thread to one CPU as the program loads: the default count and the pool's
 * workers must still cover the process's CPUs.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/cpus.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/dnnl_bf16.h"
#include "testutil.h"

/* ---- every thread the process creates ------------------------------------ */

#define MAX_CREATED 4096
typedef struct {
    int tid;   /* kernel thread id, 0 until the thread has started */
    int phase; /* `phase` when pthread_create was called */
    int alive;
} created_t;

static created_t created[MAX_CREATED];
static int n_created; /* guarded by mu */
static int phase;     /* atomic; the test step that is running */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t exited = PTHREAD_COND_INITIALIZER; /* or started */
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

typedef struct {
    void *(*fn)(void *);
    void *arg;
    int slot;
} start_t;

static void on_exit_thread(void *p) {
    int slot = (int)(intptr_t)p - 1;
    pthread_mutex_lock(&mu);
    created[slot].alive = 0;
    pthread_cond_broadcast(&exited);
    pthread_mutex_unlock(&mu);
}

static void make_key(void) { pthread_key_create(&exit_key, on_exit_thread); }

/* Scalars, not a start_t copy on the stack: libgomp's threads leave by
 * pthread_exit, which skips this frame's epilogue, and ASan then finds the
 * redzones of a stack struct still poisoned when the thread is torn down. */
static void *trampoline(void *p) {
    void *(*fn)(void *) = ((start_t *)p)->fn;
    void *arg = ((start_t *)p)->arg;
    int slot = ((start_t *)p)->slot;
    free(p);
    pthread_mutex_lock(&mu);
    created[slot].tid = (int)syscall(SYS_gettid);
    pthread_cond_broadcast(&exited);
    pthread_mutex_unlock(&mu);
    /* the destructor runs on return and on pthread_exit (libgomp's way out) */
    pthread_setspecific(exit_key, (void *)(intptr_t)(slot + 1));
    return fn(arg);
}

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    static create_fn real;
    if (!real) real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
    if (!real) return EAGAIN;
    pthread_once(&key_once, make_key);
    start_t *s = malloc(sizeof *s);
    pthread_mutex_lock(&mu);
    int slot = n_created < MAX_CREATED ? n_created++ : -1;
    if (slot >= 0) created[slot] = (created_t){0, __atomic_load_n(&phase, __ATOMIC_RELAXED), 1};
    pthread_mutex_unlock(&mu);
    if (!s || slot < 0) { /* not recorded: the checks below then fail on it */
        free(s);
        return real(t, attr, fn, arg);
    }
    *s = (start_t){fn, arg, slot};
    int rc = real(t, attr, trampoline, s);
    if (rc != 0) {
        free(s);
        pthread_mutex_lock(&mu);
        created[slot].alive = 0;
        pthread_mutex_unlock(&mu);
    }
    return rc;
}

/* ---- per-thread accounting from /proc ------------------------------------ */

#define MAX_TASKS 1024
typedef struct {
    int tid;
    char state;
    unsigned long long run; /* schedstat ns + utime + stime + context switches */
} task_t;

static char *slurp(int tid, const char *what, char *buf, size_t n) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", tid, what);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t got = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[got] = 0;
    return buf;
}

/* One thread's state and a counter that grows whenever it runs; 0 when it
 * has exited meanwhile. */
static int read_task(int tid, task_t *t) {
    char buf[4096];
    t->tid = tid;
    t->run = 0;
    if (!slurp(tid, "stat", buf, sizeof buf)) return 0;
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    if (!p) return 0;
    char state;
    unsigned long long utime = 0, stime = 0;
    /* fields 3 (state) ... 14 utime, 15 stime */
    if (sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &state, &utime,
               &stime) != 3)
        return 0;
    t->state = state;
    t->run = utime + stime;
    if (slurp(tid, "schedstat", buf, sizeof buf)) {
        unsigned long long ns = 0;
        if (sscanf(buf, "%llu", &ns) == 1) t->run += ns;
    }
    if (slurp(tid, "status", buf, sizeof buf)) {
        const char *keys[] = {"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"};
        for (int k = 0; k < 2; k++) {
            const char *q = strstr(buf, keys[k]);
            unsigned long long v = 0;
            if (q && sscanf(q + strlen(keys[k]), "%llu", &v) == 1) t->run += v;
        }
    }
    return 1;
}

static int read_tasks(task_t *out) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) && n < MAX_TASKS) {
        int tid = atoi(e->d_name);
        if (tid > 0 && read_task(tid, &out[n])) n++;
    }
    closedir(d);
    return n;
}

static void sleep_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define WAIT_CAP_S 60.0

/* Waits until every thread but this one sleeps; 0 if that did not happen
 * within the cap (a thread that never stops running). */
static int wait_quiet(int self) {
    static task_t t[MAX_TASKS];
    for (double t0 = now_s(); now_s() - t0 < WAIT_CAP_S; sleep_ms(1)) {
        int n = read_tasks(t), busy = 0;
        for (int i = 0; i < n; i++)
            if (t[i].tid != self && t[i].state == 'R') busy = 1;
        if (n >= 0 && !busy) return 1;
    }
    return 0;
}

/* Waits until no thread created in phase ph is alive; 0 if some still is
 * after the cap. */
static int wait_exited(int ph) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)WAIT_CAP_S;
    pthread_mutex_lock(&mu);
    int ok = 1;
    for (;;) {
        int live = 0;
        for (int i = 0; i < n_created; i++) live |= created[i].phase == ph && created[i].alive;
        if (!live) break;
        if (pthread_cond_timedwait(&exited, &mu, &dl) != 0) {
            ok = 0;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

/* The threads created in phase ph, once each has started (its id known). */
static int created_in(int ph, int *tids, int max) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_created; i++)
        while (created[i].phase == ph && created[i].alive && created[i].tid == 0)
            pthread_cond_wait(&exited, &mu);
    int n = 0;
    for (int i = 0; i < n_created; i++)
        if (created[i].phase == ph) {
            if (n < max) tids[n] = created[i].tid;
            n++;
        }
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---- the ops ------------------------------------------------------------- */

static unsigned seed = 99;
static sd_bt *rand_bt(sd_backend *be, int ndim, const int64_t *shape) {
    sd_tensor *f = sd_tensor_new(SD_F32, ndim, shape);
    if (!f) return NULL;
    float *p = f->data;
    for (int64_t i = 0; i < sd_tensor_numel(f); i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = ((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    sd_bt *b = sd_bt_from_host(be, f, SD_F32);
    sd_tensor_unref(f);
    return b;
}

enum { OP_LINEAR, OP_CONV, OP_ATTENTION };
static const char *op_names[] = {"linear", "conv3x3", "attention"};

/* Big enough that every library would split it over threads if it could
 * (OpenBLAS's single-thread cut-off is ~0.3 MFLOP, ours 1 MFLOP, oneDNN's
 * small-work one in dnnl_ops.c 20 MFLOP), small enough for an ASan build. */
static sd_bt *run_op(sd_backend *be, int op) {
    sd_bt *a = NULL, *b = NULL, *c = NULL, *y = NULL;
    if (op == OP_LINEAR) {
        int64_t xs[2] = {512, 256}, ws[2] = {384, 256}, bs[1] = {384};
        a = rand_bt(be, 2, xs), b = rand_bt(be, 2, ws), c = rand_bt(be, 1, bs);
        if (a && b && c) y = sd_op_linear(a, b, c);
    } else if (op == OP_CONV) {
        int64_t xs[4] = {1, 64, 32, 32}, ws[4] = {64, 64, 3, 3}, bs[1] = {64};
        a = rand_bt(be, 4, xs), b = rand_bt(be, 4, ws), c = rand_bt(be, 1, bs);
        if (a && b && c) y = sd_op_conv2d(a, b, c, 1, 1, 1);
    } else {
        int64_t qs[3] = {2, 512, 128}; /* 2 x 512 tokens, 2 heads of 64 */
        a = rand_bt(be, 3, qs), b = rand_bt(be, 3, qs), c = rand_bt(be, 3, qs);
        if (a && b && c) y = sd_op_attention(a, b, c, 2, 0);
    }
    sd_bt_free(a), sd_bt_free(b), sd_bt_free(c);
    return y;
}

/* ---- the checks ---------------------------------------------------------- */

static int self_tid;
static task_t before[MAX_TASKS], after[MAX_TASKS];

static int in(int tid, const int *tids, int n) {
    for (int i = 0; i < n; i++)
        if (tids[i] == tid) return 1;
    return 0;
}

/* Runs op once (warm-up: oneDNN's first call packs weights and makes its
 * engine) and then measured; workers are the pool's threads. */
static void check_op(sd_backend *be, int n_threads, int op, int bf16, const int *workers,
                     int n_workers) {
    char what[96];
    snprintf(what, sizeof what, "%s %s, n_threads %d", bf16 ? "bf16" : "f32", op_names[op],
             n_threads);
    sd_backend_set_precision(be, bf16 ? SD_PREC_BF16 : SD_PREC_F32);
    sd_bt *y = run_op(be, op);
    CHECK_MSG(y != NULL, "%s: warm-up op failed", what);
    sd_bt_free(y);
    int ph = __atomic_add_fetch(&phase, 1, __ATOMIC_RELAXED) - 1; /* warm-up's threads */
    CHECK_MSG(wait_exited(ph), "%s: threads created by the warm-up op still live after %.0f s",
              what, WAIT_CAP_S);
    CHECK_MSG(wait_quiet(self_tid), "%s: a thread kept running for %.0f s while idle", what,
              WAIT_CAP_S);
    int nb = read_tasks(before);
    ph = __atomic_load_n(&phase, __ATOMIC_RELAXED);
    y = run_op(be, op);
    int na = read_tasks(after);
    __atomic_add_fetch(&phase, 1, __ATOMIC_RELAXED);
    CHECK_MSG(y != NULL, "%s: op failed", what);
    sd_bt_free(y);
    sd_backend_set_precision(be, SD_PREC_F32);

    int made[64];
    int n_made = created_in(ph, made, 64);
    /* this thread ran (its own counters may lag: the kernel updates a
     * running thread's run time at ticks and switches) */
    int ran = 1, ran_pool = 0, ran_other = 0;
    for (int i = 0; i < na; i++) {
        if (after[i].tid == self_tid) continue;
        int j = 0;
        while (j < nb && before[j].tid != after[i].tid) j++;
        int moved = j == nb || after[i].run != before[j].run;
        if (!moved) continue;
        ran++;
        if (in(after[i].tid, made, n_made < 64 ? n_made : 64)) continue;
        if (in(after[i].tid, workers, n_workers)) {
            ran_pool++;
        } else {
            ran_other++;
            fprintf(stderr, "  %s: thread %d (neither ours nor the op's) ran\n", what,
                    after[i].tid);
        }
    }
    printf("%-34s threads ran %d (pool workers %d, other %d), created %d\n", what, ran, ran_pool,
           ran_other, n_made);
    CHECK_MSG(ran_other == 0, "%s: %d threads outside the pool ran (OpenBLAS's own?)", what,
              ran_other);
    CHECK_MSG(ran_pool <= n_threads - 1, "%s: %d pool workers ran", what, ran_pool);
    if (!bf16) {
        CHECK_MSG(n_made == 0, "%s: %d threads created by an f32 op", what, n_made);
    } else {
        CHECK_MSG(n_made <= n_threads - 1, "%s: %d OpenMP workers created for %d threads", what,
                  n_made, n_threads);
        CHECK_MSG(wait_exited(ph), "%s: OpenMP workers still live %.0f s after the op", what,
                  WAIT_CAP_S);
    }
    if (n_threads == 1)
        CHECK_MSG(ran_pool == 0 && n_made == 0, "%s: ran on more than this thread", what);
}

static int bound_by_omp; /* OpenMP binding asked for in the environment */

/* The default thread count follows this process's CPU set, not the machine:
 * pinned to one CPU (as taskset or a container's CPU set would), a backend
 * made with n_threads 0 runs one thread. */
static void check_default_threads(void) {
    unsetenv("SDFLOW_THREADS"); /* the caller's would override the CPU set */
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        printf("default threads: affinity mask not readable, not checked\n");
        return;
    }
    int allowed = CPU_COUNT(&set), first = 0;
    while (first < CPU_SETSIZE && !CPU_ISSET(first, &set)) first++;
    int def = sd_backend_default_threads();
    printf("default threads %d, %d CPUs in the affinity mask\n", def, allowed);
    if (bound_by_omp) {
        /* libgomp bound this thread to one place; the count must be the
         * process's CPUs, the ones the parent (ctest) gave us */
        cpu_set_t parent;
        CPU_ZERO(&parent);
        if (sched_getaffinity(getppid(), sizeof parent, &parent) == 0) {
            int want = CPU_COUNT(&parent);
            int quota = sd_cpus_cgroup_quota("/proc/self/cgroup", "/sys/fs/cgroup");
            if (quota > 0 && quota < want) want = quota;
            CHECK_MSG(def == want, "OMP_PROC_BIND: default %d threads, %d CPUs", def, want);
        }
        printf("default threads under OMP binding: pinning not checked (libgomp's places "
               "decide)\n");
        return;
    }
    CHECK(def >= 1 && def <= allowed);
    CPU_ZERO(&set);
    CPU_SET(first, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        printf("default threads: cannot pin to one CPU, not checked\n");
        return;
    }
    CHECK(sd_backend_default_threads() == 1);
    sd_backend *be = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    CHECK_MSG(be && be->n_threads == 1, "pinned to one CPU, default backend has %d threads",
              be ? be->n_threads : -1);
    sd_backend_free(be);
    /* SDFLOW_THREADS sets the default, whatever the CPU set; nonsense in it
     * is an error that names it, not a silent default */
    setenv("SDFLOW_THREADS", "3", 1);
    be = NULL;
    CHECK_OK(sd_backend_new("cpu", 0, &be, &err), &err);
    CHECK_MSG(be && be->n_threads == 3, "SDFLOW_THREADS=3: backend has %d threads",
              be ? be->n_threads : -1);
    sd_backend_free(be);
    const char *bad[] = {"0", "-2", "two", "4x", "99999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("SDFLOW_THREADS", bad[i], 1);
        be = NULL;
        sd_error_clear(&err);
        sd_status rc = sd_backend_new("cpu", 0, &be, &err);
        CHECK_MSG(rc == SD_ERR_INVALID && !be && strstr(err.msg, "SDFLOW_THREADS"),
                  "SDFLOW_THREADS=%s: status %d, message '%s'", bad[i], (int)rc, err.msg);
        sd_backend_free(be);
    }
    /* an explicit count does not read the variable */
    be = NULL;
    CHECK_OK(sd_backend_new("cpu", 2, &be, &err), &err);
    CHECK(be && be->n_threads == 2);
    sd_backend_free(be);
    unsetenv("SDFLOW_THREADS");
}

/* Writes text to dir/rel, making the folders on the way. */
static void put(const char *dir, const char *rel, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    for (char *q = path + strlen(dir) + 1; (q = strchr(q, '/')); q++) {
        *q = 0;
        mkdir(path, 0755);
        *q = '/';
    }
    FILE *f = fopen(path, "w");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (f) fputs(text, f), fclose(f);
}

/* The quota read from made-up cgroup v2 and v1 files. */
static void check_cgroup_quota(void) {
    const char *d = sd_test_tmpdir("threads_cgroup");
    char cg[1024], root[1024];
    snprintf(cg, sizeof cg, "%s/cgroup", d);
    snprintf(root, sizeof root, "%s/sys", d);
    CHECK(sd_cpus_cgroup_quota(cg, root) == 0); /* no /proc file */
    put(d, "cgroup", "0::/docker/abc\n");
    CHECK(sd_cpus_cgroup_quota(cg, root) == 0); /* no cpu.max */
    put(d, "sys/docker/abc/cpu.max", "250000 100000\n");
    CHECK(sd_cpus_cgroup_quota(cg, root) == 3); /* 2.5 CPUs: 3 threads */
    put(d, "sys/docker/abc/cpu.max", "max 100000\n");
    CHECK(sd_cpus_cgroup_quota(cg, root) == 0);
    /* v1, the cpu controller mounted with cpuacct; the v2 line has no cpu.max */
    put(d, "cgroup", "4:cpu,cpuacct:/lxc/x\n1:name=systemd:/\n0::/\n");
    put(d, "sys/cpu/lxc/x/cpu.cfs_quota_us", "200000\n");
    put(d, "sys/cpu/lxc/x/cpu.cfs_period_us", "100000\n");
    CHECK(sd_cpus_cgroup_quota(cg, root) == 2);
    put(d, "sys/cpu/lxc/x/cpu.cfs_quota_us", "-1\n");
    CHECK(sd_cpus_cgroup_quota(cg, root) == 0);
}

int main(void) {
    self_tid = (int)syscall(SYS_gettid);
    bound_by_omp = getenv("OMP_PROC_BIND") || getenv("OMP_PLACES") || getenv("GOMP_CPU_AFFINITY");
    sd_error err;
    sd_error_clear(&err);
    for (int n_threads = 1; n_threads <= 2; n_threads++) {
        int ph = __atomic_add_fetch(&phase, 1, __ATOMIC_RELAXED);
        sd_backend *be = NULL;
        CHECK_OK(sd_backend_new("cpu", n_threads, &be, &err), &err);
        if (!be) break;
        __atomic_add_fetch(&phase, 1, __ATOMIC_RELAXED);
        int workers[64];
        int n_workers = created_in(ph, workers, 64);
        /* the pool's workers; if none were seen our pthread_create does not
         * interpose and nothing below could tell threads apart */
        CHECK_MSG(n_workers == n_threads - 1, "pool of %d threads: %d threads created (expected %d)",
                  n_threads, n_workers, n_threads - 1);
        /* each worker may run on as many CPUs as there are threads to run
         * (up to the default count): not confined to this thread's CPU when
         * libgomp has bound it (kernels/cpus.h) */
        int def = sd_backend_default_threads(), want = n_threads < def ? n_threads : def;
        for (int w = 0; w < n_workers && w < 64; w++) {
            cpu_set_t m;
            CPU_ZERO(&m);
            if (sched_getaffinity(workers[w], sizeof m, &m) == 0)
                CHECK_MSG(CPU_COUNT(&m) >= want, "pool worker %d may run on %d CPUs, %d threads",
                          workers[w], CPU_COUNT(&m), want);
        }
        for (int op = OP_LINEAR; op <= OP_ATTENTION; op++) check_op(be, n_threads, op, 0, workers, n_workers);
        if (sd_dnnl_compiled() && sd_dnnl_has_bf16()) {
            /* oneDNN's primitives even where emulation is the default */
            ((sd_cpu *)be->impl)->bf16_path = SD_BF16_PATH_ONEDNN;
            check_op(be, n_threads, OP_LINEAR, 1, workers, n_workers);
            check_op(be, n_threads, OP_CONV, 1, workers, n_workers);
            check_op(be, n_threads, OP_ATTENTION, 1, workers, n_workers);
        } else {
            printf("no oneDNN bf16 primitives in this build or on this CPU: bf16 not checked\n");
        }
        sd_backend_free(be);
    }
    check_cgroup_quota();
    check_default_threads();
    return sd_test_finish();
}
