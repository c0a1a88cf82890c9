/* src/kernels/simd/softmax.c - SIMD softmax / log-softmax over the last dim
 * and their gradients; cross-entropy (mean over non-ignored rows, label
 * smoothing as PyTorch) and its gradient.
 *
 * Rows are independent and run in parallel. Row sums are compensated
 * (TwoSum / TwoProduct per lane, lanes added in double), so they are about as
 * accurate as the reference's double sums: log-probabilities near 0 and the
 * differences of the backward ops keep their relative accuracy. The cross-entropy
 * total is summed over a fixed split of the rows, so every result is exactly
 * reproducible for any thread count. Labels are checked in row order before
 * any work, with the reference's error message.
 *
 * BF16 I/O (simd_lowp.h): softmax, log_softmax and their gradients read and
 * write BF16 rows through FP32 tiles converted in registers (the FP32 math
 * on the BF16 values); rows above CT_BF16_TILE decline. The cross-entropy
 * kernels read BF16 / FP16 logits (and the backward writes its gradient in
 * that dtype) the same way, one row at a time through FP32 row buffers in
 * the plan's shared scratch (a vocabulary's rows are far above a tile:
 * gpt2-124m's 50257): autocast casts the logits to FP32 for the loss, and
 * fusion's cast_fold then drops that cast and the gradient's cast back (no
 * FP32 copy of the logits or of their gradient, results bit for bit). */
#include <math.h>
#include <omp.h>

#include "simd_lowp.h"

#define CE_BLOCKS 256 /* fixed row blocks of the cross-entropy total       */

static void rows_of(const ct_tensor *t, int64_t *R, int64_t *C) {
    *C = t->ndim ? t->shape[t->ndim - 1] : 1;
    *R = *C ? ct_tensor_numel(t) / *C : 0;
}

static int row_threads(const ct_kargs *k, int64_t R, int64_t C) {
    int nt = ct_par_threads(k, R * C);
    if (nt > R) nt = (int)R;
    return nt < 1 ? 1 : nt;
}

/* lanes of v at index >= r set to 0 */
static inline vf keep_first(vf v, int r) {
    float t[VW] = {0};
    vtail_store(t, v, r);
    return vload(t);
}

static float row_max(const float *x, int64_t C) {
    int64_t i = 0;
    float m = -INFINITY;
    if (C >= VW) {
        vf a = vload(x), b = a;
        for (i = VW; i + 2 * VW <= C; i += 2 * VW) {
            a = vmax(a, vload(x + i));
            b = vmax(b, vload(x + i + VW));
        }
        for (; i + VW <= C; i += VW) a = vmax(a, vload(x + i));
        m = vhmax(vmax(a, b));
    }
    for (; i < C; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* s + c += v without losing the rounding error of the addition (TwoSum) */
static inline void acc2(vf *s, vf *c, vf v) {
    vf t = vadd(*s, v), z = vsub(t, *s);
    *c = vadd(*c, vadd(vsub(*s, vsub(t, z)), vsub(v, z)));
    *s = t;
}

/* s + c += a * b, product error included (TwoProduct) */
static inline void dot2(vf *s, vf *c, vf a, vf b) {
    vf p = vmul(a, b);
    *c = vadd(*c, vfma(a, b, vneg(p)));
    acc2(s, c, p);
}

static double lanes_sum(vf s0, vf c0, vf s1, vf c1) {
    float a[4][VW];
    vstore(a[0], s0);
    vstore(a[1], c0);
    vstore(a[2], s1);
    vstore(a[3], c1);
    double r = 0; /* an infinite partial sum makes its compensation NaN: drop it then */
    for (int j = 0; j < VW; j++)
        r += ((double)a[0][j] + (isfinite(a[0][j]) ? (double)a[1][j] : 0.0)) +
             ((double)a[2][j] + (isfinite(a[2][j]) ? (double)a[3][j] : 0.0));
    return r;
}

/* e^(x - m) with the rounding error of x - m carried (TwoSum), so terms far
 * below the max keep their relative accuracy; -inf (and NaN) pass through */
static inline vf exp_diff(vf x, vf vm) {
    vf d = vsub(x, vm), bb = vsub(d, x);
    vf err = vsub(vsub(x, vsub(d, bb)), vadd(vm, bb));
    vf e = vexp(d);
    return vselect_gt(d, vset1(-87.3f), vfma(e, err, e), e);
}

/* sum of e^(x - m), compensated; also stores the terms into y when y != NULL */
static double exp_sum(const float *x, float *y, int64_t C, float m) {
    vf vm = vset1(m), s0 = vzero(), c0 = vzero(), s1 = vzero(), c1 = vzero();
    int64_t i = 0;
    for (; i + 2 * VW <= C; i += 2 * VW) {
        vf e0 = exp_diff(vload(x + i), vm), e1 = exp_diff(vload(x + i + VW), vm);
        if (y) {
            vstore(y + i, e0);
            vstore(y + i + VW, e1);
        }
        acc2(&s0, &c0, e0);
        acc2(&s1, &c1, e1);
    }
    for (; i + VW <= C; i += VW) {
        vf e0 = exp_diff(vload(x + i), vm);
        if (y) vstore(y + i, e0);
        acc2(&s0, &c0, e0);
    }
    if (i < C) {
        int r = (int)(C - i);
        vf e0 = keep_first(exp_diff(vtail_load(x + i, r), vm), r);
        if (y) vtail_store(y + i, e0, r);
        acc2(&s1, &c1, e0);
    }
    return lanes_sum(s0, c0, s1, c1);
}

/* sum of a[i] * b[i] (b == NULL: sum of a[i]), compensated: about as accurate
 * as a double accumulation, which matters where the result feeds a
 * difference (dy - sum) */
static double dot_sum(const float *a, const float *b, int64_t C) {
    vf s0 = vzero(), c0 = vzero(), s1 = vzero(), c1 = vzero();
    int64_t i = 0;
    if (b) {
        for (; i + 2 * VW <= C; i += 2 * VW) {
            dot2(&s0, &c0, vload(a + i), vload(b + i));
            dot2(&s1, &c1, vload(a + i + VW), vload(b + i + VW));
        }
        for (; i + VW <= C; i += VW) dot2(&s0, &c0, vload(a + i), vload(b + i));
        if (i < C) dot2(&s1, &c1, vtail_load(a + i, (int)(C - i)), vtail_load(b + i, (int)(C - i)));
    } else {
        for (; i + 2 * VW <= C; i += 2 * VW) {
            acc2(&s0, &c0, vload(a + i));
            acc2(&s1, &c1, vload(a + i + VW));
        }
        for (; i + VW <= C; i += VW) acc2(&s0, &c0, vload(a + i));
        if (i < C) acc2(&s1, &c1, vtail_load(a + i, (int)(C - i)));
    }
    return lanes_sum(s0, c0, s1, c1);
}

/* y = x * s over n elements */
static void scale_row(const float *x, float *y, int64_t n, float s) {
    vf vs = vset1(s);
    int64_t i = 0;
    for (; i + VW <= n; i += VW) vstore(y + i, vmul(vload(x + i), vs));
    if (i < n) vtail_store(y + i, vmul(vtail_load(x + i, (int)(n - i)), vs), (int)(n - i));
}

static void softmax_row(const float *x, float *y, int64_t C) {
    float m = row_max(x, C);
    double s = exp_sum(x, y, C, m);
    scale_row(y, y, C, (float)(1.0 / s));
}

/* y = (x - m) - log(sum e^(x - m)) (x - m is exact for nearby values) */
static void log_softmax_row(const float *x, float *y, int64_t C) {
    float m = row_max(x, C);
    float ls = (float)log(exp_sum(x, NULL, C, m));
    vf vm = vset1(m), vl = vset1(ls);
    int64_t i = 0;
    for (; i + VW <= C; i += VW) vstore(y + i, vsub(vsub(vload(x + i), vm), vl));
    if (i < C) vtail_store(y + i, vsub(vsub(vtail_load(x + i, (int)(C - i)), vm), vl), (int)(C - i));
}

/* FP32 I/O, or some BF16 with rows that fit a tile (n_in inputs) */
static int sm_io_ok(const ct_kargs *k, int n_in, int64_t C) {
    int f32 = k->out.dtype == CT_F32;
    for (int i = 0; i < n_in; i++) f32 &= k->in[i].dtype == CT_F32;
    return f32 || (ct_lowp_io(k, n_in) != CT_F32 && C <= CT_BF16_TILE);
}

static ct_status softmax_common(ct_kargs *k, int logsm) {
    int64_t R, C;
    rows_of(&k->out, &R, &C);
    if (!sm_io_ok(k, 1, C)) return CT_E_UNSUPPORTED;
    int nt = row_threads(k, R, C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t r = 0; r < R; r++) {
        float xb[CT_BF16_TILE], yb[CT_BF16_TILE]; /* BF16 tiles (unused for FP32) */
        const float *x = ct_tile_in(&k->in[0], r * C, C, xb);
        float *y = ct_tile_out(&k->out, r * C, yb);
        if (logsm) log_softmax_row(x, y, C);
        else softmax_row(x, y, C);
        ct_tile_put(&k->out, r * C, C, yb);
    }
    return CT_OK;
}

ct_status CT_FN(softmax)(ct_kargs *k) { return softmax_common(k, 0); }
ct_status CT_FN(log_softmax)(ct_kargs *k) { return softmax_common(k, 1); }

/* in: dy, y -> dx = y * (dy - sum(dy*y)); the sum is applied as hi + lo so
 * dy - sum keeps its accuracy when they nearly cancel */
ct_status CT_FN(softmax_bwd)(ct_kargs *k) {
    int64_t R, C;
    rows_of(&k->out, &R, &C);
    if (!sm_io_ok(k, 2, C)) return CT_E_UNSUPPORTED;
    int nt = row_threads(k, R, C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t r = 0; r < R; r++) {
        float gb[CT_BF16_TILE], pb[CT_BF16_TILE], ob[CT_BF16_TILE]; /* BF16 tiles (unused for FP32) */
        const float *g = ct_tile_in(&k->in[0], r * C, C, gb), *p = ct_tile_in(&k->in[1], r * C, C, pb);
        float *o = ct_tile_out(&k->out, r * C, ob);
        double s = dot_sum(g, p, C);
        float hi = (float)s, lo = (float)(s - hi);
        vf vh = vset1(hi), vlo = vset1(lo);
        int64_t i = 0;
        for (; i + VW <= C; i += VW) vstore(o + i, vmul(vload(p + i), vsub(vsub(vload(g + i), vh), vlo)));
        if (i < C) {
            int t = (int)(C - i);
            vtail_store(o + i, vmul(vtail_load(p + i, t), vsub(vsub(vtail_load(g + i, t), vh), vlo)), t);
        }
        ct_tile_put(&k->out, r * C, C, ob);
    }
    return CT_OK;
}

/* in: dy, y (log-probs) -> dx = dy - exp(y) * sum(dy) */
ct_status CT_FN(log_softmax_bwd)(ct_kargs *k) {
    int64_t R, C;
    rows_of(&k->out, &R, &C);
    if (!sm_io_ok(k, 2, C)) return CT_E_UNSUPPORTED;
    int nt = row_threads(k, R, C);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t r = 0; r < R; r++) {
        float gb[CT_BF16_TILE], pb[CT_BF16_TILE], ob[CT_BF16_TILE]; /* BF16 tiles (unused for FP32) */
        const float *g = ct_tile_in(&k->in[0], r * C, C, gb), *p = ct_tile_in(&k->in[1], r * C, C, pb);
        float *o = ct_tile_out(&k->out, r * C, ob);
        double s = dot_sum(g, NULL, C);
        float hi = (float)s, lo = (float)(s - hi);
        vf nh = vset1(-hi), nl = vset1(-lo);
        int64_t i = 0;
        for (; i + VW <= C; i += VW) {
            vf e = vexp(vload(p + i));
            vstore(o + i, vfma(e, nl, vfma(e, nh, vload(g + i))));
        }
        if (i < C) {
            int t = (int)(C - i);
            vf e = vexp(vtail_load(p + i, t));
            vtail_store(o + i, vfma(e, nl, vfma(e, nh, vtail_load(g + i, t))), t);
        }
        ct_tile_put(&k->out, r * C, C, ob);
    }
    return CT_OK;
}

/* ---- cross-entropy ------------------------------------------------------------------------ */

/* Checks the labels in row order (the reference's first error) and counts
 * the rows that are not ignored. */
static ct_status ce_labels(ct_kargs *k, const int32_t *t, int64_t R, int64_t C, int64_t *count) {
    int64_t n = 0;
    for (int64_t r = 0; r < R; r++) {
        if (t[r] == k->node->ia[0]) continue;
        if (t[r] < 0 || t[r] >= C)
            return ct_set_error(k->ctx, CT_E_INVALID_ARG,
                                "cross_entropy: label %d in row %lld is outside [0, %lld) and is not the "
                                "ignore_index %lld; check the labels or the number of classes",
                                (int)t[r], (long long)r, (long long)C, (long long)k->node->ia[0]);
        n++;
    }
    *count = n;
    return CT_OK;
}

/* logits (..., C) as R = numel / C rows (FP32, BF16 or FP16), labels (...) R ids */
static int ce_shapes_ok(const ct_tensor *logits, const ct_tensor *labels) {
    return ct_dtype_is_float(logits->dtype) && logits->ndim >= 1 && labels->dtype == CT_I32 &&
           logits->shape[logits->ndim - 1] > 0 &&
           ct_tensor_numel(labels) * logits->shape[logits->ndim - 1] == ct_tensor_numel(logits);
}

/* FP32 row buffers of a cross-entropy kernel with 16-bit I/O: `per` rows of C floats for each of nt
 * threads, in the plan's shared scratch (*out = NULL when every tensor is FP32), thread t's at
 * *out + t * *stride floats: whole 128-byte blocks apart, so that two threads never write one cache line
 * (with gpt-char-small's 65 classes they shared one, and the loss and its gradient ran 1.5-2x slower).
 * Declines (before any work) when there is no scratch or the 16-bit tensors do not share one dtype. */
static ct_status ce_rows(ct_kargs *k, ct_dtype a, ct_dtype b, int nt, int per, int64_t C, float **out,
                         size_t *stride) {
    *out = NULL;
    *stride = ct_align_up((size_t)per * (size_t)C * sizeof(float), 128) / sizeof(float);
    if (!ct_dtype_is_low(a) && !ct_dtype_is_low(b)) return CT_OK;
    if (ct_dtype_is_low(a) && ct_dtype_is_low(b) && a != b) return CT_E_UNSUPPORTED;
    if (!k->scratch) return CT_E_UNSUPPORTED;
    void *p;
    CT_TRY(ct_scratch_reserve(k->ctx, k->scratch, (size_t)nt * *stride * sizeof(float) + 128, &p));
    *out = (float *)ct_align_up((size_t)p, 128); /* (the scratch is 64-byte aligned) */
    return CT_OK;
}

ct_status CT_FN(cross_entropy)(ct_kargs *k) {
    const ct_tensor *X = &k->in[0];
    if (!ce_shapes_ok(X, &k->in[1]) || k->out.dtype != CT_F32) return CT_E_UNSUPPORTED;
    const int32_t *t = k->in[1].data;
    int64_t C = X->shape[X->ndim - 1], R = ct_tensor_numel(X) / C, count;
    double eps = k->node->fa[0], part[CE_BLOCKS];
    int64_t nb = CT_MIN((int64_t)CE_BLOCKS, R);
    int nt = row_threads(k, nb, (R / (nb ? nb : 1)) * C);
    float *rows; /* 16-bit logits: each thread's row as floats */
    size_t stride;
    CT_TRY(ce_rows(k, X->dtype, CT_F32, nt, 1, C, &rows, &stride));
    CT_TRY(ce_labels(k, t, R, C, &count));
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t b = 0; b < nb; b++) {
        double tot = 0;
        float *rb = rows ? rows + (size_t)omp_get_thread_num() * stride : NULL;
        for (int64_t r = R * b / nb; r < R * (b + 1) / nb; r++) {
            if (t[r] == k->node->ia[0]) continue;
            const float *xr = rb ? ct_tile_in(X, r * C, C, rb) : (const float *)X->data + r * C;
            float m = row_max(xr, C);
            double l = m + log(exp_sum(xr, NULL, C, m));
            double smooth = (double)C * l - dot_sum(xr, NULL, C); /* sum over c of (l - x_c) */
            tot += (1.0 - eps) * (l - xr[t[r]]) + eps * smooth / (double)C;
        }
        part[b] = tot;
    }
    double total = 0;
    for (int64_t b = 0; b < nb; b++) total += part[b];
    *(float *)k->out.data = count ? (float)(total / (double)count) : 0.0f;
    return CT_OK;
}

/* in: dloss (scalar), logits, labels -> dlogits (logits and dlogits FP32 or one 16-bit dtype) */
ct_status CT_FN(cross_entropy_bwd)(ct_kargs *k) {
    const ct_tensor *X = &k->in[1], *O = &k->out;
    if (!ce_shapes_ok(X, &k->in[2]) || k->in[0].dtype != CT_F32 || !ct_dtype_is_float(O->dtype) ||
        ct_tensor_numel(O) != ct_tensor_numel(X))
        return CT_E_UNSUPPORTED;
    float g = *(const float *)k->in[0].data;
    const int32_t *t = k->in[2].data;
    int64_t C = X->shape[X->ndim - 1], R = ct_tensor_numel(X) / C, count;
    double eps = k->node->fa[0];
    int nt = row_threads(k, R, C);
    const int xl = ct_dtype_is_low(X->dtype), ol = ct_dtype_is_low(O->dtype);
    float *rows; /* 16-bit I/O: per thread, the logits' row (xl) and the gradient's (ol) as floats */
    size_t stride;
    CT_TRY(ce_rows(k, X->dtype, O->dtype, nt, xl + ol, C, &rows, &stride));
    CT_TRY(ce_labels(k, t, R, C, &count));
    double scale = count ? g / (double)count : 0.0;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t r = 0; r < R; r++) {
        float *rb = rows ? rows + (size_t)omp_get_thread_num() * stride : NULL;
        /* (rb is set whenever xl or ol: ce_rows) */
        float *dr = ol && rb ? rb + (size_t)xl * (size_t)C : (float *)O->data + r * C;
        const float *xr = xl && rb ? ct_tile_in(X, r * C, C, rb) : (const float *)X->data + r * C;
        if (t[r] == k->node->ia[0]) {
            for (int64_t c = 0; c < C; c++) dr[c] = 0.0f;
            ct_tile_put(O, r * C, C, dr);
            continue;
        }
        float m = row_max(xr, C);
        double s = exp_sum(xr, dr, C, m); /* dr = e^(x - m) */
        double l = m + log(s);
        vf inv = vset1((float)(1.0 / s)), base = vset1((float)(eps / (double)C)), vs = vset1((float)scale);
        int64_t i = 0;
        for (; i + VW <= C; i += VW) vstore(dr + i, vmul(vsub(vmul(vload(dr + i), inv), base), vs));
        if (i < C) {
            int n = (int)(C - i);
            vtail_store(dr + i, vmul(vsub(vmul(vtail_load(dr + i, n), inv), base), vs), n);
        }
        int32_t c = t[r]; /* the target column, exactly as the reference */
        dr[c] = (float)((exp(xr[c] - l) - (1.0 - eps + eps / (double)C)) * scale);
        ct_tile_put(O, r * C, C, dr); /* 16-bit: the row's rounding, as a cast of the FP32 gradient */
    }
    return CT_OK;
}
