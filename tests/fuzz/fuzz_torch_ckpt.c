/* libFuzzer target: torch zip checkpoints (sd_torch_open_memory: libzip,
 * the restricted unpickler, storage and stride checks). Whatever it accepts
 * must be safe to read: every tensor is read in full (views materialised)
 * and converted to F32. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/torch_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_st_file *f = NULL;
    sd_error err;
    if (sd_torch_open_memory(data, size, "fuzz.ckpt", &f, &err) != SD_OK) {
        if (f) abort(); /* a failed open must not hand out a file */
        return 0;
    }
    /* Reading is bounded by the declared sizes, which may be large for a
     * small input (a deflated or broadcast storage): cap the total. */
    uint64_t budget = (uint64_t)64 << 20;
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        if (sd_st_find(f, e->name) != e) abort();
        if (e->nbytes > budget) continue;
        budget -= e->nbytes;
        sd_tensor *t = sd_st_tensor(f, e->name, &err);
        if (t && t->nbytes != e->nbytes) abort();
        sd_tensor_unref(t);
        if (t) {
            sd_tensor *c = sd_st_tensor_f32(f, e->name, &err);
            sd_tensor_unref(c);
        }
    }
    sd_st_close(f);
    return 0;
}
