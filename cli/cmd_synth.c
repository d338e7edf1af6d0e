/* cmd_synth.c - `sdflow synth`: write a random-weight checkpoint (and, when
 * asked, a stand-in tokenizer vocabulary) so that workflows can run on a
 * machine without downloaded models. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "models/synth.h"

static int mkdirs(const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') { *p = 0; if (mkdir(tmp, 0777) && errno != EEXIST) return -1; *p = '/'; }
    return mkdir(tmp, 0777) && errno != EEXIST ? -1 : 0;
}

int sd_cli_synth(int argc, char **argv) {
    const char *preset = "sd1-tiny", *models = NULL, *tok = NULL, *v;
    unsigned long long seed = 1;
    int force = 0, missing = 0;
    for (int i = 0; i < argc; i++) {
        if ((v = sd_cli_opt(argc, argv, &i, "--preset", &missing))) preset = v;
        else if ((v = sd_cli_opt(argc, argv, &i, "--models-dir", &missing))) models = v;
        else if ((v = sd_cli_opt(argc, argv, &i, "--tokenizer-dir", &missing))) tok = v;
        else if ((v = sd_cli_opt(argc, argv, &i, "--seed", &missing))) seed = strtoull(v, NULL, 10);
        else if (!strcmp(argv[i], "--force")) force = 1;
        else if (!missing) { fprintf(stderr, "sdflow synth: unknown option '%s'\n", argv[i]); return 1; }
        if (missing) { fprintf(stderr, "sdflow synth: %s needs a value\n", argv[i]); return 1; }
    }
    if (!models) models = getenv("SDFLOW_MODELS_DIR");
    if (!models) models = "models";
    const sd_synth_config *cfg = sd_synth_preset(preset);
    const sd_synth_sdxl_config *xl = cfg ? NULL : sd_synth_sdxl_preset(preset);
    if (!cfg && !xl) {
        fprintf(stderr, "sdflow synth: unknown preset '%s' (sd1-tiny, sd1, sdxl-tiny, sdxl)\n",
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
        sd_status rc = cfg ? sd_synth_sd1_write(cfg, seed, path, &err)
                           : sd_synth_sdxl_write(xl, seed, path, &err);
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
