/* src/train/trainer.c - the one training loop (train.h): setup (plan,
 * optimizer, loss scaler, schedule, the step), then the run as named parts:
 *   start_run -> begin_output -> epochs -> finish_run
 *   epoch: begin_epoch -> { train_step -> log_step -> maybe_checkpoint
 *          -> progress } -> evaluate_epoch -> end_epoch
 * train_step calls the step through its seam (R->train_step, the default
 * in step.c; the contract in train_internal.h); every printed line is in
 * progress.c; what the recipe implies (scaled LR, schedule, loss scaling)
 * in run_recipe.c. Data parallel (ct_train_opts.comm), the parts in
 * data_parallel.c: each rank builds the plan for its share of the batch,
 * the gradients are reduced in the step, evaluations are combined, rank 0
 * prints and saves. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "ctrain/metrics.h"
#include "train_internal.h"

void ct_train_opts_default(ct_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->out = stdout;
}

ct_status ct_train_context_create(const ct_recipe *r, ct_context **out) {
    ct_context_opts co;
    ct_context_opts_default(&co);
    co.seed = r->seed;
    co.num_threads = r->threads;
    co.memory_budget = (size_t)r->memory_budget;
    co.flush_subnormals = r->flush_subnormals;
    return ct_context_create(&co, out);
}

ct_status ct_train_resume_recipe(ct_context *ctx, const char *resume, ct_recipe *r, ct_recipe *stored) {
    if (!resume || !r) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_train_resume_recipe: resume and r must not be NULL");
    ct_train_state *ck = malloc(sizeof *ck);
    if (!ck) return ct_set_error(ctx, CT_E_OOM, "out of memory");
    ct_train_state_init(ck);
    ct_status s = ct_checkpoint_load(ctx, resume, NULL, NULL, ck);
    if (s == CT_OK && !ck->recipe_json[0])
        s = ct_set_error(ctx, CT_E_CONFIG, "checkpoint '%s' holds no recipe (not written by ctrain train)", ck->path);
    ct_recipe got; /* the stored JSON on top of the defaults: a key it leaves out (an empty list) is the default */
    ct_recipe_default(&got);
    if (s == CT_OK) s = ct_recipe_parse_json(ctx, ck->recipe_json, &got);
    if (s == CT_OK) {
        if (stored) *stored = got;
        /* the directory being resumed: `resume` if it is a save dir, else the step dir's parent */
        char dir[sizeof got.save_dir];
        s = ct_checkpoint_save_dir(ctx, resume, dir, sizeof dir);
        if (s == CT_OK) {
            *r = got;
            memcpy(r->save_dir, dir, sizeof r->save_dir);
            r->metrics_file[0] = 0;
            r->tensorboard_dir[0] = 0;
            r->profile_dir[0] = 0;
        }
    }
    free(ck);
    return s;
}

/* The built-in task of a validated recipe. */
static ct_status task_for(ct_context *ctx, const ct_recipe *r, ct_task **out) {
    if (ct_model_family_of(r->model) == CT_MODEL_FAMILY_TEXT) return ct_task_text_create(ctx, r, out);
    return ct_task_image_create(ctx, r, out);
}

ct_status ct_task_create(ct_context *ctx, const ct_recipe *r, ct_task **out) {
    if (!r || !out) return CT_E_INVALID_ARG;
    CT_TRY(ct_recipe_validate(ctx, r));
    return task_for(ctx, r, out);
}

void ct_task_free(ct_task *t) {
    if (t && t->free) t->free(t);
}

/* ---- plan and memory budget ---------------------------------------------------------------- */

/* Bytes the run's plan and optimizer take for recipe r (a plan_only compile). */
static ct_status plan_bytes(ct_context *ctx, ct_run *R, ct_task *t, const ct_recipe *r, double *bytes, double *act) {
    ct_plan *p = NULL;
    CT_TRY(ct_task_plan(ctx, R, t, r, 1, &p));
    ct_plan_stats ps;
    ct_plan_get_stats(p, &ps);
    ct_plan_free(p);
    *act = (double)ps.activation_bytes + (double)ps.workspace_bytes;
    *bytes = (double)ps.param_bytes * (1.0 + ct_run_optim_state_per_param(&r->optim)) + (double)ps.grad_bytes +
             (double)ps.buffer_bytes + (double)ps.weight_copy_bytes + *act;
    return CT_OK;
}


/* Recipe r for real under the context's budget: plan, optimizer, first_use.
 * 1 when it all fits. */
static int trial_fits(ct_context *ctx, ct_run *R, ct_task *t, const ct_recipe *r) {
    ct_plan *p = NULL;
    ct_optimizer *opt = NULL;
    ct_status s = ct_task_plan(ctx, R, t, r, 0, &p);
    if (s == CT_OK) s = ct_optimizer_create(p, &r->optim, &opt);
    if (s == CT_OK) s = t->bind(t, p);
    if (s == CT_OK) s = ct_run_first_use(t, p);
    ct_optimizer_free(opt);
    ct_plan_free(p);
    ct_context_clear_error(ctx);
    return s == CT_OK;
}

#define MIB(x) ((x) / 1048576.0)

/* The run did not fit in memory_budget: E60003 naming what the run needs
 * and, for each way out, the bytes it saves (plan statistics) and whether
 * the run then fits (tried for real: a plan, one step). */
static ct_status budget_advice(ct_context *ctx, ct_run *R, ct_task *t, const ct_recipe *r, size_t base_bytes, int world) {
    const double budget = (double)r->memory_budget, base = (double)base_bytes;
    double need, act;
    ct_context_clear_error(ctx);
    if (plan_bytes(ctx, R, t, r, &need, &act) != CT_OK) return CT_E_OOM;
    char adv[1400];
    size_t o = 0;
#define ADV(...) (o += (size_t)snprintf(adv + (o < sizeof adv ? o : sizeof adv), o < sizeof adv ? sizeof adv - o : 0, __VA_ARGS__))
    /* activation checkpointing: the smallest plan over recompute_every = 1..4 */
    if (r->recompute_every == 0) {
        double best = need;
        int best_n = 0;
        for (int n = 1; n <= 4; n++) {
            ct_recipe v = *r;
            v.recompute_every = n;
            double b, a;
            if (plan_bytes(ctx, R, t, &v, &b, &a) == CT_OK && b < best) best = b, best_n = n;
        }
        if (best_n) {
            ct_recipe v = *r;
            v.recompute_every = best_n;
            ADV("%srecompute_every=%d saves %.1f MiB (%s)", o ? "; " : ": ", best_n, MIB(need - best),
                base + best <= budget && trial_fits(ctx, R, t, &v) ? "fits" : "not enough alone");
        }
    }
    /* a smaller batch: the largest power-of-two fraction that fits (data parallel: r is one rank's share, the
     * advice names the global batch) */
    for (int64_t b = r->batch_size / 2; b >= 1; b /= 2) {
        ct_recipe v = *r;
        v.batch_size = b;
        double nb, a;
        if (plan_bytes(ctx, R, t, &v, &nb, &a) != CT_OK) break;
        int fits = base + nb <= budget && trial_fits(ctx, R, t, &v);
        if (fits || b == 1) {
            ADV("%sbatch_size=%lld saves %.1f MiB (%s)", o ? "; " : ": ", (long long)b * world, MIB(need - nb),
                fits ? "fits" : "not enough alone");
            break;
        }
    }
    if (r->precision == CT_PRECISION_FP32) {
        ct_recipe v = *r;
        v.precision = CT_PRECISION_BF16;
        double nb, a;
        if (plan_bytes(ctx, R, t, &v, &nb, &a) == CT_OK && nb < need)
            ADV("%sprecision=bf16 saves %.1f MiB (%s)", o ? "; " : ": ", MIB(need - nb),
                base + nb <= budget && trial_fits(ctx, R, t, &v) ? "fits" : "not enough alone");
    }
#undef ADV
    ct_context_clear_error(ctx);
    return ct_set_error(ctx, CT_E_OOM,
                        "memory_budget %.1f MiB is too small: the plan needs %.1f MiB (data and buffers %.1f, model, "
                        "gradients and optimizer state %.1f, activations and workspace %.1f), and the kernels' "
                        "buffers allocated on first use come on top%s%s",
                        MIB(budget), MIB(base + need), MIB(base), MIB(need - act), MIB(act),
                        o ? ". Options" : "; nothing smaller fits: raise memory_budget", adv);
}

static ct_status make_scaler(ct_run *R) {
    const ct_recipe *r = R->r;
    ct_amp_scaling mode = ct_run_scaling(r);
    if (mode == CT_AMP_SCALING_NONE) return CT_OK;
    ct_scaler_opts o;
    ct_scaler_opts_default(&o);
    o.dynamic = mode == CT_AMP_SCALING_DYNAMIC;
    o.init_scale = r->scale_init > 0 ? r->scale_init : o.dynamic ? 65536.0f : 1024.0f;
    o.growth_factor = r->scale_growth_factor;
    o.backoff_factor = r->scale_backoff_factor;
    o.growth_interval = r->scale_growth_interval;
    o.hysteresis = r->scale_hysteresis;
    o.min_scale = r->scale_min;
    o.max_scale = r->scale_max > o.init_scale ? r->scale_max : o.init_scale;
    o.floor_patience = r->scale_floor_patience;
    o.floor_policy = r->scale_floor == CT_SCALE_FLOOR_STOP ? CT_SCALER_FLOOR_STOP : CT_SCALER_FLOOR_ERROR;
    return ct_scaler_create(R->ctx, &o, &R->scaler);
}

/* ---- profiler (profile_dir): a failure only warns, training goes on ------------------------- */

static void profile_start(ct_run *R) {
    ct_profiler_opts po;
    ct_profiler_opts_default(&po);
    po.skip_steps = 1;
    po.warmup_steps = 2;
    po.record_steps = 10;
    if (ct_profiler_create(R->ctx, &po, &R->prof) != CT_OK || ct_plan_set_profiler(R->plan, R->prof) != CT_OK) {
        ct_run_say(R, "warning: profiler: %s; training without it\n", ct_context_last_error(R->ctx));
        ct_profiler_free(R->prof);
        R->prof = NULL;
        return;
    }
    mkdir(R->r->profile_dir, 0777); /* an existing or unwritable directory is reported when the trace is written */
}

static void profile_finish(ct_run *R) {
    if (!R->prof) return;
    ct_plan_stats ps;
    ct_plan_get_stats(R->plan, &ps);
    float *ost = NULL;
    size_t on = 0;
    if (ct_optimizer_state(R->opt, &ost, &on) != CT_OK) on = 0;
    ct_profiler_set_memory(R->prof, &ps, on * sizeof(float), (size_t)R->r->memory_budget);
    char path[600];
    if (R->wrank > 0) snprintf(path, sizeof path, "%s/trace.rank%d.json", R->r->profile_dir, R->wrank);
    else snprintf(path, sizeof path, "%s/trace.json", R->r->profile_dir);
    if (ct_profiler_write(R->prof, path) != CT_OK) {
        ct_run_say(R, "warning: %s (training results are unaffected)\n", ct_context_last_error(R->ctx));
        return;
    }
    ct_run_say(R, "profile: %s (%zu events, %llu dropped; open in chrome://tracing or ui.perfetto.dev)\n", path,
        ct_profiler_num_events(R->prof), (unsigned long long)ct_profiler_dropped(R->prof));
    ct_doctor_report dr;
    if (ct_doctor_analyze_file(R->ctx, path, &dr) == CT_OK) {
        if (R->out) ct_doctor_print(&dr, R->out);
    } else {
        ct_run_say(R, "warning: doctor: %s\n", ct_context_last_error(R->ctx));
    }
}

/* ---- checkpoints --------------------------------------------------------------------------- */

static ct_status save(ct_run *R, int64_t step, int64_t ep, int64_t b, double run_loss, int64_t correct, int64_t seen,
                      const ct_task_eval *ev, int finished) {
    ct_train_state *st = R->st;
    ct_train_state_init(st);
    st->step = step;
    st->epoch = ep;
    st->batch_in_epoch = b;
    st->epoch_loss_sum = run_loss;
    st->epoch_correct = correct;
    st->epoch_seen = seen;
    st->test_loss = ev->loss;
    st->test_acc = ev->accuracy;
    st->finished = finished;
    st->has_scaler = R->scaler != NULL;
    if (R->scaler) ct_scaler_get_state(R->scaler, &st->scaler);
    st->has_schedule = 1;
    ct_schedule_get_state(R->sched, &st->schedule);
    st->has_early_stop = 1;
    st->early_stop = R->es;
    int n = ct_recipe_to_json_full(R->r, st->recipe_json, sizeof st->recipe_json);
    if (n < 0 || (size_t)n >= sizeof st->recipe_json)
        return ct_set_error(R->ctx, CT_E_CONFIG, "checkpoint: the recipe does not fit in %zu bytes of JSON",
                            sizeof st->recipe_json);
    ct_checkpoint_file files[5];
    int nf = 0;
    if (R->task->checkpoint_files) CT_TRY(R->task->checkpoint_files(R->task, files, &nf, 4));
    if (R->resid) files[nf++] = (ct_checkpoint_file){"grad_residual.bin", R->resid, R->resid_size};
    ct_checkpoint_opts o;
    ct_checkpoint_opts_default(&o);
    o.keep_last = R->r->keep_last;
    o.hook = R->o->checkpoint_hook;
    o.hook_user = R->o->hook_user;
    o.files = files;
    o.n_files = nf;
    CT_TRY(ct_checkpoint_save_ex(R->ctx, R->r->save_dir, R->plan, R->opt, st, &o));
    size_t dl = strlen(R->r->save_dir);
    ct_run_say(R, "  checkpoint: step %lld -> %s%sstep-%06lld%s\n", (long long)step, R->r->save_dir,
        dl && R->r->save_dir[dl - 1] == '/' ? "" : "/", (long long)step, finished ? " (end of run)" : "");
    return CT_OK;
}

/* save() on rank 0 only; data parallel: first rank 0's buffers to all and a check that the weights are the
 * same on every rank, then the others wait for rank 0 and share its status. */
static ct_status checkpoint(ct_run *R, int64_t step, int64_t ep, int64_t b, double run_loss, int64_t correct,
                            int64_t seen, const ct_task_eval *ev, int finished) {
    ct_zero3 *z3 = ct_zero_z3(R->zero);
    CT_TRY(ct_zero3_whole(z3, 1)); /* ZeRO-3: every parameter here for the file, released again below */
    if (R->world > 1) {
        char when[64];
        snprintf(when, sizeof when, "at step %lld", (long long)step);
        CT_TRY(ct_dp_broadcast_state(R->comm, R->plan, 1));
        CT_TRY(ct_dp_same_weights(R->ctx, R->comm, R->plan, when));
        CT_TRY(ct_dp_residual_gather(R->ctx, R->comm, R->bk, &R->resid, &R->resid_size));
    }
    CT_TRY(ct_zero_gather_state(R->zero, 1)); /* ZeRO: rank 0 holds the whole optimizer state to write it */
    ct_status s = R->rank == 0 ? save(R, step, ep, b, run_loss, correct, seen, ev, finished) : CT_OK;
    free(R->resid);
    R->resid = NULL;
    s = ct_dp_after_save(R->ctx, R->comm, s);
    CT_TRY(s);
    CT_TRY(ct_zero3_whole(z3, 0));
    return ct_zero_gather_state(R->zero, 0);
}

/* The task's evaluation; data parallel: on rank 0's buffers, each rank its part, combined. */
static ct_status evaluate(ct_run *R, ct_task_eval *ev) {
    CT_TRY(ct_dp_broadcast_state(R->comm, R->plan, 1));
    /* ZeRO-3: the ranks evaluate different numbers of batches; the gathers pair up by a vote per forward */
    CT_TRY(ct_zero3_eval(ct_zero_z3(R->zero), 1));
    if (R->pipe) CT_TRY(ct_pp_evaluate(R, ev)); /* through the stages; the last one's result */
    else CT_TRY(R->task->evaluate(R->task, ev));
    CT_TRY(ct_zero3_eval(ct_zero_z3(R->zero), 0));
    if (R->det) return CT_OK; /* every rank evaluated the whole split */
    return ct_dp_reduce_eval(R->comm, R->task, ev);
}

/* ---- the loop ------------------------------------------------------------------------------ */

/* Activation checkpointing is there to save memory. Where it would not
 * lower the activation peak (e.g. a recomputed first layer's values meet
 * backward's working set at the peak: the Fashion CNN at fusion level 1
 * needs 49.4 MiB with recompute_every 1 against 37.5 without), the run
 * trains without it and says so. Compares two plan_only compiles. */
static ct_status recompute_pays(ct_run *R) {
    ct_recipe *r = &R->local;
    if ((r->recompute_every <= 0 && r->recompute_blocks <= 0 && r->recompute_ops == CT_RECOMPUTE_OPS_NONE) ||
        !r->memory_opt)
        return CT_OK;
    ct_recipe off = *r;
    off.recompute_every = 0;
    off.recompute_blocks = 0;
    off.recompute_ops = CT_RECOMPUTE_OPS_NONE;
    double b_on, a_on, b_off, a_off;
    CT_TRY(plan_bytes(R->ctx, R, R->task, r, &b_on, &a_on));
    CT_TRY(plan_bytes(R->ctx, R, R->task, &off, &b_off, &a_off));
    if (a_on < a_off) return CT_OK;
    ct_run_say(R, "warning: recomputation (recompute_every %d, recompute_blocks %d, recompute_ops %s) would not lower "
           "this model's activation peak (%.1f MiB with it, %.1f without; `ctrain graph --set recompute_every=N` or "
           "`--set recompute_blocks=N` shows both): training without it\n",
        r->recompute_every, r->recompute_blocks,
        r->recompute_ops == CT_RECOMPUTE_OPS_CHEAP ? "cheap" : r->recompute_ops == CT_RECOMPUTE_OPS_ALL ? "all" : "none",
        MIB(a_on), MIB(a_off));
    *r = off;
    return CT_OK;
}

/* Every rank of the job runs the same recipe and plan (tensor parallel: the shards have equal names and shapes
 * on every rank); pipeline parallel: the recipe over the job, the plan over the ranks of the same stage. */
static ct_status agree_ranks(ct_run *R) {
    if (!(R->st = calloc(1, sizeof *R->st))) return ct_set_error(R->ctx, CT_E_OOM, "out of memory"); /* (saves') */
    ct_train_state_init(R->st);
    if (R->pipe) {
        CT_TRY(ct_pp_gather_memory(R));
        CT_TRY(ct_dp_agree_recipe(R->ctx, R->world_comm, R->r));
        if (R->tp) CT_TRY(ct_dp_agree(R->ctx, R->tp, R->r, R->plan, R->task));
    }
    return ct_dp_agree(R->ctx, R->pipe ? R->comm : R->world_comm, R->r, R->plan, R->task);
}

static ct_status setup(ct_run *R, ct_train_result *res) {
    ct_context *ctx = R->ctx;
    const ct_recipe *r = R->r;
    R->accum = r->accumulate_steps;
    ct_mem_stats ms0;
    ct_context_mem_stats(ctx, &ms0);
    CT_TRY(recompute_pays(R));
    ct_status s = ct_task_plan(ctx, R, R->task, &R->local, 0, &R->plan);
    if (s == CT_OK) s = ct_tp_bind(R);
    if (s == CT_OK) s = ct_zero_create(ctx, R->comm, r, R->plan, &R->zero);
    if (s == CT_OK) s = ct_det_create(ctx, R->comm, r, R->plan, &R->det);
    if (s == CT_OK) s = ct_zero_optimizer_create(R->zero, R->plan, &r->optim, R->o->resume != NULL, &R->opt);
    if (s == CT_OK) s = R->task->bind(R->task, R->plan);
    if (s == CT_OK && R->pipe) s = ct_pp_bind(R); /* slots, buffers, the neighbours' agreement, tied parameters */
    /* with a memory budget, the kernels' first use now: an E60003 then comes with advice, not mid-run */
    if (s == CT_OK && r->memory_budget > 0) s = ct_run_first_use(R->task, R->plan);
    if (s == CT_E_OOM && r->memory_budget > 0) {
        ct_optimizer_free(R->opt);
        ct_plan_free(R->plan);
        R->opt = NULL;
        R->plan = NULL;
        return budget_advice(ctx, R, R->task, &R->local, ms0.bytes_in_use, R->world);
    }
    CT_TRY(s);
    /* "loss / accumulation_steps": each micro-batch's gradient is added into the arena. Data parallel also
     * divides by the world size (each rank's rows are that share of the global batch) and the allreduce sums:
     * the gradients have the magnitudes of one process, so FP16 overflows at the same loss scale */
    R->micro_n = R->det ? ct_det_local_chunks(R->det) : R->accum;
    R->grad_div = R->det ? r->deterministic_chunks * R->accum : R->accum * R->world; /* det: the step's leaves */
    if (R->grad_div > 1) CT_TRY(ct_plan_set_loss_scale(R->plan, 1.0f / (float)R->grad_div));
    if (r->detect_anomaly) ct_plan_set_anomaly(R->plan, 1);
    CT_TRY(make_scaler(R));
    if (R->task->epochs_from_data) {
        R->per_epoch = R->task->batches_per_epoch(R->task);
        if (R->per_epoch < R->accum)
            return ct_set_error(ctx, CT_E_CONFIG,
                                "accumulate_steps %d is more than the %lld batches of an epoch; lower it or the batch "
                                "size",
                                R->accum, (long long)R->per_epoch);
        /* optimizer steps; a partial accumulation at the end of an epoch is dropped */
        R->total = R->per_epoch / R->accum * r->epochs;
        if (r->max_steps > 0 && r->max_steps < R->total) R->total = r->max_steps;
    } else {
        /* no epochs in the data: max_steps steps; without it epochs x eval_every (an "epoch" = one eval interval) */
        R->total = r->max_steps > 0 ? r->max_steps : (int64_t)r->epochs * (r->eval_every > 0 ? r->eval_every : 100);
        R->steps_per_epoch = r->eval_every > 0 ? r->eval_every : R->total;
    }
    /* warmup_epochs, step_size_epochs, cosine_epochs: in optimizer steps of this run's epochs */
    int64_t spe = R->task->epochs_from_data ? R->per_epoch / R->accum : R->steps_per_epoch;
    CT_TRY(ct_train_schedule_epochs(ctx, r, R->total, spe, &R->sched));
    CT_TRY(ct_early_stop_init(ctx, &R->es, r->early_stop_patience, r->early_stop_min_delta,
                              r->early_stop_mode == CT_EARLY_STOP_MAX));
    ct_plan_param_arena(R->plan, &R->par, &R->grads, &R->n_par);
    /* the deterministic mode reduces in its tree: no buckets, so no compression and no batch sums in backward */
    if (R->det && R->world > 1 && (r->grad_compression != CT_GRAD_COMPRESSION_NONE || r->sync_batchnorm))
        return ct_set_error(ctx, CT_E_CONFIG,
                            "%s works with the gradient buckets, not with deterministic: true: set %s, or "
                            "deterministic false",
                            r->sync_batchnorm ? "sync_batchnorm" : "grad_compression",
                            r->sync_batchnorm ? "sync_batchnorm false" : "grad_compression none");
    /* tensor parallel: the tensor group's collectives run during backward on this thread, and MPI takes one
     * thread's calls at a time (MPI_THREAD_SERIALIZED): the buckets progress from the grad-ready hook */
    ct_recipe rb = *r;
    if (R->tp) rb.comm_progress = CT_BUCKET_PROGRESS_HOOK;
    /* pipeline parallel: the stage's gradients are reduced once its schedule ends (no buckets yet) */
    if (R->zero && !R->det && !R->pipe) CT_TRY(ct_zero_buckets_create(R->zero, &rb, &R->bk));
    else if (!R->det && !R->pipe) CT_TRY(ct_dp_buckets_create(ctx, R->comm, R->plan, &rb, NULL, NULL, NULL, &R->bk));
    R->first_overflow_step = -1;
    R->train_step = R->pipe ? ct_pp_step : ct_step_default; /* the seam (train_internal.h) */
    R->first_loss = -1.0;
    ct_plan_buffer_arena(R->plan, &R->buf, &R->n_buf);
    if (r->early_stop_patience > 0 && r->early_stop_restore_best &&
        !(R->best = malloc((R->n_par + R->n_buf + 1) * sizeof(float))))
        return ct_set_error(ctx, CT_E_OOM, "out of memory keeping a copy of the best weights (early_stop_restore_best)");
    (void)res;
    return agree_ranks(R);
}

/* The checkpoint resumed from (its schedule, early stopping, scaler and position), or the initial
 * weights; then every rank starts from rank 0's weights and ZeRO takes its shard. */
static ct_status start_run(ct_run *R) {
    ct_context *ctx = R->ctx;
    const ct_recipe *r = R->r;
    ct_train_state *ck = R->st;
    if (R->o->resume) {
        CT_TRY(ct_checkpoint_load(ctx, R->o->resume, R->plan, R->opt, ck));
        char note[256];
        CT_TRY(ct_dp_residual_load(ctx, R->comm, R->bk, ck->path, note, sizeof note));
        if (note[0]) ct_run_say(R, "  note: %s\n", note);
        if (ck->has_schedule) CT_TRY(ct_schedule_set_state(R->sched, &ck->schedule));
        if (ck->has_early_stop) R->es = ck->early_stop;
        if (ck->has_scaler && R->scaler) CT_TRY(ct_scaler_set_state(R->scaler, &ck->scaler));
        R->resumed = 1;
        R->step = R->step0 = ck->step;
        R->ep = R->data_epochs ? ck->epoch : R->step / R->steps_per_epoch;
        R->ck_ep = R->ep;
        R->ck_batch = ck->batch_in_epoch;
        R->ck_loss = ck->epoch_loss_sum, R->ck_correct = ck->epoch_correct, R->ck_seen = ck->epoch_seen;
        R->ev.loss = ck->test_loss;
        R->ev.accuracy = ck->test_acc;
        R->stopped = R->ck_stopped = R->es.stopped;
    } else if (r->init_weights[0]) { /* e.g. torchvision weights (scripts/torchvision_to_safetensors.py) */
        ct_status s = ct_weights_load(ctx, r->init_weights, R->plan);
        if (s != CT_OK) return ct_wrap_error(ctx, s, "recipe key 'init_weights': ", NULL);
        if (!R->quiet) ct_run_say(R, "  initial weights from %s\n", r->init_weights);
    }
    /* data parallel: every rank starts from rank 0's weights (the same seed, or the same checkpoint, gave them
     * already: this makes sure) */
    CT_TRY(ct_dp_broadcast_state(R->comm, R->plan, 0));
    CT_TRY(ct_zero_shard(R->zero)); /* ZeRO: the whole state (perhaps resumed) becomes this rank's shard */
    CT_TRY(ct_zero3_whole(ct_zero_z3(R->zero), 0)); /* ZeRO-3: and of the parameters, its segment only */
    if (R->scaler) {
        ct_scaler_totals tot;
        ct_scaler_get_totals(R->scaler, &tot);
        R->skipped0 = tot.overflows;
    }
    return CT_OK;
}

/* The header, the metrics log, the profiler and the clocks. */
static ct_status begin_output(ct_run *R) {
    const ct_recipe *r = R->r;
    char rj[8192];
    if (ct_recipe_to_json(r, rj, sizeof rj) < 0) snprintf(rj, sizeof rj, "(out of memory)");
    ct_progress_header(R, rj);
    const char *mpath = R->o->metrics_path ? R->o->metrics_path : r->metrics_file;
    if (r->profile_dir[0]) profile_start(R); /* every rank: rank k > 0 writes trace.rank<k>.json */
    CT_TRY(ct_run_logs_open(R, mpath, rj)); /* rank 0: the metrics log, the TensorBoard events */
    R->start = ct_run_now_s();
    ct_comm_get_stats(R->comm, &R->cs0);
    if (R->tp) ct_comm_get_stats(R->tp, &R->tp_cs0);
    if (R->pp) ct_comm_get_stats(R->pp, &R->pp_cs0);
    return CT_OK;
}

/* The epoch's data from its start, or (resumed mid-epoch) from the checkpoint's batch with its totals. */
static ct_status begin_epoch(ct_run *R, ct_epoch *E) {
    memset(E, 0, sizeof *E);
    E->end = R->data_epochs ? R->total : CT_MIN(R->total, (R->ep + 1) * R->steps_per_epoch);
    E->start = ct_run_now_s();
    E->first = 1;
    R->ep_units = 0;
    if (R->resumed && R->step == R->step0 && R->ep == R->ck_ep && (R->ck_batch > 0 || !R->data_epochs)) {
        E->b = R->ck_batch; /* mid-epoch: skip what was consumed, restore the running totals */
        E->loss = R->ck_loss, E->correct = R->ck_correct, E->seen = R->ck_seen;
    }
    CT_TRY(R->task->start_epoch(R->task, R->ep, R->data_epochs ? E->b : 0));
    E->mk_loss = E->loss; /* running totals at the last step, for the metrics log */
    E->mk_correct = E->correct, E->mk_seen = E->seen;
    return CT_OK;
}

/* One optimizer step through the seam (R->train_step) at the schedule's lr; its statistics into the
 * epoch's totals. io->done 0: the epoch's data ran out. */
static ct_status train_step(ct_run *R, ct_epoch *E, ct_step_io *io) {
    memset(io, 0, sizeof *io);
    io->step = R->step;
    io->epoch = R->ep;
    io->lr = ct_schedule_lr(R->sched, R->step);
    io->first = E->first;
    CT_TRY(R->train_step(R, io));
    E->first = 0;
    E->b += io->batches;
    if (io->n) {
        R->units_done += io->units, R->ep_units += io->units;
        E->loss += io->loss;
        E->correct += (int64_t)io->correct;
        E->seen += (int64_t)io->rows;
    }
    if (!io->done) return CT_OK;
    R->step++;
    R->zero_grad_steps += io->zero_grads;
    if (io->stop) {
        ct_progress_scaler_stop(R);
        R->stopped = 1;
    }
    return CT_OK;
}

/* The loss scaler's events of the step (the first overflow, the metrics log), the profiler's step
 * boundary, the step's line in the metrics log and the TensorBoard events and the step hook. */
static ct_status log_step(ct_run *R, ct_epoch *E, const ct_step_io *io) {
    const ct_scale_record *sev = NULL;
    int n_ev = 0;
    if (R->scaler) ct_scaler_last_events(R->scaler, &sev, &n_ev);
    for (int i = 0; i < n_ev; i++) {
        if (sev[i].event == CT_SCALE_OVERFLOW && R->first_overflow_step < 0) {
            R->first_overflow_step = sev[i].step;
            snprintf(R->first_overflow, sizeof R->first_overflow, "%s", sev[i].tensor[0] ? sev[i].tensor : "?");
        }
        if (R->mx) CT_TRY(ct_metrics_log_scaler_event(R->mx, &sev[i]));
    }
    if (R->prof) ct_profiler_step(R->prof);
    CT_TRY(ct_run_logs_step(R, E, io));
    E->mk_loss = E->loss, E->mk_correct = E->correct, E->mk_seen = E->seen;
    if (R->o->step_hook) R->o->step_hook(R->o->hook_user, R->step);
    return CT_OK;
}

/* Every save_every steps (not at the run's end: finish_run saves that one). */
static ct_status maybe_checkpoint(ct_run *R, const ct_epoch *E) {
    const ct_recipe *r = R->r;
    if (!(r->save_dir[0] && r->save_every > 0 && R->step % r->save_every == 0 && R->step < R->total)) return CT_OK;
    if (R->tty && !R->quiet) ct_run_say(R, "\n");
    return checkpoint(R, R->step, R->ep, E->b, E->loss, E->correct, E->seen, &R->ev, 0);
}

/* The evaluation at the epoch's end (its own "eval" event in the trace), its metrics line and the
 * epoch's line. */
static ct_status evaluate_epoch(ct_run *R, const ct_epoch *E) {
    double te = ct_run_now_s(), pe = R->prof ? ct_profiler_now_us() : 0;
    ct_profiler_set_ops_enabled(R->prof, 0); /* evaluation: one "eval" event, not part of a step */
    CT_TRY(evaluate(R, &R->ev));
    ct_profiler_set_ops_enabled(R->prof, 1);
    if (R->prof) ct_profiler_event(R->prof, "evaluate", "eval", pe, ct_profiler_now_us(), NULL);
    CT_TRY(ct_run_logs_eval(R));
    ct_progress_epoch(R, E, ct_run_now_s() - te);
    if (R->o->on_eval && R->o->on_eval(R->o->cb_user, R->ep, R->step, &R->ev)) R->stopped = 1; /* the caller's stop */
    return CT_OK;
}

/* The parameters early stopping keeps (early_stop_restore_best): all of them, or under ZeRO-3 this rank's segment
 * (the copy's other pages are never touched, so never resident). */
static void best_range(const ct_run *R, size_t *b, size_t *e) {
    *b = 0, *e = R->n_par;
    if (ct_zero_z3(R->zero)) ct_zero_segment(R->zero, b, e);
}

/* After the evaluation: the plateau schedule, early stopping and the best weights' copy. */
static ct_status end_epoch(ct_run *R, ct_train_result *res) {
    const ct_recipe *r = R->r;
    const ct_task *t = R->task;
    if (ct_schedule_observe(R->sched, R->ev.loss))
        ct_run_say(R, "  plateau: %s loss did not improve; lr -> %.3g\n", t->eval_split,
                   ct_schedule_lr_f64(R->sched, R->step));
    int is_best = 0;
    const int es_max = r->early_stop_mode == CT_EARLY_STOP_MAX;
    if (r->early_stop_patience > 0 && ct_early_stop_update(&R->es, es_max ? R->ev.accuracy : R->ev.loss, &is_best)) {
        ct_run_say(R, "  early stop: %s %s did not improve by %g for %d %s; best %.4f at %s %lld\n", t->eval_split,
                   es_max ? "accuracy" : "loss", (double)r->early_stop_min_delta, r->early_stop_patience,
                   R->data_epochs ? "epochs" : "evaluations", R->es.best, R->data_epochs ? "epoch" : "evaluation",
                   (long long)R->es.best_epoch + 1);
        R->es.stopped = 1;
        R->stopped = 1;
        res->stopped_early = 1;
    }
    if (is_best && R->best) {
        size_t b, e;
        best_range(R, &b, &e);
        memcpy(R->best + b, R->par + b, (e - b) * sizeof(float));
        memcpy(R->best + R->n_par, R->buf, R->n_buf * sizeof(float));
        R->have_best = 1;
    }
    return CT_OK;
}

/* One epoch: steps until its end, the run's stop or the end of its data; then its evaluation. */
static ct_status run_epoch(ct_run *R, ct_train_result *res) {
    ct_epoch E;
    CT_TRY(begin_epoch(R, &E));
    while (!R->stopped && R->step < E.end) {
        ct_step_io io;
        CT_TRY(train_step(R, &E, &io));
        if (!io.done) break; /* the epoch's data is exhausted */
        CT_TRY(log_step(R, &E, &io));
        CT_TRY(maybe_checkpoint(R, &E));
        ct_progress_step(R, &E, &io);
    }
    CT_TRY(evaluate_epoch(R, &E));
    return end_epoch(R, res);
}

/* Early stopping with early_stop_restore_best: the best evaluation's weights back, evaluated again. */
static ct_status restore_best(ct_run *R) {
    const ct_task *t = R->task;
    const char *unit = R->data_epochs ? "epoch" : "evaluation";
    if (!R->have_best) {
        ct_run_say(R, "  warning: the best evaluation (%lld) came before the resume; its weights were not kept, the "
                   "final weights stay\n", (long long)R->es.best_epoch + 1);
        return CT_OK;
    }
    size_t b, e;
    best_range(R, &b, &e);
    memcpy(R->par + b, R->best + b, (e - b) * sizeof(float));
    ct_plan_params_changed(R->plan); /* written through the pointer taken at start */
    memcpy(R->buf, R->best + R->n_par, R->n_buf * sizeof(float));
    CT_TRY(evaluate(R, &R->ev));
    if (t->has_accuracy)
        ct_run_say(R, "  restored the best weights (%s %lld): %s loss %.4f, %s acc %.2f%%\n", unit,
                   (long long)R->es.best_epoch + 1, t->eval_split, R->ev.loss, t->eval_split, 100.0 * R->ev.accuracy);
    else
        ct_run_say(R, "  restored the best weights (%s %lld): %s loss %.4f\n", unit, (long long)R->es.best_epoch + 1,
                   t->eval_split, R->ev.loss);
    return CT_OK;
}

/* The best weights (early stopping), the last checkpoint, the check that the ranks agree, the profile,
 * the summary, the metrics log's end and the result; then the health report. */
static ct_status finish_run(ct_run *R, ct_train_result *res) {
    const ct_recipe *r = R->r;
    if (R->stopped && R->best) CT_TRY(restore_best(R));
    if (r->save_dir[0] && (!R->resumed || R->step > R->step0 || R->stopped != R->ck_stopped))
        CT_TRY(checkpoint(R, R->step,
                          R->data_epochs ? R->ep : R->step / (R->steps_per_epoch ? R->steps_per_epoch : 1), 0, 0, 0,
                          0, &R->ev, 1));
    CT_TRY(ct_zero3_whole(ct_zero_z3(R->zero), 1));
    CT_TRY(ct_dp_same_weights(R->ctx, R->comm, R->plan, "at the end of the run"));
    CT_TRY(ct_zero3_whole(ct_zero_z3(R->zero), 0));
    double tt = ct_run_now_s() - R->start;
    profile_finish(R);
    ct_mem_stats ms;
    ct_context_mem_stats(R->ctx, &ms);
    ct_progress_summary(R, res, tt, &ms);
    res->grad_allreduces = R->grad_reduces;
    if (R->mx) ct_metrics_log_done(R->mx, R->step, tt, R->ev.loss, R->ev.accuracy, (double)ms.peak_bytes / 1048576.0);
    CT_TRY(ct_run_logs_close(R));
    res->steps = R->step;
    res->seconds = tt;
    res->eval_loss = R->ev.loss;
    res->eval_accuracy = R->ev.accuracy;
    res->peak_bytes = ms.peak_bytes;
    res->stopped_early |= R->stopped;
    return ct_progress_health(R, res, R->step - R->step0);
}

/* The run: start (resume or initial weights), the header, epochs of steps, the end. */
static ct_status run_loop(ct_run *R, ct_train_result *res) {
    R->data_epochs = R->task->epochs_from_data;
    R->quiet = R->o->quiet;
    /* mpirun gives its ranks a pseudo-terminal whatever the user's output is: data parallel prints lines */
    R->tty = R->out && isatty(fileno(R->out)) && ct_comm_size(R->world_comm) == 1;
    CT_TRY(start_run(R));
    CT_TRY(begin_output(R));
    for (; !R->stopped && R->step < R->total && (!R->data_epochs || R->ep < R->r->epochs); R->ep++)
        CT_TRY(run_epoch(R, res));
    return finish_run(R, res);
}

static ct_status train_run(ct_context *ctx, const ct_recipe *r, const ct_train_opts *o, ct_train_result *res);

/* The whole run with subnormals flushed in every computing thread (ct_context_opts.flush_subnormals). */
ct_status ct_train(ct_context *ctx, const ct_recipe *r, const ct_train_opts *o, ct_train_result *res) {
    if (!ctx || !r) return CT_E_INVALID_ARG;
    ct_fp_scope fp;
    ct_fp_enter(ctx, &fp);
    ct_status s = train_run(ctx, r, o, res);
    ct_fp_leave(&fp);
    return s;
}

static ct_status train_run(ct_context *ctx, const ct_recipe *r, const ct_train_opts *o, ct_train_result *res) {
    ct_train_opts def;
    if (!o) {
        ct_train_opts_default(&def);
        o = &def;
    }
    ct_train_result dummy;
    if (!res) res = &dummy;
    memset(res, 0, sizeof *res);
    CT_TRY(ct_recipe_validate(ctx, r));
    ct_run R = {.ctx = ctx, .r = r, .o = o, .out = o->out};
    ct_status s = CT_OK;
    R.comm = o->comm;
    R.rank = ct_comm_rank(o->comm);
    R.world = ct_comm_size(o->comm);
    R.wrank = R.rank;
    if (R.rank != 0) R.out = NULL; /* rank 0 alone shows the run */
    s = ct_pp_setup(&R); /* pipeline parallel: the recipe's keys, the schedule */
    if (s == CT_OK) s = ct_tp_setup(&R); /* the groups: R.comm, R.rank and R.world become the data group's */
    R.task = o->task;
    if (s == CT_OK && !R.task) s = task_for(ctx, r, &R.task);
    if (s == CT_OK) s = ct_dp_setup(ctx, R.comm, R.task, r, &R.local);
    if (s == CT_OK && r->fit != CT_FIT_OFF) s = ct_fit_apply(&R); /* the chosen recipe: R.r = &R.fitted */
    r = R.r;
    if (s == CT_OK) s = ct_det_check(ctx, r, R.task, R.world);
    if (s == CT_OK && r->deterministic) { /* the plan is built for one chunk; this rank reads K / N of them */
        R.local.batch_size = r->batch_size / r->deterministic_chunks;
        R.local.accumulate_steps = 1; /* every chunk's gradient apart (a leaf of the tree), not accumulated */
        s = R.task->chunk(R.task, r->deterministic_chunks / R.world);
    }
    if (s == CT_OK) s = setup(&R, res);
    if (s == CT_OK) s = run_loop(&R, res);
    ct_run_logs_close(&R);
    if (R.prof) ct_plan_set_profiler(R.plan, NULL);
    ct_dp_buckets_free(R.plan, R.bk);
    if (R.bk && r->sync_batchnorm) ct_context_set_batch_sum(ctx, NULL, NULL);
    ct_profiler_free(R.prof);
    free(R.best);
    free(R.st);
    ct_schedule_free(R.sched);
    ct_scaler_free(R.scaler);
    ct_zero_free(R.zero);
    ct_det_free(R.det);
    ct_optimizer_free(R.opt);
    ct_plan_free(R.plan);
    if (!o->task) ct_task_free(R.task);
    ct_pp_free(&R);
    ct_tp_free(&R);
    return s;
}
