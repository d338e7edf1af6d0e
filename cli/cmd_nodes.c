/* cmd_nodes.c - `sdflow nodes [--json]`: the registered node types, as a
 * table or in ComfyUI's /object_info shape (so tools written for ComfyUI's
 * API can read it). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "core/json_util.h"
#include "core/env.h"
#include "core/node.h"

/* [type_or_options, {default, min, max, step, multiline}] for one input. */
static cJSON *input_spec(const sd_input_def *d, const sd_env *env) {
    cJSON *spec = cJSON_CreateArray(), *opts = cJSON_CreateObject();
    if (!spec || !opts) { cJSON_Delete(spec); cJSON_Delete(opts); return NULL; }
    const char *t = d->type;
    if (!strcmp(t, SD_T_COMBO)) {
        cJSON *list = cJSON_CreateArray();
        if (d->options) {
            for (size_t i = 0; d->options[i]; i++) cJSON_AddItemToArray(list, cJSON_CreateString(d->options[i]));
        } else if (d->options_fn) {
            sd_value *v = NULL;
            if (d->options_fn(env, &v, NULL) == SD_OK) {
                for (size_t i = 0; i < sd_value_list_len(v); i++) {
                    const char *s = sd_value_as_string(sd_value_list_get(v, i));
                    if (s) cJSON_AddItemToArray(list, cJSON_CreateString(s));
                }
            }
            sd_value_unref(v);
        }
        cJSON_AddItemToArray(spec, list);
        if (d->def_str) cJSON_AddStringToObject(opts, "default", d->def_str);
    } else {
        cJSON_AddItemToArray(spec, cJSON_CreateString(t));
        if (!strcmp(t, SD_T_INT) || !strcmp(t, SD_T_FLOAT)) {
            cJSON_AddNumberToObject(opts, "default", d->def);
            if (d->has_range) {
                cJSON_AddNumberToObject(opts, "min", d->min);
                if (sd_json_input_is_u64(d))
                    cJSON_AddRawToObject(opts, "max", "18446744073709551615"); /* a double shows 1.8e19 */
                else
                    cJSON_AddNumberToObject(opts, "max", d->max);
            }
            if (d->step > 0) cJSON_AddNumberToObject(opts, "step", d->step);
        } else if (!strcmp(t, SD_T_BOOLEAN)) {
            cJSON_AddBoolToObject(opts, "default", d->def != 0);
        } else if (!strcmp(t, SD_T_STRING)) {
            if (d->def_str) cJSON_AddStringToObject(opts, "default", d->def_str);
            if (d->multiline) cJSON_AddBoolToObject(opts, "multiline", 1);
        }
    }
    if (d->file_folder && strcmp(d->file_folder, "input") == 0) cJSON_AddBoolToObject(opts, "image_upload", 1);
    if (cJSON_GetArraySize(opts) > 0) cJSON_AddItemToArray(spec, opts);
    else cJSON_Delete(opts);
    return spec;
}

static cJSON *node_info(const sd_node_def *def, const char *name, const sd_env *env) {
    cJSON *o = cJSON_CreateObject();
    cJSON *input = cJSON_AddObjectToObject(o, "input");
    cJSON *req = cJSON_AddObjectToObject(input, "required");
    cJSON *opt = cJSON_AddObjectToObject(input, "optional");
    cJSON *order = cJSON_AddObjectToObject(o, "input_order");
    cJSON *req_order = cJSON_AddArrayToObject(order, "required");
    cJSON *opt_order = cJSON_AddArrayToObject(order, "optional");
    for (int i = 0; def->inputs && def->inputs[i].name; i++) {
        const sd_input_def *d = &def->inputs[i];
        cJSON *spec = input_spec(d, env);
        if (!spec) continue;
        cJSON_AddItemToObject(d->optional ? opt : req, d->name, spec);
        cJSON_AddItemToArray(d->optional ? opt_order : req_order, cJSON_CreateString(d->name));
    }
    if (!cJSON_GetArraySize(opt)) cJSON_DeleteItemFromObject(input, "optional");
    if (!cJSON_GetArraySize(opt_order)) cJSON_DeleteItemFromObject(order, "optional");
    cJSON *out = cJSON_AddArrayToObject(o, "output");
    cJSON *is_list = cJSON_AddArrayToObject(o, "output_is_list");
    cJSON *out_name = cJSON_AddArrayToObject(o, "output_name");
    for (int i = 0; def->outputs && def->outputs[i].name; i++) {
        cJSON_AddItemToArray(out, cJSON_CreateString(def->outputs[i].type));
        cJSON_AddItemToArray(is_list, cJSON_CreateFalse());
        cJSON_AddItemToArray(out_name, cJSON_CreateString(def->outputs[i].name));
    }
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "display_name", def->display_name ? def->display_name : name);
    cJSON_AddStringToObject(o, "description", def->description ? def->description : "");
    cJSON_AddStringToObject(o, "python_module", "sdflow");
    cJSON_AddStringToObject(o, "category", def->category ? def->category : "");
    cJSON_AddBoolToObject(o, "output_node", (def->flags & SD_NODE_OUTPUT) != 0);
    if (strcmp(name, def->class_type) != 0) cJSON_AddStringToObject(o, "alias_of", def->class_type);
    return o;
}

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
    cJSON *root = cJSON_CreateObject();
    for (size_t i = 0; i < sd_registry_count(); i++) {
        const sd_node_def *d = sd_registry_at(i);
        cJSON_AddItemToObject(root, d->class_type, node_info(d, d->class_type, &env));
    }
    for (size_t i = 0; i < sd_registry_alias_count(); i++) {
        const char *alias, *target;
        sd_registry_alias_at(i, &alias, &target);
        const sd_node_def *d = sd_registry_find(alias);
        if (d) cJSON_AddItemToObject(root, alias, node_info(d, alias, &env));
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    sd_env_cleanup(&env);
    if (!s) { fprintf(stderr, "error: out of memory\n"); return 1; }
    puts(s);
    free(s);
    return 0;
}
