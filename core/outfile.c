/* outfile.c - exclusive, link-safe creation of output files (see outfile.h). */
#define _GNU_SOURCE /* renameat2 */
#include "outfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sha256.h"

#define TMP_PREFIX ".sdflow-tmp-"

/* ---- folders ---------------------------------------------------------------------- */

static int mkdir_p(const char *path) {
    char *tmp = strdup(path);
    if (!tmp) { errno = ENOMEM; return -1; }
    int rc = 0;
    for (char *p = tmp + 1; ; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST) { rc = -1; break; }
            *p = c;
            if (!c) break;
        }
    }
    int e = errno;
    free(tmp);
    errno = e;
    return rc;
}

void sd_outdir_close(sd_outdir *d) {
    if (!d) return;
    if (d->fd >= 0) close(d->fd);
    free(d->path);
    d->fd = -1;
    d->path = NULL;
}

sd_status sd_outdir_open(const char *root, const char *subfolder, sd_outdir *d, sd_error *err) {
    d->fd = -1;
    d->path = NULL;
    if (!subfolder) subfolder = "";
    if (mkdir_p(root) != 0) {
        int e = errno;
        return sd_error_set(err, SD_ERR_IO, "cannot create output folder '%s': %s", root, strerror(e));
    }
    /* The root is the user's choice and may be a link: follow it. */
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char *real = fd >= 0 ? realpath(root, NULL) : NULL;
    if (fd < 0 || !real) {
        int e = errno;
        if (fd >= 0) close(fd);
        return sd_error_set(err, SD_ERR_IO, "cannot open output folder '%s': %s", root, strerror(e));
    }
    char *sub = strdup(subfolder);
    size_t pl = strlen(real) + strlen(subfolder) + 2;
    d->path = malloc(pl);
    if (!sub || !d->path) {
        free(sub);
        free(real);
        close(fd);
        free(d->path);
        d->path = NULL;
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    snprintf(d->path, pl, "%s%s%s", real, *subfolder ? "/" : "", subfolder);
    free(real);
    /* Below the root, one component at a time, never through a link. */
    sd_status rc = SD_OK;
    char *save = NULL;
    for (char *c = strtok_r(sub, "/", &save); c && !rc; c = strtok_r(NULL, "/", &save)) {
        if (mkdirat(fd, c, 0777) != 0 && errno != EEXIST) {
            int e = errno;
            rc = sd_error_set(err, SD_ERR_IO, "cannot create output folder '%s' (at '%s'): %s",
                              d->path, c, strerror(e));
            break;
        }
        int nfd = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0) {
            int e = errno;
            struct stat st;
            if (fstatat(fd, c, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
                rc = sd_error_set(err, SD_ERR_INVALID, "output folder '%s': '%s' is a symbolic link; "
                                  "sdflow does not write through links inside the output folder",
                                  d->path, c);
            else if (e == ENOTDIR || e == ELOOP)
                rc = sd_error_set(err, SD_ERR_INVALID, "output folder '%s': '%s' is not a folder",
                                  d->path, c);
            else
                rc = sd_error_set(err, SD_ERR_IO, "cannot open output folder '%s' (at '%s'): %s",
                                  d->path, c, strerror(e));
            break;
        }
        close(fd);
        fd = nfd;
    }
    free(sub);
    if (rc) {
        close(fd);
        free(d->path);
        d->path = NULL;
        return rc;
    }
    d->fd = fd;
    return SD_OK;
}

sd_status sd_outdir_open_existing(const char *path, sd_outdir *d, sd_error *err) {
    d->fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->fd < 0) {
        int e = errno;
        d->path = NULL;
        return sd_error_set(err, SD_ERR_IO, "cannot open folder '%s': %s", path, strerror(e));
    }
    d->path = strdup(path);
    if (!d->path) {
        close(d->fd);
        d->fd = -1;
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    return SD_OK;
}

/* ---- temporary names ---------------------------------------------------------------- */

/* Start time of process `pid` in clock ticks since boot (field 22 of
 * /proc/<pid>/stat); 0 when unknown, -1 when the process does not exist. */
static long long proc_start(long pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f) return errno == ENOENT ? -1 : 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* The command name (field 2) is in parentheses and may hold anything. */
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    p++;
    for (int field = 3; field < 22 && p; field++) { /* p: the space before field `field` */
        p = strchr(p + 1, ' ');
    }
    return p ? strtoll(p + 1, NULL, 10) : 0;
}

/* This host's name reduced to [A-Za-z0-9._], at most 63 characters. */
static void host_tag(char *out, size_t n) {
    char h[256] = "";
    if (gethostname(h, sizeof h - 1) != 0 || !h[0]) snprintf(h, sizeof h, "localhost");
    size_t j = 0;
    for (size_t i = 0; h[i] && j + 1 < n && j < 63; i++) {
        char c = h[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_';
        out[j++] = ok ? c : '_';
    }
    out[j] = 0;
}

int sd_outfile_is_temp(const char *name) {
    return strncmp(name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0;
}

/* Parse ".sdflow-tmp-<pid>-<start>-<random>-<host>". */
static int parse_temp(const char *name, long *pid, long long *start, const char **host) {
    if (!sd_outfile_is_temp(name)) return 0;
    const char *p = name + strlen(TMP_PREFIX);
    char *e;
    errno = 0;
    *pid = strtol(p, &e, 10);
    if (errno || e == p || *e != '-' || *pid <= 0) return 0;
    p = e + 1;
    *start = strtoll(p, &e, 10);
    if (errno || e == p || *e != '-') return 0;
    p = strchr(e + 1, '-'); /* skip the random part */
    if (!p) return 0;
    *host = p + 1;
    return 1;
}

int sd_outfile_temp_is_stale(const char *name) {
    long pid;
    long long start;
    const char *host;
    if (!parse_temp(name, &pid, &start, &host)) return 0;
    char me[64];
    host_tag(me, sizeof me);
    if (strcmp(host, me) != 0) return 0; /* another machine's writer: cannot tell */
    long long now = proc_start(pid);
    if (now < 0) return 1;                        /* no such process */
    if (now > 0 && start > 0) return now != start; /* the pid was reused */
    if (kill((pid_t)pid, 0) == 0 || errno == EPERM) return 0;
    return 1;
}

sd_status sd_outdir_scan(sd_outdir *d, void (*fn)(void *user, const char *name), void *user,
                         int *removed, sd_error *err) {
    if (removed) *removed = 0;
    int fd = dup(d->fd);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        int e = errno;
        if (fd >= 0) close(fd);
        return sd_error_set(err, SD_ERR_IO, "cannot list output folder '%s': %s", d->path, strerror(e));
    }
    rewinddir(dir);
    struct dirent *e;
    while ((e = readdir(dir))) {
        const char *nm = e->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..")) continue;
        if (sd_outfile_is_temp(nm)) {
            /* A writer killed before it published: nobody will finish it. */
            if (sd_outfile_temp_is_stale(nm) && unlinkat(d->fd, nm, 0) == 0 && removed) (*removed)++;
            continue;
        }
        if (fn) fn(user, nm);
    }
    closedir(dir);
    return SD_OK;
}

/* ---- files ------------------------------------------------------------------------------ */

sd_status sd_outfile_create(const sd_outdir *d, sd_outfile *of, sd_error *err) {
    memset(of, 0, sizeof *of);
    of->dirfd = d->fd;
    static long long my_start = -2; /* computed once; a race computes the same value */
    if (my_start == -2) {
        long long s = proc_start((long)getpid());
        my_start = s > 0 ? s : 0;
    }
    char host[64];
    host_tag(host, sizeof host);
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned char rnd[6];
        if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
            unsigned long long x = (unsigned long long)time(NULL) * 6364136223846793005ULL +
                                   (unsigned long long)getpid() * 1442695040888963407ULL + (unsigned)attempt;
            for (int i = 0; i < 6; i++) { rnd[i] = (unsigned char)(x >> (i * 8 + 7)); }
        }
        static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
        char r[7];
        for (int i = 0; i < 6; i++) r[i] = al[rnd[i] % 36];
        r[6] = 0;
        snprintf(of->tmp, sizeof of->tmp, TMP_PREFIX "%ld-%lld-%s-%s", (long)getpid(), my_start, r, host);
        int fd = openat(d->fd, of->tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) {
            if (errno == EEXIST) continue;
            int e = errno;
            of->tmp[0] = 0;
            return sd_error_set(err, SD_ERR_IO, "cannot create a file in '%s': %s", d->path, strerror(e));
        }
        of->f = fdopen(fd, "wb");
        if (!of->f) {
            close(fd);
            unlinkat(d->fd, of->tmp, 0);
            of->tmp[0] = 0;
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory opening a file in '%s'", d->path);
        }
        return SD_OK;
    }
    of->tmp[0] = 0;
    return sd_error_set(err, SD_ERR_IO, "cannot find a free temporary name in '%s'", d->path);
}

/* Flush, fsync and hash what was written. */
static sd_status sync_and_hash(sd_outfile *of, sd_error *err) {
    int fd = fileno(of->f);
    if (fflush(of->f) != 0 || ferror(of->f)) {
        int e = errno;
        return sd_error_set(err, SD_ERR_IO, "writing failed: %s", strerror(e));
    }
    if (fsync(fd) != 0) {
        int e = errno;
        return sd_error_set(err, SD_ERR_IO, "fsync failed: %s", strerror(e));
    }
    /* Hash the bytes as the file holds them (it is open O_RDWR for this), so
     * that a later check of the published file compares like with like. */
    sd_sha256_ctx h;
    sd_sha256_init(&h);
    unsigned char buf[65536];
    off_t off = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf, off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            return sd_error_set(err, SD_ERR_IO, "reading back failed: %s", strerror(e));
        }
        if (n == 0) break;
        sd_sha256_update(&h, buf, (size_t)n);
        off += n;
    }
    sd_sha256_final(&h, of->sha256);
    of->synced = 1;
    return SD_OK;
}

sd_status sd_outfile_publish(sd_outfile *of, const char *name, int *taken, sd_error *err) {
    *taken = 0;
    if (!of->f || !of->tmp[0])
        return sd_error_set(err, SD_ERR_INTERNAL, "publishing a file that is not open");
    if (!name[0] || strchr(name, '/'))
        return sd_error_set(err, SD_ERR_INVALID, "bad output file name '%s'", name);
    if (!of->synced) {
        sd_status rc = sync_and_hash(of, err);
        if (rc) return rc;
    }
    int linked = 0;
    if (renameat2(of->dirfd, of->tmp, of->dirfd, name, RENAME_NOREPLACE) != 0) {
        if (errno == EEXIST) { *taken = 1; return SD_OK; }
        if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != ENOTSUP) {
            int e = errno;
            return sd_error_set(err, SD_ERR_IO, "cannot publish '%s': %s", name, strerror(e));
        }
        /* No RENAME_NOREPLACE here (some network file systems): link() fails
         * on an existing name as well, and never follows a link there. */
        if (linkat(of->dirfd, of->tmp, of->dirfd, name, 0) != 0) {
            if (errno == EEXIST) { *taken = 1; return SD_OK; }
            int e = errno;
            return sd_error_set(err, SD_ERR_IO, "cannot publish '%s' (this file system has neither "
                                "RENAME_NOREPLACE nor hard links?): %s", name, strerror(e));
        }
        linked = 1;
    }
    if (linked) unlinkat(of->dirfd, of->tmp, 0);
    of->tmp[0] = 0;
    fsync(of->dirfd); /* the new name survives a crash; failure here loses nothing written */
    FILE *f = of->f;
    of->f = NULL;
    if (fclose(f) != 0) {
        int e = errno;
        return sd_error_set(err, SD_ERR_IO, "closing '%s' failed: %s", name, strerror(e));
    }
    return SD_OK;
}

sd_status sd_outfile_replace(sd_outfile *of, const char *name, sd_error *err) {
    if (!of->f || !of->tmp[0])
        return sd_error_set(err, SD_ERR_INTERNAL, "replacing with a file that is not open");
    if (!name[0] || strchr(name, '/'))
        return sd_error_set(err, SD_ERR_INVALID, "bad output file name '%s'", name);
    if (!of->synced) {
        sd_status rc = sync_and_hash(of, err);
        if (rc) return rc;
    }
    if (renameat(of->dirfd, of->tmp, of->dirfd, name) != 0) {
        int e = errno;
        return sd_error_set(err, SD_ERR_IO, "cannot move the new file onto '%s': %s", name, strerror(e));
    }
    of->tmp[0] = 0;
    fsync(of->dirfd);
    FILE *f = of->f;
    of->f = NULL;
    if (fclose(f) != 0) {
        int e = errno;
        return sd_error_set(err, SD_ERR_IO, "closing '%s' failed: %s", name, strerror(e));
    }
    return SD_OK;
}

void sd_outfile_discard(sd_outfile *of) {
    if (!of) return;
    if (of->f) fclose(of->f);
    of->f = NULL;
    if (of->tmp[0]) unlinkat(of->dirfd, of->tmp, 0);
    of->tmp[0] = 0;
}

sd_status sd_outfile_write_replace(const sd_outdir *d, const char *name, const void *data, size_t n, sd_error *err) {
    sd_outfile of;
    sd_status rc = sd_outfile_create(d, &of, err);
    if (rc) return rc;
    if (n && fwrite(data, 1, n, of.f) != n) rc = sd_error_set(err, SD_ERR_IO, "%s/%s: write failed", d->path, name);
    if (!rc) rc = sd_outfile_replace(&of, name, err);
    sd_outfile_discard(&of);
    return rc;
}
