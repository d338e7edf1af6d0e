/* libFuzzer target: the GGUF reader (sd_gguf_parse, and the weights view
 * sd_gguf_open_memory). Whatever it accepts must be safe to use: every
 * key/value is read back through the typed accessors (strings of arrays
 * walked to the end), every tensor info checked against the input, and
 * every tensor of the view read in full and widened to F32 (the quantized
 * ones through core/quant.c). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_error err;
    sd_gguf *g = NULL;
    if (sd_gguf_parse(data, size, "fuzz.gguf", &g, &err) == SD_OK) {
        for (size_t i = 0; i < sd_gguf_kv_count(g); i++) {
            const sd_gguf_kv *kv = sd_gguf_kv_at(g, i);
            if (sd_gguf_find_kv(g, kv->key) != kv) abort();
            if (kv->value < data || kv->value + kv->nbytes > data + size) abort();
            int64_t iv;
            double fv;
            const char *s;
            size_t len;
            if (sd_gguf_kv_str(kv, &s, &len) && (const uint8_t *)s + len > data + size) abort();
            (void)sd_gguf_kv_int(kv, &iv);
            (void)sd_gguf_kv_float(kv, &fv);
            for (uint64_t k = 0; k < kv->count && k < 64; k++) {
                (void)sd_gguf_array_int(kv, k, &iv);
                (void)sd_gguf_array_float(kv, k, &fv);
            }
            uint64_t pos = 0, n = 0;
            while (sd_gguf_kv_str_next(kv, &pos, &s, &len)) {
                if ((const uint8_t *)s + len > data + size) abort();
                n++;
            }
            if (kv->type == SD_GGUF_ARRAY && kv->item_type == SD_GGUF_STRING && n != kv->count) abort();
        }
        for (size_t i = 0; i < sd_gguf_tensor_count(g); i++) {
            const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
            if (sd_gguf_find_tensor(g, t->name) != t) abort();
            if (t->offset > size || t->nbytes > size - t->offset) abort();
        }
        sd_gguf_free(g);
    } else if (g) {
        abort(); /* a failed parse must not hand out a file */
    }

    sd_st_file *f = NULL;
    if (sd_gguf_open_memory(data, size, "fuzz.gguf", &f, &err) != SD_OK) {
        if (f) abort();
        return 0;
    }
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        if (sd_st_find(f, e->name) != e) abort();
        if (e->offset + e->nbytes > size) abort();
        sd_tensor *t = sd_st_tensor(f, e->name, &err);
        if (!t || t->nbytes != e->nbytes) abort();
        if (t->nbytes && memcmp(t->data, data + e->offset, t->nbytes) != 0) abort();
        sd_tensor *c = sd_st_tensor_f32(f, e->name, &err);
        if (!c) abort();
        sd_tensor_unref(c);
        sd_tensor_unref(t);
    }
    for (size_t i = 0; i < sd_st_metadata_count(f); i++) {
        const char *k, *v;
        sd_st_metadata_at(f, i, &k, &v);
        if (!k || !v || sd_st_metadata(f, k) == NULL) abort();
    }
    sd_st_close(f);
    return 0;
}
