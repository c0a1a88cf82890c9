/* src/optim/optim.c - SGD (momentum, dampening, nesterov, weight decay) and
 * AdamW (decoupled weight decay, bias correction) exactly as PyTorch defines
 * them, over the plan's flat parameter/gradient arenas. State (momentum
 * buffer, or Adam's m then v) lives in one contiguous arena. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/optim.h"
#include "optim_kernels.h"

struct ct_optimizer {
    ct_context *ctx;
    ct_plan *plan;
    ct_optim_opts o;
    float *state;
    size_t n, n_state;
    uint64_t t;
};

void ct_optim_opts_default(ct_optim_opts *o, ct_optim_kind kind) {
    memset(o, 0, sizeof *o);
    o->kind = kind;
    if (kind == CT_OPTIM_ADAMW) {
        o->lr = 1e-3f;
        o->beta1 = 0.9f;
        o->beta2 = 0.999f;
        o->eps = 1e-8f;
        o->weight_decay = 0.01f;
    } else {
        o->lr = 0.01f;
    }
}

static ct_status validate(ct_context *ctx, const ct_optim_opts *o) {
    if (o->kind != CT_OPTIM_SGD && o->kind != CT_OPTIM_ADAMW)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "optimizer: unknown kind %d (sgd or adamw)", (int)o->kind);
    if (!(o->lr >= 0.0f) || !isfinite(o->lr))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "optimizer: lr %g must be a finite value >= 0", (double)o->lr);
    if (!(o->weight_decay >= 0.0f))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "optimizer: weight_decay %g must be >= 0", (double)o->weight_decay);
    if (o->kind == CT_OPTIM_SGD) {
        if (!(o->momentum >= 0.0f) || !(o->dampening >= 0.0f && o->dampening <= 1.0f))
            return ct_set_error(ctx, CT_E_INVALID_ARG, "sgd: momentum %g must be >= 0 and dampening %g in [0, 1]",
                                (double)o->momentum, (double)o->dampening);
        if (o->nesterov && (o->momentum <= 0.0f || o->dampening != 0.0f))
            return ct_set_error(ctx, CT_E_INVALID_ARG, "sgd: nesterov needs momentum > 0 and dampening 0");
    } else {
        if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f) || !(o->beta2 >= 0.0f && o->beta2 < 1.0f))
            return ct_set_error(ctx, CT_E_INVALID_ARG, "adamw: betas (%g, %g) must be in [0, 1)", (double)o->beta1,
                                (double)o->beta2);
        if (!(o->eps > 0.0f))
            return ct_set_error(ctx, CT_E_INVALID_ARG, "adamw: eps %g must be > 0", (double)o->eps);
    }
    return CT_OK;
}

ct_status ct_optimizer_create(ct_plan *plan, const ct_optim_opts *opts, ct_optimizer **out) {
    if (!plan || !opts || !out) return CT_E_INVALID_ARG;
    *out = NULL;
    ct_context *ctx = ct_plan_context(plan);
    CT_TRY(validate(ctx, opts));
    ct_optimizer *o = calloc(1, sizeof *o);
    if (!o) return ct_set_error(ctx, CT_E_OOM, "optimizer: out of memory");
    o->ctx = ctx;
    o->plan = plan;
    o->o = *opts;
    ct_plan_param_arena(plan, NULL, NULL, &o->n);
    o->n_state = opts->kind == CT_OPTIM_ADAMW ? 2 * o->n : (opts->momentum != 0.0f ? o->n : 0);
    ct_status s = ct_alloc(ctx, o->n_state * sizeof(float), (void **)&o->state);
    if (s != CT_OK) {
        free(o);
        return s;
    }
    memset(o->state, 0, o->n_state * sizeof(float));
    *out = o;
    return CT_OK;
}

void ct_optimizer_free(ct_optimizer *o) {
    if (!o) return;
    ct_free(o->ctx, o->state);
    free(o);
}

uint64_t ct_optimizer_steps(const ct_optimizer *o) { return o->t; }

ct_status ct_optimizer_state(ct_optimizer *o, float **state, size_t *n) {
    if (state) *state = o->state;
    if (n) *n = o->n_state;
    return CT_OK;
}

void ct_adamw_ref(float *p, const float *g, float *m, float *v, size_t n, const ct_adamw_hp *hp) {
    const float decay = 1.0f - hp->lr * hp->weight_decay, step = hp->lr / hp->bc1, rbc2 = 1.0f / sqrtf(hp->bc2);
    for (size_t i = 0; i < n; i++) {
        m[i] = hp->beta1 * m[i] + (1.0f - hp->beta1) * g[i];
        v[i] = hp->beta2 * v[i] + (1.0f - hp->beta2) * (g[i] * g[i]);
        float denom = sqrtf(v[i]) * rbc2 + hp->eps;
        p[i] = p[i] * decay - step * (m[i] / denom);
    }
}

void ct_sgd_ref(float *p, const float *g, float *buf, size_t n, const ct_sgd_hp *hp) {
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + hp->weight_decay * p[i];
        if (hp->momentum != 0.0f) {
            float b = hp->first ? gi : hp->momentum * buf[i] + (1.0f - hp->dampening) * gi;
            buf[i] = b;
            gi = hp->nesterov ? gi + hp->momentum * b : b;
        }
        p[i] = p[i] - hp->lr * gi;
    }
}

typedef void (*adamw_fn)(float *, const float *, float *, float *, size_t, const ct_adamw_hp *);
typedef void (*sgd_fn)(float *, const float *, float *, size_t, const ct_sgd_hp *);

static ct_status step(ct_optimizer *o, float lr, int use_ref) {
    if (!(lr >= 0.0f) || !isfinite(lr))
        return ct_set_error(o->ctx, CT_E_INVALID_ARG, "optimizer step: lr %g must be finite and >= 0", (double)lr);
    float *p, *g;
    size_t n;
    ct_plan_param_arena(o->plan, &p, &g, &n);
    ct_isa isa = use_ref ? CT_ISA_REF : ct_context_isa(o->ctx);
    int nth = ct_context_num_threads(o->ctx);
    o->t++;
    /* chunks are multiples of 64 floats so every thread's slice stays aligned */
    size_t chunk = ct_align_up((n + (size_t)nth - 1) / (size_t)nth, 64);
    if (o->o.kind == CT_OPTIM_ADAMW) {
        ct_adamw_hp hp = {lr, o->o.beta1, o->o.beta2, o->o.eps, o->o.weight_decay,
                          1.0f - powf(o->o.beta1, (float)o->t), 1.0f - powf(o->o.beta2, (float)o->t)};
        adamw_fn fn = isa >= CT_ISA_AVX512 ? ct_adamw_avx512 : isa >= CT_ISA_AVX2 ? ct_adamw_avx2 : ct_adamw_ref;
        float *m = o->state, *v = o->state + n;
#pragma omp parallel for num_threads(nth) schedule(static)
        for (int t = 0; t < nth; t++) {
            size_t b = (size_t)t * chunk, e = CT_MIN(n, b + chunk);
            if (b < e) fn(p + b, g + b, m + b, v + b, e - b, &hp);
        }
    } else {
        ct_sgd_hp hp = {lr, o->o.momentum, o->o.dampening, o->o.weight_decay, o->o.nesterov, o->t == 1};
        sgd_fn fn = isa >= CT_ISA_AVX512 ? ct_sgd_avx512 : isa >= CT_ISA_AVX2 ? ct_sgd_avx2 : ct_sgd_ref;
        float *buf = o->n_state ? o->state : NULL;
#pragma omp parallel for num_threads(nth) schedule(static)
        for (int t = 0; t < nth; t++) {
            size_t b = (size_t)t * chunk, e = CT_MIN(n, b + chunk);
            if (b < e) fn(p + b, g + b, buf ? buf + b : NULL, e - b, &hp);
        }
    }
    ct_plan_set_step(o->plan, o->t);
    return CT_OK;
}

ct_status ct_optimizer_step(ct_optimizer *o, float lr) { return step(o, lr, 0); }
ct_status ct_optimizer_step_ref(ct_optimizer *o, float lr) { return step(o, lr, 1); }
