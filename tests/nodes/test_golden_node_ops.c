/* test_golden_node_ops.c - the mask, image, latent, primitive and string
 * nodes against ComfyUI's own nodes on the same inputs.
 *
 * Data: tests/data/node_ops (gen_node_ops_ref.py ran ComfyUI's node classes;
 * manifest.json lists the cases, node_ops_ref.safetensors holds their input
 * and output tensors). Every case of the manifest runs: the node named by
 * "node", inputs built from the manifest (tensors from the file, LATENT
 * dicts, literals, lists, or another node's output run first), and each
 * output compared with ComfyUI's: tensors under the case's atol/rtol (0 =
 * bit for bit), a LATENT's keys, parts and batch_index, literal values
 * exactly; a case where ComfyUI raised must fail here too, with an error
 * naming the node's input or the node. Cases, shapes and settings all come
 * from the manifest. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/node.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_st_file *ref;
static nt_env env;
static const char *case_id;

static sd_value *build(const cJSON *spec, const char *type);

/* Runs node `name` on the manifest's input specs; fills out[] (up to 8) and
 * *ui (the node's "ui" result, when ui is not NULL). */
static sd_status run_node(const char *name, const cJSON *inputs, sd_value **out, sd_value **ui, sd_error *err) {
    const sd_node_def *def = sd_registry_find(name);
    if (!def) return sd_error_set(err, SD_ERR_NOT_FOUND, "node %s is not registered", name);
    sd_value *in[32] = {0};
    int n_in = sd_node_input_count(def);
    sd_status rc = SD_OK;
    const cJSON *it;
    cJSON_ArrayForEach(it, inputs) {
        int k = sd_node_input_index(def, it->string);
        if (k < 0) { rc = sd_error_set(err, SD_ERR_INVALID, "%s has no input %s", name, it->string); break; }
        in[k] = build(it, def->inputs[k].type);
        if (!in[k]) { rc = sd_error_set(err, SD_ERR_INVALID, "%s: input %s could not be built", name, it->string); break; }
    }
    sd_node_ctx ctx = nt_ctx(&env, name);
    for (int k = 0; k < 8; k++) out[k] = NULL;
    if (!rc) {
        /* literal inputs left out take their defaults, as the executor does */
        for (int k = 0; k < n_in; k++) {
            const sd_input_def *d = &def->inputs[k];
            if (in[k] || d->optional || !sd_type_is_literal(d->type)) continue;
            if (!strcmp(d->type, SD_T_INT)) in[k] = sd_value_int((int64_t)d->def);
            else if (!strcmp(d->type, SD_T_FLOAT)) in[k] = sd_value_float(d->def);
            else if (!strcmp(d->type, SD_T_BOOLEAN)) in[k] = sd_value_bool(d->def != 0);
            else in[k] = sd_value_string(d->def_str ? d->def_str : (d->options ? d->options[0] : ""));
        }
        sd_error_clear(err);
        rc = def->run(&ctx, in, out, err);
        if (rc) sd_error_at(err, "7", name, NULL);
    }
    if (ui) *ui = ctx.ui;
    else sd_value_unref(ctx.ui);
    for (int k = 0; k < n_in; k++) sd_value_unref(in[k]);
    return rc;
}

/* A stored tensor as F32; u8: a picture stored as its 8-bit values k, read
 * back as k / 255 in float32. */
static sd_tensor *ref_f32(const char *name, int u8) {
    sd_error err;
    sd_tensor *t = sd_st_tensor_f32(ref, name, &err);
    if (t && u8) {
        sd_tensor *c = sd_tensor_clone(t);
        sd_tensor_unref(t);
        t = c;
        for (int64_t i = 0, n = t ? sd_tensor_numel(t) : 0; i < n; i++) sd_tensor_f32(t)[i] = sd_tensor_f32(t)[i] / 255.0f;
    }
    return t;
}

static sd_value *tensor_value(const char *name, int u8) {
    sd_tensor *t = ref_f32(name, u8);
    CHECK_MSG(t != NULL, "%s: no tensor %s in the reference file", case_id, name);
    if (!t) return NULL;
    sd_value *v = sd_value_tensor(t);
    sd_tensor_unref(t);
    return v;
}

static sd_value *latent_value(const cJSON *l) {
    sd_value *d = sd_value_dict();
    const cJSON *s = cJSON_GetObjectItem(l, "samples"), *m = cJSON_GetObjectItem(l, "noise_mask");
    const cJSON *bi = cJSON_GetObjectItem(l, "batch_index");
    if (s) sd_value_dict_set(d, "samples", tensor_value(s->valuestring, 0));
    if (m) sd_value_dict_set(d, "noise_mask", tensor_value(m->valuestring, 0));
    if (bi) {
        sd_value *list = sd_value_list();
        const cJSON *x;
        cJSON_ArrayForEach(x, bi) sd_value_list_append(list, sd_value_int((int64_t)x->valuedouble));
        sd_value_dict_set(d, "batch_index", list);
    }
    return d;
}

/* An INT literal: a JSON number, or decimal text for one beyond 2^53. */
static int64_t int_of(const cJSON *v) {
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        return s[0] == '-' ? (int64_t)strtoll(s, NULL, 10) : (int64_t)strtoull(s, NULL, 10);
    }
    return (int64_t)v->valuedouble;
}

/* A typed tree the generator writes for lists and dicts of literals:
 * {"t": "list", "v": [...]}, {"t": "dict", "v": {...}}, {"t": kind, "v": x}. */
static sd_value *typed(const cJSON *o) {
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(o, "t"));
    const cJSON *v = cJSON_GetObjectItem(o, "v"), *it;
    if (!t) return NULL;
    if (!strcmp(t, "list") || !strcmp(t, "dict")) {
        sd_value *c = !strcmp(t, "list") ? sd_value_list() : sd_value_dict();
        cJSON_ArrayForEach(it, v) {
            if (!strcmp(t, "list")) sd_value_list_append(c, typed(it));
            else sd_value_dict_set(c, it->string, typed(it));
        }
        return c;
    }
    if (!strcmp(t, "NONE")) return sd_value_none();
    if (!strcmp(t, "BOOLEAN")) return sd_value_bool(cJSON_IsTrue(v));
    if (!strcmp(t, "INT")) return sd_value_int((int64_t)v->valuedouble);
    if (!strcmp(t, "FLOAT")) return sd_value_float(v->valuedouble);
    return sd_value_string(cJSON_GetStringValue(v));
}

/* A literal as the manifest records it: {"value": v, "kind": "INT"...}. */
static sd_value *literal(const cJSON *spec, const char *type) {
    const cJSON *v = cJSON_GetObjectItem(spec, "value");
    const cJSON *kind = cJSON_GetObjectItem(spec, "kind");
    const char *k = cJSON_IsString(kind) ? kind->valuestring : type;
    if (!strcmp(k, "list") || !strcmp(k, "dict")) return typed(cJSON_GetObjectItem(spec, "typed"));
    if (cJSON_IsNull(v)) return sd_value_none();
    if (!strcmp(k, "BOOLEAN")) return sd_value_bool(cJSON_IsTrue(v));
    if (!strcmp(k, "INT")) return sd_value_int(int_of(v));
    if (!strcmp(k, "FLOAT")) return sd_value_float(v->valuedouble);
    if (cJSON_IsString(v)) return sd_value_string(v->valuestring);
    CHECK_MSG(0, "%s: literal of kind %s not understood", case_id, k);
    return NULL;
}

static sd_value *build(const cJSON *spec, const char *type) {
    const cJSON *x;
    if ((x = cJSON_GetObjectItem(spec, "tensor")))
        return tensor_value(x->valuestring, cJSON_IsTrue(cJSON_GetObjectItem(spec, "u8")));
    if ((x = cJSON_GetObjectItem(spec, "latent"))) return latent_value(x);
    if ((x = cJSON_GetObjectItem(spec, "list"))) {
        sd_value *list = sd_value_list();
        const cJSON *it;
        cJSON_ArrayForEach(it, x) sd_value_list_append(list, build(it, type));
        return list;
    }
    if ((x = cJSON_GetObjectItem(spec, "node"))) {
        sd_value *out[8];
        sd_error err;
        sd_status rc = run_node(x->valuestring, cJSON_GetObjectItem(spec, "inputs"), out, NULL, &err);
        CHECK_MSG(rc == SD_OK, "%s: input node %s failed: %s", case_id, x->valuestring, err.msg);
        int k = cJSON_GetObjectItem(spec, "output") ? cJSON_GetObjectItem(spec, "output")->valueint : 0;
        sd_value *v = rc ? NULL : sd_value_ref(out[k]);
        nt_free_values(out, 8);
        return v;
    }
    return literal(spec, type);
}

static void compare_tensor(const char *what, const sd_tensor *got, const char *name, double atol, double rtol,
                           int u8) {
    sd_tensor *want = ref_f32(name, u8);
    CHECK_MSG(want != NULL, "%s: no reference %s", case_id, name);
    CHECK_MSG(got != NULL && got->dtype == SD_F32, "%s: %s is not an F32 tensor", case_id, what);
    if (want && got && got->dtype == SD_F32) {
        char a[96], b[96];
        int same = got->ndim == want->ndim;
        for (int i = 0; same && i < got->ndim; i++) same = got->shape[i] == want->shape[i];
        CHECK_MSG(same, "%s: %s has shape %s, ComfyUI %s", case_id, what, sd_tensor_shape_str(got, a, sizeof a),
                  sd_tensor_shape_str(want, b, sizeof b));
        if (same && sd_tensor_numel(want) > 0) {
            double mx = 0;
            long worst = -1;
            int ok = sd_test_allclose(got, want, atol, rtol, &mx, &worst);
            CHECK_MSG(ok, "%s: %s differs from ComfyUI's: max |diff| %g at %ld (got %.9g, want %.9g; atol %g rtol %g)",
                      case_id, what, mx, worst, worst >= 0 ? sd_tensor_f32(got)[worst] : 0.0,
                      worst >= 0 ? sd_tensor_f32(want)[worst] : 0.0, atol, rtol);
        }
    }
    sd_tensor_unref(want);
}

static double num(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : 0.0;
}

static void compare(const char *what, const sd_value *got, const cJSON *want) {
    const cJSON *x;
    if ((x = cJSON_GetObjectItem(want, "tensor"))) {
        compare_tensor(what, sd_value_as_tensor(got), x->valuestring, num(want, "atol"), num(want, "rtol"),
                       cJSON_IsTrue(cJSON_GetObjectItem(want, "u8")));
    } else if ((x = cJSON_GetObjectItem(want, "latent"))) {
        CHECK_MSG(sd_value_kind_of(got) == SD_VAL_DICT, "%s: %s is not a LATENT", case_id, what);
        const cJSON *keys = cJSON_GetObjectItem(want, "keys"), *k;
        CHECK_MSG(sd_value_dict_len(got) == (size_t)cJSON_GetArraySize(keys), "%s: %s has %zu keys, ComfyUI %d",
                  case_id, what, sd_value_dict_len(got), cJSON_GetArraySize(keys));
        cJSON_ArrayForEach(k, keys) CHECK_MSG(sd_value_dict_get(got, k->valuestring) != NULL,
                                              "%s: %s lacks key %s", case_id, what, k->valuestring);
        const char *parts[] = {"samples", "noise_mask"};
        for (int i = 0; i < 2; i++) {
            const cJSON *p = cJSON_GetObjectItem(x, parts[i]);
            if (!p) continue;
            char w[160];
            snprintf(w, sizeof w, "%s.%s", what, parts[i]);
            compare_tensor(w, sd_value_dict_tensor(got, parts[i]), p->valuestring, num(want, "atol"), num(want, "rtol"), 0);
        }
        const cJSON *bi = cJSON_GetObjectItem(x, "batch_index");
        if (bi) {
            const sd_value *l = sd_value_dict_get(got, "batch_index");
            int ok = sd_value_list_len(l) == (size_t)cJSON_GetArraySize(bi);
            for (int i = 0; ok && i < cJSON_GetArraySize(bi); i++)
                ok = sd_value_as_int(sd_value_list_get(l, (size_t)i)) == (int64_t)cJSON_GetArrayItem(bi, i)->valuedouble;
            CHECK_MSG(ok, "%s: %s.batch_index differs from ComfyUI's", case_id, what);
        }
    } else if ((x = cJSON_GetObjectItem(want, "list"))) {
        CHECK_MSG(sd_value_kind_of(got) == SD_VAL_LIST && sd_value_list_len(got) == (size_t)cJSON_GetArraySize(x),
                  "%s: %s is not a list of %d", case_id, what, cJSON_GetArraySize(x));
        for (int i = 0; i < cJSON_GetArraySize(x) && i < (int)sd_value_list_len(got); i++) {
            char w[160];
            snprintf(w, sizeof w, "%s[%d]", what, i);
            compare(w, sd_value_list_get(got, (size_t)i), cJSON_GetArrayItem(x, i));
        }
    } else if ((x = cJSON_GetObjectItem(want, "value"))) {
        const char *kind = cJSON_GetObjectItem(want, "kind")->valuestring;
        if (!strcmp(kind, "NONE")) {
            CHECK_MSG(sd_value_kind_of(got) == SD_VAL_NONE, "%s: %s is a %s, ComfyUI None", case_id, what,
                      sd_value_kind_name(sd_value_kind_of(got)));
        } else if (!strcmp(kind, "STRING")) {
            const char *s = sd_value_as_string(got);
            CHECK_MSG(s && !strcmp(s, x->valuestring), "%s: %s is \"%s\", ComfyUI \"%s\"", case_id, what,
                      s ? s : "(not a string)", x->valuestring);
        } else if (!strcmp(kind, "BOOLEAN")) {
            CHECK_MSG(sd_value_kind_of(got) == SD_VAL_BOOL && sd_value_as_bool(got) == cJSON_IsTrue(x),
                      "%s: %s is not %s", case_id, what, cJSON_IsTrue(x) ? "true" : "false");
        } else if (!strcmp(kind, "INT")) {
            CHECK_MSG(sd_value_kind_of(got) == SD_VAL_INT && sd_value_as_int(got) == int_of(x),
                      "%s: %s is %lld, ComfyUI %lld", case_id, what, (long long)sd_value_as_int(got), (long long)int_of(x));
        } else if (!strcmp(kind, "FLOAT")) {
            CHECK_MSG(sd_value_kind_of(got) == SD_VAL_FLOAT && sd_value_as_float(got) == x->valuedouble,
                      "%s: %s is %.17g, ComfyUI %.17g", case_id, what, sd_value_as_float(got), x->valuedouble);
        } else {
            CHECK_MSG(0, "%s: %s: output kind %s not understood", case_id, what, kind);
        }
    } else {
        CHECK_MSG(0, "%s: %s: output spec not understood", case_id, what);
    }
}

/* An output node's ui {"text": [...]} against ComfyUI's. */
static void compare_ui_text(const sd_value *ui, const cJSON *want) {
    const sd_value *t = sd_value_dict_get(ui, "text");
    int ok = sd_value_list_len(t) == (size_t)cJSON_GetArraySize(want);
    for (int i = 0; ok && i < cJSON_GetArraySize(want); i++) {
        const char *g = sd_value_as_string(sd_value_list_get(t, (size_t)i));
        ok = g && !strcmp(g, cJSON_GetArrayItem(want, i)->valuestring);
        if (!ok) printf("  %s: ui text \"%s\", ComfyUI \"%s\"\n", case_id, g ? g : "(none)",
                        cJSON_GetArrayItem(want, i)->valuestring);
    }
    CHECK_MSG(ok, "%s: the ui text differs from ComfyUI's", case_id);
}

static void run_case(const cJSON *c) {
    case_id = cJSON_GetObjectItem(c, "id")->valuestring;
    const char *node = cJSON_GetObjectItem(c, "node")->valuestring;
    sd_value *out[8], *ui = NULL;
    sd_error err;
    sd_status rc = run_node(node, cJSON_GetObjectItem(c, "inputs"), out, &ui, &err);
    const cJSON *error = cJSON_GetObjectItem(c, "error");
    if (error) {
        CHECK_MSG(rc != SD_OK, "%s: %s succeeded where ComfyUI raised %s", case_id, node, error->valuestring);
        if (rc) printf("  %s: refused like ComfyUI (%s): %s [input '%s']\n", case_id, error->valuestring, err.msg,
                       err.input);
    } else {
        CHECK_MSG(rc == SD_OK, "%s: %s failed: %s", case_id, node, err.msg);
        const cJSON *outs = cJSON_GetObjectItem(c, "outputs");
        for (int k = 0; rc == SD_OK && k < cJSON_GetArraySize(outs); k++) {
            const cJSON *o = cJSON_GetArrayItem(outs, k), *ut = cJSON_GetObjectItem(o, "ui_text");
            char what[64];
            snprintf(what, sizeof what, "output %d", k);
            if (ut) compare_ui_text(ui, ut);
            else compare(what, out[k], o);
        }
    }
    sd_value_unref(ui);
    nt_free_values(out, 8);
}

int main(void) {
    const char *dir = sd_golden_topic_dir("node_ops");
    cJSON *manifest = sd_golden_manifest(dir);
    ref = sd_golden_open_ref(dir, manifest, "file");
    sd_error err;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    nt_env_init(&env, "golden_node_ops");
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(manifest, "cases")) { run_case(c); n++; }
    printf("%d cases of ComfyUI %s\n", n, cJSON_GetObjectItem(manifest, "comfyui_commit")->valuestring);
    CHECK(n > 0);
    sd_st_close(ref);
    cJSON_Delete(manifest);
    sd_env_cleanup(&env.env);
    sd_registry_reset();
    return sd_test_finish();
}
