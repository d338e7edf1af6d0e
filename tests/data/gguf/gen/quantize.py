"""Round-to-nearest GGML quantizers in numpy, for sdflow's GGUF test data.

Each quantize_<type>(x) takes float32 rows of whole blocks and returns the stored bytes (uint8,
one row of blocks per input row), laid out as ggml-common.h defines the block (and as
ComfyUI-GGUF's dequant.py reads it). Scales are chosen by simple max/min rules (not llama.cpp's
error-minimising searches): the test data needs valid, realistic blocks, and the golden values are
whatever ComfyUI-GGUF's dequantization makes of these bytes.
"""
import numpy as np

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q

KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def _f16(v):
    return np.asarray(v, np.float32).astype(np.float16)


def _f16b(v):  # f16 bytes, [..., 2]
    a = _f16(v)
    return a.view(np.uint8).reshape(*a.shape, 2)


def _div(a, b):
    b = np.asarray(b, np.float32)
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, a / safe).astype(np.float32)


def _signed_absmax(x, axis=-1):
    i = np.argmax(np.abs(x), axis=axis)
    return np.take_along_axis(x, np.expand_dims(i, axis), axis).squeeze(axis)


def _nib32(q):  # q [..., 32] in 0..15 -> [..., 16] (element i low nibble, i + 16 high)
    q = q.astype(np.uint8)
    return q[..., :16] | (q[..., 16:] << 4)


def _blocks(x, n):
    x = np.asarray(x, np.float32)
    assert x.size % n == 0
    return x.reshape(-1, n)


def q8_0(x):
    b = _blocks(x, 32)
    d = np.abs(b).max(1) / 127
    q = np.clip(np.round(_div(b, _f16(d).astype(np.float32)[:, None])), -128, 127).astype(np.int8)
    return np.concatenate([_f16b(d), q.view(np.uint8)], 1)


def q4_0(x):
    b = _blocks(x, 32)
    d = _signed_absmax(b) / -8
    q = np.clip(np.round(_div(b, _f16(d).astype(np.float32)[:, None]) + 8), 0, 15)
    return np.concatenate([_f16b(d), _nib32(q)], 1)


def q4_1(x):
    b = _blocks(x, 32)
    mn, mx = b.min(1), b.max(1)
    d = (mx - mn) / 15
    q = np.clip(np.round(_div(b - _f16(mn).astype(np.float32)[:, None], _f16(d).astype(np.float32)[:, None])), 0, 15)
    return np.concatenate([_f16b(d), _f16b(mn), _nib32(q)], 1)


def _qh32(q):  # bit 4 of each of 32 values -> u32 little-endian bytes [..., 4]
    bits = ((q.astype(np.uint32) >> 4) & 1) << np.arange(32, dtype=np.uint32)
    return bits.sum(-1).astype("<u4").view(np.uint8).reshape(*q.shape[:-1], 4)


def q5_0(x):
    b = _blocks(x, 32)
    d = _signed_absmax(b) / -16
    q = np.clip(np.round(_div(b, _f16(d).astype(np.float32)[:, None]) + 16), 0, 31).astype(np.uint8)
    return np.concatenate([_f16b(d), _qh32(q), _nib32(q & 15)], 1)


def q5_1(x):
    b = _blocks(x, 32)
    mn, mx = b.min(1), b.max(1)
    d = (mx - mn) / 31
    q = np.clip(np.round(_div(b - _f16(mn).astype(np.float32)[:, None], _f16(d).astype(np.float32)[:, None])), 0, 31)
    q = q.astype(np.uint8)
    return np.concatenate([_f16b(d), _f16b(mn), _qh32(q), _nib32(q & 15)], 1)


def _nearest_kv(v):
    return np.abs(v[..., None] - KVALUES).argmin(-1).astype(np.uint8)


def iq4_nl(x):
    b = _blocks(x, 32)
    d = _signed_absmax(b) / KVALUES[0]
    q = _nearest_kv(_div(b, _f16(d).astype(np.float32)[:, None]))
    return np.concatenate([_f16b(d), _nib32(q)], 1)


# ---- K-quants: super-blocks of 256 ----

def _pack_k_scales(ls, lm):  # 8 six-bit scales and mins -> 12 bytes (ggml's get_scale_min_k4 layout)
    ls, lm = ls.astype(np.uint8), lm.astype(np.uint8)
    s = np.zeros((ls.shape[0], 12), np.uint8)
    s[:, 0:4] = (ls[:, 0:4] & 63) | ((ls[:, 4:8] >> 4) << 6)
    s[:, 4:8] = (lm[:, 0:4] & 63) | ((lm[:, 4:8] >> 4) << 6)
    s[:, 8:12] = (ls[:, 4:8] & 15) | ((lm[:, 4:8] & 15) << 4)
    return s


def _k_min_scale(g, levels):  # g [n, groups, size] -> (d, dmin, ls, lm, q)
    mn = np.maximum(0, -g.min(-1))
    sc = (g.max(-1) + mn) / levels
    top = 63 if g.shape[1] == 8 else 15
    d, dmin = sc.max(1) / top, mn.max(1) / top
    d16, m16 = _f16(d).astype(np.float32), _f16(dmin).astype(np.float32)
    ls = np.clip(np.round(_div(sc, d16[:, None])), 0, top)
    lm = np.clip(np.round(_div(mn, m16[:, None])), 0, top)
    q = np.clip(np.round(_div(g + (m16[:, None] * lm)[..., None], (d16[:, None] * ls)[..., None])), 0, levels)
    return d, dmin, ls, lm, q.astype(np.uint8)


def _qs_4bit_pairs(q):  # q [n, 8, 32] -> [n, 128]: byte g*32+l = q[2g][l] | q[2g+1][l] << 4
    return (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(q.shape[0], 128)


def q4_k(x):
    g = _blocks(x, 256).reshape(-1, 8, 32)
    d, dmin, ls, lm, q = _k_min_scale(g, 15)
    return np.concatenate([_f16b(d), _f16b(dmin), _pack_k_scales(ls, lm), _qs_4bit_pairs(q)], 1)


def q5_k(x):
    g = _blocks(x, 256).reshape(-1, 8, 32)
    d, dmin, ls, lm, q = _k_min_scale(g, 31)
    qh = ((q >> 4) & 1).astype(np.uint8) << np.arange(8, dtype=np.uint8)[None, :, None]
    qh = qh.sum(1).astype(np.uint8)
    return np.concatenate([_f16b(d), _f16b(dmin), _pack_k_scales(ls, lm), qh, _qs_4bit_pairs(q & 15)], 1)


def _e_index():
    return np.arange(256)


def _pack_2bit(q):  # q [n, 256] 0..3 -> [n, 64]: qs[(e/128)*32 + e%32] bits 2*((e/32)%4)
    e = _e_index()
    out = np.zeros((q.shape[0], 64), np.uint8)
    for k in range(256):
        out[:, (k // 128) * 32 + k % 32] |= (q[:, k].astype(np.uint8) & 3) << (2 * ((k // 32) % 4))
    return out


def q2_k(x):
    g = _blocks(x, 256).reshape(-1, 16, 16)
    d, dmin, ls, lm, q = _k_min_scale(g, 3)
    scales = (ls.astype(np.uint8) | (lm.astype(np.uint8) << 4))
    return np.concatenate([scales, _pack_2bit(q.reshape(-1, 256)), _f16b(d), _f16b(dmin)], 1)


def q3_k(x):
    g = _blocks(x, 256).reshape(-1, 16, 16)
    sc = _signed_absmax(g) / -4
    d = np.abs(sc).max(1) / 31
    d16 = _f16(d).astype(np.float32)
    ls = np.clip(np.round(_div(sc, d16[:, None])), -32, 31)
    q = np.clip(np.round(_div(g, (d16[:, None] * ls)[..., None])), -4, 3) + 4  # 0..7
    q = q.reshape(-1, 256).astype(np.uint8)
    hm = np.zeros((q.shape[0], 32), np.uint8)
    for k in range(256):
        hm[:, k % 32] |= ((q[:, k] >> 2) & 1) << (k // 32)
    l6 = (ls + 32).astype(np.uint8)
    s = np.zeros((q.shape[0], 12), np.uint8)
    for k in range(16):
        if k < 8:
            s[:, k] |= l6[:, k] & 15
        else:
            s[:, k - 8] |= (l6[:, k] & 15) << 4
        s[:, 8 + k % 4] |= (l6[:, k] >> 4) << (2 * (k // 4))
    return np.concatenate([hm, _pack_2bit(q & 3), s, _f16b(d)], 1)


def q6_k(x):
    g = _blocks(x, 256).reshape(-1, 16, 16)
    sc = _signed_absmax(g) / -32
    d = np.abs(sc).max(1) / 127
    d16 = _f16(d).astype(np.float32)
    ls = np.clip(np.round(_div(sc, d16[:, None])), -128, 127)
    q = (np.clip(np.round(_div(g, (d16[:, None] * ls)[..., None])), -32, 31) + 32).reshape(-1, 256).astype(np.uint8)
    ql = np.zeros((q.shape[0], 128), np.uint8)
    qh = np.zeros((q.shape[0], 64), np.uint8)
    for e in range(256):
        ql[:, (e // 128) * 64 + e % 64] |= (q[:, e] & 15) << (4 * ((e // 64) % 2))
        qh[:, (e // 128) * 32 + e % 32] |= (q[:, e] >> 4) << (2 * ((e // 32) % 4))
    return np.concatenate([ql, qh, ls.astype(np.int8).view(np.uint8), _f16b(d)], 1)


def iq4_xs(x):
    g = _blocks(x, 256).reshape(-1, 8, 32)
    sc = _signed_absmax(g) / KVALUES[0]
    d = np.abs(sc).max(1) / 31
    d16 = _f16(d).astype(np.float32)
    ls = np.clip(np.round(_div(sc, d16[:, None])), -32, 31)
    n = _nearest_kv(_div(g, (d16[:, None] * ls)[..., None]))  # [n, 8, 32]
    l6 = (ls + 32).astype(np.uint16)
    sh = ((l6 >> 4) << (2 * np.arange(8, dtype=np.uint16))).sum(1).astype("<u2")
    sl = ((l6[:, 0::2] & 15) | ((l6[:, 1::2] & 15) << 4)).astype(np.uint8)
    qs = _nib32(n).reshape(-1, 128)
    return np.concatenate([_f16b(d), sh.view(np.uint8).reshape(-1, 2), sl, qs], 1)


QUANTIZERS = {
    Q.Q8_0: q8_0, Q.Q5_1: q5_1, Q.Q5_0: q5_0, Q.Q4_1: q4_1, Q.Q4_0: q4_0, Q.Q6_K: q6_k,
    Q.Q5_K: q5_k, Q.Q4_K: q4_k, Q.Q3_K: q3_k, Q.Q2_K: q2_k, Q.IQ4_NL: iq4_nl, Q.IQ4_XS: iq4_xs,
}


def quantize(x, qtype):
    """x: float32 array whose last dim is a multiple of the block; returns uint8 [..., bytes]."""
    x = np.asarray(x, np.float32)
    block, size = GGML_QUANT_SIZES[qtype]
    if qtype == Q.F32:
        return x.astype("<f4").view(np.uint8)
    if qtype == Q.F16:
        return x.astype("<f2").view(np.uint8)
    if qtype == Q.BF16:
        u = x.astype(np.float32).view(np.uint32)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")  # round to nearest even (finite values)
        return r.view(np.uint8)
    out = QUANTIZERS[qtype](x.reshape(-1, x.shape[-1]))
    return out.reshape(*x.shape[:-1], x.shape[-1] // block * size)
