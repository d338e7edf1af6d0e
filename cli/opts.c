/* opts.c - the option parser every command shares (cli.h), its generated
 * help, and the helpers that turn the shared options into an env, --set
 * edits and a cache. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cache/cache.h"
#include "cli.h"
#include "core/env.h"
#include "core/graph.h"
#include "core/membudget.h"
#include "core/text.h"
#include "kernels/backend.h"
#include "lua/sdlua.h"

/* ---- the shared groups ---------------------------------------------------------
 * Declared once with offsets into sd_cli_args, so every command that takes a
 * group spells, checks and documents it the same way. */

typedef struct shared_opt {
    unsigned group;
    const char *name, *alias;
    sd_cli_kind kind;
    size_t offset; /* into sd_cli_args */
    const char *arg, *help, *choices;
} shared_opt;

#define OFF(f) offsetof(sd_cli_args, f)
#define G_IO (1u << 0) /* the part of SD_CLI_G_ENV beyond SD_CLI_G_MODELS */
static const shared_opt shared[] = {
    {SD_CLI_G_SET, "--set", NULL, SD_CLI_LIST, OFF(sets), "ID.INPUT=VALUE",
     "change a node input before running (repeatable; ID may be a title or class_type)", NULL},
    {SD_CLI_G_MODELS, "--models-dir", NULL, SD_CLI_STR, OFF(models_dir), "DIR",
     "models folder: checkpoints/, loras/, vae/, ... (env SDFLOW_MODELS_DIR; default ./models)", NULL},
    {SD_CLI_G_MODELS, "--comfyui-dir", NULL, SD_CLI_STR, OFF(comfyui_dir), "DIR",
     "an existing ComfyUI install to find models and inputs in too (env SDFLOW_COMFYUI_DIR)", NULL},
    {SD_CLI_G_MODELS, "--tokenizer-dir", NULL, SD_CLI_STR, OFF(tokenizer_dir), "DIR",
     "CLIP vocabulary folder (env SDFLOW_TOKENIZER_DIR; default: beside the model)", NULL},
    {SD_CLI_G_MODELS, "--clip-l-heads", NULL, SD_CLI_STR, OFF(clip_l_heads), "N",
     "attention heads of every CLIP-L the loaders open, for test models that are not 64 wide per "
     "head (default: width / 64, as every real CLIP-L)", NULL},
    {SD_CLI_G_MODELS, "--clip-g-heads", NULL, SD_CLI_STR, OFF(clip_g_heads), "N",
     "attention heads of every CLIP-G (bigG) the loaders open, for test models that are not 64 wide "
     "per head (default: width / 64, as every real CLIP-G)", NULL},
    {SD_CLI_G_MODELS, "--qwen3-4b-width", NULL, SD_CLI_STR, OFF(qwen3_4b_width), "N",
     "hidden width the loaders take as Qwen3-4B (Z-Image's text encoder), for test models that are "
     "not 2560 wide (default 2560, the real model's)", NULL},
    {G_IO, "--input-dir", NULL, SD_CLI_STR, OFF(input_dir), "DIR", "LoadImage folder (default ./input)", NULL},
    {G_IO, "--output-dir", NULL, SD_CLI_STR, OFF(output_dir), "DIR", "SaveImage folder (default ./output)",
     NULL},
    {G_IO, "--temp-dir", NULL, SD_CLI_STR, OFF(temp_dir), "DIR",
     "PreviewImage folder (default $TMPDIR/sdflow)", NULL},
    {G_IO, "--max-image-pixels", NULL, SD_CLI_STR, OFF(max_image_pixels), "N",
     "LoadImage refuses images with more pixels (env SDFLOW_MAX_IMAGE_PIXELS; default 178956970, "
     "as ComfyUI; 0 = no limit)", NULL},
    {G_IO, "--max-memory", NULL, SD_CLI_STR, OFF(max_memory), "BYTES",
     "refuse a node whose estimated allocation (latent, image, VAE activations) is larger, e.g. 8G "
     "(env SDFLOW_MAX_MEMORY; default physical RAM; 0 = no limit)", NULL},
    {G_IO, "--precision", NULL, SD_CLI_STR, OFF(precision), "f32|bf16|f16",
     "compute precision (default f32; bf16 needs oneDNN on the CPU, f16 a GPU)", "f32|bf16|f16"},
    {G_IO, "--vae-precision", NULL, SD_CLI_STR, OFF(vae_precision), "f32|bf16|f16",
     "precision of the VAE nodes (default: --precision); a decode giving NaN/Inf is redone in f32",
     "f32|bf16|f16"},
    {G_IO, "--clip-precision", NULL, SD_CLI_STR, OFF(clip_precision), "f32|bf16|f16",
     "precision of the text-encoder nodes (default: --precision)", "f32|bf16|f16"},
    {G_IO, "--lora-strict", NULL, SD_CLI_FLAG, OFF(lora_strict), NULL,
     "refuse a LoRA any patch of which does not fit the model (default: apply what fits and warn, as "
     "ComfyUI)", NULL},
    {G_IO, "--device", NULL, SD_CLI_STR, OFF(device), "cpu|cuda|cuda:N",
     "compute device (default cuda when this build has it and a GPU is present, else cpu; cuda:N = card N)", NULL},
    {G_IO, "--gpu-memory", NULL, SD_CLI_STR, OFF(gpu_memory), "BYTES",
     "cap on the device memory the CUDA backend holds, e.g. 10G (default: what the card has)", NULL},
    {SD_CLI_G_CACHE, "--cache", NULL, SD_CLI_STR, OFF(cache), "PATH",
     "output cache database (env SDFLOW_CACHE; default ~/.cache/sdflow/cache.db)", NULL},
    {SD_CLI_G_CACHE, "--no-cache", NULL, SD_CLI_FLAG, OFF(no_cache), NULL,
     "neither read nor write cached outputs (file hashes are still memoised)", NULL},
    {SD_CLI_G_PROGRESS, "--quiet", "-q", SD_CLI_FLAG, OFF(quiet), NULL,
     "no progress and no summary on stderr (same as --progress=none)", NULL},
    {SD_CLI_G_PROGRESS, "--progress", NULL, SD_CLI_STR, OFF(progress), "MODE",
     "auto (bar on a terminal, else plain lines), bar, plain, json (one JSON event per line), none",
     "auto|bar|plain|json|none"},
    {SD_CLI_G_PROGRESS, "--preview", NULL, SD_CLI_STR, OFF(preview), "PATH.png",
     "rewrite a small picture of the sampler's current latent while it runs", NULL},
    {SD_CLI_G_LUA, "--allow-unsafe-lua", NULL, SD_CLI_FLAG, OFF(unsafe_lua), NULL,
     "give Lua workflows io, os and require (trusted files only)", NULL},
    {SD_CLI_G_LUA, "--lua-max-instructions", NULL, SD_CLI_STR, OFF(lua_max_instructions), "N",
     "stop a Lua workflow script after N Lua instructions (env SDFLOW_LUA_MAX_INSTRUCTIONS; "
     "default 1000000000; 0 = no limit)", NULL},
    {SD_CLI_G_LUA, "--lua-timeout", NULL, SD_CLI_STR, OFF(lua_timeout), "SECONDS",
     "stop a Lua workflow script after this wall time (env SDFLOW_LUA_TIMEOUT; default 0 = no limit)", NULL},
};
#undef OFF
#undef G_IO

/* One option either table may hold, resolved to its destination. */
typedef struct found {
    const char *name;
    sd_cli_kind kind;
    void *dst;
    const char *choices;
    const char *implicit; /* SD_CLI_OPTSTR */
} found;

static int spelled(const char *arg, size_t len, const char *name) {
    return name && strlen(name) == len && strncmp(arg, name, len) == 0;
}

static int lookup(const sd_cli_command *cmd, sd_cli_args *a, const char *arg, size_t len, found *f) {
    for (const sd_cli_option *o = cmd->options; o && o->name; o++) {
        if (spelled(arg, len, o->name) || spelled(arg, len, o->alias)) {
            *f = (found){o->name, o->kind, o->dst, o->choices, o->implicit};
            return 1;
        }
    }
    for (size_t k = 0; k < sizeof shared / sizeof *shared; k++) {
        const shared_opt *s = &shared[k];
        if (!(cmd->groups & s->group)) continue;
        if (spelled(arg, len, s->name) || spelled(arg, len, s->alias)) {
            *f = (found){s->name, s->kind, (char *)a + s->offset, s->choices, NULL};
            return 1;
        }
    }
    return 0;
}

static int one_of(const char *v, const char *choices) {
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

static int list_push(sd_cli_list *l, const char *v) {
    const char **items = realloc(l->items, (size_t)(l->n + 1) * sizeof *items);
    if (!items) return -1;
    items[l->n++] = v;
    l->items = items;
    return 0;
}

/* Stores v into f's destination; prints and returns 1 when it is not valid. */
static int store(const sd_cli_command *cmd, const found *f, const char *v) {
    if (f->choices && !one_of(v, f->choices)) {
        fprintf(stderr, "sdflow %s: %s must be one of %s, not '%s'\n", cmd->name, f->name, f->choices, v);
        return 1;
    }
    char *end = NULL;
    errno = 0;
    switch (f->kind) {
    case SD_CLI_FLAG: break; /* not reached: flags take no value */
    case SD_CLI_STR:
    case SD_CLI_OPTSTR: *(const char **)f->dst = v; break;
    case SD_CLI_INT: {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno) {
            fprintf(stderr, "sdflow %s: %s needs a whole number, not '%s'\n", cmd->name, f->name, v);
            return 1;
        }
        *(long long *)f->dst = x;
        break;
    }
    case SD_CLI_FLOAT: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x)) {
            fprintf(stderr, "sdflow %s: %s needs a number, not '%s'\n", cmd->name, f->name, v);
            return 1;
        }
        *(double *)f->dst = x;
        break;
    }
    case SD_CLI_LIST:
        if (list_push(f->dst, v)) {
            fprintf(stderr, "sdflow %s: out of memory\n", cmd->name);
            return 1;
        }
        break;
    }
    return 0;
}

static int usage_error(const sd_cli_command *cmd) {
    fprintf(stderr, "usage: sdflow %s %s (sdflow %s --help for more)\n", cmd->name, cmd->synopsis, cmd->name);
    return 1;
}

int sd_cli_parse(const sd_cli_command *cmd, int argc, char **argv, sd_cli_args *a) {
    memset(a, 0, sizeof *a);
    int only_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        int is_opt = !only_pos && arg[0] == '-' && arg[1] != 0; /* a lone "-" is stdin */
        if (is_opt && !strcmp(arg, "--")) { only_pos = 1; continue; }
        if (is_opt && (!strcmp(arg, "--help") || !strcmp(arg, "-h"))) {
            sd_cli_help(cmd, stdout);
            return fflush(stdout) == 0 ? 0 : 1;
        }
        if (!is_opt) {
            if (a->n_pos >= cmd->max_pos || a->n_pos >= SD_CLI_MAX_POS) {
                fprintf(stderr, "sdflow %s: unexpected argument '%s'\n", cmd->name, arg);
                return usage_error(cmd);
            }
            a->pos[a->n_pos++] = arg;
            continue;
        }
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        found f;
        if (!lookup(cmd, a, arg, len, &f)) {
            fprintf(stderr, "sdflow %s: unknown option '%.*s'\n", cmd->name, (int)len, arg);
            return usage_error(cmd);
        }
        if (f.kind == SD_CLI_FLAG) {
            if (eq) {
                fprintf(stderr, "sdflow %s: %s takes no value\n", cmd->name, f.name);
                return 1;
            }
            *(int *)f.dst = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v && f.kind == SD_CLI_OPTSTR) {
            if (i + 1 < argc && argv[i + 1][0] != '-') v = argv[++i];
            else v = f.implicit;
        }
        if (!v) {
            if (i + 1 >= argc) {
                fprintf(stderr, "sdflow %s: option '%s' needs a value\n", cmd->name, arg);
                return 1;
            }
            v = argv[++i];
        }
        if (store(cmd, &f, v)) return 1;
    }
    if (a->n_pos < cmd->min_pos) return usage_error(cmd);
    if (a->cache && a->no_cache) {
        fprintf(stderr, "sdflow %s: --cache and --no-cache exclude each other\n", cmd->name);
        return 1;
    }
    if (a->quiet && a->progress && strcmp(a->progress, "none") != 0) {
        fprintf(stderr, "sdflow %s: --quiet and --progress=%s exclude each other\n", cmd->name, a->progress);
        return 1;
    }
    return SD_CLI_CONTINUE;
}

void sd_cli_list_free(sd_cli_list *l) {
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

void sd_cli_args_free(sd_cli_args *a) { sd_cli_list_free(&a->sets); }

/* ---- help ------------------------------------------------------------------------ */

static void help_line(FILE *f, const char *name, const char *alias, const char *arg, const char *help) {
    char head[96];
    if (alias) snprintf(head, sizeof head, "%s, %s%s%s", alias, name, arg ? " " : "", arg ? arg : "");
    else snprintf(head, sizeof head, "%s%s%s", name, arg ? " " : "", arg ? arg : "");
    if (strlen(head) <= 26) fprintf(f, "  %-26s %s\n", head, help);
    else fprintf(f, "  %s\n  %-26s %s\n", head, "", help);
}

void sd_cli_help(const sd_cli_command *cmd, FILE *f) {
    fprintf(f, "usage: sdflow %s %s\n", cmd->name, cmd->synopsis);
    if (cmd->about) fprintf(f, "\n%s\n", cmd->about);
    if (cmd->options && cmd->options[0].name) {
        fputs("\noptions:\n", f);
        for (const sd_cli_option *o = cmd->options; o->name; o++) {
            char opt[64];
            if (o->kind == SD_CLI_OPTSTR) snprintf(opt, sizeof opt, "[%s]", o->arg ? o->arg : "VALUE");
            help_line(f, o->name, o->alias, o->kind == SD_CLI_OPTSTR ? opt : o->arg, o->help);
        }
    }
    if (cmd->groups) {
        fputs("\nshared options (the same for every command that takes them):\n", f);
        for (size_t k = 0; k < sizeof shared / sizeof *shared; k++)
            if (cmd->groups & shared[k].group)
                help_line(f, shared[k].name, shared[k].alias, shared[k].arg, shared[k].help);
    }
    help_line(f, "--help", "-h", NULL, "this help");
}

/* ---- what the shared options do --------------------------------------------------- */

/* --clip-l-heads / --clip-g-heads: a head count no real file needs. */
static sd_status parse_heads(const char *opt, const char *v, int *out, sd_error *err) {
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 1 || n > 1024)
        return sd_error_set(err, SD_ERR_INVALID, "%s must be a whole number from 1 to 1024, not '%s'", opt, v);
    *out = (int)n;
    return SD_OK;
}

/* --qwen3-4b-width: a width no real file needs. */
static sd_status parse_width(const char *v, int *out, sd_error *err) {
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 1 || n > 65536)
        return sd_error_set(err, SD_ERR_INVALID, "--qwen3-4b-width must be a whole number from 1 to 65536, not '%s'",
                            v);
    *out = (int)n;
    return SD_OK;
}

sd_status sd_cli_env_init(sd_env *env, const sd_cli_args *a, sd_error *err) {
    sd_status rc = sd_env_init(env, err);
    struct {
        const char **field;
        const char *value;
    } over[] = {
        {&env->output_dir, a->output_dir},   {&env->input_dir, a->input_dir},
        {&env->temp_dir, a->temp_dir},       {&env->models_dir, a->models_dir},
        {&env->comfyui_dir, a->comfyui_dir}, {&env->tokenizer_dir, a->tokenizer_dir},
        {&env->precision, a->precision},
        /* no --device: the GPU when the build and the machine have one */
        {&env->device, a->device ? a->device : sd_backend_default_name()},
        {&env->vae_precision, a->vae_precision}, {&env->clip_precision, a->clip_precision},
    };
    for (size_t k = 0; !rc && k < sizeof over / sizeof *over; k++)
        if (over[k].value) rc = sd_env_set(env, over[k].field, over[k].value, err);
    /* --device cuda:N picks the card (one worker per GPU); the results are
     * the same on every card, so the cache keys say "cuda" */
    if (!rc && env->device && strcmp(env->device, "cpu") && strcmp(env->device, "cuda") && strncmp(env->device, "cuda:", 5))
        rc = sd_error_set(err, SD_ERR_INVALID, "--device must be cpu, cuda or cuda:N, not '%s'", env->device);
    if (!rc && env->device && !strncmp(env->device, "cuda:", 5)) {
        char *end = NULL;
        long n = strtol(env->device + 5, &end, 10);
        if (!env->device[5] || *end || n < 0 || n > 1024) {
            rc = sd_error_set(err, SD_ERR_INVALID, "--device %s: expected cuda or cuda:N (N a device index)", env->device);
        } else {
            char idx[16];
            snprintf(idx, sizeof idx, "%ld", n);
            setenv("SDFLOW_CUDA_DEVICE", idx, 1); /* what the CUDA backend reads (kernels/cuda) */
            rc = sd_env_set(env, &env->device, "cuda", err);
        }
    }
    if (!rc) env->lora_strict = a->lora_strict;
    if (!rc && a->clip_l_heads) rc = parse_heads("--clip-l-heads", a->clip_l_heads, &env->clip_l_heads, err);
    if (!rc && a->clip_g_heads) rc = parse_heads("--clip-g-heads", a->clip_g_heads, &env->clip_g_heads, err);
    if (!rc && a->qwen3_4b_width) rc = parse_width(a->qwen3_4b_width, &env->qwen3_4b_width, err);
    if (!rc && a->max_image_pixels) {
        rc = sd_env_set_max_pixels(env, a->max_image_pixels, err);
        if (rc) sd_error_prefix(err, "--max-image-pixels");
    }
    if (!rc && a->gpu_memory) {
        uint64_t v;
        rc = sd_mem_parse(a->gpu_memory, &v, err);
        if (rc) sd_error_prefix(err, "--gpu-memory");
        else env->gpu_memory = v;
    }
    if (!rc && a->max_memory) {
        rc = sd_env_set_max_memory(env, a->max_memory, err);
        if (rc) sd_error_prefix(err, "--max-memory");
    }
    return rc;
}

sd_status sd_cli_lua_opts(const sd_cli_args *a, volatile sig_atomic_t *interrupt, sd_lua_opts *lo,
                          sd_error *err) {
    memset(lo, 0, sizeof *lo);
    lo->allow_unsafe = a->unsafe_lua;
    lo->interrupt = interrupt;
    const char *v = a->lua_max_instructions, *name = "--lua-max-instructions";
    if (!v && (v = getenv("SDFLOW_LUA_MAX_INSTRUCTIONS")) && !*v) v = NULL;
    if (v && !a->lua_max_instructions) name = "SDFLOW_LUA_MAX_INSTRUCTIONS";
    if (v) {
        char *end = NULL;
        errno = 0;
        unsigned long long n = strtoull(v, &end, 10);
        if (!*v || *end || errno || *v == '-')
            return sd_error_set(err, SD_ERR_INVALID, "%s: '%s' is not a whole number of instructions", name, v);
        lo->max_instructions = n == 0 ? ULLONG_MAX : n; /* 0 = no limit */
    }
    v = a->lua_timeout, name = "--lua-timeout";
    if (!v && (v = getenv("SDFLOW_LUA_TIMEOUT")) && !*v) v = NULL;
    if (v && !a->lua_timeout) name = "SDFLOW_LUA_TIMEOUT";
    if (v) {
        char *end = NULL;
        errno = 0;
        double t = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(t) || t < 0)
            return sd_error_set(err, SD_ERR_INVALID, "%s: '%s' is not a number of seconds", name, v);
        lo->max_seconds = t;
    }
    return SD_OK;
}

sd_status sd_cli_apply_sets(sd_graph *g, const sd_cli_args *a, sd_error *err) {
    for (int i = 0; i < a->sets.n; i++) {
        sd_status rc = sd_graph_apply_set(g, a->sets.items[i], err);
        if (rc) return rc;
    }
    return SD_OK;
}

void sd_cli_cache_setup(const sd_cli_args *a, sd_sqlite_cache **handle, sd_cache_i *iface) {
    *handle = NULL;
    memset(iface, 0, sizeof *iface);
    sd_error cerr;
    sd_error_clear(&cerr);
    if (!a->no_cache) {
        if (sd_cli_cache_open(a->cache, handle, &cerr) == SD_OK) {
            *iface = sd_cache_interface(*handle);
            if (sd_cache_is_readonly(*handle)) {
                /* docs/cache.md: hits are served, nothing is written; say so
                 * once instead of a failed put per node */
                iface->put = NULL;
                iface->file_hash_put = NULL;
                char path[4096];
                fprintf(stderr, "note: cache %s is read-only here: cached results are used, new ones are not stored\n",
                        sd_text_escape(sd_cache_path(*handle), 0, path, sizeof path));
            }
            return;
        }
        char buf[SD_ERR_MSG_MAX + 512];
        fprintf(stderr, "warning: cache unusable, running without it: %s\n", sd_error_format(&cerr, buf, sizeof buf));
        *handle = NULL;
        return;
    }
    /* --no-cache: no output is read or written, but the file-hash memo of the
     * usual database still spares re-reading multi-GB model files on every
     * run (keys and recipes need their content hash). A memo entry is exactly
     * as trustworthy as with the cache on: same path, size and mtime. If the
     * database cannot be opened, hash silently. */
    if (sd_cli_cache_open(NULL, handle, &cerr) == SD_OK) {
        *iface = sd_cache_interface(*handle);
        iface->get = NULL;
        iface->put = NULL;
    } else {
        *handle = NULL;
    }
}

/* ---- error printing and the older single-option helper (cli.h) ---------------------- */

void sd_cli_print_error(const sd_error *err) {
    char buf[SD_ERR_MSG_MAX + 512];
    fprintf(stderr, "error: %s\n", sd_error_format(err, buf, sizeof buf));
}

const char *sd_cli_opt(int argc, char **argv, int *i, const char *name, int *missing) {
    const char *a = argv[*i];
    size_t len = strlen(name);
    if (strncmp(a, name, len) != 0) return NULL;
    if (a[len] == '=') return a + len + 1;
    if (a[len] != 0) return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    *i += 1;
    return argv[*i];
}
