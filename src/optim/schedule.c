/* src/optim/schedule.c - learning-rate schedules (PyTorch 1.13 closed forms,
 * see include/ctrain/schedule.h), batch-size scaling and early stopping. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/schedule.h"

struct ct_schedule {
    ct_context *ctx;
    ct_schedule_opts o;
    ct_schedule_state st; /* PLATEAU */
};

static const char *const k_names[CT_SCHED_COUNT] = {
    "constant", "step", "multistep", "exponential", "cosine", "cosine_restarts",
    "linear", "polynomial", "one_cycle", "inverse_sqrt", "plateau",
};

const char *ct_schedule_kind_name(ct_schedule_kind k) {
    return (unsigned)k < CT_SCHED_COUNT ? k_names[k] : "unknown";
}

ct_status ct_schedule_kind_parse(ct_context *ctx, const char *name, ct_schedule_kind *out) {
    for (int i = 0; i < CT_SCHED_COUNT; i++)
        if (name && !strcmp(name, k_names[i])) {
            *out = (ct_schedule_kind)i;
            return CT_OK;
        }
    char list[256];
    size_t o = 0;
    for (int i = 0; i < CT_SCHED_COUNT && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? "|" : "", k_names[i]);
    return ct_set_error(ctx, CT_E_CONFIG, "schedule: '%s' is not one of %s", name ? name : "(null)", list);
}

void ct_schedule_opts_default(ct_schedule_opts *o, ct_schedule_kind kind, double base_lr) {
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->base_lr = base_lr;
    o->warmup_start_factor = 0.0; /* the ramp base_lr * (t + 1) / warmup_steps, as a recipe's default */
    o->warmup_iters = -1;
    o->step_size = 1;
    o->gamma = 0.1;
    o->t_max = 1;
    o->t_0 = 1;
    o->t_mult = 1;
    o->start_factor = 1.0 / 3.0;
    o->end_factor = 1.0;
    o->total_iters = 5;
    o->power = 1.0;
    o->max_lr = base_lr;
    o->total_steps = 1;
    o->pct_start = 0.3;
    o->div_factor = 25.0;
    o->final_div_factor = 1e4;
    o->factor = 0.1;
    o->patience = 10;
    o->threshold = 1e-4;
    o->eps = 1e-8;
}

#define BAD(field, fmt, ...) \
    ct_set_error(ctx, CT_E_INVALID_ARG, "schedule %s: " field " " fmt, k_names[o->kind], __VA_ARGS__)

static ct_status validate(ct_context *ctx, const ct_schedule_opts *o) {
    if ((unsigned)o->kind >= CT_SCHED_COUNT)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "schedule: kind %d is not a ct_schedule_kind", (int)o->kind);
    if (o->kind != CT_SCHED_ONE_CYCLE && !(isfinite(o->base_lr) && o->base_lr >= 0))
        return BAD("base_lr", "must be finite and >= 0 (got %g)", o->base_lr);
    if (o->warmup_steps < 0) return BAD("warmup_steps", "must be >= 0 (got %lld)", (long long)o->warmup_steps);
    if (o->warmup_steps > 0) {
        if (o->kind == CT_SCHED_ONE_CYCLE || o->kind == CT_SCHED_PLATEAU)
            return BAD("warmup_steps", "must be 0: %s has its own warm-up / is metric driven", k_names[o->kind]);
        if (!(o->warmup_start_factor >= 0 && o->warmup_start_factor <= 1))
            return BAD("warmup_start_factor", "must be in [0, 1] (got %g)", o->warmup_start_factor);
    }
    if (!(isfinite(o->min_lr) && o->min_lr >= 0)) return BAD("min_lr", "must be finite and >= 0 (got %g)", o->min_lr);
    switch (o->kind) {
    case CT_SCHED_CONSTANT: break;
    case CT_SCHED_STEP:
        if (o->step_size < 1) return BAD("step_size", "must be >= 1 (got %lld)", (long long)o->step_size);
        /* fallthrough */
    case CT_SCHED_EXPONENTIAL:
        if (!(o->gamma > 0 && o->gamma <= 1)) return BAD("gamma", "must be in (0, 1] (got %g)", o->gamma);
        break;
    case CT_SCHED_MULTISTEP:
        if (!(o->gamma > 0 && o->gamma <= 1)) return BAD("gamma", "must be in (0, 1] (got %g)", o->gamma);
        if (o->n_milestones < 1 || o->n_milestones > CT_SCHED_MAX_MILESTONES)
            return BAD("milestones", "needs 1..%d entries (got %d)", CT_SCHED_MAX_MILESTONES, o->n_milestones);
        for (int i = 0; i < o->n_milestones; i++)
            if (o->milestones[i] < 1 || (i && o->milestones[i] <= o->milestones[i - 1]))
                return BAD("milestones", "must be increasing and >= 1 (item %d is %lld)", i,
                           (long long)o->milestones[i]);
        break;
    case CT_SCHED_COSINE:
        if (o->t_max < 1) return BAD("t_max", "must be >= 1 (got %lld)", (long long)o->t_max);
        if (o->min_lr > o->base_lr) return BAD("min_lr", "%g is larger than base_lr %g", o->min_lr, o->base_lr);
        break;
    case CT_SCHED_COSINE_RESTARTS:
        if (o->t_0 < 1) return BAD("t_0", "must be >= 1 (got %lld)", (long long)o->t_0);
        if (o->t_mult < 1) return BAD("t_mult", "must be an integer >= 1 (got %lld)", (long long)o->t_mult);
        if (o->min_lr > o->base_lr) return BAD("min_lr", "%g is larger than base_lr %g", o->min_lr, o->base_lr);
        break;
    case CT_SCHED_LINEAR:
        if (!(o->start_factor > 0 && o->start_factor <= 1))
            return BAD("start_factor", "must be in (0, 1] (got %g)", o->start_factor);
        if (!(o->end_factor >= 0 && o->end_factor <= 1))
            return BAD("end_factor", "must be in [0, 1] (got %g)", o->end_factor);
        /* fallthrough */
    case CT_SCHED_POLYNOMIAL:
        if (o->total_iters < 1) return BAD("total_iters", "must be >= 1 (got %lld)", (long long)o->total_iters);
        if (o->kind == CT_SCHED_POLYNOMIAL && !(isfinite(o->power) && o->power >= 0))
            return BAD("power", "must be finite and >= 0 (got %g)", o->power);
        break;
    case CT_SCHED_ONE_CYCLE:
        if (!(isfinite(o->max_lr) && o->max_lr > 0)) return BAD("max_lr", "must be > 0 (got %g)", o->max_lr);
        if (o->total_steps < 1) return BAD("total_steps", "must be >= 1 (got %lld)", (long long)o->total_steps);
        if (!(o->pct_start > 0 && o->pct_start < 1)) return BAD("pct_start", "must be in (0, 1) (got %g)", o->pct_start);
        if (!(o->div_factor > 0 && isfinite(o->div_factor)))
            return BAD("div_factor", "must be > 0 (got %g)", o->div_factor);
        if (!(o->final_div_factor > 0 && isfinite(o->final_div_factor)))
            return BAD("final_div_factor", "must be > 0 (got %g)", o->final_div_factor);
        /* the two phases must have distinct end steps (PyTorch divides by their difference) */
        if (o->pct_start * (double)o->total_steps - 1 <= 0 ||
            o->pct_start * (double)o->total_steps - 1 >= (double)(o->total_steps - 1))
            return BAD("pct_start", "%g gives an empty phase with total_steps %lld", o->pct_start,
                       (long long)o->total_steps);
        break;
    case CT_SCHED_INV_SQRT:
        if (o->rsqrt_timescale < 0 || (o->rsqrt_timescale == 0 && o->warmup_steps < 1))
            return BAD("rsqrt_timescale", "must be >= 1 (or 0 with warmup_steps >= 1) (got %lld)",
                       (long long)o->rsqrt_timescale);
        break;
    case CT_SCHED_PLATEAU:
        if (!(o->factor >= 0 && o->factor < 1)) return BAD("factor", "must be in [0, 1) (got %g)", o->factor);
        if (o->patience < 0) return BAD("patience", "must be >= 0 (got %lld)", (long long)o->patience);
        if (o->cooldown < 0) return BAD("cooldown", "must be >= 0 (got %lld)", (long long)o->cooldown);
        if (!(isfinite(o->threshold) && o->threshold >= 0))
            return BAD("threshold", "must be finite and >= 0 (got %g)", o->threshold);
        if (!(isfinite(o->eps) && o->eps >= 0)) return BAD("eps", "must be finite and >= 0 (got %g)", o->eps);
        break;
    default: break;
    }
    return CT_OK;
}

static void plateau_reset(ct_schedule *s) {
    s->st.lr = s->o.base_lr;
    s->st.best = s->o.mode_max ? -INFINITY : INFINITY;
    s->st.num_bad_epochs = 0;
    s->st.cooldown_counter = 0;
    s->st.last_epoch = 0;
}

ct_status ct_schedule_create(ct_context *ctx, const ct_schedule_opts *opts, ct_schedule **out) {
    if (!opts || !out) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_schedule_create: opts and out must not be NULL");
    *out = NULL;
    CT_TRY(validate(ctx, opts));
    ct_schedule *s;
    CT_TRY(ct_alloc(ctx, sizeof *s, (void **)&s));
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->o = *opts;
    if (s->o.kind == CT_SCHED_INV_SQRT && s->o.rsqrt_timescale == 0) s->o.rsqrt_timescale = s->o.warmup_steps;
    plateau_reset(s);
    *out = s;
    return CT_OK;
}

void ct_schedule_free(ct_schedule *s) {
    if (s) ct_free(s->ctx, s);
}

/* the decay's lr at its own step t (t >= 0) */
static double decay_lr(const ct_schedule_opts *o, int64_t t) {
    const double b = o->base_lr;
    switch (o->kind) {
    case CT_SCHED_CONSTANT: return b;
    case CT_SCHED_STEP: return b * pow(o->gamma, (double)(t / o->step_size));
    case CT_SCHED_MULTISTEP: {
        int n = 0;
        while (n < o->n_milestones && o->milestones[n] <= t) n++;
        return b * pow(o->gamma, (double)n);
    }
    case CT_SCHED_EXPONENTIAL: return b * pow(o->gamma, (double)t);
    case CT_SCHED_COSINE:
        if (o->cosine_hold && t >= o->t_max) return o->min_lr;
        return o->min_lr + (b - o->min_lr) * (1.0 + cos(M_PI * (double)t / (double)o->t_max)) / 2.0;
    case CT_SCHED_COSINE_RESTARTS: {
        int64_t tcur = t, ti = o->t_0;
        if (o->t_mult == 1) tcur = t % o->t_0;
        else
            while (tcur >= ti) {
                tcur -= ti;
                ti *= o->t_mult;
            }
        return o->min_lr + (b - o->min_lr) * (1.0 + cos(M_PI * (double)tcur / (double)ti)) / 2.0;
    }
    case CT_SCHED_LINEAR: {
        double k = (double)CT_MIN(t, o->total_iters) / (double)o->total_iters;
        return b * (o->start_factor + (o->end_factor - o->start_factor) * k);
    }
    case CT_SCHED_POLYNOMIAL: {
        double k = (double)CT_MIN(t, o->total_iters) / (double)o->total_iters;
        return b * pow(1.0 - k, o->power);
    }
    case CT_SCHED_ONE_CYCLE: {
        double init = o->max_lr / o->div_factor, lo = init / o->final_div_factor;
        double e1 = o->pct_start * (double)o->total_steps - 1, e2 = (double)(o->total_steps - 1);
        double step = (double)CT_MIN(t, o->total_steps);
        double from, to, pct;
        if (step <= e1) {
            from = init, to = o->max_lr, pct = step / e1;
        } else {
            from = o->max_lr, to = lo, pct = (step - e1) / (e2 - e1);
        }
        if (o->anneal_linear) return (to - from) * pct + from;
        return to + (from - to) / 2.0 * (cos(M_PI * pct) + 1.0);
    }
    default: return b;
    }
}

double ct_schedule_lr_f64(const ct_schedule *s, int64_t t) {
    if (!s) return 0;
    const ct_schedule_opts *o = &s->o;
    if (t < 0) t = 0;
    if (o->kind == CT_SCHED_PLATEAU) return s->st.lr;
    if (o->kind == CT_SCHED_INV_SQRT) {
        if (t < o->warmup_steps) goto warm;
        double T = (double)o->rsqrt_timescale;
        return o->base_lr * sqrt(T) / sqrt(t > o->rsqrt_timescale ? (double)t : T);
    }
    if (t >= o->warmup_steps) return decay_lr(o, t - o->warmup_steps);
warm : {
    int64_t it = o->warmup_iters < 0 ? o->warmup_steps : o->warmup_iters;
    double f = o->warmup_start_factor;
    if (f == 0) { /* the ramp base_lr * (t + 1) / warmup_steps: LinearLR(1/W, total_iters = W - 1) */
        f = 1.0 / (double)o->warmup_steps;
        it = o->warmup_steps - 1;
    }
    if (it == 0) return o->base_lr;
    return o->base_lr * (f + (1.0 - f) * (double)CT_MIN(t, it) / (double)it);
}
}

float ct_schedule_lr(const ct_schedule *s, int64_t step) { return (float)ct_schedule_lr_f64(s, step); }

static int plateau_better(const ct_schedule_opts *o, double a, double best) {
    if (!o->mode_max) return o->threshold_abs ? a < best - o->threshold : a < best * (1.0 - o->threshold);
    return o->threshold_abs ? a > best + o->threshold : a > best * (o->threshold + 1.0);
}

int ct_schedule_observe(ct_schedule *s, double metric) {
    if (!s || s->o.kind != CT_SCHED_PLATEAU) return 0;
    const ct_schedule_opts *o = &s->o;
    ct_schedule_state *st = &s->st;
    st->last_epoch++;
    if (isfinite(metric) && plateau_better(o, metric, st->best)) {
        st->best = metric;
        st->num_bad_epochs = 0;
    } else {
        st->num_bad_epochs++;
    }
    if (st->cooldown_counter > 0) {
        st->cooldown_counter--;
        st->num_bad_epochs = 0;
    }
    int reduced = 0;
    if (st->num_bad_epochs > o->patience) {
        double nl = st->lr * o->factor;
        if (nl < o->min_lr) nl = o->min_lr;
        if (st->lr - nl > o->eps) {
            st->lr = nl;
            reduced = 1;
        }
        st->cooldown_counter = o->cooldown;
        st->num_bad_epochs = 0;
    }
    return reduced;
}

void ct_schedule_get_state(const ct_schedule *s, ct_schedule_state *st) {
    if (s && st) *st = s->st;
}

ct_status ct_schedule_set_state(ct_schedule *s, const ct_schedule_state *st) {
    if (!s || !st) return CT_E_INVALID_ARG;
    if (!(isfinite(st->lr) && st->lr >= 0) || isnan(st->best) || st->num_bad_epochs < 0 || st->cooldown_counter < 0 ||
        st->last_epoch < 0)
        return ct_set_error(s->ctx, CT_E_INVALID_ARG,
                            "ct_schedule_set_state: state is invalid (lr %g, best %g, num_bad_epochs %lld, "
                            "cooldown_counter %lld, last_epoch %lld)",
                            st->lr, st->best, (long long)st->num_bad_epochs, (long long)st->cooldown_counter,
                            (long long)st->last_epoch);
    s->st = *st;
    return CT_OK;
}

double ct_lr_scale_for_batch(double base_lr, int64_t batch, int64_t base_batch, int sqrt_rule) {
    if (batch <= 0 || base_batch <= 0) return base_lr;
    double r = (double)batch / (double)base_batch;
    return base_lr * (sqrt_rule ? sqrt(r) : r);
}

ct_status ct_early_stop_init(ct_context *ctx, ct_early_stop *e, int64_t patience, double min_delta, int mode_max) {
    if (!e) return ct_set_error(ctx, CT_E_INVALID_ARG, "ct_early_stop_init: e must not be NULL");
    if (patience < 0)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "early stopping: patience must be >= 0 (got %lld)",
                            (long long)patience);
    if (!(isfinite(min_delta) && min_delta >= 0))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "early stopping: min_delta must be finite and >= 0 (got %g)",
                            min_delta);
    memset(e, 0, sizeof *e);
    e->patience = patience;
    e->min_delta = min_delta;
    e->mode_max = mode_max != 0;
    e->best = e->mode_max ? -INFINITY : INFINITY;
    e->best_epoch = -1;
    return CT_OK;
}

int ct_early_stop_update(ct_early_stop *e, double metric, int *is_best) {
    int better = 0;
    if (isfinite(metric)) {
        if (e->best_epoch < 0) better = 1;
        else if (e->mode_max) better = metric > e->best + e->min_delta;
        else better = metric < e->best - e->min_delta;
    }
    if (better) {
        e->best = metric;
        e->best_epoch = e->epoch;
        e->wait = 0;
    } else {
        e->wait++;
    }
    e->epoch++;
    if (is_best) *is_best = better;
    if (e->wait >= e->patience && !better) e->stopped = 1;
    return e->stopped;
}
