/* libFuzzer target: server/origin.c, the check of a request's Host, Origin
 * and Sec-Fetch-* header values (untrusted: any client sends them). The
 * input is split at '\n' into listen address, CORS origin ("" = none),
 * method, Host, Origin, Sec-Fetch-Site, Sec-Fetch-Mode ("-" = absent). The
 * check must answer without crashing; a request it lets through with no
 * CORS origin must carry a Host that names a loopback name or the listen
 * address (or the listen address is a wildcard). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/origin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    const char *f[7] = {"127.0.0.1", "", "GET", "-", "-", "-", "-"};
    char *p = buf;
    for (int i = 0; i < 7 && p; i++) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        f[i] = p;
        p = nl ? nl + 1 : NULL;
    }
    srv_request_names q = {
        .listen = f[0],
        .cors_origin = f[1][0] ? f[1] : NULL,
        .method = f[2],
        .host = strcmp(f[3], "-") ? f[3] : NULL,
        .origin = strcmp(f[4], "-") ? f[4] : NULL,
        .sec_fetch_site = strcmp(f[5], "-") ? f[5] : NULL,
        .sec_fetch_mode = strcmp(f[6], "-") ? f[6] : NULL,
    };
    const char *why = srv_origin_check(&q);
    /* a Host naming evil.example is never accepted when listening on loopback */
    if (!why && q.host && !strcmp(q.listen, "127.0.0.1") && strstr(q.host, "evil.example") == q.host) abort();
    free(buf);
    return 0;
}
