/* ctrain/schedule.h - learning-rate schedules, the batch-size scaling rule
 * and early stopping.
 *
 * Step semantics (same as PyTorch 1.13): ct_schedule_lr(s, t) is the learning
 * rate to use for optimizer step t (0-based), i.e. what
 * optimizer.param_groups[0]["lr"] holds when the (t+1)-th optimizer.step() is
 * called in a loop that calls scheduler.step() after every optimizer step.
 * Values are computed in double from closed forms and match PyTorch within
 * 1e-6 relative (tests/test_schedule.c against tests/golden/schedules.txt).
 *
 * Warmup composes with every decay kind except ONE_CYCLE and PLATEAU, like
 * SequentialLR([LinearLR(start_factor, total_iters=warmup_iters), decay],
 * milestones=[warmup_steps]):
 *   t <  warmup_steps: base_lr * (f + (1 - f) * min(t, I) / I)
 *                      (f = warmup_start_factor, I = warmup_iters, where
 *                      warmup_iters < 0 means warmup_steps; I = 0 gives 1)
 *   t >= warmup_steps: decay(t - warmup_steps)  (the decay starts afresh)
 * f = 0 (the default, the same as a recipe's warmup_start_factor 0) is the
 * ramp base_lr * (t + 1) / warmup_steps that reaches base_lr on the last
 * warmup step (f = 1/warmup_steps, I = warmup_steps - 1).
 *
 * INV_SQRT is not in PyTorch; this is the fairseq / T5 definition on the
 * GLOBAL step t (not shifted by the warmup):
 *   lr(t) = base_lr * sqrt(T) / sqrt(max(t, T)),  T = rsqrt_timescale
 *   (rsqrt_timescale 0 means warmup_steps), so with warmup_steps = T it is the
 * usual "linear warmup, then 1/sqrt(step)" curve, continuous at t = T.
 *
 * PLATEAU is ReduceLROnPlateau: ct_schedule_lr returns the current lr (the
 * step is ignored); ct_schedule_observe(s, metric) is scheduler.step(metric),
 * called once per epoch. ct_schedule_get_state/set_state save and restore
 * everything that changes, so a resumed run continues with the same values. */
#ifndef CTRAIN_SCHEDULE_H
#define CTRAIN_SCHEDULE_H

#include <stdint.h>
#include "context.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_schedule_kind {
    CT_SCHED_CONSTANT = 0,
    CT_SCHED_STEP,          /* StepLR(step_size, gamma)                              */
    CT_SCHED_MULTISTEP,     /* MultiStepLR(milestones, gamma)                        */
    CT_SCHED_EXPONENTIAL,   /* ExponentialLR(gamma)                                  */
    CT_SCHED_COSINE,        /* CosineAnnealingLR(T_max, eta_min = min_lr)            */
    CT_SCHED_COSINE_RESTARTS, /* CosineAnnealingWarmRestarts(T_0, T_mult, eta_min)   */
    CT_SCHED_LINEAR,        /* LinearLR(start_factor, end_factor, total_iters)       */
    CT_SCHED_POLYNOMIAL,    /* PolynomialLR(total_iters, power)                      */
    CT_SCHED_ONE_CYCLE,     /* OneCycleLR(max_lr, total_steps, pct_start, ...)       */
    CT_SCHED_INV_SQRT,      /* base * sqrt(T)/sqrt(max(t, T)), see above             */
    CT_SCHED_PLATEAU,       /* ReduceLROnPlateau                                     */
    CT_SCHED_COUNT
} ct_schedule_kind;

#define CT_SCHED_MAX_MILESTONES 16

typedef struct ct_schedule_opts {
    ct_schedule_kind kind;
    double base_lr;              /* the optimizer's lr (ONE_CYCLE: ignored)         */
    /* warmup (not with ONE_CYCLE / PLATEAU) */
    int64_t warmup_steps;        /* 0: none                                         */
    double warmup_start_factor;  /* in [0, 1]; 0 (default, as in a recipe): the ramp
                                    base_lr * (t + 1) / warmup_steps that reaches
                                    base_lr on the last warmup step (warmup_iters
                                    is then ignored); f > 0: LinearLR(f, I)        */
    int64_t warmup_iters;        /* LinearLR total_iters; < 0: warmup_steps         */
    /* STEP / MULTISTEP / EXPONENTIAL */
    int64_t step_size;
    double gamma;                /* default 0.1                                     */
    int n_milestones;            /* increasing                                      */
    int64_t milestones[CT_SCHED_MAX_MILESTONES];
    /* COSINE / COSINE_RESTARTS: eta_min = min_lr; PLATEAU: lower bound */
    int64_t t_max;
    double min_lr;
    int64_t t_0;
    int64_t t_mult;              /* >= 1, default 1                                 */
    /* LINEAR / POLYNOMIAL */
    double start_factor;         /* default 1/3                                     */
    double end_factor;           /* default 1                                       */
    int64_t total_iters;         /* default 5                                       */
    double power;                /* default 1                                       */
    /* ONE_CYCLE (three_phase = false) */
    double max_lr;
    int64_t total_steps;
    double pct_start;            /* default 0.3                                     */
    int anneal_linear;           /* 0: cos (default), 1: linear                     */
    double div_factor;           /* default 25                                      */
    double final_div_factor;     /* default 1e4                                     */
    /* INV_SQRT */
    int64_t rsqrt_timescale;     /* 0: warmup_steps                                 */
    /* PLATEAU */
    int mode_max;                /* 0: "min" (default), 1: "max"                    */
    double factor;               /* default 0.1, < 1                                */
    int64_t patience;            /* default 10                                      */
    double threshold;            /* default 1e-4                                    */
    int threshold_abs;           /* 0: "rel" (default), 1: "abs"                    */
    int64_t cooldown;            /* default 0                                       */
    double eps;                  /* default 1e-8                                    */
    /* COSINE past t_max: 0 (default) the closed form, which rises back to base_lr
     * at 2 t_max and cycles with period 2 t_max (PyTorch's CosineAnnealingLR does
     * the same); 1 holds min_lr */
    int cosine_hold;
} ct_schedule_opts;

typedef struct ct_schedule ct_schedule;

/* PLATEAU's mutable state (the step-indexed kinds have none). */
typedef struct ct_schedule_state {
    double lr;
    double best;
    int64_t num_bad_epochs;
    int64_t cooldown_counter;
    int64_t last_epoch;
} ct_schedule_state;

/* PyTorch's defaults for every field, for `kind` with base_lr. */
void ct_schedule_opts_default(ct_schedule_opts *o, ct_schedule_kind kind, double base_lr);
/* "constant", "step", "multistep", "exponential", "cosine", "cosine_restarts",
 * "linear", "polynomial", "one_cycle", "inverse_sqrt", "plateau". */
const char *ct_schedule_kind_name(ct_schedule_kind k);
/* Parses a name above; returns CT_E_CONFIG naming the valid ones. */
ct_status ct_schedule_kind_parse(ct_context *ctx, const char *name, ct_schedule_kind *out);

/* Validates opts (errors name the field) and creates the schedule. */
ct_status ct_schedule_create(ct_context *ctx, const ct_schedule_opts *opts, ct_schedule **out);
void ct_schedule_free(ct_schedule *s); /* accepts NULL */
/* The lr for optimizer step `step` (0-based; negative counts as 0). */
float ct_schedule_lr(const ct_schedule *s, int64_t step);
/* Same in double precision. */
double ct_schedule_lr_f64(const ct_schedule *s, int64_t step);
/* PLATEAU: scheduler.step(metric). Returns 1 when the lr was reduced. Other
 * kinds: no-op, returns 0. A non-finite metric counts as not better. */
int ct_schedule_observe(ct_schedule *s, double metric);
void ct_schedule_get_state(const ct_schedule *s, ct_schedule_state *st);
ct_status ct_schedule_set_state(ct_schedule *s, const ct_schedule_state *st);

/* Batch-size scaling: base_lr * batch / base_batch (linear rule, Goyal et
 * al.), or base_lr * sqrt(batch / base_batch) when sqrt_rule is nonzero.
 * Returns base_lr unchanged for non-positive batch sizes. */
double ct_lr_scale_for_batch(double base_lr, int64_t batch, int64_t base_batch, int sqrt_rule);

/* Early stopping (Keras semantics). improved: metric < best - min_delta
 * (mode min) or metric > best + min_delta (mode max); the first metric always
 * improves. On improvement wait = 0, else wait += 1; stop once wait >= patience.
 * ct_early_stop_update sets *is_best when this metric is the new best (the
 * caller keeps a copy of the weights then, and restores it on stop) and
 * returns 1 when training should stop. */
typedef struct ct_early_stop {
    int64_t patience;
    double min_delta;  /* >= 0 */
    int mode_max;
    /* state (copy the struct to save/restore it) */
    double best;
    int64_t best_epoch; /* index of the update that gave best; -1: none */
    int64_t wait;
    int64_t epoch;      /* updates so far */
    int stopped;
} ct_early_stop;

ct_status ct_early_stop_init(ct_context *ctx, ct_early_stop *e, int64_t patience, double min_delta, int mode_max);
int ct_early_stop_update(ct_early_stop *e, double metric, int *is_best);

#ifdef __cplusplus
}
#endif
#endif
