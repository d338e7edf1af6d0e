/* preview_any.c - PreviewAny (comfy_extras/nodes_preview_any.py): any
 * value as the text ComfyUI shows for it, in the node's "ui" result
 * {"text": [text]}.
 *
 * As ComfyUI: a STRING as it is; INT, FLOAT and BOOLEAN as Python's str()
 * ("3", "0.1", "1e-05", "True"); None as "None"; lists and dicts of those
 * as json.dumps(value, indent=4). Values holding tensors or models, which
 * ComfyUI prints with Python's str() (torch's tensor printout, object
 * addresses), are described instead ("IMAGE tensor [1, 512, 512, 3]
 * float32", "MODEL"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"
#include "text.h"

typedef sd_nodes_strbuf sbuf;


/* Python's repr(float): the shortest digits that read back to x, fixed
 * notation for exponents -4 .. 15, else d.ddde+XX. json: NaN / Infinity. */
static void put_float(sbuf *b, double x, int json) {
    if (isnan(x)) { sd_nodes_strbuf_puts(b, json ? "NaN" : "nan"); return; }
    if (isinf(x)) { sd_nodes_strbuf_puts(b, x > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf")); return; }
    char e[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e = [-]d.ddde[+-]XX: digits and decimal exponent */
    char digits[20];
    int nd = 0, neg = e[0] == '-';
    const char *q = e + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    int exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char o[64];
    int n = 0;
    if (neg) o[n++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            o[n++] = '0', o[n++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) o[n++] = '0';
            for (int i = 0; i < nd; i++) o[n++] = digits[i];
        } else {
            for (int i = 0; i <= exp10; i++) o[n++] = i < nd ? digits[i] : '0';
            o[n++] = '.';
            if (nd > exp10 + 1) for (int i = exp10 + 1; i < nd; i++) o[n++] = digits[i];
            else o[n++] = '0';
        }
        o[n] = 0;
    } else {
        o[n++] = digits[0];
        if (nd > 1) {
            o[n++] = '.';
            for (int i = 1; i < nd; i++) o[n++] = digits[i];
        }
        n += snprintf(o + n, sizeof o - (size_t)n, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    sd_nodes_strbuf_puts(b, o);
}

/* json.dumps's string: ASCII only (ensure_ascii), \uXXXX for the rest. */
static void put_json_string(sbuf *b, const char *s) {
    sd_nodes_strbuf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned c = *p;
        char t[16];
        if (c < 0x80) {
            p++;
            switch (c) {
            case '"': sd_nodes_strbuf_puts(b, "\\\""); break;
            case '\\': sd_nodes_strbuf_puts(b, "\\\\"); break;
            case '\n': sd_nodes_strbuf_puts(b, "\\n"); break;
            case '\r': sd_nodes_strbuf_puts(b, "\\r"); break;
            case '\t': sd_nodes_strbuf_puts(b, "\\t"); break;
            case '\b': sd_nodes_strbuf_puts(b, "\\b"); break;
            case '\f': sd_nodes_strbuf_puts(b, "\\f"); break;
            default:
                if (c < 0x20) { snprintf(t, sizeof t, "\\u%04x", c); sd_nodes_strbuf_puts(b, t); }
                else sd_nodes_strbuf_put(b, (const char *)&c, 1);
            }
            continue;
        }
        int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        unsigned cp = n == 1 ? 0xFFFD : c & (0x3F >> (n - 1));
        for (int k = 1; k < n; k++) cp = p[k] ? (cp << 6) | (p[k] & 0x3F) : 0xFFFD;
        p += n;
        if (cp >= 0x10000) {
            cp -= 0x10000;
            snprintf(t, sizeof t, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
        } else {
            snprintf(t, sizeof t, "\\u%04x", cp);
        }
        sd_nodes_strbuf_puts(b, t);
    }
    sd_nodes_strbuf_put(b, "\"", 1);
}

/* 1 when v is JSON-able (no tensor, no handle) all the way down. */
static int plain(const sd_value *v) {
    switch (sd_value_kind_of(v)) {
    case SD_VAL_TENSOR: case SD_VAL_HANDLE: return 0;
    case SD_VAL_LIST:
        for (size_t i = 0; i < sd_value_list_len(v); i++) if (!plain(sd_value_list_get(v, i))) return 0;
        return 1;
    case SD_VAL_DICT:
        for (size_t i = 0; i < sd_value_dict_len(v); i++) if (!plain(sd_value_dict_at(v, i))) return 0;
        return 1;
    default: return 1;
    }
}

static void indent(sbuf *b, int level) {
    sd_nodes_strbuf_put(b, "\n", 1);
    for (int i = 0; i < level * 4; i++) sd_nodes_strbuf_put(b, " ", 1);
}

/* json.dumps(v, indent=4) */
static void put_json(sbuf *b, const sd_value *v, int level) {
    char t[32];
    switch (sd_value_kind_of(v)) {
    case SD_VAL_NONE: sd_nodes_strbuf_puts(b, "null"); break;
    case SD_VAL_BOOL: sd_nodes_strbuf_puts(b, sd_value_as_bool(v) ? "true" : "false"); break;
    case SD_VAL_INT: snprintf(t, sizeof t, "%lld", (long long)sd_value_as_int(v)); sd_nodes_strbuf_puts(b, t); break;
    case SD_VAL_FLOAT: put_float(b, sd_value_as_float(v), 1); break;
    case SD_VAL_STRING: put_json_string(b, sd_value_as_string(v)); break;
    case SD_VAL_LIST: {
        size_t n = sd_value_list_len(v);
        if (!n) { sd_nodes_strbuf_puts(b, "[]"); break; }
        sd_nodes_strbuf_put(b, "[", 1);
        for (size_t i = 0; i < n; i++) {
            indent(b, level + 1);
            put_json(b, sd_value_list_get(v, i), level + 1);
            if (i + 1 < n) sd_nodes_strbuf_put(b, ",", 1);
        }
        indent(b, level);
        sd_nodes_strbuf_put(b, "]", 1);
        break;
    }
    case SD_VAL_DICT: {
        size_t n = sd_value_dict_len(v);
        if (!n) { sd_nodes_strbuf_puts(b, "{}"); break; }
        sd_nodes_strbuf_put(b, "{", 1);
        for (size_t i = 0; i < n; i++) {
            indent(b, level + 1);
            put_json_string(b, sd_value_dict_key(v, i));
            sd_nodes_strbuf_puts(b, ": ");
            put_json(b, sd_value_dict_at(v, i), level + 1);
            if (i + 1 < n) sd_nodes_strbuf_put(b, ",", 1);
        }
        indent(b, level);
        sd_nodes_strbuf_put(b, "}", 1);
        break;
    }
    default: break;
    }
}

/* What sdflow shows for a value ComfyUI would str(): its kind and shape. */
static void describe(sbuf *b, const sd_value *v) {
    char t[160];
    switch (sd_value_kind_of(v)) {
    case SD_VAL_TENSOR: {
        const sd_tensor *x = sd_value_as_tensor(v);
        char sh[96];
        snprintf(t, sizeof t, "tensor %s", sd_tensor_shape_str(x, sh, sizeof sh));
        sd_nodes_strbuf_puts(b, t);
        break;
    }
    case SD_VAL_HANDLE: sd_nodes_strbuf_puts(b, sd_value_handle_type(v)->type_name); break;
    case SD_VAL_LIST:
        sd_nodes_strbuf_puts(b, "[");
        for (size_t i = 0; i < sd_value_list_len(v); i++) {
            if (i) sd_nodes_strbuf_puts(b, ", ");
            describe(b, sd_value_list_get(v, i));
        }
        sd_nodes_strbuf_puts(b, "]");
        break;
    case SD_VAL_DICT:
        sd_nodes_strbuf_puts(b, "{");
        for (size_t i = 0; i < sd_value_dict_len(v); i++) {
            if (i) sd_nodes_strbuf_puts(b, ", ");
            snprintf(t, sizeof t, "'%s': ", sd_value_dict_key(v, i));
            sd_nodes_strbuf_puts(b, t);
            describe(b, sd_value_dict_at(v, i));
        }
        sd_nodes_strbuf_puts(b, "}");
        break;
    default: put_json(b, v, 0);
    }
}

static sd_status preview_any_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)out;
    const sd_value *v = in[0];
    sbuf b = {0};
    char t[32];
    switch (sd_value_kind_of(v)) {
    case SD_VAL_STRING: sd_nodes_strbuf_puts(&b, sd_value_as_string(v)); break;
    case SD_VAL_INT: snprintf(t, sizeof t, "%lld", (long long)sd_value_as_int(v)); sd_nodes_strbuf_puts(&b, t); break;
    case SD_VAL_FLOAT: put_float(&b, sd_value_as_float(v), 0); break;
    case SD_VAL_BOOL: sd_nodes_strbuf_puts(&b, sd_value_as_bool(v) ? "True" : "False"); break;
    case SD_VAL_NONE: sd_nodes_strbuf_puts(&b, "None"); break;
    default:
        if (plain(v)) put_json(&b, v, 0);
        else describe(&b, v);
    }
    char *text = sd_nodes_strbuf_finish(&b);
    sd_value *ui = text ? sd_value_dict() : NULL, *list = ui ? sd_value_list() : NULL;
    int bad = !list || sd_value_list_append(list, sd_value_string(text));
    free(text);
    if (bad) {
        sd_value_unref(list);
        sd_value_unref(ui);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    if (sd_value_dict_set(ui, "text", list)) { sd_value_unref(ui); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    sd_value_unref(ctx->ui);
    ctx->ui = ui;
    return SD_OK;
}

static const sd_input_def preview_inputs[] = {{.name = "source", .type = "*"}, {0}};
static const sd_output_def no_outputs[] = {{0}};

const sd_node_def sd_node_PreviewAny = {
    .version = 1, .class_type = "PreviewAny", .python_module = "comfy_extras.nodes_preview_any",
    .display_name = "Preview as Text", .category = "utils",
    .help = "Shows any value as text (the node's \"ui\" result: {\"text\": [text]}).",
    .inputs = preview_inputs, .outputs = no_outputs, .flags = SD_NODE_OUTPUT, .run = preview_any_run};
