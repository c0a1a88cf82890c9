/* src/graph/tp_ops.c - tensor parallelism's collective ops (Megatron-style):
 * the builders of ct_tp_copy, ct_tp_reduce, ct_embedding_rows and
 * ct_cross_entropy_vp, and the kernels of the ops that communicate. Kernels
 * in src/kernels may not call the communicator (layer 1 < comm 2), so the
 * kernels that do live here (graph, layer 3) and get the graph's tensor
 * group through ct_kargs.group (the executor sets it from the plan's graph).
 *
 * Every rank of the group runs the same nodes in the same order (the same
 * graph), so the collectives meet. A collective that fails (a dead rank) is
 * the plan's run's ct_status, CT_E_DIST with the communicator's message
 * (when the communicator reports on the plan's context, as when both were
 * made with the same one), never an abort.
 *
 * dtypes: tp_copy copies bytes in any float dtype (lowp_native); tp_reduce
 * reduces FP32 (BF16 / FP16 activations reach its kernel as the executor's
 * FP32 copies: summed in FP32 and rounded once); the vocabulary-parallel
 * cross entropy is FP32 (autocast class F32, like cross_entropy). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ctrain/dist.h"
#include "ir.h"
#include "kernels/kernels.h"

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

/* ---- kernels ------------------------------------------------------------------------------- */

/* A collective of node k failed: its status, with the communicator's message
 * when it reported on k's context (cleared before the call). */
static ct_status group_fail(ct_kargs *k, ct_status s, const char *what) {
    char prefix[192];
    snprintf(prefix, sizeof prefix, "op '%s' (node '%s'): %s over the tensor group: ", k->op_name ? k->op_name : "?",
             k->node->name, what);
    if (!ct_context_last_error(k->ctx)[0])
        return ct_set_error(k->ctx, s, "%sfailed (%s; the communicator's context has its message)", prefix,
                            ct_status_name(s));
    return ct_wrap_error(k->ctx, s, prefix, "");
}

static ct_status group_allreduce_f32(ct_kargs *k, float *x, size_t n, ct_reduce_op op, const char *what) {
    if (!k->group || !n) return CT_OK;
    ct_context_clear_error(k->ctx);
    ct_status s = ct_comm_allreduce_f32(k->group, x, n, op);
    return s == CT_OK ? CT_OK : group_fail(k, s, what);
}

static ct_status group_allreduce_f64(ct_kargs *k, double *x, size_t n, ct_reduce_op op, const char *what) {
    if (!k->group || !n) return CT_OK;
    ct_context_clear_error(k->ctx);
    ct_status s = ct_comm_allreduce_f64(k->group, x, n, op);
    return s == CT_OK ? CT_OK : group_fail(k, s, what);
}

/* tp_copy: the identity (bytes, any dtype); in place when the planner gave
 * the output x's buffer. */
ct_status ct_k_tp_copy(ct_kargs *k) {
    if (k->in[0].dtype != k->out.dtype) return CT_E_UNSUPPORTED;
    if (k->out.data != k->in[0].data) memcpy(k->out.data, k->in[0].data, ct_tensor_nbytes(&k->out));
    return CT_OK;
}

/* tp_reduce: out <- x summed over the group (FP32; in place when the
 * planner gave the output x's buffer). */
ct_status ct_k_tp_reduce(ct_kargs *k) {
    if (k->in[0].dtype != CT_F32 || k->out.dtype != CT_F32) return CT_E_UNSUPPORTED;
    if (k->out.data != k->in[0].data) memcpy(k->out.data, k->in[0].data, ct_tensor_nbytes(&k->out));
    return group_allreduce_f32(k, k->out.data, (size_t)ct_tensor_numel(&k->out), CT_REDUCE_SUM, "the sum");
}

/* cross_entropy_vp: the row maxima and the row sums reduced over the group
 * between the local steps (kernels/ref/cross_entropy_vp.c); a few doubles a
 * row, never the whole logits. Labels are checked first: they are the same on
 * every rank, so a bad one fails every rank before any collective. */
ct_status ct_k_cross_entropy_vp(ct_kargs *k) {
    int64_t R = ct_tensor_numel(&k->in[1]), count;
    double *aux = k->aux;
    CT_TRY(ct_ce_vp_check_labels(k, &count));
    ct_ce_vp_local_max(k, aux);
    CT_TRY(group_allreduce_f64(k, aux, (size_t)R, CT_REDUCE_MAX, "the row maxima"));
    ct_ce_vp_local_sums(k, aux);
    CT_TRY(group_allreduce_f64(k, aux + R, 3 * (size_t)R, CT_REDUCE_SUM, "the row sums"));
    *(float *)k->out.data = ct_ce_vp_loss(k, aux, count);
    return CT_OK;
}

size_t ct_aux_cross_entropy_vp(const ct_graph *g, const ct_node_def *d) {
    return 4 * (size_t)ct_node_numel(&g->nodes[d->in[1]]) * sizeof(double);
}
