/* regex.c - RegexMatch, RegexExtract, RegexReplace
 * (comfy_extras/nodes_string.py) with Python's re semantics over PCRE2
 * (models/text/pyregex.h). As in ComfyUI, a pattern that does not compile
 * gives false / "" in RegexMatch / RegexExtract and an error in
 * RegexReplace. */
#include <stdlib.h>
#include <string.h>

#include "models/text/pyregex.h"
#include "strbuf.h"
#include "text.h"

#define MULTI(n) {.name = n, .type = SD_T_STRING, .multiline = 1, .no_default = 1, .def_str = ""}

static int flags_of(sd_value *const *in, int ci, int mi, int di) {
    int f = 0;
    if (!in[ci] || sd_value_as_bool(in[ci])) f |= SD_RE_IGNORECASE; /* optional inputs default to true */
    if (in[mi] && sd_value_as_bool(in[mi])) f |= SD_RE_MULTILINE;
    if (in[di] && sd_value_as_bool(in[di])) f |= SD_RE_DOTALL;
    return f;
}

/* ---- RegexMatch ---------------------------------------------------------------------------- */

static sd_status match_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *s, *p;
    sd_status rc = sd_nodes_in_string(in, 0, "string", &s, err);
    if (!rc) rc = sd_nodes_in_string(in, 1, "regex_pattern", &p, err);
    if (rc) return rc;
    sd_pyregex *re = NULL;
    sd_error cerr;
    int found = 0;
    if (sd_pyregex_compile(p, flags_of(in, 2, 3, 4), &re, &cerr) == SD_OK) {
        sd_pyscan scan = {0};
        sd_pymatch m;
        rc = sd_pyregex_next(re, s, strlen(s), &scan, &m, &found, err);
        sd_pyregex_free(re);
        if (rc) { sd_error_at(err, NULL, NULL, "regex_pattern"); return rc; }
    } else if (cerr.code == SD_ERR_NOMEM) {
        *err = cerr;
        return SD_ERR_NOMEM;
    } /* else re.error: no match */
    out[0] = sd_value_bool(found);
    return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
}

static const sd_input_def match_inputs[] = {
    MULTI("string"), MULTI("regex_pattern"),
    {.name = "case_insensitive", .type = SD_T_BOOLEAN, .def = 1},
    {.name = "multiline", .type = SD_T_BOOLEAN, .def = 0},
    {.name = "dotall", .type = SD_T_BOOLEAN, .def = 0}, {0}};
static const sd_output_def matches_out[] = {{"matches", "BOOLEAN"}, {0}};

const sd_node_def sd_node_RegexMatch = {
    .version = 1, .class_type = "RegexMatch", .python_module = "comfy_extras.nodes_string", .flags = SD_NODE_V3,
    .display_name = "Regex Match", .category = "utils/string",
    .help = "Whether the pattern matches anywhere in the string (false for a pattern that does not "
            "compile).",
    .inputs = match_inputs, .outputs = matches_out, .run = match_run};

/* ---- RegexExtract --------------------------------------------------------------------------- */

static const char *const extract_modes[] = {"First Match", "All Matches", "First Group", "All Groups", NULL};

typedef sd_nodes_strbuf sbuf;

/* group g of m in s (empty for a group that did not take part) */
static void sb_group(sbuf *b, const char *s, const sd_pymatch *m, int g) {
    if (g <= m->n_groups && m->start[g] != (size_t)-1) sd_nodes_strbuf_put(b, s + m->start[g], m->end[g] - m->start[g]);
}

static sd_status extract_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *s, *p, *mode = sd_value_as_string(in[2]);
    sd_status rc = sd_nodes_in_string(in, 0, "string", &s, err);
    if (!rc) rc = sd_nodes_in_string(in, 1, "regex_pattern", &p, err);
    if (rc) return rc;
    int64_t gi = sd_value_as_int(in[6]);
    sd_pyregex *re = NULL;
    sd_error cerr;
    if (sd_pyregex_compile(p, flags_of(in, 3, 4, 5), &re, &cerr) != SD_OK) {
        if (cerr.code == SD_ERR_NOMEM) { *err = cerr; return SD_ERR_NOMEM; }
        return sd_nodes_set_string(&out[0], strdup(""), err); /* re.error: "" */
    }
    size_t len = strlen(s);
    sd_pyscan scan = {0};
    sd_pymatch m;
    int found = 0, none = 0, groups = sd_pyregex_groups(re);
    sbuf b = {0};
    if (mode && !strcmp(mode, "First Match")) {
        rc = sd_pyregex_next(re, s, len, &scan, &m, &found, err);
        if (!rc && found) sb_group(&b, s, &m, 0);
    } else if (mode && !strcmp(mode, "All Matches")) {
        /* findall: the whole matches, or group 1 of each when there are groups */
        int first = 1;
        while (!rc && !(rc = sd_pyregex_next(re, s, len, &scan, &m, &found, err)) && found) {
            if (!first) sd_nodes_strbuf_put(&b, "\n", 1);
            first = 0;
            sb_group(&b, s, &m, groups > 0 ? 1 : 0);
        }
    } else if (mode && !strcmp(mode, "First Group")) {
        rc = sd_pyregex_next(re, s, len, &scan, &m, &found, err);
        if (!rc && found && groups >= gi) {
            /* a group that did not take part is None in ComfyUI: a NONE value here */
            if (gi <= m.n_groups && m.start[gi] == (size_t)-1) none = 1;
            else sb_group(&b, s, &m, (int)gi);
        }
    } else if (mode && !strcmp(mode, "All Groups")) {
        int first = 1;
        while (!rc && !(rc = sd_pyregex_next(re, s, len, &scan, &m, &found, err)) && found) {
            if (groups == 0 || groups < gi) continue;
            if (gi <= m.n_groups && m.start[gi] == (size_t)-1) {
                /* "\n".join() of a None: ComfyUI fails with a TypeError */
                rc = sd_error_set(err, SD_ERR_INVALID, "group %lld did not take part in a match (ComfyUI's join "
                                  "fails on it)", (long long)gi);
                sd_error_at(err, NULL, NULL, "group_index");
                break;
            }
            if (!first) sd_nodes_strbuf_put(&b, "\n", 1);
            first = 0;
            sb_group(&b, s, &m, (int)gi);
        }
    }
    sd_pyregex_free(re);
    if (rc) {
        free(b.s);
        if (!err->input[0]) sd_error_at(err, NULL, NULL, "regex_pattern");
        return rc;
    }
    if (none) {
        free(b.s);
        out[0] = sd_value_none();
        return out[0] ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    return sd_nodes_set_string(&out[0], sd_nodes_strbuf_finish(&b), err);
}

static const sd_input_def extract_inputs[] = {
    MULTI("string"), MULTI("regex_pattern"),
    {.name = "mode", .type = SD_T_COMBO, .options = extract_modes, .def_str = "First Match", .no_default = 1},
    {.name = "case_insensitive", .type = SD_T_BOOLEAN, .def = 1},
    {.name = "multiline", .type = SD_T_BOOLEAN, .def = 0},
    {.name = "dotall", .type = SD_T_BOOLEAN, .def = 0},
    {.name = "group_index", .type = SD_T_INT, .def = 1, .min = 0, .max = 100, .has_range = 1}, {0}};
static const sd_output_def string_out[] = {{"STRING", "STRING"}, {0}};

const sd_node_def sd_node_RegexExtract = {
    .version = 1, .class_type = "RegexExtract", .python_module = "comfy_extras.nodes_string", .flags = SD_NODE_V3,
    .display_name = "Regex Extract", .category = "utils/string",
    .help = "The first match, all matches (group 1 of each when the pattern has groups), the first "
            "match's group group_index, or that group of every match, joined by newlines (\"\" for a "
            "pattern that does not compile).",
    .inputs = extract_inputs, .outputs = string_out, .run = extract_run};

/* ---- RegexReplace ------------------------------------------------------------------------------ */

static sd_status replace_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    const char *s, *p, *r;
    sd_status rc = sd_nodes_in_string(in, 0, "string", &s, err);
    if (!rc) rc = sd_nodes_in_string(in, 1, "regex_pattern", &p, err);
    if (!rc) rc = sd_nodes_in_string(in, 2, "replace", &r, err);
    if (rc) return rc;
    sd_pyregex *re = NULL;
    if ((rc = sd_pyregex_compile(p, flags_of(in, 3, 4, 5), &re, err))) {
        sd_error_at(err, NULL, NULL, "regex_pattern");
        return rc;
    }
    char *res = NULL;
    int64_t count = in[6] ? sd_value_as_int(in[6]) : 0;
    rc = sd_pyregex_sub(re, s, r, (int)count, &res, err);
    sd_pyregex_free(re);
    if (rc) {
        sd_error_at(err, NULL, NULL, "replace");
        return rc;
    }
    return sd_nodes_set_string(&out[0], res, err);
}

static const sd_input_def replace_inputs[] = {
    MULTI("string"), MULTI("regex_pattern"), MULTI("replace"),
    {.name = "case_insensitive", .type = SD_T_BOOLEAN, .def = 1, .optional = 1},
    {.name = "multiline", .type = SD_T_BOOLEAN, .def = 0, .optional = 1},
    {.name = "dotall", .type = SD_T_BOOLEAN, .def = 0, .optional = 1,
     .tooltip = "When enabled, the dot (.) character will match any character including newline characters. When "
                "disabled, dots won't match newlines."},
    {.name = "count", .type = SD_T_INT, .def = 0, .min = 0, .max = 100, .has_range = 1, .optional = 1,
     .tooltip = "Maximum number of replacements to make. Set to 0 to replace all occurrences (default). Set to 1 to "
                "replace only the first match, 2 for the first two matches, etc."},
    {0}};

const sd_node_def sd_node_RegexReplace = {
    .version = 1, .class_type = "RegexReplace", .python_module = "comfy_extras.nodes_string",
    .description = "Find and replace text using regex patterns.", .flags = SD_NODE_V3,
    .display_name = "Regex Replace", .category = "utils/string",
    .help = "Find and replace text using regex patterns.", .inputs = replace_inputs, .outputs = string_out,
    .run = replace_run};
