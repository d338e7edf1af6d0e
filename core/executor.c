/* executor.c - runs what the output nodes of a graph need, once each.
 *
 * A run has four phases, all before or around node functions:
 *   1. validate (nothing runs on a bad graph);
 *   2. plan: the ancestors of output nodes, in a stable topological order
 *      (insertion order breaks ties), their literal inputs with defaults
 *      filled and coerced, and their keys (cache_key.h), bottom-up;
 *   3. decide top-down, consumers before producers: a node needed by an
 *      output or by a node that must execute is looked up in the memo, then
 *      the persistent cache; only a miss makes its sources needed, so a loader
 *      whose consumers all hit is never visited;
 *   4. execute the misses in order, re-checking the memo first (a duplicated
 *      branch then runs once), storing complete results only.
 * With opts->release_consumed, step 4 also drops each output value once the
 * last node of the run that reads it has finished (see plan_release).
 * Nodes that are NOT_IDEMPOTENT, and everything downstream of one, are
 * "volatile": never looked up, never stored. Nodes with PROCESS_STATE (unless
 * their def's stateless() says otherwise), and everything downstream of one,
 * are "in-process": the memo as usual, the persistent cache never.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdarg.h>
#include <sys/stat.h>
#include "cache_key.h"
#include "env.h"
#include "executor_internal.h"
#include "hashmap.h"
#include "formats/safetensors.h"

/* ---- the in-process memo: key -> entry, open addressing ------------------- */

typedef struct memo_slot {
    uint8_t key[SD_KEY_SIZE];
    sd_value *entry; /* NULL = empty slot */
    uint64_t used;   /* ex->tick when last stored or found (sd_exec_drop_lru) */
} memo_slot;

typedef struct file_memo {
    char *path;
    int64_t size, mtime;
    uint8_t hash[SD_KEY_SIZE];
} file_memo;

struct sd_exec {
    memo_slot *slots;
    size_t cap, count;
    file_memo *files;
    size_t n_files;
    uint64_t tick;   /* bumped on every memo store and hit */
};

static size_t slot_of(const uint8_t *key, size_t cap) {
    uint64_t h;
    memcpy(&h, key, sizeof h); /* SHA-256 bytes are already uniform */
    return (size_t)(h & (cap - 1));
}

static sd_value *memo_get(sd_exec *ex, const uint8_t *key) {
    if (!ex->cap) return NULL;
    for (size_t i = slot_of(key, ex->cap);; i = (i + 1) & (ex->cap - 1)) {
        if (!ex->slots[i].entry) return NULL;
        if (memcmp(ex->slots[i].key, key, SD_KEY_SIZE) == 0) {
            ex->slots[i].used = ++ex->tick;
            return ex->slots[i].entry;
        }
    }
}

static int memo_put(sd_exec *ex, const uint8_t *key, sd_value *entry) {
    if ((ex->count + 1) * 2 > ex->cap) {
        size_t cap = ex->cap ? ex->cap * 2 : 64;
        memo_slot *slots = calloc(cap, sizeof *slots);
        if (!slots) return -1;
        for (size_t i = 0; i < ex->cap; i++) {
            if (!ex->slots[i].entry) continue;
            size_t j = slot_of(ex->slots[i].key, cap);
            while (slots[j].entry) j = (j + 1) & (cap - 1);
            slots[j] = ex->slots[i];
        }
        free(ex->slots);
        ex->slots = slots;
        ex->cap = cap;
    }
    size_t i = slot_of(key, ex->cap);
    while (ex->slots[i].entry && memcmp(ex->slots[i].key, key, SD_KEY_SIZE) != 0)
        i = (i + 1) & (ex->cap - 1);
    if (ex->slots[i].entry) sd_value_unref(ex->slots[i].entry);
    else ex->count++;
    memcpy(ex->slots[i].key, key, SD_KEY_SIZE);
    ex->slots[i].entry = sd_value_ref(entry);
    ex->slots[i].used = ++ex->tick;
    return 0;
}

/* Backward-shift deletion keeps every probe chain unbroken without
 * tombstones: each later slot of the cluster moves into the hole unless its
 * home slot lies cyclically in (hole, slot]. */
static void memo_del(sd_exec *ex, const uint8_t *key) {
    if (!ex->cap) return;
    size_t mask = ex->cap - 1, i = slot_of(key, ex->cap);
    while (ex->slots[i].entry && memcmp(ex->slots[i].key, key, SD_KEY_SIZE) != 0) i = (i + 1) & mask;
    if (!ex->slots[i].entry) return;
    sd_value_unref(ex->slots[i].entry);
    ex->slots[i].entry = NULL;
    ex->count--;
    for (size_t j = (i + 1) & mask; ex->slots[j].entry; j = (j + 1) & mask) {
        size_t h = slot_of(ex->slots[j].key, ex->cap);
        int stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (stays) continue;
        ex->slots[i] = ex->slots[j];
        ex->slots[j].entry = NULL;
        i = j;
    }
}

sd_exec *sd_exec_new(void) { return calloc(1, sizeof(sd_exec)); }

void sd_exec_forget(sd_exec *ex) {
    if (!ex) return;
    for (size_t i = 0; i < ex->cap; i++) sd_value_unref(ex->slots[i].entry);
    free(ex->slots);
    ex->slots = NULL;
    ex->cap = ex->count = 0;
}

size_t sd_exec_memo_count(const sd_exec *ex) { return ex ? ex->count : 0; }

int sd_exec_drop_lru(sd_exec *ex) {
    if (!ex || !ex->count) return 0;
    size_t oldest = ex->cap;
    for (size_t i = 0; i < ex->cap; i++)
        if (ex->slots[i].entry && (oldest == ex->cap || ex->slots[i].used < ex->slots[oldest].used)) oldest = i;
    uint8_t key[SD_KEY_SIZE];
    memcpy(key, ex->slots[oldest].key, SD_KEY_SIZE);
    memo_del(ex, key);
    return 1;
}

void sd_exec_free(sd_exec *ex) {
    if (!ex) return;
    sd_exec_forget(ex);
    for (size_t i = 0; i < ex->n_files; i++) free(ex->files[i].path);
    free(ex->files);
    free(ex);
}

/* File hashes are memoized in the sd_exec too, so a REPL without a
 * persistent cache hashes a checkpoint once per change. */
static sd_status file_hash(sd_exec *ex, const sd_cache_i *cache, const char *path,
                           uint8_t out[SD_KEY_SIZE], sd_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) return sd_error_set(err, SD_ERR_NOT_FOUND, "cannot stat '%s'", path);
    int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    for (size_t i = 0; i < ex->n_files; i++) {
        file_memo *f = &ex->files[i];
        if (strcmp(f->path, path) == 0 && f->size == (int64_t)st.st_size && f->mtime == mtime) {
            memcpy(out, f->hash, SD_KEY_SIZE);
            return SD_OK;
        }
    }
    sd_status rc = sd_key_file_hash(cache, path, out, err);
    if (rc) return rc;
    file_memo *files = realloc(ex->files, (ex->n_files + 1) * sizeof *files);
    if (files) {
        ex->files = files;
        file_memo *f = &files[ex->n_files];
        if ((f->path = strdup(path))) {
            f->size = (int64_t)st.st_size;
            f->mtime = mtime;
            memcpy(f->hash, out, SD_KEY_SIZE);
            ex->n_files++;
        }
    }
    return SD_OK;
}

/* ---- one run ------------------------------------------------------------------ */

enum { PLAN_NONE = 0, PLAN_HIT, PLAN_RUN };

typedef struct plan_node {
    const sd_graph_node *gn;
    const sd_node_def *def;
    int n_in, n_out;
    int *src;             /* per def input: node index of a link source, or -1 */
    int *src_index;       /* per def input: output index of the link */
    sd_value **lit;       /* per def input: prepared literal (own ref) or NULL */
    int needed, is_output, is_volatile;
    int in_process;       /* SD_NODE_PROCESS_STATE here or upstream: memo only */
    uint8_t key[SD_KEY_SIZE];
    int decision;         /* PLAN_* */
    sd_node_status hit_status;
    int deliver;          /* PLAN_RUN of an output node whose result is cached
                             but whose files are not this run's: hit_status says
                             where the result came from */
    sd_value *entry;      /* result: own ref */
    int record;           /* index into the report, or -1 */
    /* release_consumed only (plan_release): */
    int group;            /* first node of the run with the same key */
    int keep;             /* group holds an output node: never dropped */
    int *last;            /* group leader, per output (one slot when there is none):
                             order index of its last use */
    unsigned char *dead;  /* group leader, same slots: dropped already */
    int next_member;      /* next node of the same group in run order, or -1 */
} plan_node;

typedef struct run {
    sd_exec *ex;
    const sd_graph *g;
    const sd_exec_opts *opts;
    const sd_env *env;
    size_t n;
    plan_node *nodes;
    size_t *order;   /* topological order of needed nodes */
    size_t n_order;
    sd_exec_report *report;
    /* release_consumed only: (leader, order index) pairs bucketed by the
     * order index at which one of the leader's outputs is used last, and how
     * far release_due has gone through them. */
    size_t *due, *due_start, due_done;
} run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void logf_env(const sd_env *env, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void logf_env(const sd_env *env, int level, const char *fmt, ...) {
    if (!env || !env->log) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    env->log(env->log_user, level, buf);
}

/* Default or coerced literal for input d (NULL when absent without default). */
static sd_value *prepare_literal(const sd_input_def *d, const sd_graph_input *in) {
    const char *t = d->type;
    if (in && !in->is_link && d->optional && sd_value_kind_of(in->literal) == SD_VAL_NONE)
        in = NULL; /* null for an optional input means "not given" (validation agrees) */
    if (in && !in->is_link) {
        const sd_value *v = in->literal;
        if (strcmp(t, SD_T_INT) == 0 && sd_value_kind_of(v) == SD_VAL_FLOAT)
            return sd_value_int(sd_value_as_int(v));
        if (strcmp(t, SD_T_FLOAT) == 0 && sd_value_kind_of(v) == SD_VAL_INT)
            return sd_value_float(sd_value_as_float(v));
        return sd_value_ref((sd_value *)v);
    }
    if (in) return NULL; /* a link */
    if (strcmp(t, SD_T_INT) == 0) return sd_value_int((int64_t)llround(d->def));
    if (strcmp(t, SD_T_FLOAT) == 0) return sd_value_float(d->def);
    if (strcmp(t, SD_T_BOOLEAN) == 0) return sd_value_bool(d->def != 0);
    if ((strcmp(t, SD_T_STRING) == 0 || strcmp(t, SD_T_COMBO) == 0) && d->def_str)
        return sd_value_string(d->def_str);
    return NULL;
}

/* Marks the ancestors of output nodes. An explicit stack (each node is
 * pushed once, when it becomes needed): a chain of 100,000 nodes must not
 * overflow the C stack. */
static sd_status mark_needed(run *r, sd_error *err) {
    size_t *stack = malloc((r->n ? r->n : 1) * sizeof *stack), top = 0;
    if (!stack) return sd_error_set(err, SD_ERR_NOMEM, "out of memory planning the run");
    for (size_t i = 0; i < r->n; i++) {
        if (!r->nodes[i].is_output || r->nodes[i].needed) continue;
        r->nodes[i].needed = 1;
        stack[top++] = i;
        while (top) {
            plan_node *p = &r->nodes[stack[--top]];
            for (int k = 0; k < p->n_in; k++) {
                if (p->src[k] < 0 || r->nodes[p->src[k]].needed) continue;
                r->nodes[p->src[k]].needed = 1;
                stack[top++] = (size_t)p->src[k];
            }
        }
    }
    free(stack);
    return SD_OK;
}

/* ---- a binary min-heap of node indices (Kahn's ready set) ---- */

static void heap_push(size_t *h, size_t *n, size_t v) {
    size_t i = (*n)++;
    while (i && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static size_t heap_pop(size_t *h, size_t *n) {
    size_t top = h[0], v = h[--*n], i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = v;
    return top;
}

/* Kahn's algorithm over needed nodes; among the ready ones the smallest
 * insertion index goes first, so the order is stable (the same as picking
 * the first ready node in workflow order each time), in O((n + links) log n). */
static sd_status topo_order(run *r, sd_error *err) {
    size_t n = r->n, n_links = 0, n_needed = 0;
    for (size_t i = 0; i < n; i++) {
        if (!r->nodes[i].needed) continue;
        n_needed++;
        for (int k = 0; k < r->nodes[i].n_in; k++) n_links += r->nodes[i].src[k] >= 0;
    }
    size_t *indeg = calloc(n ? n : 1, sizeof *indeg), *start = calloc(n + 1, sizeof *start);
    size_t *consumers = malloc((n_links ? n_links : 1) * sizeof *consumers);
    size_t *heap = malloc((n ? n : 1) * sizeof *heap), n_heap = 0;
    sd_status rc = SD_OK;
    if (!indeg || !start || !consumers || !heap) {
        rc = sd_error_set(err, SD_ERR_NOMEM, "out of memory planning the run");
        goto done;
    }
    /* consumers of node s: consumers[start[s] .. start[s+1]) (one per link) */
    for (size_t i = 0; i < n; i++) {
        if (!r->nodes[i].needed) continue;
        for (int k = 0; k < r->nodes[i].n_in; k++) {
            int s = r->nodes[i].src[k];
            if (s < 0) continue;
            indeg[i]++;
            start[s + 1]++;
        }
    }
    for (size_t i = 0; i < n; i++) start[i + 1] += start[i];
    /* the heap's array is free until the first push: it serves as the fill cursors */
    memcpy(heap, start, n * sizeof *heap);
    for (size_t i = 0; i < n; i++) {
        if (!r->nodes[i].needed) continue;
        for (int k = 0; k < r->nodes[i].n_in; k++)
            if (r->nodes[i].src[k] >= 0) consumers[heap[r->nodes[i].src[k]]++] = i;
    }
    for (size_t i = 0; i < n; i++)
        if (r->nodes[i].needed && indeg[i] == 0) heap_push(heap, &n_heap, i);
    while (n_heap) {
        size_t pick = heap_pop(heap, &n_heap);
        r->order[r->n_order++] = pick;
        for (size_t c = start[pick]; c < start[pick + 1]; c++)
            if (--indeg[consumers[c]] == 0) heap_push(heap, &n_heap, consumers[c]);
    }
    if (r->n_order < n_needed) /* validation rejects cycles; be safe anyway */
        rc = sd_error_set(err, SD_ERR_INTERNAL, "dependency cycle in a validated graph");
done:
    free(indeg);
    free(start);
    free(consumers);
    free(heap);
    return rc;
}

static sd_status plan_graph(run *r, sd_error *err) {
    r->n = sd_graph_count(r->g);
    r->nodes = calloc(r->n ? r->n : 1, sizeof *r->nodes);
    r->order = calloc(r->n ? r->n : 1, sizeof *r->order);
    if (!r->nodes || !r->order) return sd_error_set(err, SD_ERR_NOMEM, "out of memory planning the run");
    for (size_t i = 0; i < r->n; i++) {
        plan_node *p = &r->nodes[i];
        p->gn = sd_graph_at(r->g, i);
        p->def = sd_registry_find(p->gn->class_type);
        p->n_in = sd_node_input_count(p->def);
        p->n_out = sd_node_output_count(p->def);
        p->is_output = (p->def->flags & SD_NODE_OUTPUT) != 0;
        p->record = -1;
        size_t m = p->n_in ? (size_t)p->n_in : 1;
        p->src = malloc(m * sizeof *p->src);
        p->src_index = malloc(m * sizeof *p->src_index);
        p->lit = calloc(m, sizeof *p->lit);
        if (!p->src || !p->src_index || !p->lit)
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory planning the run");
        for (int k = 0; k < p->n_in; k++) {
            const sd_graph_input *in = sd_graph_node_input(p->gn, p->def->inputs[k].name);
            p->src[k] = -1;
            p->src_index[k] = 0;
            if (in && in->is_link) {
                p->src[k] = (int)sd_graph_index_of(r->g, in->src_id); /* (size_t)-1 -> -1 */
                p->src_index[k] = in->src_index;
            } else {
                p->lit[k] = prepare_literal(&p->def->inputs[k], in);
            }
        }
    }
    sd_status rc = mark_needed(r, err);
    return rc ? rc : topo_order(r, err);
}

static sd_status compute_keys(run *r, sd_error *err) {
    const char *device = r->env && r->env->device ? r->env->device : "cpu";
    for (size_t o = 0; o < r->n_order; o++) {
        plan_node *p = &r->nodes[r->order[o]];
        sd_key_input small[32];
        sd_key_input *ins = p->n_in <= 32 ? small : calloc((size_t)p->n_in, sizeof *ins);
        uint8_t (*hashes)[SD_KEY_SIZE] = calloc(p->n_in ? (size_t)p->n_in : 1, SD_KEY_SIZE);
        if (!ins || !hashes) {
            if (ins != small) free(ins);
            free(hashes);
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory computing keys");
        }
        p->is_volatile = (p->def->flags & SD_NODE_NOT_IDEMPOTENT) != 0;
        p->in_process = (p->def->flags & SD_NODE_PROCESS_STATE) && !(p->def->stateless && p->def->stateless(p->lit));
        sd_status rc = SD_OK;
        for (int k = 0; k < p->n_in && !rc; k++) {
            const sd_input_def *d = &p->def->inputs[k];
            sd_key_input *ki = &ins[k];
            memset(ki, 0, sizeof *ki);
            if (p->src[k] >= 0) {
                plan_node *s = &r->nodes[p->src[k]];
                ki->kind = SD_KEY_LINK;
                ki->hash = s->key;
                ki->src_index = p->src_index[k];
                if (s->is_volatile) p->is_volatile = 1;
                if (s->in_process) p->in_process = 1;
            } else if (!p->lit[k]) {
                ki->kind = SD_KEY_ABSENT;
            } else if (d->file_folder && sd_value_as_string(p->lit[k])) {
                char *path = NULL;
                rc = sd_env_resolve(r->env, d->file_folder, sd_value_as_string(p->lit[k]), &path, err);
                if (!rc) rc = file_hash(r->ex, r->opts->cache, path, hashes[k], err);
                free(path);
                if (rc) sd_error_at(err, p->gn->id, p->gn->class_type, d->name);
                ki->kind = SD_KEY_FILE;
                ki->hash = hashes[k];
            } else {
                ki->kind = SD_KEY_VALUE;
                ki->value = p->lit[k];
            }
        }
        if (!rc) {
            const char *id = (p->def->flags & SD_NODE_NOT_IDEMPOTENT) ? p->gn->id : NULL;
            /* a VAE or text-encoder node: the precision it really computes in */
            sd_key_node(p->def, device, sd_env_node_precision(r->env, p->def->flags), id, ins, p->key);
        }
        if (ins != small) free(ins);
        free(hashes);
        if (rc) return rc;
    }
    return SD_OK;
}

enum { ENTRY_BAD = 0, ENTRY_USABLE, ENTRY_DELIVER };

/* An entry is usable when it has one value per output and, for a node that
 * wrote files, those files are still this run's (sd_exec_ui_files_ok); an
 * entry that is whole but whose files are not is ENTRY_DELIVER. */
static int entry_state(const run *r, const plan_node *p, const sd_value *entry) {
    if (sd_value_dict_get(entry, "released")) return ENTRY_BAD; /* partly dropped (release_consumed) */
    const sd_value *outs = sd_value_dict_get(entry, "outputs");
    if (sd_value_kind_of(outs) != SD_VAL_LIST || sd_value_list_len(outs) != (size_t)p->n_out) return ENTRY_BAD;
    for (int k = 0; k < p->n_out; k++)
        if (!sd_value_list_get(outs, (size_t)k)) return ENTRY_BAD;
    return sd_exec_ui_files_ok(r->env, sd_value_dict_get(entry, "ui")) ? ENTRY_USABLE : ENTRY_DELIVER;
}

static int entry_usable(const run *r, const plan_node *p, const sd_value *entry) {
    return entry_state(r, p, entry) == ENTRY_USABLE;
}

static void mark_sources(run *r, plan_node *p, int *required) {
    for (int k = 0; k < p->n_in; k++)
        if (p->src[k] >= 0) required[p->src[k]] = 1;
}

/* Walks from consumers to producers; see the file comment. */
static sd_status decide(run *r, sd_error *err) {
    int *required = calloc(r->n ? r->n : 1, sizeof *required);
    if (!required) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < r->n; i++) required[i] = r->nodes[i].needed && r->nodes[i].is_output;
    const sd_cache_i *cache = r->opts->cache;
    for (size_t o = r->n_order; o-- > 0;) {
        size_t i = r->order[o];
        plan_node *p = &r->nodes[i];
        /* --dump wants every result it can get without running more: an
         * unneeded node is looked up too, and a hit is dumped. */
        int dump_only = !required[i] && p->needed && r->opts->dump_dir;
        if (!required[i] && !dump_only) continue;
        if (!p->is_volatile) {
            sd_value *e = memo_get(r->ex, p->key);
            int st = e ? entry_state(r, p, e) : ENTRY_BAD;
            if (st == ENTRY_USABLE) {
                p->decision = PLAN_HIT;
                p->hit_status = SD_NODE_MEMO;
                p->entry = sd_value_ref(e);
                continue;
            }
            if (st == ENTRY_DELIVER) {
                p->deliver = 1;
                p->hit_status = SD_NODE_MEMO;
            }
            if (cache && cache->get && !p->in_process) {
                sd_value *v = NULL;
                sd_error cerr;
                sd_error_clear(&cerr);
                sd_status rc = cache->get(cache->self, p->key, &v, &cerr);
                st = rc == SD_OK && v ? entry_state(r, p, v) : ENTRY_BAD;
                if (st == ENTRY_USABLE) {
                    p->decision = PLAN_HIT;
                    p->hit_status = SD_NODE_CACHED;
                    p->entry = v;
                    continue;
                }
                if (st == ENTRY_DELIVER) {
                    p->deliver = 1;
                    p->hit_status = SD_NODE_CACHED;
                }
                if (rc != SD_OK && rc != SD_ERR_NOT_FOUND)
                    logf_env(r->env, SD_LOG_WARN, "cache lookup for node %s (%s) failed, running it: %s",
                             p->gn->id, p->gn->class_type, cerr.msg);
                sd_value_unref(v);
            }
        }
        if (dump_only) continue;
        p->decision = PLAN_RUN;
        mark_sources(r, p, required);
    }
    free(required);
    return SD_OK;
}

static sd_status add_records(run *r, sd_error *err) {
    size_t n = 0;
    for (size_t o = 0; o < r->n_order; o++) n += r->nodes[r->order[o]].decision != PLAN_NONE;
    r->report->items = calloc(n ? n : 1, sizeof *r->report->items);
    if (!r->report->items) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    for (size_t o = 0; o < r->n_order; o++) {
        plan_node *p = &r->nodes[r->order[o]];
        if (p->decision == PLAN_NONE) continue;
        sd_exec_record *rec = &r->report->items[r->report->n];
        rec->node_id = strdup(p->gn->id);
        rec->class_type = strdup(p->def->class_type);
        rec->status = SD_NODE_SKIPPED;
        rec->planned = p->decision == PLAN_HIT ? p->hit_status : SD_NODE_EXECUTED;
        memcpy(rec->key, p->key, SD_KEY_SIZE);
        if (!rec->node_id || !rec->class_type) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        p->record = (int)r->report->n++;
    }
    return SD_OK;
}

static void describe_outputs(plan_node *p, sd_exec_record *rec) {
    const sd_value *outs = sd_value_dict_get(p->entry, "outputs");
    rec->output_desc = calloc(p->n_out ? (size_t)p->n_out : 1, sizeof *rec->output_desc);
    if (!rec->output_desc) return;
    rec->n_outputs = (size_t)p->n_out;
    for (int k = 0; k < p->n_out; k++)
        rec->output_desc[k] = sd_exec_describe_output(p->def->outputs[k].type,
                                                      sd_value_list_get(outs, (size_t)k));
}

static sd_value *make_entry(sd_value **out, const int *is_list, int n_out, sd_value *ui) {
    sd_value *entry = sd_value_dict(), *list = sd_value_list();
    if (!entry || !list) { sd_value_unref(entry); sd_value_unref(list); return NULL; }
    int any_list = 0;
    for (int k = 0; k < n_out; k++) {
        any_list |= is_list[k];
        if (sd_value_list_append(list, out[k])) { out[k] = NULL; sd_value_unref(list); sd_value_unref(entry); return NULL; }
        out[k] = NULL; /* moved into the list */
    }
    if (sd_value_dict_set(entry, "outputs", list)) { sd_value_unref(entry); return NULL; }
    if (ui && sd_value_dict_set(entry, "ui", sd_value_ref(ui))) { sd_value_unref(entry); return NULL; }
    if (any_list) {
        sd_value *flags = sd_value_list();
        for (int k = 0; flags && k < n_out; k++)
            if (sd_value_list_append(flags, sd_value_bool(is_list[k]))) { sd_value_unref(flags); flags = NULL; }
        if (!flags || sd_value_dict_set(entry, "list_outputs", flags)) { sd_value_unref(entry); return NULL; }
    }
    return entry;
}

/* 1 when output k of a result is a list of items (executor.h, "Lists"). */
static int entry_output_is_list(const sd_value *entry, int k) {
    const sd_value *flags = sd_value_dict_get(entry, "list_outputs");
    return flags && sd_value_as_bool(sd_value_list_get(flags, (size_t)k));
}

/* Runs node p's function; on success p->entry holds the result. */
/* ---- events (executor.h) ---------------------------------------------------------- */

static void emit_node(const run *r, sd_exec_event *ev, const sd_exec_record *rec) {
    if (!r->opts->on_event) return;
    ev->node_id = rec->node_id;
    ev->class_type = rec->class_type;
    ev->record = rec;
    ev->index = (size_t)(rec - r->report->items) + 1;
    ev->count = r->report->n;
    r->opts->on_event(r->opts->on_event_user, ev);
}

/* What a running node's progress and preview calls are routed through, so
 * that they become events carrying the node's place in the run. */
typedef struct node_obs {
    const run *r;
    const sd_exec_record *rec;
    double t0;
} node_obs;

/* A node's warning, kept in its record of the report (memory short: the
 * log still has it). */
static void keep_warning(void *user, const char *msg) {
    sd_exec_record *rec = user;
    char **w = realloc(rec->warnings, (rec->n_warnings + 1) * sizeof *w);
    if (!w) return;
    rec->warnings = w;
    if ((w[rec->n_warnings] = strdup(msg))) rec->n_warnings++;
}

static void obs_progress(void *user, const char *node_id, int64_t value, int64_t max) {
    node_obs *o = user;
    const sd_exec_opts *opts = o->r->opts;
    if (opts->progress) opts->progress(opts->progress_user, node_id, value, max);
    sd_exec_event ev = {.kind = SD_EXEC_NODE_STEP, .step = value, .steps = max, .seconds = now_s() - o->t0};
    emit_node(o->r, &ev, o->rec);
}

static void obs_preview(void *user, const char *node_id, int64_t step, int64_t steps, const sd_tensor *latent,
                        const char *latent_format) {
    (void)node_id;
    node_obs *o = user;
    int image = latent_format && !strcmp(latent_format, "image"); /* sd_node_image */
    if (!image && !o->r->opts->previews) return;
    sd_exec_event ev = {.kind = image ? SD_EXEC_NODE_IMAGE : SD_EXEC_NODE_PREVIEW, .step = step, .steps = steps,
                        .seconds = now_s() - o->t0, .latent = latent, .latent_format = image ? NULL : latent_format};
    emit_node(o->r, &ev, o->rec);
}

/* The node's inputs (borrowed), aligned with def->inputs: the outputs of
 * its links' sources, or its literals; in_list[k]: a list output's items. */
static void gather_inputs(run *r, const plan_node *p, sd_value **in, int *in_list) {
    for (int k = 0; k < p->n_in; k++) {
        in[k] = NULL;
        in_list[k] = 0;
        if (p->src[k] >= 0) {
            const sd_value *entry = r->nodes[p->src[k]].entry;
            in[k] = sd_value_list_get(sd_value_dict_get(entry, "outputs"), (size_t)p->src_index[k]);
            in_list[k] = entry_output_is_list(entry, p->src_index[k]);
        } else {
            in[k] = p->lit[k];
        }
    }
}

static sd_status run_node(run *r, plan_node *p, const char *prompt_json, sd_error *err) {
    sd_value *small_in[32], *small_out[16];
    int small_lin[32], small_lout[16];
    size_t n_in = p->n_in ? (size_t)p->n_in : 1, n_out = p->n_out ? (size_t)p->n_out : 1;
    sd_value **in = n_in <= 32 ? small_in : calloc(n_in, sizeof *in);
    sd_value **out = n_out <= 16 ? small_out : calloc(n_out, sizeof *out);
    int *in_list = n_in <= 32 ? small_lin : calloc(n_in, sizeof *in_list);
    int *out_list = n_out <= 16 ? small_lout : calloc(n_out, sizeof *out_list);
    sd_status rc = SD_OK;
    sd_error nerr;
    sd_error_clear(&nerr);
    if (!in || !out || !in_list || !out_list) {
        rc = sd_error_set(&nerr, SD_ERR_NOMEM, "out of memory");
        goto done;
    }
    memset(out, 0, n_out * sizeof *out);
    memset(out_list, 0, n_out * sizeof *out_list);
    gather_inputs(r, p, in, in_list);
    sd_node_ctx ctx = {
        .env = r->env,
        .node_id = p->gn->id,
        .class_type = p->def->class_type,
        .prompt_json = prompt_json,
        .extra_pnginfo_json = r->opts->extra_pnginfo_json,
        .interrupt = r->opts->interrupt,
        .progress = r->opts->progress,
        .progress_user = r->opts->progress_user,
        .ui = NULL,
        .on_warning = keep_warning,
        .warning_user = &r->report->items[p->record],
    };
    node_obs obs = {r, &r->report->items[p->record], now_s()};
    if (r->opts->on_event) {
        ctx.progress = obs_progress;
        ctx.progress_user = &obs;
        ctx.preview = obs_preview; /* latents only with opts->previews (obs_preview) */
        ctx.preview_user = &obs;
    }
    sd_value *ui = NULL;
    rc = sd_exec_map_node(p->def, &ctx, in, in_list, out, out_list, &ui, &nerr);
    if (rc == SD_OK) {
        p->entry = make_entry(out, out_list, p->n_out, ui);
        if (!p->entry) rc = sd_error_set(&nerr, SD_ERR_NOMEM, "out of memory storing results");
    }
    for (int k = 0; k < p->n_out; k++) sd_value_unref(out[k]);
    sd_value_unref(ui);
done:
    if (in && in != small_in) free(in);
    if (out && out != small_out) free(out);
    if (in_list && in_list != small_lin) free(in_list);
    if (out_list && out_list != small_lout) free(out_list);
    if (rc) {
        if (!nerr.code) nerr.code = rc;
        if (err) *err = nerr;
        /* The node may have named its input; the executor adds id and class. */
        sd_error_at(err, p->gn->id, p->def->class_type, NULL);
    }
    return rc;
}

static void store_result(run *r, plan_node *p) {
    if (p->is_volatile) return;
    if (memo_put(r->ex, p->key, p->entry))
        logf_env(r->env, SD_LOG_WARN, "out of memory: node %s not kept in memory", p->gn->id);
    const sd_cache_i *cache = r->opts->cache;
    if (!cache || !cache->put || p->in_process || !sd_value_is_data(p->entry)) return;
    sd_error cerr;
    sd_error_clear(&cerr);
    if (cache->put(cache->self, p->key, p->def->class_type, p->entry, &cerr) != SD_OK)
        logf_env(r->env, SD_LOG_WARN, "could not cache the result of node %s (%s): %s", p->gn->id,
                 p->def->class_type, cerr.msg);
}

/* ---- release_consumed ---------------------------------------------------------
 * Values are dropped per output, not per node: a checkpoint loader's CLIP
 * goes after the text encodes while its MODEL lives on until the sampler.
 * Nodes with the same key (a duplicated branch, or a hit of a result this
 * run also executes) share one memo entry, so liveness is computed per group
 * of equal keys: an output of the group lives until its last reader in the
 * run has finished, and at least until the group's last member has taken
 * its entry from the memo. */

static sd_status plan_release(run *r, sd_error *err) {
    /* key -> leader: the first node of the run with that key (keys are
     * borrowed from r->nodes, which does not move) */
    sd_hashmap *leaders = sd_hashmap_new();
    if (!leaders) return sd_error_set(err, SD_ERR_NOMEM, "out of memory planning the run");
    int *tail = NULL; /* per leader: its last member so far */
    if (r->n && !(tail = malloc(r->n * sizeof *tail))) {
        sd_hashmap_free(leaders);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory planning the run");
    }
    for (size_t o = 0; o < r->n_order; o++) {
        size_t i = r->order[o], lead;
        plan_node *p = &r->nodes[i];
        p->group = (int)i;
        p->next_member = -1;
        if (p->decision == PLAN_NONE) continue;
        if (!p->is_volatile) {
            if (sd_hashmap_get(leaders, p->key, SD_KEY_SIZE, &lead)) {
                p->group = (int)lead;
                r->nodes[tail[lead]].next_member = (int)i;
                tail[lead] = (int)i;
            } else if (sd_hashmap_put(leaders, p->key, SD_KEY_SIZE, i)) {
                free(tail);
                sd_hashmap_free(leaders);
                return sd_error_set(err, SD_ERR_NOMEM, "out of memory planning the run");
            }
        }
        plan_node *g = &r->nodes[p->group];
        int slots = g->n_out ? g->n_out : 1;
        if (p->group == (int)i) {
            tail[i] = (int)i;
            p->last = malloc((size_t)slots * sizeof *p->last);
            p->dead = calloc((size_t)slots, 1);
            if (!p->last || !p->dead) {
                free(tail);
                sd_hashmap_free(leaders);
                return sd_error_set(err, SD_ERR_NOMEM, "out of memory planning the run");
            }
        }
        for (int k = 0; k < slots; k++) g->last[k] = (int)o; /* >= every member's own turn */
        if (p->is_output) g->keep = 1;
    }
    free(tail);
    sd_hashmap_free(leaders);
    for (size_t o = 0; o < r->n_order; o++) {
        plan_node *c = &r->nodes[r->order[o]];
        if (c->decision != PLAN_RUN) continue; /* only a node that runs reads its inputs */
        for (int k = 0; k < c->n_in; k++) {
            if (c->src[k] < 0) continue;
            plan_node *g = &r->nodes[r->nodes[c->src[k]].group];
            int idx = c->src_index[k];
            if (g->last && idx >= 0 && idx < g->n_out && g->last[idx] < (int)o) g->last[idx] = (int)o;
        }
    }
    /* Bucket every (leader, output) by its last use, so that release_due
     * visits only what is due instead of every earlier node each time. */
    size_t n_due = 0;
    for (size_t o = 0; o < r->n_order; o++) {
        plan_node *g = &r->nodes[r->order[o]];
        if (g->last && g->group == (int)r->order[o]) n_due += g->n_out ? (size_t)g->n_out : 1;
    }
    r->due_start = calloc(r->n_order + 1, sizeof *r->due_start);
    r->due = malloc((n_due ? n_due : 1) * sizeof *r->due);
    size_t *fill = malloc((r->n_order ? r->n_order : 1) * sizeof *fill);
    if (!r->due_start || !r->due || !fill) {
        free(fill);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory planning the run");
    }
    for (int pass = 0; pass < 2; pass++) {
        for (size_t o = 0; o < r->n_order; o++) {
            size_t gi = r->order[o];
            plan_node *g = &r->nodes[gi];
            if (!g->last || g->group != (int)gi) continue;
            for (int k = 0; k < (g->n_out ? g->n_out : 1); k++) {
                if (pass == 0) r->due_start[g->last[k] + 1]++;
                else r->due[fill[g->last[k]]++] = gi;
            }
        }
        if (pass == 0) {
            for (size_t o = 0; o < r->n_order; o++) r->due_start[o + 1] += r->due_start[o];
            memcpy(fill, r->due_start, r->n_order * sizeof *fill);
        }
    }
    free(fill);
    return SD_OK;
}

/* The entry with the dropped outputs replaced by none and marked, so that
 * no later lookup takes it for a whole result; NULL when all are dropped
 * (or out of memory: the caller then keeps the old entry, which is only a
 * missed saving). */
static sd_value *entry_without(const sd_value *entry, const unsigned char *dead, int n_out,
                               int *all_dead) {
    *all_dead = 1;
    for (int k = 0; k < n_out; k++) *all_dead &= dead[k];
    if (*all_dead) return NULL;
    const sd_value *outs = sd_value_dict_get(entry, "outputs");
    sd_value *copy = sd_value_shallow_copy(entry), *list = sd_value_list();
    if (!copy || !list) goto fail;
    for (int k = 0; k < n_out; k++) {
        sd_value *v = dead[k] ? sd_value_none() : sd_value_ref(sd_value_list_get(outs, (size_t)k));
        if (!v || sd_value_list_append(list, v)) goto fail;
    }
    if (sd_value_dict_set(copy, "outputs", list)) { list = NULL; goto fail; }
    if (sd_value_dict_set(copy, "released", sd_value_bool(1))) { list = NULL; goto fail; }
    return copy;
fail:
    sd_value_unref(list);
    sd_value_unref(copy);
    return NULL;
}

static void drop_entry(sd_value **slot, const unsigned char *dead, int n_out) {
    if (!*slot) return;
    int all_dead;
    sd_value *e = entry_without(*slot, dead, n_out, &all_dead);
    if (!e && !all_dead) return;
    sd_value_unref(*slot);
    *slot = e;
}

/* Drops the outputs of group leader gi whose last use is at or before order
 * index o, from each member of the group and from the memo. Every member's
 * turn is at or before the last use, so all members have their entry by now. */
static void release_group(run *r, size_t gi, size_t o) {
    plan_node *g = &r->nodes[gi];
    if (g->keep) return;
    int any = 0;
    for (int k = 0; k < (g->n_out ? g->n_out : 1); k++)
        if (!g->dead[k] && g->last[k] <= (int)o) g->dead[k] = 1, any = 1;
    if (!any) return;
    for (int m = (int)gi; m >= 0; m = r->nodes[m].next_member)
        drop_entry(&r->nodes[m].entry, g->dead, g->n_out);
    if (g->is_volatile) return; /* never stored */
    sd_value *e = memo_get(r->ex, g->key);
    if (!e) return;
    int all_dead;
    sd_value *partial = entry_without(e, g->dead, g->n_out, &all_dead);
    if (all_dead) memo_del(r->ex, g->key);
    else if (partial) memo_put(r->ex, g->key, partial);
    sd_value_unref(partial);
}

/* After the node at order index `o` has finished: release what was last used
 * at o, or at an earlier index this was not called for (nodes that are not
 * visited do not call it). Each bucket is visited once: O(n) per run. */
static void release_due(run *r, size_t o) {
    for (; r->due_done <= o && r->due_done < r->n_order; r->due_done++)
        for (size_t d = r->due_start[r->due_done]; d < r->due_start[r->due_done + 1]; d++)
            release_group(r, r->due[d], o);
}

static sd_status execute(run *r, sd_error *err) {
    char *derived = NULL;
    const char *prompt_json = r->opts->prompt_json;
    sd_status rc = SD_OK;
    for (size_t o = 0; o < r->n_order && !rc; o++) {
        plan_node *p = &r->nodes[r->order[o]];
        if (p->decision == PLAN_NONE) continue;
        sd_exec_record *rec = &r->report->items[p->record];
        if (r->opts->interrupt && *r->opts->interrupt) {
            rc = sd_error_set(err, SD_ERR_CANCELLED, "interrupted before node %s (%s)", p->gn->id,
                              p->def->class_type);
            break;
        }
        if (p->decision == PLAN_RUN && !p->is_volatile) {
            /* An identical node earlier in this run (a duplicated branch). */
            sd_value *e = memo_get(r->ex, p->key);
            if (e && entry_usable(r, p, e)) {
                p->decision = PLAN_HIT;
                p->hit_status = SD_NODE_MEMO;
                p->deliver = 0;
                p->entry = sd_value_ref(e);
            }
        }
        if (r->opts->on_node) r->opts->on_node(r->opts->on_node_user, rec, 0);
        if (p->decision != PLAN_HIT) {
            sd_exec_event ev = {.kind = SD_EXEC_NODE_START};
            emit_node(r, &ev, rec);
        }
        double t0 = now_s();
        if (p->decision == PLAN_HIT) {
            rec->status = p->hit_status;
            r->report->n_cached++;
        } else {
            /* derived when a node first runs: a run served from the caches
             * does not serialize a large graph for nothing */
            if (!prompt_json) prompt_json = derived = sd_graph_to_json(r->g, 0);
            rc = run_node(r, p, prompt_json, err);
            rec->seconds = now_s() - t0;
            if (rc) {
                rec->status = SD_NODE_FAILED;
                if (r->opts->on_node) r->opts->on_node(r->opts->on_node_user, rec, 1);
                /* what the node was given, for the front end's error message
                 * (the sources' outputs live on: nothing is released before
                 * their last reader has finished) */
                sd_value **in = p->n_in ? calloc((size_t)p->n_in, sizeof *in) : NULL;
                int *in_list = p->n_in ? calloc((size_t)p->n_in, sizeof *in_list) : NULL;
                int have = in && in_list;
                if (have) gather_inputs(r, p, in, in_list);
                sd_exec_event ev = {.kind = SD_EXEC_NODE_ERROR, .seconds = rec->seconds, .status = rc, .error = err,
                                    .def = p->def, .inputs = have ? in : NULL,
                                    .inputs_are_lists = have ? in_list : NULL};
                emit_node(r, &ev, rec);
                free(in);
                free(in_list);
                break;
            }
            /* The result was cached and only its files were written anew,
             * as long as what they were written from was cached too (an
             * input the cache had dropped was computed again just now). */
            for (int k = 0; p->deliver && k < p->n_in; k++) {
                const plan_node *s = p->src[k] >= 0 ? &r->nodes[p->src[k]] : NULL;
                if (s && s->record >= 0 && r->report->items[s->record].status == SD_NODE_EXECUTED)
                    p->deliver = 0;
            }
            if (p->deliver) {
                rec->status = p->hit_status;
                rec->delivered = 1;
                r->report->n_cached++;
            } else {
                rec->status = SD_NODE_EXECUTED;
                r->report->n_executed++;
            }
            store_result(r, p);
        }
        describe_outputs(p, rec);
        rec->ui = sd_value_ref(sd_value_dict_get(p->entry, "ui"));
        if (r->opts->dump_dir) rc = sd_exec_dump_node(r->opts->dump_dir, p->gn->id, p->def, p->entry, err);
        if (r->opts->on_node) r->opts->on_node(r->opts->on_node_user, rec, 1);
        sd_exec_event ev = {.kind = p->decision == PLAN_HIT ? SD_EXEC_NODE_CACHED : SD_EXEC_NODE_DONE,
                            .seconds = rec->seconds};
        emit_node(r, &ev, rec);
        if (!rc && r->opts->release_consumed) release_due(r, o);
    }
    free(derived);
    return rc;
}

static void run_free(run *r) {
    for (size_t i = 0; r->nodes && i < r->n; i++) {
        plan_node *p = &r->nodes[i];
        for (int k = 0; p->lit && k < p->n_in; k++) sd_value_unref(p->lit[k]);
        free(p->lit);
        free(p->src);
        free(p->src_index);
        free(p->last);
        free(p->dead);
        sd_value_unref(p->entry);
    }
    free(r->nodes);
    free(r->order);
    free(r->due);
    free(r->due_start);
}

sd_status sd_exec_run(sd_exec *ex, const sd_graph *g, const sd_exec_opts *opts,
                      sd_exec_report *report, sd_graph_problems *problems,
                      sd_error *err) {
    sd_exec_opts none = {0};
    sd_exec_report local_report;
    if (!opts) opts = &none;
    if (!report) report = &local_report;
    memset(report, 0, sizeof *report);
    double t0 = now_s();
    /* Without an environment the defaults apply (./models, ./input, ...). */
    sd_env default_env;
    const sd_env *env = opts->env;
    if (!env) {
        sd_status rc = sd_env_init(&default_env, err);
        if (rc) return rc;
        env = &default_env;
    }
    sd_graph_problems local = {0};
    sd_status rc = sd_graph_validate(g, env, problems ? problems : &local, err);
    sd_graph_problems_free(&local);
    if (!rc) {
        run r = {.ex = ex, .g = g, .opts = opts, .env = env, .report = report};
        rc = plan_graph(&r, err);
        if (!rc) rc = compute_keys(&r, err);
        if (!rc) rc = decide(&r, err);
        if (!rc) rc = add_records(&r, err);
        if (!rc && opts->release_consumed) rc = plan_release(&r, err);
        if (!rc && opts->on_event) {
            sd_exec_event ev = {.kind = SD_EXEC_RUN_START, .count = report->n};
            opts->on_event(opts->on_event_user, &ev);
        }
        if (!rc && opts->on_plan) opts->on_plan(opts->on_plan_user, report);
        if (!rc) rc = execute(&r, err);
        run_free(&r);
    }
    report->seconds = now_s() - t0;
    if (opts->on_event) {
        sd_exec_event ev = {.kind = SD_EXEC_RUN_DONE, .count = report->n, .seconds = report->seconds,
                            .status = rc, .error = rc ? err : NULL, .n_executed = report->n_executed,
                            .n_cached = report->n_cached};
        opts->on_event(opts->on_event_user, &ev);
    }
    if (env == &default_env) sd_env_cleanup(&default_env);
    if (report == &local_report) sd_exec_report_free(&local_report);
    return rc;
}
