/* src/kernels/ref/softmax.c - reference softmax / log-softmax over the last
 * dim and their gradients; cross-entropy (mean over non-ignored rows, label
 * smoothing as PyTorch: (1-e)*nll + e*mean_c(-log p_c)) and its gradient. */
#include <math.h>

#include "kernels/kernels.h"

static void rows(const ct_tensor *t, int64_t *R, int64_t *C) {
    *C = t->shape[t->ndim - 1];
    *R = ct_tensor_numel(t) / *C;
}

/* log-sum-exp of one row */
static double lse(const float *x, int64_t C) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; c++) m = x[c] > m ? x[c] : m;
    for (int64_t c = 0; c < C; c++) s += exp(x[c] - m);
    return m + log(s);
}

static ct_status softmax_common(ct_kargs *k, int logsm) {
    int64_t R, C;
    rows(&k->out, &R, &C);
    const float *x = k->in[0].data;
    float *y = k->out.data;
    for (int64_t r = 0; r < R; r++) {
        double l = lse(x + r * C, C);
        for (int64_t c = 0; c < C; c++) {
            double v = x[r * C + c] - l;
            y[r * C + c] = (float)(logsm ? v : exp(v));
        }
    }
    return CT_OK;
}

ct_status ct_k_softmax_ref(ct_kargs *k) { return softmax_common(k, 0); }
ct_status ct_k_log_softmax_ref(ct_kargs *k) { return softmax_common(k, 1); }

/* in: dy, y -> dx = y * (dy - sum(dy*y)) */
ct_status ct_k_softmax_bwd_ref(ct_kargs *k) {
    int64_t R, C;
    rows(&k->out, &R, &C);
    const float *dy = k->in[0].data, *y = k->in[1].data;
    float *dx = k->out.data;
    for (int64_t r = 0; r < R; r++) {
        double s = 0;
        for (int64_t c = 0; c < C; c++) s += (double)dy[r * C + c] * y[r * C + c];
        for (int64_t c = 0; c < C; c++) dx[r * C + c] = (float)(y[r * C + c] * (dy[r * C + c] - s));
    }
    return CT_OK;
}

/* in: dy, y (log-probs) -> dx = dy - exp(y) * sum(dy) */
ct_status ct_k_log_softmax_bwd_ref(ct_kargs *k) {
    int64_t R, C;
    rows(&k->out, &R, &C);
    const float *dy = k->in[0].data, *y = k->in[1].data;
    float *dx = k->out.data;
    for (int64_t r = 0; r < R; r++) {
        double s = 0;
        for (int64_t c = 0; c < C; c++) s += dy[r * C + c];
        for (int64_t c = 0; c < C; c++) dx[r * C + c] = (float)(dy[r * C + c] - exp(y[r * C + c]) * s);
    }
    return CT_OK;
}

static ct_status check_label(ct_kargs *k, int32_t t, int64_t C, int64_t r) {
    if (t < 0 || t >= C)
        return ct_set_error(k->ctx, CT_E_INVALID_ARG,
                            "cross_entropy: label %d in row %lld is outside [0, %lld) and is not the ignore_index "
                            "%lld; check the labels or the number of classes",
                            (int)t, (long long)r, (long long)C, (long long)k->node->ia[0]);
    return CT_OK;
}

ct_status ct_k_cross_entropy_ref(ct_kargs *k) {
    const float *x = k->in[0].data;
    const int32_t *t = k->in[1].data;
    /* logits (..., C): rows are every position of the leading dims */
    int64_t C = k->in[0].shape[k->in[0].ndim - 1], R = ct_tensor_numel(&k->in[0]) / C;
    double eps = k->node->fa[0], total = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < R; r++) {
        if (t[r] == k->node->ia[0]) continue;
        CT_TRY(check_label(k, t[r], C, r));
        const float *xr = x + r * C;
        double l = lse(xr, C), smooth = 0;
        for (int64_t c = 0; c < C; c++) smooth += l - xr[c];
        total += (1.0 - eps) * (l - xr[t[r]]) + eps * smooth / (double)C;
        count++;
    }
    *(float *)k->out.data = count ? (float)(total / (double)count) : 0.0f;
    return CT_OK;
}

/* in: dloss (scalar), logits, labels -> dlogits */
ct_status ct_k_cross_entropy_bwd_ref(ct_kargs *k) {
    float g = *(const float *)k->in[0].data;
    const float *x = k->in[1].data;
    const int32_t *t = k->in[2].data;
    int64_t C = k->in[1].shape[k->in[1].ndim - 1], R = ct_tensor_numel(&k->in[1]) / C;
    double eps = k->node->fa[0];
    float *dx = k->out.data;
    int64_t count = 0;
    for (int64_t r = 0; r < R; r++) count += t[r] != k->node->ia[0];
    double scale = count ? g / (double)count : 0.0;
    for (int64_t r = 0; r < R; r++) {
        float *dr = dx + r * C;
        if (t[r] == k->node->ia[0]) {
            for (int64_t c = 0; c < C; c++) dr[c] = 0.0f;
            continue;
        }
        CT_TRY(check_label(k, t[r], C, r));
        double l = lse(x + r * C, C);
        for (int64_t c = 0; c < C; c++) {
            double p = exp(x[r * C + c] - l);
            double target = (c == t[r] ? 1.0 - eps : 0.0) + eps / (double)C;
            dr[c] = (float)((p - target) * scale);
        }
    }
    return CT_OK;
}
