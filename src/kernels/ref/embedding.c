/* src/kernels/ref/embedding.c - reference embedding lookup and its gradient
 * (scatter-add into the weight's shape). Rows mode (node ia[1] = 1,
 * ct_embedding_rows): the weight holds rows [ia[0], ia[0] + V) of the whole
 * table; an id outside gives a zero row and no gradient. */
#include <stdint.h>
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
    *row = ct_embedding_row(k->node, id, V);
    return k->node->ia[1] ? CT_OK : check_id(k, id, V, i);
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

/* in: dy, ids[, a] -> dW (V, D); with a (fusion embedding_bwd+add): a + dW (ia[2] = 1: dW + a, the
 * add's operand order), each touched row's sum made from zero in position order and then added, as
 * the unfused embedding_bwd and add compute it. Apart: a copied, the sums made in dW's rows (the
 * scratch marks each row's first position). In place (ia[3], the output is a's buffer): the sums made in
 * the scratch's accumulators, one per distinct row, then added to a's rows. */
static ct_status embedding_bwd_add(ct_kargs *k) {
    const float *dy = k->in[0].data, *a = k->in[2].data;
    const int32_t *ids = k->in[1].data;
    int64_t V = k->out.shape[0], D = k->out.shape[1], n = ct_tensor_numel(&k->in[1]), r;
    float *dw = k->out.data;
    const int inplace = k->node->ia[3] != 0, e_first = k->node->ia[2] != 0;
    const ct_emb_ws L = ct_embedding_bwd_ws(n, V, D, inplace);
    if (!k->ws || k->ws_bytes < L.total || (dw == a) != inplace)
        return ct_set_error(k->ctx, CT_E_INTERNAL, "embedding_bwd+add: no scratch for the row marks, or the output %s "
                                                   "its addend (a plan bug: please report it)",
                            inplace ? "not over" : "over");
    for (int64_t i = 0; i < n; i++) CT_TRY(row_of(k, ids[i], V, i, &r)); /* the first bad id's error */
    const int64_t u = ct_embedding_bwd_marks(k->node, ids, n, V, k->ws, L);
    const uint8_t *first = k->ws;
    const int32_t *slot = (const int32_t *)(const void *)((const char *)k->ws + L.slot);
    const int64_t *rows = (const int64_t *)(const void *)((const char *)k->ws + L.rows);
    float *acc = (float *)(void *)((char *)k->ws + L.acc);
    if (!inplace) memcpy(dw, a, ct_tensor_nbytes(&k->out));
    for (int64_t i = 0; i < n; i++) { /* each row's sum, from zero, in position order */
        if (first[i] == CT_EMB_SKIP) continue;
        float *o = inplace ? acc + slot[i] * D : dw + ct_embedding_row(k->node, ids[i], V) * D;
        for (int64_t d = 0; d < D; d++) o[d] = (first[i] == CT_EMB_FIRST ? 0.0f : o[d]) + dy[i * D + d];
    }
    /* then a's row and the sum, in the add's operand order: each sum once (in place: its accumulator; apart:
       the row at its first position) */
    for (int64_t i = 0; i < (inplace ? u : n); i++) {
        if (!inplace && first[i] != CT_EMB_FIRST) continue;
        r = inplace ? rows[i] : ct_embedding_row(k->node, ids[i], V);
        const float *e = inplace ? acc + i * D : dw + r * D, *x = a + r * D;
        float *o = dw + r * D;
        for (int64_t d = 0; d < D; d++) o[d] = e_first ? e[d] + x[d] : x[d] + e[d];
    }
    return CT_OK;
}

/* in: dy, ids -> dW (V, D) */
ct_status ct_k_embedding_bwd_ref(ct_kargs *k) {
    const float *dy = k->in[0].data;
    const int32_t *ids = k->in[1].data;
    int64_t V = k->out.shape[0], D = k->out.shape[1], n = ct_tensor_numel(&k->in[1]), r;
    float *dw = k->out.data;
    if (k->node->n_in > 2) return embedding_bwd_add(k);
    memset(dw, 0, ct_tensor_nbytes(&k->out));
    for (int64_t i = 0; i < n; i++) {
        CT_TRY(row_of(k, ids[i], V, i, &r));
        if (r < 0) continue;
        for (int64_t d = 0; d < D; d++) dw[r * D + d] += dy[i * D + d];
    }
    return CT_OK;
}
