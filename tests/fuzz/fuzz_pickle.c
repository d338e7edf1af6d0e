/* libFuzzer target: the restricted unpickler (sd_pickle_load). Whatever it
 * accepts is walked (depth-bounded: containers may contain themselves), and
 * a failed load must hand out nothing. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/pickle.h"

/* Objects visited in one input: shared objects (memo) make the tree a DAG
 * whose expansion can be exponential, so the walk's total work is bounded,
 * not only its depth (the loaders bound theirs the same way). */
static size_t g_budget;

static size_t visit(const sd_pk_obj *o, int depth) {
    if (!o) abort();
    size_t n = 1;
    if (g_budget == 0) return n;
    g_budget--;
    switch (o->kind) {
    case SD_PK_STR:
    case SD_PK_BYTES:
        if (o->u.str.s[o->u.str.len] != 0) abort();
        break;
    case SD_PK_TUPLE:
    case SD_PK_LIST:
    case SD_PK_DICT:
        if (o->kind == SD_PK_DICT && o->u.seq.n % 2) abort();
        if (depth < 32)
            for (size_t i = 0; i < o->u.seq.n && i < 4096; i++) n += visit(o->u.seq.items[i], depth + 1);
        break;
    case SD_PK_TENSOR:
        if (o->u.tensor.storage->kind != SD_PK_STORAGE || o->u.tensor.ndim > SD_PK_MAX_DIMS) abort();
        if (strlen(o->u.tensor.storage->u.storage.key) == 0) abort();
        break;
    default: break;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_pickle *p = NULL;
    const sd_pk_obj *root = NULL;
    size_t used = 0;
    sd_error err;
    g_budget = (size_t)1 << 16;
    if (sd_pickle_load(data, size, "fuzz.pkl", &p, &root, &used, &err) != SD_OK) {
        if (p || root) abort();
        return 0;
    }
    if (!p || !root || used == 0 || used > size) abort();
    (void)visit(root, 0);
    (void)sd_pickle_dict_get(root, "state_dict");
    sd_pickle_free(p);
    return 0;
}
