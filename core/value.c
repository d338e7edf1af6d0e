#include "value.h"

#include <stdlib.h>
#include <string.h>

struct sd_value {
    int refcount;
    sd_value_kind kind;
    union {
        int64_t i;
        double f;
        int b;
        char *s;
        sd_tensor *t;
        struct { sd_value **items; char **keys; size_t n, cap; } c; /* list/dict */
        struct { const sd_handle_type *type; void *ptr; } h;
    } u;
};

static sd_value *mk(sd_value_kind k) {
    sd_value *v = calloc(1, sizeof *v);
    if (v) { v->refcount = 1; v->kind = k; }
    return v;
}

sd_value *sd_value_none(void) { return mk(SD_VAL_NONE); }
sd_value *sd_value_int(int64_t x) { sd_value *v = mk(SD_VAL_INT); if (v) v->u.i = x; return v; }
sd_value *sd_value_float(double x) { sd_value *v = mk(SD_VAL_FLOAT); if (v) v->u.f = x; return v; }
sd_value *sd_value_bool(int x) { sd_value *v = mk(SD_VAL_BOOL); if (v) v->u.b = x != 0; return v; }

sd_value *sd_value_string(const char *s) {
    sd_value *v = mk(SD_VAL_STRING);
    if (!v) return NULL;
    v->u.s = strdup(s ? s : "");
    if (!v->u.s) { free(v); return NULL; }
    return v;
}

sd_value *sd_value_tensor(sd_tensor *t) {
    if (!t) return NULL;
    sd_value *v = mk(SD_VAL_TENSOR);
    if (v) v->u.t = sd_tensor_ref(t);
    return v;
}

sd_value *sd_value_list(void) { return mk(SD_VAL_LIST); }
sd_value *sd_value_dict(void) { return mk(SD_VAL_DICT); }

sd_value *sd_value_handle(const sd_handle_type *type, void *ptr) {
    sd_value *v = mk(SD_VAL_HANDLE);
    if (!v) { if (type && type->free) type->free(ptr); return NULL; }
    v->u.h.type = type;
    v->u.h.ptr = ptr;
    return v;
}

sd_value *sd_value_ref(sd_value *v) {
    if (v) __atomic_add_fetch(&v->refcount, 1, __ATOMIC_RELAXED);
    return v;
}

void sd_value_unref(sd_value *v) {
    if (!v) return;
    if (__atomic_sub_fetch(&v->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    switch (v->kind) {
    case SD_VAL_STRING: free(v->u.s); break;
    case SD_VAL_TENSOR: sd_tensor_unref(v->u.t); break;
    case SD_VAL_LIST:
    case SD_VAL_DICT:
        for (size_t i = 0; i < v->u.c.n; i++) {
            sd_value_unref(v->u.c.items[i]);
            if (v->u.c.keys) free(v->u.c.keys[i]);
        }
        free(v->u.c.items);
        free(v->u.c.keys);
        break;
    case SD_VAL_HANDLE:
        if (v->u.h.type && v->u.h.type->free) v->u.h.type->free(v->u.h.ptr);
        break;
    default: break;
    }
    free(v);
}

sd_value_kind sd_value_kind_of(const sd_value *v) { return v ? v->kind : SD_VAL_NONE; }

const char *sd_value_kind_name(sd_value_kind k) {
    static const char *names[] = {"none", "int", "float", "bool", "string",
                                  "tensor", "list", "dict", "handle"};
    return (unsigned)k <= SD_VAL_HANDLE ? names[k] : "?";
}

int64_t sd_value_as_int(const sd_value *v) {
    if (!v) return 0;
    if (v->kind == SD_VAL_INT) return v->u.i;
    if (v->kind == SD_VAL_FLOAT) return (int64_t)v->u.f;
    if (v->kind == SD_VAL_BOOL) return v->u.b;
    return 0;
}

double sd_value_as_float(const sd_value *v) {
    if (!v) return 0;
    if (v->kind == SD_VAL_FLOAT) return v->u.f;
    if (v->kind == SD_VAL_INT) return (double)v->u.i;
    if (v->kind == SD_VAL_BOOL) return v->u.b;
    return 0;
}

int sd_value_as_bool(const sd_value *v) {
    if (!v) return 0;
    if (v->kind == SD_VAL_BOOL) return v->u.b;
    if (v->kind == SD_VAL_INT) return v->u.i != 0;
    if (v->kind == SD_VAL_FLOAT) return v->u.f != 0;
    return 0;
}

const char *sd_value_as_string(const sd_value *v) {
    return v && v->kind == SD_VAL_STRING ? v->u.s : NULL;
}

sd_tensor *sd_value_as_tensor(const sd_value *v) {
    return v && v->kind == SD_VAL_TENSOR ? v->u.t : NULL;
}

void *sd_value_as_handle(const sd_value *v, const sd_handle_type *type) {
    if (!v || v->kind != SD_VAL_HANDLE) return NULL;
    if (type && v->u.h.type != type) return NULL;
    return v->u.h.ptr;
}

const sd_handle_type *sd_value_handle_type(const sd_value *v) {
    return v && v->kind == SD_VAL_HANDLE ? v->u.h.type : NULL;
}

static int is_container(const sd_value *v, sd_value_kind k) { return v && v->kind == k; }

static int grow(sd_value *c, int with_keys) {
    if (c->u.c.n < c->u.c.cap) return 0;
    size_t cap = c->u.c.cap ? c->u.c.cap * 2 : 4;
    sd_value **items = realloc(c->u.c.items, cap * sizeof *items);
    if (!items) return -1;
    c->u.c.items = items;
    if (with_keys) {
        char **keys = realloc(c->u.c.keys, cap * sizeof *keys);
        if (!keys) return -1;
        c->u.c.keys = keys;
    }
    c->u.c.cap = cap;
    return 0;
}

size_t sd_value_list_len(const sd_value *v) { return is_container(v, SD_VAL_LIST) ? v->u.c.n : 0; }

sd_value *sd_value_list_get(const sd_value *v, size_t i) {
    return is_container(v, SD_VAL_LIST) && i < v->u.c.n ? v->u.c.items[i] : NULL;
}

int sd_value_list_append(sd_value *list, sd_value *item) {
    if (!is_container(list, SD_VAL_LIST) || !item || grow(list, 0)) { sd_value_unref(item); return -1; }
    list->u.c.items[list->u.c.n++] = item;
    return 0;
}

size_t sd_value_dict_len(const sd_value *v) { return is_container(v, SD_VAL_DICT) ? v->u.c.n : 0; }

const char *sd_value_dict_key(const sd_value *v, size_t i) {
    return is_container(v, SD_VAL_DICT) && i < v->u.c.n ? v->u.c.keys[i] : NULL;
}

sd_value *sd_value_dict_at(const sd_value *v, size_t i) {
    return is_container(v, SD_VAL_DICT) && i < v->u.c.n ? v->u.c.items[i] : NULL;
}

sd_value *sd_value_dict_get(const sd_value *v, const char *key) {
    if (!is_container(v, SD_VAL_DICT)) return NULL;
    for (size_t i = 0; i < v->u.c.n; i++)
        if (strcmp(v->u.c.keys[i], key) == 0) return v->u.c.items[i];
    return NULL;
}

int sd_value_dict_set(sd_value *d, const char *key, sd_value *item) {
    if (!is_container(d, SD_VAL_DICT) || !item) { sd_value_unref(item); return -1; }
    for (size_t i = 0; i < d->u.c.n; i++) {
        if (strcmp(d->u.c.keys[i], key) == 0) {
            sd_value_unref(d->u.c.items[i]);
            d->u.c.items[i] = item;
            return 0;
        }
    }
    char *k = strdup(key);
    if (!k || grow(d, 1)) { free(k); sd_value_unref(item); return -1; }
    d->u.c.keys[d->u.c.n] = k;
    d->u.c.items[d->u.c.n++] = item;
    return 0;
}

sd_value *sd_value_shallow_copy(const sd_value *v) {
    if (!v) return NULL;
    if (v->kind == SD_VAL_LIST) {
        sd_value *c = sd_value_list();
        for (size_t i = 0; c && i < v->u.c.n; i++)
            if (sd_value_list_append(c, sd_value_ref(v->u.c.items[i]))) { sd_value_unref(c); return NULL; }
        return c;
    }
    if (v->kind == SD_VAL_DICT) {
        sd_value *c = sd_value_dict();
        for (size_t i = 0; c && i < v->u.c.n; i++)
            if (sd_value_dict_set(c, v->u.c.keys[i], sd_value_ref(v->u.c.items[i]))) { sd_value_unref(c); return NULL; }
        return c;
    }
    return sd_value_ref((sd_value *)v);
}

sd_tensor *sd_value_dict_tensor(const sd_value *dict, const char *key) {
    return sd_value_as_tensor(sd_value_dict_get(dict, key));
}

int sd_value_is_data(const sd_value *v) {
    if (!v) return 1;
    if (v->kind == SD_VAL_HANDLE) return 0;
    if (v->kind == SD_VAL_LIST || v->kind == SD_VAL_DICT) {
        for (size_t i = 0; i < v->u.c.n; i++)
            if (!sd_value_is_data(v->u.c.items[i])) return 0;
    }
    return 1;
}
