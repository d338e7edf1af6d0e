/* origin.h - is a request from a page other than the server's own? The
 * decision guard.c takes without a token (docs/server.md, "Threat model"),
 * as a pure function of the request's header values, so that it can be
 * tested and fuzzed without a server. */
#ifndef SD_SERVER_ORIGIN_H
#define SD_SERVER_ORIGIN_H

typedef struct srv_request_names {
    const char *listen;       /* the address the server listens on ("127.0.0.1", "0.0.0.0", ...) */
    const char *cors_origin;  /* --enable-cors-header: "*", one origin, or NULL */
    const char *method;       /* "GET", "POST", ... */
    /* the request's headers, NULL when absent */
    const char *host, *origin, *sec_fetch_site, *sec_fetch_mode;
} srv_request_names;

/* NULL when the request may go on; else why not (a static string, for the
 * 403 and the log):
 *   - a Host that does not parse, or names neither a loopback name
 *     (localhost, *.localhost, 127.0.0.0/8, ::1) nor the listen address
 *     (a wildcard listen address accepts any);
 *   - unless cors_origin allows it ("*", or equal to Origin): an Origin
 *     that is not Host's (host, and port when both have one; "null"
 *     included), or Sec-Fetch-Site: cross-site on anything but a GET/HEAD
 *     navigation. */
const char *srv_origin_check(const srv_request_names *q);

#endif
