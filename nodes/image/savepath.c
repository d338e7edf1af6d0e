/* savepath.c - ComfyUI output naming (get_save_image_path), embedded
 * metadata, and the "ui" record of output nodes. */
#include "savepath.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/json_util.h"
#include "core/sha256.h"
#include "nodes/text/strbuf.h"

/* ---- growable string ----------------------------------------------------------- */

typedef sd_nodes_strbuf sbuf;

/* Replace every occurrence of `pat` in s by `rep` (new malloc'd string). */
static char *str_replace_all(const char *s, const char *pat, const char *rep) {
    sbuf b = {0};
    size_t pl = strlen(pat);
    const char *q;
    while ((q = strstr(s, pat))) {
        sd_nodes_strbuf_put(&b, s, (size_t)(q - s));
        sd_nodes_strbuf_puts(&b, rep);
        s = q + pl;
    }
    sd_nodes_strbuf_puts(&b, s);
    return sd_nodes_strbuf_finish(&b);
}

/* ---- naming ----------------------------------------------------------------------- */

/* posixpath.normpath, relative paths only (absolute ones are refused earlier). */
static char *normpath(const char *path) {
    size_t n = strlen(path);
    char *copy = strdup(path);
    const char **parts = malloc(sizeof *parts * (n + 1));
    if (!copy || !parts) { free(copy); free(parts); return NULL; }
    size_t np = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        if (strcmp(tok, ".") == 0) continue;
        if (strcmp(tok, "..") == 0 && np > 0 && strcmp(parts[np - 1], "..") != 0) { np--; continue; }
        parts[np++] = tok;
    }
    sbuf b = {0};
    for (size_t i = 0; i < np; i++) {
        if (i) sd_nodes_strbuf_puts(&b, "/");
        sd_nodes_strbuf_puts(&b, parts[i]);
    }
    if (np == 0) sd_nodes_strbuf_puts(&b, ".");
    free(parts);
    free(copy);
    return sd_nodes_strbuf_finish(&b);
}

/* Python int() of a counter token: optional spaces and sign, then digits. */
static int parse_py_int(const char *s, size_t n, int64_t *out) {
    char buf[64];
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *p = buf;
    while (isspace((unsigned char)*p)) p++;
    char *q = p;
    if (*q == '+' || *q == '-') q++;
    if (!isdigit((unsigned char)*q)) return 0;
    while (isdigit((unsigned char)*q)) q++;
    char *e = q;
    while (isspace((unsigned char)*e)) e++;
    if (*e) return 0;
    errno = 0;
    long long v = strtoll(p, NULL, 10);
    if (errno) return 0;
    *out = v;
    return 1;
}

static char *substitute_vars(const char *prefix, int64_t width, int64_t height) {
    if (!strchr(prefix, '%')) return strdup(prefix);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char vals[8][32];
    snprintf(vals[0], 32, "%lld", (long long)width);
    snprintf(vals[1], 32, "%lld", (long long)height);
    snprintf(vals[2], 32, "%d", tm.tm_year + 1900);
    snprintf(vals[3], 32, "%02d", tm.tm_mon + 1);
    snprintf(vals[4], 32, "%02d", tm.tm_mday);
    snprintf(vals[5], 32, "%02d", tm.tm_hour);
    snprintf(vals[6], 32, "%02d", tm.tm_min);
    snprintf(vals[7], 32, "%02d", tm.tm_sec);
    static const char *const keys[8] = {"%width%", "%height%", "%year%", "%month%",
                                        "%day%", "%hour%", "%minute%", "%second%"};
    char *cur = strdup(prefix);
    for (int i = 0; cur && i < 8; i++) {
        char *next = str_replace_all(cur, keys[i], vals[i]);
        free(cur);
        cur = next;
    }
    return cur;
}

void sd_savepath_free(sd_savepath *sp) {
    if (!sp) return;
    if (sp->dir.path) sd_outdir_close(&sp->dir);
    free(sp->folder);
    free(sp->filename);
    free(sp->subfolder);
    memset(sp, 0, sizeof *sp);
}

/* Counter scan state: one past the highest "<filename>_<int>..." there. */
typedef struct counter_scan {
    const char *filename;
    size_t flen;
    int found;
    int64_t best;
} counter_scan;

static void scan_name(void *user, const char *nm) {
    counter_scan *cs = user;
    if (strncmp(nm, cs->filename, cs->flen) != 0 || nm[cs->flen] != '_') return;
    const char *rest = nm + cs->flen + 1;
    size_t tl = strcspn(rest, "_");
    int64_t v = 0;
    if (!parse_py_int(rest, tl, &v)) v = 0;
    if (!cs->found || v > cs->best) cs->best = v;
    cs->found = 1;
}

sd_status sd_savepath_begin(const char *root, const char *prefix, int64_t width,
                            int64_t height, sd_savepath *sp, sd_error *err) {
    memset(sp, 0, sizeof *sp);
    sp->dir.fd = -1;
    if (!prefix) prefix = "";
    char *sub = substitute_vars(prefix, width, height);
    char *norm = sub ? normpath(sub) : NULL;
    free(sub);
    if (!norm) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    if (prefix[0] == '/' || strcmp(norm, "..") == 0 || strncmp(norm, "../", 3) == 0) {
        sd_error_set(err, SD_ERR_INVALID, "filename_prefix '%s': saving outside the folder "
                     "'%s' is not allowed", prefix, root);
        free(norm);
        return SD_ERR_INVALID;
    }
    const char *slash = strrchr(norm, '/');
    sp->subfolder = slash ? strndup(norm, (size_t)(slash - norm)) : strdup("");
    sp->filename = strdup(slash ? slash + 1 : norm);
    free(norm);
    if (!sp->subfolder || !sp->filename) {
        sd_savepath_free(sp);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    sd_status rc = sd_outdir_open(root, sp->subfolder, &sp->dir, err);
    if (rc) { sd_savepath_free(sp); return rc; }
    sp->folder = strdup(sp->dir.path);
    if (!sp->folder) { sd_savepath_free(sp); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }

    /* The scan also removes temporaries that killed runs left behind. */
    counter_scan cs = {sp->filename, strlen(sp->filename), 0, 0};
    rc = sd_outdir_scan(&sp->dir, scan_name, &cs, &sp->stale_removed, err);
    if (rc) { sd_savepath_free(sp); return rc; }
    sp->counter = cs.found ? cs.best + 1 : 1;
    return SD_OK;
}

const char *sd_savepath_file(const sd_savepath *sp, int64_t batch, int64_t counter,
                             const char *ext, char *buf, size_t n) {
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)batch);
    char *name = str_replace_all(sp->filename, "%batch_num%", num);
    snprintf(buf, n, "%s_%05lld_.%s", name ? name : sp->filename, (long long)counter, ext);
    free(name);
    return buf;
}

void sd_savepath_claim_names(sd_savepath *sp, const sd_env *env, const char *type) {
    sp->claim_env = env && env->claim_name ? env : NULL;
    sp->claim_type = type;
}

sd_status sd_savepath_publish(sd_savepath *sp, sd_outfile *of, int64_t batch, const char *ext,
                              char *file, size_t n, sd_error *err) {
    /* Another run may take a name between our scan and now: try the next
     * counter, as many times as there can be writers racing. */
    for (int tries = 0; tries < 100000; tries++) {
        sd_savepath_file(sp, batch, sp->counter, ext, file, n);
        int taken = 0;
        sd_status rc = SD_OK;
        if (sp->claim_env) {
            rc = sp->claim_env->claim_name(sp->claim_env->claim_user, sp->claim_type, sp->subfolder, file, &taken, err);
            if (rc) return rc;
            if (taken) {
                sp->counter++;
                continue;
            }
        }
        rc = sd_outfile_publish(of, file, &taken, err);
        if (rc) {
            sd_error_prefix(err, "%s", sp->folder);
            return rc;
        }
        sp->counter++;
        if (!taken) return SD_OK;
    }
    return sd_error_set(err, SD_ERR_IO, "%s: no free file name for prefix '%s' after 100000 tries",
                        sp->folder, sp->filename);
}

/* ---- Python json.dumps ---------------------------------------------------------- */

static void dump_string(sbuf *b, const char *s) {
    sd_nodes_strbuf_puts(b, "\"");
    const unsigned char *p = (const unsigned char *)s;
    char esc[16];
    while (*p) {
        unsigned c = *p;
        if (c == '"') { sd_nodes_strbuf_puts(b, "\\\""); p++; continue; }
        if (c == '\\') { sd_nodes_strbuf_puts(b, "\\\\"); p++; continue; }
        if (c == '\n') { sd_nodes_strbuf_puts(b, "\\n"); p++; continue; }
        if (c == '\r') { sd_nodes_strbuf_puts(b, "\\r"); p++; continue; }
        if (c == '\t') { sd_nodes_strbuf_puts(b, "\\t"); p++; continue; }
        if (c == '\b') { sd_nodes_strbuf_puts(b, "\\b"); p++; continue; }
        if (c == '\f') { sd_nodes_strbuf_puts(b, "\\f"); p++; continue; }
        if (c >= 0x20 && c < 0x7f) { sd_nodes_strbuf_put(b, (const char *)p, 1); p++; continue; }
        /* decode one UTF-8 sequence (invalid bytes become U+FFFD) */
        unsigned cp = 0xFFFD;
        int len = 1;
        if (c < 0x80) cp = c;
        else if ((c & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) { cp = ((c & 0x1F) << 6) | (p[1] & 0x3F); len = 2; }
        else if ((c & 0xF0) == 0xE0 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80) {
            cp = ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F); len = 3;
        } else if ((c & 0xF8) == 0xF0 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80 &&
                   (p[3] & 0xC0) == 0x80) {
            cp = ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
            len = 4;
        }
        if (cp >= 0x10000) {
            unsigned v = cp - 0x10000;
            snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
        } else {
            snprintf(esc, sizeof esc, "\\u%04x", cp);
        }
        sd_nodes_strbuf_puts(b, esc);
        p += len;
    }
    sd_nodes_strbuf_puts(b, "\"");
}

static void dump_number(sbuf *b, double v) {
    char num[64];
    if (isnan(v)) snprintf(num, sizeof num, "NaN");
    else if (isinf(v)) snprintf(num, sizeof num, v > 0 ? "Infinity" : "-Infinity");
    else if (v == floor(v) && fabs(v) < 1e16) snprintf(num, sizeof num, "%lld", (long long)v);
    else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(num, sizeof num, "%.*g", prec, v);
            if (strtod(num, NULL) == v) break;
        }
    }
    sd_nodes_strbuf_puts(b, num);
}

static void dump(sbuf *b, const cJSON *j) {
    if (!j || cJSON_IsNull(j)) sd_nodes_strbuf_puts(b, "null");
    else if (cJSON_IsFalse(j)) sd_nodes_strbuf_puts(b, "false");
    else if (cJSON_IsTrue(j)) sd_nodes_strbuf_puts(b, "true");
    else if (cJSON_IsNumber(j)) dump_number(b, j->valuedouble);
    else if (cJSON_IsString(j)) dump_string(b, j->valuestring ? j->valuestring : "");
    else if (cJSON_IsArray(j)) {
        sd_nodes_strbuf_puts(b, "[");
        int first = 1;
        for (const cJSON *c = j->child; c; c = c->next) {
            if (!first) sd_nodes_strbuf_puts(b, ", ");
            first = 0;
            dump(b, c);
        }
        sd_nodes_strbuf_puts(b, "]");
    } else if (cJSON_IsObject(j)) {
        sd_nodes_strbuf_puts(b, "{");
        int first = 1;
        for (const cJSON *c = j->child; c; c = c->next) {
            if (!first) sd_nodes_strbuf_puts(b, ", ");
            first = 0;
            dump_string(b, c->string ? c->string : "");
            sd_nodes_strbuf_puts(b, ": ");
            dump(b, c);
        }
        sd_nodes_strbuf_puts(b, "}");
    } else if (cJSON_IsRaw(j)) sd_nodes_strbuf_puts(b, j->valuestring ? j->valuestring : "null");
    else sd_nodes_strbuf_puts(b, "null");
}

char *sd_pyjson_dumps(const cJSON *j) {
    sbuf b = {0};
    dump(&b, j);
    return sd_nodes_strbuf_finish(&b);
}

/* ---- metadata --------------------------------------------------------------------- */

void sd_save_meta_free(sd_save_meta *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) { free(m->keys[i]); free(m->values[i]); }
    free(m->keys);
    free(m->values);
    memset(m, 0, sizeof *m);
}

static int meta_push(sd_save_meta *m, const char *key, char *value /* taken */) {
    char **k = realloc(m->keys, sizeof *k * (m->n + 1));
    if (k) m->keys = k;
    char **v = realloc(m->values, sizeof *v * (m->n + 1));
    if (v) m->values = v;
    char *kd = strdup(key);
    if (!k || !v || !kd || !value) { free(kd); free(value); return -1; }
    m->keys[m->n] = kd;
    m->values[m->n] = value;
    m->n++;
    return 0;
}

sd_status sd_save_meta_build(const sd_node_ctx *ctx, int prompt_always, sd_save_meta *m,
                             sd_error *err) {
    memset(m, 0, sizeof *m);
    const char *pj = ctx ? ctx->prompt_json : NULL;
    if (pj || prompt_always) {
        char *val = NULL;
        cJSON *tree = NULL;
        sd_error perr = {0};
        if (pj && sd_json_parse_exact(pj, "prompt", &tree, &perr) == SD_OK) {
            val = sd_pyjson_dumps(tree); /* ComfyUI's json.dumps(prompt) spacing */
            cJSON_Delete(tree);
        } else {
            val = strdup(pj ? pj : "");
        }
        if (meta_push(m, "prompt", val)) goto oom;
    }
    const char *ej = ctx ? ctx->extra_pnginfo_json : NULL;
    if (ej && *ej) {
        cJSON *tree = NULL;
        sd_status rc = sd_json_parse_exact(ej, "extra_pnginfo", &tree, err);
        if (rc) { sd_save_meta_free(m); return rc; }
        if (!cJSON_IsObject(tree)) {
            cJSON_Delete(tree);
            sd_save_meta_free(m);
            return sd_error_set(err, SD_ERR_INVALID, "extra_pnginfo must be a JSON object");
        }
        for (const cJSON *c = tree->child; c; c = c->next) {
            if (meta_push(m, c->string ? c->string : "", sd_pyjson_dumps(c))) {
                cJSON_Delete(tree);
                goto oom;
            }
        }
        cJSON_Delete(tree);
    }
    return SD_OK;
oom:
    sd_save_meta_free(m);
    return sd_error_set(err, SD_ERR_NOMEM, "out of memory building metadata");
}

/* ---- ui record ---------------------------------------------------------------------- */

static sd_value *dict_list(sd_value *dict, const char *key) {
    sd_value *l = sd_value_dict_get(dict, key);
    if (l) return l;
    l = sd_value_list();
    if (!l || sd_value_dict_set(dict, key, l)) return NULL;
    return sd_value_dict_get(dict, key);
}

sd_status sd_save_ui_add(sd_value **ui, const char *list_key, const char *filename,
                         const char *subfolder, const char *type, const char *abs_path,
                         const uint8_t sha256[32], sd_error *err) {
    if (!*ui) *ui = sd_value_dict();
    if (!*ui) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    sd_value *files = dict_list(*ui, "files");
    sd_value *hashes = dict_list(*ui, "sha256");
    if (!files || !hashes) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    char hex[65];
    sd_sha256_hex(sha256, hex);
    if (!list_key) {
        if (sd_value_list_append(files, sd_value_string(abs_path)) ||
            sd_value_list_append(hashes, sd_value_string(hex)))
            return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
        return SD_OK;
    }
    sd_value *list = dict_list(*ui, list_key);
    sd_value *rec = sd_value_dict();
    if (!list || !rec) { sd_value_unref(rec); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    if (sd_value_dict_set(rec, "filename", sd_value_string(filename)) ||
        sd_value_dict_set(rec, "subfolder", sd_value_string(subfolder)) ||
        sd_value_dict_set(rec, "type", sd_value_string(type))) {
        sd_value_unref(rec);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    if (sd_value_list_append(list, rec) || sd_value_list_append(files, sd_value_string(abs_path)) ||
        sd_value_list_append(hashes, sd_value_string(hex)))
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return SD_OK;
}
