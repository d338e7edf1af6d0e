/* unicode_grapheme.c - UAX #29 extended grapheme cluster boundaries. */
#include "models/text/unicode_grapheme.h"

sd_gcb sd_uc_gcb_of(uint32_t cp) {
    size_t lo = 0, hi = sd_uc_gcb_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sd_uc_gcb[mid].hi < cp) lo = mid + 1;
        else if (sd_uc_gcb[mid].lo > cp) hi = mid;
        else return (sd_gcb)sd_uc_gcb[mid].cls;
    }
    return SD_GCB_ANY;
}

static int is_linker(uint32_t cp) {
    for (size_t i = 0; i < sd_uc_incb_linker_count; i++)
        if (sd_uc_incb_linker[i] == cp) return 1;
    return 0;
}

static int is_control(sd_gcb c) { return c == SD_GCB_CONTROL || c == SD_GCB_CR || c == SD_GCB_LF; }

size_t sd_uc_grapheme_len(const uint32_t *cps, size_t n) {
    sd_gcb prev = sd_uc_gcb_of(cps[0]);
    /* GB9c: 0 outside a conjunct, 1 after InCB=Consonant [Extend|Linker]*
     * with no linker yet, 2 once a linker was seen */
    int incb = prev == SD_GCB_INCB_CONSONANT ? 1 : 0;
    /* GB11: 1 after ExtPict Extend*, 2 after ExtPict Extend* ZWJ */
    int emoji = prev == SD_GCB_EXTENDED_PICTOGRAPHIC ? 1 : 0;
    /* GB12/13: regional indicators in the run ending at prev */
    size_t ri = prev == SD_GCB_REGIONAL_INDICATOR ? 1 : 0;
    size_t i = 1;
    for (; i < n; i++) {
        uint32_t cp = cps[i];
        sd_gcb cur = sd_uc_gcb_of(cp);
        int join;
        if (prev == SD_GCB_CR && cur == SD_GCB_LF) join = 1;                       /* GB3 */
        else if (is_control(prev) || is_control(cur)) join = 0;                   /* GB4, GB5 */
        else if (prev == SD_GCB_L && (cur == SD_GCB_L || cur == SD_GCB_V || cur == SD_GCB_LV ||
                                      cur == SD_GCB_LVT)) join = 1;                /* GB6 */
        else if ((prev == SD_GCB_LV || prev == SD_GCB_V) && (cur == SD_GCB_V || cur == SD_GCB_T))
            join = 1;                                                               /* GB7 */
        else if ((prev == SD_GCB_LVT || prev == SD_GCB_T) && cur == SD_GCB_T) join = 1; /* GB8 */
        else if (cur == SD_GCB_EXTEND || cur == SD_GCB_ZWJ) join = 1;             /* GB9 */
        else if (cur == SD_GCB_SPACINGMARK) join = 1;                             /* GB9a */
        else if (prev == SD_GCB_PREPEND) join = 1;                                /* GB9b */
        else if (cur == SD_GCB_INCB_CONSONANT && incb == 2) join = 1;             /* GB9c */
        else if (cur == SD_GCB_EXTENDED_PICTOGRAPHIC && emoji == 2) join = 1;     /* GB11 */
        else if (prev == SD_GCB_REGIONAL_INDICATOR && cur == SD_GCB_REGIONAL_INDICATOR)
            join = ri % 2 == 1;                                                     /* GB12, GB13 */
        else join = 0;                                                              /* GB999 */
        if (!join) break;
        /* the states describe the text up to and including cur */
        if (cur == SD_GCB_INCB_CONSONANT) incb = 1;
        else if (incb && is_linker(cp)) incb = 2;
        else if (incb && !sd_uc_in(sd_uc_incb_extend, sd_uc_incb_extend_count, cp)) incb = 0;
        if (cur == SD_GCB_EXTENDED_PICTOGRAPHIC) emoji = 1;
        else if (emoji == 1 && cur == SD_GCB_EXTEND) emoji = 1;
        else if (emoji == 1 && cur == SD_GCB_ZWJ) emoji = 2;
        else emoji = 0;
        ri = cur == SD_GCB_REGIONAL_INDICATOR ? ri + 1 : 0;
        prev = cur;
    }
    return i;
}
