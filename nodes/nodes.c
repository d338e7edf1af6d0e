/* nodes.c - registers every built-in node family. Each family lives in its
 * own folder and exports one NULL-terminated table. */
#include "core/node.h"

sd_status sd_nodes_register_all(sd_error *err) {
    (void)err;
    { extern const sd_node_def *const sd_nodes_image[]; sd_status rc = sd_registry_add(sd_nodes_image, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_latent[]; sd_status rc = sd_registry_add(sd_nodes_latent, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_mask[]; sd_status rc = sd_registry_add(sd_nodes_mask, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_text[]; sd_status rc = sd_registry_add(sd_nodes_text, err); if (rc) return rc; }
    { extern sd_status sd_nodes_loaders_register(sd_error *); sd_status rc = sd_nodes_loaders_register(err); if (rc) return rc; }
    { extern sd_status sd_nodes_conditioning_register(sd_error *); sd_status rc = sd_nodes_conditioning_register(err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_sampling[]; sd_status rc = sd_registry_add(sd_nodes_sampling, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_custom_sampling[]; sd_status rc = sd_registry_add(sd_nodes_custom_sampling, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_vae[]; sd_status rc = sd_registry_add(sd_nodes_vae, err); if (rc) return rc; }
    { extern sd_status sd_nodes_controlnet_register(sd_error *); sd_status rc = sd_nodes_controlnet_register(err); if (rc) return rc; }
    { extern sd_status sd_nodes_lora_register(sd_error *); sd_status rc = sd_nodes_lora_register(err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_upscale[]; sd_status rc = sd_registry_add(sd_nodes_upscale, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_model_patch[]; sd_status rc = sd_registry_add(sd_nodes_model_patch, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_model_merge[]; sd_status rc = sd_registry_add(sd_nodes_model_merge, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_model_guidance[]; sd_status rc = sd_registry_add(sd_nodes_model_guidance, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_model_unet_patch[]; sd_status rc = sd_registry_add(sd_nodes_model_unet_patch, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_model_hypernet[]; sd_status rc = sd_registry_add(sd_nodes_model_hypernet, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_model_merge_blocks[]; sd_status rc = sd_registry_add(sd_nodes_model_merge_blocks, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_model_save[]; sd_status rc = sd_registry_add(sd_nodes_model_save, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_style[]; sd_status rc = sd_registry_add(sd_nodes_style, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_gligen[]; sd_status rc = sd_registry_add(sd_nodes_gligen, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_vision[]; sd_status rc = sd_registry_add(sd_nodes_vision, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_unclip[]; sd_status rc = sd_registry_add(sd_nodes_unclip, err); if (rc) return rc; }
    { extern const sd_node_def *const sd_nodes_lora_save[]; sd_status rc = sd_registry_add(sd_nodes_lora_save, err); if (rc) return rc; }
    return SD_OK;
}
