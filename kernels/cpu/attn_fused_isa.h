/* attn_fused_isa.h - the body of attn_fused.c's kernel for one vector ISA.
 *
 * Included once per path by attn_fused.c, which defines before it:
 *   TGT      the function attribute enabling the ISA
 *   SFX(x)   x suffixed with the path's name
 *   vec, VW  the vector type and its float lanes
 *   VLOAD VSTORE VSET1 VZERO VFMA VMUL VSUB VMAX VEXP HMAX HADD  the ops
 *   QK_R, QK_NK  query rows x at most this many vectors of keys of one scores tile
 *   PV_ACC, PV_NV  accumulators of one P V tile: PV_ACC / nv query rows x nv
 *            (at most PV_NV) vectors of D
 * Not a header of its own module: it has no contract beyond attn_fused.c. */

/* S[r][c] = scale * sum_d Q[r][d] Kt[d][c] for QK_R rows and nk (at most
 * QK_NK) vectors of keys: a GEMM microkernel with the keys along the
 * vector, the query values broadcast. */
TGT static inline __attribute__((always_inline)) void
SFX(qk_tile)(const float *Q, int64_t D, const float *Kt, int64_t ldk, float *S, int64_t lds,
             const int nk, float scale) {
    vec acc[QK_R][QK_NK];
#pragma GCC unroll 16
    for (int r = 0; r < QK_R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < nk; c++) acc[r][c] = VZERO();
    for (int64_t d = 0; d < D; d++) {
        vec kv[QK_NK];
#pragma GCC unroll 4
        for (int c = 0; c < nk; c++) kv[c] = VLOAD(Kt + d * ldk + c * VW);
#pragma GCC unroll 16
        for (int r = 0; r < QK_R; r++) {
            vec b = VSET1(Q[r * D + d]);
#pragma GCC unroll 4
            for (int c = 0; c < nk; c++) acc[r][c] = VFMA(b, kv[c], acc[r][c]);
        }
    }
    vec s = VSET1(scale);
#pragma GCC unroll 16
    for (int r = 0; r < QK_R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < nk; c++) VSTORE(S + r * lds + c * VW, VMUL(acc[r][c], s));
}

/* O[r][0 .. NV*VW) += sum_j P[r][j] V[j][0 .. NV*VW) for PV_R rows over kn
 * keys: the V row as vectors, each probability broadcast. */
TGT static inline __attribute__((always_inline)) void
SFX(pv_tile)(const float *P, int64_t ldp, const float *V, int64_t ldv, int64_t kn, float *O,
             int64_t ldo, const int nv, const int nr) {
    vec acc[PV_ACC][PV_NV]; /* the first nr rows used */
#pragma GCC unroll 24
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int c = 0; c < nv; c++) acc[r][c] = VZERO();
    for (int64_t j = 0; j < kn; j++) {
        vec vv[PV_NV];
#pragma GCC unroll 4
        for (int c = 0; c < nv; c++) vv[c] = VLOAD(V + j * ldv + c * VW);
#pragma GCC unroll 24
        for (int r = 0; r < nr; r++) {
            vec b = VSET1(P[r * ldp + j]);
#pragma GCC unroll 4
            for (int c = 0; c < nv; c++) acc[r][c] = VFMA(b, vv[c], acc[r][c]);
        }
    }
#pragma GCC unroll 24
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int c = 0; c < nv; c++)
            VSTORE(O + r * ldo + c * VW, VADD(VLOAD(O + r * ldo + c * VW), acc[r][c]));
}

/* The first half of one row's online-softmax step over the kr (a multiple
 * of VW) scores of a key block, whose entries past the valid keys are
 * already -inf: the new running max (returned; -inf while every key so far
 * is masked), the row's O (dp floats) and sum rescaled when it rose. The
 * exps follow for the whole row group at once (exp_rows): one row's chain
 * of reductions is too short to keep the vector units busy. */
TGT static float SFX(row_max)(const float *row, int64_t kr, float *mx, double *sum, float *o,
                              int64_t dp) {
    vec vm = VSET1(-INFINITY);
    for (int64_t c = 0; c < kr; c += VW) vm = VMAX(vm, VLOAD(row + c));
    float m_old = *mx, m = HMAX(vm);
    if (m < m_old) m = m_old;
    if (m != m_old && m != -INFINITY) {
        *mx = m;
        if (m_old != -INFINITY) { /* O and the sum are relative to m_old */
            float a = expf(m_old - m);
            vec va = VSET1(a);
            for (int64_t c = 0; c < dp; c += VW) VSTORE(o + c, VMUL(VLOAD(o + c), va));
            *sum *= a;
        }
    }
    return m;
}

/* Rows of S (stride lds, kr scores) become exp(S - m[r]), their sums into
 * bs[r] as vectors; a row with m = -inf becomes zeros. */
TGT static void SFX(exp_rows)(float *S, int64_t lds, int64_t kr, const float *m, float *bs,
                              int nrows) {
    for (int r = 0; r < nrows; r++) {
        float *row = S + r * lds;
        vec s = VZERO();
        if (m[r] == -INFINITY) {
            for (int64_t c = 0; c < kr; c += VW) VSTORE(row + c, s);
        } else {
            vec vmv = VSET1(m[r]);
            for (int64_t c = 0; c < kr; c += VW) {
                vec e = VEXP(VSUB(VLOAD(row + c), vmv));
                VSTORE(row + c, e);
                s = VADD(s, e);
            }
        }
        VSTORE(bs + r * VW, s);
    }
}

/* One task: up to QB query rows of one (batch, head) against every key
 * block (or up to the causal diagonal). */
TGT static void SFX(task)(void *ctx, int64_t t, int thread) {
    const fused_job *j = ctx;
    const sd_cpu_attn *a = j->a;
    int64_t qb = t % j->qblocks, nh = t / j->qblocks;
    int64_t h = nh % a->heads, n = nh / a->heads, kvh = n * j->kv_heads + h / a->group;
    int64_t q0 = qb * j->qb, rows = a->Lq - q0 < j->qb ? a->Lq - q0 : j->qb;
    int64_t D = a->D, dp = j->dp, kbp = j->kbp;
    int64_t rpad = (rows + ROW_GROUP - 1) / ROW_GROUP * ROW_GROUP;
    float *Q = j->qbuf[thread], *O = j->obuf[thread], *S = j->sbuf[thread], *mx = j->mbuf[thread];
    double *sum = j->lbuf[thread];
    float mb[ROW_GROUP], bs[ROW_GROUP * VW]; /* a row group's block maxima and exp sums */
    const float *q = a->q + (n * a->Lq + q0) * a->HD + h * D;
    const float *bias = a->bias ? a->bias + n * a->bst[0] + h * a->bst[1] + q0 * a->bst[2] : NULL;
    for (int64_t i = 0; i < rpad; i++) {
        if (i < rows)
            memcpy(Q + i * D, q + i * a->HD, (size_t)D * sizeof *Q);
        else
            memset(Q + i * D, 0, (size_t)D * sizeof *Q);
        memset(O + i * dp, 0, (size_t)dp * sizeof *O);
        mx[i] = -INFINITY;
        sum[i] = 0.0;
    }
    for (int64_t kb = 0; kb < j->kblocks; kb++) {
        int64_t k0 = kb * j->kb;
        if (a->causal && k0 > q0 + rows - 1) break; /* every key here is masked */
        int64_t kn = a->Lk - k0 < j->kb ? a->Lk - k0 : j->kb, kr = (kn + VW - 1) / VW * VW;
        const float *Kt = j->kt + (kvh * j->kblocks + kb) * D * kbp;
        const float *V = j->vp + (kvh * j->lkp + k0) * dp;
        for (int64_t g = 0; g < rpad; g += ROW_GROUP) {
            for (int64_t r = 0; r < ROW_GROUP; r += QK_R) {
                const float *Qr = Q + (g + r) * D;
                float *Sr = S + r * kbp;
                int64_t c = 0;
                for (; c + QK_NK * VW <= kr; c += QK_NK * VW)
                    SFX(qk_tile)(Qr, D, Kt + c, kbp, Sr + c, kbp, QK_NK, a->scale);
                switch ((kr - c) / VW) {
                case 1: SFX(qk_tile)(Qr, D, Kt + c, kbp, Sr + c, kbp, 1, a->scale); break;
#if QK_NK > 2
                case 2: SFX(qk_tile)(Qr, D, Kt + c, kbp, Sr + c, kbp, 2, a->scale); break;
                case 3: SFX(qk_tile)(Qr, D, Kt + c, kbp, Sr + c, kbp, 3, a->scale); break;
#endif
                }
            }
            for (int64_t r = 0; r < ROW_GROUP; r++) {
                int64_t i = g + r;
                float *row = S + r * kbp;
                if (i >= rows) { /* padding rows: no keys */
                    mb[r] = -INFINITY;
                    continue;
                }
                if (bias) {
                    const float *br = bias + i * a->bst[2] + k0;
                    for (int64_t c = 0; c < kn; c++) row[c] += br[c];
                }
                int64_t lim = kn;
                if (a->causal) {
                    lim = q0 + i + 1 - k0;
                    if (lim > kn) lim = kn;
                    if (lim < 0) lim = 0;
                }
                for (int64_t c = lim; c < kr; c++) row[c] = -INFINITY;
                mb[r] = SFX(row_max)(row, kr, mx + i, sum + i, O + i * dp, dp);
            }
            SFX(exp_rows)(S, kbp, kr, mb, bs, ROW_GROUP);
            for (int64_t r = 0; r < ROW_GROUP && g + r < rows; r++) {
                float t[VW];
                VSTORE(t, VLOAD(bs + r * VW));
                double s = 0.0;
                for (int l = 0; l < VW; l++) s += t[l];
                sum[g + r] += s;
            }
            int64_t nvec = dp / VW;
            for (int64_t c0 = 0; c0 < nvec; c0 += PV_NV) {
                int64_t nv = nvec - c0 < PV_NV ? nvec - c0 : PV_NV;
                /* rows per tile: PV_ACC accumulators (ROW_GROUP divides by it) */
                int64_t nr = PV_ACC / nv;
                for (int64_t r = 0; r < ROW_GROUP; r += nr) {
                    const float *P = S + r * kbp;
                    const float *Vc = V + c0 * VW;
                    float *Oc = O + (g + r) * dp + c0 * VW;
                    switch (nv) {
                    case 1: SFX(pv_tile)(P, kbp, Vc, dp, kn, Oc, dp, 1, PV_ACC); break;
                    case 2: SFX(pv_tile)(P, kbp, Vc, dp, kn, Oc, dp, 2, PV_ACC / 2); break;
#if PV_NV >= 3
                    case 3: SFX(pv_tile)(P, kbp, Vc, dp, kn, Oc, dp, 3, PV_ACC / 3); break;
#endif
#if PV_NV >= 4
                    case 4: SFX(pv_tile)(P, kbp, Vc, dp, kn, Oc, dp, 4, PV_ACC / 4); break;
#endif
                    }
                }
            }
        }
    }
    /* each row / its sum (a fully masked row stays zeros) */
    float *o = a->o + (n * a->Lq + q0) * a->HD + h * D;
    for (int64_t i = 0; i < rows; i++) {
        float inv = sum[i] > 0.0 ? (float)(1.0 / sum[i]) : 0.0f;
        for (int64_t d = 0; d < D; d++) o[i * a->HD + d] = O[i * dp + d] * inv;
    }
}
