/* src/train/zero.c - ZeRO, the trainer's parts (docs/distributed.md); stage 3's parameter
 * gathers are zero3.c:
 *
 * The gradient arena (and with it the parameters and the optimizer state) is
 * cut into one segment per rank (multiples of 64 floats, the last one
 * shorter). The gradient buckets run in shard mode (ct_zero_buckets_create):
 * each bucket is reduce-scattered as soon as backward finishes it, and when
 * it completes (bucket_done) stage 1 zeroes the rest of its range while
 * stages 2 and 3 hand those pages back to the operating system (madvise
 * MADV_DONTNEED; they read as zeros and come back when backward writes them),
 * so the gradients resident at once are the segment plus the buckets in
 * flight. With accumulation, stages 2 and 3 reduce every micro-batch into a
 * shard accumulator. The optimizer (its state allocated for the segment only:
 * ct_optimizer_create_shard) updates this rank's parameters; stages 1 and 2
 * then allgather them. The loss scaler's overflow flag and the clipping norm
 * are combined over the ranks (step.c). Without buckets (one rank, a pipeline
 * stage) ct_zero_reduce_grads reduce-scatters the whole arena after backward.
 * LAMB's trust ratios: each rank sums w^2 and u^2 per tensor over its segment
 * and the optimizer's reduce callback (lamb_reduce) adds them over the ranks.
 * Checkpoints stay whole: rank 0 gathers the state shards before writing.
 * The deterministic mode is deterministic.c; with ZeRO its tree allreduce
 * replaces the reduce-scatter (every rank gets the whole summed gradient,
 * checked and clipped whole: step.c), then the segment's update and the
 * allgather as here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int madvise_ok;        /* stages 2, 3: released pages read back as zeros        */
    float *grads;          /* the gradient arena                                    */
    int accum;             /* micro-batches per step                                */
    int last;              /* the micro-batch being reduced is the step's last      */
    float *acc;            /* stage >= 2 with accumulation: this rank's segment summed over the step's
                              earlier micro-batches (each reduce-scattered on its own) */
    ct_zero3 *z3;          /* stage 3: the parameter gathers (zero3.c)              */
};

ct_status ct_zero_create(ct_context *ctx, ct_comm *c, const ct_recipe *r, ct_plan *p, ct_zero **out) {
    *out = NULL;
    if (r->zero_stage == 0) return CT_OK;
    ct_zero *z = calloc(1, sizeof *z);
    if (!z) return ct_set_error(ctx, CT_E_OOM, "out of memory");
    z->ctx = ctx, z->c = c, z->plan = p;
    z->stage = r->zero_stage;
    z->rank = ct_comm_rank(c);
    z->world = ct_comm_size(c);
    z->accum = r->accumulate_steps > 0 ? r->accumulate_steps : 1;
    z->last = 1;
    ct_status s = ct_plan_param_arena(p, NULL, &z->grads, &z->n);
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
        z->madvise_ok = z->stage >= 2;
        if (z->world > 1 && !(z->tmp = malloc(CT_MAX(mx, (size_t)1) * sizeof(float))))
            s = ct_set_error(ctx, CT_E_OOM, "out of memory for the reduce-scatter buffer (%zu floats)", mx);
        if (s == CT_OK && z->stage >= 2 && z->accum > 1 && z->world > 1 &&
            !(z->acc = calloc(CT_MAX(z->counts[z->rank], (size_t)1), sizeof(float))))
            s = ct_set_error(ctx, CT_E_OOM, "out of memory for the gradient shard's accumulator (%zu floats)",
                             z->counts[z->rank]);
    }
    if (s == CT_OK && z->stage == 3) s = ct_zero3_create(ctx, c, r, p, z->offs, z->counts, &z->z3);
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
    ct_zero3_free(z->z3); /* (it reads counts and offs) */
    free(z->counts);
    free(z->offs);
    free(z->tmp);
    free(z->acc);
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
    char *lo = (char *)(g + b), *hi = (char *)(g + e), *a, *d;
    const int r = z->madvise_ok ? ct_release_pages(g, b, e, &a, &d) : 0;
    if (r == 1) {
        memset(lo, 0, (size_t)(a - lo));
        memset(d, 0, (size_t)(hi - d));
        return;
    }
    if (r < 0) z->madvise_ok = 0; /* the memory did not give pages back as zeros: from now on plain zeros */
    memset(lo, 0, (size_t)(hi - lo));
}

/* A bucket's reduce-scatter completed (on the thread that completed it): this rank's part of [off, off + n)
 * holds the sum over the ranks. Stage 1 zeroes the rest; stage 2 and 3 release it, and with accumulation
 * every micro-batch is reduced on its own: before the step's last one the part is added into the shard's
 * accumulator and released too (the next micro-batch's backward starts from zeros), in the last one the
 * accumulator is added in. */
static void bucket_done(void *user, size_t off, size_t n) {
    ct_zero *z = user;
    float *g = z->grads;
    const size_t sb = z->offs[z->rank], se = sb + z->counts[z->rank];
    size_t b = CT_MAX(off, sb), e = CT_MIN(off + n, se);
    if (b >= e) b = e = off; /* no part of this rank's segment in it */
    if (z->acc && b < e) {
        float *a = z->acc + (b - sb);
        if (!z->last) {
            for (size_t i = 0; i < e - b; i++) a[i] += g[b + i];
            b = e = off; /* all of it released */
        } else {
            for (size_t i = 0; i < e - b; i++) g[b + i] += a[i], a[i] = 0.0f;
        }
    }
    if (z->stage == 1) {
        memset(g + off, 0, (b - off) * sizeof(float));
        memset(g + e, 0, (off + n - e) * sizeof(float));
        return;
    }
    release(z, g, off, b);
    release(z, g, e, off + n);
}

ct_status ct_zero_buckets_create(ct_zero *z, const ct_recipe *r, ct_buckets **out) {
    ct_recipe rb = *r;
    if (z->z3) rb.comm_progress = CT_BUCKET_PROGRESS_HOOK; /* the gathers' MPI calls are the training thread's */
    CT_TRY(ct_dp_buckets_create(z->ctx, z->c, z->plan, &rb, z->offs, bucket_done, z, out));
    ct_zero3_set_buckets(z->z3, *out);
    return CT_OK;
}

int ct_zero_micro_reduces(const ct_zero *z) { return z && z->acc != NULL; }

void ct_zero_set_last_micro(ct_zero *z, int last) {
    if (z) z->last = last;
}

ct_status ct_zero_clear_grads(ct_zero *z) {
    if (z->acc) memset(z->acc, 0, z->counts[z->rank] * sizeof(float));
    if (z->stage >= 2 && z->world > 1) release(z, z->grads, 0, z->n);
    else memset(z->grads, 0, z->n * sizeof(float));
    return CT_OK;
}

ct_zero3 *ct_zero_z3(const ct_zero *z) { return z ? z->z3 : NULL; }

ct_status ct_zero_reduce_grads(ct_zero *z) {
    float *g;
    size_t n;
    CT_TRY(ct_plan_param_arena(z->plan, NULL, &g, &n));
    CT_TRY(ct_comm_reduce_scatter_f32(z->c, g, z->counts, CT_RS_AUTO, z->tmp));
    if (z->world == 1) return CT_OK;
    const size_t b = z->offs[z->rank], e = b + z->counts[z->rank];
    if (z->stage >= 2) {
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
    if (z->z3) return CT_OK; /* stage 3: each layer is gathered before use */
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

/* Stage 2/3: the most gradient bytes outside this rank's segment resident at once in backward, walking the
 * order backward finalizes the parameters: a parameter's bytes are resident from its gradient until its bucket
 * is released, counted one gradient after the bucket became ready (its reduce-scatter in flight meanwhile; the
 * hook tests it at every node). A bucket whose last gradient comes late (a tied embedding, written first and
 * final last) keeps what backward wrote of it all along. */
static double outside_peak(const ct_zero *z, const ct_buckets *bk) {
    if (ct_buckets_count(bk) == 0) return (double)(z->n - z->counts[z->rank]) * sizeof(float); /* no buckets */
    const int np = ct_plan_num_params(z->plan), nr = ct_plan_grad_ready_order(z->plan, NULL, 0);
    int *order = malloc(((size_t)nr + 1) * sizeof(int)), *bucket_of = calloc((size_t)np + 1, sizeof(int));
    double *out = calloc((size_t)ct_buckets_count(bk) + 1, sizeof(double)), cur = 0.0, peak = 0.0;
    int pending = -1; /* the bucket that became ready at the last gradient */
    const size_t sb = z->offs[z->rank], se = sb + z->counts[z->rank];
    for (int i = 0; order && bucket_of && out && i < ct_buckets_count(bk); i++) {
        ct_bucket_info bi;
        if (ct_buckets_info(bk, i, &bi) != CT_OK) continue;
        for (int p = bi.first_param; p < bi.first_param + bi.n_params && p < np; p++) bucket_of[p] = i;
    }
    if (order && bucket_of && out) ct_plan_grad_ready_order(z->plan, order, nr);
    for (int q = 0; order && bucket_of && out && q < nr; q++) {
        ct_tensor v;
        if (ct_plan_param_info(z->plan, order[q], NULL, NULL, &v) != CT_OK) continue;
        const size_t b = (size_t)((float *)v.data - z->grads), e = b + (size_t)ct_tensor_numel(&v);
        const int k = bucket_of[order[q]];
        const double bytes = (double)(e - b - ct_overlap(b, e, sb, se)) * sizeof(float);
        out[k] += bytes, cur += bytes;
        peak = CT_MAX(peak, cur);
        if (pending >= 0) cur -= out[pending], out[pending] = 0.0, pending = -1;
        ct_bucket_info bi;
        if (ct_buckets_info(bk, k, &bi) == CT_OK && q + 1 >= bi.ready_after) pending = k; /* bucket k is ready */
    }
    free(order);
    free(bucket_of);
    free(out);
    return peak;
}

void ct_zero_memory(const ct_zero *z, const ct_buckets *bk, size_t state_floats, ct_zero_mem *m) {
    memset(m, 0, sizeof *m);
    if (!z) return;
    const double full = (double)z->n * sizeof(float), seg = (double)z->counts[z->rank] * sizeof(float);
    const int sharded = z->stage >= 2 && z->world > 1 && z->madvise_ok;
    m->state = (double)state_floats * sizeof(float);
    m->grads_between = sharded ? seg : full;
    m->grads_peak = sharded ? CT_MIN(full, seg + outside_peak(z, bk) + (z->acc ? seg : 0.0)) : full;
    m->params = m->params_peak = full;
    if (z->z3 && z->world > 1) {
        ct_zero3_stats st;
        ct_zero3_get_stats(z->z3, &st);
        m->params = seg;
        m->params_peak = CT_MIN(full, seg + st.peak_bytes);
    }
}
