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

typedef enum ct_scale_event {
    CT_SCALE_SKIP = 1,      /* overflow tolerated by hysteresis: update skipped, scale kept */
    CT_SCALE_BACKOFF,       /* overflow: update skipped, scale multiplied by backoff_factor */
    CT_SCALE_AT_MIN,        /* overflow at min_scale: update skipped, scale cannot go lower */
    CT_SCALE_GROWTH,        /* growth_interval clean steps: scale multiplied by growth_factor */
} ct_scale_event;

typedef struct ct_scale_record {
    uint64_t step;          /* optimizer step index (0-based) when it happened          */
    float scale;            /* the scale after the event                                */
    ct_scale_event event;
    char tensor[64];        /* first parameter whose gradient held inf/NaN ("" for growth) */
} ct_scale_record;

/* Everything needed to resume the exact scale sequence. */
typedef struct ct_scaler_state {
    float scale;
    int32_t growth_tracker; /* clean steps since the last growth or overflow */
    int32_t hysteresis_left;
    int32_t min_hits;       /* overflows in a row at min_scale */
    uint64_t step;
    uint64_t skipped;       /* total skipped updates */
} ct_scaler_state;

typedef struct ct_scaler ct_scaler;

ct_status ct_scaler_create(ct_context *ctx, const ct_scaler_opts *opts, ct_scaler **out);
void ct_scaler_free(ct_scaler *s); /* accepts NULL */
float ct_scaler_scale(const ct_scaler *s);

/* One pass over the plan's gradient arena: multiplies by 1/scale and
 * detects inf/NaN. *found is 1 when any gradient is not finite; *param is
 * the index of the first such parameter (arena order) or -1. */
ct_status ct_scaler_unscale(ct_scaler *s, ct_plan *plan, int *found, int *param);
/* Updates the scale for a step that had (found != 0) or had not an
 * overflow, and records the event with the name of parameter `param`. */
ct_status ct_scaler_update(ct_scaler *s, ct_plan *plan, int found, int param);
/* unscale; if finite, ct_optimizer_step(opt) (with the optimizer's current
 * lr, see ct_optimizer_set_lr), else skip it (weights and optimizer state
 * untouched); update. *skipped tells which happened. */
ct_status ct_scaler_step(ct_scaler *s, ct_plan *plan, ct_optimizer *opt, int *skipped);

int ct_scaler_should_stop(const ct_scaler *s);
/* The most recent events, oldest first (a ring of the last 1024). */
int ct_scaler_history(const ct_scaler *s, const ct_scale_record **first, int *n_first, const ct_scale_record **second,
                      int *n_second);
void ct_scaler_get_state(const ct_scaler *s, ct_scaler_state *out);
ct_status ct_scaler_set_state(ct_scaler *s, const ct_scaler_state *in);

#ifdef __cplusplus
}
#endif
#endif
