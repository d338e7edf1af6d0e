/* test_workflow_file.c - finding the workflow in a file (formats/workflow_file.h):
 * PNG prompt chunk before workflow chunk, a PNG with only a workflow chunk,
 * WebP and JPEG with ComfyUI's EXIF entries (little- and big-endian TIFF),
 * a UI-format JSON file carried along as the workflow, and pictures or
 * model files without a workflow named as what they are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "formats/png.h"
#include "core/tensor.h"
#include "formats/workflow_file.h"
#include "testutil.h"

static const char *dir;

static const char *path_of(const char *name) {
    static char buf[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(d, 1, n, f) == n);
    fclose(f);
}

static void put16(unsigned char *p, unsigned v, int be) {
    if (be) { p[0] = (unsigned char)(v >> 8); p[1] = (unsigned char)v; }
    else { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
}

static void put32(unsigned char *p, unsigned long v, int be) {
    for (int i = 0; i < 4; i++) p[be ? 3 - i : i] = (unsigned char)(v >> (8 * i));
}

/* TIFF with IFD0 holding ASCII entries (tag 0x0110 downwards, as ComfyUI's
 * SaveAnimatedWEBP writes them), plus an unrelated SHORT entry. */
static size_t make_tiff(unsigned char *out, int be, const char *const *texts, int n) {
    memcpy(out, be ? "MM" : "II", 2);
    put16(out + 2, 42, be);
    put32(out + 4, 8, be);
    int count = n + 1;
    put16(out + 8, (unsigned)count, be);
    size_t data = 8 + 2 + 12 * (size_t)count + 4;
    unsigned char *e = out + 10;
    put16(e, 0x0112, be); /* Orientation, SHORT 1 */
    put16(e + 2, 3, be);
    put32(e + 4, 1, be);
    put32(e + 8, 0, be);
    put16(e + 8, 1, be);
    for (int i = 0; i < n; i++) {
        e = out + 10 + 12 * (size_t)(i + 1);
        size_t len = strlen(texts[i]) + 1;
        put16(e, 0x0110 - (unsigned)i, be);
        put16(e + 2, 2, be);
        put32(e + 4, (unsigned long)len, be);
        put32(e + 8, (unsigned long)data, be);
        memcpy(out + data, texts[i], len);
        data += len;
    }
    put32(out + 10 + 12 * (size_t)count, 0, be); /* no next IFD */
    return data;
}

static size_t make_webp(unsigned char *out, const unsigned char *tiff, size_t tn) {
    memcpy(out, "RIFF", 4);
    memcpy(out + 8, "WEBP", 4);
    size_t pos = 12;
    memcpy(out + pos, "VP8X", 4); /* a chunk before EXIF, odd size (padded) */
    put32(out + pos + 4, 3, 0);
    memset(out + pos + 8, 0, 4);
    pos += 12;
    memcpy(out + pos, "EXIF", 4);
    put32(out + pos + 4, (unsigned long)(tn + 6), 0);
    memcpy(out + pos + 8, "Exif\0\0", 6);
    memcpy(out + pos + 14, tiff, tn);
    pos += 14 + tn;
    if (pos & 1) out[pos++] = 0;
    put32(out + 4, (unsigned long)(pos - 8), 0);
    return pos;
}

static size_t make_jpeg(unsigned char *out, const unsigned char *tiff, size_t tn) {
    size_t pos = 0;
    out[pos++] = 0xFF; out[pos++] = 0xD8;
    out[pos++] = 0xFF; out[pos++] = 0xE0; /* APP0 JFIF */
    put16(out + pos, 16, 1);
    memcpy(out + pos + 2, "JFIF\0\1\1\0\0\1\0\1\0\0", 14);
    pos += 16;
    out[pos++] = 0xFF; out[pos++] = 0xE1;
    put16(out + pos, (unsigned)(tn + 8), 1);
    memcpy(out + pos + 2, "Exif\0\0", 6);
    memcpy(out + pos + 8, tiff, tn);
    pos += tn + 8;
    out[pos++] = 0xFF; out[pos++] = 0xD9;
    return pos;
}

static void expect_read(const char *path, const char *text, const char *ui, const char *from) {
    sd_workflow_file wf;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_workflow_file_read(path, &wf, &err), &err);
    CHECK_MSG(wf.text && !strcmp(wf.text, text), "%s: text %s", path, wf.text ? wf.text : "(null)");
    CHECK_MSG(ui ? wf.ui_workflow && !strcmp(wf.ui_workflow, ui) : !wf.ui_workflow, "%s: ui %s", path,
              wf.ui_workflow ? wf.ui_workflow : "(null)");
    CHECK_MSG(wf.from && !strcmp(wf.from, from), "%s: from %s", path, wf.from ? wf.from : "(null)");
    sd_workflow_file_free(&wf);
}

static void expect_refused(const char *path, sd_status code, const char *needle) {
    sd_workflow_file wf;
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_workflow_file_read(path, &wf, &err);
    CHECK_MSG(rc == code && !wf.text, "%s: status %d, expected %d", path, rc, code);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: '%s' lacks '%s'", path, err.msg, needle);
    CHECK_MSG(!strstr(err.msg, "invalid JSON"), "%s: parsed as JSON: %s", path, err.msg);
}

static const char *PROMPT = "{\"1\": {\"class_type\": \"X\", \"inputs\": {}}}";
static const char *UI = "{\"nodes\": [], \"links\": [], \"version\": 0.4}";

static void test_png(void) {
    sd_tensor *img = sd_tensor_new4(SD_F32, 3, 2, 2, 3, 0);
    memset(sd_tensor_f32(img), 0, 12 * sizeof(float));
    sd_error err;
    sd_error_clear(&err);
    sd_png_text both[] = {{"prompt", PROMPT}, {"workflow", UI}};
    CHECK_OK(sd_png_write(path_of("both.png"), img, both, 2, 4, &err), &err);
    expect_read(path_of("both.png"), PROMPT, UI, "PNG prompt chunk");
    sd_png_text ui_only[] = {{"workflow", UI}};
    CHECK_OK(sd_png_write(path_of("ui.png"), img, ui_only, 1, 4, &err), &err);
    expect_read(path_of("ui.png"), UI, UI, "PNG workflow chunk");
    sd_png_text other[] = {{"parameters", "a cat, Steps: 20"}};
    CHECK_OK(sd_png_write(path_of("a1111.png"), img, other, 1, 4, &err), &err);
    expect_refused(path_of("a1111.png"), SD_ERR_NOT_FOUND, "no 'prompt' or 'workflow' text chunk");
    sd_tensor_unref(img);
}

static void test_exif(void) {
    static unsigned char tiff[8192], file[16384];
    char p[256], w[256];
    snprintf(p, sizeof p, "prompt:%s", PROMPT);
    snprintf(w, sizeof w, "workflow:%s", UI);
    const char *both[] = {p, w}, *ui_only[] = {w}, *none[] = {"Make:nothing here"};
    for (int be = 0; be < 2; be++) {
        size_t tn = make_tiff(tiff, be, both, 2);
        size_t n = make_webp(file, tiff, tn);
        write_bytes(path_of("both.webp"), file, n);
        expect_read(path_of("both.webp"), PROMPT, UI, "EXIF prompt");
        n = make_jpeg(file, tiff, tn);
        write_bytes(path_of("both.jpg"), file, n);
        expect_read(path_of("both.jpg"), PROMPT, UI, "EXIF prompt");
        tn = make_tiff(tiff, be, ui_only, 1);
        n = make_webp(file, tiff, tn);
        write_bytes(path_of("ui.webp"), file, n);
        expect_read(path_of("ui.webp"), UI, UI, "EXIF workflow");
    }
    size_t tn = make_tiff(tiff, 0, none, 1);
    size_t n = make_webp(file, tiff, tn);
    write_bytes(path_of("plain.webp"), file, n);
    expect_refused(path_of("plain.webp"), SD_ERR_NOT_FOUND, "WebP picture without an embedded ComfyUI workflow");
    n = make_jpeg(file, tiff, tn);
    write_bytes(path_of("plain.jpg"), file, n);
    expect_refused(path_of("plain.jpg"), SD_ERR_NOT_FOUND, "JPEG picture without an embedded ComfyUI workflow");
    /* an EXIF entry pointing past the data is skipped, a truncated WebP chunk refused */
    tn = make_tiff(tiff, 0, both, 2);
    unsigned char *e = tiff + 10 + 12; /* first text entry: offset far away */
    put32(e + 8, 0x7fffffff, 0);
    char *out = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_workflow_exif_text(tiff, tn, "workflow", &out, &err), &err);
    CHECK(out && !strcmp(out, UI));
    free(out);
    CHECK(sd_workflow_exif_text(tiff, tn, "prompt", &out, &err) == SD_ERR_NOT_FOUND && !out);
    CHECK(sd_workflow_exif_text(tiff, 7, "prompt", &out, &err) == SD_ERR_FORMAT);
    n = make_webp(file, tiff, tn);
    write_bytes(path_of("cut.webp"), file, n - 9);
    expect_refused(path_of("cut.webp"), SD_ERR_FORMAT, "WebP picture with broken metadata");
}

static void test_json_and_binary(void) {
    write_bytes(path_of("api.json"), PROMPT, strlen(PROMPT));
    expect_read(path_of("api.json"), PROMPT, NULL, "JSON");
    write_bytes(path_of("ui.json"), UI, strlen(UI));
    expect_read(path_of("ui.json"), UI, UI, "JSON");
    write_bytes(path_of("model.ckpt"), "PK\3\4\0\0rest", 10);
    expect_refused(path_of("model.ckpt"), SD_ERR_FORMAT, "zip archive");
    unsigned char st[32] = {16, 0, 0, 0, 0, 0, 0, 0, '{', '"', 'a', '"', ':', '1', '}'};
    write_bytes(path_of("m.safetensors"), st, sizeof st);
    expect_refused(path_of("m.safetensors"), SD_ERR_FORMAT, "safetensors model file");
    write_bytes(path_of("x.gif"), "GIF89a\1\0\1\0", 10);
    expect_refused(path_of("x.gif"), SD_ERR_FORMAT, "GIF picture");
    write_bytes(path_of("blob.bin"), "abc\0\1\2", 6);
    expect_refused(path_of("blob.bin"), SD_ERR_FORMAT, "holds a NUL byte at byte 3");
    expect_refused(path_of("missing.json"), SD_ERR_NOT_FOUND, "cannot open");
}

int main(void) {
    dir = sd_test_tmpdir("workflow_file");
    test_png();
    test_exif();
    test_json_and_binary();
    return sd_test_finish();
}
