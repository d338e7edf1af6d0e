/* blas_threads.c - see blas_threads.h. */
#include "blas_threads.h"

#include <cblas.h>

/* Weak: a build without oneDNN does not link libgomp, and then these are
 * present exactly when the OpenMP OpenBLAS brought libgomp in. */
extern int omp_get_max_threads(void) __attribute__((weak));
extern void omp_set_num_threads(int n) __attribute__((weak));

/* openblas_get_parallel(): 0 serial, 1 pthreads, 2 OpenMP build. */
void sd_cpu_blas_one_thread(void) {
    if (openblas_get_parallel() == 2 && omp_get_max_threads && omp_set_num_threads &&
        omp_get_max_threads() != 1)
        omp_set_num_threads(1);
}
