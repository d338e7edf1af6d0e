/* origin.c - the names a request carries, checked against the server's
 * (guard.c, docs/server.md "Threat model"): Host against loopback names and
 * --listen, Origin against Host, Sec-Fetch-Site. Pure string work on
 * untrusted header values (fuzz target: tests/fuzz/fuzz_origin.c). */
#include "origin.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

/* ---- names ----------------------------------------------------------------- */

/* "host", "host:port", "[v6]" or "[v6]:port" -> host (lowercase, without
 * brackets) and port ("" when none). 0 when it does not parse. */
static int split_hostport(const char *hp, size_t n, char *host, size_t hn, char *port, size_t pn) {
    const char *end = hp + n, *h = hp, *he, *pstart = NULL;
    if (n && hp[0] == '[') {
        h = hp + 1;
        he = memchr(h, ']', n - 1);
        if (!he) return 0;
        if (he + 1 < end) {
            if (he[1] != ':') return 0;
            pstart = he + 2;
        }
    } else {
        const char *colon = memchr(hp, ':', n);
        he = colon ? colon : end;
        if (colon) {
            if (memchr(colon + 1, ':', (size_t)(end - colon - 1))) return 0; /* bare v6: not a Host */
            pstart = colon + 1;
        }
    }
    size_t l = (size_t)(he - h);
    if (l == 0 || l >= hn) return 0;
    for (size_t i = 0; i < l; i++) host[i] = (char)tolower((unsigned char)h[i]);
    host[l] = 0;
    size_t pl = pstart ? (size_t)(end - pstart) : 0;
    if (pl >= pn) return 0;
    for (size_t i = 0; i < pl; i++)
        if (!isdigit((unsigned char)pstart[i])) return 0;
    memcpy(port, pstart ? pstart : "", pl);
    port[pl] = 0;
    return 1;
}

static int is_loopback_name(const char *host) {
    size_t n = strlen(host);
    if (!strcmp(host, "localhost") || (n > 10 && !strcmp(host + n - 10, ".localhost"))) return 1;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

static int is_wildcard(const char *listen) {
    return !strcmp(listen, "0.0.0.0") || !strcmp(listen, "::") || !strcmp(listen, "[::]");
}

/* The Host rule: a loopback name, the --listen address, or anything when
 * listening on every address. */
static int host_allowed(const char *listen, const char *host) {
    if (is_loopback_name(host) || is_wildcard(listen)) return 1;
    char lh[256], lp[16];
    if (split_hostport(listen, strlen(listen), lh, sizeof lh, lp, sizeof lp)) return !strcmp(lh, host);
    return !strcasecmp(listen, host);
}

/* Origin "scheme://host[:port]" against the Host header's host and port
 * (ComfyUI: a side without a port is compared by host name alone). */
static int same_origin(const char *origin, const char *host, const char *port) {
    const char *sep = strstr(origin, "://");
    if (!sep) return 0;
    const char *hp = sep + 3;
    size_t n = strcspn(hp, "/");
    char oh[256], op[16];
    if (!split_hostport(hp, n, oh, sizeof oh, op, sizeof op)) return 0;
    if (strcmp(oh, host)) return 0;
    return !*op || !*port || !strcmp(op, port);
}

static int cors_allows(const char *cors, const char *origin) {
    return cors && (!strcmp(cors, "*") || (origin && !strcasecmp(cors, origin)));
}

const char *srv_origin_check(const srv_request_names *q) {
    const char *hosth = q->host, *origin = q->origin;
    char host[256] = "", port[16] = "";
    if (hosth && !split_hostport(hosth, strlen(hosth), host, sizeof host, port, sizeof port))
        return "the Host header does not parse";
    if (hosth && !host_allowed(q->listen, host))
        return "the Host header names another site (DNS rebinding?): only loopback names are served "
               "unless --listen names another address";
    if (cors_allows(q->cors_origin, origin)) return NULL;
    if (origin && (!hosth || !same_origin(origin, host, port)))
        return "cross-origin request: only the server's own pages may call it without a token "
               "(--enable-cors-header opens it)";
    const char *site = q->sec_fetch_site, *mode = q->sec_fetch_mode, *method = q->method ? q->method : "";
    int navigation = mode && !strcasecmp(mode, "navigate") && (!strcmp(method, "GET") || !strcmp(method, "HEAD"));
    if (site && !strcasecmp(site, "cross-site") && !navigation)
        return "cross-site request: only the server's own pages may call it without a token "
               "(--enable-cors-header opens it)";
    return NULL;
}
