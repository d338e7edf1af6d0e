/* model_save_nodes.c - ModelSave (comfy_extras/nodes_model_merging.py): the
 * MODEL's diffusion model, as its patch stack made it (LoRAs, merges), saved
 * as ComfyUI's save_checkpoint(model) writes it: safetensors under the output
 * folder named by filename_prefix with ComfyUI's counter
 * ("diffusion_models/ComfyUI_00001_.safetensors"), every weight under
 * "model.diffusion_model.", and the metadata
 *   modelspec.architecture / sai_model_spec / implementation / title  (SDXL)
 *   modelspec.predict_key "epsilon" | "v" (UNet models; "v" also writes the
 *                          empty "v_pred" tensor)
 *   prompt, and one entry per extra_pnginfo key (as SaveImage).
 * Each weight keeps the dtype sdflow holds it in (the file's, F32 where a
 * patch touched it), so the saved file loads back to the same numbers.
 * Memory: the file is built in memory before it is published (as SaveLatent),
 * about twice the model's size in F32. Not done: SD3 / Z-Image models
 * (refused), ComfyUI's "ztsnr" / "edm_vpred" keys of ModelSamplingDiscrete
 * zsnr / ModelSamplingContinuousEDM patches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "formats/safetensors.h"
#include "model_nodes.h"
#include "models/flux/flux.h"
#include "nodes/image/savepath.h"
#include "nodes/loaders/loaders.h"

typedef struct save_walk {
    sd_st_writer *w;
    sd_error *err;
    sd_status rc;
} save_walk;

static void save_one(void *ud, const char *key, sd_bt **slot) {
    save_walk *s = ud;
    if (s->rc || !slot || !*slot) return;
    char name[512];
    snprintf(name, sizeof name, "model.diffusion_model.%s", key);
    sd_tensor *h = sd_bt_to_host(*slot);
    if (!h) {
        s->rc = sd_backend_take_error((*slot)->be, s->err);
        if (!s->rc) s->rc = sd_error_set(s->err, SD_ERR_NOMEM, "out of memory reading %s", key);
        return;
    }
    sd_dtype dt = (*slot)->dtype;
    sd_tensor *t = h;
    /* half-precision weights go back to their stored type (exact: they were
     * widened from it); quantized ones stay F32 */
    if (h->dtype == SD_F32 && (dt == SD_F16 || dt == SD_BF16)) {
        t = sd_tensor_to_dtype(h, dt);
        sd_tensor_unref(h);
        if (!t) {
            s->rc = sd_error_set(s->err, SD_ERR_NOMEM, "out of memory converting %s", key);
            return;
        }
    }
    s->rc = sd_st_writer_add(s->w, name, t, s->err);
    sd_tensor_unref(t);
}

static sd_status model_save_run(sd_node_ctx *ctx, sd_value *const *in, sd_value **out, sd_error *err) {
    (void)out;
    sd_model_ref *m;
    sd_status rc = sd_nodes_in_model(in, 0, "model", &m, err);
    if (rc) return rc;
    const sd_ckpt_info *info = sd_checkpoint_info(m->ckpt);
    int unet = info->family == SD_CKPT_SD1 || info->family == SD_CKPT_SD2 || info->family == SD_CKPT_SDXL;
    if (!unet && info->family != SD_CKPT_FLUX) {
        sd_error_set(err, SD_ERR_UNSUPPORTED, "saving a %s model is not supported yet (SD1, SD2, SDXL and Flux are)",
                     info->family == SD_CKPT_SD3 ? "SD3" : info->family == SD_CKPT_ZIMAGE ? "Z-Image" : "diffusion");
        sd_error_at(err, NULL, NULL, "model");
        return SD_ERR_UNSUPPORTED;
    }
    const char *prefix = sd_value_as_string(in[1]);
    sd_savepath sp;
    rc = sd_savepath_begin(ctx->env->output_dir, prefix ? prefix : "diffusion_models/ComfyUI", 0, 0, &sp, err);
    if (rc) {
        sd_error_at(err, NULL, NULL, "filename_prefix");
        return rc;
    }
    sd_savepath_claim_names(&sp, ctx->env, "output");
    sd_save_meta meta;
    memset(&meta, 0, sizeof meta);
    sd_st_writer *w = sd_st_writer_new();
    sd_tensor *vpred = NULL;
    if (!w) rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    /* metadata in ComfyUI's order: modelspec, predict_key, prompt, extra_pnginfo */
    if (!rc && info->family == SD_CKPT_SDXL && !info->ip2p) {
        char title[1200];
        snprintf(title, sizeof title, "%s %lld", sp.filename, (long long)sp.counter);
        rc = sd_st_writer_meta(w, "modelspec.architecture", "stable-diffusion-xl-v1-base", err);
        if (!rc) rc = sd_st_writer_meta(w, "modelspec.sai_model_spec", "1.0.0", err);
        if (!rc) rc = sd_st_writer_meta(w, "modelspec.implementation", "sgm", err);
        if (!rc) rc = sd_st_writer_meta(w, "modelspec.title", title, err);
    }
    if (!rc && unet)
        rc = sd_st_writer_meta(w, "modelspec.predict_key", info->prediction == SD_PRED_V ? "v" : "epsilon", err);
    if (!rc && unet && info->prediction == SD_PRED_V) {
        int64_t zero = 0;
        vpred = sd_tensor_new(SD_F32, 1, &zero);
        rc = vpred ? sd_st_writer_add(w, "v_pred", vpred, err) : sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    if (!rc) rc = sd_save_meta_build(ctx, 1, &meta, err);
    for (size_t i = 0; !rc && i < meta.n; i++) rc = sd_st_writer_meta(w, meta.keys[i], meta.values[i], err);
    /* the weights, as the MODEL's patches made them */
    save_walk sw = {w, err, SD_OK};
    if (!rc && unet) {
        sd_unet *u = NULL;
        rc = sd_nodes_model_unet(m, &u, err);
        if (!rc) sd_unet_param_each(u, save_one, &sw), rc = sw.rc;
    } else if (!rc) {
        sd_dmodel dm;
        rc = sd_nodes_model_dmodel(m, &dm, err);
        if (!rc) sd_flux_param_each(dm.net, save_one, &sw), rc = sw.rc;
    }
    void *bytes = NULL;
    size_t size = 0;
    sd_outfile of;
    memset(&of, 0, sizeof of);
    char file[1024];
    if (!rc) rc = sd_st_writer_to_memory(w, &bytes, &size, err);
    if (!rc) rc = sd_outfile_create(&sp.dir, &of, err);
    if (!rc && fwrite(bytes, 1, size, of.f) != size) rc = sd_error_set(err, SD_ERR_IO, "%s: write failed", sp.folder);
    if (!rc) rc = sd_savepath_publish(&sp, &of, 0, "safetensors", file, sizeof file, err);
    if (!rc) sd_node_log(ctx, SD_LOG_INFO, "saved %s/%s", sp.folder, file);
    sd_outfile_discard(&of);
    free(bytes);
    sd_tensor_unref(vpred);
    sd_st_writer_free(w);
    sd_save_meta_free(&meta);
    sd_savepath_free(&sp);
    return rc;
}

static const sd_input_def model_save_in[] = {
    {.name = "model", .type = "MODEL"},
    {.name = "filename_prefix", .type = SD_T_STRING, .def_str = "diffusion_models/ComfyUI"},
    {0}};
static const sd_output_def no_outputs[] = {{0}};

static const sd_node_def node_model_save = {
    .version = 1,
    .class_type = "ModelSave",
    .display_name = "ModelSave",
    .python_module = "comfy_extras.nodes_model_merging",
    .category = "advanced/model_merging",
    .hidden = SD_STRINGS("prompt", "extra_pnginfo"),
    .help = "Saves the MODEL's diffusion model (with its LoRAs and merges applied) to the output "
            "folder as <prefix>_<counter:05>_.safetensors, keys model.diffusion_model.*, "
            "ComfyUI's metadata.",
    .inputs = model_save_in,
    .outputs = no_outputs,
    .flags = SD_NODE_OUTPUT,
    .run = model_save_run,
};

const sd_node_def *const sd_nodes_model_save[] = {&node_model_save, NULL};
