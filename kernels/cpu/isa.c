/* isa.c - which instruction-set paths the CPU backend takes (cpu.h).
 *
 * Decided once per process, from CPUID and two environment variables read
 * when the first CPU backend is created:
 *
 *   SDFLOW_MAX_CPU_ISA=scalar|avx2|avx512|avx512_bf16|amx caps every dispatch
 *   at that level (it never raises one above what the CPU has): our own
 *   kernels' paths (vmath, Winograd, norms, widening, rounding), the bf16
 *   path choice below, oneDNN's (dnnl_set_max_cpu_isa, unless the user set
 *   ONEDNN_MAX_CPU_ISA/DNNL_MAX_CPU_ISA themselves) and OpenBLAS's kernels
 *   (its coretype: SkylakeX for avx512 and up, Haswell for avx2, Prescott
 *   below, unless OPENBLAS_CORETYPE is set). So one variable runs the whole
 *   backend on the code an older CPU would run; the tests use it to cover the
 *   AVX2 paths on an AVX-512 machine.
 *
 *   SDFLOW_CPU_BF16=auto|onednn|emulate picks how bf16 precision computes
 *   (dnnl_bf16.h): oneDNN's bf16 primitives, or bf16-rounded inputs on our
 *   f32 kernels. auto takes oneDNN where bf16 arithmetic is native (level
 *   avx512_bf16 or amx, and oneDNN dispatching to such kernels), emulation
 *   elsewhere: on AVX-512 without AVX512_BF16 oneDNN emulates bf16 at a
 *   fraction of its f32 rate (bench/notes/cpu-isa.md), while our f32 kernels
 *   keep Winograd. onednn forces oneDNN wherever it has bf16 primitives at
 *   all (AVX-512 and up: the tests use it to run that path on machines
 *   without native bf16); below AVX-512 oneDNN 2.6 has none, and onednn
 *   means the emulation there too.
 *
 * A value the backend does not know fails sd_cpu_backend_init with an error
 * naming the variable, instead of being ignored.
 *
 * OpenBLAS DYNAMIC_ARCH builds (Debian's) pick their kernels once at load,
 * and 0.3.21 knows neither Sapphire/Emerald Rapids (it falls back to its
 * generic "Prescott" SSE3 kernels, 3-5x slower: 8.5 vs 45 GFLOPS, sgemm
 * 768^3, one thread) nor AVX-512 on AMD Zen 4/5 (it runs its AVX2 Zen
 * kernels there). When the kernels it picked are below what the CPU (under
 * the cap) runs, or above the cap, the selection is redone with the right
 * coretype through OpenBLAS's own OPENBLAS_CORETYPE path. The hooks are weak
 * so builds without DYNAMIC_ARCH link and keep their kernels.
 */
#include "cpu.h"
#include "dnnl_bf16.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#define HAVE_X86 1
#endif

#ifdef SDFLOW_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));

static const char *const level_names[] = {"scalar", "avx2", "avx512", "avx512_bf16", "amx"};

const char *sd_cpu_level_name(int level) {
    return level >= 0 && level <= SD_LEVEL_AMX ? level_names[level] : "?";
}

#ifdef HAVE_X86
static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}
#endif

/* The CPU's own level, before any cap. AVX2 means AVX2, FMA and F16C;
 * AVX-512 means the F, BW, DQ and VL
 * subsets (what our kernels and OpenBLAS's SkylakeX ones use); the bf16
 * levels are read from CPUID directly (compilers disagree on the names
 * __builtin_cpu_supports knows), AMX only when the OS enabled tile state. */
static int hw_level(void) {
#ifdef HAVE_X86
    __builtin_cpu_init();
    unsigned a, b, c, d;
    /* AVX2 paths also convert F16 with F16C (CPUID.1:ECX bit 29) */
    int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c))
        return SD_LEVEL_SCALAR;
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")))
        return SD_LEVEL_AVX2;
    unsigned bf16 = 0, amx = 0;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) bf16 = (a >> 5) & 1;           /* AVX512_BF16 */
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) amx = (d >> 22 & 1) && (d >> 24 & 1); /* AMX-BF16, AMX-TILE */
    unsigned osxsave = __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1);
    if (amx && osxsave && (xcr0() & (3u << 17)) == (3u << 17)) return SD_LEVEL_AMX;
    return bf16 ? SD_LEVEL_AVX512_BF16 : SD_LEVEL_AVX512;
#else
    return SD_LEVEL_SCALAR;
#endif
}

static struct {
    pthread_once_t once;
    int hw, level, isa;
    int bf16_path;            /* SD_BF16_PATH_*, before the oneDNN check */
    char err[SD_ERR_MSG_MAX]; /* a bad environment value: the backend refuses to start */
} g = {PTHREAD_ONCE_INIT, 0, 0, 0, 0, ""};

static int parse_level(const char *v) {
    for (int i = 0; i <= SD_LEVEL_AMX; i++)
        if (!strcasecmp(v, level_names[i])) return i;
    return -1;
}

/* OpenBLAS kernels by the level they need: 2 AVX-512, 1 AVX2, 0 older. */
static int blas_rank(const char *core) {
    static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    static const char *const avx2[] = {"haswell", "zen", "skylake", "alderlake"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (!strcasecmp(core, avx512[i])) return 2;
    for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
        if (!strcasecmp(core, avx2[i])) return 1;
    return 0;
}

static void fix_openblas(int level) {
    if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || !openblas_get_corename) return;
    if (getenv("OPENBLAS_CORETYPE")) return;
    const char *core = openblas_get_corename();
    if (!core) return;
    int want = level >= SD_LEVEL_AVX512 ? 2 : level >= SD_LEVEL_AVX2 ? 1 : 0;
    if (blas_rank(core) == want) return;
    static const char *const name[] = {"Prescott", "Haswell", "SkylakeX"};
    setenv("OPENBLAS_CORETYPE", name[want], 0);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
}

#ifdef SDFLOW_HAVE_DNNL
static void cap_dnnl(int level) {
    if (getenv("ONEDNN_MAX_CPU_ISA") || getenv("DNNL_MAX_CPU_ISA")) return;
    static const dnnl_cpu_isa_t cap[] = {dnnl_cpu_isa_sse41, dnnl_cpu_isa_avx2,
                                         dnnl_cpu_isa_avx512_core_vnni,
                                         dnnl_cpu_isa_avx512_core_bf16, dnnl_cpu_isa_all};
    /* a failure leaves oneDNN uncapped; the bf16 path check below reads the
     * ISA it really uses */
    (void)dnnl_set_max_cpu_isa(cap[level]);
}
#endif

static void init(void) {
    g.hw = hw_level();
    g.level = g.hw;
    const char *v = getenv("SDFLOW_MAX_CPU_ISA");
    if (v && *v) {
        int cap = parse_level(v);
        if (cap < 0)
            snprintf(g.err, sizeof g.err,
                     "SDFLOW_MAX_CPU_ISA=%s: expected scalar, avx2, avx512, avx512_bf16 or amx", v);
        else if (cap < g.level)
            g.level = cap;
    }
    g.isa = g.level >= SD_LEVEL_AVX512 ? SD_ISA_AVX512 : g.level;
    g.bf16_path = SD_BF16_PATH_AUTO;
    v = getenv("SDFLOW_CPU_BF16");
    if (v && *v) {
        if (!strcasecmp(v, "onednn")) g.bf16_path = SD_BF16_PATH_ONEDNN;
        else if (!strcasecmp(v, "emulate")) g.bf16_path = SD_BF16_PATH_EMULATE;
        else if (strcasecmp(v, "auto"))
            snprintf(g.err, sizeof g.err, "SDFLOW_CPU_BF16=%s: expected auto, onednn or emulate", v);
    }
    if (g.bf16_path == SD_BF16_PATH_ONEDNN && !sd_dnnl_compiled() && !g.err[0])
        snprintf(g.err, sizeof g.err,
                 "SDFLOW_CPU_BF16=onednn: this build has no oneDNN (reconfigure with "
                 "-DSDFLOW_DNNL=ON and libdnnl-dev installed)");
    if (g.err[0]) return;
    fix_openblas(g.level);
#ifdef SDFLOW_HAVE_DNNL
    if (g.level < g.hw) cap_dnnl(g.level);
#endif
}

static void ensure(void) { pthread_once(&g.once, init); }

int sd_cpu_isa(void) {
    ensure();
    return g.isa;
}

int sd_cpu_level(void) {
    ensure();
    return g.level;
}

sd_status sd_cpu_isa_setup(sd_error *err) {
    ensure();
    if (g.err[0]) return sd_error_set(err, SD_ERR_INVALID, "%s", g.err);
    return SD_OK;
}

int sd_cpu_bf16_default_path(void) {
    ensure();
    if (g.bf16_path == SD_BF16_PATH_EMULATE) return SD_BF16_PATH_EMULATE;
    if (g.bf16_path == SD_BF16_PATH_ONEDNN)
        return sd_dnnl_has_bf16() ? SD_BF16_PATH_ONEDNN : SD_BF16_PATH_EMULATE;
    return g.level >= SD_LEVEL_AVX512_BF16 && sd_dnnl_native_bf16() ? SD_BF16_PATH_ONEDNN
                                                                     : SD_BF16_PATH_EMULATE;
}
