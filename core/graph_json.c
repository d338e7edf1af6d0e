/* graph_json.c - ComfyUI API-format JSON <-> sd_graph, and `--set`.
 *
 * Input values: a 2-element list ["<id>", <integral number>] is a link; any
 * other list is a literal; {"__value__": [...]} is the frontend's wrapping of
 * a list widget value and is unwrapped (so a literal list that looks like a
 * link survives). Serialization wraps every literal list the same way.
 * A UI-format file ("nodes" and "links") is converted first (workflow_ui.h). */
#include "graph.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json_util.h"
#include "node.h"
#include "formats/workflow_ui.h"

/* ---- JSON -> values ---------------------------------------------------------- */

/* Integral numbers become INT (JSON has one number type; INT inputs accept
 * them and FLOAT inputs convert them back), everything else FLOAT. */
static sd_value *number_value(double d) {
    if (isfinite(d) && d == floor(d) && fabs(d) < 9.2e18) return sd_value_int((int64_t)d);
    return sd_value_float(d);
}

/* A big integer kept as its digits (exact_integers): INT when it fits in
 * int64, or in uint64 for an unsigned input (seeds, json_util.h), else the
 * (rounded) FLOAT, which INT inputs then reject. */
static sd_value *raw_integer(const cJSON *j, int u64) {
    errno = 0;
    char *end = NULL;
    long long v = strtoll(j->valuestring, &end, 10);
    if (errno == 0 && end && !*end) return sd_value_int((int64_t)v);
    uint64_t u;
    if (u64 && sd_json_parse_u64(j->valuestring, &u) == 0) return sd_value_int((int64_t)u);
    return sd_value_float(strtod(j->valuestring, NULL));
}

/* `u64`: j is the whole literal of an unsigned 64-bit INT input. */
static sd_value *json_value_as(const cJSON *j, int u64) {
    if (cJSON_IsRaw(j)) {
        /* A negative number for an unsigned input stays negative (a FLOAT)
         * so that validation reports it below min instead of wrapping it. */
        if (u64 && j->valuestring[0] == '-') return sd_value_float(strtod(j->valuestring, NULL));
        return raw_integer(j, u64);
    }
    if (cJSON_IsBool(j)) return sd_value_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        if (u64 && j->valuedouble < 0) return sd_value_float(j->valuedouble);
        return number_value(j->valuedouble);
    }
    if (cJSON_IsString(j)) return sd_value_string(j->valuestring);
    if (cJSON_IsArray(j)) {
        sd_value *l = sd_value_list();
        for (const cJSON *c = j->child; l && c; c = c->next) {
            sd_value *item = json_value_as(c, 0);
            if (!item || sd_value_list_append(l, item)) { sd_value_unref(l); return NULL; }
        }
        return l;
    }
    if (cJSON_IsObject(j)) {
        sd_value *d = sd_value_dict();
        for (const cJSON *c = j->child; d && c; c = c->next) {
            sd_value *item = json_value_as(c, 0);
            if (!item || sd_value_dict_set(d, c->string, item)) { sd_value_unref(d); return NULL; }
        }
        return d;
    }
    return sd_value_none();
}

static int is_link(const cJSON *j) {
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != 2) return 0;
    const cJSON *a = j->child, *b = a->next;
    if (!cJSON_IsString(a) || !cJSON_IsNumber(b)) return 0;
    double d = b->valuedouble;
    return isfinite(d) && d == floor(d) && d >= 0 && d < 1e9;
}

/* Sets input `name` of node n from JSON value j (link, wrapped list or literal). */
static sd_status set_input_json(sd_graph_node *n, const char *name, const cJSON *j, sd_error *err) {
    if (is_link(j))
        return sd_graph_set_link(n, name, j->child->valuestring, (int)j->child->next->valuedouble, err);
    const cJSON *wrapped = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "__value__") : NULL;
    sd_value *v = json_value_as(wrapped ? wrapped : j, !wrapped && sd_json_input_is_u64_named(n->class_type, name));
    if (!v) return sd_error_set(err, SD_ERR_NOMEM, "out of memory reading input '%s'", name);
    return sd_graph_set_literal(n, name, v, err);
}

static sd_status add_json_node(sd_graph *g, const char *id, const cJSON *obj, const char *source,
                               sd_error *err) {
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(obj, "class_type");
    if (!cJSON_IsString(ct) || !*ct->valuestring) {
        sd_error_set(err, SD_ERR_FORMAT, "%s: node '%s' has no class_type", source, id);
        sd_error_at(err, id, NULL, NULL);
        return SD_ERR_FORMAT;
    }
    sd_graph_node *n;
    sd_status rc = sd_graph_add_node(g, id, ct->valuestring, &n, err);
    if (rc) return rc;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(obj, "_meta");
    const cJSON *title = cJSON_IsObject(meta) ? cJSON_GetObjectItemCaseSensitive(meta, "title") : NULL;
    if (cJSON_IsString(title)) sd_graph_node_set_title(n, title->valuestring);
    const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(obj, "inputs");
    if (inputs && !cJSON_IsObject(inputs)) {
        sd_error_set(err, SD_ERR_FORMAT, "%s: 'inputs' of node '%s' is not an object", source, id);
        sd_error_at(err, id, ct->valuestring, NULL);
        return SD_ERR_FORMAT;
    }
    for (const cJSON *in = inputs ? inputs->child : NULL; in; in = in->next) {
        rc = set_input_json(n, in->string, in, err);
        if (rc) { sd_error_at(err, id, ct->valuestring, in->string); return rc; }
    }
    return SD_OK;
}

/* ---- strings a workflow may not hold ------------------------------------------ */

/* A NUL or bytes that are not UTF-8 in a string of the workflow (json_util.h),
 * refused naming the node, the input and the byte offset. The tree cJSON
 * makes of the text (cut strings and all) tells whether the path starts
 * with the /prompt wrapper and whether its first key is a node. */
static sd_status refuse_bad_string(const char *text, const char *source, const sd_json_bad_string *b,
                                   sd_error *err) {
    int line, col;
    sd_json_position(text, b->text_offset, &line, &col);
    cJSON *raw = cJSON_Parse(text);
    const cJSON *nodes = raw;
    int off = 0;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(raw, "prompt");
    if (b->depth >= 2 && !strcmp(b->path[0], "prompt") && cJSON_IsObject(prompt) &&
        !cJSON_GetObjectItemCaseSensitive(prompt, "class_type")) {
        nodes = prompt;
        off = 1;
    }
    const cJSON *node = b->depth > off && off < SD_JSON_PATH_MAX
        ? cJSON_GetObjectItemCaseSensitive(nodes, b->path[off]) : NULL;
    int is_node = cJSON_IsObject(node) && (cJSON_GetObjectItemCaseSensitive(node, "class_type") ||
                                          cJSON_GetObjectItemCaseSensitive(node, "inputs"));
    const cJSON *ct = is_node ? cJSON_GetObjectItemCaseSensitive(node, "class_type") : NULL;
    char what[SD_ERR_ID_MAX + 64], path[512];
    const char *input = NULL;
    if (b->in_key && b->depth == off + 1) {
        snprintf(what, sizeof what, "the node id");
        is_node = 1;
    } else if (is_node && b->depth > off + 2 && !strcmp(b->path[off + 1], "inputs")) {
        input = b->path[off + 2];
        snprintf(what, sizeof what, b->in_key && b->depth == off + 3 ? "the input name" : "the value");
    } else if (is_node && b->depth > off + 1) {
        snprintf(what, sizeof what, "the %s", b->in_key ? "key" : "string");
        if (!b->in_key && !strcmp(b->path[off + 1], "class_type")) snprintf(what, sizeof what, "the class_type");
    } else {
        snprintf(what, sizeof what, "the %s at %s", b->in_key ? "key" : "string", sd_json_bad_path(b, path, sizeof path));
    }
    sd_error_set(err, SD_ERR_FORMAT, "%s:%d:%d: %s holds %s at byte %zu%s", source, line, col, what,
                 sd_text_problem_describe(b->problem), b->string_offset,
                 b->problem == SD_TEXT_NUL ? " (refused: it would cut the string there)"
                                           : " (refused: it could not be saved back unchanged)");
    if (is_node)
        sd_error_at(err, b->path[off], cJSON_IsString(ct) ? ct->valuestring : NULL, input);
    cJSON_Delete(raw);
    return SD_ERR_FORMAT;
}

sd_status sd_graph_from_json(const char *text, const char *source, sd_graph **out,
                             sd_error *err) {
    *out = NULL;
    if (!source) source = "<workflow>";
    sd_json_bad_string bad;
    if (text && sd_json_find_bad_string(text, &bad)) return refuse_bad_string(text, source, &bad, err);
    cJSON *root;
    sd_status rc = sd_json_parse_exact(text, source, &root, err);
    if (rc) return rc;
    const cJSON *nodes = root;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sd_error_set(err, SD_ERR_FORMAT, "%s: a workflow must be a JSON object of nodes", source);
    }
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsObject(prompt) && !cJSON_GetObjectItemCaseSensitive(prompt, "class_type"))
        nodes = prompt; /* the /prompt request body */
    if (nodes == root && sd_workflow_ui_detect(root)) {
        /* ComfyUI's "Save" format: converted as the frontend would (workflow_ui.h) */
        cJSON *api = NULL;
        rc = sd_workflow_ui_to_api(root, source, &api, err);
        cJSON_Delete(root);
        if (rc) return rc;
        nodes = root = api;
    }
    sd_graph *g = sd_graph_new();
    if (!g) { cJSON_Delete(root); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    for (const cJSON *c = nodes->child; c; c = c->next) {
        /* Unknown top-level keys (anything that is not a node object) are ignored. */
        if (!cJSON_IsObject(c)) continue;
        if (!cJSON_GetObjectItemCaseSensitive(c, "class_type") &&
            !cJSON_GetObjectItemCaseSensitive(c, "inputs"))
            continue;
        rc = add_json_node(g, c->string, c, source, err);
        if (rc) { sd_graph_free(g); cJSON_Delete(root); return rc; }
    }
    cJSON_Delete(root);
    *out = g;
    return SD_OK;
}

/* ---- values -> JSON ---------------------------------------------------------- */

/* `u64`: v is the literal of an unsigned 64-bit INT input (json_util.h). */
static cJSON *value_json(const sd_value *v, int u64) {
    switch (sd_value_kind_of(v)) {
    case SD_VAL_INT: {
        int64_t i = sd_value_as_int(v);
        if (i > (1LL << 53) || i < -(1LL << 53) || (u64 && i < 0)) { /* beyond a double: keep every digit */
            char buf[32];
            sd_json_format_int(i, u64, buf);
            return cJSON_CreateRaw(buf);
        }
        return cJSON_CreateNumber((double)i);
    }
    case SD_VAL_FLOAT: return cJSON_CreateNumber(sd_value_as_float(v));
    case SD_VAL_BOOL: return cJSON_CreateBool(sd_value_as_bool(v));
    case SD_VAL_STRING: return cJSON_CreateString(sd_value_as_string(v));
    case SD_VAL_LIST: {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; a && i < sd_value_list_len(v); i++) {
            cJSON *item = value_json(sd_value_list_get(v, i), 0);
            if (!item) { cJSON_Delete(a); return NULL; }
            cJSON_AddItemToArray(a, item);
        }
        return a;
    }
    case SD_VAL_DICT: {
        cJSON *o = cJSON_CreateObject();
        for (size_t i = 0; o && i < sd_value_dict_len(v); i++) {
            cJSON *item = value_json(sd_value_dict_at(v, i), 0);
            if (!item) { cJSON_Delete(o); return NULL; }
            cJSON_AddItemToObject(o, sd_value_dict_key(v, i), item);
        }
        return o;
    }
    default: return cJSON_CreateNull(); /* tensors and handles never appear as literals */
    }
}

static cJSON *input_json(const sd_graph_node *n, const sd_graph_input *in) {
    if (in->is_link) {
        cJSON *a = cJSON_CreateArray();
        if (!a) return NULL;
        cJSON_AddItemToArray(a, cJSON_CreateString(in->src_id));
        cJSON_AddItemToArray(a, cJSON_CreateNumber(in->src_index));
        return a;
    }
    cJSON *v = value_json(in->literal, sd_json_input_is_u64_named(n->class_type, in->name));
    if (v && sd_value_kind_of(in->literal) == SD_VAL_LIST) {
        cJSON *w = cJSON_CreateObject();
        if (!w) { cJSON_Delete(v); return NULL; }
        cJSON_AddItemToObject(w, "__value__", v);
        return w;
    }
    return v;
}

char *sd_graph_to_json(const sd_graph *g, int pretty) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    for (size_t i = 0; i < sd_graph_count(g); i++) {
        const sd_graph_node *n = sd_graph_at(g, i);
        cJSON *node = cJSON_CreateObject(), *inputs = cJSON_CreateObject();
        if (!node || !inputs) { cJSON_Delete(node); cJSON_Delete(inputs); goto fail; }
        cJSON_AddItemToObject(root, n->id, node);
        cJSON_AddItemToObject(node, "inputs", inputs);
        for (size_t k = 0; k < n->n_inputs; k++) {
            cJSON *v = input_json(n, &n->inputs[k]);
            if (!v) goto fail;
            cJSON_AddItemToObject(inputs, n->inputs[k].name, v);
        }
        cJSON_AddStringToObject(node, "class_type", n->class_type);
        if (n->title) {
            cJSON *meta = cJSON_AddObjectToObject(node, "_meta");
            if (meta) cJSON_AddStringToObject(meta, "title", n->title);
        }
    }
    char *s = pretty ? sd_json_print(root, 1) : sd_json_print(root, 0);
    cJSON_Delete(root);
    return s;
fail:
    cJSON_Delete(root);
    return NULL;
}

/* ---- --set ID.INPUT=VALUE -------------------------------------------------- */

static sd_status set_error(sd_error *err, sd_status code, const char *assignment, const char *why) {
    return sd_error_set(err, code, "--set '%s': %s", assignment, why);
}

/* The node `name` designates: its id, else the one node with that title,
 * else the one node of that class_type (so `--set KSampler.steps=30` works
 * on a workflow with a single KSampler). *matches counts the candidates of
 * the step that found several. */
static sd_graph_node *find_target(const sd_graph *g, const char *name, int *matches) {
    sd_graph_node *n = sd_graph_find(g, name);
    *matches = n ? 1 : 0;
    if (n) return n;
    for (int by_class = 0; by_class < 2; by_class++) {
        sd_graph_node *found = NULL;
        int count = 0;
        for (size_t i = 0; i < sd_graph_count(g); i++) {
            sd_graph_node *c = sd_graph_at(g, i);
            const char *s = by_class ? c->class_type : c->title;
            if (s && strcmp(s, name) == 0) { found = c; count++; }
        }
        if (count == 1) { *matches = 1; return found; }
        if (count > 1) { *matches = count; return NULL; }
    }
    return NULL;
}

sd_status sd_graph_apply_set(sd_graph *g, const char *assignment, sd_error *err) {
    const char *eq = strchr(assignment, '=');
    if (!eq) return set_error(err, SD_ERR_INVALID, assignment, "expected ID.INPUT=VALUE");
    size_t lhs_len = (size_t)(eq - assignment);
    char *lhs = malloc(lhs_len + 1);
    if (!lhs) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    memcpy(lhs, assignment, lhs_len);
    lhs[lhs_len] = 0;
    /* Node ids may contain dots ("5.0.1.3" for expanded nodes); input names do not. */
    char *dot = strrchr(lhs, '.');
    if (!dot || dot == lhs || !dot[1]) {
        free(lhs);
        return set_error(err, SD_ERR_INVALID, assignment, "expected ID.INPUT=VALUE");
    }
    *dot = 0;
    const char *id = lhs, *input = dot + 1, *text = eq + 1;
    int matches = 0;
    sd_graph_node *n = find_target(g, id, &matches);
    sd_status rc = SD_OK;
    if (!n) {
        if (matches > 1)
            sd_error_set(err, SD_ERR_INVALID, "--set '%s': %d nodes are titled or typed '%s'; use the node id",
                         assignment, matches, id);
        else
            sd_error_set(err, SD_ERR_NOT_FOUND, "--set '%s': the workflow has no node '%s'", assignment, id);
        sd_error_at(err, id, NULL, input);
        free(lhs);
        return matches > 1 ? SD_ERR_INVALID : SD_ERR_NOT_FOUND;
    }
    id = n->id;
    const sd_node_def *def = sd_registry_find(n->class_type);
    const sd_input_def *idef = NULL;
    if (def) {
        int k = sd_node_input_index(def, input);
        if (k < 0) {
            char names[1024] = "";
            size_t off = 0;
            for (int i = 0; def->inputs && def->inputs[i].name && off < sizeof names; i++)
                off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", i ? ", " : "",
                                        def->inputs[i].name);
            sd_error_set(err, SD_ERR_INVALID, "--set '%s': %s has no input '%s' (inputs: %s)",
                         assignment, n->class_type, input, names);
            sd_error_at(err, id, n->class_type, input);
            free(lhs);
            return SD_ERR_INVALID;
        }
        idef = &def->inputs[k];
    }
    /* A text input keeps the text as typed unless it is a quoted JSON string,
     * so `--set 6.text=2024` sets the string "2024", not the number. */
    int textual = idef && (strcmp(idef->type, SD_T_STRING) == 0 || strcmp(idef->type, SD_T_COMBO) == 0);
    /* Refused as in a workflow file: not UTF-8 as typed, or a "\u0000" in
     * JSON text (which must not fall back to the text taken literally). */
    size_t at = 0;
    sd_text_problem problem = sd_text_check(text, strlen(text), &at);
    sd_json_bad_string bad;
    if (!problem && sd_json_find_bad_string(text, &bad)) problem = bad.problem, at = bad.string_offset;
    if (problem) {
        sd_error_set(err, SD_ERR_INVALID, "--set: the value holds %s at byte %zu (refused)",
                     sd_text_problem_describe(problem), at);
        sd_error_at(err, id, n->class_type, input);
        free(lhs);
        return SD_ERR_INVALID;
    }
    cJSON *j = NULL;
    if (sd_json_parse_exact(text, "--set", &j, NULL) == SD_OK) {
        if (textual && !cJSON_IsString(j) && !is_link(j)) {
            cJSON_Delete(j);
            j = NULL;
        }
    }
    if (j) {
        rc = set_input_json(n, input, j, err);
        cJSON_Delete(j);
    } else {
        sd_value *v = sd_value_string(text);
        rc = v ? sd_graph_set_literal(n, input, v, err) : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    if (rc) sd_error_at(err, id, n->class_type, input);
    free(lhs);
    return rc;
}
