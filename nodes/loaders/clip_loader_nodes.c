/* clip_loader_nodes.c - CLIPLoader, DualCLIPLoader and TripleCLIPLoader,
 * and ComfyUI-GGUF's CLIPLoaderGGUF, DualCLIPLoaderGGUF and
 * TripleCLIPLoaderGGUF:
 * CLIP handles made of standalone text-encoder files (models/text_encoders/),
 * with ComfyUI's `type` lists.
 *
 * A file's part is told by its keys (sd_text_encoder_detect: T5-XXL, or a
 * CLIP-L / CLIP-H / CLIP-G by ComfyUI's layer counts); `type` says what the
 * files make together, as comfy.sd.load_text_encoder_state_dicts decides:
 *   TripleCLIPLoader  a CLIP-L, a CLIP-G and a T5-XXL in any order
 *                   (SD3ClipModel; ComfyUI loads any three files into its
 *                   three slots by their keys, a part given twice or missing
 *                   is refused here rather than left uninitialised).
 *   DualCLIPLoader  flux: a CLIP-L and a T5-XXL (FluxClipModel);
 *                   sdxl: a CLIP-L and a CLIP-G (SDXLClipModel);
 *                   sd3: two different parts of CLIP-L, CLIP-G, T5-XXL
 *                   (SD3ClipModel with the third absent);
 *                   the other types belong to families sdflow does not run
 *                   and are refused naming the type.
 *   CLIPLoader      a CLIP-L: SD1's encoder, type sd3 SD3's with CLIP-L only
 *                   (hidream refused); a Qwen3-4B: Z-Image's whatever the
 *                   type (lumina2 in its workflows; ComfyUI decides by the
 *                   file alone); a CLIP-H: SD2's whatever the type; a
 *                   CLIP-G: SDXL's refiner encoder, type sd3 SD3's with the
 *                   bigG only (stable_cascade / hidream refused); a T5-XXL:
 *                   type sd3 SD3's with the T5 only, else refused (the
 *                   encoder of families sdflow lacks; Flux takes it through
 *                   DualCLIPLoader).
 * `device` (default / cpu) is accepted; the encoder runs on the run's
 * backend. Weights load when a text-encode node first uses them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loaders.h"
#include "models/checkpoint/model_paths.h"

#define SD_FOLDER_TEXT_ENCODERS "text_encoders"

static const char *const dual_types[] = {"sdxl", "sd3", "flux", "hunyuan_video", "hidream",
                                         "hunyuan_image", "hunyuan_video_15", "kandinsky5",
                                         "kandinsky5_image", "ltxv", "newbie", NULL};
static const char *const single_types[] = {
    "stable_diffusion", "stable_cascade", "sd3", "stable_audio", "mochi", "ltxv",
    "pixart", "cosmos", "lumina2", "wan", "hidream", "chroma", "ace", "omnigen2",
    "qwen_image", "hunyuan_image", "flux2", "ovis", NULL};
static const char *const devices[] = {"default", "cpu", NULL};

static sd_status list_text_encoders(const sd_env *env, sd_value **out, sd_error *err) {
    return sd_model_paths_list(env, SD_FOLDER_TEXT_ENCODERS, out, err);
}

/* The part a file holds, in ComfyUI's words. */
static const char *part_name(sd_te_kind k) {
    switch (k) {
    case SD_TE_SD1: return "CLIP-L";
    case SD_TE_SD2: return "CLIP-H";
    case SD_TE_SDXL_REFINER: return "CLIP-G";
    case SD_TE_T5: return "T5-XXL";
    case SD_TE_ZIMAGE: return "Qwen3-4B";
    default: return "checkpoint text encoder";
    }
}

static int standalone(sd_te_kind k) {
    return k == SD_TE_SD1 || k == SD_TE_SD2 || k == SD_TE_SDXL_REFINER || k == SD_TE_T5 ||
           k == SD_TE_ZIMAGE;
}

/* A standalone text-encoder file, shared by the nodes and their probes. */
static sd_status require_text_encoder(const char *path, const sd_ckpt_info *info, sd_error *err) {
    if (info->has_text_encoder && standalone(info->te_kind)) return SD_OK;
    return sd_error_set(err, SD_ERR_UNSUPPORTED,
                        "%s is not a standalone text encoder (a T5-XXL with encoder.block.N keys, "
                        "a CLIP with text_model.* keys, or a Qwen3 with model.layers.N keys)%s",
                        path, info->has_unet ? ": it is a checkpoint; use CheckpointLoaderSimple" : "");
}

static sd_status te_probe(const char *path, sd_error *err) {
    sd_ckpt_info info;
    sd_status rc = sd_checkpoint_probe(path, &info, err);
    return rc ? rc : require_text_encoder(path, &info, err);
}

static sd_status open_part(sd_node_ctx *ctx, sd_value *const *in, int i, const char *input,
                           sd_checkpoint **out, sd_error *err) {
    const char *name = sd_value_as_string(in[i]);
    sd_status rc = sd_nodes_open_model(ctx, SD_FOLDER_TEXT_ENCODERS, name, input, out, err);
    if (rc) return rc;
    if ((rc = require_text_encoder(sd_checkpoint_path(*out), sd_checkpoint_info(*out), err))) {
        sd_error_at(err, NULL, NULL, input);
        sd_checkpoint_unref(*out);
        *out = NULL;
        return rc;
    }
    if (sd_checkpoint_info(*out)->random_weights)
        sd_node_log(ctx, SD_LOG_WARN, "%s has RANDOM weights (made by sdflow synth)", name);
    return SD_OK;
}

static sd_status refuse_type(const char *node, const char *type, const char *what, sd_error *err) {
    sd_error_set(err, SD_ERR_UNSUPPORTED,
                 "%s type '%s' %s: sdflow does not run that family yet (supported: %s)", node, type,
                 what, strcmp(node, "DualCLIPLoader") == 0 ? "flux, sdxl, sd3" : "stable_diffusion, sd3");
    sd_error_at(err, NULL, NULL, "type");
    return SD_ERR_UNSUPPORTED;
}

/* ---- DualCLIPLoader ------------------------------------------------------------- */

static int is_sd3_part(sd_te_kind k) {
    return k == SD_TE_SD1 || k == SD_TE_SDXL_REFINER || k == SD_TE_T5;
}

/* SD3 from n files: distinct CLIP-L / CLIP-G / T5-XXL parts (all three when
 * need_all); the error names the offending input. */
static sd_status check_sd3_parts(const char *node, sd_checkpoint *const *c, int n, int need_all,
                                 const char *const *inputs, sd_error *err) {
    for (int i = 0; i < n; i++) {
        sd_te_kind k = sd_checkpoint_info(c[i])->te_kind;
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= sd_checkpoint_info(c[j])->te_kind == k;
        if (!is_sd3_part(k) || dup) {
            sd_error_set(err, SD_ERR_UNSUPPORTED,
                         "%s%s needs %s CLIP-L, CLIP-G and T5-XXL files; %s is %s %s%s", node,
                         need_all ? "" : " type sd3", need_all ? "one each of the" : "two different parts of",
                         inputs[i], dup ? "a second" : "a", part_name(k),
                         dup ? "" : " (not an SD3 text encoder part)");
            sd_error_at(err, NULL, NULL, inputs[i]);
            return SD_ERR_UNSUPPORTED;
        }
    }
    return SD_OK;
}

static sd_status dual_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    const char *type = sd_value_as_string(in[2]);
    if (!type) type = "";
    sd_te_kind kind = strcmp(type, "flux") == 0   ? SD_TE_FLUX
                      : strcmp(type, "sdxl") == 0 ? SD_TE_SDXL
                      : strcmp(type, "sd3") == 0  ? SD_TE_SD3
                                                  : 0;
    if (!kind) return refuse_type("DualCLIPLoader", type, "is not supported", err);
    static const char *const inputs[] = {"clip_name1", "clip_name2"};
    sd_checkpoint *c[2] = {NULL, NULL};
    sd_status rc = open_part(ctx, in, 0, inputs[0], &c[0], err);
    if (!rc) rc = open_part(ctx, in, 1, inputs[1], &c[1], err);
    if (!rc && kind == SD_TE_SD3) {
        rc = check_sd3_parts("DualCLIPLoader", c, 2, 0, inputs, err);
    } else if (!rc) {
        /* what the type needs, as FluxClipModel / SDXLClipModel sort the
         * files: one CLIP-L plus the T5 (flux) or the CLIP-G (sdxl) */
        sd_te_kind k0 = sd_checkpoint_info(c[0])->te_kind, k1 = sd_checkpoint_info(c[1])->te_kind;
        sd_te_kind other = kind == SD_TE_FLUX ? SD_TE_T5 : SD_TE_SDXL_REFINER;
        if (!((k0 == SD_TE_SD1 && k1 == other) || (k1 == SD_TE_SD1 && k0 == other))) {
            rc = sd_error_set(err, SD_ERR_UNSUPPORTED,
                              "DualCLIPLoader type %s needs a CLIP-L and a %s file; clip_name1 is a "
                              "%s, clip_name2 a %s",
                              type, part_name(other), part_name(k0), part_name(k1));
            sd_error_at(err, NULL, NULL, k0 == SD_TE_SD1 || k0 == other ? "clip_name2" : "clip_name1");
        }
    }
    if (!rc) {
        out[0] = sd_nodes_clip_value_files(c, 2, kind);
        if (!out[0]) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    sd_checkpoint_unref(c[0]);
    sd_checkpoint_unref(c[1]);
    return rc;
}

static const sd_input_def dual_inputs[] = {
    {.name = "clip_name1", .type = SD_T_COMBO, .options_fn = list_text_encoders,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {.name = "clip_name2", .type = SD_T_COMBO, .options_fn = list_text_encoders,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {.name = "type", .type = SD_T_COMBO, .options = dual_types, .def_str = "sdxl", .no_default = 1},
    {.name = "device", .type = SD_T_COMBO, .options = devices, .def_str = "default", .optional = 1, .no_default = 1,
     .advanced = 1},
    {0}};
static const sd_output_def clip_outputs[] = {{"CLIP", "CLIP"}, {0}};

const sd_node_def sd_node_DualCLIPLoader = {
    .version = 1,
    .class_type = "DualCLIPLoader",
    .python_module = "nodes",
    .description = "[Recipes]\n\nsdxl: clip-l, clip-g\nsd3: clip-l, clip-g / clip-l, t5 / clip-g, t5\nflux: clip-l, "
                   "t5\nhidream: at least one of t5 or llama, recommended t5 and llama\nhunyuan_image: qwen2.5vl 7b "
                   "and byt5 small\nnewbie: gemma-3-4b-it, jina clip v2",
    .display_name = "DualCLIPLoader",
    .category = "advanced/loaders",
    .help = "Loads two standalone text-encoder files as one CLIP: type flux takes a "
            "CLIP-L and a T5-XXL (t5xxl_fp16 / fp8), sdxl a CLIP-L and a CLIP-G, sd3 two of "
            "CLIP-L, CLIP-G and T5-XXL. Weights load when first used.",
    .inputs = dual_inputs,
    .outputs = clip_outputs,
    .run = dual_run,
};

/* ---- CLIPLoader ------------------------------------------------------------------ */

static sd_status single_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    const char *type = sd_value_as_string(in[1]);
    if (!type) type = "";
    sd_checkpoint *c = NULL;
    sd_status rc = open_part(ctx, in, 0, "clip_name", &c, err);
    if (rc) return rc;
    sd_te_kind k = sd_checkpoint_info(c)->te_kind;
    int sd3 = strcmp(type, "sd3") == 0 && is_sd3_part(k), is = 0;
    static const char *const l_refused[] = {"hidream", NULL};
    static const char *const g_refused[] = {"stable_cascade", "hidream", NULL};
    const char *const *refused = k == SD_TE_SD1 ? l_refused : k == SD_TE_SDXL_REFINER ? g_refused : NULL;
    for (int i = 0; refused && refused[i]; i++) is |= strcmp(type, refused[i]) == 0;
    if (!sd3 && (k == SD_TE_T5 || is)) {
        char what[160];
        snprintf(what, sizeof what, "with a %s file%s", part_name(k),
                 k == SD_TE_T5 ? " (for Flux, load it with a CLIP-L through DualCLIPLoader type "
                                 "flux; type sd3 makes it an SD3 text encoder)"
                               : "");
        rc = refuse_type("CLIPLoader", type, what, err);
    } else {
        out[0] = sd3 ? sd_nodes_clip_value_files(&c, 1, SD_TE_SD3) : sd_nodes_clip_value(c, 0);
        if (!out[0]) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    sd_checkpoint_unref(c);
    return rc;
}

static const sd_input_def single_inputs[] = {
    {.name = "clip_name", .type = SD_T_COMBO, .options_fn = list_text_encoders,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {.name = "type", .type = SD_T_COMBO, .options = single_types, .def_str = "stable_diffusion", .no_default = 1},
    {.name = "device", .type = SD_T_COMBO, .options = devices, .def_str = "default", .optional = 1, .no_default = 1,
     .advanced = 1},
    {0}};

const sd_node_def sd_node_CLIPLoader = {
    .version = 1,
    .class_type = "CLIPLoader",
    .python_module = "nodes",
    .description = "[Recipes]\n\nstable_diffusion: clip-l\nstable_cascade: clip-g\nsd3: t5 xxl/ clip-g / "
                   "clip-l\nstable_audio: t5 base\nmochi: t5 xxl\ncosmos: old t5 xxl\nlumina2: gemma 2 2B\nwan: umt5 "
                   "xxl\n hidream: llama-3.1 (Recommend) or t5\nomnigen2: qwen vl 2.5 3B",
    .display_name = "Load CLIP",
    .category = "advanced/loaders",
    .help = "Loads one standalone text-encoder file as a CLIP: a CLIP-L (SD1), CLIP-H "
            "(SD2) or CLIP-G (SDXL refiner), a Qwen3-4B (Z-Image, any type; lumina2 in its "
            "workflows); type sd3 makes a CLIP-L, CLIP-G or T5-XXL an SD3 text encoder "
            "with that part alone. Weights load when first used.",
    .inputs = single_inputs,
    .outputs = clip_outputs,
    .run = single_run,
};

/* ---- ComfyUI-GGUF's CLIP loaders --------------------------------------------------
 *
 * CLIPLoaderGGUF and DualCLIPLoaderGGUF (city96/ComfyUI-GGUF nodes.py): the
 * types and runs of CLIPLoader / DualCLIPLoader over a file list that adds
 * the folder's .gguf files (ComfyUI-GGUF: sorted(clip + clip_gguf)). A GGUF
 * text encoder (llama.cpp's T5 names, models/checkpoint/gguf_model.h) loads
 * with its quantized weights kept quantized and widened per op as
 * ComfyUI-GGUF's dequantize does (float16 arithmetic); a safetensors file
 * loads as those loaders load it (ComfyUI-GGUF's GGMLOps compute unquantized
 * weights as ComfyUI's own ops do). Files are probed and opened by their
 * content, whatever their extension. */

static const char *const gguf_exts[] = {".gguf", NULL};

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The model files of the folder and its .gguf files, one sorted list. */
static sd_status list_with_gguf(const sd_env *env, const char *folder, sd_value **out, sd_error *err) {
    sd_value *a = NULL, *b = NULL;
    sd_status rc = sd_model_paths_list(env, folder, &a, err);
    if (!rc) rc = sd_env_list_files(env, folder, gguf_exts, &b, err);
    size_t na = rc ? 0 : sd_value_list_len(a), nb = rc ? 0 : sd_value_list_len(b);
    const char **names = rc ? NULL : malloc((na + nb + 1) * sizeof *names);
    sd_value *list = names ? sd_value_list() : NULL;
    if (!rc && !list) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory listing folder '%s'", folder);
    if (!rc) {
        for (size_t i = 0; i < na; i++) names[i] = sd_value_as_string(sd_value_list_get(a, i));
        for (size_t i = 0; i < nb; i++) names[na + i] = sd_value_as_string(sd_value_list_get(b, i));
        qsort(names, na + nb, sizeof *names, cmp_name);
        for (size_t i = 0; i < na + nb && !rc; i++)
            if (sd_value_list_append(list, sd_value_string(names[i])) != 0) {
                list = NULL; /* the list was released with the failed append */
                rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory listing folder '%s'", folder);
            }
    }
    free(names);
    sd_value_unref(a);
    sd_value_unref(b);
    if (rc) {
        sd_value_unref(list);
        return rc;
    }
    *out = list;
    return SD_OK;
}

static sd_status list_text_encoders_gguf(const sd_env *env, sd_value **out, sd_error *err) {
    return list_with_gguf(env, SD_FOLDER_TEXT_ENCODERS, out, err);
}

static const sd_input_def dual_gguf_inputs[] = {
    {.name = "clip_name1", .type = SD_T_COMBO, .options_fn = list_text_encoders_gguf,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {.name = "clip_name2", .type = SD_T_COMBO, .options_fn = list_text_encoders_gguf,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {.name = "type", .type = SD_T_COMBO, .options = dual_types, .def_str = "sdxl", .no_default = 1},
    {0}};

const sd_node_def sd_node_DualCLIPLoaderGGUF = {
    .version = 1,
    .class_type = "DualCLIPLoaderGGUF",
    .python_module = "custom_nodes.ComfyUI-GGUF",
    .display_name = "DualCLIPLoader (GGUF)",
    .category = "bootleg",
    .help = "ComfyUI-GGUF's DualCLIPLoader: two text-encoder files, GGUF (T5 in "
            "llama.cpp naming, quantized weights kept quantized) or safetensors, as one "
            "CLIP; type flux takes a CLIP-L and a T5-XXL.",
    .inputs = dual_gguf_inputs,
    .outputs = clip_outputs,
    .run = dual_run,
};

static const sd_input_def single_gguf_inputs[] = {
    {.name = "clip_name", .type = SD_T_COMBO, .options_fn = list_text_encoders_gguf,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {.name = "type", .type = SD_T_COMBO, .options = single_types, .def_str = "stable_diffusion", .no_default = 1},
    {0}};

const sd_node_def sd_node_CLIPLoaderGGUF = {
    .version = 1,
    .class_type = "CLIPLoaderGGUF",
    .python_module = "custom_nodes.ComfyUI-GGUF",
    .display_name = "CLIPLoader (GGUF)",
    .category = "bootleg",
    .help = "ComfyUI-GGUF's CLIPLoader: one text-encoder file, GGUF or safetensors, as a "
            "CLIP, with CLIPLoader's types.",
    .inputs = single_gguf_inputs,
    .outputs = clip_outputs,
    .run = single_run,
};

/* ---- TripleCLIPLoader ------------------------------------------------------------ */

static sd_status triple_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    static const char *const inputs[] = {"clip_name1", "clip_name2", "clip_name3"};
    sd_checkpoint *c[3] = {NULL, NULL, NULL};
    sd_status rc = SD_OK;
    for (int i = 0; i < 3 && !rc; i++) rc = open_part(ctx, in, i, inputs[i], &c[i], err);
    if (!rc) rc = check_sd3_parts("TripleCLIPLoader", c, 3, 1, inputs, err);
    if (!rc) {
        out[0] = sd_nodes_clip_value_files(c, 3, SD_TE_SD3);
        if (!out[0]) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < 3; i++) sd_checkpoint_unref(c[i]);
    return rc;
}

static const sd_input_def triple_inputs[] = {
    {.name = "clip_name1", .type = SD_T_COMBO, .options_fn = list_text_encoders,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {.name = "clip_name2", .type = SD_T_COMBO, .options_fn = list_text_encoders,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {.name = "clip_name3", .type = SD_T_COMBO, .options_fn = list_text_encoders,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {0}};

const sd_node_def sd_node_TripleCLIPLoader = {
    .version = 1,
    .class_type = "TripleCLIPLoader",
    .python_module = "comfy_extras.nodes_sd3",
    .category = "advanced/loaders",
    .description = "[Recipes]\n\nsd3: clip-l, clip-g, t5",
    .flags = SD_NODE_V3,
    .help = "Loads a CLIP-L, a CLIP-G and a T5-XXL file (any order) as SD3's text encoder. "
            "Weights load when first used.",
    .inputs = triple_inputs,
    .outputs = clip_outputs,
    .run = triple_run,
};

/* ComfyUI-GGUF's TripleCLIPLoaderGGUF: no type input (its load_clip's
 * default "sd3"), so TripleCLIPLoader's run over the list with .gguf files:
 * SD3's CLIP-L, CLIP-G and T5-XXL, typically the T5 as a llama.cpp GGUF. */
static const sd_input_def triple_gguf_inputs[] = {
    {.name = "clip_name1", .type = SD_T_COMBO, .options_fn = list_text_encoders_gguf,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {.name = "clip_name2", .type = SD_T_COMBO, .options_fn = list_text_encoders_gguf,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {.name = "clip_name3", .type = SD_T_COMBO, .options_fn = list_text_encoders_gguf,
     .file_folder = SD_FOLDER_TEXT_ENCODERS, .file_probe = te_probe},
    {0}};

const sd_node_def sd_node_TripleCLIPLoaderGGUF = {
    .version = 1,
    .class_type = "TripleCLIPLoaderGGUF",
    .python_module = "custom_nodes.ComfyUI-GGUF",
    .display_name = "TripleCLIPLoader (GGUF)",
    .category = "bootleg",
    .help = "ComfyUI-GGUF's TripleCLIPLoader: SD3's CLIP-L, CLIP-G and T5-XXL, each a GGUF "
            "(T5 in llama.cpp naming, quantized weights kept quantized) or safetensors file, "
            "in any order, as one CLIP.",
    .inputs = triple_gguf_inputs,
    .outputs = clip_outputs,
    .run = triple_run,
};
