/* test_cache_readonly.c - docs/cache.md: a cache database the process cannot
 * write, because of the file's mode or because its folder is not writable,
 * is opened read-only: hits are served, puts fail softly, nothing is
 * written. The common case, a WAL database in a folder of another user,
 * failed with "attempt to write a readonly database" (SQLite's
 * READONLY_DIRECTORY: no -shm can be made) and the run went on uncached
 * (issue 14).
 *
 * File modes do not bind root, so as root the checks run in a child that
 * has dropped to uid/gid 65534 ("nobody"); otherwise the folder is made
 * unwritable with chmod. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cache/cache.h"
#include "core/value_io.h"
#include "testutil.h"

static void mkkey(uint8_t key[SD_KEY_SIZE], int i) {
    memset(key, 0, SD_KEY_SIZE);
    key[0] = (uint8_t)i;
    key[31] = 0xA5;
}

/* What a user who cannot write `path` or its folder must see. */
static void check_readonly(const char *path, const sd_value *v) {
    sd_error err;
    sd_error_clear(&err);
    sd_sqlite_cache *c = NULL;
    CHECK_OK(sd_cache_open(path, &c, &err), &err);
    if (!c) return;
    CHECK(sd_cache_is_readonly(c));
    uint8_t k1[SD_KEY_SIZE], k2[SD_KEY_SIZE];
    mkkey(k1, 1);
    mkkey(k2, 2);
    sd_value *out = NULL;
    CHECK_OK(sd_cache_get(c, k1, &out, &err), &err);
    CHECK(out && sd_value_equal(out, v));
    sd_value_unref(out);
    out = NULL;
    CHECK(sd_cache_get(c, k2, &out, &err) == SD_ERR_NOT_FOUND && !out);
    CHECK(sd_cache_put(c, k2, "X", v, &err) != SD_OK);
    sd_cache_close(c);
}

/* Runs check_readonly as a user who cannot write the folder; returns 0 when
 * the checks passed. */
static int as_other_user(const char *dir, const char *path, const sd_value *v) {
    if (geteuid() != 0) {
        if (chmod(dir, 0555) != 0) return -1;
        int before = sd_test_failures;
        check_readonly(path, v);
        chmod(dir, 0755);
        return sd_test_failures != before;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) {
            fprintf(stderr, "cannot drop to uid 65534: %s\n", strerror(errno));
            _exit(2);
        }
        check_readonly(path, v);
        fflush(NULL);
        _exit(sd_test_failures ? 1 : 0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(void) {
    /* Not under the build tree: uid 65534 must be able to reach the folder,
     * and a checkout under /root (mode 0700) is out of its reach. */
    char dir[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/sdflow-cache-ro-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "cannot make a scratch folder under %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char path[4096], wal[4200], shm[4200];
    snprintf(path, sizeof path, "%s/shared.db", dir);
    snprintf(wal, sizeof wal, "%s-wal", path);
    snprintf(shm, sizeof shm, "%s-shm", path);
    chmod(dir, 0755); /* the folder belongs to us; others may enter it */

    sd_error err;
    sd_error_clear(&err);
    sd_tensor *t = sd_tensor_new4(SD_F32, 2, 2, 3, 0, 0);
    for (int i = 0; i < 6; i++) sd_tensor_f32(t)[i] = (float)i * 0.5f;
    sd_value *v = sd_value_tensor(t);
    sd_tensor_unref(t);
    uint8_t k1[SD_KEY_SIZE];
    mkkey(k1, 1);
    sd_sqlite_cache *c = NULL;
    CHECK_OK(sd_cache_open(path, &c, &err), &err);
    if (!c) return sd_test_finish();
    CHECK_OK(sd_cache_put(c, k1, "X", v, &err), &err);
    sd_cache_close(c);
    /* a closed WAL database leaves no -wal/-shm: a reader must make them */
    CHECK(access(wal, F_OK) != 0 && access(shm, F_OK) != 0);
    struct stat before;
    CHECK(stat(path, &before) == 0);

    /* the file's mode forbids writing (and so does the folder's) */
    chmod(path, 0644);
    int rc = as_other_user(dir, path, v);
    CHECK_MSG(rc == 0, "read-only file in a read-only folder: the checks failed (%d)", rc);
    /* the file may be written but its folder may not (no -wal, no -shm) */
    chmod(path, 0666);
    rc = as_other_user(dir, path, v);
    CHECK_MSG(rc == 0, "writable file in a read-only folder: the checks failed (%d)", rc);
    chmod(path, 0644);

    /* nothing was written: same size and contents, no journal left */
    struct stat after;
    CHECK(stat(path, &after) == 0 && after.st_size == before.st_size &&
          after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
    CHECK(access(wal, F_OK) != 0 && access(shm, F_OK) != 0);
    /* and the owner still writes it normally */
    c = NULL;
    CHECK_OK(sd_cache_open(path, &c, &err), &err);
    CHECK(c && !sd_cache_is_readonly(c));
    sd_cache_close(c);
    sd_value_unref(v);
    unlink(path);
    rmdir(dir);
    return sd_test_finish();
}
