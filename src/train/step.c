/* src/train/step.c - the default training step (ct_step_default, the seam in
 * train_internal.h): one optimizer step of the run, in named parts:
 *   micro-batches (next batch -> forward -> backward, x accumulate_steps)
 *   -> reduce_gradients (data parallel buckets, ZeRO's reduce-scatter)
 *   -> ct_step_reduce_stats (the statistics over the ranks, the loss check)
 *   -> update (unscale + overflow check, clip, optimizer step or skip, scale update).
 * The trainer (trainer.c) calls it once per optimizer step through
 * ct_run.train_step; a pipeline schedule replaces it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "train_internal.h"

/* The global index of micro-batch `micro`'s first sample, dropout's key (ct_plan_set_sample_offset: masks
 * by global sample, the same at any world size): deterministic: chunk rank x K/N + micro / A of the step's
 * global batch micro % A (deterministic.c); else this rank's rows of the micro-th global batch of the step
 * (one process: micro x batch_size). */
int64_t ct_step_first_sample(const ct_run *R, int micro) {
    const int64_t Bg = R->r->batch_size, b = Bg / (R->world > 0 ? R->world : 1);
    const int A = R->accum > 0 ? R->accum : 1;
    if (R->det) return (int64_t)(micro % A) * Bg + R->rank * b + (int64_t)(micro / A) * R->local.batch_size;
    return (int64_t)micro * Bg + R->rank * b;
}

/* The gradient buckets' reductions finished (those not started during backward start now), timed. */
static ct_status wait_buckets(ct_run *R) {
    double ta = ct_profiler_now_us();
    CT_TRY(ct_buckets_finish(R->bk, NULL));
    double tb = ct_profiler_now_us();
    R->grad_wait_s += 1e-6 * (tb - ta);
    R->grad_reduces++;
    if (R->prof) {
        ct_profiler_event(R->prof, R->zero ? "wait for reduce-scatter buckets" : "wait for gradient buckets", "comm",
                          ta, tb, NULL);
        ct_dp_buckets_trace(R->bk, R->prof);
    }
    return CT_OK;
}

/* A zero gradient arena (ZeRO-2/3: released rather than written, so that it takes no memory). */
static ct_status clear_grads(ct_run *R) {
    return R->zero && !R->pipe ? ct_zero_clear_grads(R->zero) : ct_plan_zero_grads(R->plan);
}

/* ZeRO's gradients are reduce-scattered (each rank reduces, checks and clips its segment). Not in the
 * deterministic mode: its tree gives every rank the whole summed gradient, checked and clipped whole as
 * zero_stage 0 does (the same bits at any world size); ZeRO then updates the segment and allgathers. */
static int zero_segments(const ct_run *R) { return ct_zero_stage(R->zero) > 0 && !R->det; }

/* One micro-batch: next batch, forward, backward; its statistics into io. *rows 0: the data ran out. */
static ct_status micro_batch(ct_run *R, ct_step_io *io, int micro, int64_t *rows) {
    const ct_recipe *r = R->r;
    ct_task *t = R->task;
    double td = R->prof ? ct_profiler_now_us() : 0;
    *rows = 0;
    CT_TRY(t->next_batch(t, io->step, micro, rows));
    if (*rows == 0) return CT_OK; /* the epoch's data is exhausted */
    if (R->prof) ct_profiler_event(R->prof, "batch", "data", td, ct_profiler_now_us(), NULL);
    float loss;
    if (R->scaler) CT_TRY(ct_plan_set_loss_scale(R->plan, ct_scaler_scale(R->scaler) / (float)R->grad_div));
    /* forward, backward (bn_stats_once: running statistics from the step's last micro-batch only;
     * deterministic: from the step's first chunk only, which is rank 0's micro-batch 0 at any world size) */
    if (r->bn_stats_once) ct_plan_set_update_running_stats(R->plan, micro == R->accum - 1);
    if (r->deterministic) ct_plan_set_update_running_stats(R->plan, R->rank == 0 && micro == 0);
    CT_TRY(ct_plan_set_sample_offset(R->plan, ct_step_first_sample(R, micro)));
    CT_TRY(ct_plan_forward(R->plan, 1));
    ct_plan_loss(R->plan, &loss);
    if (!isfinite(loss) && R->scaler) loss = 0.0f; /* FP16 overflowed in the forward: the scaler skips this step */
    /* data parallel: the last micro-batch's backward sends each bucket as soon as its gradients are final
     * (ZeRO-2/3 with accumulation: every micro-batch's, each reduced into the shard on its own) */
    const int last = micro == R->accum - 1, each = ct_zero_micro_reduces(R->zero);
    ct_zero_set_last_micro(R->zero, last);
    if (R->bk && (last || each)) CT_TRY(ct_buckets_begin(R->bk));
    CT_TRY(ct_plan_backward(R->plan));
    if (R->bk && each && !last) CT_TRY(wait_buckets(R));
    io->batches += !r->deterministic || micro < R->accum; /* deterministic: micro-batch a < A reads batch a */
    if (r->deterministic) CT_TRY(ct_det_push(R->det, micro, loss));
    io->loss += loss;
    if (t->has_accuracy) io->correct += (double)t->batch_correct(t, *rows);
    io->rows += (double)*rows;
    io->units += t->batch_units ? (double)t->batch_units(t) : (double)(*rows * t->unit_per_row);
    io->n++;
    return CT_OK;
}

/* The step's gradients summed over the ranks (data parallel or ZeRO), before anything else of the step
 * talks to the other ranks: with comm_progress thread the progress thread may still be starting buckets
 * until ct_buckets_finish returns, and MPI_THREAD_SERIALIZED allows no other MPI call meanwhile (and the
 * ranks must issue their collectives in the same order: a statistics allreduce slipping between two
 * buckets on one rank only would pair with a bucket on the other). */
static ct_status reduce_gradients(ct_run *R) {
    if (R->det) return CT_OK; /* the deterministic tree reduces in ct_step_reduce_stats */
    if (R->bk) return wait_buckets(R); /* data parallel or ZeRO's buckets: the same bits on every rank */
    if (zero_segments(R)) { /* ZeRO on one rank, or without buckets */
        double ta = R->prof ? ct_profiler_now_us() : 0;
        CT_TRY(ct_zero_reduce_grads(R->zero));
        R->grad_reduces++;
        if (R->prof) ct_profiler_event(R->prof, "reduce-scatter gradients", "comm", ta, ct_profiler_now_us(), NULL);
    } else if (R->world > 1) {
        double ta = ct_profiler_now_us();
        CT_TRY(ct_dp_reduce_grads(R->comm, R->plan));
        double tb = ct_profiler_now_us();
        R->grad_wait_s += 1e-6 * (tb - ta);
        R->grad_reduces++;
        if (R->prof) ct_profiler_event(R->prof, "allreduce gradients", "comm", ta, tb, NULL);
    }
    return CT_OK;
}

/* The loss check of ct_step_reduce_stats: loss is the step's mean. */
static ct_status check_loss(ct_run *R, const ct_step_io *io, double loss) {
    const ct_recipe *r = R->r;
    if (!isfinite(loss))
        return ct_set_error(R->ctx, CT_E_NONFINITE,
                            "the loss became %g at step %lld (epoch %lld, lr %g); lower optimizer.lr, check the data "
                            "for NaN/inf (detect_anomaly: true names the first op)",
                            loss, (long long)io->step + 1, (long long)io->epoch + 1, (double)io->lr);
    if (R->first_loss < 0.0 && loss > 0.0) R->first_loss = loss;
    if (r->divergence_factor > 0.0f && R->first_loss > 0.0 && loss > (double)r->divergence_factor * fmax(R->first_loss, 1.0))
        return ct_set_error(R->ctx, CT_E_NONFINITE,
                            "the loss %g at step %lld (epoch %lld, lr %g) is more than divergence_factor %g times the "
                            "run's first loss %g: training diverged; lower optimizer.lr or add warmup "
                            "(divergence_factor: 0 turns this check off)",
                            loss, (long long)io->step + 1, (long long)io->epoch + 1, (double)io->lr,
                            (double)r->divergence_factor, R->first_loss);
    return CT_OK;
}

/* A loss that is not finite (without a loss scaler, which zeroes an overflowed forward's loss and skips
 * the step) or that diverged ends the run. */
ct_status ct_step_reduce_stats(ct_run *R, ct_step_io *io) {
    if (R->det && io->n) {
        /* the chunk losses summed in chunk order (the same double at any world size), as one mean per step */
        double cr[3] = {io->correct, io->rows, io->units};
        CT_TRY(ct_comm_allreduce_f64(R->comm, cr, 3, CT_REDUCE_SUM)); /* integers: exact in any order */
        io->correct = cr[0], io->rows = cr[1], io->units = cr[2];
        CT_TRY(ct_det_reduce(R->det, &io->loss));
        R->grad_reduces++;
        io->n = R->accum; /* io->loss: the sum of the step's global batches' mean losses */
    } else {
        CT_TRY(ct_dp_reduce_step(R->comm, &io->loss, &io->correct, &io->rows, &io->units));
    }
    return check_loss(R, io, io->n ? io->loss / io->n : 0.0);
}

/* The part of the gradient arena this rank decides on: ZeRO's segment, else all of it (tensor parallel:
 * its shards). The other ranks hold the rest: the decisions below are reduced over the data group (ZeRO)
 * and the tensor group. */
static void my_part(const ct_run *R, size_t *b, size_t *e) {
    *b = 0;
    *e = R->n_par;
    if (zero_segments(R)) ct_zero_segment(R->zero, b, e);
}

/* Any rank's overflow, and whether every rank's part is all zeros, over the groups that hold the other parts. */
static ct_status agree(const ct_run *R, int *overflow, int *all_zero) {
    double f[2] = {*overflow ? 1.0 : 0.0, *all_zero ? 0.0 : 1.0};
    if (zero_segments(R) && R->world > 1) CT_TRY(ct_comm_allreduce_f64(R->comm, f, 2, CT_REDUCE_MAX));
    if (R->tp) CT_TRY(ct_comm_allreduce_f64(R->tp, f, 2, CT_REDUCE_MAX));
    if (R->pp) CT_TRY(ct_comm_allreduce_f64(R->pp, f, 2, CT_REDUCE_MAX)); /* every stage's part */
    *overflow = f[0] > 0.0;
    *all_zero = f[1] == 0.0;
    return CT_OK;
}

/* Clipping by the global norm of the parts (ct_clip_grad_norm's arithmetic: clip_coef = max_norm / (norm +
 * 1e-6), at most 1, in float). */
static ct_status clip_parts(ct_run *R, float max_norm, float *total) {
    size_t b, e;
    my_part(R, &b, &e);
    double ss = ct_run_sumsq(R, R->grads, b, e);
    if (zero_segments(R)) CT_TRY(ct_comm_allreduce_f64(R->comm, &ss, 1, CT_REDUCE_SUM));
    if (R->tp) CT_TRY(ct_comm_allreduce_f64(R->tp, &ss, 1, CT_REDUCE_SUM));
    if (R->pp) CT_TRY(ct_comm_allreduce_f64(R->pp, &ss, 1, CT_REDUCE_SUM));
    const float tn = (float)sqrt(ss), coef = max_norm / (tn + 1e-6f), cl = coef > 1.0f ? 1.0f : coef;
    if (cl != 1.0f)
        for (size_t i = b; i < e; i++) R->grads[i] *= cl;
    *total = tn;
    return CT_OK;
}

/* All finite: the all-zero check, clipping, the optimizer's update and (ZeRO) the parameters' allgather. */
static ct_status update(ct_run *R, ct_step_io *io, int all_zero) {
    const ct_recipe *r = R->r;
    const int zero = ct_zero_stage(R->zero) > 0;
    io->zero_grads = all_zero;
    if (r->clip_grad_norm > 0.0f) {
        if (zero_segments(R) || R->tp || R->pp) /* every rank's part */
            CT_TRY(clip_parts(R, r->clip_grad_norm, &io->grad_norm));
        else CT_TRY(ct_clip_grad_norm(R->plan, r->clip_grad_norm, 2.0f, &io->grad_norm));
    }
    if (r->clip_grad_value > 0.0f && zero) { /* this rank's segment: the rest is not its to touch (or released) */
        size_t b, e;
        my_part(R, &b, &e);
        const float c = r->clip_grad_value;
        for (size_t k = b; k < e; k++) R->grads[k] = R->grads[k] > c ? c : R->grads[k] < -c ? -c : R->grads[k];
    } else if (r->clip_grad_value > 0.0f) CT_TRY(ct_clip_grad_value(R->plan, r->clip_grad_value));
    CT_TRY(ct_optimizer_set_lr(R->opt, io->lr));
    CT_TRY(ct_optimizer_step(R->opt));
    if (zero) {
        double tg = R->prof ? ct_profiler_now_us() : 0;
        CT_TRY(ct_zero_allgather_params(R->zero));
        if (R->prof) ct_profiler_event(R->prof, "allgather parameters", "comm", tg, ct_profiler_now_us(), NULL);
    }
    return CT_OK;
}

/* The scaler's update and its events in the trace's "amp" category (the trainer logs them in the
 * metrics log); io->stop when the scale stayed at its floor (loss_scale.floor = stop). */
static ct_status scaler_update(ct_run *R, ct_step_io *io, int overflow, int bad_param) {
    double ts = R->prof ? ct_profiler_now_us() : 0;
    CT_TRY(ct_scaler_update(R->scaler, R->plan, overflow, bad_param));
    const ct_scale_record *ev = NULL;
    int n_ev = 0;
    ct_scaler_last_events(R->scaler, &ev, &n_ev);
    for (int i = 0; i < n_ev && R->prof; i++) {
        char args[192];
        snprintf(args, sizeof args, "{\"event\": \"%s\", \"scale\": %g, \"first_nonfinite\": \"%.60s\"}",
                 ct_scale_event_name(ev[i].event), (double)ev[i].scale, ev[i].tensor);
        ct_profiler_event(R->prof, ev[i].event == CT_SCALE_GROWTH ? "loss scale grown" : ev[i].event == CT_SCALE_BACKOFF
                                       ? "loss scale backoff" : "overflow: update skipped",
                          "amp", ts, ct_profiler_now_us(), args);
    }
    io->stop = ct_scaler_should_stop(R->scaler);
    return CT_OK;
}

/* With a loss scaler: unscale + inf/NaN check in one pass, then (all finite) clipping and the update,
 * else the update is skipped; then the scaler's update. */
static ct_status optimizer_step(ct_run *R, ct_step_io *io) {
    int overflow = 0, bad_param = -1;
    io->grad_norm = 0.0f;
    size_t i, e;
    my_part(R, &i, &e);
    if (R->scaler) CT_TRY(ct_scaler_unscale_range(R->scaler, R->plan, i, e, &overflow, &bad_param));
    /* ZeRO: each rank holds its segment only, tensor parallel its shards: the overflow and the zero check over
     * all. All-zero gradients train nothing (an FP16 scale so small they underflow, or a dead model): counted
     * and reported at the end; the scan stops at the first nonzero value, so it costs nothing normally */
    while (i < e && R->grads[i] == 0.0f) i++;
    int all_zero = i == e;
    CT_TRY(agree(R, &overflow, &all_zero));
    if (!overflow) CT_TRY(update(R, io, all_zero));
    return R->scaler ? scaler_update(R, io, overflow, bad_param) : CT_OK;
}

ct_status ct_step_update(ct_run *R, ct_step_io *io) {
    CT_TRY(ct_step_reduce_stats(R, io));
    double to = R->prof ? ct_profiler_now_us() : 0;
    CT_TRY(optimizer_step(R, io));
    if (R->accum > 1) CT_TRY(clear_grads(R));
    if (R->prof) ct_profiler_event(R->prof, "optimizer step", "optimizer", to, ct_profiler_now_us(), NULL);
    io->done = 1;
    return CT_OK;
}

ct_status ct_step_default(ct_run *R, ct_step_io *io) {
    if (io->first && R->accum > 1) CT_TRY(clear_grads(R));
    for (int micro = 0; micro < R->micro_n; micro++) {
        int64_t rows = 0;
        CT_TRY(micro_batch(R, io, micro, &rows));
        /* the micro-batches of an unfinished accumulation at the epoch's end count in its totals (deterministic:
         * the task reads the step's global batches at micro-batch 0, all or none) */
        if (rows == 0 && R->det && micro > 0)
            return ct_set_error(R->ctx, CT_E_INTERNAL, "deterministic: the %s task ran out of data at micro-batch %d "
                                "of a step (it must read the step's batches at micro-batch 0)",
                                R->task->name ? R->task->name : "custom", micro);
        if (rows == 0) return io->n ? ct_step_reduce_stats(R, io) : CT_OK;
        /* more micro-batches before this step: nothing is sent (data parallel) until the last one */
    }
    CT_TRY(reduce_gradients(R));
    CT_TRY(ct_tp_reduce_copies(R)); /* tensor parallel: the replicated parameters' gradients (grad_reduce_method) */
    return ct_step_update(R, io);
}
