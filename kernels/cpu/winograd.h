/* winograd.h - 3x3 stride-1 convolution by Winograd F(4x4, 3x3) (internal
 * to the CPU backend; conv2d.c decides which shapes take it).
 *
 * Each 4x4 output tile costs 36 multiplies per input channel instead of
 * direct convolution's 144: the input tile (6x6) and the weights (3x3) are
 * taken to a 6x6 "transformed" domain (points 0, +-1, +-2, inf), multiplied
 * elementwise there - 36 GEMMs [O x C] x [C x tiles] through OpenBLAS - and
 * brought back by the output transform. The price is rounding: transformed
 * values are sums of up to 36 scaled terms, so the f32 error per output is
 * 6-15x that of the im2col path on the unit test's data (the test states
 * and checks a bound).
 *
 * Memory stays bounded: the image is never transformed as a whole. The
 * batch's tiles go in blocks of at most 1024 tiles whose transformed input
 * and GEMM output (36 * (C + O) floats per tile) fit a 32 MiB budget; the
 * pool splits each block's input transform, GEMMs and output transform.
 * Only the transformed weights U [36][O][C] (4x the 3x3 weights) are whole,
 * computed once per call, in slices of output channels past 64 MiB; when the
 * batch is a single block, the input is transformed once and U goes in
 * slices of about 16 MiB that stay in the caches.
 */
#ifndef SD_CPU_WINOGRAD_H
#define SD_CPU_WINOGRAD_H

#include "cpu.h"

typedef struct {
    int64_t N, C, H, W; /* input x [N, C, H, W] */
    int64_t O;          /* weights w [O, C, 3, 3], bias [O] or NULL */
    int pad_h, pad_w;   /* zero padding, >= 0; output y [N, O, H+2ph-2, W+2pw-2] */
} sd_wino_shape;

/* y = conv2d(x, w, stride 1, padding) + b by Winograd F(4x4, 3x3), work
 * split over the backend's pool. isa is sd_cpu_isa() or a lower path (tests
 * run each). x, w, b, y are dense F32; y is fully written. Fails only for
 * memory (SD_ERR_NOMEM, reported through sd_backend_fail), with y
 * unspecified. */
sd_status sd_cpu_winograd_conv3x3(sd_backend *be, const float *x, const float *w, const float *b,
                                  float *y, const sd_wino_shape *s, int isa);

/* conv2d.c's general path (im2col + GEMM), any kernel / stride / padding:
 * the sd_backend_i conv2d contract. Declared here for the Winograd test,
 * which checks the two paths against each other. */
sd_status sd_cpu_conv2d_im2col(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                               const sd_bt *b, int stride, int pad_h, int pad_w);

#endif
