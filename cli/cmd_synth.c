/* cmd_synth.c - `sdflow synth`: write a random-weight checkpoint (and, when
 * asked, a stand-in tokenizer vocabulary) so that workflows can run on a
 * machine without downloaded models. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "core/env.h"
#include "models/synth/synth.h"

static int mkdirs(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') { *p = 0; if (mkdir(tmp, 0777) && errno != EEXIST) return -1; *p = '/'; }
    return mkdir(tmp, 0777) && errno != EEXIST ? -1 : 0;
}

static int synth(const char *preset, unsigned long long seed, int force, const char *models, const char *tok);
static int synth_flux(const sd_synth_flux_config *cfg, const char *layout, const char *quant, const char *te_quant,
                      int threads, unsigned long long seed, int force, const char *models);
static int synth_sd3(const sd_synth_sd3_config *cfg, unsigned long long seed, int force, const char *models);
static int synth_zimage(const sd_synth_zimage_config *cfg, unsigned long long seed, int force, const char *models);

#define PRESETS "sd1-tiny, sd1, sdxl-tiny, sdxl, sd2-tiny, sd2-tiny-eps, sd2, flux-dev, flux-schnell, " \
    "flux-dev-tiny, flux-schnell-tiny, sd35-medium, sd35-medium-tiny, zimage-turbo, zimage-turbo-tiny"

int sd_cli_synth(int argc, char **argv) {
    const char *preset = "sd1-tiny", *layout = "all", *quant = "Q4_K_S", *te_quant = "Q8_0";
    long long seed = 1, threads = 0;
    int force = 0;
    const sd_cli_option own[] = {
        {"--preset", NULL, SD_CLI_STR, &preset, "NAME", "model shape (default sd1-tiny)",
         "sd1-tiny|sd1|sdxl-tiny|sdxl|sd2-tiny|sd2-tiny-eps|sd2|flux-dev|flux-schnell|flux-dev-tiny|"
         "flux-schnell-tiny|sd35-medium|sd35-medium-tiny|zimage-turbo|zimage-turbo-tiny"},
        {"--layout", NULL, SD_CLI_STR, &layout, "WHICH",
         "Flux presets: split (diffusion model, t5xxl_fp16, clip_l, ae), fp8 (the single-file "
         "checkpoint), all (default: both), or gguf (the diffusion model and T5 as GGUF files, with "
         "clip_l and ae)", "split|fp8|all|gguf"},
        {"--quant", NULL, SD_CLI_STR, &quant, "TYPE",
         "--layout gguf: the diffusion model's GGUF type (default Q4_K_S)",
         "F16|BF16|Q8_0|Q4_0|Q5_0|Q4_K_S|Q5_K_S|Q6_K"},
        {"--text-encoder-quant", NULL, SD_CLI_STR, &te_quant, "TYPE",
         "--layout gguf: the T5-XXL's GGUF type (default Q8_0)", "F16|BF16|Q8_0|Q4_0|Q5_0|Q4_K_S|Q5_K_S|Q6_K"},
        {"--threads", NULL, SD_CLI_INT, &threads, "N",
         "--layout gguf: threads that make and quantize each tensor (default: every usable CPU; the files' bytes "
         "are the same for every count)", NULL},
        {"--seed", NULL, SD_CLI_INT, &seed, "N", "seed of the random weights (default 1)", NULL},
        {"--force", NULL, SD_CLI_FLAG, &force, NULL, "rewrite the checkpoint when it exists", NULL},
        {0}};
    const sd_cli_command cmd = {
        "synth", "[--preset NAME] [--models-dir DIR] [--tokenizer-dir DIR]",
        "Writes MODELS/checkpoints/sdflow-random-NAME.safetensors with RANDOM weights, so that workflows\n"
        "run on a machine without downloaded models (the pictures are noise). With --tokenizer-dir it\n"
        "also writes a stand-in CLIP vocabulary there. The Flux presets write the files ComfyUI's Flux\n"
        "workflows load, in their real layouts: diffusion_models/sdflow-random-NAME.safetensors (BF16),\n"
        "text_encoders/sdflow-random[-tiny]-{t5xxl_fp16,clip_l}.safetensors, vae/sdflow-random[-tiny]-\n"
        "ae.safetensors, and checkpoints/sdflow-random-NAME-fp8.safetensors (the fp8 single file with\n"
        "T5, CLIP-L and VAE); full size they take 24 + 9.5 + 0.2 + 0.3 GB and 17 GB of disk. --layout\n"
        "gguf writes diffusion_models/sdflow-random-NAME-QUANT.gguf and text_encoders/sdflow-random[-tiny]-\n"
        "t5xxl-QUANT.gguf as city96's GGUF files are made (6.7 + 5.1 GB for Q4_K_S and Q8_0), with\n"
        "clip_l and ae. sd35-medium writes checkpoints/sdflow-random-sd35-medium.safetensors (Stability's\n"
        "sd3.5_medium.safetensors: MMDiT-X + VAE, BF16), text_encoders/sdflow-random[-tiny]-{clip_l,clip_g,\n"
        "t5xxl_fp16}.safetensors and vae/sdflow-random[-tiny]-sd3_vae.safetensors (5.1 + 0.25 + 1.4 + 9.5 +\n"
        "0.17 GB); zimage-turbo writes diffusion_models/sdflow-random-zimage-turbo.safetensors (the\n"
        "z_image_turbo_bf16 layout), text_encoders/sdflow-random[-tiny]-qwen_3_4b.safetensors and the\n"
        "ae (12.3 + 8.0 + 0.33 GB). Files of the same name are shared between presets (the Flux and\n"
        "SD3.5 T5 and CLIP-L, the Flux and Z-Image ae): an existing one is kept without --force.",
        SD_CLI_G_MODELS, own, 0, 0};
    sd_cli_args a;
    int code = sd_cli_parse(&cmd, argc, argv, &a);
    if (code != SD_CLI_CONTINUE) { sd_cli_args_free(&a); return code; }
    sd_env env;
    sd_error err = {0};
    if (sd_cli_env_init(&env, &a, &err)) { sd_cli_print_error(&err); sd_env_cleanup(&env); sd_cli_args_free(&a); return 1; }
    const sd_synth_flux_config *flux = sd_synth_flux_preset(preset);
    const sd_synth_sd3_config *sd3 = sd_synth_sd3_preset(preset);
    const sd_synth_zimage_config *zi = sd_synth_zimage_preset(preset);
    unsigned long long sd = (unsigned long long)seed;
    code = flux  ? synth_flux(flux, layout, quant, te_quant, (int)threads, sd, force, env.models_dir)
           : sd3 ? synth_sd3(sd3, sd, force, env.models_dir)
           : zi  ? synth_zimage(zi, sd, force, env.models_dir)
                 : synth(preset, sd, force, env.models_dir, a.tokenizer_dir);
    sd_env_cleanup(&env);
    sd_cli_args_free(&a);
    return code;
}

static int synth(const char *preset, unsigned long long seed, int force, const char *models, const char *tok) {
    const sd_synth_config *cfg = sd_synth_preset(preset);
    const sd_synth_sdxl_config *xl = cfg ? NULL : sd_synth_sdxl_preset(preset);
    const sd_synth_sd2_config *v2 = cfg || xl ? NULL : sd_synth_sd2_preset(preset);
    if (!cfg && !xl && !v2) {
        fprintf(stderr, "sdflow synth: unknown preset '%s' (" PRESETS ")\n", preset);
        return 1;
    }
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/checkpoints", models);
    if (mkdirs(dir)) { fprintf(stderr, "sdflow synth: cannot create %s: %s\n", dir, strerror(errno)); return 1; }
    snprintf(path, sizeof path, "%s/sdflow-random-%s.safetensors", dir, preset);
    sd_error err = {0};
    struct stat st;
    if (force || stat(path, &st) != 0) {
        sd_status rc = cfg  ? sd_synth_sd1_write(cfg, seed, path, &err)
                       : xl ? sd_synth_sdxl_write(xl, seed, path, &err)
                            : sd_synth_sd2_write(v2, seed, path, &err);
        if (rc) { sd_cli_print_error(&err); return 1; }
        printf("wrote %s\n", path);
    } else {
        printf("kept %s (use --force to rewrite)\n", path);
    }
    if (tok) {
        if (sd_synth_vocab_write(tok, &err)) { sd_cli_print_error(&err); return 1; }
        printf("wrote a stand-in tokenizer vocabulary to %s\n", tok);
    }
    printf("note: these weights are RANDOM: images made with them are noise, not pictures.\n");
    return 0;
}

/* A part written as GGUF: its type and the threads quantizing it. */
typedef struct gguf_as {
    const char *type;
    int threads;
} gguf_as;

/* Writes one part of a DiT family's files to path (gguf: NULL for
 * safetensors). */
typedef sd_status (*part_writer)(const void *cfg, int part, const gguf_as *gguf, unsigned long long seed,
                                 const char *path, sd_error *err);

/* One file of a DiT family into MODELS/folder/name, kept when it exists
 * (unless force); what: the part's name for the log. */
static int part_file(part_writer write, const void *cfg, int part, const char *what, const gguf_as *gguf,
                     unsigned long long seed, int force, const char *models, const char *folder, const char *name) {
    char dir[4096], path[4400];
    snprintf(dir, sizeof dir, "%s/%s", models, folder);
    if (mkdirs(dir)) { fprintf(stderr, "sdflow synth: cannot create %s: %s\n", dir, strerror(errno)); return 1; }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (!force && stat(path, &st) == 0) {
        printf("kept %s (use --force to rewrite)\n", path);
        return 0;
    }
    printf("writing %s (%s)...\n", path, what);
    fflush(stdout);
    sd_error err = {0};
    if (write(cfg, part, gguf, seed, path, &err)) {
        sd_cli_print_error(&err);
        return 1;
    }
    printf("wrote %s\n", path);
    return 0;
}

static sd_status write_flux(const void *cfg, int part, const gguf_as *gguf, unsigned long long seed, const char *path,
                            sd_error *err) {
    return gguf ? sd_synth_flux_gguf_write(cfg, (sd_synth_flux_part)part, gguf->type, seed, gguf->threads, path, err)
                : sd_synth_flux_write(cfg, (sd_synth_flux_part)part, seed, path, err);
}

static int flux_file(const sd_synth_flux_config *cfg, sd_synth_flux_part part, const gguf_as *gguf,
                     unsigned long long seed, int force, const char *models, const char *folder, const char *name) {
    return part_file(write_flux, cfg, (int)part, sd_synth_flux_part_name(part), gguf, seed, force, models, folder,
                     name);
}

static int synth_flux(const sd_synth_flux_config *cfg, const char *layout, const char *quant, const char *te_quant,
                      int threads, unsigned long long seed, int force, const char *models) {
    int gguf = strcmp(layout, "gguf") == 0;
    int split = !gguf && strcmp(layout, "fp8") != 0, fp8 = !gguf && strcmp(layout, "split") != 0;
    if (gguf && (!sd_synth_gguf_type(quant, NULL) || !sd_synth_gguf_type(te_quant, NULL))) {
        fprintf(stderr, "sdflow synth: unknown GGUF type '%s' (F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K_S, Q5_K_S, Q6_K)\n",
                sd_synth_gguf_type(quant, NULL) ? te_quant : quant);
        return 1;
    }
    /* the text encoders and the VAE are the same for dev and schnell: one
     * copy per size serves both */
    const char *size = strstr(cfg->name, "-tiny") ? "tiny-" : "";
    char name[256];
    int rc = 0;
    if (split) {
        snprintf(name, sizeof name, "sdflow-random-%s.safetensors", cfg->name);
        rc |= flux_file(cfg, SD_SYNTH_FLUX_DIT, NULL, seed, force, models, "diffusion_models", name);
        snprintf(name, sizeof name, "sdflow-random-%st5xxl_fp16.safetensors", size);
        if (!rc) rc |= flux_file(cfg, SD_SYNTH_FLUX_T5, NULL, seed, force, models, "text_encoders", name);
        snprintf(name, sizeof name, "sdflow-random-%sclip_l.safetensors", size);
        if (!rc) rc |= flux_file(cfg, SD_SYNTH_FLUX_CLIP_L, NULL, seed, force, models, "text_encoders", name);
        snprintf(name, sizeof name, "sdflow-random-%sae.safetensors", size);
        if (!rc) rc |= flux_file(cfg, SD_SYNTH_FLUX_AE, NULL, seed, force, models, "vae", name);
    }
    if (gguf) {
        const gguf_as dit_as = {quant, threads}, t5_as = {te_quant, threads};
        snprintf(name, sizeof name, "sdflow-random-%s-%s.gguf", cfg->name, quant);
        rc |= flux_file(cfg, SD_SYNTH_FLUX_DIT, &dit_as, seed, force, models, "diffusion_models", name);
        snprintf(name, sizeof name, "sdflow-random-%st5xxl-%s.gguf", size, te_quant);
        if (!rc) rc |= flux_file(cfg, SD_SYNTH_FLUX_T5, &t5_as, seed, force, models, "text_encoders", name);
        snprintf(name, sizeof name, "sdflow-random-%sclip_l.safetensors", size);
        if (!rc) rc |= flux_file(cfg, SD_SYNTH_FLUX_CLIP_L, NULL, seed, force, models, "text_encoders", name);
        snprintf(name, sizeof name, "sdflow-random-%sae.safetensors", size);
        if (!rc) rc |= flux_file(cfg, SD_SYNTH_FLUX_AE, NULL, seed, force, models, "vae", name);
    }
    if (fp8 && !rc) {
        snprintf(name, sizeof name, "sdflow-random-%s-fp8.safetensors", cfg->name);
        rc |= flux_file(cfg, SD_SYNTH_FLUX_CKPT_FP8, NULL, seed, force, models, "checkpoints", name);
    }
    if (rc) return 1;
    printf("note: these weights are RANDOM: images made with them are noise, not pictures.\n"
           "note: Flux also needs the T5 tokenizer, ComfyUI's comfy/text_encoders/t5_tokenizer/tokenizer.json\n"
           "      (--comfyui-dir, or --tokenizer-dir DIR holding DIR/t5_tokenizer/tokenizer.json).\n");
    return 0;
}

static const char *const T5_NOTE =
    "note: T5-XXL needs the T5 tokenizer, ComfyUI's comfy/text_encoders/t5_tokenizer/tokenizer.json\n"
    "      (--comfyui-dir, or --tokenizer-dir DIR holding DIR/t5_tokenizer/tokenizer.json).\n";

static sd_status write_sd3(const void *cfg, int part, const gguf_as *gguf, unsigned long long seed, const char *path,
                           sd_error *err) {
    (void)gguf;
    return sd_synth_sd3_write(cfg, (sd_synth_sd3_part)part, seed, path, err);
}

/* SD3.5: the checkpoint as Stability publishes it (MMDiT + VAE), the three
 * text encoders of TripleCLIPLoader (clip_l and t5xxl_fp16 are the Flux
 * files of the same size) and the VAE alone for VAELoader. */
static int synth_sd3(const sd_synth_sd3_config *cfg, unsigned long long seed, int force, const char *models) {
    const char *size = strstr(cfg->name, "-tiny") ? "tiny-" : "";
    static const struct {
        sd_synth_sd3_part part;
        const char *folder, *file; /* file: after sdflow-random-[tiny-]; NULL: the preset's name */
    } files[] = {{SD_SYNTH_SD3_CKPT, "checkpoints", NULL},
                 {SD_SYNTH_SD3_VAE, "vae", "sd3_vae"},
                 {SD_SYNTH_SD3_CLIP_L, "text_encoders", "clip_l"},
                 {SD_SYNTH_SD3_CLIP_G, "text_encoders", "clip_g"},
                 {SD_SYNTH_SD3_T5, "text_encoders", "t5xxl_fp16"}}; /* the largest last */
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char name[256];
        if (files[i].file) snprintf(name, sizeof name, "sdflow-random-%s%s.safetensors", size, files[i].file);
        else snprintf(name, sizeof name, "sdflow-random-%s.safetensors", cfg->name);
        if (part_file(write_sd3, cfg, (int)files[i].part, sd_synth_sd3_part_name(files[i].part), NULL, seed, force,
                      models, files[i].folder, name))
            return 1;
    }
    printf("note: these weights are RANDOM: images made with them are noise, not pictures.\n%s", T5_NOTE);
    return 0;
}

static sd_status write_zimage(const void *cfg, int part, const gguf_as *gguf, unsigned long long seed,
                              const char *path, sd_error *err) {
    (void)gguf;
    return sd_synth_zimage_write(cfg, (sd_synth_zimage_part)part, seed, path, err);
}

/* Z-Image-Turbo: the DiT, Qwen3-4B and the ae (the Flux file of the same
 * size). */
static int synth_zimage(const sd_synth_zimage_config *cfg, unsigned long long seed, int force, const char *models) {
    const char *size = strstr(cfg->name, "-tiny") ? "tiny-" : "";
    char name[256];
    snprintf(name, sizeof name, "sdflow-random-%s.safetensors", cfg->name);
    int rc = part_file(write_zimage, cfg, SD_SYNTH_ZIMAGE_DIT, sd_synth_zimage_part_name(SD_SYNTH_ZIMAGE_DIT), NULL,
                       seed, force, models, "diffusion_models", name);
    snprintf(name, sizeof name, "sdflow-random-%sqwen_3_4b.safetensors", size);
    if (!rc)
        rc = part_file(write_zimage, cfg, SD_SYNTH_ZIMAGE_QWEN3, sd_synth_zimage_part_name(SD_SYNTH_ZIMAGE_QWEN3),
                       NULL, seed, force, models, "text_encoders", name);
    snprintf(name, sizeof name, "sdflow-random-%sae.safetensors", size);
    if (!rc)
        rc = part_file(write_zimage, cfg, SD_SYNTH_ZIMAGE_AE, sd_synth_zimage_part_name(SD_SYNTH_ZIMAGE_AE), NULL,
                       seed, force, models, "vae", name);
    if (rc) return 1;
    printf("note: these weights are RANDOM: images made with them are noise, not pictures.\n"
           "note: Qwen3 needs ComfyUI's Qwen2 tokenizer files, comfy/text_encoders/qwen25_tokenizer/\n"
           "      (--comfyui-dir, or --tokenizer-dir DIR holding DIR/qwen25_tokenizer/).%s\n",
           *size ? "\nnote: the tiny Qwen3 runs with --qwen3-4b-width 64 (no file says which width is Qwen3-4B's)."
                 : "");
    return 0;
}
