/* ctrain/optim.h - optimizers over the flat parameter/gradient arenas of a
 * plan. State (momentum, Adam moments) lives in one contiguous arena. */
#ifndef CTRAIN_OPTIM_H
#define CTRAIN_OPTIM_H

#include "graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_optim_kind { CT_OPTIM_SGD = 0, CT_OPTIM_ADAMW } ct_optim_kind;

typedef struct ct_optim_opts {
    ct_optim_kind kind;
    float lr;
    float weight_decay;   /* SGD: L2 added to the gradient; AdamW: decoupled  */
    float momentum;       /* SGD                                              */
    float dampening;      /* SGD                                              */
    int nesterov;         /* SGD                                              */
    float beta1, beta2, eps; /* AdamW                                         */
} ct_optim_opts;

/* SGD defaults: lr 0.01, no momentum; AdamW: lr 1e-3, betas (0.9, 0.999),
 * eps 1e-8, weight_decay 0.01 (PyTorch's defaults). */
void ct_optim_opts_default(ct_optim_opts *o, ct_optim_kind kind);

typedef struct ct_optimizer ct_optimizer;
ct_status ct_optimizer_create(ct_plan *plan, const ct_optim_opts *opts, ct_optimizer **out);
void ct_optimizer_free(ct_optimizer *opt); /* accepts NULL */
/* One update with learning rate lr (the schedule's value for this step). */
ct_status ct_optimizer_step(ct_optimizer *opt, float lr);
uint64_t ct_optimizer_steps(const ct_optimizer *opt);
/* Reference (plain C) update, used by tests against the fast path. */
ct_status ct_optimizer_step_ref(ct_optimizer *opt, float lr);
/* State arena (e.g. AdamW: m then v, each in the param arena's layout). */
ct_status ct_optimizer_state(ct_optimizer *opt, float **state, size_t *n);

#ifdef __cplusplus
}
#endif
#endif
