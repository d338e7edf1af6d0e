/* libFuzzer target: LoRA files (models/lora). The input is a safetensors
 * file, matched against a generated tiny SD1 UNet and text encoder
 * (sd_lora_plan_new) and, when that succeeds, applied to both
 * (sd_lora_unet_view, sd_lora_text_encoder_view), so every adapter kind's
 * shape checks and patch arithmetic run on whatever the planner accepts.
 * Errors are fine; a crash, an ASan report, UB or a leak is a finding.
 * The seeds (fuzz_seeds.c) are valid files of every kind with the tiny
 * model's key names: Kohya LoRA, LoCon, LoHa (plain and Tucker), LoKr
 * (plain, factored, Tucker), diffusers/PEFT and full diffs. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "models/lora/lora.h"
#include "models/synth/synth.h"

static sd_backend *be;
static int verbose; /* FUZZ_LORA_VERBOSE=1: print why an input was refused (seed triage) */
static sd_unet *unet;
static sd_text_encoder *te;

static void die(const char *what, sd_error *err) {
    fprintf(stderr, "fuzz_lora: %s: %s\n", what, err->msg);
    abort();
}

/* The tiny model, written to a temporary file that is unlinked at once
 * (the mapping stays) and loaded once for all inputs. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    verbose = getenv("FUZZ_LORA_VERBOSE") != NULL;
    sd_error err;
    sd_error_clear(&err);
    char path[] = "/tmp/fuzz_lora_model_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) abort();
    close(fd);
    const sd_synth_config *cfg = sd_synth_preset("sd1-tiny");
    if (!cfg) abort();
    if (sd_synth_sd1_write(cfg, 7, path, &err)) die("writing the model", &err);
    sd_st_file *f = NULL;
    if (sd_st_open(path, &f, &err)) die("opening the model", &err);
    unlink(path);
    if (sd_backend_new("cpu", 1, &be, &err)) die("backend", &err);
    if (sd_unet_load(be, f, NULL, SD_F32, &unet, &err)) die("UNet", &err);
    if (sd_text_encoder_load(be, f, NULL, &te, &err)) die("text encoder", &err);
    sd_st_close(f); /* the models keep what they borrow */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sd_st_file *f = NULL;
    sd_error err;
    sd_error_clear(&err);
    if (sd_st_open_memory(data, size, "fuzz.safetensors", &f, &err) != SD_OK) return 0;
    sd_lora *l = NULL;
    sd_lora_plan *plan = NULL;
    if (sd_lora_from_file(f, &l, &err) == SD_OK && sd_lora_plan_new(l, unet, te, &plan, &err) == SD_OK) {
        sd_lora_use use = {plan, 0.75};
        sd_unet *uv = NULL;
        sd_text_encoder *tv = NULL;
        if (sd_lora_unet_view(unet, &use, 1, &uv, &err) == SD_OK && !uv) abort();
        if (sd_lora_text_encoder_view(te, &use, 1, &tv, &err) == SD_OK && !tv) abort();
        sd_unet_free(uv);
        sd_text_encoder_free(tv);
    }
    if (verbose)
        fprintf(stderr, "fuzz_lora: %s\n", err.code ? err.msg : plan ? "applied" : "not a LoRA");
    sd_lora_plan_unref(plan);
    sd_lora_unref(l);
    sd_st_close(f);
    return 0;
}
