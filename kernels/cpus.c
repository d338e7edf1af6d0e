/* cpus.c - how many CPUs this process may really use: the default thread
 * count of a backend (cpus.h).
 *
 * sysconf(_SC_NPROCESSORS_ONLN) counts the machine's CPUs, not this
 * process's: under `taskset -c 0-3`, a container's --cpuset-cpus or a
 * Slurm/cgroup CPU set on a 64-core host it said 64, and a pool of 64
 * threads that meet at a barrier after every op on 4 CPUs spends most of
 * its time waiting for descheduled threads. A CPU quota (docker --cpus=4:
 * cgroup cpu.max / cpu.cfs_quota_us) does the same with time instead of
 * CPUs, so the count is also capped at the quota rounded up.
 */
#define _GNU_SOURCE
#include "kernels/cpus.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libgomp (oneDNN's OpenMP) binds the program's initial thread to its first
 * place while the program loads when OMP_PROC_BIND, OMP_PLACES or
 * GOMP_CPU_AFFINITY ask for binding (measured: OMP_PROC_BIND=true leaves
 * main() with one CPU). That thread's mask then says 1 where the process
 * has all the CPUs of libgomp's places. Weak: absent without libgomp. */
extern int omp_get_proc_bind(void) __attribute__((weak));
extern int omp_get_num_places(void) __attribute__((weak));
extern int omp_get_place_num_procs(int place) __attribute__((weak));
extern void omp_get_place_proc_ids(int place, int *ids) __attribute__((weak));

static int omp_places(cpu_set_t *set) {
    CPU_ZERO(set);
    if (!omp_get_proc_bind || !omp_get_num_places || !omp_get_place_num_procs ||
        !omp_get_place_proc_ids || omp_get_proc_bind() == 0 /* omp_proc_bind_false */)
        return 0;
    int places = omp_get_num_places();
    for (int p = 0; p < places; p++) {
        int n = omp_get_place_num_procs(p);
        int *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
        if (!ids) continue;
        omp_get_place_proc_ids(p, ids);
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < CPU_SETSIZE) CPU_SET(ids[i], set);
        free(ids);
    }
    return CPU_COUNT(set);
}

/* CPUs in this thread's affinity mask (inherited from the process), or in
 * libgomp's places when it has bound this thread. */
static int affinity_cpus(void) {
    cpu_set_t places;
    int omp = omp_places(&places);
    if (omp > 0) return omp;
    for (size_t n = 1024; n <= 65536; n *= 2) {
        cpu_set_t *set = CPU_ALLOC(n);
        if (!set) break;
        size_t sz = CPU_ALLOC_SIZE(n);
        CPU_ZERO_S(sz, set);
        int ok = sched_getaffinity(0, sz, set) == 0;
        int c = ok ? CPU_COUNT_S(sz, set) : 0;
        CPU_FREE(set);
        if (ok) return c;
        /* EINVAL: the kernel's mask is larger than ours; try a larger one */
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* The whole CPUs a quota of `quota` per `period` allows (rounded up), or 0
 * for none. */
static int quota_cpus(double quota, double period) {
    if (!(quota > 0) || !(period > 0)) return 0;
    double c = quota / period;
    return c >= 1e6 ? 0 : (int)c + (c > (int)c);
}

/* Reads the first line of root`dir`/`file` into buf; 0 if absent. */
static int read_line(const char *root, const char *dir, const char *file, char *buf, size_t n) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s%s/%s", root, dir, file) >= sizeof path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    return ok;
}

/* Only the process's own cgroup is read, which is where container runtimes
 * put the limit. */
int sd_cpus_cgroup_quota(const char *proc_cgroup, const char *root) {
    FILE *f = fopen(proc_cgroup, "r");
    if (!f) return 0;
    char line[4096], v2[4096] = "", v1[4096] = "";
    int have_v2 = 0, have_v1 = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = 0, *c2 = 0;
        char *ctl = c1 + 1, *path = c2 + 1, *save = NULL;
        if (strcmp(line, "0") == 0 && *ctl == 0) {
            snprintf(v2, sizeof v2, "%s", strcmp(path, "/") == 0 ? "" : path);
            have_v2 = 1;
        }
        /* v1: "N:cpu,cpuacct:/path" (the cpu controller, alone or not) */
        for (char *tok = strtok_r(ctl, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            if (strcmp(tok, "cpu") == 0) {
                snprintf(v1, sizeof v1, "/cpu%s", strcmp(path, "/") == 0 ? "" : path);
                have_v1 = 1;
            }
    }
    fclose(f);
    char buf[128];
    if (have_v2 && read_line(root, v2, "cpu.max", buf, sizeof buf)) {
        double q = 0, p = 0;
        if (strncmp(buf, "max", 3) != 0 && sscanf(buf, "%lf %lf", &q, &p) == 2)
            return quota_cpus(q, p);
        return 0;
    }
    if (have_v1 && read_line(root, v1, "cpu.cfs_quota_us", buf, sizeof buf)) {
        double q = atof(buf), p = 0;
        if (q > 0 && read_line(root, v1, "cpu.cfs_period_us", buf, sizeof buf)) p = atof(buf);
        return quota_cpus(q, p);
    }
    return 0;
}

int sd_backend_default_threads(void) {
    int n = affinity_cpus();
    int q = sd_cpus_cgroup_quota("/proc/self/cgroup", "/sys/fs/cgroup");
    if (q > 0 && q < n) n = q;
    return n > 0 ? n : 1;
}

sd_status sd_cpus_threads_default(int *out, sd_error *err) {
    const char *e = getenv("SDFLOW_THREADS");
    if (e && *e) {
        char *end = NULL;
        errno = 0;
        long v = strtol(e, &end, 10);
        if (errno || *end || v < 1 || v > SD_CPUS_MAX_THREADS)
            return sd_error_set(err, SD_ERR_INVALID,
                                "SDFLOW_THREADS=%s: expected a whole number of compute threads "
                                "from 1 to %d",
                                e, SD_CPUS_MAX_THREADS);
        *out = (int)v;
        return SD_OK;
    }
    *out = sd_backend_default_threads();
    return SD_OK;
}

void *sd_cpus_with_process_mask(void *(*fn)(void *), void *arg) {
    cpu_set_t places, mine;
    if (omp_places(&places) == 0 || sched_getaffinity(0, sizeof mine, &mine) != 0 ||
        CPU_EQUAL(&places, &mine) || sched_setaffinity(0, sizeof places, &places) != 0)
        return fn(arg);
    void *r = fn(arg);
    sched_setaffinity(0, sizeof mine, &mine);
    return r;
}
