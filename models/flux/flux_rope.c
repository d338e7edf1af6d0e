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

void sd_flux_rope_table(const sd_flux_config *c, int64_t txt, int64_t h, int64_t w, float *out) {
    int half = c->head_dim / 2;
    int64_t L = txt + h * w;
    for (int64_t l = 0; l < L; l++) {
        /* ids: txt tokens (0, 0, 0); image token r * w + col: (0, r, col) */
        double pos[SD_FLUX_MAX_AXES] = {0};
        if (l >= txt && c->n_axes >= 3) {
            int64_t t = l - txt;
            pos[1] = (double)(t / w);
            pos[2] = (double)(t % w);
        }
        float *o = out + l * half * 2;
        int j = 0;
        for (int a = 0; a < c->n_axes; a++) {
            int d = c->axes_dim[a];
            for (int k = 0; k < d / 2; k++, j++) {
                double scale = linspace_at(0.0, (double)(d - 2) / (double)d, d / 2, k);
                double omega = 1.0 / pow((double)c->theta, scale);
                double ang = pos[a] * omega;
                o[2 * j] = (float)cos(ang);
                o[2 * j + 1] = (float)sin(ang);
            }
        }
    }
}
