/* sd3_controlnet.c - the SD3 ControlNet (comfy.cldm.mmdit.ControlNet): the
 * diffusers file renamed to the MMDiT's names (convert_diffusers_mmdit /
 * comfy.utils.mmdit_to_diffusers), bound by the MMDiT's loader, run by its
 * trunk. */
#include "models/sd3/sd3_controlnet.h"
#include "sd3_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sd_sd3_cn {
    sd_sd3 *trunk;       /* the joint blocks and embedders (owns every weight) */
    int n_blocks;        /* = trunk->cfg.depth */
    int depth;           /* ComfyUI's: hidden / 64 */
    int hint_ch;
    sd3_lin *cblocks;    /* controlnet_blocks.i (tensors owned by the trunk's table) */
    sd_bt *hint_w, *hint_b; /* pos_embed_input.proj */
    int n_out;
    int out_block[SD_SD3_MAX_DEPTH];
    void *renamed;       /* the renamed in-memory file; weights may borrow from it */
    sd3_stab *stab;      /* Stability's SD3.5 layout (trunk, cblocks, hint_w NULL) */
};

/* ---- detection ------------------------------------------------------------------ */

static int has(sd_st_file *f, const char *k) { return sd_st_find(f, k) != NULL; }

int sd_sd3_cn_present(sd_st_file *f) {
    return has(f, "controlnet_blocks.0.weight") && has(f, "pos_embed_input.proj.weight") &&
           !has(f, "double_blocks.0.img_attn.norm.key_norm.scale");
}

static int is_stab(sd_st_file *f) { return has(f, "transformer_blocks.0.adaLN_modulation.1.bias"); }

const char *sd_sd3_cn_other_dit(sd_st_file *f) {
    if (has(f, "after_proj_list.18.bias")) return "a HunyuanDiT ControlNet";
    if (has(f, "controlnet_blocks.0.linear.weight")) return "a Flux Mistoline ControlNet";
    if (!has(f, "controlnet_blocks.0.weight")) return NULL;
    if (has(f, "double_blocks.0.img_attn.norm.key_norm.scale")) return "a Flux XLabs ControlNet";
    if (has(f, "transformer_blocks.0.img_mlp.net.0.proj.weight")) return "a Qwen-Image InstantX ControlNet";
    const sd_st_entry *xe = sd_st_find(f, "controlnet_x_embedder.weight");
    /* load_controlnet_flux_instantx: 17 latent channels (x 4 packed) = concat_mask */
    if (xe && xe->ndim == 2 && xe->shape[1] == 17 * 4)
        return "a Flux inpainting ControlNet (AliMama's FLUX.1-dev-Controlnet-Inpainting, InstantX layout; "
               "Flux ControlNets are not implemented)";
    if (xe) return "a Flux InstantX ControlNet";
    return NULL;
}

/* ---- renaming (convert_diffusers_mmdit) ---------------------------------------- */

/* MMDIT_MAP_BLOCK: diffusers member -> MMDiT member of a joint block. */
static const char *const block_map[][2] = {
    {"norm1_context.linear.bias", "context_block.adaLN_modulation.1.bias"},
    {"norm1_context.linear.weight", "context_block.adaLN_modulation.1.weight"},
    {"attn.to_add_out.bias", "context_block.attn.proj.bias"},
    {"attn.to_add_out.weight", "context_block.attn.proj.weight"},
    {"ff_context.net.0.proj.bias", "context_block.mlp.fc1.bias"},
    {"ff_context.net.0.proj.weight", "context_block.mlp.fc1.weight"},
    {"ff_context.net.2.bias", "context_block.mlp.fc2.bias"},
    {"ff_context.net.2.weight", "context_block.mlp.fc2.weight"},
    {"attn.norm_added_q.weight", "context_block.attn.ln_q.weight"},
    {"attn.norm_added_k.weight", "context_block.attn.ln_k.weight"},
    {"norm1.linear.bias", "x_block.adaLN_modulation.1.bias"},
    {"norm1.linear.weight", "x_block.adaLN_modulation.1.weight"},
    {"attn.to_out.0.bias", "x_block.attn.proj.bias"},
    {"attn.to_out.0.weight", "x_block.attn.proj.weight"},
    {"attn.norm_q.weight", "x_block.attn.ln_q.weight"},
    {"attn.norm_k.weight", "x_block.attn.ln_k.weight"},
    {"attn2.to_out.0.bias", "x_block.attn2.proj.bias"},
    {"attn2.to_out.0.weight", "x_block.attn2.proj.weight"},
    {"attn2.norm_q.weight", "x_block.attn2.ln_q.weight"},
    {"attn2.norm_k.weight", "x_block.attn2.ln_k.weight"},
    {"ff.net.0.proj.bias", "x_block.mlp.fc1.bias"},
    {"ff.net.0.proj.weight", "x_block.mlp.fc1.weight"},
    {"ff.net.2.bias", "x_block.mlp.fc2.bias"},
    {"ff.net.2.weight", "x_block.mlp.fc2.weight"},
};

/* MMDIT_MAP_BASIC (the entries a ControlNet can have). */
static const char *const basic_map[][2] = {
    {"context_embedder.bias", "context_embedder.bias"},
    {"context_embedder.weight", "context_embedder.weight"},
    {"time_text_embed.timestep_embedder.linear_1.bias", "t_embedder.mlp.0.bias"},
    {"time_text_embed.timestep_embedder.linear_1.weight", "t_embedder.mlp.0.weight"},
    {"time_text_embed.timestep_embedder.linear_2.bias", "t_embedder.mlp.2.bias"},
    {"time_text_embed.timestep_embedder.linear_2.weight", "t_embedder.mlp.2.weight"},
    {"pos_embed.proj.bias", "x_embedder.proj.bias"},
    {"pos_embed.proj.weight", "x_embedder.proj.weight"},
    {"time_text_embed.text_embedder.linear_1.bias", "y_embedder.mlp.0.bias"},
    {"time_text_embed.text_embedder.linear_1.weight", "y_embedder.mlp.0.weight"},
    {"time_text_embed.text_embedder.linear_2.bias", "y_embedder.mlp.2.bias"},
    {"time_text_embed.text_embedder.linear_2.weight", "y_embedder.mlp.2.weight"},
    {"pos_embed.pos_embed", "pos_embed"},
};

typedef struct renamer {
    sd_st_file *f;
    sd_st_writer *w;
    sd_error *err;
    sd_status rc;
} renamer;

static sd_status add(renamer *r, const char *name, sd_tensor *t) {
    if (r->rc) return r->rc;
    r->rc = sd_st_writer_add(r->w, name, t, r->err);
    return r->rc;
}

/* src as stored, under dst. Absent: nothing (the loader names what it
 * misses). */
static void copy(renamer *r, const char *src, const char *dst) {
    if (r->rc || !sd_st_find(r->f, src)) return;
    sd_tensor *t = sd_st_tensor(r->f, src, r->err);
    if (!t) {
        r->rc = r->err && r->err->code ? r->err->code : SD_ERR_FORMAT;
        return;
    }
    add(r, dst, t);
    sd_tensor_unref(t);
}

/* The rows of three tensors stacked (q, k, v -> qkv), as the map's
 * (target, (0, k * hidden, hidden)) entries fill one tensor. */
static void stack3(renamer *r, const char *fmt, const char *const parts[3], const char *dst) {
    if (r->rc) return;
    char name[256];
    sd_tensor *t[3] = {NULL, NULL, NULL};
    int present = 0;
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, fmt, parts[k]);
        if (sd_st_find(r->f, name)) present++;
    }
    if (present == 0) return;
    for (int k = 0; k < 3 && !r->rc; k++) {
        snprintf(name, sizeof name, fmt, parts[k]);
        if (!sd_st_find(r->f, name)) {
            r->rc = sd_error_set(r->err, SD_ERR_FORMAT, "%s: '%s' missing (its q/k/v siblings are there)",
                                 sd_st_path(r->f), name);
            break;
        }
        t[k] = sd_st_tensor(r->f, name, r->err);
        if (!t[k]) r->rc = r->err && r->err->code ? r->err->code : SD_ERR_FORMAT;
        else if (k > 0 && (t[k]->dtype != t[0]->dtype || t[k]->ndim != t[0]->ndim ||
                           memcmp(t[k]->shape, t[0]->shape, sizeof(int64_t) * (size_t)t[0]->ndim) != 0))
            r->rc = sd_error_set(r->err, SD_ERR_FORMAT, "%s: '%s' differs in shape or type from its q sibling",
                                 sd_st_path(r->f), name);
    }
    if (!r->rc) {
        int64_t shape[SD_MAX_DIMS];
        memcpy(shape, t[0]->shape, sizeof(int64_t) * (size_t)t[0]->ndim);
        shape[0] *= 3;
        sd_tensor *s = sd_tensor_new(t[0]->dtype, t[0]->ndim, shape);
        if (!s) r->rc = sd_error_set(r->err, SD_ERR_NOMEM, "out of memory renaming %s", sd_st_path(r->f));
        for (int k = 0; s && k < 3; k++) memcpy((char *)s->data + (size_t)k * t[0]->nbytes, t[k]->data, t[0]->nbytes);
        if (s) add(r, dst, s);
        sd_tensor_unref(s);
    }
    for (int k = 0; k < 3; k++) sd_tensor_unref(t[k]);
}

/* swap_scale_shift: the two halves of dim 0 exchanged. */
static void copy_swapped(renamer *r, const char *src, const char *dst) {
    if (r->rc || !sd_st_find(r->f, src)) return;
    sd_tensor *t = sd_st_tensor(r->f, src, r->err);
    if (!t) {
        r->rc = r->err && r->err->code ? r->err->code : SD_ERR_FORMAT;
        return;
    }
    sd_tensor *s = t->shape[0] % 2 == 0 ? sd_tensor_new(t->dtype, t->ndim, t->shape) : NULL;
    if (!s) {
        r->rc = sd_error_set(r->err, t->shape[0] % 2 ? SD_ERR_FORMAT : SD_ERR_NOMEM, "%s: cannot swap the halves of '%s'",
                             sd_st_path(r->f), src);
    } else {
        size_t half = t->nbytes / 2;
        memcpy(s->data, (char *)t->data + half, half);
        memcpy((char *)s->data + half, t->data, half);
        add(r, dst, s);
    }
    sd_tensor_unref(s);
    sd_tensor_unref(t);
}

static int count_blocks(sd_st_file *f) {
    int n = 0;
    char name[96];
    for (;; n++) {
        snprintf(name, sizeof name, "transformer_blocks.%d.", n);
        size_t len = strlen(name), found = 0;
        for (size_t i = 0; i < sd_st_count(f) && !found; i++)
            found = strncmp(sd_st_at(f, i)->name, name, len) == 0;
        if (!found) return n;
    }
}

/* The file under the MMDiT's names (plus controlnet_blocks.* and
 * pos_embed_input.* as they are) as a malloc'd safetensors image. */
static sd_status rename_file(sd_st_file *f, int depth, void **buf, size_t *size, sd_error *err) {
    renamer r = {f, sd_st_writer_new(), err, SD_OK};
    if (!r.w) return sd_error_set(err, SD_ERR_NOMEM, "out of memory renaming %s", sd_st_path(f));
    int nb = count_blocks(f);
    char src[256], dst[256], fmt[256];
    static const char *const xq[3] = {"to_q", "to_k", "to_v"};
    static const char *const cq[3] = {"add_q_proj", "add_k_proj", "add_v_proj"};
    for (int i = 0; i < nb && !r.rc; i++) {
        for (int e = 0; e < 2; e++) {
            const char *end = e ? "bias" : "weight";
            snprintf(fmt, sizeof fmt, "transformer_blocks.%d.attn.%%s.%s", i, end);
            snprintf(dst, sizeof dst, "joint_blocks.%d.x_block.attn.qkv.%s", i, end);
            stack3(&r, fmt, xq, dst);
            snprintf(dst, sizeof dst, "joint_blocks.%d.context_block.attn.qkv.%s", i, end);
            stack3(&r, fmt, cq, dst);
            snprintf(fmt, sizeof fmt, "transformer_blocks.%d.attn2.%%s.%s", i, end);
            snprintf(dst, sizeof dst, "joint_blocks.%d.x_block.attn2.qkv.%s", i, end);
            stack3(&r, fmt, xq, dst);
        }
        for (size_t k = 0; k < sizeof block_map / sizeof block_map[0]; k++) {
            snprintf(src, sizeof src, "transformer_blocks.%d.%s", i, block_map[k][0]);
            snprintf(dst, sizeof dst, "joint_blocks.%d.%s", i, block_map[k][1]);
            /* MMDIT_MAP_BASIC's entry for block depth - 1's norm1_context
             * (the model's pre-only block) overrides the block map */
            if (i == depth - 1 && strncmp(block_map[k][0], "norm1_context.", 14) == 0) copy_swapped(&r, src, dst);
            else copy(&r, src, dst);
        }
    }
    for (size_t k = 0; k < sizeof basic_map / sizeof basic_map[0]; k++) copy(&r, basic_map[k][0], basic_map[k][1]);
    for (size_t i = 0; i < sd_st_count(f) && !r.rc; i++) {
        const char *k = sd_st_at(f, i)->name;
        if (strncmp(k, "controlnet_blocks.", 18) == 0 || strncmp(k, "pos_embed_input.", 16) == 0) copy(&r, k, k);
    }
    if (!r.rc) r.rc = sd_st_writer_to_memory(r.w, buf, size, err);
    sd_st_writer_free(r.w);
    return r.rc;
}

/* ---- loading ---------------------------------------------------------------------- */

static void fetch_extra(void *ud, sd_dit_loader *ld, sd_sd3 *m) {
    sd_sd3_cn *cn = ud;
    int64_t h = m->cfg.hidden_size, p = m->cfg.patch_size;
    cn->cblocks = calloc((size_t)m->cfg.depth, sizeof *cn->cblocks);
    if (!cn->cblocks) {
        sd_dit_nomem(ld);
        return;
    }
    for (int i = 0; i < m->cfg.depth; i++)
        sd_dit_lin(ld, &cn->cblocks[i].w, &cn->cblocks[i].b, h, h, 1, "controlnet_blocks.%d", i);
    int64_t hs[4] = {h, cn->hint_ch, p, p};
    sd_dit_get(ld, &cn->hint_w, 4, hs, "pos_embed_input.proj.weight");
    sd_dit_vec(ld, &cn->hint_b, h, "pos_embed_input.proj.bias");
}

sd_status sd_sd3_cn_load(sd_backend *be, sd_st_file *f, sd_sd3_cn **out, sd_error *err) {
    *out = NULL;
    const char *path = sd_st_path(f);
    if (!sd_sd3_cn_present(f))
        return sd_error_set(err, SD_ERR_NOT_FOUND, "%s: no SD3 ControlNet (controlnet_blocks.0.weight with "
                            "pos_embed_input.proj.weight)", path);
    if (is_stab(f)) {
        sd_sd3_cn *cn = calloc(1, sizeof *cn);
        if (!cn) return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading the SD3.5 ControlNet");
        sd_status rc = sd3_stab_load(be, f, &cn->stab, err);
        if (rc) {
            free(cn);
            return rc;
        }
        cn->depth = sd3_stab_depth(cn->stab);
        cn->n_blocks = sd3_stab_config(cn->stab)->depth;
        cn->hint_ch = sd3_stab_hint_channels(cn->stab);
        /* each block's output repeated ceil(depth / blocks) times; entries
         * past the model's depth are never added, so the list stops there */
        int rep = (cn->depth + cn->n_blocks - 1) / cn->n_blocks;
        for (int i = 0; i < cn->n_blocks; i++)
            for (int j = 0; j < rep && cn->n_out < cn->depth; j++) cn->out_block[cn->n_out++] = i;
        *out = cn;
        return SD_OK;
    }
    const sd_st_entry *pe = sd_st_find(f, "pos_embed.proj.weight");
    const sd_st_entry *pi = sd_st_find(f, "pos_embed_input.proj.weight");
    if (!pe || pe->ndim != 4 || !sd_st_find(f, "transformer_blocks.0.attn.add_q_proj.weight"))
        return sd_error_set(err, SD_ERR_UNSUPPORTED,
                            "%s: an SD3 ControlNet not in the diffusers layout ComfyUI loads "
                            "(transformer_blocks.0.attn.add_q_proj.weight with pos_embed.proj.weight)",
                            path);
    if (pi->ndim != 4) return sd_error_set(err, SD_ERR_FORMAT, "%s: pos_embed_input.proj.weight is not a conv", path);
    int depth = (int)(pe->shape[0] / 64);
    if (depth < 1 || depth > SD_SD3_MAX_DEPTH)
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s: hidden size %lld (depth %d; at most %d)", path,
                            (long long)pe->shape[0], depth, SD_SD3_MAX_DEPTH);
    sd_sd3_cn *cn = calloc(1, sizeof *cn);
    if (!cn) return sd_error_set(err, SD_ERR_NOMEM, "out of memory loading the SD3 ControlNet");
    cn->depth = depth;
    cn->hint_ch = (int)pi->shape[1];
    size_t size = 0;
    sd_st_file *r = NULL;
    sd_status rc = rename_file(f, depth, &cn->renamed, &size, err);
    if (!rc) rc = sd_st_open_memory(cn->renamed, size, path, &r, err);
    if (!rc) rc = sd3_load_ex(be, r, "", SD_F32, 1, fetch_extra, cn, &cn->trunk, err);
    sd_st_close(r);
    if (rc) {
        sd_error_prefix(err, "SD3 ControlNet");
        sd_sd3_cn_free(cn);
        return rc;
    }
    cn->n_blocks = cn->trunk->cfg.depth;
    /* output entries: depth // blocks per block, one fewer after the last */
    int count = depth / cn->n_blocks;
    for (int i = 0; i < cn->n_blocks; i++)
        for (int j = 0; j < count - (i == cn->n_blocks - 1) && cn->n_out < SD_SD3_MAX_DEPTH; j++)
            cn->out_block[cn->n_out++] = i;
    *out = cn;
    return SD_OK;
}

void sd_sd3_cn_free(sd_sd3_cn *cn) {
    if (!cn) return;
    sd_sd3_free(cn->trunk); /* its table holds the ControlNet's own weights too */
    sd3_stab_free(cn->stab);
    free(cn->cblocks);
    free(cn->renamed);
    free(cn);
}

const sd_sd3_config *sd_sd3_cn_config(const sd_sd3_cn *cn) {
    return cn->stab ? sd3_stab_config(cn->stab) : &cn->trunk->cfg;
}
int sd_sd3_cn_is_sd35(const sd_sd3_cn *cn) { return cn->stab != NULL; }
int sd_sd3_cn_control_type(const sd_sd3_cn *cn) { return cn->stab ? sd3_stab_control_type(cn->stab) : -1; }
float sd_sd3_cn_hint_shift(const sd_sd3_cn *cn) { return cn->stab ? 0.0609f : 0.0f; }
int sd_sd3_cn_depth(const sd_sd3_cn *cn) { return cn->depth; }
int sd_sd3_cn_hint_channels(const sd_sd3_cn *cn) { return cn->hint_ch; }
int sd_sd3_cn_n_blocks(const sd_sd3_cn *cn) { return cn->n_blocks; }
int sd_sd3_cn_n_outputs(const sd_sd3_cn *cn) { return cn->n_out; }
int sd_sd3_cn_output_block(const sd_sd3_cn *cn, int j) {
    return j >= 0 && j < cn->n_out ? cn->out_block[j] : -1;
}

sd_status sd_sd3_cn_check_fit(const sd_sd3_cn *cn, const sd_sd3_config *m, sd_error *err) {
    const sd_sd3_config *c = sd_sd3_cn_config(cn);
    if (c->hidden_size != m->hidden_size)
        return sd_error_set(err, SD_ERR_INVALID,
                            "SD3 ControlNet does not fit the model: hidden size %d, the model's %d "
                            "(a ControlNet for another SD3 model?)",
                            c->hidden_size, m->hidden_size);
    if (c->patch_size != m->patch_size || c->in_channels != m->in_channels)
        return sd_error_set(err, SD_ERR_INVALID,
                            "SD3 ControlNet does not fit the model: %d latent channels in %dx%d patches, the "
                            "model %d in %dx%d",
                            c->in_channels, c->patch_size, c->patch_size, m->in_channels, m->patch_size,
                            m->patch_size);
    if (cn->stab) { /* no context; its pooled input is the model's (double y) or its own */
        if (c->adm_in_channels && c->adm_in_channels != m->adm_in_channels)
            return sd_error_set(err, SD_ERR_INVALID,
                                "SD3.5 ControlNet does not fit the model: pooled width %d, the model's %d",
                                c->adm_in_channels, m->adm_in_channels);
        return SD_OK;
    }
    if (c->context_in_dim != m->context_in_dim)
        return sd_error_set(err, SD_ERR_INVALID,
                            "SD3 ControlNet does not fit the model: context width %d, the model's %d",
                            c->context_in_dim, m->context_in_dim);
    if (c->adm_in_channels && c->adm_in_channels != m->adm_in_channels)
        return sd_error_set(err, SD_ERR_INVALID,
                            "SD3 ControlNet does not fit the model: pooled width %d, the model's %d",
                            c->adm_in_channels, m->adm_in_channels);
    return SD_OK;
}

/* ---- forward ---------------------------------------------------------------------- */

typedef struct collect {
    sd_sd3_cn *cn;
    sd_bt **out;
} collect;

static int after_block(void *ud, int i, sd_bt **img, sd_error *err) {
    (void)err;
    collect *c = ud;
    c->out[i] = sd_op_linear(*img, c->cn->cblocks[i].w, c->cn->cblocks[i].b);
    return c->out[i] == NULL;
}

sd_status sd_sd3_cn_forward(sd_sd3_cn *cn, const sd_sd3 *model, sd_bt *x, const float *timesteps, sd_bt *hint,
                            sd_bt *context, sd_bt *y_in, sd_bt **out, sd_error *err) {
    for (int i = 0; i < cn->n_blocks; i++) out[i] = NULL;
    if (!x || x->ndim != 4 || !hint || hint->ndim != 4 || hint->shape[0] != x->shape[0] ||
        hint->shape[1] != cn->hint_ch || hint->shape[2] != x->shape[2] || hint->shape[3] != x->shape[3])
        return sd_error_set(err, SD_ERR_INVALID, "SD3 ControlNet: the hint must be [N, %d, H, W] like x", cn->hint_ch);
    if (cn->stab) return sd3_stab_forward(cn->stab, model, x, timesteps, y_in, hint, out, err);
    const sd_sd3_config *c = &cn->trunk->cfg;
    sd_backend *be = cn->trunk->be;
    sd_bt *y = NULL, *add = NULL, *img = NULL, *silu = NULL;
    sd_status rc = SD_OK;
    /* y = torch.zeros_like(y): only y_embedder's biases reach c */
    if (c->adm_in_channels) y = sd_bt_new4(be, SD_F32, 2, x->shape[0], c->adm_in_channels, 0, 0);
    add = sd3_patch_embed(hint, cn->hint_w, cn->hint_b, c->patch_size);
    if ((rc = sd_backend_take_error(be, err))) goto done;
    if (!add || (c->adm_in_channels && !y)) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory (SD3 ControlNet)");
        goto done;
    }
    collect col = {cn, out};
    rc = sd3_trunk(cn->trunk, x, timesteps, context, y, add, NULL, 0, after_block, &col, &img, &silu, err);
done:
    if (rc) {
        sd_backend_clear_error(be);
        for (int i = 0; i < cn->n_blocks; i++) sd_bt_free(out[i]), out[i] = NULL;
        sd_error_prefix(err, "SD3 ControlNet forward");
    }
    sd_bt_free(y);
    sd_bt_free(add);
    sd_bt_free(img);
    sd_bt_free(silu);
    return rc;
}
