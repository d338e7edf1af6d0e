/* strings.c - StringConcatenate, StringReplace, StringSubstring, StringTrim,
 * StringLength, StringContains, StringCompare, CaseConverter
 * (comfy_extras/nodes_string.py) with Python's str semantics
 * (models/text/pystr.h). */
#include <stdlib.h>
#include <string.h>

#include "models/text/pystr.h"
#include "text.h"

sd_status sd_nodes_in_string(sd_value *const *in, int i, const char *name, const char **out, sd_error *err) {
    *out = in[i] ? sd_value_as_string(in[i]) : NULL;
    if (*out) return SD_OK;
    sd_error_set(err, SD_ERR_INVALID, "input '%s': expected a STRING, got %s", name,
                 in[i] ? sd_value_kind_name(sd_value_kind_of(in[i])) : "nothing");
    sd_error_at(err, NULL, NULL, name);
    return SD_ERR_INVALID;
}

sd_status sd_nodes_set_string(sd_value **out, char *s, sd_error *err) {
    *out = s ? sd_value_string(s) : NULL;
    free(s);
    return *out ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_output_def string_out[] = {{"STRING", "STRING"}, {0}};

#define MULTI(n) {.name = n, .type = SD_T_STRING, .multiline = 1, .no_default = 1, .def_str = ""}

/* ---- StringConcatenate: delimiter.join((a, b)) ------------------------------------------- */

static sd_status concat_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *a, *b, *d;
    sd_status rc = sd_nodes_in_string(in, 0, "string_a", &a, err);
    if (!rc) rc = sd_nodes_in_string(in, 1, "string_b", &b, err);
    if (!rc) rc = sd_nodes_in_string(in, 2, "delimiter", &d, err);
    if (rc) return rc;
    size_t la = strlen(a), lb = strlen(b), ld = strlen(d);
    char *s = malloc(la + ld + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, d, ld);
        memcpy(s + la + ld, b, lb + 1);
    }
    return sd_nodes_set_string(&out[0], s, err);
}

static const sd_input_def concat_inputs[] = {
    MULTI("string_a"), MULTI("string_b"), {.name = "delimiter", .type = SD_T_STRING, .def_str = ""}, {0}};

const sd_node_def sd_node_StringConcatenate = {
    .version = 1, .class_type = "StringConcatenate", .python_module = "comfy_extras.nodes_string",
    .flags = SD_NODE_V3, .display_name = "Concatenate", .category = "utils/string",
    .help = "string_a, delimiter, string_b.", .inputs = concat_inputs, .outputs = string_out,
    .run = concat_run};

/* ---- StringSubstring: string[start:end] --------------------------------------------------------- */

static sd_status substring_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *s;
    sd_status rc = sd_nodes_in_string(in, 0, "string", &s, err);
    if (rc) return rc;
    return sd_nodes_set_string(&out[0], sd_pystr_slice(s, sd_value_as_int(in[1]), sd_value_as_int(in[2])), err);
}

static const sd_input_def substring_inputs[] = {
    MULTI("string"), {.name = "start", .type = SD_T_INT, .no_default = 1}, {.name = "end", .type = SD_T_INT, .no_default = 1},
    {0}};

const sd_node_def sd_node_StringSubstring = {
    .version = 1, .class_type = "StringSubstring", .python_module = "comfy_extras.nodes_string", .flags = SD_NODE_V3,
    .display_name = "Substring", .category = "utils/string",
    .help = "string[start:end], counting characters (code points); negative indices count from "
            "the end, as in Python.",
    .inputs = substring_inputs, .outputs = string_out, .run = substring_run};

/* ---- StringLength ------------------------------------------------------------------------------ */

static sd_status length_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *s;
    sd_status rc = sd_nodes_in_string(in, 0, "string", &s, err);
    if (rc) return rc;
    out[0] = sd_value_int((int64_t)sd_pystr_len(s));
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def length_inputs[] = {MULTI("string"), {0}};
static const sd_output_def length_out[] = {{"length", "INT"}, {0}};

const sd_node_def sd_node_StringLength = {
    .version = 1, .class_type = "StringLength", .python_module = "comfy_extras.nodes_string", .flags = SD_NODE_V3,
    .display_name = "Length", .category = "utils/string",
    .help = "The number of characters (code points) of the string.", .inputs = length_inputs,
    .outputs = length_out, .run = length_run};

/* ---- CaseConverter -------------------------------------------------------------------------------- */

static const char *const case_modes[] = {"UPPERCASE", "lowercase", "Capitalize", "Title Case", NULL};

static sd_status case_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *s, *m = sd_value_as_string(in[1]);
    sd_status rc = sd_nodes_in_string(in, 0, "string", &s, err);
    if (rc) return rc;
    char *r;
    if (m && !strcmp(m, "UPPERCASE")) r = sd_pystr_upper(s);
    else if (m && !strcmp(m, "lowercase")) r = sd_pystr_lower(s);
    else if (m && !strcmp(m, "Capitalize")) r = sd_pystr_capitalize(s);
    else if (m && !strcmp(m, "Title Case")) r = sd_pystr_title(s);
    else r = strdup(s); /* ComfyUI returns the string unchanged for any other mode */
    return sd_nodes_set_string(&out[0], r, err);
}

static const sd_input_def case_inputs[] = {
    MULTI("string"), {.name = "mode", .type = SD_T_COMBO, .options = case_modes, .def_str = "UPPERCASE",
    .no_default = 1}, {0}};

const sd_node_def sd_node_CaseConverter = {
    .version = 1, .class_type = "CaseConverter", .python_module = "comfy_extras.nodes_string", .flags = SD_NODE_V3,
    .display_name = "Case Converter", .category = "utils/string",
    .help = "Python's str.upper(), lower(), capitalize() or title().", .inputs = case_inputs,
    .outputs = string_out, .run = case_run};

/* ---- StringTrim -------------------------------------------------------------------------------------- */

static const char *const trim_modes[] = {"Both", "Left", "Right", NULL};

static sd_status trim_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *s, *m = sd_value_as_string(in[1]);
    sd_status rc = sd_nodes_in_string(in, 0, "string", &s, err);
    if (rc) return rc;
    int both = m && !strcmp(m, "Both"), left = both || (m && !strcmp(m, "Left")),
        right = both || (m && !strcmp(m, "Right"));
    return sd_nodes_set_string(&out[0], sd_pystr_strip(s, left, right), err);
}

static const sd_input_def trim_inputs[] = {
    MULTI("string"), {.name = "mode", .type = SD_T_COMBO, .options = trim_modes, .def_str = "Both", .no_default = 1},
    {0}};

const sd_node_def sd_node_StringTrim = {
    .version = 1, .class_type = "StringTrim", .python_module = "comfy_extras.nodes_string", .flags = SD_NODE_V3,
    .display_name = "Trim", .category = "utils/string",
    .help = "Python's str.strip() (Both), lstrip() (Left) or rstrip() (Right).", .inputs = trim_inputs,
    .outputs = string_out, .run = trim_run};

/* ---- StringReplace ---------------------------------------------------------------------------------------- */

static sd_status replace_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *s, *f, *r;
    sd_status rc = sd_nodes_in_string(in, 0, "string", &s, err);
    if (!rc) rc = sd_nodes_in_string(in, 1, "find", &f, err);
    if (!rc) rc = sd_nodes_in_string(in, 2, "replace", &r, err);
    if (rc) return rc;
    return sd_nodes_set_string(&out[0], sd_pystr_replace(s, f, r), err);
}

static const sd_input_def replace_inputs[] = {MULTI("string"), MULTI("find"), MULTI("replace"), {0}};

const sd_node_def sd_node_StringReplace = {
    .version = 1, .class_type = "StringReplace", .python_module = "comfy_extras.nodes_string", .flags = SD_NODE_V3,
    .display_name = "Replace", .category = "utils/string",
    .help = "Every occurrence of find replaced (Python's str.replace; an empty find inserts the "
            "replacement between all characters).",
    .inputs = replace_inputs, .outputs = string_out, .run = replace_run};

/* ---- StringContains / StringCompare ------------------------------------------------------------------------- */

/* a and b, lowered when !case_sensitive, into *x and *y (malloc'd). */
static sd_status maybe_lower(const char *a, const char *b, int case_sensitive, char **x, char **y, sd_error *err) {
    *x = case_sensitive ? strdup(a) : sd_pystr_lower(a);
    *y = case_sensitive ? strdup(b) : sd_pystr_lower(b);
    if (*x && *y) return SD_OK;
    free(*x), free(*y);
    return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static sd_status contains_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *s, *sub;
    char *x, *y;
    sd_status rc = sd_nodes_in_string(in, 0, "string", &s, err);
    if (!rc) rc = sd_nodes_in_string(in, 1, "substring", &sub, err);
    if (!rc) rc = maybe_lower(s, sub, sd_value_as_bool(in[2]), &x, &y, err);
    if (rc) return rc;
    out[0] = sd_value_bool(sd_pystr_contains(x, y));
    free(x), free(y);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def contains_inputs[] = {
    MULTI("string"), MULTI("substring"), {.name = "case_sensitive", .type = SD_T_BOOLEAN, .def = 1}, {0}};
static const sd_output_def contains_out[] = {{"contains", "BOOLEAN"}, {0}};

const sd_node_def sd_node_StringContains = {
    .version = 1, .class_type = "StringContains", .python_module = "comfy_extras.nodes_string", .flags = SD_NODE_V3,
    .display_name = "Contains", .category = "utils/string",
    .help = "Whether substring occurs in string (both lowercased first unless case_sensitive).",
    .inputs = contains_inputs, .outputs = contains_out, .run = contains_run};

static const char *const compare_modes[] = {"Starts With", "Ends With", "Equal", NULL};

static sd_status compare_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *a, *b, *m = sd_value_as_string(in[2]);
    char *x, *y;
    sd_status rc = sd_nodes_in_string(in, 0, "string_a", &a, err);
    if (!rc) rc = sd_nodes_in_string(in, 1, "string_b", &b, err);
    if (!rc && (!m || (strcmp(m, "Equal") && strcmp(m, "Starts With") && strcmp(m, "Ends With")))) {
        /* ComfyUI's node returns None for another mode; sdflow names it */
        sd_error_set(err, SD_ERR_INVALID, "unknown mode '%s'", m ? m : "");
        sd_error_at(err, NULL, NULL, "mode");
        return SD_ERR_INVALID;
    }
    if (!rc) rc = maybe_lower(a, b, sd_value_as_bool(in[3]), &x, &y, err);
    if (rc) return rc;
    int r = !strcmp(m, "Equal") ? !strcmp(x, y) : !strcmp(m, "Starts With") ? sd_pystr_startswith(x, y)
                                                                              : sd_pystr_endswith(x, y);
    free(x), free(y);
    out[0] = sd_value_bool(r);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def compare_inputs[] = {
    MULTI("string_a"), MULTI("string_b"),
    {.name = "mode", .type = SD_T_COMBO, .options = compare_modes, .def_str = "Starts With", .no_default = 1},
    {.name = "case_sensitive", .type = SD_T_BOOLEAN, .def = 1}, {0}};
static const sd_output_def bool_out[] = {{"BOOLEAN", "BOOLEAN"}, {0}};

const sd_node_def sd_node_StringCompare = {
    .version = 1, .class_type = "StringCompare", .python_module = "comfy_extras.nodes_string", .flags = SD_NODE_V3,
    .display_name = "Compare", .category = "utils/string",
    .help = "Whether string_a starts with, ends with or equals string_b (both lowercased first "
            "unless case_sensitive).",
    .inputs = compare_inputs, .outputs = bool_out, .run = compare_run};
