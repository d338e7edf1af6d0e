/* torch_ckpt / pickle: the weights-only reader of PyTorch checkpoints.
 *
 * tests/data/torch/ (written by make_fixtures.py with python3's own pickle
 * and zipfile, checked against torch.load when python3-torch was there):
 *   - every good checkpoint gives exactly the tensors of its .safetensors twin
 *     (names, dtypes, shapes, bytes), from a path and from memory, including
 *     views, transposed and broadcast tensors (materialised) and Parameters;
 *   - every bad-*.pt is refused with an error containing its .expect text
 *     (malicious __reduce__, unknown global, NEWOBJ, huge storage, bad
 *     shape, missing storage, bad memo index, deep nesting, truncation,
 *     legacy format, no data.pkl).
 * The object tree (sd_torch_open_tree): the same tensors as the flat reader
 * for files of plain dicts, the same refusals, lists read, and an A1111
 * hypernetwork's integer keys, tuples and scalars (tests/data/hypernetwork).
 * Built here: limits of the machine (stack, MARKs, memo index, wide ints)
 * and every truncation of a good archive and of its pickle, on exact-size
 * heap buffers so that ASan sees any read past the end. */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "formats/pickle.h"
#include "formats/torch_ckpt.h"
#include "testutil.h"

static char dir[4096];

static void compare_pair(const char *ckpt, const char *st) {
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/%s", dir, ckpt);
    snprintf(b, sizeof b, "%s/%s", dir, st);
    sd_error err;
    sd_st_file *fc = NULL, *fs = NULL, *fm = NULL;
    CHECK_OK(sd_torch_open(a, &fc, &err), &err);
    CHECK_OK(sd_st_open(b, &fs, &err), &err);
    size_t size = 0;
    char *blob = sd_test_read_file(a, &size);
    CHECK(blob != NULL);
    uint8_t *exact = malloc(size);
    memcpy(exact, blob, size);
    free(blob);
    CHECK_OK(sd_torch_open_memory(exact, size, ckpt, &fm, &err), &err);
    if (!fc || !fs || !fm) goto done;
    CHECK_MSG(sd_st_count(fc) == sd_st_count(fs), "%s: %zu tensors, expected %zu", ckpt, sd_st_count(fc),
              sd_st_count(fs));
    CHECK(sd_st_count(fm) == sd_st_count(fc));
    for (size_t i = 0; i < sd_st_count(fs); i++) {
        const sd_st_entry *es = sd_st_at(fs, i);
        const sd_st_entry *ec = sd_st_find(fc, es->name);
        CHECK_MSG(ec != NULL, "%s: no tensor '%s'", ckpt, es->name);
        if (!ec) continue;
        CHECK_MSG(ec->dtype == es->dtype && ec->ndim == es->ndim && ec->nbytes == es->nbytes,
                  "%s: '%s' is %s/%d-d/%llu bytes, expected %s/%d-d/%llu", ckpt, es->name,
                  sd_dtype_name(ec->dtype), ec->ndim, (unsigned long long)ec->nbytes, sd_dtype_name(es->dtype),
                  es->ndim, (unsigned long long)es->nbytes);
        for (int d = 0; d < es->ndim && d < ec->ndim; d++) CHECK(ec->shape[d] == es->shape[d]);
        {
            sd_tensor *tc = sd_st_tensor(fc, es->name, &err), *ts = sd_st_tensor(fs, es->name, &err);
            sd_tensor *tm = sd_st_tensor(fm, es->name, &err);
            CHECK(tc && ts && tm);
            if (tc && ts && tm) {
                CHECK_MSG(tc->nbytes == ts->nbytes && memcmp(tc->data, ts->data, ts->nbytes) == 0,
                          "%s: '%s' bytes differ", ckpt, es->name);
                CHECK(tm->nbytes == ts->nbytes && memcmp(tm->data, ts->data, ts->nbytes) == 0);
            }
            sd_tensor *f32 = sd_st_tensor_f32(fc, es->name, &err);
            CHECK(f32 && f32->dtype == SD_F32);
            sd_tensor_unref(f32);
            sd_tensor_unref(tc);
            sd_tensor_unref(ts);
            sd_tensor_unref(tm);
        }
    }
    /* sd_torch_open_any picks the format from the bytes */
    sd_st_file *any = NULL;
    CHECK_OK(sd_torch_open_any(a, &any, &err), &err);
    CHECK(any && sd_st_count(any) == sd_st_count(fc));
    sd_st_close(any);
    CHECK_OK(sd_torch_open_any(b, &any, &err), &err);
    CHECK(any && sd_st_count(any) == sd_st_count(fs));
    sd_st_close(any);
done:
    sd_st_close(fc);
    sd_st_close(fs);
    sd_st_close(fm);
    free(exact);
}

/* ---- the object tree (sd_torch_open_tree) ------------------------------------------ */

typedef struct tree_walk {
    sd_torch_tree *t;
    sd_st_file *twin; /* the tensors by their flat names, or NULL */
    const char *what;
    int tensors;
} tree_walk;

/* Every tensor under o has a path, reads in full, and (with a twin) has the
 * twin's bytes under the same name. */
static void walk_tree(tree_walk *w, const sd_pk_obj *o, int depth) {
    if (o->kind == SD_PK_TENSOR) {
        const char *p = sd_torch_tree_path(w->t, o);
        sd_error err;
        sd_tensor *x = sd_torch_tree_tensor(w->t, o, &err);
        CHECK_MSG(x != NULL && strcmp(p, "?") != 0, "%s: tensor '%s' unreadable: %s", w->what, p, x ? "" : err.msg);
        w->tensors++;
        if (w->twin && x) {
            /* the flat reader unwraps Lightning's state_dict */
            const char *flat = strncmp(p, "state_dict.", 11) || sd_st_find(w->twin, p) ? p : p + 11;
            sd_tensor *y = sd_st_tensor(w->twin, flat, &err);
            CHECK_MSG(y && y->nbytes == x->nbytes && !memcmp(y->data, x->data, x->nbytes),
                      "%s: tree tensor '%s' differs from the flat reader's", w->what, p);
            sd_tensor_unref(y);
        }
        sd_tensor_unref(x);
        return;
    }
    if ((o->kind != SD_PK_DICT && o->kind != SD_PK_TUPLE && o->kind != SD_PK_LIST) || depth > 16) return;
    for (size_t i = o->kind == SD_PK_DICT; i < o->u.seq.n; i += 1 + (o->kind == SD_PK_DICT))
        walk_tree(w, o->u.seq.items[i], depth + 1);
}

/* A file of plain dicts: the tree holds the flat reader's tensors under the
 * same names, from a path and from memory. */
static void tree_same_as_flat(const char *ckpt) {
    char a[4200];
    snprintf(a, sizeof a, "%s/%s", dir, ckpt);
    sd_error err;
    sd_st_file *flat = NULL;
    sd_torch_tree *t = NULL, *tm = NULL;
    CHECK_OK(sd_torch_open(a, &flat, &err), &err);
    CHECK_OK(sd_torch_open_tree(a, &t, &err), &err);
    size_t size = 0;
    char *blob = sd_test_read_file(a, &size);
    uint8_t *exact = blob ? malloc(size ? size : 1) : NULL;
    if (exact) memcpy(exact, blob, size);
    free(blob);
    if (exact) CHECK_OK(sd_torch_open_tree_memory(exact, size, ckpt, &tm, &err), &err);
    for (int i = 0; i < 2 && flat; i++) {
        sd_torch_tree *x = i ? tm : t;
        if (!x) continue;
        tree_walk w = {x, flat, ckpt, 0};
        const sd_pk_obj *root = sd_torch_tree_root(x), *sd = sd_pickle_dict_get(root, "state_dict");
        walk_tree(&w, sd && sd->kind == SD_PK_DICT ? sd : root, 0);
        CHECK_MSG(w.tensors == (int)sd_st_count(flat), "%s: %d tensors in the tree, %zu flat", ckpt, w.tensors,
                  sd_st_count(flat));
    }
    /* an object that is no tensor of the tree */
    if (t) {
        sd_tensor *none = sd_torch_tree_tensor(t, sd_torch_tree_root(t), &err);
        CHECK(none == NULL && err.code == SD_ERR_INVALID);
    }
    sd_torch_tree_free(t);
    sd_torch_tree_free(tm);
    free(exact);
    sd_st_close(flat);
}

static const sd_pk_obj *dict_int(const sd_pk_obj *d, int64_t key) {
    for (size_t i = 0; d && d->kind == SD_PK_DICT && i + 1 < d->u.seq.n; i += 2)
        if (d->u.seq.items[i]->kind == SD_PK_INT && d->u.seq.items[i]->u.i == key) return d->u.seq.items[i + 1];
    return NULL;
}

/* An A1111 hypernetwork as torch.save wrote it (tests/data/hypernetwork,
 * gen_hypernetwork_ref.py): integer keys, tuples of two state dicts, and the
 * metadata's str, bool, int, None and list-of-floats values. */
static void tree_hypernetwork(const char *file, int legacy) {
    char p[4400];
    snprintf(p, sizeof p, "%s/../hypernetwork/%s", dir, file);
    FILE *f = fopen(p, "rb");
    if (!f) {
        CHECK_MSG(0, "missing %s (tests/data/hypernetwork)", p);
        return;
    }
    fclose(f);
    sd_error err;
    sd_torch_tree *t = NULL;
    CHECK_OK(sd_torch_open_tree(p, &t, &err), &err);
    if (!t) return;
    const sd_pk_obj *root = sd_torch_tree_root(t), *pair = dict_int(root, 4);
    CHECK(root->kind == SD_PK_DICT);
    CHECK_MSG(pair && pair->kind == SD_PK_TUPLE && pair->u.seq.n == 2, "%s: key 4 is no pair", file);
    const sd_pk_obj *act = sd_pickle_dict_get(root, "activation_func");
    CHECK(act && act->kind == SD_PK_STR && !strcmp(act->u.str.s, legacy ? "mish" : "relu"));
    const sd_pk_obj *ln = sd_pickle_dict_get(root, "is_layer_norm"), *oi = sd_pickle_dict_get(root, "optional_info");
    CHECK(ln && ln->kind == SD_PK_BOOL && ln->u.b == !legacy);
    CHECK(oi && oi->kind == SD_PK_NONE);
    const sd_pk_obj *step = sd_pickle_dict_get(root, "step"), *ls = sd_pickle_dict_get(root, "layer_structure");
    CHECK(step && step->kind == SD_PK_INT && step->u.i == 0);
    CHECK(ls && ls->kind == SD_PK_LIST && ls->u.seq.n == 3 && ls->u.seq.items[1]->kind == SD_PK_FLOAT &&
          ls->u.seq.items[1]->u.f == 2.0);
    if (pair && pair->kind == SD_PK_TUPLE && pair->u.seq.n == 2) {
        const sd_pk_obj *w = sd_pickle_dict_get(pair->u.seq.items[1], "linear.0.weight");
        CHECK(w && w->kind == SD_PK_TENSOR && w->u.tensor.ndim == 2 && w->u.tensor.shape[0] == 8 &&
              w->u.tensor.shape[1] == 4);
        if (w) CHECK_MSG(!strcmp(sd_torch_tree_path(t, w), "4.1.linear.0.weight"), "path %s",
                         sd_torch_tree_path(t, w));
        sd_tensor *x = w ? sd_torch_tree_tensor(t, w, &err) : NULL;
        CHECK(x && x->dtype == SD_F32 && x->nbytes == 8 * 4 * 4);
        sd_tensor_unref(x);
    }
    tree_walk tw = {t, NULL, file, 0};
    walk_tree(&tw, root, 0);
    CHECK_MSG(tw.tensors > 0, "%s: no tensors", file);
    sd_torch_tree_free(t);
}

static void bad_files(void) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d) return;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (strncmp(de->d_name, "bad-", 4) != 0 || l < 4 || strcmp(de->d_name + l - 3, ".pt") != 0) continue;
        char p[4400], ex[4400];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        snprintf(ex, sizeof ex, "%s/%.*s.expect", dir, (int)(l - 3), de->d_name);
        char *want = sd_test_read_file(ex, NULL);
        CHECK_MSG(want != NULL, "%s has no .expect", de->d_name);
        if (!want) continue;
        want[strcspn(want, "\n")] = 0;
        sd_error err;
        sd_error_clear(&err);
        sd_st_file *f = (sd_st_file *)1;
        sd_status rc = sd_torch_open(p, &f, &err);
        CHECK_MSG(rc != SD_OK && f == NULL, "%s was accepted", de->d_name);
        CHECK_MSG(strstr(err.msg, want) != NULL, "%s: error '%s' does not say '%s'", de->d_name, err.msg, want);
        CHECK_MSG(strstr(err.msg, de->d_name) != NULL, "%s: error '%s' does not name the file", de->d_name,
                  err.msg);
        printf("refused %-26s %s\n", de->d_name, err.msg);
        /* the same through the loaders' entry point */
        f = NULL;
        CHECK(sd_torch_open_any(p, &f, &err) != SD_OK && f == NULL);
        /* and through the tree, which reads lists as they are (bad-lists.pt
         * holds lists nested too deep for it) */
        sd_torch_tree *t = (sd_torch_tree *)1;
        rc = sd_torch_open_tree(p, &t, &err);
        const char *tw = strcmp(de->d_name, "bad-lists.pt") ? want : "nested deeper than 16";
        CHECK_MSG(rc != SD_OK && t == NULL, "%s was accepted as a tree", de->d_name);
        CHECK_MSG(strstr(err.msg, tw) != NULL, "%s: tree error '%s' does not say '%s'", de->d_name, err.msg, tw);
        if (rc == SD_OK) sd_torch_tree_free(t);
        free(want);
        n++;
    }
    closedir(d);
    CHECK_MSG(n >= 12, "only %d bad-*.pt fixtures", n);
}

/* ---- hand-made pickles ---------------------------------------------------------- */

static sd_status load_bytes(const void *src, size_t n, sd_error *err) {
    uint8_t *b = malloc(n ? n : 1);
    memcpy(b, src, n);
    sd_pickle *p = NULL;
    const sd_pk_obj *root = NULL;
    sd_status rc = sd_pickle_load(b, n, "test.pkl", &p, &root, NULL, err);
    CHECK((rc == SD_OK) == (p != NULL));
    sd_pickle_free(p);
    free(b);
    return rc;
}

static void expect_refused(const void *src, size_t n, const char *want) {
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = load_bytes(src, n, &err);
    CHECK_MSG(rc != SD_OK && strstr(err.msg, want), "expected an error with '%s', got %d '%s'", want, rc,
              err.msg);
}

static void machine_limits(void) {
    /* stack over SD_PK_MAX_STACK */
    size_t n = SD_PK_MAX_STACK + 8;
    uint8_t *b = malloc(n + 3);
    b[0] = 0x80, b[1] = 2;
    memset(b + 2, 'N', n);
    b[n + 2] = '.';
    expect_refused(b, n + 3, "stack deeper");
    /* MARKs over SD_PK_MAX_MARKS */
    memset(b + 2, '(', SD_PK_MAX_MARKS + 8);
    expect_refused(b, SD_PK_MAX_MARKS + 10, "nested MARKs");
    free(b);
    expect_refused("\x80\x02}r\xff\xff\xff\x7f.", 9, "memo index over");
    expect_refused("\x80\x02}j\x05\x00\x00\x00.", 9, "memo index 5");
    expect_refused("\x80\x02\x8a\x09\x01\x02\x03\x04\x05\x06\x07\x08\x09.", 14, "wider than 64 bits");
    expect_refused("\x80\x02X\xff\xff\xff\x00" "ab.", 10, "truncated");
    expect_refused("\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\xff" "ab.", 15, "truncated");
    expect_refused("\x80\x02(N.", 5, "STOP");
    expect_refused("\x80\x02Ns.", 5, "underflow");
    expect_refused("\x80\x02(Ns.", 6, "underflow"); /* SETITEM may not reach under a MARK */
    expect_refused("\x80\x02" "cposix\nsystem\n.", 17, "'posix.system'");
    expect_refused("\x80\x02\x8c\x02os\x8c\x06system\x93.", 15, "'os.system'");
    expect_refused("\x80\x02" "ctorch\nFloatStorage\n)R.", 24, "a type");
    expect_refused("\x80\x02N)R.", 6, "REDUCE of a None");
    expect_refused("\x80\x02]Nb.", 6, "BUILD");
    expect_refused("\x80\x02" "ccollections\nOrderedDict\n)\x81.", 31, "NEWOBJ");
    expect_refused("\x80\x02\x82\x01.", 5, "EXT");
    expect_refused("\x80\x02\x8f.", 4, "sets");
    expect_refused("\x80\x02I1\n.", 6, "protocol-0");
    expect_refused("\x80\x02(S'x'\ntQ.", 11, "protocol-0");
    expect_refused("\x80\x02X\x01\x00\x00\x00xQ.", 10, "not a ('storage'");
    expect_refused("\x80\x02\xff.", 4, "unknown opcode 0xff");
    expect_refused("\x80\x02", 2, "no STOP");
    expect_refused("", 0, "no STOP");
    /* accepted: containers, memo, ints of every width, OrderedDict + BUILD */
    static const char ok[] = "\x80\x02}q\x00(X\x01\x00\x00\x00" "a]q\x01(K\x01M\x02\x01J\xff\xff\xff\xff"
                             "\x8a\x01\xff\x88\x89NG?\xf0\x00\x00\x00\x00\x00\x00" "e"
                             "X\x01\x00\x00\x00" "bccollections\nOrderedDict\n)R}bh\x01Nu.";
    sd_error err;
    uint8_t *c = malloc(sizeof ok - 1);
    memcpy(c, ok, sizeof ok - 1);
    sd_pickle *p = NULL;
    const sd_pk_obj *root = NULL;
    size_t used = 0;
    CHECK_OK(sd_pickle_load(c, sizeof ok - 1, "ok.pkl", &p, &root, &used, &err), &err);
    if (root) {
        CHECK(used == sizeof ok - 1);
        const sd_pk_obj *a = sd_pickle_dict_get(root, "a"), *od = sd_pickle_dict_get(root, "b");
        CHECK(a && a->kind == SD_PK_LIST && a->u.seq.n == 8);
        if (a && a->u.seq.n == 8) {
            CHECK(a->u.seq.items[0]->u.i == 1 && a->u.seq.items[1]->u.i == 258);
            CHECK(a->u.seq.items[2]->u.i == -1 && a->u.seq.items[3]->u.i == -1);
            CHECK(a->u.seq.items[4]->u.b == 1 && a->u.seq.items[5]->u.b == 0);
            CHECK(a->u.seq.items[6]->kind == SD_PK_NONE && a->u.seq.items[7]->u.f == 1.0);
        }
        /* a third entry: the memoized list as a (non-string) key, None value */
        CHECK(od && od->kind == SD_PK_DICT && root->u.seq.n == 6);
    }
    sd_pickle_free(p);
    free(c);
}

/* Every prefix of a good archive, and of its data.pkl, fails cleanly. */
static void truncations(void) {
    char a[4200];
    snprintf(a, sizeof a, "%s/mixed.ckpt", dir);
    size_t size = 0;
    char *blob = sd_test_read_file(a, &size);
    CHECK(blob != NULL);
    if (!blob) return;
    int refused = 0, tried = 0;
    for (size_t cut = 0; cut < size; cut += 5) {
        uint8_t *b = malloc(cut ? cut : 1);
        memcpy(b, blob, cut);
        sd_st_file *f = NULL;
        sd_error err;
        if (sd_torch_open_memory(b, cut, "cut.ckpt", &f, &err) != SD_OK) refused++;
        sd_st_close(f);
        free(b);
        tried++;
    }
    CHECK_MSG(refused == tried, "%d of %d truncated archives accepted", tried - refused, tried);
    /* every prefix of a legacy-format file */
    snprintf(a, sizeof a, "%s/mixed-legacy.pt", dir);
    size_t lsize = 0;
    char *lblob = sd_test_read_file(a, &lsize);
    CHECK(lblob != NULL);
    for (size_t cut = 0; lblob && cut < lsize; cut++) {
        uint8_t *b = malloc(cut ? cut : 1);
        memcpy(b, lblob, cut);
        sd_st_file *f = NULL;
        sd_error err;
        CHECK_MSG(sd_torch_open_memory(b, cut, "cut.pt", &f, &err) != SD_OK && !f, "legacy cut at %zu accepted",
                  cut);
        sd_st_close(f);
        free(b);
    }
    free(lblob);
    /* the pickle itself */
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(blob, size, 0, &ze);
    zip_t *za = src ? zip_open_from_source(src, ZIP_RDONLY, &ze) : NULL;
    CHECK(za != NULL);
    if (za) {
        zip_stat_t st;
        CHECK(zip_stat(za, "mixed/data.pkl", 0, &st) == 0);
        uint8_t *pkl = malloc(st.size);
        zip_file_t *zf = zip_fopen(za, "mixed/data.pkl", 0);
        CHECK(zf && zip_fread(zf, pkl, st.size) == (zip_int64_t)st.size);
        zip_fclose(zf);
        for (size_t cut = 0; cut < st.size; cut++) {
            sd_error err;
            CHECK_MSG(load_bytes(pkl, cut, &err) != SD_OK, "pickle cut at %zu accepted", cut);
        }
        sd_error err;
        CHECK_OK(load_bytes(pkl, st.size, &err), &err);
        free(pkl);
        zip_discard(za);
    } else if (src) {
        zip_source_free(src);
    }
    zip_error_fini(&ze);
    free(blob);
}

/* One flipped bit in any entry of an archive (a storage, data.pkl) is an
 * error naming the CRC-32 when that entry is read, never other numbers
 * (issue 23: Python's zipfile reports the bad CRC; the reader loaded it).
 * Tensors of the undamaged storages still read right. */
static void crc_damage(void) {
    char a[4200], b2[4200];
    snprintf(a, sizeof a, "%s/mixed.ckpt", dir);
    snprintf(b2, sizeof b2, "%s/mixed.safetensors", dir);
    size_t size = 0;
    char *blob = sd_test_read_file(a, &size);
    sd_st_file *twin = NULL;
    sd_error err;
    CHECK_OK(sd_st_open(b2, &twin, &err), &err);
    CHECK(blob != NULL);
    if (!blob || !twin) {
        free(blob);
        sd_st_close(twin);
        return;
    }
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(blob, size, 0, &ze);
    zip_t *za = src ? zip_open_from_source(src, ZIP_RDONLY, &ze) : NULL;
    CHECK(za != NULL);
    int damaged = 0;
    for (zip_int64_t i = 0; za && i < zip_get_num_entries(za, 0); i++) {
        const char *nm = zip_get_name(za, (zip_uint64_t)i, 0);
        zip_stat_t st;
        if (!nm || zip_stat_index(za, (zip_uint64_t)i, 0, &st) != 0 || st.size == 0 || st.comp_method != ZIP_CM_STORE)
            continue;
        int is_pkl = strstr(nm, "data.pkl") != NULL, is_data = strstr(nm, "/data/") != NULL;
        if (!is_pkl && !is_data) continue;
        uint8_t *content = malloc(st.size);
        zip_file_t *zf = zip_fopen_index(za, (zip_uint64_t)i, 0);
        CHECK(zf && zip_fread(zf, content, st.size) == (zip_int64_t)st.size);
        zip_fclose(zf);
        /* where the (stored) bytes lie in the file */
        uint8_t *at = memmem(blob, size, content, st.size);
        CHECK_MSG(at != NULL, "%s: its bytes not found in the archive", nm);
        if (at) {
            uint8_t *copy = malloc(size);
            memcpy(copy, blob, size);
            copy[(at - (uint8_t *)blob) + st.size / 2] ^= 0x10;
            sd_st_file *f = NULL;
            sd_status rc = sd_torch_open_memory(copy, size, "damaged.ckpt", &f, &err);
            int crc_errors = 0, other = 0, wrong = 0;
            if (rc) {
                crc_errors += strstr(err.msg, "CRC-32") != NULL;
                other += strstr(err.msg, "CRC-32") == NULL;
            }
            for (size_t k = 0; f && k < sd_st_count(f); k++) {
                const sd_st_entry *e = sd_st_at(f, k);
                sd_tensor *t = sd_st_tensor(f, e->name, &err), *w = sd_st_tensor(twin, e->name, &err);
                if (!t) {
                    crc_errors += strstr(err.msg, "CRC-32") != NULL;
                    other += strstr(err.msg, "CRC-32") == NULL;
                } else {
                    wrong += !w || w->nbytes != t->nbytes || memcmp(w->data, t->data, t->nbytes);
                }
                sd_tensor_unref(t);
                sd_tensor_unref(w);
            }
            CHECK_MSG(crc_errors > 0 && other == 0 && wrong == 0,
                      "%s with one flipped bit: %d CRC errors, %d other errors, %d tensors read wrong", nm,
                      crc_errors, other, wrong);
            if (is_pkl) CHECK_MSG(rc != SD_OK && !f, "a damaged data.pkl refuses the file");
            sd_st_close(f);
            free(copy);
            damaged++;
        }
        free(content);
    }
    CHECK_MSG(damaged >= 3, "%d entries damaged in turn", damaged);
    printf("crc: %d entries damaged in turn, each refused\n", damaged);
    if (za) zip_discard(za);
    else if (src) zip_source_free(src);
    zip_error_fini(&ze);
    sd_st_close(twin);
    free(blob);
}

/* A safetensors file whose header length is 0x280 (640) starts with the
 * bytes 0x80 0x02 of a pickle: sd_torch_open_any must still read it as
 * safetensors. */
static void safetensors_like_pickle(void) {
    const char *dir2 = sd_test_tmpdir("torch_ckpt_sniff");
    char path[4200], hdr[641];
    snprintf(path, sizeof path, "%s/small.safetensors", dir2);
    int k = snprintf(hdr, sizeof hdr, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}");
    memset(hdr + k, ' ', 640 - (size_t)k);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    static const uint8_t len[8] = {0x80, 0x02, 0, 0, 0, 0, 0, 0};
    static const float data[2] = {1.5f, -2.0f};
    fwrite(len, 1, 8, f);
    fwrite(hdr, 1, 640, f);
    fwrite(data, 1, sizeof data, f);
    fclose(f);
    sd_st_file *st = NULL;
    sd_error err;
    CHECK_OK(sd_torch_open_any(path, &st, &err), &err);
    CHECK(st && sd_st_count(st) == 1 && sd_st_find(st, "w"));
    sd_st_close(st);
}

int main(void) {
    const char *src = getenv("SDFLOW_SOURCE_DIR");
    snprintf(dir, sizeof dir, "%s/tests/data/torch", src ? src : "..");
    compare_pair("mixed.ckpt", "mixed.safetensors");
    crc_damage();
    compare_pair("mixed-p4.pt", "mixed.safetensors");
    compare_pair("mixed-p5.pt", "mixed.safetensors");
    compare_pair("mixed-legacy.pt", "mixed.safetensors");
    compare_pair("embedding.pt", "embedding.safetensors");
    compare_pair("empty.pt", "empty.safetensors");
    char real[4300];
    snprintf(real, sizeof real, "%s/real-torch.pt", dir);
    FILE *fr = fopen(real, "rb");
    if (fr) { /* written by torch.save itself (make_fixtures.py --check-torch) */
        fclose(fr);
        compare_pair("real-torch.pt", "real-torch.safetensors");
        compare_pair("real-legacy.pt", "real-torch.safetensors"); /* _use_new_zipfile_serialization=False */
    }
    tree_same_as_flat("mixed.ckpt");
    tree_same_as_flat("mixed-legacy.pt");
    tree_same_as_flat("embedding.pt");
    tree_same_as_flat("empty.pt");
    tree_hypernetwork("seed_small.pt", 0);
    tree_hypernetwork("seed_small_legacy.pt", 1);
    bad_files();
    safetensors_like_pickle();
    machine_limits();
    truncations();
    return sd_test_finish();
}
