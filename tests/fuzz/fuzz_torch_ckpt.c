/* libFuzzer target: torch zip checkpoints (sd_torch_open_memory: libzip,
 * the restricted unpickler, storage and stride checks). Whatever it accepts
 * must be safe to read: every tensor is read in full (views materialised)
 * and converted to F32. The same bytes through sd_torch_open_tree_memory
 * (the object tree: integer keys, tuples and lists of dicts, scalars, as
 * A1111 hypernetworks hold): every tensor reachable from the root must have
 * been recorded at open, and reads in full. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/pickle.h"
#include "formats/torch_ckpt.h"

/* Walks the tree as the reader does (depth and work bounded the same way:
 * an accepted file stays within them), reading each tensor once per visit
 * within the byte budget. */
static void walk(sd_torch_tree *t, const sd_pk_obj *o, int depth, size_t *visits, uint64_t *budget) {
    if (o->kind == SD_PK_TENSOR) {
        if (!strcmp(sd_torch_tree_path(t, o), "?")) abort(); /* reachable but not checked at open */
        uint64_t n = 1;
        for (int i = 0; i < o->u.tensor.ndim; i++) n *= (uint64_t)o->u.tensor.shape[i];
        if (n > *budget / 8) return;
        *budget -= n * 8;
        sd_error err;
        sd_tensor *x = sd_torch_tree_tensor(t, o, &err);
        sd_tensor_unref(x);
        return;
    }
    if ((o->kind != SD_PK_DICT && o->kind != SD_PK_TUPLE && o->kind != SD_PK_LIST) || depth > 16) return;
    const size_t first = o->kind == SD_PK_DICT, stride = 1 + first; /* dicts: values only, as the reader */
    for (size_t i = first; i < o->u.seq.n && ++*visits < ((size_t)1 << 20); i += stride)
        walk(t, o->u.seq.items[i], depth + 1, visits, budget);
}

static void tree_pass(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tree_pass(data, size);
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

static void tree_pass(const uint8_t *data, size_t size) {
    sd_torch_tree *t = NULL;
    sd_error err;
    if (sd_torch_open_tree_memory(data, size, "fuzz.pt", &t, &err) != SD_OK) {
        if (t) abort();
        return;
    }
    size_t visits = 0;
    uint64_t budget = (uint64_t)64 << 20;
    walk(t, sd_torch_tree_root(t), 0, &visits, &budget);
    sd_torch_tree_free(t);
}
