/* bench_main.c - sdflow-bench: full-size SD1.5 speed and memory, and the same
 * shapes through PyTorch on the same weights when python3-torch is present.
 *
 *   sdflow-bench [--work-dir DIR] [--repeat N] [--quick] [--threads N]
 *                [--phases unet,vae,clip,txt2img,unet_sdxl,flux] [--steps N] [--preset sd1]
 *                [--no-torch] [--python PATH] [--torch-script PATH] [--device cpu|cuda]
 *   sdflow-bench --workflow FILE [--models-dir DIR] [--tokenizer-dir DIR] [--comfyui-dir DIR]
 *                [--threads N] [--repeat N] [--precision f32|bf16|f16] ...
 *
 * See bench/README.md for what each row measures and how FLOPs are counted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "kernels/backend.h"
#include "kernels/cpus.h"
#include "models/synth/synth.h"

#ifndef SDFLOW_SOURCE_DIR
#define SDFLOW_SOURCE_DIR "."
#endif

#ifndef SDFLOW_BENCH_BUILD
#define SDFLOW_BENCH_BUILD "?"
#endif

#define FULL_STEPS 20

/* Writers by models/synth/synth.h preset name (seed 1). */
static sd_status write_sd1(const char *preset, const char *path, sd_error *err)
{
    const sd_synth_config *cfg = sd_synth_preset(preset);
    if (!cfg) return sd_error_set(err, SD_ERR_INVALID, "no synth preset %s", preset);
    return sd_synth_sd1_write(cfg, 1, path, err);
}

static sd_status write_sdxl(const char *preset, const char *path, sd_error *err)
{
    const sd_synth_sdxl_config *cfg = sd_synth_sdxl_preset(preset);
    if (!cfg) return sd_error_set(err, SD_ERR_INVALID, "no synth preset %s", preset);
    return sd_synth_sdxl_write(cfg, 1, path, err);
}

static sd_status write_flux(const char *preset, const char *path, sd_error *err)
{
    (void)preset;
    return sd_bench_flux_write(path, err);
}

/* Model families the bench can synthesize. --preset picks the family of the
 * unet/vae/clip/txt2img phases (sd1 only so far); the unet_sdxl phase always
 * uses the sdxl entry. The rest of SDXL (both text encoders, txt2img, a
 * PyTorch SDXL UNet in torch_ref.py) is not wired. */
typedef struct bench_preset {
    const char *name;
    const char *synth_preset; /* models/synth/synth.h preset */
    sd_status (*write)(const char *synth_preset, const char *path, sd_error *);
    int size;        /* image side the benchmark runs at */
    int full_phases; /* 1: usable as --preset (all four phases wired) */
} bench_preset;

static const bench_preset presets[] = {
    {"sd1", "sd1", write_sd1, 512, 1},
    {"sdxl", "sdxl", write_sdxl, 1024, 0}, /* the unet_sdxl phase only */
    {"flux", "flux", write_flux, 512, 0},  /* the flux phase only (bench_flux.c) */
};

typedef struct opts {
    const char *work_dir, *phases, *python, *script, *preset, *device;
    int repeat, repeat_set, quick, threads, steps, no_torch, kernels;
    const char *kernels_match;
    sd_dtype weights;
    int phases_set;
    sd_bench_wf_opts wf; /* the workflow phase: sdflow run's options */
} opts;

static void usage(FILE *o)
{
    fprintf(o,
            "usage: sdflow-bench [options]\n"
            "  --work-dir DIR      where the synthesized checkpoint is kept (default build/bench-work)\n"
            "  --repeat N          runs per figure, median reported (default 3)\n"
            "  --device cpu|cuda   the backend ours runs on, and PyTorch's device (default cpu)\n"
            "  --quick             smoke run: 1 repeat, batch 1 only\n"
            "  --threads N         compute threads, ours and PyTorch's (default: SDFLOW_THREADS,\n"
            "                      else every CPU this process may use)\n"
            "  --phases LIST       comma list of unet,vae,clip,txt2img,unet_sdxl,flux (default\n"
            "                      unet,vae,clip,txt2img; unet_sdxl is the full-size SDXL\n"
            "                      UNet at 1024x1024, ~5 GB checkpoint, 1 repeat unless\n"
            "                      --repeat is given; flux is a real-width Flux.1 with 2+2\n"
            "                      blocks, fp8 weights, 1024 image + 512 text tokens)\n"
            "  --steps N           txt2img steps actually run; < 20 scales the sampling time\n"
            "                      to 20 steps and says so (default 20)\n"
            "  --preset NAME       sd1 (default; SDXL: --phases unet_sdxl)\n"
            "  --weights f32|f16   weight dtype requested from the UNet/CLIP loaders (default\n"
            "                      f32, as sdflow run asks; loaders may keep F16 as stored\n"
            "                      when the backend computes with it: the table says)\n"
            "  --no-torch          skip the PyTorch reference\n"
            "  --kernels           only the UNet's linear/conv shapes and two attention\n"
            "                      shapes: GFLOP/s of our f32, bf16 emulated, bf16 oneDNN\n"
            "                      with packed weights and per call, oneDNN's f32\n"
            "                      primitive, at 1, 2, 4, ... threads up to --threads,\n"
            "                      then each shape's scaling and memory traffic\n"
            "                      (no checkpoint needed)\n"
            "  --kernels-match S   with --kernels: only the shapes whose name contains S\n"
            "                      (e.g. Flux)\n"
            "  --python PATH       python3 to run bench/torch_ref.py with (default: the first of\n"
            "                      python3, /usr/bin/python3 that can import torch)\n"
            "  --torch-script PATH torch_ref.py location (default the source tree's)\n"
            "\n"
            "The workflow phase (--phases workflow, implied by --workflow; runs alone):\n"
            "  --workflow FILE     any workflow sdflow run accepts (API/UI JSON, PNG, WebP,\n"
            "                      Lua), run by sdflow run's code in a child process per\n"
            "                      repeat (--no-cache); reports wall time, per-node times,\n"
            "                      sampler steps/s, peak RSS and the model files' size\n"
            "  --repeat N          runs (default 1 for this phase)\n"
            "  --models-dir DIR --tokenizer-dir DIR --comfyui-dir DIR --input-dir DIR\n"
            "  --precision P --vae-precision P --clip-precision P --max-memory SIZE\n"
            "  --set ID.INPUT=VALUE (repeatable)\n"
            "                      passed to the run as sdflow run takes them\n"
            "  --output-dir DIR    where its output nodes write (default\n"
            "                      <work-dir>/workflow-output)\n");
}

static int parse_int(const char *s, int lo, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > 1000000) return -1;
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){.work_dir = "build/bench-work", .phases = "unet,vae,clip,txt2img",
                .python = NULL, .script = SDFLOW_SOURCE_DIR "/bench/torch_ref.py",
                .preset = "sd1", .repeat = 3, .steps = FULL_STEPS, .weights = SD_F32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL(name) (!strcmp(a, name) && next && (i++, 1))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        else if (!strcmp(a, "--quick")) o->quick = 1;
        else if (!strcmp(a, "--no-torch")) o->no_torch = 1;
        else if (!strcmp(a, "--kernels")) o->kernels = 1;
        else if (VAL("--kernels-match")) o->kernels_match = next;
        else if (VAL("--work-dir")) o->work_dir = next;
        else if (VAL("--phases")) o->phases = next, o->phases_set = 1;
        else if (VAL("--workflow")) o->wf.workflow = next;
        else if (VAL("--models-dir")) o->wf.models_dir = next;
        else if (VAL("--tokenizer-dir")) o->wf.tokenizer_dir = next;
        else if (VAL("--comfyui-dir")) o->wf.comfyui_dir = next;
        else if (VAL("--input-dir")) o->wf.input_dir = next;
        else if (VAL("--output-dir")) o->wf.output_dir = next;
        else if (VAL("--precision")) o->wf.precision = next;
        else if (VAL("--vae-precision")) o->wf.vae_precision = next;
        else if (VAL("--clip-precision")) o->wf.clip_precision = next;
        else if (VAL("--max-memory")) o->wf.max_memory = next;
        else if (VAL("--set")) {
            if (o->wf.n_sets == (int)(sizeof o->wf.sets / sizeof *o->wf.sets)) goto bad;
            o->wf.sets[o->wf.n_sets++] = next;
        }
        else if (VAL("--python")) o->python = next;
        else if (VAL("--torch-script")) o->script = next;
        else if (VAL("--preset")) o->preset = next;
        else if (VAL("--device")) {
            if (strcmp(next, "cpu") && strcmp(next, "cuda")) goto bad;
            o->device = next;
        }
        else if (VAL("--weights")) {
            if (!strcmp(next, "f32")) o->weights = SD_F32;
            else if (!strcmp(next, "f16")) o->weights = SD_F16;
            else goto bad;
        } else if (VAL("--repeat")) {
            if (parse_int(next, 1, &o->repeat) || o->repeat > SD_BENCH_MAX_REPEAT) goto bad;
            o->repeat_set = 1;
        } else if (VAL("--threads")) {
            if (parse_int(next, 1, &o->threads)) goto bad;
        } else if (VAL("--steps")) {
            if (parse_int(next, 1, &o->steps) || o->steps > FULL_STEPS) goto bad;
        } else {
            fprintf(stderr, "sdflow-bench: unknown option or missing value: %s\n", a);
            usage(stderr);
            return -1;
        }
        continue;
    bad:
        fprintf(stderr, "sdflow-bench: bad value for %s: %s\n", a, next);
        return -1;
#undef VAL
    }
    if (o->quick) o->repeat = 1;
    if (o->wf.workflow && !o->phases_set) o->phases = "workflow";
    return 0;
}

static int has_phase(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        p += len + (e ? 1 : 0);
    }
    return 0;
}

static int mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

/* Synthesize (or reuse) the checkpoint. Done in a child so the parent stays
 * small and every forked phase starts from a small resident set. */
static int ensure_checkpoint(const bench_preset *p, const char *path)
{
    sd_error err;
    sd_st_file *f = NULL;
    if (access(path, R_OK) == 0 && sd_st_open(path, &f, &err) == SD_OK) {
        sd_st_close(f);
        fprintf(stderr, "sdflow-bench: reusing %s\n", path);
        return 0;
    }
    fprintf(stderr, "sdflow-bench: synthesizing full-size %s checkpoint (random weights) "
                    "-> %s\n", p->name, path);
    double t0 = sd_bench_now();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        sd_error_clear(&err);
        if (p->write(p->synth_preset, tmp, &err) || rename(tmp, path)) {
            char buf[SD_ERR_MSG_MAX + 256];
            fprintf(stderr, "sdflow-bench: synthesis failed: %s\n",
                    err.code ? sd_error_format(&err, buf, sizeof buf) : strerror(errno));
            unlink(tmp);
            _exit(1);
        }
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
        return -1;
    fprintf(stderr, "sdflow-bench: synthesized in %.1f s\n", sd_bench_now() - t0);
    return 0;
}

/* ---- machine description ----------------------------------------------------- */

static void cpu_info(char *model, size_t mn, char *flags, size_t fn)
{
    snprintf(model, mn, "unknown CPU");
    flags[0] = 0;
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (!fp) return;
    char line[8192];
    int have_model = 0, have_flags = 0;
    while (fgets(line, sizeof line, fp) && !(have_model && have_flags)) {
        char *v = strchr(line, ':');
        if (!v) continue;
        v += 1 + (v[1] == ' ');
        v[strcspn(v, "\n")] = 0;
        if (!have_model && !strncmp(line, "model name", 10)) {
            snprintf(model, mn, "%s", v);
            have_model = 1;
        } else if (!have_flags && !strncmp(line, "flags", 5)) {
            static const char *want[] = {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16",
                                         "amx_tile", "amx_bf16", "amx_int8"};
            size_t off = 0;
            for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
                char pat[64];
                snprintf(pat, sizeof pat, " %s ", want[i]);
                char padded[8200];
                snprintf(padded, sizeof padded, " %s ", v);
                if (strstr(padded, pat) && off < fn)
                    off += (size_t)snprintf(flags + off, fn - off, "%s%s", off ? " " : "", want[i]);
            }
            have_flags = 1;
        }
    }
    fclose(fp);
}

/* The torch version, or "" when `python -c "import torch"` does not work. */
static void torch_version(const char *python, char *out, size_t n)
{
    out[0] = 0;
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch; print(torch.__version__)' 2>/dev/null",
             python);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    if (fgets(out, (int)n, p)) out[strcspn(out, "\n")] = 0;
    if (pclose(p) != 0) out[0] = 0;
}

/* ---- the workflow phase ---------------------------------------------------------- */

static int run_workflow_phase(opts *o)
{
    if (strcmp(o->phases, "workflow") != 0) {
        fprintf(stderr, "sdflow-bench: the workflow phase runs alone (--phases workflow)\n");
        return 2;
    }
    if (!o->wf.workflow) {
        fprintf(stderr, "sdflow-bench: the workflow phase needs --workflow FILE\n");
        return 2;
    }
    char out_dir[4200];
    if (!o->wf.output_dir) {
        snprintf(out_dir, sizeof out_dir, "%s/workflow-output", o->work_dir);
        o->wf.output_dir = out_dir;
    }
    if (mkdirs(o->wf.output_dir)) {
        fprintf(stderr, "sdflow-bench: cannot create %s: %s\n", o->wf.output_dir, strerror(errno));
        return 1;
    }
    o->wf.device = o->device;
    o->wf.threads = o->threads;
    o->wf.repeat = o->repeat_set ? o->repeat : 1;
    char model[256], flags[256], machine[700];
    cpu_info(model, sizeof model, flags, sizeof flags);
    snprintf(machine, sizeof machine, "%s, %d cores online, flags: %s", model,
             (int)sysconf(_SC_NPROCESSORS_ONLN), flags[0] ? flags : "-");
    return sd_bench_workflow(&o->wf, machine, SDFLOW_BENCH_BUILD);
}

/* ---- rows ------------------------------------------------------------------------ */

typedef struct row {
    char name[64];
    sd_bench_job job;
    sd_bench_result ours, torch;
    int torch_kind; /* 0: no PyTorch counterpart */
    const char *torch_na; /* PyTorch column "n/a" with this reason */
} row;

static void run_torch(const opts *o, const char *ckpt, const row *rw, sd_bench_result *r)
{
    char threads[16], repeat[16], batch[16], size[16];
    snprintf(threads, sizeof threads, "%d", o->threads); /* resolved in main */
    snprintf(repeat, sizeof repeat, "%d", rw->job.repeat);
    snprintf(batch, sizeof batch, "%d", rw->job.batch > 0 ? rw->job.batch : 1);
    snprintf(size, sizeof size, "%d", rw->job.size);
    const char *phase = rw->job.kind == SD_BENCH_UNET   ? "unet"
                        : rw->job.kind == SD_BENCH_VAE  ? "vae"
                        : rw->job.kind == SD_BENCH_FLUX ? "flux"
                                                        : "clip";
    char *argv[] = {(char *)o->python, (char *)o->script, "--ckpt", (char *)ckpt,
                    "--phase", (char *)phase, "--dtype", rw->job.bf16 ? "bf16" : "f32",
                    "--batch", batch, "--threads", threads, "--repeat", repeat,
                    "--size", size, "--device", o->device ? (char *)o->device : "cpu", NULL};
    sd_bench_run_torch(argv, r);
}

static void fmt_secs(char *b, size_t n, const sd_bench_result *r)
{
    if (r->ok) snprintf(b, n, "%.3f", sd_bench_median(r->secs, r->n));
    else snprintf(b, n, r->na ? "n/a" : "failed");
}

static void fmt_gib(char *b, size_t n, long kb)
{
    if (kb > 0) snprintf(b, n, "%.2f GiB", kb / (1024.0 * 1024.0));
    else snprintf(b, n, "-");
}

int main(int argc, char **argv)
{
    sd_backend_tune_allocator(); /* as the sdflow command does */
    opts o;
    if (parse_args(argc, argv, &o)) return 2;
    if (o.threads <= 0) { /* one count for ours and PyTorch: SDFLOW_THREADS or the usable CPUs */
        sd_error err;
        sd_error_clear(&err);
        if (sd_cpus_threads_default(&o.threads, &err) != SD_OK) {
            fprintf(stderr, "sdflow-bench: %s\n", err.msg);
            return 2;
        }
    }
    if (o.kernels) return sd_bench_kernels(o.repeat, o.kernels_match, o.threads);
    const bench_preset *preset = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++)
        if (!strcmp(presets[i].name, o.preset)) preset = &presets[i];
    if (!preset || !preset->full_phases) {
        fprintf(stderr, "sdflow-bench: preset '%s' is not available (have: sd1)%s\n", o.preset,
                preset ? "; for SDXL use --phases unet_sdxl (bench/README.md)" : "");
        return 2;
    }
    static const char *known[] = {"unet", "vae", "clip", "txt2img", "unet_sdxl", "flux", "workflow"};
    for (const char *p = o.phases; *p;) {
        size_t len = strcspn(p, ","), ok = 0;
        for (size_t i = 0; i < 7; i++) ok |= strlen(known[i]) == len && !strncmp(p, known[i], len);
        if (!ok) {
            fprintf(stderr, "sdflow-bench: unknown phase '%.*s' (unet,vae,clip,txt2img,"
                            "unet_sdxl,flux,workflow)\n", (int)len, p);
            return 2;
        }
        p += len + (p[len] == ',');
    }
    if (has_phase(o.phases, "workflow")) return run_workflow_phase(&o);
    int want_main = has_phase(o.phases, "unet") || has_phase(o.phases, "vae") ||
                    has_phase(o.phases, "clip") || has_phase(o.phases, "txt2img");
    int want_xl = has_phase(o.phases, "unet_sdxl");
    int want_flux = has_phase(o.phases, "flux");

    if (mkdirs(o.work_dir)) {
        fprintf(stderr, "sdflow-bench: cannot create %s: %s\n", o.work_dir, strerror(errno));
        return 1;
    }
    const bench_preset *xl = &presets[1], *fx = &presets[2];
    char ckpt[4096], ckpt_xl[4096], ckpt_fx[4096];
    snprintf(ckpt, sizeof ckpt, "%s/%s-random-f16.safetensors", o.work_dir, preset->name);
    snprintf(ckpt_xl, sizeof ckpt_xl, "%s/%s-random-f16.safetensors", o.work_dir, xl->name);
    snprintf(ckpt_fx, sizeof ckpt_fx, "%s/flux-2+2-blocks-random-fp8.safetensors", o.work_dir);
    if (want_main && ensure_checkpoint(preset, ckpt)) return 1;
    if (want_xl && ensure_checkpoint(xl, ckpt_xl)) return 1;
    if (want_flux && ensure_checkpoint(fx, ckpt_fx)) return 1;

    char model[256], flags[256], tv[64] = "";
    cpu_info(model, sizeof model, flags, sizeof flags);
    if (!o.no_torch) {
        /* Debian's python3-torch lives in /usr/bin/python3, which a pyenv or
         * venv python3 earlier on PATH does not see. */
        const char *cands[] = {"python3", "/usr/bin/python3"};
        size_t nc = 2;
        if (o.python) cands[0] = o.python, nc = 1;
        for (size_t i = 0; i < nc && !tv[0]; i++) {
            torch_version(cands[i], tv, sizeof tv);
            if (tv[0]) o.python = cands[i];
        }
    }
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);

    row rows[16];
    int nr = 0;
    const int size = preset->size;
    if (has_phase(o.phases, "unet"))
        for (int bf = 0; bf < 2; bf++)
            for (int b = 1; b <= (o.quick ? 1 : 2); b++) {
                row *r = &rows[nr++];
                memset(r, 0, sizeof *r);
                snprintf(r->name, sizeof r->name, "UNet step %s, batch %d%s", bf ? "bf16" : "f32", b,
                         b == 2 ? " (one CFG step)" : "");
                r->job = (sd_bench_job){SD_BENCH_UNET, ckpt, o.threads, o.repeat, b, bf, 0, size, o.weights, o.device};
                r->torch_kind = 1;
            }
    if (has_phase(o.phases, "vae"))
        for (int bf = 0; bf < 2; bf++) {
            row *r = &rows[nr++];
            memset(r, 0, sizeof *r);
            snprintf(r->name, sizeof r->name, "VAE decode %dx%d%s", size, size, bf ? " bf16" : "");
            r->job = (sd_bench_job){SD_BENCH_VAE, ckpt, o.threads, o.repeat, 1, bf, 0, size, o.weights, o.device};
            r->torch_kind = 1;
        }
    if (has_phase(o.phases, "clip")) {
        row *r = &rows[nr++];
        memset(r, 0, sizeof *r);
        snprintf(r->name, sizeof r->name, "CLIP encode (77 tokens)");
        r->job = (sd_bench_job){SD_BENCH_CLIP, ckpt, o.threads, o.repeat, 1, 0, 0, size, o.weights, o.device};
        r->torch_kind = 1;
    }
    if (has_phase(o.phases, "txt2img")) {
        row *r = &rows[nr++];
        memset(r, 0, sizeof *r);
        snprintf(r->name, sizeof r->name, "txt2img %d steps euler/normal cfg 8%s", FULL_STEPS,
                 o.steps < FULL_STEPS ? " (scaled)" : "");
        r->job = (sd_bench_job){SD_BENCH_TXT2IMG, ckpt, o.threads, o.repeat, 2, 0, o.steps, size, o.weights, o.device};
    }
    /* Full-size SDXL UNet, f32 compute: one evaluation takes minutes on a
     * small machine, so one repeat unless --repeat says otherwise. Batch 2
     * (one CFG step) first: it is the figure a sampler step costs. */
    int xl_repeat = o.repeat_set ? o.repeat : 1;
    if (want_xl)
        for (int b = 2; b >= (o.quick ? 2 : 1); b--) {
            row *r = &rows[nr++];
            memset(r, 0, sizeof *r);
            snprintf(r->name, sizeof r->name, "SDXL UNet step f32 %dx%d, batch %d%s", xl->size,
                     xl->size, b, b == 2 ? " (one CFG step)" : "");
            r->job = (sd_bench_job){SD_BENCH_UNET, ckpt_xl, o.threads, xl_repeat, b, 0, 0,
                                    xl->size, o.weights, o.device};
            r->torch_na = "torch_ref.py has no SDXL UNet (linear proj_in, label_emb, "
                          "64-channel heads not written)";
        }

    /* The Flux block stack from fp8 weights: f32, then bf16 compute (the
     * issue's comparison: PyTorch in bf16 from bf16 weights). One repeat
     * unless --repeat says otherwise (a forward is ~1.5 TFLOP). */
    if (want_flux)
        for (int bf = 0; bf < 2; bf++) {
            row *r = &rows[nr++];
            memset(r, 0, sizeof *r);
            snprintf(r->name, sizeof r->name, "Flux 2+2 blocks (3072, fp8 weights) %s",
                     bf ? "bf16" : "f32");
            r->job = (sd_bench_job){SD_BENCH_FLUX, ckpt_fx, o.threads, o.repeat_set ? o.repeat : 1,
                                    1, bf, 0, fx->size, o.weights, o.device};
            r->torch_kind = 1;
        }

    for (int i = 0; i < nr; i++) {
        row *r = &rows[i];
        fprintf(stderr, "sdflow-bench: %s ...\n", r->name);
        sd_bench_run_forked(&r->job, &r->ours);
        if (!r->ours.ok && !r->ours.na)
            fprintf(stderr, "sdflow-bench:   ours failed: %s\n", r->ours.msg);
        else if (r->ours.ok)
            fprintf(stderr, "sdflow-bench:   ours %.3f s (load %.1f s)\n",
                    sd_bench_median(r->ours.secs, r->ours.n), r->ours.load_s);
        if (r->torch_kind && tv[0]) {
            run_torch(&o, r->job.ckpt, r, &r->torch);
            if (r->torch.ok)
                fprintf(stderr, "sdflow-bench:   torch %.3f s (load %.1f s)\n",
                        sd_bench_median(r->torch.secs, r->torch.n), r->torch.load_s);
            else
                fprintf(stderr, "sdflow-bench:   torch %s: %s\n", r->torch.na ? "n/a" : "failed",
                        r->torch.msg);
        }
    }

    /* ---- the table (markdown, so it can be pasted into docs/performance.md) ---- */
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("\n## sdflow-bench %s, %s\n\n", want_main ? preset->name : want_xl ? xl->name : fx->name,
           date);
    printf("- machine: %s, %d cores online, flags: %s\n", model, cores, flags[0] ? flags : "-");
    printf("- device: %s\n", o.device ? o.device : "cpu");
    printf("- threads: %d; repeats per figure: %d (median)%s%s; build: %s\n",
           o.threads, want_main ? o.repeat : xl_repeat,
           want_main && want_xl && xl_repeat != o.repeat ? ", SDXL UNet rows 1" : "",
           !o.quick ? "" : want_xl ? "; --quick (SDXL: batch 2 only)" : "; --quick",
           SDFLOW_BENCH_BUILD);
    int held = -1;
    for (int i = 0; i < nr && held < 0; i++) held = rows[i].ours.unet_wdtype;
    if (want_main || want_xl)
    printf("- checkpoint: %s (random weights, F16 on disk); weights requested %s, UNet weights "
           "held as %s\n", want_main ? ckpt : ckpt_xl,
           o.weights == SD_F16 ? "F16" : "F32 (the loader's default)",
           held >= 0 ? sd_dtype_name((sd_dtype)held) : "?");
    if (want_main && want_xl) printf("- SDXL checkpoint: %s\n", ckpt_xl);
    if (want_flux)
        printf("- Flux checkpoint: %s (hidden 3072, 24 heads, 2 double + 2 single blocks; "
               "matrices F8_E4M3, PyTorch decodes them to its dtype); 1024 image + 512 text "
               "tokens, 1 repeat unless --repeat\n", ckpt_fx);
    printf("- PyTorch: %s\n\n", tv[0] ? tv : o.no_torch ? "skipped (--no-torch)"
                                                         : "not available (apt-get install python3-torch)");
    printf("| phase | seconds (median) | min | GFLOP/s | PyTorch s | ratio (PyTorch/ours) | peak RSS | PyTorch peak RSS | load s |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nr; i++) {
        row *r = &rows[i];
        char s[32], mn[32] = "-", gf[32] = "-", ts[32] = "-", ratio[32] = "-", pk[32], tpk[32] = "-",
             ld[32] = "-";
        fmt_secs(s, sizeof s, &r->ours);
        double med = r->ours.ok ? sd_bench_median(r->ours.secs, r->ours.n) : 0;
        if (r->ours.ok && r->job.kind == SD_BENCH_TXT2IMG && r->ours.steps_run < FULL_STEPS) {
            /* sampling cost is linear in steps: scale that part only */
            med += r->ours.extra_s * ((double)FULL_STEPS / r->ours.steps_run - 1.0);
            snprintf(s, sizeof s, "%.1f (ran %d steps: %.1f)", med, r->ours.steps_run,
                     sd_bench_median(r->ours.secs, r->ours.n));
        }
        int scaled = r->ours.ok && r->job.kind == SD_BENCH_TXT2IMG && r->ours.steps_run < FULL_STEPS;
        if (r->ours.ok && !scaled) {
            double m = r->ours.secs[0];
            for (int k = 1; k < r->ours.n; k++) m = r->ours.secs[k] < m ? r->ours.secs[k] : m;
            snprintf(mn, sizeof mn, "%.3f", m);
            if (r->ours.flops > 0) snprintf(gf, sizeof gf, "%.1f", r->ours.flops / med * 1e-9);
        }
        if (r->ours.ok) snprintf(ld, sizeof ld, "%.1f", r->ours.load_s);
        if (r->ours.ok || r->ours.na) fmt_gib(pk, sizeof pk, r->ours.na ? 0 : r->ours.peak_kb);
        else snprintf(pk, sizeof pk, "-");
        if (r->torch_na) snprintf(ts, sizeof ts, "n/a");
        if (r->torch_kind && tv[0]) {
            fmt_secs(ts, sizeof ts, &r->torch);
            if (r->torch.ok) fmt_gib(tpk, sizeof tpk, r->torch.peak_kb);
            if (r->torch.ok && r->ours.ok)
                snprintf(ratio, sizeof ratio, "%.2f", sd_bench_median(r->torch.secs, r->torch.n) / med);
        }
        printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r->name, s, mn, gf, ts, ratio, pk,
               tpk, ld);
    }
    /* Process CPU seconds (all threads) where measured: on a shared machine
     * the wall time depends on how many cores each side got; the CPU time
     * is the work done, so its ratio is the comparison that survives load
     * (spinning threads and cache contention still inflate it somewhat). */
    int cpu_rows = 0;
    for (int i = 0; i < nr; i++) {
        const row *r = &rows[i];
        if (!r->ours.ok || !r->ours.ncpu) continue;
        double oc = sd_bench_median(r->ours.cpu, r->ours.ncpu);
        printf("%s- by CPU time (process, all threads, median): %s: ours %.1f CPU s (%.1f GFLOP "
               "per CPU s)", cpu_rows++ ? "" : "\n", r->name, oc,
               r->ours.flops > 0 && oc > 0 ? r->ours.flops / oc * 1e-9 : 0.0);
        if (r->torch.ok && r->torch.ncpu) {
            double tc = sd_bench_median(r->torch.cpu, r->torch.ncpu);
            printf(", PyTorch %.1f CPU s, ratio %.2f", tc, oc > 0 ? tc / oc : 0.0);
        }
        printf("\n");
    }
    int notes = 0;
    for (int i = 0; i < nr; i++) {
        const row *r = &rows[i];
        if (!r->ours.ok && r->ours.msg[0])
            printf("%s- %s, ours: %s\n", notes++ ? "" : "\n", r->name, r->ours.msg);
        if (r->torch_na) printf("%s- %s, PyTorch: n/a, %s\n", notes++ ? "" : "\n", r->name, r->torch_na);
        if (r->torch_kind && tv[0] && !r->torch.ok && r->torch.msg[0])
            printf("%s- %s, PyTorch: %s\n", notes++ ? "" : "\n", r->name, r->torch.msg);
    }
    int failed = 0;
    for (int i = 0; i < nr; i++) failed |= !rows[i].ours.ok && !rows[i].ours.na;
    return failed ? 1 : 0;
}
