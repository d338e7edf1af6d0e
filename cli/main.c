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

static int cli_version(int argc, char **argv);

/* Every command, in the order `sdflow --help` lists them. */
static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"run", sd_cli_run, "run a workflow (API JSON, a PNG saved by ComfyUI/sdflow, Lua, a recipe)"},
    {"generate", sd_cli_generate, "one picture from a prompt (-m MODEL -p PROMPT), no graph needed"},
    {"export", sd_cli_export, "print a workflow as Lua or as API-format JSON"},
    {"repl", sd_cli_repl, "interactive Lua prompt on a graph kept in memory"},
    {"nodes", sd_cli_nodes, "list node types (--json: ComfyUI /object_info shape)"},
    {"cache", sd_cli_cache, "inspect, empty or shrink the output cache"},
    {"synth", sd_cli_synth, "write a RANDOM-weight checkpoint (and a stand-in vocabulary)"},
    {"serve", sd_cli_serve, "ComfyUI's HTTP/WebSocket API and a page (docs/server.md)"},
    {"worker", sd_cli_worker, "run the prompts `serve --redis` queued, on this machine (docs/scaling.md)"},
    {"version", cli_version, "print the version and build options"},
};
#define N_COMMANDS (sizeof commands / sizeof *commands)

static void usage(FILE *f) {
    fputs("usage: sdflow <command> [options]\n\ncommands:\n", f);
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "sdflow <command> --help (or sdflow help <command>) describes a command and its options.\n"
          "environment: SDFLOW_MODELS_DIR, SDFLOW_TOKENIZER_DIR, SDFLOW_COMFYUI_DIR, SDFLOW_CACHE\n"
          "exit codes: 0 success, 1 failure, 130 interrupted\n",
          f);
}

static int cli_version(int argc, char **argv) {
    const sd_cli_command cmd = {"version", "", "Prints the version and the build options.", 0, NULL, 0, 0};
    sd_cli_args a;
    int code = sd_cli_parse(&cmd, argc, argv, &a);
    sd_cli_args_free(&a);
    if (code != SD_CLI_CONTINUE) return code;
    printf("sdflow %s (%s)\n", SDFLOW_VERSION, SDFLOW_BUILD_OPTIONS);
    return 0;
}

int main(int argc, char **argv) {
    sd_backend_tune_allocator();
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || (!strcmp(cmd, "help") && argc == 2)) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) return cli_version(0, NULL);
    if (!strcmp(cmd, "help")) { /* sdflow help CMD = sdflow CMD --help */
        cmd = argv[2];
        for (size_t i = 0; i < N_COMMANDS; i++) {
            char help[] = "--help", *args[] = {help, NULL};
            if (!strcmp(cmd, commands[i].name)) return commands[i].fn(1, args);
        }
    } else {
        for (size_t i = 0; i < N_COMMANDS; i++)
            if (!strcmp(cmd, commands[i].name)) return commands[i].fn(argc - 2, argv + 2);
    }
    fprintf(stderr, "sdflow: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 1;
}
