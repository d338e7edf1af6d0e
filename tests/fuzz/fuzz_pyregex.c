/* libFuzzer target: the regex and string nodes' text handling on untrusted
 * workflow strings (models/text/pyregex.h, pystr.h). Input: one flags byte,
 * then pattern NUL replacement NUL subject. The pattern is rewritten and
 * compiled (a refusal must say why and hand out nothing); a compiled one
 * scans the subject as re.finditer does (every match inside the subject,
 * each after the previous, the scan ending) and substitutes the
 * replacement (a refused replacement hands out nothing). The subject also
 * goes through the str operations. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/text/pyregex.h"
#include "models/text/pystr.h"

static const char *part(const char **p, const char *end) {
    const char *s = *p, *z = memchr(s, 0, (size_t)(end - s));
    *p = z ? z + 1 : end;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    char *buf = malloc(size + 3);
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    memset(buf + size - 1, 0, 4);
    const char *p = buf, *end = buf + size - 1;
    const char *pattern = part(&p, end), *repl = p < end ? part(&p, end) : "", *subject = p < end ? part(&p, end) : "";
    int flags = data[0] & 7;
    sd_error err;
    sd_pyregex *re = NULL;
    sd_status rc = sd_pyregex_compile(pattern, flags, &re, &err);
    if (rc != SD_OK) {
        if (re || !err.msg[0]) abort();
    } else {
        size_t len = strlen(subject), last = 0;
        sd_pyscan scan = {0};
        sd_pymatch m;
        int found = 1, n = 0;
        while (n++ < 10000) {
            if (sd_pyregex_next(re, subject, len, &scan, &m, &found, &err) != SD_OK || !found) break;
            if (m.start[0] > m.end[0] || m.end[0] > len || m.start[0] < last) abort();
            last = m.end[0];
        }
        if (n > 10000 && len < 5000) abort(); /* at most one match per position plus one */
        char *out = NULL;
        rc = sd_pyregex_sub(re, subject, repl, (int)(data[0] >> 3), &out, &err);
        if ((rc == SD_OK) != (out != NULL)) abort();
        free(out);
        sd_pyregex_free(re);
    }
    char *s[] = {sd_pystr_upper(subject), sd_pystr_lower(subject), sd_pystr_title(subject),
                 sd_pystr_capitalize(subject), sd_pystr_strip(subject, 1, 1),
                 sd_pystr_slice(subject, -(int64_t)(data[0] % 7), (int64_t)(data[0] % 11)),
                 sd_pystr_replace(subject, pattern, repl)};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) free(s[i]);
    (void)sd_pystr_len(subject);
    free(buf);
    return 0;
}
