/* test_node_suggest.c - hints for unknown node types (core/node_suggest.h):
 * the closest registered names, ComfyUI's own nodes that sdflow lacks, the
 * custom-node pack of well-known names, and the validation message that
 * carries the hint. */
#include <string.h>
#include "core/graph.h"
#include "core/node.h"
#include "core/node_suggest.h"
#include "testutil.h"

static sd_status noop(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    return SD_OK;
}

static const sd_node_def ks = {1, "KSampler", "KSampler", "t", "", NULL, NULL, 0, noop};
static const sd_node_def ksa = {1, "KSamplerAdvanced", "KSampler (Advanced)", "t", "", NULL, NULL, 0, noop};
static const sd_node_def vd = {1, "VAEDecode", "VAE Decode", "t", "", NULL, NULL, 0, noop};
static const sd_node_def ck = {1, "CheckpointLoaderSimple", "Load Checkpoint", "t", "", NULL, NULL, 0, noop};
static const sd_node_def save = {1, "SaveImage", "Save Image", "t", "", NULL, NULL, SD_NODE_OUTPUT, noop};
static const sd_node_def *const table[] = {&ks, &ksa, &vd, &ck, &save, NULL};

static void expect(const char *name, const char *want) {
    char buf[512];
    sd_node_suggest(name, buf, sizeof buf);
    CHECK_MSG(want ? !strcmp(buf, want) : !buf[0], "%s: '%s', expected '%s'", name, buf, want ? want : "");
}

int main(void) {
    sd_error err;
    sd_error_clear(&err);
    CHECK_OK(sd_registry_add(table, &err), &err);
    CHECK_OK(sd_registry_alias("LoadCheckpoint", "CheckpointLoaderSimple", &err), &err);

    /* typos: closest first, case ignored, aliases included */
    expect("KSamplr", "did you mean KSampler?");
    expect("ksampler", "did you mean KSampler or KSamplerAdvanced?"); /* the second contains it */
    expect("KSamplerAdvance", "did you mean KSamplerAdvanced or KSampler?");
    expect("LoadCheckpoints", "did you mean LoadCheckpoint?");
    expect("Frobnicate", NULL);
    expect("", NULL);
    /* ComfyUI's own nodes that sdflow lacks, with near names when there are */
    CHECK(sd_node_is_comfyui_core("UpscaleModelLoader") && sd_node_is_comfyui_core("KSampler"));
    CHECK(!sd_node_is_comfyui_core("FaceDetailer"));
    expect("UpscaleModelLoader", "it is a ComfyUI node that sdflow does not implement yet");
    expect("CheckpointLoader",
           "it is a ComfyUI node that sdflow does not implement yet; did you mean CheckpointLoaderSimple?");
    /* well-known custom-node packs */
    static const struct { const char *name, *pack; } packs[] = {
        {"FaceDetailer", "ComfyUI-Impact-Pack"},
        {"ImpactWildcardProcessor", "ComfyUI-Impact-Pack"},
        {"UltralyticsDetectorProvider", "ComfyUI-Impact-Subpack"},
        {"KSampler (Efficient)", "efficiency-nodes-comfyui (Efficiency Nodes)"},
        {"Text Concatenate", "was-node-suite-comfyui (WAS Node Suite)"},
        {"Power Lora Loader (rgthree)", "rgthree-comfy"},
        {"ImageResizeKJ", "ComfyUI-KJNodes"},
        {"CR Apply LoRA Stack", "ComfyUI_Comfyroll_CustomNodes"},
        {"ShowText|pysssss", "ComfyUI-Custom-Scripts (pysssss)"},
        {"DWPreprocessor", "comfyui_controlnet_aux"},
        {"IPAdapterUnifiedLoader", "ComfyUI_IPAdapter_plus"},
        {"VHS_VideoCombine", "ComfyUI-VideoHelperSuite"},
        {"UltimateSDUpscale", "ComfyUI_UltimateSDUpscale"},
        {"ImageResize+", "ComfyUI_essentials"},
        {"UnetLoaderGGUF", "ComfyUI-GGUF"},
        {"easy fullLoader", "ComfyUI-Easy-Use"},
    };
    for (size_t i = 0; i < sizeof packs / sizeof packs[0]; i++) {
        const char *p = sd_node_pack_of(packs[i].name);
        CHECK_MSG(p && !strcmp(p, packs[i].pack), "%s: pack %s", packs[i].name, p ? p : "(none)");
    }
    CHECK(!sd_node_pack_of("KSampler") && !sd_node_pack_of("VAEDecode") && !sd_node_pack_of("UpscaleModelLoader"));
    expect("FaceDetailer", "it comes from the custom node pack ComfyUI-Impact-Pack, which sdflow does not implement");

    /* validation carries the hint in the invalid_prompt problem */
    sd_graph *g = NULL;
    CHECK_OK(sd_graph_from_json("{\"1\": {\"class_type\": \"KSamplr\", \"inputs\": {}},"
                                " \"2\": {\"class_type\": \"SaveImage\", \"inputs\": {}}}", "t.json", &g, &err), &err);
    sd_graph_problems probs = {0};
    CHECK(g && sd_graph_validate(g, NULL, &probs, &err) == SD_ERR_VALIDATION);
    int found = 0;
    for (size_t i = 0; i < probs.n; i++)
        if (!strcmp(probs.items[i].kind, "invalid_prompt") && strstr(probs.items[i].message, "did you mean KSampler?"))
            found = 1;
    CHECK_MSG(found, "no hint in the problems (%zu)", probs.n);
    sd_graph_problems_free(&probs);
    sd_graph_free(g);
    sd_registry_reset();
    return sd_test_finish();
}
