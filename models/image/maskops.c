/* maskops.c - mask and compositing arithmetic (maskops.h). Each float
 * expression keeps the reference's operation order: PyTorch rounds every
 * element-wise op to float32, so a fused or reordered expression would
 * differ in the last bit. */
#include "models/image/maskops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/image/imageops.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* ---- GrowMask --------------------------------------------------------------------- */

/* 1-D running max (or min) over [i - r, i + r] clipped to [0, n), for n values
 * s[0], s[st], ... into d (same stride); q is scratch for n indices. A
 * monotonic queue: O(n) whatever r is. */
static void run_extreme(const float *s, float *d, int64_t n, int64_t st, int64_t r, int is_max,
                        int64_t *q) {
    int64_t head = 0, tail = 0, next = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t hi = i + r < n - 1 ? i + r : n - 1;
        for (; next <= hi; next++) {
            float v = s[next * st];
            while (tail > head && (is_max ? s[q[tail - 1] * st] <= v : s[q[tail - 1] * st] >= v)) tail--;
            q[tail++] = next;
        }
        while (q[head] < i - r) head++;
        d[i * st] = s[q[head] * st];
    }
}

/* One step of the cross footprint; returns 1 when any value changed. */
static int cross_step(const float *s, float *d, int64_t h, int64_t w, int is_max) {
    int changed = 0;
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            float v = s[y * w + x], e = v;
            float nb[4];
            int k = 0;
            if (y > 0) nb[k++] = s[(y - 1) * w + x];
            if (y < h - 1) nb[k++] = s[(y + 1) * w + x];
            if (x > 0) nb[k++] = s[y * w + x - 1];
            if (x < w - 1) nb[k++] = s[y * w + x + 1];
            for (int j = 0; j < k; j++) e = is_max ? (nb[j] > e ? nb[j] : e) : (nb[j] < e ? nb[j] : e);
            d[y * w + x] = e;
            changed |= e != v;
        }
    return changed;
}

int sd_mask_grow_plane(const float *src, int64_t h, int64_t w, int64_t expand, int tapered, float *dst) {
    int is_max = expand > 0;
    int64_t n = expand < 0 ? -expand : expand;
    size_t count = (size_t)(h * w);
    if (n == 0 || count == 0) {
        if (count) memcpy(dst, src, count * sizeof(float));
        return 0;
    }
    if (!tapered) {
        /* the (2n+1)^2 box, clipped: rows, then columns */
        int64_t r = n;
        int64_t *q = malloc((size_t)(h > w ? h : w) * sizeof *q);
        float *tmp = malloc(count * sizeof(float));
        if (!q || !tmp) { free(q); free(tmp); return -1; }
        for (int64_t y = 0; y < h; y++) run_extreme(src + y * w, tmp + y * w, w, 1, r, is_max, q);
        for (int64_t x = 0; x < w; x++) run_extreme(tmp + x, dst + x, h, w, r, is_max, q);
        free(q);
        free(tmp);
        return 0;
    }
    /* the cross: step by step until nothing changes (at most h + w steps matter) */
    float *a = malloc(count * sizeof(float));
    if (!a) return -1;
    memcpy(dst, src, count * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        memcpy(a, dst, count * sizeof(float));
        if (!cross_step(a, dst, h, w, is_max)) break;
    }
    free(a);
    return 0;
}

/* ---- FeatherMask -------------------------------------------------------------------- */

void sd_mask_feather(sd_tensor *m, int64_t left, int64_t top, int64_t right, int64_t bottom) {
    int64_t b = m->shape[0], h = m->shape[1], w = m->shape[2];
    float *d = sd_tensor_f32(m);
    if (left > w) left = w;
    if (right > w) right = w;
    if (top > h) top = h;
    if (bottom > h) bottom = h;
    for (int64_t x = 0; x < left; x++) {
        float f = (float)((x + 1.0) / (double)left);
        for (int64_t i = 0; i < b * h; i++) d[i * w + x] *= f;
    }
    for (int64_t x = 0; x < right; x++) {
        float f = (float)((double)(x + 1) / (double)right);
        int64_t col = x == 0 ? 0 : w - x;
        for (int64_t i = 0; i < b * h; i++) d[i * w + col] *= f;
    }
    for (int64_t y = 0; y < top; y++) {
        float f = (float)((double)(y + 1) / (double)top);
        for (int64_t i = 0; i < b; i++)
            for (int64_t x = 0; x < w; x++) d[(i * h + y) * w + x] *= f;
    }
    for (int64_t y = 0; y < bottom; y++) {
        float f = (float)((double)(y + 1) / (double)bottom);
        int64_t row = y == 0 ? 0 : h - y;
        for (int64_t i = 0; i < b; i++)
            for (int64_t x = 0; x < w; x++) d[(i * h + row) * w + x] *= f;
    }
}

/* ---- MaskComposite -------------------------------------------------------------------- */

static const char *const mask_op_names[] = {"multiply", "add", "subtract", "and", "or", "xor", NULL};

int sd_mask_op_parse(const char *name, sd_mask_op *out) {
    for (int i = 0; name && mask_op_names[i]; i++)
        if (!strcmp(name, mask_op_names[i])) { *out = (sd_mask_op)i; return 0; }
    return -1;
}

/* Length of Python's range(n)[start:stop] for start >= 0 (stop may be negative). */
static int64_t py_slice_len(int64_t n, int64_t start, int64_t stop) {
    if (stop < 0) stop += n;
    if (stop < 0) stop = 0;
    if (stop > n) stop = n;
    if (start > n) start = n;
    return stop > start ? stop - start : 0;
}

/* PyTorch broadcasting of a value dimension `v` into a slot dimension `s`. */
static int fits(int64_t v, int64_t s) { return v == s || v == 1; }

sd_status sd_mask_composite(const sd_tensor *dst, const sd_tensor *src, int64_t x, int64_t y,
                            sd_mask_op op, sd_tensor **out, sd_error *err) {
    *out = NULL;
    int64_t B = dst->shape[0], H = dst->shape[1], W = dst->shape[2];
    int64_t sb = src->shape[0], sh = src->shape[1], sw = src->shape[2];
    int64_t right = x + sw < W ? x + sw : W, bottom = y + sh < H ? y + sh : H;
    int64_t vw = right - x, vh = bottom - y; /* may be negative, as in the reference */
    /* destination slot output[:, y:bottom, x:right], source source[:, :vh, :vw] */
    int64_t dw = py_slice_len(W, x, right), dh = py_slice_len(H, y, bottom);
    int64_t pw = py_slice_len(sw, 0, vw), ph = py_slice_len(sh, 0, vh);
    if (!fits(sb, B) || !fits(ph, dh) || !fits(pw, dw))
        return sd_error_set(err, SD_ERR_INVALID,
                            "the source part [%lld, %lld, %lld] does not fit the destination part "
                            "[%lld, %lld, %lld] at x=%lld, y=%lld",
                            (long long)sb, (long long)ph, (long long)pw, (long long)B, (long long)dh,
                            (long long)dw, (long long)x, (long long)y);
    sd_tensor *o = sd_tensor_clone(dst);
    if (!o) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    float *d = sd_tensor_f32(o);
    const float *s = sd_tensor_f32(src);
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = 0; r < dh; r++)
            for (int64_t c = 0; c < dw; c++) {
                float *p = &d[(b * H + y + r) * W + x + c];
                float v = s[((sb == 1 ? 0 : b) * sh + (ph == 1 ? 0 : r)) * sw + (pw == 1 ? 0 : c)];
                switch (op) {
                case SD_MASK_MULTIPLY: *p = *p * v; break;
                case SD_MASK_ADD: *p = *p + v; break;
                case SD_MASK_SUBTRACT: *p = *p - v; break;
                default: {
                    int a = nearbyintf(*p) != 0.0f, bb = nearbyintf(v) != 0.0f;
                    int r2 = op == SD_MASK_AND ? (a & bb) : op == SD_MASK_OR ? (a | bb) : (a ^ bb);
                    *p = r2 ? 1.0f : 0.0f;
                }
                }
            }
    for (int64_t i = 0, n = sd_tensor_numel(o); i < n; i++) {
        /* torch.clamp: NaN stays NaN */
        if (d[i] < 0.0f) d[i] = 0.0f;
        else if (d[i] > 1.0f) d[i] = 1.0f;
    }
    *out = o;
    return SD_OK;
}

/* ---- composite ------------------------------------------------------------------------- */

sd_tensor *sd_repeat_to_batch(const sd_tensor *t, int64_t n) {
    int64_t shape[SD_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
    shape[0] = n;
    sd_tensor *o = sd_tensor_new(t->dtype, t->ndim, shape);
    if (!o || t->shape[0] == 0) return o;
    size_t item = t->nbytes / (size_t)t->shape[0];
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)o->data + (size_t)i * item, (const char *)t->data + (size_t)(i % t->shape[0]) * item, item);
    return o;
}

static int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

sd_status sd_composite(const sd_tensor *dst, const sd_tensor *src, int src_nhwc, int64_t x, int64_t y,
                       const sd_tensor *mask, int64_t multiplier, int resize_source, sd_tensor **out,
                       sd_error *err) {
    *out = NULL;
    int64_t B = dst->shape[0], C = dst->shape[1], H = dst->shape[2], W = dst->shape[3];
    int64_t sc = src_nhwc ? src->shape[3] : src->shape[1];
    if (sc != C)
        return sd_error_set(err, SD_ERR_INVALID, "the source has %lld channels, the destination %lld",
                            (long long)sc, (long long)C);
    sd_tensor *s0 = NULL, *s = NULL, *m = NULL, *o = NULL;
    sd_status rc = SD_OK;
    if (resize_source) {
        rc = src_nhwc ? sd_imageops_upscale_nhwc(src, W, H, SD_UPSCALE_BILINEAR, SD_CROP_DISABLED, &s0, err)
                      : sd_imageops_upscale(src, W, H, SD_UPSCALE_BILINEAR, SD_CROP_DISABLED, &s0, err);
        if (rc) return rc;
    } else {
        s0 = sd_tensor_ref((sd_tensor *)src);
    }
    if (src_nhwc) {
        sd_tensor *t = sd_imageops_nhwc_to_nchw(s0);
        sd_tensor_unref(s0);
        s0 = t;
    }
    if (s0) s = sd_repeat_to_batch(s0, B);
    sd_tensor_unref(s0);
    if (!s) return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    int64_t sh = s->shape[2], sw = s->shape[3];
    int64_t lo = -sw * multiplier, hi = W * multiplier;
    x = x < lo ? lo : x > hi ? hi : x;
    lo = -sh * multiplier, hi = H * multiplier;
    y = y < lo ? lo : y > hi ? hi : y;
    int64_t left = floordiv(x, multiplier), top = floordiv(y, multiplier);
    if (mask) {
        int64_t mh = mask->shape[mask->ndim - 2], mw = mask->shape[mask->ndim - 1];
        int64_t mn = mh > 0 && mw > 0 ? sd_tensor_numel(mask) / (mh * mw) : 0;
        int64_t ms[4] = {mn, 1, mh, mw};
        sd_tensor *m4 = sd_tensor_reshape((sd_tensor *)mask, 4, ms), *mr = NULL;
        if (!m4) { sd_tensor_unref(s); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
        rc = sd_imageops_upscale(m4, sw, sh, SD_UPSCALE_BILINEAR, SD_CROP_DISABLED, &mr, err);
        sd_tensor_unref(m4);
        if (rc) { sd_tensor_unref(s); return rc; }
        m = sd_repeat_to_batch(mr, B);
        sd_tensor_unref(mr);
        if (!m) { sd_tensor_unref(s); return sd_error_set(err, SD_ERR_NOMEM, "out of memory"); }
    }
    /* visible part: rows [0, vh) and columns [0, vw) of the source, at (top, left) */
    int64_t vw = W - left + (x < 0 ? x : 0), vh = H - top + (y < 0 ? y : 0);
    int64_t ph = py_slice_len(sh, 0, vh), pw = py_slice_len(sw, 0, vw);
    /* destination[..., top:top+sh, left:left+sw] with Python's negative-start rule */
    int64_t t0 = top < 0 ? top + H : top, l0 = left < 0 ? left + W : left;
    if (t0 < 0) t0 = 0;
    if (l0 < 0) l0 = 0;
    int64_t dh = py_slice_len(H, t0, top + sh), dw = py_slice_len(W, l0, left + sw);
    if (ph != dh || pw != dw) {
        sd_tensor_unref(s);
        sd_tensor_unref(m);
        return sd_error_set(err, SD_ERR_INVALID,
                            "the visible source part (%lldx%lld) does not match the destination part "
                            "(%lldx%lld) at x=%lld, y=%lld",
                            (long long)pw, (long long)ph, (long long)dw, (long long)dh, (long long)x,
                            (long long)y);
    }
    o = sd_tensor_clone(dst);
    if (!o) {
        sd_tensor_unref(s);
        sd_tensor_unref(m);
        return sd_error_set(err, SD_ERR_NOMEM, "out of memory");
    }
    float *d = sd_tensor_f32(o);
    const float *sv = sd_tensor_f32(s), *mv = m ? sd_tensor_f32(m) : NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = 0; r < dh; r++)
                for (int64_t q = 0; q < dw; q++) {
                    float mk = mv ? mv[(b * sh + r) * sw + q] : 1.0f;
                    float inv = 1.0f - mk;
                    float a = mk * sv[((b * C + c) * sh + r) * sw + q];
                    float *p = &d[((b * C + c) * H + t0 + r) * W + l0 + q];
                    float e = inv * *p;
                    *p = a + e;
                }
    sd_tensor_unref(s);
    sd_tensor_unref(m);
    *out = o;
    return SD_OK;
}

/* ---- Porter-Duff ------------------------------------------------------------------------ */

const char *const sd_porter_duff_names[] = {
    "ADD", "CLEAR", "DARKEN", "DST", "DST_ATOP", "DST_IN", "DST_OUT", "DST_OVER", "LIGHTEN",
    "MULTIPLY", "OVERLAY", "SCREEN", "SRC", "SRC_ATOP", "SRC_IN", "SRC_OUT", "SRC_OVER", "XOR", NULL};

int sd_porter_duff_parse(const char *name, sd_porter_duff *out) {
    for (int i = 0; name && sd_porter_duff_names[i]; i++)
        if (!strcmp(name, sd_porter_duff_names[i])) { *out = (sd_porter_duff)i; return 0; }
    return -1;
}

static float clamp01(float v) { return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v; }

/* The output alpha of a mode from the straight alphas. */
static float pd_alpha(sd_porter_duff mode, float sa, float da) {
    switch (mode) {
    case SD_PD_ADD: return clamp01(sa + da);
    case SD_PD_CLEAR: return 0.0f;
    case SD_PD_DARKEN: case SD_PD_LIGHTEN: case SD_PD_OVERLAY: case SD_PD_SCREEN: {
        float t = sa + da, u = sa * da;
        return t - u;
    }
    case SD_PD_DST: return da;
    case SD_PD_DST_ATOP: return sa;
    case SD_PD_DST_IN: case SD_PD_SRC_IN: case SD_PD_MULTIPLY: return sa * da;
    case SD_PD_DST_OUT: return (1.0f - sa) * da;
    case SD_PD_DST_OVER: { float u = (1.0f - da) * sa; return da + u; }
    case SD_PD_SRC: return sa;
    case SD_PD_SRC_ATOP: return da;
    case SD_PD_SRC_OUT: return (1.0f - da) * sa;
    case SD_PD_SRC_OVER: { float u = (1.0f - sa) * da; return sa + u; }
    case SD_PD_XOR: { float t = (1.0f - da) * sa, u = (1.0f - sa) * da; return t + u; }
    default: return 0.0f;
    }
}

/* The premultiplied output colour from premultiplied si, di. */
static float pd_color(sd_porter_duff mode, float si, float sa, float di, float da) {
    switch (mode) {
    case SD_PD_ADD: return clamp01(si + di);
    case SD_PD_CLEAR: return 0.0f;
    case SD_PD_DARKEN: case SD_PD_LIGHTEN: {
        float t = (1.0f - da) * si, u = (1.0f - sa) * di, v = t + u;
        float e = mode == SD_PD_DARKEN ? (si < di ? si : di) : (si > di ? si : di);
        /* torch.minimum/maximum propagate NaN */
        if (isnan(si) || isnan(di)) e = NAN;
        return v + e;
    }
    case SD_PD_DST: return di;
    case SD_PD_DST_ATOP: { float t = sa * di, u = (1.0f - da) * si; return t + u; }
    case SD_PD_DST_IN: return di * sa;
    case SD_PD_DST_OUT: return (1.0f - sa) * di;
    case SD_PD_DST_OVER: { float u = (1.0f - da) * si; return di + u; }
    case SD_PD_MULTIPLY: return si * di;
    case SD_PD_OVERLAY: {
        if (2.0f * di < da) { float t = 2.0f * si; return t * di; }
        float t = sa * da, u = da - si, v = 2.0f * u, w = sa - di, z = v * w;
        return t - z;
    }
    case SD_PD_SCREEN: { float t = si + di, u = si * di; return t - u; }
    case SD_PD_SRC: return si;
    case SD_PD_SRC_ATOP: { float t = da * si, u = (1.0f - sa) * di; return t + u; }
    case SD_PD_SRC_IN: return si * da;
    case SD_PD_SRC_OUT: return (1.0f - da) * si;
    case SD_PD_SRC_OVER: { float u = (1.0f - sa) * di; return si + u; }
    case SD_PD_XOR: { float t = (1.0f - da) * si, u = (1.0f - sa) * di; return t + u; }
    default: return 0.0f;
    }
}

void sd_porter_duff_composite(const float *src, const float *src_mask, const float *dst,
                              const float *dst_mask, int64_t hw, int64_t c, sd_porter_duff mode,
                              float *out_image, float *out_mask) {
    for (int64_t i = 0; i < hw; i++) {
        float sa = 1.0f - src_mask[i], da = 1.0f - dst_mask[i];
        float oa = pd_alpha(mode, sa, da);
        for (int64_t k = 0; k < c; k++) {
            float si = src[i * c + k] * sa, di = dst[i * c + k] * da;
            float oi = pd_color(mode, si, sa, di, da);
            oi = oa > 1e-5f ? oi / oa : 0.0f;
            out_image[i * c + k] = clamp01(oi);
        }
        out_mask[i] = 1.0f - oa;
    }
}
