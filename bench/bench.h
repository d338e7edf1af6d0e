/* bench.h - sdflow-bench internals: FLOP counts, phases, child processes.
 *
 * The benchmark is a program, not a test: nothing here is built into a
 * library or run by ctest. Each measured phase runs in its own forked child
 * process so that the peak resident set it reports (VmHWM) is that phase's
 * own, and the PyTorch reference runs as separate python3 processes on the
 * same synthesized checkpoint (bench/torch_ref.py).
 */
#ifndef SD_BENCH_H
#define SD_BENCH_H

#include <stdint.h>
#include "core/error.h"
#include "models/unet/unet.h"
#include "models/vae/vae.h"
#include "models/text/clip.h"
#include "models/flux/flux.h"

#define SD_BENCH_MAX_REPEAT 64

/* ---- FLOP counts (bench_flops.c) ------------------------------------------
 * 2 FLOP per multiply-accumulate of every convolution, linear layer and
 * attention product (QK^T and PV, full square even when causal); norms,
 * activations and elementwise ops are not counted. */
double sd_bench_unet_flops(const sd_unet_config *c, int batch, int lat_h, int lat_w, int ctx_len);
double sd_bench_vae_decode_flops(const sd_vae_config *c, int batch, int lat_h, int lat_w);
double sd_bench_clip_flops(const sd_clip_config *c, int batch, int len);

/* ---- what one phase measured ----------------------------------------------- */
typedef struct sd_bench_result {
    int ok;            /* 1: measured; 0: failed (msg) or not applicable (na) */
    int na;            /* not applicable on this backend (e.g. bf16 compute) */
    int n;             /* repeats measured */
    double secs[SD_BENCH_MAX_REPEAT];
    double cpu[SD_BENCH_MAX_REPEAT]; /* flux: process CPU seconds of each repeat (all threads) */
    int ncpu;          /* entries of cpu (0: not measured) */
    double load_s;     /* model load time in this process */
    double flops;      /* counted FLOP per repeat (0: not counted) */
    double extra_s;    /* txt2img: seconds of the sampling loop (median run) */
    int steps_run;     /* txt2img: sampler steps actually run */
    long peak_kb;      /* VmHWM of the process that measured */
    int unet_wdtype;   /* dtype the loaded UNet really holds its weights in; -1 unknown */
    char msg[512];
} sd_bench_result;

typedef enum sd_bench_phase_kind {
    SD_BENCH_UNET = 0,
    SD_BENCH_VAE,
    SD_BENCH_CLIP,
    SD_BENCH_TXT2IMG,
    SD_BENCH_FLUX
} sd_bench_phase_kind;

typedef struct sd_bench_job {
    sd_bench_phase_kind kind;
    const char *ckpt;  /* synthesized checkpoint */
    int threads;       /* <= 0: all cores */
    int repeat;
    int batch;         /* UNet */
    int bf16;          /* UNet, VAE: bf16 compute precision */
    int steps;         /* txt2img: steps actually run */
    int size;          /* image side in pixels (512) */
    sd_dtype weights;  /* dtype UNet/CLIP weights are kept in on the backend */
    const char *device; /* backend name: "cpu" (NULL) or "cuda" */
} sd_bench_job;

/* Run the job in this process (bench_phases.c). Never exits. */
void sd_bench_run_phase(const sd_bench_job *job, sd_bench_result *r);

/* ---- processes (bench_proc.c) ---------------------------------------------- */

/* Fork, run the job in the child, collect its result; r->peak_kb is the
 * child's peak RSS. */
void sd_bench_run_forked(const sd_bench_job *job, sd_bench_result *r);

/* Fork; the child zeroes `out`, calls fn(arg, out) and sends the `size`
 * bytes back over a pipe into the parent's `out`. Returns 0, or -1 with
 * `msg` saying why nothing came back (the child was killed, exited, or a
 * pipe/fork failed). *child_maxrss_kb: the child's ru_maxrss (0 unknown). */
int sd_bench_fork(void (*fn)(const void *arg, void *out), const void *arg, void *out, size_t size,
                  long *child_maxrss_kb, char *msg, size_t msg_n);

/* Run `argv` (a python3 torch_ref.py command line) and parse its one-line
 * result "ok secs... load=S peak_kb=K" / "na msg" / "error msg". */
void sd_bench_run_torch(char *const *argv, sd_bench_result *r);

/* This process's VmHWM in KiB (ru_maxrss when /proc is unavailable). */
long sd_bench_peak_kb(void);
double sd_bench_now(void);
/* CPU seconds this process has used, all threads (CLOCK_PROCESS_CPUTIME_ID):
 * on a shared machine the wall time says how many cores the process got,
 * this says how much work it did. */
double sd_bench_cpu_now(void);
/* ---- the Flux block stack (bench_flux.c) -------------------------------------
 * A real-width Flux.1 with 2 double + 2 single blocks, fp8 matrices; one
 * forward at 1024 image + 512 text tokens. */
sd_status sd_bench_flux_write(const char *path, sd_error *err);
double sd_bench_flux_flops(const sd_flux_config *c, int batch, int img, int txt);
void sd_bench_flux_phase(const sd_bench_job *job, sd_backend *be, sd_st_file **f,
                         sd_bench_result *r);

/* ---- the workflow phase (bench_workflow.c) -----------------------------------
 * Any workflow `sdflow run` accepts, run by that command's own code in a
 * forked child per repeat; prints the markdown row, the per-node table and
 * issue 21's verdict on stdout, progress on stderr. Returns the exit code
 * (1 when a run failed). NULL strings: sdflow run's defaults. */
typedef struct sd_bench_wf_opts {
    const char *workflow;
    const char *models_dir, *tokenizer_dir, *comfyui_dir, *input_dir, *output_dir;
    const char *precision, *vae_precision, *clip_precision, *device, *max_memory;
    int threads; /* >= 1: main resolves the default (SDFLOW_THREADS, else the usable CPUs) */
    int repeat;
    const char *sets[64]; /* --set ID.INPUT=VALUE, in order */
    int n_sets;
} sd_bench_wf_opts;
int sd_bench_workflow(const sd_bench_wf_opts *o, const char *machine, const char *build);

/* --kernels: GFLOP/s table of the UNet's and Flux's matrix shapes
 * (bench_kernels.c) at 1, 2, 4, ... threads up to max_threads (<= 0: every
 * CPU the process may use), then each shape's scaling; match (may be NULL)
 * keeps the shapes whose name contains it. */
int sd_bench_kernels(int repeat, const char *match, int max_threads);
double sd_bench_median(const double *v, int n);

#endif
