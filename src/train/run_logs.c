/* src/train/run_logs.c - what rank 0 logs of each step and evaluation: the
 * JSON-lines metrics log (metrics_file, ctrain/metrics.h) and the
 * TensorBoard event files (tensorboard_dir, ctrain/tensorboard.h), both from
 * one ct_metrics_step so that they hold the same numbers (also what a
 * ct_train_opts.on_step callback receives). Besides the loss,
 * accuracy, lr and loss scale: MFU (the plan's cost-model FLOPs of this
 * rank's micro-batches over the step's time and the profiler's FP32 peak),
 * the context allocator's peak and the share of the step the training
 * thread was blocked in gradient reductions (data parallel). */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "train_internal.h"

/* Opens the logs the recipe names (rank 0): the metrics log at mpath (or none) and the event file. */
ct_status ct_run_logs_open(ct_run *R, const char *mpath, const char *recipe_json) {
    const ct_recipe *r = R->r;
    if (R->wrank != 0) return CT_OK;
    if (mpath && mpath[0]) CT_TRY(ct_metrics_open(R->ctx, mpath, R->resumed, recipe_json, &R->mx));
    if (r->tensorboard_dir[0]) {
        CT_TRY(ct_tensorboard_open(R->ctx, r->tensorboard_dir, &R->tb));
        if (!R->quiet) ct_run_say(R, "  TensorBoard events: %s\n", ct_tensorboard_path(R->tb));
    }
    if (!R->mx && !R->tb) return CT_OK;
    ct_plan_stats ps;
    ct_plan_get_stats(R->plan, &ps);
    R->micro_flops = ps.flops_forward + ps.flops_backward;
    ct_profiler *p = R->prof; /* the peak FLOP/s: the run's profiler's, or a profiler's made for it alone */
    if (!p) {
        ct_profiler_opts po;
        ct_profiler_opts_default(&po);
        po.max_events = 1;
        if (ct_profiler_create(R->ctx, &po, &p) != CT_OK) p = NULL;
    }
    R->peak_flops = p ? ct_profiler_peak_flops(p, NULL) : 0;
    if (p != R->prof) ct_profiler_free(p);
    return CT_OK;
}

/* The step line of both logs: the epoch's totals since the last step (E->mk_*), the rates over the time
 * since the last step or evaluation (R->mk_time) */
ct_status ct_run_logs_step(ct_run *R, const ct_epoch *E, const ct_step_io *io) {
    if (!R->mx && !R->tb && !R->o->on_step) return CT_OK;
    const double now = ct_run_now_s() - R->start, dt = now - R->mk_time;
    ct_mem_stats ms;
    ct_context_mem_stats(R->ctx, &ms);
    ct_metrics_step ml = {
        .step = R->step,
        .epoch = (int)R->ep + 1,
        .loss = (E->loss - E->mk_loss) / R->accum,
        .acc = E->seen > E->mk_seen ? (double)(E->correct - E->mk_correct) / (double)(E->seen - E->mk_seen) : 0.0,
        .lr = io->lr,
        .samples = (double)(E->seen - E->mk_seen),
        .grad_norm = R->r->clip_grad_norm > 0.0f ? io->grad_norm : -1.0,
        .loss_scale = R->scaler ? (double)ct_scaler_scale(R->scaler) : -1.0,
        .time_s = now,
        .mfu = R->peak_flops > 0 && R->micro_flops > 0 && dt > 0 ? R->micro_flops * R->micro_n / (dt * R->peak_flops)
                                                                 : -1.0,
        .peak_mib = (double)ms.peak_bytes / 1048576.0,
        .comm_share = R->world > 1 && dt > 0 ? (R->grad_wait_s - R->mk_wait) / dt : -1.0,
    };
    R->mk_time = now, R->mk_wait = R->grad_wait_s;
    if (R->mx) CT_TRY(ct_metrics_log_step(R->mx, &ml));
    if (R->tb) CT_TRY(ct_tensorboard_log_step(R->tb, &ml));
    if (R->o->on_step && R->o->on_step(R->o->cb_user, &ml, R->total)) R->stopped = 1; /* the caller's stop */
    return CT_OK;
}

ct_status ct_run_logs_eval(ct_run *R) {
    const double now = ct_run_now_s() - R->start;
    R->mk_time = now, R->mk_wait = R->grad_wait_s; /* the next step's rates leave the evaluation out */
    if (R->mx) CT_TRY(ct_metrics_log_eval(R->mx, (int)R->ep + 1, R->step, R->ev.loss, R->ev.accuracy, now));
    if (R->tb) CT_TRY(ct_tensorboard_log_eval(R->tb, R->step, R->ev.loss, R->ev.accuracy, now));
    return CT_OK;
}

/* Closes both (NULL-safe); the first error */
ct_status ct_run_logs_close(ct_run *R) {
    ct_status s = ct_metrics_close(R->mx), t = ct_tensorboard_close(R->tb);
    R->mx = NULL, R->tb = NULL;
    return s != CT_OK ? s : t;
}
