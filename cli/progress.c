/* progress.c - what a run shows while it works, from the executor's events
 * (core/executor.h):
 *   bar    one line per node, redrawn in place: a bar, step k/n, the rate
 *          (s/it, or it/s when faster) and the time left;
 *   plain  finished lines only, no escape codes, and one "step k/n" line at
 *          most every `interval` seconds per node (so a pipe shows a long
 *          sampler moving);
 *   json   one JSON object per line and event, for programs (docs/cli.md);
 *   none   nothing.
 * With --preview the sampler's latent is also written as a picture. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include "core/text.h"
#include "cli.h"
#include "core/json_util.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sd_cli_progress_init(sd_cli_progress *p, const sd_cli_args *a, int fd) {
    memset(p, 0, sizeof *p);
    const char *m = a->progress ? a->progress : "auto";
    if (a->quiet || !strcmp(m, "none")) p->mode = SD_CLI_PROGRESS_NONE;
    else if (!strcmp(m, "json")) p->mode = SD_CLI_PROGRESS_JSON;
    else if (!strcmp(m, "bar")) p->mode = SD_CLI_PROGRESS_BAR;
    else if (!strcmp(m, "plain")) p->mode = SD_CLI_PROGRESS_PLAIN;
    else p->mode = isatty(fd) ? SD_CLI_PROGRESS_BAR : SD_CLI_PROGRESS_PLAIN;
    p->out = p->mode == SD_CLI_PROGRESS_JSON ? stdout : fd == STDOUT_FILENO ? stdout : stderr;
    /* Plain step lines: at most one a second by default; tests set 0 (every
     * step) so that what they check does not depend on the machine's speed. */
    const char *iv = getenv("SDFLOW_PROGRESS_INTERVAL");
    p->interval = iv && *iv ? atof(iv) : 1.0;
    p->preview_interval = p->interval;
}

void sd_cli_progress_break(sd_cli_progress *p) {
    if (!p->line_open) return;
    fputs("\r\033[K", p->out); /* the bar is redrawn by the next event */
    p->line_open = 0;
}

/* Ids and class types come from the workflow: escaped (core/text.h). */
static void head(const sd_exec_event *ev, char *buf, size_t n) {
    char ct[512], id[512];
    snprintf(buf, n, "[%zu/%zu] %s #%s", ev->index, ev->count, sd_text_escape(ev->class_type, 0, ct, sizeof ct),
             sd_text_escape(ev->node_id, 0, id, sizeof id));
}

static void fmt_duration(double s, char *buf, size_t n) {
    if (s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t < 60) snprintf(buf, n, "%lds", t);
    else if (t < 3600) snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

/* Seconds per step so far. The first step's time counts from the node's
 * start (model setup included, as a user waits for it); later ones from the
 * first step, so the rate settles on the sampler's pace. */
static double per_step(sd_cli_progress *p, const sd_exec_event *ev, double t) {
    if (ev->step <= p->first_step || p->first_step <= 0) return ev->step > 0 ? (t - p->node_start) / (double)ev->step : 0;
    return (t - p->first_step_t) / (double)(ev->step - p->first_step);
}

/* " 1.23s/it ETA 14s" */
static void rate_text(sd_cli_progress *p, const sd_exec_event *ev, double t, char *buf, size_t n) {
    double spi = per_step(p, ev, t);
    char eta[32];
    fmt_duration(spi * (double)(ev->steps - ev->step), eta, sizeof eta);
    if (spi <= 0) buf[0] = 0;
    else if (spi >= 1.0) snprintf(buf, n, " %.2fs/it ETA %s", spi, eta);
    else snprintf(buf, n, " %.2fit/s ETA %s", 1.0 / spi, eta);
}

/* ---- json ------------------------------------------------------------------------ */

static void json_files(cJSON *o, const sd_exec_record *rec) {
    const sd_value *files = rec ? sd_value_dict_get(rec->ui, "files") : NULL;
    if (!sd_value_list_len(files)) return;
    cJSON *arr = cJSON_AddArrayToObject(o, "files");
    for (size_t k = 0; k < sd_value_list_len(files); k++) {
        const char *f = sd_value_as_string(sd_value_list_get(files, k));
        if (f) cJSON_AddItemToArray(arr, cJSON_CreateString(f));
    }
}

static const char *run_status(sd_status rc) {
    return rc == SD_OK ? "success" : rc == SD_ERR_CANCELLED ? "cancelled" : rc == SD_ERR_VALIDATION ? "invalid" : "error";
}

static void json_error(cJSON *o, sd_status rc, const sd_error *err) {
    char buf[SD_ERR_MSG_MAX + 512];
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "type", sd_status_name(rc));
    cJSON_AddStringToObject(e, "message", err ? sd_error_format(err, buf, sizeof buf) : sd_status_name(rc));
    if (err && err->input[0]) cJSON_AddStringToObject(e, "input", err->input);
}

static void json_event(sd_cli_progress *p, const sd_exec_event *ev) {
    static const char *const names[] = {"start", "node_start", "step", "preview", "node_done", "cached", "error", "done"};
    if (ev->kind == SD_EXEC_NODE_PREVIEW && !p->preview_written) return; /* only pictures that exist */
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddStringToObject(o, "event", names[ev->kind]);
    if (ev->node_id) {
        cJSON_AddStringToObject(o, "node", ev->node_id);
        cJSON_AddStringToObject(o, "class_type", ev->class_type);
        cJSON_AddNumberToObject(o, "index", (double)ev->index);
    }
    cJSON_AddNumberToObject(o, "count", (double)ev->count);
    switch (ev->kind) {
    case SD_EXEC_NODE_STEP: {
        double spi = per_step(p, ev, now_s());
        cJSON_AddNumberToObject(o, "step", (double)ev->step);
        cJSON_AddNumberToObject(o, "steps", (double)ev->steps);
        cJSON_AddNumberToObject(o, "seconds", ev->seconds);
        if (spi > 0) {
            cJSON_AddNumberToObject(o, "seconds_per_step", spi);
            cJSON_AddNumberToObject(o, "eta_seconds", spi * (double)(ev->steps - ev->step));
        }
        break;
    }
    case SD_EXEC_NODE_PREVIEW:
        cJSON_AddNumberToObject(o, "step", (double)ev->step);
        cJSON_AddNumberToObject(o, "steps", (double)ev->steps);
        cJSON_AddStringToObject(o, "path", p->preview_path);
        cJSON_AddStringToObject(o, "method", sd_cli_preview_method(p->preview));
        break;
    case SD_EXEC_NODE_DONE:
        cJSON_AddNumberToObject(o, "seconds", ev->seconds);
        if (ev->record->delivered) {
            cJSON_AddBoolToObject(o, "delivered", 1);
            cJSON_AddStringToObject(o, "from", ev->record->status == SD_NODE_MEMO ? "memory" : "cache");
        }
        json_files(o, ev->record);
        break;
    case SD_EXEC_NODE_CACHED:
        cJSON_AddStringToObject(o, "from", ev->record->status == SD_NODE_MEMO ? "memory" : "cache");
        json_files(o, ev->record);
        break;
    case SD_EXEC_NODE_ERROR:
        cJSON_AddNumberToObject(o, "seconds", ev->seconds);
        json_error(o, ev->status, ev->error);
        break;
    case SD_EXEC_RUN_DONE:
        cJSON_AddStringToObject(o, "status", run_status(ev->status));
        cJSON_AddNumberToObject(o, "executed", (double)ev->n_executed);
        cJSON_AddNumberToObject(o, "cached", (double)ev->n_cached);
        cJSON_AddNumberToObject(o, "seconds", ev->seconds);
        if (ev->status) json_error(o, ev->status, ev->error);
        break;
    default: break;
    }
    char *s = sd_json_print(o, 0);
    cJSON_Delete(o);
    if (s) {
        fprintf(p->out, "%s\n", s);
        fflush(p->out);
    }
    free(s);
}

/* ---- previews --------------------------------------------------------------------- */

static void write_preview(sd_cli_progress *p, const sd_exec_event *ev) {
    p->preview_written = 0;
    if (!p->preview || p->preview_failed) return;
    double t = now_s();
    /* every few steps (the interval), and always the last one */
    if (ev->step < ev->steps && p->last_preview_t > 0 && t - p->last_preview_t < p->preview_interval) return;
    sd_error err;
    sd_error_clear(&err);
    if (sd_cli_preview_write(p->preview, ev->latent, ev->latent_format, &err) != SD_OK) {
        /* said once; the run goes on without previews */
        char buf[SD_ERR_MSG_MAX + 512];
        sd_cli_progress_break(p);
        fprintf(stderr, "warning: no more previews: %s\n", sd_error_format(&err, buf, sizeof buf));
        p->preview_failed = 1;
        return;
    }
    p->last_preview_t = now_s();
    p->preview_written = 1;
    p->n_previews++;
}

/* ---- the event callback ---------------------------------------------------------------- */

void sd_cli_progress_event(void *user, const sd_exec_event *ev) {
    sd_cli_progress *p = user;
    double t = now_s();
    if (ev->kind == SD_EXEC_NODE_START) {
        p->node_start = p->last_line_t = t;
        p->first_step = 0;
    }
    if (ev->kind == SD_EXEC_NODE_PREVIEW) write_preview(p, ev);
    if (p->mode == SD_CLI_PROGRESS_JSON) json_event(p, ev);
    if (ev->kind == SD_EXEC_NODE_STEP && p->first_step <= 0) {
        p->first_step = ev->step;
        p->first_step_t = t;
    }
    if (p->mode != SD_CLI_PROGRESS_BAR && p->mode != SD_CLI_PROGRESS_PLAIN) return;
    int bar = p->mode == SD_CLI_PROGRESS_BAR;
    char h[512], rate[96];
    switch (ev->kind) {
    case SD_EXEC_NODE_START:
        if (!bar) return;
        head(ev, h, sizeof h);
        fprintf(p->out, "%s ...", h);
        p->line_open = 1;
        break;
    case SD_EXEC_NODE_STEP: {
        if (ev->steps <= 0) return;
        head(ev, h, sizeof h);
        rate_text(p, ev, t, rate, sizeof rate);
        if (!bar) {
            if (p->interval > 0 && t - p->last_line_t < p->interval) return;
            fprintf(p->out, "%s step %lld/%lld%s\n", h, (long long)ev->step, (long long)ev->steps, rate);
            p->last_line_t = t;
            break;
        }
        enum { WIDTH = 24 };
        char cells[WIDTH + 1];
        int64_t filled = ev->step * WIDTH / ev->steps;
        for (int i = 0; i < WIDTH; i++) cells[i] = i < filled ? '#' : '.';
        cells[WIDTH] = 0;
        char line[1024];
        snprintf(line, sizeof line, "%s [%s] %lld/%lld%s", h, cells, (long long)ev->step, (long long)ev->steps, rate);
        /* a line wider than the terminal wraps, and \r then redraws only
         * its last part: keep it one column short of the width */
        struct winsize ws;
        if (ioctl(fileno(p->out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && strlen(line) >= ws.ws_col)
            line[ws.ws_col - 1] = 0;
        fprintf(p->out, "\r\033[K%s", line);
        p->line_open = 1;
        break;
    }
    case SD_EXEC_NODE_DONE:
    case SD_EXEC_NODE_CACHED:
    case SD_EXEC_NODE_ERROR: {
        head(ev, h, sizeof h);
        char what[64] = "";
        int memo = ev->record->status == SD_NODE_MEMO;
        if (ev->kind == SD_EXEC_NODE_DONE && ev->record->delivered) /* executor.h "Output files" */
            snprintf(what, sizeof what, "%s", memo ? "cached (memory), files written again" : "cached, files written again");
        else if (ev->kind == SD_EXEC_NODE_DONE) snprintf(what, sizeof what, "%.1fs", ev->seconds);
        else if (ev->kind == SD_EXEC_NODE_CACHED)
            snprintf(what, sizeof what, "%s", memo ? "cached (memory)" : "cached");
        else
            snprintf(what, sizeof what, "%s after %.1fs",
                     ev->status == SD_ERR_CANCELLED || (p->interrupt && *p->interrupt) ? "interrupted" : "FAILED",
                     ev->seconds);
        if (bar) fputs("\r\033[K", p->out);
        fprintf(p->out, "%s %s\n", h, what);
        p->line_open = 0;
        break;
    }
    default: return;
    }
    fflush(p->out);
}
