/* src/train/progress.c - every line a training run prints (train_internal.h):
 * the header, the progress line or bar of each step, the epoch's line, the
 * loss scaler's stop, the summary with the communication figures, and the
 * health report of what went wrong quietly. Rank 0 alone prints (R->out is
 * NULL on the others); nothing here changes the run. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "train_internal.h"

void ct_run_say(ct_run *R, const char *fmt, ...) {
    if (!R->out) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(R->out, fmt, ap);
    va_end(ap);
    fflush(R->out);
}

static void fmt_time(double s, char *buf, size_t len) {
    if (!(s >= 0) || s > 1e7) s = 0;
    int t = (int)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, len, "%d:%02d", t / 60, t % 60);
}

/* ---- the header ---------------------------------------------------------------------------- */

static void print_precision(ct_run *R) {
    const ct_recipe *r = R->r;
    if (r->precision == CT_PRECISION_FP32) return;
    const char *pn = ct_precision_name(r->precision);
    ct_run_say(R, "  precision %s: %d casts, loss scaling %s%s%s\n", pn, ct_plan_num_casts(R->plan),
        ct_amp_scaling_name(ct_run_scaling(r)),
        r->keep_fp32[0] ? ", kept in fp32: " : "", r->keep_fp32);
    const ct_cpu_features *f = ct_context_cpu(R->ctx);
    int bf16 = r->precision == CT_PRECISION_BF16 || r->precision == CT_PRECISION_BF16_PURE;
    int hw = bf16 ? (f->amx_bf16 && f->amx_permitted) || (f->avx512_bf16 && f->os_avx512) : f->avx512_fp16 && f->os_avx512;
    if (!hw)
        ct_run_say(R,
            "  note: this CPU has no %s matrix unit (%s): %s saves activation memory and gives %s numerics, but "
            "every op computes in FP32 on converted copies, so steps are slower than fp32\n",
            bf16 ? "BF16" : "FP16", bf16 ? "AMX-BF16 / AVX512-BF16" : "AVX512-FP16", pn, bf16 ? "BF16" : "FP16");
}

/* Several ranks: the layout (tensor parallel) and what one rank holds. */
static void header_per_rank(ct_run *R) {
    if (ct_comm_size(R->world_comm) == 1) return;
    double whole = 0, mine = 0, copies = 0;
    for (int i = 0; i < ct_plan_num_params(R->plan); i++) {
        ct_tensor v;
        ct_shard sh;
        int64_t full[CT_MAX_DIMS];
        if (ct_plan_param_info(R->plan, i, NULL, &v, NULL) != CT_OK || ct_plan_param_shard(R->plan, i, &sh) != CT_OK)
            continue;
        ct_shard_full_shape(&sh, v.ndim, v.shape, full);
        double n = 1, nf = 1;
        for (int d = 0; d < v.ndim; d++) n *= (double)v.shape[d], nf *= (double)full[d];
        whole += nf;
        mine += n;
        if (sh.dim < 0) copies += n;
    }
    float *ost = NULL;
    size_t on = 0;
    ct_optimizer_state(R->opt, &ost, &on);
    ct_plan_stats ps;
    ct_plan_get_stats(R->plan, &ps);
    const double M = 1048576.0;
    if (R->tp && !R->pipe) /* (a pipeline's layout line below names all three) */
        ct_run_say(R, "  layout: %d ranks = data parallel %d x tensor parallel %d (a tensor group is %d consecutive "
                      "ranks); grad_reduce_method %s; %.2fM of the model's %.2fM parameters on each rank (%.3fM "
                      "copies every tensor rank holds)\n",
                   R->world * R->tp_size, R->world, R->tp_size, R->tp_size,
                   R->r->grad_reduce_method == 1 ? "sum" : "mean", mine / 1e6, whole / 1e6, copies / 1e6);
    if (R->pipe) {
        char pl[4096];
        ct_pp_describe(R, pl, sizeof pl);
        ct_run_say(R, "  layout: %d ranks = data parallel %d x tensor parallel %d x pipeline %d\n  %s\n",
                   ct_comm_size(R->world_comm), R->world, R->tp_size, R->pp_size, pl);
    }
    /* a pipeline stage keeps what backward reads per micro-batch in flight (rank 0's stage: the first) */
    const double act = (double)ps.activation_bytes + (double)ps.workspace_bytes +
                       (double)ct_plan_saved_bytes(R->plan, -1) * ct_plan_num_act_slots(R->plan);
    /* ZeRO: the peaks of what it shards (stage 2, 3: the gradients' in backward; stage 3: the parameters') */
    double par = (double)ps.param_bytes, grad = (double)ps.grad_bytes;
    if (R->zero && !R->det) {
        ct_zero_mem zm;
        ct_zero_memory(R->zero, R->bk, on, &zm);
        par = zm.params_peak, grad = zm.grads_peak;
    }
    ct_run_say(R, "  per rank: %.2f MiB parameters + %.2f MiB gradients + %.2f MiB optimizer state + %.2f MiB "
                  "activations%s = %.2f MiB model state and activations%s\n",
               par / M, grad / M, (double)on * sizeof(float) / M, act / M, R->pipe ? " (in flight)" : "",
               (par + grad + (double)on * sizeof(float) + act) / M, R->zero && !R->det ? " (ZeRO: at their peaks)" : "");
}

/* ZeRO's memory per rank: what each stage shards, from ct_zero_memory. */
static void header_zero(ct_run *R) {
    const ct_recipe *r = R->r;
    const int st = ct_zero_stage(R->zero);
    float *ost = NULL;
    size_t on = 0;
    ct_zero_mem m;
    ct_optimizer_state(R->opt, &ost, &on);
    ct_zero_memory(R->zero, R->bk, on, &m);
    const double mib = 1048576.0;
    if (R->det) /* the deterministic tree reduces whole gradients: they stay whole */
        m.grads_between = m.grads_peak = (double)R->n_par * sizeof(float);
    ct_run_say(R, "  zero_stage %d: per rank %.2f MiB optimizer state (1/%d of %.2f MiB); gradients %.2f MiB between "
               "steps, %.2f MiB at the peak of backward%s; parameters %.2f MiB%s\n", st, m.state / mib, R->world,
               (double)ct_run_optim_state_per_param(&r->optim) * (double)R->n_par * sizeof(float) / mib,
               m.grads_between / mib, m.grads_peak / mib,
               st >= 2 && !R->det ? " (each bucket released outside the shard as soon as it is reduced)" : "",
               m.params / mib,
               st == 3 ? "" : " (whole; allgathered after each update)");
    if (R->det)
        ct_run_say(R, "  zero_stage %d with deterministic: whole gradients summed by the fixed-tree allreduce (the same "
                   "bits at any world size), each rank updates its segment\n", st);
    if (st == 3) {
        ct_zero3_stats zs;
        ct_zero3_get_stats(ct_zero_z3(R->zero), &zs);
        ct_run_say(R, "  zero_stage 3: parameters in %d unit%s of up to %.2f MiB, each allgathered before use in forward "
                   "and in backward (one unit ahead) and released after: at most %.2f MiB of them at once\n",
                   zs.units, zs.units == 1 ? "" : "s", (double)zs.largest_unit_bytes / mib, m.params_peak / mib);
        if (zs.copies_bytes)
            ct_run_say(R, "  zero_stage 3, %s: the 16-bit weight copies (%.2f MiB, resident) allgathered once per "
                       "step from each rank's cast segment (half the bytes of the FP32 weights); the units hold the "
                       "parameters read in FP32 only\n",
                       ct_recipe_enum_name("precision", r->precision), (double)zs.copies_bytes / mib);
    }
}

/* Tensor and data parallel, ZeRO and the deterministic mode. */
static void header_parallel(ct_run *R) {
    const ct_recipe *r = R->r;
    header_per_rank(R);
    if (R->world > 1 && R->bk) {
        char bl[512];
        ct_dp_buckets_describe(R->bk, r, ct_plan_grad_ready_order(R->plan, NULL, 0), bl, sizeof bl);
        ct_run_say(R, "  data parallel: %d ranks x %lld rows (global batch %lld), gradients (%.2f MiB) %s in %s\n",
                   R->world, (long long)R->local.batch_size, (long long)r->batch_size,
                   (double)R->n_par * sizeof(float) / 1048576.0, R->zero ? "reduce-scattered" : "averaged", bl);
    }
    else if (R->world > 1)
        ct_run_say(R, "  data parallel: %d ranks x %lld rows (global batch %lld), gradients averaged by %s of "
                   "%.2f MiB per step\n", R->world, (long long)(r->batch_size / R->world), (long long)r->batch_size,
                   R->det ? "one fixed-tree allreduce" : ct_zero_stage(R->zero) > 0 ? "one reduce-scatter"
                                                                                     : "one allreduce",
                   (double)R->n_par * sizeof(float) / 1048576.0);
    if (ct_zero_stage(R->zero) > 0) header_zero(R);
    if (r->deterministic)
        ct_run_say(R, "  deterministic: %d chunks of %lld rows per global batch, %d on each rank%s, gradients added in "
                   "one fixed tree (bit-identical at any power-of-two world size dividing %d with the same threads "
                   "per rank)\n", r->deterministic_chunks, (long long)R->local.batch_size,
                   ct_det_local_chunks(R->det) / R->accum, R->accum > 1 ? " of each of the step's accumulate_steps "
                                                                        "global batches" : "",
                   r->deterministic_chunks);
}

/* The recipe's keys that apply to the model and differ from the defaults; every key (rj), and which do not apply,
 * with ct_train_opts.verbose. */
static void header_recipe(ct_run *R, const char *rj) {
    char aj[8192], nj[8192];
    const char *model = ct_recipe_enum_name("model", (int)R->r->model);
    if (R->o->verbose) {
        if (ct_recipe_to_json_applied(R->r, 0, nj, sizeof nj) < 0) snprintf(nj, sizeof nj, "(out of memory)");
        ct_run_say(R, "  recipe: %s\n  keys that do not apply to %s: %s\n", rj, model, nj);
        return;
    }
    if (ct_recipe_to_json_applied(R->r, 2, aj, sizeof aj) < 0) snprintf(aj, sizeof aj, "(out of memory)");
    ct_run_say(R, "  recipe (%s; the keys not at their defaults; every key: --verbose): %s\n", model, aj);
}

void ct_progress_header(ct_run *R, const char *rj) {
    const ct_recipe *r = R->r;
    ct_task *t = R->task;
    ct_plan_stats ps;
    ct_plan_get_stats(R->plan, &ps);
    char line[1024];
    t->describe(t, &ps, line, sizeof line);
    ct_run_say(R, "ctrain train: %s\n", line);
    ct_run_say(R, "  threads %d, kernels: %s%s, %lld steps of %lld x %lld rows%s\n", ct_context_num_threads(R->ctx),
               ct_isa_name(ct_context_isa(R->ctx)), ct_context_use_onednn(R->ctx) ? " + oneDNN" : "",
               (long long)R->total, (long long)r->batch_size, (long long)R->accum,
               R->data_epochs ? "" : " (tokens: x context)");
    header_parallel(R);
    if (r->lr_scaling != CT_LR_SCALING_NONE)
        ct_run_say(R, "  lr_scaling %s: global batch %lld, base %lld: lr %g -> %g\n",
                   ct_recipe_enum_name("lr_scaling", (int)r->lr_scaling), (long long)(r->batch_size * R->accum),
                   (long long)r->lr_base_batch, (double)r->optim.lr, ct_train_scaled_lr(r));
    print_precision(R);
    header_recipe(R, rj);
    if (!R->resumed) return;
    const ct_train_state *ck = R->st;
    if (R->data_epochs)
        ct_run_say(R, "  resumed from %s: step %lld, epoch %lld, batch %lld%s\n", ck->path, (long long)R->step,
                   (long long)R->ep + 1, (long long)R->ck_batch, ck->finished ? " (the run had ended)" : "");
    else
        ct_run_say(R, "  resumed from %s: step %lld%s\n", ck->path, (long long)R->step,
                   ck->finished ? " (the run had ended)" : "");
}

/* ---- steps and epochs ---------------------------------------------------------------------- */

/* The epochs this run trains (max_steps can end it before r->epochs) and the batches of the current epoch
 * that it trains, b being the batches done: the whole epoch, or fewer where max_steps ends the run. */
static int run_epochs(const ct_run *R) {
    int64_t spe = R->per_epoch / (R->accum > 0 ? R->accum : 1);
    int64_t n = spe > 0 ? (R->total + spe - 1) / spe : R->r->epochs;
    return n > 0 && n < R->r->epochs ? (int)n : R->r->epochs;
}
static int64_t epoch_batches(const ct_run *R, int64_t b) {
    if (!(R->r->max_steps > 0 && R->total == R->r->max_steps)) return R->per_epoch; /* max_steps does not end it */
    int64_t left = b + (R->total - R->step) * R->accum;
    return left < R->per_epoch ? left : R->per_epoch;
}

void ct_progress_step(ct_run *R, const ct_epoch *E, const ct_step_io *io) {
    const ct_recipe *r = R->r;
    const ct_task *t = R->task;
    const int64_t b = E->b, step = R->step;
    const int64_t eb = R->data_epochs ? epoch_batches(R, b) : 0;
    int show = R->data_epochs ? (R->tty ? (b % 5 == 0 || b == eb) : (b % r->log_every == 0))
                              : (R->tty ? 1 : (step % r->log_every == 0 || step == R->total));
    if (R->quiet || !show) return;
    double el = ct_run_now_s() - R->start;
    char eta[32], head[96], acc[32] = "", nb[32] = "", sb[64] = "";
    fmt_time(el / (double)(step - R->step0) * (double)(R->total - step), eta, sizeof eta);
    if (R->data_epochs) {
        int bar = (int)(20 * b / (eb > 0 ? eb : 1));
        char bb[24];
        for (int i = 0; i < 20; i++) bb[i] = i < bar ? '#' : '.';
        bb[20] = 0;
        snprintf(head, sizeof head, "epoch %lld/%d [%s] %lld/%lld", (long long)R->ep + 1, run_epochs(R), bb,
                 (long long)b, (long long)eb);
    } else {
        snprintf(head, sizeof head, "step %lld/%lld", (long long)step, (long long)R->total);
    }
    if (t->has_accuracy) snprintf(acc, sizeof acc, "  acc %5.2f%%", 100.0 * (double)E->correct / (double)E->seen);
    if (r->clip_grad_norm > 0.0f) snprintf(nb, sizeof nb, "  grad norm %.3g", (double)io->grad_norm);
    if (R->scaler) {
        ct_scaler_state ss;
        ct_scaler_get_state(R->scaler, &ss);
        snprintf(sb, sizeof sb, "  scale %g skipped %llu", (double)ss.scale, (unsigned long long)ss.skipped);
    }
    ct_run_say(R, "%s%s  loss %.4f%s  lr %.2e%s%s  %.0f %s/s  %.0f ms/step  ETA %s%s", R->tty ? "\r" : "  ", head,
               E->loss / (double)b, acc, (double)io->lr, nb, sb, R->units_done / el, t->unit,
               1e3 * el / (double)(step - R->step0), eta, R->tty ? "\033[K" : "\n");
}

void ct_progress_scaler_stop(ct_run *R) {
    ct_run_say(R, "\n  loss scaler: the scale stayed at loss_scale.min_scale %g for %d overflows in a row; stopping "
               "(loss_scale.floor = stop). Check the data and the learning rate, or train in bf16\n",
               (double)R->r->scale_min, R->r->scale_floor_patience);
}

void ct_progress_epoch(ct_run *R, const ct_epoch *E, double eval_s) {
    const ct_task *t = R->task;
    const ct_task_eval *ev = &R->ev;
    char head[64], tacc[40] = "", eacc[40] = "", tail[160];
    if (R->data_epochs) snprintf(head, sizeof head, "epoch %lld/%d", (long long)R->ep + 1, run_epochs(R));
    else snprintf(head, sizeof head, "step %lld/%lld", (long long)R->step, (long long)R->total);
    if (t->has_accuracy) {
        snprintf(tacc, sizeof tacc, "  train acc %.2f%%", E->seen ? 100.0 * (double)E->correct / (double)E->seen : 0.0);
        snprintf(eacc, sizeof eacc, "  %s acc %.2f%%", t->eval_split, 100.0 * ev->accuracy);
    }
    double ep_time = ct_run_now_s() - E->start;
    if (ev->detail[0]) snprintf(tail, sizeof tail, "  %s, %.1f s)", ev->detail, eval_s);
    else snprintf(tail, sizeof tail, "  %.1f s  %.0f %s/s", ep_time, R->ep_units / ep_time, t->unit);
    ct_run_say(R, "%s%s  train loss %.4f%s  %s loss %.4f%s%s\n", R->tty && !R->quiet ? "\r\033[K" : "", head,
               E->b ? E->loss / (double)E->b : 0.0, tacc, t->eval_split, ev->loss, eacc, tail);
}

/* ---- the end ------------------------------------------------------------------------------- */

static void summary_comm(ct_run *R, ct_train_result *res, double tt) {
    ct_comm_stats cs;
    ct_comm_get_stats(R->comm, &cs);
    res->comm_seconds = cs.seconds - R->cs0.seconds;
    char rs[48] = "";
    if (cs.reduce_scatter_calls)
        snprintf(rs, sizeof rs, ", %llu reduce-scatter", (unsigned long long)cs.reduce_scatter_calls);
    ct_run_say(R, "communication (rank 0): %lld gradient %s (one per optimizer step), %llu collectives in all "
               "(%llu allreduce, %llu broadcast, %llu allgather, %llu barrier%s; %.2f MiB), %.2f s of the training "
               "inside them (%.1f%%)\n",
               (long long)R->grad_reduces, ct_zero_stage(R->zero) > 0 ? "reduce-scatters" : "allreduces",
               (unsigned long long)(cs.allreduce_calls + cs.broadcast_calls + cs.allgather_calls + cs.barrier_calls +
                                    cs.reduce_scatter_calls),
               (unsigned long long)cs.allreduce_calls, (unsigned long long)cs.broadcast_calls,
               (unsigned long long)cs.allgather_calls, (unsigned long long)cs.barrier_calls, rs,
               (double)(cs.allreduce_bytes + cs.broadcast_bytes + cs.allgather_bytes + cs.reduce_scatter_bytes) /
                   1048576.0,
               res->comm_seconds, tt > 0 ? 100.0 * res->comm_seconds / tt : 0.0);
    ct_run_say(R, "communication share (rank 0): %.1f%% of the training blocked on the gradients (%.2f s over %lld "
               "steps, %.2f ms/step)\n", tt > 0 ? 100.0 * R->grad_wait_s / tt : 0.0, R->grad_wait_s,
               (long long)R->grad_reduces, R->grad_reduces ? 1e3 * R->grad_wait_s / (double)R->grad_reduces : 0.0);
}

void ct_progress_summary(ct_run *R, ct_train_result *res, double tt, const ct_mem_stats *ms) {
    const ct_task *t = R->task;
    const int64_t step = R->step, step0 = R->step0;
    char accs[48] = "";
    if (t->has_accuracy) snprintf(accs, sizeof accs, ", %s accuracy %.2f%%", t->eval_split, 100.0 * R->ev.accuracy);
    ct_run_say(R, "done: %lld steps in %.1f s (%.0f ms/step, %.0f %s/s), %s loss %.4f%s, peak memory %.1f MiB\n",
               (long long)step, tt, 1e3 * tt / (double)(step > step0 ? step - step0 : 1),
               R->units_done / (tt > 0 ? tt : 1), t->unit, t->eval_split, R->ev.loss,
               accs, (double)ms->peak_bytes / 1048576.0);
    if (R->world > 1) summary_comm(R, res, tt);
    if (R->world > 1 && ct_zero_z3(R->zero)) {
        ct_zero3_stats zs;
        ct_zero3_get_stats(ct_zero_z3(R->zero), &zs);
        ct_run_say(R, "zero_stage 3 (rank 0): %lld gathers (%.2f MiB), %.2f s waiting for them; %lld evaluation forwards "
                   "that ranks whose batches were done replayed (gathers only)\n", (long long)zs.gathers,
                   zs.gathered_bytes / 1048576.0, zs.wait_s, (long long)zs.replays);
    }
    if (R->tp) {
        ct_comm_stats cs;
        ct_comm_get_stats(R->tp, &cs);
        const double sec = cs.seconds - R->tp_cs0.seconds;
        ct_run_say(R, "tensor parallel (rank 0): %llu collectives in the tensor group (%.2f MiB), %.2f s of the training "
                   "inside them (%.1f%%; the layers' allreduces in forward and backward)\n",
                   (unsigned long long)(cs.allreduce_calls - R->tp_cs0.allreduce_calls + cs.allgather_calls -
                                        R->tp_cs0.allgather_calls + cs.broadcast_calls - R->tp_cs0.broadcast_calls),
                   (double)(cs.allreduce_bytes - R->tp_cs0.allreduce_bytes) / 1048576.0, sec,
                   tt > 0 ? 100.0 * sec / tt : 0.0);
        res->comm_seconds += sec;
    }
    if (R->pipe) {
        ct_comm_stats cs;
        ct_comm_get_stats(R->pp, &cs);
        const double sec = cs.seconds - R->pp_cs0.seconds;
        double bubble, ideal;
        ct_pp_bubble(R, &bubble, &ideal);
        ct_run_say(R, "pipeline (rank 0): %.2f MiB sent (%.2f MiB of them the tied parameters' gradients), %.2f MiB "
                   "received between stages, %.2f s of the training waiting for them (%.1f%%); bubble %.1f%% measured "
                   "(idle inside the schedule), %.1f%% ideal\n",
                   (double)(cs.send_bytes - R->pp_cs0.send_bytes) / 1048576.0, ct_pp_tied_mib(R),
                   (double)(cs.recv_bytes - R->pp_cs0.recv_bytes) / 1048576.0, sec, tt > 0 ? 100.0 * sec / tt : 0.0,
                   100.0 * bubble, 100.0 * ideal);
        res->comm_seconds += sec;
    }
}

/* After the run (its checkpoint saved): steps the loss scaler skipped and
 * steps whose gradients were all zero. Some are normal (a dynamic scale
 * finding its level); most of the steps is a warning; all of them means
 * nothing was trained, an error (a static scale that always overflows needs
 * 2 steps to tell, a dynamic one 17: enough halvings to go from the default
 * 65536 to 1). */
ct_status ct_progress_health(ct_run *R, ct_train_result *res, int64_t n) {
    int64_t skipped = 0;
    if (R->scaler) {
        ct_scaler_totals tot;
        ct_scaler_get_totals(R->scaler, &tot);
        skipped = (int64_t)(tot.overflows - R->skipped0);
    }
    res->skipped_steps = skipped;
    res->zero_grad_steps = R->zero_grad_steps;
    if (!isfinite(res->eval_loss))
        ct_run_say(R, "  warning: the last evaluation's loss is %g: the model's output is not finite on the %s data%s\n",
            res->eval_loss, R->task->eval_split,
            R->scaler ? " (in FP16 the forward may overflow: keep_fp32 for the layer, or train in bf16)" : "");
    if (n <= 0) return CT_OK;
    const int dynamic = ct_run_scaling(R->r) == CT_AMP_SCALING_DYNAMIC;
    char scale[48] = "";
    if (R->scaler) snprintf(scale, sizeof scale, "%g", (double)ct_scaler_scale(R->scaler));
    if (skipped > 0)
        ct_run_say(R, "  loss scaler: %lld of %lld steps skipped (inf/NaN gradients; the first in '%s' at step %lld)\n",
            (long long)skipped, (long long)n, R->first_overflow, (long long)R->first_overflow_step + 1);
    if (skipped == n && n >= (dynamic ? 17 : 2))
        return ct_set_error(R->ctx, CT_E_NONFINITE,
                            "every one of the %lld steps overflowed and was skipped: nothing was trained (first "
                            "non-finite gradient in '%s'); %s",
                            (long long)n, R->first_overflow,
                            dynamic ? "check the data and optimizer.lr (the scale went down to its minimum without "
                                      "helping), or train in bf16"
                                    : "the static loss scale is too high: lower loss_scale.init_scale or use "
                                      "loss_scale.mode: dynamic");
    if (2 * skipped > n)
        ct_run_say(R, "  warning: the loss scaler skipped most steps (%lld of %lld): only %lld updated the weights; %s%s%s\n",
            (long long)skipped, (long long)n, (long long)(n - skipped),
            dynamic ? "the dynamic scale (now " : "lower loss_scale.init_scale or use loss_scale.mode: dynamic",
            dynamic ? scale : "",
            dynamic ? ") may still be coming down from a high loss_scale.init_scale; otherwise check optimizer.lr "
                      "and the data for inf/NaN" : "");
    if (R->zero_grad_steps == 0) return CT_OK;
    const char *why = R->scaler ? "the loss scale is so small that the FP16 gradients underflow: raise loss_scale.init_scale "
                                  "or use loss_scale.mode: dynamic"
                                : "the loss does not depend on the weights (dead activations, a frozen model or a "
                                  "constant loss)";
    if (R->zero_grad_steps == n - skipped && n >= 2)
        return ct_set_error(R->ctx, CT_E_CONFIG,
                            "the gradients were all exactly zero in every step that ran (%lld of %lld): nothing was "
                            "trained; %s%s%s",
                            (long long)R->zero_grad_steps, (long long)n, why, R->scaler ? ", scale now " : "", scale);
    if (2 * R->zero_grad_steps > n)
        ct_run_say(R, "  warning: the gradients were all exactly zero in %lld of %lld steps; %s\n",
            (long long)R->zero_grad_steps, (long long)n, why);
    return CT_OK;
}
