/* src/graph/tp_kernels.c - the kernels of tensor parallelism's ops that
 * communicate (tp_reduce, cross_entropy_vp) and tp_copy's. Kernels in
 * src/kernels may not call the communicator (layer 1 < comm 2), so these live
 * in the graph layer (3) and get the graph's tensor group through
 * ct_kargs.group (the executor sets it from the plan's graph; NULL: none, the
 * collectives are skipped). Apart from tp_ops.c's builders so that the op
 * table (which names these) does not circle back to graph.c.
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
#include <stdio.h>
#include <string.h>

#include "ctrain/dist.h"
#include "ir.h"
#include "kernels/kernels.h"

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
