/* bench_proc.c - one process per measurement, and what it peaked at.
 *
 * A phase runs in a forked child that sends its sd_bench_result back over a
 * pipe; the parent never loads a model, so the child's VmHWM is the peak of
 * that phase alone (load included). The PyTorch side runs as its own python3
 * process per measurement for the same reason.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"

double sd_bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double sd_bench_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double sd_bench_median(const double *v, int n)
{
    if (n <= 0) return 0;
    double s[SD_BENCH_MAX_REPEAT];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

long sd_bench_peak_kb(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    long kb = -1;
    if (fp) {
        char line[256];
        while (fgets(line, sizeof line, fp))
            if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
        fclose(fp);
    }
    if (kb < 0) {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0) kb = ru.ru_maxrss;
    }
    return kb;
}

static int read_all(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

static void describe_exit(int status, char *msg, size_t n)
{
    if (WIFSIGNALED(status))
        snprintf(msg, n, "process killed by signal %d%s", WTERMSIG(status),
                 WTERMSIG(status) == SIGKILL ? " (out of memory?)" : "");
    else
        snprintf(msg, n, "process exited with status %d", WEXITSTATUS(status));
}

int sd_bench_fork(void (*fn)(const void *arg, void *out), const void *arg, void *out, size_t size,
                  long *child_maxrss_kb, char *msg, size_t msg_n)
{
    if (child_maxrss_kb) *child_maxrss_kb = 0;
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(msg, msg_n, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(msg, msg_n, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        memset(out, 0, size);
        fn(arg, out);
        size_t off = 0;
        while (off < size) {
            ssize_t k = write(fds[1], (char *)out + off, size - off);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            off += (size_t)k;
        }
        fflush(NULL);
        _exit(0);
    }
    close(fds[1]);
    int got = read_all(fds[0], out, size) == 0;
    close(fds[0]);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {}
    if (child_maxrss_kb) *child_maxrss_kb = ru.ru_maxrss;
    if (!got) {
        memset(out, 0, size);
        describe_exit(status, msg, msg_n);
        return -1;
    }
    return 0;
}

static void run_phase_cb(const void *arg, void *out)
{
    sd_bench_run_phase(arg, out);
}

void sd_bench_run_forked(const sd_bench_job *job, sd_bench_result *r)
{
    long maxrss = 0;
    char msg[sizeof r->msg];
    if (sd_bench_fork(run_phase_cb, job, r, sizeof *r, &maxrss, msg, sizeof msg)) {
        memset(r, 0, sizeof *r);
        r->unet_wdtype = -1;
        snprintf(r->msg, sizeof r->msg, "%s", msg);
    }
    if (r->peak_kb <= 0) r->peak_kb = maxrss;
}

/* Comma-separated numbers at p into v[*n...]. */
static void parse_list(const char *p, double *v, int *n)
{
    while (*p && *n < SD_BENCH_MAX_REPEAT) {
        char *end;
        double x = strtod(p, &end);
        if (end == p) break;
        v[(*n)++] = x;
        p = *end == ',' ? end + 1 : end;
    }
}

/* "RESULT ok load=S peak_kb=K flops=F secs=a,b,c [cpu=a,b,c]" | "RESULT na msg" | "RESULT error msg" */
static void parse_torch_line(const char *line, sd_bench_result *r)
{
    if (!strncmp(line, "na ", 3)) {
        r->na = 1;
        snprintf(r->msg, sizeof r->msg, "%s", line + 3);
        return;
    }
    if (strncmp(line, "ok ", 3) != 0) {
        snprintf(r->msg, sizeof r->msg, "%s", !strncmp(line, "error ", 6) ? line + 6 : line);
        return;
    }
    const char *p;
    if ((p = strstr(line, "load="))) r->load_s = strtod(p + 5, NULL);
    if ((p = strstr(line, "peak_kb="))) r->peak_kb = strtol(p + 8, NULL, 10);
    if ((p = strstr(line, "secs="))) parse_list(p + 5, r->secs, &r->n);
    if ((p = strstr(line, "cpu="))) parse_list(p + 4, r->cpu, &r->ncpu);
    r->ok = r->n > 0;
    if (!r->ok) snprintf(r->msg, sizeof r->msg, "no timings in: %s", line);
}

void sd_bench_run_torch(char *const *argv, sd_bench_result *r)
{
    memset(r, 0, sizeof *r);
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(r->msg, sizeof r->msg, "pipe: %s", strerror(errno));
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(r->msg, sizeof r->msg, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return;
    }
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "sdflow-bench: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    /* The script prints progress to stderr (passed through) and exactly one
     * RESULT line on stdout. */
    FILE *in = fdopen(fds[0], "r");
    char line[4096], result[4096] = "";
    while (in && fgets(line, sizeof line, in)) {
        if (!strncmp(line, "RESULT ", 7)) {
            line[strcspn(line, "\n")] = 0;
            snprintf(result, sizeof result, "%s", line + 7);
        }
    }
    if (in) fclose(in);
    else close(fds[0]);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {}
    if (result[0]) parse_torch_line(result, r);
    else describe_exit(status, r->msg, sizeof r->msg);
    if (r->ok && r->peak_kb <= 0) r->peak_kb = ru.ru_maxrss;
}
