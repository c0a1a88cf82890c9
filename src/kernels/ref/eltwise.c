/* src/kernels/ref/eltwise.c - reference elementwise ops: activations and
 * their gradients, scale, broadcasting binary ops, dropout. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

#define SQRT_2_OVER_PI 0.7978845608028654
#define GELU_C 0.044715

static double act(int kind, double x) {
    switch (kind) {
    case CT_UNARY_RELU: return x > 0 || isnan(x) ? x : 0; /* NaN propagates, as PyTorch */
    case CT_UNARY_GELU: return 0.5 * x * erfc(-x / sqrt(2.0)); /* erfc: relative accuracy in the lower tail too */
    /* 0.5 (1 + tanh(u)) as 1 / (1 + e^(-2u)): relative accuracy in the lower tail */
    case CT_UNARY_GELU_TANH: return x / (1.0 + exp(-2.0 * SQRT_2_OVER_PI * (x + GELU_C * x * x * x)));
    case CT_UNARY_SILU: return x / (1.0 + exp(-x));
    case CT_UNARY_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case CT_UNARY_TANH: return tanh(x);
    default: return NAN;
    }
}

/* derivative; v is the output y for relu/sigmoid/tanh and the input x otherwise */
static double dact(int kind, double v) {
    switch (kind) {
    case CT_UNARY_RELU: return v > 0 ? 1.0 : 0.0;
    case CT_UNARY_GELU: return 0.5 * erfc(-v / sqrt(2.0)) + v * exp(-0.5 * v * v) / sqrt(2.0 * M_PI);
    case CT_UNARY_GELU_TANH: { /* 0.5 (1 + t) = s, 1 - t^2 = 4 s (1 - s), t = tanh(u): no cancellation */
        double u = SQRT_2_OVER_PI * (v + GELU_C * v * v * v), s = 1.0 / (1.0 + exp(-2.0 * u)),
               sc = 1.0 / (1.0 + exp(2.0 * u));
        return s + 2.0 * v * s * sc * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * v * v);
    }
    case CT_UNARY_SILU: {
        double s = 1.0 / (1.0 + exp(-v));
        return s * (1.0 + v * (1.0 - s));
    }
    case CT_UNARY_SIGMOID: return v * (1.0 - v);
    case CT_UNARY_TANH: return 1.0 - v * v;
    default: return NAN;
    }
}

ct_status ct_k_unary_ref(ct_kargs *k) {
    const float *x = k->in[0].data;
    float *y = k->out.data;
    int kind = (int)k->node->ia[0];
    int64_t n = ct_tensor_numel(&k->out);
    for (int64_t i = 0; i < n; i++) y[i] = (float)act(kind, x[i]);
    return CT_OK;
}

/* in: dy, v (x or y, see ia[1]) */
ct_status ct_k_unary_bwd_ref(ct_kargs *k) {
    const float *dy = k->in[0].data, *v = k->in[1].data;
    float *dx = k->out.data;
    int kind = (int)k->node->ia[0];
    int64_t n = ct_tensor_numel(&k->out);
    for (int64_t i = 0; i < n; i++) dx[i] = (float)(dy[i] * dact(kind, v[i]));
    if (k->node->ia[7] & CT_COLSUM_OUT) { /* unary_bwd+colsum: dx's column sums, as sum would */
        if (!k->aux) return ct_set_error(k->ctx, CT_E_INTERNAL, "unary_bwd: no aux for its column sums");
        ct_colsum_ref_rows(k, CT_COLSUM_OUT, dx, (ct_dtype)k->node->ia[6]);
    }
    return CT_OK;
}

ct_status ct_k_scale_ref(ct_kargs *k) {
    const float *x = k->in[0].data;
    float *y = k->out.data, s = k->node->fa[0];
    int64_t n = ct_tensor_numel(&k->out);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
    return CT_OK;
}

ct_status ct_k_binary_ref(ct_kargs *k) {
    int64_t sa[CT_MAX_DIMS], sb[CT_MAX_DIMS];
    ct_bcast_strides(&k->in[0], &k->out, sa);
    ct_bcast_strides(&k->in[1], &k->out, sb);
    const float *a = k->in[0].data, *b = k->in[1].data;
    float *y = k->out.data;
    int kind = (int)k->node->ia[0];
    int64_t n = ct_tensor_numel(&k->out);
    for (int64_t i = 0; i < n; i++) {
        float av = a[ct_bcast_offset(i, &k->out, sa)], bv = b[ct_bcast_offset(i, &k->out, sb)];
        switch (kind) {
        case CT_BIN_ADD: y[i] = av + bv; break;
        case CT_BIN_SUB: y[i] = av - bv; break;
        case CT_BIN_MUL: y[i] = av * bv; break;
        default: y[i] = av / bv; break;
        }
    }
    return CT_OK;
}

/* Forward (training) and backward both apply the mask for (seed, stream, step). */
ct_status ct_k_dropout_ref(ct_kargs *k) {
    const float *x = k->in[0].data;
    float *y = k->out.data, p = k->node->fa[0];
    int64_t n = ct_tensor_numel(&k->out);
    if (!k->training || p == 0.0f) {
        if (y != x) memcpy(y, x, (size_t)n * sizeof *y); /* in place (ct_op_info.inplace): nothing to do */
        return CT_OK;
    }
    float scale = 1.0f / (1.0f - p);
    int64_t row = k->node->ia[1], e0 = k->sample_elem0 + k->elem0; /* drop path: one decision per row */
    for (int64_t i = 0; i < n; i++)
        y[i] = ct_dropout_keep(k->seed, (uint64_t)k->node->ia[0], k->step,
                               (uint64_t)(row > 0 ? (e0 + i) / row : e0 + i), p)
                   ? x[i] * scale
                   : 0.0f;
    return CT_OK;
}
