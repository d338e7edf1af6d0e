#include "sha256.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SD_SHA_NI 1
#include <cpuid.h>
#include <immintrin.h>
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void compress(uint32_t st[8], const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
    uint32_t e = st[4], f = st[5], g = st[6], h = st[7];
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = h + S1 + ch + K[i] + w[i];
        uint32_t S0 = ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22);
        uint32_t mj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + mj;
        h = g; g = f; f = e; e = d + t1;
        d = c; c = b; b = a; a = t1 + t2;
    }
    st[0] += a; st[1] += b; st[2] += c; st[3] += d;
    st[4] += e; st[5] += f; st[6] += g; st[7] += h;
}

#ifdef SD_SHA_NI
/* The Intel SHA extensions keep the state as ABEF/CDGH halves; message
 * schedule per 4-word group i >= 4:
 * W = msg2(msg1(M[i-4], M[i-3]) + [M[i-2][1..3], M[i-1][0]], M[i-1]). */
__attribute__((target("sha,sse4.1,ssse3")))
static void compress_ni(uint32_t st[8], const uint8_t *p, size_t nblocks) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i tmp = _mm_loadu_si128((const __m128i *)&st[0]);
    __m128i s1 = _mm_loadu_si128((const __m128i *)&st[4]);
    tmp = _mm_shuffle_epi32(tmp, 0xB1);       /* CDAB */
    s1 = _mm_shuffle_epi32(s1, 0x1B);         /* EFGH */
    __m128i s0 = _mm_alignr_epi8(tmp, s1, 8); /* ABEF */
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);      /* CDGH */
    for (; nblocks; nblocks--, p += 64) {
        __m128i abef = s0, cdgh = s1, m[16];
        for (int i = 0; i < 16; i++) {
            if (i < 4) {
                m[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
            } else {
                __m128i x = _mm_sha256msg1_epu32(m[i - 4], m[i - 3]);
                x = _mm_add_epi32(x, _mm_alignr_epi8(m[i - 1], m[i - 2], 4));
                m[i] = _mm_sha256msg2_epu32(x, m[i - 1]);
            }
            __m128i msg = _mm_add_epi32(m[i], _mm_loadu_si128((const __m128i *)&K[4 * i]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, msg);
            msg = _mm_shuffle_epi32(msg, 0x0E);
            s0 = _mm_sha256rnds2_epu32(s0, s1, msg);
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    tmp = _mm_shuffle_epi32(s0, 0x1B);   /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);    /* DCHG */
    s0 = _mm_blend_epi16(tmp, s1, 0xF0); /* DCBA */
    s1 = _mm_alignr_epi8(s1, tmp, 8);    /* HGFE */
    _mm_storeu_si128((__m128i *)&st[0], s0);
    _mm_storeu_si128((__m128i *)&st[4], s1);
}

static int cpu_has_sha(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!(c & (1u << 9)) || !(c & (1u << 19))) return 0; /* SSSE3, SSE4.1 */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 29) & 1;
}

/* CPUID traps to the hypervisor in a VM (tens of microseconds): asked once
 * per process, not per hash, or keying a 100,000-node workflow takes
 * seconds. Two threads racing here store the same answer. */
static int cpu_has_sha_cached(void) {
    static int known = -1;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        v = cpu_has_sha();
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return v;
}
#endif

static void compress_blocks(sd_sha256_ctx *ctx, const uint8_t *p, size_t nblocks) {
#ifdef SD_SHA_NI
    if (ctx->accel) {
        compress_ni(ctx->state, p, nblocks);
        return;
    }
#endif
    for (; nblocks; nblocks--, p += 64) compress(ctx->state, p);
}

void sd_sha256_init(sd_sha256_ctx *ctx) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(ctx->state, H0, sizeof H0);
    ctx->nbytes = 0;
    ctx->nbuf = 0;
#ifdef SD_SHA_NI
    ctx->accel = cpu_has_sha_cached();
#else
    ctx->accel = 0;
#endif
}

void sd_sha256_update(sd_sha256_ctx *ctx, const void *data, size_t n) {
    const uint8_t *p = data;
    ctx->nbytes += n;
    if (ctx->nbuf) {
        size_t take = 64 - ctx->nbuf;
        if (take > n) take = n;
        memcpy(ctx->buf + ctx->nbuf, p, take);
        ctx->nbuf += take;
        p += take;
        n -= take;
        if (ctx->nbuf < 64) return;
        compress_blocks(ctx, ctx->buf, 1);
        ctx->nbuf = 0;
    }
    if (n >= 64) {
        compress_blocks(ctx, p, n / 64);
        p += n / 64 * 64;
        n %= 64;
    }
    if (n) {
        memcpy(ctx->buf, p, n);
        ctx->nbuf = n;
    }
}

void sd_sha256_final(sd_sha256_ctx *ctx, uint8_t out[32]) {
    uint64_t bits = ctx->nbytes * 8;
    ctx->buf[ctx->nbuf++] = 0x80;
    if (ctx->nbuf > 56) {
        memset(ctx->buf + ctx->nbuf, 0, 64 - ctx->nbuf);
        compress_blocks(ctx, ctx->buf, 1);
        ctx->nbuf = 0;
    }
    memset(ctx->buf + ctx->nbuf, 0, 56 - ctx->nbuf);
    for (int i = 0; i < 8; i++) ctx->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    compress_blocks(ctx, ctx->buf, 1);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(ctx->state[i] >> 24);
        out[4 * i + 1] = (uint8_t)(ctx->state[i] >> 16);
        out[4 * i + 2] = (uint8_t)(ctx->state[i] >> 8);
        out[4 * i + 3] = (uint8_t)ctx->state[i];
    }
}

void sd_sha256(const void *data, size_t n, uint8_t out[32]) {
    sd_sha256_ctx c;
    sd_sha256_init(&c);
    sd_sha256_update(&c, data, n);
    sd_sha256_final(&c, out);
}

void sd_sha256_hex(const uint8_t h[32], char out[65]) {
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hx[h[i] >> 4];
        out[2 * i + 1] = hx[h[i] & 15];
    }
    out[64] = '\0';
}

sd_status sd_sha256_file(const char *path, uint8_t out[32], sd_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return sd_error_set(err, e == ENOENT ? SD_ERR_NOT_FOUND : SD_ERR_IO,
                            "%s: cannot open for hashing: %s", path, strerror(e));
    }
    /* 1 MiB chunks: large enough to keep syscalls rare on multi-GB models. */
    size_t cap = 1 << 20;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return sd_error_set(err, SD_ERR_NOMEM, "%s: out of memory while hashing", path);
    }
    sd_sha256_ctx c;
    sd_sha256_init(&c);
    size_t n;
    while ((n = fread(buf, 1, cap, f)) > 0) sd_sha256_update(&c, buf, n);
    int bad = ferror(f);
    int e = errno;
    free(buf);
    fclose(f);
    if (bad) return sd_error_set(err, SD_ERR_IO, "%s: read error while hashing: %s", path, strerror(e));
    sd_sha256_final(&c, out);
    return SD_OK;
}
