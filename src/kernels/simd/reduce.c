/* src/kernels/simd/reduce.c - SIMD reductions: sum (sum/mean over an axes
 * mask), broadcast_to (gradient of a reduction) and sum_to (gradient of a
 * broadcast).
 *
 * The input is viewed with size-1 dims dropped and neighbouring dims of the
 * same kind (reduced / kept) merged. Covered patterns:
 *   R, K R, R K R   reduce trailing dims (row sums; (N,C,H,W) over {0,2,3})
 *   K, R K, K R K   reduce leading / middle dims (bias gradient: column sums)
 * Other patterns decline (the reference runs). Sums are accumulated in float
 * vectors over short blocks and flushed to double; the split of the work into
 * pieces depends only on the shape, so results are exactly reproducible for
 * any thread count. broadcast_to covers every pattern that coalesces to at
 * most 3 dims.
 *
 * BF16 / FP16 I/O (simd_lowp.h): sum and sum_to read a BF16 or FP16 input
 * directly (vector loads converting in registers, the same float sums as
 * for FP32) and write an FP32 output (e.g. a bias gradient from a 16-bit dy)
 * or one of the input's 16-bit dtype. */
#include "colsum.h"
#include "simd_lowp.h"

#define RD_INLINE static inline __attribute__((always_inline))
/* x's dtype as `bf`: a constant in each specialized loop */
enum { RD_F32 = 0, RD_BF16, RD_F16 };
/* VW elements at x[i] */
RD_INLINE vf rd_ld(const void *x, int64_t i, int bf) {
    return bf == RD_F16 ? vload_f16((const uint16_t *)x + i)
         : bf == RD_BF16 ? vload_bf16((const uint16_t *)x + i) : vload((const float *)x + i);
}
RD_INLINE vf rd_tail(const void *x, int64_t i, int n, int bf) {
    return bf == RD_F16 ? vtail_load_f16((const uint16_t *)x + i, n)
         : bf == RD_BF16 ? vtail_load_bf16((const uint16_t *)x + i, n) : vtail_load((const float *)x + i, n);
}
RD_INLINE float rd_s(const void *x, int64_t i, int bf) {
    return bf == RD_F16 ? ct_f16_to_f32(((const uint16_t *)x)[i])
         : bf == RD_BF16 ? ct_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

#define RD_PAR 32768   /* elements per parallel piece                        */
#define RD_PART 1024   /* most partial sums (doubles, on the stack) per call */
#define RD_FLUSH 1024  /* elements summed in float before adding to double   */
#define RD_RB 32       /* rows summed in float before adding to double      */
#define RD_CB (4 * VW) /* columns per column block                           */
_Static_assert(RD_RB == CS_RB, "the fused column sums (colsum.h) flush their float runs as sum's column path does");

/* sum of the n contiguous elements at x[o] */
RD_INLINE double seg_sum_t(const void *x, int64_t o, int64_t n, int bf) {
    double acc = 0;
    int64_t i = 0;
    while (i < n) {
        int64_t e = CT_MIN(n, i + RD_FLUSH);
        vf s0 = vzero(), s1 = vzero(), s2 = vzero(), s3 = vzero();
        for (; i + 4 * VW <= e; i += 4 * VW) {
            s0 = vadd(s0, rd_ld(x, o + i, bf));
            s1 = vadd(s1, rd_ld(x, o + i + VW, bf));
            s2 = vadd(s2, rd_ld(x, o + i + 2 * VW, bf));
            s3 = vadd(s3, rd_ld(x, o + i + 3 * VW, bf));
        }
        for (; i + VW <= e; i += VW) s0 = vadd(s0, rd_ld(x, o + i, bf));
        if (i < e) {
            s1 = vadd(s1, rd_tail(x, o + i, (int)(e - i), bf));
            i = e;
        }
        acc += (double)vhsum(vadd(vadd(s0, s1), vadd(s2, s3)));
    }
    return acc;
}
static double seg_sum(const void *x, int64_t o, int64_t n, int bf) {
    return bf == RD_F16 ? seg_sum_t(x, o, n, RD_F16) : bf ? seg_sum_t(x, o, n, RD_BF16) : seg_sum_t(x, o, n, RD_F32);
}

/* acc[j] = sum over rows r0..r1-1 of x[r*ld + c0 + j], j < w <= RD_CB (x's
 * elements from xo on) */
RD_INLINE void col_sum_t(const void *x, int64_t xo, int64_t ld, int64_t r0, int64_t r1, int64_t c0, int w,
                         double *acc, int bf) {
    float tmp[RD_CB];
    int nf = w / VW, tail = w % VW;
    for (int j = 0; j < w; j++) acc[j] = 0;
    for (int64_t r = r0; r < r1; r += RD_RB) {
        int64_t re = CT_MIN(r1, r + RD_RB);
        vf s[4] = {vzero(), vzero(), vzero(), vzero()};
        if (nf == 4) {
            for (int64_t q = r; q < re; q++) {
                int64_t p = xo + q * ld + c0;
                s[0] = vadd(s[0], rd_ld(x, p, bf));
                s[1] = vadd(s[1], rd_ld(x, p + VW, bf));
                s[2] = vadd(s[2], rd_ld(x, p + 2 * VW, bf));
                s[3] = vadd(s[3], rd_ld(x, p + 3 * VW, bf));
            }
        } else {
            for (int64_t q = r; q < re; q++) {
                int64_t p = xo + q * ld + c0;
                for (int v = 0; v < nf; v++) s[v] = vadd(s[v], rd_ld(x, p + v * VW, bf));
                if (tail) s[nf] = vadd(s[nf], rd_tail(x, p + nf * VW, tail, bf));
            }
        }
        for (int v = 0; v < nf; v++) vstore(tmp + v * VW, s[v]);
        if (tail) vtail_store(tmp + nf * VW, s[nf], tail);
        for (int j = 0; j < w; j++) acc[j] += tmp[j];
    }
}
static void col_sum(const void *x, int64_t xo, int64_t ld, int64_t r0, int64_t r1, int64_t c0, int w, double *acc,
                    int bf) {
    if (bf == RD_F16) col_sum_t(x, xo, ld, r0, r1, c0, w, acc, RD_F16);
    else if (bf) col_sum_t(x, xo, ld, r0, r1, c0, w, acc, RD_BF16);
    else col_sum_t(x, xo, ld, r0, r1, c0, w, acc, RD_F32);
}

/* y[i] = v as y's dtype (FP32, BF16 or FP16) */
static inline void rd_put(const ct_tensor *Y, int64_t i, double v) {
    if (ct_dtype_is_low(Y->dtype)) ((uint16_t *)Y->data)[i] = ct_f32_to_lp1((float)v, Y->dtype);
    else ((float *)Y->data)[i] = (float)v;
}

static int clamp_pieces(int64_t work, int64_t outputs) {
    if (work < RD_PAR) return 1;
    int64_t cap = outputs >= RD_PART ? 1 : RD_PART / outputs;
    int64_t p = (work + RD_PAR - 1) / RD_PAR;
    return (int)CT_MAX(1, CT_MIN(p, cap));
}

/* x viewed as (R1, K, R2), R2 > 1: y[c] = mult * sum over (n, j) of x[n, c, j] */
static void reduce_inner(const ct_kargs *k, const void *x, int bf, int64_t R1, int64_t K, int64_t R2, double mult,
                         const ct_tensor *y) {
    int64_t L = R1 * R2, total = L * K;
    int P = clamp_pieces(L, K);
    double part[RD_PART];
    int64_t items = K * P;
    int nt = CT_MAX(1, ct_par_threads(k, total));
    if (nt > items) nt = (int)items;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t c = it / P, p = it % P;
        int64_t s = L * p / P, e = L * (p + 1) / P;
        int64_t n = s / R2, j = s % R2;
        double acc = 0;
        while (s < e) {
            int64_t len = CT_MIN(R2 - j, e - s);
            acc += seg_sum(x, (n * K + c) * R2 + j, len, bf);
            s += len;
            n++;
            j = 0;
        }
        if (P == 1) rd_put(y, c, acc * mult);
        else part[it] = acc;
    }
    if (P > 1)
        for (int64_t c = 0; c < K; c++) {
            double acc = 0;
            for (int p = 0; p < P; p++) acc += part[c * P + p];
            rd_put(y, c, acc * mult);
        }
}

/* x viewed as (K1, R, K2), K2 > 1: y[a, c] = mult * sum over r of x[a, r, c].
 * The rows split into ct_colsum_pieces(R, K1 * K2) pieces (kernels.h: the
 * split the fused column sums reproduce), each summed in float runs of
 * RD_RB rows flushed into doubles; the pieces' partials (the workspace,
 * ct_ws_sum) are added in order. */
static ct_status reduce_outer(const ct_kargs *k, const void *x, int bf, int64_t K1, int64_t R, int64_t K2, double mult,
                              const ct_tensor *y) {
    int64_t ncb = (K2 + RD_CB - 1) / RD_CB, outputs = K1 * K2;
    int64_t P = ct_colsum_pieces(R, outputs);
    double stack[RD_PART], *part = stack;
    if (P > 1 && outputs * P > RD_PART) {
        if (!k->ws || k->ws_bytes < (size_t)(outputs * P) * sizeof(double)) return CT_E_UNSUPPORTED;
        part = k->ws;
    }
    int64_t items = K1 * ncb * P;
    int nt = CT_MAX(1, ct_par_threads(k, K1 * R * K2));
    if (nt > items) nt = (int)items;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t p = it % P, cbi = (it / P) % ncb, a = it / P / ncb;
        int64_t c0 = cbi * RD_CB;
        int w = (int)CT_MIN(RD_CB, K2 - c0);
        double acc[RD_CB];
        col_sum(x, a * R * K2, K2, R * p / P, R * (p + 1) / P, c0, w, acc, bf);
        for (int j = 0; j < w; j++) {
            if (P == 1) rd_put(y, a * K2 + c0 + j, acc[j] * mult);
            else part[(a * K2 + c0 + j) * P + p] = acc[j];
        }
    }
    if (P > 1)
        for (int64_t o = 0; o < outputs; o++) {
            double acc = 0;
            for (int64_t p = 0; p < P; p++) acc += part[o * P + p];
            rd_put(y, o, acc * mult);
        }
    return CT_OK;
}

/* Sums the dims of x (ndim, shape) flagged in `red`; out has the kept dims in
 * order. Declines patterns it does not cover (before writing anything). */
static ct_status reduce_core(const ct_kargs *k, const ct_tensor *X, const int *red, double mult, const ct_tensor *y) {
    const void *x = X->data;
    int ndim = X->ndim, bf = X->dtype == CT_F16 ? RD_F16 : X->dtype == CT_BF16 ? RD_BF16 : RD_F32;
    const int64_t *shape = X->shape;
    int64_t gs[CT_MAX_DIMS];
    int gr[CT_MAX_DIMS], g = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) return CT_E_UNSUPPORTED;
        if (shape[i] == 1) continue;
        if (g > 0 && gr[g - 1] == red[i]) {
            gs[g - 1] *= shape[i];
        } else {
            gs[g] = shape[i];
            gr[g] = red[i];
            g++;
        }
    }
    if (g == 0) {
        rd_put(y, 0, (double)rd_s(x, 0, bf) * mult);
        return CT_OK;
    }
    if (g > 3) return CT_E_UNSUPPORTED; /* e.g. R K R K: the reference does it */
    /* groups alternate between reduced and kept */
    if (gr[g - 1]) { /* R | K R | R K R */
        int64_t R1 = g == 3 ? gs[0] : 1, K = g >= 2 ? gs[g - 2] : 1;
        reduce_inner(k, x, bf, R1, K, gs[g - 1], mult, y);
        return CT_OK;
    }
    if (g == 1) { /* nothing reduced (only size-1 dims) */
        for (int64_t i = 0; i < gs[0]; i++) rd_put(y, i, (double)rd_s(x, i, bf) * mult);
        return CT_OK;
    }
    int64_t K1 = g == 3 ? gs[0] : 1; /* R K | K R K */
    return reduce_outer(k, x, bf, K1, gs[g - 2], gs[g - 1], mult, y);
}

ct_status CT_FN(sum)(ct_kargs *k) {
    const ct_tensor *X = &k->in[0];
    if (ct_lowp_io(k, 1) == CT_F32 && (X->dtype != CT_F32 || k->out.dtype != CT_F32)) return CT_E_UNSUPPORTED;
    uint32_t mask = (uint32_t)k->node->ia[0];
    int red[CT_MAX_DIMS];
    for (int i = 0; i < X->ndim; i++) red[i] = (mask >> i) & 1;
    return reduce_core(k, X, red, (double)k->node->fa[0], &k->out);
}

/* in: x (broadcast shape) -> out (the smaller shape x was broadcast from,
 * aligned to the right as in NumPy) */
ct_status CT_FN(sum_to)(ct_kargs *k) {
    const ct_tensor *X = &k->in[0], *O = &k->out;
    if ((ct_lowp_io(k, 1) == CT_F32 && (X->dtype != CT_F32 || O->dtype != CT_F32)) || O->ndim > X->ndim)
        return CT_E_UNSUPPORTED;
    int red[CT_MAX_DIMS], off = X->ndim - O->ndim;
    for (int i = 0; i < X->ndim; i++) {
        int j = i - off;
        int64_t os = j < 0 ? 1 : O->shape[j];
        if (os != X->shape[i] && os != 1) return CT_E_UNSUPPORTED;
        red[i] = os == 1 && X->shape[i] != 1;
    }
    return reduce_core(k, X, red, 1.0, O);
}

/* ---- broadcast_to ------------------------------------------------------------------------- */

#define BC_CHUNK 16384

typedef struct bc_view {
    int64_t d0, d1, len, s0, s1, sl;
    float s;
    const float *x;
    float *y;
} bc_view;

static void bc_rows(const bc_view *v, int64_t item0, int64_t item1, int64_t cpr) {
    vf vs = vset1(v->s);
    for (int64_t it = item0; it < item1; it++) {
        int64_t r = it / cpr, c = it % cpr;
        int64_t lo = c * BC_CHUNK, hi = CT_MIN(v->len, lo + BC_CHUNK), n = hi - lo, i = 0;
        const float *x = v->x + (r / v->d1) * v->s0 + (r % v->d1) * v->s1 + lo * v->sl;
        float *y = v->y + r * v->len + lo;
        if (v->sl) {
            for (; i + VW <= n; i += VW) vstore(y + i, vmul(vload(x + i), vs));
            if (i < n) vtail_store(y + i, vmul(vtail_load(x + i, (int)(n - i)), vs), (int)(n - i));
        } else {
            float val = x[0] * v->s;
            vf vv = vset1(val);
            for (; i + VW <= n; i += VW) vstore(y + i, vv);
            for (; i < n; i++) y[i] = val;
        }
    }
}

/* in: x (keepdim-shaped) -> out = broadcast(x) * fa[0] */
ct_status CT_FN(broadcast_to)(ct_kargs *k) {
    const ct_tensor *O = &k->out, *X = &k->in[0];
    if (X->dtype != CT_F32 || O->dtype != CT_F32 || X->ndim > O->ndim) return CT_E_UNSUPPORTED;
    int64_t n = ct_tensor_numel(O);
    if (n == 0) return CT_OK;
    int64_t st[CT_MAX_DIMS], d[CT_MAX_DIMS], cs[CT_MAX_DIMS];
    ct_bcast_strides(X, O, st);
    int m = 0;
    for (int i = 0; i < O->ndim; i++) {
        int64_t s = O->shape[i];
        if (s == 1) continue;
        if (m > 0 && cs[m - 1] == st[i] * s) {
            d[m - 1] *= s;
            cs[m - 1] = st[i];
        } else {
            d[m] = s;
            cs[m] = st[i];
            m++;
        }
    }
    if (m > 3) return CT_E_UNSUPPORTED;
    int64_t D[3] = {1, 1, 1}, S[3] = {0, 0, 0};
    for (int i = 0; i < m; i++) {
        D[3 - m + i] = d[i];
        S[3 - m + i] = cs[i];
    }
    if (S[2] > 1) return CT_E_UNSUPPORTED;
    bc_view v = {D[0], D[1], D[2], S[0], S[1], S[2], k->node->fa[0], X->data, O->data};
    int64_t cpr = (v.len + BC_CHUNK - 1) / BC_CHUNK, items = v.d0 * v.d1 * cpr;
    int nt = ct_par_threads(k, n);
    if (nt > items) nt = (int)items;
    if (nt <= 1) {
        bc_rows(&v, 0, items, cpr);
        return CT_OK;
    }
    int64_t per = CT_MAX(1, BC_CHUNK / CT_MIN(v.len, BC_CHUNK)), groups = (items + per - 1) / per;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t g = 0; g < groups; g++) bc_rows(&v, g * per, CT_MIN(items, (g + 1) * per), cpr);
    return CT_OK;
}
