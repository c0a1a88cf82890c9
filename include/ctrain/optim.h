/* ctrain/optim.h - optimizers over the flat parameter/gradient arenas of a
 * plan, exactly as PyTorch 1.13 defines them (LAMB: as in the LAMB paper /
 * NVIDIA Apex FusedLAMB). State lives in one contiguous arena. */
#ifndef CTRAIN_OPTIM_H
#define CTRAIN_OPTIM_H

#include "graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_optim_kind {
    CT_OPTIM_SGD = 0,
    CT_OPTIM_ADAMW,
    CT_OPTIM_ADAM,
    CT_OPTIM_RMSPROP,
    CT_OPTIM_ADAGRAD,
    CT_OPTIM_LAMB
} ct_optim_kind;

typedef struct ct_optim_opts {
    ct_optim_kind kind;
    float lr;             /* the optimizer's initial learning rate (see ct_optimizer_set_lr) */
    float weight_decay;   /* SGD, Adam, RMSprop, Adagrad: L2 added to the gradient;
                             AdamW: decoupled (p *= 1 - lr*wd); LAMB: added to the update */
    float momentum;       /* SGD, RMSprop                                     */
    float dampening;      /* SGD                                              */
    int nesterov;         /* SGD                                              */
    float beta1, beta2, eps; /* Adam, AdamW, LAMB (eps also RMSprop, Adagrad)  */
    /* added with Adam/RMSprop/Adagrad/LAMB (zero after memset = off) */
    int amsgrad;          /* Adam, AdamW: keep max_exp_avg_sq                 */
    float alpha;          /* RMSprop smoothing constant                       */
    int centered;         /* RMSprop                                          */
    float lr_decay;       /* Adagrad: clr = lr / (1 + (t-1) * lr_decay)       */
    float initial_accumulator_value; /* Adagrad                               */
    /* 1: parameters with ndim == 1 (biases, batchnorm/layernorm weights and
     * biases) get weight_decay 0, whatever their group says; others keep
     * theirs. The usual "no decay on biases and norm weights" rule. */
    int no_decay_bias_norm;
} ct_optim_opts;

/* PyTorch's defaults per kind:
 *   SGD      lr 0.01, no momentum, dampening 0, weight_decay 0
 *   AdamW    lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01
 *   Adam     lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0
 *   RMSprop  lr 0.01, alpha 0.99, eps 1e-8, weight_decay 0, momentum 0, not centered
 *   Adagrad  lr 0.01, lr_decay 0, weight_decay 0, initial_accumulator_value 0, eps 1e-10
 *   LAMB     lr 1e-3, betas (0.9, 0.999), eps 1e-6, weight_decay 0.01 */
void ct_optim_opts_default(ct_optim_opts *o, ct_optim_kind kind);
/* "sgd", "adamw", "adam", "rmsprop", "adagrad", "lamb". */
const char *ct_optim_kind_name(ct_optim_kind kind);
/* Parses a name as above; returns 0 when unknown. */
int ct_optim_kind_parse(const char *name, ct_optim_kind *kind);

typedef struct ct_optimizer ct_optimizer;
ct_status ct_optimizer_create(ct_plan *plan, const ct_optim_opts *opts, ct_optimizer **out);
void ct_optimizer_free(ct_optimizer *opt); /* accepts NULL */
/* Learning rate: the optimizer owns it, as PyTorch's param_groups[...]["lr"]
 * does. It starts at opts->lr; ct_optimizer_set_lr changes it (e.g. to a
 * schedule's value before each step: ct_optimizer_set_lr(opt,
 * (float)ct_schedule_lr(sched, t)); ct_optimizer_step(opt)) and
 * ct_optimizer_lr reads it. set_lr fails with CT_E_INVALID_ARG, leaving the
 * rate unchanged, unless lr is finite and >= 0. ct_optimizer_get_opts
 * reports the current rate in .lr. */
ct_status ct_optimizer_set_lr(ct_optimizer *opt, float lr);
float ct_optimizer_lr(const ct_optimizer *opt);
/* Parameter groups: every parameter whose name starts with name_prefix ("" =
 * all) gets learning rate lr * lr_scale (lr: the optimizer's current rate) in ct_optimizer_step and
 * weight_decay (a value < 0 keeps the one it has). Calls apply in order, a
 * later one overriding an earlier one for the parameters both match; the
 * no_decay_bias_norm switch is applied after all of them. Each parameter
 * starts with lr_scale 1 and opts->weight_decay. Fails with
 * CT_E_INVALID_ARG when no parameter matches (a typo) or lr_scale is not a
 * finite value >= 0. May be called between steps; allocates nothing. The
 * update then runs once per contiguous run of parameters with equal
 * hyperparameters (one run, the whole arena, when there are no groups). */
ct_status ct_optimizer_set_group(ct_optimizer *opt, const char *name_prefix, float lr_scale, float weight_decay);
/* The effective hyperparameters of parameter i (arena order). */
ct_status ct_optimizer_param_hp(const ct_optimizer *opt, int i, float *lr_scale, float *weight_decay);
/* One update with the optimizer's current learning rate (ct_optimizer_lr).
 * Allocates nothing. */
ct_status ct_optimizer_step(ct_optimizer *opt);
uint64_t ct_optimizer_steps(const ct_optimizer *opt);
/* Reference (plain C) update, used by tests against the fast path. */
ct_status ct_optimizer_step_ref(ct_optimizer *opt);
/* State arena: consecutive blocks of n floats each (n = the param arena's
 * size, same layout as the param arena; a shard's: end - begin floats, see
 * ct_optimizer_set_shard), in this order:
 *   SGD      momentum_buffer (only when momentum != 0; else no state)
 *   Adam(W)  exp_avg, exp_avg_sq, then max_exp_avg_sq when amsgrad
 *   RMSprop  square_avg, then momentum_buffer when momentum > 0, then
 *            grad_avg when centered
 *   Adagrad  sum (starts at initial_accumulator_value)
 *   LAMB     exp_avg, exp_avg_sq */
ct_status ct_optimizer_state(ct_optimizer *opt, float **state, size_t *n);

/* ZeRO (sharded optimizer state; docs/distributed.md): from now on the
 * state covers only the arena range [begin, end) (each state block above
 * holds end - begin floats instead of n) and ct_optimizer_step updates only
 * the parameters in that range (the gradients elsewhere are not read). The
 * part of the old state inside the new range is kept, the rest starts as at
 * creation; [0, n) makes the optimizer whole again (a rank gathering the
 * shards for a checkpoint). ct_optimizer_state then returns the shard's
 * state. Allocates the new state, frees the old. LAMB shards too: its
 * per-tensor trust ratio ||w|| / ||u|| needs the norms over each whole
 * tensor, which spans several ranks' shards, so a sharded LAMB needs a
 * reduce function (ct_optimizer_set_reduce) on every rank; without one its
 * step fails with CT_E_STATE (a shard of [0, n) needs none). */
ct_status ct_optimizer_set_shard(ct_optimizer *opt, size_t begin, size_t end);
/* LAMB under ZeRO: fn(user, x, n) must replace x[0..n) by its elementwise sum
 * over the ranks (an allreduce, sum, in double; every rank gets the same
 * sums) and return CT_OK; it is called by every rank's ct_optimizer_step, once
 * per LAMB step, with n = 2 x the plan's number of parameters and x[2i],
 * x[2i + 1] = the sums of w^2 and of u^2 (u: the update before the trust
 * ratio, weight decay included) over the part of parameter i inside this
 * rank's shard (0 when none is). The step then applies each parameter's
 * trust ratio sqrt(x[2i]) / sqrt(x[2i + 1]) (1 when either is 0) to the
 * shard's part. A status other than CT_OK ends the step with it (the moments
 * are already updated: the run should stop; fn sets the context's message).
 * fn NULL removes it. Without a shard, fn is called too (a sum over one rank
 * changes nothing); without a shard and fn the step is exactly the
 * whole-arena LAMB. Other optimizers never call fn. The ZeRO trainer sets it
 * to ct_comm_allreduce_f64 over its ranks. */
typedef ct_status (*ct_optim_reduce_fn)(void *user, double *x, size_t n);
ct_status ct_optimizer_set_reduce(ct_optimizer *opt, ct_optim_reduce_fn fn, void *user);
/* ct_optimizer_create with the state of [begin, end) only from the start
 * (as ct_optimizer_set_shard, without ever allocating the whole state). */
ct_status ct_optimizer_create_shard(ct_plan *plan, const ct_optim_opts *opts, size_t begin, size_t end,
                                    ct_optimizer **out);
/* The range the state covers ([0, n) unless sharded). */
void ct_optimizer_shard(const ct_optimizer *opt, size_t *begin, size_t *end);

/* ---- gradient clipping (after unscaling, before the step) -----------------
 * Per step with a loss scaler:
 *     ct_scaler_unscale(s, plan, &found, &param);
 *     if (!found) { ct_clip_grad_norm(plan, 1.0f, 2.0f, &norm); ct_optimizer_step(opt); }
 *     ct_scaler_update(s, plan, found, param);
 * With gradient accumulation: clip once, after the last micro-batch.
 *
 * ct_clip_grad_norm is torch.nn.utils.clip_grad_norm_ (1.13): the norm of
 * all gradients together (norm_type 2, INFINITY from <math.h> for the max
 * norm, or any finite p > 0); clip_coef = max_norm / (total_norm + 1e-6),
 * and every gradient is multiplied by min(clip_coef, 1) (float arithmetic,
 * as PyTorch). The sum is reduced in double precision over fixed chunks of
 * the arena added in chunk order, so the result does not depend on the
 * thread count. A non-finite total norm is returned (*total_norm inf or
 * NaN), not an error: the gradients are then multiplied by the non-finite
 * coefficient exactly as PyTorch does with error_if_nonfinite=False (NaN
 * makes them NaN; inf makes finite ones 0 and inf ones NaN), so a scaler or
 * a caller that checks isfinite(*total_norm) should skip the step.
 * total_norm may be NULL. Allocates nothing. max_norm must be >= 0 (not NaN). */
ct_status ct_clip_grad_norm(ct_plan *plan, float max_norm, float norm_type, float *total_norm);
/* The same total norm, gradients untouched (for logging). */
ct_status ct_grad_norm(ct_plan *plan, float norm_type, float *total_norm);
/* torch.nn.utils.clip_grad_value_: every gradient clamped to
 * [-clip_value, clip_value] (NaN stays NaN). clip_value must be >= 0. */
ct_status ct_clip_grad_value(ct_plan *plan, float clip_value);

/* Resuming (checkpoints): sets the number of steps taken (Adam's bias
 * correction, Adagrad's lr_decay, SGD's first step) and the plan's dropout
 * step to `steps`, so the next step continues exactly. */
ct_status ct_optimizer_set_steps(ct_optimizer *opt, uint64_t steps);
/* The options the optimizer was created with, .lr being the current rate. */
ct_status ct_optimizer_get_opts(const ct_optimizer *opt, ct_optim_opts *out);

#ifdef __cplusplus
}
#endif
#endif
