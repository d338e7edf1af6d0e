/* elementwise.cu - activations, broadcasting add/mul, per-plane adds, bias
 * fills, GEGLU and F32 <-> F16/BF16 conversion. All grid-stride loops. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_common.cuh"

/* enum sd_unary_op in backend_impl.h (not includable from C++ here) */
enum {
    U_SCALE = 0, U_SILU, U_GELU, U_QUICK_GELU, U_TANH, U_RELU, U_LEAKY_RELU, U_GELU_TANH,
    U_ELU, U_HARDSWISH, U_SIGMOID, U_SOFTSIGN, U_MISH
};

__global__ void unary_k(const float *x, float *y, int64_t n, int op, float sc) {
    SD_GRID_STRIDE(i, n) {
        float v = x[i];
        switch (op) {
        case U_SCALE: v *= sc; break;
        case U_SILU: v = sd_silu(v); break;
        case U_GELU: v = sd_gelu(v); break;
        case U_QUICK_GELU: v = v / (1.0f + expf(-1.702f * v)); break;
        case U_TANH: v = tanhf(v); break;
        case U_RELU: v = v > 0.0f ? v : 0.0f; break;
        case U_LEAKY_RELU: v = v >= 0.0f ? v : v * sc; break;
        case U_GELU_TANH: { /* torch's order, unfused */
            float cube = __fmul_rn(__fmul_rn(v, v), v);
            float inner = __fmul_rn(0.79788456080286535588f, __fadd_rn(v, __fmul_rn(0.044715f, cube)));
            v = __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, tanhf(inner)));
            break;
        }
        /* torch's formulas (nn.ELU, Hardswish, Sigmoid, Softsign, Mish) */
        case U_ELU: v = v > 0.0f ? v : __fmul_rn(expm1f(v), sc); break;
        case U_HARDSWISH: v = __fdiv_rn(__fmul_rn(v, fminf(fmaxf(__fadd_rn(v, 3.0f), 0.0f), 6.0f)), 6.0f); break;
        case U_SIGMOID: v = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-v))); break;
        case U_SOFTSIGN: v = __fdiv_rn(v, __fadd_rn(fabsf(v), 1.0f)); break;
        case U_MISH: v = __fmul_rn(v, tanhf(log1pf(expf(v)))); break;
        }
        y[i] = v;
    }
}

cudaError_t sd_cuda_unary(cudaStream_t s, const float *x, float *y, int64_t n, int op, float sc) {
    if (n <= 0) return cudaSuccess;
    unary_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, y, n, op, sc);
    return cudaGetLastError();
}

__global__ void binary_k(const float *a, const float *b, float *y, int64_t n, sd_cuda_dims bd,
                         int op) {
    SD_GRID_STRIDE(i, n) {
        int64_t off = 0, rem = i;
        for (int d = bd.ndim - 1; d >= 0; d--) {
            off += (rem % bd.shape[d]) * bd.stride[d];
            rem /= bd.shape[d];
        }
        y[i] = op == 0 ? a[i] + b[off] : a[i] * b[off];
    }
}

cudaError_t sd_cuda_binary(cudaStream_t s, const float *a, const float *b, float *y, int64_t n,
                           sd_cuda_dims bd, int op) {
    if (n <= 0) return cudaSuccess;
    binary_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(a, b, y, n, bd, op);
    return cudaGetLastError();
}

__global__ void add_plane_k(const float *x, const float *b, float *y, int64_t n, int64_t plane) {
    SD_GRID_STRIDE(i, n) y[i] = x[i] + b[i / plane];
}

cudaError_t sd_cuda_add_plane(cudaStream_t s, const float *x, const float *b, float *y,
                              int64_t planes, int64_t plane) {
    int64_t n = planes * plane;
    if (n <= 0) return cudaSuccess;
    add_plane_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, b, y, n, plane);
    return cudaGetLastError();
}

__global__ void bias_nchw_k(float *y, const float *bias, int64_t n, int64_t C, int64_t plane) {
    SD_GRID_STRIDE(i, n) y[i] += bias[(i / plane) % C];
}

cudaError_t sd_cuda_bias_nchw(cudaStream_t s, float *y, const float *bias, int64_t n, int64_t C,
                              int64_t plane) {
    int64_t total = n * C * plane;
    if (total <= 0) return cudaSuccess;
    bias_nchw_k<<<sd_blocks(total), SD_THREADS, 0, s>>>(y, bias, total, C, plane);
    return cudaGetLastError();
}

__global__ void fill_rows_k(float *y, const float *bias, int64_t n, int64_t cols) {
    SD_GRID_STRIDE(i, n) y[i] = bias[i % cols];
}

cudaError_t sd_cuda_fill_rows(cudaStream_t s, float *y, const float *bias, int64_t rows,
                              int64_t cols) {
    int64_t n = rows * cols;
    if (n <= 0) return cudaSuccess;
    fill_rows_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(y, bias, n, cols);
    return cudaGetLastError();
}

__global__ void geglu_k(const float *x, float *y, int64_t n, int64_t F) {
    SD_GRID_STRIDE(i, n) {
        int64_t r = i / F, c = i - r * F;
        const float *row = x + r * 2 * F;
        y[i] = row[c] * sd_gelu(row[F + c]);
    }
}

cudaError_t sd_cuda_geglu(cudaStream_t s, const float *x, float *y, int64_t rows, int64_t F) {
    int64_t n = rows * F;
    if (n <= 0) return cudaSuccess;
    geglu_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, y, n, F);
    return cudaGetLastError();
}

__global__ void to_half_k(const float *x, void *y, int64_t n, int bf16) {
    SD_GRID_STRIDE(i, n) {
        if (bf16) ((__nv_bfloat16 *)y)[i] = __float2bfloat16_rn(x[i]);
        else ((__half *)y)[i] = __float2half_rn(x[i]);
    }
}

__global__ void from_half_k(const void *x, float *y, int64_t n, int bf16) {
    SD_GRID_STRIDE(i, n) {
        y[i] = bf16 ? __bfloat162float(((const __nv_bfloat16 *)x)[i])
                    : __half2float(((const __half *)x)[i]);
    }
}

__global__ void widen_k(const void *x, float *y, int64_t n, int elem, float scale) {
    /* __fmul_rn: one rounded F32 product, as the CPU's scaled table */
    SD_GRID_STRIDE(i, n) y[i] = scale != 0.0f ? __fmul_rn(sd_load_elem(x, i, elem), scale) : sd_load_elem(x, i, elem);
}

cudaError_t sd_cuda_widen(cudaStream_t s, const void *x, float *y, int64_t n, int elem, float scale) {
    if (n <= 0) return cudaSuccess;
    widen_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, y, n, elem, scale);
    return cudaGetLastError();
}

cudaError_t sd_cuda_f32_to_half(cudaStream_t s, const float *x, void *y, int64_t n, int bf16) {
    if (n <= 0) return cudaSuccess;
    to_half_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, y, n, bf16);
    return cudaGetLastError();
}

cudaError_t sd_cuda_half_to_f32(cudaStream_t s, const void *x, float *y, int64_t n, int bf16) {
    if (n <= 0) return cudaSuccess;
    from_half_k<<<sd_blocks(n), SD_THREADS, 0, s>>>(x, y, n, bf16);
    return cudaGetLastError();
}
