/* test_st_release.c - a borrowed tensor of a mapped safetensors file hands
 * its pages back when it is freed, while the file stays open (RSS falls),
 * and reading the same bytes again still gives the file's content. Memory
 * buffers (sd_st_open_memory) are left untouched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "formats/safetensors.h"
#include "testutil.h"

#define BIG_ELEMS (32 * 1024 * 1024) /* F16: 64 MiB */

static long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = -1;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
        fclose(f);
    }
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

/* Reads every byte (faults every page in) and returns a checksum. */
static uint64_t checksum(const sd_tensor *t) {
    const uint16_t *p = t->data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < t->nbytes / 2; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static sd_tensor *filled(sd_dtype dt, int64_t n, uint16_t seed) {
    sd_tensor *t = sd_tensor_new(dt, 1, &n);
    uint16_t *p = t->data;
    for (int64_t i = 0; i < n; i++) p[i] = (uint16_t)((i * 2654435761u + seed) & 0x3bff); /* finite F16 */
    return t;
}

static void test_mapped(const char *path) {
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(path, &f, &err), &err);
    if (!f) return;
    sd_tensor *big = sd_st_tensor(f, "big", &err), *left = sd_st_tensor(f, "left", &err),
              *right = sd_st_tensor(f, "right", &err);
    CHECK(big && left && right);
    if (!big || !left || !right) return;
    uint64_t h_big = checksum(big), h_left = checksum(left), h_right = checksum(right);
    long before = rss_bytes();
    sd_tensor_unref(big); /* the file and its neighbours stay */
    long after = rss_bytes();
    long drop = before - after, size = (long)BIG_ELEMS * 2;
    printf("RSS %ld -> %ld kB (a %ld kB tensor freed)\n", before / 1024, after / 1024, size / 1024);
    CHECK_MSG(before > 0 && drop > size * 9 / 10, "RSS fell by %ld of %ld bytes", drop, size);
    /* The neighbours' pages (the partial ones at both ends included) are intact. */
    CHECK(checksum(left) == h_left && checksum(right) == h_right);
    /* The same bytes again: faulted back from the file. */
    big = sd_st_tensor(f, "big", &err);
    CHECK(big && checksum(big) == h_big);
    sd_tensor_unref(big);
    sd_tensor_unref(left);
    sd_tensor_unref(right);
    sd_st_close(f);
}

static void test_memory(const void *buf, size_t size) {
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open_memory(buf, size, "mem", &f, &err), &err);
    if (!f) return;
    sd_tensor *big = sd_st_tensor(f, "big", &err);
    CHECK(big);
    if (!big) return;
    uint64_t h = checksum(big);
    sd_tensor_unref(big);
    big = sd_st_tensor(f, "big", &err);
    CHECK(big && checksum(big) == h); /* not discarded: the buffer is the caller's */
    sd_tensor_unref(big);
    sd_st_close(f);
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    /* "big" comes first in the data (the writer sorts by name), right after
     * the header, so its first page is shared with the header and its last
     * with "left": neither may be discarded. */
    sd_tensor *big = filled(SD_F16, BIG_ELEMS, 1), *left = filled(SD_F16, 1001, 2),
              *right = filled(SD_F16, 3001, 3);
    sd_st_writer *w = sd_st_writer_new();
    CHECK_OK(sd_st_writer_add(w, "big", big, &err), &err);
    CHECK_OK(sd_st_writer_add(w, "left", left, &err), &err);
    CHECK_OK(sd_st_writer_add(w, "right", right, &err), &err);
    char path[4096];
    snprintf(path, sizeof path, "%s/release.safetensors", sd_test_tmpdir("st_release"));
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    void *mem = NULL;
    size_t mem_size = 0;
    CHECK_OK(sd_st_writer_to_memory(w, &mem, &mem_size, &err), &err);
    sd_st_writer_free(w);
    sd_tensor_unref(big);
    sd_tensor_unref(left);
    sd_tensor_unref(right);
    test_mapped(path);
    if (mem) test_memory(mem, mem_size);
    free(mem);
    unlink(path);
    return sd_test_finish();
}
