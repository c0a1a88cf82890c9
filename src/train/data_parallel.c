/* src/train/data_parallel.c - what the trainer does on several ranks
 * (ct_train_opts.comm; docs/distributed.md), each part a call on the
 * communicator of src/comm/:
 *   start:      the task's share of every global batch (ct_task.shard), the
 *               per-rank recipe (batch_size / world), the ranks agree on the
 *               recipe and the plan (hashes), rank 0's weights and buffers
 *               go to every rank;
 *   each step:  the gradient arena summed by one allreduce after the last
 *               micro-batch's backward (nothing on the others; the trainer
 *               scales each rank's loss gradient by 1 / world, so the sum is
 *               the global batch's mean), the step's loss / correct / rows
 *               summed;
 *   evaluation: rank 0's buffers (batchnorm running statistics) first, each
 *               rank evaluates its part, the parts combined by their counts
 *               (and the task's detail line written again);
 *   checkpoint: rank 0's buffers, a check that the weights are the same bits
 *               on every rank, rank 0 writes, the others wait (barrier), and
 *               rank 0's status reaches everyone.
 * With one rank every function is a no-op (or the plain call). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "train_internal.h"

ct_status ct_dp_setup(ct_context *ctx, ct_comm *c, ct_task *t, const ct_recipe *r, ct_recipe *local) {
    const int world = ct_comm_size(c), rank = ct_comm_rank(c);
    *local = *r;
    if (world == 1) return CT_OK;
    ct_comm_set_context(c, ctx);
    if (!t->shard)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "the %s task has no data parallel support (ct_task.shard): train it in one process "
                            "(without mpirun), or give the task a shard function (include/ctrain/train.h)",
                            t->name ? t->name : "custom");
    if (r->batch_size % world)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "batch_size %lld does not divide by the %d ranks: batch_size is the global batch, of which "
                            "each rank reads batch_size / ranks rows; use a multiple of %d (e.g. %lld) or another "
                            "number of ranks (docs/distributed.md)",
                            (long long)r->batch_size, world, world,
                            (long long)((r->batch_size / world + 1) * world));
    local->batch_size = r->batch_size / world;
    return t->shard(t, rank, world);
}

/* The plan as every rank must build it: each parameter's and buffer's name,
 * dtype and shape, the arena sizes and the task's one-line description (the
 * data's size, the model). */
static uint64_t plan_hash(ct_plan *p, ct_task *t) {
    uint64_t h = CT_HASH64_INIT;
    for (int i = 0; i < ct_plan_num_params(p) + ct_plan_num_buffers(p); i++) {
        const char *name = NULL;
        ct_tensor v;
        memset(&v, 0, sizeof v);
        if (i < ct_plan_num_params(p)) ct_plan_param_info(p, i, &name, &v, NULL);
        else ct_plan_buffer_info(p, i - ct_plan_num_params(p), &name, &v);
        if (name) h = ct_hash64(name, strlen(name) + 1, h);
        h = ct_hash64(&v.dtype, sizeof v.dtype, h);
        h = ct_hash64(&v.ndim, sizeof v.ndim, h);
        h = ct_hash64(v.shape, sizeof v.shape[0] * (size_t)v.ndim, h);
    }
    float *par, *buf;
    size_t n_par = 0, n_buf = 0;
    ct_plan_param_arena(p, &par, NULL, &n_par);
    ct_plan_buffer_arena(p, &buf, &n_buf);
    h = ct_hash64(&n_par, sizeof n_par, h);
    h = ct_hash64(&n_buf, sizeof n_buf, h);
    ct_plan_stats ps;
    ct_plan_get_stats(p, &ps);
    char line[1024] = "";
    t->describe(t, &ps, line, sizeof line);
    return ct_hash64(line, strlen(line), h);
}

ct_status ct_dp_agree_recipe(ct_context *ctx, ct_comm *c, const ct_recipe *r) {
    if (ct_comm_size(c) == 1) return CT_OK;
    char *json = malloc(65536);
    if (!json) return ct_set_error(ctx, CT_E_OOM, "out of memory");
    int n = ct_recipe_to_json_full(r, json, 65536);
    uint64_t h = n > 0 && n < 65536 ? ct_hash64(json, (size_t)n, CT_HASH64_INIT) : 0;
    free(json);
    if (n < 0 || n >= 65536) return ct_set_error(ctx, CT_E_CONFIG, "the recipe does not fit in 64 KiB of JSON");
    CT_TRY(ct_comm_agree(c, "the recipe", h,
                         "every rank must run the same recipe: the same --recipe file and flags (and --resume the "
                         "same checkpoint)"));
    return CT_OK;
}

ct_status ct_dp_agree(ct_context *ctx, ct_comm *c, const ct_recipe *r, ct_plan *p, ct_task *t) {
    if (ct_comm_size(c) == 1) return CT_OK;
    CT_TRY(ct_dp_agree_recipe(ctx, c, r));
    return ct_comm_agree(c, "the plan (parameters, buffers, data sizes)", plan_hash(p, t),
                         "every rank must build the same model from the same data: check that data_dir holds the same "
                         "files on every host");
}

ct_status ct_dp_broadcast_state(ct_comm *c, ct_plan *p, int buffers_only) {
    if (ct_comm_size(c) == 1) return CT_OK;
    float *par, *buf;
    size_t n_par = 0, n_buf = 0;
    CT_TRY(ct_plan_param_arena(p, &par, NULL, &n_par));
    CT_TRY(ct_plan_buffer_arena(p, &buf, &n_buf));
    if (!buffers_only && n_par) CT_TRY(ct_comm_broadcast(c, par, n_par * sizeof(float), 0));
    if (n_buf) CT_TRY(ct_comm_broadcast(c, buf, n_buf * sizeof(float), 0));
    return CT_OK;
}

ct_status ct_dp_same_weights(ct_context *ctx, ct_comm *c, ct_plan *p, const char *when) {
    if (ct_comm_size(c) == 1) return CT_OK;
    float *par, *buf;
    size_t n_par = 0, n_buf = 0;
    CT_TRY(ct_plan_param_arena(p, &par, NULL, &n_par));
    CT_TRY(ct_plan_buffer_arena(p, &buf, &n_buf));
    uint64_t h = ct_hash64(par, n_par * sizeof(float), CT_HASH64_INIT);
    h = ct_hash64(buf, n_buf * sizeof(float), h);
    char what[128];
    snprintf(what, sizeof what, "the weights %s", when);
    (void)ctx;
    return ct_comm_agree(c, what, h,
                         "the ranks' weights diverged although their gradients were averaged: this is a bug in ctrain "
                         "or in the MPI library's reduction, please report it");
}

ct_status ct_dp_reduce_grads(ct_comm *c, ct_plan *p) {
    if (ct_comm_size(c) == 1) return CT_OK;
    float *g;
    size_t n = 0;
    CT_TRY(ct_plan_param_arena(p, NULL, &g, &n));
    return ct_comm_allreduce_f32(c, g, n, CT_REDUCE_SUM); /* each rank's loss was scaled by 1 / world */
}

ct_status ct_dp_reduce_step(ct_comm *c, double *loss, double *correct, double *rows, double *units) {
    if (ct_comm_size(c) == 1) return CT_OK;
    double v[4] = {*loss, *correct, *rows, *units};
    CT_TRY(ct_comm_allreduce_f64(c, v, 4, CT_REDUCE_SUM));
    *units = v[3];
    *loss = v[0] / ct_comm_size(c); /* the ranks' shares are equal: the mean of their means */
    *correct = v[1];
    *rows = v[2];
    return CT_OK;
}

ct_status ct_dp_reduce_eval(ct_comm *c, ct_task *t, ct_task_eval *ev) {
    if (ct_comm_size(c) == 1) return CT_OK;
    double v[4] = {ev->loss * ev->count, ev->accuracy * ev->count, ev->count, ev->rows};
    CT_TRY(ct_comm_allreduce_f64(c, v, 4, CT_REDUCE_SUM));
    ev->loss = v[2] > 0 ? v[0] / v[2] : 0.0;
    ev->accuracy = v[2] > 0 ? v[1] / v[2] : 0.0;
    ev->count = v[2];
    ev->rows = v[3];
    if (t->eval_detail) t->eval_detail(t, ev);
    return CT_OK;
}

ct_status ct_dp_after_save(ct_context *ctx, ct_comm *c, ct_status s) {
    if (ct_comm_size(c) == 1) return s;
    CT_TRY(ct_comm_barrier(c)); /* the others sleep here while rank 0 writes */
    int32_t st = (int32_t)s;
    CT_TRY(ct_comm_broadcast(c, &st, sizeof st, 0));
    if (ct_comm_rank(c) == 0 || st == CT_OK) return s;
    return ct_set_error(ctx, (ct_status)st, "rank 0 could not write the checkpoint (%s): see rank 0's message",
                        ct_status_name((ct_status)st));
}
