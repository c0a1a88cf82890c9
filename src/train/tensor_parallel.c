/* src/train/tensor_parallel.c - what the trainer adds for tensor parallelism
 * (recipe key tensor_parallel; docs/distributed.md). The model's layers are
 * split by the builders (src/models/transformer.c) over the graph's tensor
 * group; here: the process groups, the gradients of the parameters every
 * tensor rank holds a copy of (layernorms, the biases after row-parallel
 * layers: reduced with grad_reduce_method), and the step's global decisions
 * (overflow, all-zero gradients, the clipping norm) over the tensor group,
 * where each rank holds only its shards. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "train_internal.h"

ct_status ct_tp_setup(ct_run *R) {
    const ct_recipe *r = R->r;
    R->world_comm = R->comm;
    R->tp_size = 1;
    if (r->tensor_parallel <= 1) return ct_tp_grid(R, 1);
    ct_context *ctx = R->ctx;
    const int T = r->tensor_parallel;
    if (r->model != CT_MODEL_GPT && r->model != CT_MODEL_BERT)
        return ct_set_error(ctx, CT_E_CONFIG, "tensor_parallel %d: only gpt and bert models split across ranks, not "
                            "'%s'; use data parallelism (tensor_parallel 1) for it", T, ct_model_name(r->model));
    if (r->optim.kind == CT_OPTIM_LAMB)
        return ct_set_error(ctx, CT_E_CONFIG, "tensor_parallel %d with optimizer lamb: LAMB's per-tensor trust ratio "
                            "needs each whole tensor's norm, which tensor parallelism does not compute yet; use adamw",
                            T);
    if (r->deterministic)
        return ct_set_error(ctx, CT_E_CONFIG, "tensor_parallel %d with deterministic: true is not built yet "
                            "(row-parallel layers add the ranks' partial sums in another order than one process); "
                            "use deterministic false", T);
    if (r->grad_compression != CT_GRAD_COMPRESSION_NONE)
        return ct_set_error(ctx, CT_E_CONFIG, "tensor_parallel %d with grad_compression: the compression residuals "
                            "are not saved per tensor rank yet; use grad_compression none", T);
    if (r->memory_budget > 0)
        return ct_set_error(ctx, CT_E_CONFIG, "tensor_parallel %d with memory_budget: the budget's trial steps are not "
                            "coordinated across a tensor group yet; remove memory_budget", T);
    if (ct_comm_size(R->comm) % T)
        return ct_set_error(ctx, CT_E_CONFIG, "tensor_parallel %d does not divide the %d ranks: start a multiple of %d "
                            "ranks (mpirun -np %d), or another tensor_parallel", T, ct_comm_size(R->comm), T, T);
    return ct_tp_grid(R, T);
}

/* The grid tensor x data x pipeline (R->pp_size from ct_pp_setup): R->comm becomes the data group; R->tp and
 * R->pp the tensor and pipeline groups (NULL when of size 1). Nothing without either. */
ct_status ct_tp_grid(ct_run *R, int T) {
    if (T <= 1 && R->pp_size <= 1) return CT_OK;
    ct_context *ctx = R->ctx;
    ct_comm_set_context(R->comm, ctx);
    CT_TRY(ct_comm_grid_create(R->comm, T, R->pp_size, &R->grid));
    if (T > 1) {
        R->tp = R->grid->tensor_group;
        R->tp_rank = R->grid->tensor_rank;
        R->tp_size = T;
        ct_comm_set_context(R->tp, ctx);
    }
    if (R->pp_size > 1) {
        R->pp = R->grid->pipeline_group;
        R->pp_rank = R->grid->pipeline_rank;
        ct_comm_set_context(R->pp, ctx);
    }
    R->comm = R->grid->data_group;
    R->rank = R->grid->data_rank;
    R->world = R->grid->data;
    ct_comm_set_context(R->comm, ctx);
    return CT_OK;
}

ct_status ct_tp_bind(ct_run *R) {
    if (!R->tp) return CT_OK;
    float *par, *grad;
    size_t n;
    CT_TRY(ct_plan_param_arena(R->plan, &par, &grad, &n));
    const int np = ct_plan_num_params(R->plan);
    int sharded = 0;
    R->tp_copy_ranges = calloc(2 * (size_t)np + 2, sizeof *R->tp_copy_ranges);
    if (!R->tp_copy_ranges) return ct_set_error(R->ctx, CT_E_OOM, "out of memory");
    for (int i = 0; i < np; i++) {
        ct_shard sh;
        ct_tensor g;
        CT_TRY(ct_plan_param_shard(R->plan, i, &sh));
        CT_TRY(ct_plan_param_info(R->plan, i, NULL, NULL, &g));
        if (sh.dim >= 0) {
            sharded++;
            continue;
        }
        size_t *rg = R->tp_copy_ranges + 2 * R->n_tp_copy_ranges++;
        rg[0] = (size_t)((float *)g.data - grad);
        rg[1] = (size_t)ct_tensor_numel(&g);
        R->n_tp_copies += rg[1];
    }
    if (!sharded)
        return ct_set_error(R->ctx, CT_E_CONFIG, "tensor_parallel %d: the model was built whole on every rank (no "
                            "parameter is split); its builder does not take the graph's tensor group", R->tp_size);
    /* one seed per tensor group: the shards are cut from the same whole tensors, the dropout masks are equal */
    uint64_t seed = ct_context_seed(R->ctx);
    CT_TRY(ct_comm_agree(R->tp, "the context seed", ct_hash64(&seed, sizeof seed, CT_HASH64_INIT),
                         "give every rank of a tensor group the same seed (ctrain train does)"));
    if (!(R->tp_copies = malloc((R->n_tp_copies + 1) * sizeof(float))))
        return ct_set_error(R->ctx, CT_E_OOM, "out of memory for the replicated parameters' gradients (%zu floats)",
                            R->n_tp_copies);
    return CT_OK;
}

/* Each copy's gradient is the same on every tensor rank in exact arithmetic (its inputs and output gradient
 * are); the reduction keeps the copies equal bit for bit (mean) or applies the seeds' sum. */
ct_status ct_tp_reduce_copies(ct_run *R) {
    if (!R->tp || !R->n_tp_copies) return CT_OK;
    float *grad;
    CT_TRY(ct_plan_param_arena(R->plan, NULL, &grad, NULL));
    size_t o = 0;
    for (int i = 0; i < R->n_tp_copy_ranges; i++) {
        const size_t *rg = R->tp_copy_ranges + 2 * i;
        memcpy(R->tp_copies + o, grad + rg[0], rg[1] * sizeof(float));
        o += rg[1];
    }
    CT_TRY(ct_comm_allreduce_f32(R->tp, R->tp_copies, R->n_tp_copies,
                                 R->r->grad_reduce_method == 1 ? CT_REDUCE_SUM : CT_REDUCE_AVG));
    o = 0;
    for (int i = 0; i < R->n_tp_copy_ranges; i++) {
        const size_t *rg = R->tp_copy_ranges + 2 * i;
        memcpy(grad + rg[0], R->tp_copies + o, rg[1] * sizeof(float));
        o += rg[1];
    }
    return CT_OK;
}

/* Sum of squares of [b, e) without the ranges rg (n pairs [offset, floats], in arena order). */
static double sumsq_skip(const float *g, size_t b, size_t e, const size_t *rg, int n) {
    double ss = 0.0;
    size_t i = b;
    for (int c = 0; c < n && i < e; c++, rg += 2) {
        for (; i < e && i < rg[0]; i++) ss += (double)g[i] * (double)g[i];
        if (i < rg[0] + rg[1]) i = rg[0] + rg[1];
    }
    for (; i < e; i++) ss += (double)g[i] * (double)g[i];
    return ss;
}

/* The copies every tensor rank holds count on tensor rank 0 only, a pipeline's tied parameters on their lowest
 * stage only (both lists in arena order; a parameter is in at most one: tied parameters are whole tensors). */
double ct_run_sumsq(const ct_run *R, const float *g, size_t b, size_t e) {
    const size_t *tc = R->tp_copy_ranges;
    const int ntc = R->tp && R->tp_rank > 0 ? R->n_tp_copy_ranges : 0;
    double ss = 0.0;
    size_t i = b;
    for (int t = 0; t < R->n_pp_skip && i < e; t++) {
        const size_t off = R->pp_skip[2 * t], n = R->pp_skip[2 * t + 1];
        if (off > i) ss += sumsq_skip(g, i, off < e ? off : e, tc, ntc);
        if (off + n > i) i = off + n;
    }
    if (i < e) ss += sumsq_skip(g, i, e, tc, ntc);
    return ss;
}

void ct_tp_free(ct_run *R) {
    free(R->tp_copy_ranges);
    free(R->tp_copies);
    R->tp_copy_ranges = NULL;
    R->tp_copies = NULL;
    ct_comm_grid_free(R->grid);
    R->grid = NULL;
}
