/* progress.c - one line per node: redrawn in place with a bar on a
 * terminal, plain finished lines otherwise, nothing with --quiet. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "cli.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void prefix(sd_cli_progress *p, const sd_exec_record *rec, char *buf, size_t n) {
    size_t total = p->report ? p->report->n : 0;
    size_t index = p->report && rec >= p->report->items && rec < p->report->items + total
                       ? (size_t)(rec - p->report->items) + 1 : 0;
    snprintf(buf, n, "[%zu/%zu] %s #%s", index, total, rec->class_type, rec->node_id);
}

void sd_cli_progress_on_node(void *user, const sd_exec_record *rec, int finished) {
    sd_cli_progress *p = user;
    if (p->quiet) return;
    char head[512];
    prefix(p, rec, head, sizeof head);
    if (!finished) {
        p->node_start = now_s();
        if (p->tty) {
            fprintf(p->out, "%s ...", head);
            p->line_open = 1;
            fflush(p->out);
        }
        return;
    }
    const char *what = "";
    char timing[64] = "";
    switch (rec->status) {
    case SD_NODE_EXECUTED: snprintf(timing, sizeof timing, "%.1fs", rec->seconds); break;
    case SD_NODE_CACHED: what = rec->delivered ? "cached, files written again" : "cached"; break;
    case SD_NODE_MEMO: what = rec->delivered ? "cached (memory), files written again" : "cached (memory)"; break;
    case SD_NODE_FAILED:
        what = p->interrupt && *p->interrupt ? "interrupted" : "FAILED";
        snprintf(timing, sizeof timing, " after %.1fs", rec->seconds); break;
    case SD_NODE_SKIPPED: what = "skipped"; break;
    }
    if (p->tty) fprintf(p->out, "\r\033[K");
    fprintf(p->out, "%s %s%s\n", head, what, timing);
    p->line_open = 0;
    fflush(p->out);
}

void sd_cli_progress_on_step(void *user, const char *node_id, int64_t value, int64_t max) {
    sd_cli_progress *p = user;
    if (p->quiet || !p->tty || max <= 0) return;
    const sd_exec_record *rec = NULL;
    for (size_t i = 0; p->report && i < p->report->n; i++)
        if (!strcmp(p->report->items[i].node_id, node_id)) rec = &p->report->items[i];
    char head[512] = "";
    if (rec) prefix(p, rec, head, sizeof head);
    enum { WIDTH = 24 };
    char bar[WIDTH + 1];
    int filled = (int)(value * WIDTH / max);
    if (filled > WIDTH) filled = WIDTH;
    for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
    bar[WIDTH] = 0;
    fprintf(p->out, "\r\033[K%s [%s] %lld/%lld %.1fs", head, bar, (long long)value, (long long)max,
            now_s() - p->node_start);
    p->line_open = 1;
    fflush(p->out);
}
