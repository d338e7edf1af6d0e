/* test_sag.c - sd_sag_degrade (models/sampling/sag.h) on its edges, where
 * the golden run (nodes.golden_guidance_more) does not go:
 *   - a mass nowhere above the threshold keeps x0 exactly (the mask is 0:
 *     blurred * 0 + x0 * 1);
 *   - a mass everywhere above it blurs a constant plane to that constant
 *     (the normalised kernel sums to 1 within float32 rounding: nine
 *     products summed, bound 81 * 2^-24 relative);
 *   - only the key tokens above the threshold blur their block of the
 *     latent (rows x cols layout of ComfyUI's search, nearest resize);
 *   - a latent of 4 rows or columns, and a token count with no layout
 *     (ComfyUI's search gives up on fewer than 4 tokens), are errors. */
#include <math.h>
#include <string.h>

#include "models/sampling/sag.h"
#include "testutil.h"

int main(void) {
    sd_error err;
    enum { B = 1, C = 2, H = 16, W = 24 };
    static float x0[B * C * H * W], out[B * C * H * W];
    const int64_t shape[4] = {B, C, H, W};
    for (int i = 0; i < B * C * H * W; i++) x0[i] = (float)((i * 37) % 11) - 5.0f;
    /* 6 tokens on a 16 x 24 latent: 2 rows x 3 columns */
    float mass[6] = {0.5f, 1.0f, 0.9f, 0.2f, 0.99f, 0.0f};
    CHECK_OK(sd_sag_degrade(x0, shape, mass, 6, 2.0, 1.0, out, &err), &err);
    CHECK(memcmp(out, x0, sizeof out) == 0);

    /* a constant plane, every token strong */
    static float cst[B * C * H * W];
    for (int i = 0; i < B * C * H * W; i++) cst[i] = 3.0f;
    float all[6] = {2, 2, 2, 2, 2, 2};
    CHECK_OK(sd_sag_degrade(cst, shape, all, 6, 1.5, 1.0, out, &err), &err);
    double worst = 0;
    for (int i = 0; i < B * C * H * W; i++) worst = fmax(worst, fabs(out[i] - 3.0));
    CHECK_MSG(worst <= 3.0 * 81 * ldexp(1.0, -24), "constant plane blurred to %g off", worst);

    /* token 4 (row 1, column 1) strong: rows 8..15, columns 8..15 blurred */
    float one[6] = {0, 0, 0, 0, 1.5f, 0};
    CHECK_OK(sd_sag_degrade(x0, shape, one, 6, 2.0, 1.0, out, &err), &err);
    int inside_changed = 0, outside_changed = 0;
    for (int c = 0; c < C; c++)
        for (int r = 0; r < H; r++)
            for (int q = 0; q < W; q++) {
                int i = (c * H + r) * W + q, in = r >= 8 && q >= 8 && q < 16;
                if (out[i] != x0[i]) *(in ? &inside_changed : &outside_changed) += 1;
            }
    CHECK_MSG(inside_changed > 0 && outside_changed == 0, "blurred %d inside, %d outside the block",
              inside_changed, outside_changed);

    const int64_t small[4] = {1, 1, 4, 24};
    CHECK(sd_sag_degrade(x0, small, mass, 6, 2.0, 1.0, out, &err) == SD_ERR_INVALID);
    CHECK(sd_sag_degrade(x0, shape, mass, 1, 2.0, 1.0, out, &err) == SD_ERR_INVALID);
    CHECK(sd_sag_degrade(x0, shape, mass, 3, 2.0, 1.0, out, &err) == SD_ERR_INVALID);
    return sd_test_finish();
}
