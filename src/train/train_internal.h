/* src/train/train_internal.h - the built-in tasks (task_image.c, task_text.c)
 * and the trainer's data parallel parts (data_parallel.c). */
#ifndef CT_TRAIN_INTERNAL_H
#define CT_TRAIN_INTERNAL_H
#include "ctrain/ctrain.h"
#include "ctrain/train.h"
#include "ctrain/dist.h"
#include "ctrain/profile.h"

ct_status ct_task_image_create(ct_context *ctx, const ct_recipe *r, ct_task **out);
ct_status ct_task_text_create(ct_context *ctx, const ct_recipe *r, ct_task **out);

/* Data parallel over c (one rank: no-ops). Before the plan: checks the task
 * and the batch, gives the task its share (ct_task.shard) and *local = r
 * with batch_size / world; c's errors go to ctx from then on. */
ct_status ct_dp_setup(ct_context *ctx, ct_comm *c, ct_task *t, const ct_recipe *r, ct_recipe *local);
/* The ranks run the same recipe and built the same plan (CT_E_DIST naming the ranks). */
ct_status ct_dp_agree(ct_context *ctx, ct_comm *c, const ct_recipe *r, ct_plan *p, ct_task *t);
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

/* ZeRO and the deterministic mode (zero.c; docs/distributed.md). ct_zero_create
 * gives NULL for zero_stage 0 without deterministic. */
typedef struct ct_zero ct_zero;
/* The recipe's zero_stage / deterministic keys against the world and the task. */
ct_status ct_zero_check(ct_context *ctx, const ct_recipe *r, ct_task *t, int world);
ct_status ct_zero_create(ct_context *ctx, ct_comm *c, const ct_recipe *r, ct_plan *p, ct_zero **out);
/* The run's optimizer: with ZeRO the state of this rank's shard only, unless `whole` (a resume loads the whole
 * state first; ct_zero_shard then cuts it). z may be NULL (a whole optimizer). */
ct_status ct_zero_optimizer_create(ct_zero *z, ct_plan *p, const ct_optim_opts *o, int whole, ct_optimizer **out);
void ct_zero_free(ct_zero *z);
int ct_zero_stage(const ct_zero *z);         /* 0 for NULL */
int ct_zero_deterministic(const ct_zero *z); /* 0 for NULL */
int ct_zero_local_chunks(const ct_zero *z);  /* deterministic: K / world micro-batches per step; else 1 */
/* The optimizer's state becomes this rank's shard (after a resume has loaded the whole state). */
ct_status ct_zero_shard(ct_zero *z);
/* Reduce-scatter of the gradients; the arena outside this rank's segment zeroed (stage 2: released). */
ct_status ct_zero_reduce_grads(ct_zero *z);
/* After the unscale: *overflow becomes any rank's, *all_zero whether every rank's segment is all zeros. */
ct_status ct_zero_agree(ct_zero *z, int *overflow, int *all_zero);
/* Clipping by the global norm over the ranks' segments (ct_clip_grad_norm's arithmetic). */
ct_status ct_zero_clip_grad_norm(ct_zero *z, float max_norm, float *total);
/* Every rank's updated parameters to every rank. */
ct_status ct_zero_allgather_params(ct_zero *z);
/* whole 1: rank 0's optimizer gathers the whole state (for a checkpoint); whole 0: a shard again. */
ct_status ct_zero_gather_state(ct_zero *z, int whole);
/* Bytes per rank between steps: gradients resident (stage 2: the segment) and the optimizer state. */
void ct_zero_memory(const ct_zero *z, size_t n_par, size_t state_floats, double *grads_between, double *state);
/* Deterministic: after chunk `micro`'s backward (its mean loss), into the pairwise tree. */
ct_status ct_zero_det_push(ct_zero *z, int micro, double loss);
/* Deterministic: after the last chunk: the tree over the ranks; *loss the global batch's mean loss. */
ct_status ct_zero_det_reduce(ct_zero *z, double *loss);
/* Gradient buckets (dp_buckets.c): *out NULL on one rank; else planned from
 * the plan's layout and backward order with the recipe's bucket keys, and
 * fed by the plan's grad-ready hook (ct_buckets_begin arms them before the
 * last micro-batch's backward, ct_buckets_finish reduces). */
ct_status ct_dp_buckets_create(ct_context *ctx, ct_comm *c, ct_plan *p, const ct_recipe *r, ct_buckets **out);
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
#endif
