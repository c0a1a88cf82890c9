/* ctrain/amp.h - the loss scaler for mixed-precision training.
 *
 * Dynamic scaling as PyTorch's GradScaler (init_scale, growth_factor,
 * backoff_factor, growth_interval) plus DeepSpeed's hysteresis and
 * min/max clamps, and what neither has: a bounded history of every scale
 * event naming the first tensor that held inf/NaN, and a clear outcome when
 * the scale keeps hitting min_scale (an error with advice, or a stop flag)
 * instead of a silent collapse.
 *
 * Per step:  ct_plan_set_loss_scale(plan, ct_scaler_scale(s));
 *            forward; backward;
 *            ct_scaler_step(s, plan, opt, &skipped);        (unscale + inf/NaN
 *            check in one pass over the gradient arena; skip or step; update)
 *            ct_scaler_last_events(s, &ev, &n);             (this step's events,
 *            for ct_metrics_log_scaler_event)
 */
#ifndef CTRAIN_AMP_H
#define CTRAIN_AMP_H

#include "graph.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_scaler_floor {
    CT_SCALER_FLOOR_ERROR = 0, /* ct_scaler_step returns CT_E_NONFINITE with advice */
    CT_SCALER_FLOOR_STOP,      /* ct_scaler_should_stop() becomes 1; the caller ends the run */
} ct_scaler_floor;

typedef struct ct_scaler_opts {
    int dynamic;            /* 1: dynamic (default); 0: static scale init_scale        */
    float init_scale;       /* 65536                                                    */
    float growth_factor;    /* 2                                                        */
    float backoff_factor;   /* 0.5                                                      */
    int growth_interval;    /* clean steps before growing: 2000                         */
    int hysteresis;         /* consecutive overflows tolerated before backing off: 1    */
    float min_scale;        /* 1                                                        */
    float max_scale;        /* 2^24                                                     */
    int floor_patience;     /* overflows in a row at min_scale before floor_policy: 10  */
    ct_scaler_floor floor_policy;
} ct_scaler_opts;

void ct_scaler_opts_default(ct_scaler_opts *o);

/* The precision -> loss-scaling policy (a recipe's loss_scale.mode "auto"):
 * fp16 needs a dynamic scale (PyTorch's GradScaler), fp16-pure a static one
 * (1024, as the seeds), bf16 and fp32 none (BF16 has FP32's range). */
typedef enum ct_amp_scaling { CT_AMP_SCALING_NONE = 0, CT_AMP_SCALING_DYNAMIC, CT_AMP_SCALING_STATIC } ct_amp_scaling;
ct_amp_scaling ct_amp_default_scaling(ct_precision p);
/* "off", "dynamic", "static" */
const char *ct_amp_scaling_name(ct_amp_scaling s);

/* The loss-scale history (like PyTorch GradScaler's scale_history): every
 * overflow, backoff and growth, newest last. An overflowing step records
 * CT_SCALE_OVERFLOW, followed by CT_SCALE_BACKOFF when the scale was
 * lowered in the same update (not when hysteresis tolerated the overflow,
 * nor at min_scale, nor for a static scaler). */
typedef enum ct_scale_event {
    CT_SCALE_OVERFLOW = 1,  /* gradients held inf/NaN: the update was skipped, scale unchanged */
    CT_SCALE_BACKOFF,       /* the scale was multiplied by backoff_factor (after an overflow) */
    CT_SCALE_GROWTH,        /* growth_interval clean steps: scale multiplied by growth_factor  */
} ct_scale_event;

/* "overflow", "backoff", "growth" ("?" for other values). */
const char *ct_scale_event_name(ct_scale_event e);

typedef struct ct_scale_record {
    uint64_t step;          /* 0-based index of the ct_scaler_update that recorded it: the
                               optimizer step index when the scaler is updated once per
                               step from step 0 (as the CLI does); restored by set_state  */
    float scale;            /* the scale after the event                                */
    ct_scale_event event;
    int32_t param;          /* index (plan order) of the first parameter whose gradient
                               held inf/NaN; -1 for growth or when unknown               */
    char tensor[64];        /* its name ("" for growth or when unknown)                  */
} ct_scale_record;

/* Events kept: the ring drops the oldest beyond this many. */
#define CT_SCALER_HISTORY 256

/* Counts over the whole run. They stay exact when the ring drops old
 * events and are saved in checkpoints with the rest of the state. */
typedef struct ct_scaler_totals {
    uint64_t overflows;     /* steps whose gradients held inf/NaN (each update skipped)  */
    uint64_t backoffs;      /* times the scale was lowered                               */
    uint64_t growths;       /* times the scale was raised                                */
    uint64_t events;        /* events recorded; events - (events in the ring) were dropped */
} ct_scaler_totals;

/* Everything needed to resume the exact scale sequence and its history
 * (ct_scaler_get_state / ct_scaler_set_state; checkpoints store it). */
typedef struct ct_scaler_state {
    float scale;
    int32_t growth_tracker; /* clean steps since the last growth or overflow */
    int32_t hysteresis_left;
    int32_t min_hits;       /* overflows in a row at min_scale */
    uint64_t step;          /* ct_scaler_update calls so far */
    uint64_t skipped;       /* total skipped updates (= overflows) */
    uint64_t backoffs, growths, events; /* the other totals (ct_scaler_totals) */
    int32_t n_history;      /* events in history[] (<= CT_SCALER_HISTORY)    */
    ct_scale_record history[CT_SCALER_HISTORY]; /* oldest first                */
} ct_scaler_state;

typedef struct ct_scaler ct_scaler;

ct_status ct_scaler_create(ct_context *ctx, const ct_scaler_opts *opts, ct_scaler **out);
void ct_scaler_free(ct_scaler *s); /* accepts NULL */
float ct_scaler_scale(const ct_scaler *s);

/* One pass over the plan's gradient arena: multiplies by 1/scale and
 * detects inf/NaN. *found is 1 when any gradient is not finite; *param is
 * the index of the first such parameter (arena order) or -1. */
ct_status ct_scaler_unscale(ct_scaler *s, ct_plan *plan, int *found, int *param);
/* The same over the gradient arena's [begin, end) only (ZeRO: this rank's segment; the rest is another
 * rank's and may not be resident). [begin, end) outside the arena -> CT_E_INVALID_ARG. */
ct_status ct_scaler_unscale_range(ct_scaler *s, ct_plan *plan, size_t begin, size_t end, int *found, int *param);
/* Updates the scale for a step that had (found != 0) or had not an
 * overflow, and records the event with the name of parameter `param`. */
ct_status ct_scaler_update(ct_scaler *s, ct_plan *plan, int found, int param);
/* unscale; if finite, ct_optimizer_step(opt) (with the optimizer's current
 * lr, see ct_optimizer_set_lr), else skip it (weights and optimizer state
 * untouched); update. *skipped tells which happened. */
ct_status ct_scaler_step(ct_scaler *s, ct_plan *plan, ct_optimizer *opt, int *skipped);

int ct_scaler_should_stop(const ct_scaler *s);
/* The history, oldest first: *events points to *n records (at most
 * CT_SCALER_HISTORY: the most recent ones), valid until the next
 * ct_scaler_update, ct_scaler_set_state or ct_scaler_free. */
void ct_scaler_history(const ct_scaler *s, const ct_scale_record **events, int *n);
/* The events the most recent ct_scaler_update recorded (n 0, 1, or 2:
 * overflow then backoff), e.g. to log each with ct_metrics_log_scaler_event.
 * n is 0 before the first update and after ct_scaler_set_state. */
void ct_scaler_last_events(const ct_scaler *s, const ct_scale_record **events, int *n);
/* Exact totals over the run (also across checkpoint resume). */
void ct_scaler_get_totals(const ct_scaler *s, ct_scaler_totals *out);
/* The state includes the history and totals (about 23 KiB). set_state
 * returns CT_E_CORRUPT, changing nothing, for an inconsistent state. */
void ct_scaler_get_state(const ct_scaler *s, ct_scaler_state *out);
ct_status ct_scaler_set_state(ct_scaler *s, const ct_scaler_state *in);

#ifdef __cplusplus
}
#endif
#endif
