/* object_info.c - node schemas in ComfyUI's /object_info shape (object_info.h).
 *
 * ComfyUI prints a node in one of two ways: a V1 class (INPUT_TYPES) as
 * server.py's node_info writes it, a V3 schema (SD_NODE_V3) as
 * comfy_api's GET_NODE_INFO_V1 does; both are reproduced key for key. */
#include "object_info.h"

#include <ctype.h>
#include <string.h>
#include "json_util.h"

static int is(const char *t, const char *lit) { return !strcmp(t, lit); }

/* The combo's choices: the fixed list, or the one read from the environment now. */
static cJSON *combo_list(const sd_input_def *d, const sd_env *env) {
    cJSON *list = cJSON_CreateArray();
    if (!list) return NULL;
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
    return list;
}

/* INT/FLOAT options: default, range, step, round, display, the seed widget. */
static void number_opts(cJSON *opts, const sd_input_def *d) {
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
    if (d->round == SD_ROUND_FALSE) cJSON_AddBoolToObject(opts, "round", 0);
    else if (d->round > 0) cJSON_AddNumberToObject(opts, "round", d->round);
    if (sd_input_has_control_after_generate(d)) cJSON_AddBoolToObject(opts, "control_after_generate", 1);
    if (d->display) cJSON_AddStringToObject(opts, "display", d->display);
}

/* [type_or_choices, {options}] for one input; `v3`: the schema's shape. */
static cJSON *input_spec(const sd_input_def *d, int v3, const sd_env *env) {
    cJSON *spec = cJSON_CreateArray(), *opts = cJSON_CreateObject();
    if (!spec || !opts) { cJSON_Delete(spec); cJSON_Delete(opts); return NULL; }
    const char *t = d->type;
    /* key order as ComfyUI prints them: a schema's tooltip first, a V1 one last */
    if (d->tooltip && v3) cJSON_AddStringToObject(opts, "tooltip", d->tooltip);
    if (is(t, SD_T_COMBO)) {
        cJSON *list = combo_list(d, env);
        if (v3) {
            cJSON_AddItemToArray(spec, cJSON_CreateString(SD_T_COMBO));
            cJSON_AddBoolToObject(opts, "multiselect", 0);
            cJSON_AddItemToObject(opts, "options", list);
        } else {
            cJSON_AddItemToArray(spec, list);
        }
        if (d->def_str && !d->no_default) cJSON_AddStringToObject(opts, "default", d->def_str);
    } else {
        cJSON_AddItemToArray(spec, cJSON_CreateString(t));
        if (is(t, SD_T_INT) || is(t, SD_T_FLOAT)) {
            number_opts(opts, d);
        } else if (is(t, SD_T_BOOLEAN)) {
            if (!d->no_default) cJSON_AddBoolToObject(opts, "default", d->def != 0);
        } else if (is(t, SD_T_STRING)) {
            if (d->def_str && !d->no_default) cJSON_AddStringToObject(opts, "default", d->def_str);
            if (d->multiline || v3) cJSON_AddBoolToObject(opts, "multiline", d->multiline != 0);
            if (d->dynamic_prompts) cJSON_AddBoolToObject(opts, "dynamicPrompts", 1);
        }
    }
    if (d->image_upload) cJSON_AddBoolToObject(opts, "image_upload", 1);
    if (d->advanced) cJSON_AddBoolToObject(opts, "advanced", 1);
    if (d->tooltip && !v3) cJSON_AddStringToObject(opts, "tooltip", d->tooltip);
    if (v3 || cJSON_GetArraySize(opts) > 0) cJSON_AddItemToArray(spec, opts);
    else cJSON_Delete(opts);
    return spec;
}

/* ComfyUI's hidden input values: the name in capitals (PROMPT, EXTRA_PNGINFO, UNIQUE_ID). */
static cJSON *hidden_value(const char *name, int v3) {
    char up[64];
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof up; i++) up[i] = (char)toupper((unsigned char)name[i]);
    up[i] = 0;
    if (!v3) return cJSON_CreateString(up);
    cJSON *a = cJSON_CreateArray(); /* the schema's (value,) tuple */
    if (a) cJSON_AddItemToArray(a, cJSON_CreateString(up));
    return a;
}

static void add_inputs(cJSON *o, const sd_node_def *def, int v3, const sd_env *env) {
    cJSON *input = cJSON_AddObjectToObject(o, "input");
    cJSON *req = cJSON_AddObjectToObject(input, "required");
    cJSON *opt = cJSON_AddObjectToObject(input, "optional");
    cJSON *order = cJSON_AddObjectToObject(o, "input_order");
    cJSON *req_order = cJSON_AddArrayToObject(order, "required");
    cJSON *opt_order = cJSON_AddArrayToObject(order, "optional");
    for (int i = 0; def->inputs && def->inputs[i].name; i++) {
        const sd_input_def *d = &def->inputs[i];
        cJSON *spec = input_spec(d, v3, env);
        if (!spec) continue;
        cJSON_AddItemToObject(d->optional ? opt : req, d->name, spec);
        cJSON_AddItemToArray(d->optional ? opt_order : req_order, cJSON_CreateString(d->name));
    }
    if (!cJSON_GetArraySize(opt)) cJSON_DeleteItemFromObject(input, "optional");
    if (!cJSON_GetArraySize(opt_order)) cJSON_DeleteItemFromObject(order, "optional");
    if (def->hidden && def->hidden[0]) {
        cJSON *hid = cJSON_AddObjectToObject(input, "hidden");
        cJSON *hid_order = cJSON_AddArrayToObject(order, "hidden");
        for (int i = 0; def->hidden[i]; i++) {
            cJSON_AddItemToObject(hid, def->hidden[i], hidden_value(def->hidden[i], v3));
            cJSON_AddItemToArray(hid_order, cJSON_CreateString(def->hidden[i]));
        }
    }
}

cJSON *sd_object_info_node(const sd_node_def *def, const sd_env *env) {
    int v3 = (def->flags & SD_NODE_V3) != 0;
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    add_inputs(o, def, v3, env);
    cJSON *out = cJSON_AddArrayToObject(o, "output");
    cJSON *is_list = cJSON_AddArrayToObject(o, "output_is_list");
    cJSON *out_name = cJSON_AddArrayToObject(o, "output_name");
    int nout = 0;
    for (; def->outputs && def->outputs[nout].name; nout++) {
        cJSON_AddItemToArray(out, cJSON_CreateString(def->outputs[nout].type));
        cJSON_AddItemToArray(is_list, cJSON_CreateBool(def->outputs[nout].is_list != 0));
        cJSON_AddItemToArray(out_name, cJSON_CreateString(def->outputs[nout].name));
    }
    const char *const *tips = def->output_tooltips;
    if (v3) {
        cJSON *t = cJSON_AddArrayToObject(o, "output_tooltips");
        for (int i = 0, end = 0; i < nout; i++) {
            end = end || !tips || !tips[i];
            cJSON_AddItemToArray(t, end ? cJSON_CreateNull() : cJSON_CreateString(tips[i]));
        }
        cJSON_AddNullToObject(o, "output_matchtypes");
    } else if (tips) {
        cJSON *t = cJSON_AddArrayToObject(o, "output_tooltips");
        for (int i = 0; tips[i]; i++) cJSON_AddItemToArray(t, cJSON_CreateString(tips[i]));
    }
    cJSON_AddStringToObject(o, "name", def->class_type);
    if (def->display_name) cJSON_AddStringToObject(o, "display_name", def->display_name);
    else if (v3) cJSON_AddNullToObject(o, "display_name");
    else cJSON_AddStringToObject(o, "display_name", def->class_type);
    cJSON_AddStringToObject(o, "description", def->description ? def->description : "");
    cJSON_AddStringToObject(o, "python_module", def->python_module ? def->python_module : "custom_nodes.sdflow");
    cJSON_AddStringToObject(o, "category", def->category ? def->category : "sd");
    cJSON_AddBoolToObject(o, "output_node", (def->flags & SD_NODE_OUTPUT) != 0);
    if (v3 || (def->flags & SD_NODE_DEPRECATED))
        cJSON_AddBoolToObject(o, "deprecated", (def->flags & SD_NODE_DEPRECATED) != 0);
    if (v3 || (def->flags & SD_NODE_EXPERIMENTAL))
        cJSON_AddBoolToObject(o, "experimental", (def->flags & SD_NODE_EXPERIMENTAL) != 0);
    if (v3) cJSON_AddBoolToObject(o, "api_node", 0);
    return o;
}

cJSON *sd_object_info(const sd_env *env) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    for (size_t i = 0; i < sd_registry_count(); i++) {
        const sd_node_def *d = sd_registry_at(i);
        cJSON *n = sd_object_info_node(d, env);
        if (!n) { cJSON_Delete(root); return NULL; }
        cJSON_AddItemToObject(root, d->class_type, n);
    }
    return root;
}
