/* src/kernels/ref/embedding.c - reference embedding lookup and its gradient
 * (scatter-add into the weight's shape). */
#include <string.h>

#include "kernels/kernels.h"

static ct_status check_id(ct_kargs *k, int32_t id, int64_t V, int64_t i) {
    if (id < 0 || id >= V)
        return ct_set_error(k->ctx, CT_E_INVALID_ARG,
                            "embedding: id %d at position %lld is outside the vocabulary [0, %lld); check the "
                            "tokenizer or vocab_size",
                            (int)id, (long long)i, (long long)V);
    return CT_OK;
}

ct_status ct_k_embedding_ref(ct_kargs *k) {
    const float *w = k->in[0].data;
    const int32_t *ids = k->in[1].data;
    int64_t V = k->in[0].shape[0], D = k->in[0].shape[1], n = ct_tensor_numel(&k->in[1]);
    float *y = k->out.data;
    for (int64_t i = 0; i < n; i++) {
        CT_TRY(check_id(k, ids[i], V, i));
        memcpy(y + i * D, w + (int64_t)ids[i] * D, (size_t)D * sizeof *y);
    }
    return CT_OK;
}

/* in: dy, ids -> dW (V, D) */
ct_status ct_k_embedding_bwd_ref(ct_kargs *k) {
    const float *dy = k->in[0].data;
    const int32_t *ids = k->in[1].data;
    int64_t V = k->out.shape[0], D = k->out.shape[1], n = ct_tensor_numel(&k->in[1]);
    float *dw = k->out.data;
    memset(dw, 0, ct_tensor_nbytes(&k->out));
    for (int64_t i = 0; i < n; i++) {
        CT_TRY(check_id(k, ids[i], V, i));
        for (int64_t d = 0; d < D; d++) dw[(int64_t)ids[i] * D + d] += dy[i * D + d];
    }
    return CT_OK;
}
