/* libFuzzer target: UI-format workflows (formats/workflow_ui.h). The fuzz
 * build has no node packs, so stand-ins shaped like ComfyUI's core nodes
 * (widget order, seeds, an upload combo, optional inputs) are registered
 * first; a conversion that succeeds must print, and its API form must go
 * through sd_graph_from_json without crashing. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"
#include "core/json_util.h"
#include "core/node.h"
#include "formats/workflow_ui.h"

static sd_status noop(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx, (void)in, (void)out, (void)err;
    return SD_OK;
}

static const char *const names[] = {"euler", "normal", "a.safetensors", NULL};
static const sd_input_def ks_in[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "seed", .type = SD_T_INT, .max = 18446744073709551615.0, .has_range = 1},
    {.name = "steps", .type = SD_T_INT, .def = 20},
    {.name = "cfg", .type = SD_T_FLOAT, .def = 8},
    {.name = "sampler_name", .type = SD_T_COMBO, .options = names},
    {.name = "scheduler", .type = SD_T_COMBO, .options = names},
    {.name = "positive", .type = "CONDITIONING"},
    {.name = "negative", .type = "CONDITIONING"},
    {.name = "latent_image", .type = "LATENT"},
    {.name = "denoise", .type = SD_T_FLOAT, .def = 1},
    {NULL}};
static const sd_output_def latent_out[] = {{"LATENT", "LATENT"}, {NULL}};
static const sd_input_def ck_in[] = {{.name = "ckpt_name", .type = SD_T_COMBO, .options = names}, {NULL}};
static const sd_output_def ck_out[] = {{"MODEL", "MODEL"}, {"CLIP", "CLIP"}, {"VAE", "VAE"}, {NULL}};
static const sd_input_def te_in[] = {{.name = "text", .type = SD_T_STRING}, {.name = "clip", .type = "CLIP"}, {NULL}};
static const sd_output_def te_out[] = {{"CONDITIONING", "CONDITIONING"}, {NULL}};
static const sd_input_def el_in[] = {{.name = "width", .type = SD_T_INT}, {.name = "height", .type = SD_T_INT},
                                     {.name = "batch_size", .type = SD_T_INT}, {NULL}};
static const sd_input_def vd_in[] = {{.name = "samples", .type = "LATENT"}, {.name = "vae", .type = "VAE"}, {NULL}};
static const sd_output_def image_out[] = {{"IMAGE", "IMAGE"}, {"MASK", "MASK"}, {NULL}};
static const sd_input_def save_in[] = {{.name = "images", .type = "IMAGE"},
                                       {.name = "filename_prefix", .type = SD_T_STRING}, {NULL}};
static const sd_input_def li_in[] = {{.name = "image", .type = SD_T_COMBO, .options = names, .image_upload = 1},
                                     {.name = "mask", .type = "MASK", .optional = 1},
                                     {.name = "flag", .type = SD_T_BOOLEAN, .optional = 1}, {NULL}};

static const sd_node_def defs[] = {
    {1, "KSampler", "KSampler", "t", "", ks_in, latent_out, 0, noop},
    {1, "CheckpointLoaderSimple", "Load Checkpoint", "t", "", ck_in, ck_out, 0, noop},
    {1, "CLIPTextEncode", "CLIP Text Encode (Prompt)", "t", "", te_in, te_out, 0, noop},
    {1, "EmptyLatentImage", "Empty Latent Image", "t", "", el_in, latent_out, 0, noop},
    {1, "VAEDecode", "VAE Decode", "t", "", vd_in, image_out, 0, noop},
    {1, "SaveImage", "Save Image", "t", "", save_in, NULL, SD_NODE_OUTPUT, noop},
    {1, "LoadImage", "Load Image", "t", "", li_in, image_out, 0, noop},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int registered;
    if (!registered) {
        static const sd_node_def *table[sizeof defs / sizeof defs[0] + 1];
        for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) table[i] = &defs[i];
        if (sd_registry_add(table, NULL) != SD_OK) abort();
        registered = 1;
    }
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    cJSON *root = NULL, *api = NULL;
    sd_error err;
    if (sd_json_parse_exact(text, "fuzz.json", &root, &err) == SD_OK &&
        sd_workflow_ui_to_api(root, "fuzz.json", &api, &err) == SD_OK) {
        char *s = sd_json_print(api, 0);
        if (!s) abort();
        sd_graph *g = NULL;
        if (sd_graph_from_json(s, "fuzz-api.json", &g, &err) == SD_OK) sd_graph_free(g);
        free(s);
    }
    cJSON_Delete(api);
    cJSON_Delete(root);
    free(text);
    return 0;
}
