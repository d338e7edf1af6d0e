/* flux_rope.c - ComfyUI's EmbedND rotation table on the host, in float64
 * (comfy/ldm/flux/math.py rope(): torch.linspace scales and
 * 1 / theta^scale frequencies in float64, the angle pos * omega in float64,
 * cos and sin rounded to float32 at the end). */
#include "flux_internal.h"

#include <math.h>

/* torch.linspace(start, end, steps) in float64 on the CPU: the first half
 * counted up from start, the second half down from end, so both ends are
 * exact. */
static double linspace_at(double start, double end, int64_t steps, int64_t i) {
    if (steps == 1) return start;
    double step = (end - start) / (double)(steps - 1);
    return i < steps / 2 ? start + step * (double)i : end - step * (double)(steps - i - 1);
}

void sd_flux_rope_table_grids(const sd_flux_config *c, int64_t txt, const sd_flux_grid *g, int n, float *out) {
    int half = c->head_dim / 2;
    int64_t l = 0, L = txt;
    for (int k = 0; k < n; k++) L += g[k].h * g[k].w;
    for (int k = -1; l < L; l++) {
        /* ids: txt tokens (0, 0, 0); token r * w + col of grid k:
         * (index, r + h_off, col + w_off) */
        double pos[SD_FLUX_MAX_AXES] = {0};
        if (l >= txt && c->n_axes >= 3) {
            int64_t t = l - txt;
            k = 0;
            while (k < n - 1 && t >= g[k].h * g[k].w) t -= g[k].h * g[k].w, k++;
            pos[0] = g[k].index;
            pos[1] = (double)(t / g[k].w + g[k].h_off);
            pos[2] = (double)(t % g[k].w + g[k].w_off);
        }
        float *o = out + l * half * 2;
        int j = 0;
        for (int a = 0; a < c->n_axes; a++) {
            int d = c->axes_dim[a];
            for (int q = 0; q < d / 2; q++, j++) {
                double scale = linspace_at(0.0, (double)(d - 2) / (double)d, d / 2, q);
                double omega = 1.0 / pow((double)c->theta, scale);
                double ang = pos[a] * omega;
                o[2 * j] = (float)cos(ang);
                o[2 * j + 1] = (float)sin(ang);
            }
        }
    }
}

void sd_flux_rope_table(const sd_flux_config *c, int64_t txt, int64_t h, int64_t w, float *out) {
    sd_flux_grid g = {0.0, h, w, 0, 0};
    sd_flux_rope_table_grids(c, txt, &g, 1, out);
}
