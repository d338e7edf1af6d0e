/* object_info.c - node schemas in ComfyUI's /object_info shape (object_info.h). */
#include "object_info.h"

#include <string.h>
#include "json_util.h"

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
            if (!d->no_default) cJSON_AddNumberToObject(opts, "default", d->def);
            if (d->has_range && d->maxsize_range) {
                /* Python's sys.maxsize, an integer even for a FLOAT input */
                cJSON_AddRawToObject(opts, "min", "-9223372036854775807");
                cJSON_AddRawToObject(opts, "max", "9223372036854775807");
            } else if (d->has_range) {
                cJSON_AddNumberToObject(opts, "min", d->min);
                if (sd_json_input_is_u64(d))
                    cJSON_AddRawToObject(opts, "max", "18446744073709551615"); /* a double shows 1.8e19 */
                else
                    cJSON_AddNumberToObject(opts, "max", d->max);
            }
            if (d->step > 0) cJSON_AddNumberToObject(opts, "step", d->step);
            if (sd_input_has_control_after_generate(d)) cJSON_AddBoolToObject(opts, "control_after_generate", 1);
        } else if (!strcmp(t, SD_T_BOOLEAN)) {
            if (!d->no_default) cJSON_AddBoolToObject(opts, "default", d->def != 0);
        } else if (!strcmp(t, SD_T_STRING)) {
            if (d->def_str && !d->no_default) cJSON_AddStringToObject(opts, "default", d->def_str);
            if (d->multiline) cJSON_AddBoolToObject(opts, "multiline", 1);
        }
    }
    if (d->image_upload) cJSON_AddBoolToObject(opts, "image_upload", 1);
    if (cJSON_GetArraySize(opts) > 0) cJSON_AddItemToArray(spec, opts);
    else cJSON_Delete(opts);
    return spec;
}

cJSON *sd_object_info_node(const sd_node_def *def, const char *name, const sd_env *env) {
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
        cJSON_AddItemToArray(is_list, cJSON_CreateBool(def->outputs[i].is_list != 0));
        cJSON_AddItemToArray(out_name, cJSON_CreateString(def->outputs[i].name));
    }
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "display_name", def->display_name ? def->display_name : name);
    cJSON_AddStringToObject(o, "description", def->description ? def->description : "");
    cJSON_AddStringToObject(o, "python_module", "sdflow");
    cJSON_AddStringToObject(o, "category", def->category ? def->category : "");
    cJSON_AddBoolToObject(o, "output_node", (def->flags & SD_NODE_OUTPUT) != 0);
    cJSON_AddBoolToObject(o, "deprecated", (def->flags & SD_NODE_DEPRECATED) != 0);
    cJSON_AddBoolToObject(o, "experimental", (def->flags & SD_NODE_EXPERIMENTAL) != 0);
    if (strcmp(name, def->class_type) != 0) cJSON_AddStringToObject(o, "alias_of", def->class_type);
    return o;
}

cJSON *sd_object_info(const sd_env *env) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    for (size_t i = 0; i < sd_registry_count(); i++) {
        const sd_node_def *d = sd_registry_at(i);
        cJSON_AddItemToObject(root, d->class_type, sd_object_info_node(d, d->class_type, env));
    }
    for (size_t i = 0; i < sd_registry_alias_count(); i++) {
        const char *alias, *target;
        sd_registry_alias_at(i, &alias, &target);
        const sd_node_def *d = sd_registry_find(alias);
        if (d) cJSON_AddItemToObject(root, alias, sd_object_info_node(d, alias, env));
    }
    return root;
}
