/* bench_kernels.c - `sdflow-bench --kernels`: GFLOP/s of the UNet's matrix
 * shapes (SD1.5, 512x512, batch 2) and of attention (SD1.5's 64x64 and
 * 32x32 levels, a Flux block's joint sequence) through each path the CPU backend has: our
 * f32 ops (OpenBLAS GEMM / conv2d.c / attention.c), bf16 emulated on those
 * (dnnl_bf16.h), bf16 through oneDNN with the weights packed once (the
 * warm-up run packs them: a sampler's every step after the first), the same
 * with nothing kept (weights rounded and reordered on every call, as before
 * issue 28), and oneDNN's f32 primitives alone (weights pre-reordered, the
 * f32 ceiling oneDNN offers). Each figure: median of `repeat` runs after
 * one warm-up, in wall and CPU seconds (CLOCK_PROCESS_CPUTIME_ID), at 1, 2,
 * 4, ... threads up to the --threads count (default: every CPU the process
 * may use). A last table gives each shape's scaling from 1 thread to the
 * most (wall speed-up; CPU time, which grows when threads wait for memory or
 * each other) and its minimum memory traffic (inputs read and output written
 * once, weights as stored) as FLOP per byte and GB/s: the shapes with few
 * FLOP per byte are the ones a many-core machine's memory bandwidth caps.
 * The load average before and after says how shared the machine was. The
 * header names the instruction sets oneDNN and our kernels use; the oneDNN
 * bf16 columns are n/a where oneDNN has no bf16 primitives (below
 * AVX-512). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "kernels/backend.h"
#include "kernels/cpus.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/dnnl_bf16.h"
#include "kernels/cpu/dnnl_pack.h"

#ifdef SDFLOW_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

typedef struct {
    const char *name;
    int conv; /* 0: linear M x K -> N; 1: 3x3 (or k x k) conv; 2: attention */
    int64_t m, k, n;          /* linear; attention: tokens m, heads k, head width n */
    int64_t b, c, h, w, o, kk; /* conv: NCHW, O outputs, kk x kk, stride 1, same padding;
                                * attention: batch b */
    int fp8;                   /* linear: weight stored F8_E4M3 (Flux checkpoints), not F16 */
} shape;

static const shape shapes[] = {
    {"linear 8192x320 -> 320 (attn proj, 64x64)", 0, 8192, 320, 320},
    {"linear 8192x320 -> 2560 (GEGLU in, 64x64)", 0, 8192, 320, 2560},
    {"linear 8192x1280 -> 320 (FF out, 64x64)", 0, 8192, 1280, 320},
    {"linear 512x1280 -> 1280 (attn proj, 16x16)", 0, 512, 1280, 1280},
    {"conv3x3 320->320 @64x64 b2", 1, 0, 0, 0, 2, 320, 64, 64, 320, 3},
    {"conv3x3 640->640 @32x32 b2", 1, 0, 0, 0, 2, 640, 32, 32, 640, 3},
    {"conv3x3 1280->1280 @16x16 b2", 1, 0, 0, 0, 2, 1280, 16, 16, 1280, 3},
    {"attention 4096 tokens, 8x40 heads b2 (64x64)", 2, 4096, 8, 40, 2},
    {"attention 1024 tokens, 8x80 heads b2 (32x32)", 2, 1024, 8, 80, 2},
    {"attention 1536 tokens, 24x128 heads (Flux)", 2, 1536, 24, 128, 1},
    {"conv1x1 640->320 @64x64 b2 (skip)", 1, 0, 0, 0, 2, 640, 64, 64, 320, 1},
    /* the Flux block stack's GEMMs (bench_flux.c), weights fp8 */
    {"linear 1024x3072 -> 9216 fp8 (Flux img qkv)", 0, 1024, 3072, 9216, .fp8 = 1},
    {"linear 1024x12288 -> 3072 fp8 (Flux img MLP out)", 0, 1024, 12288, 3072, .fp8 = 1},
    {"linear 1536x3072 -> 21504 fp8 (Flux single linear1)", 0, 1536, 3072, 21504, .fp8 = 1},
};

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Bytes an op must at least move: inputs once, output once, weights at
 * their stored width (F16; fp8 for the Flux shapes), activations f32. */
static double bytes_of(const shape *s) {
    if (s->conv == 2) return 4.0 * s->b * s->m * s->k * s->n * 4; /* q, k, v, out */
    if (s->conv)
        return 4.0 * s->b * (s->c + s->o) * s->h * s->w + 2.0 * s->o * s->c * s->kk * s->kk;
    return 4.0 * s->m * (s->k + s->n) + (s->fp8 ? 1.0 : 2.0) * s->k * s->n;
}

static void print_loadavg(const char *when) {
    FILE *f = fopen("/proc/loadavg", "r");
    char b[128] = "?";
    if (f) {
        if (!fgets(b, sizeof b, f)) snprintf(b, sizeof b, "?\n");
        fclose(f);
    }
    printf("load average %s: %s", when, b);
    if (!strchr(b, '\n')) printf("\n");
}

static double flops_of(const shape *s) {
    if (s->conv == 2) return 4.0 * s->b * s->m * s->m * s->k * s->n; /* QK^T and PV */
    return s->conv ? 2.0 * s->b * s->o * s->h * s->w * s->c * s->kk * s->kk
                   : 2.0 * s->m * s->k * s->n;
}

static sd_bt *rand_bt(sd_backend *be, sd_dtype dt, int nd, const int64_t *shape, unsigned seed) {
    sd_tensor *t = sd_tensor_new(SD_F32, nd, shape);
    if (!t) return NULL;
    float *p = t->data;
    for (int64_t i = 0; i < sd_tensor_numel(t); i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = ((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    sd_bt *b = sd_bt_from_host(be, t, dt);
    sd_tensor_unref(t);
    return b;
}

typedef struct {
    double wall, cpu;
} timing;

/* One op of shape s on be in precision p, weights F16 (Flux shapes: F8_E4M3)
 * as the checkpoint stores them; median of repeat runs. */
static int time_op(sd_backend *be, const shape *s, sd_precision p, int repeat, timing *t) {
    sd_bt *x, *w, *b;
    if (s->conv == 2) { /* q, k, v */
        int64_t qs[3] = {s->b, s->m, s->k * s->n};
        x = rand_bt(be, SD_F32, 3, qs, 1), w = rand_bt(be, SD_F32, 3, qs, 2);
        b = rand_bt(be, SD_F32, 3, qs, 3);
    } else if (s->conv) {
        int64_t xs[4] = {s->b, s->c, s->h, s->w}, ws[4] = {s->o, s->c, s->kk, s->kk};
        x = rand_bt(be, SD_F32, 4, xs, 1), w = rand_bt(be, SD_F16, 4, ws, 2);
        b = rand_bt(be, SD_F16, 1, &s->o, 3);
    } else {
        int64_t xs[2] = {s->m, s->k}, ws[2] = {s->n, s->k};
        x = rand_bt(be, SD_F32, 2, xs, 1);
        w = rand_bt(be, s->fp8 ? SD_F8_E4M3 : SD_F16, 2, ws, 2);
        b = rand_bt(be, s->fp8 ? SD_BF16 : SD_F16, 1, &s->n, 3);
    }
    sd_backend_set_precision(be, p);
    double wall[16], cpu[16];
    int ok = x && w && b;
    for (int r = -1; ok && r < repeat; r++) {
        double w0 = sd_bench_now(), c0 = cpu_now();
        sd_bt *y = s->conv == 2 ? sd_op_attention(x, w, b, (int)s->k, 0)
                   : s->conv    ? sd_op_conv2d(x, w, b, 1, s->kk / 2, s->kk / 2)
                                : sd_op_linear(x, w, b);
        double w1 = sd_bench_now(), c1 = cpu_now();
        ok = y != NULL;
        sd_bt_free(y);
        if (r >= 0) wall[r] = w1 - w0, cpu[r] = c1 - c0;
    }
    if (!ok && sd_backend_error(be)) fprintf(stderr, "  %s\n", sd_backend_error(be)->msg);
    sd_backend_clear_error(be);
    sd_backend_set_precision(be, SD_PREC_F32);
    sd_bt_free(x), sd_bt_free(w), sd_bt_free(b);
    if (ok) t->wall = sd_bench_median(wall, repeat), t->cpu = sd_bench_median(cpu, repeat);
    return ok;
}

#ifdef SDFLOW_HAVE_DNNL
/* oneDNN f32 primitive alone: src/weights already in the layouts it picked. */
static int time_dnnl_f32(const shape *s, int threads, int repeat, timing *t) {
    if (s->conv == 2) return 0; /* no oneDNN attention primitive in 2.6 */
    omp_set_num_threads(threads);
    dnnl_engine_t eng;
    dnnl_stream_t st;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) || dnnl_stream_create(&st, eng, dnnl_stream_default_flags))
        return 0;
    dnnl_memory_desc_t xd, wd, dd;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t rc;
    if (s->conv) {
        dnnl_dims_t x = {s->b, s->c, s->h, s->w}, w = {s->o, s->c, s->kk, s->kk},
                    d = {s->b, s->o, s->h, s->w}, str = {1, 1}, pad = {s->kk / 2, s->kk / 2};
        dnnl_memory_desc_init_by_tag(&xd, 4, x, dnnl_f32, dnnl_format_tag_any);
        dnnl_memory_desc_init_by_tag(&wd, 4, w, dnnl_f32, dnnl_format_tag_any);
        dnnl_memory_desc_init_by_tag(&dd, 4, d, dnnl_f32, dnnl_format_tag_any);
        dnnl_convolution_desc_t cd;
        rc = dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                                &xd, &wd, NULL, &dd, str, pad, pad);
        if (!rc) rc = dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL);
    } else {
        dnnl_dims_t x = {s->m, s->k}, w = {s->k, s->n}, d = {s->m, s->n};
        dnnl_memory_desc_init_by_tag(&xd, 2, x, dnnl_f32, dnnl_ab);
        dnnl_memory_desc_init_by_tag(&wd, 2, w, dnnl_f32, dnnl_format_tag_any);
        dnnl_memory_desc_init_by_tag(&dd, 2, d, dnnl_f32, dnnl_ab);
        dnnl_matmul_desc_t md;
        rc = dnnl_matmul_desc_init(&md, &xd, &wd, NULL, &dd);
        if (!rc) rc = dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL);
    }
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t m[3] = {0};
    dnnl_query_t q[3] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md};
    int ok = !rc && !dnnl_primitive_create(&prim, pd);
    for (int i = 0; ok && i < 3; i++) {
        const dnnl_memory_desc_t *d = dnnl_primitive_desc_query_md(pd, q[i], 0);
        ok = !dnnl_memory_create(&m[i], d, eng, DNNL_MEMORY_ALLOCATE);
        void *h = NULL;
        if (ok && !dnnl_memory_get_data_handle(m[i], &h) && h)
            memset(h, 0, dnnl_memory_desc_get_size(d)); /* values do not matter, timing only */
    }
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};
    double wall[16], cpu[16];
    for (int r = -1; ok && r < repeat; r++) {
        double w0 = sd_bench_now(), c0 = cpu_now();
        ok = !dnnl_primitive_execute(prim, st, 3, args) && !dnnl_stream_wait(st);
        if (r >= 0) wall[r] = sd_bench_now() - w0, cpu[r] = cpu_now() - c0;
    }
    for (int i = 0; i < 3; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    if (prim) dnnl_primitive_destroy(prim);
    if (pd) dnnl_primitive_desc_destroy(pd);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    /* end the OpenMP workers, as dnnl_ops.c does after each op: spinning,
     * they would share the cores with the next shape's measurement */
    omp_pause_resource_all(omp_pause_soft);
    if (ok) t->wall = sd_bench_median(wall, repeat), t->cpu = sd_bench_median(cpu, repeat);
    return ok;
}
#endif

static void cell(const shape *s, int ok, const timing *t) {
    if (ok) printf(" %7.1f (%5.1f) |", flops_of(s) / t->wall * 1e-9, flops_of(s) / t->cpu * 1e-9);
    else printf(" %15s |", "n/a");
}

#define N_SHAPES (sizeof shapes / sizeof *shapes)
#define MAX_COUNTS 12

int sd_bench_kernels(int repeat, const char *match, int max_threads) {
    if (repeat > 16) repeat = 16;
    if (max_threads <= 0) max_threads = sd_backend_default_threads();
    int counts[MAX_COUNTS], n_counts = 0;
    for (int t = 1; t < max_threads && n_counts < MAX_COUNTS - 1; t *= 2) counts[n_counts++] = t;
    counts[n_counts++] = max_threads;
    /* ours f32 [0] and bf16 oneDNN packed [1] at each count, for the summary */
    static timing got[MAX_COUNTS][N_SHAPES][2];
    static int have[MAX_COUNTS][N_SHAPES][2];
    memset(have, 0, sizeof have);
#ifdef SDFLOW_HAVE_DNNL
    static const char *isa[] = {"?", "sse41", "?", "avx", "?", "?", "?", "avx2"};
    dnnl_cpu_isa_t ci = dnnl_get_effective_cpu_isa();
    const char *isa_name = ci == dnnl_cpu_isa_avx512_core_amx ? "avx512_core_amx"
                           : ci == dnnl_cpu_isa_avx512_core_bf16 ? "avx512_core_bf16"
                           : ci == dnnl_cpu_isa_avx512_core_vnni ? "avx512_core_vnni"
                           : ci == dnnl_cpu_isa_avx512_core ? "avx512_core"
                           : (unsigned)ci < 8 ? isa[ci] : "other";
    const dnnl_version_t *v = dnnl_version();
    printf("oneDNN %d.%d.%d, effective ISA %s (DNNL_VERBOSE=1 names each kernel)\n", v->major,
           v->minor, v->patch, isa_name);
#else
    printf("built without oneDNN: bf16 and oneDNN f32 columns are n/a\n");
#endif
    printf("our kernels: level %s, vector path %d; bf16 by default: %s\n",
           sd_cpu_level_name(sd_cpu_level()), sd_cpu_isa(),
           sd_cpu_bf16_default_path() == SD_BF16_PATH_ONEDNN ? "oneDNN" : "emulated");
    printf("GFLOP/s by wall time (by CPU time in parentheses); weights F16 as stored; median of %d\n",
           repeat);
    print_loadavg("at the start");
    printf("\n");
    for (int ci = 0; ci < n_counts; ci++) {
        int threads = counts[ci];
        /* a second backend keeps nothing packed: every call rounds and
         * reorders its weight, as the oneDNN path did before packing */
        sd_backend *be = NULL, *nopack = NULL;
        sd_error err;
        if (sd_backend_new("cpu", threads, &be, &err) ||
            sd_backend_new("cpu", threads, &nopack, &err)) {
            fprintf(stderr, "sdflow-bench: %s\n", err.msg);
            sd_backend_free(be);
            return 1;
        }
        int bf = sd_backend_supports_precision(be, SD_PREC_BF16);
        int onednn = bf && sd_dnnl_has_bf16();
        ((sd_cpu *)be->impl)->bf16_path = SD_BF16_PATH_ONEDNN;
        ((sd_cpu *)nopack->impl)->bf16_path = SD_BF16_PATH_ONEDNN;
        if (onednn) sd_dnnl_set_pack_budget(nopack, 0);
        printf("%d thread%s\n\n| shape | ours f32 | bf16 emulated | bf16 oneDNN, packed | "
               "bf16 oneDNN, per call | oneDNN f32 primitive |\n|---|---|---|---|---|---|\n",
               threads, threads > 1 ? "s" : "");
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            const shape *s = &shapes[i];
            if (match && !strstr(s->name, match)) continue;
            timing t;
            printf("| %s |", s->name);
            fflush(stdout);
            have[ci][i][0] = time_op(be, s, SD_PREC_F32, repeat, &t);
            got[ci][i][0] = t;
            cell(s, have[ci][i][0], &t);
            ((sd_cpu *)be->impl)->bf16_path = SD_BF16_PATH_EMULATE;
            cell(s, bf && time_op(be, s, SD_PREC_BF16, repeat, &t), &t);
            ((sd_cpu *)be->impl)->bf16_path = SD_BF16_PATH_ONEDNN;
            have[ci][i][1] = onednn && time_op(be, s, SD_PREC_BF16, repeat, &t);
            got[ci][i][1] = t;
            cell(s, have[ci][i][1], &t);
            cell(s, onednn && time_op(nopack, s, SD_PREC_BF16, repeat, &t), &t);
#ifdef SDFLOW_HAVE_DNNL
            cell(s, time_dnnl_f32(s, threads, repeat, &t), &t);
#else
            cell(s, 0, &t);
#endif
            printf("\n");
            fflush(stdout);
        }
        printf("\n");
        sd_backend_free(be);
        sd_backend_free(nopack);
    }
    print_loadavg("at the end");
    int last = n_counts - 1;
    if (last > 0) {
        printf("\nscaling from 1 to %d threads: wall speed-up (x), CPU seconds at %d over CPU "
               "seconds at 1 (1.00: no overhead); minimum memory traffic of one op\n\n"
               "| shape | f32 speed-up | f32 CPU ratio | bf16 oneDNN speed-up | bf16 oneDNN CPU "
               "ratio | FLOP/byte | f32 GB/s at %d |\n|---|---|---|---|---|---|---|\n",
               counts[last], counts[last], counts[last]);
        for (size_t i = 0; i < N_SHAPES; i++) {
            const shape *s = &shapes[i];
            if (match && !strstr(s->name, match)) continue;
            printf("| %s |", s->name);
            for (int c = 0; c < 2; c++) {
                if (have[0][i][c] && have[last][i][c])
                    printf(" %.2f | %.2f |", got[0][i][c].wall / got[last][i][c].wall,
                           got[last][i][c].cpu / got[0][i][c].cpu);
                else
                    printf(" n/a | n/a |");
            }
            printf(" %.0f |", flops_of(s) / bytes_of(s));
            if (have[last][i][0]) printf(" %.2f |\n", bytes_of(s) / got[last][i][0].wall * 1e-9);
            else printf(" n/a |\n");
        }
    }
    return 0;
}
