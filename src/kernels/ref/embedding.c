/* src/kernels/ref/embedding.c - reference embedding lookup and its gradient
 * (scatter-add into the weight's shape). Rows mode (node ia[1] = 1,
 * ct_embedding_rows): the weight holds rows [ia[0], ia[0] + V) of the whole
 * table; an id outside gives a zero row and no gradient. */
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

/* The weight's row of position i's id, -1 (rows mode) for none; an error
 * (ct_embedding) for an id outside the table. */
static ct_status row_of(ct_kargs *k, int32_t id, int64_t V, int64_t i, int64_t *row) {
    if (k->node->ia[1]) {
        int64_t r = (int64_t)id - k->node->ia[0];
        *row = r >= 0 && r < V ? r : -1;
        return CT_OK;
    }
    *row = id;
    return check_id(k, id, V, i);
}

ct_status ct_k_embedding_ref(ct_kargs *k) {
    const float *w = k->in[0].data;
    const int32_t *ids = k->in[1].data;
    int64_t V = k->in[0].shape[0], D = k->in[0].shape[1], n = ct_tensor_numel(&k->in[1]), r;
    float *y = k->out.data;
    for (int64_t i = 0; i < n; i++) {
        CT_TRY(row_of(k, ids[i], V, i, &r));
        if (r < 0) memset(y + i * D, 0, (size_t)D * sizeof *y);
        else memcpy(y + i * D, w + r * D, (size_t)D * sizeof *y);
    }
    return CT_OK;
}

/* in: dy, ids -> dW (V, D) */
ct_status ct_k_embedding_bwd_ref(ct_kargs *k) {
    const float *dy = k->in[0].data;
    const int32_t *ids = k->in[1].data;
    int64_t V = k->out.shape[0], D = k->out.shape[1], n = ct_tensor_numel(&k->in[1]), r;
    float *dw = k->out.data;
    memset(dw, 0, ct_tensor_nbytes(&k->out));
    for (int64_t i = 0; i < n; i++) {
        CT_TRY(row_of(k, ids[i], V, i, &r));
        if (r < 0) continue;
        for (int64_t d = 0; d < D; d++) dw[r * D + d] += dy[i * D + d];
    }
    return CT_OK;
}
