/* lora_keys.c - the LoRA-name -> parameter map, built as ComfyUI's
 * comfy.lora.model_lora_keys_unet / model_lora_keys_clip build it, with the
 * diffusers <-> ldm UNet names of comfy.utils.unet_to_diffusers. */
#include "models/lora/lora_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kbuf {
    lora_key *k;
    size_t n, cap;
    int oom;
} kbuf;

static void add_ex(kbuf *b, const char *name, sd_lora_part part, const char *target, int64_t row0,
                   int64_t rows, int swap) {
    if (b->oom) return;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        lora_key *k = realloc(b->k, cap * sizeof *k);
        if (!k) {
            b->oom = 1;
            return;
        }
        b->k = k;
        b->cap = cap;
    }
    char *n = strdup(name), *t = strdup(target);
    if (!n || !t) {
        free(n);
        free(t);
        b->oom = 1;
        return;
    }
    b->k[b->n] = (lora_key){n, part, t, row0, rows, swap, b->n};
    b->n++;
}

static void add(kbuf *b, const char *name, sd_lora_part part, const char *target) {
    add_ex(b, name, part, target, 0, 0, 0);
}

static void add_flux(void *ud, const char *name, const char *target, int64_t row0, int64_t rows,
                     int swap) {
    add_ex(ud, name, SD_LORA_UNET, target, row0, rows, swap);
}

static void dots_to_underscores(char *s) {
    for (; *s; s++)
        if (*s == '.') *s = '_';
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* ---- UNet ------------------------------------------------------------------ */

static void unet_keys(sd_unet *u, kbuf *b) {
    size_t n;
    sd_unet_name_pair *t = sd_unet_diffusers_table(sd_unet_get_config(u), &n); /* comfy.utils.unet_to_diffusers */
    if (!t) {
        b->oom = 1;
        return;
    }
    char name[300], tgt[260];
    /* state-dict keys first (model_lora_keys_unet's first loop): every ldm
     * module that exists, named from its ldm path */
    for (size_t i = 0; i < n; i++) {
        int dup = 0; /* label_emb appears twice in the basic map */
        for (size_t j = 0; j < i && !dup; j++) dup = strcmp(t[j].l, t[i].l) == 0;
        if (dup) continue;
        snprintf(tgt, sizeof tgt, "%s.weight", t[i].l);
        if (sd_unet_param(u, tgt)) {
            snprintf(name, sizeof name, "lora_unet_%s", t[i].l);
            dots_to_underscores(name + 10);
            add(b, name, SD_LORA_UNET, tgt);
            snprintf(name, sizeof name, "diffusion_model.%s", t[i].l);
            add(b, name, SD_LORA_UNET, tgt);
        }
        snprintf(tgt, sizeof tgt, "%s.bias", t[i].l);
        if (sd_unet_param(u, tgt)) {
            snprintf(name, sizeof name, "diffusion_model.%s", tgt);
            add(b, name, SD_LORA_UNET, tgt);
        }
    }
    /* diffusers names */
    for (size_t i = 0; i < n; i++) {
        snprintf(tgt, sizeof tgt, "%s.weight", t[i].l);
        if (!sd_unet_param(u, tgt)) continue;
        snprintf(name, sizeof name, "lora_unet_%s", t[i].d);
        dots_to_underscores(name + 10);
        add(b, name, SD_LORA_UNET, tgt);
        snprintf(name, sizeof name, "lycoris_%s", t[i].d);
        dots_to_underscores(name + 8);
        add(b, name, SD_LORA_UNET, tgt);
        static const char *const pre[] = {"", "unet."};
        for (int p = 0; p < 2; p++) {
            /* k.replace(".to_", ".processor.to_"), then ".to_out.0" -> ".to_out" */
            char dk[300];
            const char *hit = strstr(t[i].d, ".to_");
            if (hit)
                snprintf(dk, sizeof dk, "%s%.*s.processor%s", pre[p], (int)(hit - t[i].d), t[i].d,
                         hit);
            else
                snprintf(dk, sizeof dk, "%s%s", pre[p], t[i].d);
            if (ends_with(dk, ".to_out.0")) dk[strlen(dk) - 2] = '\0';
            add(b, dk, SD_LORA_UNET, tgt);
        }
    }
    free(t);
}

/* ---- text encoders ---------------------------------------------------------------- */

/* ComfyUI's model_lora_keys_clip over the encoder's parts, in its order:
 *   1. "text_encoders.<part>.transformer.<key>" for every ".weight" of the
 *      state dict (<part> clip_l / clip_g / clip_h / t5xxl / qwen3_4b, the
 *      attribute names of ComfyUI's SD1ClipModel-style wrappers; parts in the
 *      order their wrapper holds them);
 *   2. per layer b < 32 and LORA_CLIP_MAP module: the Kohya lora_te*_ and
 *      diffusers text_encoder[_2]. names of clip_h, clip_l, clip_g;
 *   3. the T5's Kohya names lora_te<i>_<key with _>, i = 1 + (bigG present) +
 *      (CLIP-L present), and also lora_te2_ when CLIP-L is there without the
 *      bigG (OneTrainer's Flux LoRAs);
 *   4. the text projections (lora_te1_ / lora_te2_ / lora_prior_te_).
 * A CLIP's keys are the HF names (an OpenCLIP tower's q/k/v are row slices
 * of its fused in_proj, resolved by sd_clip_param). */

static const char *const clip_map[][2] = {
    {"mlp.fc1", "mlp_fc1"},
    {"mlp.fc2", "mlp_fc2"},
    {"self_attn.k_proj", "self_attn_k_proj"},
    {"self_attn.q_proj", "self_attn_q_proj"},
    {"self_attn.v_proj", "self_attn_v_proj"},
    {"self_attn.out_proj", "self_attn_out_proj"},
};

/* ComfyUI's CLIPTextModel state-dict order (HF names) */
static const char *const clip_layer_mods[] = {"layer_norm1", "self_attn.q_proj", "self_attn.k_proj",
                                              "self_attn.v_proj", "self_attn.out_proj", "layer_norm2",
                                              "mlp.fc1", "mlp.fc2"};

typedef struct generic_walk {
    kbuf *b;
    sd_lora_part part;
    const char *tag;
} generic_walk;

/* step 1 for one key (".weight" keys only) */
static void generic_key(void *ud, const char *key, sd_bt **slot) {
    generic_walk *g = ud;
    size_t n = strlen(key);
    if (!*slot || !ends_with(key, ".weight")) return;
    char name[320];
    snprintf(name, sizeof name, "text_encoders.%s.transformer.%.*s", g->tag, (int)(n - 7), key);
    add(g->b, name, g->part, key);
}

static void clip_generic(sd_clip *c, sd_lora_part part, const char *tag, kbuf *b) {
    generic_walk g = {b, part, tag};
    char k[200];
    int64_t r0, rn;
    static const char *const head[] = {"text_model.embeddings.token_embedding.weight",
                                       "text_model.embeddings.position_embedding.weight"};
    for (int i = 0; i < 2; i++) {
        sd_bt **slot = sd_clip_param(c, head[i], &r0, &rn);
        if (slot) generic_key(&g, head[i], slot);
    }
    for (int i = 0; i < sd_clip_get_config(c)->layers; i++)
        for (size_t m = 0; m < sizeof clip_layer_mods / sizeof *clip_layer_mods; m++) {
            snprintf(k, sizeof k, "text_model.encoder.layers.%d.%s.weight", i, clip_layer_mods[m]);
            sd_bt **slot = sd_clip_param(c, k, &r0, &rn);
            if (slot) generic_key(&g, k, slot);
        }
    static const char *const tail[] = {"text_model.final_layer_norm.weight", "text_projection.weight"};
    for (int i = 0; i < 2; i++) {
        sd_bt **slot = sd_clip_param(c, tail[i], &r0, &rn);
        if (slot) generic_key(&g, tail[i], slot);
    }
}

/* step 2 for one CLIP (role 'l', 'g' or 'h'), layer i, module m */
static void clip_layer_names(sd_clip *c, char role, int has_l, int i, size_t m, kbuf *b) {
    char name[300], tgt[260];
    sd_lora_part part = role == 'l' ? SD_LORA_CLIP_L : SD_LORA_CLIP_G;
    snprintf(tgt, sizeof tgt, "text_model.encoder.layers.%d.%s.weight", i, clip_map[m][0]);
    if (!sd_clip_param(c, tgt, NULL, NULL)) return;
    if (role == 'h' || role == 'l') {
        snprintf(name, sizeof name, "lora_te_text_model_encoder_layers_%d_%s", i, clip_map[m][1]);
        add(b, name, part, tgt);
        snprintf(name, sizeof name, "lora_te1_text_model_encoder_layers_%d_%s", i, clip_map[m][1]);
        add(b, name, part, tgt);
        snprintf(name, sizeof name, "text_encoder.text_model.encoder.layers.%d.%s", i, clip_map[m][0]);
        add(b, name, part, tgt);
    } else if (has_l) { /* SDXL base, SD3: the bigG is the second encoder */
        snprintf(name, sizeof name, "lora_te2_text_model_encoder_layers_%d_%s", i, clip_map[m][1]);
        add(b, name, part, tgt);
        snprintf(name, sizeof name, "text_encoder_2.text_model.encoder.layers.%d.%s", i, clip_map[m][0]);
        add(b, name, part, tgt);
    } else { /* a lone bigG (SDXL refiner; Cascade's prior) */
        snprintf(name, sizeof name, "lora_te_text_model_encoder_layers_%d_%s", i, clip_map[m][1]);
        add(b, name, part, tgt);
        snprintf(name, sizeof name, "text_encoder.text_model.encoder.layers.%d.%s", i, clip_map[m][0]);
        add(b, name, part, tgt);
        snprintf(name, sizeof name, "lora_prior_te_text_model_encoder_layers_%d_%s", i, clip_map[m][1]);
        add(b, name, part, tgt);
    }
}

typedef struct t5_walk {
    kbuf *b;
    int index; /* the lora_te<index>_ of the T5 */
    int also_te2;
} t5_walk;

/* step 3 for one T5 key */
static void t5_key(void *ud, const char *key, sd_bt **slot) {
    t5_walk *w = ud;
    size_t n = strlen(key);
    if (!*slot || !ends_with(key, ".weight")) return;
    char name[320];
    if (w->also_te2) {
        snprintf(name, sizeof name, "lora_te2_%.*s", (int)(n - 7), key);
        dots_to_underscores(name + 9);
        add(w->b, name, SD_LORA_T5, key);
    }
    snprintf(name, sizeof name, "lora_te%d_%.*s", w->index, (int)(n - 7), key);
    dots_to_underscores(name + 9);
    add(w->b, name, SD_LORA_T5, key);
}

static void te_keys(const sd_text_encoder *te, kbuf *b) {
    sd_clip *l = (sd_clip *)sd_text_encoder_clip_l(te), *g = (sd_clip *)sd_text_encoder_clip_g(te);
    sd_t5 *t5 = (sd_t5 *)sd_text_encoder_t5(te);
    sd_qwen3 *qw = (sd_qwen3 *)sd_text_encoder_qwen3(te);
    int is_h = sd_text_encoder_kind(te) == SD_TE_SD2;
    /* 1 */
    if (l) clip_generic(l, SD_LORA_CLIP_L, "clip_l", b);
    if (g) clip_generic(g, SD_LORA_CLIP_G, is_h ? "clip_h" : "clip_g", b);
    if (t5) {
        generic_walk gw = {b, SD_LORA_T5, "t5xxl"};
        sd_t5_param_each(t5, generic_key, &gw);
    }
    if (qw) {
        generic_walk gw = {b, SD_LORA_QWEN3, "qwen3_4b"};
        sd_qwen3_param_each(qw, generic_key, &gw);
    }
    /* 2: ComfyUI walks layers 0..31 only */
    int layers = 0;
    if (l) layers = sd_clip_get_config(l)->layers;
    if (g && sd_clip_get_config(g)->layers > layers) layers = sd_clip_get_config(g)->layers;
    if (layers > 32) layers = 32;
    for (int i = 0; i < layers; i++)
        for (size_t m = 0; m < sizeof clip_map / sizeof *clip_map; m++) {
            if (g && is_h) clip_layer_names(g, 'h', 0, i, m, b);
            if (l) clip_layer_names(l, 'l', 1, i, m, b);
            if (g && !is_h) clip_layer_names(g, 'g', l != NULL, i, m, b);
        }
    /* 3 */
    if (t5) {
        int has_l = l != NULL, has_g = g != NULL && !is_h;
        /* ComfyUI: index 1 (+1 bigG, +1 CLIP-L); an index of 2 reached by
         * CLIP-L also names lora_te2_ and moves on to 3 */
        int also_te2 = has_l && !has_g;
        t5_walk w = {b, 1 + has_g + has_l + also_te2, also_te2};
        sd_t5_param_each(t5, t5_key, &w);
    }
    /* 4 */
    if (g && !is_h && sd_clip_param(g, "text_projection.weight", NULL, NULL)) {
        add(b, "lora_prior_te_text_projection", SD_LORA_CLIP_G, "text_projection.weight");
        add(b, "lora_te2_text_projection", SD_LORA_CLIP_G, "text_projection.weight");
    }
    if (l && sd_clip_param(l, "text_projection.weight", NULL, NULL))
        add(b, "lora_te1_text_projection", SD_LORA_CLIP_L, "text_projection.weight");
}

/* ---- map --------------------------------------------------------------------- */

typedef struct ord {
    lora_key k;
    size_t i;
} ord;

static int by_name_then_order(const void *a, const void *b) {
    const ord *x = a, *y = b;
    int c = strcmp(x->k.name, y->k.name);
    if (c) return c;
    return x->i < y->i ? -1 : x->i > y->i;
}

void sd_lora_keymap_free(lora_key *k, size_t n) {
    for (size_t i = 0; k && i < n; i++) {
        free(k[i].name);
        free(k[i].target);
    }
    free(k);
}

sd_status sd_lora_keymap_build(const lora_model *m, lora_key **out, size_t *n, sd_error *err) {
    *out = NULL;
    *n = 0;
    kbuf b = {0};
    const sd_text_encoder *te = m->te;
    if (m->unet) unet_keys(m->unet, &b);
    if (m->flux) sd_lora_flux_keys(m->flux, add_flux, &b);
    if (m->sd3) sd_lora_sd3_keys(m->sd3, add_flux, &b);
    if (m->zimage) sd_lora_zimage_keys(m->zimage, add_flux, &b);
    if (te) te_keys(te, &b);
    if (b.oom) {
        sd_lora_keymap_free(b.k, b.n);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory building the LoRA key map");
    }
    /* dict semantics: one entry per name, the last insertion wins */
    ord *o = malloc((b.n ? b.n : 1) * sizeof *o);
    if (!o) {
        sd_lora_keymap_free(b.k, b.n);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory building the LoRA key map");
    }
    for (size_t i = 0; i < b.n; i++) o[i] = (ord){b.k[i], i};
    qsort(o, b.n, sizeof *o, by_name_then_order);
    size_t kept = 0, first = 0;
    int in_group = 0; /* o[i - 1] had o[i]'s name (and is freed) */
    for (size_t i = 0; i < b.n; i++) {
        /* a dict keeps a reassigned name where it was first inserted */
        if (!in_group) first = o[i].i;
        o[i].k.order = first;
        in_group = i + 1 < b.n && strcmp(o[i].k.name, o[i + 1].k.name) == 0;
        if (in_group) {
            free(o[i].k.name);
            free(o[i].k.target);
            continue;
        }
        b.k[kept++] = o[i].k;
    }
    free(o);
    *out = b.k;
    *n = kept;
    return SD_OK;
}
