/* safetensors: writer/reader round trip for every dtype, byte-identical
 * rewrite of reference-library files, a table of malformed headers that must
 * each be rejected with a message naming the problem (buffers are exact-size
 * heap blocks so ASan catches any read past the end), and every file of the
 * shared test data opened and fully read (skipped parts when absent). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/safetensors.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------- */

/* Exact-size buffer: 8-byte length `hlen_field`, header text, `data_len`
 * bytes of data (i*7 pattern). */
static uint8_t *mkfile(const char *hdr, uint64_t hlen_field, size_t data_len, size_t *size) {
    size_t hl = strlen(hdr);
    *size = 8 + hl + data_len;
    uint8_t *b = malloc(*size ? *size : 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hlen_field >> (8 * i));
    memcpy(b + 8, hdr, hl);
    for (size_t i = 0; i < data_len; i++) b[8 + hl + i] = (uint8_t)(i * 7);
    return b;
}

static uint8_t *mkvalid(const char *hdr, size_t data_len, size_t *size) {
    return mkfile(hdr, strlen(hdr), data_len, size);
}

static void fill_pattern(sd_tensor *t, unsigned seed) {
    uint8_t *p = t->data;
    for (size_t i = 0; i < t->nbytes; i++) p[i] = (uint8_t)(i * 131 + seed * 17 + 3);
    if (t->dtype == SD_BOOL)
        for (size_t i = 0; i < t->nbytes; i++) p[i] &= 1;
}

/* ---- round trip ------------------------------------------------------------ */

static void test_round_trip(void) {
    sd_error err;
    sd_error_clear(&err);
    sd_st_writer *w = sd_st_writer_new();
    CHECK(w != NULL);
    sd_tensor *ts[SD_DTYPE_COUNT + 3];
    char names[SD_DTYPE_COUNT + 3][32];
    int nt = 0;
    for (int d = 0; d < SD_DTYPE_COUNT; d++) {
        if (sd_dtype_is_quantized((sd_dtype)d)) continue; /* GGUF's, not safetensors dtypes */
        /* odd shapes so that 1-byte dtypes leave the rest unaligned unless
         * the writer orders data by element size */
        sd_tensor *t = sd_tensor_new4((sd_dtype)d, 3, 3, 1, 5, 0);
        fill_pattern(t, (unsigned)d);
        snprintf(names[nt], sizeof names[nt], "t.%s", sd_dtype_name((sd_dtype)d));
        ts[nt++] = t;
    }
    ts[nt] = sd_tensor_new(SD_F32, 0, NULL); /* 0-d scalar */
    *(float *)ts[nt]->data = 2.5f;
    snprintf(names[nt++], 32, "scalar");
    int64_t z[2] = {0, 4};
    ts[nt] = sd_tensor_new(SD_F16, 2, z); /* no elements */
    snprintf(names[nt++], 32, "empty");
    int64_t s5[5] = {1, 2, 1, 3, 1};
    ts[nt] = sd_tensor_new(SD_F64, 5, s5);
    fill_pattern(ts[nt], 99);
    snprintf(names[nt++], 32, "five \"dims\"\n");
    for (int i = 0; i < nt; i++) CHECK_OK(sd_st_writer_add(w, names[i], ts[i], &err), &err);
    CHECK(sd_st_writer_add(w, names[0], ts[0], &err) == SD_ERR_INVALID);
    CHECK(sd_st_writer_add(w, "__metadata__", ts[0], &err) == SD_ERR_INVALID);
    CHECK_OK(sd_st_writer_meta(w, "format", "pt", &err), &err);
    CHECK_OK(sd_st_writer_meta(w, "quote\"d", "tab\there \xc3\xa9", &err), &err);

    void *mem = NULL;
    size_t msize = 0;
    CHECK_OK(sd_st_writer_to_memory(w, &mem, &msize, &err), &err);
    const char *dir = sd_test_tmpdir("safetensors");
    char path[1024];
    snprintf(path, sizeof path, "%s/rt.safetensors", dir);
    CHECK_OK(sd_st_writer_save(w, path, &err), &err);
    sd_st_writer_free(w);

    size_t fsize = 0;
    char *disk = sd_test_read_file(path, &fsize);
    CHECK(disk && fsize == msize && memcmp(disk, mem, msize) == 0);
    free(disk);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | ((uint8_t *)mem)[i];
    CHECK(hlen % 8 == 0);
    CHECK(((char *)mem)[8 + hlen - 1] == '}' || ((char *)mem)[8 + hlen - 1] == ' ');
    /* no temporary file left behind */
    DIR *dd = opendir(dir);
    int nfiles = 0;
    for (struct dirent *de; dd && (de = readdir(dd));)
        if (de->d_name[0] != '.') nfiles++;
    if (dd) closedir(dd);
    CHECK(nfiles == 1);

    for (int pass = 0; pass < 2; pass++) {
        sd_st_file *f = NULL;
        if (pass == 0) CHECK_OK(sd_st_open_memory(mem, msize, "rt-mem", &f, &err), &err);
        else CHECK_OK(sd_st_open(path, &f, &err), &err);
        if (!f) continue;
        CHECK(sd_st_count(f) == (size_t)nt);
        for (size_t i = 1; i < sd_st_count(f); i++)
            CHECK(strcmp(sd_st_at(f, i - 1)->name, sd_st_at(f, i)->name) < 0);
        CHECK(sd_st_metadata_count(f) == 2);
        CHECK(sd_st_metadata(f, "format") && strcmp(sd_st_metadata(f, "format"), "pt") == 0);
        CHECK(sd_st_metadata(f, "quote\"d") &&
              strcmp(sd_st_metadata(f, "quote\"d"), "tab\there \xc3\xa9") == 0);
        const char *k0, *v0;
        sd_st_metadata_at(f, 0, &k0, &v0);
        CHECK(k0 && strcmp(k0, "format") == 0);
        sd_tensor *keep = NULL;
        for (int i = 0; i < nt; i++) {
            const sd_st_entry *e = sd_st_find(f, names[i]);
            CHECK_MSG(e != NULL, "missing %s", names[i]);
            if (!e) continue;
            CHECK(e->offset % sd_dtype_size(e->dtype) == 0);
            sd_tensor *t = sd_st_tensor(f, names[i], &err);
            CHECK(t && sd_tensor_same_shape(t, ts[i]) && t->ndim == ts[i]->ndim);
            CHECK(t && t->nbytes == ts[i]->nbytes && memcmp(t->data, ts[i]->data, t->nbytes) == 0);
            if (i == 0) keep = t;
            else sd_tensor_unref(t);
        }
        sd_tensor *sc = sd_st_tensor_f32(f, "scalar", &err);
        CHECK(sc && sc->ndim == 0 && sd_tensor_f32(sc)[0] == 2.5f);
        sd_tensor_unref(sc);
        sd_tensor *h = sd_st_tensor_f32(f, "t.F16", &err);
        sd_tensor *hc = sd_tensor_to_dtype(ts[SD_F16], SD_F32);
        CHECK(h && hc && h->dtype == SD_F32 && memcmp(h->data, hc->data, h->nbytes) == 0);
        sd_tensor_unref(h);
        sd_tensor_unref(hc);
        CHECK(sd_st_tensor(f, "nope", &err) == NULL && err.code == SD_ERR_NOT_FOUND);
        CHECK(strstr(err.msg, "nope") != NULL);
        /* a tensor keeps the mapping alive after the file handle is closed */
        sd_st_close(f);
        CHECK(keep && memcmp(keep->data, ts[0]->data, keep->nbytes) == 0);
        sd_tensor_unref(keep);
    }
    free(mem);
    for (int i = 0; i < nt; i++) sd_tensor_unref(ts[i]);

    /* empty writer: "{}" padded, opens with no tensors */
    w = sd_st_writer_new();
    CHECK_OK(sd_st_writer_to_memory(w, &mem, &msize, &err), &err);
    sd_st_writer_free(w);
    sd_st_file *f = NULL;
    CHECK(msize == 16);
    CHECK_OK(sd_st_open_memory(mem, msize, "empty", &f, &err), &err);
    CHECK(f && sd_st_count(f) == 0);
    sd_st_close(f);
    free(mem);
}

/* ---- valid edge cases ---------------------------------------------------- */

/* ---- lazy tensors: bytes made while saving ------------------------------------- */

/* The fill gives byte i of tensor `seed` the value of fill_pattern, and
 * records that the chunks of one tensor come in order, covering it once. */
typedef struct lazy_src {
    unsigned seed;
    uint64_t next;  /* the offset the next chunk must start at */
    int bad_order;
    int fail_at;    /* 1: fail on the first chunk */
} lazy_src;

static sd_status lazy_fill(void *user, const char *name, uint64_t offset, void *buf, size_t n, sd_error *err) {
    lazy_src *l = user;
    if (l->fail_at) return sd_error_set(err, SD_ERR_IO, "fill of %s failed on purpose", name);
    if (offset != l->next) l->bad_order = 1;
    l->next = offset + n;
    uint8_t *p = buf;
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)((offset + i) * 131 + l->seed * 17 + 3);
    return SD_OK;
}

static void test_lazy(void) {
    sd_error err;
    sd_error_clear(&err);
    /* the same tensors eagerly and lazily: one of 20 MiB (3 chunks of the
     * writer's 8 MiB), a small one, and an eager one beside them */
    const int64_t big[2] = {5 << 20, 2}, small[1] = {3};
    sd_tensor *tb = sd_tensor_new(SD_F16, 2, big), *ts = sd_tensor_new(SD_F32, 1, small),
              *te = sd_tensor_new(SD_BF16, 1, small);
    fill_pattern(tb, 1);
    fill_pattern(ts, 2);
    fill_pattern(te, 3);
    sd_st_writer *we = sd_st_writer_new(), *wl = sd_st_writer_new();
    CHECK_OK(sd_st_writer_add(we, "big", tb, &err), &err);
    CHECK_OK(sd_st_writer_add(we, "small", ts, &err), &err);
    CHECK_OK(sd_st_writer_add(we, "eager", te, &err), &err);
    lazy_src lb = {1, 0, 0, 0}, ls = {2, 0, 0, 0};
    CHECK_OK(sd_st_writer_add_lazy(wl, "big", SD_F16, 2, big, lazy_fill, &lb, &err), &err);
    CHECK_OK(sd_st_writer_add_lazy(wl, "small", SD_F32, 1, small, lazy_fill, &ls, &err), &err);
    CHECK_OK(sd_st_writer_add(wl, "eager", te, &err), &err);
    CHECK(sd_st_writer_add_lazy(wl, "small", SD_F32, 1, small, lazy_fill, &ls, &err) == SD_ERR_INVALID);
    CHECK(sd_st_writer_add_lazy(wl, "nofill", SD_F32, 1, small, NULL, NULL, &err) == SD_ERR_INVALID);
    void *me = NULL, *ml = NULL;
    size_t ne = 0, nl = 0;
    CHECK_OK(sd_st_writer_to_memory(we, &me, &ne, &err), &err);
    CHECK_OK(sd_st_writer_to_memory(wl, &ml, &nl, &err), &err);
    CHECK_MSG(me && ml && ne == nl && memcmp(me, ml, ne) == 0, "lazy to_memory equals the eager file");
    CHECK_MSG(!lb.bad_order && lb.next == tb->nbytes && !ls.bad_order && ls.next == ts->nbytes,
              "chunks in order, each tensor covered once");
    char path[4200];
    snprintf(path, sizeof path, "%s/lazy.safetensors", sd_test_tmpdir("safetensors_lazy"));
    lb = (lazy_src){1, 0, 0, 0};
    ls = (lazy_src){2, 0, 0, 0};
    CHECK_OK(sd_st_writer_save(wl, path, &err), &err);
    size_t nf = 0;
    char *file = sd_test_read_file(path, &nf);
    CHECK_MSG(file && nf == ne && memcmp(file, me, ne) == 0, "lazy save equals the eager file");
    free(file);
    /* a failing fill fails the save and leaves neither the file nor a temporary */
    char failed[4300];
    snprintf(failed, sizeof failed, "%s.failed", path);
    ls.fail_at = 1;
    lb = (lazy_src){1, 0, 0, 0};
    sd_status rc = sd_st_writer_save(wl, failed, &err);
    CHECK_MSG(rc == SD_ERR_IO && strstr(err.msg, "on purpose"), "a fill error is the save's (%s)", err.msg);
    struct stat st;
    CHECK(stat(failed, &st) != 0);
    free(me);
    free(ml);
    sd_st_writer_free(we);
    sd_st_writer_free(wl);
    sd_tensor_unref(tb);
    sd_tensor_unref(ts);
    sd_tensor_unref(te);
}

static void test_valid_edges(void) {
    sd_error err;
    sd_error_clear(&err);
    size_t size;
    /* unaligned data from a writer that does not order by size: copied */
    uint8_t *b = mkvalid("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]}}   ",
                         9, &size);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open_memory(b, size, "unaligned", &f, &err), &err);
    if (f) {
        sd_tensor *t = sd_st_tensor(f, "b", &err);
        CHECK(t && ((uintptr_t)t->data % 4) == 0);
        CHECK(t && memcmp(t->data, b + size - 8, 8) == 0);
        sd_tensor_unref(t);
        sd_st_close(f);
    }
    free(b);
    /* a valid safetensors dtype sdflow lacks: file opens, tensor says why */
    b = mkvalid("{\"u\":{\"dtype\":\"U32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]}}",
                12, &size);
    f = NULL;
    CHECK_OK(sd_st_open_memory(b, size, "u32", &f, &err), &err);
    if (f) {
        CHECK(sd_st_count(f) == 1 && sd_st_find(f, "u") == NULL);
        CHECK(sd_st_tensor(f, "u", &err) == NULL && err.code == SD_ERR_UNSUPPORTED);
        CHECK(strstr(err.msg, "U32") != NULL);
        sd_tensor *x = sd_st_tensor(f, "x", &err);
        CHECK(x && x->ndim == 0 && x->nbytes == 4);
        sd_tensor_unref(x);
        sd_st_close(f);
    }
    free(b);
    /* fp8 tensors: one byte per element, read as stored, decoded exactly */
    b = mkvalid("{\"q\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                "\"r\":{\"dtype\":\"F8_E5M2\",\"shape\":[3],\"data_offsets\":[4,7]}}",
                7, &size);
    static const uint8_t codes[7] = {0x38, 0xb8, 0x7e, 0x01, 0x3c, 0x7b, 0xfc};
    memcpy(b + size - 7, codes, 7);
    f = NULL;
    CHECK_OK(sd_st_open_memory(b, size, "fp8", &f, &err), &err);
    if (f) {
        const sd_st_entry *e = sd_st_find(f, "q");
        CHECK(e && e->dtype == SD_F8_E4M3 && e->nbytes == 4);
        sd_tensor *q = sd_st_tensor(f, "q", &err), *q32 = sd_st_tensor_f32(f, "q", &err);
        CHECK(q && q->dtype == SD_F8_E4M3 && q->nbytes == 4 && memcmp(q->data, codes, 4) == 0);
        CHECK(q32 && q32->dtype == SD_F32 && sd_tensor_f32(q32)[0] == 1.0f &&
              sd_tensor_f32(q32)[1] == -1.0f && sd_tensor_f32(q32)[2] == 448.0f &&
              sd_tensor_f32(q32)[3] == 0x1p-9f);
        sd_tensor *r32 = sd_st_tensor_f32(f, "r", &err);
        CHECK(r32 && sd_tensor_f32(r32)[0] == 1.0f && sd_tensor_f32(r32)[1] == 57344.0f &&
              isinf(sd_tensor_f32(r32)[2]) && sd_tensor_f32(r32)[2] < 0);
        sd_tensor_unref(q);
        sd_tensor_unref(q32);
        sd_tensor_unref(r32);
        sd_st_close(f);
    }
    free(b);
    /* holes between tensors are tolerated (only overlaps are errors) */
    b = mkvalid("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[9,9]}}",
                16, &size);
    f = NULL;
    CHECK_OK(sd_st_open_memory(b, size, "holes", &f, &err), &err);
    sd_st_close(f);
    free(b);
}

/* ---- malformed files ------------------------------------------------------- */

typedef struct bad_case {
    const char *what;
    const char *hdr;
    int64_t hlen; /* -1: strlen(hdr) */
    size_t data;
    sd_status code;
    const char *expect; /* substring of the message */
} bad_case;

#define T1(dt, sh, off) "{\"t\":{\"dtype\":" dt ",\"shape\":" sh ",\"data_offsets\":" off "}}"

static const bad_case bad_cases[] = {
    {"empty file", "", 0, 0, SD_ERR_FORMAT, "too short"},
    {"seven bytes", "", -2, 0, SD_ERR_FORMAT, "too short"},
    {"truncated header", "{\"t\":{\"dtype\":\"F32\",\"sha", 400, 0, SD_ERR_FORMAT, "past the end"},
    {"lying length", T1("\"F32\"", "[1]", "[0,4]"), 1000, 4, SD_ERR_FORMAT, "past the end"},
    {"huge header length", "{}", (int64_t)0x7fffffffffffffffLL, 0, SD_ERR_FORMAT, "implausibly large"},
    {"header length 2^64-1", "{}", -3, 0, SD_ERR_FORMAT, "implausibly large"},
    {"zero header length", "{}", 0, 0, SD_ERR_FORMAT, "not a JSON object"},
    {"header is an array", "[1, 2, 3]", -1, 0, SD_ERR_FORMAT, "not a JSON object"},
    {"bad JSON", "{\"t\":{\"dtype\":\"F32\",", -1, 0, SD_ERR_FORMAT, "well-formed JSON"},
    {"trailing garbage", "{}  x", -1, 0, SD_ERR_FORMAT, "after the header"},
    {"NUL inside header", "{} \0 ", 5, 0, SD_ERR_FORMAT, "after the header"},
    {"bad dtype", T1("\"F33\"", "[1]", "[0,4]"), -1, 4, SD_ERR_FORMAT, "unknown dtype \"F33\""},
    {"sub-byte dtype", T1("\"F4\"", "[2]", "[0,1]"), -1, 4, SD_ERR_FORMAT, "unknown dtype"},
    {"dtype not a string", T1("7", "[1]", "[0,4]"), -1, 4, SD_ERR_FORMAT, "dtype"},
    {"missing dtype", "{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", -1, 4, SD_ERR_FORMAT, "dtype"},
    {"entry not an object", "{\"t\":[1,2]}", -1, 0, SD_ERR_FORMAT, "not an object"},
    {"negative shape", T1("\"F32\"", "[-1]", "[0,4]"), -1, 4, SD_ERR_FORMAT, "shape entry 0"},
    {"fractional shape", T1("\"F32\"", "[2,1.5]", "[0,12]"), -1, 12, SD_ERR_FORMAT, "shape entry 1"},
    {"string shape", T1("\"F32\"", "[\"2\"]", "[0,8]"), -1, 8, SD_ERR_FORMAT, "shape entry 0"},
    {"shape not array", T1("\"F32\"", "2", "[0,8]"), -1, 8, SD_ERR_FORMAT, "shape"},
    {"too many dims", T1("\"F32\"", "[1,1,1,1,1,1,1]", "[0,4]"), -1, 4, SD_ERR_UNSUPPORTED, "dimensions"},
    {"overflowing shape", T1("\"F32\"", "[4294967296,4294967296,4294967296]", "[0,4]"), -1, 4,
     SD_ERR_FORMAT, "larger than the file"},
    {"shape/length mismatch", T1("\"F32\"", "[2,2]", "[0,8]"), -1, 16, SD_ERR_FORMAT,
     "needs 16 bytes but data_offsets span 8"},
    {"begin after end", T1("\"F32\"", "[1]", "[8,4]"), -1, 16, SD_ERR_FORMAT, "begin after end"},
    {"out of bounds", T1("\"F32\"", "[4]", "[4,20]"), -1, 16, SD_ERR_FORMAT, "outside the data section"},
    {"offset past 2^53", T1("\"U8\"", "[1]", "[1e300,1e300]"), -1, 16, SD_ERR_FORMAT, "not non-negative"},
    {"negative offset", T1("\"U8\"", "[4]", "[-4,0]"), -1, 16, SD_ERR_FORMAT, "not non-negative"},
    {"offsets arity", T1("\"F32\"", "[1]", "[0,4,8]"), -1, 16, SD_ERR_FORMAT, "[begin, end]"},
    {"missing offsets", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", -1, 4, SD_ERR_FORMAT, "[begin, end]"},
    {"overlapping",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     -1, 16, SD_ERR_FORMAT, "overlap"},
    {"same range twice",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
     -1, 16, SD_ERR_FORMAT, "overlap"},
    {"duplicate name",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     -1, 8, SD_ERR_FORMAT, "'a' appears twice"},
    {"non-string metadata", "{\"__metadata__\":{\"k\":1}}", -1, 0, SD_ERR_FORMAT, "'k' is not a string"},
    {"metadata not an object", "{\"__metadata__\":\"x\"}", -1, 0, SD_ERR_FORMAT, "not an object"},
    {"duplicate metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", -1, 0, SD_ERR_FORMAT, "twice"},
};

static void test_malformed(void) {
    size_t n = sizeof bad_cases / sizeof bad_cases[0];
    for (size_t i = 0; i < n; i++) {
        const bad_case *c = &bad_cases[i];
        size_t size;
        uint64_t hl = c->hlen >= 0 ? (uint64_t)c->hlen : strlen(c->hdr);
        if (c->hlen == -3) hl = UINT64_MAX;
        uint8_t *b;
        if (strcmp(c->what, "NUL inside header") == 0) {
            b = mkfile("{}   ", 5, 0, &size);
            b[8 + 3] = 0;
        } else {
            b = mkfile(c->hdr, hl, c->data, &size);
        }
        if (c->hlen == -2) size = 7;
        else if (strcmp(c->what, "empty file") == 0) size = 0;
        sd_error err;
        sd_error_clear(&err);
        sd_st_file *f = (sd_st_file *)(uintptr_t)1;
        sd_status st = sd_st_open_memory(b, size, "bad.safetensors", &f, &err);
        CHECK_MSG(st == c->code, "%s: got %s (%s)", c->what, sd_status_name(st), err.msg);
        CHECK_MSG(f == NULL, "%s: out not NULL", c->what);
        CHECK_MSG(strstr(err.msg, c->expect) != NULL, "%s: message '%s' lacks '%s'", c->what, err.msg,
                  c->expect);
        CHECK_MSG(strstr(err.msg, "bad.safetensors") != NULL, "%s: message lacks the file name", c->what);
        if (st == SD_OK) sd_st_close(f);
        free(b);
    }
    /* messages name the tensor */
    size_t size;
    uint8_t *b = mkvalid("{\"my.weight\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, &size);
    sd_error err;
    sd_st_file *f = NULL;
    CHECK(sd_st_open_memory(b, size, "named.safetensors", &f, &err) == SD_ERR_FORMAT);
    CHECK(strstr(err.msg, "my.weight") != NULL);
    free(b);
    /* every truncation of a valid file is rejected cleanly */
    b = mkvalid("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &size);
    int all = 1;
    for (size_t cut = 0; cut < size; cut++) {
        uint8_t *t = malloc(cut ? cut : 1);
        memcpy(t, b, cut);
        f = NULL;
        if (sd_st_open_memory(t, cut, "cut", &f, &err) == SD_OK) {
            all = 0;
            sd_st_close(f);
        }
        free(t);
    }
    CHECK(all);
    /* missing file */
    CHECK(sd_st_open("/nonexistent/dir/x.safetensors", &f, &err) == SD_ERR_NOT_FOUND);
    CHECK(strstr(err.msg, "x.safetensors") != NULL);
    free(b);
}

/* ---- shared test data ---------------------------------------------------- */

/* Opens and reads every tensor; when `must_match`, rewriting the file gives
 * the identical bytes (the files were written by the reference library). */
static int check_file(const char *path, int must_match) {
    sd_error err;
    sd_error_clear(&err);
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(path, &f, &err), &err);
    if (!f) return 0;
    sd_st_writer *w = sd_st_writer_new();
    uint64_t sum = 0;
    int ok = 1;
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        sd_tensor *t = sd_st_tensor(f, e->name, &err);
        if (!t) {
            ok = 0;
            continue;
        }
        const uint8_t *p = t->data;
        for (size_t k = 0; k < t->nbytes; k += 61) sum += p[k];
        if (sd_st_writer_add(w, e->name, t, &err) != SD_OK) ok = 0;
        sd_tensor_unref(t);
    }
    CHECK_MSG(ok, "%s: %s", path, err.msg);
    (void)sum;
    for (size_t i = 0; i < sd_st_metadata_count(f); i++) {
        const char *k, *v;
        sd_st_metadata_at(f, i, &k, &v);
        sd_st_writer_meta(w, k, v, &err);
    }
    sd_st_close(f); /* the writer's tensors keep the mapping alive */
    int same = 0;
    if (must_match) {
        void *mem = NULL;
        size_t msize = 0;
        CHECK_OK(sd_st_writer_to_memory(w, &mem, &msize, &err), &err);
        size_t fsize = 0;
        char *orig = sd_test_read_file(path, &fsize);
        same = orig && mem && fsize == msize && memcmp(orig, mem, msize) == 0;
        CHECK_MSG(same, "%s: rewrite differs from the original (%zu vs %zu bytes)", path, msize, fsize);
        free(orig);
        free(mem);
    }
    sd_st_writer_free(w);
    return 1;
}

static int check_dir(const char *dir, int must_match) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 12 || strcmp(de->d_name + l - 12, ".safetensors") != 0) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        n += check_file(path, must_match);
    }
    closedir(d);
    return n;
}

int main(void) {
    test_round_trip();
    test_lazy();
    test_valid_edges();
    test_malformed();
    const char *td = getenv("SDFLOW_TESTDATA");
    if (!td || !*td) td = sd_test_testdata_dir();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models", td);
    int n = check_dir(dir, 1);
    snprintf(dir, sizeof dir, "%s/golden", td);
    n += check_dir(dir, 0);
    if (n == 0) fprintf(stderr, "note: no test data under %s; shared-file checks not run\n", td);
    else printf("opened %d shared safetensors files\n", n);
    return sd_test_finish();
}
