/* src/amp/scaler.c - dynamic/static loss scaler: fused unscale + inf/NaN
 * check over the flat gradient arena, skip-or-step, scale update with
 * growth, backoff, hysteresis and clamps, an event history naming the first
 * non-finite tensor, and a configurable outcome at min_scale. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/amp.h"

#define HISTORY 1024

struct ct_scaler {
    ct_context *ctx;
    ct_scaler_opts o;
    ct_scaler_state st;
    int stop;
    ct_scale_record hist[HISTORY];
    int hist_head, hist_n; /* ring: next slot, count */
};

void ct_scaler_opts_default(ct_scaler_opts *o) {
    memset(o, 0, sizeof *o);
    o->dynamic = 1;
    o->init_scale = 65536.0f;
    o->growth_factor = 2.0f;
    o->backoff_factor = 0.5f;
    o->growth_interval = 2000;
    o->hysteresis = 1;
    o->min_scale = 1.0f;
    o->max_scale = 16777216.0f;
    o->floor_patience = 10;
    o->floor_policy = CT_SCALER_FLOOR_ERROR;
}

static ct_status validate(ct_context *ctx, const ct_scaler_opts *o) {
    if (!(o->init_scale > 0.0f) || !isfinite(o->init_scale))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "loss scaler: init_scale %g must be finite and > 0",
                            (double)o->init_scale);
    if (!(o->min_scale > 0.0f) || !(o->max_scale >= o->min_scale) || !isfinite(o->max_scale))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "loss scaler: need 0 < min_scale (%g) <= max_scale (%g)",
                            (double)o->min_scale, (double)o->max_scale);
    if (o->init_scale < o->min_scale || o->init_scale > o->max_scale)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "loss scaler: init_scale %g is outside [min_scale %g, max_scale %g]",
                            (double)o->init_scale, (double)o->min_scale, (double)o->max_scale);
    if (!(o->growth_factor > 1.0f) || !(o->backoff_factor > 0.0f && o->backoff_factor < 1.0f))
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "loss scaler: growth_factor %g must be > 1 and backoff_factor %g in (0, 1)",
                            (double)o->growth_factor, (double)o->backoff_factor);
    if (o->growth_interval < 1 || o->hysteresis < 1 || o->floor_patience < 1)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "loss scaler: growth_interval (%d), hysteresis (%d) and floor_patience (%d) must be >= 1",
                            o->growth_interval, o->hysteresis, o->floor_patience);
    if (o->floor_policy != CT_SCALER_FLOOR_ERROR && o->floor_policy != CT_SCALER_FLOOR_STOP)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "loss scaler: unknown floor_policy %d", (int)o->floor_policy);
    return CT_OK;
}

ct_status ct_scaler_create(ct_context *ctx, const ct_scaler_opts *opts, ct_scaler **out) {
    if (!ctx || !out) return CT_E_INVALID_ARG;
    *out = NULL;
    ct_scaler_opts d;
    if (!opts) {
        ct_scaler_opts_default(&d);
        opts = &d;
    }
    CT_TRY(validate(ctx, opts));
    ct_scaler *s = calloc(1, sizeof *s);
    if (!s) return ct_set_error(ctx, CT_E_OOM, "loss scaler: out of memory");
    s->ctx = ctx;
    s->o = *opts;
    s->st.scale = opts->init_scale;
    s->st.hysteresis_left = opts->hysteresis;
    *out = s;
    return CT_OK;
}

void ct_scaler_free(ct_scaler *s) { free(s); }
float ct_scaler_scale(const ct_scaler *s) { return s->st.scale; }
int ct_scaler_should_stop(const ct_scaler *s) { return s->stop; }

/* ---- fused unscale + check ----------------------------------------------------- */

/* Scales g[0..n) by inv and returns the index of the first non-finite input
 * element, or n. Inf/NaN is tested on the bits (exponent all ones). */
static size_t unscale_chunk(float *g, size_t n, float inv) {
    uint32_t bad = 0;
    size_t i = 0;
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, &g[i], 4);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        g[i] *= inv;
    }
    if (!bad) return n;
    for (i = 0; i < n; i++)
        if (!isfinite(g[i])) return i;
    return n;
}

ct_status ct_scaler_unscale(ct_scaler *s, ct_plan *plan, int *found, int *param) {
    if (!s || !plan || !found || !param) return CT_E_INVALID_ARG;
    float *grads;
    size_t n;
    ct_plan_param_arena(plan, NULL, &grads, &n);
    float inv = 1.0f / s->st.scale;
    int nth = ct_context_num_threads(s->ctx);
    if (n < 65536) nth = 1;
    size_t chunk = ct_align_up((n + (size_t)nth - 1) / (size_t)nth, 64);
    size_t first = n;
#pragma omp parallel for num_threads(nth) schedule(static) reduction(min : first)
    for (int t = 0; t < nth; t++) {
        size_t b = (size_t)t * chunk, e = CT_MIN(n, b + chunk);
        if (b < e) {
            size_t f = unscale_chunk(grads + b, e - b, inv);
            if (f < e - b && b + f < first) first = b + f;
        }
    }
    *found = first < n;
    *param = -1;
    for (int i = 0; *found && i < ct_plan_num_params(plan); i++) {
        ct_tensor gt;
        ct_plan_param_info(plan, i, NULL, NULL, &gt);
        size_t off = (size_t)((float *)gt.data - grads);
        if (first >= off && first < off + (size_t)ct_tensor_numel(&gt)) *param = i;
    }
    return CT_OK;
}

/* ---- scale update ------------------------------------------------------------------ */

static void record(ct_scaler *s, ct_plan *plan, ct_scale_event ev, int param) {
    ct_scale_record *r = &s->hist[s->hist_head];
    r->step = s->st.step;
    r->scale = s->st.scale;
    r->event = ev;
    r->tensor[0] = 0;
    const char *name = NULL;
    if (plan && param >= 0 && ct_plan_param_info(plan, param, &name, NULL, NULL) == CT_OK && name)
        snprintf(r->tensor, sizeof r->tensor, "%s", name);
    s->hist_head = (s->hist_head + 1) % HISTORY;
    if (s->hist_n < HISTORY) s->hist_n++;
}

ct_status ct_scaler_update(ct_scaler *s, ct_plan *plan, int found, int param) {
    ct_scaler_state *st = &s->st;
    ct_status ret = CT_OK;
    if (found) {
        st->skipped++;
        st->growth_tracker = 0;
        if (!s->o.dynamic) {
            record(s, plan, CT_SCALE_SKIP, param);
        } else if (st->hysteresis_left > 1) {
            st->hysteresis_left--;
            record(s, plan, CT_SCALE_SKIP, param);
        } else if (st->scale <= s->o.min_scale) {
            st->min_hits++;
            record(s, plan, CT_SCALE_AT_MIN, param);
            if (st->min_hits >= s->o.floor_patience) {
                const char *name = "";
                if (plan && param >= 0) ct_plan_param_info(plan, param, &name, NULL, NULL);
                if (s->o.floor_policy == CT_SCALER_FLOOR_STOP) {
                    s->stop = 1;
                } else {
                    ret = ct_set_error(s->ctx, CT_E_NONFINITE,
                                       "loss scaler: gradients overflowed %d steps in a row at min_scale %g (step "
                                       "%llu, first non-finite tensor '%s'): the run is not recoverable by scaling. "
                                       "Lower the learning rate, check the data for NaN/inf, keep the layer in FP32 "
                                       "(keep_fp32), or use bf16 instead of fp16",
                                       st->min_hits, (double)s->o.min_scale, (unsigned long long)st->step, name);
                }
            }
        } else {
            st->scale = CT_MAX(st->scale * s->o.backoff_factor, s->o.min_scale);
            st->hysteresis_left = s->o.hysteresis;
            record(s, plan, CT_SCALE_BACKOFF, param);
        }
    } else {
        st->hysteresis_left = s->o.hysteresis;
        st->min_hits = 0;
        if (s->o.dynamic && ++st->growth_tracker >= s->o.growth_interval) {
            st->growth_tracker = 0;
            float next = CT_MIN(st->scale * s->o.growth_factor, s->o.max_scale);
            if (next != st->scale) {
                st->scale = next;
                record(s, plan, CT_SCALE_GROWTH, -1);
            }
        }
    }
    st->step++;
    return ret;
}

ct_status ct_scaler_step(ct_scaler *s, ct_plan *plan, ct_optimizer *opt, int *skipped) {
    if (!s || !plan || !opt) return CT_E_INVALID_ARG;
    int found, param;
    CT_TRY(ct_scaler_unscale(s, plan, &found, &param));
    if (!found) CT_TRY(ct_optimizer_step(opt));
    if (skipped) *skipped = found;
    CT_TRY(ct_scaler_update(s, plan, found, param));
    return ct_plan_set_loss_scale(plan, s->st.scale);
}

int ct_scaler_history(const ct_scaler *s, const ct_scale_record **first, int *n_first, const ct_scale_record **second,
                      int *n_second) {
    int start = (s->hist_head - s->hist_n + HISTORY) % HISTORY;
    int n1 = CT_MIN(s->hist_n, HISTORY - start);
    *first = &s->hist[start];
    *n_first = n1;
    *second = s->hist;
    *n_second = s->hist_n - n1;
    return s->hist_n;
}

void ct_scaler_get_state(const ct_scaler *s, ct_scaler_state *out) { *out = s->st; }

ct_status ct_scaler_set_state(ct_scaler *s, const ct_scaler_state *in) {
    if (!(in->scale > 0.0f) || !isfinite(in->scale) || in->hysteresis_left < 1 || in->growth_tracker < 0 ||
        in->min_hits < 0)
        return ct_set_error(s->ctx, CT_E_CORRUPT,
                            "loss scaler state is invalid (scale %g, hysteresis_left %d): the checkpoint is corrupt",
                            (double)in->scale, in->hysteresis_left);
    s->st = *in;
    s->stop = 0;
    return CT_OK;
}
