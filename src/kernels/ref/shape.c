/* src/kernels/ref/shape.c - reference data-movement ops: transpose
 * (any permutation), concat, slice and its gradient (zero padding).
 * Work on any dtype by element size. */
#include <string.h>

#include "kernels/kernels.h"

ct_status ct_k_transpose_ref(ct_kargs *k) {
    const ct_tensor *X = &k->in[0];
    int nd = X->ndim;
    size_t es = ct_dtype_size(X->dtype);
    int64_t xs[CT_MAX_DIMS] = {0}, st[CT_MAX_DIMS];
    ct_contig_strides(nd, X->shape, xs);
    for (int i = 0; i < nd; i++) st[i] = xs[k->node->ia[i]]; /* out dim i walks x dim perm[i] */
    int64_t n = ct_tensor_numel(X);
    const char *x = X->data;
    char *y = k->out.data;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i, off = 0;
        for (int d = nd - 1; d >= 0; d--) {
            off += (r % k->out.shape[d]) * st[d]; /* NOLINT(clang-analyzer-core.UndefinedBinaryOperatorResult): d < nd <= CT_MAX_DIMS */
            r /= k->out.shape[d];
        }
        memcpy(y + (size_t)i * es, x + (size_t)off * es, es);
    }
    return CT_OK;
}

/* outer = prod(dims before axis), inner = prod(dims after axis) * elem size */
static void split(const ct_tensor *t, int axis, int64_t *outer, int64_t *inner) {
    *outer = 1;
    *inner = (int64_t)ct_dtype_size(t->dtype);
    for (int i = 0; i < axis; i++) *outer *= t->shape[i];
    for (int i = axis + 1; i < t->ndim; i++) *inner *= t->shape[i];
}

ct_status ct_k_concat_ref(ct_kargs *k) {
    int axis = (int)k->node->ia[0];
    int64_t outer, inner;
    split(&k->out, axis, &outer, &inner);
    char *y = k->out.data;
    int64_t row = k->out.shape[axis] * inner, off = 0;
    for (int j = 0; j < k->node->n_in; j++) {
        int64_t len = k->in[j].shape[axis] * inner;
        const char *x = k->in[j].data;
        for (int64_t o = 0; o < outer; o++) memcpy(y + o * row + off, x + o * len, (size_t)len);
        off += len;
    }
    return CT_OK;
}

ct_status ct_k_slice_ref(ct_kargs *k) {
    int axis = (int)k->node->ia[0];
    int64_t outer, inner;
    split(&k->in[0], axis, &outer, &inner);
    const char *x = k->in[0].data;
    char *y = k->out.data;
    int64_t row = k->in[0].shape[axis] * inner, len = k->out.shape[axis] * inner, start = k->node->ia[1] * inner;
    for (int64_t o = 0; o < outer; o++) memcpy(y + o * len, x + o * row + start, (size_t)len);
    return CT_OK;
}

/* in: dy (slice shape) -> dx (full shape), zeros outside the slice */
ct_status ct_k_slice_bwd_ref(ct_kargs *k) {
    int axis = (int)k->node->ia[0];
    int64_t outer, inner;
    split(&k->out, axis, &outer, &inner);
    const char *dy = k->in[0].data;
    char *dx = k->out.data;
    int64_t row = k->out.shape[axis] * inner, len = k->in[0].shape[axis] * inner, start = k->node->ia[1] * inner;
    memset(dx, 0, ct_tensor_nbytes(&k->out));
    for (int64_t o = 0; o < outer; o++) memcpy(dx + o * row + start, dy + o * len, (size_t)len);
    return CT_OK;
}
