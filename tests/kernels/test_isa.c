/* test_isa.c - the CPU backend's instruction-set dispatch (kernels/cpu/isa.c).
 *
 * The dispatch is decided once per process, so every case runs in a forked
 * child that sets the environment before its first backend: SDFLOW_MAX_CPU_ISA
 * caps our paths, OpenBLAS's coretype and oneDNN's ISA, and never raises a
 * level above the CPU's; SDFLOW_CPU_BF16 picks the bf16 path and
 * SDFLOW_CPU_GEMM the f32 GEMM's library; values the
 * backend does not know make backend creation fail with an error naming the
 * variable. The parent only reports what the children found.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/dnnl_bf16.h"
#include "testutil.h"

extern char *openblas_get_corename(void) __attribute__((weak));

/* The CPU's own level, found by a child without any cap. */
static int hw = -1;

static sd_backend *make(sd_error *err) {
    sd_backend *be = NULL;
    sd_backend_new("cpu", 1, &be, err);
    return be;
}

/* Every variable that caps or picks a path: a child starts without any of
 * them, whatever the suite runs under (scripts/test.sh's imitation of a
 * smaller CPU sets them for the whole run; the "uncapped" level inherited
 * SDFLOW_MAX_CPU_ISA=avx2 and every higher cap then looked wrong). */
static void clear_caps(void) {
    unsetenv("SDFLOW_MAX_CPU_ISA");
    unsetenv("SDFLOW_CPU_BF16");
    unsetenv("SDFLOW_CPU_GEMM");
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("ONEDNN_MAX_CPU_ISA");
    unsetenv("DNNL_MAX_CPU_ISA");
}

/* Runs fn in a child with NAME=VALUE set (value NULL: unset); the child's
 * CHECK failures become its exit status. */
static void in_child(const char *name, const char *value, void (*fn)(void)) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        clear_caps();
        if (name && value) setenv(name, value, 1);
        fn();
        fflush(stdout);
        _exit(sd_test_finish());
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "case %s=%s failed in the child (status %d)",
              name ? name : "-", value ? value : "-", st);
}

static void uncapped(void) {
    sd_error err;
    sd_backend *be = make(&err);
    CHECK_OK(be ? SD_OK : err.code, &err);
    int lv = sd_cpu_level();
    printf("CPU level %s, vector path %d, OpenBLAS %s, oneDNN %s, bf16 path %s\n",
           sd_cpu_level_name(lv), sd_cpu_isa(),
           openblas_get_corename ? openblas_get_corename() : "?", sd_dnnl_isa_name(),
           sd_cpu_bf16_default_path() == SD_BF16_PATH_ONEDNN ? "onednn" : "emulate");
    CHECK(sd_cpu_isa() == (lv >= SD_LEVEL_AVX512 ? SD_ISA_AVX512 : lv));
    /* oneDNN where its bf16 arithmetic is native, emulation elsewhere */
    int native = lv >= SD_LEVEL_AVX512_BF16 && sd_dnnl_native_bf16();
    CHECK(sd_cpu_bf16_default_path() == (native ? SD_BF16_PATH_ONEDNN : SD_BF16_PATH_EMULATE));
    if (be) CHECK(((sd_cpu *)be->impl)->bf16_path == sd_cpu_bf16_default_path());
    sd_backend_free(be);
    fflush(stdout);
    /* the parent learns the level from the status; 100: a check failed */
    _exit(sd_test_failures ? 100 : lv);
}

static int cap_want; /* the cap a capped child checks */

static void capped(void) {
    sd_error err;
    sd_backend *be = make(&err);
    CHECK_OK(be ? SD_OK : err.code, &err);
    int want = cap_want < hw ? cap_want : hw;
    CHECK_MSG(sd_cpu_level() == want, "level %s, want %s", sd_cpu_level_name(sd_cpu_level()),
              sd_cpu_level_name(want));
    CHECK(sd_cpu_isa() == (want >= SD_LEVEL_AVX512 ? SD_ISA_AVX512 : want));
    if (want < SD_LEVEL_AVX512_BF16) CHECK(sd_cpu_bf16_default_path() == SD_BF16_PATH_EMULATE);
    if (want < hw && openblas_get_corename) {
        /* the capped kernels: SkylakeX, Haswell or Prescott */
        const char *core = openblas_get_corename();
        const char *expect = want >= SD_LEVEL_AVX512 ? "skylakex" : want >= SD_LEVEL_AVX2
                                                                        ? "haswell"
                                                                        : "prescott";
        CHECK_MSG(core && !strcasecmp(core, expect), "OpenBLAS kernels %s, want %s",
                  core ? core : "?", expect);
    }
    if (want < hw && sd_dnnl_compiled()) {
        const char *isa = sd_dnnl_isa_name();
        if (want <= SD_LEVEL_AVX2)
            CHECK_MSG(!strstr(isa, "avx512"), "oneDNN still dispatches to %s", isa);
        if (want < SD_LEVEL_AVX512_BF16) CHECK(!sd_dnnl_native_bf16());
    }
    printf("  cap %s: level %s, OpenBLAS %s, oneDNN %s\n", sd_cpu_level_name(cap_want),
           sd_cpu_level_name(sd_cpu_level()),
           openblas_get_corename ? openblas_get_corename() : "?", sd_dnnl_isa_name());
    sd_backend_free(be);
}

/* The variable in_child set to a value the backend must refuse, and a word
 * its error must offer among the accepted values (NULL: none checked). */
static const char *refuse_var, *refuse_hint;

static void refused(void) {
    char want[128];
    snprintf(want, sizeof want, "%s=%s", refuse_var, getenv(refuse_var));
    sd_error err;
    sd_error_clear(&err);
    sd_backend *be = make(&err);
    CHECK_MSG(be == NULL, "an unknown %s must refuse the backend", want);
    CHECK(err.code == SD_ERR_INVALID && strstr(err.msg, want) &&
          (!refuse_hint || strstr(err.msg, refuse_hint)));
    sd_backend_free(be);
}

static void in_child_refused(const char *var, const char *value, const char *hint) {
    refuse_var = var;
    refuse_hint = hint;
    in_child(var, value, refused);
}

static int gemm_want;

/* SDFLOW_CPU_GEMM picks sd_cpu_gemm1's library, case-insensitively; onednn
 * in a build without it is refused rather than quietly run on OpenBLAS */
static void gemm_engine(void) {
    sd_error err;
    sd_error_clear(&err);
    sd_backend *be = make(&err);
    if (!sd_cpu_gemm_has_engine(gemm_want)) {
        CHECK(be == NULL && err.code == SD_ERR_INVALID && strstr(err.msg, "no oneDNN"));
        sd_backend_free(be);
        return;
    }
    CHECK_OK(be ? SD_OK : err.code, &err);
    CHECK_MSG(sd_cpu_gemm_engine() == gemm_want, "engine %d, asked for %d", sd_cpu_gemm_engine(),
              gemm_want);
    sd_backend_free(be);
}

static int path_want;

static void bf16_path(void) {
    sd_error err;
    sd_backend *be = make(&err);
    if (path_want == SD_BF16_PATH_ONEDNN && !sd_dnnl_compiled()) {
        /* nothing to compute bf16 with: say so at creation */
        CHECK(be == NULL && err.code == SD_ERR_INVALID && strstr(err.msg, "no oneDNN"));
        sd_backend_free(be);
        return;
    }
    CHECK_OK(be ? SD_OK : err.code, &err);
    /* oneDNN has bf16 primitives from AVX-512 on; below, onednn means the
     * emulation */
    int want = path_want == SD_BF16_PATH_ONEDNN && !sd_dnnl_has_bf16() ? SD_BF16_PATH_EMULATE
                                                                        : path_want;
    CHECK(sd_cpu_bf16_default_path() == want);
    if (be) CHECK(((sd_cpu *)be->impl)->bf16_path == want);
    sd_backend_free(be);
}

int main(void) {
    /* the level, from an uncapped child (the parent never initialises the
     * dispatch, so every child starts fresh) */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        clear_caps();
        uncapped();
        _exit(99);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    hw = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    CHECK_MSG(hw >= SD_LEVEL_SCALAR && hw <= SD_LEVEL_AMX, "uncapped child failed (status %d)",
              st);
    if (hw < 0 || hw > SD_LEVEL_AMX) return sd_test_finish();
    for (cap_want = SD_LEVEL_SCALAR; cap_want <= SD_LEVEL_AMX; cap_want++)
        in_child("SDFLOW_MAX_CPU_ISA", sd_cpu_level_name(cap_want), capped);
    in_child_refused("SDFLOW_MAX_CPU_ISA", "avx9", "avx2");
    in_child_refused("SDFLOW_CPU_BF16", "fast", NULL);
    in_child_refused("SDFLOW_CPU_GEMM", "mkl", "openblas");
    gemm_want = SD_GEMM_OPENBLAS;
    in_child("SDFLOW_CPU_GEMM", "OpenBLAS", gemm_engine);
    gemm_want = SD_GEMM_ONEDNN;
    in_child("SDFLOW_CPU_GEMM", "onednn", gemm_engine);
    path_want = SD_BF16_PATH_ONEDNN;
    in_child("SDFLOW_CPU_BF16", "onednn", bf16_path);
    path_want = SD_BF16_PATH_EMULATE;
    in_child("SDFLOW_CPU_BF16", "emulate", bf16_path);
    return sd_test_finish();
}
