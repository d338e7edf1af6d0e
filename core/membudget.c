/* membudget.c - the per-allocation memory estimate (membudget.h). */
#include "membudget.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

uint64_t sd_mem_physical(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0;
    return (uint64_t)pages * (uint64_t)page;
}

sd_status sd_mem_parse(const char *text, uint64_t *out, sd_error *err) {
    const char *s = text ? text : "";
    char *end = NULL;
    errno = 0;
    unsigned long long v = isdigit((unsigned char)s[0]) ? strtoull(s, &end, 10) : 0;
    int ok = end && end != s && !errno;
    uint64_t mul = 1;
    if (ok && *end) {
        const char *units = "kmgt";
        const char *u = strchr(units, tolower((unsigned char)*end));
        if (!u) ok = 0;
        else {
            for (const char *p = units; p <= u; p++) mul *= 1024;
            end++;
            if (*end == 'i' || *end == 'I') end++;
            if (*end == 'b' || *end == 'B') end++;
            ok = *end == '\0';
        }
    }
    uint64_t r;
    if (!ok || __builtin_mul_overflow((uint64_t)v, mul, &r))
        return sd_error_set(err, SD_ERR_INVALID,
                            "memory size '%s' is not a number of bytes (e.g. 16G, 512M; 0 = no limit)", s);
    *out = r;
    return SD_OK;
}

uint64_t sd_mem_tensor_bytes(int ndim, const int64_t *shape, uint64_t elem_size) {
    uint64_t n = elem_size;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[i], &n)) return UINT64_MAX;
    }
    return n;
}

const char *sd_mem_format(uint64_t bytes, char *buf, size_t n) {
    static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 6) v /= 1024.0, u++;
    if (u == 0) snprintf(buf, n, "%llu bytes", (unsigned long long)bytes);
    else snprintf(buf, n, "%.1f %s", v, unit[u]);
    return buf;
}

sd_status sd_mem_check(const sd_node_ctx *ctx, const char *input, uint64_t bytes, const char *what,
                       sd_error *err) {
    if (!ctx || !ctx->env || ctx->env->max_memory == 0 || bytes <= ctx->env->max_memory) return SD_OK;
    char need[32], lim[32];
    if (bytes == UINT64_MAX) snprintf(need, sizeof need, "more than 16 EiB");
    else sd_mem_format(bytes, need, sizeof need);
    sd_mem_format(ctx->env->max_memory, lim, sizeof lim);
    sd_error_set(err, SD_ERR_NOMEM,
                 "%s needs %s (%llu bytes), more than the memory limit of %s "
                 "(--max-memory or SDFLOW_MAX_MEMORY; default: physical RAM)",
                 what ? what : "this allocation", need, (unsigned long long)bytes, lim);
    sd_error_at(err, ctx->node_id, ctx->class_type, input);
    return SD_ERR_NOMEM;
}
