/* cuda_pixel.c - the ops of the image-to-image models on pixel.cu's
 * kernels: argument plumbing from validated sd_bt to the launchers. */
#include "kernels/cuda/cuda_impl.h"

#define STREAM(be) (sd_cuda_of(be)->stream)
#define LAUNCH(be, op, call) sd_cuda_check((be), (call), (op), "kernel launch")

sd_status sd_cuda_op_prelu(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w) {
    int64_t plane = 1;
    for (int i = 2; i < x->ndim; i++) plane *= x->shape[i];
    return LAUNCH(be, "prelu",
                  sd_cuda_prelu(STREAM(be), sd_cuda_f32(x), sd_cuda_f32(w), sd_cuda_f32(out),
                                x->shape[0] * x->shape[1], x->shape[1], plane,
                                sd_bt_numel(w) == 1));
}

sd_status sd_cuda_op_pixel_shuffle(sd_backend *be, sd_bt *out, const sd_bt *x, int r,
                                   int inverse) {
    const sd_bt *big = inverse ? x : out, *small = inverse ? out : x;
    return LAUNCH(be, inverse ? "pixel_unshuffle" : "pixel_shuffle",
                  sd_cuda_pixel_shuffle(STREAM(be), sd_cuda_f32(x), sd_cuda_f32(out),
                                        big->shape[0] * big->shape[1], small->shape[2],
                                        small->shape[3], r, inverse));
}

sd_status sd_cuda_op_upsample_nearest(sd_backend *be, sd_bt *out, const sd_bt *x, int factor) {
    return LAUNCH(be, "upsample_nearest",
                  sd_cuda_upsample_nearest(STREAM(be), sd_cuda_f32(x), sd_cuda_f32(out),
                                           x->shape[0] * x->shape[1], x->shape[2], x->shape[3],
                                           factor));
}
