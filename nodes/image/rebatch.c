/* rebatch.c - RebatchImages (comfy_extras/nodes_rebatch.py): a list of image
 * batches split into single images and regrouped into batches of
 * batch_size; the output is a list (core/executor.h, "Lists"). */
#include <stdlib.h>
#include <string.h>

#include "image.h"

typedef struct one_image {
    const sd_tensor *t;
    int64_t index;
} one_image;

static sd_status rebatch_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)ctx;
    /* INPUT_IS_LIST: images is a list of IMAGE batches, batch_size a list of one INT */
    const sd_value *images = in[0];
    int64_t bs = sd_value_as_int(sd_value_list_get(in[1], 0));
    if (bs < 1) return sd_nodes_bad_input(err, "batch_size", "batch_size %lld is below 1", (long long)bs);
    size_t n_in = sd_value_list_len(images);
    int64_t total = 0;
    for (size_t i = 0; i < n_in; i++) {
        sd_value *v = sd_value_list_get(images, i);
        sd_tensor *t;
        sd_status rc = sd_nodes_in_tensor(&v, 0, "images", 4, &t, err);
        if (rc) return rc;
        total += t->shape[0];
    }
    one_image *all = malloc((size_t)(total ? total : 1) * sizeof *all);
    sd_value *list = sd_value_list();
    if (!all || !list) { free(all); sd_value_unref(list); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    int64_t k = 0;
    for (size_t i = 0; i < n_in; i++) {
        const sd_tensor *t = sd_value_as_tensor(sd_value_list_get(images, i));
        for (int64_t j = 0; j < t->shape[0]; j++) all[k++] = (one_image){t, j};
    }
    sd_status rc = SD_OK;
    for (int64_t start = 0; start < total && !rc; start += bs) {
        int64_t count = total - start < bs ? total - start : bs;
        const sd_tensor *f = all[start].t;
        sd_tensor *b = sd_tensor_new4(SD_F32, 4, count, f->shape[1], f->shape[2], f->shape[3]);
        if (!b) { rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory"); break; }
        size_t item = (size_t)(f->shape[1] * f->shape[2] * f->shape[3]) * sizeof(float);
        for (int64_t j = 0; j < count && !rc; j++) {
            const one_image *o = &all[start + j];
            if (o->t->shape[1] != f->shape[1] || o->t->shape[2] != f->shape[2] || o->t->shape[3] != f->shape[3])
                rc = sd_nodes_bad_input(err, "images", "images of %lldx%lld and %lldx%lld cannot share a batch "
                                        "(torch.cat refuses them)", (long long)f->shape[2], (long long)f->shape[1],
                                        (long long)o->t->shape[2], (long long)o->t->shape[1]);
            else
                memcpy((char *)b->data + (size_t)j * item, (const char *)o->t->data + (size_t)o->index * item, item);
        }
        sd_value *v = rc ? NULL : sd_value_tensor(b);
        sd_tensor_unref(b);
        if (!rc && (!v || sd_value_list_append(list, v))) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    free(all);
    if (rc) { sd_value_unref(list); return rc; }
    out[0] = list;
    return SD_OK;
}

static const sd_input_def rebatch_inputs[] = {
    {.name = "images", .type = "IMAGE"},
    {.name = "batch_size", .type = SD_T_INT, .def = 1, .min = 1, .max = 4096, .has_range = 1},
    {0}};
static const sd_output_def rebatch_out[] = {{"IMAGE", "IMAGE", .is_list = 1}, {0}};

const sd_node_def sd_node_RebatchImages = {
    .version = 1, .class_type = "RebatchImages", .python_module = "comfy_extras.nodes_rebatch",
    .display_name = "Rebatch Images", .category = "image/batch",
    .help = "The images of all incoming batches regrouped into batches of batch_size (a list: the "
            "nodes after it run once per batch).",
    .inputs = rebatch_inputs, .outputs = rebatch_out, .flags = SD_NODE_INPUT_IS_LIST | SD_NODE_V3, .run = rebatch_run};
