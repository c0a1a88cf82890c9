/* ctrain/profile.h - a step profiler that writes Chrome trace JSON (open it
 * in chrome://tracing or https://ui.perfetto.dev), and the "doctor" that
 * reads such a trace back and gives a verdict per KPI.
 *
 *   ct_profiler *prof;
 *   ct_profiler_opts po; ct_profiler_opts_default(&po);
 *   po.skip_steps = 1; po.warmup_steps = 2; po.record_steps = 5;
 *   ct_profiler_create(ctx, &po, &prof);
 *   ct_plan_set_profiler(plan, prof);        // per-op events, forward + backward
 *   for (...) {
 *       double t0 = ct_profiler_now_us();  load_batch();
 *       ct_profiler_event(prof, "batch", "data", t0, ct_profiler_now_us(), NULL);
 *       ct_plan_forward(plan, 1); ct_plan_backward(plan); ...
 *       ct_profiler_step(prof);              // ends a step
 *   }
 *   ct_profiler_set_memory(prof, &plan_stats, optimizer_state_bytes, budget);
 *   ct_profiler_write(prof, "run/trace.json");
 *
 * Events are "X" (complete) events, ts/dur in microseconds. Categories:
 * "op" (one per executed node; args: op, node, phase forward|backward, dtype,
 * shape, flops, bytes, kernel), "step" (one per recorded step, written by
 * ct_profiler_step), "data", "optimizer", "eval", "amp" (the CLI's loss-scaler
 * events), "comm" (the training thread blocked in communication: the
 * trainer's wait for the gradients; the doctor's communication share, on
 * track 2) and "comm_bucket" (each gradient bucket's allreduce from start
 * to completion, overlapping backward, on track 3; not counted in the
 * share). Pipeline parallelism (src/train/pipeline.c) adds "pipeline" on
 * track 4 ("pipeline micro-batches": "forward mb <m> (piece <k>)" and
 * "backward mb <m> (piece <k>)", each micro-batch's compute, and once per
 * step "pipeline schedule" spanning the whole schedule, args {"bubble": the
 * trainer's measure so far, "ideal": the schedule's}) and "pipeline_comm" on
 * track 5 ("pipeline sends and receives": "receive activations" / "receive
 * gradients", the blocking waits for the neighbouring stages, and 1 us
 * markers "send activations" / "send gradients" when a nonblocking send
 * starts); the doctor's pipeline bubble and pipeline communication share
 * come from them. The event buffer is allocated once at create (opts.max_events);
 * when it is full further events are dropped and counted (metadata
 * "dropped_events"): recording never allocates. */
#ifndef CTRAIN_PROFILE_H
#define CTRAIN_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "context.h"
#include "graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_profiler ct_profiler;

typedef struct ct_profiler_opts {
    int skip_steps;      /* steps ignored first (default 1)                      */
    int warmup_steps;    /* then steps run but not recorded (default 2)          */
    int record_steps;    /* then steps recorded (default 5; 0: all the rest)     */
    size_t max_events;   /* event buffer capacity (default 65536)                */
    double peak_flops;   /* FLOP/s for MFU; 0: computed from the ISA in use      */
} ct_profiler_opts;

void ct_profiler_opts_default(ct_profiler_opts *o);
ct_status ct_profiler_create(ct_context *ctx, const ct_profiler_opts *opts, ct_profiler **out);
/* Accepts NULL. Detach it first (ct_plan_set_profiler(plan, NULL)) or free the plan first. */
void ct_profiler_free(ct_profiler *p);

/* Attaches (NULL: detaches) a profiler: every executed node of forward and
 * backward becomes an "op" event while the profiler records. Allocates a
 * per-node cache once; node information is filled from the first run. One
 * plan per profiler. It attaches through the plan's node hook
 * (ct_plan_set_node_hook), replacing any other hook. */
ct_status ct_plan_set_profiler(ct_plan *plan, ct_profiler *p);

/* Monotonic clock in microseconds (the trace's time base). */
double ct_profiler_now_us(void);
/* 1 while the current step is in the record window. */
int ct_profiler_recording(const ct_profiler *p);
/* Ends the current step (records its "step" event when recording). */
void ct_profiler_step(ct_profiler *p);
/* 0 pauses op recording (e.g. during evaluation), 1 resumes it and restarts
 * the current step's clock (the paused time is not step time). */
void ct_profiler_set_ops_enabled(ct_profiler *p, int on);
/* A caller event [t0, t1] (ct_profiler_now_us); args_json is a JSON object
 * text ("{...}", at most 127 chars) or NULL. Ignored outside the record window. */
void ct_profiler_event(ct_profiler *p, const char *name, const char *cat, double t0_us, double t1_us,
                       const char *args_json);
/* Memory by category for the metadata; optimizer_state_bytes and budget may be 0 (unknown / none). */
void ct_profiler_set_memory(ct_profiler *p, const ct_plan_stats *stats, size_t optimizer_state_bytes,
                            size_t budget_bytes);
size_t ct_profiler_num_events(const ct_profiler *p);
uint64_t ct_profiler_dropped(const ct_profiler *p);
/* Peak FLOP/s assumed for MFU and how it was obtained (a sentence). */
double ct_profiler_peak_flops(const ct_profiler *p, const char **source);
/* Writes the trace (tmp file + rename). CT_E_IO names the path on failure. */
ct_status ct_profiler_write(ct_profiler *p, const char *path);

/* ---- doctor ---------------------------------------------------------------- */
typedef enum ct_verdict { CT_VERDICT_OK = 0, CT_VERDICT_WARN, CT_VERDICT_UNKNOWN } ct_verdict;

/* The loss-scale story of the recorded steps, from the trace's "amp"
 * events. An event's args.event ("overflow", "backoff" or "growth", as
 * ct_scale_event_name) says what it is; without it the name decides: one
 * starting with "overflow" is an overflow, and also a backoff when its
 * args.scale is below the scale of the amp event before it (so the first
 * one in the trace is not known to be a backoff); one containing "grow" is
 * a growth, "backoff" a backoff. */
typedef struct ct_doctor_amp {
    int64_t events;             /* amp events read                                  */
    int64_t overflows;          /* updates skipped: gradients held inf/NaN          */
    int64_t backoffs, growths;  /* scale lowered / raised                           */
    double final_scale;         /* args.scale of the last amp event; -1 unknown     */
    char first_nonfinite[64];   /* args.first_nonfinite of the first overflow naming one */
} ct_doctor_amp;

typedef struct ct_doctor_report {
    int steps;                 /* "step" events                                   */
    int64_t events, dropped;
    double step_time_us;       /* sum over steps                                  */
    double flops;              /* sum of op flops within the steps                */
    double achieved_flops;     /* FLOP/s                                          */
    double peak_flops;         /* 0: unknown                                      */
    double utilization;        /* achieved / peak (MFU), -1 unknown               */
    double memory_bytes, budget_bytes; /* budget 0: none set                      */
    double memory_share;       /* memory / budget, -1 unknown                     */
    double comm_share, data_share;
    ct_verdict v_compute, v_memory, v_comm, v_data;
    ct_doctor_amp amp;
    ct_verdict v_amp;          /* unknown: no amp events (no loss scaling, or none recorded) */
    /* Pipeline parallelism (a trace of a pipeline rank: "pipeline schedule" events). The bubble is the
     * idle share of the schedules: 1 - (the "pipeline" forward / backward events' time inside them) /
     * their time, over all recorded schedules; the ideal is the schedule's own (args.ideal:
     * (P-1)/(M+P-1) for gpipe and 1f1b, less for interleaved). -1: unknown. */
    int pipeline_steps;        /* "pipeline schedule" events; 0: not a pipeline trace              */
    double pipeline_time_us, pipeline_busy_us, pipeline_recv_us; /* schedules, compute, receives inside */
    double pipeline_bubble;    /* measured, from the events                                        */
    double pipeline_bubble_args; /* the last schedule's args.bubble: the trainer's running measure  */
    double pipeline_ideal;     /* the last schedule's args.ideal                                   */
    double pipeline_comm_share;/* "pipeline_comm" receives inside the schedules / step time         */
    ct_verdict v_pipeline;     /* ok: bubble <= ideal + 10 points; unknown: no schedule events      */
} ct_doctor_report;

/* Thresholds: utilization >= 75%, memory 70-90% of the budget,
 * communication <= 20%, data stall (host transfer) < 5% of step time,
 * loss-scale overflows in at most 5% of the recorded steps and a final
 * scale above 1. */
ct_status ct_doctor_analyze_json(ct_context *ctx, const char *json, size_t len, ct_doctor_report *out);
/* CT_E_IO (cannot read), CT_E_CORRUPT (not JSON / truncated), CT_E_CONFIG (no traceEvents). */
ct_status ct_doctor_analyze_file(ct_context *ctx, const char *path, ct_doctor_report *out);
/* One line per KPI: verdict, measured value, advice. */
void ct_doctor_print(const ct_doctor_report *r, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
