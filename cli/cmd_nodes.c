/* cmd_nodes.c - `sdflow nodes [--json]`: the registered node types, as a
 * table or in ComfyUI's /object_info shape (so tools written for ComfyUI's
 * API can read it). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "core/object_info.h"
#include "core/env.h"
#include "core/node.h"
#include "core/json_util.h"

static void print_table(void) {
    for (size_t i = 0; i < sd_registry_count(); i++) {
        const sd_node_def *d = sd_registry_at(i);
        printf("%-32s %-20s ", d->class_type, d->category ? d->category : "");
        for (int k = 0; d->inputs && d->inputs[k].name; k++)
            printf("%s%s%s:%s", k ? ", " : "", d->inputs[k].optional ? "?" : "", d->inputs[k].name, d->inputs[k].type);
        printf(" -> ");
        for (int k = 0; d->outputs && d->outputs[k].name; k++)
            printf("%s%s", k ? ", " : "", d->outputs[k].type);
        if (!d->outputs || !d->outputs[0].name) printf("%s", (d->flags & SD_NODE_OUTPUT) ? "(output)" : "-");
        putchar('\n');
    }
    for (size_t i = 0; i < sd_registry_alias_count(); i++) {
        const char *alias, *target;
        sd_registry_alias_at(i, &alias, &target);
        printf("%-32s alias of %s\n", alias, target);
    }
}

int sd_cli_nodes(int argc, char **argv) {
    int json = 0;
    const sd_cli_option own[] = {
        {"--json", NULL, SD_CLI_FLAG, &json, NULL, "ComfyUI's /object_info JSON (combo lists read the models folder)",
         NULL},
        {0}};
    const sd_cli_command cmd = {"nodes", "[--json] [options]",
                                "Lists the registered node types: class_type, category, inputs (?optional) and "
                                "outputs;\naliases at the end.",
                                SD_CLI_G_ENV, own, 0, 0};
    sd_cli_args a;
    int code = sd_cli_parse(&cmd, argc, argv, &a);
    if (code != SD_CLI_CONTINUE) { sd_cli_args_free(&a); return code; }
    sd_error err;
    sd_error_clear(&err);
    if (sd_nodes_register_all(&err) != SD_OK) { sd_cli_print_error(&err); sd_cli_args_free(&a); return 1; }
    if (!json) { print_table(); sd_cli_args_free(&a); return 0; }
    sd_env env;
    sd_status rc = sd_cli_env_init(&env, &a, &err);
    sd_cli_args_free(&a);
    if (rc != SD_OK) { sd_cli_print_error(&err); sd_env_cleanup(&env); return 1; }
    cJSON *root = sd_object_info(&env); /* core/object_info.h, shared with `sdflow serve` */
    char *s = root ? sd_json_print(root, 1) : NULL;
    cJSON_Delete(root);
    sd_env_cleanup(&env);
    if (!s) { fprintf(stderr, "error: out of memory\n"); return 1; }
    puts(s);
    free(s);
    return 0;
}
