/* src/kernels/simd/norm.c - SIMD batch normalization (training: batch
 * statistics and PyTorch's running-statistics update; eval: running
 * statistics) and layer normalization over the last dim, with gradients.
 *
 * Saved state is laid out exactly as the reference's (batchnorm aux = mean[C],
 * invstd[C]; layernorm aux = mean[R], invstd[R]) so forward and backward
 * kernels of different slots can be mixed.
 *
 * Accuracy: every sum is accumulated in float vectors for at most 8 terms per
 * lane (32 in the rows path's backward sums, as sum's), then flushed into a
 * double; variances are two-pass (the second pass is
 * centred on the float mean and corrected by its residual), so statistics are
 * good to ~1e-7 relative. Each channel (batchnorm) / row (layernorm) is
 * reduced by one thread in a fixed order: results do not depend on the thread
 * count. Batchnorm on planes of fewer than VW elements ((M, C) inputs, the
 * channels-last CNNs' (N*H*W, C) reshapes) runs the rows path when the node
 * has its workspace (ct_ws_batchnorm): fixed row pieces x column blocks in
 * parallel, per-piece double partials added in piece order (the forward's
 * statistics: each piece's own two passes, combined as Chan's parallel
 * variance), so it too is independent of the thread count; without the
 * workspace, the column path (one thread per block of channels). The rows
 * path's backward sums run in float runs of CS_RB rows, as sum's column
 * path: its partials of sum(dy) are that kernel's, so batchnorm_bwd_data
 * can leave them (and those of sum(dy * (x - mean)), batchnorm_bwd_gamma's)
 * in its aux for COLSUM nodes (fusion batchnorm_bwd+colsum, ia[7]), and
 * read dy through batchnorm+relu's mask bits (ia[5], relu_mask_bwd folded
 * in): the same operations in the same order as the unfused kernels.
 *
 * BF16 / FP16 I/O (simd_lowp.h): x, dy, y and dx may be BF16 or FP16
 * (gamma, beta, the statistics and dgamma stay FP32; the -pure precisions'
 * 16-bit gamma / beta are converted into an FP32 tile once per thread).
 * Every kernel converts its 16-bit vectors in registers (nm_accum_h, ct_vld
 * / ct_vst), so planes and rows of any length run; planes of fewer than VW
 * elements without the rows path's workspace (the column path) and -pure
 * parameter vectors longer than CT_BF16_TILE decline, and the node gets FP32
 * copies. */
#include <math.h>
#include <string.h>

#include "colsum.h"
#include "simd_lowp.h"

/* always_inline makes the dtype / column-sum-mask specializations. gcc's -fanalyzer (`make lint-gcc`
 * defines CT_ANALYZER) would explore every inlined copy's paths (21 copies of the layernorm backward's
 * row: minutes and GBs), so it analyzes them as plain inline functions: the same code, once. */
#ifdef CT_ANALYZER
#define NM_INLINE static inline
#else
#define NM_INLINE static inline __attribute__((always_inline))
#endif

/* Threads worth using for `work` elements. */
static inline int nm_threads(const ct_kargs *k, int64_t work) {
    return work >= 32768 && k->nthreads > 1 ? k->nthreads : 1;
}

/* ---- chunked float -> double accumulation over a contiguous run ---------------------- */

/* What is summed per element (o1, o2):
 *   NM_SUM   x                        (-)
 *   NM_CTR   x - m                    (x - m)^2
 *   NM_BNB   dy                       dy * (x - m)
 *   NM_LNB   g = dy * gamma           g * ((x - m) * is)
 *   NM_DOT   dy * (x - m)             (-)                                                 */
enum { NM_SUM = 0, NM_CTR, NM_BNB, NM_LNB, NM_DOT };

NM_INLINE void nm_terms(int mode, vf x, vf dy, vf ga, vf vm, vf vis, vf *t1, vf *t2) {
    switch (mode) {
    case NM_SUM: *t1 = x; *t2 = vzero(); break;
    case NM_CTR: { vf d = vsub(x, vm); *t1 = d; *t2 = vmul(d, d); break; }
    case NM_BNB: *t1 = dy; *t2 = vmul(dy, vsub(x, vm)); break;
    case NM_LNB: { vf g = vmul(dy, ga); *t1 = g; *t2 = vmul(g, vmul(vsub(x, vm), vis)); break; }
    default: *t1 = vmul(dy, vsub(x, vm)); *t2 = vzero(); break;
    }
}

NM_INLINE void nm_terms1(int mode, float x, float dy, float ga, float m, float is, double *t1, double *t2) {
    switch (mode) {
    case NM_SUM: *t1 = x; *t2 = 0; break;
    case NM_CTR: { double d = (double)x - m; *t1 = d; *t2 = d * d; break; }
    case NM_BNB: *t1 = dy; *t2 = (double)dy * ((double)x - m); break;
    case NM_LNB: { double g = (double)dy * ga; *t1 = g; *t2 = g * (double)((x - m) * is); break; }
    default: *t1 = (double)dy * ((double)x - m); *t2 = 0; break;
    }
}

/* x / dy element j as floats: FP32 (h = CT_F32), or BF16 / FP16 (h: that
 * dtype) converted in registers */
NM_INLINE vf nm_ld(const void *p, ct_dtype h, int64_t j) {
    return h != CT_F32 ? vload_lp((const uint16_t *)p + j, h) : vload((const float *)p + j);
}
NM_INLINE float nm_ld1(const void *p, ct_dtype h, int64_t j) {
    return h != CT_F32 ? ct_lp1_to_f32(((const uint16_t *)p)[j], h) : ((const float *)p)[j];
}

/* element off of an FP32, BF16 or FP16 tensor's data, for nm_ld */
NM_INLINE const void *nm_at(const ct_tensor *t, int64_t off) {
    return (const char *)t->data + (size_t)off * ct_dtype_size(t->dtype);
}

/* Adds the sums over i < n of the mode's terms to *o1, *o2. dy and ga may be
 * NULL when the mode does not read them; hx / hd: x's and dy's dtypes. */
NM_INLINE void nm_accum_h(int mode, const void *x, ct_dtype hx, const void *dy, ct_dtype hd, const float *ga, int64_t n,
                          float m, float is, double *o1, double *o2) {
    const vf vm = vset1(m), vis = vset1(is);
    double a1 = 0, a2 = 0;
    int64_t i = 0;
#define NM_LDX(j) nm_ld(x, hx, j)
#define NM_LDD(j) (dy ? nm_ld(dy, hd, j) : vzero())
#define NM_LDG(j) (ga ? vload(ga + (j)) : vzero())
    while (n - i >= 4 * VW) {
        vf p0 = vzero(), p1 = vzero(), p2 = vzero(), p3 = vzero();
        vf q0 = vzero(), q1 = vzero(), q2 = vzero(), q3 = vzero();
        int64_t lim = CT_MIN(n, i + 32 * VW); /* at most 8 terms per lane in float */
        for (; i + 4 * VW <= lim; i += 4 * VW) {
            vf t1, t2;
            nm_terms(mode, NM_LDX(i), NM_LDD(i), NM_LDG(i), vm, vis, &t1, &t2);
            p0 = vadd(p0, t1); q0 = vadd(q0, t2);
            nm_terms(mode, NM_LDX(i + VW), NM_LDD(i + VW), NM_LDG(i + VW), vm, vis, &t1, &t2);
            p1 = vadd(p1, t1); q1 = vadd(q1, t2);
            nm_terms(mode, NM_LDX(i + 2 * VW), NM_LDD(i + 2 * VW), NM_LDG(i + 2 * VW), vm, vis, &t1, &t2);
            p2 = vadd(p2, t1); q2 = vadd(q2, t2);
            nm_terms(mode, NM_LDX(i + 3 * VW), NM_LDD(i + 3 * VW), NM_LDG(i + 3 * VW), vm, vis, &t1, &t2);
            p3 = vadd(p3, t1); q3 = vadd(q3, t2);
        }
        a1 += vhsum(vadd(vadd(p0, p1), vadd(p2, p3)));
        if (mode == NM_CTR || mode == NM_BNB || mode == NM_LNB) a2 += vhsum(vadd(vadd(q0, q1), vadd(q2, q3)));
    }
    for (; i + VW <= n; i += VW) {
        vf t1, t2;
        nm_terms(mode, NM_LDX(i), NM_LDD(i), NM_LDG(i), vm, vis, &t1, &t2);
        a1 += vhsum(t1);
        if (mode == NM_CTR || mode == NM_BNB || mode == NM_LNB) a2 += vhsum(t2);
    }
#undef NM_LDX
#undef NM_LDD
#undef NM_LDG
    for (; i < n; i++) {
        double t1, t2;
        nm_terms1(mode, nm_ld1(x, hx, i), dy ? nm_ld1(dy, hd, i) : 0.f, ga ? ga[i] : 0.f, m, is, &t1, &t2);
        a1 += t1;
        a2 += t2;
    }
    *o1 += a1;
    *o2 += a2;
}

/* ---- column-block accumulation (batchnorm with small spatial size) -------------------
 * x viewed as (N, CS) rows; sums over rows n of the mode's terms for columns
 * [j0, j0 + w), w <= NM_COLS, with m = mcol[j] per column. */
#define NM_COLS 256
#define NM_ROWS 8 /* rows accumulated in float before flushing to double */

/* n <= VW floats: a plain load / store when the vector is full */
NM_INLINE vf nm_ldn(const float *p, int n) { return n == VW ? vload(p) : vtail_load(p, n); }
NM_INLINE void nm_stn(float *p, vf v, int n) {
    if (n == VW) vstore(p, v);
    else vtail_store(p, v, n);
}

NM_INLINE void nm_flush(double *dst, vf v, int n) {
    float t[VW];
    vstore(t, v);
    for (int l = 0; l < n; l++) dst[l] += t[l];
}

NM_INLINE void nm_colaccum(int mode, const float *x, const float *dy, int64_t N, int64_t CS, int64_t j0, int w,
                           const float *mcol, double *o1, double *o2) {
    for (int j = 0; j < w; j++) o1[j] = o2[j] = 0;
    for (int64_t n0 = 0; n0 < N; n0 += NM_ROWS) {
        int64_t n1 = CT_MIN(N, n0 + NM_ROWS);
        for (int j = 0; j < w; j += VW) {
            int nl = CT_MIN(VW, w - j);
            vf vm = nm_ldn(mcol + j, nl), p = vzero(), q = vzero();
            for (int64_t n = n0; n < n1; n++) {
                int64_t off = n * CS + j0 + j;
                vf xv = nm_ldn(x + off, nl), dv = dy ? nm_ldn(dy + off, nl) : vzero(), t1, t2;
                nm_terms(mode, xv, dv, vzero(), vm, vzero(), &t1, &t2);
                p = vadd(p, t1);
                q = vadd(q, t2);
            }
            nm_flush(o1 + j, p, nl);
            if (mode == NM_CTR || mode == NM_BNB) nm_flush(o2 + j, q, nl);
        }
    }
}

/* Channel blocks for the column path: whole channels, at most NM_COLS columns. */
static int64_t nm_chans_per_block(int64_t S) { return S >= NM_COLS ? 1 : NM_COLS / S; }

/* ---- rows path (batchnorm with S < VW and the workspace) -------------------------------
 * x viewed as (N rows, W = C*S columns). The rows split into P =
 * ct_colsum_pieces(N, W) fixed pieces (kernels.h: the shape decides, not the
 * thread count); a work item is (piece, block of up to BR_COLS columns): it
 * sums its rows' terms in float runs of NM_ROWS rows (the forward's
 * statistics; CS_RB for the backward's sums), flushed into the
 * piece's double partials in the workspace (ct_bn_rows_ws_bytes). The
 * partials are added in piece order per column, then a channel's S columns
 * in order: the statistics do not depend on the thread count. The
 * element-wise pass runs over row blocks, vectorized across columns, with
 * the per-column factors of a group of BR_GV vectors in registers. */
#define BR_COLS 128
#define BR_GV 4  /* vectors per register group */
#define BR_RB 64 /* rows per block of the element-wise pass */

/* dst[0..VW) += v's lanes as doubles: nm_flush with vector conversions (the same sums); the partials'
 * rows are padded to whole vectors (a tail's zero lanes land in the padding) */
NM_INLINE void br_flush(double *dst, vf v) {
#if defined(CT_SIMD_AVX512)
    __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    _mm512_storeu_pd(dst, _mm512_add_pd(_mm512_loadu_pd(dst), lo));
    _mm512_storeu_pd(dst + 8, _mm512_add_pd(_mm512_loadu_pd(dst + 8), hi));
#else
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    _mm256_storeu_pd(dst, _mm256_add_pd(_mm256_loadu_pd(dst), lo));
    _mm256_storeu_pd(dst + 4, _mm256_add_pd(_mm256_loadu_pd(dst + 4), hi));
#endif
}

typedef struct {
    double *p1, *p2, *t1, *t2; /* P x Wp partials (two sets), Wp totals (two); Wp = W padded to 16 */
    float *mc, *ac, *bc, *cc;  /* per-column centre and factors */
    int64_t N, C, S, W, Wp, P;
} br_ws;

/* the rows path's workspace, or 0 (the column path runs) */
static int br_ws_get(const ct_kargs *k, int64_t N, int64_t C, int64_t S, br_ws *w) {
    size_t need = ct_bn_rows_ws_bytes(N, C, S);
    if (!need || !k->ws || k->ws_bytes < need) return 0;
    w->N = N, w->C = C, w->S = S, w->W = C * S, w->Wp = (C * S + 15) & ~(int64_t)15, w->P = ct_colsum_pieces(N, C * S);
    w->p1 = k->ws;
    w->p2 = w->p1 + w->P * w->Wp;
    w->t1 = w->p2 + w->P * w->Wp;
    w->t2 = w->t1 + w->Wp;
    w->mc = (float *)(w->t2 + w->Wp);
    w->ac = w->mc + w->W;
    w->bc = w->ac + w->W;
    w->cc = w->bc + w->W;
    return 1;
}

/* dy's nl elements at element e (rows of W): as loaded, or (mk: the relu
 * mask bits of batchnorm+relu, one per element) times 1 where the bit is
 * set and 0 where not, relu_mask_bwd's product */
NM_INLINE vf br_dy(ct_dtype dt, const void *dy, const uint8_t *mk, int64_t e, int nl) {
    vf v = cs_ld(dy, dt, e, nl);
    if (!mk) return v;
    const uint8_t *b = mk + (e >> 3);
    const int s = (int)(e & 7);
    uint32_t w = b[0]; /* no byte past the last element's */
    if (s + nl > 8) w |= (uint32_t)b[1] << 8;
    if (s + nl > 16) w |= (uint32_t)b[2] << 16;
    return vmul(v, vand(vset1(1.0f), ct_vmask_bits((w >> s) & ((1u << nl) - 1))));
}

/* The mode's sums over rows [r0, r1) of the NV vectors (the last tl wide) at
 * column j, centred on m[0..) (the group's columns): o1[0..), o2[0..) (added
 * to, whole vectors). Float runs of NM_ROWS rows for the forward's
 * statistics, CS_RB for the backward's sums (sum's column path) */
NM_INLINE void br_group(int mode, int NV, ct_dtype xt, ct_dtype dt, const void *x, const void *dy, const uint8_t *mk,
                        int64_t W, int64_t r0, int64_t r1, int64_t j, int tl, const float *m, double *o1, double *o2) {
    const int64_t rb = mode == NM_BNB || mode == NM_DOT ? CS_RB : NM_ROWS;
    vf vm[BR_GV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) vm[v] = nm_ldn(m + v * VW, v == NV - 1 ? tl : VW);
    for (int64_t n0 = r0; n0 < r1; n0 += rb) {
        const int64_t n1 = CT_MIN(r1, n0 + rb);
        vf p[BR_GV], q[BR_GV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) p[v] = q[v] = vzero();
        for (int64_t r = n0; r < n1; r++) {
            const int64_t o = r * W + j;
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                const int nl = v == NV - 1 ? tl : VW;
                vf xv = cs_ld(x, xt, o + v * VW, nl), dv = dy ? br_dy(dt, dy, mk, o + v * VW, nl) : vzero(), t1, t2;
                nm_terms(mode, xv, dv, vzero(), vm[v], vzero(), &t1, &t2);
                p[v] = vadd(p[v], t1);
                q[v] = vadd(q[v], t2);
            }
        }
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            br_flush(o1 + v * VW, p[v]);
            if (mode == NM_CTR || mode == NM_BNB) br_flush(o2 + v * VW, q[v]);
        }
    }
}

/* The mode's sums over rows [r0, r1) of columns [j0, j0 + w), centred on
 * m[0..w): o1[0..), o2[0..) (set; whole vectors, the padding included) */
NM_INLINE void br_cols(int mode, ct_dtype xt, ct_dtype dt, const void *x, const void *dy, const uint8_t *mk, int64_t W,
                       int64_t r0, int64_t r1, int64_t j0, int w, const float *m, double *o1, double *o2) {
    const int wp = (w + VW - 1) / VW * VW; /* with the padding a tail's vector reaches */
    for (int j = 0; j < wp; j++) o1[j] = o2[j] = 0;
    for (int g = 0; g < w; g += BR_GV * VW) {
        const int gw = CT_MIN(BR_GV * VW, w - g), nv = (gw + VW - 1) / VW, tl = gw - (nv - 1) * VW;
        const int64_t j = j0 + g;
        switch (nv) {
        case 1: br_group(mode, 1, xt, dt, x, dy, mk, W, r0, r1, j, tl, m + g, o1 + g, o2 + g); break;
        case 2: br_group(mode, 2, xt, dt, x, dy, mk, W, r0, r1, j, tl, m + g, o1 + g, o2 + g); break;
        case 3: br_group(mode, 3, xt, dt, x, dy, mk, W, r0, r1, j, tl, m + g, o1 + g, o2 + g); break;
        default: br_group(mode, 4, xt, dt, x, dy, mk, W, r0, r1, j, tl, m + g, o1 + g, o2 + g); break;
        }
    }
}

/* One work item: piece p's partials of columns [j0, j0 + w). NM_SUM with
 * no dy (the forward's statistics): the piece's own two passes while its
 * rows are in cache, the sum, then the sums centred on the piece's float
 * mean mp: p1 = the piece's mean mp + s1/n, p2 = its centred sum of squares
 * s2 - s1^2/n (bn_moments' form), combined across pieces by br_stats. */
NM_INLINE void br_item(int mode, ct_dtype xt, ct_dtype dt, const void *x, const void *dy, const uint8_t *mk,
                       const br_ws *ws, int64_t p, int64_t j0, int w) {
    const int64_t r0 = ws->N * p / ws->P, r1 = ws->N * (p + 1) / ws->P;
    double *o1 = ws->p1 + p * ws->Wp + j0, *o2 = ws->p2 + p * ws->Wp + j0;
    if (mode != NM_SUM || dy) {
        br_cols(mode, xt, dt, x, dy, mk, ws->W, r0, r1, j0, w, ws->mc + j0, o1, o2);
        return;
    }
    float mp[BR_COLS];
    const double n = (double)(r1 - r0);
    br_cols(NM_SUM, xt, dt, x, NULL, NULL, ws->W, r0, r1, j0, w, ws->mc + j0, o1, o2);
    for (int j = 0; j < w; j++) mp[j] = (float)(o1[j] / n);
    br_cols(NM_CTR, xt, dt, x, NULL, NULL, ws->W, r0, r1, j0, w, mp, o1, o2);
    for (int j = 0; j < w; j++) {
        double ss = o2[j] - o1[j] * o1[j] / n;
        o1[j] = mp[j] + o1[j] / n;
        o2[j] = ss < 0 ? 0 : ss;
    }
}

/* All pieces' partials of the mode's sums (centre ws->mc; mk: dy's relu
 * mask bits or NULL), then (totals) their totals per column in ws->t1 / t2
 * (pieces in order) */
NM_INLINE void br_sums(int mode, const ct_tensor *X, const ct_tensor *DY, const uint8_t *mk, const br_ws *ws, int nt,
                       int totals) {
    const int64_t nb = (ws->W + BR_COLS - 1) / BR_COLS, items = ws->P * nb;
    const void *x = X->data, *dy = DY ? DY->data : NULL;
    const ct_dtype xt = X->dtype, dt = DY ? DY->dtype : CT_F32;
    const int f32 = xt == CT_F32 && dt == CT_F32;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < items; t++) {
        const int64_t p = t / nb, j0 = (t % nb) * BR_COLS;
        const int w = (int)CT_MIN((int64_t)BR_COLS, ws->W - j0);
        if (f32 && !mk) br_item(mode, CT_F32, CT_F32, x, dy, NULL, ws, p, j0, w);
        else if (f32) br_item(mode, CT_F32, CT_F32, x, dy, mk, ws, p, j0, w);
        else br_item(mode, xt, dt, x, dy, mk, ws, p, j0, w);
    }
    if (!totals) return;
    const int two = mode == NM_CTR || mode == NM_BNB;
    for (int64_t j = 0; j < ws->W; j++) ws->t1[j] = ws->t2[j] = 0;
    for (int64_t p = 0; p < ws->P; p++) {
        const double *a = ws->p1 + p * ws->Wp, *b = ws->p2 + p * ws->Wp;
        for (int64_t j = 0; j < ws->W; j++) ws->t1[j] += a[j];
        if (two)
            for (int64_t j = 0; j < ws->W; j++) ws->t2[j] += b[j];
    }
}

/* The forward's statistics: every piece's mean and centred sum of squares per
 * column (br_item, NM_SUM), combined in piece order as Chan et al.'s parallel
 * variance: t1 = the column's mean sum_p n_p mu_p / N, t2 = its centred sum
 * of squares sum_p (M2_p + n_p (mu_p - mean)^2). */
static void br_stats(const ct_tensor *X, const br_ws *ws, int nt) {
    br_sums(NM_SUM, X, NULL, NULL, ws, nt, 0);
    for (int64_t j = 0; j < ws->W; j++) ws->t1[j] = ws->t2[j] = 0;
    for (int64_t p = 0; p < ws->P; p++) {
        const double n = (double)(ws->N * (p + 1) / ws->P - ws->N * p / ws->P), *mu = ws->p1 + p * ws->Wp;
        for (int64_t j = 0; j < ws->W; j++) ws->t1[j] += n * mu[j];
    }
    for (int64_t j = 0; j < ws->W; j++) ws->t1[j] /= (double)ws->N;
    for (int64_t p = 0; p < ws->P; p++) {
        const double n = (double)(ws->N * (p + 1) / ws->P - ws->N * p / ws->P), *mu = ws->p1 + p * ws->Wp,
                     *m2 = ws->p2 + p * ws->Wp;
        for (int64_t j = 0; j < ws->W; j++) {
            double d = mu[j] - ws->t1[j];
            ws->t2[j] += m2[j] + n * d * d;
        }
    }
}

/* a channel's total: its S columns' totals in order */
static double br_chan(const double *t, int64_t c, int64_t S) {
    double s = 0;
    for (int64_t i = 0; i < S; i++) s += t[c * S + i];
    return s;
}

static void br_fill(float *col, int64_t c, int64_t S, float v) {
    for (int64_t i = 0; i < S; i++) col[c * S + i] = v;
}

/* The element-wise pass of NV vectors (the last tl wide) at column j over
 * rows [r0, r1): forward (bwd = 0) o = (x - m) * a + b; backward
 * o = ((x - m) * c + (dy - b)) * a (the plane path's expressions) */
NM_INLINE void br_out_group(int bwd, int NV, ct_dtype xt, ct_dtype dt, ct_dtype ot, const void *x, const void *dy,
                            const uint8_t *mk, void *out, int64_t W, int64_t r0, int64_t r1, int64_t j, int tl,
                            const br_ws *ws) {
    vf vm[BR_GV], va[BR_GV], vb[BR_GV], vc[BR_GV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        const int nl = v == NV - 1 ? tl : VW;
        vm[v] = nm_ldn(ws->mc + j + v * VW, nl);
        va[v] = nm_ldn(ws->ac + j + v * VW, nl);
        vb[v] = nm_ldn(ws->bc + j + v * VW, nl);
        vc[v] = bwd ? nm_ldn(ws->cc + j + v * VW, nl) : vzero();
    }
    for (int64_t r = r0; r < r1; r++) {
        const int64_t o = r * W + j;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const int nl = v == NV - 1 ? tl : VW;
            vf xm = vsub(cs_ld(x, xt, o + v * VW, nl), vm[v]), y;
            if (bwd) y = vmul(vfma(xm, vc[v], vsub(br_dy(dt, dy, mk, o + v * VW, nl), vb[v])), va[v]);
            else y = vfma(xm, va[v], vb[v]);
            cs_st(out, ot, o + v * VW, y, nl);
        }
    }
}

NM_INLINE void br_out_rows(int bwd, ct_dtype xt, ct_dtype dt, ct_dtype ot, const void *x, const void *dy,
                           const uint8_t *mk, void *out, const br_ws *ws, int64_t r0, int64_t r1) {
    for (int64_t j = 0; j < ws->W; j += BR_GV * VW) {
        const int gw = (int)CT_MIN((int64_t)BR_GV * VW, ws->W - j), nv = (gw + VW - 1) / VW, tl = gw - (nv - 1) * VW;
        switch (nv) {
        case 1: br_out_group(bwd, 1, xt, dt, ot, x, dy, mk, out, ws->W, r0, r1, j, tl, ws); break;
        case 2: br_out_group(bwd, 2, xt, dt, ot, x, dy, mk, out, ws->W, r0, r1, j, tl, ws); break;
        case 3: br_out_group(bwd, 3, xt, dt, ot, x, dy, mk, out, ws->W, r0, r1, j, tl, ws); break;
        default: br_out_group(bwd, 4, xt, dt, ot, x, dy, mk, out, ws->W, r0, r1, j, tl, ws); break;
        }
    }
}

/* the element-wise pass over all rows, blocks of BR_RB rows across threads */
NM_INLINE void br_out(int bwd, const ct_tensor *X, const ct_tensor *DY, const uint8_t *mk, const ct_tensor *O,
                      const br_ws *ws, int nt) {
    const int64_t nblk = (ws->N + BR_RB - 1) / BR_RB;
    const ct_dtype xt = X->dtype, dt = DY ? DY->dtype : CT_F32, ot = O->dtype;
    const void *x = X->data, *dy = DY ? DY->data : NULL;
    void *out = O->data;
    const int f32 = xt == CT_F32 && dt == CT_F32 && ot == CT_F32;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t r0 = b * BR_RB, r1 = CT_MIN(ws->N, r0 + BR_RB);
        if (f32 && !mk) br_out_rows(bwd, CT_F32, CT_F32, CT_F32, x, dy, NULL, out, ws, r0, r1);
        else if (f32) br_out_rows(bwd, CT_F32, CT_F32, CT_F32, x, dy, mk, out, ws, r0, r1);
        else br_out_rows(bwd, xt, dt, ot, x, dy, mk, out, ws, r0, r1);
    }
}

/* ---- batchnorm -------------------------------------------------------------------------- */

static void bn_dims(const ct_tensor *x, int64_t *N, int64_t *C, int64_t *S) {
    *N = x->shape[0];
    *C = x->shape[1];
    *S = ct_tensor_numel(x) / (*N * *C);
}

/* Finishes channel c's statistics as the reference does: running stats,
 * mean / invstd into aux. Returns the float mean and invstd used for y. */
static void bn_finish(ct_kargs *k, int64_t c, double mu, double var, double unbiased, float *rmean, float *rvar,
                      float *mean, float *invstd) {
    float mom = k->node->fa[0], eps = k->node->fa[1];
    if (ct_bn_updates_running_stats(k)) { /* not a recompute copy (updated once already) nor kept */
        rmean[c] = (float)((1.0 - mom) * rmean[c] + mom * mu);
        rvar[c] = (float)((1.0 - mom) * rvar[c] + mom * unbiased);
    }
    mean[c] = (float)mu;
    invstd[c] = (float)(1.0 / sqrt(var + eps));
}

/* Channel statistics from s1 = sum(x - mf), s2 = sum((x - mf)^2), M terms:
 * mu = mf + s1/M, var = (s2 - s1^2/M)/M. */
static void bn_moments(double mf, double s1, double s2, int64_t M, double *mu, double *var, double *unb) {
    double ss = s2 - s1 * s1 / (double)M;
    if (ss < 0) ss = 0;
    *mu = mf + s1 / (double)M;
    *var = ss / (double)M;
    *unb = M > 1 ? ss / (double)(M - 1) : *var;
}

/* k's I/O for these kernels: the output and inputs [0, n_act) (x, dy),
 * inputs [n_act, n_par) (gamma, beta: 16-bit in the -pure precisions) FP32
 * or one 16-bit dtype (BF16 or FP16), batchnorm's running statistics
 * (inputs 3, 4) FP32, later inputs only state; a 16-bit activation needs
 * planes / rows of at least VW elements (S), a 16-bit parameter vector at
 * most CT_BF16_TILE (its tile). */
static int nm_io_ok(const ct_kargs *k, int n_act, int n_par, int64_t S) {
    ct_dtype low = CT_F32;
    int any = 0;
    for (int i = -1; i < n_par && i < k->node->n_in; i++) { /* -1: the output */
        const ct_tensor *t = i < 0 ? &k->out : &k->in[i];
        if (t->dtype == CT_F32) continue;
        int stats = k->node->op == CT_OP_BATCHNORM && i >= 3;
        if (stats || !ct_dtype_is_low(t->dtype) || (low != CT_F32 && t->dtype != low)) return 0;
        low = t->dtype;
        if (i < n_act) any = 1;
        else if (ct_tensor_numel(t) > CT_BF16_TILE) return 0;
    }
    return !any || S >= VW;
}

/* The rows path of the batchnorm forward (training: each piece's two-pass
 * statistics, its sums then its centred sums while its rows are in cache,
 * combined across pieces and a channel's columns as Chan et al.'s parallel
 * variance, in double: one pass over memory for the statistics instead of
 * two; eval: the running statistics), then the element-wise pass */
static void bn_rows_forward(ct_kargs *k, const br_ws *ws, int nt) {
    const int64_t C = ws->C, S = ws->S, M = ws->N * S;
    float *rmean = k->in[3].data, *rvar = k->in[4].data, *mean = k->aux, *invstd = mean + C;
    if (k->training) {
        for (int64_t j = 0; j < ws->W; j++) ws->mc[j] = 0;
        br_stats(&k->in[0], ws, nt);
        for (int64_t c = 0; c < C; c++) { /* the channel's S columns (N rows each) as br_stats' pieces */
            double mu = br_chan(ws->t1, c, S) / (double)S, ss = 0;
            for (int64_t i = 0; i < S; i++) {
                double d = ws->t1[c * S + i] - mu;
                ss += ws->t2[c * S + i] + (double)ws->N * d * d;
            }
            double var = ss / (double)M, unb = M > 1 ? ss / (double)(M - 1) : var;
            bn_finish(k, c, mu, var, unb, rmean, rvar, mean, invstd);
        }
    } else {
        for (int64_t c = 0; c < C; c++) bn_finish(k, c, rmean[c], rvar[c], 0, rmean, rvar, mean, invstd);
    }
    for (int64_t c = 0; c < C; c++) {
        br_fill(ws->mc, c, S, mean[c]);
        br_fill(ws->ac, c, S, invstd[c] * ct_sld(&k->in[1], c));
        br_fill(ws->bc, c, S, ct_sld(&k->in[2], c));
    }
    br_out(0, &k->in[0], NULL, NULL, &k->out, ws, nt);
}

ct_status CT_FN(batchnorm)(ct_kargs *k) {
    if (k->training && ct_context_batch_sum(k->ctx, NULL)) return CT_E_UNSUPPORTED; /* sync_batchnorm: the reference */
    int64_t N, C, S;
    bn_dims(&k->in[0], &N, &C, &S);
    br_ws ws;
    const int rows = S < VW && br_ws_get(k, N, C, S, &ws); /* 16-bit I/O too: vector loads of any width */
    if (!nm_io_ok(k, 1, 5, rows ? VW : S)) return CT_E_UNSUPPORTED;
    const ct_tensor *X = &k->in[0], *Y = &k->out;
    const float *x = k->in[0].data; /* gamma, beta: ct_sld (FP32, BF16 or FP16) */
    float *rmean = k->in[3].data, *rvar = k->in[4].data, *y = k->out.data;
    float *mean = k->aux, *invstd = mean + C;
    int64_t M = N * S;
    int nt = nm_threads(k, N * C * S);
    const ct_dtype hx = X->dtype;
    if (S >= VW) {
        /* each channel is N contiguous planes of S elements */
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t c = 0; c < C; c++) {
            if (k->training) {
                double s = 0, dummy = 0, s1 = 0, s2 = 0;
                for (int64_t n = 0; n < N; n++)
                    nm_accum_h(NM_SUM, nm_at(X, (n * C + c) * S), hx, NULL, CT_F32, NULL, S, 0, 0, &s, &dummy);
                float mf = (float)(s / (double)M);
                for (int64_t n = 0; n < N; n++)
                    nm_accum_h(NM_CTR, nm_at(X, (n * C + c) * S), hx, NULL, CT_F32, NULL, S, mf, 0, &s1, &s2);
                double mu, var, unb;
                bn_moments(mf, s1, s2, M, &mu, &var, &unb);
                bn_finish(k, c, mu, var, unb, rmean, rvar, mean, invstd);
            } else {
                bn_finish(k, c, rmean[c], rvar[c], 0, rmean, rvar, mean, invstd);
            }
            vf vm = vset1(mean[c]), va = vset1(invstd[c] * ct_sld(&k->in[1], c)), vb = vset1(ct_sld(&k->in[2], c));
            for (int64_t n = 0; n < N; n++) {
                int64_t o = (n * C + c) * S, i = 0;
                for (; i + VW <= S; i += VW) ct_vst(Y, o + i, vfma(vsub(ct_vld(X, o + i, VW), vm), va, vb), VW);
                if (i < S) {
                    int t = (int)(S - i);
                    ct_vst(Y, o + i, vfma(vsub(ct_vld(X, o + i, t), vm), va, vb), t);
                }
            }
        }
        return CT_OK;
    }
    if (rows) {
        bn_rows_forward(k, &ws, nt);
        return CT_OK;
    }
    /* small spatial size (e.g. (N, C) inputs) without the workspace: vectorize across columns c*S+s */
    int64_t CS = C * S, cpb = nm_chans_per_block(S), nblk = (C + cpb - 1) / cpb;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * cpb, c1 = CT_MIN(C, c0 + cpb), j0 = c0 * S;
        int w = (int)((c1 - c0) * S);
        float mcol[NM_COLS], acol[NM_COLS], bcol[NM_COLS];
        double o1[NM_COLS], o2[NM_COLS];
        if (k->training) {
            for (int j = 0; j < w; j++) mcol[j] = 0;
            nm_colaccum(NM_SUM, x, NULL, N, CS, j0, w, mcol, o1, o2);
            for (int64_t c = c0; c < c1; c++) {
                double s = 0;
                for (int64_t i = 0; i < S; i++) s += o1[(c - c0) * S + i];
                for (int64_t i = 0; i < S; i++) mcol[(c - c0) * S + i] = (float)(s / (double)M);
            }
            nm_colaccum(NM_CTR, x, NULL, N, CS, j0, w, mcol, o1, o2);
            for (int64_t c = c0; c < c1; c++) {
                double s1 = 0, s2 = 0, mu, var, unb;
                for (int64_t i = 0; i < S; i++) {
                    s1 += o1[(c - c0) * S + i];
                    s2 += o2[(c - c0) * S + i];
                }
                bn_moments(mcol[(c - c0) * S], s1, s2, M, &mu, &var, &unb);
                bn_finish(k, c, mu, var, unb, rmean, rvar, mean, invstd);
            }
        } else {
            for (int64_t c = c0; c < c1; c++) bn_finish(k, c, rmean[c], rvar[c], 0, rmean, rvar, mean, invstd);
        }
        for (int64_t c = c0; c < c1; c++)
            for (int64_t i = 0; i < S; i++) {
                mcol[(c - c0) * S + i] = mean[c];
                acol[(c - c0) * S + i] = invstd[c] * ct_sld(&k->in[1], c);
                bcol[(c - c0) * S + i] = ct_sld(&k->in[2], c);
            }
        for (int64_t n = 0; n < N; n++)
            for (int j = 0; j < w; j += VW) {
                int nl = CT_MIN(VW, w - j);
                int64_t off = n * CS + j0 + j;
                vf v = vfma(vsub(nm_ldn(x + off, nl), nm_ldn(mcol + j, nl)), nm_ldn(acol + j, nl),
                            nm_ldn(bcol + j, nl));
                nm_stn(y + off, v, nl);
            }
    }
    return CT_OK;
}

/* Per-channel sums for the backward kernels: sdy = sum dy, sdxc = sum dy*(x - mean). */
static void bn_bwd_sums_plane(const ct_tensor *DY, const ct_tensor *X, int64_t N, int64_t C, int64_t S, int64_t c,
                              float m, int mode, double *sdy, double *sdxc) {
    ct_dtype hx = X->dtype, hd = DY->dtype;
    *sdy = *sdxc = 0;
    for (int64_t n = 0; n < N; n++) {
        const void *xp = nm_at(X, (n * C + c) * S), *dp = nm_at(DY, (n * C + c) * S);
        if (mode == NM_BNB) nm_accum_h(NM_BNB, xp, hx, dp, hd, NULL, S, m, 0, sdy, sdxc);
        else nm_accum_h(NM_DOT, xp, hx, dp, hd, NULL, S, m, 0, sdxc, sdy);
    }
}

/* in: dy, x, gamma, fwd -> dx (training-mode statistics). Fusion
 * batchnorm_bwd+colsum (ia[7]: CT_COLSUM_DGAMMA / CT_COLSUM_DY; 2-D x): the
 * rows path's partials of sum(dy * (x - mean)) and sum(dy) into the aux as
 * COLSUM sets; ia[5] (fwd a batchnorm+relu): dy through its mask bits. Both
 * on the rows path only (else the reference). */
ct_status CT_FN(batchnorm_bwd_data)(ct_kargs *k) {
    if (ct_context_batch_sum(k->ctx, NULL)) return CT_E_UNSUPPORTED; /* sync_batchnorm: the reference kernel */
    int64_t N, C, S;
    bn_dims(&k->in[1], &N, &C, &S);
    br_ws ws;
    const int rows = S < VW && br_ws_get(k, N, C, S, &ws);
    const int64_t cs = k->node->ia[7];
    const uint8_t *mk = k->node->ia[5] ? ct_bn_relu_bits(k->in_aux[3], C) : NULL;
    if (!nm_io_ok(k, 2, 3, rows ? VW : S) || ((cs || k->node->ia[5]) && (!rows || S != 1))) return CT_E_UNSUPPORTED;
    const ct_tensor *DY = &k->in[0], *X = &k->in[1], *DX = &k->out;
    const float *dy = k->in[0].data, *x = k->in[1].data; /* gamma: ct_sld (FP32, BF16 or FP16) */
    const float *mean = k->in_aux[3], *invstd = mean + C;
    float *dx = k->out.data;
    double M = (double)(N * S);
    int nt = nm_threads(k, N * C * S);
    /* dx = A * (dy - sdy/M - (x - mean) * invstd^2 * sdxc/M), A = gamma*invstd,
     * sdxc = sum dy*(x - mean): the differences are taken before scaling */
    if (S >= VW) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t c = 0; c < C; c++) {
            double sdy, sdxc;
            bn_bwd_sums_plane(DY, X, N, C, S, c, mean[c], NM_BNB, &sdy, &sdxc);
            double is = invstd[c];
            vf vm = vset1(mean[c]), va = vset1((float)((double)ct_sld(&k->in[2], c) * is)), vb = vset1((float)(sdy / M)),
               vc = vset1((float)(-is * is * sdxc / M));
            for (int64_t n = 0; n < N; n++) {
                int64_t o = (n * C + c) * S, i = 0;
                for (; i + VW <= S; i += VW)
                    ct_vst(DX, o + i, vmul(vfma(vsub(ct_vld(X, o + i, VW), vm), vc, vsub(ct_vld(DY, o + i, VW), vb)), va),
                           VW);
                if (i < S) {
                    int t = (int)(S - i);
                    vf v = vfma(vsub(ct_vld(X, o + i, t), vm), vc, vsub(ct_vld(DY, o + i, t), vb));
                    ct_vst(DX, o + i, vmul(v, va), t);
                }
            }
        }
        return CT_OK;
    }
    if (rows) { /* the rows path: sdy, sdxc from the pieces' partials, then dx over row blocks */
        for (int64_t c = 0; c < C; c++) br_fill(ws.mc, c, S, mean[c]);
        br_sums(NM_BNB, X, DY, mk, &ws, nt, 1);
        for (int64_t p = 0; cs && p < ws.P; p++) { /* the COLSUM sets (S = 1: a column is a channel) */
            if (cs & CT_COLSUM_DGAMMA)
                memcpy(cs_set(k->aux, cs, CT_COLSUM_DGAMMA, ws.P, p, C), ws.p2 + p * ws.Wp, (size_t)C * sizeof(double));
            if (cs & CT_COLSUM_DY)
                memcpy(cs_set(k->aux, cs, CT_COLSUM_DY, ws.P, p, C), ws.p1 + p * ws.Wp, (size_t)C * sizeof(double));
        }
        for (int64_t c = 0; c < C; c++) {
            double sdy = br_chan(ws.t1, c, S), sdxc = br_chan(ws.t2, c, S), is = invstd[c];
            br_fill(ws.ac, c, S, (float)((double)ct_sld(&k->in[2], c) * is));
            br_fill(ws.bc, c, S, (float)(sdy / M));
            br_fill(ws.cc, c, S, (float)(-is * is * sdxc / M));
        }
        br_out(1, X, DY, mk, DX, &ws, nt);
        return CT_OK;
    }
    int64_t CS = C * S, cpb = nm_chans_per_block(S), nblk = (C + cpb - 1) / cpb;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * cpb, c1 = CT_MIN(C, c0 + cpb), j0 = c0 * S;
        int w = (int)((c1 - c0) * S);
        float mcol[NM_COLS], acol[NM_COLS], bcol[NM_COLS], ccol[NM_COLS];
        double o1[NM_COLS], o2[NM_COLS];
        for (int64_t c = c0; c < c1; c++)
            for (int64_t i = 0; i < S; i++) mcol[(c - c0) * S + i] = mean[c];
        nm_colaccum(NM_BNB, x, dy, N, CS, j0, w, mcol, o1, o2);
        for (int64_t c = c0; c < c1; c++) {
            double sdy = 0, sdxc = 0;
            for (int64_t i = 0; i < S; i++) {
                sdy += o1[(c - c0) * S + i];
                sdxc += o2[(c - c0) * S + i];
            }
            double is = invstd[c];
            for (int64_t i = 0; i < S; i++) {
                acol[(c - c0) * S + i] = (float)((double)ct_sld(&k->in[2], c) * is);
                bcol[(c - c0) * S + i] = (float)(sdy / M);
                ccol[(c - c0) * S + i] = (float)(-is * is * sdxc / M);
            }
        }
        for (int64_t n = 0; n < N; n++)
            for (int j = 0; j < w; j += VW) {
                int nl = CT_MIN(VW, w - j);
                int64_t off = n * CS + j0 + j;
                vf v = vfma(vsub(nm_ldn(x + off, nl), nm_ldn(mcol + j, nl)), nm_ldn(ccol + j, nl),
                            vsub(nm_ldn(dy + off, nl), nm_ldn(bcol + j, nl)));
                nm_stn(dx + off, vmul(v, nm_ldn(acol + j, nl)), nl);
            }
    }
    return CT_OK;
}

/* in: dy, x, fwd -> dgamma (C) = sum dy * xhat */
ct_status CT_FN(batchnorm_bwd_gamma)(ct_kargs *k) {
    int64_t N, C, S;
    bn_dims(&k->in[1], &N, &C, &S);
    br_ws ws;
    const int rows = S < VW && br_ws_get(k, N, C, S, &ws);
    if (k->out.dtype != CT_F32 || !nm_io_ok(k, 2, 2, rows ? VW : S)) return CT_E_UNSUPPORTED;
    const float *dy = k->in[0].data, *x = k->in[1].data;
    const float *mean = k->in_aux[2], *invstd = mean + C;
    float *dg = k->out.data;
    int nt = nm_threads(k, N * C * S);
    if (S >= VW) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t c = 0; c < C; c++) {
            double sdy, sdxc;
            bn_bwd_sums_plane(&k->in[0], &k->in[1], N, C, S, c, mean[c], NM_DOT, &sdy, &sdxc);
            dg[c] = (float)(sdxc * invstd[c]);
        }
        return CT_OK;
    }
    if (rows) { /* the rows path: sum dy * (x - mean) from the pieces' partials */
        for (int64_t c = 0; c < C; c++) br_fill(ws.mc, c, S, mean[c]);
        br_sums(NM_DOT, &k->in[1], &k->in[0], NULL, &ws, nt, 1);
        for (int64_t c = 0; c < C; c++) dg[c] = (float)(br_chan(ws.t1, c, S) * invstd[c]);
        return CT_OK;
    }
    int64_t CS = C * S, cpb = nm_chans_per_block(S), nblk = (C + cpb - 1) / cpb;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * cpb, c1 = CT_MIN(C, c0 + cpb), j0 = c0 * S;
        int w = (int)((c1 - c0) * S);
        float mcol[NM_COLS];
        double o1[NM_COLS], o2[NM_COLS];
        for (int64_t c = c0; c < c1; c++)
            for (int64_t i = 0; i < S; i++) mcol[(c - c0) * S + i] = mean[c];
        nm_colaccum(NM_BNB, x, dy, N, CS, j0, w, mcol, o1, o2);
        for (int64_t c = c0; c < c1; c++) {
            double s = 0;
            for (int64_t i = 0; i < S; i++) s += o2[(c - c0) * S + i];
            dg[c] = (float)(s * invstd[c]);
        }
    }
    return CT_OK;
}

/* ---- layernorm ---------------------------------------------------------------------------- */

/* One row of layernorm: x's row at element o (D elements) -> y's row, its
 * mean and invstd (the layernorm and add+layernorm kernels). */
NM_INLINE void ln_fwd_row(const ct_tensor *X, const ct_tensor *Y, int64_t o, int64_t D, const float *gamma,
                          const float *beta, double eps, float *mean, float *invstd) {
    const void *xr = nm_at(X, o);
    double s = 0, dummy = 0, s1 = 0, s2 = 0;
    nm_accum_h(NM_SUM, xr, X->dtype, NULL, CT_F32, NULL, D, 0, 0, &s, &dummy);
    float mf = (float)(s / (double)D);
    nm_accum_h(NM_CTR, xr, X->dtype, NULL, CT_F32, NULL, D, mf, 0, &s1, &s2);
    double ss = s2 - s1 * s1 / (double)D;
    if (ss < 0) ss = 0;
    double mu = mf + s1 / (double)D, is = 1.0 / sqrt(ss / (double)D + eps);
    *mean = (float)mu;
    *invstd = (float)is;
    vf vm = vset1(*mean), vis = vset1(*invstd);
    int64_t i = 0;
    for (; i + VW <= D; i += VW)
        ct_vst(Y, o + i, vfma(vmul(vsub(ct_vld(X, o + i, VW), vm), vis), vload(gamma + i), beta ? vload(beta + i) : vzero()),
               VW);
    if (i < D) {
        int t = (int)(D - i);
        vf v = vfma(vmul(vsub(ct_vld(X, o + i, t), vm), vis), vtail_load(gamma + i, t), beta ? vtail_load(beta + i, t) : vzero());
        ct_vst(Y, o + i, v, t);
    }
}

/* The layernorm forward over R rows of X with gamma = in[gi] (beta = in[gi + 1] if the node has it);
 * with A (add+layernorm) each row X = A + B is stored first and normalized from L1. */
static void ln_forward(ct_kargs *k, const ct_tensor *A, const ct_tensor *B, const ct_tensor *X, int gi, int64_t R,
                       int64_t D) {
    const ct_tensor *Y = &k->out;
    float *mean = k->aux, *invstd = mean + R;
    double eps = k->node->fa[0];
    int nt = nm_threads(k, R * D);
#pragma omp parallel num_threads(nt)
    {
        /* gamma, beta: FP32, or 16-bit (-pure precisions) converted once per thread */
        float gb[CT_BF16_TILE], bb[CT_BF16_TILE];
        const float *gamma = ct_tile_in(&k->in[gi], 0, D, gb);
        const float *beta = k->node->n_in > gi + 1 ? ct_tile_in(&k->in[gi + 1], 0, D, bb) : NULL;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < R; r++) {
            int64_t o = r * D;
            if (A) {
                int64_t i = 0;
                for (; i + VW <= D; i += VW) ct_vst(X, o + i, vadd(ct_vld(A, o + i, VW), ct_vld(B, o + i, VW)), VW);
                if (i < D) {
                    int t = (int)(D - i);
                    ct_vst(X, o + i, vadd(ct_vld(A, o + i, t), ct_vld(B, o + i, t)), t);
                }
            }
            ln_fwd_row(X, Y, o, D, gamma, beta, eps, &mean[r], &invstd[r]);
        }
    }
}

ct_status CT_FN(layernorm)(ct_kargs *k) {
    const ct_tensor *X = &k->in[0];
    int64_t D = X->shape[X->ndim - 1], R = ct_tensor_numel(X) / D;
    if (!nm_io_ok(k, 1, 3, D)) return CT_E_UNSUPPORTED;
    ln_forward(k, NULL, NULL, X, 1, R, D);
    return CT_OK;
}

/* add+layernorm (fusion): in a, b, s, gamma[, beta]. Per row, s = a + b is
 * stored (rounded to s's dtype: the unfused add's output) and normalized from
 * there while it is in L1, by the layernorm's own row code: the sum and the
 * layernorm of the unfused pair, bit for bit, with one pass over memory. A
 * 16-bit sum on FP32 copies (s FP32, its dtype ia[0] 16-bit) declines: the
 * reference rounds it. */
ct_status CT_FN(add_layernorm)(ct_kargs *k) {
    const ct_tensor *A = &k->in[0], *B = &k->in[1], *S = &k->in[2], *Y = &k->out;
    int64_t D = Y->shape[Y->ndim - 1], R = ct_tensor_numel(Y) / D;
    if (!nm_io_ok(k, 3, 5, D) || (S->dtype == CT_F32 && ct_dtype_is_low((ct_dtype)k->node->ia[0])))
        return CT_E_UNSUPPORTED;
    if (ct_tensor_numel(A) != R * D || ct_tensor_numel(B) != R * D || ct_tensor_numel(S) != R * D)
        return CT_E_UNSUPPORTED;
    ln_forward(k, A, B, S, 3, R, D);
    return CT_OK;
}

/* layernorm_bwd+add (fusion): the row of dx just stored (in L1) plus r's row,
 * reading dx back as stored (rounded to a 16-bit output's dtype), so the sum
 * is the unfused binary add's bit for bit. On FP32 copies of a 16-bit node
 * (k->out FP32, the node's dtype 16-bit) dx is rounded to that dtype first,
 * as the executor rounds the unfused output. O2 (layernorm_bwd+cast, FP32 dx
 * only): the sum's 16-bit cast stored there too, as the cast would round it. */
static void ln_add_row(const ct_kargs *k, const ct_tensor *DX, const ct_tensor *RES, const ct_tensor *O2, int64_t o,
                       int64_t D) {
    ct_dtype nd = k->node->dtype;
    if (DX->dtype == CT_F32 && ct_dtype_is_low(nd)) {
        float *dx = (float *)DX->data + o;
        const float *r = (const float *)RES->data + o;
        for (int64_t i = 0; i < D; i++) dx[i] = ct_lp1_to_f32(ct_f32_to_lp1(dx[i], nd), nd) + r[i];
        return;
    }
    int64_t i = 0;
    for (; i + VW <= D; i += VW) {
        vf s = vadd(ct_vld(DX, o + i, VW), ct_vld(RES, o + i, VW));
        ct_vst(DX, o + i, s, VW);
        if (O2) ct_vst(O2, o + i, s, VW);
    }
    if (i < D) {
        int t = (int)(D - i);
        vf s = vadd(ct_vld(DX, o + i, t), ct_vld(RES, o + i, t));
        ct_vst(DX, o + i, s, t);
        if (O2) ct_vst(O2, o + i, s, t);
    }
}

/* in: dy, x, gamma, fwd -> dx = invstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy*gamma;
 * xhat * mean(g*xhat) is computed as (x - mean) * (invstd * mean(g*xhat)) */
NM_INLINE void ln_bwd_row(const ct_kargs *k, const ct_tensor *X, const ct_tensor *DY, const ct_tensor *DX,
                          const ct_tensor *RES, const ct_tensor *O2, const float *gamma, const float *mean,
                          const float *invstd, int64_t r, int64_t D) {
    double sg = 0, sgx = 0, is = invstd[r];
    nm_accum_h(NM_LNB, nm_at(X, r * D), X->dtype, nm_at(DY, r * D), DY->dtype, gamma, D, mean[r], invstd[r], &sg, &sgx);
    vf vm = vset1(mean[r]), vis = vset1(invstd[r]), vk = vset1((float)(sg / (double)D)),
       vc = vset1((float)(-is * sgx / (double)D));
    int64_t i = 0, o = r * D;
    for (; i + VW <= D; i += VW) {
        vf g = vmul(ct_vld(DY, o + i, VW), vload(gamma + i));
        ct_vst(DX, o + i, vmul(vfma(vsub(ct_vld(X, o + i, VW), vm), vc, vsub(g, vk)), vis), VW);
    }
    if (i < D) {
        int t = (int)(D - i);
        vf g = vmul(ct_vld(DY, o + i, t), vtail_load(gamma + i, t));
        ct_vst(DX, o + i, vmul(vfma(vsub(ct_vld(X, o + i, t), vm), vc, vsub(g, vk)), vis), t);
    }
    if (RES) ln_add_row(k, DX, RES, O2, o, D);
}

/* layernorm_bwd+colsum: ln_bwd_row with the column sums of the sets in mask
 * (a constant where inlined) taken in the same loop, from the vectors it
 * loads and stores: fg[j] = fma(dy[j], (x[j] - m) * is, fg[j])
 * (layernorm_bwd_gamma's terms), fb[j] += dy[j], fo[j] += the output as
 * stored (read back, then rounded to rdt: the dtype the bias gradient's sum
 * reads). O2 (layernorm_bwd+cast): dx + r's 16-bit cast stored there too; when
 * rdt is its dtype, fo adds that stored value (one rounding for both). */
NM_INLINE void ln_bwd_row_cs(int mask, ct_dtype rdt, const ct_kargs *k, const ct_tensor *X, const ct_tensor *DY,
                             const ct_tensor *DX, const ct_tensor *RES, const ct_tensor *O2, const float *gamma,
                             const float *mean, const float *invstd, int64_t r, int64_t D, float *fg, float *fb,
                             float *fo) {
    double sg = 0, sgx = 0, is = invstd[r];
    nm_accum_h(NM_LNB, nm_at(X, r * D), X->dtype, nm_at(DY, r * D), DY->dtype, gamma, D, mean[r], invstd[r], &sg, &sgx);
    vf vm = vset1(mean[r]), vis = vset1(invstd[r]), vk = vset1((float)(sg / (double)D)),
       vc = vset1((float)(-is * sgx / (double)D));
    /* the output's sum here when the stored dx is final (no residual, or no FP32 copy of a 16-bit node) */
    const int res_scalar = RES && DX->dtype == CT_F32 && ct_dtype_is_low(k->node->dtype);
    const int out_here = (mask & CT_COLSUM_OUT) && !res_scalar, res_here = RES && !res_scalar;
    const int64_t o = r * D;
    const void *xd = X->data, *dyd = DY->data, *rd = RES ? RES->data : NULL;
    void *dxd = DX->data, *o2d = O2 ? O2->data : NULL; /* O2: FP32 dx only (the kernel checks) */
    const ct_dtype xt = X->dtype, dyt = DY->dtype, dxt = DX->dtype, rt = RES ? RES->dtype : CT_F32;
    const ct_dtype o2t = O2 ? O2->dtype : CT_F32;
    const int cast_out = res_here && O2 && rdt == o2t; /* the bias sum reads what the cast stores */
    for (int64_t i = 0; i < D; i += VW) {
        const int t = (int)CT_MIN((int64_t)VW, D - i);
        vf dy = cs_ld(dyd, dyt, o + i, t), xm = vsub(cs_ld(xd, xt, o + i, t), vm);
        vf g = vmul(dy, t == VW ? vload(gamma + i) : vtail_load(gamma + i, t));
        cs_st(dxd, dxt, o + i, vmul(vfma(xm, vc, vsub(g, vk)), vis), t);
        if (mask & CT_COLSUM_DGAMMA) {
            vf v = vfma(dy, vmul(xm, vis), t == VW ? vload(fg + i) : vtail_load(fg + i, t));
            if (t == VW) vstore(fg + i, v);
            else vtail_store(fg + i, v, t);
        }
        if (mask & CT_COLSUM_DY) {
            vf v = vadd(t == VW ? vload(fb + i) : vtail_load(fb + i, t), dy);
            if (t == VW) vstore(fb + i, v);
            else vtail_store(fb + i, v, t);
        }
        vf cast = vzero(); /* layernorm_bwd+cast: dx + r as the cast stored it */
        if (res_here) {
            vf s = vadd(cs_ld(dxd, dxt, o + i, t), cs_ld(rd, rt, o + i, t));
            cs_st(dxd, dxt, o + i, s, t);
            if (o2d) cast = cs_st_v(o2d, o2t, o + i, s, t);
        }
        if (out_here) { /* the stored value, read back (rounded to rdt: the cast's value when it is the cast's dtype) */
            vf sv = cast_out ? cast : cs_round(cs_ld(dxd, dxt, o + i, t), rdt);
            vf v = vadd(t == VW ? vload(fo + i) : vtail_load(fo + i, t), sv);
            if (t == VW) vstore(fo + i, v);
            else vtail_store(fo + i, v, t);
        }
    }
    if (res_scalar) { /* FP32 copies of a 16-bit node: ln_add_row's rounding, then the output's sum */
        ln_add_row(k, DX, RES, NULL, o, D);
        if (mask & CT_COLSUM_OUT) cs_add_row(fo, DX, o, D, rdt);
    }
}

/* ln_bwd_row_cs with the mask and the rounding as constants */
static void ln_bwd_row_cs_any(int mask, ct_dtype rdt, const ct_kargs *k, const ct_tensor *X, const ct_tensor *DY,
                              const ct_tensor *DX, const ct_tensor *RES, const ct_tensor *O2, const float *gamma,
                              const float *mean, const float *invstd, int64_t r, int64_t D, float *fg, float *fb,
                              float *fo) {
    if (rdt == DX->dtype) rdt = CT_F32; /* stored so: no rounding */
#define CS_LN(M)                                                                                                     \
    case M:                                                                                                          \
        if (rdt == CT_BF16) ln_bwd_row_cs(M, CT_BF16, k, X, DY, DX, RES, O2, gamma, mean, invstd, r, D, fg, fb, fo);    \
        else if (rdt == CT_F16) ln_bwd_row_cs(M, CT_F16, k, X, DY, DX, RES, O2, gamma, mean, invstd, r, D, fg, fb, fo); \
        else ln_bwd_row_cs(M, CT_F32, k, X, DY, DX, RES, O2, gamma, mean, invstd, r, D, fg, fb, fo);                    \
        break;
    switch (mask) {
        CS_LN(1) CS_LN(2) CS_LN(3) CS_LN(4) CS_LN(5) CS_LN(6) CS_LN(7)
    default: break;
    }
#undef CS_LN
}

ct_status CT_FN(layernorm_bwd_data)(ct_kargs *k) {
    const ct_tensor *X = &k->in[1], *DY = &k->in[0], *DX = &k->out;
    int64_t D = X->shape[X->ndim - 1], R = ct_tensor_numel(X) / D;
    if (!nm_io_ok(k, 2, 3, D)) return CT_E_UNSUPPORTED;
    const ct_tensor *RES = k->node->n_in > 4 ? &k->in[4] : NULL; /* layernorm_bwd+add: dx + r */
    if (RES && RES->dtype != DX->dtype) return CT_E_UNSUPPORTED;
    /* layernorm_bwd+cast: dx + r's 16-bit cast too, from an FP32 node's FP32 sum (else the reference) */
    const ct_tensor *O2 = k->out2.data ? &k->out2 : NULL;
    if (O2 && (!RES || DX->dtype != CT_F32 || k->node->dtype != CT_F32 || !ct_dtype_is_low(O2->dtype) ||
               ct_tensor_numel(O2) != R * D))
        return CT_E_UNSUPPORTED;
    const int64_t cs = k->node->ia[7]; /* layernorm_bwd+colsum: the column sums too */
    if (cs && (!k->aux || D > CT_COLSUM_MAX_D)) return CT_E_UNSUPPORTED;
    const ct_dtype rdt = (ct_dtype)k->node->ia[6];
    const float *mean = k->in_aux[3], *invstd = mean + R;
    int nt = nm_threads(k, R * D);
    const int64_t P = cs ? ct_colsum_pieces(R, D) : 0;
#pragma omp parallel num_threads(nt)
    {
        float gb[CT_BF16_TILE];
        const float *gamma = ct_tile_in(&k->in[2], 0, D, gb); /* FP32, or 16-bit (-pure precisions): once per thread */
        if (!cs) {
#pragma omp for schedule(static)
            for (int64_t r = 0; r < R; r++) ln_bwd_row(k, X, DY, DX, RES, O2, gamma, mean, invstd, r, D);
        } else {
            /* the three run sums back to back (not 16 KiB apart: loads and stores 4 KiB apart alias) */
            float fbuf[3 * CT_COLSUM_MAX_D + 64];
            float *fg = fbuf, *fb = fg + ((D + 15) & ~15) + 16, *fo = fb + ((D + 15) & ~15) + 16;
#pragma omp for schedule(static)
            for (int64_t p = 0; p < P; p++) {
                int64_t r0 = R * p / P, r1 = R * (p + 1) / P;
                double *ag = cs & CT_COLSUM_DGAMMA ? cs_set(k->aux, cs, CT_COLSUM_DGAMMA, P, p, D) : NULL;
                double *ab = cs & CT_COLSUM_DY ? cs_set(k->aux, cs, CT_COLSUM_DY, P, p, D) : NULL;
                double *ao = cs & CT_COLSUM_OUT ? cs_set(k->aux, cs, CT_COLSUM_OUT, P, p, D) : NULL;
                for (int64_t j = 0; j < D; j++) {
                    if (ag) ag[j] = 0;
                    if (ab) ab[j] = 0;
                    if (ao) ao[j] = 0;
                }
                for (int64_t r = r0; r < r1; r++) {
                    int64_t q = r - r0;
                    if (ag && q % NM_ROWS == 0) memset(fg, 0, (size_t)D * sizeof(float));
                    if (q % CS_RB == 0) {
                        if (ab) memset(fb, 0, (size_t)D * sizeof(float));
                        if (ao) memset(fo, 0, (size_t)D * sizeof(float));
                    }
                    ln_bwd_row_cs_any((int)cs, rdt, k, X, DY, DX, RES, O2, gamma, mean, invstd, r, D, fg, fb, fo);
                    if (ag && (q % NM_ROWS == NM_ROWS - 1 || r == r1 - 1)) cs_flush(ag, fg, D);
                    if (q % CS_RB == CS_RB - 1 || r == r1 - 1) {
                        if (ab) cs_flush(ab, fb, D);
                        if (ao) cs_flush(ao, fo, D);
                    }
                }
            }
        }
    }
    return CT_OK;
}

/* in: dy, x, fwd -> dgamma (D) = sum over rows of dy * xhat.
 * Work items are (column block of LN_BW columns) x (row piece): the rows
 * split into ct_colsum_pieces(R, D) pieces (kernels.h), each summed in float
 * runs of NM_ROWS rows flushed into doubles, the pieces' partials then added
 * in order; the split depends only on R and D, so the result does not
 * depend on the thread count, and layernorm_bwd_data's fused column sums
 * (layernorm_bwd+colsum) reproduce it bit for bit. */
#define LN_BW 64
#define LN_PART_CAP 8192 /* doubles of partial sums on the stack (more: the workspace, ct_ws_colsum) */

ct_status CT_FN(layernorm_bwd_gamma)(ct_kargs *k) {
    const ct_tensor *X = &k->in[1], *DY = &k->in[0];
    int64_t D = X->shape[X->ndim - 1], R = ct_tensor_numel(X) / D;
    if (k->out.dtype != CT_F32 || !nm_io_ok(k, 2, 2, VW)) return CT_E_UNSUPPORTED; /* 16-bit: vector loads */
    const float *mean = k->in_aux[2], *invstd = mean + R;
    float *dg = k->out.data;
    int nt = nm_threads(k, R * D);
    int64_t nblk = (D + LN_BW - 1) / LN_BW, P = ct_colsum_pieces(R, D);
    double stack[LN_PART_CAP], *part = stack;
    if (P > 1 && P * D > LN_PART_CAP) {
        if (!k->ws || k->ws_bytes < (size_t)(P * D) * sizeof(double)) return CT_E_UNSUPPORTED;
        part = k->ws;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < nblk * P; t++) {
        int64_t b = t / P, g = t % P, j0 = b * LN_BW, r0 = R * g / P, r1 = R * (g + 1) / P;
        int w = (int)CT_MIN(LN_BW, D - j0);
        double acc[LN_BW];
        for (int j = 0; j < w; j++) acc[j] = 0;
        for (int64_t n0 = r0; n0 < r1; n0 += NM_ROWS) {
            int64_t n1 = CT_MIN(r1, n0 + NM_ROWS);
            for (int j = 0; j < w; j += VW) {
                int nl = CT_MIN(VW, w - j);
                vf p = vzero();
                for (int64_t r = n0; r < n1; r++) {
                    int64_t off = r * D + j0 + j;
                    vf xh = vmul(vsub(ct_vld(X, off, nl), vset1(mean[r])), vset1(invstd[r]));
                    p = vfma(ct_vld(DY, off, nl), xh, p);
                }
                nm_flush(acc + j, p, nl);
            }
        }
        if (P == 1)
            for (int j = 0; j < w; j++) dg[j0 + j] = (float)acc[j];
        else
            for (int j = 0; j < w; j++) part[g * D + j0 + j] = acc[j];
    }
    if (P > 1)
        for (int64_t j = 0; j < D; j++) {
            double s = 0;
            for (int64_t g = 0; g < P; g++) s += part[g * D + j];
            dg[j] = (float)s;
        }
    return CT_OK;
}
