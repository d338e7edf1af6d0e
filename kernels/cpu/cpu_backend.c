/* cpu_backend.c - the CPU backend: host tensors as storage, the pool, and
 * the vtable pointing at the kernel files. */
#include "cpu.h"
#include "dnnl_bf16.h"
#include "dnnl_pack.h"
#include "kernels/cpus.h"

#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_single_thread(void) { openblas_set_num_threads(1); }

static void *make_pool(void *n_threads) { return sd_pool_new(*(int *)n_threads); }

static void cpu_destroy(sd_backend *be) {
    sd_cpu *c = be->impl;
    if (!c) return;
    sd_pool_free(c->pool);
    sd_dnnl_free(c->dnnl);
    free(c->widen_buf);
    free(c);
    be->impl = NULL;
}

/* Activations of 2 MiB and more go on transparent huge pages: every op
 * result is fresh memory from mmap, and with 4 KiB pages a UNet step took
 * ~270k page faults (measured, batch 1+2 at 512x512). Kernels that leave THP
 * to madvise (Debian's default) need the hint; elsewhere it is a no-op. */
#define HUGE_MIN ((size_t)2 << 20)

void *sd_cpu_alloc(size_t nbytes) {
    if (nbytes < HUGE_MIN) {
        size_t bytes = (nbytes + 63) & ~(size_t)63;
        return aligned_alloc(64, bytes ? bytes : 64);
    }
    size_t bytes = (nbytes + HUGE_MIN - 1) & ~(HUGE_MIN - 1);
    void *p = aligned_alloc(HUGE_MIN, bytes);
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, bytes, MADV_HUGEPAGE); /* a hint: failure changes nothing */
#endif
    return p;
}

static sd_status cpu_alloc(sd_backend *be, sd_bt *t, int zero) {
    if (zero) {
        t->host = sd_tensor_new(t->dtype, t->ndim, t->shape);
    } else {
        void *data = sd_cpu_alloc(t->nbytes);
        if (!data) return SD_ERR_NOMEM;
        t->host = sd_tensor_new_borrowed(t->dtype, t->ndim, t->shape, data, free, data);
        if (!t->host) free(data);
    }
    if (!t->host) return SD_ERR_NOMEM;
    t->data = t->host->data;
    return SD_OK;
}

/* A weight's packed copy (dnnl_pack.h) goes with it. */
static void cpu_release(sd_bt *t) {
    sd_dnnl_forget(((sd_cpu *)t->be->impl)->dnnl, t);
    sd_tensor_unref(t->host);
}

static sd_status cpu_upload(sd_backend *be, sd_bt *t, sd_tensor *src) {
    t->host = src->dtype == t->dtype ? sd_tensor_ref(src) : sd_tensor_to_dtype(src, t->dtype);
    if (!t->host) return SD_ERR_NOMEM;
    t->data = t->host->data;
    return SD_OK;
}

static sd_tensor *cpu_download(const sd_bt *t) {
    sd_dtype d = sd_dtype_is_float(t->dtype) ? SD_F32 : t->dtype;
    return sd_tensor_to_dtype(t->host, d);
}

static sd_status cpu_share(sd_bt *v, sd_bt *src) {
    v->host = sd_tensor_reshape(src->host, v->ndim, v->shape);
    if (!v->host) return SD_ERR_NOMEM;
    v->data = v->host->data;
    return SD_OK;
}

/* Precision dispatch: bf16 goes to oneDNN or to its emulation on the f32
 * kernels (dnnl_bf16.h); f16 compute has no CPU path (no CPU here does f16
 * arithmetic faster than f32). */
static int cpu_supports_precision(const sd_backend *be, sd_precision p) {
    return p == SD_PREC_F32 || (p == SD_PREC_BF16 && sd_dnnl_compiled());
}

static int cpu_lp_ok(sd_backend *be, const char *op) {
    if (be->precision == SD_PREC_BF16) return 1;
    sd_backend_fail(be, SD_ERR_UNSUPPORTED,
                    "%s: the CPU backend computes in f32 or bf16, not in precision mode %d", op,
                    (int)be->precision);
    return 0;
}

/* The oneDNN path (native bf16), or the emulation; a build without oneDNN
 * takes sd_dnnl_*, which fail saying how to get the path. */
static int onednn(sd_backend *be) {
    return !sd_dnnl_compiled() || ((sd_cpu *)be->impl)->bf16_path == SD_BF16_PATH_ONEDNN;
}

static sd_status cpu_linear_lp(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                               const sd_bt *b) {
    if (!cpu_lp_ok(be, "linear")) return be->err.code;
    return onednn(be) ? sd_dnnl_linear(be, out, x, w, b) : sd_bf16e_linear(be, out, x, w, b);
}

static sd_status cpu_matmul_lp(sd_backend *be, sd_bt *out, const sd_bt *a, const sd_bt *b,
                               int trans_b, float alpha) {
    if (!cpu_lp_ok(be, "matmul")) return be->err.code;
    return onednn(be) ? sd_dnnl_matmul(be, out, a, b, trans_b, alpha)
                      : sd_bf16e_matmul(be, out, a, b, trans_b, alpha);
}

static sd_status cpu_conv2d_lp(sd_backend *be, sd_bt *out, const sd_bt *x, const sd_bt *w,
                               const sd_bt *b, int stride, int pad_h, int pad_w) {
    if (!cpu_lp_ok(be, "conv2d")) return be->err.code;
    return onednn(be) ? sd_dnnl_conv2d(be, out, x, w, b, stride, pad_h, pad_w)
                      : sd_bf16e_conv2d(be, out, x, w, b, stride, pad_h, pad_w);
}

static const sd_backend_i cpu_vtable = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_upload,
    .download = cpu_download,
    .share = cpu_share,
    .linear = sd_cpu_linear,
    .matmul = sd_cpu_matmul,
    .conv2d = sd_cpu_conv2d,
    .pad2d = sd_cpu_pad2d,
    .group_norm = sd_cpu_group_norm,
    .layer_norm = sd_cpu_layer_norm,
    .attention = sd_cpu_attention,
    .rms_norm = sd_cpu_rms_norm,
    .rope = sd_cpu_rope,
    .binary = sd_cpu_binary,
    .add_channel = sd_cpu_add_channel,
    .unary = sd_cpu_unary,
    .geglu = sd_cpu_geglu,
    .softmax = sd_cpu_softmax,
    .upsample2x = sd_cpu_upsample2x,
    .concat = sd_cpu_concat,
    .slice = sd_cpu_slice,
    .permute = sd_cpu_permute,
    .embedding = sd_cpu_embedding,
    .copy = sd_cpu_copy,
    .prelu = sd_cpu_prelu,
    .pixel_shuffle = sd_cpu_pixel_shuffle,
    .upsample_nearest = sd_cpu_upsample_nearest,
    .to_f32 = sd_cpu_to_f32,
    .supports_precision = cpu_supports_precision,
    .linear_lp = cpu_linear_lp,
    .matmul_lp = cpu_matmul_lp,
    .conv2d_lp = cpu_conv2d_lp,
};

sd_status sd_cpu_backend_init(sd_backend *be, int n_threads, sd_error *err) {
    /* instruction sets: ours, OpenBLAS's and oneDNN's, before any kernel runs */
    sd_status rc = sd_cpu_isa_setup(err);
    if (rc == SD_OK) rc = sd_cpu_gemm_setup(err);
    if (rc != SD_OK) return rc;
    sd_cpu *c = calloc(1, sizeof *c);
    if (!c) return sd_error_set(err, SD_ERR_NOMEM, "out of memory creating the CPU backend");
    /* the workers inherit this thread's CPU mask: not libgomp's one-CPU
     * binding of the initial thread under OMP_PROC_BIND (kernels/cpus.h) */
    c->pool = sd_cpus_with_process_mask(make_pool, &n_threads);
    if (!c->pool) {
        free(c);
        return sd_error_set(err, SD_ERR_NOMEM, "cannot start %d CPU threads", n_threads);
    }
    c->bf16_path = sd_cpu_bf16_default_path();
    /* Our pool parallelises around single-threaded GEMMs (see cpu.h). This
     * is process-wide in OpenBLAS, which is what we want: one pool. */
    pthread_once(&blas_once, blas_single_thread);
    be->vt = &cpu_vtable;
    be->impl = c;
    return SD_OK;
}
