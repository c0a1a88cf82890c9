/* src/train/deterministic.c - the deterministic mode (deterministic: true,
 * docs/distributed.md), the trainer's part: every global batch is cut into
 * K chunks; the plan is built for one chunk; rank r computes chunks
 * [r*K/N, (r+1)*K/N), keeps their gradients apart and adds them in a
 * pairwise tree, and the ranks add their subtrees with
 * ct_comm_tree_allreduce_f32: the same binary tree of additions whatever N,
 * so the same bits.
 *
 * With accumulate_steps A (a power of two) a step covers A global batches,
 * A x K leaves: chunk k of batch a is leaf g = k*A + a, so rank r holds the
 * contiguous leaves [r*K/N*A, (r+1)*K/N*A) (its chunks of every batch) and
 * the tree is the same at any N. This rank's micro-batch m is leaf
 * r*K/N*A + m: batch a = m % A, chunk r*K/N + m / A (ct_task.chunk,
 * ct_step_first_sample). */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "train_internal.h"

struct ct_det {
    ct_context *ctx;
    ct_comm *c;
    ct_plan *plan;
    int rank, world;
    size_t n;              /* floats in the gradient arena                        */
    int chunks, local;     /* K, and this rank's leaves: K / N chunks x A batches    */
    int accum;             /* A: the global batches of a step                        */
    float *level[8];       /* the pairwise tree's pending left subtrees           */
    float *tmp;            /* the tree allreduce's receive buffer                  */
    double *losses;        /* this rank's leaf losses, then all A x K in leaf order  */
};

static int is_pow2(int x) { return x > 0 && !(x & (x - 1)); }

ct_status ct_det_check(ct_context *ctx, const ct_recipe *r, ct_task *t, int world) {
    if (!r->deterministic) return CT_OK;
    const int K = r->deterministic_chunks;
    if (!is_pow2(world) || K % world || !is_pow2(K / world) || K / world > 128)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "deterministic: true with deterministic_chunks %d needs a power-of-two number of ranks that "
                            "divides it (1, 2, 4, ... up to %d), not %d ranks",
                            K, K, world);
    if (r->batch_size % K)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "deterministic: true cuts every batch into deterministic_chunks %d chunks: batch_size %lld "
                            "does not divide by it; use a multiple of %d",
                            K, (long long)r->batch_size, K);
    const int A = r->accumulate_steps;
    if (!is_pow2(A) || (K / world) * A > 128)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "deterministic: true with accumulate_steps %d needs a power of two (1, 2, 4, ...) with "
                            "deterministic_chunks / ranks x accumulate_steps at most 128 (it is %d): the chunks of the "
                            "step's %d global batches are the leaves of one fixed tree",
                            A, (K / world) * A, A);
    if (A > 1 && r->pipeline_stages > 1)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "deterministic: true with pipeline_stages %d needs micro_batches (accumulate_steps) 1, "
                            "not %d: the pipeline's micro-batches are the chunks",
                            r->pipeline_stages, A);
    if (!t->chunk)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "deterministic: true is not supported by the %s task yet (it has no ct_task.chunk); the "
                            "image models and the text tasks (gpt, bert) support it",
                            t->name ? t->name : "custom");
    return CT_OK;
}

ct_status ct_det_create(ct_context *ctx, ct_comm *c, const ct_recipe *r, ct_plan *p, ct_det **out) {
    *out = NULL;
    if (!r->deterministic) return CT_OK;
    ct_det *z = calloc(1, sizeof *z);
    if (!z) return ct_set_error(ctx, CT_E_OOM, "out of memory");
    z->ctx = ctx, z->c = c, z->plan = p;
    z->rank = ct_comm_rank(c);
    z->world = ct_comm_size(c);
    ct_status s = ct_plan_param_arena(p, NULL, NULL, &z->n);
    z->chunks = r->deterministic_chunks;
    z->accum = r->accumulate_steps;
    z->local = z->chunks / z->world * z->accum;
    int levels = 0;
    while ((1 << levels) < z->local) levels++;
    for (int l = 0; l < levels && s == CT_OK; l++)
        if (!(z->level[l] = malloc(CT_MAX(z->n, (size_t)1) * sizeof(float))))
            s = ct_set_error(ctx, CT_E_OOM, "deterministic: out of memory for the chunk gradients (%zu floats)", z->n);
    if (s == CT_OK && z->world > 1 && !(z->tmp = malloc(CT_MAX(z->n, (size_t)1) * sizeof(float))))
        s = ct_set_error(ctx, CT_E_OOM, "deterministic: out of memory for the tree allreduce (%zu floats)", z->n);
    if (s == CT_OK && !(z->losses = calloc((size_t)(z->chunks * z->accum), sizeof(double))))
        s = ct_set_error(ctx, CT_E_OOM, "out of memory");
    if (s != CT_OK) {
        ct_det_free(z);
        return s;
    }
    *out = z;
    return CT_OK;
}

void ct_det_free(ct_det *z) {
    if (!z) return;
    for (int l = 0; l < 8; l++) free(z->level[l]);
    free(z->tmp);
    free(z->losses);
    free(z);
}

int ct_det_local_chunks(const ct_det *z) { return z ? z->local : 1; }

ct_status ct_det_push(ct_det *z, int micro, double loss) {
    float *g;
    size_t n;
    CT_TRY(ct_plan_param_arena(z->plan, NULL, &g, &n));
    z->losses[micro] = loss;
    int i = micro, l = 0;
    for (; i & 1; i >>= 1, l++) { /* a completed pair: the left subtree (lower chunks) + this one */
        const float *left = z->level[l];
        for (size_t k = 0; k < n; k++) g[k] = left[k] + g[k];
    }
    if (micro < z->local - 1) memcpy(z->level[l], g, n * sizeof(float));
    return CT_OK;
}

double *ct_det_losses(ct_det *z) { return z ? z->losses : NULL; }

ct_status ct_det_reduce(ct_det *z, double *loss) {
    float *g;
    size_t n;
    CT_TRY(ct_plan_param_arena(z->plan, NULL, &g, &n));
    CT_TRY(ct_comm_tree_allreduce_f32(z->c, g, n, z->tmp));
    /* the leaf losses in leaf order (the ranks' in rank order), summed in that order: the same double at any
     * world size */
    if (z->world > 1) {
        double *mine = malloc((size_t)z->local * sizeof(double));
        if (!mine) return ct_set_error(z->ctx, CT_E_OOM, "out of memory");
        memcpy(mine, z->losses, (size_t)z->local * sizeof(double));
        ct_status s = ct_comm_allgather(z->c, mine, (size_t)z->local * sizeof(double), z->losses);
        free(mine);
        CT_TRY(s);
    }
    double sum = 0.0;
    for (int k = 0; k < z->chunks * z->accum; k++) sum += z->losses[k];
    *loss = sum / z->chunks; /* the A batches' mean losses, summed */
    return CT_OK;
}
