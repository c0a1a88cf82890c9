/* src/train/zero3.c - ZeRO stage 3: the parameters sharded (docs/distributed.md, "ZeRO").
 *
 * Each rank keeps its segment of the parameter arena (the same segments as the gradients and the optimizer
 * state); the rest of the arena is address space whose pages are handed back to the system (they read as
 * zeros). The parameters are cut into units: contiguous ranges of the arena, filled in the order the
 * forward first reads its parameters while the next one is a neighbour in the arena and the unit is under
 * bucket_size_mb (a transformer block, or part of a large one). The executor's pass events
 * (ct_plan_set_exec_hook) drive them:
 *   - a pass begins: the nodes it will run (ct_plan_exec_order) give each unit its first and last use in
 *     this pass; the first unit's allgather starts;
 *   - before each node: the units it reads are waited for (started if they were not), and the next unit
 *     in first-use order is started (prefetched one unit ahead, so its transfer overlaps this unit's
 *     compute); units whose last use in this pass is behind are released; the gradient buckets are tested
 *     (their reduce-scatters progress between nodes);
 *   - the pass ends: whatever is still gathered is released.
 * Mixed precision gathers the 16-bit weight copies instead (half the bytes): once per step, before the
 * first forward after an update, each rank casts its segment into them and one allgather fills the rest;
 * the forward's weight casts then do not run, and the units hold only the parameters read in FP32
 * (normalization weights, biases that are not cast). The copies stay resident, as they do without ZeRO.
 * Forward and backward gather again (backward reads weights for the input gradients; activation
 * checkpointing's recomputed nodes read them too, and they are simply nodes of the backward pass). The
 * gathers and the gradient buckets' reduce-scatters are nonblocking collectives on the data group started
 * from the training thread in the executor's order, the same on every rank (MPI_THREAD_SERIALIZED: the
 * buckets use no progress thread under stage 3). An evaluation keeps gathering per unit although its ranks
 * run different numbers of batches: every eval forward starts with a vote (an allreduce of "still
 * evaluating"), and a rank whose batches are done keeps voting 0 and replaying the forward's gathers (no
 * compute) while any rank votes 1 (ct_zero3_eval). A whole-model moment (a checkpoint, the best weights, the
 * end-of-run check) gathers everything (ct_zero3_whole) and releases it afterwards. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/convert.h"
#include "graph/ir.h"
#include "train_internal.h"

enum { U_RELEASED = 0, U_GATHERING, U_RESIDENT };

typedef struct {
    size_t off, n;          /* its range of the arena                      */
    size_t *counts;         /* its floats in each rank's segment (in ct_zero3.counts) */
    ct_comm_request *req;
    int state;              /* U_*                                          */
    int first, last;        /* this pass: positions of its first and last use (-1: none) */
    int end_next;           /* this pass: the next unit whose last use is at the same position */
} unit;

struct ct_zero3 {
    ct_context *ctx;
    ct_comm *c;
    ct_plan *plan;
    ct_buckets *bk;         /* polled before every node (may be NULL)      */
    float *par;
    size_t n, sb, se;       /* the arena's floats; this rank's segment      */
    int rank, world, madvise_ok;
    int whole;              /* every parameter gathered (ct_zero3_whole): the passes gather nothing */
    int eval, replaying;    /* in an evaluation (ct_zero3_eval); replaying another rank's forward */
    uint16_t *copies;       /* mixed precision: the BF16 / FP16 weight copies (the arena's layout), else NULL */
    ct_dtype copies_dt;
    ct_comm_request *copies_req;
    const size_t *offs, *seg_counts; /* the ranks' segments: starts (world + 1) and floats (world), ct_zero's */
    unit *u;
    int nu;
    int *unit_of;           /* parameter -> unit                            */
    size_t *counts;         /* every unit's counts, world per unit          */
    int *rd_start, *rd;     /* node -> the units it reads (CSR, deduplicated) */
    int n_nodes;
    /* the pass */
    int *order, cap_order, n_order, pos;
    int *seq, n_seq, next;  /* units by first use; the next to prefetch     */
    int *end_at;            /* position -> the first unit whose last use is there (-1) */
    ct_zero3_stats st;
    double peak;            /* the most bytes outside the segment gathered at once (pass_peak, at create) */
};

/* Pages of par[b, e) back to the system (whole pages; the partial ones at the ends are left as they are:
 * they are gathered again before any use). */
static void release_range(ct_zero3 *z, size_t b, size_t e) {
    char *a, *d;
    if (z->madvise_ok && ct_release_pages(z->par, b, e, &a, &d) < 0) z->madvise_ok = 0;
}

static void release_unit(ct_zero3 *z, unit *u) {
    release_range(z, u->off, CT_MAX(u->off, CT_MIN(u->off + u->n, z->sb)));
    release_range(z, CT_MIN(u->off + u->n, CT_MAX(u->off, z->se)), u->off + u->n);
    u->state = U_RELEASED;
    z->st.releases++;
}

static ct_status start_unit(ct_zero3 *z, unit *u) {
    if (u->state != U_RELEASED) return CT_OK;
    u->state = U_GATHERING;
    z->st.gathers++;
    z->st.gathered_bytes += (double)u->n * sizeof(float);
    return ct_comm_iallgatherv_f32(z->c, z->par + u->off, u->counts, u->req);
}

static ct_status wait_unit(ct_zero3 *z, unit *u) {
    CT_TRY(start_unit(z, u));
    if (u->state == U_GATHERING) {
        int done = 0;
        CT_TRY(ct_comm_test(u->req, &done));
        if (!done) {
            const double t0 = ct_now_s();
            CT_TRY(ct_comm_wait(u->req));
            z->st.wait_s += ct_now_s() - t0;
        }
        u->state = U_RESIDENT;
    }
    return CT_OK;
}

/* ---- units ------------------------------------------------------------------------------------- */

/* Parameter i's range of the arena. */
static void param_range(ct_zero3 *z, int i, size_t *b, size_t *e) {
    ct_tensor v;
    ct_plan_param_info(z->plan, i, NULL, &v, NULL);
    *b = (size_t)((float *)v.data - z->par);
    *e = *b + (size_t)ct_tensor_numel(&v);
}

/* Parameter i joins the current unit when it is its neighbour in the arena and the unit is under cap;
 * else it opens a unit. */
static void place(ct_zero3 *z, int i, size_t cap) {
    size_t b, e;
    param_range(z, i, &b, &e);
    unit *u = z->nu ? &z->u[z->nu - 1] : NULL;
    if (u && u->n * sizeof(float) < cap && (b == u->off + u->n || e == u->off)) {
        if (e == u->off) u->off = b;
        u->n += e - b;
    } else {
        u = &z->u[z->nu++];
        u->off = b, u->n = e - b;
    }
    z->unit_of[i] = (int)(u - z->u);
}

/* The units from the forward's first reads (parameters no forward node reads: in arena order after them);
 * then each unit's counts per rank and each node's units. */
static ct_status plan_units(ct_zero3 *z, size_t cap) {
    const int np = ct_plan_num_params(z->plan);
    for (int i = 0; i < np; i++) z->unit_of[i] = -1; /* none placed yet (the same np as ct_zero3_create's) */
    int n = ct_plan_exec_order(z->plan, 0, NULL, 0), buf[8];
    int *order = malloc(((size_t)n + 1) * sizeof *order);
    if (!order) return ct_set_error(z->ctx, CT_E_OOM, "out of memory planning ZeRO-3's units");
    ct_plan_exec_order(z->plan, 0, order, n);
    for (int k = 0; k < n; k++) {
        if (z->copies && ct_plan_node_is_weight_copy(z->plan, order[k])) continue; /* (fill_copies does those) */
        int m = ct_plan_node_param_reads(z->plan, order[k], buf, 8);
        for (int j = 0; j < m && j < 8; j++)
            if (z->unit_of[buf[j]] < 0) place(z, buf[j], cap);
    }
    free(order);
    for (int i = 0; i < np; i++)
        if (z->unit_of[i] < 0) place(z, i, cap);
    if (!(z->counts = calloc((size_t)z->world * (size_t)z->nu + 1, sizeof(size_t))))
        return ct_set_error(z->ctx, CT_E_OOM, "out of memory");
    for (int k = 0; k < z->nu; k++) {
        unit *u = &z->u[k];
        u->counts = z->counts + (size_t)k * (size_t)z->world;
        for (int r = 0; r < z->world; r++) u->counts[r] = ct_overlap(z->offs[r], z->offs[r + 1], u->off, u->off + u->n);
        CT_TRY(ct_comm_request_create(z->c, &u->req));
    }
    int total = 0;
    for (int i = 0; i < z->n_nodes; i++) total += ct_plan_node_param_reads(z->plan, i, NULL, 0);
    z->rd_start = calloc((size_t)z->n_nodes + 1, sizeof(int));
    z->rd = malloc(((size_t)total + 1) * sizeof(int));
    if (!z->rd_start || !z->rd) return ct_set_error(z->ctx, CT_E_OOM, "out of memory");
    for (int i = 0, w = 0; i < z->n_nodes; i++) {
        z->rd_start[i] = w;
        int m = ct_plan_node_param_reads(z->plan, i, buf, 8);
        for (int j = 0; j < m && j < 8; j++) {
            int uu = z->unit_of[buf[j]], dup = 0;
            for (int q = z->rd_start[i]; q < w; q++) dup |= z->rd[q] == uu;
            if (!dup) z->rd[w++] = uu;
        }
        z->rd_start[i + 1] = w;
    }
    return CT_OK;
}

/* ---- the pass ---------------------------------------------------------------------------------- */

/* Mixed precision, before a forward whose weight copies are stale (the parameters changed): each rank casts
 * its segment into the copies and one allgather of the 16-bit copies (half the bytes of the FP32 weights)
 * gives every rank all of them; the forward's weight casts then do not run (nor gather their FP32 units). */
static ct_status fill_copies(ct_zero3 *z) {
    if (ct_plan_weight_copies_fresh(z->plan)) return CT_OK;
    const size_t n = z->se - z->sb;
    if (z->copies_dt == CT_BF16) ct_f32_to_bf16_n(z->par + z->sb, z->copies + z->sb, n, CT_ISA_COUNT);
    else ct_f32_to_f16_n(z->par + z->sb, z->copies + z->sb, n, CT_ISA_COUNT);
    const double t0 = ct_now_s();
    CT_TRY(ct_comm_iallgatherv_u16(z->c, z->copies, z->seg_counts, z->copies_req));
    CT_TRY(ct_comm_wait(z->copies_req));
    z->st.wait_s += ct_now_s() - t0;
    z->st.gathers++;
    z->st.gathered_bytes += (double)z->n * sizeof(uint16_t);
    ct_plan_weight_copies_written(z->plan);
    return CT_OK;
}

/* The pass's schedule: the nodes it runs, each unit's first and last use, the units by first use, and the units
 * whose last use is at each position. */
static ct_status schedule(ct_zero3 *z, int backward) {
    int n = ct_plan_exec_order(z->plan, backward, NULL, 0);
    if (n > z->cap_order) {
        free(z->order);
        free(z->end_at);
        z->order = malloc((size_t)n * sizeof(int));
        z->end_at = malloc((size_t)n * sizeof(int));
        if (!z->order || !z->end_at) {
            z->cap_order = 0;
            return ct_set_error(z->ctx, CT_E_OOM, "out of memory");
        }
        z->cap_order = n;
    }
    z->n_order = ct_plan_exec_order(z->plan, backward, z->order, n);
    z->n_seq = 0;
    for (int k = 0; k < z->nu; k++) z->u[k].first = z->u[k].last = -1;
    for (int pos = 0; pos < z->n_order; pos++) {
        z->end_at[pos] = -1;
        const int i = z->order[pos];
        if (!backward && z->copies && ct_plan_node_is_weight_copy(z->plan, i)) continue; /* (fill_copies) */
        for (int q = z->rd_start[i]; q < z->rd_start[i + 1]; q++) {
            unit *u = &z->u[z->rd[q]];
            if (u->first < 0) z->seq[z->n_seq++] = z->rd[q], u->first = pos;
            u->last = pos;
        }
    }
    for (int k = 0; k < z->nu; k++)
        if (z->u[k].last >= 0) z->u[k].end_next = z->end_at[z->u[k].last], z->end_at[z->u[k].last] = k;
    z->pos = 0;
    z->next = 0;
    return CT_OK;
}

/* Bytes of a unit outside this rank's segment (what a gather brings in). */
static double outside(const ct_zero3 *z, const unit *u) {
    return (double)(u->n - ct_overlap(u->off, u->off + u->n, z->sb, z->se)) * sizeof(float);
}

/* The most parameter bytes outside the segment gathered at once in a pass: the units between their first and
 * last use, and the one prefetched. */
static double pass_peak(ct_zero3 *z, int backward) {
    if (schedule(z, backward) != CT_OK) return (double)z->n * sizeof(float);
    double peak = 0.0;
    for (int pos = 0, nx = 0; pos < z->n_order; pos++) {
        double cur = 0.0;
        for (int k = 0; k < z->nu; k++)
            if (z->u[k].first >= 0 && z->u[k].first <= pos && pos <= z->u[k].last) cur += outside(z, &z->u[k]);
        while (nx < z->n_seq && z->u[z->seq[nx]].first <= pos) nx++;
        if (nx < z->n_seq) cur += outside(z, &z->u[z->seq[nx]]);
        peak = CT_MAX(peak, cur);
    }
    z->n_seq = 0;
    return peak;
}

/* An evaluation's vote before each forward: 1 from a rank still evaluating, 0 from one that is done; *any: some
 * rank still is (its forward's gathers need this rank's segments). */
static ct_status vote(ct_zero3 *z, int active, int *any) {
    double f[2] = {active ? 1.0 : 0.0, active ? 0.0 : 1.0};
    CT_TRY(ct_comm_allreduce_f64(z->c, f, 2, CT_REDUCE_MAX));
    *any = f[0] > 0.0;
    if (f[0] > 0.0 && f[1] > 0.0) z->st.replays++; /* a forward some rank replays (every rank counts it) */
    return CT_OK;
}

static ct_status pass_begin(ct_zero3 *z, int backward) {
    int any;
    if (!backward && z->eval && !z->replaying) CT_TRY(vote(z, 1, &any));
    if (!backward && z->copies) CT_TRY(fill_copies(z));
    CT_TRY(schedule(z, backward));
    return z->n_seq ? start_unit(z, &z->u[z->seq[0]]) : CT_OK;
}

static ct_status pass_node(ct_zero3 *z, int node) {
    while (z->pos < z->n_order && z->order[z->pos] != node) z->pos++; /* (the executor's order: equal) */
    if (z->pos >= z->n_order) return CT_OK;
    for (int k = z->pos > 0 ? z->end_at[z->pos - 1] : -1; k >= 0; k = z->u[k].end_next)
        if (z->u[k].state == U_RESIDENT) release_unit(z, &z->u[k]);
    for (int q = z->rd_start[node]; q < z->rd_start[node + 1]; q++) CT_TRY(wait_unit(z, &z->u[z->rd[q]]));
    while (z->next < z->n_seq && z->u[z->seq[z->next]].first <= z->pos) z->next++;
    if (z->next < z->n_seq) CT_TRY(start_unit(z, &z->u[z->seq[z->next]])); /* one unit ahead */
    ct_buckets_poll(z->bk);
    z->pos++;
    return CT_OK;
}

/* The pass ended (or failed): gathers in flight completed, everything released. */
static ct_status pass_end(ct_zero3 *z) {
    ct_status s = CT_OK;
    for (int k = 0; k < z->nu; k++) {
        unit *u = &z->u[k];
        if (u->state == U_GATHERING) {
            ct_status w = ct_comm_wait(u->req);
            if (s == CT_OK) s = w;
        }
        if (u->state != U_RELEASED) release_unit(z, u);
    }
    z->n_seq = 0;
    return s;
}

static ct_status exec_hook(void *user, ct_exec_event ev, int backward, int node) {
    ct_zero3 *z = user;
    if (z->whole) return CT_OK;
    if (ev == CT_EXEC_BEGIN) return pass_begin(z, backward);
    if (ev == CT_EXEC_NODE) return pass_node(z, node);
    return pass_end(z);
}

/* ---- the run's interface ----------------------------------------------------------------------- */

ct_status ct_zero3_create(ct_context *ctx, ct_comm *c, const ct_recipe *r, ct_plan *p, const size_t *offs,
                          const size_t *counts, ct_zero3 **out) {
    *out = NULL;
    ct_zero3 *z = calloc(1, sizeof *z);
    if (!z) return ct_set_error(ctx, CT_E_OOM, "out of memory");
    z->ctx = ctx, z->c = c, z->plan = p;
    z->rank = ct_comm_rank(c), z->world = ct_comm_size(c);
    z->madvise_ok = 1;
    ct_plan_stats ps;
    ct_plan_get_stats(p, &ps);
    z->n_nodes = ps.n_nodes;
    ct_status s = ct_plan_param_arena(p, &z->par, NULL, &z->n);
    z->copies = ct_plan_weight_copies(p, &z->copies_dt);
    if (z->copies && z->copies_dt != CT_BF16 && z->copies_dt != CT_F16) z->copies = NULL;
    const int np = ct_plan_num_params(p);
    z->offs = offs, z->seg_counts = counts;
    z->sb = offs[z->rank], z->se = offs[z->rank + 1];
    z->u = calloc((size_t)np + 1, sizeof *z->u);
    z->unit_of = malloc(((size_t)np + 1) * sizeof(int));
    z->seq = malloc(((size_t)np + 1) * sizeof(int));
    if (s == CT_OK && (!z->u || !z->unit_of || !z->seq)) s = ct_set_error(ctx, CT_E_OOM, "out of memory");
    if (s == CT_OK && z->copies) s = ct_comm_request_create(c, &z->copies_req);
    if (s == CT_OK) {
        size_t cap = (size_t)((double)r->bucket_size_mb * 1048576.0);
        s = plan_units(z, cap ? cap : SIZE_MAX);
    }
    if (s != CT_OK) {
        ct_zero3_free(z);
        return s;
    }
    if (z->world > 1) ct_plan_set_exec_hook(p, exec_hook, z);
    z->peak = CT_MAX(pass_peak(z, 0), pass_peak(z, 1));
    *out = z;
    return CT_OK;
}

void ct_zero3_free(ct_zero3 *z) {
    if (!z) return;
    if (z->world > 1 && z->plan) ct_plan_set_exec_hook(z->plan, NULL, NULL);
    for (int k = 0; z->u && k < z->nu; k++) {
        ct_comm_request_free(z->u[k].req);
    }
    free(z->counts);
    free(z->u);
    free(z->unit_of);
    free(z->rd_start);
    free(z->rd);
    free(z->order);
    free(z->end_at);
    free(z->seq);
    ct_comm_request_free(z->copies_req);
    free(z);
}

void ct_zero3_set_buckets(ct_zero3 *z, ct_buckets *bk) {
    if (z) z->bk = bk;
}

ct_status ct_zero3_whole(ct_zero3 *z, int whole) {
    if (!z || z->world == 1) return CT_OK;
    if (!whole) {
        for (int k = 0; k < z->nu; k++) release_unit(z, &z->u[k]);
        z->whole = 0;
        return CT_OK;
    }
    ct_status s = ct_comm_allgatherv_f32(z->c, z->par, z->seg_counts);
    for (int k = 0; s == CT_OK && k < z->nu; k++) z->u[k].state = U_RESIDENT;
    z->whole = s == CT_OK;
    z->st.gathered_bytes += (double)z->n * sizeof(float);
    return s;
}

/* A forward's gathers and releases without its compute: this rank's part in another rank's forward. */
static ct_status replay_forward(ct_zero3 *z) {
    z->replaying = 1;
    ct_status s = pass_begin(z, 0);
    for (int pos = 0; s == CT_OK && pos < z->n_order; pos++) s = pass_node(z, z->order[pos]);
    ct_status e = pass_end(z);
    z->replaying = 0;
    return s != CT_OK ? s : e;
}

ct_status ct_zero3_eval(ct_zero3 *z, int begin) {
    if (!z || z->world == 1 || z->whole) return CT_OK;
    if (begin) {
        z->eval = 1;
        return CT_OK;
    }
    /* done here: take part in the other ranks' remaining forwards, one vote each, until no rank evaluates */
    ct_status s = CT_OK;
    for (int any = 1; s == CT_OK;) {
        s = vote(z, 0, &any);
        if (s != CT_OK || !any) break;
        s = replay_forward(z);
    }
    z->eval = 0;
    return s;
}

void ct_zero3_get_stats(const ct_zero3 *z, ct_zero3_stats *out) {
    memset(out, 0, sizeof *out);
    if (!z) return;
    *out = z->st;
    out->units = z->nu;
    out->peak_bytes = z->peak;
    out->copies_bytes = z->copies ? z->n * sizeof(uint16_t) : 0;
    for (int k = 0; k < z->nu; k++) out->largest_unit_bytes = CT_MAX(out->largest_unit_bytes, z->u[k].n * sizeof(float));
}
