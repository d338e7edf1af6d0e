/* libFuzzer target: the safetensors header validator (sd_st_open_memory).
 * Whatever it accepts must be safe to use: every tensor is read in full and
 * converted to F32, and the metadata is walked. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_st_file *f = NULL;
    sd_error err;
    if (sd_st_open_memory(data, size, "fuzz.safetensors", &f, &err) != SD_OK) {
        if (f) abort(); /* a failed open must not hand out a file */
        return 0;
    }
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        if (sd_st_find(f, e->name) != e) abort();
        if (e->offset + e->nbytes > size) abort();
        sd_tensor *t = sd_st_tensor(f, e->name, &err);
        if (!t || t->nbytes != e->nbytes) abort();
        /* the tensor shows exactly the entry's bytes of the input */
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
