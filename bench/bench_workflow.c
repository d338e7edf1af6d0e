/* bench_workflow.c - the workflow phase: any workflow `sdflow run` accepts
 * (API or UI JSON, a PNG/WebP's, Lua), run by `sdflow run`'s own code
 * (cli.h: sd_cli_run_job_exec, the function the command calls) in a forked
 * child per repeat, so that the child's VmHWM is that run's peak RSS, load
 * included. What the child measures comes back over a pipe as one
 * fixed-size struct: the wall time of the whole run (workflow load, file
 * hashing, validation, every node), each node's time and sampler steps from
 * the executor's events, and the model files the loaders opened
 * (env.on_model_file, core/node.h), whose sizes give issue 21's criterion
 * "peak RSS <= the model files + 3 GiB".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "core/text.h"
#include "kernels/backend.h"

#define WF_MAX_NODES 512
#define WF_MAX_FILES 64
#define GIB (1024.0 * 1024.0 * 1024.0)

typedef struct wf_node {
    char id[64], class_type[96];
    int executed;          /* 1: ran (NODE_DONE); 0: cached, failed or skipped */
    int failed;            /* NODE_ERROR */
    double secs;           /* NODE_DONE/ERROR seconds */
    long rss_kb, hwm_kb;   /* VmRSS and VmHWM as the node ended */
    int64_t steps;         /* the last NODE_STEP's total, 0 when none came */
    int64_t step_first, step_last;
    double t_first, t_last; /* seconds since the node started, at those steps */
} wf_node;

typedef struct wf_file {
    char folder[32];
    char path[1024];
    int64_t bytes;
} wf_file;

/* One run, as the child reports it. */
typedef struct wf_run {
    int exit_code;         /* sd_cli_run_job_exec's: 0, 1, 130 */
    double wall_s;         /* the whole sd_cli_run_job_exec call */
    double run_s;          /* the executor's RUN_DONE seconds */
    long peak_kb;          /* VmHWM at the end of the run */
    size_t n_executed, n_cached;
    int n_nodes, nodes_left_out;
    wf_node nodes[WF_MAX_NODES];
    int n_files, files_left_out;
    wf_file files[WF_MAX_FILES];
    int64_t files_bytes;   /* sum over distinct files (device, inode) */
    char msg[512];         /* the run's error, when it failed */
} wf_run;

/* A file the child has counted (device, inode). */
typedef struct wf_seen {
    uint64_t dev, ino;
} wf_seen;

typedef struct wf_child {
    const sd_bench_wf_opts *o;
    wf_run *r;
    double t0;
    /* every distinct file counted so far, however many: wf_run's list,
     * which goes back to the parent, names only the first WF_MAX_FILES */
    wf_seen *seen;
    int n_seen, cap_seen;
} wf_child;

static void rss_kb(long *now, long *peak)
{
    *now = *peak = -1;
    FILE *fp = fopen("/proc/self/status", "r");
    if (!fp) return;
    char line[256];
    while (fgets(line, sizeof line, fp)) {
        sscanf(line, "VmRSS: %ld kB", now);
        sscanf(line, "VmHWM: %ld kB", peak);
    }
    fclose(fp);
}

static wf_node *node_of(wf_run *r, const sd_exec_event *ev)
{
    if (!ev->node_id) return NULL;
    for (int i = r->n_nodes - 1; i >= 0; i--)
        if (!strcmp(r->nodes[i].id, ev->node_id)) return &r->nodes[i];
    if (r->n_nodes == WF_MAX_NODES) {
        r->nodes_left_out++;
        return NULL;
    }
    wf_node *n = &r->nodes[r->n_nodes++];
    snprintf(n->id, sizeof n->id, "%s", ev->node_id);
    snprintf(n->class_type, sizeof n->class_type, "%s", ev->class_type ? ev->class_type : "?");
    return n;
}

/* The executor's events, after sdflow run's progress printer has shown
 * them: node times and steps for the report, and start/end lines with the
 * resident set on stderr (a real-size run takes an hour). */
static void wf_observe(void *user, const sd_exec_event *ev)
{
    wf_child *c = user;
    wf_run *r = c->r;
    char id[128], ct[192];
    long now = 0, peak = 0;
    switch (ev->kind) {
    case SD_EXEC_NODE_START:
        node_of(r, ev);
        rss_kb(&now, &peak);
        fprintf(stderr, "sdflow-bench: [%.1f s] node %s (%s) %zu/%zu started, RSS %.2f GiB\n",
                sd_bench_now() - c->t0, sd_text_escape(ev->node_id, 0, id, sizeof id),
                sd_text_escape(ev->class_type ? ev->class_type : "?", 0, ct, sizeof ct), ev->index,
                ev->count, now * 1024.0 / GIB);
        break;
    case SD_EXEC_NODE_STEP: {
        wf_node *n = node_of(r, ev);
        if (!n || ev->steps <= 0) break;
        if (n->step_first <= 0) {
            n->step_first = ev->step;
            n->t_first = ev->seconds;
        }
        n->step_last = ev->step;
        n->t_last = ev->seconds;
        n->steps = ev->steps;
        break;
    }
    case SD_EXEC_NODE_DONE:
    case SD_EXEC_NODE_ERROR: {
        wf_node *n = node_of(r, ev);
        rss_kb(&now, &peak);
        if (n) {
            n->secs = ev->seconds;
            n->executed = ev->kind == SD_EXEC_NODE_DONE && !(ev->record && ev->record->delivered);
            n->failed = ev->kind == SD_EXEC_NODE_ERROR;
            n->rss_kb = now;
            n->hwm_kb = peak;
        }
        fprintf(stderr, "sdflow-bench: [%.1f s] node %s (%s) %s after %.1f s, RSS %.2f GiB, peak %.2f GiB\n",
                sd_bench_now() - c->t0, sd_text_escape(ev->node_id, 0, id, sizeof id),
                sd_text_escape(ev->class_type ? ev->class_type : "?", 0, ct, sizeof ct),
                ev->kind == SD_EXEC_NODE_DONE ? "done" : "FAILED", ev->seconds, now * 1024.0 / GIB,
                peak * 1024.0 / GIB);
        break;
    }
    case SD_EXEC_NODE_CACHED:
        node_of(r, ev);
        break;
    case SD_EXEC_RUN_DONE:
        r->run_s = ev->seconds;
        r->n_executed = ev->n_executed;
        r->n_cached = ev->n_cached;
        if (ev->status && ev->error) {
            char buf[SD_ERR_MSG_MAX + 512];
            snprintf(r->msg, sizeof r->msg, "%s", sd_error_format(ev->error, buf, sizeof buf));
        }
        break;
    default:
        break;
    }
}

/* env.on_model_file: each distinct file once (a file two loaders share, or
 * one resolved again, is the same device and inode). A file the child cannot
 * remember (out of memory) is not counted: the total may then fall short,
 * never count a file twice. */
static void wf_model_file(void *user, const char *folder, const char *path)
{
    wf_child *c = user;
    wf_run *r = c->r;
    struct stat st;
    if (stat(path, &st) != 0) return;
    for (int i = 0; i < c->n_seen; i++)
        if (c->seen[i].dev == (uint64_t)st.st_dev && c->seen[i].ino == (uint64_t)st.st_ino) return;
    if (c->n_seen == c->cap_seen) {
        int cap = c->cap_seen ? 2 * c->cap_seen : 64;
        wf_seen *v = realloc(c->seen, (size_t)cap * sizeof *v);
        if (!v) return;
        c->seen = v;
        c->cap_seen = cap;
    }
    c->seen[c->n_seen++] = (wf_seen){(uint64_t)st.st_dev, (uint64_t)st.st_ino};
    r->files_bytes += (int64_t)st.st_size;
    /* on stderr too: a child killed for memory reports nothing else */
    fprintf(stderr, "sdflow-bench: [%.1f s] model file %s (%s, %.2f GiB; %.2f GiB opened so far)\n",
            sd_bench_now() - c->t0, path, folder ? folder : "?", st.st_size / GIB, r->files_bytes / GIB);
    if (r->n_files == WF_MAX_FILES) {
        r->files_left_out++;
        return;
    }
    wf_file *f = &r->files[r->n_files++];
    snprintf(f->folder, sizeof f->folder, "%s", folder ? folder : "?");
    snprintf(f->path, sizeof f->path, "%s", path);
    f->bytes = (int64_t)st.st_size;
}

/* In the child: one `sdflow run` of the workflow, with the bench's options
 * as that command's. No persistent cache (--no-cache: every node runs; the
 * file-hash memo stays, as with sdflow run --no-cache). */
static void wf_child_run(const void *arg, void *out)
{
    const sd_bench_wf_opts *o = arg;
    wf_run *r = out;
    wf_child c = {o, r, sd_bench_now(), NULL, 0, 0};
    sd_cli_args a;
    memset(&a, 0, sizeof a);
    a.models_dir = o->models_dir;
    a.tokenizer_dir = o->tokenizer_dir;
    a.comfyui_dir = o->comfyui_dir;
    a.input_dir = o->input_dir;
    a.precision = o->precision;
    a.vae_precision = o->vae_precision;
    a.clip_precision = o->clip_precision;
    a.device = o->device;
    a.max_memory = o->max_memory;
    a.sets.items = (const char **)o->sets;
    a.sets.n = o->n_sets;
    a.no_cache = 1;
    a.progress = "plain";
    sd_cli_run_job job = {
        .workflow = o->workflow,
        .output_dir = o->output_dir,
        .quiet_files = 1,
        .threads = o->threads,
        .observe = wf_observe,
        .observe_user = &c,
        .on_model_file = wf_model_file,
        .model_file_user = &c,
    };
    r->exit_code = sd_cli_run_job_exec(&a, &job);
    free(c.seen);
    r->wall_s = sd_bench_now() - c.t0;
    r->peak_kb = sd_bench_peak_kb();
    if (r->exit_code && !r->msg[0])
        snprintf(r->msg, sizeof r->msg, "the run stopped with exit code %d (its error is on stderr above)",
                 r->exit_code);
}

static int cmp_secs(const void *a, const void *b)
{
    const wf_run *x = *(wf_run *const *)a, *y = *(wf_run *const *)b;
    return (x->wall_s > y->wall_s) - (x->wall_s < y->wall_s);
}

static void fmt_gib(char *b, size_t n, double bytes)
{
    snprintf(b, n, "%.2f GiB", bytes / GIB);
}

/* Steps per second between the first and the last step event (the time
 * before the first step, model patching and the like, left out); with one
 * step event only, that step over the node's time. */
static int step_rate(const wf_node *n, char *b, size_t len)
{
    if (n->steps <= 1 || n->step_last <= 0) return 0; /* one "step": a node's progress, not a sampler's */
    double rate;
    if (n->step_last > n->step_first && n->t_last > n->t_first)
        rate = (double)(n->step_last - n->step_first) / (n->t_last - n->t_first);
    else if (n->secs > 0)
        rate = (double)n->step_last / n->secs;
    else
        return 0;
    snprintf(b, len, "%.3g steps/s (%.2f s/step, %lld steps)", rate, 1.0 / rate, (long long)n->step_last);
    return 1;
}

int sd_bench_workflow(const sd_bench_wf_opts *o, const char *machine, const char *build)
{
    int repeat = o->repeat > 0 ? o->repeat : 1;
    wf_run *runs = calloc((size_t)repeat, sizeof *runs);
    wf_run **order = calloc((size_t)repeat, sizeof *order);
    if (!runs || !order) {
        fprintf(stderr, "sdflow-bench: out of memory\n");
        free(runs);
        free(order);
        return 1;
    }
    int failed = 0, n_ok = 0;
    long peak_max = 0;
    for (int i = 0; i < repeat; i++) {
        wf_run *r = &runs[i];
        fprintf(stderr, "sdflow-bench: workflow %s, run %d of %d ...\n", o->workflow, i + 1, repeat);
        long maxrss = 0;
        char msg[512];
        if (sd_bench_fork(wf_child_run, o, r, sizeof *r, &maxrss, msg, sizeof msg)) {
            r->exit_code = -1;
            snprintf(r->msg, sizeof r->msg, "%s", msg);
        }
        if (r->peak_kb <= 0) r->peak_kb = maxrss;
        if (r->peak_kb > peak_max) peak_max = r->peak_kb;
        if (r->exit_code) {
            failed = 1;
            fprintf(stderr, "sdflow-bench:   failed: %s\n", r->msg);
        } else {
            order[n_ok++] = r;
            fprintf(stderr, "sdflow-bench:   %.1f s, peak RSS %.2f GiB, model files %.2f GiB\n", r->wall_s,
                    r->peak_kb * 1024.0 / GIB, r->files_bytes / GIB);
        }
    }
    qsort(order, (size_t)n_ok, sizeof *order, cmp_secs);
    /* the per-node table and the files come from the median run (the
     * lower middle one of an even count), or the last run when none ran */
    const wf_run *m = n_ok ? order[(n_ok - 1) / 2] : &runs[repeat - 1];
    double secs[SD_BENCH_MAX_REPEAT];
    int ns = 0;
    for (int i = 0; i < n_ok && ns < SD_BENCH_MAX_REPEAT; i++) secs[ns++] = order[i]->wall_s;

    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    const char *base = strrchr(o->workflow, '/');
    base = base ? base + 1 : o->workflow;
    printf("\n## sdflow-bench workflow %s, %s\n\n", base, date);
    printf("- workflow: %s (run as `sdflow run` runs it, --no-cache: every node executes)\n", o->workflow);
    printf("- machine: %s\n", machine);
    printf("- device: %s; threads: %d; precision: %s (vae %s, clip %s); repeats: %d (median); build: %s\n",
           /* (called after the runs: probing a GPU before a fork would
            * leave the children a CUDA context they cannot use) */
           o->device ? o->device : sd_backend_default_name(), o->threads,
           o->precision ? o->precision : "f32", o->vae_precision ? o->vae_precision : "as precision",
           o->clip_precision ? o->clip_precision : "as precision", repeat, build);
    printf("- models dir: %s\n", o->models_dir ? o->models_dir : "(default: SDFLOW_MODELS_DIR or ./models)");
    printf("- model files the loaders opened (%d, %.2f GiB):", m->n_files + m->files_left_out,
           m->files_bytes / GIB);
    for (int i = 0; i < m->n_files; i++) {
        const char *fb = strrchr(m->files[i].path, '/');
        printf("%s %s/%s (%.2f GiB)", i ? "," : "", m->files[i].folder, fb ? fb + 1 : m->files[i].path,
               m->files[i].bytes / GIB);
    }
    if (m->files_left_out) printf(", %d more", m->files_left_out);
    printf("%s\n", m->n_files ? "" : " none");
    printf("- PyTorch: n/a: no PyTorch reference for a whole workflow\n\n");

    /* the sampler: the executed node with the most steps */
    const wf_node *sampler = NULL;
    for (int i = 0; i < m->n_nodes; i++)
        if (m->nodes[i].executed && m->nodes[i].steps > 0 && (!sampler || m->nodes[i].secs > sampler->secs))
            sampler = &m->nodes[i];
    char s[64] = "failed", mn[32] = "-", rs[32] = "-", pk[32] = "-", fs[32] = "-", diff[32] = "-", sr[128] = "-";
    if (n_ok) {
        snprintf(s, sizeof s, "%.1f", sd_bench_median(secs, ns));
        snprintf(mn, sizeof mn, "%.1f", secs[0]);
        snprintf(rs, sizeof rs, "%.1f", m->run_s);
    }
    if (peak_max > 0) fmt_gib(pk, sizeof pk, peak_max * 1024.0);
    if (m->files_bytes > 0) fmt_gib(fs, sizeof fs, (double)m->files_bytes);
    if (peak_max > 0 && m->files_bytes > 0) fmt_gib(diff, sizeof diff, peak_max * 1024.0 - (double)m->files_bytes);
    if (sampler) {
        char rate[96];
        if (step_rate(sampler, rate, sizeof rate)) snprintf(sr, sizeof sr, "%s (node %s)", rate, sampler->id);
    }
    printf("| phase | seconds (median) | min | executor s | peak RSS | model files | peak RSS - files | sampler |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    printf("| workflow %s (%zu nodes executed) | %s | %s | %s | %s | %s | %s | %s |\n", base, m->n_executed, s,
           mn, rs, pk, fs, diff, sr);
    printf("\n");
    /* issue 21: the real FLUX.1 fp8 file must run within its size + 3 GiB */
    if (peak_max > 0 && m->files_bytes > 0) {
        double limit = (double)m->files_bytes + 3.0 * GIB, peak = peak_max * 1024.0;
        printf("- peak RSS <= files + 3 GiB: %s (%.2f GiB %s %.2f GiB + 3 GiB)%s\n", peak <= limit ? "met" : "not met",
               peak / GIB, peak <= limit ? "<=" : ">", m->files_bytes / GIB, failed ? "; a run FAILED" : "");
    } else {
        printf("- peak RSS <= files + 3 GiB: not measured (%s)\n",
               peak_max <= 0                 ? "no peak RSS"
               : !n_ok && m->exit_code == -1 ? "the run's process died before reporting its files: see the "
                                               "model file lines on stderr"
                                             : "no model file was opened");
    }
    if (failed)
        for (int i = 0; i < repeat; i++)
            if (runs[i].exit_code) printf("- run %d failed: %s\n", i + 1, runs[i].msg);

    /* per node: every node at >= 1 % of the run, the rest summed */
    double total = 0;
    for (int i = 0; i < m->n_nodes; i++) total += m->nodes[i].executed ? m->nodes[i].secs : 0;
    printf("\nPer node (%s; seconds of the node itself and its share of the wall time, steps/s between its "
           "first and last step; the "
           "process's RSS as the node ended and its peak so far):\n\n", n_ok > 1 ? "the median run" : "the run");
    printf("| node | class_type | seconds | share | steps | RSS after | peak so far |\n");
    printf("|---|---|---|---|---|---|---|\n");
    int small = 0;
    double small_s = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const wf_node *n = &m->nodes[i];
        if (!n->executed && !n->failed) continue;
        double share = m->wall_s > 0 ? n->secs / m->wall_s : 0;
        if (share < 0.01 && m->wall_s > 0 && !n->failed) {
            small++;
            small_s += n->secs;
            continue;
        }
        char id[128], ct[192], rate[96] = "-", rss[32] = "-", hwm[32] = "-";
        step_rate(n, rate, sizeof rate);
        if (n->rss_kb > 0) fmt_gib(rss, sizeof rss, n->rss_kb * 1024.0);
        if (n->hwm_kb > 0) fmt_gib(hwm, sizeof hwm, n->hwm_kb * 1024.0);
        printf("| %s | %s | %.2f%s | %.1f %% | %s | %s | %s |\n", sd_text_escape(n->id, 0, id, sizeof id),
               sd_text_escape(n->class_type, 0, ct, sizeof ct), n->secs, n->failed ? " (FAILED)" : "",
               100.0 * share, rate, rss, hwm);
    }
    if (small)
        printf("| (%d other node%s, < 1 %% each) | | %.2f | %.1f %% | | | |\n", small, small == 1 ? "" : "s", small_s,
               m->wall_s > 0 ? 100.0 * small_s / m->wall_s : 0.0);
    printf("| (outside the nodes: workflow load, file hashing, validation, setup) | | %.2f | | | | |\n",
           m->wall_s - total);
    if (m->nodes_left_out) printf("\n- %d more nodes not recorded (over %d)\n", m->nodes_left_out, WF_MAX_NODES);
    free(runs);
    free(order);
    return failed ? 1 : 0;
}
