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

int sd_cli_synth(int argc, char **argv) {
    const char *preset = "sd1-tiny";
    long long seed = 1;
    int force = 0;
    const sd_cli_option own[] = {
        {"--preset", NULL, SD_CLI_STR, &preset, "NAME", "model shape (default sd1-tiny)", "sd1-tiny|sd1|sdxl-tiny|sdxl|sd2-tiny|sd2-tiny-eps|sd2"},
        {"--seed", NULL, SD_CLI_INT, &seed, "N", "seed of the random weights (default 1)", NULL},
        {"--force", NULL, SD_CLI_FLAG, &force, NULL, "rewrite the checkpoint when it exists", NULL},
        {0}};
    const sd_cli_command cmd = {
        "synth", "[--preset NAME] [--models-dir DIR] [--tokenizer-dir DIR]",
        "Writes MODELS/checkpoints/sdflow-random-NAME.safetensors with RANDOM weights, so that workflows\n"
        "run on a machine without downloaded models (the pictures are noise). With --tokenizer-dir it\n"
        "also writes a stand-in CLIP vocabulary there.",
        SD_CLI_G_MODELS, own, 0, 0};
    sd_cli_args a;
    int code = sd_cli_parse(&cmd, argc, argv, &a);
    if (code != SD_CLI_CONTINUE) { sd_cli_args_free(&a); return code; }
    sd_env env;
    sd_error err = {0};
    if (sd_cli_env_init(&env, &a, &err)) { sd_cli_print_error(&err); sd_env_cleanup(&env); sd_cli_args_free(&a); return 1; }
    code = synth(preset, (unsigned long long)seed, force, env.models_dir, a.tokenizer_dir);
    sd_env_cleanup(&env);
    sd_cli_args_free(&a);
    return code;
}

static int synth(const char *preset, unsigned long long seed, int force, const char *models, const char *tok) {
    const sd_synth_config *cfg = sd_synth_preset(preset);
    const sd_synth_sdxl_config *xl = cfg ? NULL : sd_synth_sdxl_preset(preset);
    const sd_synth_sd2_config *v2 = cfg || xl ? NULL : sd_synth_sd2_preset(preset);
    if (!cfg && !xl && !v2) {
        fprintf(stderr,
                "sdflow synth: unknown preset '%s' (sd1-tiny, sd1, sdxl-tiny, sdxl, sd2-tiny, "
                "sd2-tiny-eps, sd2)\n",
                preset);
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
