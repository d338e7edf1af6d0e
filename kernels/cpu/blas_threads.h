/* blas_threads.h - OpenBLAS computes on the calling thread only, whichever
 * of Debian's builds libopenblas.so.0 points to (internal to kernels/cpu).
 *
 * Our pool parallelises around single-threaded GEMMs (cpu.h), so OpenBLAS
 * must not start threads of its own. cpu_backend.c calls
 * openblas_set_num_threads(1) once, which is process-wide in the pthread
 * build (libopenblas0-pthread, the default) and the serial one. The OpenMP
 * build (libopenblas0-openmp, the other alternative for libopenblas.so.0)
 * instead sizes every call by the calling thread's own OpenMP thread count
 * (omp_get_max_threads), which is the core count (or OMP_NUM_THREADS) in
 * each pool worker and n_threads on a thread that has just run a oneDNN op:
 * each worker's GEMM then ran an OpenMP team of its own (tests/kernels/
 * test_threads.c: 3 threads running at n_threads 2; n_threads x cores on a
 * large machine).
 */
#ifndef SD_CPU_BLAS_THREADS_H
#define SD_CPU_BLAS_THREADS_H

/* Called before every OpenBLAS call: under the OpenMP build, sets this
 * thread's OpenMP thread count to 1 when it is not (oneDNN's ops set their
 * own count before each primitive, dnnl_ops.c); otherwise does nothing. */
void sd_cpu_blas_one_thread(void);

#endif
