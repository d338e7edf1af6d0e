/* kontext.c - PREFERED_KONTEXT_RESOLUTIONS and the nearest-aspect choice
 * (contract in kontext.h). */
#include "kontext.h"

#include <math.h>

/* PREFERED_KONTEXT_RESOLUTIONS (width, height), ComfyUI's order. */
static const int kontext_res[][2] = {
    {672, 1568}, {688, 1504}, {720, 1456}, {752, 1392}, {800, 1328}, {832, 1248},
    {880, 1184}, {944, 1104}, {1024, 1024}, {1104, 944}, {1184, 880}, {1248, 832},
    {1328, 800}, {1392, 752}, {1456, 720}, {1504, 688}, {1568, 672},
};

void sd_flux_kontext_size(int64_t width, int64_t height, int64_t *out_w, int64_t *out_h) {
    /* aspect in double, as Python's width / height */
    double aspect = (double)width / (double)height;
    int best = -1;
    double best_d = 0;
    for (int i = 0; i < (int)(sizeof kontext_res / sizeof *kontext_res); i++) {
        double d = fabs(aspect - (double)kontext_res[i][0] / (double)kontext_res[i][1]);
        int better = best < 0 || d < best_d ||
                     (d == best_d && (kontext_res[i][0] < kontext_res[best][0] ||
                                      (kontext_res[i][0] == kontext_res[best][0] &&
                                       kontext_res[i][1] < kontext_res[best][1])));
        if (better) {
            best = i;
            best_d = d;
        }
    }
    *out_w = kontext_res[best][0];
    *out_h = kontext_res[best][1];
}
