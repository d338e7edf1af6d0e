/* node_suggest.c - hints for unknown node types (node_suggest.h). */
#include "node_suggest.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "node.h"

/* ---- custom-node packs ------------------------------------------------------------
 * A small table of the packs real workflows use most, by how their node
 * types are named. A pattern is an exact name, "prefix*" or "*suffix". */

typedef struct pack { const char *name; const char *const *patterns; } pack;

static const char *const impact[] = {"Impact*", "FaceDetailer*", "DetailerForEach*", "SAMLoader", "SAMDetector*",
    "BboxDetector*", "SegmDetector*", "SEGS*", "*SEGS", "ToBasicPipe", "FromBasicPipe*", "BasicPipeTo*",
    "EditBasicPipe", "ToDetailerPipe*", "FromDetailerPipe*", "KSamplerProvider", "KSamplerAdvancedProvider",
    "MaskToSEGS*", "PreviewBridge*", "ImageSender", "ImageReceiver", "LatentSender", "LatentReceiver",
    "IterativeUpscale*", "IterativeLatentUpscale", "PixelKSampleUpscaler*", "DetailerPipeToBasicPipe", NULL};
static const char *const impact_sub[] = {"UltralyticsDetectorProvider", NULL};
static const char *const inspire[] = {"* //Inspire", "KSampler //Inspire", "LoadPromptsFromDir //Inspire", NULL};
static const char *const was[] = {"* (WAS)", "Text Concatenate", "Text Multiline", "Text String", "Text to Conditioning",
    "Text Find and Replace", "Text Parse A1111 Embeddings", "Text Load Line From File", "Image Save",
    "Image Resize", "Image Blend", "Image Rembg (Remove Background)", "Load Image Batch", "Number Counter",
    "Number to Text", "Number to String", "Random Number", "BLIP Model Loader", "BLIP Analyze Image",
    "Bus Node", "Cache Node", "CLIPTextEncode (NSP)", "Constant Number", "Create Grid Image",
    "KSampler (WAS)", "Mask Crop Region", "Upscale Model Loader", "Image Filter Adjustments", NULL};
static const char *const efficiency[] = {"* (Efficient)", "KSampler Adv. (Efficient)", "Efficient Loader",
    "Eff. Loader SDXL", "LoRA Stacker", "Control Net Stacker", "Apply ControlNet Stack", "XY Plot",
    "XY Input: *", "HighRes-Fix Script", "Noise Control Script", "Tiled Upscaler Script", "Unpack SDXL Tuple",
    "Pack SDXL Tuple", NULL};
static const char *const rgthree[] = {"* (rgthree)", NULL};
static const char *const kj[] = {"*KJ", "GetNode", "SetNode", "INTConstant", "FloatConstant", "StringConstant",
    "StringConstantMultiline", "ConditioningMultiCombine", "GrowMaskWithBlur", "ColorMatch", "ImageConcanate",
    "ImageConcatMulti", "GetImageSizeAndCount", "VRAM_Debug", "SomethingToString", "CreateShapeMask",
    "ImageBatchMulti", "CondPassThrough", "DummyOut", NULL};
static const char *const comfyroll[] = {"CR *", NULL};
static const char *const pysssss[] = {"*|pysssss", NULL};
static const char *const cn_aux[] = {"*Preprocessor", "AIO_Preprocessor", "ControlNetPreprocessorSelector",
    "PixelPerfectResolution", "ImageGenResolutionFromImage", "ImageGenResolutionFromLatent", NULL};
static const char *const ipadapter[] = {"IPAdapter*", "PrepImageForClipVision", "PrepImageForInsightFace", NULL};
static const char *const animatediff[] = {"ADE_*", "AnimateDiff*", NULL};
static const char *const vhs[] = {"VHS_*", NULL};
static const char *const usdu[] = {"UltimateSDUpscale*", NULL};
static const char *const acn[] = {"ACN_*", "ControlNetLoaderAdvanced", "DiffControlNetLoaderAdvanced",
    "ScaledSoftControlNetWeights", "SoftControlNetWeights", "CustomControlNetWeights", NULL};
static const char *const essentials[] = {"*+", NULL};
static const char *const ttn[] = {"ttN *", NULL};
static const char *const easy[] = {"easy *", NULL};
static const char *const crystools[] = {"* [Crystools]", NULL};
static const char *const everywhere[] = {"Anything Everywhere*", "Prompts Everywhere", "Seed Everywhere", NULL};
static const char *const gguf[] = {"*GGUF*", NULL};
static const char *const smz[] = {"smZ *", NULL};
static const char *const florence[] = {"Florence2*", "DownloadAndLoadFlorence2*", NULL};
static const char *const instantid[] = {"InstantID*", "ApplyInstantID*", "FaceKeypointsPreprocessor", NULL};
static const char *const reactor[] = {"ReActor*", NULL};
static const char *const supir[] = {"SUPIR_*", NULL};
static const char *const mtb[] = {"* (mtb)", NULL};

static const pack packs[] = {
    {"ComfyUI-Impact-Pack", impact},
    {"ComfyUI-Impact-Subpack", impact_sub},
    {"ComfyUI-Inspire-Pack", inspire},
    {"was-node-suite-comfyui (WAS Node Suite)", was},
    {"efficiency-nodes-comfyui (Efficiency Nodes)", efficiency},
    {"rgthree-comfy", rgthree},
    {"ComfyUI-KJNodes", kj},
    {"ComfyUI_Comfyroll_CustomNodes", comfyroll},
    {"ComfyUI-Custom-Scripts (pysssss)", pysssss},
    {"comfyui_controlnet_aux", cn_aux},
    {"ComfyUI_IPAdapter_plus", ipadapter},
    {"ComfyUI-AnimateDiff-Evolved", animatediff},
    {"ComfyUI-VideoHelperSuite", vhs},
    {"ComfyUI_UltimateSDUpscale", usdu},
    {"ComfyUI-Advanced-ControlNet", acn},
    {"ComfyUI_essentials", essentials},
    {"ComfyUI_tinyterraNodes", ttn},
    {"ComfyUI-Easy-Use", easy},
    {"ComfyUI-Crystools", crystools},
    {"cg-use-everywhere", everywhere},
    {"ComfyUI-GGUF", gguf},
    {"ComfyUI_smZNodes", smz},
    {"ComfyUI-Florence2", florence},
    {"ComfyUI_InstantID", instantid},
    {"comfyui-reactor-node", reactor},
    {"ComfyUI-SUPIR", supir},
    {"comfy-mtb", mtb},
};

/* "prefix*", "*suffix", "*middle*" or an exact name. */
static int matches(const char *pat, const char *s) {
    size_t lp = strlen(pat), ls = strlen(s);
    int head = pat[0] == '*', tail = lp > 1 && pat[lp - 1] == '*';
    if (head && tail) {
        char mid[128];
        if (lp - 2 >= sizeof mid) return 0;
        memcpy(mid, pat + 1, lp - 2);
        mid[lp - 2] = 0;
        return strstr(s, mid) != NULL;
    }
    if (tail) return ls >= lp - 1 && !strncmp(s, pat, lp - 1);
    if (head) return ls >= lp - 1 && !strcmp(s + ls - (lp - 1), pat + 1);
    return !strcmp(pat, s);
}

const char *sd_node_pack_of(const char *class_type) {
    if (!class_type) return NULL;
    for (size_t i = 0; i < sizeof packs / sizeof packs[0]; i++)
        for (const char *const *p = packs[i].patterns; *p; p++)
            if (matches(*p, class_type)) return packs[i].name;
    return NULL;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

int sd_node_is_comfyui_core(const char *class_type) {
    size_t n = 0;
    while (sd_comfyui_core_nodes[n]) n++;
    return class_type && bsearch(&class_type, sd_comfyui_core_nodes, n, sizeof *sd_comfyui_core_nodes, cmp_name);
}

/* ---- closest registered names --------------------------------------------------- */

enum { M = 64 };

/* Optimal-string-alignment distance, case ignored, on names up to M bytes
 * (longer names are cut: a hint, not a proof). t is scratch space. */
static int distance(const char *a, const char *b, int (*t)[M + 1]) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > M) la = M;
    if (lb > M) lb = M;
    for (size_t i = 0; i <= la; i++) t[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) t[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int v = t[i - 1][j - 1] + (ca != cb);
            if (t[i - 1][j] + 1 < v) v = t[i - 1][j] + 1;
            if (t[i][j - 1] + 1 < v) v = t[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == cb &&
                t[i - 2][j - 2] + 1 < v)
                v = t[i - 2][j - 2] + 1;
            t[i][j] = v;
        }
    }
    return t[la][lb];
}

/* Case-insensitive substring. */
static int contains_ci(const char *hay, const char *needle) {
    size_t ln = strlen(needle);
    if (ln < 4) return 0; /* "VAE" is inside too many names to mean anything */
    for (const char *p = hay; *p; p++) {
        size_t k = 0;
        while (k < ln && p[k] && tolower((unsigned char)p[k]) == tolower((unsigned char)needle[k])) k++;
        if (k == ln) return 1;
    }
    return 0;
}

const char *sd_node_suggest(const char *class_type, char *buf, size_t n) {
    if (!buf || !n) return buf;
    buf[0] = 0;
    if (!class_type) return buf;
    const char *pk = sd_node_pack_of(class_type);
    if (pk) {
        snprintf(buf, n, "it comes from the custom node pack %s, which sdflow does not implement", pk);
        return buf;
    }
    size_t off = 0;
    if (sd_node_is_comfyui_core(class_type)) {
        off = (size_t)snprintf(buf, n, "it is a ComfyUI node that sdflow does not implement yet");
        if (off >= n) return buf;
    }
    /* up to three registered names (aliases too) within a distance of a
     * third of the name, or containing it / contained in it, closest first */
    enum { K = 3 };
    const char *best[K] = {0};
    int bd[K] = {0}, nb = 0;
    size_t len = strlen(class_type);
    int limit = len / 3 > 2 ? (int)(len / 3) : 2;
    size_t total = sd_registry_count() + sd_registry_alias_count();
    int (*t)[M + 1] = malloc((M + 1) * sizeof *t); /* heap: validation may run on a small thread stack */
    if (!t) return buf;
    for (size_t i = 0; i < total; i++) {
        const char *name, *target;
        if (i < sd_registry_count()) name = sd_registry_at(i)->class_type;
        else sd_registry_alias_at(i - sd_registry_count(), &name, &target);
        int dist = distance(class_type, name, t);
        if (dist > limit && (contains_ci(class_type, name) || contains_ci(name, class_type))) dist = limit;
        if (dist > limit || (nb == K && dist >= bd[K - 1])) continue;
        int k = nb < K ? nb++ : K - 1; /* the slot to fill: a free one, else the worst */
        while (k > 0 && bd[k - 1] > dist) { /* insertion keeps the list sorted */
            best[k] = best[k - 1];
            bd[k] = bd[k - 1];
            k--;
        }
        best[k] = name;
        bd[k] = dist;
    }
    free(t);
    if (!nb) return buf;
    off += (size_t)snprintf(buf + off, n - off, "%sdid you mean ", off ? "; " : "");
    for (int i = 0; i < nb && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%s", i == 0 ? "" : i == nb - 1 ? " or " : ", ", best[i]);
    if (off < n) snprintf(buf + off, n - off, "?");
    return buf;
}
