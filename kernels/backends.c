/* backends.c - the registry of backends compiled into this build.
 *
 * The dispatch in backend.c knows backends only through this table, and each
 * backend folder (kernels/cpu, kernels/cuda) only implements the vtable in
 * backend_impl.h: neither backend includes the other. */
#include "kernels/backend_impl.h"

#include <string.h>

static const sd_backend_entry k_backends[] = {
    {"cpu", sd_cpu_backend_init, NULL},
#ifdef SDFLOW_HAVE_CUDA
    {"cuda", sd_cuda_backend_init, sd_cuda_device_count},
#endif
};

int sd_backend_device_count(const char *name) {
    const sd_backend_entry *e = name ? sd_backend_find(name) : NULL;
    if (!e) return 0;
    return e->device_count ? e->device_count() : 1;
}

const char *sd_backend_default_name(void) {
    return sd_backend_device_count("cuda") > 0 ? "cuda" : "cpu";
}

const sd_backend_entry *sd_backend_find(const char *name) {
    for (size_t i = 0; i < sizeof k_backends / sizeof k_backends[0]; i++)
        if (strcmp(k_backends[i].name, name) == 0) return &k_backends[i];
    return NULL;
}
