/* attn_fused_isa.h - the body of attn_fused.c's kernel for one vector ISA.
 *
 * Included once per path by attn_fused.c, which defines before it:
 *   TGT      the function attribute enabling the ISA
 *   SFX(x)   x suffixed with the path's name
 *   vec, VW  the vector type and its float lanes
 *   VLOAD VSTORE VSET1 VZERO VFMA VMUL VADD VSUB VMAX VEXP  the ops
 *   VNOTINF0(m)  m with its -inf lanes replaced by 0
 *   NKEY     keys of one scores tile, ND: head dims of one P V tile (each
 *            x 2 vectors of query rows)
 * Query rows run along the vector lanes throughout: a row group is RG = 2 VW
 * rows, its scores are stored transposed (S^T [keys][RG]) and its output as
 * O^T [D][rows], so the softmax's max and sum are lane-wise (no horizontal
 * reductions) and neither product pads D or the keys to whole vectors. Not
 * a header of its own module: it has no contract beyond attn_fused.c. */

#define RG (2 * VW)

/* S^T[k][0 .. RG) = scale * sum_d K[k][d] Q^T[d][0 .. RG) for nk (at most
 * NKEY) keys: a GEMM microkernel with the query rows along the vector, the
 * key values (Kt: [D][ldk], keys contiguous) broadcast. */
TGT static inline __attribute__((always_inline)) void
SFX(qk_tile)(const float *QT, int64_t ldq, int64_t D, const float *Kt, int64_t ldk, float *ST,
             const int nk, float scale) {
    vec acc[NKEY][2];
#pragma GCC unroll 12
    for (int k = 0; k < nk; k++) acc[k][0] = acc[k][1] = VZERO();
    for (int64_t d = 0; d < D; d++) {
        vec q0 = VLOAD(QT + d * ldq), q1 = VLOAD(QT + d * ldq + VW);
#pragma GCC unroll 12
        for (int k = 0; k < nk; k++) {
            vec b = VSET1(Kt[d * ldk + k]);
            acc[k][0] = VFMA(b, q0, acc[k][0]);
            acc[k][1] = VFMA(b, q1, acc[k][1]);
        }
    }
    vec s = VSET1(scale);
#pragma GCC unroll 12
    for (int k = 0; k < nk; k++) {
        VSTORE(ST + k * RG, VMUL(acc[k][0], s));
        VSTORE(ST + k * RG + VW, VMUL(acc[k][1], s));
    }
}

/* O^T[d][0 .. RG) += sum_j V[j][d] P^T[j][0 .. RG) for nd (at most ND) head
 * dims over kn keys: the probabilities of RG rows as vectors, the V values
 * (rows of ldv floats) broadcast. */
TGT static inline __attribute__((always_inline)) void
SFX(pv_tile)(const float *PT, const float *V, int64_t ldv, int64_t kn, float *OT, int64_t ldo,
             const int nd) {
    vec acc[ND][2];
#pragma GCC unroll 12
    for (int d = 0; d < nd; d++) {
        acc[d][0] = VLOAD(OT + d * ldo);
        acc[d][1] = VLOAD(OT + d * ldo + VW);
    }
    for (int64_t j = 0; j < kn; j++) {
        vec p0 = VLOAD(PT + j * RG), p1 = VLOAD(PT + j * RG + VW);
#pragma GCC unroll 12
        for (int d = 0; d < nd; d++) {
            vec b = VSET1(V[j * ldv + d]);
            acc[d][0] = VFMA(b, p0, acc[d][0]);
            acc[d][1] = VFMA(b, p1, acc[d][1]);
        }
    }
#pragma GCC unroll 12
    for (int d = 0; d < nd; d++) {
        VSTORE(OT + d * ldo, acc[d][0]);
        VSTORE(OT + d * ldo + VW, acc[d][1]);
    }
}

/* The online-softmax step of one row group over a key block of kn scores
 * (S^T, masked entries -inf): per lane the new running max m, alpha =
 * exp(m_old - m) rescaling O^T (D rows of stride ldo) and the running sum,
 * the scores replaced by exp(s - m) and their sum added. A row whose keys
 * are all masked so far keeps m = -inf and gets zeros (its max is taken as
 * 0 in the exps: exp(-inf) = 0 without NaN). */
TGT static void SFX(softmax_step)(float *ST, int64_t kn, float *mx, double *sum, float *OT,
                                  int64_t D, int64_t ldo) {
    for (int v = 0; v < 2; v++) {
        vec vm = VSET1(-INFINITY);
        for (int64_t j = 0; j < kn; j++) vm = VMAX(vm, VLOAD(ST + j * RG + v * VW));
        vec mo = VLOAD(mx + v * VW), mn = VMAX(mo, vm);
        VSTORE(mx + v * VW, mn);
        vec ms = VNOTINF0(mn);
        vec alpha = VEXP(VSUB(mo, ms)), s = VZERO();
        for (int64_t j = 0; j < kn; j++) {
            vec e = VEXP(VSUB(VLOAD(ST + j * RG + v * VW), ms));
            VSTORE(ST + j * RG + v * VW, e);
            s = VADD(s, e);
        }
        for (int64_t d = 0; d < D; d++)
            VSTORE(OT + d * ldo + v * VW, VMUL(VLOAD(OT + d * ldo + v * VW), alpha));
        float ta[VW], ts[VW];
        VSTORE(ta, alpha);
        VSTORE(ts, s);
        for (int l = 0; l < VW; l++) sum[v * VW + l] = sum[v * VW + l] * ta[l] + ts[l];
    }
}

/* One task: up to QB query rows of one (batch, head) against every key
 * block (or up to the causal diagonal). Tasks run per pack group: t counts
 * the query blocks, then the heads sharing the pair's k/v head, then the
 * group's pairs. */
TGT static void SFX(task)(void *ctx, int64_t t, int thread) {
    const fused_job *j = ctx;
    const sd_cpu_attn *a = j->a;
    int64_t lp = t / j->tpp, qb = t % j->tpp % j->qblocks, hg = t % j->tpp / j->qblocks;
    int64_t kvh = j->p0 + lp, n = kvh / j->kv_heads;
    int64_t h = kvh % j->kv_heads * a->group + hg;
    int64_t q0 = qb * j->qb, rows = a->Lq - q0 < j->qb ? a->Lq - q0 : j->qb;
    int64_t D = a->D, kbp = j->kbp;
    int64_t rpad = (rows + RG - 1) / RG * RG; /* the row stride of Q^T and O^T */
    float *QT = j->qbuf[thread], *OT = j->obuf[thread], *ST = j->sbuf[thread];
    float *mx = j->mbuf[thread];
    double *sum = j->lbuf[thread];
    const float *q = a->q + (n * a->Lq + q0) * a->HD + h * D;
    const float *bias = a->bias ? a->bias + n * a->bst[0] + h * a->bst[1] + q0 * a->bst[2] : NULL;
    for (int64_t d = 0; d < D; d++) {
        for (int64_t i = 0; i < rows; i++) QT[d * rpad + i] = q[i * a->HD + d];
        for (int64_t i = rows; i < rpad; i++) QT[d * rpad + i] = 0.0f;
    }
    memset(OT, 0, (size_t)(D * rpad) * sizeof *OT);
    for (int64_t i = 0; i < rpad; i++) mx[i] = -INFINITY, sum[i] = 0.0;
    for (int64_t kb = 0; kb < j->kblocks; kb++) {
        int64_t k0 = kb * j->kb;
        if (a->causal && k0 > q0 + rows - 1) break; /* every key here is masked */
        int64_t kn = a->Lk - k0 < j->kb ? a->Lk - k0 : j->kb;
        const float *Kt = j->kt + (lp * j->kblocks + kb) * D * kbp;
        const float *V = j->vp + (lp * j->lkp + k0) * D;
        for (int64_t g = 0; g < rpad; g += RG) {
            if (a->causal && k0 > q0 + g + RG - 1) continue; /* every key masked for this group */
            int64_t c = 0;
            for (; c + NKEY <= kn; c += NKEY)
                SFX(qk_tile)(QT + g, rpad, D, Kt + c, kbp, ST + c * RG, NKEY, a->scale);
            for (; c + 4 <= kn; c += 4)
                SFX(qk_tile)(QT + g, rpad, D, Kt + c, kbp, ST + c * RG, 4, a->scale);
            for (; c < kn; c++)
                SFX(qk_tile)(QT + g, rpad, D, Kt + c, kbp, ST + c * RG, 1, a->scale);
            int64_t nr = rows - g < RG ? rows - g : RG; /* real rows of the group */
            if (bias)
                for (int64_t r = 0; r < nr; r++) {
                    const float *br = bias + (g + r) * a->bst[2] + k0;
                    for (int64_t c2 = 0; c2 < kn; c2++) ST[c2 * RG + r] += br[c2];
                }
            if (a->causal && k0 + kn - 1 > q0 + g) /* keys past some row's diagonal */
                for (int64_t r = 0; r < nr; r++)
                    for (int64_t c2 = q0 + g + r + 1 - k0 < 0 ? 0 : q0 + g + r + 1 - k0; c2 < kn;
                         c2++)
                        ST[c2 * RG + r] = -INFINITY;
            SFX(softmax_step)(ST, kn, mx + g, sum + g, OT + g, D, rpad);
            int64_t d0 = 0;
            for (; d0 + ND <= D; d0 += ND)
                SFX(pv_tile)(ST, V + d0, D, kn, OT + d0 * rpad + g, rpad, ND);
            for (; d0 + 4 <= D; d0 += 4)
                SFX(pv_tile)(ST, V + d0, D, kn, OT + d0 * rpad + g, rpad, 4);
            for (; d0 < D; d0++)
                SFX(pv_tile)(ST, V + d0, D, kn, OT + d0 * rpad + g, rpad, 1);
        }
    }
    /* each row / its sum (a fully masked row stays zeros) */
    float *o = a->o + (n * a->Lq + q0) * a->HD + h * D;
    for (int64_t i = 0; i < rows; i++) {
        float inv = sum[i] > 0.0 ? (float)(1.0 / sum[i]) : 0.0f;
        for (int64_t d = 0; d < D; d++) o[i * a->HD + d] = OT[d * rpad + i] * inv;
    }
}

#undef RG
