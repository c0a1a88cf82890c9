/* src/kernels/ref/reduce.c - reference reductions: sum/mean over an axes
 * mask, broadcast_to (gradient of a reduction) and sum_to (gradient of a
 * broadcast). */
#include <string.h>

#include "kernels/kernels.h"

/* out element for input index i when the masked dims are reduced */
static int64_t reduced_index(int64_t i, const ct_tensor *x, uint32_t mask) {
    int64_t o = 0, mul = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        int64_t q = i % x->shape[d];
        i /= x->shape[d];
        if (!(mask & (1u << d))) {
            o += q * mul;
            mul *= x->shape[d];
        }
    }
    return o;
}

ct_status ct_k_sum_ref(ct_kargs *k) {
    const ct_tensor *X = &k->in[0];
    const float *x = X->data;
    float *y = k->out.data;
    int64_t n = ct_tensor_numel(X), m = ct_tensor_numel(&k->out);
    uint32_t mask = (uint32_t)k->node->ia[0];
    double *acc = k->ws; /* numel(out) doubles, see ct_ws_sum */
    memset(acc, 0, (size_t)m * sizeof *acc);
    for (int64_t i = 0; i < n; i++) acc[reduced_index(i, X, mask)] += x[i];
    for (int64_t j = 0; j < m; j++) y[j] = (float)(acc[j] * k->node->fa[0]);
    return CT_OK;
}

/* in: x (keepdim-shaped, same ndim as out) -> out = broadcast(x) * fa[0] */
ct_status ct_k_broadcast_to_ref(ct_kargs *k) {
    int64_t st[CT_MAX_DIMS];
    ct_bcast_strides(&k->in[0], &k->out, st);
    const float *x = k->in[0].data;
    float *y = k->out.data, s = k->node->fa[0];
    int64_t n = ct_tensor_numel(&k->out);
    for (int64_t i = 0; i < n; i++) y[i] = x[ct_bcast_offset(i, &k->out, st)] * s;
    return CT_OK;
}

/* in: x (broadcast shape) -> out (the smaller shape x was broadcast from) */
ct_status ct_k_sum_to_ref(ct_kargs *k) {
    int64_t st[CT_MAX_DIMS];
    ct_bcast_strides(&k->out, &k->in[0], st);
    const float *x = k->in[0].data;
    float *y = k->out.data;
    int64_t n = ct_tensor_numel(&k->in[0]);
    memset(y, 0, ct_tensor_nbytes(&k->out));
    for (int64_t i = 0; i < n; i++) y[ct_bcast_offset(i, &k->in[0], st)] += x[i];
    return CT_OK;
}

/* ---- column sums of a fused producer (layernorm_bwd+colsum, unary_bwd+colsum) ---------------
 * The reference producers sum each column over all rows in order in one
 * double, exactly as the reference layernorm_bwd_gamma / sum do, and leave
 * that in piece 0 of the set's partials, the other pieces 0 (so COLSUM's
 * in-order addition of the pieces gives that sum unchanged: a sum starting
 * from +0 is never -0). */

double *ct_colsum_ref_set(const ct_kargs *k, int bit) {
    const ct_tensor *o = &k->out;
    int64_t mask = k->node->ia[7], D = o->shape[o->ndim - 1], R = ct_tensor_numel(o) / D, P = ct_colsum_pieces(R, D);
    int slot = ((mask & 1) && bit > 1) + ((mask & 2) && bit > 2);
    double *a = (double *)k->aux + (int64_t)slot * P * D;
    memset(a, 0, (size_t)(P * D) * sizeof(double));
    return a;
}

static float colsum_round(float v, ct_dtype dt) {
    return dt == CT_BF16 ? ct_bf16_to_f32(ct_f32_to_bf16(v)) : dt == CT_F16 ? ct_f16_to_f32(ct_f32_to_f16(v)) : v;
}

void ct_colsum_ref_rows(const ct_kargs *k, int bit, const float *y, ct_dtype rdt) {
    const ct_tensor *o = &k->out;
    int64_t D = o->shape[o->ndim - 1], R = ct_tensor_numel(o) / D;
    double *a = ct_colsum_ref_set(k, bit);
    for (int64_t j = 0; j < D; j++) {
        double s = 0;
        for (int64_t r = 0; r < R; r++) s += colsum_round(y[r * D + j], rdt);
        a[j] = s;
    }
}

/* in: the producer (its aux)[, a batchnorm forward]; out[j] = fa[0] * (the pieces' partials of set ia[0],
 * added in order), with the batchnorm: times its invstd[j] (a dgamma: batchnorm_bwd_gamma's product) */
ct_status ct_k_colsum(ct_kargs *k) {
    const ct_tensor *X = &k->in[0], *O = &k->out;
    int64_t D = X->shape[X->ndim - 1], R = D ? ct_tensor_numel(X) / D : 0, P = ct_colsum_pieces(R, D);
    const double *a = k->in_aux[0];
    if (!a || ct_tensor_numel(O) != D)
        return ct_set_error(k->ctx, CT_E_INTERNAL, "colsum: the producer has no column sums for %lld columns",
                            (long long)ct_tensor_numel(O));
    const float *invstd = k->node->n_in > 1 && k->in_aux[1] ? (const float *)k->in_aux[1] + D : NULL;
    if (k->node->n_in > 1 && !invstd)
        return ct_set_error(k->ctx, CT_E_INTERNAL, "colsum: no batchnorm statistics for a dgamma");
    if (k->node->ia[1]) a += ct_keep_colsum_offset(ct_tensor_numel(X)) / sizeof(double); /* after a kept activation */
    a += k->node->ia[0] * P * D;
    for (int64_t j = 0; j < D; j++) {
        double acc = 0;
        for (int64_t p = 0; p < P; p++) acc += a[p * D + j];
        float v = (float)(acc * (invstd ? (double)invstd[j] : k->node->fa[0]));
        if (O->dtype == CT_BF16) ((uint16_t *)O->data)[j] = ct_f32_to_bf16(v);
        else if (O->dtype == CT_F16) ((uint16_t *)O->data)[j] = ct_f32_to_f16(v);
        else ((float *)O->data)[j] = v;
    }
    return CT_OK;
}
