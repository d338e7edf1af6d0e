/* GGUF: writer/reader round trip (every dtype the writer takes, key/values
 * of each kind, orig_shape), every strict prefix of a valid file refused, a
 * table of malformed files each refused with an error naming the file and
 * the problem (exact-size heap buffers, so ASan catches any read past the
 * end), tensors of types sdflow does not compute with named in errors, and
 * a mapped file truncated under it reported as changed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/quant.h"
#include "formats/gguf.h"
#include "testutil.h"

/* ---- a byte builder for hand-made files ------------------------------------- */

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void put(bb *b, const void *s, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void u32(bb *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static void u64(bb *b, uint64_t v) {
    u32(b, (uint32_t)v);
    u32(b, (uint32_t)(v >> 32));
}

static void str(bb *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void strn(bb *b, const char *s, size_t n) {
    u64(b, n);
    put(b, s, n);
}

static void head(bb *b, uint32_t version, uint64_t nt, uint64_t nkv) {
    put(b, "GGUF", 4);
    u32(b, version);
    u64(b, nt);
    u64(b, nkv);
}

/* a tensor info: name, dims (ne order), type, offset */
static void tinfo(bb *b, const char *name, int nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    str(b, name);
    u32(b, (uint32_t)nd);
    for (int i = 0; i < nd; i++) u64(b, ne[i]);
    u32(b, type);
    u64(b, off);
}

static void pad(bb *b, size_t a) {
    while (b->n % a) put(b, "", 1);
}

static void zeros(bb *b, size_t n) {
    for (size_t i = 0; i < n; i++) put(b, "\x11", 1);
}

/* Opens the built bytes from an exact-size copy; expects `want` and a
 * message naming the file and containing `needle`. */
static void expect_fail(const char *what, bb *b, sd_status want, const char *needle) {
    uint8_t *copy = malloc(b->n ? b->n : 1);
    memcpy(copy, b->p, b->n);
    sd_error err = {0};
    sd_st_file *f = NULL;
    sd_status st = sd_gguf_open_memory(copy, b->n, "t.gguf", &f, &err);
    CHECK_MSG(st == want, "%s: status %d, want %d (%s)", what, (int)st, (int)want, err.msg);
    CHECK_MSG(f == NULL, "%s: a failed open handed out a file", what);
    CHECK_MSG(strstr(err.msg, "t.gguf") != NULL, "%s: message does not name the file: %s", what, err.msg);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", what, needle, err.msg);
    sd_st_close(f);
    free(copy);
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void test_malformed(void) {
    bb b = {0};
    uint64_t ne2[2] = {32, 2};

    put(&b, "GGUF\3\0\0\0", 8);
    expect_fail("short", &b, SD_ERR_FORMAT, "too short");
    head(&b, 3, 0, 0);
    memcpy(b.p, "GGUX", 4);
    expect_fail("magic", &b, SD_ERR_FORMAT, "no GGUF magic");
    head(&b, 3, 0, 0);
    memcpy(b.p, "FUGG", 4);
    expect_fail("big-endian magic", &b, SD_ERR_UNSUPPORTED, "big-endian");
    head(&b, 0x03000000u, 0, 0);
    expect_fail("swapped version", &b, SD_ERR_UNSUPPORTED, "big-endian");
    head(&b, 1, 0, 0);
    expect_fail("version 1", &b, SD_ERR_UNSUPPORTED, "version 1");
    head(&b, 4, 0, 0);
    expect_fail("version 4", &b, SD_ERR_UNSUPPORTED, "version 4");
    head(&b, 3, 0, (uint64_t)1 << 40);
    expect_fail("kv count", &b, SD_ERR_FORMAT, "key/values cannot fit");
    head(&b, 3, (uint64_t)1 << 40, 0);
    expect_fail("tensor count", &b, SD_ERR_FORMAT, "tensors cannot fit");
    head(&b, 3, 0, 1);
    u64(&b, 1000);
    zeros(&b, 20);
    expect_fail("key length", &b, SD_ERR_FORMAT, "runs past the end");
    head(&b, 3, 0, 1);
    str(&b, "");
    u32(&b, SD_GGUF_U8);
    zeros(&b, 1);
    expect_fail("empty key", &b, SD_ERR_FORMAT, "empty name");
    head(&b, 3, 0, 1);
    strn(&b, "a\0b", 3);
    u32(&b, SD_GGUF_U8);
    zeros(&b, 1);
    expect_fail("NUL in key", &b, SD_ERR_FORMAT, "NUL");
    head(&b, 3, 0, 1);
    strn(&b, "a\xff", 2);
    u32(&b, SD_GGUF_U8);
    zeros(&b, 1);
    expect_fail("bad UTF-8 key", &b, SD_ERR_FORMAT, "UTF-8");
    head(&b, 3, 0, 2);
    str(&b, "k");
    u32(&b, SD_GGUF_U32);
    u32(&b, 1);
    str(&b, "k");
    u32(&b, SD_GGUF_U32);
    u32(&b, 2);
    expect_fail("duplicate key", &b, SD_ERR_FORMAT, "appears twice");
    head(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, 13);
    zeros(&b, 8);
    expect_fail("value type", &b, SD_ERR_FORMAT, "unknown value type");
    head(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, SD_GGUF_ARRAY);
    u32(&b, 77);
    u64(&b, 1);
    zeros(&b, 8);
    expect_fail("array item type", &b, SD_ERR_FORMAT, "array of unknown type");
    head(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, SD_GGUF_ARRAY);
    u32(&b, SD_GGUF_U32);
    u64(&b, 1000);
    zeros(&b, 8);
    expect_fail("array count", &b, SD_ERR_FORMAT, "runs past the end");
    head(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, SD_GGUF_ARRAY);
    for (int i = 0; i < 12; i++) {
        u32(&b, SD_GGUF_ARRAY);
        u64(&b, 1);
    }
    u32(&b, SD_GGUF_U8);
    u64(&b, 0);
    expect_fail("nesting", &b, SD_ERR_FORMAT, "deeper");
    head(&b, 3, 0, 1);
    str(&b, "k");
    u32(&b, SD_GGUF_ARRAY);
    u32(&b, SD_GGUF_STRING);
    u64(&b, 2);
    str(&b, "one");
    u64(&b, 500);
    zeros(&b, 4);
    expect_fail("string in array", &b, SD_ERR_FORMAT, "runs past the end");
    head(&b, 3, 0, 1);
    str(&b, "general.alignment");
    u32(&b, SD_GGUF_U64);
    u64(&b, 64);
    expect_fail("alignment type", &b, SD_ERR_FORMAT, "not UINT32");
    head(&b, 3, 0, 1);
    str(&b, "general.alignment");
    u32(&b, SD_GGUF_U32);
    u32(&b, 48);
    expect_fail("alignment 48", &b, SD_ERR_FORMAT, "power of two");
    head(&b, 3, 0, 1);
    str(&b, "general.alignment");
    u32(&b, SD_GGUF_U32);
    u32(&b, 0);
    expect_fail("alignment 0", &b, SD_ERR_FORMAT, "power of two");

    uint64_t ne5[5] = {1, 1, 1, 1, 1};
    head(&b, 3, 1, 0);
    tinfo(&b, "t", 5, ne5, 0, 0);
    pad(&b, 32);
    zeros(&b, 4);
    expect_fail("5 dims", &b, SD_ERR_FORMAT, "dimensions");
    uint64_t neg[2] = {32, (uint64_t)1 << 63};
    head(&b, 3, 1, 0);
    tinfo(&b, "t", 2, neg, 0, 0);
    expect_fail("negative dim", &b, SD_ERR_FORMAT, "negative");
    head(&b, 3, 1, 0);
    tinfo(&b, "t", 2, ne2, 99, 0);
    expect_fail("unknown type", &b, SD_ERR_FORMAT, "unknown ggml type 99");
    uint64_t ne100[2] = {100, 1};
    head(&b, 3, 1, 0);
    tinfo(&b, "t", 2, ne100, 12, 0);
    expect_fail("partial block", &b, SD_ERR_FORMAT, "not a multiple of its block");
    uint64_t huge[3] = {(uint64_t)1 << 40, (uint64_t)1 << 40, (uint64_t)1 << 40};
    head(&b, 3, 1, 0);
    tinfo(&b, "t", 3, huge, 0, 0);
    expect_fail("huge", &b, SD_ERR_FORMAT, "larger than the file");
    head(&b, 3, 1, 0);
    tinfo(&b, "t", 2, ne2, 0, 8);
    pad(&b, 32);
    zeros(&b, 300);
    expect_fail("unaligned offset", &b, SD_ERR_FORMAT, "not a multiple of the alignment");
    head(&b, 3, 1, 0);
    tinfo(&b, "t", 2, ne2, 0, 0);
    pad(&b, 32);
    zeros(&b, 255);
    expect_fail("truncated data", &b, SD_ERR_FORMAT, "runs past the end of the data section");
    head(&b, 3, 2, 0);
    tinfo(&b, "a", 2, ne2, 0, 0);
    tinfo(&b, "b", 2, ne2, 0, 224);
    pad(&b, 32);
    zeros(&b, 512);
    expect_fail("overlap", &b, SD_ERR_FORMAT, "overlap");
    head(&b, 3, 2, 0);
    tinfo(&b, "a", 2, ne2, 0, 0);
    tinfo(&b, "a", 2, ne2, 0, 256);
    pad(&b, 32);
    zeros(&b, 512);
    expect_fail("duplicate tensor", &b, SD_ERR_FORMAT, "appears twice");
    head(&b, 3, 1, 0);
    tinfo(&b, "", 2, ne2, 0, 0);
    pad(&b, 32);
    zeros(&b, 256);
    expect_fail("empty tensor name", &b, SD_ERR_FORMAT, "empty name");
    head(&b, 3, 1, 1);
    str(&b, "comfy.gguf.orig_shape.t");
    u32(&b, SD_GGUF_ARRAY);
    u32(&b, SD_GGUF_U32);
    u64(&b, 1);
    u32(&b, 64);
    tinfo(&b, "t", 2, ne2, 0, 0);
    pad(&b, 32);
    zeros(&b, 256);
    expect_fail("orig_shape type", &b, SD_ERR_FORMAT, "expected an array of INT32");
    head(&b, 3, 1, 1);
    str(&b, "comfy.gguf.orig_shape.t");
    u32(&b, SD_GGUF_ARRAY);
    u32(&b, SD_GGUF_I32);
    u64(&b, 2);
    u32(&b, 8);
    u32(&b, 9);
    tinfo(&b, "t", 2, ne2, 0, 0);
    pad(&b, 32);
    zeros(&b, 256);
    expect_fail("orig_shape count", &b, SD_ERR_FORMAT, "does not hold");
}

/* A type without sd_dtype: checked, left out, named on access. */
static void test_other_type(void) {
    bb b = {0};
    uint64_t ne[2] = {64, 2};
    head(&b, 3, 2, 0);
    tinfo(&b, "q81", 2, ne, 9 /* Q8_1 */, 0);
    tinfo(&b, "f", 2, ne, 0, 160);
    pad(&b, 32);
    zeros(&b, 160 + 512);
    uint8_t *copy = malloc(b.n);
    memcpy(copy, b.p, b.n);
    sd_error err = {0};
    sd_st_file *f = NULL;
    CHECK_OK(sd_gguf_open_memory(copy, b.n, "o.gguf", &f, &err), &err);
    if (f) {
        CHECK(sd_st_count(f) == 1 && sd_st_find(f, "q81") == NULL && sd_st_find(f, "f") != NULL);
        sd_tensor *t = sd_st_tensor(f, "q81", &err);
        CHECK(t == NULL && err.code == SD_ERR_UNSUPPORTED && strstr(err.msg, "Q8_1") && strstr(err.msg, "q81"));
        sd_st_close(f);
    }
    free(copy);
    free(b.p);
}

/* ---- round trip ----------------------------------------------------------------- */

static sd_tensor *pattern(sd_dtype dt, int nd, const int64_t *shape, unsigned seed) {
    sd_tensor *t = sd_tensor_new(dt, nd, shape);
    uint8_t *p = t->data;
    for (size_t i = 0; i < t->nbytes; i++) p[i] = (uint8_t)(i * 151 + seed * 29 + 7);
    /* finite f16 scales (bit 14 clear: exponent below the maximum) */
    if (sd_dtype_is_quantized(dt))
        for (size_t i = 1; i < t->nbytes; i += 2) p[i] &= 0x3f;
    if (dt == SD_F32)
        for (size_t i = 3; i < t->nbytes; i += 4) p[i] &= 0x3f;
    return t;
}

static void test_round_trip(void) {
    sd_error err = {0};
    sd_gguf_writer *w = sd_gguf_writer_new();
    struct { const char *name; sd_dtype dt; int nd; int64_t shape[4]; } ts[] = {
        {"w.f32", SD_F32, 2, {3, 5}},          {"w.f16", SD_F16, 1, {7}},
        {"w.bf16", SD_BF16, 4, {2, 1, 2, 3}},  {"w.i32", SD_I32, 1, {5}},
        {"w.q4k", SD_Q4_K, 2, {2, 512}},       {"w.q8", SD_Q8_0, 2, {3, 64}},
        {"w.iq4xs", SD_IQ4_XS, 1, {256}},      {"w.q2k", SD_Q2_K, 3, {1, 2, 256}},
        {"scalar", SD_F32, 0, {0}},            {"empty", SD_F16, 2, {0, 4}},
        {"shaped", SD_Q5_0, 2, {4, 64}},
    };
    size_t nts = sizeof ts / sizeof ts[0];
    sd_tensor *src[16];
    for (size_t i = 0; i < nts; i++) {
        src[i] = pattern(ts[i].dt, ts[i].nd, ts[i].shape, (unsigned)i);
        CHECK(src[i] != NULL);
        CHECK_OK(sd_gguf_writer_add(w, ts[i].name, src[i], &err), &err);
    }
    CHECK_OK(sd_gguf_writer_kv_str(w, "general.architecture", "flux", &err), &err);
    CHECK_OK(sd_gguf_writer_kv_u32(w, "answer", 42, &err), &err);
    CHECK_OK(sd_gguf_writer_kv_f32(w, "pi", 3.25f, &err), &err);
    int32_t orig[3] = {2, 2, 64};
    CHECK_OK(sd_gguf_writer_kv_i32s(w, "comfy.gguf.orig_shape.shaped", orig, 3, &err), &err);
    /* refusals */
    CHECK(sd_gguf_writer_kv_u32(w, "answer", 1, &err) == SD_ERR_INVALID);
    CHECK(sd_gguf_writer_add(w, "w.f32", src[0], &err) == SD_ERR_INVALID);
    int64_t bad_rows[2] = {2, 100};
    CHECK(sd_gguf_writer_add_lazy(w, "bad", SD_Q4_K, 2, bad_rows, (sd_gguf_fill_fn)1, NULL, &err) == SD_ERR_INVALID);
    int64_t five[5] = {1, 1, 1, 1, 1};
    sd_tensor *t5 = sd_tensor_new(SD_F32, 5, five);
    CHECK(sd_gguf_writer_add(w, "five", t5, &err) == SD_ERR_INVALID);
    sd_tensor_unref(t5);
    sd_tensor *u8 = sd_tensor_new4(SD_U8, 1, 4, 0, 0, 0);
    CHECK(sd_gguf_writer_add(w, "u8", u8, &err) == SD_ERR_UNSUPPORTED);
    sd_tensor_unref(u8);

    void *mem = NULL;
    size_t size = 0;
    CHECK_OK(sd_gguf_writer_to_memory(w, &mem, &size, &err), &err);

    /* the typed reader */
    sd_gguf *g = NULL;
    CHECK_OK(sd_gguf_parse(mem, size, "rt.gguf", &g, &err), &err);
    if (g) {
        CHECK(sd_gguf_version(g) == 3 && sd_gguf_alignment(g) == 32 && sd_gguf_data_offset(g) % 32 == 0);
        CHECK(sd_gguf_kv_count(g) == 4 && sd_gguf_tensor_count(g) == nts);
        int64_t iv;
        double fv;
        const char *s;
        size_t len;
        CHECK(sd_gguf_kv_int(sd_gguf_find_kv(g, "answer"), &iv) && iv == 42);
        CHECK(sd_gguf_kv_float(sd_gguf_find_kv(g, "pi"), &fv) && fv == 3.25);
        CHECK(sd_gguf_kv_str(sd_gguf_find_kv(g, "general.architecture"), &s, &len) && len == 4 &&
              memcmp(s, "flux", 4) == 0);
        const sd_gguf_kv *a = sd_gguf_find_kv(g, "comfy.gguf.orig_shape.shaped");
        CHECK(a && a->type == SD_GGUF_ARRAY && a->item_type == SD_GGUF_I32 && a->count == 3);
        CHECK(sd_gguf_array_int(a, 2, &iv) && iv == 64 && !sd_gguf_array_int(a, 3, &iv));
        CHECK(!sd_gguf_kv_int(sd_gguf_find_kv(g, "pi"), &iv) && sd_gguf_find_kv(g, "nope") == NULL);
        const sd_gguf_tensor *q = sd_gguf_find_tensor(g, "w.q4k");
        CHECK(q && q->type == 12 && q->n_dims == 2 && q->ne[0] == 512 && q->ne[1] == 2 && q->nbytes == 4 * 144);
        for (size_t i = 0; i < sd_gguf_tensor_count(g); i++)
            CHECK((sd_gguf_tensor_at(g, i)->offset - sd_gguf_data_offset(g)) % 32 == 0);
        sd_gguf_free(g);
    }

    /* the weights view */
    sd_st_file *f = NULL;
    CHECK_OK(sd_gguf_open_memory(mem, size, "rt.gguf", &f, &err), &err);
    if (f) {
        CHECK(sd_st_count(f) == nts);
        CHECK(strcmp(sd_st_metadata(f, "general.architecture"), "flux") == 0);
        CHECK(strcmp(sd_st_metadata(f, "answer"), "42") == 0);
        CHECK(strcmp(sd_st_metadata(f, "pi"), "3.25") == 0);
        CHECK(sd_st_metadata(f, "comfy.gguf.orig_shape.shaped") == NULL); /* arrays left out */
        for (size_t i = 0; i < nts; i++) {
            const sd_st_entry *e = sd_st_find(f, ts[i].name);
            CHECK_MSG(e != NULL, "%s missing", ts[i].name);
            if (!e) continue;
            CHECK(e->dtype == ts[i].dt && e->nbytes == src[i]->nbytes);
            if (strcmp(ts[i].name, "shaped") == 0) {
                CHECK(e->ndim == 3 && e->shape[0] == 2 && e->shape[1] == 2 && e->shape[2] == 64);
            } else {
                CHECK(e->ndim == ts[i].nd);
                for (int d = 0; d < e->ndim; d++) CHECK(e->shape[d] == ts[i].shape[d]);
            }
            sd_tensor *t = sd_st_tensor(f, ts[i].name, &err);
            CHECK(t && t->nbytes == src[i]->nbytes && (!t->nbytes || memcmp(t->data, src[i]->data, t->nbytes) == 0));
            /* mapped bytes are borrowed, not copied */
            CHECK(t && (!t->nbytes || ((uint8_t *)t->data >= (uint8_t *)mem &&
                                       (uint8_t *)t->data + t->nbytes <= (uint8_t *)mem + size)));
            if (t && sd_dtype_is_quantized(t->dtype)) {
                sd_tensor *c = sd_st_tensor_f32(f, ts[i].name, &err);
                int64_t n = sd_tensor_numel(t);
                float *y = malloc((size_t)n * sizeof *y);
                sd_quant_dequant(t->dtype, SD_DQ_F16, t->data, y, n);
                CHECK(c && memcmp(c->data, y, (size_t)n * sizeof *y) == 0);
                free(y);
                sd_tensor_unref(c);
            }
            sd_tensor_unref(t);
        }
        sd_st_close(f);
    }

    /* every strict prefix is refused (the last tensor ends the file) */
    int accepted = 0;
    for (size_t n = 0; n < size; n++) {
        uint8_t *c = malloc(n ? n : 1);
        memcpy(c, mem, n);
        sd_gguf *h = NULL;
        if (sd_gguf_parse(c, n, "p.gguf", &h, NULL) == SD_OK) accepted++;
        sd_gguf_free(h);
        free(c);
    }
    CHECK_MSG(accepted == 0, "%d truncated prefixes accepted", accepted);

    /* a mapped file, truncated while open */
    const char *dir = sd_test_tmpdir("gguf");
    char path[1024];
    snprintf(path, sizeof path, "%s/rt.gguf", dir);
    CHECK_OK(sd_gguf_writer_save(w, path, &err), &err);
    CHECK(sd_gguf_is_gguf(path));
    CHECK_OK(sd_gguf_open(path, &f, &err), &err);
    if (f) {
        CHECK_OK(sd_st_check(f, &err), &err);
        CHECK(truncate(path, (off_t)(size / 2)) == 0);
        CHECK(sd_st_check(f, &err) == SD_ERR_IO && strstr(err.msg, "rt.gguf"));
        sd_st_close(f);
    }
    free(mem);
    for (size_t i = 0; i < nts; i++) sd_tensor_unref(src[i]);
    sd_gguf_writer_free(w);
}

/* Lazily filled tensors are produced while saving. */
static sd_status fill_seq(void *ctx, const char *name, void *dst, size_t n, sd_error *err) {
    (void)name;
    (void)err;
    int *calls = ctx;
    (*calls)++;
    for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)i;
    return SD_OK;
}

static void test_lazy(void) {
    sd_error err = {0};
    int calls = 0;
    sd_gguf_writer *w = sd_gguf_writer_new();
    int64_t shape[2] = {4, 32};
    CHECK_OK(sd_gguf_writer_add_lazy(w, "lazy", SD_Q8_0, 2, shape, fill_seq, &calls, &err), &err);
    void *mem = NULL;
    size_t size = 0;
    CHECK_OK(sd_gguf_writer_to_memory(w, &mem, &size, &err), &err);
    CHECK(calls == 1);
    sd_st_file *f = NULL;
    CHECK_OK(sd_gguf_open_memory(mem, size, "lazy.gguf", &f, &err), &err);
    const sd_st_entry *e = f ? sd_st_find(f, "lazy") : NULL;
    CHECK(e && e->nbytes == 4 * 34 && ((const uint8_t *)mem)[e->offset + 5] == 5);
    sd_st_close(f);
    free(mem);
    sd_gguf_writer_free(w);
}

/* ComfyUI-GGUF's naming: the prefix rule and sd_map_replace. */
static void test_view_names(void) {
    sd_error err = {0};
    sd_gguf_writer *w = sd_gguf_writer_new();
    const char *names[] = {"model.diffusion_model.enc.blk.0.attn_q.weight", "model.diffusion_model.token_embd.weight",
                           "other.weight"};
    for (int i = 0; i < 3; i++) {
        sd_tensor *t = sd_tensor_new4(SD_F16, 1, 4, 0, 0, 0);
        CHECK_OK(sd_gguf_writer_add(w, names[i], t, &err), &err);
        sd_tensor_unref(t);
    }
    void *mem = NULL;
    size_t size = 0;
    CHECK_OK(sd_gguf_writer_to_memory(w, &mem, &size, &err), &err);
    static const char *const map[][2] = {{"enc.", "encoder."}, {".blk.", ".block."}, {"token_embd", "shared"},
                                         {"attn_q", "layer.0.SelfAttention.q"}, {NULL, NULL}};
    sd_gguf_view_opts o = {"model.diffusion_model.", map};
    sd_st_file *f = NULL;
    CHECK_OK(sd_gguf_open_memory_ex(mem, size, "v.gguf", &o, &f, &err), &err);
    if (f) {
        CHECK(sd_st_count(f) == 2);
        CHECK(sd_st_find(f, "encoder.block.0.layer.0.SelfAttention.q.weight") != NULL);
        CHECK(sd_st_find(f, "shared.weight") != NULL);
        sd_st_close(f);
    }
    /* names that collide after the renaming */
    static const char *const clash[][2] = {{"other", "token_embd"}, {"model.diffusion_model.", ""}, {NULL, NULL}};
    sd_gguf_view_opts o2 = {NULL, clash};
    CHECK(sd_gguf_open_memory_ex(mem, size, "v.gguf", &o2, &f, &err) == SD_ERR_FORMAT && f == NULL &&
          strstr(err.msg, "appears twice"));
    free(mem);
    sd_gguf_writer_free(w);
}

int main(void) {
    test_view_names();
    test_malformed();
    test_other_type();
    test_round_trip();
    test_lazy();
    return sd_test_finish();
}
