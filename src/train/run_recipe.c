/* src/train/run_recipe.c - what a recipe implies for the run, used by the
 * loop (trainer.c), the step (step.c) and the output (progress.c): the
 * learning rate scaled for the batch, the schedule, the loss scaling and the
 * optimizer state per parameter. */
#include <math.h>

#include "core/internal.h"
#include "train_internal.h"

double ct_train_scaled_lr(const ct_recipe *r) {
    double lr = r->optim.lr;
    int64_t b = r->batch_size * r->accumulate_steps, b0 = r->lr_base_batch;
    switch (r->lr_scaling) {
    case CT_LR_SCALING_LINEAR: return ct_lr_scale_for_batch(lr, b, b0, 0);
    case CT_LR_SCALING_SQRT: return ct_lr_scale_for_batch(lr, b, b0, 1);
    case CT_LR_SCALING_LINEAR_THEN_SQRT: {
        int64_t bs = r->lr_sqrt_from_batch > 0 ? r->lr_sqrt_from_batch : 8 * b0;
        if (b <= bs) return ct_lr_scale_for_batch(lr, b, b0, 0);
        return ct_lr_scale_for_batch(ct_lr_scale_for_batch(lr, bs, b0, 0), b, bs, 1);
    }
    default: return lr;
    }
}

/* ceil(epochs x spe) optimizer steps, at least 1; a product within float rounding of a whole number is that
 * number (0.2f x 5 is 1.000000015: one step, not two) */
static int64_t epoch_steps(float epochs, int64_t spe) {
    double v = (double)epochs * (double)spe, n = nearbyint(v);
    v = fabs(v - n) <= 1e-6 * (n > 1 ? n : 1) ? n : ceil(v);
    return v < 1 ? 1 : v > 1e15 ? (int64_t)1e15 : (int64_t)v;
}

/* The recipe's schedule over `total` steps (lengths left at 0 span the run
 * after warmup; "cosine" decays to min_lr at the end of the run, or over
 * cosine_epochs). */
ct_status ct_train_schedule_epochs(ct_context *ctx, const ct_recipe *r0, int64_t total, int64_t spe,
                                   ct_schedule **out) {
    ct_recipe rr = *r0, *r = &rr;
    int64_t t_max = 0;
    if (r->warmup_epochs > 0 || r->step_size_epochs > 0 || r->cosine_epochs > 0) {
        if (spe < 1)
            return ct_set_error(ctx, CT_E_CONFIG, "the recipe gives its schedule in epochs (warmup_epochs, "
                                "step_size_epochs or cosine_epochs) but the run has no steps per epoch; give them in "
                                "steps (warmup_steps, step_size) or call ct_train_schedule_epochs");
        if (r->warmup_epochs > 0) r->warmup_steps = (int)CT_MIN((int64_t)INT32_MAX, epoch_steps(r->warmup_epochs, spe));
        if (r->step_size_epochs > 0) r->step_size = epoch_steps(r->step_size_epochs, spe);
        if (r->cosine_epochs > 0) t_max = epoch_steps(r->cosine_epochs, spe);
    }
    ct_schedule_kind kind = r->schedule;
    int64_t w = r->warmup_steps, rest = total - w > 1 ? total - w : 1;
    if (kind == CT_SCHED_COSINE && total - w < 1 && !t_max) kind = CT_SCHED_CONSTANT;
    double lr = ct_train_scaled_lr(r);
    ct_schedule_opts o;
    ct_schedule_opts_default(&o, kind, lr);
    o.warmup_steps = kind == CT_SCHED_ONE_CYCLE || kind == CT_SCHED_PLATEAU ? 0 : w;
    o.warmup_start_factor = r->warmup_start_factor; /* 0: the ramp lr*(t+1)/W, in both */
    o.min_lr = r->min_lr;
    o.gamma = r->gamma;
    o.step_size = r->step_size;
    o.n_milestones = r->n_milestones;
    for (int i = 0; i < r->n_milestones && i < CT_SCHED_MAX_MILESTONES; i++) o.milestones[i] = r->milestones[i];
    o.t_max = t_max ? t_max : rest;
    o.cosine_hold = r->cosine_after == 1;
    o.t_0 = r->t_0;
    o.t_mult = r->t_mult;
    o.start_factor = 1.0;
    o.end_factor = r->end_factor;
    o.total_iters = rest;
    o.power = r->power;
    o.max_lr = lr;
    o.total_steps = total;
    o.pct_start = r->pct_start;
    o.anneal_linear = r->anneal == CT_ANNEAL_LINEAR;
    o.div_factor = r->div_factor;
    o.final_div_factor = r->final_div_factor;
    o.rsqrt_timescale = w;
    o.factor = r->plateau_factor;
    o.patience = r->plateau_patience;
    o.threshold = r->plateau_threshold;
    o.cooldown = r->plateau_cooldown;
    return ct_schedule_create(ctx, &o, out);
}

ct_status ct_train_schedule(ct_context *ctx, const ct_recipe *r, int64_t total, ct_schedule **out) {
    return ct_train_schedule_epochs(ctx, r, total, 0, out);
}

/* Floats of optimizer state per parameter (optim.h's state layout). */
int ct_run_optim_state_per_param(const ct_optim_opts *o) {
    switch (o->kind) {
    case CT_OPTIM_SGD: return o->momentum != 0;
    case CT_OPTIM_ADAM: case CT_OPTIM_ADAMW: return 2 + (o->amsgrad != 0);
    case CT_OPTIM_RMSPROP: return 1 + (o->momentum > 0) + (o->centered != 0);
    case CT_OPTIM_ADAGRAD: return 1;
    case CT_OPTIM_LAMB: return 2;
    default: return 2;
    }
}

/* The loss scaling the recipe asks for: loss_scale.mode, auto resolved by precision (amp/). */
ct_amp_scaling ct_run_scaling(const ct_recipe *r) {
    switch (r->scale_mode) {
    case CT_SCALE_AUTO: return ct_amp_default_scaling(r->precision);
    case CT_SCALE_DYNAMIC: return CT_AMP_SCALING_DYNAMIC;
    case CT_SCALE_STATIC: return CT_AMP_SCALING_STATIC;
    default: return CT_AMP_SCALING_NONE;
    }
}
