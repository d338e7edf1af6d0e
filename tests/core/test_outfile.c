/* test_outfile.c - output files are created exclusively (an existing name,
 * link or dangling link is never replaced or followed), subfolders that are
 * links are refused, known bytes replace a name without following a link,
 * and temporaries of dead writers are cleaned up while those of live ones
 * stay. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/outfile.h"
#include "core/sha256.h"
#include "testutil.h"

static char root[4096];

/* Two rotating buffers: symlink(path_of(a), path_of(b)) needs both. */
static char *path_of(const char *rel) {
    static char buf[2][8192];
    static int k;
    k ^= 1;
    snprintf(buf[k], sizeof buf[k], "%s/%s", root, rel);
    return buf[k];
}

static void put(const char *rel, const char *text) {
    FILE *f = fopen(path_of(rel), "w");
    if (f) { fputs(text, f); fclose(f); }
}

static int has(const char *rel, const char *text) {
    char *s = sd_test_read_file(path_of(rel), NULL);
    int ok = s && strcmp(s, text) == 0;
    free(s);
    return ok;
}

static void count_name(void *user, const char *name) {
    (void)name;
    (*(int *)user)++;
}

static void test_exclusive(void) {
    sd_error err;
    sd_outdir d;
    CHECK_OK(sd_outdir_open(root, "a/b", &d, &err), &err);
    CHECK(d.path && strstr(d.path, "/a/b"));
    put("a/b/taken.png", "someone else's");
    CHECK(symlink(path_of("outside.txt"), path_of("a/b/link.png")) == 0); /* dangling */

    sd_outfile of;
    CHECK_OK(sd_outfile_create(&d, &of, &err), &err);
    CHECK(sd_outfile_is_temp(of.tmp) && !sd_outfile_temp_is_stale(of.tmp));
    fputs("ours", of.f);
    int taken = 0;
    CHECK_OK(sd_outfile_publish(&of, "taken.png", &taken, &err), &err);
    CHECK(taken == 1 && has("a/b/taken.png", "someone else's"));
    CHECK_OK(sd_outfile_publish(&of, "link.png", &taken, &err), &err);
    CHECK(taken == 1);
    struct stat st;
    CHECK(lstat(path_of("outside.txt"), &st) != 0); /* the link was not followed */
    CHECK_OK(sd_outfile_publish(&of, "free.png", &taken, &err), &err);
    CHECK(taken == 0 && has("a/b/free.png", "ours") && of.f == NULL && of.tmp[0] == 0);
    uint8_t h[32];
    CHECK_OK(sd_sha256_file(path_of("a/b/free.png"), h, &err), &err);
    CHECK(memcmp(h, of.sha256, 32) == 0);
    sd_outfile_discard(&of); /* no-op after publishing */
    CHECK(has("a/b/free.png", "ours"));

    /* Nothing but the three names is left: no temporary. */
    int n = 0;
    CHECK_OK(sd_outdir_scan(&d, count_name, &n, NULL, &err), &err);
    CHECK_MSG(n == 3, "%d entries", n);

    /* A discarded file leaves nothing behind. */
    CHECK_OK(sd_outfile_create(&d, &of, &err), &err);
    fputs("dropped", of.f);
    sd_outfile_discard(&of);
    n = 0;
    CHECK_OK(sd_outdir_scan(&d, count_name, &n, NULL, &err), &err);
    CHECK(n == 3);
    sd_outdir_close(&d);
}

static void test_links_refused(void) {
    sd_error err;
    sd_outdir d;
    CHECK(mkdir(path_of("elsewhere"), 0777) == 0);
    CHECK(mkdir(path_of("out"), 0777) == 0);
    CHECK(symlink(path_of("elsewhere"), path_of("out/sub")) == 0);
    sd_error_clear(&err);
    sd_status rc = sd_outdir_open(path_of("out"), "sub", &d, &err);
    CHECK(rc == SD_ERR_INVALID && strstr(err.msg, "symbolic link") && strstr(err.msg, "'sub'"));
    rc = sd_outdir_open(path_of("out"), "sub/deeper", &d, &err);
    CHECK(rc == SD_ERR_INVALID);
    struct stat st;
    CHECK(stat(path_of("elsewhere/deeper"), &st) != 0); /* nothing created through it */
    put("out/plain", "x");
    rc = sd_outdir_open(path_of("out"), "plain", &d, &err);
    CHECK(rc == SD_ERR_INVALID && strstr(err.msg, "not a folder"));
    /* The root itself may be a link: the user named it. */
    CHECK(symlink(path_of("elsewhere"), path_of("rootlink")) == 0);
    CHECK_OK(sd_outdir_open(path_of("rootlink"), "", &d, &err), &err);
    sd_outdir_close(&d);
}

/* Known bytes replacing a name (uploads, a worker's copy of an input): the
 * contents land whole, an existing file is replaced, and a link at the name
 * is replaced, never written through; no temporary is left. */
static void test_write_replace(void) {
    sd_error err;
    sd_error_clear(&err);
    sd_outdir d;
    CHECK(mkdir(path_of("wr"), 0777) == 0);
    CHECK_OK(sd_outdir_open(path_of("wr"), "in/sub", &d, &err), &err);
    CHECK_OK(sd_outfile_write_replace(&d, "a.png", "first", 5, &err), &err);
    CHECK(has("wr/in/sub/a.png", "first"));
    CHECK_OK(sd_outfile_write_replace(&d, "a.png", "second", 6, &err), &err);
    CHECK(has("wr/in/sub/a.png", "second"));
    put("wr/target", "untouched");
    CHECK(symlink(path_of("wr/target"), path_of("wr/in/sub/link.png")) == 0);
    CHECK_OK(sd_outfile_write_replace(&d, "link.png", "new", 3, &err), &err);
    CHECK(has("wr/target", "untouched"));
    struct stat st;
    CHECK(lstat(path_of("wr/in/sub/link.png"), &st) == 0 && S_ISREG(st.st_mode) && has("wr/in/sub/link.png", "new"));
    CHECK_OK(sd_outfile_write_replace(&d, "empty", "", 0, &err), &err);
    CHECK(has("wr/in/sub/empty", ""));
    int n = 0;
    CHECK_OK(sd_outdir_scan(&d, count_name, &n, NULL, &err), &err);
    CHECK(n == 3); /* a.png, link.png, empty: no temporary left */
    sd_outdir_close(&d);
}

static void test_stale_temporaries(void) {
    sd_error err;
    sd_outdir d;
    CHECK_OK(sd_outdir_open(root, "stale", &d, &err), &err);
    sd_outfile live;
    CHECK_OK(sd_outfile_create(&d, &live, &err), &err);
    const char *host = strrchr(live.tmp, '-') + 1;
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* a pid that has just died */
    char dead[512], other_host[512], reused[512];
    snprintf(dead, sizeof dead, "stale/.sdflow-tmp-%d-0-abcdef-%s", (int)child, host);
    snprintf(other_host, sizeof other_host, "stale/.sdflow-tmp-%d-0-abcdef-not.this.host", (int)child);
    /* Our own pid with another start time: the pid was reused. */
    snprintf(reused, sizeof reused, "stale/.sdflow-tmp-%d-1-abcdef-%s", (int)getpid(), host);
    put(dead, "half");
    put(other_host, "half");
    put(reused, "half");
    put("stale/kept.png", "done");
    int n = 0, removed = 0;
    CHECK_OK(sd_outdir_scan(&d, count_name, &n, &removed, &err), &err);
    CHECK_MSG(removed == 2 && n == 1, "removed %d, visited %d", removed, n);
    struct stat st;
    CHECK(stat(path_of(dead), &st) != 0);
    CHECK(stat(path_of(other_host), &st) == 0); /* cannot tell for another machine */
    char live_path[1024];
    snprintf(live_path, sizeof live_path, "stale/%s", live.tmp);
    CHECK(stat(path_of(live_path), &st) == 0); /* this process is alive */
    sd_outfile_discard(&live);
    CHECK(stat(path_of(live_path), &st) != 0);
    sd_outdir_close(&d);
}

int main(void) {
    snprintf(root, sizeof root, "%s", sd_test_tmpdir("outfile"));
    test_exclusive();
    test_links_refused();
    test_write_replace();
    test_stale_temporaries();
    return sd_test_finish();
}
