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
    float lr;
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
/* One update with learning rate lr (the schedule's value for this step).
 * Allocates nothing. */
ct_status ct_optimizer_step(ct_optimizer *opt, float lr);
uint64_t ct_optimizer_steps(const ct_optimizer *opt);
/* Reference (plain C) update, used by tests against the fast path. */
ct_status ct_optimizer_step_ref(ct_optimizer *opt, float lr);
/* State arena: consecutive blocks of n floats each (n = the param arena's
 * size, same layout as the param arena), in this order:
 *   SGD      momentum_buffer (only when momentum != 0; else no state)
 *   Adam(W)  exp_avg, exp_avg_sq, then max_exp_avg_sq when amsgrad
 *   RMSprop  square_avg, then momentum_buffer when momentum > 0, then
 *            grad_avg when centered
 *   Adagrad  sum (starts at initial_accumulator_value)
 *   LAMB     exp_avg, exp_avg_sq */
ct_status ct_optimizer_state(ct_optimizer *opt, float **state, size_t *n);

#ifdef __cplusplus
}
#endif
#endif
