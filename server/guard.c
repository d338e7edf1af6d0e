/* guard.c - who may talk to the server, checked before any route runs
 * (docs/server.md, "Threat model").
 *
 * A browser lets any web page send a "simple" request (a text/plain POST, a
 * GET) to any address, 127.0.0.1 included, and open a WebSocket to it; the
 * same-origin policy only hides the answer. Without a token nothing else
 * tells such a request from the user's own, so without a token:
 *   - a request whose Origin is not the server's own (scheme-less host and
 *     port compared with the Host header, as ComfyUI's origin-only
 *     middleware does), or "null", or one marked Sec-Fetch-Site: cross-site
 *     that is not a top-level GET navigation, is refused 403;
 *   - a Host header naming anything but a loopback name (localhost,
 *     *.localhost, 127.0.0.0/8, ::1) is refused 403: a page whose own name
 *     was rebound to 127.0.0.1 (DNS rebinding) is same-origin with itself,
 *     and only the Host name it sends gives it away. --listen ADDR adds ADDR
 *     to the accepted names; a wildcard --listen (0.0.0.0, ::) accepts any.
 * Clients that send no Origin and no Host (curl, scripts) are not browsers
 * and are served. --enable-cors-header [ORIGIN] opens the Origin check on
 * purpose (ComfyUI's option): any origin ("*", no value) or that one, with
 * ComfyUI's CORS headers on every reply and preflights answered 200. With
 * a token the token is the protection: no Origin or Host check.
 *
 * Every request: a NUL in the query string (%00) is refused 400, since
 * decoding would cut the value short (?filename=ok.txt%00.png naming
 * ok.txt).
 *
 * Connections: at most max_client_conns at once from one client address
 * (the ones beyond are answered 503 and closed as they are accepted, see
 * below), so that a few slow or idle clients cannot hold every civetweb
 * thread; the time to the end of the headers is civetweb's
 * request_timeout_ms (http.c).
 *
 * Runs on civetweb's threads (small stacks): small buffers only. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <civetweb.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include "internal.h"
#include "origin.h"

/* ---- the request check ---------------------------------------------------------- */

static const char *foreign(srv *s, struct mg_connection *c, const char *method) {
    srv_request_names q = {
        .listen = s->o->listen ? s->o->listen : "127.0.0.1",
        .cors_origin = s->o->cors_origin,
        .method = method,
        .host = mg_get_header(c, "Host"),
        .origin = mg_get_header(c, "Origin"),
        .sec_fetch_site = mg_get_header(c, "Sec-Fetch-Site"),
        .sec_fetch_mode = mg_get_header(c, "Sec-Fetch-Mode"),
    };
    return srv_origin_check(&q);
}

/* ---- CORS ------------------------------------------------------------------- */

void srv_guard_add_headers(struct mg_connection *c) {
    srv *s = mg_get_user_data(mg_get_context(c));
    if (!s || !s->o->cors_origin) return;
    /* ComfyUI's create_cors_middleware, header for header */
    mg_response_header_add(c, "Access-Control-Allow-Origin", s->o->cors_origin, -1);
    mg_response_header_add(c, "Access-Control-Allow-Methods", "POST, GET, DELETE, PUT, OPTIONS, PATCH", -1);
    mg_response_header_add(c, "Access-Control-Allow-Headers", "Content-Type, Authorization", -1);
    mg_response_header_add(c, "Access-Control-Allow-Credentials", "true", -1);
}

int srv_guard_request(srv *s, struct mg_connection *c) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    const char *q = ri->query_string;
    for (const char *p = q ? strchr(q, '%') : NULL; p; p = strchr(p + 1, '%'))
        if (p[1] == '0' && p[2] == '0')
            return srv_reply_error(c, 400, "bad_request", "a query value holds a NUL byte (%%00)");
    if (!s->o->token) {
        const char *why = foreign(s, c, ri->request_method);
        if (why) {
            srv_log(s, "refused %s %s from %s: %s", ri->request_method, ri->local_uri ? ri->local_uri : "?",
                    ri->remote_addr, why);
            return srv_reply_error(c, 403, "forbidden", "%s", why);
        }
    }
    if (s->o->cors_origin && !strcmp(ri->request_method, "OPTIONS"))
        return srv_reply(c, 200, "text/plain", "", 0, NULL); /* a preflight, before any token */
    return 0;
}

/* ---- connections per client address --------------------------------------------- */

/* civetweb accepts connections on its master thread and hands them to its
 * worker threads; no callback sees a connection before a worker starts
 * reading it (init_connection cannot read the client's address). The one
 * place that sees every connection first is accept() itself, so this file
 * interposes on it as thread_stack.c does on pthread_attr_setstacksize (an
 * executable's definition wins for the shared libraries that call it): a
 * connection to a listening port of a running server is counted against
 * its client address, and one over the limit is answered 503 and closed
 * there, before it can take a worker thread. Every other accept() passes
 * through. The servers are found by their port in a registry set when one
 * starts listening and cleared before it stops (srv_guard_listen/free). */

typedef struct srv_conn {
    char addr[48]; /* as civetweb's request_info.remote_addr spells it */
    int port;      /* the client's port */
} srv_conn;

#define MAX_SERVERS 8
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static srv *reg_srv[MAX_SERVERS];
static int reg_port[MAX_SERVERS];

typedef int (*accept_fn)(int, __SOCKADDR_ARG, socklen_t *restrict);
static accept_fn real_accept;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void find_real(void) { real_accept = (accept_fn)dlsym(RTLD_NEXT, "accept"); }

static int addr_port(const struct sockaddr_storage *sa, char *addr, size_t n, int *port) {
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        *port = ntohs(a->sin_port);
        return inet_ntop(AF_INET, &a->sin_addr, addr, (socklen_t)n) != NULL;
    }
    if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        *port = ntohs(a->sin6_port);
        return inet_ntop(AF_INET6, &a->sin6_addr, addr, (socklen_t)n) != NULL;
    }
    return 0;
}

/* 1 = admitted (and recorded), 0 = one too many from that address. */
static int admit(srv *s, const char *addr, int port) {
    int ok = 1;
    pthread_mutex_lock(&s->guard_mu);
    size_t same = 0;
    for (size_t i = 0; i < s->n_conns; i++) same += !strcmp(s->conns[i].addr, addr);
    if (same >= s->max_client_conns) ok = 0;
    if (ok && s->n_conns == s->cap_conns) {
        size_t cap = s->cap_conns ? s->cap_conns * 2 : 64;
        srv_conn *c = realloc(s->conns, cap * sizeof *c);
        if (c) s->conns = c, s->cap_conns = cap;
    }
    if (ok && s->n_conns < s->cap_conns) { /* not recorded when out of memory: not counted */
        snprintf(s->conns[s->n_conns].addr, sizeof s->conns[0].addr, "%s", addr);
        s->conns[s->n_conns++].port = port;
    }
    pthread_mutex_unlock(&s->guard_mu);
    if (!ok) srv_log(s, "refused a connection from %s: %zu open from that address (--max-client-connections %zu)",
                     addr, same, s->max_client_conns);
    return ok;
}

int accept(int fd, __SOCKADDR_ARG addr, socklen_t *restrict len) {
    pthread_once(&real_once, find_real);
    if (!real_accept) {
        errno = ENOSYS;
        return -1;
    }
    int c = real_accept(fd, addr, len);
    if (c < 0) return c;
    struct sockaddr_storage local, peer;
    socklen_t ll = sizeof local, pl = sizeof peer;
    char a[64], la[64];
    int lport, pport;
    if (getsockname(c, (struct sockaddr *)&local, &ll) || !addr_port(&local, la, sizeof la, &lport) ||
        getpeername(c, (struct sockaddr *)&peer, &pl) || !addr_port(&peer, a, sizeof a, &pport))
        return c;
    int admitted = 1;
    pthread_mutex_lock(&reg_mu); /* held while s is used: srv_guard_free waits for it */
    for (int i = 0; i < MAX_SERVERS; i++)
        if (reg_srv[i] && reg_port[i] == lport) {
            admitted = admit(reg_srv[i], a, pport);
            break;
        }
    pthread_mutex_unlock(&reg_mu);
    if (admitted) return c;
    static const char body[] =
        "{\"error\": {\"type\": \"too_many_connections\", \"message\": \"too many connections from this address\"}}";
    char busy[320];
    int n = snprintf(busy, sizeof busy,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n%s", sizeof body - 1, body);
    (void)!send(c, busy, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    close(c);
    errno = ECONNABORTED; /* civetweb: accept failed, nothing to serve */
    return -1;
}

void srv_guard_conn_close(srv *s, const struct mg_connection *c) {
    const struct mg_request_info *ri = mg_get_request_info(c);
    if (!ri) return;
    pthread_mutex_lock(&s->guard_mu);
    for (size_t i = 0; i < s->n_conns; i++)
        if (s->conns[i].port == ri->remote_port && !strcmp(s->conns[i].addr, ri->remote_addr)) {
            s->conns[i] = s->conns[--s->n_conns];
            break;
        }
    pthread_mutex_unlock(&s->guard_mu);
}

void srv_guard_init(srv *s) {
    s->max_client_conns = s->o->max_client_conns ? s->o->max_client_conns : 32;
    pthread_mutex_init(&s->guard_mu, NULL);
    s->guard_ready = 1;
}

int srv_guard_listen(srv *s, int port) {
    int ok = 0;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < MAX_SERVERS && !ok; i++)
        if (!reg_srv[i]) reg_srv[i] = s, reg_port[i] = port, ok = 1;
    pthread_mutex_unlock(&reg_mu);
    return ok ? 0 : -1;
}

void srv_guard_free(srv *s) {
    if (!s->guard_ready) return;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < MAX_SERVERS; i++)
        if (reg_srv[i] == s) reg_srv[i] = NULL;
    pthread_mutex_unlock(&reg_mu);
    free(s->conns);
    s->conns = NULL;
    s->n_conns = s->cap_conns = 0;
    pthread_mutex_destroy(&s->guard_mu);
    s->guard_ready = 0;
}
