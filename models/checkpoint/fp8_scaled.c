/* fp8_scaled.c - the layer configs of ComfyUI's scaled fp8 files
 * (fp8_scaled.h). */
#include "models/checkpoint/fp8_scaled.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QMETA "_quantization_metadata"

/* A config's "format" as an fp8 dtype; SD_ERR_FORMAT (no format) or
 * SD_ERR_UNSUPPORTED (another one), naming `what`, when it is not one
 * sdflow reads. */
static sd_status format_of(const cJSON *conf, const sd_st_file *f, const char *what, sd_dtype *out,
                           sd_error *err) {
    const cJSON *fmt = cJSON_IsObject(conf) ? cJSON_GetObjectItemCaseSensitive(conf, "format") : NULL;
    if (!cJSON_IsString(fmt))
        return sd_error_set(err, SD_ERR_FORMAT, "%s: quantization config of '%s' has no \"format\" string",
                            sd_st_path(f), what);
    if (strcmp(fmt->valuestring, "float8_e4m3fn") == 0) *out = SD_F8_E4M3;
    else if (strcmp(fmt->valuestring, "float8_e5m2") == 0) *out = SD_F8_E5M2;
    else
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: layer '%s' is quantized as '%.64s'; sdflow reads ComfyUI's float8_e4m3fn and "
                            "float8_e5m2 scaled layers only",
                            sd_st_path(f), what, fmt->valuestring);
    return SD_OK;
}

/* The U8 JSON bytes of "<layer>.comfy_quant" parsed; NULL with err set. */
static cJSON *comfy_quant(sd_st_file *f, const char *key, sd_error *err) {
    const sd_st_entry *e = sd_st_find(f, key);
    if (e->dtype != SD_U8 || e->ndim != 1 || e->nbytes > 4096) {
        sd_error_set(err, SD_ERR_FORMAT, "%s: '%s' is not a U8 [n] JSON config (of at most 4096 bytes)",
                     sd_st_path(f), key);
        return NULL;
    }
    sd_tensor *t = sd_st_tensor(f, key, err);
    if (!t) return NULL;
    cJSON *j = cJSON_ParseWithLength(t->data, (size_t)e->nbytes);
    sd_tensor_unref(t);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        sd_error_set(err, SD_ERR_FORMAT, "%s: '%s' is not a JSON object", sd_st_path(f), key);
        return NULL;
    }
    return j;
}

/* The "_quantization_metadata" config, or NULL: *present 0 when the file
 * has none, else 1 (with err set when it does not parse). */
static cJSON *metadata_layers(const sd_st_file *f, cJSON **root, int *present, sd_error *err) {
    *root = NULL;
    const char *m = sd_st_metadata(f, QMETA);
    *present = m != NULL;
    if (!m) return NULL;
    *root = cJSON_Parse(m);
    const cJSON *layers = cJSON_IsObject(*root) ? cJSON_GetObjectItemCaseSensitive(*root, "layers") : NULL;
    if (!cJSON_IsObject(layers)) {
        sd_error_set(err, SD_ERR_FORMAT, "%s: metadata '%s' is not a JSON object with a \"layers\" object",
                     sd_st_path(f), QMETA);
        return NULL;
    }
    return (cJSON *)layers;
}

/* The legacy marker "<P>scaled_fp8" for a P that is `prefix` or one of its
 * shorter dotted prefixes ("text_encoders." covers every text encoder of a
 * single file, as load_checkpoint_guess_config converts under any
 * "*.scaled_fp8"), and "" only for a bare file: a single file's root marker
 * converts nothing in ComfyUI. */
static int legacy_marked(const sd_st_file *f, const char *prefix) {
    char k[512];
    size_t n = strlen(prefix);
    if (n + sizeof "scaled_fp8" > sizeof k) return 0;
    for (size_t cut = n + 1; cut-- > 0;) {
        if (cut ? prefix[cut - 1] != '.' : n != 0) continue;
        memcpy(k, prefix, cut);
        memcpy(k + cut, "scaled_fp8", sizeof "scaled_fp8");
        if (sd_st_find(f, k)) return 1;
    }
    return 0;
}

/* The one finite non-zero F32 value of tensor `key`. */
static sd_status read_scale(sd_st_file *f, const char *key, float *out, sd_error *err) {
    const sd_st_entry *e = sd_st_find(f, key);
    if (!e) return sd_error_set(err, SD_ERR_FORMAT, "%s: scaled fp8 layer without its scale '%s'", sd_st_path(f), key);
    int64_t n = 1;
    for (int i = 0; i < e->ndim; i++) n *= e->shape[i];
    if (n != 1 || !sd_dtype_is_float(e->dtype))
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: scale '%s' is %s with %lld values; sdflow reads one per-tensor scale",
                            sd_st_path(f), key, sd_dtype_name(e->dtype), (long long)n);
    sd_tensor *t = sd_st_tensor_f32(f, key, err);
    if (!t) return err ? err->code : SD_ERR_FORMAT;
    float s = ((const float *)t->data)[0];
    sd_tensor_unref(t);
    if (!isfinite(s) || s == 0.0f)
        return sd_error_set(err, SD_ERR_FORMAT, "%s: scale '%s' is %g (not a finite non-zero number)",
                            sd_st_path(f), key, (double)s);
    *out = s;
    return SD_OK;
}

sd_status sd_fp8_layer_of(sd_st_file *f, const char *prefix, const char *key, sd_fp8_layer *out,
                          sd_error *err) {
    memset(out, 0, sizeof *out);
    size_t n = strlen(key);
    static const char wsuf[] = ".weight";
    if (n < sizeof wsuf || strcmp(key + n - (sizeof wsuf - 1), wsuf) != 0) return SD_OK;
    char layer[512], k[600];
    size_t ln = n - (sizeof wsuf - 1);
    if (ln >= sizeof layer) return SD_OK;
    memcpy(layer, key, ln);
    layer[ln] = 0;

    /* The file-wide config first: with it ComfyUI ignores the legacy
     * marker; a layer it names overrides the layer's own comfy_quant. */
    cJSON *root;
    int has_meta;
    cJSON *layers = metadata_layers(f, &root, &has_meta, err);
    if (has_meta && !layers) {
        cJSON_Delete(root);
        return err ? err->code : SD_ERR_FORMAT;
    }
    sd_status rc = SD_OK;
    const cJSON *conf = layers ? cJSON_GetObjectItemCaseSensitive(layers, layer) : NULL;
    cJSON *own = NULL;
    const char *scale_key = ".weight_scale";
    int quant = conf != NULL;
    if (conf) {
        rc = format_of(conf, f, layer, &out->dtype, err);
    } else {
        snprintf(k, sizeof k, "%s.scale_weight", layer);
        if (!has_meta && sd_st_find(f, k) && legacy_marked(f, prefix)) {
            out->dtype = SD_F8_E4M3; /* convert_old_quants: always float8_e4m3fn */
            scale_key = ".scale_weight";
            quant = 1;
        } else {
            snprintf(k, sizeof k, "%s.comfy_quant", layer);
            if (sd_st_find(f, k)) {
                own = comfy_quant(f, k, err);
                rc = own ? format_of(own, f, layer, &out->dtype, err) : (err ? err->code : SD_ERR_FORMAT);
                quant = 1;
            }
        }
    }
    if (rc == SD_OK && quant) {
        snprintf(k, sizeof k, "%s%s", layer, scale_key);
        rc = read_scale(f, k, &out->scale, err);
        out->scaled = rc == SD_OK;
    }
    cJSON_Delete(own);
    cJSON_Delete(root);
    return rc;
}

sd_status sd_fp8_scaled_check(sd_st_file *f, sd_error *err) {
    cJSON *root;
    int has_meta;
    cJSON *layers = metadata_layers(f, &root, &has_meta, err);
    sd_status rc = has_meta && !layers ? (err ? err->code : SD_ERR_FORMAT) : SD_OK;
    sd_dtype dt;
    for (const cJSON *c = layers ? layers->child : NULL; !rc && c; c = c->next)
        rc = format_of(c, f, c->string ? c->string : "?", &dt, err);
    cJSON_Delete(root);
    static const char suf[] = ".comfy_quant";
    for (size_t i = 0; !rc && i < sd_st_count(f); i++) {
        const char *k = sd_st_at(f, i)->name;
        size_t n = strlen(k);
        if (n < sizeof suf || strcmp(k + n - (sizeof suf - 1), suf) != 0) continue;
        cJSON *j = comfy_quant(f, k, err);
        if (!j) return err ? err->code : SD_ERR_FORMAT;
        char layer[512];
        snprintf(layer, sizeof layer, "%.*s", (int)(n - (sizeof suf - 1)), k);
        rc = format_of(j, f, layer, &dt, err);
        cJSON_Delete(j);
    }
    return rc;
}
