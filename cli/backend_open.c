/* backend_open.c - the backend a run or REPL computes on (cli.h). */
#include "cli.h"

#include <string.h>
#include "core/env.h"
#include "kernels/backend.h"
#include "kernels/cpus.h"

/* One precision option: known name, and one the backend really computes in
 * (never a silent f32 run). */
static sd_status check_precision(sd_backend *be, const char *option, const char *name, sd_precision *p,
                                 sd_error *err) {
    if (!sd_precision_parse(name, p))
        return sd_error_set(err, SD_ERR_INVALID, "%s must be f32, bf16 or f16, not '%s'", option, name);
    if (sd_backend_supports_precision(be, *p)) return SD_OK;
    int cpu = strcmp(sd_backend_name(be), "cpu") == 0;
    return sd_error_set(err, SD_ERR_UNSUPPORTED, "%s %s: the %s backend of this build cannot compute in %s%s",
                        option, name, sd_backend_name(be), name,
                        !cpu ? ""
                        : *p == SD_PREC_BF16
                            ? " (the CPU bf16 path needs oneDNN: install libdnnl-dev and rebuild)"
                            : " (the CPU computes in f32 or bf16; f16 needs --device cuda)");
}

sd_status sd_cli_backend_open(const sd_env *env, sd_backend **out, sd_error *err) {
    return sd_cli_backend_open_threads(env, 0, out, err);
}

sd_status sd_cli_backend_open_threads(const sd_env *env, int n_threads, sd_backend **out, sd_error *err) {
    *out = NULL;
    sd_backend *be = NULL;
    /* SDFLOW_THREADS first: its error is about the variable, whatever the device */
    sd_status rc = n_threads > 0 ? SD_OK : sd_cpus_threads_default(&n_threads, err);
    if (rc) return rc;
    rc = sd_backend_new(env->device, n_threads, &be, err);
    if (rc) {
        sd_error_prefix(err, "--device %s", env->device);
        return rc;
    }
    /* --vae-precision / --clip-precision are applied per node (SD_NODE_VAE,
     * SD_NODE_TEXT_ENCODER); here they are only checked, before any node runs. */
    sd_precision p, unused;
    rc = check_precision(be, "--precision", env->precision ? env->precision : "f32", &p, err);
    if (!rc && env->vae_precision) rc = check_precision(be, "--vae-precision", env->vae_precision, &unused, err);
    if (!rc && env->clip_precision) rc = check_precision(be, "--clip-precision", env->clip_precision, &unused, err);
    if (!rc && env->gpu_memory && (rc = sd_backend_set_memory_limit(be, env->gpu_memory, err)))
        sd_error_prefix(err, "--gpu-memory");
    if (rc) {
        sd_backend_free(be);
        return rc;
    }
    sd_backend_set_precision(be, p);
    *out = be;
    return SD_OK;
}
