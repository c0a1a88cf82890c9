/* src/graph/cost.c - the op cost model: estimated FLOPs and bytes moved per
 * node, reported with every node event (ct_plan_set_node_hook) and so in the
 * profiler's trace. Which formula an op uses is its op table row's cost
 * column (ct_cost_kind, op_table.c); the formulas are here. */
#include "ir.h"

static double numel_of(const ct_node_def *d) { return (double)ct_node_numel(d); }

double ct_node_flops(const ct_graph *g, const ct_node_def *d) {
    const ct_node_def *a = d->n_in > 0 ? &g->nodes[d->in[0]] : NULL;
    const ct_node_def *b = d->n_in > 1 ? &g->nodes[d->in[1]] : NULL;
    /* the graph's builders give every op below its inputs; a node without them counts as elementwise */
    if (!a || (!b && (d->op == CT_OP_CONV2D || d->op == CT_OP_CONV2D_BWD_DATA))) return numel_of(d);
    switch ((ct_cost_kind)ct_op_table(d->op)->cost) { /* the op table's cost column */
    case CT_COST_FUSED_GEMM: { /* fused GEMMs count as their GEMM */
        ct_node_def c = *d;
        c.op = d->op == CT_OP_LINEAR_PRO ? CT_OP_LINEAR : d->op == CT_OP_GEMM_RELU ? (ct_op)d->ia[6] : CT_OP_MATMUL;
        return c.op == d->op ? numel_of(d) : ct_node_flops(g, &c);
    }
    case CT_COST_MATMUL: { /* 2*M*N*K per batch: out numel x K */
        int64_t k = d->ia[0] ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
        return 2.0 * numel_of(d) * (double)k;
    }
    case CT_COST_LINEAR: /* 2 * rows * in * out (the bias add is not counted) */
        return 2.0 * numel_of(d) * (double)a->shape[a->ndim - 1];
    case CT_COST_CONV2D: /* 2 * out numel * (C/groups * KH * KW); the weight is in[1] */
        return b ? 2.0 * numel_of(d) * (double)(b->shape[1] * b->shape[2] * b->shape[3]) : numel_of(d);
    case CT_COST_CONV2D_BWD: { /* data: in dy, w: 2 * numel(dy) * C/g*KH*KW; weight: in dy, x; out = w's shape */
        const ct_node_def *w = d->op == CT_OP_CONV2D_BWD_DATA ? b : d;
        return w ? 2.0 * numel_of(a) * (double)(w->shape[1] * w->shape[2] * w->shape[3]) : numel_of(d);
    }
    case CT_COST_ATTENTION: { /* forward: q k^T and p v: 4*B*T*T*D, half of it when causal;
                                 backward: recomputed q k^T, then dV, dP, dQ, dK: 10*B*T*T*D */
        double T = (double)d->shape[1], D = (double)(d->op == CT_OP_ATTENTION ? d->shape[2] : d->shape[2] / 3);
        double f = (d->op == CT_OP_ATTENTION ? 4.0 : 10.0) * (double)d->shape[0] * T * T * D;
        return d->ia[1] ? f / 2 : f;
    }
    case CT_COST_ELEMENTWISE:
        break;
    }
    return numel_of(d); /* elementwise-like: one flop per output element */
}

double ct_node_bytes(const ct_graph *g, const ct_node_def *d) {
    double b = numel_of(d) * (double)ct_dtype_size(d->dtype);
    for (int j = 0; j < d->n_in; j++) {
        const ct_node_def *in = &g->nodes[d->in[j]];
        b += numel_of(in) * (double)ct_dtype_size(in->dtype);
    }
    return b;
}
