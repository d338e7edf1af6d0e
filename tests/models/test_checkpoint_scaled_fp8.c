/* test_checkpoint_scaled_fp8.c - the rules of ComfyUI's scaled fp8 layouts
 * (models/checkpoint/fp8_scaled.h) on small in-memory files, and the
 * backend's handling of a scaled tensor:
 *   - legacy: "<layer>.scale_weight" counts only under a "<P>scaled_fp8"
 *     marker whose P is the view's prefix (or a shorter dotted one, or "");
 *     a marker of another part does not apply; an fp8 weight without a
 *     scale stays plain fp8;
 *   - "<layer>.comfy_quant" (float8_e5m2 here, the weight stored F16:
 *     converted to E5M2 at load, as ComfyUI's .to(storage_t)) with
 *     "<layer>.weight_scale";
 *   - "_quantization_metadata": its layers are scaled, and the legacy
 *     marker is then not read (convert_old_quants);
 *   - errors: nvfp4 / malformed configs refused when the file is probed,
 *     a missing, non-scalar or zero scale when the weight is fetched, each
 *     naming the file and key;
 *   - widening: host copies, linear, view, copy and embedding see
 *     float(q) * scale (one F32 product per value: compared bit for bit with
 *     that product, the same computation). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/weights.h"
#include "testutil.h"

static const uint8_t CODES[8] = {0x38, 0xB8, 0x40, 0x01, 0x5E, 0x30, 0x44, 0x8F};

static sd_tensor *f8(sd_dtype dt) {
    sd_tensor *t = sd_tensor_new4(dt, 2, 2, 4, 0, 0);
    memcpy(t->data, CODES, 8);
    return t;
}

static sd_tensor *scalar(float v, int n) {
    int64_t s[1] = {n};
    sd_tensor *t = sd_tensor_new(SD_F32, n == 1 ? 0 : 1, s);
    for (int i = 0; i < n; i++) sd_tensor_f32(t)[i] = v;
    return t;
}

static sd_tensor *json_u8(const char *j) {
    int64_t n = (int64_t)strlen(j);
    sd_tensor *t = sd_tensor_new(SD_U8, 1, &n);
    memcpy(t->data, j, (size_t)n);
    return t;
}

typedef struct {
    const char *name;
    sd_tensor *t;
} kv;

/* An in-memory file of the given tensors (taken) and optional metadata. */
static sd_st_file *file_of(kv *e, const char *meta, void **buf, const char *name) {
    sd_error err;
    sd_st_writer *w = sd_st_writer_new();
    for (int i = 0; e[i].name; i++) {
        CHECK_OK(sd_st_writer_add(w, e[i].name, e[i].t, &err), &err);
        sd_tensor_unref(e[i].t);
    }
    if (meta) CHECK_OK(sd_st_writer_meta(w, "_quantization_metadata", meta, &err), &err);
    size_t size = 0;
    *buf = NULL;
    CHECK_OK(sd_st_writer_to_memory(w, buf, &size, &err), &err);
    sd_st_writer_free(w);
    sd_st_file *f = NULL;
    if (*buf) CHECK_OK(sd_st_open_memory(*buf, size, name, &f, &err), &err);
    return f;
}

/* Fetches prefix+name; checks its dtype and scale and that its host copy is
 * table[code] * scale for every element. */
static void expect(sd_backend *be, sd_st_file *f, const char *prefix, const char *name, sd_dtype dt,
                   float scale, const char *what) {
    sd_weights w;
    sd_weights_init(&w, be, f, prefix);
    sd_error err;
    sd_error_clear(&err);
    sd_bt *b = sd_weights_get(&w, name, 0, NULL, &err);
    CHECK_MSG(b != NULL, "%s: %s", what, err.msg);
    if (!b) return;
    CHECK_MSG(b->dtype == dt && b->scale == scale, "%s: %s%s is %s scale %g, want %s scale %g", what, prefix, name,
              sd_dtype_name(b->dtype), (double)b->scale, sd_dtype_name(dt), (double)scale);
    sd_tensor *h = sd_bt_to_host(b);
    const uint8_t *q = b->data;
    for (int i = 0; h && i < 8; i++) {
        float v = dt == SD_F8_E4M3 ? sd_f8_e4m3_to_f32(q[i]) : sd_f8_e5m2_to_f32(q[i]);
        if (scale != 0.0f) v *= scale;
        CHECK_MSG(sd_tensor_f32(h)[i] == v, "%s: element %d is %g, want %g", what, i, (double)sd_tensor_f32(h)[i],
                  (double)v);
    }
    sd_tensor_unref(h);
    sd_bt_free(b);
}

static void expect_get_error(sd_backend *be, sd_st_file *f, const char *name, sd_status want, const char *mention) {
    sd_weights w;
    sd_weights_init(&w, be, f, "");
    sd_error err;
    sd_error_clear(&err);
    sd_bt *b = sd_weights_get(&w, name, 0, NULL, &err);
    CHECK_MSG(!b && err.code == want && strstr(err.msg, mention) && strstr(err.msg, sd_st_path(f)),
              "%s: gave %d (%s), want %d naming %s", name, err.code, err.msg, want, mention);
    sd_bt_free(b);
}

static void legacy(sd_backend *be) {
    void *buf;
    kv e[] = {{"scaled_fp8", sd_tensor_new4(SD_F8_E4M3, 1, 0, 0, 0, 0)},
              {"a.weight", f8(SD_F8_E4M3)},
              {"a.scale_weight", scalar(0.3f, 1)},
              {"a.scale_input", scalar(1.0f, 1)},
              {"b.weight", f8(SD_F8_E4M3)},
              {NULL, NULL}};
    sd_st_file *f = file_of(e, NULL, &buf, "legacy.safetensors");
    if (f) {
        expect(be, f, "", "a.weight", SD_F8_E4M3, 0.3f, "legacy scaled layer");
        expect(be, f, "", "b.weight", SD_F8_E4M3, 0.0f, "legacy fp8 layer without a scale");
    }
    sd_st_close(f);
    free(buf);

    kv nomark[] = {{"a.weight", f8(SD_F8_E4M3)}, {"a.scale_weight", scalar(0.3f, 1)}, {NULL, NULL}};
    f = file_of(nomark, NULL, &buf, "nomarker.safetensors");
    if (f) expect(be, f, "", "a.weight", SD_F8_E4M3, 0.0f, "scale_weight without a marker (ComfyUI ignores it)");
    sd_st_close(f);
    free(buf);

    kv ckpt[] = {{"model.diffusion_model.scaled_fp8", sd_tensor_new4(SD_F8_E4M3, 1, 0, 0, 0, 0)},
                 {"model.diffusion_model.a.weight", f8(SD_F8_E4M3)},
                 {"model.diffusion_model.a.scale_weight", scalar(0.5f, 1)},
                 {"text_encoders.t5xxl.transformer.a.weight", f8(SD_F8_E4M3)},
                 {"text_encoders.t5xxl.transformer.a.scale_weight", scalar(0.5f, 1)},
                 {"text_encoders.clip_l.transformer.scaled_fp8", sd_tensor_new4(SD_F8_E4M3, 1, 0, 0, 0, 0)},
                 {"text_encoders.clip_l.transformer.a.weight", f8(SD_F8_E4M3)},
                 {"text_encoders.clip_l.transformer.a.scale_weight", scalar(2.0f, 1)},
                 {NULL, NULL}};
    f = file_of(ckpt, NULL, &buf, "ckpt.safetensors");
    if (f) {
        expect(be, f, "model.diffusion_model.", "a.weight", SD_F8_E4M3, 0.5f, "checkpoint diffusion model");
        expect(be, f, "text_encoders.t5xxl.transformer.", "a.weight", SD_F8_E4M3, 0.0f,
               "a part without its own marker");
        expect(be, f, "text_encoders.clip_l.transformer.", "a.weight", SD_F8_E4M3, 2.0f, "a text encoder's marker");
    }
    sd_st_close(f);
    free(buf);

    /* a single file's root marker converts nothing; "text_encoders." covers
     * every text encoder */
    kv root[] = {{"scaled_fp8", sd_tensor_new4(SD_F8_E4M3, 1, 0, 0, 0, 0)},
                 {"model.diffusion_model.a.weight", f8(SD_F8_E4M3)},
                 {"model.diffusion_model.a.scale_weight", scalar(0.5f, 1)},
                 {"text_encoders.scaled_fp8", sd_tensor_new4(SD_F8_E4M3, 1, 0, 0, 0, 0)},
                 {"text_encoders.t5xxl.transformer.a.weight", f8(SD_F8_E4M3)},
                 {"text_encoders.t5xxl.transformer.a.scale_weight", scalar(4.0f, 1)},
                 {NULL, NULL}};
    f = file_of(root, NULL, &buf, "rootmarker.safetensors");
    if (f) {
        expect(be, f, "model.diffusion_model.", "a.weight", SD_F8_E4M3, 0.0f, "root marker in a single file");
        expect(be, f, "text_encoders.t5xxl.transformer.", "a.weight", SD_F8_E4M3, 4.0f, "text_encoders. marker");
    }
    sd_st_close(f);
    free(buf);
}

static void comfy_quant(sd_backend *be) {
    void *buf;
    sd_tensor *h = sd_tensor_new4(SD_F16, 2, 2, 4, 0, 0);
    for (int i = 0; i < 8; i++) ((uint16_t *)h->data)[i] = sd_f32_to_f16(sd_f8_e5m2_to_f32(CODES[i]));
    kv e[] = {{"l.weight", h},
              {"l.weight_scale", scalar(0.125f, 1)},
              {"l.input_scale", scalar(3.0f, 1)},
              {"l.comfy_quant", json_u8("{\"format\": \"float8_e5m2\", \"full_precision_matrix_mult\": true}")},
              {NULL, NULL}};
    sd_st_file *f = file_of(e, NULL, &buf, "comfy_quant.safetensors");
    if (f) expect(be, f, "", "l.weight", SD_F8_E5M2, 0.125f, "comfy_quant e5m2 (stored F16, converted)");
    sd_st_close(f);
    free(buf);

    kv m[] = {{"scaled_fp8", sd_tensor_new4(SD_F8_E4M3, 1, 0, 0, 0, 0)},
              {"a.weight", f8(SD_F8_E4M3)},
              {"a.weight_scale", scalar(0.75f, 1)},
              {"b.weight", f8(SD_F8_E4M3)},
              {"b.scale_weight", scalar(0.3f, 1)},
              {NULL, NULL}};
    f = file_of(m, "{\"layers\": {\"a\": {\"format\": \"float8_e4m3fn\"}}}", &buf, "meta.safetensors");
    if (f) {
        expect(be, f, "", "a.weight", SD_F8_E4M3, 0.75f, "a layer of _quantization_metadata");
        expect(be, f, "", "b.weight", SD_F8_E4M3, 0.0f, "legacy marker beside _quantization_metadata");
    }
    sd_st_close(f);
    free(buf);
}

static void errors(sd_backend *be) {
    const char *dir = sd_test_tmpdir("checkpoint_scaled_fp8");
    struct {
        const char *name, *conf, *meta, *mention;
        sd_status want;
    } probe[] = {
        {"nvfp4", "{\"format\": \"nvfp4\"}", NULL, "nvfp4", SD_ERR_UNSUPPORTED},
        {"badjson", "{\"format\": ", NULL, "comfy_quant", SD_ERR_FORMAT},
        {"noformat", "{\"fmt\": 1}", NULL, "format", SD_ERR_FORMAT},
        {"metabad", NULL, "[1, 2]", "_quantization_metadata", SD_ERR_FORMAT},
        {"metanv", NULL, "{\"layers\": {\"x\": {\"format\": \"nvfp4\"}}}", "nvfp4", SD_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof probe / sizeof *probe; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, probe[i].name);
        sd_st_writer *w = sd_st_writer_new();
        sd_error err;
        sd_tensor *t = f8(SD_F8_E4M3);
        CHECK_OK(sd_st_writer_add(w, "x.weight", t, &err), &err);
        sd_tensor_unref(t);
        if (probe[i].conf) {
            t = json_u8(probe[i].conf);
            CHECK_OK(sd_st_writer_add(w, "x.comfy_quant", t, &err), &err);
            sd_tensor_unref(t);
        }
        if (probe[i].meta) CHECK_OK(sd_st_writer_meta(w, "_quantization_metadata", probe[i].meta, &err), &err);
        CHECK_OK(sd_st_writer_save(w, path, &err), &err);
        sd_st_writer_free(w);
        sd_ckpt_info info;
        sd_error_clear(&err);
        sd_status rc = sd_checkpoint_probe(path, &info, &err);
        CHECK_MSG(rc == probe[i].want && strstr(err.msg, probe[i].mention) && strstr(err.msg, path),
                  "%s: probe gave %d: %s", probe[i].name, rc, err.msg);
    }

    void *buf;
    kv e[] = {{"noscale.weight", f8(SD_F8_E4M3)},
              {"noscale.comfy_quant", json_u8("{\"format\": \"float8_e4m3fn\"}")},
              {"vec.weight", f8(SD_F8_E4M3)},
              {"vec.weight_scale", scalar(0.5f, 2)},
              {"vec.comfy_quant", json_u8("{\"format\": \"float8_e4m3fn\"}")},
              {"zero.weight", f8(SD_F8_E4M3)},
              {"zero.weight_scale", scalar(0.0f, 1)},
              {"zero.comfy_quant", json_u8("{\"format\": \"float8_e4m3fn\"}")},
              {NULL, NULL}};
    sd_st_file *f = file_of(e, NULL, &buf, "bad-scales.safetensors");
    if (f) {
        expect_get_error(be, f, "noscale.weight", SD_ERR_FORMAT, "noscale.weight_scale");
        expect_get_error(be, f, "vec.weight", SD_ERR_UNSUPPORTED, "vec.weight_scale");
        expect_get_error(be, f, "zero.weight", SD_ERR_FORMAT, "zero.weight_scale");
    }
    sd_st_close(f);
    free(buf);
}

/* Ops on a scaled weight against the same ops on its widened F32 values. */
static void ops(sd_backend *be) {
    sd_tensor *q = f8(SD_F8_E4M3), *wf = sd_tensor_new4(SD_F32, 2, 2, 4, 0, 0);
    const float s = 0.3f;
    for (int i = 0; i < 8; i++) sd_tensor_f32(wf)[i] = sd_f8_e4m3_to_f32(CODES[i]) * s;
    sd_bt *w = sd_bt_from_host(be, q, SD_F8_E4M3), *ref = sd_bt_from_host(be, wf, SD_F32);
    CHECK(w && ref);
    if (!w || !ref) goto done;
    w->scale = s;
    sd_tensor *x = sd_tensor_new4(SD_F32, 2, 3, 4, 0, 0);
    for (int i = 0; i < 12; i++) sd_tensor_f32(x)[i] = (float)(i % 5) - 1.5f;
    sd_bt *bx = sd_bt_from_host(be, x, SD_F32);
    sd_bt *y = sd_op_linear(bx, w, NULL), *yr = sd_op_linear(bx, ref, NULL);
    sd_tensor *hy = y ? sd_bt_to_host(y) : NULL, *hr = yr ? sd_bt_to_host(yr) : NULL;
    double mx;
    long worst;
    CHECK(hy && hr && sd_test_allclose(hy, hr, 0, 0, &mx, &worst)); /* the same GEMM on the same F32 values */
    int64_t flat[1] = {8};
    sd_bt *v = sd_bt_view(w, 1, flat), *c = sd_op_copy(w);
    CHECK(v && v->scale == s && c && c->scale == s);
    sd_tensor *hv = v ? sd_bt_to_host(v) : NULL, *hc = c ? sd_bt_to_host(c) : NULL;
    for (int i = 0; hv && hc && i < 8; i++)
        CHECK(sd_tensor_f32(hv)[i] == sd_tensor_f32(wf)[i] && sd_tensor_f32(hc)[i] == sd_tensor_f32(wf)[i]);
    int64_t ids_shape[2] = {1, 2};
    sd_tensor *ids = sd_tensor_new(SD_I32, 2, ids_shape);
    ((int32_t *)ids->data)[0] = 1, ((int32_t *)ids->data)[1] = 0;
    sd_bt *bi = sd_bt_from_host(be, ids, SD_I32), *emb = sd_op_embedding(w, bi);
    sd_tensor *he = emb ? sd_bt_to_host(emb) : NULL;
    CHECK(he != NULL);
    for (int i = 0; he && i < 4; i++)
        CHECK(sd_tensor_f32(he)[i] == sd_tensor_f32(wf)[4 + i] && sd_tensor_f32(he)[4 + i] == sd_tensor_f32(wf)[i]);
    sd_tensor_unref(hy), sd_tensor_unref(hr), sd_tensor_unref(hv), sd_tensor_unref(hc), sd_tensor_unref(he);
    sd_tensor_unref(x), sd_tensor_unref(ids);
    sd_bt_free(bx), sd_bt_free(y), sd_bt_free(yr), sd_bt_free(v), sd_bt_free(c), sd_bt_free(bi), sd_bt_free(emb);
done:
    sd_bt_free(w), sd_bt_free(ref);
    sd_tensor_unref(q), sd_tensor_unref(wf);
}

int main(void) {
    sd_backend *be = NULL;
    sd_error berr;
    CHECK_OK(sd_backend_new("cpu", 1, &be, &berr), &berr);
    if (!be) return sd_test_finish();
    legacy(be);
    comfy_quant(be);
    errors(be);
    ops(be);
    sd_backend_free(be);
    return sd_test_finish();
}
