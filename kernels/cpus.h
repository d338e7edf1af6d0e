/* cpus.h - how many CPUs this process may use: the thread count
 * sd_backend_new picks for n_threads <= 0, and the default of the few
 * places that start threads of their own (sdflow-bench, synth's GGUF
 * quantization), so that every default counts CPUs the same way. */
#ifndef SD_KERNELS_CPUS_H
#define SD_KERNELS_CPUS_H

#include "core/error.h"

#define SD_CPUS_MAX_THREADS 4096

/* The CPUs this process may use: its affinity mask (taskset, a container's
 * CPU set), capped by its cgroup's CPU quota rounded up; at least 1. Not
 * the machine's core count, which oversubscribes a restricted process. */
int sd_backend_default_threads(void);

/* The thread count sd_backend_new uses for n_threads <= 0: SDFLOW_THREADS
 * when set (a whole number 1..SD_CPUS_MAX_THREADS, else SD_ERR_INVALID
 * naming the variable), else sd_backend_default_threads(). The variable is
 * how a user of any command (run, serve, worker, ...) sets the count. */
sd_status sd_cpus_threads_default(int *out, sd_error *err);

/* Returns fn(arg), run with the calling thread's CPU mask widened to the
 * process's CPUs when libgomp has bound the thread to one place
 * (OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY: the initial thread is bound
 * while the program loads), and restored after: threads fn creates inherit
 * every CPU instead of piling onto one. Otherwise just fn(arg). */
void *sd_cpus_with_process_mask(void *(*fn)(void *), void *arg);

/* The CPU quota of the cgroup named in `proc_cgroup` (a /proc/PID/cgroup
 * file) under the cgroup mount `root` (/sys/fs/cgroup): v2 cpu.max, or v1
 * cpu/cpu.cfs_quota_us over cpu.cfs_period_us, in whole CPUs rounded up;
 * 0 for no quota or unreadable files. A parameter so that tests can point
 * it at made-up files. */
int sd_cpus_cgroup_quota(const char *proc_cgroup, const char *root);

#endif
