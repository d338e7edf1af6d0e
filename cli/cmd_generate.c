/* cmd_generate.c - `sdflow generate`: one picture from a prompt, for people
 * who do not write graphs. The options become the ComfyUI API graph a user
 * would build by hand (ComfyUI's default txt2img graph, with LoadImage +
 * VAEEncode for img2img, a mask for inpainting, a LoraLoader chain), which
 * then runs exactly as `sdflow run` runs a file: same executor, cache,
 * progress and report. --print-workflow prints that graph instead.
 *
 * -o OUT.png: SaveImage names its files itself (prefix + counter), so the
 * run saves into a fresh private folder beside OUT and the one picture is
 * then renamed onto OUT (atomic on one file system; an existing OUT is
 * replaced). Models are names in the models folder, as in any graph;
 * -i/--mask are paths, named relative to the input folder in the graph. A cached rerun still gets its file: the executor writes a cached
 * output node's files again when they are not in this run's folder.
 *
 * Families: the model file's family (read from its keys, nothing loaded)
 * picks the graph and the defaults. Flux is ComfyUI's Flux checkpoint
 * example: EmptySD3LatentImage, FluxGuidance on the positive prompt (dev),
 * KSampler at cfg 1, euler / simple, 20 steps for dev and 4 for schnell, at
 * 1024 x 1024; with split files (--diffusion-model, --t5xxl, --clip-l,
 * --vae) UNETLoader, DualCLIPLoader (type flux) and VAELoader stand where
 * CheckpointLoaderSimple stood. SD3 / SD3.5 is ComfyUI's SD3.5 example
 * (EmptySD3LatentImage, KSampler euler / sgm_uniform, 20 steps, 1024 x
 * 1024, the model's own shift 3) at cfg 4.5, Stability's for Medium (the
 * example's 4.01 is for Large fp8); its split files are --diffusion-model,
 * --clip-l, --clip-g, --t5xxl (TripleCLIPLoader) and --vae, and a
 * checkpoint without text encoders (Stability's sd3.5_medium.safetensors:
 * MMDiT + VAE) takes the three through TripleCLIPLoader beside
 * CheckpointLoaderSimple, as ComfyUI's SD3.5 text-encoder example; --shift
 * adds ModelSamplingSD3.
 *
 * --reference PICTURE makes a Flux Kontext edit instead: ComfyUI's Kontext
 * example graph (build_kontext_graph). A Kontext file has FLUX.1-dev's keys,
 * so nothing tells it from the name or the file: the option chooses the
 * graph, and any model but a Flux dev one is refused. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"
#include "core/env.h"
#include "core/json_util.h"
#include "core/node.h"
#include "core/value.h"
#include "formats/png.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/model_paths.h"
#include "models/flux/kontext.h"

/* What the model file is, for the graph and the defaults. */
typedef enum gen_family { GEN_SD = 0, GEN_FLUX_DEV, GEN_FLUX_SCHNELL, GEN_SD3, GEN_ZIMAGE } gen_family;

typedef struct gen_opts {
    const char *model, *prompt, *negative, *init, *mask, *output, *seed, *sampler, *scheduler;
    const char *diffusion_model, *t5xxl, *clip_l, *clip_g, *text_encoder, *vae, *weight_dtype;
    const char *ref_method; /* --reference-method */
    long long width, height, steps;
    double cfg, strength, guidance, shift;
    int strength_given, print_workflow, negative_given;
    sd_cli_list loras, refs; /* refs: --reference, a Flux Kontext edit */
    gen_family family;
} gen_opts;

/* Options a family sets when they are not given (see the defaults below). */
#define GEN_UNSET_INT LLONG_MIN
#define GEN_UNSET_NUM (-1e300)

/* ---- the graph ----------------------------------------------------------------- */

static cJSON *add_node(cJSON *root, const char *id, const char *class_type) {
    cJSON *node = cJSON_AddObjectToObject(root, id);
    cJSON *inputs = cJSON_AddObjectToObject(node, "inputs");
    cJSON_AddStringToObject(node, "class_type", class_type);
    /* the title ComfyUI gives a new node: its display name */
    const sd_node_def *def = sd_registry_find(class_type);
    cJSON *meta = cJSON_AddObjectToObject(node, "_meta");
    cJSON_AddStringToObject(meta, "title", def && def->display_name ? def->display_name : class_type);
    return inputs;
}

static void add_link(cJSON *inputs, const char *name, const char *id, int index) {
    cJSON *l = cJSON_AddArrayToObject(inputs, name);
    cJSON_AddItemToArray(l, cJSON_CreateString(id));
    cJSON_AddItemToArray(l, cJSON_CreateNumber(index));
}

/* VAEDecode #8 of the sampler's latent (node samples, output 0) into
 * SaveImage #9: the tail every graph generate builds ends with. */
static void add_decode_save(cJSON *root, const char *samples, const char *vae_src, int vae_out) {
    cJSON *in = add_node(root, "8", "VAEDecode");
    add_link(in, "samples", samples, 0);
    add_link(in, "vae", vae_src, vae_out);
    in = add_node(root, "9", "SaveImage");
    cJSON_AddStringToObject(in, "filename_prefix", "sdflow");
    add_link(in, "images", "8", 0);
}

/* "NAME:WEIGHT" or "NAME" (weight 1). The weight is what follows the last
 * colon when that parses as a number, so names may hold colons. */
static int split_lora(const char *spec, char *name, size_t n, double *weight) {
    const char *colon = strrchr(spec, ':');
    *weight = 1.0;
    size_t len = strlen(spec);
    if (colon) {
        char *end = NULL;
        double w = strtod(colon + 1, &end);
        if (colon[1] && end && !*end) {
            *weight = w;
            len = (size_t)(colon - spec);
        }
    }
    if (len == 0 || len >= n) return -1;
    memcpy(name, spec, len);
    name[len] = 0;
    return 0;
}

/* A file named on the command line: its absolute path (LoadImage and the
 * loaders take absolute names as they are). */
static sd_status abs_file(const char *path, const char *what, char **out, sd_error *err) {
    char buf[PATH_MAX];
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || !realpath(path, buf))
        return sd_error_set(err, SD_ERR_NOT_FOUND, "%s '%s': %s", what, path,
                            errno ? strerror(errno) : "not a regular file");
    if (!(*out = strdup(buf))) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return SD_OK;
}

/* LoadImage names are relative to the input folder (validation lists its
 * files, as ComfyUI does). `base` is that folder (absolute); the name of
 * `path` under it, or NULL when the file is elsewhere. */
static const char *under(const char *path, const char *base) {
    size_t n = strlen(base);
    if (strncmp(path, base, n) != 0) return NULL;
    if (n > 0 && base[n - 1] == '/') return path + n;
    return path[n] == '/' ? path + n + 1 : NULL;
}

/* A picture named on the command line: the option (for "put them in one
 * folder"), what it is (for a missing file) and the path as given. */
typedef struct gen_input {
    const char *opt, *what, *path;
} gen_input;

/* The input folder generate runs with and the names of the pictures in it
 * (-i and --mask, or every --reference): --input-dir (default ./input) when
 * all of them are inside it, else the folder of the first (which must then
 * hold the others too). names[k] (malloc'd, the caller frees) is in[k]'s
 * name there; *dir_out is NULL when --input-dir holds them. */
static sd_status place_inputs(const gen_input *in, int n, const char *input_dir, char **dir_out, char **names,
                              sd_error *err) {
    *dir_out = NULL;
    for (int k = 0; k < n; k++) names[k] = NULL;
    if (n == 0) return SD_OK;
    char **abs = calloc((size_t)n, sizeof *abs), base[PATH_MAX];
    sd_status rc = abs ? SD_OK : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (int k = 0; !rc && k < n; k++) rc = abs_file(in[k].path, in[k].what, &abs[k], err);
    if (rc) goto done;
    int all_in = realpath(input_dir, base) != NULL;
    for (int k = 0; all_in && k < n; k++) all_in = under(abs[k], base) != NULL;
    if (!all_in) { /* the first picture's own folder */
        char *slash = strrchr(abs[0], '/');
        size_t len = slash == abs[0] ? 1 : (size_t)(slash - abs[0]);
        memcpy(base, abs[0], len);
        base[len] = 0;
        for (int k = 1; k < n; k++)
            if (!under(abs[k], base)) {
                rc = sd_error_set(err, SD_ERR_INVALID,
                                  "%s '%s' is neither under --input-dir nor in the folder of %s '%s': put them "
                                  "in one folder", in[k].opt, in[k].path, in[0].opt, in[0].path);
                goto done;
            }
        if (!(*dir_out = strdup(base))) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    for (int k = 0; !rc && k < n; k++)
        if (!(names[k] = strdup(under(abs[k], base)))) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
done:
    for (int k = 0; abs && k < n; k++) free(abs[k]);
    free(abs);
    if (rc) {
        for (int k = 0; k < n; k++) {
            free(names[k]);
            names[k] = NULL;
        }
        free(*dir_out);
        *dir_out = NULL;
    }
    return rc;
}

static sd_status build_graph(const gen_opts *g, const char *init, const char *mask, char **json, sd_error *err) {
    *json = NULL;
    uint64_t seed = 0;
    if (g->seed && sd_json_parse_u64(g->seed, &seed))
        return sd_error_set(err, SD_ERR_INVALID, "--seed must be a whole number from 0 to 2^64-1, not '%s'", g->seed);
    char seed_digits[32];
    snprintf(seed_digits, sizeof seed_digits, "%llu", (unsigned long long)seed);
    sd_status rc = SD_OK;
    cJSON *root = cJSON_CreateObject();
    if (!rc && !root) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    /* where MODEL, CLIP and VAE come from: the checkpoint #4 (outputs 0, 1,
     * 2) or the split loaders (UNETLoader #12, DualCLIPLoader #13 for Flux
     * or TripleCLIPLoader #13 for SD3, VAELoader #14; --vae alone replaces
     * the checkpoint's VAE, SD3's text encoder files its CLIP), then each
     * LoRA in turn for MODEL and CLIP, then ModelSamplingSD3 #16 (--shift) */
    int split = g->diffusion_model != NULL, te_files = g->t5xxl || g->text_encoder, flux = g->family != GEN_SD;
    int sd3 = g->family == GEN_SD3, zimage = g->family == GEN_ZIMAGE;
    /* Z-Image's template has ModelSamplingAuraFlow 3 and a zeroed negative */
    int shifted = zimage || (sd3 && g->shift != GEN_UNSET_NUM), zero_neg = zimage && !g->negative_given;
    const char *model0 = split ? "12" : "4", *clip0 = te_files ? "13" : "4", *vae_src = g->vae ? "14" : "4";
    int clip0_out = te_files ? 0 : 1, vae_out = g->vae ? 0 : 2;
    char lora_ids[64][16];
    int n_loras = 0;
    for (int i = 0; !rc && i < g->loras.n; i++) {
        char name[1024];
        double w;
        if (i >= 64) { rc = sd_error_set(err, SD_ERR_INVALID, "--lora: at most 64"); break; }
        if (split_lora(g->loras.items[i], name, sizeof name, &w)) {
            rc = sd_error_set(err, SD_ERR_INVALID, "--lora '%s': expected NAME or NAME:WEIGHT", g->loras.items[i]);
            break;
        }
        snprintf(lora_ids[n_loras++], sizeof lora_ids[0], "%d", 20 + i);
    }
    double denoise = g->strength_given ? g->strength : g->mask ? 1.0 : g->init ? 0.75 : 1.0;
    const char *latent_src = g->init ? "10" : "5";
    /* FluxGuidance #15 on the positive prompt: dev always, schnell when
     * --guidance asks (schnell has no guidance embedding: it is ignored) */
    int guided = flux && !sd3 && !zimage && (g->family == GEN_FLUX_DEV || g->guidance != GEN_UNSET_NUM);
    if (!rc) {
        cJSON *in;
        if (init) {
            in = add_node(root, "1", "LoadImage");
            cJSON_AddStringToObject(in, "image", init);
        }
        if (mask) {
            in = add_node(root, "2", "LoadImageMask");
            cJSON_AddStringToObject(in, "image", mask);
            cJSON_AddStringToObject(in, "channel", "red"); /* white = repaint */
        }
        const char *model_lora = n_loras ? lora_ids[n_loras - 1] : model0;
        const char *model_src = shifted ? "16" : model_lora;
        const char *clip_src = n_loras ? lora_ids[n_loras - 1] : clip0;
        int clip_out = n_loras ? 1 : clip0_out;
        in = add_node(root, "3", "KSampler");
        cJSON_AddRawToObject(in, "seed", seed_digits);
        cJSON_AddNumberToObject(in, "steps", (double)g->steps);
        cJSON_AddNumberToObject(in, "cfg", g->cfg);
        cJSON_AddStringToObject(in, "sampler_name", g->sampler);
        cJSON_AddStringToObject(in, "scheduler", g->scheduler);
        cJSON_AddNumberToObject(in, "denoise", denoise);
        add_link(in, "model", model_src, 0);
        add_link(in, "positive", guided ? "15" : "6", 0);
        add_link(in, "negative", "7", 0);
        /* a partial-strength inpaint keeps the picture under the mask as a
         * start (SetLatentNoiseMask); a full one blanks it (VAEEncodeForInpaint) */
        int soft_mask = mask && denoise < 1.0;
        add_link(in, "latent_image", soft_mask ? "11" : latent_src, 0);
        if (!split) {
            in = add_node(root, "4", "CheckpointLoaderSimple");
            cJSON_AddStringToObject(in, "ckpt_name", g->model);
        }
        if (!init) {
            in = add_node(root, "5", flux ? "EmptySD3LatentImage" : "EmptyLatentImage");
            cJSON_AddNumberToObject(in, "width", (double)g->width);
            cJSON_AddNumberToObject(in, "height", (double)g->height);
            cJSON_AddNumberToObject(in, "batch_size", 1);
        }
        in = add_node(root, "6", "CLIPTextEncode");
        cJSON_AddStringToObject(in, "text", g->prompt);
        add_link(in, "clip", clip_src, clip_out);
        if (zero_neg) {
            in = add_node(root, "7", "ConditioningZeroOut");
            add_link(in, "conditioning", "6", 0);
        } else {
            in = add_node(root, "7", "CLIPTextEncode");
            cJSON_AddStringToObject(in, "text", g->negative);
            add_link(in, "clip", clip_src, clip_out);
        }
        add_decode_save(root, "3", vae_src, vae_out);
        if (init && mask && !soft_mask) {
            in = add_node(root, "10", "VAEEncodeForInpaint");
            add_link(in, "pixels", "1", 0);
            add_link(in, "vae", vae_src, vae_out);
            add_link(in, "mask", "2", 0);
            cJSON_AddNumberToObject(in, "grow_mask_by", 6);
        } else if (init) {
            in = add_node(root, "10", "VAEEncode");
            add_link(in, "pixels", "1", 0);
            add_link(in, "vae", vae_src, vae_out);
        }
        if (soft_mask) {
            in = add_node(root, "11", "SetLatentNoiseMask");
            add_link(in, "samples", "10", 0);
            add_link(in, "mask", "2", 0);
        }
        if (split) {
            in = add_node(root, "12", "UNETLoader");
            cJSON_AddStringToObject(in, "unet_name", g->diffusion_model);
            cJSON_AddStringToObject(in, "weight_dtype", g->weight_dtype ? g->weight_dtype : "default");
        }
        if (te_files && sd3) { /* ComfyUI's SD3.5 example order */
            in = add_node(root, "13", "TripleCLIPLoader");
            cJSON_AddStringToObject(in, "clip_name1", g->clip_l);
            cJSON_AddStringToObject(in, "clip_name2", g->clip_g);
            cJSON_AddStringToObject(in, "clip_name3", g->t5xxl);
        } else if (te_files && zimage) {
            in = add_node(root, "13", "CLIPLoader");
            cJSON_AddStringToObject(in, "clip_name", g->text_encoder);
            cJSON_AddStringToObject(in, "type", "lumina2");
        } else if (te_files) {
            in = add_node(root, "13", "DualCLIPLoader");
            cJSON_AddStringToObject(in, "clip_name1", g->t5xxl);
            cJSON_AddStringToObject(in, "clip_name2", g->clip_l);
            cJSON_AddStringToObject(in, "type", "flux");
        }
        if (shifted) {
            in = add_node(root, "16", zimage ? "ModelSamplingAuraFlow" : "ModelSamplingSD3");
            add_link(in, "model", model_lora, 0);
            cJSON_AddNumberToObject(in, "shift", g->shift == GEN_UNSET_NUM ? 3.0 : g->shift);
        }
        if (g->vae) {
            in = add_node(root, "14", "VAELoader");
            cJSON_AddStringToObject(in, "vae_name", g->vae);
        }
        if (guided) {
            in = add_node(root, "15", "FluxGuidance");
            add_link(in, "conditioning", "6", 0);
            cJSON_AddNumberToObject(in, "guidance", g->guidance == GEN_UNSET_NUM ? 3.5 : g->guidance);
        }
        for (int i = 0; i < n_loras; i++) {
            char name[1024];
            double w;
            split_lora(g->loras.items[i], name, sizeof name, &w);
            in = add_node(root, lora_ids[i], "LoraLoader");
            cJSON_AddStringToObject(in, "lora_name", name);
            cJSON_AddNumberToObject(in, "strength_model", w);
            cJSON_AddNumberToObject(in, "strength_clip", w);
            add_link(in, "model", i ? lora_ids[i - 1] : model0, 0);
            add_link(in, "clip", i ? lora_ids[i - 1] : clip0, i ? 1 : clip0_out);
        }
    }
    if (!rc && !(*json = sd_json_print(root, 0))) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    cJSON_Delete(root);
    return rc;
}

/* ---- the Kontext edit graph (--reference) --------------------------------------------- */

/* Ids of the nodes ComfyUI's Flux Kontext example does not have: the LoRAs
 * and the pictures after the first (LoadImage, FluxKontextImageScale,
 * VAEEncode, ReferenceLatent: four ids each), apart from the example's. */
#define GEN_KONTEXT_LORA0 100
#define GEN_KONTEXT_REF1 200
#define GEN_KONTEXT_MAX_REFS 16

/* The ids of picture k's LoadImage, FluxKontextImageScale, VAEEncode and
 * ReferenceLatent: the example's #41, #40, #39, #42 for the first, four
 * from GEN_KONTEXT_REF1 for each later one. */
typedef struct kontext_ids {
    char load[16], scale[16], enc[16], ref[16];
} kontext_ids;

static kontext_ids kontext_pic_ids(int k) {
    kontext_ids id;
    int base = GEN_KONTEXT_REF1 + 4 * (k - 1);
    snprintf(id.load, sizeof id.load, "%d", k ? base : 41);
    snprintf(id.scale, sizeof id.scale, "%d", k ? base + 1 : 40);
    snprintf(id.enc, sizeof id.enc, "%d", k ? base + 2 : 39);
    snprintf(id.ref, sizeof id.ref, "%d", k ? base + 3 : 42);
    return id;
}

/* ComfyUI's Flux Kontext example (ComfyUI_examples' flux_kontext_example,
 * our workflows/edit_flux_kontext), with its node ids: the prompt #6 under
 * FluxGuidance #26 (2.5), each reference picture LoadImage #41 ->
 * FluxKontextImageScale #40 -> VAEEncode #39 -> ReferenceLatent #42 on the
 * guided prompt (later pictures chain their own ReferenceLatent, ids from
 * GEN_KONTEXT_REF1), BasicGuider #22 on ModelSamplingFlux #30 (sized as the
 * latent), RandomNoise #25, KSamplerSelect #16, BasicScheduler #17 into
 * SamplerCustomAdvanced #13 from EmptySD3LatentImage #27, VAEDecode #8,
 * SaveImage #9. The example's split loaders are UNETLoader #12,
 * DualCLIPLoader #11 and VAELoader #10; a single-file checkpoint is
 * CheckpointLoaderSimple #4 (--vae: VAELoader #10 beside it). --lora chains
 * LoraLoaders between the loaders and their users; --reference-method puts
 * FluxKontextMultiReferenceLatentMethod #43 after the last ReferenceLatent.
 * refs[k]: the k-th picture's name in the input folder. */
static sd_status build_kontext_graph(const gen_opts *g, char *const *refs, char **json, sd_error *err) {
    *json = NULL;
    uint64_t seed = 0;
    if (g->seed && sd_json_parse_u64(g->seed, &seed))
        return sd_error_set(err, SD_ERR_INVALID, "--seed must be a whole number from 0 to 2^64-1, not '%s'", g->seed);
    char seed_digits[32];
    snprintf(seed_digits, sizeof seed_digits, "%llu", (unsigned long long)seed);
    cJSON *root = cJSON_CreateObject();
    if (!root) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    int split = g->diffusion_model != NULL;
    const char *model0 = split ? "12" : "4", *clip0 = split ? "11" : "4", *vae_src = g->vae ? "10" : "4";
    int clip0_out = split ? 0 : 1, vae_out = g->vae ? 0 : 2;
    char lora_id[16];
    cJSON *in;
    in = add_node(root, "6", "CLIPTextEncode");
    cJSON_AddStringToObject(in, "text", g->prompt);
    if (g->loras.n) snprintf(lora_id, sizeof lora_id, "%d", GEN_KONTEXT_LORA0 + g->loras.n - 1);
    add_link(in, "clip", g->loras.n ? lora_id : clip0, g->loras.n ? 1 : clip0_out);
    add_decode_save(root, "13", vae_src, vae_out);
    if (!split) {
        in = add_node(root, "4", "CheckpointLoaderSimple");
        cJSON_AddStringToObject(in, "ckpt_name", g->model);
    }
    if (g->vae) {
        in = add_node(root, "10", "VAELoader");
        cJSON_AddStringToObject(in, "vae_name", g->vae);
    }
    if (split) {
        in = add_node(root, "11", "DualCLIPLoader");
        cJSON_AddStringToObject(in, "clip_name1", g->t5xxl);
        cJSON_AddStringToObject(in, "clip_name2", g->clip_l);
        cJSON_AddStringToObject(in, "type", "flux");
        cJSON_AddStringToObject(in, "device", "default");
        in = add_node(root, "12", "UNETLoader");
        cJSON_AddStringToObject(in, "unet_name", g->diffusion_model);
        cJSON_AddStringToObject(in, "weight_dtype", g->weight_dtype ? g->weight_dtype : "default");
    }
    in = add_node(root, "13", "SamplerCustomAdvanced");
    add_link(in, "noise", "25", 0);
    add_link(in, "guider", "22", 0);
    add_link(in, "sampler", "16", 0);
    add_link(in, "sigmas", "17", 0);
    add_link(in, "latent_image", "27", 0);
    in = add_node(root, "16", "KSamplerSelect");
    cJSON_AddStringToObject(in, "sampler_name", g->sampler);
    in = add_node(root, "17", "BasicScheduler");
    cJSON_AddStringToObject(in, "scheduler", g->scheduler);
    cJSON_AddNumberToObject(in, "steps", (double)g->steps);
    cJSON_AddNumberToObject(in, "denoise", 1.0);
    add_link(in, "model", "30", 0);
    /* the guider takes the last ReferenceLatent (or the method node after it) */
    kontext_ids last = kontext_pic_ids(g->refs.n - 1);
    in = add_node(root, "22", "BasicGuider");
    add_link(in, "model", "30", 0);
    add_link(in, "conditioning", g->ref_method ? "43" : last.ref, 0);
    in = add_node(root, "25", "RandomNoise");
    cJSON_AddRawToObject(in, "noise_seed", seed_digits);
    in = add_node(root, "26", "FluxGuidance");
    cJSON_AddNumberToObject(in, "guidance", g->guidance == GEN_UNSET_NUM ? 2.5 : g->guidance);
    add_link(in, "conditioning", "6", 0);
    in = add_node(root, "27", "EmptySD3LatentImage");
    cJSON_AddNumberToObject(in, "width", (double)g->width);
    cJSON_AddNumberToObject(in, "height", (double)g->height);
    cJSON_AddNumberToObject(in, "batch_size", 1);
    in = add_node(root, "30", "ModelSamplingFlux");
    cJSON_AddNumberToObject(in, "max_shift", 1.15);
    cJSON_AddNumberToObject(in, "base_shift", 0.5);
    cJSON_AddNumberToObject(in, "width", (double)g->width);
    cJSON_AddNumberToObject(in, "height", (double)g->height);
    add_link(in, "model", g->loras.n ? lora_id : model0, 0);
    /* each picture: LoadImage -> FluxKontextImageScale -> VAEEncode ->
     * ReferenceLatent on the conditioning so far; the first one with the
     * example's ids (#39 .. #42), in id order */
    for (int k = 0; k < g->refs.n; k++) {
        kontext_ids id = kontext_pic_ids(k);
        if (k == 0) { /* #39 .. #41 the example's way round */
            in = add_node(root, id.enc, "VAEEncode");
            add_link(in, "pixels", id.scale, 0);
            add_link(in, "vae", vae_src, vae_out);
            in = add_node(root, id.scale, "FluxKontextImageScale");
            add_link(in, "image", id.load, 0);
            in = add_node(root, id.load, "LoadImage");
            cJSON_AddStringToObject(in, "image", refs[k]);
        } else {
            in = add_node(root, id.load, "LoadImage");
            cJSON_AddStringToObject(in, "image", refs[k]);
            in = add_node(root, id.scale, "FluxKontextImageScale");
            add_link(in, "image", id.load, 0);
            in = add_node(root, id.enc, "VAEEncode");
            add_link(in, "pixels", id.scale, 0);
            add_link(in, "vae", vae_src, vae_out);
        }
        in = add_node(root, id.ref, "ReferenceLatent");
        add_link(in, "conditioning", k ? kontext_pic_ids(k - 1).ref : "26", 0);
        add_link(in, "latent", id.enc, 0);
        if (k == 0 && g->ref_method) { /* #43, after the last ReferenceLatent */
            in = add_node(root, "43", "FluxKontextMultiReferenceLatentMethod");
            add_link(in, "conditioning", last.ref, 0);
            cJSON_AddStringToObject(in, "reference_latents_method", g->ref_method);
        }
        if (k == 0) /* the LoRAs (#100 ..) before the later pictures (#200 ..) */
            for (int i = 0; i < g->loras.n; i++) {
                char name[1024], this_id[16], prev_lora[16];
                double w;
                split_lora(g->loras.items[i], name, sizeof name, &w); /* checked by check_specs */
                snprintf(this_id, sizeof this_id, "%d", GEN_KONTEXT_LORA0 + i);
                snprintf(prev_lora, sizeof prev_lora, "%d", GEN_KONTEXT_LORA0 + i - 1);
                in = add_node(root, this_id, "LoraLoader");
                cJSON_AddStringToObject(in, "lora_name", name);
                cJSON_AddNumberToObject(in, "strength_model", w);
                cJSON_AddNumberToObject(in, "strength_clip", w);
                add_link(in, "model", i ? prev_lora : model0, 0);
                add_link(in, "clip", i ? prev_lora : clip0, i ? 1 : clip0_out);
            }
    }
    sd_status rc = SD_OK;
    if (!(*json = sd_json_print(root, 0))) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    cJSON_Delete(root);
    return rc;
}

/* The latent size of a Kontext edit: what FluxKontextImageScale will make of
 * the first --reference (its size read from the file's header before anything
 * runs; LoadImage decodes it), for each of -W / -H not given. */
static sd_status kontext_latent_size(gen_opts *g, const sd_env *env, sd_error *err) {
    if (g->width != GEN_UNSET_INT && g->height != GEN_UNSET_INT) return SD_OK;
    sd_png_info info;
    sd_status rc = sd_png_read_info(g->refs.items[0], env->max_image_pixels, &info, err);
    if (rc) {
        sd_error_prefix(err, "--reference");
        return rc;
    }
    int64_t w, h;
    sd_flux_kontext_size(info.width, info.height, &w, &h);
    if (g->width == GEN_UNSET_INT) g->width = w;
    if (g->height == GEN_UNSET_INT) g->height = h;
    return SD_OK;
}

/* The option values the graph takes as written (--seed, --lora), checked
 * before anything is looked up. */
static sd_status check_specs(const gen_opts *g, sd_error *err) {
    uint64_t seed = 0;
    if (g->seed && sd_json_parse_u64(g->seed, &seed))
        return sd_error_set(err, SD_ERR_INVALID, "--seed must be a whole number from 0 to 2^64-1, not '%s'", g->seed);
    if (g->loras.n > 64) return sd_error_set(err, SD_ERR_INVALID, "--lora: at most 64");
    for (int i = 0; i < g->loras.n; i++) {
        char name[1024];
        double w;
        if (split_lora(g->loras.items[i], name, sizeof name, &w))
            return sd_error_set(err, SD_ERR_INVALID, "--lora '%s': expected NAME or NAME:WEIGHT", g->loras.items[i]);
    }
    return SD_OK;
}

/* ---- the model's family and its defaults ------------------------------------------------- */

/* Reads the family of -m (checkpoints/) or --diffusion-model
 * (diffusion_models/) from its keys and checks the options fit it. */
static sd_status detect_family(gen_opts *g, const sd_env *env, sd_error *err) {
    const char *opt = g->diffusion_model ? "--diffusion-model" : "-m";
    const char *folder = g->diffusion_model ? SD_FOLDER_DIFFUSION_MODELS : SD_FOLDER_CHECKPOINTS;
    const char *name = g->diffusion_model ? g->diffusion_model : g->model;
    char *path = NULL;
    sd_ckpt_info info;
    sd_status rc = sd_model_paths_resolve(env, folder, name, &path, err);
    if (rc == SD_ERR_NOT_FOUND && !g->diffusion_model) {
        /* a diffusion model alone (Kontext's flux1-dev-kontext_fp8_scaled,
         * flux1-dev.safetensors) lives in diffusion_models/: say which option takes it */
        char *dm = NULL;
        sd_error other;
        sd_error_clear(&other);
        if (sd_model_paths_resolve(env, SD_FOLDER_DIFFUSION_MODELS, name, &dm, &other) == SD_OK) {
            free(dm);
            return sd_error_set(err, SD_ERR_NOT_FOUND,
                                "-m %s: not a checkpoint (%s/) but a diffusion model (%s/): give it as "
                                "--diffusion-model with its text encoders (--t5xxl, --clip-l for Flux) and --vae",
                                name, SD_FOLDER_CHECKPOINTS, SD_FOLDER_DIFFUSION_MODELS);
        }
    }
    if (!rc) rc = sd_checkpoint_probe(path, &info, err);
    free(path);
    if (rc) {
        sd_error_prefix(err, opt);
        return rc;
    }
    g->family = info.family == SD_CKPT_SD3      ? GEN_SD3
                : info.family == SD_CKPT_ZIMAGE ? GEN_ZIMAGE
                : info.family != SD_CKPT_FLUX   ? GEN_SD
                : info.flux.guidance_embed    ? GEN_FLUX_DEV
                                              : GEN_FLUX_SCHNELL;
    const char *fam = info.has_unet ? sd_ckpt_family_name(info.family) : "no diffusion model";
    char fam_model[64];
    snprintf(fam_model, sizeof fam_model, "%s, not Flux dev", fam);
    int sd3 = g->family == GEN_SD3, flux = g->family == GEN_FLUX_DEV || g->family == GEN_FLUX_SCHNELL;
    int zimage = g->family == GEN_ZIMAGE;
    /* a Kontext file has FLUX.1-dev's keys: the option says it is one, and
     * only a Flux dev model (with its guidance embedding) can be */
    if (g->refs.n && g->family != GEN_FLUX_DEV)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "--reference makes a Flux Kontext edit, which needs a Flux Kontext dev model; %s %s is %s",
                            opt, name,
                            g->family == GEN_FLUX_SCHNELL ? "Flux schnell (no guidance embedding)" : fam_model);
    if (g->diffusion_model && !flux && !sd3 && !zimage)
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "--diffusion-model %s is %s, not a Flux, SD3 or Z-Image model: generate takes split "
                            "files for those only (use -m with a checkpoint)",
                            name, fam);
    /* Z-Image's text encoder is one Qwen3-4B file (CLIPLoader type lumina2) */
    if (zimage && (g->t5xxl || g->clip_l || g->clip_g))
        return sd_error_set(err, SD_ERR_INVALID, "%s %s is Z-Image: its text encoder is --text-encoder (Qwen3-4B)",
                            opt, name);
    if (zimage && g->diffusion_model && !g->text_encoder)
        return sd_error_set(err, SD_ERR_INVALID, "--diffusion-model %s is Z-Image: give its text encoder as "
                            "--text-encoder (qwen_3_4b.safetensors)", name);
    if (!zimage && g->text_encoder)
        return sd_error_set(err, SD_ERR_INVALID, "--text-encoder is Z-Image's (CLIPLoader lumina2); %s is %s", name,
                            fam);
    if (flux && g->diffusion_model && !(g->t5xxl && g->clip_l))
        return sd_error_set(err, SD_ERR_INVALID, "--diffusion-model %s is Flux: give its text encoders as --t5xxl and "
                            "--clip-l", name);
    if (sd3 && g->diffusion_model && !g->t5xxl && !g->clip_l && !g->clip_g)
        return sd_error_set(err, SD_ERR_INVALID, "--diffusion-model %s is SD3: its text encoders are --clip-l, "
                            "--clip-g and --t5xxl together (TripleCLIPLoader)", name);
    if (!g->diffusion_model && zimage && (!info.has_text_encoder || !info.has_vae) && !(g->text_encoder && g->vae))
        return sd_error_set(err, SD_ERR_INVALID,
                            "-m %s is a Z-Image model without %s: give it as --diffusion-model with --text-encoder "
                            "and --vae", name, !info.has_text_encoder ? "a text encoder" : "a VAE");
    /* SD3's text encoders are three files (TripleCLIPLoader), Flux's two */
    if (sd3 && (g->t5xxl || g->clip_l || g->clip_g) && !(g->t5xxl && g->clip_l && g->clip_g))
        return sd_error_set(err, SD_ERR_INVALID, "%s %s is SD3: its text encoders are --clip-l, --clip-g and --t5xxl "
                            "together (TripleCLIPLoader)", opt, name);
    if (!sd3 && g->clip_g)
        return sd_error_set(err, SD_ERR_INVALID, "--clip-g is SD3's (TripleCLIPLoader); %s is %s", name, fam);
    if (!sd3 && !zimage && g->shift != GEN_UNSET_NUM)
        return sd_error_set(err, SD_ERR_INVALID, "--shift is SD3's and Z-Image's (ModelSamplingSD3, "
                            "ModelSamplingAuraFlow); %s is %s", name, fam);
    if (!g->diffusion_model && !sd3 && (g->t5xxl || g->clip_l))
        return sd_error_set(err, SD_ERR_INVALID, "%s goes with --diffusion-model (split files)",
                            g->t5xxl ? "--t5xxl" : "--clip-l");
    if (!g->diffusion_model && flux && (!info.has_text_encoder || !info.has_vae))
        return sd_error_set(err, SD_ERR_INVALID,
                            "-m %s is a Flux diffusion model without %s: give it as --diffusion-model with "
                            "--t5xxl, --clip-l and --vae",
                            name, !info.has_text_encoder ? "text encoders" : "a VAE");
    /* Stability's sd3.5_medium.safetensors: MMDiT + VAE, the text encoders
     * apart (ComfyUI's SD3.5 text-encoder example) */
    if (!g->diffusion_model && sd3 && !info.has_text_encoder && !g->t5xxl)
        return sd_error_set(err, SD_ERR_INVALID,
                            "-m %s is an SD3 model without text encoders: give them as --clip-l, --clip-g and "
                            "--t5xxl (TripleCLIPLoader)",
                            name);
    if (!g->diffusion_model && sd3 && !info.has_vae && !g->vae)
        return sd_error_set(err, SD_ERR_INVALID, "-m %s is an SD3 model without a VAE: give one as --vae", name);
    if (!flux && g->guidance != GEN_UNSET_NUM)
        return sd_error_set(err, SD_ERR_INVALID, "--guidance is Flux's (FluxGuidance); %s is %s", name, fam);
    return SD_OK;
}

/* The family's usual settings for what the command line left out: SD
 * cfg 8, euler / normal, 20 steps, 512 x 512; Flux cfg 1 (the positive
 * prompt only), euler / simple, 1024 x 1024, dev 20 steps with
 * FluxGuidance 3.5, schnell 4 steps (ComfyUI's Flux examples); SD3 cfg 4.5,
 * euler / sgm_uniform, 20 steps, 1024 x 1024 (ComfyUI's SD3.5 example, at
 * Stability's cfg for Medium; the shift is the model's 3); Z-Image-Turbo
 * ComfyUI's template: ModelSamplingAuraFlow 3, cfg 1, res_multistep /
 * simple, 8 steps, 1024 x 1024, ConditioningZeroOut of the prompt as the
 * negative (never evaluated at cfg 1) unless -n gives one. */
static void apply_defaults(gen_opts *g) {
    int flux = g->family != GEN_SD, sd3 = g->family == GEN_SD3, zimage = g->family == GEN_ZIMAGE;
    if (g->steps == GEN_UNSET_INT) g->steps = g->family == GEN_FLUX_SCHNELL ? 4 : zimage ? 8 : 20;
    if (g->cfg == GEN_UNSET_NUM) g->cfg = sd3 ? 4.5 : flux ? 1.0 : 8.0;
    if (!g->sampler) g->sampler = zimage ? "res_multistep" : "euler";
    if (!g->scheduler) g->scheduler = sd3 ? "sgm_uniform" : flux ? "simple" : "normal";
    if (g->width == GEN_UNSET_INT) g->width = flux ? 1024 : 512;
    if (g->height == GEN_UNSET_INT) g->height = flux ? 1024 : 512;
}

/* ---- -o: a private folder beside OUT, then a rename ---------------------------------- */

static char *private_dir_beside(const char *out) {
    const char *slash = strrchr(out, '/');
    size_t dlen = slash ? (size_t)(slash - out) : 1;
    const char *dir = slash ? out : ".";
    if (slash == out) dlen = 1; /* "/x.png" */
    size_t n = dlen + 32;
    char *tmpl = malloc(n);
    if (!tmpl) return NULL;
    snprintf(tmpl, n, "%.*s/.sdflow-generate-XXXXXX", (int)dlen, dir);
    if (!mkdtemp(tmpl)) {
        free(tmpl);
        return NULL;
    }
    return tmpl;
}

/* -o is checked before any work (it used to fail only at the final rename,
 * after the run, and the picture went with the private folder): a PNG
 * name (SaveImage writes PNG; another extension would put PNG bytes under
 * a name that says otherwise), not a folder, in a folder that exists. 0 =
 * fine, else 1 after printing why. */
static int check_output(const char *out) {
    size_t n = strlen(out);
    struct stat st;
    if (!n || out[n - 1] == '/' || (stat(out, &st) == 0 && S_ISDIR(st.st_mode))) {
        fprintf(stderr, "sdflow generate: -o %s is a folder: give the picture's file name (e.g. %s%spicture.png)\n",
                out, out, n && out[n - 1] == '/' ? "" : "/");
        return 1;
    }
    const char *base = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
    const char *dot = strrchr(base, '.');
    if (!dot || strcasecmp(dot, ".png")) {
        fprintf(stderr, "sdflow generate: -o %s: sdflow writes PNG pictures (as ComfyUI's SaveImage); name the file "
                        ".png\n", out);
        return 1;
    }
    char parent[PATH_MAX];
    size_t plen = base > out ? (size_t)(base - out) : 0;
    snprintf(parent, sizeof parent, "%.*s", plen ? (int)plen : 1, plen ? out : ".");
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "sdflow generate: -o %s: the folder %s does not exist\n", out, parent);
        return 1;
    }
    return 0;
}

/* Removes what the run left in the private folder (only files we wrote), then the folder. */
static void remove_private_dir(const char *dir, const sd_value *files) {
    for (size_t k = 0; k < sd_value_list_len(files); k++) {
        const char *f = sd_value_as_string(sd_value_list_get(files, k));
        if (f && strncmp(f, dir, strlen(dir)) == 0) unlink(f);
    }
    if (rmdir(dir) != 0 && errno != ENOENT)
        fprintf(stderr, "warning: could not remove the folder %s: %s\n", dir, strerror(errno));
}

/* ---- the command ------------------------------------------------------------------- */

static const char gen_about[] =
    "Makes one picture from a prompt: the options become ComfyUI's default graph (txt2img;\n"
    "with -i LoadImage + VAEEncode and denoise = --strength; with --mask an inpainting graph;\n"
    "each --lora a LoraLoader), which runs like `sdflow run` (same cache, progress and report\n"
    "options). --print-workflow prints that graph (API JSON) instead: `sdflow run` of that file\n"
    "makes the same picture. Models are names inside the models folder (checkpoints/, loras/);\n"
    "the model's family (read from the file) sets the defaults and the graph: Flux gets\n"
    "EmptySD3LatentImage, FluxGuidance 3.5 (dev), cfg 1, euler/simple, 20 steps (schnell 4),\n"
    "1024x1024; Flux split files come as --diffusion-model, --t5xxl, --clip-l and --vae.\n"
    "SD3/SD3.5 gets EmptySD3LatentImage, cfg 4.5, euler/sgm_uniform, 20 steps, 1024x1024 (the\n"
    "model's shift 3; --shift adds ModelSamplingSD3); its split files are --diffusion-model,\n"
    "--clip-l, --clip-g, --t5xxl (TripleCLIPLoader) and --vae, and a checkpoint without text\n"
    "encoders (Stability's sd3.5_medium.safetensors) takes --clip-l, --clip-g and --t5xxl.\n"
    "-i and --mask are files: named relative to --input-dir when inside it, else the folder of\n"
    "-i becomes the input folder.\n"
    "--reference PICTURE (repeatable) edits with Flux Kontext dev: ComfyUI's Kontext example graph\n"
    "(FluxKontextImageScale, VAEEncode, ReferenceLatent per picture, FluxGuidance 2.5, BasicGuider,\n"
    "SamplerCustomAdvanced), the latent the size FluxKontextImageScale makes of the first picture\n"
    "unless -W/-H are given; the pictures are files, placed as -i is.";

int sd_cli_generate(int argc, char **argv) {
    gen_opts g = {.width = GEN_UNSET_INT, .height = GEN_UNSET_INT, .steps = GEN_UNSET_INT,
                  .cfg = GEN_UNSET_NUM, .guidance = GEN_UNSET_NUM, .shift = GEN_UNSET_NUM, .strength = 0.75};
    const char *report = NULL, *dump = NULL, *strength = NULL;
    const sd_cli_option own[] = {
        {"--model", "-m", SD_CLI_STR, &g.model, "NAME",
         "checkpoint: a name in MODELS/checkpoints/ (SD1, SD2, SDXL, the Flux fp8 single file, SD3/SD3.5)",
         NULL},
        {"--diffusion-model", NULL, SD_CLI_STR, &g.diffusion_model, "NAME",
         "Flux or SD3 split files instead of -m: the DiT, a name in MODELS/diffusion_models/ (UNETLoader)",
         NULL},
        {"--t5xxl", NULL, SD_CLI_STR, &g.t5xxl, "NAME",
         "with --diffusion-model (or an SD3 checkpoint): the T5-XXL, a name in MODELS/text_encoders/", NULL},
        {"--clip-l", NULL, SD_CLI_STR, &g.clip_l, "NAME",
         "with --diffusion-model (or an SD3 checkpoint): the CLIP-L, a name in MODELS/text_encoders/", NULL},
        {"--text-encoder", NULL, SD_CLI_STR, &g.text_encoder, "NAME",
         "Z-Image: the Qwen3-4B, a name in MODELS/text_encoders/ (CLIPLoader type lumina2)", NULL},
        {"--clip-g", NULL, SD_CLI_STR, &g.clip_g, "NAME",
         "SD3: the CLIP-G, a name in MODELS/text_encoders/ (TripleCLIPLoader with --clip-l and --t5xxl)", NULL},
        {"--vae", NULL, SD_CLI_STR, &g.vae, "NAME",
         "a VAE file in MODELS/vae/ (VAELoader): needed with --diffusion-model, else replaces the "
         "checkpoint's", NULL},
        {"--weight-dtype", NULL, SD_CLI_STR, &g.weight_dtype, "TYPE",
         "with --diffusion-model: UNETLoader's weight_dtype (default keeps the file's)",
         "default|fp8_e4m3fn|fp8_e4m3fn_fast|fp8_e5m2"},
        {"--prompt", "-p", SD_CLI_STR, &g.prompt, "TEXT", "what to draw", NULL},
        {"--negative", "-n", SD_CLI_STR, &g.negative, "TEXT",
         "what not to draw (default empty; Z-Image: the prompt's ConditioningZeroOut)", NULL},
        {"--width", "-W", SD_CLI_INT, &g.width, "N",
         "picture width (default 512, Flux and SD3 1024; --reference: the scaled picture's; unused with -i)", NULL},
        {"--height", "-H", SD_CLI_INT, &g.height, "N",
         "picture height (default 512, Flux and SD3 1024; --reference: the scaled picture's; unused with -i)", NULL},
        {"--steps", NULL, SD_CLI_INT, &g.steps, "N", "sampling steps (default 20; Flux schnell 4)", NULL},
        {"--cfg", NULL, SD_CLI_FLOAT, &g.cfg, "SCALE",
         "classifier-free guidance scale (default 8.0; Flux 1.0; SD3 4.5)", NULL},
        {"--guidance", NULL, SD_CLI_FLOAT, &g.guidance, "X",
         "Flux: FluxGuidance on the prompt (default 3.5 for dev, 2.5 with --reference; none for schnell)", NULL},
        {"--shift", NULL, SD_CLI_FLOAT, &g.shift, "X",
         "SD3: ModelSamplingSD3's shift (default: none, the model's own 3); Z-Image: ModelSamplingAuraFlow's "
         "(default 3)", NULL},
        {"--seed", NULL, SD_CLI_STR, &g.seed, "N", "noise seed, 0 to 2^64-1 (default 0)", NULL},
        {"--sampler", NULL, SD_CLI_STR, &g.sampler, "NAME", "KSampler sampler_name (default euler)", NULL},
        {"--scheduler", NULL, SD_CLI_STR, &g.scheduler, "NAME",
         "KSampler scheduler (default normal; Flux simple; SD3 sgm_uniform)", NULL},
        {"--init-img", "-i", SD_CLI_STR, &g.init, "INIT.png", "img2img: start from this picture (its size)", NULL},
        {"--strength", NULL, SD_CLI_STR, &strength, "X",
         "how much of -i to repaint, 0..1 (default 0.75; 1 with --mask)", NULL},
        {"--mask", NULL, SD_CLI_STR, &g.mask, "MASK.png",
         "inpaint (needs -i): white = repaint (red channel); strength < 1 keeps the picture as a start", NULL},
        {"--lora", NULL, SD_CLI_LIST, &g.loras, "NAME[:WEIGHT]", "apply a LoRA (repeatable; weight default 1)", NULL},
        {"--reference", NULL, SD_CLI_LIST, &g.refs, "IMAGE.png",
         "Flux Kontext edit: the picture to edit (repeatable: each one more ReferenceLatent); ComfyUI's Kontext "
         "example graph, FluxGuidance 2.5, the latent sized as FluxKontextImageScale sizes the first", NULL},
        {"--reference-method", NULL, SD_CLI_STR, &g.ref_method, "METHOD",
         "with --reference: FluxKontextMultiReferenceLatentMethod after the pictures (default: none, i.e. offset)",
         "offset|index|uxo/uno|index_timestep_zero"},
        {"--output", "-o", SD_CLI_STR, &g.output, "OUT.png",
         "write the picture exactly there (default: --output-dir/sdflow_NNNNN_.png)", NULL},
        {"--print-workflow", NULL, SD_CLI_FLAG, &g.print_workflow, NULL, "print the graph as API JSON, run nothing",
         NULL},
        {"--report", NULL, SD_CLI_STR, &report, "FILE.json", "write what ran, what hit the cache and timings", NULL},
        {"--dump", NULL, SD_CLI_STR, &dump, "DIR", "save every output tensor as DIR/<id>_<n>.safetensors", NULL},
        {0}};
    const sd_cli_command cmd = {"generate",
                                "-m MODEL -p PROMPT [options] [-o OUT.png]\n"
                                "       sdflow generate --diffusion-model DIT --t5xxl T5 --clip-l CLIP [--clip-g CLIP] "
                                "--vae VAE -p PROMPT [options]\n"
                                "       sdflow generate (-m MODEL | --diffusion-model DIT ...) --reference PICTURE... "
                                "-p PROMPT [options]",
                                gen_about,
                                SD_CLI_G_ENV | SD_CLI_G_SET | SD_CLI_G_CACHE | SD_CLI_G_PROGRESS, own, 0, 0};
    sd_cli_args a;
    int code = sd_cli_parse(&cmd, argc, argv, &a);
    if (code != SD_CLI_CONTINUE) goto out;
    code = 1;
    g.negative_given = g.negative != NULL;
    if (!g.negative) g.negative = "";
    if ((!g.model && !g.diffusion_model) || !g.prompt) {
        fprintf(stderr, "sdflow generate: -m MODEL and -p PROMPT are required (sdflow generate --help)\n");
        goto out;
    }
    if (g.model && g.diffusion_model) {
        fprintf(stderr, "sdflow generate: -m (a checkpoint) and --diffusion-model (split files) exclude each other\n");
        goto out;
    }
    if (g.diffusion_model && (!g.vae || (!g.t5xxl && !g.clip_l && !g.clip_g && !g.text_encoder))) {
        fprintf(stderr, "sdflow generate: --diffusion-model needs its text encoders and VAE: --t5xxl and --clip-l "
                        "(Flux), --clip-l, --clip-g and --t5xxl (SD3) or --text-encoder (Z-Image), and --vae\n");
        goto out;
    }
    if (!g.diffusion_model && g.weight_dtype) { /* --t5xxl, --clip-l: SD3 checkpoints take them too */
        fprintf(stderr, "sdflow generate: --weight-dtype goes with --diffusion-model (split files)\n");
        goto out;
    }
    if (strength) {
        char *end = NULL;
        g.strength = strtod(strength, &end);
        if (!*strength || *end || !(g.strength >= 0.0 && g.strength <= 1.0)) {
            fprintf(stderr, "sdflow generate: --strength must be a number from 0 to 1, not '%s'\n", strength);
            goto out;
        }
        g.strength_given = 1;
        if (!g.init) {
            fprintf(stderr, "sdflow generate: --strength goes with -i INIT.png\n");
            goto out;
        }
    }
    if (g.output && !g.print_workflow && check_output(g.output)) goto out;
    sd_error err;
    sd_error_clear(&err);
    if (g.mask && !g.init) {
        fprintf(stderr, "sdflow generate: --mask needs the picture it applies to (-i INIT.png)\n");
        goto out;
    }
    if (g.ref_method && !g.refs.n) {
        fprintf(stderr, "sdflow generate: --reference-method goes with --reference (a Flux Kontext edit)\n");
        goto out;
    }
    /* the Kontext graph is ComfyUI's example: an empty latent, the prompt
     * alone through BasicGuider */
    if (g.refs.n && (g.init || g.mask || strength)) {
        fprintf(stderr, "sdflow generate: --reference (a Flux Kontext edit, from an empty latent beside the "
                        "reference pictures) does not go with %s\n", g.init ? "-i" : g.mask ? "--mask" : "--strength");
        goto out;
    }
    if (g.refs.n && (g.negative_given || g.cfg != GEN_UNSET_NUM)) {
        fprintf(stderr, "sdflow generate: --reference samples as ComfyUI's Kontext example, with BasicGuider (the "
                        "prompt alone, cfg 1): %s does not go with it\n", g.negative_given ? "-n" : "--cfg");
        goto out;
    }
    if (g.refs.n > GEN_KONTEXT_MAX_REFS) {
        fprintf(stderr, "sdflow generate: --reference: at most %d pictures\n", GEN_KONTEXT_MAX_REFS);
        goto out;
    }
    char *json = NULL, *input_dir = NULL, *names[GEN_KONTEXT_MAX_REFS] = {0};
    gen_input pics[GEN_KONTEXT_MAX_REFS];
    int n_pics = 0;
    if (g.refs.n)
        for (int k = 0; k < g.refs.n; k++)
            pics[n_pics++] = (gen_input){"--reference", "reference image", g.refs.items[k]};
    else if (g.init) {
        pics[n_pics++] = (gen_input){"-i", "init image", g.init};
        if (g.mask) pics[n_pics++] = (gen_input){"--mask", "mask", g.mask};
    }
    sd_status rc = sd_nodes_register_all(&err);
    if (!rc) rc = check_specs(&g, &err);
    if (!rc) {
        sd_env env; /* the input folder and the models folder the options and environment name */
        rc = sd_cli_env_init(&env, &a, &err);
        if (!rc) rc = place_inputs(pics, n_pics, env.input_dir, &input_dir, names, &err);
        if (!rc) rc = detect_family(&g, &env, &err); /* after the cheap checks */
        if (!rc && g.refs.n) rc = kontext_latent_size(&g, &env, &err);
        sd_env_cleanup(&env);
    }
    if (!rc) apply_defaults(&g);
    if (!rc && g.refs.n) rc = build_kontext_graph(&g, names, &json, &err);
    else if (!rc) rc = build_graph(&g, names[0], g.mask ? names[1] : NULL, &json, &err);
    for (int k = 0; k < n_pics; k++) free(names[k]);
    if (rc) {
        sd_cli_print_error(&err);
        free(input_dir);
        goto out;
    }
    if (g.print_workflow) {
        if (input_dir) /* where the names in the graph are */
            fprintf(stderr, "note: run it with --input-dir %s\n", input_dir);
        free(input_dir);
        /* through the graph, so the text is what `sdflow export --json` prints */
        sd_graph *gr = NULL;
        rc = sd_graph_from_json(json, "<generate>", &gr, &err);
        if (!rc) rc = sd_cli_apply_sets(gr, &a, &err);
        char *text = rc ? NULL : sd_graph_to_json(gr, 1);
        if (!rc && !text) rc = sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
        if (rc) sd_cli_print_error(&err);
        else printf("%s\n", text);
        free(text);
        sd_graph_free(gr);
        free(json);
        code = rc ? 1 : fflush(stdout) == 0 ? 0 : 1;
        goto out;
    }
    char *dir = NULL;
    if (g.output && !(dir = private_dir_beside(g.output))) {
        fprintf(stderr, "error: cannot create a folder beside '%s': %s\n", g.output, strerror(errno));
        free(json);
        free(input_dir);
        goto out;
    }
    sd_value *files = NULL;
    sd_cli_run_job job = {.json = json, .json_name = "<generate>", .report = report, .dump = dump,
                          .output_dir = dir, .input_dir = input_dir, .quiet_files = g.output != NULL,
                          .files = &files};
    code = sd_cli_run_job_exec(&a, &job);
    free(json);
    free(input_dir);
    if (dir) {
        size_t n = sd_value_list_len(files);
        const char *made = n == 1 ? sd_value_as_string(sd_value_list_get(files, 0)) : NULL;
        if (code == 0 && !made) {
            fprintf(stderr, "error: the run wrote %zu files, -o takes exactly one\n", n);
            code = 1;
        } else if (code == 0 && rename(made, g.output) != 0) {
            /* the picture stays where it is (not removed with the folder) */
            fprintf(stderr, "error: cannot move %s to %s: %s; the picture is left at %s\n", made, g.output,
                    strerror(errno), made);
            code = 1;
            sd_value_unref(files);
            files = NULL;
            free(dir);
            dir = NULL;
        } else if (code == 0 && !(a.progress && !strcmp(a.progress, "json"))) {
            printf("%s\n", g.output);
            fflush(stdout);
        }
        if (dir) remove_private_dir(dir, files);
        free(dir);
    }
    sd_value_unref(files);
out:
    sd_cli_list_free(&g.loras);
    sd_cli_list_free(&g.refs);
    sd_cli_args_free(&a);
    return code;
}
