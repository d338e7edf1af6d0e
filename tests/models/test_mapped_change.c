/* test_mapped_change.c - a model file that changes under a run is an error
 * naming the file, never a signal (issue 14: truncating a checkpoint while
 * a run had it mapped gave SIGBUS).
 *
 * Through the loader path (sd_weights_get over sd_st_open): a tensor bound
 * before the truncation reads zeros afterwards instead of faulting, the
 * next tensor bound is refused naming the file, and sd_st_check /
 * sd_st_check_all report it (the latter once per change). A file modified in place (same size, new
 * mtime) is reported too; a file replaced by rename is not (the open inode
 * is intact). A SIGBUS outside every model mapping still ends the process
 * (checked in a child). */
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/checkpoint/weights.h"

#define N (256 * 1024) /* floats per tensor: 1 MiB, many pages */

static void write_file(const char *path) {
    sd_st_writer *w = sd_st_writer_new();
    const char *names[] = {"a.weight", "b.weight", "c.weight"};
    for (int k = 0; k < 3; k++) {
        int64_t s[1] = {N};
        sd_tensor *t = sd_tensor_new(SD_F32, 1, s);
        for (int64_t i = 0; i < N; i++) sd_tensor_f32(t)[i] = 1.0f + (float)k;
        sd_error err;
        CHECK_OK(sd_st_writer_add(w, names[k], t, &err), &err);
        sd_tensor_unref(t);
    }
    sd_error err;
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);
}

static double sum_bt(sd_bt *b) {
    sd_tensor *h = sd_bt_to_host(b);
    double s = 0;
    for (int64_t i = 0; h && i < sd_tensor_numel(h); i++) s += sd_tensor_f32(h)[i];
    sd_tensor_unref(h);
    return s;
}

/* Truncation: bound tensors stay readable, binding fails, checks report. */
static void truncated(sd_backend *be, const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/trunc.safetensors", dir);
    write_file(path);
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(path, &f, &err), &err);
    if (!f) return;
    sd_weights w;
    sd_weights_init(&w, be, f, "");
    int64_t shape[1] = {N};
    sd_bt *a = sd_weights_get(&w, "a.weight", 1, shape, &err);
    CHECK_MSG(a != NULL, "a: %s", err.msg);
    CHECK(a && sum_bt(a) == (double)N);
    CHECK_OK(sd_st_check(f, &err), &err);
    CHECK_OK(sd_st_check_all(&err), &err);

    /* cut the file inside tensor a: a, b and c now lie past its end */
    CHECK(truncate(path, 4096 + 3 * 4096) == 0);

    /* the already bound tensor borrows the mapping (F32 on the CPU): it
     * reads zeros past the new end instead of raising SIGBUS */
    double s = a ? sum_bt(a) : 0;
    CHECK_MSG(s < (double)N, "bound tensor after truncation sums to %g", s);
    /* binding another tensor reads it (finite check): refused, naming the file */
    sd_error_clear(&err);
    sd_bt *b = sd_weights_get(&w, "b.weight", 1, shape, &err);
    CHECK_MSG(b == NULL && err.code == SD_ERR_IO && strstr(err.msg, path) && strstr(err.msg, "truncated"),
              "binding after truncation: %s", err.msg);
    sd_bt_free(b);
    sd_error_clear(&err);
    CHECK(sd_st_check(f, &err) == SD_ERR_IO && strstr(err.msg, path));
    sd_error_clear(&err);
    CHECK(sd_st_check_all(&err) == SD_ERR_IO && strstr(err.msg, path));
    printf("  %s\n", err.msg + strlen(dir) + 1);
    /* reported once by the per-node check, always by the file's own */
    CHECK_OK(sd_st_check_all(&err), &err);
    CHECK(sd_st_check(f, &err) == SD_ERR_IO);
    /* a further change is reported again */
    CHECK(truncate(path, 4096) == 0);
    sd_error_clear(&err);
    CHECK(sd_st_check_all(&err) == SD_ERR_IO && strstr(err.msg, "4096 bytes"));
    sd_bt_free(a);
    sd_st_close(f);
    /* once closed, nothing is reported any more */
    CHECK_OK(sd_st_check_all(&err), &err);
}

/* In-place modification (same size) is reported; replacement by rename is not. */
static void modified(sd_backend *be, const char *dir) {
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/mod.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    write_file(path);
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(path, &f, &err), &err);
    if (!f) return;
    /* a new file renamed over the name: the open inode is untouched */
    write_file(tmp);
    CHECK(rename(tmp, path) == 0);
    CHECK_OK(sd_st_check(f, &err), &err);
    sd_st_close(f);

    f = NULL;
    CHECK_OK(sd_st_open(path, &f, &err), &err);
    if (!f) return;
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    float v = 123.0f;
    CHECK(fd >= 0 && pwrite(fd, &v, sizeof v, 8192) == (ssize_t)sizeof v);
    /* an explicit new mtime: a write within the same clock tick keeps it */
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
    CHECK(fd >= 0 && futimens(fd, ts) == 0);
    if (fd >= 0) close(fd);
    sd_weights w;
    sd_weights_init(&w, be, f, "");
    int64_t shape[1] = {N};
    sd_error_clear(&err);
    sd_bt *c = sd_weights_get(&w, "c.weight", 1, shape, &err);
    CHECK_MSG(c == NULL && err.code == SD_ERR_IO && strstr(err.msg, path) && strstr(err.msg, "modified"),
              "binding after modification: %s", err.msg);
    sd_bt_free(c);
    sd_st_close(f);
}

/* A SIGBUS on a mapping sdflow did not register is not swallowed. */
static void foreign_sigbus(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/foreign.bin", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || ftruncate(fd, 65536) != 0) _exit(3);
        volatile const char *m = mmap(NULL, 65536, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED || ftruncate(fd, 0) != 0) _exit(3);
        char c = m[32768]; /* SIGBUS */
        (void)c;
        _exit(0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(!(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3)),
              "a foreign SIGBUS was swallowed (status %d)", status);
}

int main(void) {
    const char *dir = sd_test_tmpdir("mapped_change");
    sd_error err;
    sd_error_clear(&err);
    sd_backend *be = NULL;
    CHECK_OK(sd_backend_new("cpu", 1, &be, &err), &err);
    if (!be) return sd_test_finish();
    /* a mapping must exist for the guard to be installed before the fork */
    truncated(be, dir);
    modified(be, dir);
    foreign_sigbus(dir);
    sd_backend_free(be);
    return sd_test_finish();
}
