/* unicode_hf.c - lookups in the Hugging Face tokenizers' Unicode tables. */
#include "models/text/unicode_hf.h"

int sd_uc_hf_is_letter(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return sd_uc_in(sd_uc_hf_letter, sd_uc_hf_letter_count, cp);
}

int sd_uc_hf_is_number(uint32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return sd_uc_in(sd_uc_hf_number, sd_uc_hf_number_count, cp);
}

int sd_uc_hf_is_space(uint32_t cp) { return sd_uc_in(sd_uc_hf_space, sd_uc_hf_space_count, cp); }

static int ccc(uint32_t cp) {
    return cp < 0x300 ? 0 : sd_uc_ccc_lookup(sd_uc_hf_ccc, sd_uc_hf_ccc_count, cp);
}

static size_t decompose(uint32_t cp, uint32_t *out) {
    size_t lo = 0, hi = sd_uc_hf_decomps_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const sd_uc_hf_decomp *e = &sd_uc_hf_decomps[mid];
        if (cp < e->cp) hi = mid;
        else if (cp > e->cp) lo = mid + 1;
        else {
            for (int i = 0; i < e->n; i++) out[i] = e->d[i];
            return e->n;
        }
    }
    return 0;
}

static uint32_t compose(uint32_t a, uint32_t b) {
    return sd_uc_comp_lookup(sd_uc_hf_comp, sd_uc_hf_comp_count, a, b);
}

int sd_uc_hf_nfc(const uint32_t *cps, size_t n, uint32_t **out, size_t *out_n) {
    static const sd_uc_norm data = {ccc, decompose, compose};
    return sd_uc_nfc_with(&data, cps, n, out, out_n);
}
