/* cmd_run.c - `sdflow run`: load a workflow (API or UI JSON, or the one a
 * PNG/WebP carries), apply --set, validate, run with progress, write the
 * report. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "cache/cache.h"
#include "cli.h"
#include "core/env.h"
#include "core/graph.h"
#include "core/json_util.h"
#include "core/text.h"
#include "formats/workflow_file.h"
#include "kernels/backend.h"
#include "models/checkpoint/checkpoint.h"
#include "lua/sdlua.h"

/* ---- Ctrl-C -------------------------------------------------------------------
 * The only process-wide mutable state: what the SIGINT handler touches. The
 * first Ctrl-C sets the flag (the Lua budget hook, the executor and the
 * nodes' progress checks stop there), the second exits at once.
 *
 * The handler runs on a thread of its own that sleeps in sigsuspend(); every
 * other thread blocks SIGINT. Two races made a second Ctrl-C look like the
 * first on a loaded machine:
 *  - a signal is delivered only when the thread it was given to runs; a
 *    busy main thread (or worker) can wait tens of milliseconds for a CPU,
 *    and a second SIGINT sent meanwhile merges with the pending first one
 *    (standard signals do not queue). A sleeping thread is woken as the
 *    signal arrives, so the first is taken before a second can merge with it.
 *  - the handler could run on two threads at once (one per signal), each
 *    reading the flag as 0; the flag is now swapped atomically, and only the
 *    one thread takes SIGINT anyway. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    if (__atomic_exchange_n(&interrupted, 1, __ATOMIC_SEQ_CST)) _exit(130); /* second Ctrl-C: leave now */
    static const char msg[] = "\ninterrupting after the current step (Ctrl-C again to quit now)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
}

static void *sigint_thread(void *arg) {
    (void)arg;
    sigset_t none;
    sigemptyset(&none);
    for (;;) sigsuspend(&none); /* SIGINT is unblocked only while this thread waits here */
    return NULL;
}

static pthread_once_t sigint_once = PTHREAD_ONCE_INIT;

/* Installs the handler before any other work (loading a workflow, a Lua
 * script, hashing models), so Ctrl-C works in every phase: a shell starts
 * background commands with SIGINT ignored, and before this the handler came
 * only after the workflow was loaded. Threads created later (the compute
 * pool) inherit the blocked mask. */
static void sigint_setup(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART; /* should the handler run on a busy thread: no EINTR there */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    pthread_t t;
    pthread_attr_t attr;
    int ok = pthread_attr_init(&attr) == 0;
    if (ok) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* default stack size: a small one cannot hold the static TLS of the
         * CUDA libraries a CUDA build loads (server/thread_stack.c) */
        ok = pthread_create(&t, &attr, sigint_thread, NULL) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!ok) pthread_sigmask(SIG_SETMASK, &old, NULL); /* no thread: the handler runs where it lands */
}

static void cli_log(void *user, int level, const char *msg) {
    sd_cli_progress *prog = user;
    int quiet = prog->mode == SD_CLI_PROGRESS_NONE || prog->mode == SD_CLI_PROGRESS_JSON;
    if (prog->out == stderr && (level <= SD_LOG_WARN || (level == SD_LOG_INFO && !quiet)))
        sd_cli_progress_break(prog); /* the progress line is redrawn after the message */
    char safe[8192]; /* messages name nodes and files of the workflow: no raw control sequences */
    sd_text_escape(msg, 1, safe, sizeof safe);
    if (level <= SD_LOG_WARN) fprintf(stderr, "%s: %s\n", level == SD_LOG_ERROR ? "error" : "warning", safe);
    else if (level == SD_LOG_INFO && !quiet) fprintf(stderr, "%s\n", safe);
    else if (level == SD_LOG_DEBUG && getenv("SDFLOW_DEBUG")) fprintf(stderr, "debug: %s\n", safe);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

/* Extra PNG text chunks to carry along, as ComfyUI does: the UI workflow
 * (of a picture, or the UI-format file itself), or extra_data.extra_pnginfo
 * of a /prompt request body. */
static char *extra_pnginfo_of(const sd_workflow_file *wf) {
    cJSON *root = NULL; /* exact: the UI workflow's widget values hold seeds */
    if (wf->ui_workflow) {
        if (sd_json_parse_exact(wf->ui_workflow, "workflow", &root, NULL)) return NULL;
        cJSON *o = cJSON_CreateObject();
        if (!o) { cJSON_Delete(root); return NULL; }
        cJSON_AddItemToObject(o, "workflow", root);
        char *s = sd_json_print(o, 0);
        cJSON_Delete(o);
        return s;
    }
    if (sd_json_parse_exact(wf->text, "workflow", &root, NULL)) root = NULL;
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(root, "extra_data");
    const cJSON *info = cJSON_GetObjectItemCaseSensitive(extra, "extra_pnginfo");
    char *s = cJSON_IsObject(info) ? sd_json_print(info, 0) : NULL;
    cJSON_Delete(root);
    return s;
}

/* JSON (API or UI form), a picture's embedded workflow (formats/workflow_file.h)
 * or a Lua script. */
static sd_status load_workflow(const char *path, sd_graph **g, char **text, char **extra,
                               const sd_cli_args *o, sd_error *err) {
    *g = NULL;
    *text = NULL;
    *extra = NULL;
    if (ends_with(path, ".lua")) { /* lua/sdlua.h: stops on Ctrl-C and at its budget */
        sd_lua_opts lo;
        sd_status rc = sd_cli_lua_opts(o, &interrupted, &lo, err);
        return rc ? rc : sd_lua_load_graph(path, &lo, g, err);
    }
    sd_workflow_file wf;
    sd_status rc = sd_workflow_file_read_ex(path, &interrupted, &wf, err); /* stdin: Ctrl-C stops the wait */
    if (rc) return rc;
    rc = sd_graph_from_json(wf.text, strcmp(path, "-") ? path : "<stdin>", g, err);
    if (!rc) *extra = extra_pnginfo_of(&wf);
    *text = wf.text;
    wf.text = NULL;
    sd_workflow_file_free(&wf);
    return rc;
}

static const char run_about[] =
    "Runs a ComfyUI workflow: a .json file in the API or the UI (\"Save\") format (\"-\" reads stdin),\n"
    "the workflow of a PNG or WebP saved by ComfyUI or sdflow (its \"prompt\", else its \"workflow\"),\n"
    "a Lua workflow (.lua) or a recipe (.json with file hashes; docs/lua.md). Only what the output nodes need runs; results come from the cache when their\n"
    "inputs did not change. The written files are printed on stdout, progress on stderr.";

/* The report, plus the validation problems and the error when there are any. */
static void write_report(const char *path, const sd_env *env, const sd_exec_report *rep,
                         const sd_graph_problems *probs, sd_status rc, const sd_error *err) {
    char *json = sd_exec_report_json(rep);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    free(json);
    if (!root) { fprintf(stderr, "warning: could not build the report\n"); return; }
    cJSON_AddStringToObject(root, "status", rc == SD_OK ? "success" : rc == SD_ERR_CANCELLED ? "cancelled" : "error");
    /* what computed it: --device (or the default picked: cuda when a GPU
     * is present) and the precisions */
    if (env->device) cJSON_AddStringToObject(root, "device", env->device);
    if (env->precision) cJSON_AddStringToObject(root, "precision", env->precision);
    if (env->vae_precision) cJSON_AddStringToObject(root, "vae_precision", env->vae_precision);
    if (env->clip_precision) cJSON_AddStringToObject(root, "clip_precision", env->clip_precision);
    if (rc) {
        char buf[SD_ERR_MSG_MAX + 512];
        cJSON *e = cJSON_AddObjectToObject(root, "error");
        cJSON_AddStringToObject(e, "type", sd_status_name(rc));
        cJSON_AddStringToObject(e, "message", sd_error_format(err, buf, sizeof buf));
        if (err->node_id[0]) cJSON_AddStringToObject(e, "node_id", err->node_id);
        if (err->class_type[0]) cJSON_AddStringToObject(e, "class_type", err->class_type);
        if (err->input[0]) cJSON_AddStringToObject(e, "input", err->input);
    }
    if (probs && probs->n) {
        cJSON *arr = cJSON_AddArrayToObject(root, "problems");
        for (size_t i = 0; i < probs->n; i++) {
            const sd_graph_problem *q = &probs->items[i];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(arr, o);
            cJSON_AddStringToObject(o, "type", q->kind);
            cJSON_AddStringToObject(o, "message", q->message);
            if (q->node_id) cJSON_AddStringToObject(o, "node_id", q->node_id);
            if (q->class_type) cJSON_AddStringToObject(o, "class_type", q->class_type);
            if (q->input) cJSON_AddStringToObject(o, "input", q->input);
        }
    }
    char *text = sd_json_print(root, 1);
    cJSON_Delete(root);
    FILE *f = text ? fopen(path, "w") : NULL;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) == EOF) fprintf(stderr, "warning: cannot write report '%s'\n", path);
    if (f && fclose(f) != 0) fprintf(stderr, "warning: cannot write report '%s'\n", path);
    free(text);
}

/* Ids, class types, input names and messages come from the workflow: each
 * is escaped (core/text.h) so that none can drive the terminal. */
static void print_problems(const sd_graph_problems *p) {
    char id[512], ct[512], in[512], msg[8192];
    for (size_t i = 0; i < p->n; i++) {
        const sd_graph_problem *q = &p->items[i];
        sd_text_escape(q->message, 0, msg, sizeof msg);
        if (q->node_id) {
            fprintf(stderr, "error: node %s (%s)", sd_text_escape(q->node_id, 0, id, sizeof id),
                    q->class_type ? sd_text_escape(q->class_type, 0, ct, sizeof ct) : "?");
            if (q->input) fprintf(stderr, " input '%s'", sd_text_escape(q->input, 0, in, sizeof in));
            fprintf(stderr, ": %s: %s\n", q->kind, msg);
        } else {
            fprintf(stderr, "error: %s: %s\n", q->kind, msg);
        }
    }
    fprintf(stderr, "workflow failed validation: %zu problem%s, nothing was run\n", p->n, p->n == 1 ? "" : "s");
}

int sd_cli_run(int argc, char **argv) {
    const char *report = NULL, *dump = NULL, *lock = NULL;
    int relock = 0;
    const sd_cli_option own[] = {
        {"--report", NULL, SD_CLI_STR, &report, "FILE.json", "write what ran, what hit the cache and timings", NULL},
        {"--dump", NULL, SD_CLI_STR, &dump, "DIR", "save every output tensor as DIR/<id>_<n>.safetensors", NULL},
        {"--lock", NULL, SD_CLI_STR, &lock, "RECIPE.json", "after the run, write a recipe (workflow + file hashes)",
         NULL},
        {"--relock", NULL, SD_CLI_FLAG, &relock, NULL, "accept changed files and rewrite the recipe being run", NULL},
        {0}};
    const sd_cli_command cmd = {"run", "WORKFLOW.json|PICTURE.png|PICTURE.webp|WORKFLOW.lua|- [options]", run_about,
                                SD_CLI_G_ENV | SD_CLI_G_SET | SD_CLI_G_CACHE | SD_CLI_G_PROGRESS | SD_CLI_G_LUA,
                                own, 1, 1};
    sd_cli_args o;
    int pc = sd_cli_parse(&cmd, argc, argv, &o);
    if (pc != SD_CLI_CONTINUE) { sd_cli_args_free(&o); return pc; }
    sd_cli_run_job job = {.workflow = o.pos[0], .report = report, .dump = dump, .lock = lock, .relock = relock};
    int code = sd_cli_run_job_exec(&o, &job);
    sd_cli_args_free(&o);
    return code;
}

/* The progress printer first, then the job's observer (sdflow-bench). */
typedef struct run_events {
    sd_cli_progress *prog;
    const sd_cli_run_job *job;
} run_events;

static void run_event(void *user, const sd_exec_event *ev) {
    const run_events *re = user;
    sd_cli_progress_event(re->prog, ev);
    re->job->observe(re->job->observe_user, ev);
}

int sd_cli_run_job_exec(const sd_cli_args *a, const sd_cli_run_job *job) {
    const sd_cli_args o = *a; /* a shallow copy: the lists stay the caller's */
    const char *workflow = job->workflow, *report = job->report, *dump = job->dump;
    if (job->files) *job->files = NULL;
    sd_error err;
    sd_error_clear(&err);
    sd_env env;
    sd_graph *g = NULL;
    char *text = NULL, *extra = NULL;
    sd_backend *backend = NULL;
    sd_model_store *models = NULL;
    sd_cache_i cache = {0};
    sd_sqlite_cache *cache_handle = NULL;
    sd_cli_algo_store algos = {0};
    sd_exec *ex = NULL;
    sd_exec_report rep = {0};
    sd_graph_problems probs = {0};
    sd_cli_recipe recipe = {.lock = job->lock, .relock = job->relock};
    int code = 1;
    sd_cli_progress prog;
    sd_cli_progress_init(&prog, &o, STDERR_FILENO);
    prog.interrupt = &interrupted;
    /* the summary line goes with the human progress forms */
    int summary = prog.mode == SD_CLI_PROGRESS_BAR || prog.mode == SD_CLI_PROGRESS_PLAIN;
    sd_cli_preview *preview = NULL;
    pthread_once(&sigint_once, sigint_setup);
    sd_status rc = sd_cli_env_init(&env, &o, &err);
    env.log = cli_log;
    env.log_user = &prog;
    env.on_model_file = job->on_model_file;
    env.model_file_user = job->model_file_user;
    if (!rc && !sd_registry_count()) rc = sd_nodes_register_all(&err); /* generate registered them */
    if (!rc && job->output_dir) rc = sd_env_set(&env, &env.output_dir, job->output_dir, &err);
    if (!rc && job->input_dir) rc = sd_env_set(&env, &env.input_dir, job->input_dir, &err);
    if (!rc && workflow) {
        rc = load_workflow(workflow, &g, &text, &extra, &o, &err);
    } else if (!rc) {
        if (!(text = strdup(job->json))) rc = sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
        else rc = sd_graph_from_json(text, job->json_name ? job->json_name : "<workflow>", &g, &err);
    }
    if (!rc) rc = sd_cli_apply_sets(g, &o, &err);
    if (!rc) { /* leftover nodes no output needs neither run nor stop the run, as in ComfyUI */
        size_t dropped = 0;
        char ids[600], msg[700];
        rc = sd_graph_drop_unused(g, &dropped, ids, sizeof ids, &err);
        if (!rc && dropped) {
            snprintf(msg, sizeof msg, "%zu node%s no output needs left out: %s", dropped,
                     dropped == 1 ? "" : "s", ids);
            cli_log(&prog, SD_LOG_INFO, msg);
        }
    }
    if (!rc) {
        rc = sd_cli_backend_open_threads(&env, job->threads, &backend, &err);
        if (!rc) {
            env.backend = backend;
            /* Two loaders of one file share the loaded weights. One run
             * needs no model after its last user: the text encoder is freed
             * before the UNet runs, the UNet before the VAE decodes. */
            if (!(models = sd_model_store_new())) rc = sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
            sd_model_store_free_unused(models, 1);
            env.models = models;
        }
    }
    if (!rc && o.preview) {
        if (!(preview = sd_cli_preview_new(o.preview, &env))) rc = sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
        prog.preview = preview;
        prog.preview_path = o.preview;
    }
    /* A Ctrl-C during the steps before the run (a Lua script, loading,
     * hashing for a recipe) stops there: each step that cannot notice it
     * itself is followed by a check. */
    if (!rc && interrupted) rc = sd_error_set(&err, SD_ERR_CANCELLED, "interrupted before the run started");
    if (rc) {
        if (rc == SD_ERR_CANCELLED) fprintf(stderr, "interrupted\n");
        else sd_cli_print_error(&err);
        goto done;
    }
    sd_cli_cache_setup(&o, &cache_handle, &cache);
    sd_cli_algo_store_attach(&algos, backend, cache_handle);
    /* Recipes: verify the hashes a recipe (or PNG) carries, hash for --lock,
     * and embed them in saved PNGs (cli/cmd_lua.c). */
    if (workflow)
        rc = sd_cli_recipe_before(&recipe, workflow, text, g, &env, cache_handle ? &cache : NULL, &extra, &err);
    if (!rc && interrupted) rc = sd_error_set(&err, SD_ERR_CANCELLED, "interrupted before the run started");
    if (rc) {
        if (rc == SD_ERR_CANCELLED) fprintf(stderr, "interrupted\n");
        else sd_cli_print_error(&err);
        goto done;
    }

    run_events events = {&prog, job};
    sd_exec_opts xo = {
        .env = &env,
        .cache = cache_handle ? &cache : NULL,
        .interrupt = &interrupted,
        .on_event = job->observe ? run_event : sd_cli_progress_event,
        .on_event_user = job->observe ? (void *)&events : (void *)&prog,
        .previews = preview != NULL,
        .dump_dir = dump,
        .prompt_json = NULL, /* derived from the graph as edited by --set */
        .extra_pnginfo_json = extra,
        .release_consumed = 1, /* one shot: values go after their last reader */
    };
    ex = sd_exec_new();
    if (!ex) {
        rc = sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
        sd_cli_print_error(&err);
        goto done;
    }
    rc = sd_exec_run(ex, g, &xo, &rep, &probs, &err);
    if (prog.line_open) fputc('\n', stderr);
    if (rc == SD_ERR_VALIDATION && probs.n) print_problems(&probs);
    else if (rc == SD_ERR_CANCELLED) fprintf(stderr, "interrupted\n");
    else if (rc) sd_cli_print_error(&err);
    if (summary && rc != SD_ERR_VALIDATION)
        fprintf(stderr, "%s: %zu executed, %zu cached, %.1fs\n", rc ? "stopped" : "done", rep.n_executed,
                rep.n_cached, rep.seconds);
    /* The files output nodes wrote (or still have from a cached run), on
     * stdout so that scripts can pick them up. */
    sd_value *written = job->files ? sd_value_list() : NULL;
    for (size_t i = 0; i < rep.n; i++) {
        const sd_value *files = sd_value_dict_get(rep.items[i].ui, "files");
        for (size_t k = 0; k < sd_value_list_len(files); k++) {
            const sd_value *f = sd_value_list_get(files, k);
            const char *path = sd_value_as_string(f);
            if (!path) continue;
            if (prog.mode != SD_CLI_PROGRESS_JSON && !job->quiet_files) printf("%s\n", path);
            if (written && sd_value_list_append(written, sd_value_ref((sd_value *)f))) {
                sd_value_unref(written);
                written = NULL;
                if (!rc) rc = sd_error_set(&err, SD_ERR_NOMEM, "out of memory");
            }
        }
    }
    if (job->files) *job->files = written;
    fflush(stdout);
    if (!rc && workflow && (rc = sd_cli_recipe_after(&recipe, g, &err))) sd_cli_print_error(&err);

done:
    code = rc == SD_OK ? 0 : rc == SD_ERR_CANCELLED ? 130 : 1;
    /* Written on every outcome, so a script always finds one. */
    if (report) write_report(report, &env, &rep, &probs, rc, &err);
    sd_exec_report_free(&rep);
    sd_graph_problems_free(&probs);
    sd_exec_free(ex);
    sd_cli_algo_store_detach(&algos, backend);
    sd_cache_close(cache_handle);
    sd_model_store_free(models); /* before the backend its weights live on */
    sd_cli_preview_free(preview); /* its TAESD lives on the backend too */
    sd_backend_free(backend);
    sd_graph_free(g);
    free(text);
    free(extra);
    sd_cli_recipe_free(&recipe);
    sd_env_cleanup(&env); /* safe after a failed init: it leaves the env zeroed */
    return code;
}
