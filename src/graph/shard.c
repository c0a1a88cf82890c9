/* src/graph/shard.c - tensor parallelism's bookkeeping: the graph's tensor
 * group, the shards of parameters (which part of the whole tensor each
 * rank holds) and the copies between a whole tensor and a shard that
 * initialization and checkpoints use. The collective ops are in tp_ops.c (builders) and tp_kernels.c. */
#include <string.h>

#include "ctrain/dist.h"
#include "plan.h"

ct_status ct_graph_set_tensor_group(ct_graph *g, ct_comm *group) {
    if (!g) return CT_E_INVALID_ARG;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == CT_OP_PARAM)
            return ct_set_error(g->ctx, CT_E_INVALID_ARG,
                                "ct_graph_set_tensor_group: the graph has parameters already ('%s'); set the tensor "
                                "group before building the model",
                                g->nodes[i].name);
    g->tp = ct_comm_size(group) > 1 ? group : NULL;
    g->tp_rank = g->tp ? ct_comm_rank(group) : 0;
    g->tp_size = g->tp ? ct_comm_size(group) : 1;
    return CT_OK;
}

ct_comm *ct_graph_tensor_group(const ct_graph *g) { return g ? g->tp : NULL; }
int ct_graph_tensor_rank(const ct_graph *g) { return g ? g->tp_rank : 0; }
int ct_graph_tensor_size(const ct_graph *g) { return g && g->tp_size > 1 ? g->tp_size : 1; }

ct_status ct_param_set_shard(ct_graph *g, ct_node p, int dim, int groups, int64_t full) {
    if (!g) return CT_E_INVALID_ARG;
    CT_TRY(ct_graph_check_node(g, p, "param_set_shard"));
    ct_node_def *d = &g->nodes[p];
    int T = ct_graph_tensor_size(g);
    if (d->op != CT_OP_PARAM || dim < 0 || dim >= d->ndim || groups < 1 || d->shape[dim] % groups ||
        full < 1 || full > d->shape[dim] * T)
        return ct_set_error(g->ctx, CT_E_INVALID_ARG,
                            "param_set_shard '%s': dim %d, groups %d, full %lld do not fit a param of %d dims whose "
                            "dim has %lld elements on each of %d ranks",
                            d->name, dim, groups, (long long)full, d->ndim, d->op == CT_OP_PARAM && dim >= 0 &&
                            dim < d->ndim ? (long long)d->shape[dim] : 0LL, T);
    if (T == 1 && full == d->shape[dim]) return CT_OK; /* the whole tensor */
    d->ia[CT_SHARD_IA_DIM] = dim + 1;
    d->ia[CT_SHARD_IA_GROUPS] = groups;
    d->ia[CT_SHARD_IA_FULL] = full;
    d->ia[CT_SHARD_IA_PADDED] = d->shape[dim] * T;
    return CT_OK;
}

void ct_node_shard(const ct_graph *g, const ct_node_def *d, ct_shard *out) {
    memset(out, 0, sizeof *out);
    out->dim = -1;
    out->groups = 1;
    out->rank = ct_graph_tensor_rank(g);
    out->ranks = ct_graph_tensor_size(g);
    if (d->op != CT_OP_PARAM || !d->ia[CT_SHARD_IA_DIM]) return;
    out->dim = (int)d->ia[CT_SHARD_IA_DIM] - 1;
    out->groups = (int)d->ia[CT_SHARD_IA_GROUPS];
    out->full = d->ia[CT_SHARD_IA_FULL];
    out->padded = d->ia[CT_SHARD_IA_PADDED];
}

void ct_shard_full_shape(const ct_shard *s, int ndim, const int64_t *shard_shape, int64_t *full_shape) {
    for (int i = 0; i < ndim; i++) full_shape[i] = shard_shape[i];
    if (s->dim >= 0 && s->dim < ndim) full_shape[s->dim] = s->full;
}

/* The tensor as outer x dim x inner: each shard index k along dim maps to
 * whole index (block g, slice `rank`, offset within); runs of `inner`
 * elements are contiguous on both sides. */
void ct_shard_copy(const ct_shard *s, int ndim, const int64_t *shard_shape, float *whole, float *shard, int to_shard) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shard_shape[i];
    if (s->dim < 0) {
        if (to_shard) memcpy(shard, whole, (size_t)n * sizeof(float));
        else memcpy(whole, shard, (size_t)n * sizeof(float));
        return;
    }
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < s->dim; i++) outer *= shard_shape[i];
    for (int i = s->dim + 1; i < ndim; i++) inner *= shard_shape[i];
    const int64_t ls = shard_shape[s->dim], block = s->padded / s->groups, slice = block / s->ranks;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < ls; k++) {
            int64_t g = k / slice, w = g * block + (int64_t)s->rank * slice + k % slice;
            float *sp = shard + (o * ls + k) * inner;
            if (w >= s->full) { /* padding */
                if (to_shard) memset(sp, 0, (size_t)inner * sizeof(float));
                continue;
            }
            float *wp = whole + (o * s->full + w) * inner;
            if (to_shard) memcpy(sp, wp, (size_t)inner * sizeof(float));
            else memcpy(wp, sp, (size_t)inner * sizeof(float));
        }
}

ct_status ct_plan_param_shard(const ct_plan *p, int i, ct_shard *out) {
    if (!p || !out || i < 0 || i >= p->n_params) return CT_E_INVALID_ARG;
    ct_node_shard(&p->g, &p->g.nodes[p->params[i]], out);
    return CT_OK;
}

ct_comm *ct_plan_tensor_group(const ct_plan *p) { return p ? p->g.tp : NULL; }
