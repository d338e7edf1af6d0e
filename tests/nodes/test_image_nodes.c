/* test_image_nodes.c - the image node family called directly: LoadImage /
 * LoadImageMask conversions and mask inversion, SaveImage naming, counter,
 * subfolders and embedded prompt, PreviewImage, ImageScale(By), ImageInvert,
 * ImageBatch, EmptyImage, ImagePadForOutpaint, interrupts. */
#include <dirent.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/env.h"
#include "core/node.h"
#include "formats/png.h"
#include "models/image/imageops.h"
#include "nodes/image/image.h"
#include "nodes_ctx.h"
#include "testutil.h"

static float q8(float x) { /* the writer's quantisation, read back */
    float v = 255.0f * x;
    unsigned q = !(v > 0) ? 0 : v >= 255 ? 255 : (unsigned)v;
    return (float)q / 255.0f;
}

static int count_files(const char *dir, const char *needle) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, needle)) n++;
    closedir(d);
    return n;
}

/* 2x2 palette PNG with tRNS (alpha 0, 85, 170, 255 for indices 0..3),
 * written with libpng directly since our writer produces no palettes. */
static int write_palette_png(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) { fclose(f); return -1; }
    png_init_io(png, f);
    png_set_IHDR(png, info, 2, 2, 8, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_color pal[4] = {{10, 20, 30}, {40, 50, 60}, {70, 80, 90}, {100, 110, 120}};
    png_byte alpha[4] = {0, 85, 170, 255};
    png_set_PLTE(png, info, pal, 4);
    png_set_tRNS(png, info, alpha, 4, NULL);
    png_write_info(png, info);
    png_byte r0[2] = {0, 1}, r1[2] = {2, 3};
    png_bytep rows[2] = {r0, r1};
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
    return 0;
}

/* ---- LoadImage / LoadImageMask ----------------------------------------------------- */

static void test_load_image(nt_env *e) {
    sd_error err = {0};
    const int H = 5, W = 7;
    sd_tensor *rgba = sd_tensor_new4(SD_F32, 3, H, W, 4, 0);
    nt_fill(rgba, 3);
    char path[8192];
    snprintf(path, sizeof path, "%s/rgba.png", e->input);
    CHECK_OK(sd_png_write(path, rgba, NULL, 0, 1, &err), &err);
    sd_tensor *rgb = sd_tensor_new4(SD_F32, 3, H, W, 3, 0);
    nt_fill(rgb, 5);
    snprintf(path, sizeof path, "%s/rgb.png", e->input);
    CHECK_OK(sd_png_write(path, rgb, NULL, 0, 1, &err), &err);
    sd_tensor *gray = sd_tensor_new4(SD_F32, 3, H, W, 1, 0);
    nt_fill(gray, 9);
    snprintf(path, sizeof path, "%s/sub", e->input);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/sub/gray.png", e->input);
    CHECK_OK(sd_png_write(path, gray, NULL, 0, 1, &err), &err);

    const sd_node_def *li = def_of("LoadImage");
    CHECK(sd_node_input_count(li) == 1 && strcmp(li->inputs[0].file_folder, "input") == 0);
    CHECK(sd_node_output_count(li) == 2 && strcmp(li->outputs[1].type, "MASK") == 0);
    /* the combo lists the input directory */
    sd_value *opts = NULL;
    CHECK_OK(li->inputs[0].options_fn(&e->env, &opts, &err), &err);
    CHECK(opts && sd_value_list_len(opts) == 3);
    if (opts && sd_value_list_len(opts) == 3) {
        CHECK(strcmp(sd_value_as_string(sd_value_list_get(opts, 0)), "rgb.png") == 0);
        CHECK(strcmp(sd_value_as_string(sd_value_list_get(opts, 2)), "sub/gray.png") == 0);
    }
    sd_value_unref(opts);

    sd_node_ctx ctx = nt_ctx(e, "LoadImage");
    sd_value *in[1] = {sd_value_string("rgba.png")};
    sd_value *out[2] = {0};
    CHECK_OK(nt_run(li, &ctx, in, out, &err), &err);
    sd_tensor *img = out[0] ? sd_value_as_tensor(out[0]) : NULL;
    sd_tensor *mask = out[1] ? sd_value_as_tensor(out[1]) : NULL;
    CHECK(img && img->ndim == 4 && img->shape[0] == 1 && img->shape[1] == H && img->shape[2] == W && img->shape[3] == 3);
    CHECK(mask && mask->ndim == 3 && mask->shape[0] == 1 && mask->shape[1] == H && mask->shape[2] == W);
    if (img && mask && img->shape[3] == 3 && mask->shape[1] == H) {
        const float *s = sd_tensor_f32(rgba), *a = sd_tensor_f32(img), *m = sd_tensor_f32(mask);
        int bad = 0;
        for (int i = 0; i < H * W; i++) {
            for (int c = 0; c < 3; c++) if (a[i * 3 + c] != q8(s[i * 4 + c])) bad++;
            if (m[i] != 1.0f - q8(s[i * 4 + 3])) bad++; /* MASK = 1 - alpha */
        }
        CHECK_MSG(bad == 0, "LoadImage rgba: %d values differ", bad);
    }
    nt_free_values(out, 2);
    sd_value_unref(in[0]);

    /* no alpha: 64x64 zero mask */
    in[0] = sd_value_string("rgb.png");
    CHECK_OK(nt_run(li, &ctx, in, out, &err), &err);
    mask = out[1] ? sd_value_as_tensor(out[1]) : NULL;
    CHECK(mask && mask->shape[0] == 1 && mask->shape[1] == 64 && mask->shape[2] == 64);
    if (mask) {
        int nz = 0;
        for (int i = 0; i < 64 * 64; i++) nz += sd_tensor_f32(mask)[i] != 0;
        CHECK(nz == 0);
    }
    nt_free_values(out, 2);
    sd_value_unref(in[0]);

    /* gray in a subfolder: replicated to 3 channels */
    in[0] = sd_value_string("sub/gray.png");
    CHECK_OK(nt_run(li, &ctx, in, out, &err), &err);
    img = out[0] ? sd_value_as_tensor(out[0]) : NULL;
    CHECK(img && img->shape[3] == 3);
    if (img) {
        int bad = 0;
        for (int i = 0; i < H * W; i++)
            for (int c = 0; c < 3; c++)
                if (sd_tensor_f32(img)[i * 3 + c] != q8(sd_tensor_f32(gray)[i])) bad++;
        CHECK(bad == 0);
    }
    nt_free_values(out, 2);
    sd_value_unref(in[0]);

    /* palette with tRNS: mask from the palette alpha (current ComfyUI) */
    snprintf(path, sizeof path, "%s/pal.png", e->input);
    CHECK(write_palette_png(path) == 0);
    in[0] = sd_value_string("pal.png");
    CHECK_OK(nt_run(li, &ctx, in, out, &err), &err);
    img = out[0] ? sd_value_as_tensor(out[0]) : NULL;
    mask = out[1] ? sd_value_as_tensor(out[1]) : NULL;
    CHECK(mask && mask->shape[1] == 2 && mask->shape[2] == 2);
    if (img && mask && mask->shape[1] == 2) {
        static const float a[4] = {0, 85, 170, 255};
        for (int i = 0; i < 4; i++) {
            CHECK(sd_tensor_f32(mask)[i] == 1.0f - a[i] / 255.0f);
            CHECK(sd_tensor_f32(img)[i * 3] == (float)(10 + 30 * i) / 255.0f);
        }
    }
    nt_free_values(out, 2);
    sd_value_unref(in[0]);

    /* missing file: error names the file and the input */
    in[0] = sd_value_string("nope.png");
    sd_status rc = nt_run(li, &ctx, in, out, &err);
    CHECK(rc == SD_ERR_NOT_FOUND && strstr(err.msg, "nope.png") && strcmp(err.input, "image") == 0);
    nt_free_values(out, 2);
    sd_value_unref(in[0]);

    /* LoadImageMask: channels; alpha inverted; RGB file -> alpha 1 -> zeros HxW */
    const sd_node_def *lm = def_of("LoadImageMask");
    static const char *const chans[] = {"red", "green", "blue", "alpha"};
    for (int k = 0; k < 4; k++) {
        sd_value *min[2] = {sd_value_string("rgba.png"), sd_value_string(chans[k])};
        sd_value *mout[1] = {0};
        CHECK_OK(nt_run(lm, &ctx, min, mout, &err), &err);
        sd_tensor *mk = mout[0] ? sd_value_as_tensor(mout[0]) : NULL;
        CHECK(mk && mk->ndim == 3 && mk->shape[0] == 1 && mk->shape[1] == H && mk->shape[2] == W);
        if (mk && mk->shape[1] == H) {
            int bad = 0;
            for (int i = 0; i < H * W; i++) {
                float v = q8(sd_tensor_f32(rgba)[i * 4 + k]);
                if (sd_tensor_f32(mk)[i] != (k == 3 ? 1.0f - v : v)) bad++;
            }
            CHECK_MSG(bad == 0, "LoadImageMask %s: %d differ", chans[k], bad);
        }
        nt_free_values(mout, 1);
        nt_free_values(min, 2);
    }
    sd_value *min[2] = {sd_value_string("rgb.png"), sd_value_string("alpha")};
    sd_value *mout[1] = {0};
    CHECK_OK(nt_run(lm, &ctx, min, mout, &err), &err);
    sd_tensor *mk = mout[0] ? sd_value_as_tensor(mout[0]) : NULL;
    CHECK(mk && mk->shape[1] == H && mk->shape[2] == W);
    if (mk) {
        int nz = 0;
        for (int i = 0; i < H * W; i++) nz += sd_tensor_f32(mk)[i] != 0;
        CHECK(nz == 0);
    }
    nt_free_values(mout, 1);
    nt_free_values(min, 2);
    sd_tensor_unref(rgba);
    sd_tensor_unref(rgb);
    sd_tensor_unref(gray);
}

/* ---- SaveImage / PreviewImage --------------------------------------------------------- */

static void test_save_image(nt_env *e) {
    sd_error err = {0};
    const sd_node_def *si = def_of("SaveImage");
    CHECK(si->flags & SD_NODE_OUTPUT);
    CHECK(strcmp(si->inputs[1].name, "filename_prefix") == 0 && strcmp(si->inputs[1].def_str, "ComfyUI") == 0);
    sd_tensor *imgs = sd_tensor_new4(SD_F32, 4, 2, 4, 5, 3);
    nt_fill(imgs, 11);
    sd_node_ctx ctx = nt_ctx(e, "SaveImage");
    ctx.prompt_json = "{\"1\":{\"class_type\":\"SaveImage\",\"inputs\":{\"filename_prefix\":\"ComfyUI\",\"images\":[\"2\",0]}}}";
    ctx.extra_pnginfo_json = "{\"workflow\":{\"nodes\":[1,2.5,\"caf\xc3\xa9\"],\"version\":0.4}}";
    sd_value *in[2] = {nt_tensor_value(sd_tensor_ref(imgs)), sd_value_string("ComfyUI")};
    CHECK_OK(nt_run(si, &ctx, in, NULL, &err), &err);
    char p1[8192], p2[8192];
    snprintf(p1, sizeof p1, "%s/ComfyUI_00001_.png", e->output);
    snprintf(p2, sizeof p2, "%s/ComfyUI_00002_.png", e->output);
    CHECK(nt_file_exists(p1) && nt_file_exists(p2));
    CHECK(count_files(e->output, "tmp") == 0); /* temporaries are dot files */
    /* embedded prompt uses Python's json.dumps spacing; extra keys too */
    char *txt = NULL;
    CHECK_OK(sd_png_read_text(p1, "prompt", &txt, &err), &err);
    CHECK_MSG(txt && strcmp(txt, "{\"1\": {\"class_type\": \"SaveImage\", \"inputs\": {\"filename_prefix\": "
                                 "\"ComfyUI\", \"images\": [\"2\", 0]}}}") == 0, "prompt chunk: %s", txt ? txt : "(null)");
    free(txt);
    txt = NULL;
    CHECK_OK(sd_png_read_text(p2, "workflow", &txt, &err), &err);
    CHECK_MSG(txt && strcmp(txt, "{\"nodes\": [1, 2.5, \"caf\\u00e9\"], \"version\": 0.4}") == 0,
              "workflow chunk: %s", txt ? txt : "(null)");
    free(txt);
    /* pixels: second batch item in the second file */
    sd_tensor *back = NULL;
    CHECK_OK(sd_png_read(p2, SD_PNG_RGB, &back, NULL, &err), &err);
    if (back) {
        int bad = 0;
        const float *s = sd_tensor_f32(imgs) + 4 * 5 * 3;
        for (int i = 0; i < 4 * 5 * 3; i++) if (sd_tensor_f32(back)[i] != q8(s[i])) bad++;
        CHECK(bad == 0);
        sd_tensor_unref(back);
    }
    /* ui: images records and absolute file paths */
    CHECK(ctx.ui && sd_value_kind_of(ctx.ui) == SD_VAL_DICT);
    sd_value *list = ctx.ui ? sd_value_dict_get(ctx.ui, "images") : NULL;
    sd_value *files = ctx.ui ? sd_value_dict_get(ctx.ui, "files") : NULL;
    CHECK(list && sd_value_list_len(list) == 2 && files && sd_value_list_len(files) == 2);
    if (list && sd_value_list_len(list) == 2) {
        sd_value *r = sd_value_list_get(list, 1);
        CHECK(strcmp(sd_value_as_string(sd_value_dict_get(r, "filename")), "ComfyUI_00002_.png") == 0);
        CHECK(strcmp(sd_value_as_string(sd_value_dict_get(r, "subfolder")), "") == 0);
        CHECK(strcmp(sd_value_as_string(sd_value_dict_get(r, "type")), "output") == 0);
    }
    if (files && sd_value_list_len(files) == 2) {
        const char *f = sd_value_as_string(sd_value_list_get(files, 0));
        CHECK(f && f[0] == '/' && nt_file_exists(f) && strstr(f, "ComfyUI_00001_.png"));
    }
    sd_value_unref(ctx.ui);
    ctx.ui = NULL;

    /* counter continues after the highest existing number for the prefix;
     * unrelated names do not count */
    char junk[8192];
    snprintf(junk, sizeof junk, "%s/ComfyUI_00041_.png", e->output);
    FILE *f = fopen(junk, "wb"); if (f) fclose(f);
    snprintf(junk, sizeof junk, "%s/ComfyUI_abc_.png", e->output);
    f = fopen(junk, "wb"); if (f) fclose(f);
    snprintf(junk, sizeof junk, "%s/Other_00099_.png", e->output);
    f = fopen(junk, "wb"); if (f) fclose(f);
    CHECK_OK(nt_run(si, &ctx, in, NULL, &err), &err);
    snprintf(p1, sizeof p1, "%s/ComfyUI_00042_.png", e->output);
    snprintf(p2, sizeof p2, "%s/ComfyUI_00043_.png", e->output);
    CHECK(nt_file_exists(p1) && nt_file_exists(p2));
    sd_value_unref(ctx.ui);
    ctx.ui = NULL;

    /* subfolders from the prefix, %width%/%height% substitution */
    sd_value_unref(in[1]);
    in[1] = sd_value_string("runs/a/img_%width%x%height%");
    ctx.prompt_json = NULL;
    ctx.extra_pnginfo_json = NULL;
    CHECK_OK(nt_run(si, &ctx, in, NULL, &err), &err);
    snprintf(p1, sizeof p1, "%s/runs/a/img_5x4_00001_.png", e->output);
    CHECK(nt_file_exists(p1));
    txt = (char *)1;
    CHECK(sd_png_read_text(p1, "prompt", &txt, &err) == SD_ERR_NOT_FOUND); /* no prompt given */
    list = ctx.ui ? sd_value_dict_get(ctx.ui, "images") : NULL;
    if (list && sd_value_list_len(list) > 0)
        CHECK(strcmp(sd_value_as_string(sd_value_dict_get(sd_value_list_get(list, 0), "subfolder")), "runs/a") == 0);
    else CHECK(!"ui images missing");
    sd_value_unref(ctx.ui);
    ctx.ui = NULL;

    /* escaping the output folder is refused */
    sd_value_unref(in[1]);
    in[1] = sd_value_string("../evil");
    sd_status rc = nt_run(si, &ctx, in, NULL, &err);
    CHECK(rc == SD_ERR_INVALID && strcmp(err.input, "filename_prefix") == 0);
    sd_value_unref(ctx.ui);
    ctx.ui = NULL;

    /* interrupt stops after the current item */
    sd_value_unref(in[1]);
    in[1] = sd_value_string("stop");
    volatile sig_atomic_t flag = 1;
    ctx.interrupt = &flag;
    rc = nt_run(si, &ctx, in, NULL, &err);
    CHECK(rc == SD_ERR_CANCELLED);
    CHECK(count_files(e->output, "stop_") == 1);
    ctx.interrupt = NULL;
    sd_value_unref(ctx.ui);
    ctx.ui = NULL;

    /* PreviewImage: temp dir, random ComfyUI_temp_xxxxx prefix, type temp */
    const sd_node_def *pi = def_of("PreviewImage");
    CHECK(pi->flags & SD_NODE_OUTPUT && sd_node_input_count(pi) == 1);
    sd_node_ctx pctx = nt_ctx(e, "PreviewImage");
    CHECK_OK(nt_run(pi, &pctx, in, NULL, &err), &err);
    list = pctx.ui ? sd_value_dict_get(pctx.ui, "images") : NULL;
    CHECK(list && sd_value_list_len(list) == 2);
    if (list && sd_value_list_len(list) == 2) {
        sd_value *r = sd_value_list_get(list, 0);
        const char *fn = sd_value_as_string(sd_value_dict_get(r, "filename"));
        CHECK(strcmp(sd_value_as_string(sd_value_dict_get(r, "type")), "temp") == 0);
        CHECK(fn && strncmp(fn, "ComfyUI_temp_", 13) == 0 && strlen(fn) == 13 + 5 + 11 &&
              strcmp(fn + 18, "_00001_.png") == 0);
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", e->temp, fn ? fn : "");
        CHECK(nt_file_exists(p));
    }
    sd_value_unref(pctx.ui);
    nt_free_values(in, 2);
    sd_tensor_unref(imgs);
}

/* ---- ImageScale / ImageScaleBy / ImageInvert / ImageBatch ------------------------------- */

static sd_tensor *run1(const char *cls, sd_value **in, nt_env *e, sd_status want) {
    sd_error err = {0};
    sd_node_ctx ctx = nt_ctx(e, cls);
    sd_value *out[1] = {0};
    sd_status rc = nt_run(def_of(cls), &ctx, in, out, &err);
    CHECK_MSG(rc == want, "%s: rc %d (%s)", cls, rc, err.msg);
    sd_tensor *t = out[0] ? sd_tensor_ref(sd_value_as_tensor(out[0])) : NULL;
    sd_value_unref(out[0]);
    return t;
}

static void test_transforms(nt_env *e) {
    sd_error err = {0};
    sd_tensor *img = sd_tensor_new4(SD_F32, 4, 2, 4, 6, 3);
    nt_fill(img, 21);
    /* ImageScale width 3, height 0 -> height round(4 * 3 / 6) = 2 */
    sd_value *in[5] = {nt_tensor_value(sd_tensor_ref(img)), sd_value_string("bilinear"),
                       sd_value_int(3), sd_value_int(0), sd_value_string("disabled")};
    sd_tensor *o = run1("ImageScale", in, e, SD_OK);
    CHECK(o && o->shape[0] == 2 && o->shape[1] == 2 && o->shape[2] == 3 && o->shape[3] == 3);
    sd_tensor *ref = NULL;
    CHECK_OK(sd_imageops_upscale_nhwc(img, 3, 2, SD_UPSCALE_BILINEAR, SD_CROP_DISABLED, &ref, &err), &err);
    double max_abs = 0;
    long worst = 0;
    CHECK(o && ref && sd_test_allclose(o, ref, 0, 0, &max_abs, &worst));
    sd_tensor_unref(o);
    sd_tensor_unref(ref);
    /* 0 x 0 returns the input unchanged */
    sd_value_unref(in[2]);
    in[2] = sd_value_int(0);
    o = run1("ImageScale", in, e, SD_OK);
    CHECK(o == img);
    sd_tensor_unref(o);
    /* lanczos and center crop go through */
    sd_value_unref(in[1]); sd_value_unref(in[2]); sd_value_unref(in[3]); sd_value_unref(in[4]);
    in[1] = sd_value_string("lanczos");
    in[2] = sd_value_int(5);
    in[3] = sd_value_int(5);
    in[4] = sd_value_string("center");
    o = run1("ImageScale", in, e, SD_OK);
    CHECK(o && o->shape[1] == 5 && o->shape[2] == 5 && o->shape[3] == 3);
    sd_tensor_unref(o);
    /* bislerp is a latent-only method */
    sd_value_unref(in[1]);
    in[1] = sd_value_string("bislerp");
    o = run1("ImageScale", in, e, SD_ERR_INVALID);
    sd_tensor_unref(o);
    nt_free_values(in, 5);

    /* ImageScaleBy: sizes rounded half to even (10 * 0.25 = 2.5 -> 2) */
    sd_tensor *wide = sd_tensor_new4(SD_F32, 4, 1, 4, 10, 3);
    nt_fill(wide, 2);
    sd_value *bin[3] = {nt_tensor_value(sd_tensor_ref(wide)), sd_value_string("area"), sd_value_float(0.25)};
    o = run1("ImageScaleBy", bin, e, SD_OK);
    CHECK(o && o->shape[1] == 1 && o->shape[2] == 2);
    sd_tensor_unref(o);
    nt_free_values(bin, 3);
    sd_tensor_unref(wide);

    /* ImageInvert */
    sd_value *iin[1] = {nt_tensor_value(sd_tensor_ref(img))};
    o = run1("ImageInvert", iin, e, SD_OK);
    CHECK(o && sd_tensor_same_shape(o, img));
    if (o) {
        int bad = 0;
        for (int64_t i = 0; i < sd_tensor_numel(img); i++)
            if (sd_tensor_f32(o)[i] != 1.0f - sd_tensor_f32(img)[i]) bad++;
        CHECK(bad == 0);
    }
    sd_tensor_unref(o);
    nt_free_values(iin, 1);

    /* ImageBatch: same size concatenates; other sizes are resized to the first */
    sd_tensor *small = sd_tensor_new4(SD_F32, 4, 1, 2, 3, 3);
    nt_fill(small, 4);
    sd_value *pin[2] = {nt_tensor_value(sd_tensor_ref(img)), nt_tensor_value(sd_tensor_ref(img))};
    o = run1("ImageBatch", pin, e, SD_OK);
    CHECK(o && o->shape[0] == 4 && memcmp((char *)o->data + img->nbytes, img->data, img->nbytes) == 0);
    sd_tensor_unref(o);
    sd_value_unref(pin[1]);
    pin[1] = nt_tensor_value(sd_tensor_ref(small));
    o = run1("ImageBatch", pin, e, SD_OK);
    CHECK(o && o->shape[0] == 3 && o->shape[1] == 4 && o->shape[2] == 6 && o->shape[3] == 3);
    CHECK_OK(sd_imageops_upscale_nhwc(small, 6, 4, SD_UPSCALE_BILINEAR, SD_CROP_CENTER, &ref, &err), &err);
    if (o && ref) CHECK(memcmp((char *)o->data + img->nbytes, ref->data, ref->nbytes) == 0);
    sd_tensor_unref(ref);
    sd_tensor_unref(o);
    sd_value_unref(pin[1]);
    sd_tensor *four = sd_tensor_new4(SD_F32, 4, 1, 4, 6, 4);
    pin[1] = nt_tensor_value(four);
    o = run1("ImageBatch", pin, e, SD_ERR_INVALID); /* channel mismatch */
    sd_tensor_unref(o);
    nt_free_values(pin, 2);
    sd_tensor_unref(small);

    /* an interrupt stops a batched resize */
    sd_value *sin[5] = {nt_tensor_value(sd_tensor_ref(img)), sd_value_string("bicubic"),
                        sd_value_int(8), sd_value_int(8), sd_value_string("disabled")};
    sd_node_ctx ctx = nt_ctx(e, "ImageScale");
    volatile sig_atomic_t flag = 1;
    ctx.interrupt = &flag;
    sd_value *out[1] = {0};
    CHECK(nt_run(def_of("ImageScale"), &ctx, sin, out, &err) == SD_ERR_CANCELLED && out[0] == NULL);
    nt_free_values(sin, 5);
    sd_tensor_unref(img);
}

/* ---- EmptyImage / ImagePadForOutpaint -------------------------------------------------- */

static void test_generate(nt_env *e) {
    sd_error err = {0};
    sd_value *in[4] = {sd_value_int(3), sd_value_int(2), sd_value_int(2), sd_value_int(0x336699)};
    sd_node_ctx ctx = nt_ctx(e, "EmptyImage");
    sd_value *out[2] = {0};
    CHECK_OK(nt_run(def_of("EmptyImage"), &ctx, in, out, &err), &err);
    sd_tensor *t = out[0] ? sd_value_as_tensor(out[0]) : NULL;
    CHECK(t && t->shape[0] == 2 && t->shape[1] == 2 && t->shape[2] == 3 && t->shape[3] == 3);
    if (t) {
        const float *d = sd_tensor_f32(t);
        CHECK(d[0] == (float)(0x33 / 255.0) && d[1] == (float)(0x66 / 255.0) && d[2] == (float)(0x99 / 255.0));
        CHECK(d[(2 * 2 * 3 - 1) * 3 + 2] == (float)(0x99 / 255.0));
    }
    nt_free_values(out, 2);
    nt_free_values(in, 4);

    /* 6x6 image, 2 px left, 1 px bottom, feathering 2 */
    sd_tensor *img = sd_tensor_new4(SD_F32, 4, 1, 6, 6, 3);
    for (int i = 0; i < 108; i++) sd_tensor_f32(img)[i] = 0.2f;
    sd_value *pin[6] = {nt_tensor_value(sd_tensor_ref(img)), sd_value_int(2), sd_value_int(0),
                        sd_value_int(0), sd_value_int(1), sd_value_int(2)};
    ctx = nt_ctx(e, "ImagePadForOutpaint");
    CHECK_OK(nt_run(def_of("ImagePadForOutpaint"), &ctx, pin, out, &err), &err);
    sd_tensor *o = out[0] ? sd_value_as_tensor(out[0]) : NULL;
    sd_tensor *m = out[1] ? sd_value_as_tensor(out[1]) : NULL;
    CHECK(o && o->shape[1] == 7 && o->shape[2] == 8 && o->shape[3] == 3);
    CHECK(m && m->ndim == 3 && m->shape[0] == 1 && m->shape[1] == 7 && m->shape[2] == 8);
    if (o && m && o->shape[1] == 7 && m->shape[2] == 8) {
        const float *d = sd_tensor_f32(o), *k = sd_tensor_f32(m);
        CHECK(d[0] == 0.5f && d[(6 * 8 + 7) * 3] == 0.5f); /* padding is grey */
        CHECK(d[(0 * 8 + 2) * 3] == 0.2f && d[(5 * 8 + 7) * 3 + 2] == 0.2f);
        CHECK(k[0 * 8 + 0] == 1 && k[0 * 8 + 1] == 1 && k[6 * 8 + 4] == 1); /* padding */
        /* inside: d = min(6 - i, j) over the padded sides; ((2 - d) / 2)^2 when d < 2 */
        CHECK(k[0 * 8 + 2] == 1.0f);     /* j = 0 */
        CHECK(k[0 * 8 + 3] == 0.25f);    /* j = 1 */
        CHECK(k[5 * 8 + 5] == 0.25f);    /* i = 5: 6 - i = 1 */
        CHECK(k[3 * 8 + 5] == 0.0f);     /* interior */
        CHECK(k[4 * 8 + 7] == 0.0f);     /* 6 - i = 2: not feathered */
    }
    nt_free_values(out, 2);
    nt_free_values(pin, 6);
    sd_tensor_unref(img);
}

/* ---- large resizes go one channel plane at a time (interruptible) ---------------------- */

static int progress_calls;
static void count_progress(void *user, const char *node_id, int64_t value, int64_t max) {
    (void)user; (void)node_id; (void)value; (void)max;
    progress_calls++;
}

/* Splitting must not change a single bit, for every method, crop and layout. */
static void test_split_resize(nt_env *e) {
    static const char *const methods[] = {"nearest-exact", "bilinear", "area", "bicubic", "lanczos", "bislerp"};
    /* a batch of 2 once (item offsets), single items elsewhere (ASan time) */
    struct { int nhwc, c, crop, n; } layouts[] = {{1, 3, 0, 2}, {1, 3, 1, 1}, {1, 4, 0, 1}, {0, 4, 0, 1}};
    for (size_t m = 0; m < sizeof methods / sizeof *methods; m++) {
        sd_upscale_method method;
        CHECK(sd_upscale_method_parse(methods[m], &method) == 0);
        for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++) {
            int nhwc = layouts[l].nhwc, c = layouts[l].c, n = layouts[l].n;
            sd_tensor *x = nhwc ? sd_tensor_new4(SD_F32, 4, n, 9, 13, c) : sd_tensor_new4(SD_F32, 4, n, c, 9, 13);
            nt_fill(x, (unsigned)(m * 7 + l));
            sd_crop_mode crop = layouts[l].crop ? SD_CROP_CENTER : SD_CROP_DISABLED;
            sd_tensor *whole = NULL, *split = NULL;
            sd_error err = {0};
            CHECK_OK(sd_nodes_upscale_batched(NULL, x, nhwc, 2048, 512, method, crop, "width", &whole, &err), &err);
            sd_node_ctx ctx = nt_ctx(e, "ImageScale");
            ctx.progress = count_progress;
            progress_calls = 0;
            CHECK_OK(sd_nodes_upscale_batched(&ctx, x, nhwc, 2048, 512, method, crop, "width", &split, &err), &err);
            int planes = method == SD_UPSCALE_BISLERP || (nhwc && c > 3 && method == SD_UPSCALE_BILINEAR) ? 1 : c;
            CHECK_MSG(progress_calls == n * planes, "%s layout %zu: %d progress calls", methods[m], l, progress_calls);
            CHECK_MSG(whole && split && whole->nbytes == split->nbytes &&
                      memcmp(whole->shape, split->shape, sizeof whole->shape) == 0 &&
                      memcmp(sd_tensor_f32(whole), sd_tensor_f32(split), whole->nbytes) == 0,
                      "%s layout %zu: per-channel resize differs", methods[m], l);
            sd_tensor_unref(whole);
            sd_tensor_unref(split);
            sd_tensor_unref(x);
        }
    }
}

int main(void) {
    sd_error err = {0};
    sd_registry_reset();
    CHECK_OK(sd_registry_add(sd_nodes_image, &err), &err);
    nt_env e;
    nt_env_init(&e, "nodes_image");
    test_load_image(&e);
    test_save_image(&e);
    test_transforms(&e);
    test_generate(&e);
    test_split_resize(&e);
    sd_env_cleanup(&e.env);
    sd_registry_reset();
    return sd_test_finish();
}
