/* src/graph/tp_ops.c - tensor parallelism's ops (Megatron-style): the
 * builders of ct_tp_copy, ct_tp_reduce, ct_embedding_rows and
 * ct_cross_entropy_vp (include/ctrain/graph.h). The kernels of the ops that
 * communicate are in tp_kernels.c; embedding_rows is the embedding op in rows
 * mode (kernels/ref/embedding.c, kernels/simd/embedding.c). */
#include <string.h>

#include "ir.h"

/* ---- builders ------------------------------------------------------------------------------ */

static ct_status tp_unary(ct_graph *g, ct_op op, const char *what, ct_node x, ct_node *out) {
    if (!g || !out) return CT_E_INVALID_ARG;
    CT_TRY(ct_graph_check_node(g, x, what));
    const ct_node_def *X = &g->nodes[x];
    if (!ct_dtype_is_float(X->dtype))
        return ct_set_error(g->ctx, CT_E_DTYPE, "%s: input '%s' is %s; only float tensors are summed over the tensor group",
                            what, X->name, ct_dtype_name(X->dtype));
    if (!g->tp) { /* no tensor group: the identity, no node */
        *out = x;
        return CT_OK;
    }
    ct_node_def d;
    memset(&d, 0, sizeof d);
    d.op = op;
    d.n_in = 1;
    d.in[0] = x;
    d.dtype = X->dtype;
    d.ndim = X->ndim;
    memcpy(d.shape, X->shape, sizeof d.shape);
    return ct_graph_push(g, &d, out);
}

ct_status ct_tp_copy(ct_graph *g, ct_node x, ct_node *out) { return tp_unary(g, CT_OP_TP_COPY, "tp_copy", x, out); }
ct_status ct_tp_reduce(ct_graph *g, ct_node x, ct_node *out) { return tp_unary(g, CT_OP_TP_REDUCE, "tp_reduce", x, out); }

/* ct_embedding's node in rows mode (the op's ia[0] = row0, ia[1] = 1): the
 * kernels give a zero row for an id outside [row0, row0 + R). */
ct_status ct_embedding_rows(ct_graph *g, ct_node weight, ct_node ids, int64_t row0, ct_node *out) {
    if (!g || !out) return CT_E_INVALID_ARG;
    if (row0 < 0 || row0 > INT32_MAX)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "embedding_rows: row0 %lld must be in [0, 2^31) (ids are i32)",
                            (long long)row0);
    CT_TRY(ct_embedding(g, weight, ids, out));
    g->nodes[*out].ia[0] = row0;
    g->nodes[*out].ia[1] = 1;
    return CT_OK;
}

ct_status ct_cross_entropy_vp(ct_graph *g, ct_node logits, ct_node labels, float label_smoothing, int ignore_index,
                              int64_t vocab, ct_node *out) {
    if (!g || !out) return CT_E_INVALID_ARG;
    CT_TRY(ct_graph_check_node(g, logits, "cross_entropy_vp"));
    CT_TRY(ct_graph_check_node(g, labels, "cross_entropy_vp"));
    const ct_node_def *L = &g->nodes[logits], *Y = &g->nodes[labels];
    char s1[96], s2[96];
    if (L->dtype != CT_F32 && !(g->mixed && ct_dtype_is_float(L->dtype)))
        return ct_set_error(g->ctx, CT_E_DTYPE, "cross_entropy_vp: logits '%s' are %s; they must be f32", L->name,
                            ct_dtype_name(L->dtype));
    if (Y->dtype != CT_I32)
        return ct_set_error(g->ctx, CT_E_DTYPE, "cross_entropy_vp: labels '%s' must be i32 class indices, got %s",
                            Y->name, ct_dtype_name(Y->dtype));
    int lead_ok = L->ndim >= 2 && Y->ndim == L->ndim - 1;
    for (int i = 0; lead_ok && i < Y->ndim; i++) lead_ok = Y->shape[i] == L->shape[i];
    if (!lead_ok)
        return ct_set_error(g->ctx, CT_E_SHAPE,
                            "cross_entropy_vp: logits '%s' %s must be (N, Vl) (this rank's columns last) and labels "
                            "'%s' %s their leading dims (N)",
                            L->name, ct_shape_str(L->ndim, L->shape, s1, sizeof s1), Y->name,
                            ct_shape_str(Y->ndim, Y->shape, s2, sizeof s2));
    int64_t Vl = L->shape[L->ndim - 1], T = g->tp ? g->tp_size : 1;
    if (vocab < 1 || vocab > Vl * T || vocab > INT32_MAX)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG,
                            "cross_entropy_vp: vocab %lld must be in [1, %lld] (%lld columns on each of %lld ranks)",
                            (long long)vocab, (long long)(Vl * T), (long long)Vl, (long long)T);
    if (!(label_smoothing >= 0.f && label_smoothing < 1.f))
        return ct_set_error(g->ctx, CT_E_INVALID_ARG, "cross_entropy_vp: label_smoothing %g must be in [0, 1)",
                            (double)label_smoothing);
    ct_node_def d;
    memset(&d, 0, sizeof d);
    d.op = CT_OP_CROSS_ENTROPY_VP;
    d.n_in = 2;
    d.in[0] = logits;
    d.in[1] = labels;
    d.dtype = CT_F32;
    d.ndim = 0;
    d.fa[0] = label_smoothing;
    d.ia[0] = ignore_index;
    d.ia[1] = vocab;
    d.ia[2] = (int64_t)(g->tp ? g->tp_rank : 0) * Vl;
    return ct_graph_push(g, &d, out);
}
