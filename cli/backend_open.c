/* backend_open.c - the backend a run or REPL computes on (cli.h). */
#include "cli.h"

#include <string.h>
#include "core/env.h"
#include "kernels/backend.h"

sd_status sd_cli_backend_open(const sd_env *env, sd_backend **out, sd_error *err) {
    *out = NULL;
    const char *prec = env->precision ? env->precision : "f32";
    sd_precision p;
    if (strcmp(prec, "f32") == 0) p = SD_PREC_F32;
    else if (strcmp(prec, "bf16") == 0) p = SD_PREC_BF16;
    else return sd_error_set(err, SD_ERR_INVALID, "--precision must be f32 or bf16, not '%s'", prec);
    sd_backend *be = NULL;
    sd_status rc = sd_backend_new(env->device, 0, &be, err);
    if (rc) return rc;
    if (!sd_backend_supports_precision(be, p)) {
        rc = sd_error_set(err, SD_ERR_UNSUPPORTED,
                          "--precision %s: the %s backend of this build cannot compute in %s%s", prec,
                          sd_backend_name(be), prec,
                          strcmp(sd_backend_name(be), "cpu") == 0
                              ? " (the CPU bf16 path needs oneDNN: install libdnnl-dev and rebuild)"
                              : "");
        sd_backend_free(be);
        return rc;
    }
    sd_backend_set_precision(be, p);
    *out = be;
    return SD_OK;
}
