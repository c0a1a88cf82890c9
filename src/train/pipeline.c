/* src/train/pipeline.c - pipeline parallelism in the trainer (recipe keys pipeline_stages, pipeline_schedule,
 * micro_batches, virtual_stages, pipeline_split; docs/distributed.md). The graph layer compiles this rank's
 * pieces of the model as the parts of one stage plan (include/ctrain/graph.h, "pipeline stages"); here: the
 * groups and checks, the cut, the schedule's step (its forwards and backwards in activation slots, the links'
 * values and gradients between neighbouring pieces as FP32 messages: nonblocking sends, receives that wait at
 * most comm_timeout and name the stage, micro-batch, direction and peer), the tied parameters' gradients,
 * the statistics from the last stage, and evaluation through the pipeline. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "graph/ir.h"
#include "train_internal.h"

typedef struct {
    int param;             /* index in this stage's plan          */
    uint64_t name_hash;
    int n_holders, first;  /* first: this rank is the lowest pipeline rank holding it */
    int holders[16];       /* pipeline ranks, ascending           */
} tied_param;

struct ct_pipe {
    int P, v, M, kind, n_pieces;
    int cuts[256], held[64];
    ct_pp_action *acts;
    int n_acts, n_slots;
    size_t wire[64][2];       /* per part: floats of its incoming (0) / outgoing (1) message */
    float *rbuf;              /* receives (the largest message)                             */
    float **sbuf;             /* sends in flight: [(part x 2 + dir) x n_slots + slot]         */
    ct_comm_request **sreq;
    int *slot_of;             /* [part x M + micro]: its slot, -1                            */
    int *shape_of;            /* [slot]: the plan's shape variant its forward ran with       */
    uint8_t *slot_used;
    tied_param *tied;
    int n_tied;
    float *tied_buf;
    size_t tied_cap;
    int eval_seq;             /* evaluation forwards, for their tags                          */
    int max_tag, n_blocks;
    double *det_loss;         /* deterministic: each micro-batch's loss (the last stage's)       */
    ct_comm_request *pre;     /* the next action's receive, posted early (post_next)            */
    float *prebuf;
    int pre_on, pre_c, pre_grads, pre_m;
    double busy_s, wall_s;    /* compute inside the schedule / the schedule's wall time        */
    double tied_bytes;        /* sent of tied parameters' gradients                           */
    int64_t steps;
    double ideal;             /* the schedule's bubble (simulated)                            */
    double stage_mib[64][4];  /* per stage (first 64): parameters, the activation arena, slots, one slot's MiB */
    char what[192];           /* the wait in progress, for messages and the watchdog          */
};

/* ---- setup ------------------------------------------------------------------------------------ */

static ct_status check_recipe(ct_run *R, int P) {
    const ct_recipe *r = R->r;
    ct_context *ctx = R->ctx;
    const char *no = r->deterministic && r->pipeline_schedule == CT_PP_INTERLEAVED
                         ? "deterministic: true and pipeline_schedule interleaved (use 1f1b or gpipe)"
                     : r->grad_compression != CT_GRAD_COMPRESSION_NONE ? "grad_compression (use none)"
                     : r->memory_budget > 0 ? "memory_budget (remove it)"
                     : r->sync_batchnorm ? "sync_batchnorm (use false)"
                     : r->zero_stage == 3 ? "zero_stage 3 (use 1 or 2: the stage's parameters stay whole)"
                     : NULL;
    if (no) return ct_set_error(ctx, CT_E_CONFIG, "pipeline_stages %d with %s is not built yet", P, no);
    const int v = r->pipeline_schedule == CT_PP_INTERLEAVED ? (r->virtual_stages > 0 ? r->virtual_stages : 2) : 1;
    if (r->pipeline_schedule != CT_PP_INTERLEAVED && r->virtual_stages > 1)
        return ct_set_error(ctx, CT_E_CONFIG, "virtual_stages %d needs pipeline_schedule interleaved (it is %s)",
                            r->virtual_stages, ct_pp_schedule_name(r->pipeline_schedule));
    if (r->pipeline_schedule == CT_PP_INTERLEAVED && (v < 2 || r->accumulate_steps % P))
        return ct_set_error(ctx, CT_E_CONFIG, "pipeline_schedule interleaved needs virtual_stages >= 2 (it is %d) and "
                            "micro_batches a multiple of pipeline_stages %d (it is %d): set micro_batches %d",
                            v, P, r->accumulate_steps, (r->accumulate_steps / P + 1) * P);
    if (v * P > 256) return ct_set_error(ctx, CT_E_CONFIG, "pipeline: %d x %d pieces is more than 256", P, v);
    const int T = r->tensor_parallel > 1 ? r->tensor_parallel : 1;
    if (ct_comm_size(R->comm) % (P * T))
        return ct_set_error(ctx, CT_E_CONFIG, "pipeline_stages %d%s does not divide the %d ranks: start a multiple of "
                            "%d ranks (mpirun -np %d)", P, T > 1 ? " x tensor_parallel" : "", ct_comm_size(R->comm),
                            P * T, P * T);
    return CT_OK;
}

ct_status ct_pp_setup(ct_run *R) {
    const ct_recipe *r = R->r;
    R->pp_size = 1;
    if (r->pipeline_stages <= 1) return CT_OK;
    const int P = r->pipeline_stages;
    CT_TRY(check_recipe(R, P));
    ct_pipe *pp = calloc(1, sizeof *pp);
    if (!pp) return ct_set_error(R->ctx, CT_E_OOM, "out of memory");
    R->pipe = pp;
    R->pp_size = P;
    pp->P = P;
    pp->kind = r->pipeline_schedule;
    pp->v = pp->kind == CT_PP_INTERLEAVED ? (r->virtual_stages > 0 ? r->virtual_stages : 2) : 1;
    pp->M = r->accumulate_steps;
    pp->n_pieces = P * pp->v;
    pp->max_tag = ct_comm_max_tag(R->comm);
    ct_pp_sim sim;
    CT_TRY(ct_pp_simulate(R->ctx, pp->kind, P, pp->v, pp->M, &sim));
    pp->ideal = sim.bubble;
    return CT_OK;
}

/* The cut: pipeline_split's block indices or names, else balanced. */
static ct_status cut(ct_run *R, const ct_graph *g) {
    R->pipe->n_blocks = ct_graph_num_blocks(g);
    return ct_graph_parse_cuts(g, R->r->pipeline_split, R->pipe->n_pieces, R->pipe->cuts);
}

ct_status ct_pp_stage_opts(ct_run *R, const ct_graph *g, ct_stage_opts *so) {
    ct_pipe *pp = R->pipe;
    CT_TRY(cut(R, g));
    for (int c = 0; c < pp->v; c++) pp->held[c] = c * pp->P + R->pp_rank;
    *so = (ct_stage_opts){.n_pieces = pp->n_pieces, .cuts = pp->cuts, .n_held = pp->v, .held = pp->held,
                          .group = R->pp};
    return CT_OK;
}

/* ---- links: FP32 messages -------------------------------------------------------------------- */

static int piece(const ct_pipe *pp, int r, int c) { return c * pp->P + r; }
static int rank_of(const ct_pipe *pp, int k) { return k % pp->P; }
/* tag: direction (0 activations, 1 gradients, 2 evaluation), piece, micro-batch (or evaluation count) */
static int tag(const ct_pipe *pp, int dir, int k, int m) {
    const int per = 5 * pp->n_pieces, mod = pp->max_tag / per > 4096 ? 4096 : pp->max_tag / per;
    return (m % (mod > 0 ? mod : 1)) * per + dir * pp->n_pieces + k; /* messages of one pair never overtake */
}

/* Floats of part c's message in direction dir (0: its incoming values / their gradients; 1: outgoing),
 * grads: the gradient message (float links only). -1: a link of a dtype the wire does not carry. */
static int64_t link_floats(ct_plan *p, int c, int dir, int grads) {
    int64_t n = 0;
    for (int i = 0; i < ct_plan_num_links(p, c, dir); i++) {
        ct_tensor v;
        if (ct_plan_link(p, c, dir, i, &v, NULL) != CT_OK) return -1;
        if (ct_dtype_size(v.dtype) > 4) return -1;
        if (!grads || ct_dtype_is_float(v.dtype)) n += ct_tensor_numel(&v);
    }
    return n;
}

/* Packs (to_wire) or unpacks part c's links of direction dir: values or gradients. */
static ct_status wire(ct_run *R, int c, int dir, int grads, float *buf, int to_wire) {
    ct_plan *p = R->plan;
    size_t o = 0;
    for (int i = 0; i < ct_plan_num_links(p, c, dir); i++) {
        ct_tensor v, g;
        CT_TRY(ct_plan_link(p, c, dir, i, &v, &g));
        if (grads && !ct_dtype_is_float(v.dtype)) continue;
        ct_tensor *t = grads ? &g : &v;
        const int64_t n = ct_tensor_numel(&v);
        ct_tensor w = ct_tensor_make(buf + o, ct_dtype_is_float(v.dtype) ? CT_F32 : v.dtype, v.ndim, v.shape);
        o += (size_t)n;
        if (!t->data) { /* no gradient here: zeros go out, nothing comes in */
            if (to_wire) memset(w.data, 0, (size_t)n * sizeof(float));
            continue;
        }
        CT_TRY(to_wire ? ct_convert(R->ctx, t, &w) : ct_convert(R->ctx, &w, t));
    }
    return CT_OK;
}

static ct_status wait_for(ct_run *R, ct_comm_request *q) {
    return ct_comm_wait_for(q, R->r->comm_timeout > 0 ? R->r->comm_timeout : 0, R->pipe->what);
}

/* "the activations of micro-batch 3 from stage 0 (piece 0) into stage 1 (piece 1)". */
static void describe_wait(ct_run *R, int grads, int eval, int m, int from, int to) {
    ct_pipe *pp = R->pipe;
    snprintf(pp->what, sizeof pp->what, "a receive of the %s of %s %d from stage %d (piece %d) into stage %d (piece %d)",
             grads ? "gradients" : "activations", eval ? "evaluation batch" : "micro-batch", m, rank_of(pp, from),
             from, rank_of(pp, to), to);
}

/* Receives part c's message (dir: 0 values from the previous piece, 1 gradients from the next) into the plan. */
static ct_status receive(ct_run *R, int c, int grads, int m, int eval) {
    ct_pipe *pp = R->pipe;
    const int k = piece(pp, R->pp_rank, c), from = grads ? k + 1 : k - 1;
    describe_wait(R, grads, eval, m, from, k);
    double t0 = R->prof ? ct_profiler_now_us() : 0;
    float *buf = pp->rbuf;
    if (pp->pre_on && pp->pre_c == c && pp->pre_grads == grads && pp->pre_m == m && !eval) { /* posted early */
        pp->pre_on = 0;
        CT_TRY(wait_for(R, pp->pre));
        buf = pp->prebuf;
    } else {
        const int64_t n = link_floats(R->plan, c, grads, grads);
        ct_comm_request *q;
        CT_TRY(ct_comm_request_create(R->pp, &q));
        ct_status s = ct_comm_irecv(R->pp, pp->rbuf, (size_t)n * sizeof(float), rank_of(pp, from),
                                    tag(pp, eval ? 2 : grads, from, m), q);
        if (s == CT_OK) s = wait_for(R, q);
        if (s != CT_OK) {
            ct_comm_request_cancel(q);
            return s;
        }
        ct_comm_request_free(q);
    }
    if (R->prof) ct_profiler_event(R->prof, grads ? "receive gradients" : "receive activations", "pipeline_comm", t0,
                                   ct_profiler_now_us(), NULL);
    return wire(R, c, grads, grads, buf, 0);
}

/* The receive the next action needs, posted before this one computes (its message arrives meanwhile); into
 * a buffer of the largest (the compiled shape's) size: a smaller variant's message fits. */
static ct_status post_next(ct_run *R, const ct_pp_action *a) {
    ct_pipe *pp = R->pipe;
    const int k = piece(pp, R->pp_rank, a->chunk), grads = !a->fwd, from = grads ? k + 1 : k - 1;
    if (pp->pre_on || from < 0 || from >= pp->n_pieces) return CT_OK;
    const size_t n = pp->wire[a->chunk][grads];
    CT_TRY(ct_comm_irecv(R->pp, pp->prebuf, n * sizeof(float), rank_of(pp, from), tag(pp, grads, from, a->micro),
                         pp->pre));
    pp->pre_on = 1, pp->pre_c = a->chunk, pp->pre_grads = grads, pp->pre_m = a->micro;
    return CT_OK;
}

/* Sends part c's outgoing values (grads 0, to the next piece) or its incoming links' gradients (grads 1, to
 * the previous piece) from the buffer of (c, direction, slot). */
static ct_status send(ct_run *R, int c, int grads, int m, int slot, int eval) {
    ct_pipe *pp = R->pipe;
    const int k = piece(pp, R->pp_rank, c), to = grads ? k - 1 : k + 1, dir = grads ? 0 : 1;
    const size_t i = (size_t)((c * 2 + grads) * pp->n_slots + slot);
    snprintf(pp->what, sizeof pp->what, "a send of the %s of micro-batch %d from stage %d (piece %d) to stage %d "
             "(piece %d)", grads ? "gradients" : "activations", m, R->pp_rank, k, rank_of(pp, to), to);
    CT_TRY(wait_for(R, pp->sreq[i])); /* the buffer's previous message */
    CT_TRY(wire(R, c, dir, grads, pp->sbuf[i], 1));
    const int64_t n = link_floats(R->plan, c, dir, grads);
    if (R->prof) ct_profiler_event(R->prof, grads ? "send gradients" : "send activations", "pipeline_comm",
                                   ct_profiler_now_us(), ct_profiler_now_us() + 1, NULL);
    return ct_comm_isend(R->pp, pp->sbuf[i], (size_t)n * sizeof(float), rank_of(pp, to), tag(pp, eval ? 2 : grads, k, m),
                         pp->sreq[i]);
}

static ct_status wait_sends(ct_run *R) {
    ct_pipe *pp = R->pipe;
    for (int i = 0; i < pp->v * 2 * pp->n_slots; i++) CT_TRY(wait_for(R, pp->sreq[i]));
    return CT_OK;
}

/* ---- bind: slots, buffers, the neighbours' agreement, tied parameters ------------------------------- */

/* Each boundary: the sender's outgoing message against the receiver's incoming one (floats and a hash of the
 * links' sizes and kinds), so stages built from different configurations stop here with both named. */
static ct_status agree_links(ct_run *R) {
    ct_pipe *pp = R->pipe;
    for (int c = 0; c < pp->v; c++) {
        const int k = piece(pp, R->pp_rank, c);
        int64_t mine[2] = {link_floats(R->plan, c, 1, 0), link_floats(R->plan, c, 1, 1)};
        int64_t want[2] = {link_floats(R->plan, c, 0, 0), link_floats(R->plan, c, 0, 1)}, got[2] = {0, 0};
        ct_comm_request *qs = NULL, *qr = NULL;
        ct_status s = ct_comm_request_create(R->pp, &qs);
        if (s == CT_OK) s = ct_comm_request_create(R->pp, &qr);
        if (s == CT_OK && k + 1 < pp->n_pieces)
            s = ct_comm_isend(R->pp, mine, sizeof mine, rank_of(pp, k + 1), tag(pp, 3, k, 0), qs);
        snprintf(pp->what, sizeof pp->what, "the link sizes of stage %d (piece %d) at the start", rank_of(pp, k - 1),
                 k - 1);
        if (s == CT_OK && k > 0) s = ct_comm_irecv(R->pp, got, sizeof got, rank_of(pp, k - 1), tag(pp, 3, k - 1, 0), qr);
        if (s == CT_OK) s = wait_for(R, qr);
        if (s == CT_OK) s = wait_for(R, qs);
        ct_comm_request_cancel(qs);
        ct_comm_request_cancel(qr);
        CT_TRY(s);
        if (k > 0 && (got[0] != want[0] || got[1] != want[1] || want[0] < 0))
            return ct_set_error(R->ctx, CT_E_DIST, "pipeline: stage %d (piece %d) sends %lld values to stage %d (piece "
                                "%d), which expects %lld: the stages run different models or batch sizes; start every "
                                "rank with the same recipe", rank_of(pp, k - 1), k - 1, (long long)got[0],
                                R->pp_rank, k, (long long)want[0]);
    }
    return CT_OK;
}

/* Parameters held by several stages (a tied embedding and LM head): found by name over the pipeline group. */
static ct_status find_tied(ct_run *R) {
    ct_pipe *pp = R->pipe;
    const int np = ct_plan_num_params(R->plan), P = pp->P;
    double d = np;
    CT_TRY(ct_comm_allreduce_f64(R->pp, &d, 1, CT_REDUCE_MAX));
    const int most = (int)d;
    uint64_t *mine = calloc((size_t)most + 1, sizeof *mine), *all = calloc((size_t)(most + 1) * (size_t)P, sizeof *all);
    pp->tied = calloc((size_t)np + 1, sizeof *pp->tied);
    R->pp_skip = calloc(2 * (size_t)np + 2, sizeof *R->pp_skip);
    ct_status s = mine && all && pp->tied && R->pp_skip ? CT_OK : ct_set_error(R->ctx, CT_E_OOM, "out of memory");
    for (int i = 0; s == CT_OK && i < np; i++) {
        const char *name;
        ct_plan_param_info(R->plan, i, &name, NULL, NULL);
        mine[i] = ct_hash64(name, strlen(name), CT_HASH64_INIT) | 1u; /* 0: padding */
    }
    if (s == CT_OK) s = ct_comm_allgather(R->pp, mine, sizeof(uint64_t) * (size_t)(most + 1), all);
    for (int i = 0; s == CT_OK && i < np; i++) {
        tied_param t = {.param = i, .name_hash = mine[i]};
        for (int q = 0; q < P && t.n_holders < 16; q++)
            for (int j = 0; j <= most; j++)
                if (all[(size_t)q * (size_t)(most + 1) + (size_t)j] == mine[i]) {
                    t.holders[t.n_holders++] = q;
                    break;
                }
        if (t.n_holders < 2) continue;
        t.first = t.holders[0] == R->pp_rank;
        pp->tied[pp->n_tied++] = t;
        if (!t.first) { /* the clipping norm counts it on its lowest holder only (ct_run_sumsq) */
            ct_tensor g;
            float *grads;
            ct_plan_param_info(R->plan, i, NULL, NULL, &g);
            ct_plan_param_arena(R->plan, NULL, &grads, NULL);
            R->pp_skip[2 * R->n_pp_skip] = (size_t)((float *)g.data - grads);
            R->pp_skip[2 * R->n_pp_skip++ + 1] = (size_t)ct_tensor_numel(&g);
        }
    }
    free(mine);
    free(all);
    for (int i = 0; s == CT_OK && i < pp->n_tied; i++) { /* the buffer of their exchange: the largest */
        ct_tensor g;
        ct_plan_param_info(R->plan, pp->tied[i].param, NULL, NULL, &g);
        const size_t need = (size_t)ct_tensor_numel(&g) * (size_t)pp->tied[i].n_holders;
        if (need > pp->tied_cap) pp->tied_cap = need;
    }
    if (s == CT_OK && pp->n_tied && !(pp->tied_buf = malloc(pp->tied_cap * sizeof(float))))
        s = ct_set_error(R->ctx, CT_E_OOM, "out of memory for the tied parameters' gradients");
    return s;
}

static ct_status alloc_buffers(ct_run *R) {
    ct_pipe *pp = R->pipe;
    size_t most = 1;
    for (int c = 0; c < pp->v; c++)
        for (int d = 0; d < 2; d++) {
            int64_t n = link_floats(R->plan, c, d, 0);
            if (n < 0)
                return ct_set_error(R->ctx, CT_E_UNSUPPORTED, "pipeline: a value crossing a stage boundary has a dtype "
                                    "wider than 4 bytes; cut the model elsewhere (pipeline_split)");
            pp->wire[c][d] = (size_t)n;
            if ((size_t)n > most) most = (size_t)n;
        }
    const int nb = pp->v * 2 * pp->n_slots;
    pp->rbuf = malloc(most * sizeof(float));
    pp->prebuf = malloc(most * sizeof(float));
    pp->sbuf = calloc((size_t)nb, sizeof *pp->sbuf);
    pp->sreq = calloc((size_t)nb, sizeof *pp->sreq);
    pp->slot_of = malloc(sizeof(int) * (size_t)(pp->v * pp->M));
    pp->shape_of = calloc((size_t)pp->n_slots, sizeof(int));
    pp->slot_used = calloc((size_t)pp->n_slots, 1);
    if (!pp->rbuf || !pp->prebuf || !pp->sbuf || !pp->sreq || !pp->slot_of || !pp->shape_of || !pp->slot_used)
        return ct_set_error(R->ctx, CT_E_OOM, "out of memory for the pipeline's buffers");
    CT_TRY(ct_comm_request_create(R->pp, &pp->pre));
    for (int i = 0; i < nb; i++) {
        const int c = i / (2 * pp->n_slots), grads = (i / pp->n_slots) % 2;
        if (!(pp->sbuf[i] = malloc((pp->wire[c][grads ? 0 : 1] + 1) * sizeof(float))))
            return ct_set_error(R->ctx, CT_E_OOM, "out of memory for the pipeline's send buffers");
        CT_TRY(ct_comm_request_create(R->pp, &pp->sreq[i]));
    }
    return CT_OK;
}

ct_status ct_pp_bind(ct_run *R) {
    ct_pipe *pp = R->pipe;
    if (!pp) return CT_OK;
    /* deterministic: the micro-batches are this rank's chunks of the global batch, each gradient a leaf of the
     * chunk tree (zero.c) as soon as its backward ends */
    if (R->det) pp->M = ct_det_local_chunks(R->det);
    ct_pp_sim sim;
    CT_TRY(ct_pp_simulate(R->ctx, pp->kind, pp->P, pp->v, pp->M, &sim));
    pp->ideal = sim.bubble;
    if (!(pp->det_loss = calloc((size_t)pp->M, sizeof(double)))) return ct_set_error(R->ctx, CT_E_OOM, "out of memory");
    pp->n_slots = sim.slots[R->pp_rank < CT_PP_MAX_SIM ? R->pp_rank : CT_PP_MAX_SIM - 1];
    if (pp->n_slots < 1) pp->n_slots = 1;
    CT_TRY(ct_plan_set_act_slots(R->plan, pp->n_slots));
    if (!(pp->acts = malloc(sizeof *pp->acts * (size_t)(2 * pp->M * pp->v))))
        return ct_set_error(R->ctx, CT_E_OOM, "out of memory");
    pp->n_acts = ct_pp_schedule(pp->kind, pp->P, pp->v, pp->M, R->pp_rank, pp->acts);
    CT_TRY(alloc_buffers(R));
    CT_TRY(agree_links(R));
    return find_tied(R);
}

/* ---- the step ----------------------------------------------------------------------------------- */

static int take_slot(ct_pipe *pp) {
    for (int k = 0; k < pp->n_slots; k++)
        if (!pp->slot_used[k]) {
            pp->slot_used[k] = 1;
            return k;
        }
    return -1;
}

/* The micro-batch's data in the plan's inputs: read by the rank's first part, restored from that part's slot
 * by the others. *rows 0: the data ran out. */
static ct_status load(ct_run *R, ct_step_io *io, int c, int m, int slot, int64_t *rows) {
    ct_pipe *pp = R->pipe;
    ct_task *t = R->task;
    if (c > 0) {
        const int from = pp->slot_of[m];
        CT_TRY(ct_plan_restore_inputs(R->plan, from));
        pp->shape_of[slot] = pp->shape_of[from];
        *rows = 1;
        return ct_plan_set_shape(R->plan, pp->shape_of[slot]);
    }
    double td = R->prof ? ct_profiler_now_us() : 0;
    CT_TRY(t->bind(t, R->plan)); /* the compiled shape */
    CT_TRY(t->next_batch(t, io->step, m, rows));
    if (R->prof) ct_profiler_event(R->prof, "batch", "data", td, ct_profiler_now_us(), NULL);
    pp->shape_of[slot] = ct_plan_shape(R->plan);
    io->batches += !R->r->deterministic || m == 0; /* deterministic: the chunks are one global batch */
    return CT_OK;
}

/* Micro-batch m's statistics on the stage holding the loss. */
static void stats(ct_run *R, ct_step_io *io, int64_t rows) {
    float loss = 0.0f;
    ct_task *t = R->task;
    ct_plan_loss(R->plan, &loss);
    if (!isfinite(loss) && R->scaler) loss = 0.0f; /* FP16 overflowed in the forward: the scaler skips this step */
    io->loss += loss;
    if (t->has_accuracy) io->correct += (double)t->batch_correct(t, rows);
    io->rows += (double)rows;
    io->units += t->batch_units ? (double)t->batch_units(t) : (double)(rows * t->unit_per_row);
    io->n++;
}

/* One forward (training) or backward of the selected part, its time counted as busy and traced. */
static ct_status compute(ct_run *R, int fwd, int m, int k) {
    const double t0 = ct_profiler_now_us();
    CT_TRY(fwd ? ct_plan_forward(R->plan, 1) : ct_plan_backward(R->plan));
    const double t1 = ct_profiler_now_us();
    R->pipe->busy_s += 1e-6 * (t1 - t0);
    if (R->prof) {
        char name[48];
        snprintf(name, sizeof name, "%s mb %d (piece %d)", fwd ? "forward" : "backward", m, k);
        ct_profiler_event(R->prof, name, "pipeline", t0, t1, NULL);
    }
    return CT_OK;
}

static ct_status forward(ct_run *R, ct_step_io *io, const ct_pp_action *a, int64_t *rows) {
    ct_pipe *pp = R->pipe;
    const int c = a->chunk, m = a->micro, k = piece(pp, R->pp_rank, c);
    const int slot = take_slot(pp);
    if (slot < 0) return ct_set_error(R->ctx, CT_E_INTERNAL, "pipeline: no free activation slot for micro-batch %d", m);
    pp->slot_of[c * pp->M + m] = slot;
    CT_TRY(ct_plan_set_part(R->plan, c));
    CT_TRY(load(R, io, c, m, slot, rows));
    if (*rows == 0) {
        if (m == 0) return CT_OK; /* the epoch's data ran out before this step (every stage reads the same data) */
        return ct_set_error(R->ctx, CT_E_INTERNAL, "pipeline: the data ran out at micro-batch %d of a step", m);
    }
    if (R->r->bn_stats_once) ct_plan_set_update_running_stats(R->plan, m == pp->M - 1);
    if (R->r->deterministic) ct_plan_set_update_running_stats(R->plan, R->rank == 0 && m == 0); /* chunk 0's */
    CT_TRY(ct_plan_set_sample_offset(R->plan, ct_step_first_sample(R, m)));
    if (k > 0) CT_TRY(receive(R, c, 0, m, 0));
    CT_TRY(compute(R, 1, m, k));
    CT_TRY(ct_plan_save_activations(R->plan, slot)); /* what its backward reads, until then */
    if (k == pp->n_pieces - 1) {
        const double before = io->loss;
        stats(R, io, *rows);
        pp->det_loss[m] = io->loss - before;
    } else {
        CT_TRY(send(R, c, 0, m, slot, 0));
    }
    return CT_OK;
}

static ct_status reduce_tied(ct_run *R);

static ct_status backward(ct_run *R, const ct_pp_action *a) {
    ct_pipe *pp = R->pipe;
    const int c = a->chunk, m = a->micro, k = piece(pp, R->pp_rank, c), slot = pp->slot_of[c * pp->M + m];
    CT_TRY(ct_plan_set_part(R->plan, c));
    CT_TRY(ct_plan_set_shape(R->plan, pp->shape_of[slot]));
    CT_TRY(ct_plan_restore_activations(R->plan, slot));
    CT_TRY(ct_plan_set_sample_offset(R->plan, ct_step_first_sample(R, m))); /* dropout's masks: this micro-batch's */
    if (k + 1 < pp->n_pieces) CT_TRY(receive(R, c, 1, m, 0));
    CT_TRY(compute(R, 0, m, k));
    if (k > 0) CT_TRY(send(R, c, 1, m, slot, 0));
    pp->slot_used[slot] = 0;
    if (R->det) { /* this chunk's gradient, the tied copies summed as one process does */
        CT_TRY(reduce_tied(R));
        CT_TRY(ct_det_push(R->det, m, pp->det_loss[m]));
    }
    return CT_OK;
}

/* The tied parameters' gradients: every holder sends its gradient to the others and adds them all in the
 * holders' order, so every copy gets the same sum and stays equal to the others. */
static ct_status reduce_tied(ct_run *R) {
    ct_pipe *pp = R->pipe;
    for (int i = 0; i < pp->n_tied; i++) {
        const tied_param *t = &pp->tied[i];
        ct_tensor g;
        CT_TRY(ct_plan_param_info(R->plan, t->param, NULL, NULL, &g));
        const size_t n = (size_t)ct_tensor_numel(&g);
        if (n * (size_t)t->n_holders > pp->tied_cap)
            return ct_set_error(R->ctx, CT_E_INTERNAL, "pipeline: the tied parameters' buffer is too small");
        ct_comm_request *q[32] = {0};
        ct_status s = CT_OK;
        snprintf(pp->what, sizeof pp->what, "the tied parameters' gradients between stages");
        for (int h = 0; h < t->n_holders && s == CT_OK; h++) {
            float *dst = pp->tied_buf + (size_t)h * n;
            if (t->holders[h] == R->pp_rank) {
                memcpy(dst, g.data, n * sizeof(float));
                continue;
            }
            s = ct_comm_request_create(R->pp, &q[2 * h]);
            if (s == CT_OK) s = ct_comm_request_create(R->pp, &q[2 * h + 1]);
            const int tg = tag(pp, 4, i % pp->n_pieces, 0);
            if (s == CT_OK) s = ct_comm_isend(R->pp, g.data, n * sizeof(float), t->holders[h], tg, q[2 * h]);
            pp->tied_bytes += (double)(n * sizeof(float));
            if (s == CT_OK) s = ct_comm_irecv(R->pp, dst, n * sizeof(float), t->holders[h], tg, q[2 * h + 1]);
        }
        for (int j = 0; j < 2 * t->n_holders; j++) {
            if (s == CT_OK && q[j]) s = wait_for(R, q[j]);
            ct_comm_request_cancel(q[j]);
        }
        CT_TRY(s);
        float *dst = g.data;
        for (size_t e = 0; e < n; e++) {
            float sum = pp->tied_buf[e];
            for (int h = 1; h < t->n_holders; h++) sum += pp->tied_buf[(size_t)h * n + e];
            dst[e] = sum;
        }
    }
    return CT_OK;
}

/* The step's statistics from the stage holding the loss to every stage. */
static ct_status share_stats(ct_run *R, ct_step_io *io) {
    double st[5] = {io->loss, io->correct, io->rows, io->units, (double)io->n};
    CT_TRY(ct_comm_broadcast(R->pp, st, sizeof st, rank_of(R->pipe, R->pipe->n_pieces - 1)));
    io->loss = st[0], io->correct = st[1], io->rows = st[2], io->units = st[3], io->n = (int)st[4];
    return CT_OK;
}

static ct_status reduce_gradients(ct_run *R) {
    if (R->det) /* the chunk tree reduces in ct_step_reduce_stats; its losses: the last stage's */
        return ct_comm_broadcast(R->pp, ct_det_losses(R->det), sizeof(double) * (size_t)R->pipe->M,
                                 rank_of(R->pipe, R->pipe->n_pieces - 1));
    double ta = ct_profiler_now_us();
    if (ct_zero_stage(R->zero) > 0) CT_TRY(ct_zero_reduce_grads(R->zero));
    else if (R->world > 1) CT_TRY(ct_dp_reduce_grads(R->comm, R->plan));
    if (R->world > 1) R->grad_reduces++;
    CT_TRY(ct_tp_reduce_copies(R));
    CT_TRY(reduce_tied(R));
    double tb = ct_profiler_now_us();
    R->grad_wait_s += 1e-6 * (tb - ta);
    if (R->prof) ct_profiler_event(R->prof, "reduce gradients", "comm", ta, tb, NULL);
    return CT_OK;
}

ct_status ct_pp_step(ct_run *R, ct_step_io *io) {
    ct_pipe *pp = R->pipe;
    if (io->first && R->accum > 1) CT_TRY(ct_plan_zero_grads(R->plan));
    if (R->scaler) CT_TRY(ct_plan_set_loss_scale(R->plan, ct_scaler_scale(R->scaler) / (float)R->grad_div));
    memset(pp->slot_used, 0, (size_t)pp->n_slots);
    const double t0 = ct_profiler_now_us();
    for (int i = 0; i < pp->n_acts; i++) {
        int64_t rows = 1;
        if (i + 1 < pp->n_acts) CT_TRY(post_next(R, &pp->acts[i + 1])); /* overlaps this action's compute */
        if (pp->acts[i].fwd) CT_TRY(forward(R, io, &pp->acts[i], &rows));
        else CT_TRY(backward(R, &pp->acts[i]));
        if (rows == 0) { /* no data: the epoch ends (nothing was sent; the early receive will not come) */
            if (pp->pre_on) {
                ct_comm_request_cancel(pp->pre);
                pp->pre_on = 0;
                CT_TRY(ct_comm_request_create(R->pp, &pp->pre));
            }
            return CT_OK;
        }
    }
    CT_TRY(wait_sends(R));
    const double t1 = ct_profiler_now_us();
    pp->wall_s += 1e-6 * (t1 - t0);
    pp->steps++;
    if (R->prof) {
        char args[128];
        snprintf(args, sizeof args, "{\"bubble\": %.4f, \"ideal\": %.4f}", 1.0 - pp->busy_s / pp->wall_s, pp->ideal);
        ct_profiler_event(R->prof, "pipeline schedule", "pipeline", t0, t1, args);
    }
    CT_TRY(ct_plan_set_part(R->plan, -1));
    CT_TRY(R->task->bind(R->task, R->plan));
    CT_TRY(reduce_gradients(R));
    CT_TRY(share_stats(R, io));
    return ct_step_update(R, io);
}

/* ---- evaluation through the pipeline ------------------------------------------------------------- */

/* The task's evaluation forward on this stage: each part in order, its activations received from the previous
 * piece and sent to the next. */
static ct_status eval_forward(void *user, ct_plan *p, int training) {
    ct_run *R = user;
    ct_pipe *pp = R->pipe;
    const int m = pp->eval_seq++;
    for (int c = 0; c < pp->v; c++) {
        const int k = piece(pp, R->pp_rank, c);
        CT_TRY(ct_plan_set_part(p, c));
        if (k > 0) CT_TRY(receive(R, c, 0, m, 1));
        CT_TRY(ct_plan_forward(p, training));
        if (k + 1 < pp->n_pieces) CT_TRY(send(R, c, 0, m, 0, 1));
    }
    return CT_OK;
}

ct_status ct_pp_evaluate(ct_run *R, ct_task_eval *ev) {
    ct_pipe *pp = R->pipe;
    ct_task *t = R->task;
    CT_TRY(t->bind(t, R->plan));
    ct_plan_set_forward_fn(R->plan, eval_forward, R);
    ct_status s = t->evaluate(t, ev);
    ct_plan_set_forward_fn(R->plan, NULL, NULL);
    if (s == CT_OK) s = wait_sends(R);
    if (s == CT_OK) s = ct_plan_set_part(R->plan, -1);
    CT_TRY(s);
    /* the stage holding the loss has the evaluation */
    return ct_comm_broadcast(R->pp, ev, sizeof *ev, rank_of(pp, pp->n_pieces - 1));
}

/* ---- what the rest of the trainer asks ------------------------------------------------------------ */

/* Per stage: its parameters, one activation slot and the slots it keeps (for the header). */
ct_status ct_pp_gather_memory(ct_run *R) {
    ct_pipe *pp = R->pipe;
    ct_plan_stats ps;
    ct_plan_get_stats(R->plan, &ps);
    double mine[4] = {(double)ps.param_bytes / 1048576.0, (double)ps.activation_bytes / 1048576.0, pp->n_slots,
                      (double)ct_plan_saved_bytes(R->plan, -1) / 1048576.0};
    double *all = malloc(sizeof mine * (size_t)pp->P);
    if (!all) return ct_set_error(R->ctx, CT_E_OOM, "out of memory");
    ct_status s = ct_comm_allgather(R->pp, mine, sizeof mine, all);
    for (int q = 0; s == CT_OK && q < pp->P && q < 64; q++) memcpy(pp->stage_mib[q], all + 4 * q, sizeof mine);
    free(all);
    return s;
}

void ct_pp_describe(const ct_run *R, char *buf, size_t len) {
    const ct_pipe *pp = R->pipe;
    size_t o = (size_t)snprintf(buf, len, "pipeline: %d stages x %d pieces each, schedule %s, %d micro-batches per "
                                "step (bubble %.1f%% ideal)", pp->P, pp->v, ct_pp_schedule_name(pp->kind), pp->M,
                                100.0 * pp->ideal);
    for (int q = 0; q < pp->P && q < 64 && o < len; q++) {
        int k0 = q, k1 = q + (pp->v - 1) * pp->P;
        int b0 = k0 ? pp->cuts[k0 - 1] : 0;
        char pieces[32];
        if (pp->v > 1) snprintf(pieces, sizeof pieces, "pieces %d, %d%s", k0, k0 + pp->P, pp->v > 2 ? ", ..." : "");
        else snprintf(pieces, sizeof pieces, "blocks %d..%d", b0, k1 + 1 < pp->n_pieces ? pp->cuts[k1] - 1 : pp->n_blocks - 1);
        const double *m = pp->stage_mib[q];
        o += (size_t)snprintf(buf + o, len - o, "\n  stage %d: %s, parameters %.1f MiB, activations %.1f MiB + %.2f MiB "
                              "kept for backward x %d micro-batches in flight = %.1f MiB", q, pieces, m[0], m[1], m[3],
                              (int)m[2], m[1] + m[3] * m[2]);
    }
}

void ct_pp_bubble(const ct_run *R, double *measured, double *ideal) {
    const ct_pipe *pp = R->pipe;
    *measured = pp->wall_s > 0 ? 1.0 - pp->busy_s / pp->wall_s : 0.0;
    *ideal = pp->ideal;
}

double ct_pp_tied_mib(const ct_run *R) { return R->pipe->tied_bytes / 1048576.0; }

void ct_pp_free(ct_run *R) {
    ct_pipe *pp = R->pipe;
    if (!pp) return;
    const int nb = pp->v * 2 * pp->n_slots;
    for (int i = 0; pp->sbuf && i < nb; i++) free(pp->sbuf[i]);
    for (int i = 0; pp->sreq && i < nb; i++) ct_comm_request_cancel(pp->sreq[i]);
    if (pp->pre_on) ct_comm_request_cancel(pp->pre);
    else ct_comm_request_free(pp->pre);
    free(pp->sbuf), free(pp->sreq), free(pp->rbuf), free(pp->prebuf), free(pp->slot_of), free(pp->shape_of), free(pp->slot_used);
    free(pp->acts), free(pp->tied), free(pp->tied_buf), free(pp->det_loss);
    free(pp);
    free(R->pp_skip);
    R->pp_skip = NULL;
    R->pipe = NULL;
}
