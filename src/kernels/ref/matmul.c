/* src/kernels/ref/matmul.c - reference matmul (batched, transposes) and
 * linear (x W^T + b). Plain loops with double accumulation. */
#include "kernels/kernels.h"

/* C[b] (M,N) = op(A[b]) (M,K) * op(B[b]) (K,N) */
ct_status ct_k_matmul_ref(ct_kargs *k) {
    const ct_tensor *A = &k->in[0], *B = &k->in[1];
    int ta = (int)k->node->ia[0], tb = (int)k->node->ia[1];
    int nd = k->out.ndim;
    int64_t M = k->out.shape[nd - 2], N = k->out.shape[nd - 1];
    int64_t K = A->shape[nd - 1 - (ta ? 1 : 0)];
    int64_t batch = 1;
    for (int i = 0; i < nd - 2; i++) batch *= k->out.shape[i];
    int64_t b_batch_stride = B->ndim > 2 ? K * N : 0;
    const float *a = A->data, *b = B->data;
    float *c = k->out.data;
    for (int64_t bi = 0; bi < batch; bi++) {
        const float *ab = a + bi * M * K, *bb = b + bi * b_batch_stride;
        float *cb = c + bi * M * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t p = 0; p < K; p++) {
                    float av = ta ? ab[p * M + i] : ab[i * K + p];
                    float bv = tb ? bb[j * K + p] : bb[p * N + j];
                    s += (double)av * bv;
                }
                cb[i * N + j] = (float)s;
            }
    }
    return CT_OK;
}

/* y (R, O) = x (R, I) W^T (I, O) + b (O) */
ct_status ct_k_linear_ref(ct_kargs *k) {
    const float *x = k->in[0].data, *w = k->in[1].data;
    const float *bias = k->node->n_in > 2 ? k->in[2].data : NULL;
    int64_t O = k->in[1].shape[0], I = k->in[1].shape[1];
    int64_t R = ct_tensor_numel(&k->out) / O;
    float *y = k->out.data;
    for (int64_t r = 0; r < R; r++)
        for (int64_t o = 0; o < O; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int64_t i = 0; i < I; i++) s += (double)x[r * I + i] * w[o * I + i];
            y[r * O + o] = (float)s;
        }
    return CT_OK;
}
