/* synth_fill.c - the random fill shared by the synthetic checkpoint
 * writers; see synth_internal.h. */
#include "models/synth/synth_internal.h"

#include <math.h>
#include <string.h>

#include "core/dtype.h"

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* (0, 1): never 0, so log(u) is finite. */
static double uniform(uint64_t *s) {
    return ((double)(splitmix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

sd_status sd_synth_filler_open(sd_synth_filler *f, uint64_t state, sd_error *err) {
    *f = (sd_synth_filler){sd_st_writer_new(), state, SD_OK, err};
    if (!f->w) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    return SD_OK;
}

void sd_synth_filler_add(sd_synth_filler *f, const char *name, sd_tensor *t) {
    f->rc = sd_st_writer_add(f->w, name, t, f->err);
    sd_tensor_unref(t);
}

sd_status sd_synth_filler_save(sd_synth_filler *f, const char *preset, const char *path) {
    if (!f->rc) f->rc = sd_st_writer_meta(f->w, "sdflow_random_weights", "true", f->err);
    if (!f->rc) f->rc = sd_st_writer_meta(f->w, "sdflow_preset", preset, f->err);
    if (!f->rc) f->rc = sd_st_writer_save(f->w, path, f->err);
    sd_st_writer_free(f->w);
    f->w = NULL;
    return f->rc;
}

void sd_synth_fill_gauss_f16(sd_synth_filler *f, uint16_t *p, size_t n, double sd) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = uniform(&f->state), u2 = uniform(&f->state);
        double r = sqrt(-2.0 * log(u1)) * sd;
        p[i] = sd_f32_to_f16((float)(r * cos(2 * M_PI * u2)));
        if (i + 1 < n) p[i + 1] = sd_f32_to_f16((float)(r * sin(2 * M_PI * u2)));
    }
}

int sd_synth_ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}
