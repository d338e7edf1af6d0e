/* util.c - where the cache lives by default, and size strings ("2G"). */
#include "cache.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* mkdir -p; 0 on success. */
static int make_dirs(const char *path) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -1;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    struct stat sb;
    return stat(tmp, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : -1;
}

sd_status sd_cache_default_path(char **out, sd_error *err) {
    *out = NULL;
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    char dir[4096];
    /* XDG says a relative XDG_CACHE_HOME is invalid and must be ignored. */
    if (xdg && xdg[0] == '/') snprintf(dir, sizeof dir, "%s/sdflow", xdg);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/sdflow", home);
    else return sd_error_set(err, SD_ERR_IO, "cache: neither XDG_CACHE_HOME nor HOME is set");
    if (make_dirs(dir) != 0)
        return sd_error_set(err, SD_ERR_IO, "cache: cannot create directory %s: %s", dir, strerror(errno));
    size_t n = strlen(dir) + sizeof "/cache.db";
    char *p = malloc(n);
    if (!p) return sd_error_set(err, SD_ERR_NOMEM, "cache: out of memory");
    snprintf(p, n, "%s/cache.db", dir);
    *out = p;
    return SD_OK;
}

sd_status sd_cache_parse_size(const char *s, int64_t *out, sd_error *err) {
    *out = 0;
    if (!s) return sd_error_set(err, SD_ERR_INVALID, "size: missing value");
    const char *p = s;
    while (isspace((unsigned char)*p)) p++;
    if (!isdigit((unsigned char)*p) && *p != '.')
        return sd_error_set(err, SD_ERR_INVALID, "size '%s': expected a number such as 500M or 2G", s);
    errno = 0;
    char *end;
    double v = strtod(p, &end);
    if (end == p || errno == ERANGE || !isfinite(v) || v < 0)
        return sd_error_set(err, SD_ERR_INVALID, "size '%s': not a valid number", s);
    while (isspace((unsigned char)*end)) end++;
    double mult = 1;
    const char *u = end;
    switch (toupper((unsigned char)*u)) {
    case 'K': mult = 1024.0; u++; break;
    case 'M': mult = 1024.0 * 1024; u++; break;
    case 'G': mult = 1024.0 * 1024 * 1024; u++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024; u++; break;
    default: break;
    }
    if (mult > 1 && (*u == 'i' || *u == 'I')) {
        u++;
        if (toupper((unsigned char)*u) != 'B')
            return sd_error_set(err, SD_ERR_INVALID, "size '%s': unknown unit", s);
    }
    if (toupper((unsigned char)*u) == 'B') u++;
    while (isspace((unsigned char)*u)) u++;
    if (*u) return sd_error_set(err, SD_ERR_INVALID, "size '%s': unknown unit (use K, M, G or T)", s);
    double bytes = v * mult;
    if (bytes >= 9.2e18) return sd_error_set(err, SD_ERR_INVALID, "size '%s' is too large", s);
    *out = (int64_t)bytes;
    return SD_OK;
}
