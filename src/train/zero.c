/* src/train/zero.c - ZeRO stages 1 and 2, the
 * trainer's parts (docs/distributed.md):
 *
 * ZeRO (zero_stage 1 | 2): the gradient arena is cut into one segment per
 * rank (multiples of 64 floats, the last one shorter); after backward the
 * gradients are reduce-scattered (each rank gets the sum of its segment), the
 * rest of the arena is zeroed, the optimizer (its state allocated for the
 * segment only: ct_optimizer_set_shard) updates this rank's parameters, and
 * an allgather gives every rank every parameter again. The loss scaler's
 * overflow flag and the clipping norm are combined over the ranks. Stage 2
 * also hands the pages of the gradient arena outside this rank's segment back
 * to the operating system after the reduce-scatter (madvise MADV_DONTNEED;
 * they read as zeros and come back when backward writes them): between
 * steps the full gradient is not resident. The planner allocates the
 * gradient arena as one block for backward, so at the end of backward the
 * full gradient is still there: stage 2 lowers the memory between steps, not
 * the peak (that needs the reduce-scatter per bucket during backward).
 * LAMB's trust ratios: each rank sums w^2 and u^2 per tensor over its segment
 * and the optimizer's reduce callback (lamb_reduce) adds them over the ranks.
 * Checkpoints stay whole: rank 0 gathers the state shards before writing.
 * The deterministic mode is deterministic.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/internal.h"
#include "train_internal.h"

struct ct_zero {
    ct_context *ctx;
    ct_comm *c;
    ct_plan *plan;
    ct_optimizer *opt;
    int stage, rank, world;
    size_t n;              /* floats in the parameter / gradient arena           */
    size_t *counts, *offs; /* each rank's segment                                  */
    float *tmp;            /* the ring's receive buffer (the largest segment)      */
    int madvise_ok;        /* stage 2: released pages read back as zeros            */
};

ct_status ct_zero_check(ct_context *ctx, const ct_recipe *r) {
    if (r->zero_stage > 0 && r->deterministic)
        return ct_set_error(ctx, CT_E_CONFIG,
                            "zero_stage %d and deterministic: true do not go together yet: the deterministic mode "
                            "reduces whole gradients in a fixed tree; use zero_stage 0 with it",
                            r->zero_stage);
    return CT_OK;
}

ct_status ct_zero_create(ct_context *ctx, ct_comm *c, const ct_recipe *r, ct_plan *p, ct_zero **out) {
    *out = NULL;
    if (r->zero_stage == 0) return CT_OK;
    ct_zero *z = calloc(1, sizeof *z);
    if (!z) return ct_set_error(ctx, CT_E_OOM, "out of memory");
    z->ctx = ctx, z->c = c, z->plan = p;
    z->stage = r->zero_stage;
    z->rank = ct_comm_rank(c);
    z->world = ct_comm_size(c);
    ct_status s = ct_plan_param_arena(p, NULL, NULL, &z->n);
    z->counts = calloc((size_t)z->world, sizeof(size_t));
    z->offs = calloc((size_t)z->world + 1, sizeof(size_t));
    if (s == CT_OK && (!z->counts || !z->offs)) s = ct_set_error(ctx, CT_E_OOM, "out of memory");
    if (s == CT_OK) {
        size_t per = ct_align_up((z->n + (size_t)z->world - 1) / (size_t)z->world, 64), mx = 0;
        for (int k = 0; k < z->world; k++) {
            z->offs[k] = CT_MIN((size_t)k * per, z->n);
            z->counts[k] = CT_MIN(per, z->n - z->offs[k]);
            mx = CT_MAX(mx, z->counts[k]);
        }
        z->offs[z->world] = z->n;
        z->madvise_ok = z->stage == 2;
        if (z->world > 1 && !(z->tmp = malloc(CT_MAX(mx, (size_t)1) * sizeof(float))))
            s = ct_set_error(ctx, CT_E_OOM, "out of memory for the reduce-scatter buffer (%zu floats)", mx);
    }
    if (s != CT_OK) {
        ct_zero_free(z);
        return s;
    }
    *out = z;
    return CT_OK;
}

/* LAMB's per-tensor sums of w^2 and u^2 over every rank's segment (ct_optimizer_set_reduce). */
static ct_status lamb_reduce(void *user, double *x, size_t n) {
    return ct_comm_allreduce_f64(((ct_zero *)user)->c, x, n, CT_REDUCE_SUM);
}

ct_status ct_zero_optimizer_create(ct_zero *z, ct_plan *p, const ct_optim_opts *o, int whole, ct_optimizer **out) {
    if (!z || z->stage == 0 || whole) CT_TRY(ct_optimizer_create(p, o, out));
    else CT_TRY(ct_optimizer_create_shard(p, o, z->offs[z->rank], z->offs[z->rank] + z->counts[z->rank], out));
    if (z && z->stage > 0 && o->kind == CT_OPTIM_LAMB) CT_TRY(ct_optimizer_set_reduce(*out, lamb_reduce, z));
    if (z) z->opt = *out;
    return CT_OK;
}

void ct_zero_free(ct_zero *z) {
    if (!z) return;
    free(z->counts);
    free(z->offs);
    free(z->tmp);
    free(z);
}

int ct_zero_stage(const ct_zero *z) { return z ? z->stage : 0; }

ct_status ct_zero_shard(ct_zero *z) {
    if (!z || z->stage == 0) return CT_OK;
    size_t b, e;
    ct_optimizer_shard(z->opt, &b, &e);
    if (b == z->offs[z->rank] && e == b + z->counts[z->rank]) return CT_OK; /* created as the shard */
    return ct_optimizer_set_shard(z->opt, z->offs[z->rank], z->offs[z->rank] + z->counts[z->rank]);
}

/* Stage 2: the whole pages of g[b, e) back to the system, the partial ones zeroed. */
static void release(ct_zero *z, float *g, size_t b, size_t e) {
    if (b >= e) return;
    char *lo = (char *)(g + b), *hi = (char *)(g + e);
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    char *a = (char *)(((uintptr_t)lo + pg - 1) / pg * pg), *d = (char *)((uintptr_t)hi / pg * pg);
    if (z->madvise_ok && a < d && madvise(a, (size_t)(d - a), MADV_DONTNEED) == 0 && *(volatile float *)a == 0.0f &&
        *(volatile float *)(d - sizeof(float)) == 0.0f) {
        memset(lo, 0, (size_t)(a - lo));
        memset(d, 0, (size_t)(hi - d));
        return;
    }
    if (a < d) z->madvise_ok = 0; /* the memory did not give pages back as zeros: from now on plain zeros */
    memset(lo, 0, (size_t)(hi - lo));
}

ct_status ct_zero_reduce_grads(ct_zero *z) {
    float *g;
    size_t n;
    CT_TRY(ct_plan_param_arena(z->plan, NULL, &g, &n));
    CT_TRY(ct_comm_reduce_scatter_f32(z->c, g, z->counts, CT_RS_AUTO, z->tmp));
    if (z->world == 1) return CT_OK;
    const size_t b = z->offs[z->rank], e = b + z->counts[z->rank];
    if (z->stage == 2) {
        release(z, g, 0, b);
        release(z, g, e, n);
    } else {
        memset(g, 0, b * sizeof(float));
        memset(g + e, 0, (n - e) * sizeof(float));
    }
    return CT_OK;
}

void ct_zero_segment(const ct_zero *z, size_t *b, size_t *e) {
    if (!z || z->stage == 0) return;
    *b = z->offs[z->rank];
    *e = *b + z->counts[z->rank];
}

ct_status ct_zero_allgather_params(ct_zero *z) {
    float *p;
    CT_TRY(ct_plan_param_arena(z->plan, &p, NULL, NULL));
    return ct_comm_allgatherv_f32(z->c, p, z->counts);
}

/* Checkpoint: whole = 1 gathers every block of the optimizer state into rank 0's optimizer (made whole);
 * whole = 0 makes rank 0 a shard again. The other ranks keep their shards. */
ct_status ct_zero_gather_state(ct_zero *z, int whole) {
    if (!z || z->stage == 0 || z->world == 1) return CT_OK;
    if (!whole) return z->rank == 0 ? ct_zero_shard(z) : CT_OK;
    float *mine, *all = NULL;
    size_t nmine;
    CT_TRY(ct_optimizer_state(z->opt, &mine, &nmine));
    const size_t len = z->counts[z->rank], blocks = len ? nmine / len : 0;
    size_t nb = blocks;
    /* every rank knows the block count from its own shard (every shard is non-empty unless n < 64 x world) */
    double bd = (double)nb;
    CT_TRY(ct_comm_allreduce_f64(z->c, &bd, 1, CT_REDUCE_MAX));
    nb = (size_t)bd;
    if (nb == 0) return CT_OK;
    float *copy = malloc(CT_MAX(nmine, (size_t)1) * sizeof(float));
    if (!copy) return ct_set_error(z->ctx, CT_E_OOM, "out of memory gathering the optimizer state");
    memcpy(copy, mine, nmine * sizeof(float));
    ct_status s = CT_OK;
    if (z->rank == 0) {
        s = ct_optimizer_set_shard(z->opt, 0, z->n);
        size_t na = 0;
        if (s == CT_OK) s = ct_optimizer_state(z->opt, &all, &na);
    }
    for (size_t k = 0; k < nb && s == CT_OK; k++)
        s = ct_comm_gatherv_f32(z->c, copy + k * len, z->counts, z->rank == 0 ? all + k * z->n : NULL, 0);
    free(copy);
    return s;
}

void ct_zero_memory(const ct_zero *z, size_t n_par, size_t state_floats, double *grads_between, double *state) {
    const double full = (double)n_par * sizeof(float);
    *state = (double)state_floats * sizeof(float);
    *grads_between = z && z->stage == 2 && z->world > 1 && z->madvise_ok ? (double)z->counts[z->rank] * sizeof(float)
                                                                          : full;
}
