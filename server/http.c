/* http.c - civetweb set-up, authentication, request logging and the reply
 * and body helpers the routes share (internal.h). civetweb parses HTTP,
 * WebSocket frames and multipart bodies; nothing here parses the protocol. */
#define _GNU_SOURCE /* vasprintf */
#include <arpa/inet.h>
#include <civetweb.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "core/json_util.h"
#include "core/sha256.h"
#include "internal.h"

/* Heap buffers and fputs only: civetweb calls the access log on its own
 * threads, whose stacks are small (see on_request). */
void srv_log(srv *s, const char *fmt, ...) {
    char *line = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    pthread_mutex_lock(&s->log_mu);
    fputs(line, s->log);
    fputc('\n', s->log);
    fflush(s->log);
    pthread_mutex_unlock(&s->log_mu);
    free(line);
}

int srv_reply(struct mg_connection *c, int status, const char *ctype, const void *body, size_t n,
              const char *extra) {
    char len[32];
    snprintf(len, sizeof len, "%zu", n);
    mg_response_header_start(c, status);
    mg_response_header_add(c, "Content-Type", ctype, -1);
    mg_response_header_add(c, "Content-Length", len, -1);
    mg_response_header_add(c, "Cache-Control", "no-store", -1);
    mg_response_header_add(c, "X-Content-Type-Options", "nosniff", -1);
    srv_guard_add_headers(c);
    if (extra) mg_response_header_add_lines(c, extra);
    mg_response_header_send(c);
    if (n) mg_write(c, body, n);
    return status;
}

int srv_reply_json(struct mg_connection *c, int status, cJSON *j) {
    char *text = j ? sd_json_print(j, 0) : NULL;
    cJSON_Delete(j);
    if (!text) {
        static const char oom[] = "{\"error\": {\"type\": \"out_of_memory\", \"message\": \"out of memory\"}}";
        return srv_reply(c, 500, "application/json", oom, sizeof oom - 1, NULL);
    }
    srv_reply(c, status, "application/json", text, strlen(text), NULL);
    free(text);
    return status;
}

int srv_reply_error(struct mg_connection *c, int status, const char *type, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "details", "");
    cJSON_AddObjectToObject(e, "extra_info");
    return srv_reply_json(c, status, root);
}

int srv_read_body(srv *s, struct mg_connection *c, size_t limit, char **out, size_t *n) {
    (void)s;
    *out = NULL;
    *n = 0;
    const struct mg_request_info *ri = mg_get_request_info(c);
    if (ri->content_length > 0 && (unsigned long long)ri->content_length > limit)
        return srv_reply_error(c, 413, "payload_too_large", "request body of %lld bytes is over the limit of %zu",
                               ri->content_length, limit);
    size_t cap = ri->content_length > 0 ? (size_t)ri->content_length + 1 : 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) return srv_reply_error(c, 500, "out_of_memory", "out of memory reading the request");
    for (;;) {
        if (len + 1 >= cap) {
            if (cap > limit + 1) break;
            size_t ncap = cap * 2 > limit + 2 ? limit + 2 : cap * 2;
            char *b = realloc(buf, ncap);
            if (!b) { free(buf); return srv_reply_error(c, 500, "out_of_memory", "out of memory reading the request"); }
            buf = b;
            cap = ncap;
        }
        int k = mg_read(c, buf + len, cap - len - 1);
        if (k < 0) { free(buf); return srv_reply_error(c, 400, "bad_request", "could not read the request body"); }
        if (k == 0) break;
        len += (size_t)k;
        if (len > limit) break;
    }
    if (len > limit) {
        free(buf);
        return srv_reply_error(c, 413, "payload_too_large", "request body is over the limit of %zu bytes", limit);
    }
    buf[len] = 0;
    *out = buf;
    *n = len;
    return 0;
}

int srv_read_json(srv *s, struct mg_connection *c, int allow_empty, cJSON **out) {
    *out = NULL;
    char *body;
    size_t n;
    int st = srv_read_body(s, c, s->max_body, &body, &n);
    if (st) return st;
    size_t k = 0;
    while (k < n && (body[k] == ' ' || body[k] == '\n' || body[k] == '\r' || body[k] == '\t')) k++;
    if (k == n && allow_empty) {
        free(body);
        *out = cJSON_CreateObject();
        return *out ? 0 : srv_reply_error(c, 500, "out_of_memory", "out of memory");
    }
    if (strlen(body) != n) {
        free(body);
        return srv_reply_error(c, 400, "invalid_json", "the request body holds a NUL byte");
    }
    sd_error err;
    sd_error_clear(&err);
    cJSON *j = NULL;
    /* exact: seeds above 2^53 must reach the graph unrounded */
    if (sd_json_parse_exact(body, "request body", &j, &err) != SD_OK) {
        free(body);
        return srv_reply_error(c, 400, "invalid_json", "%s", err.msg);
    }
    free(body);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return srv_reply_error(c, 400, "invalid_json", "the request body must be a JSON object");
    }
    *out = j;
    return 0;
}

char *srv_query(struct mg_connection *c, const char *name) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    if (!ri->query_string) return NULL;
    size_t cap = strlen(ri->query_string) + 1;
    char *v = malloc(cap);
    if (!v) return NULL;
    int k = mg_get_var(ri->query_string, strlen(ri->query_string), name, v, cap);
    if (k < 0) { free(v); return NULL; }
    return v;
}

/* ---- addresses and authentication ---------------------------------------- */

int sd_server_addr_is_local(const char *addr) {
    if (!addr || !strcmp(addr, "localhost")) return 1;
    struct in_addr a4;
    if (inet_pton(AF_INET, addr, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, addr, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

/* Constant time in the secret: both sides are hashed first, so neither the
 * position of the first difference nor the token's length shows in timing. */
static int token_equal(const char *given, const char *token) {
    uint8_t a[32], b[32];
    sd_sha256(given, strlen(given), a);
    sd_sha256(token, strlen(token), b);
    unsigned diff = 0;
    for (int i = 0; i < 32; i++) diff |= (unsigned)(a[i] ^ b[i]);
    return diff == 0;
}

/* Authorization: Bearer <token>, or ?token= for what a browser cannot send
 * headers with (the page's WebSocket and <img> URLs). */
int srv_authorized(srv *s, struct mg_connection *c) {
    if (!s->o->token) return 1;
    const char *h = mg_get_header(c, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7)) return token_equal(h + 7, s->o->token);
    char *q = srv_query(c, "token");
    int ok = q && token_equal(q, s->o->token);
    free(q);
    return ok;
}

/* ---- civetweb callbacks -------------------------------------------------- */

typedef struct handoff {
    srv *s;
    struct mg_connection *c;
    int status;
} handoff;

static int handle(srv *s, struct mg_connection *c) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    if (!srv_authorized(s, c))
        return srv_reply(c, 401, "application/json",
                         "{\"error\": {\"type\": \"unauthorized\", \"message\": \"missing or wrong bearer token\"}}",
                         strlen("{\"error\": {\"type\": \"unauthorized\", \"message\": \"missing or wrong bearer token\"}}"),
                         "WWW-Authenticate: Bearer\r\n");
    /* civetweb leaves the path encoded (decode_url no): it is decoded here,
     * once, and the userdata routes split theirs before decoding (an encoded
     * '/' in a file name). A path that decodes to a NUL byte is refused. */
    const char *raw = ri->local_uri ? ri->local_uri : "/";
    size_t n = strlen(raw);
    char *decoded = malloc(n + 1);
    if (!decoded) return srv_reply_error(c, 503, "busy", "out of memory");
    int k = mg_url_decode(raw, (int)n, decoded, (int)n + 1, 0);
    if (k < 0 || (size_t)k != strlen(decoded)) {
        free(decoded);
        return srv_reply_error(c, 400, "bad_request", "the path holds a NUL byte");
    }
    const char *path = decoded;
    /* ComfyUI serves every route under /api too. */
    if (!strncmp(path, "/api/", 5)) path += 4;
    else if (!strcmp(path, "/api")) path = "/";
    int st = srv_route(s, c, ri->request_method, path);
    free(decoded);
    return st;
}

static void *handle_main(void *arg) {
    handoff *h = arg;
    h->status = handle(h->s, h->c);
    return NULL;
}

/* civetweb's worker threads have the stack size Debian built it with
 * (100 KiB, most of which civetweb uses itself), too little for parsing and
 * validating a workflow. Each request is therefore handled on a thread of
 * our own with an ordinary stack while the civetweb thread waits; the
 * connection is only ever used by one thread at a time. */
static int on_request(struct mg_connection *c, void *cbdata) {
    handoff h = {cbdata, c, 0};
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)8 << 20);
    int ok = pthread_create(&t, &attr, handle_main, &h) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) return srv_reply_error(c, 503, "busy", "cannot start a request thread");
    pthread_join(t, NULL);
    return h.status;
}

/* civetweb formats the access line (address, request line, status, bytes);
 * a ?token= is cut out before it is written. */
static int on_log_access(const struct mg_connection *c, const char *message) {
    srv *s = mg_get_user_data(mg_get_context(c));
    char *line = strdup(message);
    if (!line) return 1;
    for (char *t = strstr(line, "token="); t; t = strstr(t + 6, "token=")) {
        char *e = t + 6;
        while (*e && *e != '&' && *e != ' ') *e++ = '*';
    }
    srv_log(s, "%s", line);
    free(line);
    return 1;
}

static int on_begin_request(struct mg_connection *c) {
    return srv_guard_request(mg_get_user_data(mg_get_context(c)), c);
}

static void on_connection_close(const struct mg_connection *c) {
    srv_guard_conn_close(mg_get_user_data(mg_get_context(c)), c);
}

static int on_log_message(const struct mg_connection *c, const char *message) {
    srv *s = mg_get_user_data(c ? mg_get_context(c) : NULL);
    if (s) srv_log(s, "http: %s", message);
    return 1;
}

static void free_job_list(srv *s) {
    for (size_t i = 0; i < s->n_hist; i++) cJSON_Delete(s->hist[i].entry);
    free(s->hist);
    free(s->ws);
}

sd_status sd_server_run(const sd_server_opts *o, sd_error *err) {
    const char *listen = o->listen ? o->listen : "127.0.0.1";
    int port = o->port; /* 0: any free port (reported through on_listen and the log) */
    if (!o->env) return sd_error_set(err, SD_ERR_INVALID, "sd_server_run: no environment");
    if (port < 0 || port > 65535) return sd_error_set(err, SD_ERR_INVALID, "--port %d is out of range", port);
    if (!sd_server_addr_is_local(listen) && !o->token && !o->insecure)
        return sd_error_set(err, SD_ERR_INVALID,
                            "--listen %s is reachable from other machines: give --token TOKEN (clients send "
                            "'Authorization: Bearer TOKEN') or, on a trusted network, --insecure",
                            listen);
    if (o->cors_origin && (!*o->cors_origin || strpbrk(o->cors_origin, "\r\n")))
        return sd_error_set(err, SD_ERR_INVALID, "--enable-cors-header: the origin must be '*' or one origin "
                                                 "such as https://app.example:3000");
    if (o->token && strlen(o->token) < 8)
        return sd_error_set(err, SD_ERR_INVALID, "--token must be at least 8 characters");
    if (strchr(listen, ':') && listen[0] != '[')
        return sd_error_set(err, SD_ERR_UNSUPPORTED, "--listen %s: IPv6 addresses are not supported by this build", listen);

    srv s;
    memset(&s, 0, sizeof s);
    s.o = o;
    s.env = o->env;
    s.log = o->log ? o->log : stderr;
    s.max_body = o->max_body ? o->max_body : (size_t)16 << 20;
    s.max_upload = o->max_upload ? o->max_upload : (size_t)100 << 20; /* ComfyUI's --max-upload-size */
    s.max_history = o->max_history ? o->max_history : 1000;
    s.max_queue = o->max_queue ? o->max_queue : 1000;
    s.max_ws = o->max_ws_clients ? o->max_ws_clients : 32;
    s.max_ws_queued = o->max_ws_queued ? o->max_ws_queued : (size_t)8 << 20;
    s.memo_budget = o->memo_budget ? o->memo_budget : (size_t)4 << 30;
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    pthread_mutex_init(&s.ws_mu, NULL);
    pthread_cond_init(&s.ws_cv, NULL);
    pthread_mutex_init(&s.log_mu, NULL);

    sd_status rc = SD_OK;
    s.rq = o->redis_url != NULL;
    s.rq_prefix = o->redis_prefix && *o->redis_prefix ? o->redis_prefix : "sdflow";
    s.rq_ttl = o->redis_ttl > 0 ? o->redis_ttl : 86400;
    if (s.rq && srv_redis_check_prefix(s.rq_prefix, err)) { rc = err->code; goto out; }
    if (srv_userdata_start(&s, err)) { rc = err->code; goto out; }
    if (s.rq ? srv_rq_start(&s, err) : srv_queue_start(&s, err)) { rc = err->code ? err->code : SD_ERR_INTERNAL; goto out; }

    char ports[128], threads[32], timeout_ms[32];
    snprintf(ports, sizeof ports, "%s:%d", listen, port);
    /* One civetweb thread per open connection: the WebSocket clients plus
     * room for ordinary requests, enough that the connections one address
     * may hold (guard.c) leave most of them to the others. */
    size_t n_threads = s.max_ws + 64;
    snprintf(threads, sizeof threads, "%zu", n_threads);
    /* the whole request line and headers must arrive within it (a client
     * that trickles them is dropped); each later read or write waits at most
     * as long */
    double req_timeout = o->request_timeout > 0 ? o->request_timeout : 10;
    snprintf(timeout_ms, sizeof timeout_ms, "%.0f", req_timeout * 1000 < 1 ? 1 : req_timeout * 1000);
    srv_guard_init(&s);
    const char *options[] = {
        "listening_ports", ports,
        "num_threads", threads,
        "request_timeout_ms", timeout_ms,
        "websocket_timeout_ms", "60000",
        "enable_websocket_ping_pong", "yes", /* idle clients are pinged, not dropped */
        "enable_keep_alive", "no",
        "max_request_size", "16384",         /* the request line and headers */
        "decode_url", "no",                  /* http.c decodes (see handle) */
        /* civetweb answers CORS preflights itself, with "*", unless these
         * are empty: guard.c decides (--enable-cors-header) */
        "access_control_allow_origin", "",
        "access_control_allow_methods", "",
        "access_control_allow_headers", "",
        NULL,
    };
    struct mg_callbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.log_access = on_log_access;
    cb.log_message = on_log_message;
    cb.begin_request = on_begin_request;
    cb.connection_close = on_connection_close;
    (void)srv_thread_stack_floor(); /* see thread_stack.c */
    mg_init_library(0);
    s.mg = mg_start(&cb, &s, options);
    if (!s.mg) {
        rc = sd_error_set(err, SD_ERR_IO, "cannot listen on %s:%d (address in use, or not an address of this machine)",
                          listen, port);
        srv_queue_stop(&s);
        srv_rq_stop(&s);
        goto out;
    }
    mg_set_request_handler(s.mg, "**", on_request, &s);
    srv_ws_register(&s);

    int bound = port;
    struct mg_server_port sp[4];
    int np = mg_get_server_ports(s.mg, 4, sp);
    if (np > 0) bound = sp[0].port;
    if (srv_guard_listen(&s, bound))
        srv_log(&s, "warning: too many servers in this process: connections per address are not limited");
    srv_log(&s, "sdflow serve: listening on http://%s:%d/%s%s", listen, bound,
            o->token ? " (bearer token required)" : "", s.rq ? " (prompts go to redis for sdflow worker)" : "");
    if (o->on_listen) o->on_listen(o->on_listen_user, bound);

    while (!(o->stop && *o->stop)) usleep(100 * 1000);
    srv_log(&s, "sdflow serve: stopping");
    pthread_mutex_lock(&s.mu);
    s.interrupt = 1; /* the running prompt stops at its next check */
    pthread_mutex_unlock(&s.mu);
    srv_ws_stop(&s);
    mg_stop(s.mg); /* closes every connection (their close handlers run here) */
    srv_queue_stop(&s);
    srv_rq_stop(&s);
out:
    srv_userdata_stop(&s);
    free_job_list(&s);
    srv_guard_free(&s);
    mg_exit_library();
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.ws_mu);
    pthread_cond_destroy(&s.ws_cv);
    pthread_mutex_destroy(&s.log_mu);
    return rc;
}
