/* ctrain/metrics.h - a JSON-lines metrics log of a training run (one JSON
 * object per line; docs/report.md lists the fields). `ctrain train --metrics
 * FILE` (recipe key metrics_file) writes one, `ctrain report` draws it as a
 * self-contained HTML page. Writing a line allocates nothing beyond the
 * FILE buffer; lines are flushed every few seconds and at every evaluation,
 * so a crashed run leaves a readable log. */
#ifndef CTRAIN_METRICS_H
#define CTRAIN_METRICS_H

#include <stdint.h>

#include "amp.h"
#include "context.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_metrics ct_metrics;

/* One optimizer step. grad_norm, loss_scale, mfu, peak_mib and comm_share
 * < 0 (or NaN) are left out of the line (not measured). */
typedef struct ct_metrics_step {
    int64_t step;          /* optimizer steps done, 1-based                 */
    int epoch;             /* 1-based                                       */
    double loss;           /* mean training loss of this step's batch(es)   */
    double acc;            /* training accuracy of this step's batch(es)    */
    double lr;             /* learning rate used by this step               */
    double samples;        /* samples in this step (samples/s is derived)   */
    double grad_norm;      /* < 0: not measured                             */
    double loss_scale;     /* < 0: none                                     */
    double time_s;         /* seconds since the start of training           */
    double mfu;            /* model FLOPs / (step time x peak FLOP/s); < 0: none */
    double peak_mib;       /* the context allocator's peak so far; < 0: none */
    double comm_share;     /* share of the step blocked on gradient
                            * communication (0..1); < 0: none (one rank)  */
} ct_metrics_step;

/* Opens (append: appends to) the log and writes a "run" line holding
 * recipe_json (a JSON object, or NULL). */
ct_status ct_metrics_open(ct_context *ctx, const char *path, int append, const char *recipe_json,
                          ct_metrics **out);
/* Writes a "step" line: {"type":"step","step":..,"epoch":..,"loss":..,"acc":..,
 * "lr":..,"samples_per_s":..,["grad_norm":..,]["loss_scale":..,]["mfu":..,]
 * ["peak_mib":..,]["comm_share":..,]"time":..}. */
ct_status ct_metrics_log_step(ct_metrics *m, const ct_metrics_step *s);
/* Writes an "eval" line {"type":"eval","epoch":..,"step":..,"test_loss":..,
 * "test_acc":..,"time":..} and flushes. */
ct_status ct_metrics_log_eval(ct_metrics *m, int epoch, int64_t step, double test_loss, double test_acc,
                              double time_s);
/* Writes an "amp" line for one loss-scaler event (ct_scaler_last_events):
 * {"type":"amp","step":..,"event":"overflow"|"backoff"|"growth","scale":..
 * [,"first_nonfinite":"<tensor>"]}; step is 1-based like step lines
 * (e->step + 1), first_nonfinite only when the event names a tensor. */
ct_status ct_metrics_log_scaler_event(ct_metrics *m, const ct_scale_record *e);
/* Writes a "done" line with the run's totals and flushes. */
ct_status ct_metrics_log_done(ct_metrics *m, int64_t steps, double time_s, double test_loss, double test_acc,
                              double peak_mib);
/* Flushes and closes (NULL is fine); reports a write error that happened
 * since the last check. */
ct_status ct_metrics_close(ct_metrics *m);

#ifdef __cplusplus
}
#endif
#endif
