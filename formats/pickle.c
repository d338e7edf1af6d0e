/* pickle.c - restricted unpickler (see pickle.h for what it accepts).
 *
 * The machine is CPython's Lib/pickle.py _Unpickler reduced to data: a value
 * stack, a stack of MARK positions and a memo array. Objects are malloc'd one
 * by one and listed in the sd_pickle so that one free releases everything,
 * including objects shared through the memo or containing themselves. Every
 * allocation is counted against SD_PK_MAX_BYTES.
 */
#include "pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sd_pickle {
    sd_pk_obj **objs; /* every object allocated, for freeing */
    size_t n_objs, cap_objs;
    size_t bytes;     /* allocated so far, checked against SD_PK_MAX_BYTES */
};

/* Machine state for one load. */
typedef struct pk_vm {
    sd_pickle *p;
    const uint8_t *data;
    size_t size, pos;
    size_t op_at; /* offset of the current opcode, for messages */
    uint8_t op;
    const char *what;
    sd_error *err;
    sd_pk_obj **stack;
    size_t sp, cap_stack;
    size_t *marks;
    size_t n_marks, cap_marks;
    sd_pk_obj **memo;
    size_t cap_memo;
    size_t n_memo; /* distinct indices stored: MEMOIZE's next index */
} pk_vm;

/* ---- objects and allocation ------------------------------------------------ */

static sd_status fail(pk_vm *vm, sd_status code, const char *fmt, const char *arg) {
    char msg[512];
    snprintf(msg, sizeof msg, fmt, arg);
    return sd_error_set(vm->err, code, "%s: %s (opcode 0x%02x at byte %zu)", vm->what, msg, vm->op,
                        vm->op_at);
}

static sd_status nomem(pk_vm *vm) {
    return sd_error_set(vm->err, SD_ERR_NOMEM, "%s: out of memory (or over the %zu MiB limit of the "
                        "weights-only unpickler) at byte %zu", vm->what, SD_PK_MAX_BYTES >> 20, vm->op_at);
}

/* Counts n bytes against the budget; 0 when over. */
static int charge(sd_pickle *p, size_t n) {
    if (n > SD_PK_MAX_BYTES - p->bytes) return 0;
    p->bytes += n;
    return 1;
}

static sd_pk_obj *obj_new(pk_vm *vm, sd_pk_kind kind) {
    sd_pickle *p = vm->p;
    if (p->n_objs == p->cap_objs) {
        size_t nc = p->cap_objs ? p->cap_objs * 2 : 256;
        if (!charge(p, (nc - p->cap_objs) * sizeof *p->objs)) return NULL;
        sd_pk_obj **no = realloc(p->objs, nc * sizeof *no);
        if (!no) return NULL;
        p->objs = no;
        p->cap_objs = nc;
    }
    if (!charge(p, sizeof(sd_pk_obj))) return NULL;
    sd_pk_obj *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->kind = kind;
    p->objs[p->n_objs++] = o;
    return o;
}

static void obj_release(sd_pk_obj *o) {
    switch (o->kind) {
    case SD_PK_STR:
    case SD_PK_BYTES: free(o->u.str.s); break;
    case SD_PK_TUPLE:
    case SD_PK_LIST:
    case SD_PK_DICT: free(o->u.seq.items); break;
    default: break;
    }
    free(o);
}

void sd_pickle_free(sd_pickle *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_objs; i++) obj_release(p->objs[i]);
    free(p->objs);
    free(p);
}

/* Appends to a TUPLE/LIST/DICT's item array. */
static sd_status seq_push(pk_vm *vm, sd_pk_obj *c, sd_pk_obj *item) {
    if (c->u.seq.n == c->u.seq.cap) {
        size_t nc = c->u.seq.cap ? c->u.seq.cap * 2 : 4;
        if (!charge(vm->p, (nc - c->u.seq.cap) * sizeof(sd_pk_obj *))) return nomem(vm);
        sd_pk_obj **ni = realloc(c->u.seq.items, nc * sizeof *ni);
        if (!ni) return nomem(vm);
        c->u.seq.items = ni;
        c->u.seq.cap = nc;
    }
    c->u.seq.items[c->u.seq.n++] = item;
    return SD_OK;
}

size_t sd_pickle_count(const sd_pickle *p) { return p ? p->n_objs : 0; }
const sd_pk_obj *sd_pickle_at(const sd_pickle *p, size_t i) { return p && i < p->n_objs ? p->objs[i] : NULL; }

const char *sd_pickle_kind_name(sd_pk_kind k) {
    static const char *const names[] = {"None", "bool", "int", "float", "str", "bytes", "tuple",
                                        "list", "dict", "global", "storage", "tensor"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

const sd_pk_obj *sd_pickle_dict_get(const sd_pk_obj *d, const char *key) {
    if (!d || d->kind != SD_PK_DICT) return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i + 1 < d->u.seq.n; i += 2) {
        const sd_pk_obj *k = d->u.seq.items[i];
        if (k->kind == SD_PK_STR && k->u.str.len == kl && memcmp(k->u.str.s, key, kl) == 0)
            return d->u.seq.items[i + 1];
    }
    return NULL;
}

/* ---- stack, marks, memo ------------------------------------------------------ */

static sd_status push(pk_vm *vm, sd_pk_obj *o) {
    if (!o) return nomem(vm);
    if (vm->sp == vm->cap_stack) {
        if (vm->cap_stack >= SD_PK_MAX_STACK)
            return fail(vm, SD_ERR_UNSUPPORTED, "stack deeper than %s entries", "1048576");
        size_t nc = vm->cap_stack ? vm->cap_stack * 2 : 64;
        sd_pk_obj **ns = realloc(vm->stack, nc * sizeof *ns);
        if (!ns) return nomem(vm);
        vm->stack = ns;
        vm->cap_stack = nc;
    }
    vm->stack[vm->sp++] = o;
    return SD_OK;
}

/* Base of the topmost MARK; fails when there is none or it lies above sp
 * (a POP under the mark). */
static sd_status pop_mark(pk_vm *vm, size_t *base) {
    if (vm->n_marks == 0) return fail(vm, SD_ERR_FORMAT, "%s without a MARK", "container opcode");
    *base = vm->marks[--vm->n_marks];
    if (*base > vm->sp) return fail(vm, SD_ERR_FORMAT, "%s", "MARK lies above the stack top");
    return SD_OK;
}

static sd_status need(pk_vm *vm, size_t n) {
    if (vm->sp < n || (vm->n_marks && vm->sp - n < vm->marks[vm->n_marks - 1]))
        return fail(vm, SD_ERR_FORMAT, "%s", "stack underflow");
    return SD_OK;
}

static sd_status memo_put(pk_vm *vm, uint64_t idx) {
    if (vm->sp == 0) return fail(vm, SD_ERR_FORMAT, "%s", "memo store from an empty stack");
    if (idx >= SD_PK_MAX_MEMO) return fail(vm, SD_ERR_UNSUPPORTED, "memo index over %s", "4194304");
    if (idx >= vm->cap_memo) {
        size_t nc = vm->cap_memo ? vm->cap_memo : 256;
        while (nc <= idx) nc *= 2;
        sd_pk_obj **nm = realloc(vm->memo, nc * sizeof *nm);
        if (!nm) return nomem(vm);
        memset(nm + vm->cap_memo, 0, (nc - vm->cap_memo) * sizeof *nm);
        vm->memo = nm;
        vm->cap_memo = nc;
    }
    if (!vm->memo[idx]) vm->n_memo++;
    vm->memo[idx] = vm->stack[vm->sp - 1];
    return SD_OK;
}

static sd_status memo_get(pk_vm *vm, uint64_t idx) {
    if (idx >= vm->cap_memo || !vm->memo[idx]) {
        char b[32];
        snprintf(b, sizeof b, "%llu", (unsigned long long)idx);
        return fail(vm, SD_ERR_FORMAT, "memo index %s was never stored", b);
    }
    return push(vm, vm->memo[idx]);
}

/* ---- reading the stream ------------------------------------------------------ */

static sd_status take(pk_vm *vm, size_t n, const uint8_t **out) {
    if (n > vm->size - vm->pos) return fail(vm, SD_ERR_FORMAT, "%s", "truncated: argument runs past the end");
    *out = vm->data + vm->pos;
    vm->pos += n;
    return SD_OK;
}

static sd_status read_uint(pk_vm *vm, int nbytes, uint64_t *v) {
    const uint8_t *b = NULL;
    sd_status rc = take(vm, (size_t)nbytes, &b);
    if (rc) return rc;
    *v = 0;
    for (int i = nbytes - 1; i >= 0; i--) *v = *v << 8 | b[i];
    return SD_OK;
}

/* A line ending in '\n' (GLOBAL's module and name), without the newline. */
static sd_status read_line(pk_vm *vm, const char **s, size_t *len) {
    const uint8_t *start = vm->data + vm->pos;
    const uint8_t *nl = memchr(start, '\n', vm->size - vm->pos);
    if (!nl) return fail(vm, SD_ERR_FORMAT, "%s", "truncated: line without a newline");
    *s = (const char *)start;
    *len = (size_t)(nl - start);
    vm->pos += *len + 1;
    return SD_OK;
}

static sd_status push_string(pk_vm *vm, sd_pk_kind kind, uint64_t n) {
    const uint8_t *b = NULL;
    if (n > vm->size - vm->pos) return fail(vm, SD_ERR_FORMAT, "%s", "truncated: string runs past the end");
    sd_status rc = take(vm, (size_t)n, &b);
    if (rc) return rc;
    sd_pk_obj *o = obj_new(vm, kind);
    if (!o || !charge(vm->p, (size_t)n + 1) || !(o->u.str.s = malloc((size_t)n + 1))) return nomem(vm);
    memcpy(o->u.str.s, b, (size_t)n);
    o->u.str.s[n] = 0;
    o->u.str.len = (size_t)n;
    return push(vm, o);
}

static sd_status push_int(pk_vm *vm, int64_t v) {
    sd_pk_obj *o = obj_new(vm, SD_PK_INT);
    if (o) o->u.i = v;
    return push(vm, o);
}

/* LONG1/LONG4: little-endian two's complement of n bytes; int64 only. */
static sd_status push_long(pk_vm *vm, uint64_t n) {
    const uint8_t *b = NULL;
    if (n > 8) return fail(vm, SD_ERR_UNSUPPORTED, "%s", "integer wider than 64 bits");
    sd_status rc = take(vm, (size_t)n, &b);
    if (rc) return rc;
    uint64_t u = 0;
    for (int i = (int)n - 1; i >= 0; i--) u = u << 8 | b[i];
    if (n > 0 && n < 8 && (b[n - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
    int64_t v;
    memcpy(&v, &u, sizeof v);
    return push_int(vm, v);
}

/* ---- globals -------------------------------------------------------------------- */

static const struct {
    const char *module, *name;
    sd_pk_global id;
    sd_dtype dtype;
} allowed[] = {
    {"collections", "OrderedDict", SD_PKG_ORDERED_DICT, SD_F32},
    {"torch._utils", "_rebuild_tensor", SD_PKG_REBUILD_TENSOR, SD_F32},
    {"torch._utils", "_rebuild_tensor_v2", SD_PKG_REBUILD_TENSOR_V2, SD_F32},
    {"torch._utils", "_rebuild_parameter", SD_PKG_REBUILD_PARAMETER, SD_F32},
    {"torch._utils", "_rebuild_parameter_with_state", SD_PKG_REBUILD_PARAMETER_STATE, SD_F32},
    {"torch._tensor", "_rebuild_from_type_v2", SD_PKG_REBUILD_FROM_TYPE_V2, SD_F32},
    {"torch", "Tensor", SD_PKG_TENSOR_TYPE, SD_F32},
    {"torch.nn.parameter", "Parameter", SD_PKG_PARAMETER_TYPE, SD_F32},
    {"torch", "FloatStorage", SD_PKG_STORAGE_TYPE, SD_F32},
    {"torch", "HalfStorage", SD_PKG_STORAGE_TYPE, SD_F16},
    {"torch", "BFloat16Storage", SD_PKG_STORAGE_TYPE, SD_BF16},
    {"torch", "DoubleStorage", SD_PKG_STORAGE_TYPE, SD_F64},
    {"torch", "LongStorage", SD_PKG_STORAGE_TYPE, SD_I64},
    {"torch", "IntStorage", SD_PKG_STORAGE_TYPE, SD_I32},
    {"torch", "ShortStorage", SD_PKG_STORAGE_TYPE, SD_I16},
    {"torch", "CharStorage", SD_PKG_STORAGE_TYPE, SD_I8},
    {"torch", "ByteStorage", SD_PKG_STORAGE_TYPE, SD_U8},
    {"torch", "BoolStorage", SD_PKG_STORAGE_TYPE, SD_BOOL},
};

static sd_status push_global(pk_vm *vm, const char *mod, size_t ml, const char *name, size_t nl) {
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        if (strlen(allowed[i].module) == ml && memcmp(allowed[i].module, mod, ml) == 0 &&
            strlen(allowed[i].name) == nl && memcmp(allowed[i].name, name, nl) == 0) {
            sd_pk_obj *o = obj_new(vm, SD_PK_GLOBAL);
            if (o) {
                o->u.global.id = allowed[i].id;
                o->u.global.dtype = allowed[i].dtype;
            }
            return push(vm, o);
        }
    }
    /* Name the global in the message, printable bytes only. */
    char q[256];
    size_t o = 0;
    for (size_t i = 0; i < ml + 1 + nl && o < sizeof q - 4; i++) {
        unsigned char c = i < ml ? (unsigned char)mod[i] : i == ml ? '.' : (unsigned char)name[i - ml - 1];
        q[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    q[o] = 0;
    return fail(vm, SD_ERR_UNSUPPORTED,
                "refusing global '%s': a weights-only checkpoint holds only tensors and plain "
                "containers, and this one would import and run Python code",
                q);
}

static const char *global_name(const sd_pk_obj *g) {
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        if (allowed[i].id == g->u.global.id &&
            (g->u.global.id != SD_PKG_STORAGE_TYPE || allowed[i].dtype == g->u.global.dtype))
            return allowed[i].name;
    return "?";
}

/* ---- REDUCE / BUILD / persistent ids --------------------------------------------- */

static int as_int(const sd_pk_obj *o, int64_t *v) {
    if (o->kind == SD_PK_INT) *v = o->u.i;
    else if (o->kind == SD_PK_BOOL) *v = o->u.b;
    else return 0;
    return 1;
}

/* A tuple of at most SD_PK_MAX_DIMS ints (torch.Size or a stride tuple). */
static int int_tuple(const sd_pk_obj *o, int64_t *out, int *n) {
    if (o->kind != SD_PK_TUPLE || o->u.seq.n > SD_PK_MAX_DIMS) return 0;
    for (size_t i = 0; i < o->u.seq.n; i++)
        if (!as_int(o->u.seq.items[i], &out[i])) return 0;
    *n = (int)o->u.seq.n;
    return 1;
}

/* _rebuild_tensor[_v2](storage, storage_offset, size, stride, ...). Shapes and
 * strides are checked against the storage later, by the container reader,
 * which knows how many bytes the storage really has. */
static sd_status rebuild_tensor(pk_vm *vm, const sd_pk_obj *args, sd_pk_obj **out) {
    sd_pk_obj **a = args->u.seq.items;
    if (a[0]->kind != SD_PK_STORAGE)
        return fail(vm, SD_ERR_FORMAT, "_rebuild_tensor: first argument is a %s, not a storage",
                    sd_pickle_kind_name(a[0]->kind));
    sd_pk_obj *t = obj_new(vm, SD_PK_TENSOR);
    if (!t) return nomem(vm);
    t->u.tensor.storage = a[0];
    int nd = 0, ns = 0;
    if (!as_int(a[1], &t->u.tensor.offset) || t->u.tensor.offset < 0)
        return fail(vm, SD_ERR_FORMAT, "%s", "_rebuild_tensor: storage offset is not a non-negative int");
    if (!int_tuple(a[2], t->u.tensor.shape, &nd))
        return fail(vm, SD_ERR_UNSUPPORTED, "%s", "_rebuild_tensor: size is not a tuple of at most 8 ints");
    if (!int_tuple(a[3], t->u.tensor.stride, &ns) || ns != nd)
        return fail(vm, SD_ERR_FORMAT, "%s", "_rebuild_tensor: stride is not an int tuple of the size's length");
    for (int i = 0; i < nd; i++)
        if (t->u.tensor.shape[i] < 0 || t->u.tensor.stride[i] < 0)
            return fail(vm, SD_ERR_FORMAT, "%s", "_rebuild_tensor: negative size or stride");
    t->u.tensor.ndim = nd;
    *out = t;
    return SD_OK;
}

static sd_status apply(pk_vm *vm, const sd_pk_obj *fn, const sd_pk_obj *args, sd_pk_obj **out);

static sd_status apply_global(pk_vm *vm, sd_pk_global id, const sd_pk_obj *args, sd_pk_obj **out) {
    size_t n = args->u.seq.n;
    sd_pk_obj **a = args->u.seq.items;
    switch (id) {
    case SD_PKG_ORDERED_DICT:
        if (n != 0) return fail(vm, SD_ERR_UNSUPPORTED, "%s", "OrderedDict called with arguments");
        *out = obj_new(vm, SD_PK_DICT);
        return *out ? SD_OK : nomem(vm);
    case SD_PKG_REBUILD_TENSOR:
        if (n != 4) return fail(vm, SD_ERR_FORMAT, "%s", "_rebuild_tensor takes 4 arguments");
        return rebuild_tensor(vm, args, out);
    case SD_PKG_REBUILD_TENSOR_V2:
        if (n != 6 && n != 7) return fail(vm, SD_ERR_FORMAT, "%s", "_rebuild_tensor_v2 takes 6 or 7 arguments");
        return rebuild_tensor(vm, args, out);
    case SD_PKG_REBUILD_PARAMETER:
    case SD_PKG_REBUILD_PARAMETER_STATE:
        if (n != (id == SD_PKG_REBUILD_PARAMETER ? 3u : 4u) || a[0]->kind != SD_PK_TENSOR)
            return fail(vm, SD_ERR_FORMAT, "%s", "_rebuild_parameter: expected (tensor, requires_grad, hooks[, state])");
        *out = a[0];
        return SD_OK;
    case SD_PKG_REBUILD_FROM_TYPE_V2:
        /* (func, type, args, state): only tensor and Parameter types, only
         * the tensor rebuild functions as func. */
        if (n != 4 || a[0]->kind != SD_PK_GLOBAL || a[1]->kind != SD_PK_GLOBAL || a[2]->kind != SD_PK_TUPLE ||
            (a[1]->u.global.id != SD_PKG_TENSOR_TYPE && a[1]->u.global.id != SD_PKG_PARAMETER_TYPE) ||
            (a[0]->u.global.id != SD_PKG_REBUILD_TENSOR_V2 && a[0]->u.global.id != SD_PKG_REBUILD_TENSOR))
            return fail(vm, SD_ERR_UNSUPPORTED, "%s",
                        "_rebuild_from_type_v2 other than a plain tensor or Parameter rebuild");
        return apply(vm, a[0], a[2], out);
    default: /* the types, which apply() refuses before getting here */
        return fail(vm, SD_ERR_INTERNAL, "%s", "unexpected global in REDUCE");
    }
}

static sd_status apply(pk_vm *vm, const sd_pk_obj *fn, const sd_pk_obj *args, sd_pk_obj **out) {
    if (fn->kind != SD_PK_GLOBAL)
        return fail(vm, SD_ERR_UNSUPPORTED, "REDUCE of a %s (only the allowed torch functions may be called)",
                    sd_pickle_kind_name(fn->kind));
    if (args->kind != SD_PK_TUPLE)
        return fail(vm, SD_ERR_FORMAT, "REDUCE arguments are a %s, not a tuple", sd_pickle_kind_name(args->kind));
    sd_pk_global id = fn->u.global.id;
    if (id == SD_PKG_TENSOR_TYPE || id == SD_PKG_PARAMETER_TYPE || id == SD_PKG_STORAGE_TYPE)
        return fail(vm, SD_ERR_UNSUPPORTED, "refusing to call '%s' (a type, not a tensor rebuild function)",
                    global_name(fn));
    return apply_global(vm, id, args, out);
}

/* BINPERSID: ('storage', <Storage type>, key, location, numel), and in the
 * legacy format a sixth element, view_metadata, which must be None. */
static sd_status persistent(pk_vm *vm, const sd_pk_obj *pid, sd_pk_obj **out) {
    if (pid->kind != SD_PK_TUPLE || pid->u.seq.n < 5)
        return fail(vm, SD_ERR_UNSUPPORTED, "persistent id is a %s, not a ('storage', ...) tuple",
                    sd_pickle_kind_name(pid->kind));
    sd_pk_obj **a = pid->u.seq.items;
    if (a[0]->kind != SD_PK_STR || strcmp(a[0]->u.str.s, "storage") != 0)
        return fail(vm, SD_ERR_UNSUPPORTED, "%s", "persistent id is not a 'storage' record");
    if (pid->u.seq.n > 6 || (pid->u.seq.n == 6 && a[5]->kind != SD_PK_NONE))
        return fail(vm, SD_ERR_UNSUPPORTED, "%s", "storage record with view metadata (a storage view)");
    if (a[1]->kind != SD_PK_GLOBAL || a[1]->u.global.id != SD_PKG_STORAGE_TYPE)
        return fail(vm, SD_ERR_FORMAT, "%s", "storage record without a torch.*Storage type");
    if (a[2]->kind != SD_PK_STR || a[2]->u.str.len == 0 || strlen(a[2]->u.str.s) != a[2]->u.str.len)
        return fail(vm, SD_ERR_FORMAT, "%s", "storage key is not a non-empty string");
    int64_t numel;
    if (!as_int(a[4], &numel) || numel < 0)
        return fail(vm, SD_ERR_FORMAT, "%s", "storage size is not a non-negative int");
    sd_pk_obj *s = obj_new(vm, SD_PK_STORAGE);
    if (!s) return nomem(vm);
    s->u.storage.dtype = a[1]->u.global.dtype;
    s->u.storage.key = a[2]->u.str.s;
    s->u.storage.numel = numel;
    *out = s;
    return SD_OK;
}

/* ---- the machine ------------------------------------------------------------------ */

/* Builds a tuple from the top n stack entries (or from base up). */
static sd_status make_tuple(pk_vm *vm, size_t base) {
    sd_pk_obj *t = obj_new(vm, SD_PK_TUPLE);
    if (!t) return nomem(vm);
    for (size_t i = base; i < vm->sp; i++)
        if (seq_push(vm, t, vm->stack[i])) return SD_ERR_NOMEM;
    vm->sp = base;
    return push(vm, t);
}

static sd_status set_items(pk_vm *vm, size_t base) {
    if ((vm->sp - base) % 2) return fail(vm, SD_ERR_FORMAT, "%s", "odd number of items for SETITEMS");
    if (base == 0) return fail(vm, SD_ERR_FORMAT, "%s", "SETITEMS without a dict");
    sd_pk_obj *d = vm->stack[base - 1];
    if (d->kind != SD_PK_DICT)
        return fail(vm, SD_ERR_FORMAT, "SETITEM(S) on a %s", sd_pickle_kind_name(d->kind));
    for (size_t i = base; i < vm->sp; i++)
        if (seq_push(vm, d, vm->stack[i])) return SD_ERR_NOMEM;
    vm->sp = base;
    return SD_OK;
}

static sd_status append_items(pk_vm *vm, size_t base) {
    if (base == 0) return fail(vm, SD_ERR_FORMAT, "%s", "APPEND without a list");
    sd_pk_obj *l = vm->stack[base - 1];
    if (l->kind != SD_PK_LIST) return fail(vm, SD_ERR_FORMAT, "APPEND(S) on a %s", sd_pickle_kind_name(l->kind));
    for (size_t i = base; i < vm->sp; i++)
        if (seq_push(vm, l, vm->stack[i])) return SD_ERR_NOMEM;
    vm->sp = base;
    return SD_OK;
}

static sd_status step(pk_vm *vm, int *stop) {
    sd_status rc;
    uint64_t u;
    const uint8_t *b = NULL;
    size_t base;
    vm->op_at = vm->pos;
    vm->op = vm->data[vm->pos++];
    switch (vm->op) {
    case 0x80: /* PROTO */
        if ((rc = read_uint(vm, 1, &u))) return rc;
        if (u < 2 || u > 5) return fail(vm, SD_ERR_UNSUPPORTED, "%s", "pickle protocol outside 2..5");
        return SD_OK;
    case 0x95: /* FRAME: a length hint only */
        return take(vm, 8, &b);
    case '.': /* STOP */
        if (vm->sp != 1 || vm->n_marks) return fail(vm, SD_ERR_FORMAT, "%s", "STOP with a stack other than one object");
        *stop = 1;
        return SD_OK;
    case '(': /* MARK */
        if (vm->n_marks == vm->cap_marks) {
            if (vm->cap_marks >= SD_PK_MAX_MARKS)
                return fail(vm, SD_ERR_UNSUPPORTED, "%s", "more than 65536 nested MARKs");
            size_t nc = vm->cap_marks ? vm->cap_marks * 2 : 32;
            size_t *nm = realloc(vm->marks, nc * sizeof *nm);
            if (!nm) return nomem(vm);
            vm->marks = nm;
            vm->cap_marks = nc;
        }
        vm->marks[vm->n_marks++] = vm->sp;
        return SD_OK;
    case '0': /* POP */
        if ((rc = need(vm, 1))) return rc;
        vm->sp--;
        return SD_OK;
    case '1': /* POP_MARK */
        if ((rc = pop_mark(vm, &base))) return rc;
        vm->sp = base;
        return SD_OK;
    case '2': /* DUP */
        if ((rc = need(vm, 1))) return rc;
        return push(vm, vm->stack[vm->sp - 1]);
    case 'N': return push(vm, obj_new(vm, SD_PK_NONE));
    case 0x88: /* NEWTRUE */
    case 0x89: { /* NEWFALSE */
        sd_pk_obj *o = obj_new(vm, SD_PK_BOOL);
        if (o) o->u.b = vm->op == 0x88;
        return push(vm, o);
    }
    case 'K': /* BININT1 */
        if ((rc = read_uint(vm, 1, &u))) return rc;
        return push_int(vm, (int64_t)u);
    case 'M': /* BININT2 */
        if ((rc = read_uint(vm, 2, &u))) return rc;
        return push_int(vm, (int64_t)u);
    case 'J': /* BININT: signed 32-bit */
        if ((rc = read_uint(vm, 4, &u))) return rc;
        return push_int(vm, (int64_t)(int32_t)(uint32_t)u);
    case 0x8a: /* LONG1 */
        if ((rc = read_uint(vm, 1, &u))) return rc;
        return push_long(vm, u);
    case 0x8b: /* LONG4 */
        if ((rc = read_uint(vm, 4, &u))) return rc;
        return push_long(vm, u);
    case 'G': { /* BINFLOAT: big-endian double */
        if ((rc = take(vm, 8, &b))) return rc;
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++) bits = bits << 8 | b[i];
        sd_pk_obj *o = obj_new(vm, SD_PK_FLOAT);
        if (o) memcpy(&o->u.f, &bits, sizeof o->u.f);
        return push(vm, o);
    }
    case 'X': /* BINUNICODE */
    case 'T': /* BINSTRING (a protocol-2 str of Python 2) */
        if ((rc = read_uint(vm, 4, &u))) return rc;
        return push_string(vm, SD_PK_STR, u);
    case 0x8c: /* SHORT_BINUNICODE */
    case 'U':  /* SHORT_BINSTRING */
        if ((rc = read_uint(vm, 1, &u))) return rc;
        return push_string(vm, SD_PK_STR, u);
    case 0x8d: /* BINUNICODE8 */
        if ((rc = read_uint(vm, 8, &u))) return rc;
        return push_string(vm, SD_PK_STR, u);
    case 'C': /* SHORT_BINBYTES */
        if ((rc = read_uint(vm, 1, &u))) return rc;
        return push_string(vm, SD_PK_BYTES, u);
    case 'B': /* BINBYTES */
        if ((rc = read_uint(vm, 4, &u))) return rc;
        return push_string(vm, SD_PK_BYTES, u);
    case 0x8e: /* BINBYTES8 */
        if ((rc = read_uint(vm, 8, &u))) return rc;
        return push_string(vm, SD_PK_BYTES, u);
    case ')': return push(vm, obj_new(vm, SD_PK_TUPLE));
    case ']': return push(vm, obj_new(vm, SD_PK_LIST));
    case '}': return push(vm, obj_new(vm, SD_PK_DICT));
    case 't': /* TUPLE */
        if ((rc = pop_mark(vm, &base))) return rc;
        return make_tuple(vm, base);
    case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
        size_t n = (size_t)(vm->op - 0x84);
        if ((rc = need(vm, n))) return rc;
        return make_tuple(vm, vm->sp - n);
    }
    case 'l': /* LIST */
        if ((rc = pop_mark(vm, &base))) return rc;
        if ((rc = make_tuple(vm, base))) return rc;
        vm->stack[vm->sp - 1]->kind = SD_PK_LIST;
        return SD_OK;
    case 'd': /* DICT */
        if ((rc = pop_mark(vm, &base))) return rc;
        if ((vm->sp - base) % 2) return fail(vm, SD_ERR_FORMAT, "%s", "odd number of items for DICT");
        if ((rc = make_tuple(vm, base))) return rc;
        vm->stack[vm->sp - 1]->kind = SD_PK_DICT;
        return SD_OK;
    case 's': /* SETITEM */
        if ((rc = need(vm, 3))) return rc;
        return set_items(vm, vm->sp - 2);
    case 'u': /* SETITEMS */
        if ((rc = pop_mark(vm, &base))) return rc;
        return set_items(vm, base);
    case 'a': /* APPEND */
        if ((rc = need(vm, 2))) return rc;
        return append_items(vm, vm->sp - 1);
    case 'e': /* APPENDS */
        if ((rc = pop_mark(vm, &base))) return rc;
        return append_items(vm, base);
    case 'q': /* BINPUT */
        if ((rc = read_uint(vm, 1, &u))) return rc;
        return memo_put(vm, u);
    case 'r': /* LONG_BINPUT */
        if ((rc = read_uint(vm, 4, &u))) return rc;
        return memo_put(vm, u);
    case 0x94: /* MEMOIZE: next free index, which pickle.py takes as len(memo) */
        return memo_put(vm, (uint64_t)vm->n_memo);
    case 'h': /* BINGET */
        if ((rc = read_uint(vm, 1, &u))) return rc;
        return memo_get(vm, u);
    case 'j': /* LONG_BINGET */
        if ((rc = read_uint(vm, 4, &u))) return rc;
        return memo_get(vm, u);
    case 'c': { /* GLOBAL "module\nname\n" */
        const char *m, *n;
        size_t ml, nl;
        if ((rc = read_line(vm, &m, &ml)) || (rc = read_line(vm, &n, &nl))) return rc;
        return push_global(vm, m, ml, n, nl);
    }
    case 0x93: { /* STACK_GLOBAL */
        if ((rc = need(vm, 2))) return rc;
        sd_pk_obj *m = vm->stack[vm->sp - 2], *n = vm->stack[vm->sp - 1];
        if (m->kind != SD_PK_STR || n->kind != SD_PK_STR)
            return fail(vm, SD_ERR_FORMAT, "%s", "STACK_GLOBAL needs two strings");
        vm->sp -= 2;
        return push_global(vm, m->u.str.s, m->u.str.len, n->u.str.s, n->u.str.len);
    }
    case 'R': { /* REDUCE */
        if ((rc = need(vm, 2))) return rc;
        sd_pk_obj *res = NULL;
        if ((rc = apply(vm, vm->stack[vm->sp - 2], vm->stack[vm->sp - 1], &res))) return rc;
        vm->sp -= 2;
        return push(vm, res);
    }
    case 'b': { /* BUILD: obj.__setstate__(state); state kept nowhere */
        if ((rc = need(vm, 2))) return rc;
        sd_pk_obj *o = vm->stack[vm->sp - 2];
        if (o->kind != SD_PK_DICT && o->kind != SD_PK_TENSOR)
            return fail(vm, SD_ERR_UNSUPPORTED, "refusing BUILD (setstate) on a %s", sd_pickle_kind_name(o->kind));
        vm->sp--;
        return SD_OK;
    }
    case 'Q': { /* BINPERSID */
        if ((rc = need(vm, 1))) return rc;
        sd_pk_obj *s = NULL;
        if ((rc = persistent(vm, vm->stack[vm->sp - 1], &s))) return rc;
        vm->stack[vm->sp - 1] = s;
        return SD_OK;
    }
    case 'i': return fail(vm, SD_ERR_UNSUPPORTED, "%s", "refusing INST (instantiates a class)");
    case 'o': return fail(vm, SD_ERR_UNSUPPORTED, "%s", "refusing OBJ (instantiates a class)");
    case 0x81: return fail(vm, SD_ERR_UNSUPPORTED, "%s", "refusing NEWOBJ (instantiates a class)");
    case 0x92: return fail(vm, SD_ERR_UNSUPPORTED, "%s", "refusing NEWOBJ_EX (instantiates a class)");
    case 0x82: case 0x83: case 0x84:
        return fail(vm, SD_ERR_UNSUPPORTED, "%s", "refusing EXT (copyreg extension registry)");
    case 0x8f: case 0x90: case 0x91:
        return fail(vm, SD_ERR_UNSUPPORTED, "%s", "sets are not part of a weights file");
    case 0x96: case 0x97: case 0x98:
        return fail(vm, SD_ERR_UNSUPPORTED, "%s", "out-of-band buffers (protocol 5) are not supported");
    case 'P': case 'I': case 'L': case 'F': case 'S': case 'V': case 'g': case 'p':
        return fail(vm, SD_ERR_UNSUPPORTED, "%s", "protocol-0 text opcode (torch writes protocol 2)");
    default: {
        char h[8];
        snprintf(h, sizeof h, "0x%02x", vm->op);
        return fail(vm, SD_ERR_FORMAT, "unknown opcode %s", h);
    }
    }
}

sd_status sd_pickle_load(const void *data, size_t size, const char *what, sd_pickle **out,
                         const sd_pk_obj **root, size_t *used, sd_error *err) {
    *out = NULL;
    *root = NULL;
    pk_vm vm = {.data = data, .size = size, .what = what ? what : "pickle", .err = err};
    vm.p = calloc(1, sizeof *vm.p);
    if (!vm.p) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", vm.what);
    sd_status rc = SD_OK;
    int stop = 0;
    while (!stop) {
        if (vm.pos >= vm.size) {
            vm.op_at = vm.pos;
            rc = sd_error_set(err, SD_ERR_FORMAT, "%s: truncated: no STOP opcode in %zu bytes", vm.what, vm.size);
            break;
        }
        if ((rc = step(&vm, &stop))) break;
    }
    if (rc == SD_OK) {
        *root = vm.stack[0];
        *out = vm.p;
        if (used) *used = vm.pos;
    } else {
        sd_pickle_free(vm.p);
    }
    free(vm.stack);
    free(vm.marks);
    free(vm.memo);
    return rc;
}
