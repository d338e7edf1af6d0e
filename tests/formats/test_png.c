/* test_png.c - PNG round trips for every colour type and bit depth, text
 * chunks (tEXt / iTXt, before and after IDAT), atomic writes, and errors on
 * corrupt input. Files the writer cannot produce are written with libpng
 * directly. */
#include <dirent.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "formats/png.h"
#include "testutil.h"

static const char *dir;

static const char *path_of(const char *name) {
    static char buf[8][4096];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Deterministic sample for pixel (i, c) at a given bit depth. */
static unsigned sample(size_t i, int c, int depth) {
    unsigned max = (1u << depth) - 1;
    return (unsigned)((i * 37u + (unsigned)c * 101u + 11u) % (max + 1));
}

/* Writes a PNG with libpng: samples from sample(), optional palette/tRNS. */
static int write_raw(const char *path, int w, int h, int ctype, int depth, int interlace,
                     int with_trns, const char *text_after_key, const char *text_after_val) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_infop end = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) { fclose(f); return -1; }
    png_init_io(png, f);
    png_set_IHDR(png, info, w, h, depth, ctype, interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    int ch = ctype == PNG_COLOR_TYPE_GRAY ? 1 : ctype == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 :
             ctype == PNG_COLOR_TYPE_RGB ? 3 : ctype == PNG_COLOR_TYPE_RGB_ALPHA ? 4 : 1;
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[16];
        png_byte alpha[16];
        for (int i = 0; i < 16; i++) {
            pal[i].red = (png_byte)(i * 16); pal[i].green = (png_byte)(255 - i * 7);
            pal[i].blue = (png_byte)(i * 3); alpha[i] = (png_byte)(i * 17);
        }
        png_set_PLTE(png, info, pal, 1 << depth < 16 ? 1 << depth : 16);
        if (with_trns) png_set_tRNS(png, info, alpha, 1 << depth < 16 ? 1 << depth : 16, NULL);
    } else if (with_trns && ctype == PNG_COLOR_TYPE_GRAY) {
        png_color_16 tc = {0};
        tc.gray = (png_uint_16)sample(0, 0, depth);
        png_set_tRNS(png, info, NULL, 0, &tc);
    }
    png_write_info(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    png_bytep buf = calloc(rowbytes * h, 1);
    png_bytepp rows = malloc(sizeof *rows * h);
    for (int y = 0; y < h; y++) {
        rows[y] = buf + rowbytes * y;
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            for (int c = 0; c < ch; c++) {
                unsigned v = sample(i, c, depth);
                if (ctype == PNG_COLOR_TYPE_PALETTE && v > 15) v %= 16;
                size_t bit = ((size_t)x * ch + c) * depth;
                if (depth == 16) {
                    rows[y][bit / 8] = (png_byte)(v >> 8);
                    rows[y][bit / 8 + 1] = (png_byte)v;
                } else if (depth == 8) {
                    rows[y][bit / 8] = (png_byte)v;
                } else {
                    rows[y][bit / 8] |= (png_byte)(v << (8 - depth - bit % 8));
                }
            }
        }
    }
    png_write_image(png, rows);
    if (text_after_key) {
        png_text t = {0};
        t.compression = PNG_TEXT_COMPRESSION_zTXt;
        t.key = (char *)text_after_key;
        t.text = (char *)text_after_val;
        t.text_length = strlen(text_after_val);
        png_set_text(png, end, &t, 1);
    }
    png_write_end(png, end);
    png_destroy_info_struct(png, &end);
    png_destroy_write_struct(&png, &info);
    free(rows);
    free(buf);
    fclose(f);
    return 0;
}

/* Expected float of stored pixel (i, c) after expansion. */
static float expect(size_t i, int c, int ctype, int depth, int with_trns) {
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        unsigned idx = sample(i, 0, depth) % 16;
        unsigned v = c == 0 ? idx * 16 : c == 1 ? 255 - idx * 7 : c == 2 ? idx * 3 : idx * 17;
        (void)with_trns;
        return (float)v / 255.0f;
    }
    if (ctype == PNG_COLOR_TYPE_GRAY && c == 1) /* tRNS alpha */
        return sample(i, 0, depth) == sample(0, 0, depth) ? 0.0f : 1.0f;
    unsigned v = sample(i, c, depth);
    if (depth < 8) { /* libpng scales low bit depths to 8 bits by bit replication */
        unsigned max = (1u << depth) - 1;
        return (float)(v * 255u / max) / 255.0f;
    }
    return depth == 16 ? (float)v / 65535.0f : (float)v / 255.0f;
}

static void check_format(const char *name, int ctype, int depth, int interlace, int trns) {
    const int w = 13, h = 7;
    const char *p = path_of(name);
    CHECK_MSG(write_raw(p, w, h, ctype, depth, interlace, trns, NULL, NULL) == 0, "%s", name);
    sd_error err = {0};
    sd_tensor *t = NULL;
    sd_png_info info;
    CHECK_OK(sd_png_read(p, SD_PNG_KEEP, &t, &info, &err), &err);
    if (!t) return;
    int cs = ctype == PNG_COLOR_TYPE_GRAY ? (trns ? 2 : 1) : ctype == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 :
             ctype == PNG_COLOR_TYPE_RGB ? 3 : ctype == PNG_COLOR_TYPE_RGB_ALPHA ? 4 : (trns ? 4 : 3);
    CHECK_MSG(t->ndim == 3 && t->shape[0] == h && t->shape[1] == w && t->shape[2] == cs,
              "%s: shape [%lld %lld %lld]", name, (long long)t->shape[0], (long long)t->shape[1],
              (long long)t->shape[2]);
    CHECK(info.width == w && info.height == h && info.bit_depth == depth);
    CHECK(info.has_alpha == (cs == 2 || cs == 4));
    /* the header alone says the same */
    sd_png_info head = {0};
    CHECK_OK(sd_png_read_info(p, 0, &head, &err), &err);
    CHECK_MSG(head.width == info.width && head.height == info.height && head.bit_depth == info.bit_depth &&
                  head.color_type == info.color_type && head.has_alpha == info.has_alpha,
              "%s: sd_png_read_info", name);
    if (t->shape[2] == cs) {
        const float *d = sd_tensor_f32(t);
        int bad = 0;
        for (size_t i = 0; i < (size_t)w * h; i++)
            for (int c = 0; c < cs; c++)
                if (fabsf(d[i * cs + c] - expect(i, c, ctype, depth, trns)) > 1e-7f) bad++;
        CHECK_MSG(bad == 0, "%s: %d samples differ", name, bad);
    }
    /* Forced layouts: gray replicated, alpha dropped or filled with 1. */
    sd_tensor *rgb = NULL, *rgba = NULL;
    CHECK_OK(sd_png_read(p, SD_PNG_RGB, &rgb, NULL, &err), &err);
    CHECK_OK(sd_png_read(p, SD_PNG_RGBA, &rgba, NULL, &err), &err);
    if (rgb && rgba) {
        CHECK(rgb->shape[2] == 3 && rgba->shape[2] == 4);
        const float *k = sd_tensor_f32(t), *a = sd_tensor_f32(rgb), *b = sd_tensor_f32(rgba);
        int bad = 0;
        for (size_t i = 0; i < (size_t)w * h; i++) {
            for (int c = 0; c < 3; c++) {
                float e = cs <= 2 ? k[i * cs] : k[i * cs + c];
                if (a[i * 3 + c] != e || b[i * 4 + c] != e) bad++;
            }
            float ea = cs == 2 ? k[i * cs + 1] : cs == 4 ? k[i * cs + 3] : 1.0f;
            if (b[i * 4 + 3] != ea) bad++;
        }
        CHECK_MSG(bad == 0, "%s: layout conversion: %d samples differ", name, bad);
    }
    sd_tensor_unref(rgb);
    sd_tensor_unref(rgba);
    sd_tensor_unref(t);
}

static void test_formats(void) {
    static const int gray_depths[] = {1, 2, 4, 8, 16};
    char name[64];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "gray%d.png", gray_depths[i]);
        check_format(name, PNG_COLOR_TYPE_GRAY, gray_depths[i], 0, 0);
        snprintf(name, sizeof name, "gray%d_trns.png", gray_depths[i]);
        check_format(name, PNG_COLOR_TYPE_GRAY, gray_depths[i], 0, 1);
    }
    check_format("ga8.png", PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, 0);
    check_format("ga16.png", PNG_COLOR_TYPE_GRAY_ALPHA, 16, 0, 0);
    check_format("rgb8.png", PNG_COLOR_TYPE_RGB, 8, 0, 0);
    check_format("rgb16.png", PNG_COLOR_TYPE_RGB, 16, 0, 0);
    check_format("rgba8.png", PNG_COLOR_TYPE_RGB_ALPHA, 8, 0, 0);
    check_format("rgba16.png", PNG_COLOR_TYPE_RGB_ALPHA, 16, 0, 0);
    check_format("rgb8_adam7.png", PNG_COLOR_TYPE_RGB, 8, 1, 0);
    static const int pal_depths[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "pal%d.png", pal_depths[i]);
        check_format(name, PNG_COLOR_TYPE_PALETTE, pal_depths[i], 0, 0);
        snprintf(name, sizeof name, "pal%d_trns.png", pal_depths[i]);
        check_format(name, PNG_COLOR_TYPE_PALETTE, pal_depths[i], 0, 1);
    }
}

/* The writer quantises like numpy: clip(255 * x, 0, 255) then truncate. */
static void test_write_round_trip(void) {
    sd_error err = {0};
    for (int c = 1; c <= 4; c++) {
        sd_tensor *img = sd_tensor_new4(SD_F32, 4, 1, 5, 6, c);
        float *d = sd_tensor_f32(img);
        size_t n = (size_t)sd_tensor_numel(img);
        for (size_t i = 0; i < n; i++) d[i] = (float)((double)(i * 7919 % 1000) / 900.0 - 0.05);
        d[0] = NAN;
        char name[32];
        snprintf(name, sizeof name, "write_c%d.png", c);
        const char *p = path_of(name);
        CHECK_OK(sd_png_write(p, img, NULL, 0, 4, &err), &err);
        sd_tensor *back = NULL;
        CHECK_OK(sd_png_read(p, SD_PNG_KEEP, &back, NULL, &err), &err);
        if (back) {
            CHECK(back->ndim == 3 && back->shape[0] == 5 && back->shape[1] == 6 && back->shape[2] == c);
            const float *b = sd_tensor_f32(back);
            int bad = 0;
            for (size_t i = 0; i < n; i++) {
                float v = 255.0f * d[i];
                unsigned q = isnan(v) || v <= 0 ? 0 : v >= 255 ? 255 : (unsigned)v;
                if (b[i] != (float)q / 255.0f) bad++;
            }
            CHECK_MSG(bad == 0, "c=%d: %d samples differ", c, bad);
        }
        sd_tensor_unref(back);
        sd_tensor_unref(img);
    }
    /* Bad shapes are refused, naming the file. */
    sd_tensor *bad = sd_tensor_new4(SD_F32, 3, 4, 4, 5, 0);
    sd_status rc = sd_png_write(path_of("bad.png"), bad, NULL, 0, 4, &err);
    CHECK(rc == SD_ERR_INVALID && strstr(err.msg, "bad.png"));
    sd_tensor_unref(bad);
}

static int count_entries(const char *d, const char *needle) {
    DIR *dp = opendir(d);
    if (!dp) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)))
        if (strstr(e->d_name, needle)) n++;
    closedir(dp);
    return n;
}

static void test_text_and_atomic(void) {
    sd_error err = {0};
    sd_tensor *img = sd_tensor_new4(SD_F32, 3, 8, 8, 3, 0);
    const char *prompt = "{\"3\": {\"class_type\": \"KSampler\", \"inputs\": {\"seed\": 1}}}";
    const char *uni = "caf\xc3\xa9 \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac"; /* needs iTXt */
    const char *latin = "na\xc3\xafve"; /* Latin-1 representable: tEXt */
    sd_png_text texts[] = {{"prompt", prompt}, {"workflow", uni}, {"note", latin}};
    const char *p = path_of("text.png");
    CHECK_OK(sd_png_write(p, img, texts, 3, 9, &err), &err);
    for (int i = 0; i < 3; i++) {
        char *v = NULL;
        CHECK_OK(sd_png_read_text(p, texts[i].key, &v, &err), &err);
        CHECK_MSG(v && strcmp(v, texts[i].value) == 0, "key %s: got '%s'", texts[i].key,
                  v ? v : "(null)");
        free(v);
    }
    /* The Latin-1 value must be stored as tEXt, the other as iTXt. */
    size_t size = 0;
    char *raw = sd_test_read_file(p, &size);
    CHECK(raw != NULL);
    if (raw) {
        int has_itxt = 0, text_latin = 0;
        for (size_t i = 0; i + 14 <= size; i++) {
            if (memcmp(raw + i, "iTXtworkflow", 12) == 0) has_itxt = 1;
            if (memcmp(raw + i, "tEXtnote\0na\xefve", 14) == 0) text_latin = 1;
        }
        CHECK(has_itxt);
        CHECK(text_latin);
        free(raw);
    }
    char *v = (char *)1;
    sd_status rc = sd_png_read_text(p, "missing", &v, &err);
    CHECK(rc == SD_ERR_NOT_FOUND && v == NULL && strstr(err.msg, "text.png"));

    /* zTXt after IDAT (written by libpng directly) is found too. */
    const char *q = path_of("text_after.png");
    CHECK(write_raw(q, 4, 3, PNG_COLOR_TYPE_RGB, 8, 1, 0, "parameters", "a photo, Steps: 20") == 0);
    v = NULL;
    CHECK_OK(sd_png_read_text(q, "parameters", &v, &err), &err);
    CHECK(v && strcmp(v, "a photo, Steps: 20") == 0);
    free(v);

    /* Atomic: no temporary file remains; overwriting replaces the file; the
     * temporary a killed writer left beside it is removed. */
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* a pid that has just died */
    char host[256] = "", stale[512];
    gethostname(host, sizeof host - 1);
    for (char *c = host; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' || *c == '_')) *c = '_';
    snprintf(stale, sizeof stale, ".sdflow-tmp-%d-0-abcdef-%.63s", (int)child, host);
    FILE *sf = fopen(path_of(stale), "w");
    if (sf) fclose(sf);
    CHECK(count_entries(dir, "tmp-") == 1);
    CHECK_OK(sd_png_write(p, img, NULL, 0, 1, &err), &err);
    CHECK(count_entries(dir, "tmp-") == 0);
    v = NULL;
    CHECK(sd_png_read_text(p, "prompt", &v, &err) == SD_ERR_NOT_FOUND);
    /* A failing write (missing directory) leaves nothing behind and says where. */
    rc = sd_png_write(path_of("no/such/dir/x.png"), img, NULL, 0, 4, &err);
    CHECK(rc == SD_ERR_IO && strstr(err.msg, "x.png"));
    CHECK(count_entries(dir, "tmp-") == 0);
    /* Invalid key refused. */
    sd_png_text badkey = {"", "x"};
    rc = sd_png_write(path_of("badkey.png"), img, &badkey, 1, 4, &err);
    CHECK(rc == SD_ERR_INVALID);

    /* Compression level is honoured: level 0 stores, 9 deflates. */
    sd_tensor *flat = sd_tensor_new4(SD_F32, 3, 64, 64, 3, 0);
    CHECK_OK(sd_png_write(path_of("c0.png"), flat, NULL, 0, 0, &err), &err);
    CHECK_OK(sd_png_write(path_of("c9.png"), flat, NULL, 0, 9, &err), &err);
    struct stat s0, s9;
    CHECK(stat(path_of("c0.png"), &s0) == 0 && stat(path_of("c9.png"), &s9) == 0);
    CHECK(s0.st_size > s9.st_size * 4);
    sd_tensor_unref(flat);
    sd_tensor_unref(img);
}

static void test_corrupt(void) {
    sd_error err = {0};
    sd_tensor *t = NULL;
    sd_status rc = sd_png_read(path_of("does_not_exist.png"), SD_PNG_RGB, &t, NULL, &err);
    CHECK(rc == SD_ERR_NOT_FOUND && t == NULL && strstr(err.msg, "does_not_exist.png"));

    const char *src = path_of("rgb8.png");
    size_t size = 0;
    char *raw = sd_test_read_file(src, &size);
    CHECK(raw && size > 60);
    if (!raw) return;
    /* Truncated in the middle of IDAT. */
    const char *tr = path_of("truncated.png");
    FILE *f = fopen(tr, "wb");
    fwrite(raw, 1, size - 30, f);
    fclose(f);
    rc = sd_png_read(tr, SD_PNG_RGB, &t, NULL, &err);
    CHECK_MSG(rc == SD_ERR_FORMAT && t == NULL && strstr(err.msg, "truncated.png"), "rc=%d msg=%s",
              rc, err.msg);
    /* Corrupted image data (CRC mismatch in IDAT). */
    const char *co = path_of("corrupt.png");
    raw[size - 20] ^= 0x5a;
    f = fopen(co, "wb");
    fwrite(raw, 1, size, f);
    fclose(f);
    rc = sd_png_read(co, SD_PNG_RGB, &t, NULL, &err);
    CHECK_MSG(rc == SD_ERR_FORMAT && strstr(err.msg, "corrupt.png"), "rc=%d msg=%s", rc, err.msg);
    /* Not a PNG at all. */
    const char *np = path_of("not.png");
    f = fopen(np, "wb");
    fputs("GIF89a....", f);
    fclose(f);
    rc = sd_png_read(np, SD_PNG_RGB, &t, NULL, &err);
    CHECK(rc == SD_ERR_FORMAT && strstr(err.msg, "not.png"));
    /* the header reader: the same errors for an absent file and a non-PNG */
    sd_png_info head;
    char full[SD_ERR_MSG_MAX];
    snprintf(full, sizeof full, "%s", err.msg);
    rc = sd_png_read_info(np, 0, &head, &err);
    CHECK_MSG(rc == SD_ERR_FORMAT && strcmp(err.msg, full) == 0, "sd_png_read_info: %s", err.msg);
    rc = sd_png_read(path_of("does_not_exist.png"), SD_PNG_RGB, &t, NULL, &err);
    snprintf(full, sizeof full, "%s", err.msg);
    rc = sd_png_read_info(path_of("does_not_exist.png"), 0, &head, &err);
    CHECK_MSG(rc == SD_ERR_NOT_FOUND && strcmp(err.msg, full) == 0, "sd_png_read_info: %s", err.msg);
    char *v = NULL;
    rc = sd_png_read_text(np, "prompt", &v, &err);
    CHECK(rc == SD_ERR_FORMAT && v == NULL);
    free(raw);
}

/* ---- decompression bombs --------------------------------------------------------
 * Crafted files are built here byte by byte (no binary blobs): a PNG is the
 * signature and chunks of {length, type, data, CRC-32 of type and data}. */

static uint32_t crc_png(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

static size_t put_u32(unsigned char *b, uint32_t v) {
    b[0] = (unsigned char)(v >> 24); b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8); b[3] = (unsigned char)v;
    return 4;
}

/* One whole chunk at b; returns its size. */
static size_t put_chunk(unsigned char *b, const char *type, const unsigned char *data, uint32_t n) {
    size_t o = put_u32(b, n);
    memcpy(b + o, type, 4);
    if (n) memcpy(b + o + 4, data, n);
    o += 4 + n;
    return o + put_u32(b + o, crc_png(b + 4, 4 + (size_t)n));
}

static size_t put_ihdr(unsigned char *b, uint32_t w, uint32_t h, int depth, int ctype) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    unsigned char d[13];
    put_u32(d, w);
    put_u32(d + 4, h);
    d[8] = (unsigned char)depth; d[9] = (unsigned char)ctype; d[10] = d[11] = d[12] = 0;
    memcpy(b, sig, 8);
    return 8 + put_chunk(b + 8, "IHDR", d, 13);
}

static void write_bytes(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, n, f) == n);
    if (f) fclose(f);
}

static void test_bombs(void) {
    sd_error err;
    sd_tensor *t = NULL;
    unsigned char b[256];

    /* A gray 16384x16384 image (268 million pixels, a 1 GB float tensor)
     * declared by a file of a few dozen bytes: refused before decoding. */
    size_t n = put_ihdr(b, 16384, 16384, 8, PNG_COLOR_TYPE_GRAY);
    static const unsigned char idat[] = {0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01};
    n += put_chunk(b + n, "IDAT", idat, sizeof idat);
    n += put_chunk(b + n, "IEND", NULL, 0);
    const char *big = path_of("big.png");
    write_bytes(big, b, n);
    sd_error_clear(&err);
    sd_status rc = sd_png_read(big, SD_PNG_KEEP, &t, NULL, &err);
    CHECK_MSG(rc == SD_ERR_UNSUPPORTED && !t, "rc %d: %s", rc, err.msg);
    CHECK_MSG(strstr(err.msg, big) && strstr(err.msg, "16384x16384") && strstr(err.msg, "178956970"),
              "%s", err.msg);
    /* Reading its text needs no pixel when the text comes first... */
    char *v = NULL;
    rc = sd_png_read_text(big, "prompt", &v, &err);
    CHECK_MSG(rc == SD_ERR_UNSUPPORTED && !v, "rc %d: %s", rc, err.msg); /* ...here it would follow */

    /* The limit is a parameter: exactly at it passes, one below refuses, 0 is none. */
    sd_tensor *img = sd_tensor_new4(SD_F32, 3, 64, 64, 3, 1);
    const char *small = path_of("limit.png");
    CHECK_OK(sd_png_write(small, img, NULL, 0, 1, &err), &err);
    sd_tensor_unref(img);
    rc = sd_png_read_limited(small, SD_PNG_KEEP, 4095, &t, NULL, &err);
    CHECK_MSG(rc == SD_ERR_UNSUPPORTED && strstr(err.msg, "4095") && strstr(err.msg, small), "%s", err.msg);
    {
        char full[SD_ERR_MSG_MAX];
        snprintf(full, sizeof full, "%s", err.msg);
        sd_png_info head;
        rc = sd_png_read_info(small, 4095, &head, &err);
        CHECK_MSG(rc == SD_ERR_UNSUPPORTED && strcmp(err.msg, full) == 0, "sd_png_read_info: %s", err.msg);
        CHECK_OK(sd_png_read_info(small, 4096, &head, &err), &err);
        CHECK(head.width == 64 && head.height == 64);
        rc = sd_png_read_info(big, SD_PNG_MAX_PIXELS_DEFAULT, &head, &err);
        CHECK_MSG(rc == SD_ERR_UNSUPPORTED && strstr(err.msg, "16384x16384"), "sd_png_read_info: %s", err.msg);
    }
    CHECK_OK(sd_png_read_limited(small, SD_PNG_KEEP, 4096, &t, NULL, &err), &err);
    sd_tensor_unref(t);
    t = NULL;
    CHECK_OK(sd_png_read_limited(small, SD_PNG_KEEP, 0, &t, NULL, &err), &err);
    sd_tensor_unref(t);
    t = NULL;

    /* 48 bytes: a tEXt chunk declaring 0x7fffffff bytes. libpng used to
     * allocate the 2 GB before noticing the file ends; now the chunk limit
     * refuses it at once. */
    n = put_ihdr(b, 1, 1, 8, PNG_COLOR_TYPE_GRAY);
    n += put_u32(b + n, 0x7fffffffu);
    memcpy(b + n, "tEXtprompt", 11); /* with the keyword's NUL */
    n += 11;
    CHECK_MSG(n == 48, "crafted file is %zu bytes", n);
    const char *text = path_of("text_bomb.png");
    write_bytes(text, b, n);
    sd_error_clear(&err);
    rc = sd_png_read_text(text, "prompt", &v, &err);
    CHECK_MSG(rc == SD_ERR_UNSUPPORTED && !v, "rc %d: %s", rc, err.msg);
    CHECK_MSG(strstr(err.msg, text) && strstr(err.msg, "limit of 67108864"),
              "%s", err.msg);
    sd_error_clear(&err);
    rc = sd_png_read(text, SD_PNG_RGB, &t, NULL, &err);
    CHECK_MSG(rc == SD_ERR_UNSUPPORTED && !t && strstr(err.msg, "limit"), "rc %d: %s", rc, err.msg);

    /* Compressed text: five zTXt chunks of 60 MiB each once inflated (a
     * 1.4 MB file, written by libpng). Each is under the
     * chunk limit, but libpng keeps every one: past SD_PNG_MEM_MAX in all,
     * the read is refused. */
    {
        size_t plain = 60u << 20;
        char *text_z = malloc(plain + 1);
        const char *many = path_of("ztxt_bomb.png");
        FILE *f = fopen(many, "wb");
        png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
        png_infop info = png_create_info_struct(png);
        CHECK(text_z && f && png && info);
        if (text_z && f && png && info && !setjmp(png_jmpbuf(png))) {
            memset(text_z, 'a', plain);
            text_z[plain] = 0;
            png_text t[5];
            char keys[5][8];
            memset(t, 0, sizeof t);
            for (int k = 0; k < 5; k++) {
                snprintf(keys[k], sizeof keys[k], "key%d", k);
                t[k].compression = PNG_TEXT_COMPRESSION_zTXt;
                t[k].key = keys[k];
                t[k].text = text_z;
                t[k].text_length = plain;
            }
            png_init_io(png, f);
            png_set_text_compression_level(png, 1);
            png_set_IHDR(png, info, 1, 1, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                         PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
            png_set_text(png, info, t, 5);
            png_write_info(png, info);
            png_byte row[1] = {0};
            png_write_row(png, row);
            png_write_end(png, NULL);
        }
        if (png) png_destroy_write_struct(&png, &info);
        if (f) fclose(f);
        free(text_z);
        struct stat st;
        CHECK(stat(many, &st) == 0 && st.st_size < (4 << 20)); /* 1.4 MB */
        sd_error_clear(&err);
        rc = sd_png_read_text(many, "prompt", &v, &err);
        CHECK_MSG(rc == SD_ERR_UNSUPPORTED && !v && strstr(err.msg, many) && strstr(err.msg, "in all"),
                  "rc %d: %s", rc, err.msg);
    }

    /* One compressed iTXt 'prompt' inflating to 65 MiB, over the chunk
     * limit: libpng drops it with a warning, and the error says so and names
     * the limit (issue 23: it said the file had no prompt chunk). */
    {
        size_t plain = 65u << 20;
        /* volatile: read again after a longjmp from libpng */
        char *volatile text_i = malloc(plain + 1);
        const char *volatile one = path_of("itxt_big.png");
        FILE *volatile f = fopen(one, "wb");
        png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
        png_infop info = png_create_info_struct(png);
        CHECK(text_i && f && png && info);
        if (text_i && f && png && info && !setjmp(png_jmpbuf(png))) {
            memset(text_i, ' ', plain);
            text_i[0] = '{';
            text_i[plain - 1] = '}';
            text_i[plain] = 0;
            png_text t;
            memset(&t, 0, sizeof t);
            t.compression = PNG_ITXT_COMPRESSION_zTXt;
            t.key = (char *)"prompt";
            t.text = text_i;
            t.itxt_length = plain;
            png_init_io(png, f);
            png_set_text_compression_level(png, 1);
            png_set_IHDR(png, info, 1, 1, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                         PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
            png_set_text(png, info, &t, 1);
            png_write_info(png, info);
            png_byte row[1] = {0};
            png_write_row(png, row);
            png_write_end(png, NULL);
        }
        if (png) png_destroy_write_struct(&png, &info);
        if (f) fclose(f);
        free(text_i);
        sd_error_clear(&err);
        rc = sd_png_read_text(one, "prompt", &v, &err);
        CHECK_MSG(rc == SD_ERR_UNSUPPORTED && !v && strstr(err.msg, "iTXt") && strstr(err.msg, "64 MiB"),
                  "an over-size iTXt says what was too large: rc %d: %s", rc, err.msg);
    }

    /* A text chunk below the limit still reads. */
    static const char kv[] = "prompt\0{\"1\": {}}";
    n = put_ihdr(b, 1, 1, 8, PNG_COLOR_TYPE_GRAY);
    n += put_chunk(b + n, "tEXt", (const unsigned char *)kv, sizeof kv - 1);
    n += put_chunk(b + n, "IDAT", idat, sizeof idat);
    n += put_chunk(b + n, "IEND", NULL, 0);
    const char *fine = path_of("text_fine.png");
    write_bytes(fine, b, n);
    CHECK_OK(sd_png_read_text(fine, "prompt", &v, &err), &err);
    CHECK(v && strcmp(v, "{\"1\": {}}") == 0);
    free(v);
}

int main(void) {
    dir = sd_test_tmpdir("core_png");
    test_formats();
    test_write_round_trip();
    test_text_and_atomic();
    test_corrupt();
    test_bombs();
    return sd_test_finish();
}
