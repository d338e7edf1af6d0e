/* main.c - sdflow entry point: dispatches to the sub-commands. */
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "kernels/backend.h"

#ifndef SDFLOW_VERSION
#define SDFLOW_VERSION "dev"
#endif
#ifndef SDFLOW_BUILD_OPTIONS
#define SDFLOW_BUILD_OPTIONS ""
#endif

static void usage(FILE *f) {
    fputs("usage: sdflow <command> [options]\n"
          "\n"
          "commands:\n"
          "  run WORKFLOW.json|PICTURE.png [options]   run a ComfyUI API-format workflow\n"
          "      --set ID.INPUT=VALUE   change an input before running (repeatable)\n"
          "      --quiet                no progress output\n"
          "      --report FILE.json     write what ran, what hit the cache and timings\n"
          "      --dump DIR             save every output tensor as DIR/<id>_<n>.safetensors\n"
          "      --cache PATH | --no-cache\n"
          "      --output-dir DIR --input-dir DIR --temp-dir DIR\n"
          "      --models-dir DIR --comfyui-dir DIR --tokenizer-dir DIR\n"
          "      --precision f32|bf16   --device cpu|cuda\n"
          "      (also WORKFLOW.lua or RECIPE.json; docs/lua.md)\n"
          "      --lock RECIPE.json     after the run, write a recipe (workflow + file hashes)\n"
          "      --relock               accept changed files and rewrite the recipe being run\n"
          "      --allow-unsafe-lua     give Lua workflows io, os and require\n"
          "  export --lua|--json FILE   print a workflow as Lua or as API-format JSON\n"
          "  repl [WORKFLOW]            interactive Lua prompt on a graph kept in memory\n"
          "  nodes [--json]             list node types (--json: ComfyUI /object_info shape)\n"
          "  cache stats|list|clear     inspect or empty the output cache [--cache PATH]\n"
          "  cache gc --max-size SIZE   shrink the cache to SIZE (e.g. 2G, 500M)\n"
          "  synth [--preset sd1-tiny|sd1|sdxl-tiny|sdxl] [--models-dir DIR] [--tokenizer-dir DIR]\n"
          "                             write a RANDOM-weight checkpoint (and a stand-in vocabulary)\n"
          "  version                    print the version\n"
          "\n"
          "environment: SDFLOW_MODELS_DIR, SDFLOW_TOKENIZER_DIR, SDFLOW_COMFYUI_DIR, SDFLOW_CACHE\n"
          "exit codes: 0 success, 1 failure, 130 interrupted\n",
          f);
}

int main(int argc, char **argv) {
    sd_backend_tune_allocator();
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("sdflow %s (%s)\n", SDFLOW_VERSION, SDFLOW_BUILD_OPTIONS);
        return 0;
    }
    if (!strcmp(cmd, "run")) return sd_cli_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "nodes")) return sd_cli_nodes(argc - 2, argv + 2);
    if (!strcmp(cmd, "cache")) return sd_cli_cache(argc - 2, argv + 2);
    if (!strcmp(cmd, "export")) return sd_cli_export(argc - 2, argv + 2); /* cli/cmd_lua.c */
    if (!strcmp(cmd, "repl")) return sd_cli_repl(argc - 2, argv + 2);
    if (!strcmp(cmd, "synth")) return sd_cli_synth(argc - 2, argv + 2);
    fprintf(stderr, "sdflow: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 1;
}

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
