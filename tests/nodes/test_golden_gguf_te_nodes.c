/* ComfyUI-GGUF's text-encoder loaders on GGUF files made here from the
 * reference sets' tiny text encoders, as llama.cpp's converters lay them
 * out (llama.cpp tensor names, 1-D tensors F32, matrices as stored), then
 * through CLIPTextEncode against the sets' ComfyUI goldens:
 *   - Z-Image: the Qwen3-4B as arch qwen3 (blk.N.attn_q ... token_embd,
 *     output_norm) with its BF16 matrices -> CLIPLoaderGGUF type lumina2
 *     equals every p<i>.cond and attention_mask of the set's text_encoder
 *     case. ComfyUI-GGUF widens a BF16 tensor exactly and a 1-D one to F32
 *     at load, so its numbers are ComfyUI's CLIPLoader ones on the
 *     safetensors file, which the golden holds.
 *   - SD3: the T5-XXL as arch t5encoder (enc.blk.N.*) with its F16
 *     matrices, beside the set's CLIP-L and CLIP-G safetensors ->
 *     TripleCLIPLoaderGGUF in two file orders equals every p<i>.cond and
 *     pooled of the set's case (F16 is ComfyUI-GGUF's torch-compatible type:
 *     used as is).
 *   - Quantized: the same files in Q8_0 (rows that are not whole blocks F16,
 *     the relative attention bias F16, as llama-quantize leaves them),
 *     quantized by sdflow's quantizer; the conditioning must equal the one
 *     from a safetensors file holding the blocks widened as ComfyUI-GGUF
 *     widens them (float16 arithmetic, core/quant.c, bit-exact to its
 *     dequant.py by formats.golden_gguf_dequant) through the plain loaders,
 *     at the case's tolerance: ComfyUI-GGUF's Linear and Embedding compute
 *     with exactly those widened weights.
 *   - Refusals naming the input: TripleCLIPLoaderGGUF given the Qwen3.
 * Needs the zimage and sd3 sets, the CLIP vocabulary and the T5 tokenizer
 * (their manifests name them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/env.h"
#include "core/node.h"
#include "core/quant.h"
#include "formats/gguf.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_status run(const sd_env *env, const char *type, const char *const *names, sd_value *const *vals, int n,
                     sd_value **out, sd_error *err) {
    sd_node_ctx ctx = {.env = env, .node_id = "1", .class_type = type};
    return nt_run_named(&ctx, names, vals, n, out, err);
}

static void abs_path(const char *p, char *out, size_t n) {
    char cwd[2048];
    if (p[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(out, n, "%s", p);
    else snprintf(out, n, "%s/%s", cwd, p);
}

static void mkdir_p(const char *dir) {
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
}

static void link_to(const char *target, const char *dir, const char *name) {
    char src[4200], dst[4200];
    abs_path(target, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    char *slash = strrchr(dst, '/');
    *slash = 0;
    mkdir_p(dst);
    *slash = '/';
    CHECK_MSG(symlink(src, dst) == 0, "symlink %s", dst);
}

static const char *model_field(const cJSON *m, const char *key, const char *field) {
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "models"), key), field));
}

static const char *base_name(const char *p) {
    const char *s = p ? strrchr(p, '/') : NULL;
    return s ? s + 1 : p;
}

static sd_tensor *entry_tensor(sd_value *cond, const char *key) {
    sd_value *v = sd_value_dict_get(sd_value_list_get(cond, 0), key);
    return v ? sd_value_as_tensor(v) : NULL;
}

static const cJSON *text_case(const cJSON *m) {
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(m, "cases")) if (sd_golden_case_is(it, "text_encoder")) return it;
    return NULL;
}

/* ---- llama.cpp names (the inverses of ComfyUI-GGUF's LLAMA_SD_MAP and
 * T5_SD_MAP, which gguf_model.c applies) ---------------------------------------- */

static const char *const qwen_block[][2] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {NULL, NULL},
};
static const char *const qwen_top[][2] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
    {NULL, NULL},
};
static const char *const t5_block[][2] = {
    {"layer.0.SelfAttention.q.weight", "attn_q.weight"},
    {"layer.0.SelfAttention.k.weight", "attn_k.weight"},
    {"layer.0.SelfAttention.v.weight", "attn_v.weight"},
    {"layer.0.SelfAttention.o.weight", "attn_o.weight"},
    {"layer.0.SelfAttention.relative_attention_bias.weight", "attn_rel_b.weight"},
    {"layer.0.layer_norm.weight", "attn_norm.weight"},
    {"layer.1.DenseReluDense.wi_0.weight", "ffn_gate.weight"},
    {"layer.1.DenseReluDense.wi_1.weight", "ffn_up.weight"},
    {"layer.1.DenseReluDense.wo.weight", "ffn_down.weight"},
    {"layer.1.layer_norm.weight", "ffn_norm.weight"},
    {NULL, NULL},
};
static const char *const t5_top[][2] = {
    {"shared.weight", "token_embd.weight"},
    {"encoder.final_layer_norm.weight", "enc.output_norm.weight"},
    {NULL, NULL},
};

/* The llama.cpp name of an HF name; 0 to leave the tensor out (T5's tied
 * encoder.embed_tokens, which convert_hf_to_gguf skips). */
static int lcpp_name(int t5, const char *hf, char *out, size_t n) {
    const char *const(*top)[2] = t5 ? t5_top : qwen_top, *const(*blk)[2] = t5 ? t5_block : qwen_block;
    for (int i = 0; top[i][0]; i++)
        if (strcmp(hf, top[i][0]) == 0) return snprintf(out, n, "%s", top[i][1]), 1;
    int b, used = 0;
    if (sscanf(hf, t5 ? "encoder.block.%d.%n" : "model.layers.%d.%n", &b, &used) == 1 && used)
        for (int i = 0; blk[i][0]; i++)
            if (strcmp(hf + used, blk[i][0]) == 0) return snprintf(out, n, t5 ? "enc.blk.%d.%s" : "blk.%d.%s", b, blk[i][1]), 1;
    CHECK_MSG(t5 && strcmp(hf, "encoder.embed_tokens.weight") == 0, "no llama.cpp name for '%s'", hf);
    return 0;
}

/* src (HF names) as a llama.cpp GGUF at gguf_path: 1-D F32, matrices as
 * stored (q = 0) or in q where rows are whole blocks of it (else F16; the
 * T5 relative attention bias F16). widened_path (when q): a safetensors
 * file of every tensor as ComfyUI-GGUF computes with it (F32). */
static void convert(const char *src, int t5, sd_dtype q, const char *gguf_path, const char *widened_path) {
    sd_error err = {0};
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(src, &f, &err), &err);
    sd_gguf_writer *w = sd_gguf_writer_new();
    sd_st_writer *sw = widened_path ? sd_st_writer_new() : NULL;
    CHECK(w && (!widened_path || sw));
    if (!f || !w) goto out;
    CHECK_OK(sd_gguf_writer_kv_str(w, "general.architecture", t5 ? "t5encoder" : "qwen3", &err), &err);
    CHECK_OK(sd_gguf_writer_kv_u32(w, "general.quantization_version", 2, &err), &err);
    for (size_t i = 0; i < sd_st_count(f); i++) {
        const sd_st_entry *e = sd_st_at(f, i);
        char name[256];
        if (!lcpp_name(t5, e->name, name, sizeof name)) continue;
        sd_tensor *t = sd_st_tensor(f, e->name, &err), *o = NULL;
        CHECK_OK(t ? SD_OK : err.code, &err);
        if (!t) continue;
        int64_t row = t->shape[t->ndim - 1];
        if (t->ndim == 1) {
            o = sd_tensor_to_dtype(t, SD_F32);
        } else if (!q) {
            o = sd_tensor_ref(t);
        } else {
            sd_tensor *x = sd_tensor_to_dtype(t, SD_F32);
            int quant = row % sd_dtype_block(q) == 0 && !strstr(name, "attn_rel_b");
            o = quant ? sd_tensor_new4(q, 2, t->shape[0], t->shape[1], 0, 0) : sd_tensor_to_dtype(t, SD_F16);
            if (quant && o && x) CHECK(sd_quant_quantize(q, sd_tensor_f32(x), o->data, sd_tensor_numel(x)));
            sd_tensor_unref(x);
        }
        CHECK(o != NULL);
        if (o) CHECK_OK(sd_gguf_writer_add(w, name, o, &err), &err);
        if (o && sw) {
            sd_tensor *wide = sd_tensor_new4(SD_F32, o->ndim, o->shape[0], o->ndim > 1 ? o->shape[1] : 0, 0, 0);
            if (wide) sd_quant_dequant(o->dtype, SD_DQ_F16, o->data, sd_tensor_f32(wide), sd_tensor_numel(o));
            if (wide) CHECK_OK(sd_st_writer_add(sw, e->name, wide, &err), &err);
            sd_tensor_unref(wide);
        }
        sd_tensor_unref(o);
        sd_tensor_unref(t);
    }
    CHECK_OK(sd_gguf_writer_save(w, gguf_path, &err), &err);
    if (sw) CHECK_OK(sd_st_writer_save(sw, widened_path, &err), &err);
out:
    sd_gguf_writer_free(w);
    sd_st_writer_free(sw);
    if (f) sd_st_close(f);
}

/* How many tensors of file path are stored as dt (the GGUF as written). */
static int count_type(const char *path, sd_dtype dt) {
    sd_error err;
    sd_st_file *f = NULL;
    int n = 0;
    CHECK_OK(sd_gguf_open(path, &f, &err), &err);
    for (size_t i = 0; f && i < sd_st_count(f); i++) n += sd_st_at(f, i)->dtype == dt;
    if (f) sd_st_close(f);
    return n;
}

static sd_value *loader(const sd_env *env, const char *type_name, const char *const *files, int n, const char *type,
                        sd_error *err) {
    static const char *const names3[] = {"clip_name1", "clip_name2", "clip_name3"};
    static const char *const single[] = {"clip_name", "type"};
    sd_value *vals[4] = {NULL};
    for (int i = 0; i < n; i++) vals[i] = sd_value_string(files[i]);
    if (type) vals[n] = sd_value_string(type);
    sd_value *out[1] = {NULL};
    sd_status rc = run(env, type_name, n == 3 ? names3 : single, vals, n + (type != NULL), out, err);
    nt_free_values(vals, 4);
    return rc ? NULL : out[0];
}

static sd_value *encode(const sd_env *env, sd_value *clip, const char *text, sd_error *err) {
    static const char *const names[] = {"text", "clip"};
    sd_value *vals[2] = {sd_value_string(text), clip};
    sd_value *out[1] = {NULL};
    sd_status rc = run(env, "CLIPTextEncode", names, vals, 2, out, err);
    sd_value_unref(vals[0]);
    return rc ? NULL : out[0];
}

/* a and b allclose under the tolerance of golden tensor tol_of. */
static void same(const char *what, const cJSON *tensors, const char *tol_of, const sd_tensor *a, const sd_tensor *b) {
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tensors, tol_of), "tolerance");
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(tol, "atol"), *rt = cJSON_GetObjectItemCaseSensitive(tol, "rtol");
    CHECK_MSG(cJSON_IsNumber(at) && cJSON_IsNumber(rt), "%s: no tolerance for %s", what, tol_of);
    CHECK_MSG(a && b && a->dtype == SD_F32 && b->dtype == SD_F32 && sd_tensor_numel(a) == sd_tensor_numel(b),
              "%s: missing or differently shaped", what);
    if (!a || !b || !cJSON_IsNumber(at) || !cJSON_IsNumber(rt) || sd_tensor_numel(a) != sd_tensor_numel(b)) return;
    double worst = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < sd_tensor_numel(a); i++) {
        double x = sd_tensor_f32(a)[i], y = sd_tensor_f32(b)[i], d = fabs(x - y);
        if (!(d <= at->valuedouble + rt->valuedouble * fabs(y))) bad++;
        worst = fmax(worst, d);
    }
    printf("%s: max |diff| %.3g (atol %g rtol %g)\n", what, worst, at->valuedouble, rt->valuedouble);
    CHECK_MSG(bad == 0, "%s: %lld values differ beyond the tolerance (max %.3g)", what, (long long)bad, worst);
}

static sd_env g_env;
static sd_backend *g_be;

static void setup_env(const char *models, const char *tokdir, sd_model_store *store) {
    sd_error err;
    CHECK_OK(sd_env_init(&g_env, &err), &err);
    CHECK_OK(sd_env_set(&g_env, &g_env.models_dir, models, &err), &err);
    CHECK_OK(sd_env_set(&g_env, &g_env.tokenizer_dir, tokdir, &err), &err);
    g_env.backend = g_be;
    g_env.models = store;
}

/* ---- Z-Image: CLIPLoaderGGUF with a Qwen3 GGUF ------------------------------------ */

static void zimage(const char *tmp) {
    const char *dir = sd_golden_family_dir("zimage");
    char zdir[2048];
    snprintf(zdir, sizeof zdir, "%s", dir);
    cJSON *m = sd_golden_manifest(zdir);
    const cJSON *c = sd_golden_require_cases(m, zdir, "text_encoder") ? text_case(m) : NULL;
    CHECK_MSG(c != NULL, "the zimage set has no text_encoder case");
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    char path[4200], src[4200], models[2400], te[2600], tokdir[2400];
    sd_error err;
    sd_st_file *g = NULL;
    snprintf(path, sizeof path, "%s/%s", zdir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file")));
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    snprintf(models, sizeof models, "%s/zimage/models", tmp);
    snprintf(te, sizeof te, "%s/text_encoders", models);
    mkdir_p(te);
    snprintf(src, sizeof src, "%s/%s", zdir, model_field(m, "qwen3_4b", "file"));
    char bf16[2800], q8[2800], wide[2800];
    snprintf(bf16, sizeof bf16, "%s/Qwen3-4B-BF16.gguf", te);
    snprintf(q8, sizeof q8, "%s/Qwen3-4B-Q8_0.gguf", te);
    snprintf(wide, sizeof wide, "%s/Qwen3-4B-Q8_0-widened.safetensors", te);
    convert(src, 0, 0, bf16, NULL);
    convert(src, 0, SD_Q8_0, q8, wide);
    CHECK_MSG(count_type(q8, SD_Q8_0) > 0 && count_type(bf16, SD_BF16) > 0, "the Qwen3 GGUFs hold no Q8_0 / BF16 tensors");
    const cJSON *files = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "tokenizer"), "files");
    char tsrc[2400];
    CHECK(sd_golden_resolve_path(zdir, cJSON_GetStringValue(cJSON_GetArrayItem(files, 0)), tsrc, sizeof tsrc));
    char *slash = strrchr(tsrc, '/');
    if (slash) *slash = 0;
    snprintf(tokdir, sizeof tokdir, "%s/zimage/tok", tmp);
    link_to(tsrc, tokdir, SD_QWEN_TOKENIZER_SUBDIR);

    sd_model_store *store = sd_model_store_new();
    sd_checkpoint_opts mo;
    sd_checkpoint_opts_default(&mo);
    const cJSON *hs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(settings, "qwen3"), "hidden_size");
    mo.qwen3_4b_width = cJSON_IsNumber(hs) ? hs->valueint : 0;
    sd_model_store_set_defaults(store, &mo);
    setup_env(models, tokdir, store);

    const char *bf16_name = base_name(bf16), *q8_name = base_name(q8), *wide_name = base_name(wide);
    sd_value *clip = loader(&g_env, "CLIPLoaderGGUF", &bf16_name, 1, "lumina2", &err);
    CHECK_MSG(clip != NULL, "CLIPLoaderGGUF (Qwen3 BF16 GGUF): %s", err.msg);
    sd_value *cq = loader(&g_env, "CLIPLoaderGGUF", &q8_name, 1, "lumina2", &err);
    CHECK_MSG(cq != NULL, "CLIPLoaderGGUF (Qwen3 Q8_0 GGUF): %s", err.msg);
    sd_value *cw = loader(&g_env, "CLIPLoader", &wide_name, 1, "lumina2", &err);
    CHECK_MSG(cw != NULL, "CLIPLoader (widened Q8_0): %s", err.msg);
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(settings, "text_prompts")) {
        if (!clip || !cq || !cw) break;
        const char *text = cJSON_GetStringValue(p);
        char name[64], what[128];
        sd_value *ce = encode(&g_env, clip, text, &err);
        CHECK_MSG(ce != NULL, "CLIPTextEncode (BF16 GGUF): %s", err.msg);
        snprintf(name, sizeof name, "p%s.cond", p->string);
        if (ce) sd_golden_compare("gguf_qwen3_bf16", tensors, g, name, entry_tensor(ce, "cond"));
        snprintf(name, sizeof name, "p%s.attention_mask", p->string);
        sd_tensor *mk = ce ? entry_tensor(ce, "attention_mask") : NULL;
        sd_tensor *mf = mk ? sd_tensor_to_dtype(mk, SD_F32) : NULL;
        if (ce) sd_golden_compare("gguf_qwen3_bf16", tensors, g, name, mf);
        sd_tensor_unref(mf);
        sd_value *a = encode(&g_env, cq, text, &err);
        CHECK_MSG(a != NULL, "CLIPTextEncode (Q8_0 GGUF): %s", err.msg);
        sd_value *b = encode(&g_env, cw, text, &err);
        CHECK_MSG(b != NULL, "CLIPTextEncode (widened): %s", err.msg);
        snprintf(name, sizeof name, "p%s.cond", p->string);
        snprintf(what, sizeof what, "qwen3 Q8_0 %s", name);
        if (a && b) same(what, tensors, name, entry_tensor(a, "cond"), entry_tensor(b, "cond"));
        sd_value_unref(a);
        sd_value_unref(b);
        sd_value_unref(ce);
    }
    sd_value_unref(clip);
    sd_value_unref(cq);
    sd_value_unref(cw);
    /* the Q8_0 file keeps its blocks: the probe sees a Qwen3 text encoder */
    sd_ckpt_info info;
    CHECK_OK(sd_checkpoint_probe(q8, &info, &err), &err);
    CHECK_MSG(info.has_text_encoder && info.te_kind == SD_TE_ZIMAGE, "Qwen3 GGUF probes as te_kind %d",
              (int)info.te_kind);
    /* a Qwen3 is no SD3 part */
    {
        const char *three[3] = {bf16_name, bf16_name, bf16_name};
        sd_value *bad = loader(&g_env, "TripleCLIPLoaderGGUF", three, 3, NULL, &err);
        CHECK_MSG(!bad && strcmp(err.input, "clip_name1") == 0 && strstr(err.msg, "Qwen3-4B"),
                  "TripleCLIPLoaderGGUF with a Qwen3: %s (input %s)", err.msg, err.input);
        sd_value_unref(bad);
    }
    sd_model_store_free(store);
    sd_env_cleanup(&g_env);
    if (g) sd_st_close(g);
    cJSON_Delete(m);
}

/* ---- SD3: TripleCLIPLoaderGGUF with a T5 GGUF ------------------------------------- */

static void sd3(const char *tmp) {
    char sdir[2048];
    snprintf(sdir, sizeof sdir, "%s", sd_golden_family_dir("sd3"));
    cJSON *m = sd_golden_manifest(sdir);
    const cJSON *c = sd_golden_require_cases(m, sdir, "text_encoder") ? text_case(m) : NULL;
    CHECK_MSG(c != NULL, "the sd3 set has no text_encoder case");
    cJSON *tensors = cJSON_GetObjectItemCaseSensitive(c, "tensors");
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(c, "settings");
    char path[4200], models[2400], te[2600], tokdir[2400], clipdir[2400];
    sd_error err;
    sd_st_file *g = NULL;
    snprintf(path, sizeof path, "%s/%s", sdir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "file")));
    CHECK_OK(sd_st_open(path, &g, &err), &err);
    snprintf(models, sizeof models, "%s/sd3/models", tmp);
    snprintf(te, sizeof te, "%s/text_encoders", models);
    mkdir_p(te);
    const char *nl = base_name(model_field(m, "clip_l", "comfy_name")), *ng = base_name(model_field(m, "clip_g", "comfy_name"));
    snprintf(path, sizeof path, "%s/%s", sdir, model_field(m, "clip_l", "file"));
    link_to(path, te, nl);
    snprintf(path, sizeof path, "%s/%s", sdir, model_field(m, "clip_g", "file"));
    link_to(path, te, ng);
    char f16[2800], q8[2800], wide[2800];
    snprintf(f16, sizeof f16, "%s/t5-v1_1-xxl-encoder-f16.gguf", te);
    snprintf(q8, sizeof q8, "%s/t5-v1_1-xxl-encoder-Q8_0.gguf", te);
    snprintf(wide, sizeof wide, "%s/t5-Q8_0-widened.safetensors", te);
    snprintf(path, sizeof path, "%s/%s", sdir, model_field(m, "t5xxl", "file"));
    convert(path, 1, 0, f16, NULL);
    convert(path, 1, SD_Q8_0, q8, wide);
    CHECK_MSG(count_type(q8, SD_Q8_0) > 0 && count_type(f16, SD_F16) > 0, "the T5 GGUFs hold no Q8_0 / F16 tensors");
    snprintf(clipdir, sizeof clipdir, "%s/data/clip", sd_test_shared_dir());
    snprintf(tokdir, sizeof tokdir, "%s/sd3/tok", tmp);
    CHECK(sd_golden_resolve_path(sdir, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                                           cJSON_GetObjectItemCaseSensitive(m, "tokenizer"), "t5")),
                                 path, sizeof path));
    link_to(path, tokdir, "t5_tokenizer/tokenizer.json");
    const char *vf[] = {"vocab.json", "merges.txt"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", clipdir, vf[i]);
        link_to(path, tokdir, vf[i]);
    }

    sd_model_store *store = sd_model_store_new();
    sd_checkpoint_opts mo;
    sd_checkpoint_opts_default(&mo);
    const cJSON *sl = cJSON_GetObjectItemCaseSensitive(settings, "clip_l"), *sg = cJSON_GetObjectItemCaseSensitive(settings, "clip_g");
    const cJSON *hl = cJSON_GetObjectItemCaseSensitive(sl, "num_attention_heads"), *hg = cJSON_GetObjectItemCaseSensitive(sg, "num_attention_heads");
    mo.clip_l_heads = cJSON_IsNumber(hl) ? hl->valueint : 0;
    mo.clip_g_heads = cJSON_IsNumber(hg) ? hg->valueint : 0;
    sd_model_store_set_defaults(store, &mo);
    setup_env(models, tokdir, store);

    const char *nf = base_name(f16), *nq = base_name(q8), *nw = base_name(wide);
    for (int order = 0; order < 2; order++) {
        const char *files[3] = {order ? nf : nl, ng, order ? nl : nf};
        sd_value *clip = loader(&g_env, "TripleCLIPLoaderGGUF", files, 3, NULL, &err);
        CHECK_MSG(clip != NULL, "TripleCLIPLoaderGGUF: %s", err.msg);
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(settings, "clip_text_encode_prompts")) {
            if (!clip) break;
            sd_value *ce = encode(&g_env, clip, cJSON_GetStringValue(p), &err);
            CHECK_MSG(ce != NULL, "CLIPTextEncode: %s", err.msg);
            char name[64];
            snprintf(name, sizeof name, "p%s.cond", p->string);
            if (ce) sd_golden_compare("gguf_sd3_t5_f16", tensors, g, name, entry_tensor(ce, "cond"));
            snprintf(name, sizeof name, "p%s.pooled", p->string);
            if (ce) sd_golden_compare("gguf_sd3_t5_f16", tensors, g, name, entry_tensor(ce, "pooled_output"));
            sd_value_unref(ce);
        }
        sd_value_unref(clip);
    }
    /* Q8_0 T5 against its widened weights through TripleCLIPLoader */
    const char *fq[3] = {nl, ng, nq}, *fw[3] = {nl, ng, nw};
    sd_value *cq = loader(&g_env, "TripleCLIPLoaderGGUF", fq, 3, NULL, &err);
    CHECK_MSG(cq != NULL, "TripleCLIPLoaderGGUF (Q8_0 T5): %s", err.msg);
    sd_value *cw = loader(&g_env, "TripleCLIPLoader", fw, 3, NULL, &err);
    CHECK_MSG(cw != NULL, "TripleCLIPLoader (widened T5): %s", err.msg);
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(settings, "clip_text_encode_prompts")) {
        if (!cq || !cw) break;
        sd_value *a = encode(&g_env, cq, cJSON_GetStringValue(p), &err);
        CHECK_MSG(a != NULL, "CLIPTextEncode (Q8_0 T5): %s", err.msg);
        sd_value *b = encode(&g_env, cw, cJSON_GetStringValue(p), &err);
        CHECK_MSG(b != NULL, "CLIPTextEncode (widened T5): %s", err.msg);
        char name[64], what[128];
        snprintf(name, sizeof name, "p%s.cond", p->string);
        snprintf(what, sizeof what, "sd3 T5 Q8_0 %s", name);
        if (a && b) same(what, tensors, name, entry_tensor(a, "cond"), entry_tensor(b, "cond"));
        sd_value_unref(a);
        sd_value_unref(b);
    }
    sd_value_unref(cq);
    sd_value_unref(cw);
    sd_model_store_free(store);
    sd_env_cleanup(&g_env);
    if (g) sd_st_close(g);
    cJSON_Delete(m);
}

int main(void) {
    char clipdir[2400];
    snprintf(clipdir, sizeof clipdir, "%s/data/clip", sd_test_shared_dir());
    if (!sd_tokenizer_dir_has_files(clipdir)) sd_test_skip("no CLIP vocabulary in %s", clipdir);
    const char *tmp = sd_test_tmpdir("golden_gguf_te_nodes");
    char t[2048];
    snprintf(t, sizeof t, "%s", tmp);
    sd_error err;
    CHECK_OK(sd_backend_new("cpu", 0, &g_be, &err), &err);
    CHECK_OK(sd_nodes_register_all(&err), &err);
    unsetenv("SDFLOW_TOKENIZER_DIR");
    zimage(t);
    sd3(t);
    sd_backend_free(g_be);
    sd_registry_reset();
    return sd_test_finish();
}
