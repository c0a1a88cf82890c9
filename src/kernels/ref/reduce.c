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
