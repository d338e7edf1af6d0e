/* test_golden_unclip.c - unCLIPCheckpointLoader, unCLIPConditioning and the
 * unCLIP UNet's ADM against ComfyUI (tests/data/unclip, gen_unclip_ref.py).
 *
 * The checkpoint is the one the manifest names as its base (`sdflow synth
 * --preset sd2-tiny --seed 1`, sha256 checked) with every reference tensor
 * under the manifest's added_prefix added under its own name (the UNet's
 * label_emb and an OpenCLIP vision tower under embedder.model.visual.),
 * written into the test's scratch folder and opened by
 * unCLIPCheckpointLoader. Cases by component:
 *   encode   CLIPVisionEncode on the loader's CLIP_VISION: image_embeds;
 *   adm      unCLIPConditioning per item on one entry (the stored
 *            embeddings as a CLIP_VISION_OUTPUT), then sd_cond_unclip_adm
 *            with the case's seed on a generator the test owns: the ADM
 *            vector, and the next values that generator draws
 *            (torch.randn(rng_after_count) after encode_adm in ComfyUI);
 *   sdxl_pooled  the same through sd_cond_unclip_pooled (SDXL's revision
 *            pooled output, width-1280 embeddings);
 *   forward  the MODEL's UNet on the stored x / timestep / context and a
 *            case's ADM;
 *   ksampler CLIPVisionEncode -> unCLIPConditioning per item on the stored
 *            positive text conditioning, KSampler on an empty latent.
 * Then what ComfyUI does elsewhere: strength 0 returns the conditioning as
 * it came; unclip_conditioning on an SD2 model that is not unCLIP changes
 * nothing (BaseModel.encode_adm is None); the loader on that checkpoint
 * gives a CLIP_VISION that CLIPVisionEncode refuses naming the file and
 * the loader (ComfyUI's None); embeddings of another width are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/env.h"
#include "core/node.h"
#include "core/sha256.h"
#include "formats/safetensors.h"
#include "golden.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "models/sampling/rng.h"
#include "models/synth/synth.h"
#include "models/unet/unet.h"
#include "nodes/loaders/loaders.h"
#include "nodes/sampling/sampling.h"
#include "nodes/vision/vision_nodes.h"
#include "nodes_ctx.h"
#include "testutil.h"

static sd_st_file *ref;
static sd_env env;

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static double num(const cJSON *o, const char *k) { return cJSON_GetNumberValue(item(o, k)); }
static const char *str(const cJSON *o, const char *k) { return cJSON_GetStringValue(item(o, k)); }

static sd_tensor *ref_tensor(const char *name) {
    sd_error err;
    sd_tensor *t = name ? sd_st_tensor_f32(ref, name, &err) : NULL;
    CHECK_MSG(t != NULL, "no reference tensor %s", name ? name : "(unnamed)");
    return t;
}

/* a compared with reference tensor `name` under tolerance tol {atol, rtol} */
static void compare(const char *id, const char *what, const sd_tensor *a, const char *name, const cJSON *tol) {
    sd_tensor *e = ref_tensor(name);
    CHECK_MSG(a != NULL, "%s: no %s computed", id, what);
    if (a && e) {
        double max_abs;
        long worst;
        CHECK_MSG(sd_test_allclose(a, e, num(tol, "atol"), num(tol, "rtol"), &max_abs, &worst),
                  "%s: %s max |diff| %g at %ld", id, what, max_abs, worst);
        printf("  %-12s max |diff| %.3g\n", what, max_abs);
    }
    sd_tensor_unref(e);
}

static sd_status run(const char *type, const char *const *names, sd_value *const *vals, int n, sd_value **out,
                     sd_error *err) {
    sd_node_ctx ctx = {.env = &env, .node_id = "5", .class_type = type};
    return nt_run_named(&ctx, names, vals, n, out, err);
}

/* The base checkpoint with every reference tensor named <prefix><key> added
 * as <key>, saved at path. */
static int derive_checkpoint(const char *base, const char *prefix, const char *path) {
    sd_error err;
    sd_st_file *f = NULL;
    CHECK_OK(sd_st_open(base, &f, &err), &err);
    if (!f) return -1;
    sd_st_writer *w = sd_st_writer_new();
    sd_status rc = SD_OK;
    int added = 0;
    for (size_t i = 0; i < sd_st_count(f) && !rc; i++) {
        const char *name = sd_st_at(f, i)->name;
        sd_tensor *t = sd_st_tensor(f, name, &err);
        rc = t ? sd_st_writer_add(w, name, t, &err) : err.code;
        sd_tensor_unref(t);
    }
    const size_t pl = strlen(prefix);
    for (size_t i = 0; i < sd_st_count(ref) && !rc; i++) {
        const char *name = sd_st_at(ref, i)->name;
        if (strncmp(name, prefix, pl)) continue;
        sd_tensor *t = sd_st_tensor(ref, name, &err);
        rc = t ? sd_st_writer_add(w, name + pl, t, &err) : err.code;
        sd_tensor_unref(t);
        added++;
    }
    if (!rc) rc = sd_st_writer_save(w, path, &err);
    CHECK_OK(rc, &err);
    CHECK_MSG(added > 0, "no reference tensor under %s", prefix);
    sd_st_writer_free(w);
    sd_st_close(f);
    return rc || !added ? -1 : 0;
}

/* IMAGE [N, H, W, C] from the stored u8 image: u8 / 255 (ComfyUI's). */
static sd_tensor *image_of(const char *name, int64_t first, int64_t count) {
    sd_tensor *u8 = ref_tensor(name);
    if (!u8) return NULL;
    if (count <= 0) count = u8->shape[0] - first;
    int64_t shape[4] = {count, u8->shape[1], u8->shape[2], u8->shape[3]};
    sd_tensor *img = sd_tensor_new(SD_F32, 4, shape);
    const int64_t per = u8->shape[1] * u8->shape[2] * u8->shape[3];
    for (int64_t i = 0; img && i < count * per; i++)
        ((float *)img->data)[i] = ((const float *)u8->data)[first * per + i] / 255.0f;
    sd_tensor_unref(u8);
    return img;
}

static sd_value *encode(sd_value *clip_vision, sd_tensor *img, const char *crop, sd_error *err) {
    const char *names[] = {"clip_vision", "image", "crop"};
    sd_value *v[3] = {clip_vision, nt_tensor_value(img), sd_value_string(crop)}, *out[1] = {0};
    sd_status rc = run("CLIPVisionEncode", names, v, 3, out, err);
    sd_value_unref(v[1]);
    sd_value_unref(v[2]);
    return rc ? NULL : out[0];
}

/* CONDITIONING [{"cond": t}] (takes t) */
static sd_value *conditioning(sd_tensor *t) {
    sd_value *d = sd_value_dict(), *l = sd_value_list();
    sd_value_dict_set(d, "cond", nt_tensor_value(t));
    sd_value_list_append(l, d);
    return l;
}

static sd_value *unclip_cond(sd_value *cond, sd_value *cvo, double strength, double aug, sd_error *err) {
    const char *names[] = {"conditioning", "clip_vision_output", "strength", "noise_augmentation"};
    sd_value *v[4] = {cond, cvo, sd_value_float(strength), sd_value_float(aug)}, *out[1] = {0};
    sd_status rc = run("unCLIPConditioning", names, v, 4, out, err);
    CHECK_OK(rc, err);
    sd_value_unref(v[2]);
    sd_value_unref(v[3]);
    return out[0];
}

static sd_value *embeds_output(const char *name) {
    sd_tensor *e = ref_tensor(name);
    if (!e) return NULL;
    sd_value *d = sd_value_dict();
    sd_value_dict_set(d, "image_embeds", nt_tensor_value(e));
    return d;
}

static uint64_t seed_of(const cJSON *c) {
    const char *t = str(c, "seed_text"); /* a uint64 does not survive a JSON double */
    return t ? (uint64_t)strtoull(t, NULL, 10) : (uint64_t)num(c, "seed");
}

static void run_encode(sd_value *clip_vision, const cJSON *c) {
    const char *id = str(c, "id");
    printf("case %s\n", id);
    sd_error err;
    sd_tensor *img = image_of(str(c, "image"), 0, 0);
    sd_value *o = img ? encode(clip_vision, img, str(c, "crop"), &err) : NULL;
    CHECK_MSG(o != NULL, "%s: CLIPVisionEncode: %s", id, err.msg);
    compare(id, "image_embeds", o ? sd_value_dict_tensor(o, "image_embeds") : NULL, str(c, "image_embeds"),
            item(c, "tolerance"));
    sd_value_unref(o);
}

/* The entry unCLIPConditioning makes of [{"cond": zeros}] with items `list`
 * (each {"embeds" | "image", strength, noise_augmentation}); embeds_fn maps
 * an item to its CLIP_VISION_OUTPUT (a new reference). */
typedef sd_value *(*cvo_fn)(const cJSON *it, void *ud);
static sd_value *apply_items(sd_value *cond, const cJSON *list, cvo_fn fn, void *ud) {
    const cJSON *it;
    sd_error err;
    sd_value_ref(cond);
    cJSON_ArrayForEach(it, list) {
        sd_value *cvo = fn(it, ud);
        sd_value *next = cvo ? unclip_cond(cond, cvo, num(it, "strength"), num(it, "noise_augmentation"), &err)
                             : NULL;
        sd_value_unref(cvo);
        sd_value_unref(cond);
        cond = next;
        if (!cond) return NULL;
    }
    return cond;
}

static sd_value *stored_embeds(const cJSON *it, void *ud) {
    (void)ud;
    return embeds_output(str(it, "embeds"));
}

static void run_adm(const cJSON *c, int adm) {
    const char *id = str(c, "id");
    const uint64_t seed = seed_of(c);
    printf("case %s (seed %llu, %d items)\n", id, (unsigned long long)seed, cJSON_GetArraySize(item(c, "unclip")));
    sd_tensor *z = sd_tensor_new4(SD_F32, 3, 1, 1, 8, 0);
    memset(z->data, 0, 8 * sizeof(float));
    sd_value *base = conditioning(z);
    sd_value *cond = apply_items(base, item(c, "unclip"), stored_embeds, NULL);
    sd_value_unref(base);
    CHECK_MSG(cond && sd_value_list_len(cond) == 1, "%s: unCLIPConditioning failed", id);
    if (!cond) return;
    const sd_value *e = sd_value_list_get(cond, 0);
    const sd_value *ul = sd_value_dict_get(e, "unclip_conditioning");
    CHECK_MSG(ul && sd_value_list_len(ul) == (size_t)cJSON_GetArraySize(item(c, "unclip")),
              "%s: unclip_conditioning holds %zu items", id, ul ? sd_value_list_len(ul) : 0);
    /* the generator as prepare_noise left it: encode_adm reseeds it */
    sd_rng *rng = sd_rng_new(12345);
    sd_tensor *y = NULL;
    sd_error err;
    CHECK_OK(sd_cond_unclip_adm(e, adm, seed, rng, &y, &err), &err);
    compare(id, "y", y, str(c, "y"), item(c, "tolerance"));
    const int n = (int)num(c, "rng_after_count");
    sd_tensor *after = sd_tensor_new4(SD_F32, 1, n, 0, 0, 0);
    sd_rng_randn(rng, after->data, n);
    compare(id, "rng_after", after, str(c, "rng_after"), item(c, "tolerance"));
    sd_tensor_unref(after);
    sd_tensor_unref(y);
    sd_rng_free(rng);
    sd_value_unref(cond);
}

/* SDXL's pooled output from unclip_conditioning (revision) */
static void run_sdxl_pooled(const cJSON *c) {
    const char *id = str(c, "id");
    const uint64_t seed = seed_of(c);
    printf("case %s (seed %llu)\n", id, (unsigned long long)seed);
    sd_tensor *z = sd_tensor_new4(SD_F32, 3, 1, 1, 8, 0);
    memset(z->data, 0, 8 * sizeof(float));
    sd_value *base = conditioning(z);
    sd_value *cond = apply_items(base, item(c, "unclip"), stored_embeds, NULL);
    sd_value_unref(base);
    if (!cond) return;
    sd_rng *rng = sd_rng_new(12345);
    sd_tensor *p = NULL;
    sd_error err;
    CHECK_OK(sd_cond_unclip_pooled(sd_value_list_get(cond, 0), seed, rng, &p, &err), &err);
    compare(id, "pooled", p, str(c, "pooled"), item(c, "tolerance"));
    const int n = (int)num(c, "rng_after_count");
    sd_tensor *after = sd_tensor_new4(SD_F32, 1, n, 0, 0, 0);
    sd_rng_randn(rng, after->data, n);
    compare(id, "rng_after", after, str(c, "rng_after"), item(c, "tolerance"));
    sd_tensor_unref(after);
    sd_tensor_unref(p);
    sd_rng_free(rng);
    sd_value_unref(cond);
}

static void run_forward(sd_value *model, const cJSON *c) {
    const char *id = str(c, "id");
    printf("case %s\n", id);
    sd_error err;
    sd_unet *unet = NULL;
    CHECK_OK(sd_nodes_model_unet(sd_value_as_handle(model, &sd_handle_model), &unet, &err), &err);
    sd_tensor *x = ref_tensor(str(c, "x")), *ctx = ref_tensor(str(c, "context")), *y = ref_tensor(str(c, "y"));
    if (!unet || !x || !ctx || !y) goto done;
    sd_backend *be = sd_value_as_handle(model, &sd_handle_model)
                         ? sd_checkpoint_backend(((sd_model_ref *)sd_value_as_handle(model, &sd_handle_model))->ckpt)
                         : NULL;
    float t = (float)num(c, "timestep");
    sd_bt *bx = sd_bt_from_host(be, x, SD_F32), *bc = sd_bt_from_host(be, ctx, SD_F32),
          *by = sd_bt_from_host(be, y, SD_F32), *bo = NULL;
    CHECK_OK(sd_unet_forward(unet, bx, &t, bc, by, NULL, &bo, &err), &err);
    sd_tensor *out = bo ? sd_bt_to_host(bo) : NULL;
    compare(id, "out", out, str(c, "out"), item(c, "tolerance"));
    sd_tensor_unref(out);
    sd_bt_free(bx);
    sd_bt_free(bc);
    sd_bt_free(by);
    sd_bt_free(bo);
done:
    sd_tensor_unref(x);
    sd_tensor_unref(ctx);
    sd_tensor_unref(y);
}

typedef struct ks_images {
    sd_value *clip_vision;
    const char *image;
} ks_images;

static sd_value *encoded_image(const cJSON *it, void *ud) {
    ks_images *k = ud;
    sd_error err;
    int both = strcmp(str(it, "image"), "both") == 0;
    sd_tensor *img = image_of(k->image, 0, both ? 0 : 1);
    sd_value *o = img ? encode(k->clip_vision, img, "center", &err) : NULL;
    CHECK_MSG(o != NULL, "CLIPVisionEncode: %s", err.msg);
    return o;
}

/* KSampler(model, settings of case c, positive, negative, empty latent) */
static sd_value *ksample(sd_value *model, const cJSON *k, sd_value *pos, sd_value *neg, sd_error *err) {
    sd_value *lat = NULL, *out = NULL;
    const char *ln[] = {"width", "height", "batch_size"};
    sd_value *lv[3] = {sd_value_int((int64_t)num(k, "width")), sd_value_int((int64_t)num(k, "height")),
                       sd_value_int(1)};
    sd_status rc = run("EmptyLatentImage", ln, lv, 3, &lat, err);
    nt_free_values(lv, 3);
    if (rc) return NULL;
    const char *n[] = {"model", "seed", "steps", "cfg", "sampler_name", "scheduler",
                       "positive", "negative", "latent_image", "denoise"};
    sd_value *v[10] = {model, sd_value_int((int64_t)num(k, "seed")), sd_value_int((int64_t)num(k, "steps")),
                       sd_value_float(num(k, "cfg")), sd_value_string(str(k, "sampler_name")),
                       sd_value_string(str(k, "scheduler")), pos, neg, lat, sd_value_float(num(k, "denoise"))};
    rc = run("KSampler", n, v, 10, &out, err);
    for (int i = 1; i < 6; i++) sd_value_unref(v[i]);
    sd_value_unref(v[9]);
    sd_value_unref(lat);
    return rc ? NULL : out;
}

static void run_ksampler(sd_value *model, sd_value *clip_vision, const cJSON *c) {
    const char *id = str(c, "id");
    const cJSON *k = item(c, "ksampler");
    printf("case %s (%s, %s, seed %g)\n", id, str(k, "sampler_name"), str(k, "scheduler"), num(k, "seed"));
    sd_error err;
    ks_images ki = {clip_vision, str(c, "image")};
    sd_value *text = conditioning(ref_tensor(str(c, "positive")));
    sd_value *pos = apply_items(text, item(c, "unclip"), encoded_image, &ki);
    sd_value *neg = conditioning(ref_tensor(str(c, "negative")));
    sd_value *out = pos ? ksample(model, k, pos, neg, &err) : NULL;
    CHECK_MSG(out != NULL, "%s: KSampler: %s", id, err.msg);
    compare(id, "samples", out ? sd_value_dict_tensor(out, "samples") : NULL, str(c, "samples"),
            item(c, "tolerance"));
    sd_value_unref(out);
    sd_value_unref(text);
    sd_value_unref(pos);
    sd_value_unref(neg);
}

/* What ComfyUI does around the golden cases: strength 0; the conditioning
 * on an SD2 model that is not unCLIP; that model's unCLIPCheckpointLoader
 * CLIP_VISION; embeddings of another width. */
static void run_refusals(const char *plain_ckpt, sd_value *clip_vision, const cJSON *ks, int adm) {
    sd_error err;
    printf("refusals and pass-throughs\n");
    /* strength 0: the same conditioning */
    sd_tensor *z = sd_tensor_new4(SD_F32, 3, 1, 1, 8, 0);
    memset(z->data, 0, 8 * sizeof(float));
    sd_value *cond = conditioning(z);
    sd_value *cvo = embeds_output("embeds/one");
    sd_value *same = unclip_cond(cond, cvo, 0.0, 0.3, &err);
    CHECK_MSG(same == cond, "unCLIPConditioning at strength 0 did not return its conditioning");
    sd_value_unref(same);

    /* embeddings of another width than the model's adm / 2 */
    sd_tensor *wrong = sd_tensor_new4(SD_F32, 2, 1, adm / 2 + 1, 0, 0);
    memset(wrong->data, 0, (size_t)(adm / 2 + 1) * sizeof(float));
    sd_value *wd = sd_value_dict();
    sd_value_dict_set(wd, "image_embeds", nt_tensor_value(wrong));
    sd_value *wc = unclip_cond(cond, wd, 1.0, 0.0, &err);
    sd_rng *rng = sd_rng_new(0);
    sd_tensor *y = NULL;
    sd_status rc = wc ? sd_cond_unclip_adm(sd_value_list_get(wc, 0), adm, 1, rng, &y, &err) : SD_OK;
    CHECK_MSG(rc == SD_ERR_INVALID && strstr(err.msg, "width"), "a wrong embedding width gave %d: %s", rc,
              err.msg);
    sd_tensor_unref(y);
    sd_rng_free(rng);
    sd_value_unref(wc);
    sd_value_unref(wd);

    /* the plain SD2 checkpoint through unCLIPCheckpointLoader */
    const char *cn[] = {"ckpt_name"};
    sd_value *name = sd_value_string(plain_ckpt), *ck[4] = {0};
    CHECK_OK(rc = run("unCLIPCheckpointLoader", cn, &name, 1, ck, &err), &err);
    sd_value_unref(name);
    if (!rc) {
        CHECK_MSG(ck[3] && sd_value_as_handle(ck[3], &sd_handle_clip_vision_absent),
                  "a non-unCLIP checkpoint gave a CLIP vision model");
        sd_tensor *img = image_of("image", 0, 1);
        sd_value *o = img ? encode(ck[3], img, "center", &err) : NULL;
        CHECK_MSG(!o && strstr(err.msg, "unCLIPCheckpointLoader") && strstr(err.msg, plain_ckpt) &&
                      strcmp(err.input, "clip_vision") == 0,
                  "CLIPVisionEncode on the absent tower: '%s' (input %s)", err.msg, err.input);
        sd_value_unref(o);
        /* BaseModel.encode_adm is None: unclip_conditioning changes nothing */
        sd_value *uc = unclip_cond(cond, cvo, 1.0, 0.2, &err);
        sd_value *neg = conditioning(ref_tensor("text/negative"));
        sd_value *pos_t = conditioning(ref_tensor("text/positive"));
        sd_value *pos_u = unclip_cond(pos_t, cvo, 1.0, 0.2, &err);
        sd_value *a = ksample(ck[0], ks, pos_t, neg, &err), *b = pos_u ? ksample(ck[0], ks, pos_u, neg, &err) : NULL;
        sd_tensor *ta = a ? sd_value_dict_tensor(a, "samples") : NULL, *tb = b ? sd_value_dict_tensor(b, "samples") : NULL;
        /* the same computation twice: bit for bit */
        CHECK_MSG(ta && tb && sd_tensor_numel(ta) == sd_tensor_numel(tb) &&
                      memcmp(ta->data, tb->data, (size_t)sd_tensor_numel(ta) * sizeof(float)) == 0,
                  "unclip_conditioning changed the sampling of a non-unCLIP SD2 model");
        nt_free_values((sd_value *[]){a, b, uc, neg, pos_t, pos_u}, 6);
    }
    nt_free_values(ck, 4);
    sd_value_unref(cvo);
    sd_value_unref(cond);
    (void)clip_vision;
}

int main(void) {
    char base[4300], derived[4300];
    const char *dir = sd_golden_topic_dir("unclip");
    cJSON *man = sd_golden_manifest(dir);
    static const char *const comps[] = {"encode", "adm", "sdxl_pooled", "forward", "ksampler"};
    for (int i = 0; i < 5; i++) sd_golden_require_cases(man, dir, comps[i]);
    ref = sd_golden_open_ref(dir, man, "file");
    sd_error err;
    const cJSON *ck_info = item(man, "checkpoint");
    const char *tmp = sd_test_tmpdir("golden_unclip");
    snprintf(base, sizeof base, "%s/%s.safetensors", tmp, str(ck_info, "base"));
    snprintf(derived, sizeof derived, "%s/tiny-sd21-unclip.safetensors", tmp);
    CHECK_OK(sd_synth_sd2_write(sd_synth_sd2_preset(str(ck_info, "base")), 1, base, &err), &err);
    uint8_t d[32];
    char hex[65] = "";
    CHECK_OK(sd_sha256_file(base, d, &err), &err);
    sd_sha256_hex(d, hex);
    CHECK_MSG(strcmp(hex, str(ck_info, "sha256")) == 0,
              "%s: sdflow synth --seed 1 writes sha256 %s, the reference was made from %s: regenerate "
              "tests/data/unclip with gen_unclip_ref.py", str(ck_info, "base"), hex, str(ck_info, "sha256"));
    if (derive_checkpoint(base, str(ck_info, "added_prefix"), derived)) {
        sd_st_close(ref);
        cJSON_Delete(man);
        return sd_test_finish();
    }

    CHECK_OK(sd_env_init(&env, &err), &err);
    sd_backend *be = sd_golden_backend();
    sd_model_store *store = sd_model_store_new();
    env.backend = be;
    env.models = store;
    CHECK_OK(sd_nodes_register_all(&err), &err);
    const char *cn[] = {"ckpt_name"};
    sd_value *cv[] = {sd_value_string(derived)}, *ck[4] = {0};
    CHECK_OK(run("unCLIPCheckpointLoader", cn, cv, 1, ck, &err), &err);
    sd_value_unref(cv[0]);
    const int adm = (int)num(ck_info, "adm_in_channels");
    if (ck[0]) {
        const sd_ckpt_info *info = sd_checkpoint_info(((sd_model_ref *)sd_value_as_handle(ck[0], &sd_handle_model))->ckpt);
        CHECK_MSG(info->unclip && info->family == SD_CKPT_SD2 && info->has_clip_vision &&
                      info->unet.adm_in_channels == adm,
                  "the derived checkpoint is not read as an SD2 unCLIP one (family %s, unclip %d, adm %d)",
                  sd_ckpt_family_name(info->family), info->unclip, info->unet.adm_in_channels);
        CHECK_MSG((info->prediction == SD_PRED_V) == (strcmp(str(ck_info, "comfyui_model_type"), "V_PREDICTION") == 0),
                  "prediction type differs from ComfyUI's %s", str(ck_info, "comfyui_model_type"));
        CHECK_MSG(ck[1] && ck[2] && ck[3] && sd_value_as_handle(ck[3], &sd_handle_clip_vision),
                  "unCLIPCheckpointLoader lacks an output");
        const sd_clip_vision_config *vc = ck[3] ? sd_clip_vision_get_config(sd_value_as_handle(ck[3], &sd_handle_clip_vision)) : NULL;
        const cJSON *vm = item(ck_info, "vision");
        CHECK_MSG(vc && vc->openclip && vc->layers == (int)num(vm, "layers") && vc->hidden == (int)num(vm, "width") &&
                      vc->proj_dim == (int)num(vm, "projection_dim"),
                  "the checkpoint's vision tower was not read as the manifest's");
    }
    const cJSON *c, *first_ks = NULL;
    int ran = 0;
    if (ck[0] && ck[3]) {
        cJSON_ArrayForEach(c, item(man, "cases")) {
            if (sd_golden_case_is(c, "encode")) run_encode(ck[3], c);
            else if (sd_golden_case_is(c, "adm")) run_adm(c, adm);
            else if (sd_golden_case_is(c, "sdxl_pooled")) run_sdxl_pooled(c);
            else if (sd_golden_case_is(c, "forward")) run_forward(ck[0], c);
            else if (sd_golden_case_is(c, "ksampler")) {
                run_ksampler(ck[0], ck[3], c);
                if (!first_ks) first_ks = item(c, "ksampler");
            } else continue;
            ran++;
        }
        if (first_ks) run_refusals(base, ck[3], first_ks, adm);
    }
    CHECK_MSG(ran > 0, "no case ran");
    nt_free_values(ck, 4);
    sd_model_store_free(store);
    sd_backend_free(be);
    sd_env_cleanup(&env);
    sd_registry_reset();
    sd_st_close(ref);
    cJSON_Delete(man);
    return sd_test_finish();
}
