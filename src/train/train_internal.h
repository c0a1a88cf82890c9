/* src/train/train_internal.h - the built-in tasks (task_image.c, task_text.c),
 * the trainer's run and its replaceable step (trainer.c, step.c, progress.c)
 * and the data parallel parts (data_parallel.c, dp_buckets.c, zero.c). */
#ifndef CT_TRAIN_INTERNAL_H
#define CT_TRAIN_INTERNAL_H
#include <stdio.h>

#include "ctrain/ctrain.h"
#include "ctrain/train.h"
#include "ctrain/dist.h"
#include "ctrain/metrics.h"
#include "ctrain/profile.h"

ct_status ct_task_image_create(ct_context *ctx, const ct_recipe *r, ct_task **out);
ct_status ct_task_text_create(ct_context *ctx, const ct_recipe *r, ct_task **out);
/* The image task's test-split evaluation (as ct_task.evaluate) that also adds every row to confusion (may be NULL):
 * (W, W) counts, row = label, column = argmax, W = ct_task_image_logits_width; after bind. CT_E_INVALID_ARG for
 * another task. */
ct_status ct_task_image_evaluate(ct_task *t, ct_task_eval *out, int64_t *confusion);
int64_t ct_task_image_logits_width(ct_task *t); /* the bound plan's logits width; 0 before bind / another task */
/* Class k's name in an image folder's test split; NULL for IDX / CIFAR data or another task. */
const char *ct_task_image_class_name(ct_task *t, int k);
/* The evaluation transform of recipe r's image dataset (train 0): imagefolder / CIFAR from the recipe's image
 * keys (CT_E_CONFIG for bad ones); MNIST / Fashion-MNIST: 28 x 28, 1 channel, the dataset's mean and std (the
 * IDX loader normalizes with a table, ct_dataset_load_idx, not with ct_image_transform). */
ct_status ct_task_image_opts(ct_context *ctx, const ct_recipe *r, ct_image_opts *out);

/* Data parallel over c (one rank: no-ops). Before the plan: checks the task
 * and the batch, gives the task its share (ct_task.shard) and *local = r
 * with batch_size / world; c's errors go to ctx from then on. */
ct_status ct_dp_setup(ct_context *ctx, ct_comm *c, ct_task *t, const ct_recipe *r, ct_recipe *local);
/* The ranks run the same recipe and built the same plan (CT_E_DIST naming the ranks). */
ct_status ct_dp_agree(ct_context *ctx, ct_comm *c, const ct_recipe *r, ct_plan *p, ct_task *t);
/* The recipe part of it alone (pipeline stages build different plans). */
ct_status ct_dp_agree_recipe(ct_context *ctx, ct_comm *c, const ct_recipe *r);

/* Rank 0's parameters (unless buffers_only) and buffers to every rank. */
ct_status ct_dp_broadcast_state(ct_comm *c, ct_plan *p, int buffers_only);
/* The parameters and buffers are the same bits on every rank ("when": "at step 20"). */
ct_status ct_dp_same_weights(ct_context *ctx, ct_comm *c, ct_plan *p, const char *when);
/* The gradient arena summed over the ranks (one allreduce; the loss
 * gradient of each rank was scaled by 1 / world: the sum is the mean). */
ct_status ct_dp_reduce_grads(ct_comm *c, ct_plan *p);
/* A step's summed micro-batch mean losses (-> the ranks' mean), correct predictions and rows (-> sums). */
ct_status ct_dp_reduce_step(ct_comm *c, double *loss, double *correct, double *rows, double *units);
/* The ranks' parts of an evaluation, weighted by their counts (rows summed; t->eval_detail again). */
ct_status ct_dp_reduce_eval(ct_comm *c, ct_task *t, ct_task_eval *ev);
/* After rank 0 wrote a checkpoint with status s (the others pass CT_OK):
 * every rank waits for it and returns rank 0's status. */
ct_status ct_dp_after_save(ct_context *ctx, ct_comm *c, ct_status s);

/* ZeRO (zero.c; docs/distributed.md). ct_zero_create gives NULL for zero_stage 0. */
typedef struct ct_zero ct_zero;
ct_status ct_zero_create(ct_context *ctx, ct_comm *c, const ct_recipe *r, ct_plan *p, ct_zero **out);
/* The run's optimizer: with ZeRO the state of this rank's shard only, unless `whole` (a resume loads the whole
 * state first; ct_zero_shard then cuts it). LAMB gets an allreduce over the ranks as its reduce function
 * (ct_optimizer_set_reduce). z may be NULL (a whole optimizer). */
ct_status ct_zero_optimizer_create(ct_zero *z, ct_plan *p, const ct_optim_opts *o, int whole, ct_optimizer **out);
void ct_zero_free(ct_zero *z);
int ct_zero_stage(const ct_zero *z);         /* 0 for NULL */
/* The optimizer's state becomes this rank's shard (after a resume has loaded the whole state). */
ct_status ct_zero_shard(ct_zero *z);
/* Reduce-scatter of the gradients; the arena outside this rank's segment zeroed (stage 2: released). */
ct_status ct_zero_reduce_grads(ct_zero *z);
/* ZeRO (stage > 0): this rank's segment [*b, *e) of the gradient arena; else *b, *e untouched. */
void ct_zero_segment(const ct_zero *z, size_t *b, size_t *e);
/* Every rank's updated parameters to every rank. */
ct_status ct_zero_allgather_params(ct_zero *z);
/* whole 1: rank 0's optimizer gathers the whole state (for a checkpoint); whole 0: a shard again. */
ct_status ct_zero_gather_state(ct_zero *z, int whole);
/* ZeRO's gradient buckets (shard mode: each bucket reduce-scattered as soon as its gradients are final,
 * overlapped with backward; stage 1 zeroes the rest of its range, stages 2 and 3 release it at once; stage 3:
 * progressed from the executor's node hook, no thread); *out NULL on one rank. */
ct_status ct_zero_buckets_create(ct_zero *z, const ct_recipe *r, ct_buckets **out);
/* Stage >= 2 with accumulation: every micro-batch's gradients are reduce-scattered on their own (into a
 * shard accumulator), so the step arms the buckets for each; ct_zero_set_last_micro says which one is last. */
int ct_zero_micro_reduces(const ct_zero *z);
void ct_zero_set_last_micro(ct_zero *z, int last);
/* A zero gradient arena (stage >= 2: released, not written) and accumulator. */
ct_status ct_zero_clear_grads(ct_zero *z);
/* Stage 3's parameter gathers (zero3.c), NULL below stage 3. */
typedef struct ct_zero3 ct_zero3;
ct_zero3 *ct_zero_z3(const ct_zero *z);
typedef struct {
    int units;                 /* the parameters' units (contiguous ranges gathered together) */
    size_t largest_unit_bytes;
    int64_t gathers, releases; /* so far                                                        */
    double gathered_bytes;
    double wait_s;             /* the training thread blocked waiting for gathers               */
    int64_t replays;           /* evaluation forwards some rank replayed (gathers only: its batches were done) */
    size_t copies_bytes;       /* mixed precision: the 16-bit weight copies gathered once per step (0: none) */
    double peak_bytes;         /* the most parameter bytes outside the segment gathered at once in a pass
                                  (from the schedule of forward and backward: units in use and the prefetched one) */
} ct_zero3_stats;
/* offs (world + 1) and counts (world): the ranks' segments, ct_zero's arrays (they outlive z). */
ct_status ct_zero3_create(ct_context *ctx, ct_comm *c, const ct_recipe *r, ct_plan *p, const size_t *offs,
                          const size_t *counts, ct_zero3 **out);
void ct_zero3_free(ct_zero3 *z);
/* The gradient buckets to test before every node (NULL: none). */
void ct_zero3_set_buckets(ct_zero3 *z, ct_buckets *bk);
/* whole 1: every parameter gathered (collective; a checkpoint, the best weights); whole 0: all but this rank's
 * segment released again. z may be NULL (a no-op). */
ct_status ct_zero3_whole(ct_zero3 *z, int whole);
/* Around the task's evaluation (begin 1 before, 0 after, on every rank; z may be NULL): the ranks evaluate
 * different numbers of batches, so each eval forward votes and a rank that is done replays the others'
 * forwards' gathers until none evaluates (collective). */
ct_status ct_zero3_eval(ct_zero3 *z, int begin);
void ct_zero3_get_stats(const ct_zero3 *z, ct_zero3_stats *out);
/* Bytes per rank (z NULL: all 0): the optimizer state; the gradients resident between steps (stage 2, 3:
 * the segment) and at their peak in backward (stage 2, 3: the segment, the two largest buckets in flight and
 * with accumulation the shard's accumulator); the parameters between uses and at their peak (stage 3: the
 * segment, and the segment plus two units, one in use and one prefetched). bk: the ZeRO buckets (NULL: none). */
typedef struct {
    double state, grads_between, grads_peak, params, params_peak;
} ct_zero_mem;
void ct_zero_memory(const ct_zero *z, const ct_buckets *bk, size_t state_floats, ct_zero_mem *m);
/* The deterministic mode (deterministic.c; docs/distributed.md): ct_det_create gives NULL without
 * deterministic: true. */
typedef struct ct_det ct_det;
/* The recipe's deterministic keys against the world and the task. */
ct_status ct_det_check(ct_context *ctx, const ct_recipe *r, ct_task *t, int world);
ct_status ct_det_create(ct_context *ctx, ct_comm *c, const ct_recipe *r, ct_plan *p, ct_det **out);
void ct_det_free(ct_det *d);
/* This rank's micro-batches per step: K / world chunks x accumulate_steps A (micro-batch m: global batch
 * m % A of the step, chunk rank x K / world + m / A of it); 1 for NULL */
int ct_det_local_chunks(const ct_det *d);
/* After micro-batch `micro`'s backward (its mean loss), into the pairwise tree. */
ct_status ct_det_push(ct_det *d, int micro, double loss);
/* After the last micro-batch: the tree over the ranks; *loss the sum of the step's A global batches' mean
 * losses (A = 1: the global batch's mean loss). */
ct_status ct_det_reduce(ct_det *d, double *loss);
/* This rank's chunk losses (pushed so far), for a pipeline's last stage to share. */
double *ct_det_losses(ct_det *d);
/* Gradient buckets (dp_buckets.c): *out NULL on one rank; else planned from
 * the plan's layout and backward order with the recipe's bucket keys (ZeRO: shard_offs, done: see
 * ct_bucket_opts; NULL for data parallel), and
 * fed by the plan's grad-ready hook (ct_buckets_begin arms them before the
 * last micro-batch's backward, ct_buckets_finish reduces). */
ct_status ct_dp_buckets_create(ct_context *ctx, ct_comm *c, ct_plan *p, const ct_recipe *r, const size_t *shard_offs,
                               void (*done)(void *user, size_t off, size_t n), void *done_user, ct_buckets **out);
/* Detaches the hook from p (may be NULL) and frees b (may be NULL). */
void ct_dp_buckets_free(ct_plan *p, ct_buckets *b);
/* "3 buckets (MiB: 0.04 3.00 4.00), overlapped with backward by ..." for the header. */
void ct_dp_buckets_describe(const ct_buckets *b, const ct_recipe *r, int n_ready, char *buf, size_t len);
/* The last reduction's buckets as "comm_bucket" events (their own track). */
void ct_dp_buckets_trace(const ct_buckets *b, ct_profiler *prof);
/* Compression residuals in checkpoints: every rank calls gather (an allgather; *blob NULL without
 * compression), rank 0 writes *blob as the step directory's grad_residual.bin (freed by the caller); on
 * resume each rank loads its own part from step_dir, or starts from zero with a note (saved without
 * compression, or at another world size). */
ct_status ct_dp_residual_gather(ct_context *ctx, ct_comm *c, ct_buckets *b, void **blob, size_t *size);
ct_status ct_dp_residual_load(ct_context *ctx, ct_comm *c, ct_buckets *b, const char *step_dir, char *note,
                              size_t note_len);

/* ---- the run and its step --------------------------------------------------------------------
 *
 * The trainer (trainer.c) is a loop over named parts:
 *
 *   run:    setup -> start_run (resume or initial weights) -> begin_output (header, metrics, profiler)
 *           -> epochs -> finish_run (restore best, last checkpoint, summary, health)
 *   epoch:  begin_epoch -> { train_step -> log_step -> maybe_checkpoint -> show progress } until its
 *           end or the data runs out -> evaluate_epoch -> end_epoch (plateau, early stopping)
 *
 * THE SEAM. train_step calls R->train_step (a ct_step_fn chosen at setup: ct_step_default) once per
 * optimizer step. A pipeline schedule (GPipe / 1F1B: micro-batches interleaved with sends and receives
 * between stages) replaces exactly that function and keeps everything around it.
 *
 * What the step must do, in this order:
 *   - if io->first and it accumulates: start from a zero gradient arena (an unfinished accumulation of
 *     the last epoch is dropped);
 *   - read and run the micro-batches (forward and backward, R->micro_n of them; the task's next_batch
 *     with io->step and the micro-batch's index); each backward sees the loss gradient scaled by the
 *     scaler's scale / R->grad_div; io->batches counts the batches read, io->loss / correct / rows /
 *     units / n the micro-batches' statistics;
 *   - when next_batch gives 0 rows, the epoch's data is exhausted: the statistics of the micro-batches
 *     read so far are reduced (ct_step_reduce_stats, when io->n > 0) and the step returns with
 *     io->done 0, without reducing gradients or updating;
 *   - reduce the gradients over the ranks (data parallel buckets, ZeRO's reduce-scatter or the
 *     deterministic tree) before any other collective of the step;
 *   - ct_step_reduce_stats: the statistics over the ranks and the loss check that ends the run on a
 *     non-finite or diverged loss (before the update);
 *   - with a loss scaler: unscale and the overflow check (any rank's); on overflow the update is
 *     skipped; else clipping (io->grad_norm) and the optimizer update at io->lr (ZeRO: then the
 *     parameters' allgather); then the scaler's update (io->stop: loss_scale.floor = stop says so);
 *     io->zero_grads: every gradient was exactly zero;
 *   - leave a zero gradient arena when it accumulates, set io->done 1.
 * It may read everything in ct_run; it writes only the plan's arenas, the optimizer, the scaler, the
 * ZeRO / bucket state, the profiler's events of the step ("batch", "comm", "amp", "optimizer step"),
 * R->grad_reduces, R->grad_wait_s and R->first_loss (through ct_step_reduce_stats).
 *
 * What the trainer does around it: the learning rate (io->lr from the schedule), the epoch's running
 * totals and rates, the step counter and the profiler's step boundary, the scaler's events in the
 * metrics log and the first overflow (from ct_scaler_last_events after a done step), the metrics log,
 * the step hook, checkpoints, the progress display, evaluation, the plateau schedule, early stopping
 * and the run's summary and health report. */

typedef struct ct_run ct_run;
typedef struct ct_pipe ct_pipe; /* pipeline.c */

/* One optimizer step: "in" set by the trainer, "out" by the step (zeroed before it). */
typedef struct {
    /* in */
    int64_t step;       /* optimizer steps done before this one                       */
    int64_t epoch;      /* 0-based                                                    */
    float lr;           /* the schedule's learning rate for this step                 */
    int first;          /* the epoch's first step                                     */
    /* out */
    int done;           /* 1: the step ran (updated, or skipped by the scaler); 0: the data ran out first */
    int stop;           /* the loss scaler asks the run to stop                       */
    int zero_grads;     /* the update's gradients were all exactly zero               */
    float grad_norm;    /* the global norm before clipping (clip_grad_norm > 0), else 0 */
    int64_t batches;    /* batches read (deterministic: global batches)               */
    int n;              /* micro-batches in the statistics below (deterministic, after the ranks' reduction: A) */
    double loss;        /* sum of the micro-batches' mean losses (the ranks' mean)    */
    double correct, rows;
    double units;       /* samples / real (unpadded) tokens, over the ranks           */
} ct_step_io;

typedef ct_status (*ct_step_fn)(ct_run *R, ct_step_io *io);

/* The default step (step.c): micro-batches with accumulation, the gradient reduction, the scaler,
 * clipping and the update, as described above. */
ct_status ct_step_default(ct_run *R, ct_step_io *io);
/* io's statistics over the ranks (data parallel sums, the deterministic tree's loss), then the check of
 * their mean loss: not finite, or more than divergence_factor times the run's first loss, ends the run
 * (CT_E_NONFINITE). A replacement step calls it once per step, before the update. */
ct_status ct_step_reduce_stats(ct_run *R, ct_step_io *io);
/* The end of a step after the gradients were reduced: ct_step_reduce_stats, the scaler's unscale and
 * overflow check, clipping and the update (ZeRO: the allgather), a zero gradient arena, io->done. */
ct_status ct_step_update(ct_run *R, ct_step_io *io);
/* The global index of micro-batch `micro`'s first sample (dropout's key). */
int64_t ct_step_first_sample(const ct_run *R, int micro);

/* The running totals of an epoch (since its start, or restored from a mid-epoch checkpoint). */
typedef struct {
    int64_t end;        /* the step the epoch ends at (or the run's total)            */
    int64_t b;          /* batches read                                                */
    double loss;        /* sum of the micro-batches' mean losses                       */
    int64_t correct, seen;
    double start;       /* seconds (ct_run_now_s)                                      */
    double mk_loss;     /* the totals at the last step, for the metrics log's per-step values */
    int64_t mk_correct, mk_seen;
    int first;          /* no step yet                                                 */
} ct_epoch;

struct ct_run {
    ct_context *ctx;
    const ct_recipe *r;
    const ct_train_opts *o;
    FILE *out;                  /* NULL: quiet rank */
    ct_task *task;
    ct_plan *plan;
    ct_optimizer *opt;
    ct_scaler *scaler;
    ct_schedule *sched;
    ct_metrics *mx;
    ct_tensorboard *tb;         /* tensorboard_dir (rank 0), else NULL */
    double peak_flops, micro_flops; /* for the logs' MFU: FP32 peak FLOP/s, one micro-batch's FLOPs (run_logs.c) */
    double mk_time, mk_wait;    /* the run's time and grad_wait_s at the last logged step or evaluation */
    ct_profiler *prof;
    ct_early_stop es;
    ct_train_state *st;
    ct_step_fn train_step;      /* the step (setup: ct_step_default) */
    float *best;                /* restore-best copy of params + buffers */
    int have_best;
    float *par, *buf;
    size_t n_par, n_buf;
    int accum;
    int64_t total, per_epoch, steps_per_epoch;
    double start;
    /* what went wrong quietly, reported at the end (ct_progress_health) */
    float *grads;               /* the gradient arena: n_par floats */
    uint64_t skipped0;          /* the scaler's skipped total when this run started */
    int64_t zero_grad_steps;    /* steps whose gradients were all exactly zero      */
    int64_t first_overflow_step;
    char first_overflow[64];    /* the first tensor an overflowing step named       */
    double first_loss;          /* the run's first loss (divergence_factor); <0: none yet */
    /* data parallel (docs/distributed.md) */
    ct_comm *comm;              /* data parallel's ranks (the world, or with tensor parallelism the data group);
                                   NULL: one process */
    ct_comm *world_comm;        /* every rank of the job (the caller's communicator)  */
    ct_comm_grid *grid;         /* tensor parallel (tensor_parallel > 1): the groups; else NULL */
    ct_comm *tp;                /* the tensor group (grid's), NULL without tensor parallelism */
    int tp_rank, tp_size;       /* this rank's place in it (0, 1 without)             */
    size_t *tp_copy_ranges;     /* tensor parallel: [offset, floats] of each parameter every tensor rank
                                   holds a copy of, in the gradient arena (n_tp_copy_ranges pairs) */
    int n_tp_copy_ranges;
    float *tp_copies;           /* their gradients packed for one allreduce (n_tp_copies floats) */
    size_t n_tp_copies;
    int rank, world;            /* this rank's place among data parallel's ranks      */
    int wrank;                  /* its rank in the job (the world): 0 shows the run, writes the logs */
    ct_recipe local;            /* the recipe of this rank's plan: batch_size / world  */
    int64_t grad_reduces;       /* allreduces of the gradient arena                   */
    ct_zero *zero;              /* zero_stage > 0 (zero.c); else NULL                  */
    ct_det *det;                /* deterministic: true (deterministic.c); else NULL    */
    int micro_n;                /* micro-batches per step: accum, or (deterministic) this rank's chunks */
    int grad_div;               /* the loss gradient's divisor: accum x world, or (deterministic) the chunks */
    ct_buckets *bk;             /* the gradient buckets (dp_buckets.c); NULL: one rank */
    double grad_wait_s;         /* the training thread blocked in gradient reductions */
    void *resid;                /* the ranks' compression residuals for the checkpoint being saved */
    size_t resid_size;
    /* rates: the samples / real (unpadded) tokens trained, over every rank (task batch_units) */
    double units_done, ep_units; /* this run (since it started or resumed); this epoch, in this run */
    /* the loop's position */
    int64_t step, step0, ep;
    ct_task_eval ev;            /* the last evaluation (or the checkpoint's) */
    int stopped;                /* early stopping or the loss scaler ended the run */
    int data_epochs;            /* the task's epochs come from its data (else eval intervals) */
    int quiet, tty;             /* tty: a terminal on one rank: \r progress lines */
    ct_comm_stats cs0;          /* the communicator's statistics when training started */
    ct_comm_stats tp_cs0;       /* the tensor group's                                  */
    /* pipeline parallel (pipeline.c) */
    ct_comm *pp;                /* the pipeline group (grid's), NULL without          */
    int pp_rank, pp_size;       /* this rank's stage (0, 1 without)                    */
    ct_pipe *pipe;
    ct_comm_stats pp_cs0;
    size_t *pp_skip;            /* [offset, floats] of the tied parameters whose lowest holder is another stage */
    int n_pp_skip;
    /* the checkpoint resumed from (R->st is reused by the saves) */
    int resumed;
    int64_t ck_batch, ck_ep;
    double ck_loss;
    int64_t ck_correct, ck_seen;
    int ck_stopped;
    ct_recipe fitted;           /* fit: the chosen recipe (R->r then points here; fit.c) */
};

/* ---- fit (fit.c): runs that fit memory_budget by themselves (recipe key fit) ------------------
 * ZeRO stages the candidates go up to; the memory model (cost in fit.c) handles stage 3 already. */
#define CT_FIT_MAX_ZERO_STAGE 3
typedef struct {
    ct_recipe r;        /* the run's recipe with this choice (global batch_size, accumulate_steps, ...) */
    double bytes;       /* one rank: the data in use + its plan + the model state ZeRO leaves it */
    double step_s;      /* estimated seconds per optimizer step (the cost model in fit.c) */
    int fits;           /* bytes within 90% of memory_budget */
    int tried;          /* -1 not tried; 0 its trial step ran out of memory; 1 it fit */
    double rss;         /* tried: the process's resident bytes after the trial step */
    int order;          /* its place in the enumeration (ties) */
} ct_fit_cand;
typedef struct {
    ct_fit_cand *c;
    int n, chosen;      /* chosen: index, -1 none */
    int world, mode;    /* mode: ct_fit_mode (max_batch falls back to auto when nothing fits without accumulation) */
    double base;        /* bytes in use before the plan (the task's data) */
} ct_fit_table;
/* The candidates of r (fit auto or max_batch) for `world` ranks, each a plan_only compile of task t, in the order
 * they are tried; base: the bytes already in use. */
ct_status ct_fit_table_build(ct_context *ctx, const ct_recipe *r, ct_task *t, int world, double base, ct_fit_table *ft);
void ct_fit_table_free(ct_fit_table *ft);
/* One line per candidate: its memory, its step time, fits / too big, the chosen one marked. */
void ct_fit_table_print(const ct_fit_table *ft, const ct_recipe *r, FILE *f);
/* "fit: chose ... : why" (ft->chosen >= 0). */
void ct_fit_describe(const ct_fit_table *ft, const ct_recipe *orig, char *buf, size_t len);
/* Before setup: the table, the first candidate that fits tried for real (plan, optimizer, one step), the next on
 * E60003; the chosen recipe becomes R->fitted = *R->r, the task is made again for it and R->local is its share.
 * CT_E_OOM naming the smallest candidate's need when nothing fits. */
ct_status ct_fit_apply(ct_run *R);
/* One training forward + backward and one eval forward of the task's first batch on plan p, the running
 * statistics left alone: the kernels allocate their layout buffers on first use, which no plan statistic shows
 * (the memory_budget check in trainer.c's setup and fit's trials). */
ct_status ct_run_first_use(ct_task *t, ct_plan *p);
/* The task's graph for r, compiled as a run compiles it (plan_only: sizes only); R: the run's tensor group and
 * pipeline stage, or NULL for one process (fit's candidates, ctrain eval). fit.c */
ct_status ct_task_plan(ct_context *ctx, ct_run *R, ct_task *t, const ct_recipe *r, int plan_only, ct_plan **out);

/* Tensor parallelism (tensor_parallel.c; docs/distributed.md). ct_tp_setup, before the data parallel
 * setup: the recipe's tensor_parallel against the world and the task; the grid of groups; R->comm becomes the
 * data group (everything data parallel then runs among the ranks holding the same shards). ct_tp_bind, after
 * the plan: the parameters every tensor rank holds a copy of. The step's parts: their gradients reduced
 * over the tensor group (grad_reduce_method); the step (step.c) takes the overflow / all-zero decision and
 * the clipping norm over the tensor group too (replicated copies counted once, ct_run_sumsq). No-ops without
 * tensor parallelism. */
ct_status ct_tp_setup(ct_run *R);
ct_status ct_tp_grid(ct_run *R, int T);
ct_status ct_tp_bind(ct_run *R);
ct_status ct_tp_reduce_copies(ct_run *R);
/* Sum of squares of the gradient arena's [b, e), every copy counted once (the step's clipping norm): the
 * copies every tensor rank holds on tensor rank 0 only, a pipeline's tied parameters on their lowest stage
 * only (R->pp_skip: the others'). */
double ct_run_sumsq(const ct_run *R, const float *g, size_t b, size_t e);
void ct_tp_free(ct_run *R);

/* ---- pipeline parallelism (pipeline.c, pp_schedule.c; docs/distributed.md) -------------------
 * pipeline_stages P: the model cut into P x v pieces (v = virtual_stages with the interleaved schedule, else
 * 1); pipeline rank r holds pieces r, r + P, ... as the parts of its stage plan. The world is tensor x data x
 * pipeline (ct_comm_grid); R->comm is the data group, R->pp the pipeline group. The step (ct_pp_step) replaces
 * ct_step_default: the schedule's forwards and backwards of the micro-batches, activations and gradients sent
 * between neighbouring pieces (nonblocking sends, timed receives naming the stage, micro-batch, direction and
 * peer), then the data parallel reduction, the tied parameters' gradients summed between the stages that
 * hold them, and the update with the overflow check and the clipping norm over every stage. */
enum { CT_PP_1F1B = 0, CT_PP_GPIPE = 1, CT_PP_INTERLEAVED = 2 };
typedef struct {
    uint8_t fwd;   /* 1 forward, 0 backward */
    uint8_t chunk; /* the rank's part (piece chunk x P + rank) */
    int micro;
} ct_pp_action;
/* The actions of pipeline rank r (2 x M x v of them) into out. */
int ct_pp_schedule(int kind, int P, int v, int M, int r, ct_pp_action *out);
const char *ct_pp_schedule_name(int kind);
#define CT_PP_MAX_SIM 256
typedef struct {
    int finished;               /* every rank ran every action                         */
    int time_units;             /* the makespan, a forward or a backward one unit        */
    double bubble;              /* the idle share of each rank's time in that model      */
    int slots[CT_PP_MAX_SIM];   /* per rank: the most micro-batches in flight (activations held) */
} ct_pp_sim;
/* All ranks of a schedule together (receives block, sends do not): CT_E_INTERNAL if it deadlocks. */
ct_status ct_pp_simulate(ct_context *ctx, int kind, int P, int v, int M, ct_pp_sim *out);
/* Before the task and the data parallel setup: the recipe's pipeline keys against the world and the model;
 * the grid of groups (with ct_tp_setup's tensor size). */
ct_status ct_pp_setup(ct_run *R);
/* The stage options of this rank for the task's whole graph g (cuts balanced or pipeline_split). */
ct_status ct_pp_stage_opts(ct_run *R, const ct_graph *g, ct_stage_opts *so);
/* After the plan: slots, buffers, links agreed with the neighbours, tied parameters. */
ct_status ct_pp_bind(ct_run *R);
ct_status ct_pp_step(ct_run *R, ct_step_io *io);
/* The task's evaluation through the pipeline (every stage runs it; the last stage's result to all). */
ct_status ct_pp_evaluate(ct_run *R, ct_task_eval *ev);
/* The per-stage lines of the run's header. */
void ct_pp_describe(const ct_run *R, char *buf, size_t len);
/* The run's bubble so far: idle share inside the schedules (measured), and the schedule's ideal. */
void ct_pp_bubble(const ct_run *R, double *measured, double *ideal);
/* MiB this rank sent of tied parameters' gradients so far. */
double ct_pp_tied_mib(const ct_run *R);
/* Per stage: parameters, one activation slot, slots (collective over the pipeline group; the header's). */
ct_status ct_pp_gather_memory(ct_run *R);
void ct_pp_free(ct_run *R);

/* Shared by trainer.c, step.c and progress.c; the two functions below are in run_recipe.c. */
static inline double ct_run_now_s(void) { return 1e-6 * ct_profiler_now_us(); }
/* The loss scaling the recipe asks for: loss_scale.mode, auto resolved by precision (amp/). */
ct_amp_scaling ct_run_scaling(const ct_recipe *r);
/* Floats of optimizer state per parameter (optim.h's state layout). */
int ct_run_optim_state_per_param(const ct_optim_opts *o);

/* ---- the metrics log and the TensorBoard event files (run_logs.c), rank 0 -------------------- */
/* Opens the metrics log at mpath (NULL or "": none) and the recipe's tensorboard_dir. */
ct_status ct_run_logs_open(ct_run *R, const char *mpath, const char *recipe_json);
/* After a done step: its line in both (MFU, peak memory, communication share included). */
ct_status ct_run_logs_step(ct_run *R, const ct_epoch *E, const ct_step_io *io);
/* After an evaluation: R->ev in both. */
ct_status ct_run_logs_eval(ct_run *R);
/* Closes both (also when never opened); the first error. */
ct_status ct_run_logs_close(ct_run *R);

/* ---- output (progress.c): every line the run prints ---------------------------------------- */
void ct_run_say(ct_run *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The run's header: the task, threads and kernels, data parallel / ZeRO / deterministic, lr scaling,
 * precision, the recipe (rj: its JSON) and the checkpoint resumed from. */
void ct_progress_header(ct_run *R, const char *rj);
/* After a done step: the progress line or bar (every log_every steps, or on a terminal). */
void ct_progress_step(ct_run *R, const ct_epoch *E, const ct_step_io *io);
/* The scaler asked to stop (loss_scale.floor = stop). */
void ct_progress_scaler_stop(ct_run *R);
/* The epoch's line after its evaluation (eval_s: the evaluation's seconds). */
void ct_progress_epoch(ct_run *R, const ct_epoch *E, double eval_s);
/* The "done:" line and, data parallel, the communication lines (res->comm_seconds). */
void ct_progress_summary(ct_run *R, ct_train_result *res, double seconds, const ct_mem_stats *ms);
/* After the run: skipped and all-zero-gradient steps, a non-finite last evaluation (warnings, or an
 * error when nothing was trained); n: the steps of this run. */
ct_status ct_progress_health(ct_run *R, ct_train_result *res, int64_t n);
#endif
