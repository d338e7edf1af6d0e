/* test_graph.c - graph operations, API-format JSON, --set and validation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/env.h"
#include "core/graph.h"
#include "core/node.h"
#include "testutil.h"

/* ---- test-only node types ---------------------------------------------------- */

static sd_status noop(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return SD_OK;
}

static const char *const sampler_names[] = {"euler", "ddim", NULL};

static const sd_input_def source_in[] = {
    {.name = "width", .type = SD_T_INT, .def = 512, .min = 16, .max = 4096, .step = 8, .has_range = 1},
    {.name = "label", .type = SD_T_STRING}, /* no default: required */
    {NULL}};
static const sd_output_def source_out[] = {{"LATENT", "LATENT"}, {"IMAGE", "IMAGE"}, {NULL}};
static const sd_node_def t_source = {1, "TSource", "Source", "test", "", source_in, source_out, 0, noop};

static const sd_input_def filter_in[] = {
    {.name = "samples", .type = "LATENT"},
    {.name = "cfg", .type = SD_T_FLOAT, .def = 8.0, .min = 0, .max = 100, .has_range = 1},
    {.name = "sampler", .type = SD_T_COMBO, .options = sampler_names}, /* no default */
    {.name = "flag", .type = SD_T_BOOLEAN, .def = 0},
    {.name = "mask", .type = "MASK", .optional = 1},
    {NULL}};
static const sd_output_def filter_out[] = {{"LATENT", "LATENT"}, {NULL}};
static const sd_node_def t_filter = {1, "TFilter", "Filter", "test", "", filter_in, filter_out, 0, noop};

static const sd_input_def sink_in[] = {{.name = "anything", .type = "*"}, {NULL}};
static const sd_node_def t_sink = {1, "TSink", "Sink", "test", "", sink_in, NULL, SD_NODE_OUTPUT, noop};

/* An output node with a seed as ComfyUI declares it (max 0xffffffffffffffff)
 * and an ordinary INT. */
static const sd_input_def seeded_in[] = {
    {.name = "seed", .type = SD_T_INT, .def = 0, .min = 0, .max = 18446744073709551615.0, .step = 1, .has_range = 1},
    {.name = "count", .type = SD_T_INT, .def = 1, .min = -5, .max = 1e18, .step = 1, .has_range = 1},
    {NULL}};
static const sd_node_def t_seeded = {1, "TSeeded", "Seeded", "test", "", seeded_in, NULL, SD_NODE_OUTPUT, noop};

/* PrimitiveInt's declaration: Python's -sys.maxsize .. sys.maxsize. */
static const sd_input_def maxsize_in[] = {
    {.name = "value", .type = SD_T_INT, .no_default = 1, .min = -9223372036854775807.0, .max = 9223372036854775807.0,
     .has_range = 1, .maxsize_range = 1, .control_after_generate = 1},
    {NULL}};
static const sd_node_def t_maxsize = {1, "TMaxsize", "Maxsize", "test", "", maxsize_in, NULL, SD_NODE_OUTPUT, noop};

static const sd_node_def *const table[] = {&t_source, &t_filter, &t_sink, &t_seeded, &t_maxsize, NULL};

/* ---- helpers ------------------------------------------------------------------- */

static sd_graph *parse(const char *json) {
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_from_json(json, "test.json", &g, &err), &err);
    return g;
}

static const sd_graph_problem *find_problem(const sd_graph_problems *p, const char *kind,
                                            const char *node, const char *input) {
    for (size_t i = 0; i < p->n; i++) {
        const sd_graph_problem *q = &p->items[i];
        if (strcmp(q->kind, kind) != 0) continue;
        if (node && (!q->node_id || strcmp(q->node_id, node) != 0)) continue;
        if (input && (!q->input || strcmp(q->input, input) != 0)) continue;
        return q;
    }
    return NULL;
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_parse(void) {
    sd_graph *g = parse(
        "{\"version\": 3,\n"
        " \"5\": {\"class_type\": \"TSource\", \"inputs\": {\"width\": 640, \"label\": \"x\"},"
        "        \"_meta\": {\"title\": \"My source\", \"other\": 1}},\n"
        " \"3\": {\"class_type\": \"TFilter\", \"inputs\": {\"samples\": [\"5\", 0], \"cfg\": 7.5,"
        "        \"sampler\": \"euler\", \"list\": [1, 2, 3], \"wrapped\": {\"__value__\": [\"5\", 0]},"
        "        \"notlink\": [\"5\", 0.5]}},\n"
        " \"9\": {\"class_type\": \"TSink\", \"inputs\": {\"anything\": [\"3\", 0.0]}}}");
    if (!g) return;
    CHECK(sd_graph_count(g) == 3);
    CHECK(strcmp(sd_graph_at(g, 0)->id, "5") == 0); /* insertion order, not numeric */
    CHECK(strcmp(sd_graph_at(g, 1)->id, "3") == 0);
    sd_graph_node *src = sd_graph_find(g, "5");
    CHECK(src && src->title && strcmp(src->title, "My source") == 0);
    sd_graph_node *f = sd_graph_find(g, "3");
    sd_graph_input *in = sd_graph_node_input(f, "samples");
    CHECK(in && in->is_link && strcmp(in->src_id, "5") == 0 && in->src_index == 0);
    in = sd_graph_node_input(f, "cfg");
    CHECK(in && !in->is_link && sd_value_kind_of(in->literal) == SD_VAL_FLOAT &&
          sd_value_as_float(in->literal) == 7.5);
    in = sd_graph_node_input(f, "list");
    CHECK(in && !in->is_link && sd_value_list_len(in->literal) == 3);
    in = sd_graph_node_input(f, "wrapped");
    CHECK(in && !in->is_link && sd_value_list_len(in->literal) == 2);
    in = sd_graph_node_input(f, "notlink");
    CHECK(in && !in->is_link);
    in = sd_graph_node_input(sd_graph_find(g, "9"), "anything");
    CHECK(in && in->is_link && in->src_index == 0); /* integral float index */

    /* Round trip: serialize, parse, serialize again gives the same text. */
    char *a = sd_graph_to_json(g, 0);
    sd_graph *g2 = a ? parse(a) : NULL;
    char *b = g2 ? sd_graph_to_json(g2, 1) : NULL;
    sd_graph *g3 = b ? parse(b) : NULL;
    char *c = g3 ? sd_graph_to_json(g3, 0) : NULL;
    CHECK(a && c && strcmp(a, c) == 0);
    sd_graph_input *w = g2 ? sd_graph_node_input(sd_graph_find(g2, "3"), "wrapped") : NULL;
    CHECK(w && !w->is_link); /* the link-shaped literal stays a literal */
    free(a);
    free(b);
    free(c);
    sd_graph_free(g2);
    sd_graph_free(g3);
    sd_graph_free(g);

    /* Integers beyond 2^53 keep every digit (seeds); numbers inside strings
     * and keys do not confuse the scan. */
    g = parse("{\"1\": {\"class_type\": \"Unregistered\", \"_meta\": {\"title\": \"x 12 \\\" 3.5\"},"
              " \"inputs\": {\"a\": 1.5e3, \"9007199254740993\": \"123\", \"seed\": 9007199254740993,"
              " \"big\": [1, -1234567890123456789], \"huge\": 18446744073709551615, \"f\": 1e300}}}");
    if (g) {
        sd_graph_node *n = sd_graph_find(g, "1");
        CHECK(sd_value_as_int(sd_graph_node_input(n, "seed")->literal) == 9007199254740993LL);
        CHECK(sd_value_kind_of(sd_graph_node_input(n, "seed")->literal) == SD_VAL_INT);
        const sd_value *big = sd_graph_node_input(n, "big")->literal;
        CHECK(sd_value_as_int(sd_value_list_get(big, 1)) == -1234567890123456789LL);
        CHECK(sd_value_kind_of(sd_graph_node_input(n, "huge")->literal) == SD_VAL_FLOAT);
        CHECK(sd_value_as_float(sd_graph_node_input(n, "a")->literal) == 1500.0);
        CHECK(sd_value_as_float(sd_graph_node_input(n, "f")->literal) == 1e300);
        char *js = sd_graph_to_json(g, 0);
        CHECK(js && strstr(js, "9007199254740993") && strstr(js, "-1234567890123456789"));
        free(js);
        sd_error e2;
        sd_error_clear(&e2);
        CHECK_OK(sd_graph_apply_set(g, "1.seed=123456789012345678", &e2), &e2);
        CHECK(sd_value_as_int(sd_graph_node_input(n, "seed")->literal) == 123456789012345678LL);
        sd_graph_free(g);
    }

    /* The /prompt body wrapper. */
    g = parse("{\"client_id\": \"abc\", \"prompt\": {\"1\": {\"class_type\": \"TSink\", \"inputs\": {}}}}");
    CHECK(g && sd_graph_count(g) == 1 && sd_graph_find(g, "1"));
    sd_graph_free(g);
}

static void test_parse_errors(void) {
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_graph_from_json("{\n  \"1\": {\"class_type\": \"TSink\",\n  \"inputs\": {\"a\": }}}",
                                      "bad.json", &g, &err);
    CHECK(rc == SD_ERR_FORMAT && !g);
    CHECK_MSG(strstr(err.msg, "bad.json:3:") != NULL, "%s", err.msg);

    sd_error_clear(&err);
    rc = sd_graph_from_json("{\"1\": {\"inputs\": {}}}", "x.json", &g, &err);
    CHECK(rc == SD_ERR_FORMAT && strstr(err.msg, "class_type") && strcmp(err.node_id, "1") == 0);

    sd_error_clear(&err);
    /* a UI-format file is converted (tests/formats/test_workflow_ui.c) */
    rc = sd_graph_from_json("{\"nodes\": [], \"links\": []}", "ui.json", &g, &err);
    CHECK(rc == SD_OK && g && sd_graph_count(g) == 0);
    sd_graph_free(g);
    g = NULL;

    sd_error_clear(&err);
    rc = sd_graph_from_json("[1, 2]", "arr.json", &g, &err);
    CHECK(rc == SD_ERR_FORMAT);
}

static void test_ops(void) {
    sd_graph *g = sd_graph_new();
    sd_error err;
    sd_error_clear(&err);
    sd_graph_node *a, *b;
    CHECK_OK(sd_graph_add_node(g, "1", "TSource", &a, &err), &err);
    CHECK_OK(sd_graph_add_node(g, "2", "TFilter", &b, &err), &err);
    CHECK(sd_graph_add_node(g, "1", "TSink", NULL, &err) == SD_ERR_INVALID);
    char *id = sd_graph_new_id(g);
    CHECK(id && strcmp(id, "3") == 0);
    free(id);
    CHECK_OK(sd_graph_set_link(b, "samples", "1", 0, &err), &err);
    CHECK_OK(sd_graph_set_literal(b, "cfg", sd_value_float(3.0), &err), &err);
    CHECK_OK(sd_graph_set_literal(b, "cfg", sd_value_float(4.0), &err), &err); /* replace */
    CHECK(b->n_inputs == 2);
    CHECK(sd_value_as_float(sd_graph_node_input(b, "cfg")->literal) == 4.0);
    sd_graph *c = sd_graph_clone(g);
    CHECK(c && sd_graph_count(c) == 2);
    CHECK_OK(sd_graph_remove_node(g, "1", &err), &err);
    CHECK(sd_graph_count(g) == 1 && !sd_graph_find(g, "1"));
    id = sd_graph_new_id(g);
    CHECK(id && strcmp(id, "1") == 0);
    free(id);
    CHECK(sd_graph_remove_node(g, "1", &err) == SD_ERR_NOT_FOUND);
    CHECK(sd_graph_unset_input(b, "cfg") == SD_OK && b->n_inputs == 1);
    CHECK(sd_graph_unset_input(b, "cfg") == SD_ERR_NOT_FOUND);
    /* The clone is independent. */
    sd_graph_node *cb = c ? sd_graph_find(c, "2") : NULL;
    CHECK(cb && cb->n_inputs == 2 && sd_graph_find(c, "1"));
    sd_graph_free(c);
    sd_graph_free(g);
}

static void test_set(void) {
    sd_graph *g = parse("{\"1\": {\"class_type\": \"TSource\", \"inputs\": {\"label\": \"x\"}},"
                        " \"a.b\": {\"class_type\": \"TFilter\", \"inputs\": {\"samples\": [\"1\", 0]}},"
                        " \"7\": {\"class_type\": \"Unregistered\", \"inputs\": {}}}");
    if (!g) return;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_apply_set(g, "1.width=768", &err), &err);
    sd_graph_input *in = sd_graph_node_input(sd_graph_find(g, "1"), "width");
    CHECK(in && sd_value_kind_of(in->literal) == SD_VAL_INT && sd_value_as_int(in->literal) == 768);
    CHECK_OK(sd_graph_apply_set(g, "1.label=2024", &err), &err); /* STRING input keeps text */
    in = sd_graph_node_input(sd_graph_find(g, "1"), "label");
    CHECK(in && sd_value_as_string(in->literal) && strcmp(sd_value_as_string(in->literal), "2024") == 0);
    CHECK_OK(sd_graph_apply_set(g, "1.label=a cat, sitting", &err), &err);
    CHECK(strcmp(sd_value_as_string(sd_graph_node_input(sd_graph_find(g, "1"), "label")->literal),
                 "a cat, sitting") == 0);
    CHECK_OK(sd_graph_apply_set(g, "1.label=\"quoted\"", &err), &err);
    CHECK(strcmp(sd_value_as_string(sd_graph_node_input(sd_graph_find(g, "1"), "label")->literal),
                 "quoted") == 0);
    CHECK_OK(sd_graph_apply_set(g, "a.b.cfg=6.5", &err), &err); /* id with a dot */
    in = sd_graph_node_input(sd_graph_find(g, "a.b"), "cfg");
    CHECK(in && sd_value_as_float(in->literal) == 6.5);
    CHECK_OK(sd_graph_apply_set(g, "a.b.flag=true", &err), &err);
    CHECK(sd_value_kind_of(sd_graph_node_input(sd_graph_find(g, "a.b"), "flag")->literal) == SD_VAL_BOOL);
    CHECK_OK(sd_graph_apply_set(g, "a.b.samples=[\"1\", 1]", &err), &err); /* relink */
    in = sd_graph_node_input(sd_graph_find(g, "a.b"), "samples");
    CHECK(in && in->is_link && in->src_index == 1);
    CHECK_OK(sd_graph_apply_set(g, "7.whatever=1", &err), &err); /* unknown class: no schema check */

    /* By class_type or title when unique. */
    CHECK_OK(sd_graph_apply_set(g, "TSource.width=320", &err), &err);
    CHECK(sd_value_as_int(sd_graph_node_input(sd_graph_find(g, "1"), "width")->literal) == 320);
    sd_graph_node_set_title(sd_graph_find(g, "a.b"), "Refiner");
    CHECK_OK(sd_graph_apply_set(g, "Refiner.cfg=2.5", &err), &err);
    CHECK(sd_value_as_float(sd_graph_node_input(sd_graph_find(g, "a.b"), "cfg")->literal) == 2.5);
    sd_graph_node *extra;
    CHECK_OK(sd_graph_add_node(g, "8", "TSource", &extra, &err), &err);
    sd_error_clear(&err);
    CHECK(sd_graph_apply_set(g, "TSource.width=1", &err) == SD_ERR_INVALID && strstr(err.msg, "2 nodes"));

    sd_error_clear(&err);
    CHECK(sd_graph_apply_set(g, "42.width=1", &err) == SD_ERR_NOT_FOUND);
    CHECK(strcmp(err.node_id, "42") == 0);
    sd_error_clear(&err);
    CHECK(sd_graph_apply_set(g, "1.widht=1", &err) == SD_ERR_INVALID);
    CHECK(strstr(err.msg, "widht") && strstr(err.msg, "width"));
    CHECK(sd_graph_apply_set(g, "1width=3", &err) == SD_ERR_INVALID);
    CHECK(sd_graph_apply_set(g, "1.width", &err) == SD_ERR_INVALID);
    sd_graph_free(g);
}

/* Seeds up to 2^64-1: kept as the int64 with the same bits (json_util.h),
 * printed and range-checked as unsigned; negative or past 2^64-1 rejected by
 * name; an ordinary INT input never wraps. */
static void test_u64_seed(void) {
    sd_graph *g = parse("{\"1\": {\"class_type\": \"TSeeded\", \"inputs\": {\"seed\": 18446744073709551615, \"count\": 1}},"
                        " \"2\": {\"class_type\": \"TSeeded\", \"inputs\": {\"seed\": 9223372036854775808, \"count\": 1}}}");
    if (!g) return;
    const sd_value *s1 = sd_graph_node_input(sd_graph_find(g, "1"), "seed")->literal;
    const sd_value *s2 = sd_graph_node_input(sd_graph_find(g, "2"), "seed")->literal;
    CHECK(sd_value_kind_of(s1) == SD_VAL_INT && (uint64_t)sd_value_as_int(s1) == UINT64_MAX);
    CHECK(sd_value_kind_of(s2) == SD_VAL_INT && (uint64_t)sd_value_as_int(s2) == (1ull << 63));
    sd_graph_problems probs = {0};
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_validate(g, NULL, &probs, &err), &err);
    sd_graph_problems_free(&probs);
    char *js = sd_graph_to_json(g, 0);
    CHECK(js && strstr(js, "\"seed\":18446744073709551615") && strstr(js, "\"seed\":9223372036854775808"));
    sd_graph *back = js ? parse(js) : NULL;
    CHECK(back && (uint64_t)sd_value_as_int(sd_graph_node_input(sd_graph_find(back, "1"), "seed")->literal) == UINT64_MAX);
    sd_graph_free(back);
    free(js);
    /* --set keeps every digit too */
    CHECK_OK(sd_graph_apply_set(g, "2.seed=18446744073709551614", &err), &err);
    CHECK((uint64_t)sd_value_as_int(sd_graph_node_input(sd_graph_find(g, "2"), "seed")->literal) == UINT64_MAX - 1);
    /* out of range, negative, and a big value on an ordinary INT input */
    CHECK_OK(sd_graph_apply_set(g, "1.seed=18446744073709551616", &err), &err);
    CHECK_OK(sd_graph_apply_set(g, "2.seed=-1", &err), &err);
    CHECK_OK(sd_graph_apply_set(g, "2.count=9223372036854775808", &err), &err);
    CHECK(sd_graph_validate(g, NULL, &probs, &err) == SD_ERR_VALIDATION);
    const sd_graph_problem *q = find_problem(&probs, "value_bigger_than_max", "1", "seed");
    CHECK(q && strstr(q->message, "18446744073709551616") && strstr(q->message, "max of 18446744073709551615"));
    CHECK(find_problem(&probs, "value_smaller_than_min", "2", "seed") != NULL);
    CHECK(find_problem(&probs, "invalid_input_type", "2", "count") != NULL);
    CHECK(probs.n == 3);
    sd_graph_problems_free(&probs);
    sd_graph_free(g);
}

/* The ±sys.maxsize range is exact (not an unsigned seed); a "*" input takes
 * a literal of any kind, as ComfyUI's any type does. */
static void test_maxsize_and_any(void) {
    sd_graph *g = parse("{\"1\": {\"class_type\": \"TMaxsize\", \"inputs\": {\"value\": 9223372036854775807}},"
                        " \"2\": {\"class_type\": \"TMaxsize\", \"inputs\": {\"value\": -9223372036854775807}},"
                        " \"3\": {\"class_type\": \"TSink\", \"inputs\": {\"anything\": \"text\"}},"
                        " \"4\": {\"class_type\": \"TSink\", \"inputs\": {\"anything\": 2.5}}}");
    if (!g) return;
    CHECK(sd_value_as_int(sd_graph_node_input(sd_graph_find(g, "1"), "value")->literal) == INT64_MAX);
    sd_graph_problems probs = {0};
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_validate(g, NULL, &probs, &err), &err);
    sd_graph_problems_free(&probs);
    CHECK_OK(sd_graph_apply_set(g, "2.value=-9223372036854775808", &err), &err);
    CHECK(sd_graph_validate(g, NULL, &probs, &err) == SD_ERR_VALIDATION);
    CHECK(find_problem(&probs, "value_smaller_than_min", "2", "value") != NULL && probs.n == 1);
    sd_graph_problems_free(&probs);
    sd_graph_free(g);
    const sd_node_def *d = sd_registry_find("TMaxsize");
    CHECK(d && sd_input_has_control_after_generate(&d->inputs[0]));
}

static void test_validate(void) {
    sd_env env;
    sd_error err;
    CHECK_OK(sd_env_init(&env, &err), &err);
    /* Good graph: every required input given, an optional link absent, an
     * unknown extra input ignored. */
    sd_graph *g = parse("{\"1\": {\"class_type\": \"TSource\", \"inputs\": {\"width\": 64, \"label\": \"x\", \"extra\": 5}},"
                        " \"2\": {\"class_type\": \"TFilter\", \"inputs\": {\"samples\": [\"1\", 0],"
                        "        \"sampler\": \"ddim\", \"cfg\": 7, \"flag\": false, \"mask\": null}},"
                        " \"3\": {\"class_type\": \"TSink\", \"inputs\": {\"anything\": [\"2\", 0]}}}");
    sd_graph_problems p = {0};
    sd_error_clear(&err);
    CHECK_OK(sd_graph_validate(g, &env, &p, &err), &err);
    CHECK(p.n == 0);
    sd_graph_free(g);

    /* Every kind of problem at once. */
    g = parse("{\"1\": {\"class_type\": \"TSource\", \"inputs\": {\"width\": 8}},"
              " \"2\": {\"class_type\": \"TFilter\", \"inputs\": {\"samples\": [\"1\", 1], \"cfg\": \"7\","
              "        \"sampler\": \"heun\", \"flag\": 1, \"mask\": [\"99\", 0]}},"
              " \"3\": {\"class_type\": \"TFilter\", \"inputs\": {\"samples\": [\"1\", 5], \"cfg\": 101,"
              "        \"sampler\": \"euler\"}},"
              " \"4\": {\"class_type\": \"NoSuchNode\", \"inputs\": {}},"
              " \"5\": {\"class_type\": \"TSource\", \"inputs\": {\"width\": 64.5, \"label\": 3}},"
              " \"6\": {\"class_type\": \"TFilter\", \"inputs\": {\"samples\": [\"7\", 0], \"sampler\": \"euler\"}},"
              " \"7\": {\"class_type\": \"TFilter\", \"inputs\": {\"samples\": [\"6\", 0], \"sampler\": \"euler\"}},"
              " \"8\": {\"class_type\": \"TFilter\", \"inputs\": {\"samples\": 5, \"sampler\": \"euler\"}}}");
    sd_error_clear(&err);
    CHECK(sd_graph_validate(g, &env, &p, &err) == SD_ERR_VALIDATION);
    CHECK(err.code == SD_ERR_VALIDATION && err.node_id[0]);
    CHECK(find_problem(&p, "value_smaller_than_min", "1", "width"));
    CHECK(find_problem(&p, "required_input_missing", "1", "label"));
    /* a literal with a default is required all the same, as ComfyUI has it */
    CHECK(find_problem(&p, "required_input_missing", "3", "flag"));
    CHECK(!find_problem(&p, "required_input_missing", "2", "flag"));
    CHECK(find_problem(&p, "return_type_mismatch", "2", "samples"));
    CHECK(find_problem(&p, "invalid_input_type", "2", "cfg")); /* numeric string */
    CHECK(find_problem(&p, "value_not_in_list", "2", "sampler"));
    CHECK(find_problem(&p, "invalid_input_type", "2", "flag"));
    CHECK(find_problem(&p, "bad_linked_input", "2", "mask"));
    CHECK(find_problem(&p, "bad_linked_input", "3", "samples"));
    CHECK(find_problem(&p, "value_bigger_than_max", "3", "cfg"));
    CHECK(find_problem(&p, "invalid_prompt", "4", NULL));
    CHECK(find_problem(&p, "invalid_input_type", "5", "width")); /* 64.5 is not integral */
    CHECK(find_problem(&p, "invalid_input_type", "5", "label"));
    CHECK(find_problem(&p, "dependency_cycle", NULL, "samples"));
    CHECK(find_problem(&p, "invalid_input_type", "8", "samples")); /* literal for a link type */
    CHECK(find_problem(&p, "prompt_no_outputs", NULL, NULL));
    const sd_graph_problem *q = find_problem(&p, "required_input_missing", "1", "label");
    CHECK(q && q->class_type && strcmp(q->class_type, "TSource") == 0);
    const sd_graph_problem *cyc = find_problem(&p, "dependency_cycle", NULL, NULL);
    CHECK(cyc && strstr(cyc->message, "6") && strstr(cyc->message, "7"));
    /* One cycle reported once. */
    size_t n_cycles = 0;
    for (size_t i = 0; i < p.n; i++) n_cycles += strcmp(p.items[i].kind, "dependency_cycle") == 0;
    CHECK(n_cycles == 1);
    sd_graph_problems_free(&p);
    sd_graph_free(g);

    /* Nodes with an origin (built by a script) say where they were defined. */
    g = parse("{\"1\": {\"class_type\": \"TSource\", \"inputs\": {\"width\": 64, \"label\": 5}},"
              " \"2\": {\"class_type\": \"TSink\", \"inputs\": {\"anything\": [\"1\", 1]}}}");
    sd_graph_node_set_origin(sd_graph_find(g, "1"), "wf.lua:12");
    sd_error_clear(&err);
    CHECK(sd_graph_validate(g, &env, &p, &err) == SD_ERR_VALIDATION);
    CHECK(p.n == 1 && strstr(p.items[0].message, "wf.lua:12"));
    sd_graph_problems_free(&p);
    sd_graph_free(g);

    /* Integral floats are fine for INT inputs. */
    g = parse("{\"1\": {\"class_type\": \"TSource\", \"inputs\": {\"width\": 64.0, \"label\": \"\"}},"
              " \"2\": {\"class_type\": \"TSink\", \"inputs\": {\"anything\": [\"1\", 1]}}}");
    sd_error_clear(&err);
    CHECK_OK(sd_graph_validate(g, &env, NULL, &err), &err);
    sd_graph_free(g);
    sd_env_cleanup(&env);
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_registry_add(table, &err), &err);
    test_parse();
    test_parse_errors();
    test_ops();
    test_set();
    test_validate();
    test_u64_seed();
    test_maxsize_and_any();
    sd_registry_reset();
    return sd_test_finish();
}
