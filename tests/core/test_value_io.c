/* value_io: round trips of every value kind (LATENT / CONDITIONING shapes
 * included), the exact bytes of a small blob (the documented format), handles
 * and over-deep trees refused, and corrupt blobs (every truncation, every
 * single-byte change, hand-made lies) rejected without a crash. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/value_io.h"
#include "testutil.h"

static sd_tensor *pattern_tensor(sd_dtype dt, int ndim, const int64_t *shape, unsigned seed) {
    sd_tensor *t = sd_tensor_new(dt, ndim, shape);
    uint8_t *p = t->data;
    for (size_t i = 0; i < t->nbytes; i++) p[i] = (uint8_t)(i * 37 + seed);
    if (dt == SD_BOOL)
        for (size_t i = 0; i < t->nbytes; i++) p[i] &= 1;
    return t;
}

static void dict_tensor(sd_value *d, const char *k, sd_tensor *t) {
    sd_value_dict_set(d, k, sd_value_tensor(t));
    sd_tensor_unref(t);
}

/* A tree with every kind and the shapes nodes pass around. */
static sd_value *sample_tree(void) {
    sd_value *root = sd_value_dict();
    int64_t ls[4] = {1, 4, 8, 8};
    sd_value *latent = sd_value_dict();
    dict_tensor(latent, "samples", pattern_tensor(SD_F32, 4, ls, 1));
    int64_t ms[3] = {1, 16, 16};
    dict_tensor(latent, "noise_mask", pattern_tensor(SD_F32, 3, ms, 2));
    sd_value *bi = sd_value_list();
    sd_value_list_append(bi, sd_value_int(0));
    sd_value_list_append(bi, sd_value_int(3));
    sd_value_dict_set(latent, "batch_index", bi);
    sd_value_dict_set(root, "latent", latent);

    sd_value *cond = sd_value_list();
    for (int i = 0; i < 2; i++) {
        sd_value *c = sd_value_dict();
        int64_t cs[3] = {1, 7, 16};
        dict_tensor(c, "cond", pattern_tensor(SD_F32, 3, cs, 10 + i));
        int64_t ps[2] = {1, 16};
        dict_tensor(c, "pooled_output", pattern_tensor(SD_F32, 2, ps, 20 + i));
        sd_value_dict_set(c, "strength", sd_value_float(0.75));
        {
            sd_value *area = sd_value_list();
            for (int k = 0; k < 4; k++) sd_value_list_append(area, sd_value_int(k * 8));
            sd_value_dict_set(c, "area", area);
        }
        sd_value_list_append(cond, c);
    }
    sd_value_dict_set(root, "conditioning", cond);

    sd_value *sc = sd_value_list();
    sd_value_list_append(sc, sd_value_none());
    sd_value_list_append(sc, sd_value_int(INT64_MIN));
    sd_value_list_append(sc, sd_value_int(INT64_MAX));
    sd_value_list_append(sc, sd_value_float(-0.0));
    sd_value_list_append(sc, sd_value_float(NAN));
    sd_value_list_append(sc, sd_value_float(INFINITY));
    sd_value_list_append(sc, sd_value_float(1e-310));
    sd_value_list_append(sc, sd_value_bool(1));
    sd_value_list_append(sc, sd_value_bool(0));
    sd_value_list_append(sc, sd_value_string(""));
    sd_value_list_append(sc, sd_value_string("caf\xc3\xa9 \"quoted\"\n"));
    sd_value_list_append(sc, sd_value_list());
    sd_value_list_append(sc, sd_value_dict());
    sd_value_dict_set(root, "scalars", sc);

    sd_value *tens = sd_value_list();
    int64_t s3[3] = {2, 3, 5};
    for (int d = 0; d < SD_DTYPE_COUNT; d++) {
        if (sd_dtype_is_quantized((sd_dtype)d)) continue; /* GGUF weights, never values */
        sd_tensor *t = pattern_tensor((sd_dtype)d, 3, s3, (unsigned)d * 3);
        sd_value_list_append(tens, sd_value_tensor(t));
        sd_tensor_unref(t);
    }
    sd_tensor *t0 = pattern_tensor(SD_F64, 0, NULL, 5); /* 0-d */
    sd_value_list_append(tens, sd_value_tensor(t0));
    sd_tensor_unref(t0);
    int64_t z[2] = {3, 0};
    sd_tensor *te = pattern_tensor(SD_F16, 2, z, 0); /* no elements */
    sd_value_list_append(tens, sd_value_tensor(te));
    sd_tensor_unref(te);
    int64_t s5[5] = {1, 2, 1, 2, 1};
    sd_tensor *t5 = pattern_tensor(SD_I16, 5, s5, 9);
    sd_value_list_append(tens, sd_value_tensor(t5));
    sd_tensor_unref(t5);
    sd_value_dict_set(root, "tensors", tens);
    return root;
}

static void test_round_trip(void) {
    sd_error err;
    sd_error_clear(&err);
    sd_value *v = sample_tree();
    CHECK(sd_value_is_data(v));
    void *blob = NULL;
    size_t size = 0;
    CHECK_OK(sd_value_serialize(v, &blob, &size, &err), &err);
    sd_value *back = NULL;
    CHECK_OK(sd_value_deserialize(blob, size, &back, &err), &err);
    CHECK(back && sd_value_equal(v, back));
    /* the copy owns its bytes: the blob can go */
    memset(blob, 0xAB, size);
    free(blob);
    CHECK(back && sd_value_equal(v, back));
    /* serializing the copy gives the same bytes */
    void *b1, *b2;
    size_t n1, n2;
    CHECK_OK(sd_value_serialize(v, &b1, &n1, &err), &err);
    CHECK_OK(sd_value_serialize(back, &b2, &n2, &err), &err);
    CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0);
    free(b1);
    free(b2);
    /* equality notices a changed tensor byte */
    sd_tensor *s = sd_value_dict_tensor(sd_value_dict_get(back, "latent"), "samples");
    ((uint8_t *)s->data)[5] ^= 1;
    CHECK(!sd_value_equal(v, back));
    sd_value_unref(back);
    sd_value_unref(v);

    /* top-level scalars and tensors work too */
    sd_value *one = sd_value_float(3.25);
    CHECK_OK(sd_value_serialize(one, &blob, &size, &err), &err);
    CHECK_OK(sd_value_deserialize(blob, size, &back, &err), &err);
    CHECK(back && sd_value_kind_of(back) == SD_VAL_FLOAT && sd_value_as_float(back) == 3.25);
    sd_value_unref(back);
    sd_value_unref(one);
    free(blob);
}

/* The documented layout (docs/cache.md), byte for byte. */
static void test_exact_bytes(void) {
    sd_error err;
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "n", sd_value_int(-2));
    sd_tensor *t = sd_tensor_new4(SD_F16, 1, 2, 0, 0, 0);
    ((uint16_t *)t->data)[0] = 0x3c00;
    ((uint16_t *)t->data)[1] = 0xc000;
    sd_value_dict_set(d, "t", sd_value_tensor(t));
    sd_tensor_unref(t);
    void *blob;
    size_t size;
    CHECK_OK(sd_value_serialize(d, &blob, &size, &err), &err);
    static const uint8_t want[] = {
        'S', 'D', 'F', 'V', 1, 0, 0, 0,     /* magic, version 1, flags 0 */
        7, 2, 0, 0, 0, 0, 0, 0, 0,          /* dict, 2 items */
        1, 0, 0, 0, 0, 0, 0, 0, 'n',        /* key "n" */
        1, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* int -2 */
        1, 0, 0, 0, 0, 0, 0, 0, 't',        /* key "t" */
        5, 1, 1,                            /* tensor, F16, rank 1 */
        2, 0, 0, 0, 0, 0, 0, 0,             /* shape [2] */
        4, 0, 0, 0, 0, 0, 0, 0,             /* 4 bytes */
        0x00, 0x3c, 0x00, 0xc0,             /* 1.0, -2.0 */
    };
    CHECK(size == sizeof want && memcmp(blob, want, size) == 0);
    free(blob);
    sd_value_unref(d);
}

static sd_value *nest(int depth) {
    sd_value *v = sd_value_int(1);
    for (int i = 0; i < depth; i++) {
        sd_value *l = sd_value_list();
        sd_value_list_append(l, v);
        v = l;
    }
    return v;
}

static void free_handle(void *p) { free(p); }
static const sd_handle_type MODEL_T = {"MODEL", free_handle};

static void test_refused(void) {
    sd_error err;
    sd_error_clear(&err);
    void *blob = (void *)1;
    size_t size = 1;
    sd_value *d = sd_value_dict();
    sd_value *l = sd_value_list();
    sd_value_list_append(l, sd_value_int(1));
    sd_value_list_append(l, sd_value_handle(&MODEL_T, malloc(4)));
    sd_value_dict_set(d, "model", l);
    CHECK(sd_value_serialize(d, &blob, &size, &err) == SD_ERR_INVALID);
    CHECK(blob == NULL && size == 0);
    CHECK_MSG(strstr(err.msg, "MODEL") && strstr(err.msg, "root['model'][1]"), "msg: %s", err.msg);
    sd_value_unref(d);

    sd_value *ok = nest(SD_VALUE_IO_MAX_DEPTH);
    CHECK_OK(sd_value_serialize(ok, &blob, &size, &err), &err);
    sd_value *back = NULL;
    CHECK_OK(sd_value_deserialize(blob, size, &back, &err), &err);
    CHECK(back && sd_value_equal(ok, back));
    sd_value_unref(back);
    free(blob);
    sd_value_unref(ok);
    sd_value *deep = nest(SD_VALUE_IO_MAX_DEPTH + 1);
    CHECK(sd_value_serialize(deep, &blob, &size, &err) == SD_ERR_INVALID);
    sd_value_unref(deep);
}

/* ---- corruption ----------------------------------------------------------- */

static sd_status try_decode(const uint8_t *src, size_t n, sd_error *err) {
    uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan sees any overread */
    memcpy(copy, src, n);
    sd_value *v = (sd_value *)(uintptr_t)1;
    sd_status st = sd_value_deserialize(copy, n, &v, err);
    if (st == SD_OK) sd_value_unref(v);
    else CHECK(v == NULL);
    free(copy);
    return st;
}

typedef struct buf {
    uint8_t b[1024];
    size_t n;
} buf;

static void b_u8(buf *b, uint8_t v) { b->b[b->n++] = v; }
static void b_u64(buf *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b_u8(b, (uint8_t)(v >> (8 * i)));
}
static void b_hdr(buf *b) {
    b->n = 0;
    memcpy(b->b, "SDFV\1\0\0\0", 8);
    b->n = 8;
}

static void expect_bad(const buf *b, sd_status code, const char *what) {
    sd_error err;
    sd_error_clear(&err);
    sd_status st = try_decode(b->b, b->n, &err);
    CHECK_MSG(st == code, "%s: got %s (%s)", what, sd_status_name(st), err.msg);
    CHECK_MSG(st == SD_OK || strstr(err.msg, what) != NULL, "message '%s' lacks '%s'", err.msg, what);
}

static void test_corrupt(void) {
    sd_error err;
    sd_value *v = sample_tree();
    void *blob;
    size_t size;
    CHECK_OK(sd_value_serialize(v, &blob, &size, &err), &err);
    sd_value_unref(v);
    const uint8_t *p = blob;

    int trunc_ok = 1;
    for (size_t cut = 0; cut < size; cut++)
        if (try_decode(p, cut, &err) != SD_ERR_FORMAT) trunc_ok = 0;
    CHECK(trunc_ok);

    /* every byte changed (two ways): an error or some value, never a crash */
    uint8_t *m = malloc(size);
    size_t n_err = 0;
    for (size_t i = 0; i < size; i++) {
        for (int k = 0; k < 2; k++) {
            memcpy(m, p, size);
            m[i] = k ? (uint8_t)~m[i] : (uint8_t)(m[i] + 1);
            if (try_decode(m, size, &err) != SD_OK) n_err++;
        }
    }
    CHECK(n_err > 0);
    free(m);

    uint8_t *longer = malloc(size + 1);
    memcpy(longer, p, size);
    longer[size] = 0;
    CHECK(try_decode(longer, size + 1, &err) == SD_ERR_FORMAT && strstr(err.msg, "trailing"));
    free(longer);
    free(blob);
    CHECK(sd_value_deserialize(NULL, 0, &v, &err) == SD_ERR_FORMAT);

    buf b;
    b_hdr(&b);
    b.b[0] = 'X';
    b_u8(&b, 0);
    expect_bad(&b, SD_ERR_FORMAT, "bad magic");
    b_hdr(&b);
    b.b[4] = 2;
    b_u8(&b, 0);
    expect_bad(&b, SD_ERR_UNSUPPORTED, "version 2");
    b_hdr(&b);
    b.b[6] = 1;
    b_u8(&b, 0);
    expect_bad(&b, SD_ERR_FORMAT, "unknown flags");
    b_hdr(&b);
    b_u8(&b, 99);
    expect_bad(&b, SD_ERR_FORMAT, "unknown value tag");
    b_hdr(&b);
    b_u8(&b, 3);
    b_u8(&b, 2);
    expect_bad(&b, SD_ERR_FORMAT, "neither 0 nor 1");
    b_hdr(&b);
    b_u8(&b, 6);
    b_u64(&b, UINT64_MAX);
    expect_bad(&b, SD_ERR_FORMAT, "item count larger");
    b_hdr(&b);
    b_u8(&b, 4);
    b_u64(&b, UINT64_MAX - 3);
    expect_bad(&b, SD_ERR_FORMAT, "string longer");
    b_hdr(&b);
    b_u8(&b, 4);
    b_u64(&b, 3);
    b_u8(&b, 'a');
    b_u8(&b, 0);
    b_u8(&b, 'b');
    expect_bad(&b, SD_ERR_FORMAT, "NUL byte");
    b_hdr(&b); /* dict with the same key twice */
    b_u8(&b, 7);
    b_u64(&b, 2);
    for (int i = 0; i < 2; i++) {
        b_u64(&b, 1);
        b_u8(&b, 'k');
        b_u8(&b, 0);
    }
    expect_bad(&b, SD_ERR_FORMAT, "duplicate dict key");
    b_hdr(&b); /* tensor whose byte count lies */
    b_u8(&b, 5);
    b_u8(&b, 0);
    b_u8(&b, 1);
    b_u64(&b, 2);
    b_u64(&b, 4);
    b_u64(&b, 0);
    expect_bad(&b, SD_ERR_FORMAT, "does not match its shape");
    b_hdr(&b); /* dims whose product overflows 64 bits */
    b_u8(&b, 5);
    b_u8(&b, 0);
    b_u8(&b, 3);
    for (int i = 0; i < 3; i++) b_u64(&b, (uint64_t)1 << 40);
    b_u64(&b, 0);
    expect_bad(&b, SD_ERR_FORMAT, "does not match its shape");
    b_hdr(&b);
    b_u8(&b, 5);
    b_u8(&b, 0);
    b_u8(&b, 1);
    b_u64(&b, UINT64_MAX);
    expect_bad(&b, SD_ERR_FORMAT, "negative tensor dimension");
    b_hdr(&b);
    b_u8(&b, 5);
    b_u8(&b, 42);
    b_u8(&b, 1);
    expect_bad(&b, SD_ERR_FORMAT, "unknown tensor dtype");
    b_hdr(&b);
    b_u8(&b, 5);
    b_u8(&b, 0);
    b_u8(&b, 7);
    expect_bad(&b, SD_ERR_FORMAT, "rank too large");
    b_hdr(&b); /* nesting beyond the cap */
    for (int i = 0; i < SD_VALUE_IO_MAX_DEPTH + 2 && b.n + 9 < sizeof b.b; i++) {
        b_u8(&b, 6);
        b_u64(&b, 1);
    }
    expect_bad(&b, SD_ERR_FORMAT, "nesting too deep");
}

int main(void) {
    test_round_trip();
    test_exact_bytes();
    test_refused();
    test_corrupt();
    return sd_test_finish();
}
