/* hypernet.c - A1111 hypernetworks (hypernet.h): the file's object tree
 * read into MLPs on the backend, as ComfyUI's load_hypernetwork_patch
 * builds its torch.nn.Sequential modules, and their forward. */
#include "models/unet/hypernet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "formats/pickle.h"
#include "formats/torch_ckpt.h"

/* One Linear and what follows it in the Sequential: the activation (when
 * act), then a LayerNorm (when ln_w). */
typedef struct hn_layer {
    sd_bt *w, *b; /* [out, in], [out] */
    int act;
    sd_bt *ln_w, *ln_b; /* [out] each, or NULL */
} hn_layer;

typedef struct hn_mlp {
    int n;
    hn_layer *layers;
} hn_mlp;

typedef struct hn_width {
    int64_t dim;
    hn_mlp mlp[2]; /* applied to k, to v */
} hn_width;

struct sd_hypernet {
    int refcount;
    sd_hn_act act;
    int n;
    hn_width *w;
};

static const char *const act_names[] = {"linear", "relu",    "leakyrelu", "elu", "swish",
                                        "tanh",   "sigmoid", "softsign",  "mish"};

const char *sd_hn_act_name(sd_hn_act a) {
    return (unsigned)a < sizeof act_names / sizeof act_names[0] ? act_names[a] : "?";
}

static void mlp_free(hn_mlp *m) {
    for (int i = 0; i < m->n; i++) {
        hn_layer *l = &m->layers[i];
        sd_bt_free(l->w), sd_bt_free(l->b), sd_bt_free(l->ln_w), sd_bt_free(l->ln_b);
    }
    free(m->layers);
}

static void hn_free(sd_hypernet *h) {
    if (!h) return;
    for (int i = 0; i < h->n; i++) mlp_free(&h->w[i].mlp[0]), mlp_free(&h->w[i].mlp[1]);
    free(h->w);
    free(h);
}

sd_hypernet *sd_hypernet_ref(sd_hypernet *h) {
    if (h) __atomic_add_fetch(&h->refcount, 1, __ATOMIC_ACQ_REL);
    return h;
}

void sd_hypernet_unref(sd_hypernet *h) {
    if (h && __atomic_sub_fetch(&h->refcount, 1, __ATOMIC_ACQ_REL) == 0) hn_free(h);
}

int sd_hypernet_widths(const sd_hypernet *h) { return h ? h->n : 0; }
int64_t sd_hypernet_width_at(const sd_hypernet *h, int i) { return h && i >= 0 && i < h->n ? h->w[i].dim : 0; }
sd_hn_act sd_hypernet_activation(const sd_hypernet *h) { return h ? h->act : SD_HN_LINEAR; }

/* ---- reading ------------------------------------------------------------------------- */

typedef struct hn_read {
    sd_torch_tree *tree;
    sd_backend *be;
    const char *path;
    sd_error *err;
} hn_read;

/* The code of the error a failed read just set (err may be NULL). */
static sd_status failed(const hn_read *r) { return r->err && r->err->code ? r->err->code : SD_ERR_FORMAT; }

/* Python's bool(o) for the metadata flags; -1 for a tensor (ambiguous). */
static int truthy(const sd_pk_obj *o) {
    switch (o->kind) {
    case SD_PK_NONE: return 0;
    case SD_PK_BOOL: return o->u.b != 0;
    case SD_PK_INT: return o->u.i != 0;
    case SD_PK_FLOAT: return o->u.f != 0.0; /* NaN is true */
    case SD_PK_STR:
    case SD_PK_BYTES: return o->u.str.len != 0;
    case SD_PK_TUPLE:
    case SD_PK_LIST: return o->u.seq.n != 0;
    case SD_PK_DICT: return o->u.seq.n != 0;
    case SD_PK_TENSOR: return -1;
    default: return 1;
    }
}

static sd_status flag(hn_read *r, const sd_pk_obj *sd, const char *key, int *out) {
    const sd_pk_obj *v = sd_pickle_dict_get(sd, key);
    *out = v ? truthy(v) : 0;
    if (*out < 0)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: '%s' is a tensor, not a flag (not an A1111 hypernetwork)",
                            r->path, key);
    return SD_OK;
}

/* The dict entry of key `name` (a str) in state dict d, or NULL. */
static const sd_pk_obj *sd_get(const sd_pk_obj *d, const char *name) { return sd_pickle_dict_get(d, name); }

/* The tensor of the state dict under `key`, checked to have ndim dims
 * (dims[i] >= 0 must match); NULL with the error set. */
static const sd_pk_obj *checked(hn_read *r, const sd_pk_obj *d, const char *where, const char *key, int ndim,
                                const int64_t *dims) {
    const sd_pk_obj *o = sd_get(d, key);
    if (!o || o->kind != SD_PK_TENSOR) {
        sd_error_set(r->err, SD_ERR_FORMAT, "%s: %s: %s '%s' (the hypernetwork's layers are incomplete)", r->path,
                     where, o ? "no tensor under" : "no", key);
        return NULL;
    }
    int ok = o->u.tensor.ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = dims[i] < 0 || o->u.tensor.shape[i] == dims[i];
    if (!ok) {
        char want[96] = "", got[96] = "";
        int k = 0, g = 0;
        for (int i = 0; i < ndim; i++) {
            if (dims[i] >= 0) k += snprintf(want + k, sizeof want - (size_t)k, "%s%lld", i ? ", " : "", (long long)dims[i]);
            else k += snprintf(want + k, sizeof want - (size_t)k, "%s*", i ? ", " : "");
        }
        for (int i = 0; i < o->u.tensor.ndim && i < SD_PK_MAX_DIMS && g < (int)sizeof got - 24; i++)
            g += snprintf(got + g, sizeof got - (size_t)g, "%s%lld", i ? ", " : "", (long long)o->u.tensor.shape[i]);
        sd_error_set(r->err, SD_ERR_FORMAT, "%s: %s: '%s' is [%s], want [%s] (its widths do not chain)", r->path,
                     where, sd_torch_tree_path(r->tree, o), got, want);
        return NULL;
    }
    return o;
}

/* o (from checked) read and uploaded as F32 into *slot; nothing when
 * probing (r->be NULL). 0 with the error set when that failed. */
static int take(hn_read *r, const sd_pk_obj *o, const char *where, const char *key, sd_bt **slot) {
    if (!o) return 0;
    if (!r->be) return 1;
    sd_tensor *t = sd_torch_tree_tensor(r->tree, o, r->err);
    if (!t) return 0;
    sd_tensor *f = t->dtype == SD_F32 ? t : sd_tensor_to_dtype(t, SD_F32);
    if (f != t) sd_tensor_unref(t);
    if (!f) {
        sd_error_set(r->err, SD_ERR_UNSUPPORTED, "%s: %s: '%s' has a dtype that does not widen to float32", r->path,
                     where, key);
        return 0;
    }
    *slot = sd_bt_from_host(r->be, f, SD_F32);
    sd_tensor_unref(f);
    if (!*slot) sd_backend_take_error(r->be, r->err);
    return *slot != NULL;
}

/* The names of d's keys ending in ".weight", without it, in d's order. */
static sd_status weight_names(hn_read *r, const sd_pk_obj *d, const char *where, char ***names, int *n) {
    *names = NULL;
    *n = 0;
    size_t cnt = d->u.seq.n / 2;
    char **v = calloc(cnt ? cnt : 1, sizeof *v);
    if (!v) return sd_error_set(r->err, SD_ERR_NOMEM, "%s: out of memory", r->path);
    for (size_t i = 0; i + 1 < d->u.seq.n; i += 2) {
        const sd_pk_obj *k = d->u.seq.items[i];
        if (k->kind != SD_PK_STR || strlen(k->u.str.s) != k->u.str.len) {
            for (int j = 0; j < *n; j++) free(v[j]);
            free(v);
            return sd_error_set(r->err, SD_ERR_FORMAT, "%s: %s: a %s key in a state dict (not an A1111 hypernetwork)",
                                r->path, where, sd_pickle_kind_name(k->kind));
        }
        size_t l = k->u.str.len;
        if (l < 7 || strcmp(k->u.str.s + l - 7, ".weight") != 0) continue;
        if (!(v[*n] = strndup(k->u.str.s, l - 7))) {
            for (int j = 0; j < *n; j++) free(v[j]);
            free(v);
            return sd_error_set(r->err, SD_ERR_NOMEM, "%s: out of memory", r->path);
        }
        (*n)++;
    }
    *names = v;
    return SD_OK;
}

/* One MLP from its state dict d, for width dim (see hypernet.h). */
static sd_status read_mlp(hn_read *r, const sd_pk_obj *d, int64_t dim, int which, sd_hn_act act, int layer_norm,
                          int activate_output, hn_mlp *m) {
    char where[64];
    snprintf(where, sizeof where, "width %lld, %s MLP", (long long)dim, which ? "value" : "key");
    if (d->kind != SD_PK_DICT)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: %s is a %s, not a state dict", r->path, where,
                            sd_pickle_kind_name(d->kind));
    char **names;
    int n;
    sd_status rc = weight_names(r, d, where, &names, &n);
    if (rc) return rc;
    m->layers = calloc((size_t)n + 1, sizeof *m->layers);
    if (!m->layers) rc = sd_error_set(r->err, SD_ERR_NOMEM, "%s: out of memory", r->path);
    int64_t width = dim;
    char key[1100];
    for (int i = 0; !rc && i < n; i++) {
        const int last = i == n - 1;
        hn_layer *l = &m->layers[m->n++];
        snprintf(key, sizeof key, "%.1000s.weight", names[i]);
        const int64_t wd[2] = {-1, width};
        const sd_pk_obj *wo = checked(r, d, where, key, 2, wd);
        if (!take(r, wo, where, key, &l->w)) {
            rc = failed(r);
            break;
        }
        const int64_t out = wo->u.tensor.shape[0], bd[1] = {out};
        snprintf(key, sizeof key, "%.1000s.bias", names[i]);
        if (!take(r, checked(r, d, where, key, 1, bd), where, key, &l->b)) {
            rc = failed(r);
            break;
        }
        l->act = act != SD_HN_LINEAR && (!last || activate_output);
        if (layer_norm) {
            if (++i >= n) {
                rc = sd_error_set(r->err, SD_ERR_FORMAT,
                                  "%s: %s: is_layer_norm is set but '%s' has no LayerNorm after it", r->path, where,
                                  names[i - 1]);
                break;
            }
            snprintf(key, sizeof key, "%.1000s.weight", names[i]);
            if (!take(r, checked(r, d, where, key, 1, bd), where, key, &l->ln_w)) {
                rc = failed(r);
                break;
            }
            snprintf(key, sizeof key, "%.1000s.bias", names[i]);
            if (!take(r, checked(r, d, where, key, 1, bd), where, key, &l->ln_b)) {
                rc = failed(r);
                break;
            }
        }
        width = out;
    }
    if (!rc && width != dim)
        rc = sd_error_set(r->err, SD_ERR_FORMAT, "%s: %s ends at width %lld, not %lld (it must map the width to itself)",
                          r->path, where, (long long)width, (long long)dim);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* Python's int(s) accepts s: optional blanks and sign, digits with single
 * underscores between them. ComfyUI then looks up sd[int(s)], which a
 * string key is not: a KeyError there. */
static int python_int_text(const char *s, size_t len) {
    size_t i = 0, e = len;
    while (i < e && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) i++;
    while (e > i && (s[e - 1] == ' ' || (s[e - 1] >= '\t' && s[e - 1] <= '\r'))) e--;
    if (i < e && (s[i] == '+' || s[i] == '-')) i++;
    if (i == e) return 0;
    for (size_t j = i; j < e; j++) {
        if (s[j] >= '0' && s[j] <= '9') continue;
        if (s[j] == '_' && j > i && j + 1 < e && s[j + 1] >= '0' && s[j + 1] <= '9') continue;
        return 0;
    }
    return 1;
}

/* The width a key of the hypernetwork's dict stands for, as ComfyUI's
 * `int(d)` then `sd[dim]` reads it: 1 with *dim, 0 for a key it skips,
 * or an error where ComfyUI fails. */
static sd_status key_width(hn_read *r, const sd_pk_obj *k, int64_t *dim, int *is_width) {
    *is_width = 0;
    switch (k->kind) {
    case SD_PK_INT: *dim = k->u.i; *is_width = 1; return SD_OK;
    case SD_PK_BOOL: *dim = k->u.b; *is_width = 1; return SD_OK; /* int(True) == 1, a key equal to True */
    case SD_PK_FLOAT:
        if (!isfinite(k->u.f)) return SD_OK; /* int() raises, the bare except skips it */
        if (k->u.f != floor(k->u.f) || fabs(k->u.f) > 9.0e15)
            return sd_error_set(r->err, SD_ERR_FORMAT,
                                "%s: key %g is not a whole width (ComfyUI fails on it: KeyError)", r->path, k->u.f);
        *dim = (int64_t)k->u.f; /* 320.0 == 320: the same dict key in Python */
        *is_width = 1;
        return SD_OK;
    case SD_PK_STR:
        if (python_int_text(k->u.str.s, k->u.str.len))
            return sd_error_set(r->err, SD_ERR_FORMAT,
                                "%s: key '%s' is a width written as a string (ComfyUI fails on it: KeyError)", r->path,
                                k->u.str.s);
        return SD_OK;
    default: return SD_OK;
    }
}

/* comfy.utils.load_torch_file's unwrapping of what torch.load returned. */
static const sd_pk_obj *unwrap(const sd_pk_obj *root) {
    const sd_pk_obj *sd = sd_pickle_dict_get(root, "state_dict");
    if (sd) return sd;
    if (root->kind == SD_PK_DICT && root->u.seq.n == 2 && root->u.seq.items[1]->kind == SD_PK_DICT)
        return root->u.seq.items[1];
    return root;
}

static sd_status read_hypernet(hn_read *r, sd_hypernet *h) {
    const sd_pk_obj *sd = unwrap(sd_torch_tree_root(r->tree));
    if (sd->kind != SD_PK_DICT)
        return sd_error_set(r->err, SD_ERR_FORMAT, "%s: holds a %s, not a dict (not an A1111 hypernetwork)", r->path,
                            sd_pickle_kind_name(sd->kind));
    const sd_pk_obj *a = sd_pickle_dict_get(sd, "activation_func");
    h->act = SD_HN_LINEAR;
    if (a) {
        int found = 0;
        for (int i = 0; a->kind == SD_PK_STR && i < (int)(sizeof act_names / sizeof act_names[0]); i++)
            if (strlen(act_names[i]) == a->u.str.len && !memcmp(act_names[i], a->u.str.s, a->u.str.len)) {
                h->act = (sd_hn_act)i;
                found = 1;
            }
        if (!found)
            return sd_error_set(r->err, SD_ERR_UNSUPPORTED,
                                "%s: activation_func %s%s%s is not one ComfyUI supports (linear, relu, leakyrelu, "
                                "elu, swish, tanh, sigmoid, softsign, mish)",
                                r->path, a->kind == SD_PK_STR ? "'" : "",
                                a->kind == SD_PK_STR ? a->u.str.s : sd_pickle_kind_name(a->kind),
                                a->kind == SD_PK_STR ? "'" : "");
    }
    int layer_norm, activate_output;
    sd_status rc = flag(r, sd, "is_layer_norm", &layer_norm);
    if (!rc) rc = flag(r, sd, "activate_output", &activate_output);
    if (rc) return rc;
    size_t cnt = sd->u.seq.n / 2;
    h->w = calloc(cnt ? cnt : 1, sizeof *h->w);
    if (!h->w) return sd_error_set(r->err, SD_ERR_NOMEM, "%s: out of memory", r->path);
    for (size_t i = 0; i + 1 < sd->u.seq.n; i += 2) {
        int64_t dim = 0;
        int is_width;
        if ((rc = key_width(r, sd->u.seq.items[i], &dim, &is_width))) return rc;
        if (!is_width) continue;
        for (int j = 0; j < h->n; j++)
            if (h->w[j].dim == dim)
                return sd_error_set(r->err, SD_ERR_FORMAT, "%s: width %lld appears twice", r->path, (long long)dim);
        if (dim < 1)
            return sd_error_set(r->err, SD_ERR_FORMAT, "%s: width %lld is not a width", r->path, (long long)dim);
        const sd_pk_obj *pair = sd->u.seq.items[i + 1];
        if ((pair->kind != SD_PK_TUPLE && pair->kind != SD_PK_LIST) || pair->u.seq.n < 2)
            return sd_error_set(r->err, SD_ERR_FORMAT,
                                "%s: width %lld holds a %s, not a pair of state dicts (not an A1111 hypernetwork)",
                                r->path, (long long)dim, sd_pickle_kind_name(pair->kind));
        hn_width *w = &h->w[h->n++];
        w->dim = dim;
        for (int m = 0; m < 2; m++)
            if ((rc = read_mlp(r, pair->u.seq.items[m], dim, m, h->act, layer_norm, activate_output, &w->mlp[m])))
                return rc;
    }
    return SD_OK;
}

sd_status sd_hypernet_probe_file(const char *path, sd_error *err) {
    sd_hypernet *h = NULL;
    sd_status rc = sd_hypernet_load(NULL, path, &h, err);
    sd_hypernet_unref(h);
    return rc;
}

sd_status sd_hypernet_load(sd_backend *be, const char *path, sd_hypernet **out, sd_error *err) {
    *out = NULL;
    sd_hypernet *h = calloc(1, sizeof *h);
    if (!h) return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory", path);
    h->refcount = 1;
    size_t l = strlen(path);
    sd_status rc;
    if ((l >= 12 && !strcasecmp(path + l - 12, ".safetensors")) || (l >= 4 && !strcasecmp(path + l - 4, ".sft"))) {
        /* ComfyUI reads these as a dict of tensors by string keys: no
         * widths. Opened all the same, so a damaged file is an error. */
        sd_st_file *f = NULL;
        rc = sd_st_open(path, &f, err);
        sd_st_close(f);
    } else {
        hn_read r = {.be = be, .path = path, .err = err};
        rc = sd_torch_open_tree(path, &r.tree, err);
        if (!rc) rc = read_hypernet(&r, h);
        sd_torch_tree_free(r.tree);
    }
    if (rc) {
        hn_free(h);
        return rc;
    }
    *out = h;
    return SD_OK;
}

/* ---- forward --------------------------------------------------------------------------- */

static int step(sd_bt **h, sd_bt *next) {
    sd_bt_free(*h);
    *h = next;
    return next != NULL;
}

static sd_bt *activate(sd_hn_act a, sd_bt *x) {
    switch (a) {
    case SD_HN_RELU: return sd_op_relu(x);
    case SD_HN_LEAKYRELU: return sd_op_leaky_relu(x, 0.01f); /* torch.nn.LeakyReLU() */
    case SD_HN_ELU: return sd_op_elu(x, 1.0f);
    case SD_HN_SWISH: return sd_op_hardswish(x);
    case SD_HN_TANH: return sd_op_tanh(x);
    case SD_HN_SIGMOID: return sd_op_sigmoid(x);
    case SD_HN_SOFTSIGN: return sd_op_softsign(x);
    case SD_HN_MISH: return sd_op_mish(x);
    default: return sd_op_copy(x);
    }
}

int sd_hypernet_apply(const sd_hypernet *h, int which, sd_bt *x, double strength, sd_bt **out) {
    *out = NULL;
    const hn_width *w = NULL;
    for (int i = 0; h && i < h->n && !w; i++)
        if (h->w[i].dim == x->shape[x->ndim - 1]) w = &h->w[i];
    if (!w) return 1;
    const hn_mlp *m = &w->mlp[which ? 1 : 0];
    /* an empty Sequential is the identity: x + x * strength */
    sd_bt *y = m->n ? NULL : sd_op_copy(x);
    for (int i = 0; i < m->n; i++) {
        const hn_layer *l = &m->layers[i];
        if (!step(&y, sd_op_linear(i ? y : x, l->w, l->b))) return 0;
        if (l->act && !step(&y, activate(sd_hypernet_activation(h), y))) return 0;
        if (l->ln_w && !step(&y, sd_op_layer_norm(y, l->ln_w, l->ln_b, 1e-5f))) return 0;
    }
    /* torch: x + (mlp(x) * strength), the product rounded first */
    if (!y || !step(&y, sd_op_scale(y, (float)strength)) || !step(&y, sd_op_add(x, y))) return 0;
    *out = y;
    return 1;
}
