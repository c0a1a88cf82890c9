/* src/train/trainer.c - the one training loop (train.h): plan, optimizer,
 * loss scaler, schedule, then epochs of steps, each step a few named parts:
 *   next batch -> forward -> backward (x accumulate_steps)
 *   -> optimizer step (unscale + overflow check, clip, step or skip, scale update)
 *   -> metrics, checkpoint, progress
 * and at each epoch's end: evaluate -> plateau -> early stopping.
 * Data parallel (ct_train_opts.comm), the parts in data_parallel.c: each
 * rank builds the plan for its share of the batch, the gradients are reduced
 * at the optimizer step, statistics and evaluations are combined, rank 0
 * prints and saves. */
#include <math.h>
#include <stdarg.h>
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
            r->profile_dir[0] = 0;
        }
    }
    free(ck);
    return s;
}

/* The built-in task of a validated recipe. */
static ct_status task_for(ct_context *ctx, const ct_recipe *r, ct_task **out) {
    if (r->model == CT_MODEL_GPT || r->model == CT_MODEL_BERT) return ct_task_text_create(ctx, r, out);
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

static double now_s(void) { return 1e-6 * ct_profiler_now_us(); }

static void fmt_time(double s, char *buf, size_t len) {
    if (!(s >= 0) || s > 1e7) s = 0;
    int t = (int)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, len, "%d:%02d", t / 60, t % 60);
}

double ct_train_scaled_lr(const ct_recipe *r) {
    double lr = r->optim.lr;
    int64_t b = r->batch_size * r->accumulate_steps, b0 = r->lr_base_batch;
    switch (r->lr_scaling) {
    case CT_LR_SCALING_LINEAR: return ct_lr_scale_for_batch(lr, b, b0, 0);
    case CT_LR_SCALING_SQRT: return ct_lr_scale_for_batch(lr, b, b0, 1);
    case CT_LR_SCALING_LINEAR_THEN_SQRT: {
        int64_t bs = r->lr_sqrt_from_batch > 0 ? r->lr_sqrt_from_batch : 8 * b0;
        if (b <= bs) return ct_lr_scale_for_batch(lr, b, b0, 0);
        return ct_lr_scale_for_batch(ct_lr_scale_for_batch(lr, bs, b0, 0), b, bs, 1);
    }
    default: return lr;
    }
}

/* The recipe's schedule over `total` steps (lengths left at 0 span the run
 * after warmup; "cosine" decays to min_lr at the end of the run). */
ct_status ct_train_schedule(ct_context *ctx, const ct_recipe *r, int64_t total, ct_schedule **out) {
    ct_schedule_kind kind = r->schedule;
    int64_t w = r->warmup_steps, rest = total - w > 1 ? total - w : 1;
    if (kind == CT_SCHED_COSINE && total - w < 1) kind = CT_SCHED_CONSTANT;
    double lr = ct_train_scaled_lr(r);
    ct_schedule_opts o;
    ct_schedule_opts_default(&o, kind, lr);
    o.warmup_steps = kind == CT_SCHED_ONE_CYCLE || kind == CT_SCHED_PLATEAU ? 0 : w;
    o.warmup_start_factor = r->warmup_start_factor; /* 0: the ramp lr*(t+1)/W, in both */
    o.min_lr = r->min_lr;
    o.gamma = r->gamma;
    o.step_size = r->step_size;
    o.n_milestones = r->n_milestones;
    for (int i = 0; i < r->n_milestones && i < CT_SCHED_MAX_MILESTONES; i++) o.milestones[i] = r->milestones[i];
    o.t_max = rest;
    o.t_0 = r->t_0;
    o.t_mult = r->t_mult;
    o.start_factor = 1.0;
    o.end_factor = r->end_factor;
    o.total_iters = rest;
    o.power = r->power;
    o.max_lr = lr;
    o.total_steps = total;
    o.pct_start = r->pct_start;
    o.anneal_linear = r->anneal == CT_ANNEAL_LINEAR;
    o.div_factor = r->div_factor;
    o.final_div_factor = r->final_div_factor;
    o.rsqrt_timescale = w;
    o.factor = r->plateau_factor;
    o.patience = r->plateau_patience;
    o.threshold = r->plateau_threshold;
    o.cooldown = r->plateau_cooldown;
    return ct_schedule_create(ctx, &o, out);
}

/* ---- plan and memory budget ---------------------------------------------------------------- */

static void compile_opts(const ct_recipe *r, ct_compile_opts *co) {
    ct_compile_opts_default(co);
    co->accumulate_grads = r->accumulate_steps > 1;
    co->recompute_every = r->recompute_every;
    co->recompute_ops = r->recompute_ops == CT_RECOMPUTE_OPS_CHEAP ? CT_RECOMPUTE_CHEAP
                        : r->recompute_ops == CT_RECOMPUTE_OPS_ALL ? CT_RECOMPUTE_ALL
                                                                   : 0;
    co->precision = r->precision;
    co->keep_fp32 = r->keep_fp32;
    co->fusion_level = r->fusion_level;
    co->memory_opt = r->memory_opt;
}

/* Builds the task's graph for r and compiles it (plan_only: sizes only). */
static ct_status build_plan(ct_context *ctx, ct_task *t, const ct_recipe *r, int plan_only, ct_plan **out) {
    ct_graph *g;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_node loss = CT_NONE, keep[8];
    int n_keep = 0;
    ct_status s = t->build(t, g, r, &loss, &n_keep, keep);
    ct_compile_opts co;
    compile_opts(r, &co);
    co.plan_only = plan_only;
    ct_fusion_rules *rules = NULL;
    if (s == CT_OK && r->fusion_rules[0]) s = ct_fusion_rules_load(ctx, r->fusion_rules, &rules);
    co.fusion_rules = rules;
    if (s == CT_OK) s = ct_compile(g, loss, n_keep, keep, &co, out);
    ct_fusion_rules_free(rules);
    ct_graph_free(g);
    return s;
}

/* Floats of optimizer state per parameter (optim.h's state layout). */
static int optim_state_per_param(const ct_optim_opts *o) {
    switch (o->kind) {
    case CT_OPTIM_SGD: return o->momentum != 0;
    case CT_OPTIM_ADAM: case CT_OPTIM_ADAMW: return 2 + (o->amsgrad != 0);
    case CT_OPTIM_RMSPROP: return 1 + (o->momentum > 0) + (o->centered != 0);
    case CT_OPTIM_ADAGRAD: return 1;
    case CT_OPTIM_LAMB: return 2;
    default: return 2;
    }
}

/* Bytes the run's plan and optimizer take for recipe r (a plan_only compile). */
static ct_status plan_bytes(ct_context *ctx, ct_task *t, const ct_recipe *r, double *bytes, double *act) {
    ct_plan *p = NULL;
    CT_TRY(build_plan(ctx, t, r, 1, &p));
    ct_plan_stats ps;
    ct_plan_get_stats(p, &ps);
    ct_plan_free(p);
    *act = (double)ps.activation_bytes + (double)ps.workspace_bytes;
    *bytes = (double)ps.param_bytes * (1.0 + optim_state_per_param(&r->optim)) + (double)ps.grad_bytes +
             (double)ps.buffer_bytes + (double)ps.weight_copy_bytes + *act;
    return CT_OK;
}

/* One training forward + backward and one eval forward of the task's first
 * batch on plan p, with the running statistics left alone: kernels allocate
 * their layout buffers on first use, which no plan statistic shows. Weights,
 * buffers and the optimizer are untouched; the gradient arena is overwritten
 * (or, accumulating, zeroed by the loop before its first step), and the
 * loop restarts the epoch, so the run is the same as without it. */
static ct_status first_use(ct_task *t, ct_plan *p) {
    int64_t rows = 0;
    ct_status s = t->start_epoch(t, 0, 0);
    if (s == CT_OK) s = t->next_batch(t, 0, 0, &rows);
    ct_plan_set_update_running_stats(p, 0);
    if (s == CT_OK) s = ct_plan_forward(p, 1);
    if (s == CT_OK) s = ct_plan_backward(p);
    if (s == CT_OK) s = ct_plan_forward(p, 0);
    ct_plan_set_update_running_stats(p, 1);
    return s;
}

/* Recipe r for real under the context's budget: plan, optimizer, first_use.
 * 1 when it all fits. */
static int trial_fits(ct_context *ctx, ct_task *t, const ct_recipe *r) {
    ct_plan *p = NULL;
    ct_optimizer *opt = NULL;
    ct_status s = build_plan(ctx, t, r, 0, &p);
    if (s == CT_OK) s = ct_optimizer_create(p, &r->optim, &opt);
    if (s == CT_OK) s = t->bind(t, p);
    if (s == CT_OK) s = first_use(t, p);
    ct_optimizer_free(opt);
    ct_plan_free(p);
    ct_context_clear_error(ctx);
    return s == CT_OK;
}

#define MIB(x) ((x) / 1048576.0)

/* The run did not fit in memory_budget: E60003 naming what the run needs
 * and, for each way out, the bytes it saves (plan statistics) and whether
 * the run then fits (tried for real: a plan, one step). */
static ct_status budget_advice(ct_context *ctx, ct_task *t, const ct_recipe *r, size_t base_bytes, int world) {
    const double budget = (double)r->memory_budget, base = (double)base_bytes;
    double need, act;
    ct_context_clear_error(ctx);
    if (plan_bytes(ctx, t, r, &need, &act) != CT_OK) return CT_E_OOM;
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
            if (plan_bytes(ctx, t, &v, &b, &a) == CT_OK && b < best) best = b, best_n = n;
        }
        if (best_n) {
            ct_recipe v = *r;
            v.recompute_every = best_n;
            ADV("%srecompute_every=%d saves %.1f MiB (%s)", o ? "; " : ": ", best_n, MIB(need - best),
                base + best <= budget && trial_fits(ctx, t, &v) ? "fits" : "not enough alone");
        }
    }
    /* a smaller batch: the largest power-of-two fraction that fits (data parallel: r is one rank's share, the
     * advice names the global batch) */
    for (int64_t b = r->batch_size / 2; b >= 1; b /= 2) {
        ct_recipe v = *r;
        v.batch_size = b;
        double nb, a;
        if (plan_bytes(ctx, t, &v, &nb, &a) != CT_OK) break;
        int fits = base + nb <= budget && trial_fits(ctx, t, &v);
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
        if (plan_bytes(ctx, t, &v, &nb, &a) == CT_OK && nb < need)
            ADV("%sprecision=bf16 saves %.1f MiB (%s)", o ? "; " : ": ", MIB(need - nb),
                base + nb <= budget && trial_fits(ctx, t, &v) ? "fits" : "not enough alone");
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

/* ---- the run -------------------------------------------------------------------------------- */

typedef struct {
    ct_context *ctx;
    const ct_recipe *r;
    const ct_train_opts *o;
    FILE *out;
    ct_task *task;
    ct_plan *plan;
    ct_optimizer *opt;
    ct_scaler *scaler;
    ct_schedule *sched;
    ct_metrics *mx;
    ct_profiler *prof;
    ct_early_stop es;
    ct_train_state *st;
    float *best; /* restore-best copy of params + buffers */
    int have_best;
    float *par, *buf;
    size_t n_par, n_buf;
    int accum;
    int64_t total, per_epoch, steps_per_epoch;
    double start;
    /* what went wrong quietly, reported at the end (report_health) */
    float *grads; /* the gradient arena: n_par floats */
    uint64_t skipped0;          /* the scaler's skipped total when this run started */
    int64_t zero_grad_steps;    /* steps whose gradients were all exactly zero      */
    int64_t first_overflow_step;
    char first_overflow[64];    /* the first tensor an overflowing step named       */
    double first_loss;          /* the run's first loss (divergence_factor); <0: none yet */
    /* data parallel (docs/distributed.md) */
    ct_comm *comm;              /* NULL: one process                                  */
    int rank, world;
    ct_recipe local;            /* the recipe of this rank's plan: batch_size / world  */
    int64_t grad_reduces;       /* allreduces of the gradient arena                   */
    ct_zero *zero;              /* zero_stage > 0 or deterministic (zero.c); else NULL */
    int micro_n;                /* micro-batches per step: accum, or (deterministic) this rank's chunks */
    int grad_div;               /* the loss gradient's divisor: accum x world, or (deterministic) the chunks */
    ct_buckets *bk;             /* the gradient buckets (dp_buckets.c); NULL: one rank */
    double grad_wait_s;         /* the training thread blocked in gradient reductions */
    void *resid;                /* the ranks' compression residuals for the checkpoint being saved */
    size_t resid_size;
    /* rates: the samples / real (unpadded) tokens trained, over every rank (task batch_units) */
    double units_done, ep_units; /* this run (since it started or resumed); this epoch, in this run */
} run_t;

/* What the micro-batches of one optimizer step saw: summed over them here,
 * then over the ranks (step_stats). */
typedef struct {
    double loss;     /* sum of the micro-batches' mean losses */
    double correct, rows;
    double units;    /* samples / real (unpadded) tokens      */
    int n;           /* micro-batches                         */
} step_acc;

static void say(run_t *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(run_t *R, const char *fmt, ...) {
    if (!R->out) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(R->out, fmt, ap);
    va_end(ap);
    fflush(R->out);
}

/* The loss scaling the recipe asks for: loss_scale.mode, auto resolved by precision (amp/). */
static ct_amp_scaling recipe_scaling(const ct_recipe *r) {
    switch (r->scale_mode) {
    case CT_SCALE_AUTO: return ct_amp_default_scaling(r->precision);
    case CT_SCALE_DYNAMIC: return CT_AMP_SCALING_DYNAMIC;
    case CT_SCALE_STATIC: return CT_AMP_SCALING_STATIC;
    default: return CT_AMP_SCALING_NONE;
    }
}

static ct_status make_scaler(run_t *R) {
    const ct_recipe *r = R->r;
    ct_amp_scaling mode = recipe_scaling(r);
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

static void print_precision(run_t *R) {
    const ct_recipe *r = R->r;
    if (r->precision == CT_PRECISION_FP32) return;
    const char *pn = ct_precision_name(r->precision);
    say(R, "  precision %s: %d casts, loss scaling %s%s%s\n", pn, ct_plan_num_casts(R->plan),
        ct_amp_scaling_name(recipe_scaling(r)),
        r->keep_fp32[0] ? ", kept in fp32: " : "", r->keep_fp32);
    const ct_cpu_features *f = ct_context_cpu(R->ctx);
    int bf16 = r->precision == CT_PRECISION_BF16 || r->precision == CT_PRECISION_BF16_PURE;
    int hw = bf16 ? (f->amx_bf16 && f->amx_permitted) || (f->avx512_bf16 && f->os_avx512) : f->avx512_fp16 && f->os_avx512;
    if (!hw)
        say(R,
            "  note: this CPU has no %s matrix unit (%s): %s saves activation memory and gives %s numerics, but "
            "every op computes in FP32 on converted copies, so steps are slower than fp32\n",
            bf16 ? "BF16" : "FP16", bf16 ? "AMX-BF16 / AVX512-BF16" : "AVX512-FP16", pn, bf16 ? "BF16" : "FP16");
}

/* ---- profiler (profile_dir): a failure only warns, training goes on ------------------------- */

static void profile_start(run_t *R) {
    ct_profiler_opts po;
    ct_profiler_opts_default(&po);
    po.skip_steps = 1;
    po.warmup_steps = 2;
    po.record_steps = 10;
    if (ct_profiler_create(R->ctx, &po, &R->prof) != CT_OK || ct_plan_set_profiler(R->plan, R->prof) != CT_OK) {
        say(R, "warning: profiler: %s; training without it\n", ct_context_last_error(R->ctx));
        ct_profiler_free(R->prof);
        R->prof = NULL;
        return;
    }
    mkdir(R->r->profile_dir, 0777); /* an existing or unwritable directory is reported when the trace is written */
}

static void profile_finish(run_t *R) {
    if (!R->prof) return;
    ct_plan_stats ps;
    ct_plan_get_stats(R->plan, &ps);
    float *ost = NULL;
    size_t on = 0;
    if (ct_optimizer_state(R->opt, &ost, &on) != CT_OK) on = 0;
    ct_profiler_set_memory(R->prof, &ps, on * sizeof(float), (size_t)R->r->memory_budget);
    char path[600];
    if (R->rank > 0) snprintf(path, sizeof path, "%s/trace.rank%d.json", R->r->profile_dir, R->rank);
    else snprintf(path, sizeof path, "%s/trace.json", R->r->profile_dir);
    if (ct_profiler_write(R->prof, path) != CT_OK) {
        say(R, "warning: %s (training results are unaffected)\n", ct_context_last_error(R->ctx));
        return;
    }
    say(R, "profile: %s (%zu events, %llu dropped; open in chrome://tracing or ui.perfetto.dev)\n", path,
        ct_profiler_num_events(R->prof), (unsigned long long)ct_profiler_dropped(R->prof));
    ct_doctor_report dr;
    if (ct_doctor_analyze_file(R->ctx, path, &dr) == CT_OK) {
        if (R->out) ct_doctor_print(&dr, R->out);
    } else {
        say(R, "warning: doctor: %s\n", ct_context_last_error(R->ctx));
    }
}

/* ---- checkpoints --------------------------------------------------------------------------- */

static ct_status save(run_t *R, int64_t step, int64_t ep, int64_t b, double run_loss, int64_t correct, int64_t seen,
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
    say(R, "  checkpoint: step %lld -> %s%sstep-%06lld%s\n", (long long)step, R->r->save_dir,
        dl && R->r->save_dir[dl - 1] == '/' ? "" : "/", (long long)step, finished ? " (end of run)" : "");
    return CT_OK;
}

/* save() on rank 0 only; data parallel: first rank 0's buffers to all and a check that the weights are the
 * same on every rank, then the others wait for rank 0 and share its status. */
static ct_status checkpoint(run_t *R, int64_t step, int64_t ep, int64_t b, double run_loss, int64_t correct,
                            int64_t seen, const ct_task_eval *ev, int finished) {
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
    return ct_zero_gather_state(R->zero, 0);
}

/* The task's evaluation; data parallel: on rank 0's buffers, each rank its part, combined. */
static ct_status evaluate(run_t *R, ct_task_eval *ev) {
    CT_TRY(ct_dp_broadcast_state(R->comm, R->plan, 1));
    CT_TRY(R->task->evaluate(R->task, ev));
    if (ct_zero_deterministic(R->zero)) return CT_OK; /* every rank evaluated the whole split */
    return ct_dp_reduce_eval(R->comm, R->task, ev);
}

/* The step's statistics, summed over its micro-batches and (data parallel) the ranks, added to the epoch's
 * running totals, then checked: a loss that is not finite (without a loss scaler, which zeroes an overflowed
 * forward's loss and skips the step) or that diverged ends the run. */
static ct_status step_stats(run_t *R, step_acc *a, int64_t step, int64_t ep, float lr, double *run_loss,
                            int64_t *correct, int64_t *seen) {
    if (ct_zero_deterministic(R->zero) && a->n) {
        /* the chunk losses summed in chunk order (the same double at any world size), as one mean per step */
        double cr[3] = {a->correct, a->rows, a->units};
        CT_TRY(ct_comm_allreduce_f64(R->comm, cr, 3, CT_REDUCE_SUM)); /* integers: exact in any order */
        a->correct = cr[0], a->rows = cr[1], a->units = cr[2];
        CT_TRY(ct_zero_det_reduce(R->zero, &a->loss));
        R->grad_reduces++;
        a->n = 1;
    } else {
        CT_TRY(ct_dp_reduce_step(R->comm, &a->loss, &a->correct, &a->rows, &a->units));
    }
    R->units_done += a->units, R->ep_units += a->units;
    const double loss = a->n ? a->loss / a->n : 0.0;
    *run_loss += a->loss;
    *correct += (int64_t)a->correct;
    *seen += (int64_t)a->rows;
    memset(a, 0, sizeof *a);
    const ct_recipe *r = R->r;
    if (!isfinite(loss))
        return ct_set_error(R->ctx, CT_E_NONFINITE,
                            "the loss became %g at step %lld (epoch %lld, lr %g); lower optimizer.lr, check the data "
                            "for NaN/inf (detect_anomaly: true names the first op)",
                            loss, (long long)step + 1, (long long)ep + 1, (double)lr);
    if (R->first_loss < 0.0 && loss > 0.0) R->first_loss = loss;
    if (r->divergence_factor > 0.0f && R->first_loss > 0.0 && loss > (double)r->divergence_factor * fmax(R->first_loss, 1.0))
        return ct_set_error(R->ctx, CT_E_NONFINITE,
                            "the loss %g at step %lld (epoch %lld, lr %g) is more than divergence_factor %g times the "
                            "run's first loss %g: training diverged; lower optimizer.lr or add warmup "
                            "(divergence_factor: 0 turns this check off)",
                            loss, (long long)step + 1, (long long)ep + 1, (double)lr, (double)r->divergence_factor,
                            R->first_loss);
    return CT_OK;
}

/* ---- one optimizer step -------------------------------------------------------------------- */

/* The step's gradients summed over the ranks (data parallel or ZeRO), before anything else of the step
 * talks to the other ranks: with comm_progress thread the progress thread may still be starting buckets
 * until ct_buckets_finish returns, and MPI_THREAD_SERIALIZED allows no other MPI call meanwhile (and the
 * ranks must issue their collectives in the same order: a statistics allreduce slipping between two
 * buckets on one rank only would pair with a bucket on the other). */
static ct_status reduce_gradients(run_t *R) {
    const int zero = ct_zero_stage(R->zero) > 0;
    if (zero) { /* ZeRO: each rank reduces, checks, clips and updates its segment; then the allgather */
        double ta = R->prof ? ct_profiler_now_us() : 0;
        CT_TRY(ct_zero_reduce_grads(R->zero));
        R->grad_reduces++;
        if (R->prof) ct_profiler_event(R->prof, "reduce-scatter gradients", "comm", ta, ct_profiler_now_us(), NULL);
    } else if (R->world > 1 && !ct_zero_deterministic(R->zero)) {
        /* data parallel: the mean gradient of the global batch on every rank, the same bits everywhere, so the
         * overflow check, the clipping norm and the step below agree across ranks without more messages */
        double ta = ct_profiler_now_us();
        if (R->bk) CT_TRY(ct_buckets_finish(R->bk, NULL)); /* the buckets not sent during backward, and the wait */
        else CT_TRY(ct_dp_reduce_grads(R->comm, R->plan));
        double tb = ct_profiler_now_us();
        R->grad_wait_s += 1e-6 * (tb - ta);
        R->grad_reduces++;
        if (R->prof) ct_profiler_event(R->prof, R->bk ? "wait for gradient buckets" : "allreduce gradients", "comm", ta,
                                       tb, NULL);
        if (R->bk) ct_dp_buckets_trace(R->bk, R->prof);
    }
    return CT_OK;
}

/* With a loss scaler: unscale + inf/NaN check in one pass, then (all
 * finite) clipping and the step, else the step is skipped; then the
 * scaler's update, traced in the profiler's "amp" category. */
static ct_status optimizer_step(run_t *R, float lr, float *gnorm, int *stop) {
    const ct_recipe *r = R->r;
    int overflow = 0, bad_param = -1;
    *gnorm = 0.0f;
    const int zero = ct_zero_stage(R->zero) > 0;
    if (R->scaler) CT_TRY(ct_scaler_unscale(R->scaler, R->plan, &overflow, &bad_param));
    int all_zero = 0; /* ZeRO: each rank holds its segment only: the overflow and the zero check over all */
    if (zero) CT_TRY(ct_zero_agree(R->zero, &overflow, &all_zero));
    if (!overflow) {
        /* all-zero gradients train nothing (an FP16 scale so small they underflow, or a dead model): counted
         * and reported at the end; the scan stops at the first nonzero value, so it costs nothing normally */
        size_t i = 0;
        if (!zero)
            while (i < R->n_par && R->grads[i] == 0.0f) i++;
        if (zero ? all_zero : i == R->n_par) R->zero_grad_steps++;
        if (r->clip_grad_norm > 0.0f) {
            if (zero) CT_TRY(ct_zero_clip_grad_norm(R->zero, r->clip_grad_norm, gnorm)); /* the norm over all segments */
            else CT_TRY(ct_clip_grad_norm(R->plan, r->clip_grad_norm, 2.0f, gnorm));
        }
        if (r->clip_grad_value > 0.0f) CT_TRY(ct_clip_grad_value(R->plan, r->clip_grad_value));
        CT_TRY(ct_optimizer_set_lr(R->opt, lr));
        CT_TRY(ct_optimizer_step(R->opt));
        if (zero) {
            double tg = R->prof ? ct_profiler_now_us() : 0;
            CT_TRY(ct_zero_allgather_params(R->zero));
            if (R->prof) ct_profiler_event(R->prof, "allgather parameters", "comm", tg, ct_profiler_now_us(), NULL);
        }
    }
    if (!R->scaler) return CT_OK;
    double ts = R->prof ? ct_profiler_now_us() : 0;
    CT_TRY(ct_scaler_update(R->scaler, R->plan, overflow, bad_param));
    /* the loss-scale history: each event in the metrics log and in the trace's "amp" category */
    const ct_scale_record *ev = NULL;
    int n_ev = 0;
    ct_scaler_last_events(R->scaler, &ev, &n_ev);
    for (int i = 0; i < n_ev; i++) {
        if (ev[i].event == CT_SCALE_OVERFLOW && R->first_overflow_step < 0) {
            R->first_overflow_step = ev[i].step;
            snprintf(R->first_overflow, sizeof R->first_overflow, "%s", ev[i].tensor[0] ? ev[i].tensor : "?");
        }
        if (R->mx) CT_TRY(ct_metrics_log_scaler_event(R->mx, &ev[i]));
        if (!R->prof) continue;
        char args[192];
        snprintf(args, sizeof args, "{\"event\": \"%s\", \"scale\": %g, \"first_nonfinite\": \"%.60s\"}",
                 ct_scale_event_name(ev[i].event), (double)ev[i].scale, ev[i].tensor);
        ct_profiler_event(R->prof, ev[i].event == CT_SCALE_GROWTH ? "loss scale grown" : ev[i].event == CT_SCALE_BACKOFF
                                       ? "loss scale backoff" : "overflow: update skipped",
                          "amp", ts, ct_profiler_now_us(), args);
    }
    if (ct_scaler_should_stop(R->scaler)) {
        say(R, "\n  loss scaler: the scale stayed at loss_scale.min_scale %g for %d overflows in a row; stopping "
            "(loss_scale.floor = stop). Check the data and the learning rate, or train in bf16\n",
            (double)r->scale_min, r->scale_floor_patience);
        *stop = 1;
    }
    return CT_OK;
}

/* ---- what went wrong quietly ------------------------------------------------------------------ */

/* After the run (its checkpoint saved): steps the loss scaler skipped and
 * steps whose gradients were all zero. Some are normal (a dynamic scale
 * finding its level); most of the steps is a warning; all of them means
 * nothing was trained, an error (a static scale that always overflows needs
 * 2 steps to tell, a dynamic one 17: enough halvings to go from the default
 * 65536 to 1). */
static ct_status report_health(run_t *R, ct_train_result *res, int64_t n) {
    int64_t skipped = 0;
    if (R->scaler) {
        ct_scaler_totals tot;
        ct_scaler_get_totals(R->scaler, &tot);
        skipped = (int64_t)(tot.overflows - R->skipped0);
    }
    res->skipped_steps = skipped;
    res->zero_grad_steps = R->zero_grad_steps;
    if (!isfinite(res->eval_loss))
        say(R, "  warning: the last evaluation's loss is %g: the model's output is not finite on the %s data%s\n",
            res->eval_loss, R->task->eval_split,
            R->scaler ? " (in FP16 the forward may overflow: keep_fp32 for the layer, or train in bf16)" : "");
    if (n <= 0) return CT_OK;
    const int dynamic = recipe_scaling(R->r) == CT_AMP_SCALING_DYNAMIC;
    char scale[48] = "";
    if (R->scaler) snprintf(scale, sizeof scale, "%g", (double)ct_scaler_scale(R->scaler));
    if (skipped > 0)
        say(R, "  loss scaler: %lld of %lld steps skipped (inf/NaN gradients; the first in '%s' at step %lld)\n",
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
        say(R, "  warning: the loss scaler skipped most steps (%lld of %lld): only %lld updated the weights; %s%s%s\n",
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
        say(R, "  warning: the gradients were all exactly zero in %lld of %lld steps; %s\n",
            (long long)R->zero_grad_steps, (long long)n, why);
    return CT_OK;
}

/* ---- the loop ------------------------------------------------------------------------------ */

/* Activation checkpointing is there to save memory. Where it would not
 * lower the activation peak (e.g. a recomputed first layer's values meet
 * backward's working set at the peak: the Fashion CNN at fusion level 1
 * needs 49.4 MiB with recompute_every 1 against 37.5 without), the run
 * trains without it and says so. Compares two plan_only compiles. */
static ct_status recompute_pays(run_t *R) {
    ct_recipe *r = &R->local;
    if ((r->recompute_every <= 0 && r->recompute_ops == CT_RECOMPUTE_OPS_NONE) || !r->memory_opt) return CT_OK;
    ct_recipe off = *r;
    off.recompute_every = 0;
    off.recompute_ops = CT_RECOMPUTE_OPS_NONE;
    double b_on, a_on, b_off, a_off;
    CT_TRY(plan_bytes(R->ctx, R->task, r, &b_on, &a_on));
    CT_TRY(plan_bytes(R->ctx, R->task, &off, &b_off, &a_off));
    if (a_on < a_off) return CT_OK;
    say(R, "warning: recomputation (recompute_every %d, recompute_ops %s) would not lower this model's activation "
           "peak (%.1f MiB with it, %.1f without; `ctrain graph --set recompute_every=N` shows both): training "
           "without it\n",
        r->recompute_every,
        r->recompute_ops == CT_RECOMPUTE_OPS_CHEAP ? "cheap" : r->recompute_ops == CT_RECOMPUTE_OPS_ALL ? "all" : "none",
        MIB(a_on), MIB(a_off));
    *r = off;
    return CT_OK;
}

static ct_status setup(run_t *R, ct_train_result *res) {
    ct_context *ctx = R->ctx;
    const ct_recipe *r = R->r;
    R->accum = r->accumulate_steps;
    ct_mem_stats ms0;
    ct_context_mem_stats(ctx, &ms0);
    CT_TRY(recompute_pays(R));
    ct_status s = build_plan(ctx, R->task, &R->local, 0, &R->plan);
    if (s == CT_OK) s = ct_zero_create(ctx, R->comm, r, R->plan, &R->zero);
    if (s == CT_OK) s = ct_zero_optimizer_create(R->zero, R->plan, &r->optim, R->o->resume != NULL, &R->opt);
    if (s == CT_OK) s = R->task->bind(R->task, R->plan);
    /* with a memory budget, the kernels' first use now: an E60003 then comes with advice, not mid-run */
    if (s == CT_OK && r->memory_budget > 0) s = first_use(R->task, R->plan);
    if (s == CT_E_OOM && r->memory_budget > 0) {
        ct_optimizer_free(R->opt);
        ct_plan_free(R->plan);
        R->opt = NULL;
        R->plan = NULL;
        return budget_advice(ctx, R->task, &R->local, ms0.bytes_in_use, R->world);
    }
    CT_TRY(s);
    /* "loss / accumulation_steps": each micro-batch's gradient is added into the arena. Data parallel also
     * divides by the world size (each rank's rows are that share of the global batch) and the allreduce sums:
     * the gradients have the magnitudes of one process, so FP16 overflows at the same loss scale */
    R->micro_n = ct_zero_deterministic(R->zero) ? ct_zero_local_chunks(R->zero) : R->accum;
    R->grad_div = ct_zero_deterministic(R->zero) ? r->deterministic_chunks : R->accum * R->world;
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
    if (r->warmup_epochs > 0) { /* warmup_epochs: in optimizer steps of this run's epochs */
        ct_recipe rw = *r;
        int64_t spe = R->task->epochs_from_data ? R->per_epoch / R->accum : R->steps_per_epoch;
        rw.warmup_steps = (int)CT_MIN((double)INT32_MAX, ceil((double)r->warmup_epochs * (double)spe));
        CT_TRY(ct_train_schedule(ctx, &rw, R->total, &R->sched));
    } else CT_TRY(ct_train_schedule(ctx, r, R->total, &R->sched));
    CT_TRY(ct_early_stop_init(ctx, &R->es, r->early_stop_patience, r->early_stop_min_delta,
                              r->early_stop_mode == CT_EARLY_STOP_MAX));
    ct_plan_param_arena(R->plan, &R->par, &R->grads, &R->n_par);
    /* buckets for DDP (zero_stage 0); ZeRO reduce-scatters and the deterministic mode reduces in its tree */
    if (R->zero && R->world > 1 && (r->grad_compression != CT_GRAD_COMPRESSION_NONE || r->sync_batchnorm))
        return ct_set_error(ctx, CT_E_CONFIG,
                            "%s works with the gradient buckets of zero_stage 0 only, not with %s: set %s, or "
                            "zero_stage 0 and deterministic false",
                            r->sync_batchnorm ? "sync_batchnorm" : "grad_compression",
                            ct_zero_stage(R->zero) > 0 ? "zero_stage 1/2" : "deterministic: true",
                            r->sync_batchnorm ? "sync_batchnorm false" : "grad_compression none");
    if (!R->zero) CT_TRY(ct_dp_buckets_create(ctx, R->comm, R->plan, r, &R->bk));
    R->first_overflow_step = -1;
    R->first_loss = -1.0;
    ct_plan_buffer_arena(R->plan, &R->buf, &R->n_buf);
    if (r->early_stop_patience > 0 && r->early_stop_restore_best &&
        !(R->best = malloc((R->n_par + R->n_buf + 1) * sizeof(float))))
        return ct_set_error(ctx, CT_E_OOM, "out of memory keeping a copy of the best weights (early_stop_restore_best)");
    if (!(R->st = calloc(1, sizeof *R->st))) return ct_set_error(ctx, CT_E_OOM, "out of memory");
    ct_train_state_init(R->st);
    (void)res;
    return ct_dp_agree(ctx, R->comm, r, R->plan, R->task);
}

static ct_status run_loop(run_t *R, ct_train_result *res) {
    ct_context *ctx = R->ctx;
    const ct_recipe *r = R->r;
    ct_task *t = R->task;
    ct_status s;
    const int data_epochs = t->epochs_from_data, quiet = R->o->quiet;
    /* mpirun gives its ranks a pseudo-terminal whatever the user's output is: data parallel prints lines */
    const int tty = R->out && isatty(fileno(R->out)) && R->world == 1;
    int64_t step = 0, step0 = 0, ep = 0;
    ct_task_eval ev = {.loss = 0};
    int stopped = 0, resumed = 0;
    ct_train_state *ck = R->st;
    int64_t ck_batch = 0, ck_ep = 0;
    double ck_loss = 0;
    int64_t ck_correct = 0, ck_seen = 0;
    int ck_stopped = 0;
    if (R->o->resume) {
        CT_TRY(ct_checkpoint_load(ctx, R->o->resume, R->plan, R->opt, ck));
        char note[256];
        CT_TRY(ct_dp_residual_load(ctx, R->comm, R->bk, ck->path, note, sizeof note));
        if (note[0]) say(R, "  note: %s\n", note);
        if (ck->has_schedule) CT_TRY(ct_schedule_set_state(R->sched, &ck->schedule));
        if (ck->has_early_stop) R->es = ck->early_stop;
        if (ck->has_scaler && R->scaler) CT_TRY(ct_scaler_set_state(R->scaler, &ck->scaler));
        resumed = 1;
        step = step0 = ck->step;
        ep = data_epochs ? ck->epoch : step / R->steps_per_epoch;
        ck_ep = ep;
        ck_batch = ck->batch_in_epoch;
        ck_loss = ck->epoch_loss_sum, ck_correct = ck->epoch_correct, ck_seen = ck->epoch_seen;
        ev.loss = ck->test_loss;
        ev.accuracy = ck->test_acc;
        stopped = ck_stopped = R->es.stopped;
    } else if (r->init_weights[0]) { /* e.g. torchvision weights (scripts/torchvision_to_safetensors.py) */
        s = ct_weights_load(ctx, r->init_weights, R->plan);
        if (s != CT_OK) return ct_wrap_error(ctx, s, "recipe key 'init_weights': ", NULL);
        if (!quiet) say(R, "  initial weights from %s\n", r->init_weights);
    }
    /* data parallel: every rank starts from rank 0's weights (the same seed, or the same checkpoint, gave them
     * already: this makes sure) */
    CT_TRY(ct_dp_broadcast_state(R->comm, R->plan, 0));
    CT_TRY(ct_zero_shard(R->zero)); /* ZeRO: the whole state (perhaps resumed) becomes this rank's shard */
    if (R->scaler) {
        ct_scaler_totals tot;
        ct_scaler_get_totals(R->scaler, &tot);
        R->skipped0 = tot.overflows;
    }
    /* header */
    ct_plan_stats ps;
    ct_plan_get_stats(R->plan, &ps);
    char line[1024], rj[8192];
    t->describe(t, &ps, line, sizeof line);
    say(R, "ctrain train: %s\n", line);
    say(R, "  threads %d, kernels: %s%s, %lld steps of %lld x %lld rows%s\n", ct_context_num_threads(ctx),
        ct_isa_name(ct_context_isa(ctx)), ct_context_use_onednn(ctx) ? " + oneDNN" : "", (long long)R->total,
        (long long)r->batch_size, (long long)R->accum, data_epochs ? "" : " (tokens: x context)");
    if (R->world > 1 && R->bk) {
        char bl[512];
        ct_dp_buckets_describe(R->bk, r, ct_plan_grad_ready_order(R->plan, NULL, 0), bl, sizeof bl);
        say(R, "  data parallel: %d ranks x %lld rows (global batch %lld), gradients (%.2f MiB) averaged in %s\n",
            R->world, (long long)R->local.batch_size, (long long)r->batch_size,
            (double)R->n_par * sizeof(float) / 1048576.0, bl);
    }
    else if (R->world > 1)
        say(R, "  data parallel: %d ranks x %lld rows (global batch %lld), gradients averaged by %s of "
            "%.2f MiB per step\n", R->world, (long long)(r->batch_size / R->world), (long long)r->batch_size,
            ct_zero_stage(R->zero) > 0 ? "one reduce-scatter" : ct_zero_deterministic(R->zero)
                                             ? "one fixed-tree allreduce" : "one allreduce",
            (double)R->n_par * sizeof(float) / 1048576.0);
    if (ct_zero_stage(R->zero) > 0) {
        float *ost = NULL;
        size_t on = 0;
        double gb, sb;
        ct_optimizer_state(R->opt, &ost, &on);
        ct_zero_memory(R->zero, R->n_par, on, &gb, &sb);
        say(R, "  zero_stage %d: per rank %.2f MiB parameters, %.2f MiB optimizer state (1/%d of %.2f MiB), %.2f MiB "
            "gradients between steps%s; reduce-scatter + allgather per step\n", ct_zero_stage(R->zero),
            (double)R->n_par * sizeof(float) / 1048576.0, sb / 1048576.0, R->world,
            (double)optim_state_per_param(&r->optim) * (double)R->n_par * sizeof(float) / 1048576.0, gb / 1048576.0,
            ct_zero_stage(R->zero) == 2 ? " (the rest released after the reduce-scatter; the whole gradient exists "
                                          "from backward to the reduce-scatter)" : "");
    }
    if (r->deterministic)
        say(R, "  deterministic: %d chunks of %lld rows per global batch, %d on each rank, gradients added in one "
            "fixed tree (bit-identical at any power-of-two world size dividing %d with the same threads per rank)\n",
            r->deterministic_chunks, (long long)R->local.batch_size, ct_zero_local_chunks(R->zero),
            r->deterministic_chunks);
    if (r->lr_scaling != CT_LR_SCALING_NONE)
        say(R, "  lr_scaling %s: global batch %lld, base %lld: lr %g -> %g\n",
            ct_recipe_enum_name("lr_scaling", (int)r->lr_scaling), (long long)(r->batch_size * R->accum),
            (long long)r->lr_base_batch, (double)r->optim.lr, ct_train_scaled_lr(r));
    print_precision(R);
    if (ct_recipe_to_json(r, rj, sizeof rj) < 0) snprintf(rj, sizeof rj, "(out of memory)");
    say(R, "  recipe: %s\n", rj);
    if (resumed) {
        if (data_epochs)
            say(R, "  resumed from %s: step %lld, epoch %lld, batch %lld%s\n", ck->path, (long long)step,
                (long long)ep + 1, (long long)ck_batch, ck->finished ? " (the run had ended)" : "");
        else
            say(R, "  resumed from %s: step %lld%s\n", ck->path, (long long)step, ck->finished ? " (the run had ended)" : "");
    }
    const char *mpath = R->o->metrics_path ? R->o->metrics_path : r->metrics_file;
    if (mpath && mpath[0] && R->rank == 0) CT_TRY(ct_metrics_open(ctx, mpath, resumed, rj, &R->mx));
    if (r->profile_dir[0]) profile_start(R); /* every rank: rank k > 0 writes trace.rank<k>.json */
    R->start = now_s();
    ct_comm_stats cs0;
    ct_comm_get_stats(R->comm, &cs0);
    for (; !stopped && step < R->total && (!data_epochs || ep < r->epochs); ep++) {
        const int64_t ep_end = data_epochs ? R->total : CT_MIN(R->total, (ep + 1) * R->steps_per_epoch);
        int64_t b = 0, correct = 0, seen = 0;
        double run_loss = 0, ep_start = now_s();
        R->ep_units = 0;
        if (resumed && step == step0 && ep == ck_ep && (ck_batch > 0 || !data_epochs)) {
            b = ck_batch; /* mid-epoch: skip what was consumed, restore the running totals */
            run_loss = ck_loss, correct = ck_correct, seen = ck_seen;
        }
        CT_TRY(t->start_epoch(t, ep, data_epochs ? b : 0));
        int micro = 0;
        step_acc sa = {0};
        double mk_loss = run_loss; /* running totals at the last step, for the metrics log */
        int64_t mk_correct = correct, mk_seen = seen;
        if (R->accum > 1) CT_TRY(ct_plan_zero_grads(R->plan));
        while (!stopped && step < ep_end) {
            /* next batch */
            double td = R->prof ? ct_profiler_now_us() : 0;
            int64_t rows = 0;
            CT_TRY(t->next_batch(t, step, micro, &rows));
            if (rows == 0) break; /* the epoch's data is exhausted */
            if (R->prof) ct_profiler_event(R->prof, "batch", "data", td, ct_profiler_now_us(), NULL);
            float lr = ct_schedule_lr(R->sched, step), loss;
            if (R->scaler)
                CT_TRY(ct_plan_set_loss_scale(R->plan, ct_scaler_scale(R->scaler) / (float)R->grad_div));
            /* forward, backward (bn_stats_once: running statistics from the step's last micro-batch only;
             * deterministic: from the global batch's first chunk only, which is rank 0's at any world size) */
            if (r->bn_stats_once) ct_plan_set_update_running_stats(R->plan, micro == R->accum - 1);
            if (r->deterministic) ct_plan_set_update_running_stats(R->plan, R->rank == 0 && micro == 0);
            CT_TRY(ct_plan_forward(R->plan, 1));
            ct_plan_loss(R->plan, &loss);
            if (!isfinite(loss) && R->scaler) loss = 0.0f; /* FP16 overflowed in the forward: the scaler skips this step */
            /* data parallel: the last micro-batch's backward sends each bucket as soon as its gradients are final */
            if (R->bk && micro == R->accum - 1) CT_TRY(ct_buckets_begin(R->bk));
            CT_TRY(ct_plan_backward(R->plan));
            b += !r->deterministic || micro == 0; /* deterministic: the chunks are one global batch */
            if (r->deterministic) CT_TRY(ct_zero_det_push(R->zero, micro, loss));
            sa.loss += loss;
            if (t->has_accuracy) sa.correct += (double)t->batch_correct(t, rows);
            sa.rows += (double)rows;
            sa.units += t->batch_units ? (double)t->batch_units(t) : (double)(rows * t->unit_per_row);
            sa.n++;
            /* more micro-batches before this step: nothing is sent (data parallel) until the last one */
            if (++micro < R->micro_n) continue;
            micro = 0;
            CT_TRY(reduce_gradients(R));
            CT_TRY(step_stats(R, &sa, step, ep, lr, &run_loss, &correct, &seen));
            /* optimizer step */
            double to = R->prof ? ct_profiler_now_us() : 0;
            float gnorm = 0.0f;
            CT_TRY(optimizer_step(R, lr, &gnorm, &stopped));
            if (R->accum > 1) CT_TRY(ct_plan_zero_grads(R->plan));
            step++;
            if (R->prof) {
                ct_profiler_event(R->prof, "optimizer step", "optimizer", to, ct_profiler_now_us(), NULL);
                ct_profiler_step(R->prof);
            }
            /* metrics */
            if (R->mx) {
                ct_metrics_step ml = {step, (int)ep + 1, (run_loss - mk_loss) / R->accum,
                                      seen > mk_seen ? (double)(correct - mk_correct) / (double)(seen - mk_seen) : 0.0,
                                      lr, (double)(seen - mk_seen), r->clip_grad_norm > 0.0f ? gnorm : -1.0,
                                      R->scaler ? (double)ct_scaler_scale(R->scaler) : -1.0, now_s() - R->start};
                CT_TRY(ct_metrics_log_step(R->mx, &ml));
            }
            mk_loss = run_loss, mk_correct = correct, mk_seen = seen;
            if (R->o->step_hook) R->o->step_hook(R->o->hook_user, step);
            /* checkpoint */
            if (r->save_dir[0] && r->save_every > 0 && step % r->save_every == 0 && step < R->total) {
                if (tty && !quiet) say(R, "\n");
                CT_TRY(checkpoint(R, step, ep, b, run_loss, correct, seen, &ev, 0));
            }
            /* progress */
            int show = data_epochs ? (tty ? (b % 5 == 0 || b == R->per_epoch) : (b % r->log_every == 0))
                                   : (tty ? 1 : (step % r->log_every == 0 || step == R->total));
            if (!quiet && show) {
                double el = now_s() - R->start;
                char eta[32], head[96], acc[32] = "", nb[32] = "", sb[64] = "";
                fmt_time(el / (double)(step - step0) * (double)(R->total - step), eta, sizeof eta);
                if (data_epochs) {
                    int bar = (int)(20 * b / R->per_epoch);
                    char bb[24];
                    for (int i = 0; i < 20; i++) bb[i] = i < bar ? '#' : '.';
                    bb[20] = 0;
                    snprintf(head, sizeof head, "epoch %lld/%d [%s] %lld/%lld", (long long)ep + 1, r->epochs, bb,
                             (long long)b, (long long)R->per_epoch);
                } else {
                    snprintf(head, sizeof head, "step %lld/%lld", (long long)step, (long long)R->total);
                }
                if (t->has_accuracy) snprintf(acc, sizeof acc, "  acc %5.2f%%", 100.0 * (double)correct / (double)seen);
                if (r->clip_grad_norm > 0.0f) snprintf(nb, sizeof nb, "  grad norm %.3g", (double)gnorm);
                if (R->scaler) {
                    ct_scaler_state ss;
                    ct_scaler_get_state(R->scaler, &ss);
                    snprintf(sb, sizeof sb, "  scale %g skipped %llu", (double)ss.scale, (unsigned long long)ss.skipped);
                }
                say(R, "%s%s  loss %.4f%s  lr %.2e%s%s  %.0f %s/s  %.0f ms/step  ETA %s%s", tty ? "\r" : "  ", head,
                    run_loss / (double)b, acc, (double)lr, nb, sb,
                    R->units_done / el, t->unit,
                    1e3 * el / (double)(step - step0), eta, tty ? "\033[K" : "\n");
            }
        }
        /* the micro-batches of an unfinished accumulation at the epoch's end count in its totals */
        if (sa.n) CT_TRY(step_stats(R, &sa, step, ep, ct_schedule_lr(R->sched, step), &run_loss, &correct, &seen));
        /* evaluate */
        double te = now_s(), pe = R->prof ? ct_profiler_now_us() : 0;
        ct_profiler_set_ops_enabled(R->prof, 0); /* evaluation: one "eval" event, not part of a step */
        CT_TRY(evaluate(R, &ev));
        ct_profiler_set_ops_enabled(R->prof, 1);
        if (R->prof) ct_profiler_event(R->prof, "evaluate", "eval", pe, ct_profiler_now_us(), NULL);
        if (R->mx) CT_TRY(ct_metrics_log_eval(R->mx, (int)ep + 1, step, ev.loss, ev.accuracy, now_s() - R->start));
        char head[64], tacc[40] = "", eacc[40] = "", tail[160];
        if (data_epochs) snprintf(head, sizeof head, "epoch %lld/%d", (long long)ep + 1, r->epochs);
        else snprintf(head, sizeof head, "step %lld/%lld", (long long)step, (long long)R->total);
        if (t->has_accuracy) {
            snprintf(tacc, sizeof tacc, "  train acc %.2f%%", seen ? 100.0 * (double)correct / (double)seen : 0.0);
            snprintf(eacc, sizeof eacc, "  %s acc %.2f%%", t->eval_split, 100.0 * ev.accuracy);
        }
        double ep_time = now_s() - ep_start;
        if (ev.detail[0]) snprintf(tail, sizeof tail, "  %s, %.1f s)", ev.detail, now_s() - te);
        else snprintf(tail, sizeof tail, "  %.1f s  %.0f %s/s", ep_time, R->ep_units / ep_time, t->unit);
        say(R, "%s%s  train loss %.4f%s  %s loss %.4f%s%s\n", tty && !quiet ? "\r\033[K" : "", head,
            b ? run_loss / (double)b : 0.0, tacc, t->eval_split, ev.loss, eacc, tail);
        /* plateau, early stopping */
        if (ct_schedule_observe(R->sched, ev.loss))
            say(R, "  plateau: %s loss did not improve; lr -> %.3g\n", t->eval_split, ct_schedule_lr_f64(R->sched, step));
        int is_best = 0;
        const int es_max = r->early_stop_mode == CT_EARLY_STOP_MAX;
        if (r->early_stop_patience > 0 && ct_early_stop_update(&R->es, es_max ? ev.accuracy : ev.loss, &is_best)) {
            say(R, "  early stop: %s %s did not improve by %g for %d %s; best %.4f at %s %lld\n", t->eval_split,
                es_max ? "accuracy" : "loss", (double)r->early_stop_min_delta, r->early_stop_patience,
                data_epochs ? "epochs" : "evaluations", R->es.best, data_epochs ? "epoch" : "evaluation",
                (long long)R->es.best_epoch + 1);
            R->es.stopped = 1;
            stopped = 1;
            res->stopped_early = 1;
        }
        if (is_best && R->best) {
            memcpy(R->best, R->par, R->n_par * sizeof(float));
            memcpy(R->best + R->n_par, R->buf, R->n_buf * sizeof(float));
            R->have_best = 1;
        }
    }
    if (stopped && R->best) {
        if (R->have_best) {
            memcpy(R->par, R->best, R->n_par * sizeof(float));
            ct_plan_params_changed(R->plan); /* written through the pointer taken at start */
            memcpy(R->buf, R->best + R->n_par, R->n_buf * sizeof(float));
            CT_TRY(evaluate(R, &ev));
            if (t->has_accuracy)
                say(R, "  restored the best weights (%s %lld): %s loss %.4f, %s acc %.2f%%\n",
                    data_epochs ? "epoch" : "evaluation", (long long)R->es.best_epoch + 1, t->eval_split, ev.loss,
                    t->eval_split, 100.0 * ev.accuracy);
            else
                say(R, "  restored the best weights (%s %lld): %s loss %.4f\n", data_epochs ? "epoch" : "evaluation",
                    (long long)R->es.best_epoch + 1, t->eval_split, ev.loss);
        } else {
            say(R, "  warning: the best evaluation (%lld) came before the resume; its weights were not kept, the final "
                "weights stay\n", (long long)R->es.best_epoch + 1);
        }
    }
    if (r->save_dir[0] && (!resumed || step > step0 || stopped != ck_stopped))
        CT_TRY(checkpoint(R, step, data_epochs ? ep : step / (R->steps_per_epoch ? R->steps_per_epoch : 1), 0, 0, 0, 0,
                          &ev, 1));
    CT_TRY(ct_dp_same_weights(ctx, R->comm, R->plan, "at the end of the run"));
    double tt = now_s() - R->start;
    profile_finish(R);
    ct_mem_stats ms;
    ct_context_mem_stats(ctx, &ms);
    char accs[48] = "";
    if (t->has_accuracy) snprintf(accs, sizeof accs, ", %s accuracy %.2f%%", t->eval_split, 100.0 * ev.accuracy);
    say(R, "done: %lld steps in %.1f s (%.0f ms/step, %.0f %s/s), %s loss %.4f%s, peak memory %.1f MiB\n",
        (long long)step, tt, 1e3 * tt / (double)(step > step0 ? step - step0 : 1),
        R->units_done / (tt > 0 ? tt : 1), t->unit, t->eval_split, ev.loss,
        accs, (double)ms.peak_bytes / 1048576.0);
    if (R->world > 1) {
        ct_comm_stats cs;
        ct_comm_get_stats(R->comm, &cs);
        res->comm_seconds = cs.seconds - cs0.seconds;
        char rs[48] = "";
        if (cs.reduce_scatter_calls)
            snprintf(rs, sizeof rs, ", %llu reduce-scatter", (unsigned long long)cs.reduce_scatter_calls);
        say(R, "communication (rank 0): %lld gradient %s (one per optimizer step), %llu collectives in all "
            "(%llu allreduce, %llu broadcast, %llu allgather, %llu barrier%s; %.2f MiB), %.2f s of the training inside "
            "them (%.1f%%)\n",
            (long long)R->grad_reduces, ct_zero_stage(R->zero) > 0 ? "reduce-scatters" : "allreduces",
            (unsigned long long)(cs.allreduce_calls + cs.broadcast_calls + cs.allgather_calls + cs.barrier_calls +
                                 cs.reduce_scatter_calls),
            (unsigned long long)cs.allreduce_calls, (unsigned long long)cs.broadcast_calls,
            (unsigned long long)cs.allgather_calls, (unsigned long long)cs.barrier_calls, rs,
            (double)(cs.allreduce_bytes + cs.broadcast_bytes + cs.allgather_bytes + cs.reduce_scatter_bytes) /
                1048576.0,
            res->comm_seconds, tt > 0 ? 100.0 * res->comm_seconds / tt : 0.0);
        say(R, "communication share (rank 0): %.1f%% of the training blocked on the gradients (%.2f s over %lld "
            "steps, %.2f ms/step)\n", tt > 0 ? 100.0 * R->grad_wait_s / tt : 0.0, R->grad_wait_s,
            (long long)R->grad_reduces, R->grad_reduces ? 1e3 * R->grad_wait_s / (double)R->grad_reduces : 0.0);
    }
    res->grad_allreduces = R->grad_reduces;
    if (R->mx) {
        ct_metrics_log_done(R->mx, step, tt, ev.loss, ev.accuracy, (double)ms.peak_bytes / 1048576.0);
        s = ct_metrics_close(R->mx);
        R->mx = NULL;
        CT_TRY(s);
    }
    res->steps = step;
    res->seconds = tt;
    res->eval_loss = ev.loss;
    res->eval_accuracy = ev.accuracy;
    res->peak_bytes = ms.peak_bytes;
    res->stopped_early |= stopped;
    return report_health(R, res, step - step0);
}

ct_status ct_train(ct_context *ctx, const ct_recipe *r, const ct_train_opts *o, ct_train_result *res) {
    if (!ctx || !r) return CT_E_INVALID_ARG;
    ct_train_opts def;
    if (!o) {
        ct_train_opts_default(&def);
        o = &def;
    }
    ct_train_result dummy;
    if (!res) res = &dummy;
    memset(res, 0, sizeof *res);
    CT_TRY(ct_recipe_validate(ctx, r));
    run_t R = {.ctx = ctx, .r = r, .o = o, .out = o->out};
    ct_status s = CT_OK;
    R.comm = o->comm;
    R.rank = ct_comm_rank(o->comm);
    R.world = ct_comm_size(o->comm);
    if (R.rank != 0) R.out = NULL; /* rank 0 alone shows the run */
    R.task = o->task;
    if (!R.task) s = task_for(ctx, r, &R.task);
    if (s == CT_OK) s = ct_dp_setup(ctx, R.comm, R.task, r, &R.local);
    if (s == CT_OK) s = ct_zero_check(ctx, r, R.task, R.world);
    if (s == CT_OK && r->deterministic) { /* the plan is built for one chunk; this rank reads K / N of them */
        R.local.batch_size = r->batch_size / r->deterministic_chunks;
        s = R.task->chunk(R.task, r->deterministic_chunks / R.world);
    }
    if (s == CT_OK) s = setup(&R, res);
    if (s == CT_OK) s = run_loop(&R, res);
    if (R.mx) ct_metrics_close(R.mx);
    if (R.prof) ct_plan_set_profiler(R.plan, NULL);
    ct_dp_buckets_free(R.plan, R.bk);
    if (R.bk && r->sync_batchnorm) ct_context_set_batch_sum(ctx, NULL, NULL);
    ct_profiler_free(R.prof);
    free(R.best);
    free(R.st);
    ct_schedule_free(R.sched);
    ct_scaler_free(R.scaler);
    ct_zero_free(R.zero);
    ct_optimizer_free(R.opt);
    ct_plan_free(R.plan);
    if (!o->task) ct_task_free(R.task);
    return s;
}
