/* node.h - how a node type is declared, and what a node function receives.
 *
 * Each node family (nodes/<family>/) exports a NULL-terminated table of
 * sd_node_def pointers and registers it with sd_registry_add() at start.
 * The schema is declarative so that validation, `sdflow nodes --json`
 * (ComfyUI /object_info shape), the Lua binding and the cache key are all
 * derived from it.
 */
#ifndef SD_NODE_H
#define SD_NODE_H

#include <signal.h>
#include <stdint.h>
#include "error.h"
#include "value.h"

/* Literal input types. Any other type string ("MODEL", "LATENT", "IMAGE", ...)
 * is a link type: the input must be connected to an output of that type. */
#define SD_T_INT "INT"
#define SD_T_FLOAT "FLOAT"
#define SD_T_STRING "STRING"
#define SD_T_BOOLEAN "BOOLEAN"
#define SD_T_COMBO "COMBO"

typedef struct sd_env sd_env;
typedef struct sd_node_ctx sd_node_ctx;

/* Fills *out with a new SD_VAL_LIST of strings: the allowed values of a combo
 * input that depends on the environment (files in a models folder, ...). */
typedef sd_status (*sd_combo_fn)(const sd_env *env, sd_value **out, sd_error *err);

typedef struct sd_input_def {
    const char *name;
    const char *type;       /* SD_T_* or a link type name */
    int optional;           /* ComfyUI "optional" section */
    /* INT / FLOAT / BOOLEAN / STRING / COMBO defaults and limits */
    double def;             /* INT, FLOAT, BOOLEAN (0/1) default */
    const char *def_str;    /* STRING / COMBO default */
    double min, max, step;  /* used when has_range */
    int has_range;
    int multiline;          /* STRING */
    const char *const *options; /* COMBO: NULL-terminated fixed list, or */
    sd_combo_fn options_fn;     /* COMBO: list computed from the environment */
    /* The input names a file whose content identifies the result (LoadImage,
     * checkpoint loaders): the cache key hashes the file's bytes instead of
     * trusting its name. `file_folder` is the models sub-folder ("checkpoints")
     * or "input" for the input directory. */
    const char *file_folder;
    /* Optional, with file_folder: a cheap check (headers only, never the
     * weights) that the file named is one the node can load. Validation calls
     * it with the resolved path once per file and reports a failure as an
     * invalid_model_file problem, so an unsupported model is refused before
     * any node runs. Fills err with the message the node itself would give. */
    sd_status (*file_probe)(const char *path, sd_error *err);
    /* ComfyUI's image_upload: the frontend shows an upload button after the
     * node's required widgets (LoadImage), which UI-format files save as
     * one more entry of widgets_values (formats/workflow_ui.h). */
    int image_upload;
    /* ComfyUI declares no default (V3 inputs written without one:
     * PrimitiveInt, StringSubstring's start): /object_info has none; a value
     * left out still takes `def` / `def_str`, what the editor fills in. */
    int no_default;
    /* ComfyUI's control_after_generate on an INT not named seed/noise_seed
     * (PrimitiveInt): the editor's extra widget, as for seeds. */
    int control_after_generate;
    /* The range is Python's -sys.maxsize .. sys.maxsize (PrimitiveInt,
     * PrimitiveFloat): /object_info prints those exact integers, and an INT
     * is checked against them exactly (min/max are their nearest doubles). */
    int maxsize_range;
    /* How ComfyUI's editor shows the input (/object_info only; nothing
     * here changes how a node runs). `tooltip`: the hover text. `round`: a
     * FLOAT's "round" (the precision the editor rounds to; 0 = not printed,
     * SD_ROUND_FALSE = printed as false: no rounding). `display`: "number",
     * "slider" or "color". `advanced`: shown behind the node's advanced
     * toggle. `dynamic_prompts`: ComfyUI's dynamicPrompts on a STRING, the
     * editor replacing each {a|b|c} with one choice when it queues the
     * prompt (the server receives the chosen text, as from ComfyUI). */
    const char *tooltip;
    double round;
    const char *display;
    int advanced;
    int dynamic_prompts;
} sd_input_def;

/* A NULL-terminated list of strings written in place, for sd_node_def's
 * hidden and output_tooltips: .hidden = SD_STRINGS("prompt", "extra_pnginfo"). */
#define SD_STRINGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* sd_input_def.round printed as false (ComfyUI's round=False). */
#define SD_ROUND_FALSE (-1.0)

typedef struct sd_output_def {
    const char *name;
    const char *type;
    /* ComfyUI's OUTPUT_IS_LIST: the node returns an SD_VAL_LIST whose items
     * the nodes reading this output receive one at a time (core/executor.h,
     * "Lists"). */
    int is_list;
} sd_output_def;

enum {
    SD_NODE_OUTPUT = 1u << 0,        /* an output node (SaveImage) */
    SD_NODE_NOT_IDEMPOTENT = 1u << 1, /* never cached; node id enters its key */
    /* The node computes with a VAE / a text encoder: it runs in
     * env->vae_precision / env->clip_precision (when set; else precision),
     * and that precision enters its cache key (sd_env_node_precision). */
    SD_NODE_VAE = 1u << 2,
    SD_NODE_TEXT_ENCODER = 1u << 3,
    /* What /object_info reports as "deprecated" / "experimental" (ComfyUI's
     * editor hides the first and marks the second); no effect on running. */
    SD_NODE_DEPRECATED = 1u << 4,
    SD_NODE_EXPERIMENTAL = 1u << 5,
    /* ComfyUI's INPUT_IS_LIST: the node runs once with every input as an
     * SD_VAL_LIST of what it was given (a list output's items, or the one
     * value of anything else), instead of once per item (executor.h). */
    SD_NODE_INPUT_IS_LIST = 1u << 6,
    /* ComfyUI defines the node with a V3 schema (comfy_api io.Schema):
     * /object_info prints it as its GET_NODE_INFO_V1 does (every input with
     * an options object, combos as "COMBO" with "options" and "multiselect",
     * STRING's "multiline" always, one output tooltip per output, null for
     * an unset display_name, hidden inputs as lists, deprecated,
     * experimental, api_node and output_matchtypes always). */
    SD_NODE_V3 = 1u << 7,
    /* The node's outputs carry state that lives in this process and that the
     * nodes using them change as they run (ComfyUI's closure state: APG's
     * momentum, which carries from one sampling run of the MODEL to the
     * next). Its results and everything downstream of it stay in the
     * in-process memo (reruns in one process see the state as ComfyUI's
     * cache does) but never enter the persistent cache nor come from it:
     * keys do not see the state, and a new process starts it afresh, so a
     * stored result computed on a carried state would pass for a fresh one,
     * and a hit would skip a run that a later one carries from. See
     * sd_node_def.stateless. */
    SD_NODE_PROCESS_STATE = 1u << 8
};

/* A node function. `in` is aligned with def->inputs (NULL for an absent
 * optional input); literal inputs arrive as INT/FLOAT/BOOL/STRING values.
 * The function stores one new reference per output in `out` (aligned with
 * def->outputs). On failure it returns non-SD_OK with err filled (the
 * executor adds node id and class_type); outputs already stored are released
 * by the executor. */
typedef sd_status (*sd_node_fn)(sd_node_ctx *ctx, sd_value *const *in,
                                sd_value **out, sd_error *err);

/* display_name, category, description, python_module, hidden and
 * output_tooltips are what ComfyUI's /object_info says of the node, copied
 * from its definition (NODE_DISPLAY_NAME_MAPPINGS, CATEGORY, DESCRIPTION,
 * RELATIVE_PYTHON_MODULE, hidden inputs, OUTPUT_TOOLTIPS, or its V3 schema);
 * cli.object_info checks every node against tests/data/comfyui_object_info.json,
 * made from ComfyUI by scripts/comfyui_object_info.py (docs/nodes.md, "Adding
 * a node"). Fields after `run` are set by name (.python_module = ...). */
typedef struct sd_node_def {
    int version;             /* bump when results change: enters the cache key */
    const char *class_type;
    const char *display_name; /* NULL: the class_type (V1), null (SD_NODE_V3) */
    const char *category;
    const char *description;  /* ComfyUI's, "" when NULL (the editor's hover text) */
    const sd_input_def *inputs;   /* terminated by an entry with name == NULL */
    const sd_output_def *outputs; /* terminated by an entry with name == NULL */
    unsigned flags;               /* SD_NODE_* */
    sd_node_fn run;
    /* ComfyUI's module of the node, which the editor reads for its source
     * badge: "nodes", "comfy_extras.nodes_mask", "custom_nodes.ComfyUI-GGUF".
     * NULL: "custom_nodes.sdflow", a node of sdflow's own. */
    const char *python_module;
    /* ComfyUI's hidden inputs, NULL-terminated ("prompt", "extra_pnginfo",
     * "unique_id", "dynprompt"): listed by /object_info only; the executor
     * gives every node the prompt and extra_pnginfo (sd_node_ctx). */
    const char *const *hidden;
    /* ComfyUI's OUTPUT_TOOLTIPS, NULL-terminated, as it declares them (one
     * per output, or more: LoraLoaderModelOnly inherits LoraLoader's two).
     * A V3 node prints one per output, null past the end of this list. */
    const char *const *output_tooltips;
    /* sdflow's own notes on the node (how it computes, what it refuses):
     * shown by the Lua REPL's help, never sent to ComfyUI's clients. */
    const char *help;
    /* SD_NODE_PROCESS_STATE nodes only (may be NULL: always stateful): 1
     * when the literal inputs (aligned with `inputs`, defaults filled; NULL
     * where the input is a link) say the result keeps no state this time
     * (APG at momentum 0), so the persistent cache serves as usual. */
    int (*stateless)(sd_value *const *lit);
} sd_node_def;

/* Progress/log callbacks owned by the front end (CLI, REPL). */
typedef void (*sd_progress_fn)(void *user, const char *node_id, int64_t value,
                               int64_t max);
typedef void (*sd_log_fn)(void *user, int level, const char *msg);
/* A sampler's denoised latent after `step` of `steps` (see sd_node_preview). */
struct sd_tensor;
typedef void (*sd_preview_fn)(void *user, const char *node_id, int64_t step, int64_t steps,
                              const struct sd_tensor *latent, const char *latent_format);
enum { SD_LOG_ERROR = 0, SD_LOG_WARN = 1, SD_LOG_INFO = 2, SD_LOG_DEBUG = 3 };

/* Process-wide settings a node may read. Owned by the front end; nodes only
 * read it. Paths are never NULL once sd_env_init() has run. */
struct sd_env {
    const char *models_dir;    /* has checkpoints/, loras/, vae/, controlnet/, embeddings/ */
    const char *comfyui_dir;   /* optional: an existing ComfyUI install (NULL if unset) */
    const char *input_dir;     /* LoadImage root, default ./input */
    const char *output_dir;    /* SaveImage root, default ./output */
    const char *temp_dir;      /* PreviewImage root */
    const char *tokenizer_dir; /* CLIP vocab; NULL = look beside the model */
    const char *precision;     /* "f32" | "bf16" | "f16" (enters cache keys) */
    const char *vae_precision; /* SD_NODE_VAE nodes; NULL = precision */
    const char *clip_precision; /* SD_NODE_TEXT_ENCODER nodes; NULL = precision */
    const char *device;        /* "cpu" | "cuda" */
    uint64_t max_image_pixels; /* LoadImage refuses larger images (formats/png.h); 0 = no limit */
    uint64_t max_memory;       /* bytes one allocation estimate may need (core/membudget.h); 0 = no limit */
    uint64_t gpu_memory;       /* cap on the GPU backend's device memory (--gpu-memory); 0 = the card's */
    /* CLIP-L attention heads when they are not width / 64: only tiny test
     * models need it (the reference sets' ComfyUI runs pass it as
     * clip_l_model_config); 0 = width / 64. Reaches every CLIP-L the model
     * loaders open (sd_checkpoint_opts.clip_l_heads). Like tokenizer_dir it
     * does not enter cache keys. */
    int clip_l_heads;
    /* The same for every CLIP-G (bigG: SDXL's, SD3's) the loaders open
     * (sd_checkpoint_opts.clip_g_heads); 0 = width / 64. */
    int clip_g_heads;
    /* The hidden width taken as Qwen3-4B (Z-Image's text encoder) by the
     * loaders (sd_checkpoint_opts.qwen3_4b_width); 0 = 2560, the real one's. */
    int qwen3_4b_width;
    /* LoraLoader refuses a LoRA any patch of which does not fit the model
     * (--lora-strict); 0 = apply what fits and warn, as ComfyUI. A refusal
     * is an error, never a result, so it is not part of cache keys. */
    int lora_strict;
    void *models;              /* process-lifetime store of loaded models (nodes/) */
    void *backend;             /* compute backend (kernels/backend.h) */
    sd_log_fn log;
    void *log_user;
    /* Output names shared by several machines (`sdflow worker`): before an
     * output node publishes `name` in folder `type` ("output", "temp") and
     * `subfolder`, it asks here; *taken = 1 moves it on to the next counter,
     * as a name taken in the local folder does. NULL = the folder alone
     * decides. Called on the thread that runs the node. */
    sd_status (*claim_name)(void *user, const char *type, const char *subfolder, const char *name, int *taken,
                            sd_error *err);
    void *claim_user;
    /* Told the path of each model file a loader opens (every loader
     * resolves its file through models/checkpoint/model_paths.h: checkpoints,
     * diffusion models, text encoders, VAEs, LoRAs, GGUF files, ...), once per
     * resolve, so a file used twice may be told twice. sdflow-bench sums
     * the sizes of the files a run opened this way. NULL = nobody asks.
     * Called on the thread that runs the node; `path` lives for the call. */
    void (*on_model_file)(void *user, const char *folder, const char *path);
    void *model_file_user;
};

/* What a running node sees. */
struct sd_node_ctx {
    const sd_env *env;
    const char *node_id;
    const char *class_type;
    const char *prompt_json;  /* the API-format workflow being run (SaveImage embeds it) */
    const char *extra_pnginfo_json; /* extra tEXt chunks (JSON object) or NULL */
    volatile sig_atomic_t *interrupt; /* non-zero once the user asked to stop */
    sd_progress_fn progress;
    void *progress_user;
    /* Output nodes set this to a new SD_VAL_DICT describing what they wrote,
     * ComfyUI's "ui" result, e.g. {"images": [{"filename","subfolder","type"}],
     * "files": ["/abs/path.png", ...]}. The executor owns it afterwards, caches
     * it, and re-executes a cached output node when one of "files" is gone. */
    sd_value *ui;
    /* Latent previews (NULL when the front end wants none): a sampler hands
     * its current denoised estimate through sd_node_preview(). */
    sd_preview_fn preview;
    void *preview_user;
    /* Sees every warning the node logs (sd_node_log at SD_LOG_WARN or
     * worse) besides env->log: the executor keeps them in the run's report
     * (sd_exec_record.warnings). NULL = the log alone. */
    void (*on_warning)(void *user, const char *msg);
    void *warning_user;
};

/* Report progress inside a long node. Returns SD_ERR_CANCELLED (with err
 * filled) when the user interrupted, so loops can `if (rc) return rc;`. */
sd_status sd_node_progress(sd_node_ctx *ctx, int64_t value, int64_t max, sd_error *err);
/* Hand the current denoised latent (F32 [N, C, h, w], host memory, in the
 * model's scaled latent space) to the front end, when it asked for previews
 * (ctx->preview set; otherwise nothing happens). latent_format: the name of
 * its models/sampling/latent_format.h format ("sd1", "sdxl", "flux") or
 * NULL. The tensor is only read during the call. */
void sd_node_preview(sd_node_ctx *ctx, int64_t step, int64_t steps, const struct sd_tensor *latent,
                     const char *latent_format);
/* Hand a finished picture (F32 [H, W, C], C = 1, 3 or 4, values in [0, 1],
 * host memory) to the front end as image `index` of `count`, to be shown or
 * sent as it is (SaveImageWebsocket): an SD_EXEC_NODE_IMAGE event, which,
 * unlike latent previews, is always delivered when the run has an event
 * callback. Passed through ctx->preview with latent_format "image". */
void sd_node_image(sd_node_ctx *ctx, int64_t index, int64_t count, const struct sd_tensor *image);
/* Log through the environment's callback (no output when none is set). */
void sd_node_log(const sd_node_ctx *ctx, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- registry: filled at start, read-only afterwards --------------------- */

/* Add a NULL-terminated table. Returns SD_ERR_INVALID on a duplicate name. */
sd_status sd_registry_add(const sd_node_def *const *table, sd_error *err);
/* Register `alias` as another name for an existing class_type. */
sd_status sd_registry_alias(const char *alias, const char *class_type, sd_error *err);
/* Lookup by class_type or alias; NULL if unknown. */
const sd_node_def *sd_registry_find(const char *class_type);
/* Iterate registered defs (aliases not repeated), sorted by class_type. */
size_t sd_registry_count(void);
const sd_node_def *sd_registry_at(size_t i);
/* Number of aliases and the i-th (alias, target) pair. */
size_t sd_registry_alias_count(void);
void sd_registry_alias_at(size_t i, const char **alias, const char **class_type);
/* Remove everything (tests). */
void sd_registry_reset(void);

/* Registers every built-in node family (nodes/nodes.c). */
sd_status sd_nodes_register_all(sd_error *err);

/* Helpers for node authors: index of an input/output by name, or -1. */
int sd_node_input_index(const sd_node_def *def, const char *name);
int sd_node_output_index(const sd_node_def *def, const char *name);
int sd_node_input_count(const sd_node_def *def);
int sd_node_output_count(const sd_node_def *def);
/* 1 when the type is a literal (INT/FLOAT/STRING/BOOLEAN/COMBO). */
int sd_type_is_literal(const char *type);
/* 1 when ComfyUI's editor shows a control_after_generate widget after this
 * input: one declared so (control_after_generate), or an INT named seed or
 * noise_seed (ComfyUI's core nodes declare those so too). */
int sd_input_has_control_after_generate(const sd_input_def *d);

#endif
