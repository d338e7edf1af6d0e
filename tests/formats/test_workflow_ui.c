/* test_workflow_ui.c - UI-format workflows converted to the API form
 * (formats/workflow_ui.h): widget order with control_after_generate and the
 * upload button, converted widgets, reroutes, primitives, muted and
 * bypassed nodes, notes, subgraphs, links as objects, output order, big
 * seeds, and the errors that name node, title and widget.
 *
 * JSON in this file is written with ' for " (q() swaps them) to stay legible. */
#include <stdlib.h>
#include <string.h>
#include "core/graph.h"
#include "core/json_util.h"
#include "core/node.h"
#include "formats/workflow_ui.h"
#include "testutil.h"

/* ---- test-only node types, shaped like ComfyUI's ------------------------------ */

static sd_status noop(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return SD_OK;
}

static const char *const ckpts[] = {"a.safetensors", "b.safetensors", NULL};
static const char *const samplers[] = {"euler", "ddim", NULL};
static const char *const channels[] = {"alpha", "red", NULL};

static const sd_input_def loader_in[] = {{.name = "ckpt_name", .type = SD_T_COMBO, .options = ckpts}, {NULL}};
static const sd_output_def loader_out[] = {{"MODEL", "MODEL"}, {"CLIP", "CLIP"}, {"VAE", "VAE"}, {NULL}};
static const sd_node_def t_loader = {1, "TLoader", "Load Thing", "test", "", loader_in, loader_out, 0, noop};

static const sd_input_def encode_in[] = {{.name = "text", .type = SD_T_STRING, .multiline = 1},
                                         {.name = "clip", .type = "CLIP"}, {NULL}};
static const sd_output_def encode_out[] = {{"CONDITIONING", "CONDITIONING"}, {NULL}};
static const sd_node_def t_encode = {1, "TEncode", "Encode Text", "test", "", encode_in, encode_out, 0, noop};

static const sd_input_def latent_in[] = {
    {.name = "width", .type = SD_T_INT, .def = 512, .min = 16, .max = 4096, .step = 8, .has_range = 1},
    {.name = "height", .type = SD_T_INT, .def = 512, .min = 16, .max = 4096, .step = 8, .has_range = 1},
    {NULL}};
static const sd_output_def latent_out[] = {{"LATENT", "LATENT"}, {NULL}};
static const sd_node_def t_latent = {1, "TLatent", "Empty Thing", "test", "", latent_in, latent_out, 0, noop};

static const sd_input_def sampler_in[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "seed", .type = SD_T_INT, .def = 0, .min = 0, .max = 18446744073709551615.0, .step = 1, .has_range = 1},
    {.name = "steps", .type = SD_T_INT, .def = 20, .min = 1, .max = 10000, .has_range = 1},
    {.name = "cfg", .type = SD_T_FLOAT, .def = 8, .min = 0, .max = 100, .has_range = 1},
    {.name = "sampler_name", .type = SD_T_COMBO, .options = samplers},
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "latent_image", .type = "LATENT"},
    {.name = "denoise", .type = SD_T_FLOAT, .def = 1, .min = 0, .max = 1, .has_range = 1},
    {.name = "mask", .type = "MASK", .optional = 1},
    {.name = "extra", .type = SD_T_INT, .def = 3, .optional = 1},
    {NULL}};
static const sd_node_def t_sampler = {1, "TSampler", "Sample Thing", "test", "", sampler_in, latent_out, 0, noop};

static const sd_input_def op_in[] = {{.name = "samples", .type = "LATENT"},
                                     {.name = "scale", .type = SD_T_FLOAT, .def = 1.5}, {NULL}};
static const sd_node_def t_op = {1, "TLatentOp", "Latent Op", "test", "", op_in, latent_out, 0, noop};

static const sd_input_def image_in[] = {
    {.name = "image", .type = SD_T_COMBO, .options = ckpts, .image_upload = 1},
    {.name = "channel", .type = SD_T_COMBO, .options = channels}, {NULL}};
static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {"MASK", "MASK"}, {NULL}};
static const sd_node_def t_image = {1, "TLoadImage", "Load Picture", "test", "", image_in, image_out, 0, noop};

static const sd_input_def save_in[] = {{.name = "images", .type = "IMAGE"},
                                       {.name = "filename_prefix", .type = SD_T_STRING, .def_str = "T"}, {NULL}};
static const sd_node_def t_save = {1, "TSave", "Save Thing", "test", "", save_in, NULL, SD_NODE_OUTPUT, noop};

static const sd_input_def int_in[] = {{.name = "value", .type = SD_T_INT, .def = 0}, {NULL}};
static const sd_output_def int_out[] = {{"INT", "INT"}, {NULL}};
static const sd_node_def t_int = {1, "TInt", "Int", "test", "", int_in, int_out, 0, noop};

static const sd_node_def *const table[] = {&t_loader, &t_encode, &t_latent, &t_sampler, &t_op,
                                           &t_image, &t_save, &t_int, NULL};

/* ---- helpers -------------------------------------------------------------------- */

/* The text with ' turned into " (malloc'd). */
static char *q(const char *s) {
    char *t = strdup(s);
    for (char *p = t; *p; p++)
        if (*p == '\'') *p = '"';
    return t;
}

/* Convert `ui`, then check it serializes exactly as `api` (both in q form)
 * parsed as an API workflow: same nodes, order, inputs, order of inputs. */
static void expect_api(const char *what, const char *ui, const char *api) {
    char *u = q(ui), *a = q(api);
    sd_graph *gu = NULL, *ga = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_from_json(u, what, &gu, &err), &err);
    CHECK_OK(sd_graph_from_json(a, "expected", &ga, &err), &err);
    if (gu && ga) {
        /* titles are compared where the expected form gives them */
        for (size_t i = 0; i < sd_graph_count(ga); i++) {
            sd_graph_node *n = sd_graph_find(gu, sd_graph_at(ga, i)->id);
            if (n && !sd_graph_at(ga, i)->title) sd_graph_node_set_title(n, NULL);
        }
        char *su = sd_graph_to_json(gu, 0), *sa = sd_graph_to_json(ga, 0);
        CHECK_MSG(su && sa && strcmp(su, sa) == 0, "%s:\n  got      %s\n  expected %s", what, su, sa);
        free(su);
        free(sa);
    }
    sd_graph_free(gu);
    sd_graph_free(ga);
    free(u);
    free(a);
}

/* Convert `ui` expecting failure `code`; err must name node, class and
 * input (input may be NULL = empty) and contain `needle`. */
static void expect_error(const char *what, const char *ui, sd_status code, const char *node, const char *cls,
                         const char *input, const char *needle) {
    char *u = q(ui);
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    sd_status rc = sd_graph_from_json(u, what, &g, &err);
    CHECK_MSG(rc == code && !g, "%s: status %d, expected %d (%s)", what, rc, code, err.msg);
    CHECK_MSG(!node || !strcmp(err.node_id, node), "%s: node '%s', expected '%s'", what, err.node_id, node);
    CHECK_MSG(!cls || !strcmp(err.class_type, cls), "%s: class '%s', expected '%s'", what, err.class_type, cls);
    CHECK_MSG(!strcmp(err.input, input ? input : ""), "%s: input '%s', expected '%s'", what, err.input,
              input ? input : "");
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", what, needle, err.msg);
    CHECK_MSG(strstr(err.msg, what) != NULL, "%s: message lacks the source name: %s", what, err.msg);
    sd_graph_free(g);
    free(u);
}

/* A txt2img-shaped graph as the editor saves it: nodes out of id order,
 * the default graph's legacy `true` for control_after_generate, a title
 * kept, a changed title, a node without widgets_values (defaults), an
 * optional link input left unconnected, a Note and a group. */
static const char *BASE =
    "{'last_node_id': 10, 'last_link_id': 7, 'nodes': ["
    " {'id': 10, 'type': 'TSampler', 'pos': [863, 186], 'size': [315, 262], 'flags': {}, 'order': 3, 'mode': 0,"
    "  'inputs': [{'name': 'model', 'type': 'MODEL', 'link': 1}, {'name': 'positive', 'type': 'CONDITIONING', 'link': 4},"
    "   {'name': 'latent_image', 'type': 'LATENT', 'link': 2}, {'name': 'mask', 'type': 'MASK', 'shape': 7, 'link': null}],"
    "  'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [7], 'slot_index': 0}],"
    "  'properties': {'Node name for S&R': 'TSampler'}, 'widgets_values': [156680208700286, true, 20, 8, 'euler', 1, 3]},"
    " {'id': 6, 'type': 'TEncode', 'title': 'Positive', 'pos': [415, 186], 'mode': 0,"
    "  'inputs': [{'name': 'clip', 'type': 'CLIP', 'link': 3}],"
    "  'outputs': [{'name': 'CONDITIONING', 'type': 'CONDITIONING', 'links': [4], 'slot_index': 0}],"
    "  'properties': {}, 'widgets_values': ['a photo of a cat']},"
    " {'id': 5, 'type': 'TLatent', 'pos': [473, 609], 'mode': 0,"
    "  'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [2], 'slot_index': 0}],"
    "  'properties': {}, 'widgets_values': [64, 64]},"
    " {'id': 9, 'type': 'TSave', 'pos': [1451, 189], 'mode': 0,"
    "  'inputs': [{'name': 'images', 'type': 'IMAGE', 'link': 7}], 'properties': {}},"
    " {'id': 4, 'type': 'TLoader', 'title': 'Load Thing', 'pos': [26, 474], 'mode': 0,"
    "  'outputs': [{'name': 'MODEL', 'type': 'MODEL', 'links': [1], 'slot_index': 0},"
    "   {'name': 'CLIP', 'type': 'CLIP', 'links': [3], 'slot_index': 1}, {'name': 'VAE', 'type': 'VAE', 'links': null}],"
    "  'properties': {}, 'widgets_values': ['b.safetensors']},"
    " {'id': 11, 'type': 'Note', 'pos': [0, 0], 'mode': 0, 'properties': {}, 'widgets_values': ['remember']}"
    "], 'links': [[1, 4, 0, 10, 0, 'MODEL'], [2, 5, 0, 10, 2, 'LATENT'], [3, 4, 1, 6, 0, 'CLIP'],"
    " [4, 6, 0, 10, 1, 'CONDITIONING'], [7, 10, 0, 9, 0, 'IMAGE']],"
    " 'groups': [{'title': 'All', 'bounding': [0, 0, 100, 100]}], 'config': {},"
    " 'extra': {'ds': {'scale': 1, 'offset': [0, 0]}}, 'version': 0.4}";

static const char *BASE_API =
    "{'4': {'inputs': {'ckpt_name': 'b.safetensors'}, 'class_type': 'TLoader', '_meta': {'title': 'Load Thing'}},"
    " '5': {'inputs': {'width': 64, 'height': 64}, 'class_type': 'TLatent', '_meta': {'title': 'Empty Thing'}},"
    " '6': {'inputs': {'text': 'a photo of a cat', 'clip': ['4', 1]}, 'class_type': 'TEncode', '_meta': {'title': 'Positive'}},"
    " '9': {'inputs': {'filename_prefix': 'T', 'images': ['10', 0]}, 'class_type': 'TSave', '_meta': {'title': 'Save Thing'}},"
    " '10': {'inputs': {'seed': 156680208700286, 'steps': 20, 'cfg': 8, 'sampler_name': 'euler', 'denoise': 1,"
    "   'extra': 3, 'model': ['4', 0], 'positive': ['6', 0], 'latent_image': ['5', 0]},"
    "   'class_type': 'TSampler', '_meta': {'title': 'Sample Thing'}}}";

static void test_base(void) {
    expect_api("base.json", BASE, BASE_API);
    /* version 1: links as objects (the schema-1 form and subgraph definitions) */
    char *v1 = strdup(BASE);
    char *at = strstr(v1, "'links': [[");
    CHECK(at != NULL);
    if (at) {
        const char *objs =
            "'links': [{'id': 1, 'origin_id': 4, 'origin_slot': 0, 'target_id': 10, 'target_slot': 0, 'type': 'MODEL'},"
            " {'id': 2, 'origin_id': 5, 'origin_slot': 0, 'target_id': 10, 'target_slot': 2, 'type': 'LATENT'},"
            " {'id': 3, 'origin_id': 4, 'origin_slot': 1, 'target_id': 6, 'target_slot': 0, 'type': 'CLIP'},"
            " {'id': 4, 'origin_id': 6, 'origin_slot': 0, 'target_id': 10, 'target_slot': 1, 'type': 'CONDITIONING'},"
            " {'id': 7, 'origin_id': 10, 'origin_slot': 0, 'target_id': 9, 'target_slot': 0, 'type': 'IMAGE'}],";
        const char *rest = strstr(at, "]],") + 3;
        size_t n = (size_t)(at - v1);
        char *s = malloc(n + strlen(objs) + strlen(rest) + 1);
        memcpy(s, v1, n);
        strcpy(s + n, objs);
        strcat(s, rest);
        expect_api("links-v1.json", s, BASE_API);
        free(s);
    }
    free(v1);
}

/* LoadImage-like: the upload button's value follows the required widgets;
 * widgets saved by name (an object) need no positions. */
static void test_upload_and_named(void) {
    const char *ui =
        "{'nodes': [{'id': 1, 'type': 'TLoadImage', 'mode': 0, 'outputs': [{'name': 'IMAGE', 'type': 'IMAGE', 'links': [1]}],"
        "  'widgets_values': ['a.safetensors', 'red', 'image']},"
        " {'id': 2, 'type': 'TSave', 'mode': 0, 'inputs': [{'name': 'images', 'type': 'IMAGE', 'link': 1}],"
        "  'widgets_values': {'filename_prefix': 'named'}}],"
        " 'links': [[1, 1, 0, 2, 0, 'IMAGE']], 'version': 0.4}";
    expect_api("upload.json", ui,
               "{'1': {'inputs': {'image': 'a.safetensors', 'channel': 'red'}, 'class_type': 'TLoadImage'},"
               " '2': {'inputs': {'filename_prefix': 'named', 'images': ['1', 0]}, 'class_type': 'TSave'}}");
}

/* An old save whose widgets_values is missing or short: the frontend gives
 * every widget without a saved value its default (the input's default, else
 * 0, "" or the first fixed choice), so the conversion does too, and the
 * result is a complete prompt; a widget fed by a link gets no value. */
static void test_missing_widgets(void) {
    const char *ui =
        "{'nodes': ["
        " {'id': 1, 'type': 'TLoader', 'mode': 0, 'outputs': [{'name': 'MODEL', 'type': 'MODEL', 'links': [1]},"
        "   {'name': 'CLIP', 'type': 'CLIP', 'links': [2]}]},"
        " {'id': 2, 'type': 'TEncode', 'mode': 0, 'inputs': [{'name': 'clip', 'type': 'CLIP', 'link': 2}],"
        "  'outputs': [{'name': 'CONDITIONING', 'type': 'CONDITIONING', 'links': [3]}], 'widgets_values': []},"
        " {'id': 3, 'type': 'TLatent', 'mode': 0, 'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [4]}],"
        "  'widgets_values': [128]},"
        " {'id': 4, 'type': 'TSampler', 'mode': 0,"
        "  'inputs': [{'name': 'model', 'type': 'MODEL', 'link': 1}, {'name': 'positive', 'type': 'CONDITIONING', 'link': 3},"
        "   {'name': 'latent_image', 'type': 'LATENT', 'link': 4}],"
        "  'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [5]}], 'widgets_values': [7, 'fixed', 30]},"
        " {'id': 5, 'type': 'TInt', 'mode': 0, 'outputs': [{'name': 'INT', 'type': 'INT', 'links': []}]},"
        " {'id': 6, 'type': 'TLatentOp', 'mode': 0, 'inputs': [{'name': 'samples', 'type': 'LATENT', 'link': 5},"
        "   {'name': 'scale', 'type': 'FLOAT', 'widget': {'name': 'scale'}, 'link': 6}]},"
        " {'id': 7, 'type': 'TLatentOp', 'mode': 0, 'inputs': [{'name': 'samples', 'type': 'LATENT', 'link': 7}]}"
        "], 'links': [[1, 1, 0, 4, 0, 'MODEL'], [2, 1, 1, 2, 0, 'CLIP'], [3, 2, 0, 4, 1, 'CONDITIONING'],"
        " [4, 3, 0, 4, 2, 'LATENT'], [5, 4, 0, 6, 0, 'LATENT'], [6, 5, 0, 6, 1, 'INT'], [7, 6, 0, 7, 0, 'LATENT']],"
        " 'version': 0.4}";
    expect_api("missing-widgets.json", ui,
               "{'1': {'inputs': {'ckpt_name': 'a.safetensors'}, 'class_type': 'TLoader'},"
               " '2': {'inputs': {'text': '', 'clip': ['1', 1]}, 'class_type': 'TEncode'},"
               " '3': {'inputs': {'width': 128, 'height': 512}, 'class_type': 'TLatent'},"
               " '4': {'inputs': {'seed': 7, 'steps': 30, 'cfg': 8, 'sampler_name': 'euler', 'denoise': 1, 'extra': 3,"
               "   'model': ['1', 0], 'positive': ['2', 0], 'latent_image': ['3', 0]}, 'class_type': 'TSampler'},"
               " '5': {'inputs': {'value': 0}, 'class_type': 'TInt'},"
               " '6': {'inputs': {'samples': ['4', 0], 'scale': ['5', 0]}, 'class_type': 'TLatentOp'},"
               " '7': {'inputs': {'scale': 1.5, 'samples': ['6', 0]}, 'class_type': 'TLatentOp'}}");
}

/* Reroutes (two in a row), a PrimitiveNode through a reroute into a
 * converted widget, and a converted widget fed by a real node. */
static void test_reroute_primitive_converted(void) {
    const char *ui =
        "{'nodes': ["
        " {'id': 1, 'type': 'TLoader', 'mode': 0, 'outputs': [{'name': 'MODEL', 'type': 'MODEL', 'links': [1]},"
        "   {'name': 'CLIP', 'type': 'CLIP', 'links': [5]}], 'widgets_values': ['a.safetensors']},"
        " {'id': 2, 'type': 'Reroute', 'mode': 0, 'inputs': [{'name': '', 'type': '*', 'link': 1}],"
        "  'outputs': [{'name': '', 'type': 'MODEL', 'links': [2]}]},"
        " {'id': 3, 'type': 'Reroute', 'mode': 0, 'inputs': [{'name': '', 'type': '*', 'link': 2}],"
        "  'outputs': [{'name': '', 'type': 'MODEL', 'links': [3]}]},"
        " {'id': 4, 'type': 'PrimitiveNode', 'mode': 0, 'outputs': [{'name': 'INT', 'type': 'INT', 'links': [4],"
        "   'widget': {'name': 'steps'}}], 'widgets_values': [33, 'fixed']},"
        " {'id': 5, 'type': 'Reroute', 'mode': 0, 'inputs': [{'name': '', 'type': '*', 'link': 4}],"
        "  'outputs': [{'name': '', 'type': 'INT', 'links': [6]}]},"
        " {'id': 6, 'type': 'TInt', 'mode': 0, 'outputs': [{'name': 'INT', 'type': 'INT', 'links': [7]}], 'widgets_values': [7]},"
        " {'id': 7, 'type': 'TEncode', 'mode': 0, 'inputs': [{'name': 'clip', 'type': 'CLIP', 'link': 5}],"
        "  'outputs': [{'name': 'CONDITIONING', 'type': 'CONDITIONING', 'links': [8]}], 'widgets_values': ['x']},"
        " {'id': 8, 'type': 'TSampler', 'mode': 0, 'inputs': [{'name': 'model', 'type': 'MODEL', 'link': 3},"
        "   {'name': 'positive', 'type': 'CONDITIONING', 'link': 8}, {'name': 'latent_image', 'type': 'LATENT', 'link': null},"
        "   {'name': 'seed', 'type': 'INT', 'widget': {'name': 'seed'}, 'link': 7},"
        "   {'name': 'steps', 'type': 'INT', 'widget': {'name': 'steps'}, 'link': 6}],"
        "  'widgets_values': [1, 'randomize', 20, 7.5, 'ddim', 0.5, 3]}"
        "], 'links': [[1, 1, 0, 2, 0, 'MODEL'], [2, 2, 0, 3, 0, 'MODEL'], [3, 3, 0, 8, 0, 'MODEL'],"
        " [4, 4, 0, 5, 0, 'INT'], [6, 5, 0, 8, 4, 'INT'], [5, 1, 1, 7, 0, 'CLIP'], [7, 6, 0, 8, 3, 'INT'],"
        " [8, 7, 0, 8, 1, 'CONDITIONING']], 'version': 0.4}";
    expect_api("reroute.json", ui,
               "{'1': {'inputs': {'ckpt_name': 'a.safetensors'}, 'class_type': 'TLoader'},"
               " '6': {'inputs': {'value': 7}, 'class_type': 'TInt'},"
               " '7': {'inputs': {'text': 'x', 'clip': ['1', 1]}, 'class_type': 'TEncode'},"
               " '8': {'inputs': {'seed': ['6', 0], 'steps': 33, 'cfg': 7.5, 'sampler_name': 'ddim', 'denoise': 0.5,"
               "   'extra': 3, 'model': ['1', 0], 'positive': ['7', 0]}, 'class_type': 'TSampler'}}");
}

/* Muted nodes vanish with the links to them; a bypassed node passes the
 * input of the output's type (the same index first, then by type); a
 * bypassed node with no input of that type leaves the input unconnected. */
static void test_mute_bypass(void) {
    const char *ui =
        "{'nodes': ["
        " {'id': 1, 'type': 'TLatent', 'mode': 0, 'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [1, 3]}],"
        "  'widgets_values': [64, 64]},"
        " {'id': 2, 'type': 'TLatentOp', 'mode': 4, 'inputs': [{'name': 'samples', 'type': 'LATENT', 'link': 1}],"
        "  'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [2]}], 'widgets_values': [2.0]},"
        " {'id': 3, 'type': 'TLatentOp', 'mode': 2, 'inputs': [{'name': 'samples', 'type': 'LATENT', 'link': 3}],"
        "  'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [4]}], 'widgets_values': [2.0]},"
        " {'id': 4, 'type': 'TLoadImage', 'mode': 4, 'outputs': [{'name': 'IMAGE', 'type': 'IMAGE', 'links': [5]},"
        "   {'name': 'MASK', 'type': 'MASK', 'links': [6]}], 'widgets_values': ['a.safetensors', 'alpha', 'image']},"
        " {'id': 5, 'type': 'TSampler', 'mode': 0, 'inputs': [{'name': 'model', 'type': 'MODEL', 'link': null},"
        "   {'name': 'positive', 'type': 'CONDITIONING', 'link': null}, {'name': 'latent_image', 'type': 'LATENT', 'link': 2},"
        "   {'name': 'mask', 'type': 'MASK', 'link': 6}],"
        "  'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': []}], 'widgets_values': [1, 'fixed', 2, 3, 'euler', 1, 3]},"
        " {'id': 6, 'type': 'TSampler', 'mode': 0, 'inputs': [{'name': 'latent_image', 'type': 'LATENT', 'link': 4}],"
        "  'widgets_values': [1, 'increment', 2, 3, 'euler', 1, 3]},"
        " {'id': 7, 'type': 'TSave', 'mode': 2, 'inputs': [{'name': 'images', 'type': 'IMAGE', 'link': 5}]}"
        "], 'links': [[1, 1, 0, 2, 0, 'LATENT'], [2, 2, 0, 5, 2, 'LATENT'], [3, 1, 0, 3, 0, 'LATENT'],"
        " [4, 3, 0, 6, 0, 'LATENT'], [5, 4, 0, 7, 0, 'IMAGE'], [6, 4, 1, 5, 3, 'MASK']], 'version': 0.4}";
    expect_api("bypass.json", ui,
               "{'1': {'inputs': {'width': 64, 'height': 64}, 'class_type': 'TLatent'},"
               " '5': {'inputs': {'seed': 1, 'steps': 2, 'cfg': 3, 'sampler_name': 'euler', 'denoise': 1, 'extra': 3,"
               "   'latent_image': ['1', 0]}, 'class_type': 'TSampler'},"
               " '6': {'inputs': {'seed': 1, 'steps': 2, 'cfg': 3, 'sampler_name': 'euler', 'denoise': 1, 'extra': 3},"
               "   'class_type': 'TSampler'}}");

    /* bypass prefers the input at the output's index when both fit */
    const char *ui2 =
        "{'nodes': ["
        " {'id': 1, 'type': 'TLatent', 'mode': 0, 'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [1]}], 'widgets_values': [64, 64]},"
        " {'id': 2, 'type': 'TLatent', 'mode': 0, 'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [2]}], 'widgets_values': [32, 32]},"
        " {'id': 3, 'type': 'Custom2', 'mode': 4, 'inputs': [{'name': 'a', 'type': 'LATENT', 'link': 1},"
        "   {'name': 'b', 'type': 'LATENT', 'link': 2}],"
        "  'outputs': [{'name': 'A', 'type': 'LATENT', 'links': [3]}, {'name': 'B', 'type': 'LATENT', 'links': [4]}]},"
        " {'id': 4, 'type': 'TLatentOp', 'mode': 0, 'inputs': [{'name': 'samples', 'type': 'LATENT', 'link': 4}], 'widgets_values': [1.0]},"
        " {'id': 5, 'type': 'TLatentOp', 'mode': 0, 'inputs': [{'name': 'samples', 'type': 'LATENT', 'link': 3}], 'widgets_values': [2.0]}"
        "], 'links': [[1, 1, 0, 3, 0, 'LATENT'], [2, 2, 0, 3, 1, 'LATENT'], [3, 3, 0, 5, 0, 'LATENT'], [4, 3, 1, 4, 0, 'LATENT']]}";
    expect_api("bypass2.json", ui2,
               "{'1': {'inputs': {'width': 64, 'height': 64}, 'class_type': 'TLatent'},"
               " '2': {'inputs': {'width': 32, 'height': 32}, 'class_type': 'TLatent'},"
               " '4': {'inputs': {'scale': 1.0, 'samples': ['2', 0]}, 'class_type': 'TLatentOp'},"
               " '5': {'inputs': {'scale': 2.0, 'samples': ['1', 0]}, 'class_type': 'TLatentOp'}}");
}

/* A subgraph: the definition's inner sampler takes the outer loader's
 * model through subgraph input 0, an inner latent, and feeds subgraph
 * output 0 to the outer save; inner ids become "<outer>:<inner>" and follow
 * the integer ids. An unconnected subgraph input with a promoted widget
 * gives the subgraph node's widget value. */
static void test_subgraph(void) {
    const char *ui =
        "{'nodes': ["
        " {'id': 1, 'type': 'TLoader', 'mode': 0, 'outputs': [{'name': 'MODEL', 'type': 'MODEL', 'links': [1]}],"
        "  'widgets_values': ['a.safetensors']},"
        " {'id': 12, 'type': '5a1e0000-0000-4000-8000-000000000001', 'mode': 0,"
        "  'inputs': [{'name': 'model', 'type': 'MODEL', 'link': 1}, {'name': 'steps', 'type': 'INT', 'widget': {'name': 'steps'}, 'link': null}],"
        "  'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [2]}], 'widgets_values': [9]},"
        " {'id': 3, 'type': 'TLatentOp', 'mode': 0, 'inputs': [{'name': 'samples', 'type': 'LATENT', 'link': 2}], 'widgets_values': [1.0]}"
        "], 'links': [[1, 1, 0, 12, 0, 'MODEL'], [2, 12, 0, 3, 0, 'LATENT']], 'version': 0.4,"
        " 'definitions': {'subgraphs': [{'id': '5a1e0000-0000-4000-8000-000000000001', 'name': 'Sampling',"
        "  'inputNode': {'id': -10}, 'outputNode': {'id': -20},"
        "  'inputs': [{'name': 'model', 'type': 'MODEL', 'linkIds': [10]}, {'name': 'steps', 'type': 'INT', 'linkIds': [13]}],"
        "  'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'linkIds': [12]}],"
        "  'nodes': [{'id': 1, 'type': 'TLatent', 'mode': 0, 'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [11]}],"
        "     'widgets_values': [32, 32]},"
        "   {'id': 2, 'type': 'TSampler', 'mode': 0, 'inputs': [{'name': 'model', 'type': 'MODEL', 'link': 10},"
        "     {'name': 'latent_image', 'type': 'LATENT', 'link': 11}, {'name': 'steps', 'type': 'INT', 'widget': {'name': 'steps'}, 'link': 13}],"
        "    'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [12]}], 'widgets_values': [5, 'fixed', 20, 1, 'euler', 1, 3]}],"
        "  'links': [{'id': 10, 'origin_id': -10, 'origin_slot': 0, 'target_id': 2, 'target_slot': 0, 'type': 'MODEL'},"
        "   {'id': 11, 'origin_id': 1, 'origin_slot': 0, 'target_id': 2, 'target_slot': 1, 'type': 'LATENT'},"
        "   {'id': 13, 'origin_id': -10, 'origin_slot': 1, 'target_id': 2, 'target_slot': 2, 'type': 'INT'},"
        "   {'id': 12, 'origin_id': 2, 'origin_slot': 0, 'target_id': -20, 'target_slot': 0, 'type': 'LATENT'}]}]}}";
    expect_api("subgraph.json", ui,
               "{'1': {'inputs': {'ckpt_name': 'a.safetensors'}, 'class_type': 'TLoader'},"
               " '3': {'inputs': {'scale': 1.0, 'samples': ['12:2', 0]}, 'class_type': 'TLatentOp'},"
               " '12:1': {'inputs': {'width': 32, 'height': 32}, 'class_type': 'TLatent'},"
               " '12:2': {'inputs': {'seed': 5, 'steps': 9, 'cfg': 1, 'sampler_name': 'euler', 'denoise': 1, 'extra': 3,"
               "   'model': ['1', 0], 'latent_image': ['12:1', 0]}, 'class_type': 'TSampler'}}");
}

/* A subgraph bomb (issue 23): level k holds `fan` instances of level k+1,
 * the last level one TLatent; 7 levels of 10 expand to 10^7 nodes from a few
 * KB. Refused before expanding (SD_ERR_INVALID naming a subgraph and a count);
 * 4 levels of 10 (10^4 nodes) still convert. Also: a "nodes" that is not a
 * list is a malformed UI file, not an empty API workflow. */
static char *bomb(int levels, int fan) {
    size_t cap = 1 << 20, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "{\"nodes\": [");
    for (int i = 0; i < fan; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s{\"id\": %d, \"type\": \"sub-1\", \"mode\": 0}", i ? ", " : "", i + 1);
    n += (size_t)snprintf(s + n, cap - n, "], \"links\": [], \"definitions\": {\"subgraphs\": [");
    for (int l = 1; l <= levels; l++) {
        n += (size_t)snprintf(s + n, cap - n, "%s{\"id\": \"sub-%d\", \"inputs\": [], \"outputs\": [], \"links\": [], \"nodes\": [",
                              l > 1 ? ", " : "", l);
        if (l == levels) {
            n += (size_t)snprintf(s + n, cap - n, "{\"id\": 1, \"type\": \"TLatent\", \"mode\": 0, \"widgets_values\": [8, 8]}");
        } else {
            for (int i = 0; i < fan; i++)
                n += (size_t)snprintf(s + n, cap - n, "%s{\"id\": %d, \"type\": \"sub-%d\", \"mode\": 0}", i ? ", " : "", i + 1, l + 1);
        }
        n += (size_t)snprintf(s + n, cap - n, "]}");
    }
    snprintf(s + n, cap - n, "]}}");
    return s;
}

static void test_hostile(void) {
    sd_error err;
    sd_error_clear(&err);
    sd_graph *g = NULL;
    char *b = bomb(7, 10);
    sd_status rc = sd_graph_from_json(b, "bomb.json", &g, &err);
    CHECK_MSG(rc == SD_ERR_INVALID && !g && strstr(err.msg, "expand to more than") && strstr(err.msg, "subgraph sub-"),
              "a 10^7-node subgraph bomb is refused naming a subgraph: %d %s", rc, err.msg);
    printf("bomb (%zu bytes): %s\n", strlen(b), err.msg);
    sd_graph_free(g);
    free(b);
    b = bomb(4, 10); /* 10^4 nodes: fine */
    g = NULL;
    CHECK_OK(sd_graph_from_json(b, "ok.json", &g, &err), &err);
    CHECK(g && sd_graph_count(g) == 10000);
    sd_graph_free(g);
    free(b);
    /* nodes that is not a list */
    char *ui = q("{'nodes': {'1': {'id': 1, 'type': 'TLatent'}}, 'links': [], 'version': 0.4}");
    g = NULL;
    rc = sd_graph_from_json(ui, "objnodes.json", &g, &err);
    CHECK_MSG(rc == SD_ERR_FORMAT && !g && strstr(err.msg, "\"nodes\" is not a list"),
              "a UI file whose nodes is an object is refused: %d %s", rc, err.msg);
    sd_graph_free(g);
    free(ui);
}

/* Seeds beyond 2^53 (and 2^63) keep every digit through the conversion. */
static void test_big_seed(void) {
    char *ui = q("{'nodes': [{'id': 1, 'type': 'TSampler', 'mode': 0,"
                 " 'widgets_values': [18446744073709551615, 'fixed', 20, 8, 'euler', 1, 3]}], 'links': []}");
    sd_graph *g = NULL;
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_graph_from_json(ui, "seed.json", &g, &err), &err);
    sd_graph_input *in = g ? sd_graph_node_input(sd_graph_find(g, "1"), "seed") : NULL;
    CHECK(in && !in->is_link && sd_value_as_int(in->literal) == -1); /* 2^64-1 as its bit pattern */
    char *s = g ? sd_graph_to_json(g, 0) : NULL;
    CHECK(s && strstr(s, "18446744073709551615"));
    free(s);
    sd_graph_free(g);
    free(ui);
}

/* Unknown node types keep their links and named widget values; the
 * converted workflow then fails validation naming the type, not here. */
static void test_unknown_type(void) {
    expect_api("unknown.json",
               "{'nodes': [{'id': 1, 'type': 'TLatent', 'mode': 0, 'outputs': [{'name': 'LATENT', 'type': 'LATENT', 'links': [1]}],"
               "  'widgets_values': [64, 64]},"
               " {'id': 2, 'type': 'SomePackNode', 'mode': 0, 'inputs': [{'name': 'latent', 'type': 'LATENT', 'link': 1}],"
               "  'widgets_values': [1, 2, 3]},"
               " {'id': 3, 'type': 'OtherPackNode', 'mode': 0, 'widgets_values': {'strength': 0.5}}],"
               " 'links': [[1, 1, 0, 2, 0, 'LATENT']]}",
               "{'1': {'inputs': {'width': 64, 'height': 64}, 'class_type': 'TLatent'},"
               " '2': {'inputs': {'latent': ['1', 0]}, 'class_type': 'SomePackNode'},"
               " '3': {'inputs': {'strength': 0.5}, 'class_type': 'OtherPackNode'}}");
}

static void test_errors(void) {
    /* misaligned values: a text where steps (an INT) belongs */
    expect_error("shifted.json",
                 "{'nodes': [{'id': 7, 'type': 'TSampler', 'title': 'My Sampler', 'mode': 0,"
                 " 'widgets_values': [5, 'fixed', 'euler', 20, 8, 1, 3]}], 'links': []}",
                 SD_ERR_INVALID, "7", "TSampler", "steps", "My Sampler");
    expect_error("shifted2.json",
                 "{'nodes': [{'id': 7, 'type': 'TSampler', 'mode': 0, 'widgets_values': [5, 'fixed', 'euler', 20, 8, 1, 3]}],"
                 " 'links': []}", SD_ERR_INVALID, "7", "TSampler", "steps",
                 "seed, control_after_generate, steps, cfg, sampler_name, denoise, extra");
    /* no control_after_generate after the seed (a save from elsewhere) */
    expect_error("nocontrol.json",
                 "{'nodes': [{'id': 7, 'type': 'TSampler', 'mode': 0, 'widgets_values': [5, 20, 8, 'euler', 1, 3]}],"
                 " 'links': []}", SD_ERR_INVALID, "7", "TSampler", "seed", "control_after_generate");
    /* more values than widgets */
    expect_error("toomany.json",
                 "{'nodes': [{'id': 3, 'type': 'TLatent', 'mode': 0, 'widgets_values': [64, 64, 1, 'x']}], 'links': []}",
                 SD_ERR_INVALID, "3", "TLatent", NULL, "4 values but sdflow's TLatent has 2 widgets (width, height)");
    /* a link id that is not in the links table */
    expect_error("nolink.json",
                 "{'nodes': [{'id': 3, 'type': 'TLatentOp', 'mode': 0, 'inputs': [{'name': 'samples', 'type': 'LATENT',"
                 " 'link': 99}], 'widgets_values': [1.0]}], 'links': []}",
                 SD_ERR_FORMAT, "3", "TLatentOp", "samples", "link 99");
    /* a link from a node that does not exist */
    expect_error("noorigin.json",
                 "{'nodes': [{'id': 3, 'type': 'TLatentOp', 'mode': 0, 'inputs': [{'name': 'samples', 'type': 'LATENT',"
                 " 'link': 1}], 'widgets_values': [1.0]}], 'links': [[1, 42, 0, 3, 0, 'LATENT']]}",
                 SD_ERR_FORMAT, "3", "TLatentOp", "samples", "node 42");
    /* reroutes feeding each other: an error, not endless recursion */
    expect_error("loop.json",
                 "{'nodes': [{'id': 1, 'type': 'Reroute', 'mode': 0, 'inputs': [{'name': '', 'type': '*', 'link': 2}]},"
                 " {'id': 2, 'type': 'Reroute', 'mode': 0, 'inputs': [{'name': '', 'type': '*', 'link': 1}]},"
                 " {'id': 3, 'type': 'TLatentOp', 'mode': 0, 'inputs': [{'name': 'samples', 'type': 'LATENT', 'link': 3}],"
                 "  'widgets_values': [1.0]}],"
                 " 'links': [[1, 1, 0, 2, 0, '*'], [2, 2, 0, 1, 0, '*'], [3, 1, 0, 3, 0, 'LATENT']]}",
                 SD_ERR_FORMAT, NULL, NULL, NULL, "loop");
    /* a chain of 5,000 reroutes (no loop): refused at the hop limit, not a
     * stack overflow (fuzz.workflow_ui found the recursion 10,000 hops deep) */
    {
        enum { N = 5000 };
        char num[16];
        size_t cap = (size_t)N * 160 + 512, off = 0;
        char *ui = malloc(cap);
        CHECK(ui != NULL);
        if (ui) {
            off += (size_t)snprintf(ui + off, cap - off, "{'nodes': [");
            for (int i = 1; i <= N; i++)
                off += (size_t)snprintf(ui + off, cap - off,
                                        "{'id': %d, 'type': 'Reroute', 'mode': 0, 'inputs': [{'name': '', 'type': '*',"
                                        " 'link': %s}]},", i, i < N ? (snprintf(num, sizeof num, "%d", i + 1), num) : "null");
            off += (size_t)snprintf(ui + off, cap - off,
                                    "{'id': %d, 'type': 'TLatentOp', 'mode': 0, 'inputs': [{'name': 'samples',"
                                    " 'type': 'LATENT', 'link': 1}], 'widgets_values': [1.0]}], 'links': [",
                                    N + 1);
            /* link 1: reroute 1 -> the consumer; link k (k >= 2): reroute k -> reroute k-1 */
            off += (size_t)snprintf(ui + off, cap - off, "[1, 1, 0, %d, 0, 'LATENT']", N + 1);
            for (int k = 2; k <= N; k++)
                off += (size_t)snprintf(ui + off, cap - off, ", [%d, %d, 0, %d, 0, '*']", k, k, k - 1);
            snprintf(ui + off, cap - off, "]}");
            expect_error("chain.json", ui, SD_ERR_FORMAT, NULL, NULL, NULL, "hops");
            free(ui);
        }
    }
    /* a subgraph containing itself */
    expect_error("selfsub.json",
                 "{'nodes': [{'id': 1, 'type': 'abc', 'mode': 0}], 'links': [],"
                 " 'definitions': {'subgraphs': [{'id': 'abc', 'nodes': [{'id': 1, 'type': 'abc', 'mode': 0}], 'links': []}]}}",
                 SD_ERR_FORMAT, NULL, "abc", NULL, "nest deeper");
    expect_error("group.json",
                 "{'nodes': [{'id': 4, 'type': 'workflow>My Group', 'mode': 0}], 'links': []}",
                 SD_ERR_UNSUPPORTED, "4", "workflow>My Group", NULL, "group node");
    expect_error("dup.json", "{'nodes': [{'id': 4, 'type': 'TLatent'}, {'id': 4, 'type': 'TLatent'}], 'links': []}",
                 SD_ERR_FORMAT, NULL, NULL, NULL, "two nodes have the id 4");
    expect_error("notype.json", "{'nodes': [{'id': 4}], 'links': []}", SD_ERR_FORMAT, NULL, NULL, NULL,
                 "node 4 has no \"type\"");
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_registry_add(table, &err), &err);
    test_base();
    test_upload_and_named();
    test_missing_widgets();
    test_reroute_primitive_converted();
    test_mute_bypass();
    test_subgraph();
    test_big_seed();
    test_unknown_type();
    test_hostile();
    test_errors();
    sd_registry_reset();
    return sd_test_finish();
}
